"""Vocabulary statistics, pruning and id assignment for the vectorize pipeline.

Statistics. For every token the pipeline collects its document frequency ``df`` (number of
documents containing it), corpus frequency ``cf`` (total occurrences) and ``first``, the
position of the first document that contains it (``(input index, document index within the
input)``). Tokenizing DoFns pre-aggregate these per bundle (:class:`TokenStatsAccumulator`);
:class:`BuildVocabulary` merges them with ``CombinePerKey`` (:func:`merge_token_stats`: sums
and a min, so associative and commutative) and applies :func:`filter_extremes` once.

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
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np

from pipelines.dataset import Vocabulary

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
            raise ValueError("no_below must be an integer >= 0 (a minimum document count), "
                             "got %r" % (self.no_below,))
        if not isinstance(self.no_above, (int, float)) or not 0.0 <= self.no_above <= 1.0:
            raise ValueError("no_above must be a fraction of documents in [0, 1], got %r"
                             % (self.no_above,))
        if self.keep_n is not None and (isinstance(self.keep_n, bool) or
                                        not isinstance(self.keep_n, (int, np.integer)) or
                                        self.keep_n < 0):
            raise ValueError("keep_n must be None or an integer >= 0, got %r" % (self.keep_n,))

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


class TokenStatsAccumulator:
    """Per-bundle partial statistics, framework-free: ``add`` one document's unique tokens,
    ``items()`` gives ``(token, (df, cf, first))`` pairs to feed ``CombinePerKey``."""

    def __init__(self):
        self._stats: Dict[str, list] = {}

    def add(self, token_counts: Iterable[Tuple[str, int]], first: Tuple[int, int]) -> None:
        stats = self._stats
        for tok, n in token_counts:
            s = stats.get(tok)
            if s is None:
                stats[tok] = [1, n, first]
            else:
                s[0] += 1
                s[1] += n
                if first < s[2]:
                    s[2] = first

    def add_batch(self, tokens: Sequence[str], ids: np.ndarray, counts: np.ndarray,
                  doc: np.ndarray, firsts: Sequence[Tuple[int, int]]) -> None:
        """Add a batch of documents at once: pair ``k`` says document ``doc[k]`` holds token
        ``tokens[ids[k]]`` ``counts[k]`` times (one pair per document and token; ``doc``
        ascending); ``firsts[d]`` is document ``d``'s position. The same statistics as
        :meth:`add` called document after document, with one Python step per distinct
        token of the batch instead of one per token of every document."""
        if len(ids) == 0:
            return
        u = len(tokens)
        df = np.bincount(ids, minlength=u)
        cf = np.bincount(ids, weights=counts, minlength=u).astype(np.int64)
        # pairs are in document order, so a token's first pair is in its earliest document
        present, first_pair = np.unique(ids, return_index=True)
        first_doc = doc[first_pair]
        stats = self._stats
        for t, d, c, fd in zip(present.tolist(), df[present].tolist(), cf[present].tolist(),
                               first_doc.tolist()):
            tok = tokens[t]
            first = firsts[fd]
            s = stats.get(tok)
            if s is None:
                stats[tok] = [d, c, first]
            else:
                s[0] += d
                s[1] += c
                if first < s[2]:
                    s[2] = first

    def __len__(self) -> int:
        return len(self._stats)

    def items(self):
        for tok, (df, cf, first) in self._stats.items():
            yield tok, (df, cf, first)

    def clear(self) -> None:
        self._stats = {}


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


def _may_be_kept(kv, no_below: int, keep_tokens: frozenset) -> bool:
    return kv[1][0] >= no_below or kv[0] in keep_tokens


def _flatten_stats(kv) -> Tuple[str, int, int, tuple]:
    tok, (df, cf, first) = kv
    return tok, df, cf, tuple(first)


class BuildVocabulary(beam.PTransform):
    """``(token, (df, cf, first))`` partials + a singleton document count -> one vocabulary
    record ``{"tokens", "df", "cf", "num_docs"}`` (tokens in id order).

    Tokens below ``no_below`` are dropped before the global gather, so only candidate tokens
    travel to the single worker that applies :func:`filter_extremes`.
    """

    def __init__(self, num_docs, settings: PruneSettings):
        super().__init__()
        settings.validate()
        self._num_docs = num_docs
        self._settings = settings

    def expand(self, partials):
        s = self._settings
        return (partials
                | "MergeStats" >> beam.CombinePerKey(merge_token_stats)
                | "DropRare" >> beam.Filter(_may_be_kept, s.no_below, frozenset(s.keep_tokens))
                | "Flatten" >> beam.Map(_flatten_stats)
                | "Gather" >> beam.combiners.ToList()
                | "Prune" >> beam.Map(_kept_to_record, beam.pvalue.AsSingleton(self._num_docs),
                                      s))


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
