"""``ldabeam infer``: per-document topic proportions of a trained model, as a Beam pipeline.

    shards (or raw text)  ->  DocBatch pieces  ->  E-step with the frozen state  ->  Parquet

The frozen state never enters the graph: every worker resolves the checkpoint directory once
per process through :func:`pipelines.training.beam_state.acquire` (``Shared``; the same mechanism as the
Beam trainer), and the E-step is the algorithm's own code — for online/batch VB exactly the
trainer's ``local_step`` (numba kernel, same exp(E[log β]) rows, same dtype), so

    γ_d = E-step fixed point started from γ_d⁰ ~ Gamma(100, 1/100) drawn from the key
          (seed, step, doc_id, salt)                                  (lda_core.algorithms.vb_gamma_init)

depends only on the document and the state, never on how the documents are split between
workers. With ``gamma_seed="training"`` the salt is the trainer's ("gamma"), so inferring the
documents of minibatch t+1 with the checkpoint of step t reproduces the γ the trainer computed
for them bit for bit; the default salt "infer" is the one of ``OnlineVB.infer``. Algorithms
without a VB E-step (SCVB0, samplers) use their ``infer``.

θ_d = γ_d / Σ_k γ_dk (E_q[θ_d]); documents with no known word get α / Σα.

Raw text input (``inputs`` in any vectorize text format -- files, tables, BigQuery) is read,
tokenized and mapped through the model's fixed vocabulary by the vectorize pipeline's own
transforms, with the model's recorded preprocessing
(:meth:`pipelines.ingest.tokenize.Preprocessor.from_model_dir`: ``MODEL_DIR/tokenizer.json``,
written by ``ldabeam train`` from the dataset's manifest; else the manifest of the dataset its
run log names): reproduced exactly (stop words, phrases, pattern, segmenter), refused before
the output is touched when it cannot be (a custom tokenizer not given), the defaults with a
warning when nothing was recorded. Unknown tokens are dropped and counted
(``oov_tokens_dropped``, ``unknown_token_share``) and documents with no known token are
counted (``empty_after_vocabulary``) and not written.

Output: ``OUTPUT/part-*.parquet`` with ``doc_id`` (string), ``title`` (string), ``label``
(string: the document's label -- a folder input's folder name, a record's label field -- or
null), ``theta``
(list<float32>, K), ``top_topic`` (int32), ``top_topics`` (list<struct<topic int32, weight
float32>>, the ``top_n`` largest), ``n_tokens`` (int32) [, ``gamma`` list<float64> with
``write_gamma``], and ``OUTPUT/_summary.json`` (counts, model step, vocabulary hash, the
files written), published last: readers (:func:`read_theta`) accept only a folder with its
summary and read only the files it lists. The leading ``_`` keeps the summary out of
Parquet dataset readers, so ``pyarrow.parquet.read_table(OUTPUT)`` reads the results (older
outputs named it ``summary.json``; both are read). With ``write_csv`` also
``OUTPUT/part-*.csv`` (:func:`theta_csv`).
File names are fixed by the input (shard index and piece index, or a hash of the documents'
ids for raw text), so a retried bundle rewrites the same file.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsList, AsSingleton

from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, InputError, UsageError
from lda_core.storage import output_paths
from lda_core.storage.files import files_for
from pipelines.ingest import dataset, manifest, vectorize as vz
from pipelines.ingest.tokenize import model_settings, Preprocessor, RECORD_KEYS
from pipelines.ingest.vectorize import VectorizeOptions
from pipelines.runtime import paths
from pipelines.runtime.beam_options import pipeline_options
from pipelines.runtime.model_dir import accepted_vocab, open_model
from pipelines.training import beam_state

logger = logging.getLogger(__name__)

NAMESPACE = "ldabeam.infer"
SUMMARY_FILE = output_paths.SUMMARY_FILE               # "_summary.json"
LEGACY_SUMMARY_FILE = output_paths.LEGACY_SUMMARY_FILE # "summary.json" of older outputs
GAMMA_SALTS = {"infer": "infer", "training": "gamma"}
MAX_TOP_N = 1000


def output_schema(with_gamma: bool = False) -> pa.Schema:
    fields = [
        pa.field("doc_id", pa.string()),
        pa.field("title", pa.string()),
        pa.field("label", pa.string()),
        pa.field("theta", pa.list_(pa.float32())),
        pa.field("top_topic", pa.int32()),
        pa.field("top_topics", pa.list_(pa.struct([pa.field("topic", pa.int32()),
                                                   pa.field("weight", pa.float32())]))),
        pa.field("n_tokens", pa.int32()),
    ]
    if with_gamma:
        fields.append(pa.field("gamma", pa.list_(pa.float64())))
    return pa.schema(fields)


@dataclass
class InferOptions:
    model: str                                   # model directory or one checkpoint directory
    output: str
    shards: Optional[str] = None                 # dataset dir / shard dir / glob
    inputs: List[str] = field(default_factory=list)   # raw text (vectorize formats)
    input_format: str = "auto"
    exclude: Tuple[str, ...] = ()                # globs of --input files not to read
    query: Optional[str] = None                  # raw text from a BigQuery query
    reader: Dict[str, Any] = field(default_factory=dict)   # id/text/... fields, encoding:
    #                                              None or absent = as the training data
    write_csv: bool = False                      # also OUTPUT/part-*.csv
    split: str = dataset.TRAIN_SPLIT             # split of a dataset directory
    batch_size: int = 1024                       # documents per E-step piece
    top_n: int = 3
    gamma_seed: str = "infer"                    # "infer" | "training" (see module docstring)
    write_gamma: bool = False
    overwrite: bool = False
    threads: Optional[int] = None
    unverified: bool = False                     # also read shards no manifest lists
    tokenizer: Optional[Any] = None              # Python API: the custom tokenizer of training

    def validate(self) -> None:
        if not self.model:
            raise UsageError("--model MODEL_DIR is required")
        if not self.output:
            raise UsageError("--output DIR is required")
        if bool(self.shards) == bool(self.inputs or self.query):
            raise UsageError("give exactly one of --shards SHARD_DIR or --input PATH / --query "
                             "SQL (raw text)")
        if not 1 <= self.batch_size <= 1_000_000:
            raise UsageError("batch_size=%r is outside the allowed range [1, 1000000]"
                             % self.batch_size)
        if not 1 <= self.top_n <= MAX_TOP_N:
            raise UsageError("top_n=%r is outside the allowed range [1, %d]"
                             % (self.top_n, MAX_TOP_N))
        if self.gamma_seed not in GAMMA_SALTS:
            raise UsageError("gamma_seed=%r is not allowed; choose one of %s"
                             % (self.gamma_seed, ", ".join(GAMMA_SALTS)))


# ----------------------------------------------------------------------------- model

@dataclass
class ModelRef:
    """Where the frozen state is and what it is (read on the driver, before the pipeline)."""
    state_path: str
    algorithm: str
    n_topics: int
    n_words: int
    step: int
    vocab_hash: Optional[str]
    vocab_path: Optional[str]
    model_dir: str
    opened: Any = field(default=None, repr=False, compare=False)   # the driver's OpenedModel

    def accepted_vocab(self):
        """What shards read with the model must be vectorised with (its vocabulary, or one
        it grew from: :func:`pipelines.runtime.model_dir.accepted_vocab`)."""
        if self.opened is None:
            return self.vocab_hash
        return accepted_vocab(self.opened.state, self.opened.vocab)


def resolve_model(model: str) -> ModelRef:
    """The checkpoint a model directory (its latest valid checkpoint) or a checkpoint directory
    names, with its vocabulary file (MODEL_DIR/vocab.tsv) checked against the state's hash."""
    m = open_model(model)
    st = m.state
    return ModelRef(m.path, st.algorithm, st.n_topics, st.n_words, st.step, st.vocab_hash,
                    m.vocab_path, m.model_dir, m)


