"""ldabeam in a user's own Beam pipeline: composite transforms over plain PCollections.

* :class:`Vectorize` -- ``str`` or ``dict`` records -> count rows ``{"doc_id", "word_ids",
  "counts", "n_tokens"}`` (the columns of a shard), with the vocabulary record as a second
  output; the vocabulary is built from the PCollection with ``ldabeam vectorize``'s pruning, or
  taken from a model (``model=``) with the model's preprocessing.
* :class:`LdaModelHandler` -- the model as a RunInference ``ModelHandler``: examples are raw
  texts, token lists, records or count rows; a prediction is ``PredictionResult(example, θ,
  model_id)``. RunInference batches the examples (``BatchElements``) and loads the model once
  per process through Beam's shared-model mechanism (``load_model``); with ``watch=SECONDS``
  it switches to each checkpoint ``ldabeam train`` / ``ldabeam stream`` publishes
  (:class:`WatchedModel`: on every runner, the DirectRunner included), and with a
  model-metadata side input (:class:`WatchCheckpoints`: the latest checkpoint once per fixed
  window, the documents windowed alike; on every runner too).
* :class:`InferTopics` -- ``str``, ``dict`` or count rows -> θ records ``{"doc_id", "title",
  "label", "theta", "top_topic", "model"}``: RunInference with the handler, flattened.

There is no ``Train`` transform: training is a loop of global steps, each of which needs the
previous step's state (the E-step of minibatch t+1 reads the topics after minibatch t), so it
is a driver that runs pipelines (``ldabeam train``, ``pipelines.training.beam_train``), not a
transform one PCollection flows through. ``ldabeam stream`` is the one training job that is a
pipeline, over an unbounded source (docs/library.md, "Why there is no Train transform").
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any, Dict, Iterable, NamedTuple, Optional, Sequence

import numpy as np

import apache_beam as beam
from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference

from lda_core.errors import LdaBeamError, UsageError
from lda_core.storage.checkpoint import CheckpointStore
from ldabeam import preprocess
from ldabeam.model import load
from ldabeam.preprocess import content_id
from pipelines.ingest import dataset
from pipelines.ingest.tokenize import load_stopwords
from pipelines.ingest.vectorize import VectorizeOptions
from pipelines.ingest.vectorize_steps import ApplyVocabulary, TokenizeDocuments
from pipelines.ingest.vocabulary import BuildVocabulary
from pipelines.runtime import paths

logger = logging.getLogger(__name__)

NAMESPACE = "ldabeam"


# ----------------------------------------------------------------------------- RunInference

def checkpoint_pattern(model_dir: str) -> str:
    """The files a model directory's published checkpoints are recognised by: one
    ``state.json`` per checkpoint directory, each under a new name (``step-N``, on object
    stores ``step-N-<suffix>``), which is what ``WatchFilePattern`` needs."""
    return paths.join(model_dir.rstrip("/"), "checkpoints", "*", "state.json")


def latest_checkpoint_metadata(model_dir: str):
    """``ModelMetadata`` of the checkpoint ``LATEST`` of ``model_dir`` names now: its
    directory as ``model_id`` (what :meth:`LdaModelHandler.update_model_path` loads and
    ``PredictionResult.model_id`` names), its name (``step-000000008``) as ``model_name``
    (RunInference prefixes its metrics with it). Before the first checkpoint is published,
    an empty ``model_id``: RunInference keeps the handler's own model."""
    from apache_beam.ml.inference.base import ModelMetadata
    store = CheckpointStore(model_dir)
    name = store.pointer_name()
    if name is None:
        return ModelMetadata(model_id="", model_name="")
    return ModelMetadata(model_id=paths.join(store.root, name), model_name=name)


class LookAtLatest(beam.DoFn):
    """One look of :class:`WatchCheckpoints`: the checkpoint ``LATEST`` names when the look
    runs (:func:`latest_checkpoint_metadata`), logged (INFO when it is another than this
    worker's previous look found, DEBUG otherwise)."""

    def __init__(self, model_dir: str):
        self._model_dir = model_dir
        self._last = None

    def process(self, _tick):
        metadata = latest_checkpoint_metadata(self._model_dir)
        level = logging.DEBUG if metadata.model_id == self._last else logging.INFO
        logger.log(level, "WatchCheckpoints: the latest checkpoint of %s is %s",
                   self._model_dir, metadata.model_name or "(none yet)")
        self._last = metadata.model_id
        yield metadata


