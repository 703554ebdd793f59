"""The vectorize pipeline: raw text, Wikipedia dumps or bag-of-words files -> shards.

Stages (one composite ``PTransform`` each)::

    inputs ─ReadWorkItems─▶ page chunks / raw documents ─Reshuffle─▶ ─TokenizeDocuments─▶
        token counts ─┬─ BuildVocabulary (CombinePerKey df/cf/first, filter_extremes) ─▶ vocab
                      └─ ApplyVocabulary (vocab as a side input) ─▶ rows ─WriteShards─▶ Parquet
    dead letters ─WriteDeadLetters─▶ DIR/deadletter/deadletter.jsonl
    counts (per bundle) + shard list + vocabulary ─WriteManifest─▶ DIR/manifest.json

* A dump (or tar archive, or text file) is read sequentially by one DoFn that only cuts it
  into pages / documents; a ``Reshuffle`` then spreads the parsing, markup stripping and
  tokenizing over the workers. Documents travel in batches (``BATCH_ITEMS`` /
  ``BATCH_CHARS``) from the reader to the shard writer, each batch tokenized and counted at
  once (:func:`pipelines.tokenize.count_batch`).
* Counts for the manifest are exact: each DoFn sums its counts per bundle and emits them in
  ``finish_bundle`` as a small PCollection (a retried bundle's outputs are discarded as a
  whole), summed with ``CombinePerKey``; Beam metrics carry the same numbers for monitoring.
* Held-out split and shard assignment use a keyed hash of ``doc_id``
  (blake2b of ``"<seed>:<doc_id>"``): bits 0-63 give ``u`` in [0, 1) (held out when
  ``u < holdout_fraction``), bits 64-127 give the row order inside a shard and the shard
  index. The output does not depend on the runner, the number of workers or bundling.
* ``--vocab FILE`` skips the corpus-wide vocabulary pass: words outside it are dropped and
  counted. Bag-of-words inputs (``uci``, ``ldac``, ``mm``) keep their vocabulary and its
  order unless a pruning option is given explicitly.

The ``ldabeam vectorize`` command (:mod:`pipelines.commands.vectorize`) parses the options
and calls :func:`vectorize` / :func:`submit`.
"""
from __future__ import annotations

import collections
import hashlib
import json
import logging
import math
import os
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsDict, AsList, AsSingleton, TaggedOutput
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipelines import dataset, text_sources
from pipelines.beam_options import pipeline_options
from pipelines.tokenize import BatchCounts, TokenizerConfig, count_batch
from pipelines.vocabulary import (BuildVocabulary, PruneSettings, TokenStatsAccumulator,
                                  bow_prune, record_to_vocabulary)

logger = logging.getLogger(__name__)

NAMESPACE = "ldabeam.vectorize"
STATS = "stats"
DEAD = "dead"
VOCAB_STATS = "vocab_stats"
BOW_FORMATS = text_sources.BOW_FORMATS
TEXT_FORMATS = text_sources.TEXT_FORMATS
BIGQUERY_FORMAT = "bigquery"     # --input bq://PROJECT.DATASET.TABLE or --query
QUERY_INPUT = "bq-query"         # the input name of --query
DOCS_PER_SHARD = 20000           # automatic shard count: ceil(documents / DOCS_PER_SHARD)
MAX_SHARDS = 100000
WIKI_MIN_ARTICLE_TOKENS = 50     # gensim.corpora.wikicorpus.ARTICLE_MIN_WORDS
DEADLETTER_FILE = "deadletter.jsonl"
MAX_SNIPPET = 200
PREFLIGHT_INPUTS = 20            # inputs opened before the pipeline starts
MAX_LISTED_INPUTS = 10000        # more input files: the manifest summarises them (input_summary)
BATCH_ITEMS = 2000               # work items (documents / pages) per batch
BATCH_CHARS = 1 << 21            # ... or characters of text / page XML per batch

# A vectorised row travelling between transforms: numpy arrays as raw bytes (cheap to encode)
# (doc_id, title, label, word_ids int32 bytes, counts int32 bytes, n_tokens)
Row = Tuple[str, Optional[str], Optional[str], bytes, bytes, int]


@dataclass
class VectorizeOptions:
    """Everything that determines the output (recorded in the manifest's ``settings``)."""

    inputs: List[str]
    output: str
    format: str = "auto"
    vocab: Optional[str] = None               # fixed vocabulary (text) / BOW vocabulary file
    holdout_fraction: float = 0.0
    seed: int = 0
    num_shards: int = 0                        # 0: automatic (ceil(docs / DOCS_PER_SHARD))
    heldout_shards: int = 0
    no_below: Optional[int] = None             # None: gensim defaults (text), no pruning (BOW)
    no_above: Optional[float] = None
    keep_n: Optional[int] = -1                 # -1: default; None/0: no cap
    keep_tokens: Tuple[str, ...] = ()
    stopwords: Optional[str] = None
    lowercase: bool = True
    deaccent: bool = True
    min_token_len: int = 2
    max_token_len: int = 15
    min_article_tokens: Optional[int] = None   # None: 50 for wiki dumps (gensim), else 1
    encoding: str = "utf-8"
    encoding_errors: str = "replace"          # replaced characters are counted in the manifest
    id_field: str = "id"
    text_field: str = "text"
    label_field: Optional[str] = "label"
    title_field: Optional[str] = "title"
    strip_headers: bool = False
    query: Optional[str] = None                # BigQuery standard SQL, read as one input
    overwrite: bool = False
    reshuffle: bool = True

    def validate(self) -> None:
        if not self.output:
            raise ValueError("--output is required: the dataset directory to write")
        if not self.inputs and not self.query:
            raise ValueError("no --input given")
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError("holdout_fraction must be in [0, 1), got %r" % self.holdout_fraction)
        for name in ("num_shards", "heldout_shards"):
            v = getattr(self, name)
            if not 0 <= v <= MAX_SHARDS:
                raise ValueError("%s must be in [0, %d] (0: automatic), got %r"
                                 % (name, MAX_SHARDS, v))
        if self.min_article_tokens is not None and self.min_article_tokens < 0:
            raise ValueError("min_article_tokens must be >= 0, got %r" % self.min_article_tokens)
        if self.encoding_errors not in ("strict", "replace", "ignore"):
            raise ValueError("encoding_errors must be strict, replace or ignore, got %r"
                             % self.encoding_errors)
        import codecs
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise ValueError("unknown encoding %r" % self.encoding)
        self.tokenizer_config().validate()

    def pruning_requested(self) -> bool:
        return (self.no_below is not None or self.no_above is not None or self.keep_n != -1
                or bool(self.keep_tokens))

    def prune_settings(self) -> PruneSettings:
        d = PruneSettings()
        keep_n = d.keep_n if self.keep_n == -1 else (self.keep_n or None)
        s = PruneSettings(no_below=d.no_below if self.no_below is None else self.no_below,
                          no_above=d.no_above if self.no_above is None else self.no_above,
                          keep_n=keep_n, keep_tokens=tuple(self.keep_tokens))
        s.validate()
        return s

    def tokenizer_config(self, stopwords: frozenset = frozenset()) -> TokenizerConfig:
        return TokenizerConfig(lowercase=self.lowercase, deaccent=self.deaccent,
                               min_len=self.min_token_len, max_len=self.max_token_len,
                               stopwords=stopwords)

    def reader_options(self) -> dict:
        return dict(encoding=self.encoding, encoding_errors=self.encoding_errors,
                    id_field=self.id_field, text_field=self.text_field,
                    label_field=self.label_field, title_field=self.title_field,
                    strip_headers=self.strip_headers)

    def min_tokens_for(self, fmt: str) -> int:
        if self.min_article_tokens is not None:
            return self.min_article_tokens
        return WIKI_MIN_ARTICLE_TOKENS if fmt == "wiki" else 1


