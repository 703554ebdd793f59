"""``VBStats``: the framework-free accumulator of online/batch VB's local step.

A local step over a batch of documents yields, for the words it touched,
``sstats[w, k] = Σ_d n_dw φ_dwk`` (word-major, float64) plus counters and, when asked, the
documents' γ. Accumulators from any split of a minibatch merge associatively (sums in
float64), so the Beam trainer can run the E-step in parallel DoFns and merge the results in a
``CombineFn``; the in-process trainer uses the same object.

Create / add / merge / extract:

* create: ``OnlineVB.empty_stats()`` or ``VBStats.empty(K, V)``;
* add: ``add_block(word_ids, block)`` adds a word-major block (the local step does this);
* merge: ``a.merge(b)`` adds ``b`` into ``a`` (union of word ids); a result touching more than
  ``DENSE_FRACTION`` of the vocabulary switches to a dense V×K block (a 4,096-document
  minibatch touches most of a 50k vocabulary, where a dense sum is cheapest);
* extract: ``word_ids``/``sstats`` (or ``to_dense()``) for the global step.

``to_bytes``/``from_bytes`` give a compact raw-bytes form (a JSON header and the arrays'
raw little-endian bytes; no pickle, no ``np.save``) for a Beam coder.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from lda_core.algorithms.algorithm import (SuffStats, pack_arrays, read_arrays, unpack_arrays,
                                           write_arrays)

DENSE_FRACTION = 0.5


def _is_subset(ids: np.ndarray, of: np.ndarray) -> bool:
    """Whether every id of the sorted unique ``ids`` is in the sorted unique ``of``."""
    if len(ids) > len(of):
        return False
    pos = np.searchsorted(of, ids)
    return bool(np.all(pos < len(of)) and np.array_equal(of[np.minimum(pos, len(of) - 1)], ids))
_MAGIC = b"LDAVBS02"


@dataclass
class VBStats(SuffStats):
    """Sufficient statistics of a VB local step (see module docstring).

    ``word_ids``: sorted unique int32 ids of the word rows present (``arange(V)`` when
    ``dense``); ``sstats``: ``len(word_ids) x K`` float64. ``score`` is Σ_d ELBO_d (the
    per-document terms of the bound with λ fixed, paper eq. 16's numerator);
    ``sum_elogtheta`` (K) is Σ_d E[log θ_d] (used by the α Newton step). ``gamma`` (n x K) and
    ``gamma_doc_ids`` are present only when the local step was asked for them. ``step`` is the
    global step of the state the statistics were computed with (-1 if unknown)."""

    n_topics: int
    n_words: int
    word_ids: np.ndarray = None
    sstats: np.ndarray = None
    dense: bool = False
    n_docs: int = 0
    n_tokens: int = 0
    n_empty: int = 0
    n_iterations: int = 0
    n_capped: int = 0
    score: float = 0.0
    sum_elogtheta: np.ndarray = None
    step: int = -1
    gamma: Optional[np.ndarray] = None
    gamma_doc_ids: Optional[Tuple[str, ...]] = None

    def __post_init__(self):
        K = int(self.n_topics)
        if self.word_ids is None:
            self.word_ids = np.zeros(0, np.int32)
        if self.sstats is None:
            self.sstats = np.zeros((len(self.word_ids), K), np.float64)
        if self.sum_elogtheta is None:
            self.sum_elogtheta = np.zeros(K, np.float64)
        self.word_ids = np.ascontiguousarray(self.word_ids, dtype=np.int32)
        self.sstats = np.ascontiguousarray(self.sstats, dtype=np.float64)
        self.sum_elogtheta = np.ascontiguousarray(self.sum_elogtheta, dtype=np.float64)
        if self.sstats.shape != (len(self.word_ids), K):
            raise ValueError("sstats has shape %s, expected (%d, %d)"
                             % (self.sstats.shape, len(self.word_ids), K))
        if self.gamma is not None:
            self.gamma = np.ascontiguousarray(self.gamma, dtype=np.float64)
            if self.gamma_doc_ids is None or len(self.gamma_doc_ids) != len(self.gamma):
                raise ValueError("gamma needs one doc id per row")
            self.gamma_doc_ids = tuple(self.gamma_doc_ids)

    # -- create ---------------------------------------------------------------------------
    @classmethod
    def empty(cls, n_topics: int, n_words: int, step: int = -1) -> "VBStats":
        return cls(n_topics=int(n_topics), n_words=int(n_words), step=int(step))

    # -- add ------------------------------------------------------------------------------
    def add_block(self, word_ids: np.ndarray, block: np.ndarray) -> "VBStats":
        """Add a word-major block (rows ``word_ids``, sorted unique) into the statistics."""
        word_ids = np.ascontiguousarray(word_ids, dtype=np.int32)
        block = np.asarray(block, dtype=np.float64)
        if block.shape != (len(word_ids), self.n_topics):
            raise ValueError("block has shape %s, expected (%d, %d)"
                             % (block.shape, len(word_ids), self.n_topics))
        if len(word_ids) and (word_ids[0] < 0 or word_ids[-1] >= self.n_words):
            raise ValueError("word ids outside [0, %d)" % self.n_words)
        if self.dense:
            self.sstats[word_ids] += block
            return self
        if len(self.word_ids) == 0:
            self.word_ids, self.sstats = word_ids.copy(), block.copy()
        elif np.array_equal(self.word_ids, word_ids):
            self.sstats += block
        else:
            if not _is_subset(word_ids, self.word_ids):
                self.reserve_rows(word_ids)
                if self.dense:
                    self.sstats[word_ids] += block
                    return self
            self.sstats[np.searchsorted(self.word_ids, word_ids)] += block
        if len(self.word_ids) > DENSE_FRACTION * self.n_words:
            self._densify()
        return self

    def _check_mergeable(self, n_topics: int, n_words: int, step: int) -> None:
        if n_topics != self.n_topics or n_words != self.n_words:
            raise ValueError("cannot merge statistics of K=%d, V=%d into K=%d, V=%d"
                             % (n_topics, n_words, self.n_topics, self.n_words))
        if self.step >= 0 and step >= 0 and self.step != step:
            raise ValueError("cannot merge statistics computed at global steps %d and %d"
                             % (self.step, step))

    def merge_from(self, f, size: int) -> "VBStats":
        """:meth:`merge` of the statistics :meth:`write_to` wrote to the next ``size`` bytes
        of ``f``, their rows added into ``self`` as they are read (~32 MB at a time: the
        piece is never held whole); the same sums and layout as ``merge(read_from(...))``."""
        at = {}

        def add_rows(rows, r0, header, arrays):
            if not at:
                self._check_mergeable(int(header["n_topics"]), int(header["n_words"]),
                                      int(header["step"]))
                wid = arrays["word_ids"]
                if bool(header["dense"]):
                    self._densify()
                else:
                    self.reserve_rows(wid)
                at["pos"] = np.searchsorted(self.word_ids, wid)
            self.sstats[at["pos"][r0:r0 + len(rows)]] += rows

        header, arrays = read_arrays(f, _MAGIC, size, sinks={"sstats": add_rows})
        if at and len(self.word_ids) > DENSE_FRACTION * self.n_words:
            self._densify()
        arrays["word_ids"] = np.zeros(0, np.int32)      # the rest: counters, score, ...
        arrays["sstats"] = np.zeros((0, self.n_topics), np.float64)
        return self.merge(self._from_unpacked(header, arrays))

    @classmethod
    def read_reserved(cls, f, size: int, ids: np.ndarray) -> "VBStats":
        start = f.tell()
        header, arrays = read_arrays(f, _MAGIC, size, stop_after="word_ids")
        f.seek(start)
        try:
            out = cls.empty(int(header["n_topics"]), int(header["n_words"]))
        except (KeyError, TypeError) as e:
            raise ValueError("damaged VBStats byte string: %s" % e) from None
        out.reserve_rows(np.union1d(arrays["word_ids"], ids).astype(np.int32))
        return out.merge_from(f, size)

    def row_ids(self) -> np.ndarray:
        return self.word_ids

    @classmethod
    def read_row_ids(cls, f, size: int) -> np.ndarray:
        return read_arrays(f, _MAGIC, size, stop_after="word_ids")[1]["word_ids"]

    def reserve_rows(self, ids: np.ndarray) -> None:
        """Zero rows for the word ids ``ids`` (sorted unique), dense past
        :data:`DENSE_FRACTION` of V: the layout merging blocks of those rows would give."""
        if self.dense or len(ids) == 0:
            return
        union = np.union1d(self.word_ids, ids).astype(np.int32)
        if len(union) == len(self.word_ids):
            return
        if len(union) > DENSE_FRACTION * self.n_words:
            self._densify()
            return
        out = np.zeros((len(union), self.n_topics), np.float64)
        out[np.searchsorted(union, self.word_ids)] = self.sstats
        self.word_ids, self.sstats = union, out

    def _densify(self) -> None:
        if self.dense:
            return
        out = np.zeros((self.n_words, self.n_topics), np.float64)
        out[self.word_ids] = self.sstats
        self.word_ids = np.arange(self.n_words, dtype=np.int32)
        self.sstats = out
        self.dense = True

    # -- merge ----------------------------------------------------------------------------
    def merge(self, other: "VBStats") -> "VBStats":
        """Add ``other`` into ``self`` (union of word ids, float64 sums); returns ``self``."""
        if not isinstance(other, VBStats):
            raise TypeError("can only merge VBStats, got %s" % type(other).__name__)
        self._check_mergeable(other.n_topics, other.n_words, other.step)
        if len(other.word_ids):
            if other.dense and not self.dense:
                self._densify()
            self.add_block(other.word_ids, other.sstats)
        self.merge_counters(other)
        self.score += other.score
        self.sum_elogtheta = self.sum_elogtheta + other.sum_elogtheta
        if self.step < 0:
            self.step = other.step
        if other.gamma is not None:
            if self.gamma is None:
                self.gamma = other.gamma.copy()
                self.gamma_doc_ids = other.gamma_doc_ids
            else:
                self.gamma = np.concatenate([self.gamma, other.gamma])
                self.gamma_doc_ids = self.gamma_doc_ids + other.gamma_doc_ids
        return self

    def copy(self) -> "VBStats":
        return VBStats.from_bytes(self.to_bytes())

    # -- extract --------------------------------------------------------------------------
    def to_dense(self) -> np.ndarray:
        """The statistics as a dense V x K float64 array (word-major)."""
        if self.dense:
            return self.sstats
        out = np.zeros((self.n_words, self.n_topics), np.float64)
        out[self.word_ids] = self.sstats
        return out

    def is_finite(self) -> bool:
        return bool(np.all(np.isfinite(self.sstats)) and np.all(np.isfinite(self.sum_elogtheta))
                    and math.isfinite(self.score))

    @property
    def nbytes(self) -> int:
        return int(self.word_ids.nbytes + self.sstats.nbytes
                   + (0 if self.gamma is None else self.gamma.nbytes))

    # -- bytes ----------------------------------------------------------------------------
    _ARRAYS = (("word_ids", "<i4"), ("sstats", "<f8"), ("sum_elogtheta", "<f8"), ("gamma", "<f8"))

    def to_bytes(self) -> bytes:
        """Data only (:func:`lda_core.algorithms.algorithm.pack_arrays`): counters, score and step in
        the header, the arrays raw little-endian, a CRC-32 of them."""
        return pack_arrays(_MAGIC, *self._packable())

    def write_to(self, f) -> int:
        """:meth:`to_bytes`'s bytes written straight from the arrays (no byte copy)."""
        return write_arrays(f, _MAGIC, *self._packable())

    def _packable(self):
        header = dict(self.counters(), n_topics=int(self.n_topics), n_words=int(self.n_words),
                      dense=bool(self.dense), score=repr(float(self.score)),
                      step=int(self.step),
                      gamma_doc_ids=None if self.gamma is None else list(self.gamma_doc_ids))
        return header, [(name, dt, getattr(self, name)) for name, dt in self._ARRAYS
                        if getattr(self, name) is not None]

    @classmethod
    def from_bytes(cls, b: bytes) -> "VBStats":
        return cls._from_unpacked(*unpack_arrays(_MAGIC, b))

    @classmethod
    def read_from(cls, f, size: int) -> "VBStats":
        """:meth:`from_bytes` of the next ``size`` bytes of ``f``, each array read into its
        own allocation (no file-bytes buffer)."""
        return cls._from_unpacked(*read_arrays(f, _MAGIC, size))

    @classmethod
    def _from_unpacked(cls, header, arrays) -> "VBStats":
        try:
            gids = header["gamma_doc_ids"]
            return cls(n_topics=int(header["n_topics"]), n_words=int(header["n_words"]),
                       word_ids=arrays["word_ids"], sstats=arrays["sstats"],
                       dense=bool(header["dense"]), score=float(header["score"]),
                       sum_elogtheta=arrays["sum_elogtheta"], step=int(header["step"]),
                       gamma=arrays.get("gamma"),
                       gamma_doc_ids=None if gids is None else tuple(gids),
                       **{c: int(header[c]) for c in cls.COUNTERS})
        except (KeyError, TypeError) as e:
            raise ValueError("damaged VBStats byte string: %s" % e) from None