def _step_of(metadata) -> int:
    """The step of the checkpoint a ``ModelMetadata`` names (-1 for none)."""
    name = metadata.model_name or ""
    parts = name.split("-")
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else -1


class NewestCheckpoint(beam.CombineFn):
    """The ``ModelMetadata`` of the newest checkpoint (highest step) among those of a window:
    the one element per window a singleton side input needs, however many looks (or copies of
    one look) reached the window."""

    def create_accumulator(self):
        return None

    def add_input(self, acc, metadata):
        return metadata if acc is None or _step_of(metadata) > _step_of(acc) else acc

    def merge_accumulators(self, accs):
        out = None
        for a in accs:
            if a is not None:
                out = self.add_input(out, a)
        return out

    def extract_output(self, acc):
        return acc


class WatchCheckpoints(beam.PTransform):
    """The checkpoint ``LATEST`` of ``model_dir`` names, looked up every ``interval``
    seconds, as the ``model_metadata_pcoll`` of RunInference: one ``ModelMetadata``
    (:class:`LookAtLatest`) in each window of ``FixedWindows(interval)``. Applied to the
    pipeline object; looks from when the pipeline is built until ``stop_timestamp`` (seconds
    since the epoch or a Beam ``Timestamp``; None: no end).

    Beam's "slowly updating side input using windowing" pattern: RunInference reads its model
    side input as a singleton per window, so a document gets the checkpoint of the look in
    the window its own window ends in; the documents are windowed too, into
    ``FixedWindows(interval)`` (:class:`InferTopics` does it for documents in the global
    window). A singleton needs exactly one element per window on every runner, the
    DirectRunner included, which keeps every element a side input's window received (a
    global-window side input, as Beam's ``WatchFilePattern`` gives, holds every checkpoint
    reported so far there: RunInference failed with "PCollection of size 2 ... accessed as a
    singleton view"): the looks fall in the middle of their windows, and the newest of a
    window's elements is kept (:class:`NewestCheckpoint`; the DirectRunner may hand a side
    input the same look more than once). A document in a window without a look (before the
    first, after ``stop_timestamp``) gets the handler's own model.

    On the Python DirectRunner the side input is computed before the documents are read (all
    looks, up to ``stop_timestamp``, which a pipeline on it needs), then each document gets
    the checkpoint of its window's look: what a streaming runner gives as the looks and the
    documents arrive together."""

    def __init__(self, model_dir: str, interval: float = 60, stop_timestamp=None):
        super().__init__()
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or \
                not interval > 0:
            raise UsageError("WatchCheckpoints(interval=%r): give the seconds between looks "
                             "at the model directory's LATEST (a number > 0)" % (interval,))
        self._model_dir = model_dir
        self._interval = float(interval)
        self._stop = stop_timestamp

    def expand(self, pbegin):
        from apache_beam.transforms import window
        from apache_beam.transforms.periodicsequence import PeriodicImpulse
        from apache_beam.utils.timestamp import MAX_TIMESTAMP
        # the first look in the middle of the window the pipeline is built in, the next one
        # interval later, in the middle of the next window: one look per window
        start = (float(np.floor(time.time() / self._interval)) + 0.5) * self._interval
        stop = MAX_TIMESTAMP if self._stop is None else self._stop
        return (pbegin
                | "Looks" >> PeriodicImpulse(start_timestamp=start, stop_timestamp=stop,
                                             fire_interval=self._interval)
                | "Latest" >> beam.ParDo(LookAtLatest(paths.model_dir_of(self._model_dir)))
                | "Windows" >> beam.WindowInto(window.FixedWindows(self._interval))
                | "OnePerWindow" >> beam.CombineGlobally(NewestCheckpoint()).without_defaults())


def _last_part(path: str) -> str:
    """A checkpoint directory's name (``step-000000008``), local path or URL."""
    return path.rstrip("/").rsplit("/", 1)[-1]