# ----------------------------------------------------------------------------- E-step

def infer_gamma(algo, batch: DocBatch, gamma_seed: str = "infer") -> np.ndarray:
    """n x K variational γ (unnormalised) for VB algorithms — the trainer's local step with
    the salt of ``gamma_seed`` — or, for the others, their normalised ``infer``.

    With ``gamma_seed="infer"`` each document's random start is seeded by its content (its
    words and counts, :meth:`DocBatch.content_keys`), not its id: the same text gets the same
    θ whatever it is called and wherever it is inferred (``transform``, ``ldabeam infer``,
    ``InferTopics``, RunInference). ``"training"`` keeps the training E-step's seeding by
    document id, to reproduce the γ a training step computed."""
    if gamma_seed not in GAMMA_SALTS:
        raise UsageError("gamma_seed=%r is not allowed; choose one of %s"
                         % (gamma_seed, ", ".join(GAMMA_SALTS)))
    if algo.variational_gamma:
        seeded = batch.keyed_by_content() if gamma_seed == "infer" else batch
        return np.asarray(algo.local_step(seeded, return_gamma=True,
                                          salt=GAMMA_SALTS[gamma_seed]).gamma, np.float64)
    return np.asarray(algo.infer(batch), np.float64)       # seeded by content itself


def theta_table(batch: DocBatch, gamma: np.ndarray, top_n: int = 3,
                with_gamma: bool = False) -> pa.Table:
    """The output rows of ``batch``: θ = γ / Σγ and its ``top_n`` topics (ties: lower id)."""
    g = np.asarray(gamma, np.float64)
    theta = g / g.sum(axis=1, keepdims=True)
    n, K = theta.shape
    top_n = min(top_n, K)
    order = np.argsort(-theta, axis=1, kind="stable")[:, :top_n]
    tw = np.take_along_axis(theta, order, axis=1)
    off = pa.array(np.arange(n + 1, dtype=np.int32) * K, pa.int32())
    toff = pa.array(np.arange(n + 1, dtype=np.int32) * top_n, pa.int32())
    tops = pa.StructArray.from_arrays(
        [pa.array(order.ravel().astype(np.int32)), pa.array(tw.ravel().astype(np.float32))],
        names=["topic", "weight"])
    cols = [
        pa.array(list(batch.doc_ids), pa.string()),
        pa.array(list(batch.titles) if batch.titles is not None else [None] * n, pa.string()),
        pa.array(list(batch.labels) if batch.labels is not None else [None] * n, pa.string()),
        pa.ListArray.from_arrays(off, pa.array(theta.ravel().astype(np.float32))),
        pa.array(order[:, 0].astype(np.int32) if n else np.zeros(0, np.int32), pa.int32()),
        pa.ListArray.from_arrays(toff, tops),
        pa.array(batch.doc_lengths.astype(np.int32), pa.int32()),
    ]
    if with_gamma:
        cols.append(pa.ListArray.from_arrays(off, pa.array(g.ravel(), pa.float64())))
    return pa.Table.from_arrays(cols, schema=output_schema(with_gamma))


