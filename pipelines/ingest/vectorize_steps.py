"""The vectorize pipeline's reading, tokenizing and vocabulary-applying steps (DoFns and
their composite transforms :class:`ReadWorkItems`, :class:`TokenizeDocuments`,
:class:`ApplyVocabulary`), and the per-bundle counting every step's DoFn shares
(:class:`CountingDoFn`). :mod:`pipelines.ingest.vectorize` assembles them into the job.
"""
from __future__ import annotations

import collections
import logging
from typing import Dict, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsSingleton, TaggedOutput
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest import input_files, text_sources as ts, wiki_source
from pipelines.ingest.input_files import is_archive_name
from pipelines.ingest.tokenize import (BatchCounts, count_batch, has_cjk, TokenizerConfig,
                                       vocab_pairs, vocabulary_index)
from pipelines.ingest.vocabulary import TokenStatsAccumulator

logger = logging.getLogger(__name__)

NAMESPACE = "ldabeam.vectorize"
STATS = "stats"
DEAD = "dead"
VOCAB_STATS = "vocab_stats"
MAX_SNIPPET = 200
BATCH_ITEMS = 2000               # work items (documents / pages) per batch
BATCH_CHARS = 1 << 21            # ... or characters of text / page XML per batch


def deadletter_dict(dl) -> dict:
    d = dl.to_json() if hasattr(dl, "to_json") else dict(dl)
    d = {k: d.get(k) for k in ("source", "position", "error", "snippet")}
    if d.get("snippet"):
        d["snippet"] = d["snippet"][:MAX_SNIPPET]
    return d


_GLOBAL_WINDOWS = (GlobalWindow(),)


def windowed(value):
    """A value in the global window, for outputs of ``finish_bundle`` (built directly: the
    ``GlobalWindows.windowed_value`` helper re-parses a timestamp proto on every call)."""
    return WindowedValue(value, MIN_TIMESTAMP, _GLOBAL_WINDOWS)


# ----------------------------------------------------------------------------- DoFns

class CountingDoFn(beam.DoFn):
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
                yield TaggedOutput(STATS, windowed((k, int(v))))
        self._counts = collections.Counter()


FILES_PER_GROUP = 500            # one-document files read by one element (group_inputs)


def group_inputs(files: Sequence[Tuple[int, str, str]]) -> list:
    """The elements of :class:`ReadWorkItems`: lists of ``(input index, path, format)``.

    A file that holds one document (``text``, not an archive by its name) is grouped with
    up to ``FILES_PER_GROUP`` others: one element per file made every post of a folder of
    small files its own element, its own batch and its own vocabulary lookup (a folder of
    11,314 posts took five times as long as the same posts in one tarball). Any other input
    (a dump, an archive, a table, JSON lines) is an element of its own, so large inputs
    still spread over the workers."""
    groups, small = [], []
    for item in files:
        if item[2] == "text" and not is_archive_name(item[1]):
            small.append(tuple(item))
            if len(small) >= FILES_PER_GROUP:
                groups.append(small)
                small = []
        else:
            groups.append([tuple(item)])
    if small:
        groups.append(small)
    return groups


class _ReadWorkItemsFn(CountingDoFn):
    """``[(input index, path, format), ...]`` (:func:`group_inputs`; a single tuple is taken
    as a group of one) -> batches of work items, read sequentially from the group's inputs.

    Work items: ``("page", input, seq, source, position, xml)`` for a dump page, or
    ``("doc", input, seq, doc_id, title, label, text)`` for a text document. ``seq`` numbers
    items in file order (it fixes gensim's id order for tokens first seen in a document).
    Items travel as ``("batch", [item, ...])`` of consecutive items (at most
    ``BATCH_ITEMS`` items or ``BATCH_CHARS`` characters; a batch may span the small files of
    a group), so the per-element cost of the runner and of the later steps is paid per
    batch, not per document.
    """

    def __init__(self, reader_options: dict):
        self._reader_options = reader_options

    def process(self, element):
        group = element if isinstance(element, list) else [element]
        batch, size = [], 0
        for one in group:
            for out in self._items(one):
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
        idx, path, fmt = element
        seq = 0
        try:
            if fmt == "wiki":
                for item in wiki_source.iter_wiki_page_chunks(path):
                    if isinstance(item, input_files.DeadLetter):
                        self._count("dead_letters")
                        yield TaggedOutput(DEAD, deadletter_dict(item))
                        continue
                    position, xml = item
                    yield ("page", idx, seq, path, position, xml)
                    seq += 1
            else:
                for item in ts.read_documents(path, fmt, **self._reader_options):
                    if isinstance(item, input_files.DeadLetter):
                        self._count("dead_letters")
                        yield TaggedOutput(DEAD, deadletter_dict(item))
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
    return vocabulary_index(tokens)