class WatchedModel:
    """What RunInference holds when :class:`LdaModelHandler` watches a model directory
    (``watch=SECONDS``): the model of the checkpoint ``LATEST`` names, replaced by the next
    one when, at most every ``interval`` seconds, ``LATEST`` names another. No side input:
    it runs on every runner, the DirectRunner included, in batch and streaming pipelines. A
    checkpoint that cannot be read yet (pruned, half-copied) keeps the current model; the next
    look tries again."""

    def __init__(self, model_dir: str, interval: float, tokenizer=None):
        # a checkpoint given: its model directory's later checkpoints are the ones to follow
        self.model_dir = paths.model_dir_of(model_dir)
        self.interval, self.tokenizer = float(interval), tokenizer
        self._lock = threading.Lock()
        self.model = load(model_dir, tokenizer=tokenizer)
        self._name = _last_part(self.model.checkpoint)
        self._looked = time.monotonic()
        logger.info("LdaModelHandler loaded %s, watching %s every %g s", self.model,
                    model_dir, self.interval)

    def current(self):
        """The model to infer with now (module docstring)."""
        if time.monotonic() - self._looked < self.interval:
            return self.model
        with self._lock:
            self._looked = time.monotonic()
            name = CheckpointStore(self.model_dir).pointer_name()
            if name is None or name == self._name:
                return self.model
            try:
                model = load(self.model_dir, tokenizer=self.tokenizer)
            except (LdaBeamError, OSError) as e:
                logger.warning("LdaModelHandler: the checkpoint %s of %s cannot be read yet "
                               "(%s); inferring with %s", name, self.model_dir, e,
                               self._name)
                return self.model
            self.model = model
            self._name = _last_part(model.checkpoint)
            logger.info("LdaModelHandler switched to %s", model)
        return self.model


class LdaModelHandler(ModelHandler):
    """RunInference's handler of an ldabeam model (module docstring).

    ``model``: a model directory (its latest checkpoint when the pipeline loads it), one
    checkpoint directory or a checkpoint's ``state.json``; local, ``gs://`` or ``s3://``.
    θ is :meth:`ldabeam.LdaModel.transform` of the batch, so it equals ``ldabeam infer``'s
    for the same documents. The batch size bounds are BatchElements' (``min_batch_size``,
    ``max_batch_size``, ...). ``tokenizer``: the custom tokenizer callable the model was
    trained with, if any (a module-level function: Beam pickles it to the workers).
    ``watch``: seconds between looks at the model directory's ``LATEST``; each checkpoint it
    names is loaded and used from the next batch on (:class:`WatchedModel`); None (default)
    keeps the model loaded first, or what a model-metadata side input names."""

    def __init__(self, model: str, *, tokenizer=None, min_batch_size: Optional[int] = None,
                 max_batch_size: Optional[int] = 256, watch: Optional[float] = None,
                 **kwargs):
        if not isinstance(model, str) or not model:
            raise UsageError("LdaModelHandler needs the path of a model directory or "
                             "checkpoint, got %r" % (model,))
        if watch is not None and (isinstance(watch, bool) or not isinstance(watch, (int, float))
                                  or not watch >= 0):
            raise UsageError("LdaModelHandler(watch=%r): give the seconds between looks at the "
                             "model directory's LATEST (a number >= 0), or None" % (watch,))
        super().__init__(min_batch_size=min_batch_size, max_batch_size=max_batch_size,
                         **kwargs)
        self._model_uri = model
        self._tokenizer = tokenizer
        self._watch = watch

    @property
    def model_uri(self) -> str:
        return self._model_uri

    def load_model(self):
        if self._watch is not None:
            return WatchedModel(self._model_uri, self._watch, self._tokenizer)
        model = load(self._model_uri, tokenizer=self._tokenizer)
        logger.info("LdaModelHandler loaded %s", model)
        return model

    def run_inference(self, batch: Sequence[Any], model, inference_args=None
                      ) -> Iterable[PredictionResult]:
        if isinstance(model, WatchedModel):
            model = model.current()
        theta = model.transform(list(batch))
        return [PredictionResult(x, theta[i], model.checkpoint) for i, x in enumerate(batch)]

    def update_model_path(self, model_path: Optional[str] = None):
        if model_path:
            self._model_uri = model_path

    def get_metrics_namespace(self) -> str:
        return NAMESPACE

    def get_num_bytes(self, batch: Sequence[Any]) -> int:
        return sum(len(x) if isinstance(x, str) else len(repr(x)) for x in batch)


def theta_record(result: PredictionResult, id_field: str = "id", text_field: str = "text",
                 title_field: str = "title", label_field: str = "label") -> Dict[str, Any]:
    """``{"doc_id", "title", "label", "theta" (list of K floats), "top_topic", "model"}`` of a
    prediction; the id is the record's id field (``doc_id`` for count rows) or the content
    hash :meth:`ldabeam.LdaModel.transform` keys a document without id by; the title and
    label are the record's (count rows: their ``title`` / ``label``), None when it has none."""
    prep = preprocess.Preprocessing({"id_field": id_field, "text_field": text_field})
    ids, _ = preprocess.split_records([result.example], prep)
    theta = np.asarray(result.inference, np.float64)
    ex = result.example if isinstance(result.example, dict) else {}
    counted = "word_ids" in ex and "counts" in ex

    def field(name: str, own: str):
        v = ex.get(own if counted else name)
        return None if v is None else str(v)
    return {"doc_id": ids[0], "title": field(title_field, "title"),
            "label": field(label_field, "label"), "theta": theta.tolist(),
            "top_topic": int(np.argmax(theta)), "model": result.model_id}