def theta_csv(table: pa.Table) -> bytes:
    """The rows of :func:`theta_table` as CSV (UTF-8, header): doc_id, title, label, n_tokens,
    top_topic, top_topics (``topic:weight`` separated by ``;``), theta_0 ... theta_{K-1}
    (float32 printed with 9 significant digits, enough to read back the same float32)."""
    import csv
    import io
    theta = table.column("theta").to_pylist()
    K = len(theta[0]) if theta else 0
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["doc_id", "title", "label", "n_tokens", "top_topic", "top_topics"]
               + ["theta_%d" % k for k in range(K)])
    cols = [table.column(c).to_pylist() for c in ("doc_id", "title", "label", "n_tokens",
                                                   "top_topic", "top_topics")]
    for i in range(table.num_rows):
        tops = ";".join("%d:%.9g" % (t["topic"], t["weight"]) for t in cols[5][i])
        w.writerow([cols[0][i], "" if cols[1][i] is None else cols[1][i],
                    "" if cols[2][i] is None else cols[2][i], cols[3][i],
                    cols[4][i], tops] + ["%.9g" % v for v in theta[i]])
    return buf.getvalue().encode("utf-8")


def _write_table(path: str, table: pa.Table, meta: Dict[str, str]) -> None:
    import io
    import pyarrow.parquet as pq
    table = table.replace_schema_metadata({k.encode(): v.encode() for k, v in meta.items()})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    paths.write_atomic(path, buf.getvalue())