def packed_strings(arr) -> Tuple[bytes, bytes]:
    """An Arrow ``large_string`` array as two byte strings (its offsets and its data): how
    string arrays cross stages. Beam's default coder would pickle the array; two ``bytes``
    are copied as they are, and cost nothing to walk for the runner's side-input cache."""
    import pyarrow as pa
    if arr.offset:
        arr = pa.concat_arrays([arr])            # a slice: its own buffers from 0
    _, offsets, data = arr.buffers()
    n = len(arr)
    return (offsets.to_pybytes()[:8 * (n + 1)],
            data.to_pybytes()[:int(np.frombuffer(offsets, np.int64, n + 1)[-1])] if data else b"")


def unpacked_strings(packed: Tuple[bytes, bytes]):
    """The ``large_string`` array of a :func:`packed_strings` value."""
    import pyarrow as pa
    offsets, data = packed
    return pa.LargeStringArray.from_buffers(len(offsets) // 8 - 1, pa.py_buffer(offsets),
                                            pa.py_buffer(data))


def packed_vocabulary(record: dict) -> Tuple[bytes, bytes]:
    """A vocabulary record's tokens as :func:`packed_strings`: the side input of
    :class:`ApplyVocabulary`. The runner's side-input cache measures a cached value by walking
    its objects once per bundle; a list of tens of thousands of strings costs as much to walk
    as tokenizing megabytes of text."""
    return packed_strings(vocabulary_lookup(record["tokens"]))


def unpacked_vocabulary(packed: Tuple[bytes, bytes]):
    """The :func:`vocabulary_lookup` index of a :func:`packed_vocabulary` value."""
    return unpacked_strings(packed)


def _narrowest(a: np.ndarray) -> bytes:
    """Non-negative integers as the bytes of the narrowest of uint8 / uint16 / uint32 /
    int64 that holds them (:func:`_widened` reads them back)."""
    top = int(a.max()) if len(a) else 0
    for t in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(t).max:
            return bytes([np.dtype(t).itemsize]) + a.astype(t).tobytes()
    return bytes([8]) + a.astype(np.int64).tobytes()


_WIDTHS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.int64}


def _widened(b: bytes) -> np.ndarray:
    return np.frombuffer(b, _WIDTHS[b[0]], offset=1).astype(np.int64)


def packed_batch(metas: list, bc: BatchCounts) -> tuple:
    """A tokenized batch as it crosses stages: ``(metas, tokens, ptr, ids, counts)`` with the
    tokens as :func:`packed_strings` and the arrays as the bytes of their narrowest integer
    type (local ids and counts are small: about a third of the bytes of int64)."""
    return (metas, packed_strings(bc.tokens), bc.ptr.tobytes(), _narrowest(bc.ids),
            _narrowest(bc.counts))


def unpacked_batch(element: tuple) -> Tuple[list, BatchCounts]:
    """``(metas, BatchCounts)`` of a :func:`packed_batch` value."""
    metas, tokens, ptr, ids, counts = element
    return metas, BatchCounts(unpacked_strings(tokens), np.frombuffer(ptr, np.int64),
                              _widened(ids), _widened(counts))


def counts_to_rows(metas: Sequence[tuple], bc: BatchCounts, index):
    """Rows of a batch of documents through a vocabulary (:func:`vocabulary_lookup`).

    ``metas[d]`` ends with ``(doc_id, title, label)`` of document ``d``. Returns ``(rows,
    dropped tokens, documents left empty)``: a row's ids ascend; a document with no token in
    the vocabulary has no row.
    """
    n = bc.n_docs
    ptr, g, c, dropped = vocab_pairs(bc, index)
    doc = np.repeat(np.arange(n), np.diff(ptr))
    ptr = ptr.tolist()
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
    metas, bc = unpacked_batch(element)
    for d, meta in enumerate(metas):
        yield tuple(meta) + (bc.doc_counts(d),)