def _global(pcoll) -> bool:
    from apache_beam.transforms.window import GlobalWindows
    return isinstance(pcoll.windowing.windowfn, GlobalWindows)


class InferTopics(beam.PTransform):
    """``str`` / ``dict`` records / count rows -> θ records (:func:`theta_record`), through
    ``RunInference(LdaModelHandler(model))``; ``model_metadata`` (e.g.
    :class:`WatchCheckpoints`) switches the model as in RunInference (documents in the global
    window are put in the metadata's windows first). ``id_field`` /
    ``text_field`` / ``title_field`` / ``label_field`` name the fields of dict records (the
    defaults of ``ldabeam vectorize``); the title and label travel to the θ record."""

    def __init__(self, model: str, *, model_metadata=None, max_batch_size: int = 256,
                 id_field: str = "id", text_field: str = "text", title_field: str = "title",
                 label_field: str = "label", tokenizer=None):
        super().__init__()
        self._handler = LdaModelHandler(model, tokenizer=tokenizer,
                                        max_batch_size=max_batch_size)
        self._metadata = model_metadata
        self._fields = (id_field, text_field, title_field, label_field)

    def expand(self, docs):
        kw = {} if self._metadata is None else {"model_metadata_pcoll": self._metadata}
        if self._metadata is not None and _global(docs) and not _global(self._metadata):
            # a document in the global window would map onto the model windows' last one
            # (none): it gets the model of the look in the window of its timestamp instead
            docs = docs | "ModelWindows" >> beam.WindowInto(
                self._metadata.windowing.windowfn)
        return (docs | "RunInference" >> RunInference(self._handler, **kw)
                | "ThetaRecords" >> beam.Map(theta_record, *self._fields))


# ----------------------------------------------------------------------------- Vectorize

class VectorizeResult(NamedTuple):
    rows: Any              # PCollection of count rows
    vocabulary: Any        # PCollection of one vocabulary record
    dead_letters: Any      # PCollection of dead-letter dicts (documents that failed)