# ----------------------------------------------------------------------------- DoFns

class _ReadPiecesFn(beam.DoFn):
    """``(shard index, path)`` -> ``(name, DocBatch)`` pieces of at most ``batch_size``."""

    def __init__(self, batch_size: int):
        self._batch_size = batch_size

    def process(self, element):
        idx, path = element
        for j, b in enumerate(dataset.iter_shard_batches([path], self._batch_size,
                                                        columns=["doc_id", "title", "label",
                                                                 "word_ids", "counts"])):
            if b.n_docs:
                yield "part-%05d-%05d" % (idx, j), b


def _rows_to_piece(rows):
    """Vectorize rows (fixed vocabulary) -> ``(name, DocBatch)``; the name hashes the ids."""
    rows = sorted(rows, key=lambda r: str(r[0]))
    h = hashlib.blake2b(digest_size=10)
    for r in rows:
        h.update(str(r[0]).encode("utf-8"))
        h.update(b"\0")
    batch = DocBatch.from_rows([(np.frombuffer(r[3], np.int32), np.frombuffer(r[4], np.int32))
                                for r in rows], doc_ids=[str(r[0]) for r in rows],
                               titles=[r[1] for r in rows], labels=[r[2] for r in rows])
    return "part-text-%s" % h.hexdigest(), batch


class _InferFn(beam.DoFn):
    """``(name, DocBatch)`` -> E-step with the frozen state -> OUTPUT/name.parquet; emits the
    piece's counts for the summary."""

    def __init__(self, ref, output: str, gamma_seed: str, top_n: int, write_gamma: bool,
                 threads: Optional[int], meta: Dict[str, str], write_csv: bool = False):
        self._ref = ref
        self._csv = write_csv
        self._output = output
        self._gamma_seed = gamma_seed
        self._top_n = top_n
        self._write_gamma = write_gamma
        self._threads = threads
        self._meta = meta
        self._docs = Metrics.counter(NAMESPACE, "documents")

    def process(self, element):
        name, batch = element
        algo = beam_state.acquire(self._ref, self._threads)
        if batch.nnz and batch.max_word_id() >= algo.n_words:
            raise InputError("word id %d is outside the model's vocabulary of %d words"
                             % (batch.max_word_id(), algo.n_words))
        gamma = infer_gamma(algo, batch, self._gamma_seed)
        table = theta_table(batch, gamma, self._top_n, self._write_gamma)
        path = paths.join(self._output, name + ".parquet")
        _write_table(path, table, self._meta)
        if self._csv:
            paths.write_atomic(paths.join(self._output, name + ".csv"),
                                       theta_csv(table))
        self._docs.inc(batch.n_docs)
        yield {"file": name + ".parquet", "documents": batch.n_docs,
               "tokens": batch.n_tokens, "empty": int(np.count_nonzero(batch.doc_lengths == 0))}


