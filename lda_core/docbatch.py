"""A batch of bag-of-words documents in compressed sparse row form.

This is the one in-memory document representation every algorithm in ``lda_core`` consumes:
document ``i`` has the unique word ids ``word_ids[indptr[i]:indptr[i+1]]`` (sorted) with the
counts ``counts[indptr[i]:indptr[i+1]]`` (> 0). It holds no vocabulary and does no I/O; the
shard reader in ``pipelines.ingest.dataset`` builds it from Parquet record batches.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from operator import itemgetter
from typing import Iterable, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

from lda_core.errors import InputError


@dataclass(frozen=True)
class DocBatch:
    """CSR documents: ``indptr`` (int64, n+1), ``word_ids`` (int32), ``counts`` (int32).

    ``doc_ids`` are the documents' string ids (used to derive per-document random draws so
    results do not depend on how work is split); ``titles`` and ``labels`` are optional.
    """

    doc_ids: Tuple[str, ...]
    indptr: np.ndarray
    word_ids: np.ndarray
    counts: np.ndarray
    titles: Optional[Tuple[Optional[str], ...]] = None
    labels: Optional[Tuple[Optional[str], ...]] = None

    def __post_init__(self):
        indptr = np.ascontiguousarray(self.indptr, dtype=np.int64)
        word_ids = np.ascontiguousarray(self.word_ids, dtype=np.int32)
        counts = np.ascontiguousarray(self.counts, dtype=np.int32)
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "word_ids", word_ids)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "doc_ids", tuple(self.doc_ids))
        if indptr.ndim != 1 or len(indptr) != len(self.doc_ids) + 1:
            raise ValueError("indptr must have len(doc_ids)+1 = %d entries, got %d"
                             % (len(self.doc_ids) + 1, len(indptr)))
        if indptr[0] != 0 or indptr[-1] != len(word_ids) or len(word_ids) != len(counts):
            raise ValueError("indptr, word_ids and counts are inconsistent "
                             "(indptr[-1]=%d, %d word ids, %d counts)"
                             % (indptr[-1], len(word_ids), len(counts)))
        if len(indptr) > 1 and np.any(np.diff(indptr) < 0):
            raise ValueError("indptr must be non-decreasing")
        if len(counts) and counts.min() <= 0:
            pos = int(np.argmax(counts <= 0))
            raise InputError("counts must be positive integers: document %r has count %d"
                             % (self._doc_at(pos), counts[pos]))
        self._check_word_order()
        for name in ("titles", "labels"):
            v = getattr(self, name)
            if v is not None:
                v = tuple(v)
                object.__setattr__(self, name, v)
                if len(v) != len(self.doc_ids):
                    raise ValueError("%s has %d entries for %d documents"
                                     % (name, len(v), len(self.doc_ids)))

    @classmethod
    def _derived(cls, doc_ids: tuple, indptr: np.ndarray, word_ids: np.ndarray,
                 counts: np.ndarray, titles: Optional[tuple], labels: Optional[tuple]
                 ) -> "DocBatch":
        """A batch made of whole documents of batches that were checked at construction
        (:meth:`take`, :meth:`concat`): every document keeps its sorted, unique word ids and
        positive counts, so the checks of ``__post_init__`` (a pass over every non-zero,
        as long as the minibatch's gather itself) cannot fail and are skipped. Arguments
        are in their final types (tuples; int64/int32 arrays)."""
        out = object.__new__(cls)
        for name, v in (("doc_ids", doc_ids), ("indptr", indptr), ("word_ids", word_ids),
                        ("counts", counts), ("titles", titles), ("labels", labels)):
            object.__setattr__(out, name, v)
        return out

    def _doc_at(self, pos: int) -> str:
        """The id of the document holding non-zero ``pos``."""
        return self.doc_ids[int(np.searchsorted(self.indptr, pos, side="right")) - 1]

    def _check_word_order(self) -> None:
        """Word ids are >= 0 and, within each document, strictly increasing (sorted, unique):
        the kernels index arrays with them unchecked (numba does not bounds-check)."""
        w = self.word_ids
        if not len(w):
            return
        if w.min() < 0:
            pos = int(np.argmax(w < 0))
            raise InputError("document %r has a negative word id %d (word ids must lie in "
                             "[0, V))" % (self._doc_at(pos), w[pos]))
        bad = np.diff(w) <= 0
        starts = self.indptr[1:-1]
        starts = starts[(starts > 0) & (starts < len(w))]
        bad[starts - 1] = False            # a new document may start lower
        if bad.any():
            pos = int(np.argmax(bad)) + 1
            raise InputError("document %r has word ids that are not sorted and unique (%d "
                             "follows %d)" % (self._doc_at(pos), w[pos], w[pos - 1]))

    def check_vocab(self, n_words: int, what: str = "the vocabulary") -> None:
        """ValueError naming the document when a word id is >= ``n_words`` (negative, unsorted
        and repeated ids are refused at construction)."""
        if len(self.word_ids):
            top = int(self.word_ids.max())
            if top >= n_words:
                pos = int(np.argmax(self.word_ids >= n_words))
                raise InputError("document %r has word id %d, outside %s of %d words (was it "
                                 "vectorised with another vocabulary?)"
                                 % (self._doc_at(pos), top, what, n_words))

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: Iterable[Tuple[Sequence[int], Sequence[int]]],
                  doc_ids: Optional[Sequence[str]] = None, **kw) -> "DocBatch":
        """Build from ``(word_ids, counts)`` pairs (each document's ids sorted and unique)."""
        rows = list(rows)
        lens = np.array([len(w) for w, _ in rows], dtype=np.int64)
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        word_ids = (np.concatenate([np.asarray(w, dtype=np.int32) for w, _ in rows])
                    if rows else np.zeros(0, np.int32))
        counts = (np.concatenate([np.asarray(c, dtype=np.int32) for _, c in rows])
                  if rows else np.zeros(0, np.int32))
        if doc_ids is None:
            doc_ids = [str(i) for i in range(len(rows))]
        return cls(tuple(doc_ids), indptr, word_ids, counts, **kw)

    @classmethod
    def from_csr(cls, X, doc_ids: Optional[Sequence[str]] = None, **kw) -> "DocBatch":
        """Build from a scipy sparse matrix (documents x words) of non-negative integer counts."""
        X = sp.csr_matrix(X)
        X.sum_duplicates()
        X.sort_indices()
        X.eliminate_zeros()
        data = np.asarray(X.data)
        if len(data) and (data.min() < 0 or not np.all(np.equal(np.mod(data, 1), 0))):
            raise InputError("counts must be non-negative integers")
        if doc_ids is None:
            doc_ids = [str(i) for i in range(X.shape[0])]
        return cls(tuple(doc_ids), X.indptr.astype(np.int64), X.indices.astype(np.int32),
                   data.astype(np.int32), **kw)

    # -- views ------------------------------------------------------------------------
    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)

    def __len__(self) -> int:
        return self.n_docs

    @property
    def doc_lengths(self) -> np.ndarray:
        """Tokens per document (int64)."""
        cs = np.zeros(len(self.counts) + 1, np.int64)
        np.cumsum(self.counts, out=cs[1:])
        return cs[self.indptr[1:]] - cs[self.indptr[:-1]]

    @property
    def n_tokens(self) -> int:
        return int(self.counts.sum(dtype=np.int64))

    @property
    def nnz(self) -> int:
        return len(self.word_ids)

    def max_word_id(self) -> int:
        return int(self.word_ids.max()) if len(self.word_ids) else -1

    def doc(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        s, e = self.indptr[i], self.indptr[i + 1]
        return self.word_ids[s:e], self.counts[s:e]

    def take(self, idx: Sequence[int]) -> "DocBatch":
        """The documents at positions ``idx`` in that order (negative positions count from
        the end), vectorised: no per-document Python loop over the CSR arrays."""
        n = self.n_docs
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < -n or idx.max() >= n):
            raise IndexError("document position out of range for a batch of %d documents" % n)
        idx = np.where(idx < 0, idx + n, idx)
        lens = np.diff(self.indptr)[idx]
        indptr = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(lens, out=indptr[1:])
        pos = (np.repeat(self.indptr[idx] - indptr[:-1], lens)
               + np.arange(indptr[-1], dtype=np.int64))
        pick = lambda v: None if v is None else _pick(v, idx)
        return DocBatch._derived(_pick(self.doc_ids, idx), indptr, self.word_ids[pos],
                                 self.counts[pos], pick(self.titles), pick(self.labels))

    def content_keys(self) -> Tuple[str, ...]:
        """A key of each document's content: a hash of its (word id, count) pairs in word-id
        order, so equal bags of words have equal keys whatever their ids or row order."""
        out = []
        for d in range(self.n_docs):
            lo, hi = int(self.indptr[d]), int(self.indptr[d + 1])
            w = np.asarray(self.word_ids[lo:hi], np.int64)
            c = np.asarray(self.counts[lo:hi], np.int64)
            order = np.argsort(w, kind="stable")
            h = hashlib.blake2b(w[order].tobytes() + b"|" + c[order].tobytes(), digest_size=16)
            out.append("content:" + h.hexdigest())
        return tuple(out)

    def keyed_by_content(self) -> "DocBatch":
        """The same documents with :meth:`content_keys` as their ids (what per-document draws
        are seeded by when a document's result must not depend on its name)."""
        return dataclasses.replace(self, doc_ids=self.content_keys())

    def non_empty(self) -> "DocBatch":
        """The documents that have at least one token (empty ones are skipped and counted)."""
        keep = np.nonzero(np.diff(self.indptr) > 0)[0]
        return self if len(keep) == self.n_docs else self.take(keep)

    def to_csr(self, n_words: int, dtype=np.float64) -> sp.csr_matrix:
        self.check_vocab(n_words)
        return sp.csr_matrix((self.counts.astype(dtype), self.word_ids, self.indptr),
                             shape=(self.n_docs, n_words))

    @staticmethod
    def concat(batches: Sequence["DocBatch"]) -> "DocBatch":
        batches = [b for b in batches]
        if not batches:
            return DocBatch((), np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32))
        offsets = np.cumsum([0] + [b.nnz for b in batches[:-1]])
        indptr = np.concatenate([[0]] + [b.indptr[1:] + o for b, o in zip(batches, offsets)])
        opt = lambda name: (None if any(getattr(b, name) is None for b in batches)
                            else tuple(x for b in batches for x in getattr(b, name)))
        return DocBatch._derived(tuple(d for b in batches for d in b.doc_ids), indptr,
                                 np.concatenate([b.word_ids for b in batches]),
                                 np.concatenate([b.counts for b in batches]),
                                 opt("titles"), opt("labels"))


def _pick(values: tuple, idx: np.ndarray) -> tuple:
    """``tuple(values[i] for i in idx)`` without the per-item Python loop."""
    if len(idx) == 0:
        return ()
    if len(idx) == 1:
        return (values[int(idx[0])],)
    return itemgetter(*idx.tolist())(values)