# ----------------------------------------------------------------------------- pure helpers

def doc_hash(doc_id: str, seed: int = 0) -> Tuple[float, int]:
    """``(u, order)`` for a document: ``u`` uniform in [0, 1) decides the held-out split,
    ``order`` (64-bit) the shard and the row order. Stable across runs, runners, platforms."""
    d = hashlib.blake2b(("%d:%s" % (seed, doc_id)).encode("utf-8"), digest_size=16).digest()
    u = int.from_bytes(d[:8], "big") / 2.0 ** 64
    return u, int.from_bytes(d[8:], "big")


def split_of(doc_id: str, holdout_fraction: float, seed: int = 0) -> str:
    u, _ = doc_hash(doc_id, seed)
    return dataset.HELDOUT_SPLIT if u < holdout_fraction else dataset.TRAIN_SPLIT


def auto_num_shards(n_docs: int, requested: int = 0) -> int:
    if requested:
        return int(requested)
    return max(1, min(MAX_SHARDS, int(math.ceil(n_docs / float(DOCS_PER_SHARD)))))


def arrays_to_row(doc_id, title, label, word_ids: np.ndarray, counts: np.ndarray) -> Row:
    w = np.ascontiguousarray(word_ids, np.int32)
    c = np.ascontiguousarray(counts, np.int32)
    return (doc_id, title, label, w.tobytes(), c.tobytes(), int(c.sum()))