def _summary(_, pieces, stats, info, output):
    pieces = sorted(pieces, key=lambda p: p["file"])
    stats = dict(stats)
    out = dict(info)
    out.update({
        "documents": sum(p["documents"] for p in pieces),
        "tokens": sum(p["tokens"] for p in pieces),
        "empty_documents": sum(p["empty"] for p in pieces),
        "files": [p["file"] for p in pieces],
    })
    if info.get("source") == "text":
        out.update({
            "documents_read": stats.get("documents_read", 0),
            "oov_tokens_dropped": stats.get("oov_tokens_dropped", 0),
            "empty_after_vocabulary": stats.get("empty_after_pruning", 0),
            "too_short": stats.get("too_short", 0),
            "empty_text": stats.get("empty_documents", 0),
            "dead_letters": stats.get("dead_letters", 0),
            "empty_cjk_text": stats.get("empty_cjk_documents", 0),
        })
        known = out["tokens"]
        unknown = out["oov_tokens_dropped"]
        out["unknown_token_share"] = unknown / float(known + unknown) if known + unknown else 0.0
    paths.write_atomic(paths.join(output, SUMMARY_FILE),
                               (json.dumps(out, indent=2, sort_keys=True) + "\n").encode())
    return out


# ----------------------------------------------------------------------------- driver

def _prepare_output(opts: InferOptions) -> None:
    """The output rules (:mod:`lda_core.storage.output_paths`): never an input (model, shards,
    raw text), never another kind of output; ``--overwrite`` removes only what the old
    summary lists; the folder is then marked as this command's."""
    output_paths.prepare_output(opts.output, "inference", "ldabeam infer",
                                inputs=[opts.model, opts.shards] + list(opts.inputs),
                                overwrite=opts.overwrite)


def model_tokenizer(ref: ModelRef) -> Optional[dict]:
    """The tokenizer settings the model was trained with: MODEL_DIR/tokenizer.json, else the
    manifest of the dataset its run log names; None when neither is found."""
    settings, _ = model_settings(ref.model_dir)
    return settings if isinstance(settings, dict) else None


#: share of unknown tokens in raw text above which infer warns
UNKNOWN_SHARE_WARNING = 0.5


def text_preprocessor(opts: InferOptions, ref: ModelRef):
    """The model's recorded preprocessing
    (:meth:`pipelines.ingest.tokenize.Preprocessor.from_model_dir`): UsageError when it cannot
    be reproduced here (a custom tokenizer not given, a segmenter not installed); a warning
    when it was never recorded (the defaults are used)."""
    pre = Preprocessor.from_model_dir(ref.model_dir, tokenizer=opts.tokenizer)
    if not pre.known:
        logger.warning("infer: the model's tokenizer settings are unknown (%s); raw text is "
                       "tokenized with the defaults, which may not match its vocabulary (the "
                       "summary gives the share of unknown tokens)", pre.note)
    return pre


def _text_options(opts: InferOptions, ref: ModelRef):
    """VectorizeOptions for raw text: the reader settings of the model's training data
    (:func:`model_tokenizer`; the vectorize defaults when unknown), with the reader options
    given to infer on top. The tokenizer itself is :func:`text_preprocessor`'s."""
    import dataclasses
    settings = model_tokenizer(ref) or {}
    fields = {f.name for f in dataclasses.fields(VectorizeOptions)}
    kw = {k: settings[k] for k in manifest.TOKENIZER_KEYS
          if k in settings and k in fields and k not in RECORD_KEYS and k != "format"}
    kw.update({k: v for k, v in (opts.reader or {}).items() if v is not None})
    vo = VectorizeOptions(inputs=list(opts.inputs), output=opts.output,
                          format=opts.input_format, exclude=tuple(opts.exclude),
                          vocab=ref.vocab_path, query=opts.query,
                          **kw)
    return vo, bool(settings)


