"""Vocabulary statistics, pruning and id assignment for the vectorize pipeline.

Statistics. For every token the pipeline collects its document frequency ``df`` (number of
documents containing it), corpus frequency ``cf`` (total occurrences) and ``first``, the
position of the first document that contains it (``(input index, document index within the
input)``). Tokenizing DoFns pre-aggregate these per bundle (:class:`TokenStatsAccumulator`)
and send them packed, in a few parts keyed by a hash of the token; :class:`BuildVocabulary`
merges the parts with ``CombinePerKey`` (:func:`merge_packed_stats`: per token sums and a
min, as :func:`merge_token_stats`, so associative and commutative) and applies
:func:`filter_extremes` once.

Pruning (:func:`filter_extremes`) has exactly the semantics of gensim
``Dictionary.filter_extremes(no_below, no_above, keep_n, keep_tokens)`` applied to a
``Dictionary`` built from the same documents in the same order:

* keep tokens with ``no_below <= df <= int(no_above * num_docs)`` (or listed in
  ``keep_tokens``);
* if ``keep_n`` is set, keep the ``keep_n`` most frequent by df (``keep_tokens`` rank first),
  ties broken as gensim's stable sort does: by the token's gensim id, i.e. its first
  occurrence in the corpus.

Ids. Ids are assigned as gensim's ``Dictionary`` + ``filter_extremes`` (``compactify``) would:
tokens in order of first occurrence in the corpus (inputs in the sorted order of
``expand_inputs``, documents in file order), and alphabetically (Python ``str`` order) among
the new tokens of one document. So ``vocab.tsv`` lists exactly ``Dictionary.token2id`` of
gensim after ``filter_extremes`` on the same documents. The order depends only on the inputs,
never on the runner or on how the work was split.

Stop words are removed by the tokenizer before counting (gensim's ``filter_tokens``
equivalent).

Module-level functions are pure and tested without Beam; the ``PTransform`` is thin.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np

from lda_core.errors import UsageError
from lda_core.storage.vocab_file import Vocabulary

logger = logging.getLogger(__name__)

# gensim Dictionary.filter_extremes defaults
DEFAULT_NO_BELOW = 5
DEFAULT_NO_ABOVE = 0.5
DEFAULT_KEEP_N = 100000

# (df, cf, first) where first = (input index, document index) of the first document with it
TokenStats = Tuple[int, int, Tuple[int, int]]


@dataclass(frozen=True)
class PruneSettings:
    """gensim ``filter_extremes`` parameters (``keep_n=None``: no cap)."""

    no_below: int = DEFAULT_NO_BELOW
    no_above: float = DEFAULT_NO_ABOVE
    keep_n: Optional[int] = DEFAULT_KEEP_N
    keep_tokens: Tuple[str, ...] = ()

    def validate(self) -> None:
        if isinstance(self.no_below, bool) or not isinstance(self.no_below, (int, np.integer)) \
                or self.no_below < 0:
            raise UsageError("no_below must be an integer >= 0 (a minimum document count), "
                             "got %r" % (self.no_below,))
        if not isinstance(self.no_above, (int, float)) or not 0.0 <= self.no_above <= 1.0:
            raise UsageError("no_above must be a fraction of documents in [0, 1], got %r"
                             % (self.no_above,))
        if self.keep_n is not None and (isinstance(self.keep_n, bool) or
                                        not isinstance(self.keep_n, (int, np.integer)) or
                                        self.keep_n < 0):
            raise UsageError("keep_n must be None or an integer >= 0, got %r" % (self.keep_n,))

    @classmethod
    def no_pruning(cls) -> "PruneSettings":
        return cls(no_below=0, no_above=1.0, keep_n=None)


def merge_token_stats(values: Iterable[TokenStats]) -> TokenStats:
    """Combine partial (df, cf, first) statistics of one token: sums and the earliest first."""
    df = cf = 0
    first = None
    for d, c, f in values:
        df += d
        cf += c
        f = tuple(f)
        if first is None or f < first:
            first = f
    return df, cf, first


STATS_PARTS = 16   # vocabulary statistics travel in this many parts per bundle
_DOC_BITS = 40     # first = (input, document) is carried as input << 40 | document


def _first_key(f_input, f_doc) -> np.ndarray:
    """(input, document) positions as one int64 each, ordered as the tuples."""
    f_input = np.asarray(f_input, np.int64)
    f_doc = np.asarray(f_doc, np.int64)
    if len(f_doc) and (f_doc.max() >= 1 << _DOC_BITS or f_input.max() >= 1 << (62 - _DOC_BITS)
                       or min(f_doc.min(), f_input.min()) < 0):
        raise ValueError("document positions must be below (2**%d inputs, 2**%d documents "
                         "per input)" % (62 - _DOC_BITS, _DOC_BITS))
    return (f_input << _DOC_BITS) | f_doc


def _first_of_key(key: int) -> Tuple[int, int]:
    return key >> _DOC_BITS, key & ((1 << _DOC_BITS) - 1)


def _part_of(tokens, n_parts: int) -> np.ndarray:
    """A part number per token that depends only on its UTF-8 bytes (the same on every
    worker, unlike Python's salted ``hash``): a polynomial hash of the bytes, in numpy."""
    import pyarrow as pa
    tokens = tokens.cast(pa.large_string())
    n = len(tokens)
    offsets = np.frombuffer(tokens.buffers()[1], np.int64)[tokens.offset:tokens.offset + n + 1]
    data = np.frombuffer(tokens.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
    rel = np.arange(len(data), dtype=np.int64) - np.repeat(offsets[:-1] - offsets[0],
                                                         np.diff(offsets))
    h = data.astype(np.int64) * ((rel * 2654435761 + 97) % 1000003)
    sums = np.zeros(n, np.int64)
    nonempty = np.diff(offsets) > 0
    if nonempty.any():
        sums[nonempty] = np.add.reduceat(h, (offsets[:-1] - offsets[0])[nonempty])
    return (sums + np.diff(offsets)) % n_parts


class TokenStatsAccumulator:
    """Partial statistics (one bundle's, or merged), framework-free and columnar: the tokens
    as an Arrow string array with int64 ``df``, ``cf`` and ``first`` keys, merged with Arrow's
    hash dictionary and numpy (no Python step per token). :meth:`packed` gives the parts to
    feed ``CombinePerKey(merge_packed_stats)``; :meth:`items` the ``(token, (df, cf,
    first))`` pairs."""

    def __init__(self):
        self._chunks: list = []

    def add(self, token_counts: Iterable[Tuple[str, int]], first: Tuple[int, int]) -> None:
        """Add one document: its ``(token, count)`` pairs (distinct tokens)."""
        import pyarrow as pa
        pairs = list(token_counts)
        n = len(pairs)
        if n:
            self._chunks.append((pa.array([t for t, _ in pairs], pa.large_string()),
                                 np.ones(n, np.int64), np.array([c for _, c in pairs], np.int64),
                                 np.full(n, _first_key([first[0]], [first[1]])[0], np.int64)))

    def add_batch(self, tokens, ids: np.ndarray, counts: np.ndarray,
                  doc: np.ndarray, firsts: Sequence[Tuple[int, int]]) -> None:
        """Add a batch of documents at once: pair ``k`` says document ``doc[k]`` holds token
        ``tokens[ids[k]]`` ``counts[k]`` times (one pair per document and token; ``doc``
        ascending); ``firsts[d]`` is document ``d``'s position. The same statistics as
        :meth:`add` called document after document."""
        import pyarrow as pa
        if len(ids) == 0:
            return
        if not isinstance(tokens, pa.Array):
            tokens = pa.array(list(tokens), pa.large_string())
        u = len(tokens)
        df = np.bincount(ids, minlength=u)
        cf = np.bincount(ids, weights=counts, minlength=u).astype(np.int64)
        # pairs are in document order, so a token's first pair is in its earliest document
        present, first_pair = np.unique(ids, return_index=True)
        keys = _first_key([f[0] for f in firsts], [f[1] for f in firsts])
        self._chunks.append((tokens.take(pa.array(present)), df[present], cf[present],
                             keys[doc[first_pair]]))

    def add_packed(self, packed) -> None:
        """Add statistics in the form :meth:`packed` gives them."""
        tokens, df, cf, first = packed
        self._chunks.append((tokens, np.frombuffer(df, np.int64), np.frombuffer(cf, np.int64),
                             np.frombuffer(first, np.int64)))

    def _merged(self):
        """The statistics as one chunk of distinct tokens (merging the chunks if needed)."""
        import pyarrow as pa
        if len(self._chunks) > 1:
            tokens = pa.concat_arrays([c[0].cast(pa.large_string()) for c in self._chunks])
            enc = tokens.dictionary_encode()
            ids = enc.indices.to_numpy().astype(np.int64)
            u = len(enc.dictionary)
            df = np.bincount(ids, np.concatenate([c[1] for c in self._chunks]), u)
            cf = np.bincount(ids, np.concatenate([c[2] for c in self._chunks]), u)
            order = np.argsort(ids, kind="stable")
            starts = np.searchsorted(ids[order], np.arange(u))
            first = np.minimum.reduceat(np.concatenate([c[3] for c in self._chunks])[order],
                                        starts)
            self._chunks = [(enc.dictionary, df.astype(np.int64), cf.astype(np.int64),
                             first.astype(np.int64))]
        if not self._chunks:
            return pa.array([], pa.large_string()), np.zeros(0, np.int64), \
                np.zeros(0, np.int64), np.zeros(0, np.int64)
        return self._chunks[0]

    def packed(self, n_parts: int = STATS_PARTS):
        """``(part, (tokens, df, cf, first))`` for each of up to ``n_parts`` parts (tokens an
        Arrow array, numbers int64 bytes, ``first`` as ``input << 40 | document``): the
        statistics travel as a few elements per bundle, and a token's part depends only on
        the token, so ``CombinePerKey(merge_packed_stats)`` merges each token in one place."""
        import pyarrow as pa
        tokens, df, cf, first = self._merged()
        if not len(tokens):
            return
        part = _part_of(tokens, n_parts)
        for k in np.unique(part).tolist():
            sel = np.flatnonzero(part == k)
            yield k, (tokens.take(pa.array(sel)), df[sel].tobytes(), cf[sel].tobytes(),
                      first[sel].tobytes())

    def __len__(self) -> int:
        return len(self._merged()[0])

    def items(self):
        tokens, df, cf, first = self._merged()
        for tok, d, c, f in zip(tokens.to_pylist(), df.tolist(), cf.tolist(), first.tolist()):
            yield tok, (d, c, _first_of_key(f))

    def candidates(self, no_below: int, keep_tokens: frozenset
                   ) -> List[Tuple[str, int, int, Tuple[int, int]]]:
        """``(token, df, cf, first)`` of the tokens with ``df >= no_below`` or listed in
        ``keep_tokens`` (the others can never be kept)."""
        acc = TokenStatsAccumulator()
        acc.add_packed(self.packed_candidates(no_below, keep_tokens))
        return [(t, d, c, f) for t, (d, c, f) in acc.items()]

    def packed_candidates(self, no_below: int, keep_tokens: frozenset) -> tuple:
        """:meth:`candidates` packed as :func:`merge_packed_stats` packs (an Arrow array and
        three byte strings): cheap to send, and cheap for the runner to measure when it
        caches the gathered candidates as a side input."""
        import pyarrow as pa
        import pyarrow.compute as pc
        tokens, df, cf, first = self._merged()
        sel = df >= no_below
        if keep_tokens:
            sel |= pc.is_in(tokens, value_set=pa.array(sorted(keep_tokens),
                                                       tokens.type)).to_numpy(False)
        sel = np.flatnonzero(sel)
        return (tokens.take(pa.array(sel)), df[sel].tobytes(), cf[sel].tobytes(),
                first[sel].tobytes())

    def clear(self) -> None:
        self._chunks = []


def merge_packed_stats(values) -> tuple:
    """Merge packed statistics of one part (a ``CombinePerKey`` function: per token sums and
    the earliest ``first``, as :func:`merge_token_stats`; associative and commutative)."""
    acc = TokenStatsAccumulator()
    for v in values:
        acc.add_packed(v)
    tokens, df, cf, first = acc._merged()
    return tokens, df.tobytes(), cf.tobytes(), first.tobytes()


def unpack_stats(packed) -> Iterable[Tuple[str, TokenStats]]:
    """``(token, (df, cf, first))`` for every token of packed statistics."""
    acc = TokenStatsAccumulator()
    acc.add_packed(packed)
    return acc.items()


def gensim_order_key(entry) -> tuple:
    """Sort key giving gensim's ``Dictionary`` id order for ``(token, df, cf, first)``."""
    return (tuple(entry[3]), entry[0])


def filter_extremes(stats: Iterable[Tuple[str, int, int, tuple]], num_docs: int,
                    settings: PruneSettings = PruneSettings()) -> List[Tuple[str, int, int]]:
    """The kept ``(token, df, cf)`` in id order, exactly as gensim ``filter_extremes``.

    ``stats`` holds ``(token, df, cf, first)`` for every token of the corpus (tokens with
    ``df < no_below`` that are not in ``keep_tokens`` may be left out: they are never kept).
    ``num_docs`` is the number of documents the statistics were collected from.
    """
    settings.validate()
    # gensim: token2id.values() iterates ids in insertion (= first occurrence) order
    entries = sorted(stats, key=gensim_order_key)
    no_above_abs = int(settings.no_above * num_docs)
    keep = set(settings.keep_tokens or ())
    nb = settings.no_below
    if keep:
        good = [e for e in entries if nb <= e[1] <= no_above_abs or e[0] in keep]
        good.sort(key=lambda e: num_docs if e[0] in keep else e[1], reverse=True)
    else:
        good = [e for e in entries if nb <= e[1] <= no_above_abs]
        good.sort(key=lambda e: e[1], reverse=True)  # stable: ties keep gensim id order
    if settings.keep_n is not None:
        good = good[:settings.keep_n]
    good.sort(key=gensim_order_key)  # compactify: new ids in old-id order
    return [(e[0], int(e[1]), int(e[2])) for e in good]


def vocabulary_from_kept(kept: Sequence[Tuple[str, int, int]]) -> Vocabulary:
    return Vocabulary([t for t, _, _ in kept],
                      np.array([d for _, d, _ in kept], np.int64),
                      np.array([c for _, _, c in kept], np.int64))


def _kept_to_record(stats_list, num_docs, settings: PruneSettings) -> dict:
    kept = filter_extremes(stats_list, num_docs, settings)
    logger.info("vocabulary: %d of %d candidate tokens kept from %d documents (%s)",
                len(kept), len(stats_list), num_docs, settings)
    return {"tokens": [t for t, _, _ in kept], "df": [d for _, d, _ in kept],
            "cf": [c for _, _, c in kept], "num_docs": int(num_docs)}


def record_to_vocabulary(record: dict) -> Vocabulary:
    return Vocabulary(record["tokens"], np.asarray(record["df"], np.int64),
                      np.asarray(record["cf"], np.int64))


def _candidates(kv, no_below: int, keep_tokens: frozenset) -> tuple:
    """The packed statistics of one merged part's tokens that may be kept."""
    acc = TokenStatsAccumulator()
    acc.add_packed(kv[1])
    return acc.packed_candidates(no_below, keep_tokens)


def _prune_parts(parts, num_docs, settings: PruneSettings) -> dict:
    stats = [(t, d, c, f) for part in parts for t, (d, c, f) in unpack_stats(part)]
    return _kept_to_record(stats, num_docs, settings)


def _prune_gathered(_, parts, doc_counts, settings: PruneSettings) -> dict:
    return _prune_parts(parts, sum(doc_counts), settings)


class BuildVocabulary(beam.PTransform):
    """``(part, packed statistics)`` partials (:meth:`TokenStatsAccumulator.packed`) + the
    document counts (a PCollection of numbers, summed) -> one vocabulary record ``{"tokens",
    "df", "cf", "num_docs"}`` (tokens in id order).

    Tokens below ``no_below`` are dropped before the global gather, so only candidate tokens
    travel to the single worker that applies :func:`filter_extremes`. The candidates and the
    counts reach that worker as list side inputs of one impulse (a global combine would add
    six steps, each costing pipeline construction and a stage per run).
    """

    def __init__(self, num_docs, settings: PruneSettings):
        super().__init__()
        settings.validate()
        self._num_docs = num_docs
        self._settings = settings

    def expand(self, partials):
        s = self._settings
        candidates = (partials
                      | "MergeStats" >> beam.CombinePerKey(merge_packed_stats)
                      | "Candidates" >> beam.Map(_candidates, s.no_below,
                                                 frozenset(s.keep_tokens)))
        return (partials.pipeline | "Once" >> beam.Impulse()
                | "Prune" >> beam.Map(_prune_gathered, beam.pvalue.AsList(candidates),
                                      beam.pvalue.AsList(self._num_docs), s))


# ----------------------------------------------------------------------------- bag-of-words

def bow_prune(tokens: Sequence[str], df: np.ndarray, cf: np.ndarray, num_docs: int,
              settings: PruneSettings) -> Tuple[Vocabulary, np.ndarray]:
    """Prune a bag-of-words corpus' vocabulary (ids keep their relative order).

    Returns the new vocabulary and ``remap`` (old id -> new id, -1 when dropped). Ties at the
    ``keep_n`` cut are broken by the original id (as gensim on a ``Dictionary`` whose ids are
    the file's).
    """
    stats = [(t, int(df[i]), int(cf[i]), (i,)) for i, t in enumerate(tokens)]
    kept = filter_extremes(stats, num_docs, settings)
    index = {t: i for i, t in enumerate(tokens)}
    remap = np.full(len(tokens), -1, np.int64)
    for new, (t, _, _) in enumerate(kept):
        remap[index[t]] = new
    return vocabulary_from_kept(kept), remap