class _TokenizeFn(CountingDoFn):
    """Batch of work items -> :func:`packed_batch` ``(metas, tokens, ptr, ids, counts)``: the
    kept documents' ``(input, seq, doc_id, title, label)`` and their bags of words over the
    batch's token list (:class:`~pipelines.ingest.tokenize.BatchCounts`; :func:`tokenized_docs`
    unpacks).

    Parses dump pages (markup stripped, redirects / other namespaces skipped), tokenizes, and
    drops documents with fewer than the minimum number of tokens. Accumulates the vocabulary
    statistics per bundle (``vocab_stats`` output) when ``collect_vocab``.
    With a fixed vocabulary (``fixed_vocab`` path) it emits finished rows, one per document;
    ``fixed_vocab_words``: only its first n words (a checkpoint of a vocabulary the file's
    grew from, :mod:`lda_core.storage.vocab_file`).
    """

    def __init__(self, cfg: TokenizerConfig, min_tokens: Dict[int, int],
                 collect_vocab: bool = True, fixed_vocab: Optional[str] = None,
                 paths: Optional[Dict[int, str]] = None,
                 fixed_vocab_words: Optional[int] = None):
        self._cfg = cfg
        self._paths = dict(paths or {})
        self._min_tokens = min_tokens
        self._collect_vocab = collect_vocab
        self._fixed_vocab = fixed_vocab
        self._fixed_words = fixed_vocab_words
        self._index = None

    def setup(self):
        if self._fixed_vocab:
            tokens = Vocabulary.read(self._fixed_vocab).tokens
            self._index = vocabulary_lookup(tokens if self._fixed_words is None
                                            else tokens[:int(self._fixed_words)])

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
        metas, texts, where = [], [], []
        for item in _work_items(element):
            position = item[4] if item[0] == "page" else "doc %s" % item[3]
            try:
                if item[0] == "page":
                    _, idx, seq, source, position, xml = item
                    doc = wiki_source.parse_wiki_page(xml, source, position)
                    if doc is None:
                        self._count("skipped_pages")
                        continue
                    if isinstance(doc, input_files.DeadLetter):
                        self._count("dead_letters")
                        yield TaggedOutput(DEAD, deadletter_dict(doc))
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
        if empty.any():   # unsegmented Chinese/Japanese runs are longer than any token
            self._count("empty_cjk_documents",
                        sum(1 for t, e in zip(texts, empty.tolist()) if e and has_cjk(t)))
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
        yield packed_batch(kept, bc)

    def finish_bundle(self):
        for out in super().finish_bundle():
            yield out
        if self._collect_vocab:
            for kv in self._acc.packed():
                yield TaggedOutput(VOCAB_STATS, windowed(kv))
            self._acc.clear()


class _ApplyVocabularyFn(CountingDoFn):
    """Tokenized batches + the vocabulary's tokens (side input, :func:`packed_vocabulary`)
    -> lists of rows (one per batch); OOV tokens dropped. Counts the documents it receives
    (``vocab_applied_documents``: the manifest step compares them with the documents the
    tokenizer kept).

    The lookup index is rebuilt when the side-input object changes; the object is held, so
    a later value can never be taken for it (``id()`` of a freed object is reused)."""

    def __init__(self):
        self._index = None
        self._packed = None

    def process(self, element, packed_vocab):
        if self._index is None or self._packed is not packed_vocab:
            self._index = unpacked_vocabulary(packed_vocab)
            self._packed = packed_vocab
        metas, bc = unpacked_batch(element)
        self._count("vocab_applied_documents", len(metas))
        rows, dropped, n_empty = counts_to_rows(metas, bc, self._index)
        self._count("oov_tokens_dropped", dropped)
        self._count("empty_after_pruning", n_empty)
        if rows:
            yield rows


# ----------------------------------------------------------------------------- transforms

class ReadWorkItems(beam.PTransform):
    """Groups of ``(input index, path, format)`` (:func:`group_inputs`) -> work items (main),
    dead letters, stats.

    ``reshuffle``: spread the items over the workers; ``spread_inputs``: spread the inputs
    too (pointless for a single input: the reshuffle would only add a stage)."""

    def __init__(self, reader_options: dict, reshuffle: bool = True, spread_inputs: bool = True):
        super().__init__()
        self._reader_options = reader_options
        self._reshuffle = reshuffle
        self._spread_inputs = spread_inputs

    def expand(self, inputs):
        if self._reshuffle and self._spread_inputs:
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
                 fixed_vocab: Optional[str] = None, paths: Optional[Dict[int, str]] = None,
                 fixed_vocab_words: Optional[int] = None):
        super().__init__()
        self._fn = _TokenizeFn(cfg, min_tokens, collect_vocab=fixed_vocab is None,
                               fixed_vocab=fixed_vocab, paths=paths,
                               fixed_vocab_words=fixed_vocab_words)

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