def build_pipeline(p, opts: InferOptions, ref: ModelRef, beam_ref) -> Any:
    info = {"tool": "ldabeam infer", "model": ref.model_dir, "checkpoint": ref.state_path,
            "algorithm": ref.algorithm, "n_topics": ref.n_topics, "step": ref.step,
            "vocab_hash": ref.vocab_hash, "gamma_seed": opts.gamma_seed, "top_n": opts.top_n,
            "csv": bool(opts.write_csv)}
    meta = {"ldabeam.checkpoint": ref.state_path, "ldabeam.step": str(ref.step),
            "ldabeam.vocab_hash": str(ref.vocab_hash)}
    stats_parts = []
    if opts.shards:
        # verified by _checked (hashes are computed once per process)
        files = manifest.open_shards(opts.shards, opts.split, unverified=opts.unverified).files
        dataset.check_vocab_hash(files, ref.accepted_vocab())
        info.update(source="shards", shards=opts.shards, n_shards=len(files))
        pieces = (p | "Shards" >> beam.Create(list(enumerate(files)))
                  | "SpreadShards" >> beam.Reshuffle()
                  | "Read" >> beam.ParDo(_ReadPiecesFn(opts.batch_size))
                  | "SpreadPieces" >> beam.Reshuffle())
    else:
        if ref.vocab_path is None:
            raise FileNotFoundError("raw text needs the model's vocabulary, but %s has no %s"
                                    % (ref.model_dir, dataset.VOCAB_FILE))
        vo, from_manifest = _text_options(opts, ref)
        vo.validate()
        inputs = vz.resolve_inputs(vo)
        if any(f in vz.BOW_FORMATS for _, f in inputs):
            raise UsageError("--input takes raw text (%s); vectorise bag-of-words files with "
                             "`ldabeam vectorize --vocab` and pass --shards"
                             % ", ".join(vz.TEXT_FORMATS))
        pre = text_preprocessor(opts, ref)
        info.update(source="text", inputs=[pth for pth, _ in inputs],
                    tokenizer_from_training_manifest=from_manifest,
                    tokenizer="recorded" if pre.known else "unknown (%s)" % pre.note,
                    phrases=len(pre.config.phrases or ()))
        cfg = pre.config
        min_tokens = {i: vo.min_tokens_for(f) for i, (_, f) in enumerate(inputs)}
        items, _dead, st = vz.read_text_items(p, vo, inputs)
        stats_parts.extend(st)
        rows, _vs, _dead2, st2 = items | "Tokenize" >> vz.TokenizeDocuments(
            cfg, min_tokens, fixed_vocab=vo.vocab, fixed_vocab_words=ref.n_words,
            paths={i: pth for i, (pth, _) in enumerate(inputs)})
        stats_parts.append(st2)
        pieces = (rows | "Batch" >> beam.BatchElements(min_batch_size=opts.batch_size,
                                                      max_batch_size=opts.batch_size)
                  | "ToPiece" >> beam.Map(_rows_to_piece))
    results = pieces | "Infer" >> beam.ParDo(_InferFn(
        beam_ref, opts.output, opts.gamma_seed, opts.top_n, opts.write_gamma, opts.threads,
        meta, opts.write_csv))
    if stats_parts:
        stats = (tuple(stats_parts) | "AllStats" >> beam.Flatten()
                 | "SumStats" >> beam.CombinePerKey(sum) | "StatsDict" >> beam.combiners.ToDict())
    else:
        stats = p | "NoStats" >> beam.Create([{}])
    return (p | "Start" >> beam.Create([None])
            | "Summary" >> beam.Map(_summary, AsList(results), AsSingleton(stats), info,
                                    opts.output))


def _checked(opts: InferOptions):
    """Every check that can fail before Beam (model, vocabulary hashes, inputs, output);
    prepares the output. Returns (ModelRef, StateRef)."""
    opts.validate()
    ref = resolve_model(opts.model)
    if opts.shards:   # fail now, before creating the output; verified against the manifest
        dataset.check_vocab_hash(manifest.open_shards(opts.shards, opts.split,
                                                     unverified=opts.unverified).files,
                                 ref.accepted_vocab())
    else:             # a recorded preprocessing that cannot be reproduced: refuse now
        Preprocessor.from_model_dir(ref.model_dir, tokenizer=opts.tokenizer)
    _prepare_output(opts)
    beam_ref = beam_state.StateRef(key="infer:%s:%d" % (ref.state_path, ref.step),
                                   path=ref.state_path, position=ref.step)
    logger.info("infer: %s (step %d, K=%d) on %s -> %s", ref.algorithm, ref.step, ref.n_topics,
                opts.shards or ", ".join(opts.inputs + ([opts.query] if opts.query else [])),
                opts.output)
    return ref, beam_ref