def _seq_of(doc_id: str) -> int:
    """A document's place in the vocabulary's first-occurrence order (gensim's id order): a
    user PCollection has no file order, so a hash of its id (below 2**39) stands for it."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"),
                                          digest_size=5).digest(), "big") >> 1


def work_item(record, id_field: str = "id", text_field: str = "text",
              title_field: Optional[str] = "title", label_field: Optional[str] = "label"):
    """A ``str`` or ``dict`` record as the vectorize tokenizer's work item ``("doc", 0, seq,
    doc_id, title, label, text)``; a record without an id gets its content hash."""
    if isinstance(record, dict):
        text = record.get(text_field)
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        doc_id = record.get(id_field)
        doc_id = content_id(text) if doc_id in (None, "") else str(doc_id)
        title = record.get(title_field) if title_field else None
        label = record.get(label_field) if label_field else None
    else:
        text = record if isinstance(record, str) else str(record)
        doc_id, title, label = content_id(text), None, None
    return ("doc", 0, _seq_of(doc_id), doc_id, None if title is None else str(title),
            None if label is None else str(label), text)


def count_row(row) -> Dict[str, Any]:
    """A vectorize row ``(doc_id, title, label, word_ids bytes, counts bytes, n_tokens)`` as a
    count row ``{"doc_id", "title", "label", "word_ids", "counts", "n_tokens"}`` (lists of
    int; title and label None when the record had none), the columns of a shard."""
    doc_id, title, label, wb, cb, n = row
    return {"doc_id": doc_id, "title": title, "label": label,
            "word_ids": np.frombuffer(wb, np.int32).tolist(),
            "counts": np.frombuffer(cb, np.int32).tolist(), "n_tokens": int(n)}


def _vocab_documents(kv):
    if kv[0] == "vocab_documents":
        yield kv[1]


# the keywords of Vectorize that build a vocabulary: ldabeam vectorize's options of the same
# names (pipelines.ingest.vectorize.VectorizeOptions)
VECTORIZE_OPTIONS = ("no_below", "no_above", "keep_n", "keep_tokens", "stopwords", "lowercase",
                     "deaccent", "min_token_len", "max_token_len", "token_pattern", "segmenter")


class Vectorize(beam.PTransform):
    """``str`` / ``dict`` records -> :class:`VectorizeResult` ``(rows, vocabulary,
    dead_letters)``, with ``ldabeam vectorize``'s tokenizer, vocabulary builder and
    vocabulary lookup.

    ``model``: a model directory -- its vocabulary and recorded preprocessing are used (the
    rows can then go to :class:`InferTopics` or ``LdaModel.transform``); else the vocabulary
    is built from the PCollection with ``options``, the keywords of ``ldabeam vectorize``'s
    vocabulary and tokenizer options (:data:`VECTORIZE_OPTIONS`: ``no_below`` / ``no_above`` /
    ``keep_n`` / ``keep_tokens`` as gensim's ``filter_extremes``, the vectorize defaults when
    not given; ``lowercase``, ``deaccent``, ``min_token_len``, ``max_token_len``,
    ``token_pattern``, ``segmenter``, ``stopwords`` as a spec: ``gensim`` or a file).
    ``min_tokens``: documents with fewer tokens are dropped (as ``--min-article-tokens``).
    ``tokenizer``: a custom tokenizer callable (text -> tokens; with ``model``, the one the
    model was trained with). The vocabulary record is ``{"tokens", "df", "cf",
    "num_docs"}``; documents with no word of the vocabulary have no row."""

    def __init__(self, model: Optional[str] = None, *, min_tokens: int = 1,
                 id_field: str = "id", text_field: str = "text", tokenizer=None, **options):
        super().__init__()
        unknown = sorted(set(options) - set(VECTORIZE_OPTIONS))
        if unknown:
            raise UsageError("Vectorize: unknown option(s) %s; the options are %s"
                             % (", ".join(unknown), ", ".join(VECTORIZE_OPTIONS)))
        if model and options:
            raise UsageError("Vectorize(model=...) uses the model's vocabulary and recorded "
                             "preprocessing; %s apply only when the vocabulary is built "
                             "(no model)" % ", ".join(sorted(options)))
        self._model = model
        self._tokenizer = tokenizer
        self._options = options
        self._min_tokens = int(min_tokens)
        self._fields = dict(id_field=id_field, text_field=text_field)

    def _model_setup(self):
        """(TokenizerConfig, vocabulary path, vocabulary) of the model."""
        m = load(self._model, tokenizer=self._tokenizer)
        m._need_vocab("Vectorize(model=...)")
        vpath = paths.join(m.model_dir, dataset.VOCAB_FILE)
        fields = {k: v for k, v in (m.preprocessing or {}).items() if k in self._fields}
        self._fields.update({k: v for k, v in fields.items() if v})
        return m._prep.tokenizer_config(), vpath, m._vocab

    def expand(self, records):
        p = records.pipeline
        if self._model:
            cfg, vpath, vocab = self._model_setup()
        else:
            vo = VectorizeOptions(inputs=["<pcollection>"], output="<none>",
                                  tokenizer=self._tokenizer, **self._options)
            vo.validate()
            cfg = vo.tokenizer_config(load_stopwords(vo.stopwords))
            vpath, vocab = None, None
        items = records | "WorkItems" >> beam.Map(work_item, self._fields["id_field"],
                                                  self._fields["text_field"])
        docs, vstats, dead, st = items | "Tokenize" >> TokenizeDocuments(
            cfg, {0: self._min_tokens}, fixed_vocab=vpath, paths={0: "<pcollection>"})
        if vocab is not None:
            rows = docs
            vocab_record = p | "ModelVocab" >> beam.Create(
                [{"tokens": vocab.tokens, "df": vocab.df.tolist(), "cf": vocab.cf.tolist(),
                  "num_docs": None}])
        else:
            num_docs = st | "VocabDocs" >> beam.FlatMap(_vocab_documents)
            vocab_record = vstats | "Vocabulary" >> BuildVocabulary(num_docs,
                                                                     vo.prune_settings())
            lists, _st2 = docs | "Apply" >> ApplyVocabulary(vocab_record)
            rows = lists | "Rows" >> beam.FlatMap(lambda rs: rs)
        return VectorizeResult(rows | "CountRows" >> beam.Map(count_row), vocab_record, dead)


__all__ = ["Vectorize", "VectorizeResult", "InferTopics", "LdaModelHandler",
           "WatchCheckpoints", "checkpoint_pattern", "theta_record", "work_item", "count_row"]