def rows_to_table(rows: Sequence[Row]):
    """Shard rows (already in output order) to an Arrow table with the shard schema."""
    import pyarrow as pa
    n = len(rows)
    lens = np.fromiter((len(r[3]) // 4 for r in rows), np.int64, count=n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    wid = np.frombuffer(b"".join(r[3] for r in rows), np.int32)
    cnt = np.frombuffer(b"".join(r[4] for r in rows), np.int32)
    off = pa.array(offsets, pa.int32())
    return pa.Table.from_arrays([
        pa.array([r[0] for r in rows], pa.string()),
        pa.array([r[1] for r in rows], pa.string()),
        pa.array([r[2] for r in rows], pa.string()),
        pa.ListArray.from_arrays(off, pa.array(wid, pa.int32())),
        pa.ListArray.from_arrays(off, pa.array(cnt, pa.int32())),
        pa.array([r[5] for r in rows], pa.int32()),
    ], schema=dataset.SHARD_SCHEMA)


def _deadletter_dict(dl) -> dict:
    d = dl.to_json() if hasattr(dl, "to_json") else dict(dl)
    d = {k: d.get(k) for k in ("source", "position", "error", "snippet")}
    if d.get("snippet"):
        d["snippet"] = d["snippet"][:MAX_SNIPPET]
    return d


_GLOBAL_WINDOWS = (GlobalWindow(),)


def _windowed(value):
    """A value in the global window, for outputs of ``finish_bundle`` (built directly: the
    ``GlobalWindows.windowed_value`` helper re-parses a timestamp proto on every call)."""
    return WindowedValue(value, MIN_TIMESTAMP, _GLOBAL_WINDOWS)


# ----------------------------------------------------------------------------- DoFns

class _CountingDoFn(beam.DoFn):
    """Counts per bundle, emitted in ``finish_bundle`` on the ``stats`` output (exact, for the
    manifest) and as Beam metrics (for monitoring)."""

    def start_bundle(self):
        self._counts = collections.Counter()

    def _count(self, name: str, n: int = 1) -> None:
        self._counts[name] += n

    def finish_bundle(self):
        for k in sorted(self._counts):
            v = self._counts[k]
            if v:
                Metrics.counter(NAMESPACE, k).inc(v)
                yield TaggedOutput(STATS, _windowed((k, int(v))))
        self._counts = collections.Counter()


class _ReadWorkItemsFn(_CountingDoFn):
    """``(input index, path, format)`` -> batches of work items, read sequentially from one
    input.

    Work items: ``("page", input, seq, source, position, xml)`` for a dump page, or
    ``("doc", input, seq, doc_id, title, label, text)`` for a text document. ``seq`` numbers
    items in file order (it fixes gensim's id order for tokens first seen in a document).
    Items travel as ``("batch", [item, ...])`` of consecutive items of one input (at most
    ``BATCH_ITEMS`` items or ``BATCH_CHARS`` characters), so the per-element cost of the
    runner is paid per batch, not per document.
    """

    def __init__(self, reader_options: dict):
        self._reader_options = reader_options

    def process(self, element):
        batch, size = [], 0
        for out in self._items(element):
            if isinstance(out, TaggedOutput):
                yield out
                continue
            batch.append(out)
            size += len(out[-1])
            if len(batch) >= BATCH_ITEMS or size >= BATCH_CHARS:
                yield ("batch", batch)
                batch, size = [], 0
        if batch:
            yield ("batch", batch)

    def _items(self, element):
        from pipelines import text_sources as ts
        idx, path, fmt = element
        seq = 0
        try:
            if fmt == "wiki":
                for item in ts.iter_wiki_page_chunks(path):
                    if isinstance(item, ts.DeadLetter):
                        self._count("dead_letters")
                        yield TaggedOutput(DEAD, _deadletter_dict(item))
                        continue
                    position, xml = item
                    yield ("page", idx, seq, path, position, xml)
                    seq += 1
            else:
                for item in ts.read_documents(path, fmt, **self._reader_options):
                    if isinstance(item, ts.DeadLetter):
                        self._count("dead_letters")
                        yield TaggedOutput(DEAD, _deadletter_dict(item))
                        continue
                    if item.replaced_chars:
                        self._count("replaced_characters", item.replaced_chars)
                    yield ("doc", idx, seq, item.doc_id, item.title, item.label, item.text)
                    seq += 1
        except Exception as e:  # a whole input failing mid-way must not lose the others
            logger.warning("input %s failed after %d items: %s", path, seq, e)
            self._count("dead_letters")
            yield TaggedOutput(DEAD, {"source": path, "position": "item %d" % seq,
                                      "error": "%s: %s" % (type(e).__name__, e),
                                      "snippet": ""})


def _work_items(element) -> list:
    """The work items of a ``("batch", items)`` element (or of a single work item)."""
    return element[1] if element[0] == "batch" else [element]


def _subset_counts(bc: BatchCounts, keep: np.ndarray) -> BatchCounts:
    """The bags of words of the documents where ``keep`` is True (same token list)."""
    per_doc = np.diff(bc.ptr)
    pair_keep = np.repeat(keep, per_doc)
    ptr = np.zeros(int(keep.sum()) + 1, np.int64)
    np.cumsum(per_doc[keep], out=ptr[1:])
    return BatchCounts(bc.tokens, ptr, bc.ids[pair_keep], bc.counts[pair_keep])


def vocabulary_lookup(tokens: Sequence[str]):
    """The ``index`` argument of :func:`counts_to_rows` for a vocabulary in id order."""
    import pyarrow as pa
    return pa.array(list(tokens), pa.large_string())


def packed_vocabulary(record: dict) -> Tuple[bytes, bytes]:
    """A vocabulary record's tokens as two byte strings (Arrow ``large_string`` offsets and
    data): the side input of :class:`ApplyVocabulary`. The runner's side-input cache measures
    a cached value by walking its objects once per bundle; two ``bytes`` cost nothing to walk,
    a list of tens of thousands of strings costs as much as tokenizing megabytes of text."""
    arr = vocabulary_lookup(record["tokens"])
    _, offsets, data = arr.buffers()
    n = len(arr)
    return (offsets.to_pybytes()[:8 * (n + 1)],
            data.to_pybytes()[:int(np.frombuffer(offsets, np.int64, n + 1)[-1])] if data else b"")


def unpacked_vocabulary(packed: Tuple[bytes, bytes]):
    """The :func:`vocabulary_lookup` index of a :func:`packed_vocabulary` value."""
    import pyarrow as pa
    offsets, data = packed
    return pa.LargeStringArray.from_buffers(len(offsets) // 8 - 1, pa.py_buffer(offsets),
                                            pa.py_buffer(data))


def counts_to_rows(metas: Sequence[tuple], bc: BatchCounts, index):
    """Rows of a batch of documents through a vocabulary (:func:`vocabulary_lookup`).

    ``metas[d]`` ends with ``(doc_id, title, label)`` of document ``d``. Returns ``(rows,
    dropped tokens, documents left empty)``: a row's ids ascend; a document with no token in
    the vocabulary has no row.
    """
    import pyarrow.compute as pc
    n = bc.n_docs
    gmap = pc.index_in(bc.tokens, value_set=index).fill_null(-1).to_numpy().astype(np.int64)
    g = gmap[bc.ids]
    doc = np.repeat(np.arange(n), np.diff(bc.ptr))
    known = g >= 0
    dropped = int(bc.counts[~known].sum())
    g, c, doc = g[known], bc.counts[known], doc[known]
    order = np.argsort((doc << 31) | g)       # by document, then id (ids < 2**31)
    g = g[order].astype(np.int32)
    c = c[order].astype(np.int32)
    doc = doc[order]
    ptr = np.searchsorted(doc, np.arange(n + 1)).tolist()
    totals = np.bincount(doc, weights=c, minlength=n).astype(np.int64).tolist()
    wb, cb = g.tobytes(), c.tobytes()
    rows, empty = [], 0
    for d in range(n):
        a, b = ptr[d], ptr[d + 1]
        if a == b:
            empty += 1
            continue
        doc_id, title, label = metas[d][-3:]
        rows.append((doc_id, title, label, wb[4 * a:4 * b], cb[4 * a:4 * b], totals[d]))
    return rows, dropped, empty


def tokenized_docs(element):
    """``(input, seq, doc_id, title, label, ((token, count), ...))`` for every document of a
    tokenized batch (the main output of :class:`TokenizeDocuments`)."""
    metas, tokens, ptr, ids, counts = element
    bc = BatchCounts(tokens, np.frombuffer(ptr, np.int64), np.frombuffer(ids, np.int64),
                     np.frombuffer(counts, np.int64))
    for d, meta in enumerate(metas):
        yield tuple(meta) + (bc.doc_counts(d),)


class _TokenizeFn(_CountingDoFn):
    """Batch of work items -> ``(metas, tokens, ptr, ids, counts)``: the kept documents'
    ``(input, seq, doc_id, title, label)`` and their bags of words over the batch's token
    list (:class:`~pipelines.tokenize.BatchCounts` as bytes; :func:`tokenized_docs` unpacks).

    Parses dump pages (markup stripped, redirects / other namespaces skipped), tokenizes, and
    drops documents with fewer than the minimum number of tokens. Accumulates the vocabulary
    statistics per bundle (``vocab_stats`` output) when ``collect_vocab``.
    With a fixed vocabulary (``fixed_vocab`` path) it emits finished rows, one per document.
    """

    def __init__(self, cfg: TokenizerConfig, min_tokens: Dict[int, int],
                 collect_vocab: bool = True, fixed_vocab: Optional[str] = None,
                 paths: Optional[Dict[int, str]] = None):
        self._cfg = cfg
        self._paths = dict(paths or {})
        self._min_tokens = min_tokens
        self._collect_vocab = collect_vocab
        self._fixed_vocab = fixed_vocab
        self._index = None

    def setup(self):
        if self._fixed_vocab:
            self._index = vocabulary_lookup(dataset.Vocabulary.read(self._fixed_vocab).tokens)

    def start_bundle(self):
        super().start_bundle()
        self._acc = TokenStatsAccumulator()

    def _dead(self, idx, position, e):
        logger.warning("document %s of input %s failed: %r", position, idx, e)
        self._count("dead_letters")
        return TaggedOutput(DEAD, {"source": self._paths.get(idx, "input %d" % idx),
                                   "position": position,
                                   "error": "%s: %s" % (type(e).__name__, e), "snippet": ""})

    def process(self, element):
        from pipelines import text_sources as ts
        metas, texts, where = [], [], []
        for item in _work_items(element):
            position = item[4] if item[0] == "page" else "doc %s" % item[3]
            try:
                if item[0] == "page":
                    _, idx, seq, source, position, xml = item
                    doc = ts.parse_wiki_page(xml, source, position)
                    if doc is None:
                        self._count("skipped_pages")
                        continue
                    if isinstance(doc, ts.DeadLetter):
                        self._count("dead_letters")
                        yield TaggedOutput(DEAD, _deadletter_dict(doc))
                        continue
                    meta, text = (idx, seq, doc.doc_id, doc.title, doc.label), doc.text
                else:
                    _, idx, seq, doc_id, title, label, text = item
                    meta = (idx, seq, doc_id, title, label)
            except Exception as e:  # an unexpected failure on one document must not stop the job
                yield self._dead(item[1], position, e)
                continue
            metas.append(meta)
            texts.append(text)
            where.append(position)
        if not metas:
            return
        self._count("documents_read", len(metas))
        try:
            outs = list(self._tokenized(metas, texts))
        except Exception:   # find the failing document(s): one at a time
            outs = []
            for meta, text, position in zip(metas, texts, where):
                try:
                    outs.extend(self._tokenized([meta], [text]))
                except Exception as e:
                    outs.append(self._dead(meta[0], position, e))
        for out in outs:
            yield out

    def _tokenized(self, metas, texts):
        bc = count_batch(texts, self._cfg)
        lengths = bc.doc_lengths()
        mins = np.fromiter((self._min_tokens.get(m[0], 1) for m in metas), np.int64, len(metas))
        empty = lengths == 0
        short = ~empty & (lengths < mins)
        keep = ~(empty | short)
        self._count("empty_documents", int(empty.sum()))
        self._count("too_short", int(short.sum()))
        if not keep.any():
            return
        kept = [m for m, k in zip(metas, keep.tolist()) if k]
        bc = _subset_counts(bc, keep) if not keep.all() else bc
        if self._index is not None:
            rows, dropped, n_empty = counts_to_rows(kept, bc, self._index)
            self._count("oov_tokens_dropped", dropped)
            self._count("empty_after_pruning", n_empty)
            yield from rows
            return
        if self._collect_vocab:
            self._count("vocab_documents", len(kept))
            doc = np.repeat(np.arange(bc.n_docs), np.diff(bc.ptr))
            self._acc.add_batch(bc.tokens, bc.ids, bc.counts, doc, [m[:2] for m in kept])
        yield (kept, bc.tokens, bc.ptr.tobytes(), bc.ids.tobytes(), bc.counts.tobytes())

    def finish_bundle(self):
        for out in super().finish_bundle():
            yield out
        if self._collect_vocab:
            for kv in self._acc.packed():
                yield TaggedOutput(VOCAB_STATS, _windowed(kv))
            self._acc.clear()


class _ApplyVocabularyFn(_CountingDoFn):
    """Tokenized batches + the vocabulary's tokens (side input, :func:`packed_vocabulary`)
    -> lists of rows (one per batch); OOV tokens dropped."""

    def __init__(self):
        self._index = None
        self._record_id = None

    def process(self, element, packed_vocab):
        if self._index is None or self._record_id != id(packed_vocab):
            self._index = unpacked_vocabulary(packed_vocab)
            self._record_id = id(packed_vocab)
        metas, tokens, ptr, ids, counts = element
        bc = BatchCounts(tokens, np.frombuffer(ptr, np.int64), np.frombuffer(ids, np.int64),
                         np.frombuffer(counts, np.int64))
        rows, dropped, n_empty = counts_to_rows(metas, bc, self._index)
        self._count("oov_tokens_dropped", dropped)
        self._count("empty_after_pruning", n_empty)
        if rows:
            yield rows


class _ReadBowFn(_CountingDoFn):
    """A bag-of-words file -> rows, plus dense df/cf partials per bundle."""

    def __init__(self, vocab_size: int):
        self._V = vocab_size

    def start_bundle(self):
        super().start_bundle()
        self._df = np.zeros(self._V, np.int64)
        self._cf = np.zeros(self._V, np.int64)
        self._n = 0

    def process(self, element):
        from pipelines import bow_sources
        from pipelines import text_sources as ts
        _, path, fmt = element
        try:
            for item in bow_sources.iter_bow_documents(path, fmt, self._V):
                if isinstance(item, ts.DeadLetter):
                    self._count("dead_letters")
                    yield TaggedOutput(DEAD, _deadletter_dict(item))
                    continue
                doc_id, w, c = item
                self._count("documents_read")
                self._n += 1
                w = np.asarray(w, np.int64)
                c = np.asarray(c, np.int64)
                self._df[w] += 1
                self._cf[w] += c
                if len(w) == 0:
                    self._count("empty_documents")
                    continue
                yield arrays_to_row(str(doc_id), None, None, w, c)
        except Exception as e:
            logger.warning("bag-of-words input %s failed: %s", path, e)
            self._count("dead_letters")
            yield TaggedOutput(DEAD, {"source": path, "position": "",
                                      "error": "%s: %s" % (type(e).__name__, e),
                                      "snippet": ""})

    def finish_bundle(self):
        for out in super().finish_bundle():
            yield out
        if self._n:
            yield TaggedOutput(VOCAB_STATS, _windowed((self._n, self._df, self._cf)))


def _sum_bow_stats(parts):
    n, df, cf = 0, None, None
    for pn, pdf, pcf in parts:
        n += pn
        df = pdf.copy() if df is None else df + pdf
        cf = pcf.copy() if cf is None else cf + pcf
    return n, df, cf


def _bow_vocab_record(parts, tokens, settings: Optional[PruneSettings]):
    n, df, cf = _sum_bow_stats(parts)
    V = len(tokens)
    if df is None:
        df = np.zeros(V, np.int64)
        cf = np.zeros(V, np.int64)
    if settings is None:
        return {"tokens": list(tokens), "df": df.tolist(), "cf": cf.tolist(), "num_docs": n,
                "remap": None}
    vocab, remap = bow_prune(tokens, df, cf, n, settings)
    return {"tokens": vocab.tokens, "df": vocab.df.tolist(), "cf": vocab.cf.tolist(),
            "num_docs": n, "remap": remap.tolist()}


class _RemapBowFn(_CountingDoFn):
    def __init__(self):
        self._remap = None
        self._record_id = None

    def process(self, row, vocab_record):
        if vocab_record.get("remap") is None:
            yield row
            return
        if self._remap is None or self._record_id != id(vocab_record):
            self._remap = np.asarray(vocab_record["remap"], np.int64)
            self._record_id = id(vocab_record)
        doc_id, title, label, wb, cb, n = row
        w = np.frombuffer(wb, np.int32)
        c = np.frombuffer(cb, np.int32)
        nw = self._remap[w]
        keep = nw >= 0
        self._count("oov_tokens_dropped", int(c[~keep].sum()))
        if not keep.any():
            self._count("empty_after_pruning")
            return
        yield arrays_to_row(doc_id, title, label, nw[keep], c[keep])  # remap keeps order


def as_rows(element) -> List[Row]:
    """The rows of an element of a rows PCollection: a list of rows, or one row."""
    return element if isinstance(element, list) else [element]


def _key_by_split(element, holdout_fraction: float, seed: int):
    """Rows (a list, or one row) -> ``(split, [(order, row), ...])`` per split present."""
    by_split: Dict[str, list] = {}
    for row in as_rows(element):
        u, order = doc_hash(row[0], seed)
        split = dataset.HELDOUT_SPLIT if u < holdout_fraction else dataset.TRAIN_SPLIT
        by_split.setdefault(split, []).append((order, row))
    return sorted(by_split.items())


def _assign_shard(kv, split_counts, num_shards: int, heldout_shards: int):
    """``(split, [(order, row), ...])`` -> ``((split, index, n), [(order, row), ...])`` per
    shard present."""
    split, items = kv
    requested = num_shards if split == dataset.TRAIN_SPLIT else heldout_shards
    n = auto_num_shards(split_counts.get(split, 0), requested)
    by_shard: Dict[int, list] = {}
    for item in items:
        by_shard.setdefault(item[0] % n, []).append(item)
    return [((split, index, n), lst) for index, lst in sorted(by_shard.items())]


class _WriteShardFn(beam.DoFn):
    """``((split, index, n_shards), [[(order, row), ...], ...])`` -> one Parquet shard, rows
    sorted by ``(order, doc_id)``; emits the shard's entry for the manifest."""

    def __init__(self, output: str):
        self._output = output

    def process(self, kv, vocab_hash_value):
        (split, index, n), pieces = kv
        items = sorted((it for piece in pieces for it in piece),
                       key=lambda it: (it[0], it[1][0]))
        rows = [r for _, r in items]
        table = rows_to_table(rows)
        name = dataset.shard_name(index, n)
        sha = dataset.write_shard(dataset.join(self._output, split, name), table,
                                  vocab_hash_value)
        Metrics.counter(NAMESPACE, "shards_written").inc()
        yield {"split": split, "file": "%s/%s" % (split, name), "index": index, "n_shards": n,
               "documents": len(rows), "tokens": int(sum(r[5] for r in rows)), "sha256": sha}


def _write_vocabulary(record: dict, output: str) -> dict:
    vocab = record_to_vocabulary(record)
    vocab.write(dataset.join(output, dataset.VOCAB_FILE))
    return {"size": len(vocab), "hash": vocab.hash, "num_docs": record.get("num_docs")}


def _write_deadletters(records: list, output: str) -> dict:
    records = sorted(records, key=lambda d: (str(d.get("source")), str(d.get("position")),
                                             str(d.get("error"))))
    files = []
    if records:
        path = dataset.join(output, dataset.DEADLETTER_DIR, DEADLETTER_FILE)
        data = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n"
                       for r in records)
        dataset.write_bytes_atomic(path, data.encode("utf-8"))
        files.append("%s/%s" % (dataset.DEADLETTER_DIR, DEADLETTER_FILE))
    return {"count": len(records), "files": files}


def _finish(_, stats, shards, vocab_info, dead_info, settings, output):
    """Write empty shards for indices that got no documents, then the manifest."""
    splits = {}
    for s in sorted(shards, key=lambda s: (s["split"], s["index"])):
        splits.setdefault(s["split"], []).append(s)
    empty_table = rows_to_table([])
    for split, lst in splits.items():
        n = lst[0]["n_shards"]
        present = {s["index"] for s in lst}
        for i in range(n):
            if i not in present:
                name = dataset.shard_name(i, n)
                sha = dataset.write_shard(dataset.join(output, split, name), empty_table,
                                          vocab_info["hash"])
                lst.append({"split": split, "file": "%s/%s" % (split, name), "index": i,
                            "n_shards": n, "documents": 0, "tokens": 0, "sha256": sha})
        lst.sort(key=lambda s: s["index"])
    split_info = {}
    for split in (dataset.TRAIN_SPLIT, dataset.HELDOUT_SPLIT):
        lst = splits.get(split, [])
        split_info[split] = {"documents": sum(s["documents"] for s in lst),
                             "tokens": sum(s["tokens"] for s in lst),
                             "shards": [{"file": s["file"], "documents": s["documents"],
                                         "tokens": s["tokens"], "sha256": s["sha256"]}
                                        for s in lst]}
    stats = dict(stats)
    settings = dict(settings)
    kept = sum(v["documents"] for v in split_info.values())
    counts = {
        "documents_read": stats.get("documents_read", 0),
        "documents_kept": kept,
        "train_documents": split_info[dataset.TRAIN_SPLIT]["documents"],
        "heldout_documents": split_info[dataset.HELDOUT_SPLIT]["documents"],
        "empty_documents": stats.get("empty_documents", 0),
        "too_short": stats.get("too_short", 0),
        "empty_after_pruning": stats.get("empty_after_pruning", 0),
        "skipped_pages": stats.get("skipped_pages", 0),
        "dead_letters": dead_info["count"],
        "oov_tokens_dropped": stats.get("oov_tokens_dropped", 0),
        "replaced_characters": stats.get("replaced_characters", 0),
    }
    manifest = {
        "tool": "ldabeam vectorize",
        "format_version": dataset.FORMAT_VERSION,
        "inputs": settings.pop("_inputs"),
        "input_summary": settings.pop("_input_summary"),
        "settings": settings,
        "counts": counts,
        "tokens": {"total": sum(v["tokens"] for v in split_info.values()),
                   dataset.TRAIN_SPLIT: split_info[dataset.TRAIN_SPLIT]["tokens"],
                   dataset.HELDOUT_SPLIT: split_info[dataset.HELDOUT_SPLIT]["tokens"]},
        "vocabulary": dict(vocab_info, file=dataset.VOCAB_FILE),
        "splits": dict(split_info, method="blake2b('<seed>:<doc_id>') < holdout_fraction",
                       holdout_fraction=settings["holdout_fraction"], seed=settings["seed"]),
        "deadletter": dead_info,
    }
    dataset.write_manifest(output, manifest)
    return manifest


# ----------------------------------------------------------------------------- transforms

class ReadWorkItems(beam.PTransform):
    """``(input index, path, format)`` -> work items (main), dead letters, stats."""

    def __init__(self, reader_options: dict, reshuffle: bool = True):
        super().__init__()
        self._reader_options = reader_options
        self._reshuffle = reshuffle

    def expand(self, inputs):
        if self._reshuffle:
            inputs = inputs | "SpreadInputs" >> beam.Reshuffle()
        res = inputs | "Split" >> beam.ParDo(_ReadWorkItemsFn(self._reader_options)) \
            .with_outputs(STATS, DEAD, main="items")
        items = res.items
        if self._reshuffle:
            items = items | "SpreadItems" >> beam.Reshuffle()
        return items, res[DEAD], res[STATS]


class TokenizeDocuments(beam.PTransform):
    """Work items -> token-count documents (or rows with a fixed vocabulary), vocabulary
    partial statistics, dead letters and stats."""

    def __init__(self, cfg: TokenizerConfig, min_tokens: Dict[int, int],
                 fixed_vocab: Optional[str] = None, paths: Optional[Dict[int, str]] = None):
        super().__init__()
        self._fn = _TokenizeFn(cfg, min_tokens, collect_vocab=fixed_vocab is None,
                               fixed_vocab=fixed_vocab, paths=paths)

    def expand(self, items):
        res = items | "Tokenize" >> beam.ParDo(self._fn).with_outputs(
            STATS, DEAD, VOCAB_STATS, main="docs")
        return res.docs, res[VOCAB_STATS], res[DEAD], res[STATS]


class ApplyVocabulary(beam.PTransform):
    """Tokenized batches + a vocabulary record -> lists of rows (OOV dropped, empties
    counted)."""

    def __init__(self, vocab_record):
        super().__init__()
        self._vocab = vocab_record

    def expand(self, docs):
        packed = self._vocab | "PackVocab" >> beam.Map(packed_vocabulary)
        res = docs | "ToIds" >> beam.ParDo(_ApplyVocabularyFn(), AsSingleton(packed)) \
            .with_outputs(STATS, main="rows")
        return res.rows, res[STATS]


class WriteShards(beam.PTransform):
    """Rows (elements: a row or a list of rows) -> Parquet shards under
    ``output/{train,heldout}``; emits one dict per shard."""

    def __init__(self, output: str, vocab_hash_value, holdout_fraction: float, seed: int,
                 num_shards: int = 0, heldout_shards: int = 0):
        super().__init__()
        self._output = output
        self._hash = vocab_hash_value
        self._fraction = holdout_fraction
        self._seed = seed
        self._num_shards = num_shards
        self._heldout_shards = heldout_shards

    def expand(self, rows):
        keyed = rows | "Split" >> beam.FlatMap(_key_by_split, self._fraction, self._seed)
        split_counts = (keyed | "SplitOnly" >> beam.Map(lambda kv: (kv[0], len(kv[1])))
                        | "CountSplits" >> beam.CombinePerKey(sum))
        return (keyed
                | "AssignShard" >> beam.FlatMap(_assign_shard, AsDict(split_counts),
                                                self._num_shards, self._heldout_shards)
                | "GroupShards" >> beam.GroupByKey()
                | "Write" >> beam.ParDo(_WriteShardFn(self._output), AsSingleton(self._hash)))


class WriteDeadLetters(beam.PTransform):
    def __init__(self, output: str):
        super().__init__()
        self._output = output

    def expand(self, dead):
        return (dead | "Gather" >> beam.combiners.ToList()
                | "Write" >> beam.Map(_write_deadletters, self._output))


# ----------------------------------------------------------------------------- driver

def _settings_dict(opts: VectorizeOptions, inputs, vocab_source: str,
                   pruning: Optional[PruneSettings]) -> dict:
    s = asdict(opts)
    pruning = None if pruning is None else dict(asdict(pruning),
                                                keep_tokens=list(pruning.keep_tokens))
    for k in ("inputs", "output", "overwrite", "reshuffle"):
        s.pop(k)
    for k in ("no_below", "no_above", "keep_n", "keep_tokens"):
        s.pop(k)
    s["vocabulary_source"] = vocab_source
    s["pruning"] = pruning
    s["_input_summary"] = input_summary(inputs, opts.inputs)
    s["_inputs"] = ([{"path": p, "format": f} for p, f in inputs]
                    if len(inputs) <= MAX_LISTED_INPUTS else None)
    return s


def input_summary(inputs: Sequence[Tuple[str, str]], patterns: Sequence[str]) -> dict:
    """What the inputs were, in constant size: the number of files, the patterns given, the
    files per format, and the sha256 of the sorted newline-joined listing ``path\tformat``
    (the manifest lists every file only up to MAX_LISTED_INPUTS of them)."""
    h = hashlib.sha256()
    formats = collections.Counter()
    for p, f in sorted(inputs):
        h.update(("%s\t%s\n" % (p, f)).encode("utf-8"))
        formats[f] += 1
    return {"count": len(inputs), "patterns": list(patterns), "formats": dict(formats),
            "listing_sha256": h.hexdigest(), "listed": len(inputs) <= MAX_LISTED_INPUTS}


def _prepare_output(output: str, overwrite: bool) -> None:
    manifest = dataset.join(output, dataset.MANIFEST_FILE)
    existing = [dataset.join(output, d) for d in
                (dataset.TRAIN_SPLIT, dataset.HELDOUT_SPLIT, dataset.DEADLETTER_DIR)]
    if not (dataset.exists(manifest) or any(dataset.exists(p) for p in existing)):
        return
    if not overwrite:
        raise ValueError("output %s already holds a dataset; pass --overwrite to replace it "
                         "or choose another --output" % output)
    if dataset.is_remote(output):
        from apache_beam.io.filesystems import FileSystems
        FileSystems.delete([p for p in existing + [manifest] if FileSystems.exists(p)])
    else:
        import shutil
        for p in existing:
            if os.path.exists(p):
                shutil.rmtree(p)
        if os.path.exists(manifest):
            os.unlink(manifest)


def resolve_inputs(opts: VectorizeOptions) -> List[Tuple[str, str]]:
    """Expand the input globs; fail at once (InputError / ValueError naming it) on an unusable
    input or an unsupported mix."""
    from pipelines import table_sources
    from pipelines import text_sources as ts
    if opts.format not in ts.FORMATS:
        raise ValueError("unsupported --format %r (expected one of %s)"
                         % (opts.format, ", ".join(ts.FORMATS)))
    bq = [i for i in opts.inputs if table_sources.is_bigquery(i)]
    if opts.query:
        bq.append(QUERY_INPUT)
    files = [i for i in opts.inputs if not table_sources.is_bigquery(i)]
    for spec in bq:
        if spec != QUERY_INPUT:
            table_sources.bigquery_table(spec)        # ValueError naming a malformed spec
    if bq:
        table_sources.require_bigquery()
    inputs = ts.expand_inputs(files, opts.format) if files else []
    inputs += [(spec, BIGQUERY_FORMAT) for spec in bq]
    if not inputs:
        raise ValueError("the inputs %s match no file" % ", ".join(opts.inputs))
    fmts = {f for _, f in inputs}
    if fmts & set(BOW_FORMATS):
        if len(inputs) != 1:
            raise ValueError("bag-of-words input (%s) must be a single corpus file, got %d "
                             "inputs: %s" % ("/".join(sorted(fmts)), len(inputs),
                                             ", ".join(p for p, _ in inputs)))
    if fmts & set(BOW_FORMATS) and BIGQUERY_FORMAT in fmts:
        raise ValueError("a bag-of-words corpus cannot be mixed with BigQuery input")
    for path, fmt in [i for i in inputs if i[1] != BIGQUERY_FORMAT][:PREFLIGHT_INPUTS]:
        preflight(path, fmt, opts.reader_options(), opts.vocab)
    return inputs


def preflight(path: str, fmt: str, reader_options: dict, vocab: Optional[str] = None) -> None:
    """Open ``path`` and read its first record so that a wholly unusable input (missing, not
    a dump, not an archive) fails before any pipeline work, with a message naming it."""
    from pipelines import text_sources as ts
    if fmt in BOW_FORMATS:
        from pipelines import bow_sources
        tokens = bow_sources.read_bow_vocab(path, fmt, vocab)
        gen = bow_sources.iter_bow_documents(path, fmt, len(tokens))
    elif fmt == "wiki":
        gen = ts.iter_wiki_page_chunks(path)
    else:
        gen = ts.read_documents(path, fmt, **reader_options)
    try:
        next(gen, None)
    finally:
        gen.close()


def build_pipeline(p: beam.Pipeline, opts: VectorizeOptions, inputs: List[Tuple[str, str]]):
    """Add the whole vectorize job to ``p``; returns the manifest PCollection."""
    output = opts.output
    fmt0 = inputs[0][1]
    is_bow = fmt0 in BOW_FORMATS
    stats_parts = []
    dead_parts = []

    if is_bow:
        from pipelines import bow_sources
        path, fmt = inputs[0]
        tokens = bow_sources.read_bow_vocab(path, fmt, opts.vocab)
        settings = opts.prune_settings() if opts.pruning_requested() else None
        res = (p | "Inputs" >> beam.Create([(0, path, fmt)])
               | "ReadBow" >> beam.ParDo(_ReadBowFn(len(tokens)))
               .with_outputs(STATS, DEAD, VOCAB_STATS, main="rows"))
        stats_parts.append(res[STATS])
        dead_parts.append(res[DEAD])
        vocab_record = (res[VOCAB_STATS] | "GatherBowStats" >> beam.combiners.ToList()
                        | "BowVocab" >> beam.Map(_bow_vocab_record, tokens, settings))
        remapped = res.rows | "Remap" >> beam.ParDo(_RemapBowFn(), AsSingleton(vocab_record)) \
            .with_outputs(STATS, main="rows")
        rows = remapped.rows
        stats_parts.append(remapped[STATS])
        vocab_source = "bag-of-words vocabulary" + (" (pruned)" if settings else "")
        pruning = settings
    else:
        cfg = opts.tokenizer_config(_load_stopwords(opts.stopwords))
        min_tokens = {i: opts.min_tokens_for(f) for i, (_, f) in enumerate(inputs)}
        items, dead, st = read_text_items(p, opts, inputs)
        stats_parts.extend(st)
        dead_parts.extend(dead)
        docs, vstats, dead, st = items | "Tokenize" >> TokenizeDocuments(
            cfg, min_tokens, fixed_vocab=opts.vocab,
            paths={i: path for i, (path, _) in enumerate(inputs)})
        stats_parts.append(st)
        dead_parts.append(dead)
        if opts.vocab:
            fixed = dataset.Vocabulary.read(opts.vocab)
            vocab_record = p | "FixedVocab" >> beam.Create(
                [{"tokens": fixed.tokens, "df": fixed.df.tolist(), "cf": fixed.cf.tolist(),
                  "num_docs": None}])
            rows = docs
            vocab_source = "fixed: %s" % opts.vocab
            pruning = None
        else:
            num_docs = (st | "VocabDocs" >> beam.Filter(lambda kv: kv[0] == "vocab_documents")
                        | "Values" >> beam.Map(lambda kv: kv[1])
                        | "NumDocs" >> beam.CombineGlobally(sum))
            vocab_record = vstats | "Vocabulary" >> BuildVocabulary(num_docs,
                                                                     opts.prune_settings())
            rows, st2 = docs | "Apply" >> ApplyVocabulary(vocab_record)
            stats_parts.append(st2)
            vocab_source = "built"
            pruning = opts.prune_settings()

    vocab_info = vocab_record | "WriteVocab" >> beam.Map(_write_vocabulary, output)
    vhash = vocab_info | "Hash" >> beam.Map(lambda v: v["hash"])
    shards = rows | "Shards" >> WriteShards(output, vhash, opts.holdout_fraction, opts.seed,
                                            opts.num_shards, opts.heldout_shards)
    dead_info = (tuple(dead_parts) | "AllDead" >> beam.Flatten()
                 | "DeadLetters" >> WriteDeadLetters(output))
    stats = (tuple(stats_parts) | "AllStats" >> beam.Flatten()
             | "SumStats" >> beam.CombinePerKey(sum) | "StatsDict" >> beam.combiners.ToDict())
    settings = _settings_dict(opts, inputs, vocab_source, pruning)
    return (p | "Start" >> beam.Create([None])
            | "Manifest" >> beam.Map(_finish, AsSingleton(stats), AsList(shards),
                                     AsSingleton(vocab_info), AsSingleton(dead_info),
                                     settings, output))


def read_text_items(p: beam.Pipeline, opts: VectorizeOptions, inputs: List[Tuple[str, str]]):
    """The work items of text inputs -- files through :class:`ReadWorkItems`, BigQuery tables
    and queries through Beam's BigQuery source -- as ``(items, [dead letters], [stats])``."""
    files = [(i, path, f) for i, (path, f) in enumerate(inputs) if f != BIGQUERY_FORMAT]
    items, dead, stats = [], [], []
    if files:
        it, dl, st = (p | "Inputs" >> beam.Create(files)
                      | "Read" >> ReadWorkItems(opts.reader_options(), opts.reshuffle))
        items.append(it)
        dead.append(dl)
        stats.append(st)
    for i, (path, f) in enumerate(inputs):
        if f != BIGQUERY_FORMAT:
            continue
        from pipelines import table_sources
        src = table_sources.ReadBigQueryDocuments(
            i, table=None if path == QUERY_INPUT else path,
            query=opts.query if path == QUERY_INPUT else None, id_field=opts.id_field,
            text_field=opts.text_field, title_field=opts.title_field,
            label_field=opts.label_field)
        res = p | ("BigQuery%d" % i) >> src.transform()
        items.append(res.items)
        dead.append(res.dead)
    if len(items) == 1:
        return items[0], dead, stats
    return tuple(items) | "AllItems" >> beam.Flatten(), dead, stats


def _load_stopwords(spec):
    from pipelines.tokenize import load_stopwords
    return load_stopwords(spec)


def _checked_inputs(opts: VectorizeOptions) -> List[Tuple[str, str]]:
    """Every check that can fail before Beam (options, inputs, fixed vocabulary, output);
    prepares the output directory. Returns the resolved inputs."""
    opts.validate()
    inputs = resolve_inputs(opts)
    if opts.vocab and inputs[0][1] not in BOW_FORMATS:
        dataset.Vocabulary.read(opts.vocab)  # fail now if missing / malformed
    _prepare_output(opts.output, opts.overwrite)
    logger.info("vectorize: %d input(s) (%s) -> %s", len(inputs),
                ", ".join(sorted({f for _, f in inputs})), opts.output)
    return inputs


def vectorize(opts: VectorizeOptions, beam_argv: Sequence[str] = ()) -> dict:
    """Run the pipeline to completion; returns the manifest."""
    inputs = _checked_inputs(opts)
    with beam.Pipeline(options=pipeline_options(beam_argv)) as p:
        build_pipeline(p, opts, inputs)
    return dataset.read_manifest(opts.output)


def submit(opts: VectorizeOptions, beam_argv: Sequence[str] = ()):
    """``--detach``: the same checks and pipeline as :func:`vectorize`, submitted without
    waiting; returns the ``PipelineResult``. The pipeline writes OUTPUT/manifest.json in its
    last step, so the manifest appearing means the job has finished. (Runners that run the
    job in this process -- the DirectRunner -- return from ``run()`` only when it is done:
    :mod:`pipelines.detached`.)"""
    inputs = _checked_inputs(opts)
    p = beam.Pipeline(options=pipeline_options(beam_argv))
    build_pipeline(p, opts, inputs)
    return p.run()


def summary(manifest: dict, output: str) -> str:
    c = manifest["counts"]
    v = manifest["vocabulary"]
    s = manifest["splits"]
    lines = [
        "documents: %d read, %d kept (train %d, heldout %d), %d empty, %d too short, "
        "%d empty after pruning, %d skipped pages, %d dead-lettered"
        % (c["documents_read"], c["documents_kept"], c["train_documents"],
           c["heldout_documents"], c["empty_documents"], c["too_short"],
           c["empty_after_pruning"], c["skipped_pages"], c["dead_letters"]),
        "tokens: %d (train %d, heldout %d); out-of-vocabulary dropped: %d; undecodable "
        "characters replaced: %d"
        % (manifest["tokens"]["total"], manifest["tokens"]["train"],
           manifest["tokens"]["heldout"], c["oov_tokens_dropped"],
           c.get("replaced_characters", 0)),
        "vocabulary: V = %d, hash %s" % (v["size"], v["hash"]),
        "output: %s (%d train shard(s), %d heldout shard(s)%s)"
        % (output, len(s["train"]["shards"]), len(s["heldout"]["shards"]),
           ", dead letters in %s" % ", ".join(manifest["deadletter"]["files"])
           if manifest["deadletter"]["files"] else ""),
    ]
    return "\n".join(lines)