def infer(opts: InferOptions, beam_argv: Sequence[str] = ()) -> Dict[str, Any]:
    """Run the inference pipeline to completion; returns the summary (also OUTPUT/summary.json).
    Every check that can fail (model, vocabulary hashes, inputs, output) runs before Beam."""
    ref, beam_ref = _checked(opts)
    options = pipeline_options(beam_argv)
    pinned = _pin_in_process(ref, beam_ref, options)
    try:
        with beam.Pipeline(options=options) as p:
            build_pipeline(p, opts, ref, beam_ref)
    finally:
        if pinned:
            beam_state.drop_local(beam_ref.key)
    return read_summary(opts.output)


def _pin_in_process(ref: ModelRef, beam_ref, options) -> bool:
    """On an in-process runner the workers get the checkpoint the driver loaded, in memory,
    instead of re-reading it: a trainer pruning checkpoints (``--keep-checkpoints``) can
    remove it from the model directory while infer runs. True when it was handed over."""
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
    runner = str(options.view_as(StandardOptions).runner or "")
    mode = options.view_as(DirectOptions).direct_running_mode
    if ref.opened is None or runner not in ("DirectRunner", "FnApiRunner") \
            or mode != "in_memory":
        return False
    beam_state.put_local(beam_ref.key, ref.opened.algorithm())
    return True


def submit(opts: InferOptions, beam_argv: Sequence[str] = ()):
    """``--detach``: the same checks and pipeline as :func:`infer`, submitted without waiting;
    returns the ``PipelineResult``. The pipeline writes OUTPUT/summary.json in its last step,
    so the summary appearing means the job has finished (the DirectRunner returns from
    ``run()`` only when the job is done: :mod:`pipelines.training.detached`)."""
    ref, beam_ref = _checked(opts)
    p = beam.Pipeline(options=pipeline_options(beam_argv))
    # graph-time checks (shards, raw-text inputs) run here, before the job is submitted
    build_pipeline(p, opts, ref, beam_ref)
    return p.run()


def read_summary(output: str) -> Dict[str, Any]:
    """The published summary of a finished inference job (``_summary.json``, or the
    ``summary.json`` of older outputs); DataIntegrityError naming the folder when there is
    none (a job still running, or killed before it published)."""
    path = output_paths.summary_path(output, files_for(output))
    if path is None:
        raise DataIntegrityError(
            "%s holds no published inference results (no %s): the `ldabeam infer` writing it "
            "is still running or was stopped before the end; wait for it, or re-run it with "
            "--overwrite" % (output, SUMMARY_FILE))
    with paths.open_read(path) as f:
        return json.loads(f.read().decode("utf-8"))


def read_theta(output: str):
    """All rows of a finished :func:`infer` as one Arrow table, sorted by doc_id: only the
    files its summary lists, all of them, with as many rows as it counts."""
    import pyarrow.parquet as pq
    s = read_summary(output)
    names = s.get("files") or []
    tables = []
    for f in names:
        path = paths.join(output, f)
        if not paths.exists(path):
            raise DataIntegrityError("%s lists %s but it is missing; re-run `ldabeam infer "
                                     "--overwrite`" % (output, f))
        with paths.open_read(path) as fh:
            tables.append(pq.read_table(fh))
    if not tables:
        raise DataIntegrityError("no inference results in %s (its summary lists no file)"
                                 % output)
    t = pa.concat_tables(tables)
    if t.num_rows != s.get("documents"):
        raise DataIntegrityError("%s: the listed files hold %d rows but the summary counts %s; "
                                 "re-run `ldabeam infer --overwrite`"
                                 % (output, t.num_rows, s.get("documents")))
    idx = np.argsort(np.asarray(t.column("doc_id").to_pylist(), dtype=object), kind="stable")
    return t.take(pa.array(idx))


__all__ = ["InferOptions", "infer", "submit", "read_summary", "infer_gamma", "theta_table", "resolve_model",
           "read_theta", "output_schema"]
