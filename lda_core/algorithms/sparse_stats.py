"""Sparse accumulators of word-topic statistics for the combine step (SCVB0, sparse Gibbs-VB).

Two forms, both with an associative and commutative ``merge`` (sums in float64) and a
``to_bytes``/``from_bytes`` form in the one statistics frame of ``lda_core.algorithms.algorithm``
(:func:`~lda_core.algorithms.algorithm.pack_arrays`: a JSON header, raw little-endian arrays, a CRC-32;
pickling goes through it too):

* :class:`RowBlock` — a block of dense rows: sorted unique word ids ``rows`` (int32, U) and
  ``values`` (U x K float64). SCVB0's statistics are dense over topics (every γ has K
  non-zeros) but cover only the minibatch's words, so rows are the natural unit.
* :class:`SparseTriplets` — (word, topic, value) triples kept as a sorted unique int64 key
  ``word * K + topic`` and a float64 value. Sparse Gibbs-VB's sampled statistics have only a
  handful of topics per word; merging two sorted key arrays is one linear pass (numba), never
  a sort of the concatenation.

:class:`TopicStats` is what the two algorithms' statistics share: the topic count and the
common counters as fields, the merge check and the byte frame around their arrays.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Sequence, Tuple

import numba
import numpy as np

from lda_core.algorithms.algorithm import (SuffStats, pack_arrays, read_arrays, unpack_arrays,
                                           write_arrays)

_MAGIC_ROWS = b"LDBR"
_MAGIC_TRIP = b"LDBT"


@numba.njit(cache=True)
def merge_sorted_keys(k1, v1, k2, v2):
    """Merge two (sorted unique int64 keys, float64 values) lists, adding equal keys. O(n1+n2)."""
    n1, n2 = k1.shape[0], k2.shape[0]
    keys = np.empty(n1 + n2, np.int64)
    vals = np.empty(n1 + n2, np.float64)
    i = j = n = 0
    while i < n1 and j < n2:
        a, b = k1[i], k2[j]
        if a < b:
            keys[n] = a
            vals[n] = v1[i]
            i += 1
        elif b < a:
            keys[n] = b
            vals[n] = v2[j]
            j += 1
        else:
            keys[n] = a
            vals[n] = v1[i] + v2[j]
            i += 1
            j += 1
        n += 1
    while i < n1:
        keys[n] = k1[i]
        vals[n] = v1[i]
        i += 1
        n += 1
    while j < n2:
        keys[n] = k2[j]
        vals[n] = v2[j]
        j += 1
        n += 1
    return keys[:n].copy(), vals[:n].copy()


@numba.njit(cache=True)
def add_rows_at(values, pos, rows):
    """``values[pos[i]] += rows[i]`` for every i (``pos`` unique): one pass, no temporary."""
    K = values.shape[1]
    for i in range(pos.shape[0]):
        r = pos[i]
        for k in range(K):
            values[r, k] += rows[i, k]


@numba.njit(cache=True)
def merge_rows(r1, v1, r2, v2):
    """The union of two blocks of rows (sorted unique ids ``r1``, ``r2``; values ``v1``,
    ``v2``): rows in both get ``v1 + v2``, the others their own values. One pass."""
    n1, n2, K = r1.shape[0], r2.shape[0], v1.shape[1]
    rows = np.empty(n1 + n2, np.int32)
    i = j = n = 0
    while i < n1 or j < n2:
        if j >= n2 or (i < n1 and r1[i] < r2[j]):
            rows[n] = r1[i]
            i += 1
        elif i >= n1 or r2[j] < r1[i]:
            rows[n] = r2[j]
            j += 1
        else:
            rows[n] = r1[i]
            i += 1
            j += 1
        n += 1
    vals = np.empty((n, K), np.float64)
    i = j = 0
    for m in range(n):
        r = rows[m]
        if i < n1 and r1[i] == r:
            if j < n2 and r2[j] == r:
                for k in range(K):
                    vals[m, k] = v1[i, k] + v2[j, k]
                j += 1
            else:
                for k in range(K):
                    vals[m, k] = v1[i, k]
            i += 1
        else:
            for k in range(K):
                vals[m, k] = v2[j, k]
            j += 1
    return rows[:n].copy(), vals


def _holds(rows: np.ndarray, ids: np.ndarray, pos: Optional[np.ndarray] = None) -> bool:
    """Whether the sorted unique ``rows`` hold every one of the sorted unique ``ids``
    (``pos``: ``searchsorted(rows, ids)`` when known)."""
    if len(ids) == 0:
        return True
    if pos is None:
        pos = np.searchsorted(rows, ids)
    return bool(pos[-1] < len(rows)) and np.array_equal(rows[pos], ids)


def _header_topics(header: Dict[str, Any], what: str) -> int:
    try:
        K = int(header["K"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError("damaged %s header: %s" % (what, e)) from None
    if K <= 0:
        raise ValueError("damaged %s header: K=%d" % (what, K))
    return K


class RowBlock:
    """Dense K-vectors for a sorted set of word ids: ``values[i]`` belongs to word ``rows[i]``."""

    __slots__ = ("n_topics", "rows", "values")

    def __init__(self, n_topics: int, rows: Optional[np.ndarray] = None,
                 values: Optional[np.ndarray] = None):
        self.n_topics = int(n_topics)
        self.rows = (np.zeros(0, np.int32) if rows is None
                     else np.ascontiguousarray(rows, dtype=np.int32))
        self.values = (np.zeros((0, self.n_topics), np.float64) if values is None
                       else np.ascontiguousarray(values, dtype=np.float64))
        if self.values.shape != (len(self.rows), self.n_topics):
            raise ValueError("values must be %d x %d, got %s"
                             % (len(self.rows), self.n_topics, self.values.shape))
        if len(self.rows) > 1 and np.any(np.diff(self.rows) <= 0):
            raise ValueError("rows must be sorted and unique")

    def merge(self, other: "RowBlock") -> "RowBlock":
        """Add ``other`` into ``self`` (union of rows) and return ``self``."""
        if other.n_topics != self.n_topics:
            raise ValueError("cannot merge blocks of %d and %d topics"
                             % (self.n_topics, other.n_topics))
        if len(other.rows) == 0:
            return self
        if len(self.rows) == 0:
            self.rows, self.values = other.rows.copy(), other.values.copy()
            return self
        if len(self.rows) == len(other.rows) and np.array_equal(self.rows, other.rows):
            self.values = self.values + other.values
            return self
        pos = np.searchsorted(self.rows, other.rows)
        if _holds(self.rows, other.rows, pos):
            # other's rows are among self's (e.g. reserved): added in place, the same sums
            add_rows_at(self.values, pos, other.values)
            return self
        self.rows, self.values = merge_rows(self.rows, self.values, other.rows, other.values)
        return self

    def reserve(self, ids: np.ndarray) -> None:
        """Zero rows for the sorted unique word ids ``ids`` not held yet: the layout merging
        blocks of those rows gives (so later merges add in place)."""
        if len(ids) == 0 or _holds(self.rows, ids):
            return
        rows = np.union1d(self.rows, ids).astype(np.int32)
        vals = np.zeros((len(rows), self.n_topics), np.float64)
        vals[np.searchsorted(rows, self.rows)] = self.values
        self.rows, self.values = rows, vals

    def add_rows(self, ids: np.ndarray, values: np.ndarray) -> None:
        """Add ``values`` (one row per id of the sorted unique ``ids``, all held) into the
        block in place: the sums :meth:`merge` forms."""
        pos = np.searchsorted(self.rows, ids)
        if not _holds(self.rows, ids, pos):
            raise ValueError("add_rows: rows not reserved in the block")
        add_rows_at(self.values, pos, np.ascontiguousarray(values, np.float64))

    def to_dense(self, n_words: int) -> np.ndarray:
        out = np.zeros((n_words, self.n_topics), np.float64)
        out[self.rows] = self.values
        return out

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.values.nbytes

    def to_bytes(self) -> bytes:
        return pack_arrays(_MAGIC_ROWS, {"K": self.n_topics},
                           [("rows", "<i4", self.rows), ("values", "<f8", self.values)])

    @classmethod
    def from_bytes(cls, data: bytes) -> "RowBlock":
        h, a = unpack_arrays(_MAGIC_ROWS, data)
        K = _header_topics(h, "RowBlock")
        if a["values"].shape != (len(a["rows"]), K):
            raise ValueError("damaged RowBlock: values %s for %d rows of K=%d"
                             % (a["values"].shape, len(a["rows"]), K))
        return cls(K, a["rows"], a["values"])

    def __getstate__(self):
        return self.to_bytes()

    def __setstate__(self, data):
        o = RowBlock.from_bytes(data)
        self.n_topics, self.rows, self.values = o.n_topics, o.rows, o.values

    def __repr__(self):
        return "RowBlock(K=%d, rows=%d)" % (self.n_topics, len(self.rows))


class SparseTriplets:
    """(word, topic, value) statistics as a sorted unique key ``word*K + topic`` and a value."""

    __slots__ = ("n_topics", "keys", "values")

    def __init__(self, n_topics: int, keys: Optional[np.ndarray] = None,
                 values: Optional[np.ndarray] = None):
        self.n_topics = int(n_topics)
        self.keys = (np.zeros(0, np.int64) if keys is None
                     else np.ascontiguousarray(keys, dtype=np.int64))
        self.values = (np.zeros(0, np.float64) if values is None
                       else np.ascontiguousarray(values, dtype=np.float64))
        if self.keys.shape != self.values.shape or self.keys.ndim != 1:
            raise ValueError("keys and values must be 1-d of equal length (%s vs %s)"
                             % (self.keys.shape, self.values.shape))

    @classmethod
    def from_coo(cls, n_topics: int, words, topics, values) -> "SparseTriplets":
        """Build from unsorted (word, topic, value) triples, adding duplicates."""
        words = np.asarray(words, np.int64)
        topics = np.asarray(topics, np.int64)
        if len(topics) and (topics.min() < 0 or topics.max() >= n_topics):
            raise ValueError("topic ids must lie in [0, %d)" % n_topics)
        keys = words * n_topics + topics
        uk, inv = np.unique(keys, return_inverse=True)
        vals = np.zeros(len(uk), np.float64)
        np.add.at(vals, inv, np.asarray(values, np.float64))
        return cls(n_topics, uk, vals)

    @property
    def words(self) -> np.ndarray:
        return self.keys // self.n_topics

    @property
    def topics(self) -> np.ndarray:
        return self.keys % self.n_topics

    def __len__(self):
        return len(self.keys)

    def merge(self, other: "SparseTriplets") -> "SparseTriplets":
        """Add ``other`` into ``self`` (one linear merge of the sorted keys) and return ``self``."""
        if other.n_topics != self.n_topics:
            raise ValueError("cannot merge triplets of %d and %d topics"
                             % (self.n_topics, other.n_topics))
        if len(other.keys) == 0:
            return self
        if len(self.keys) == 0:
            self.keys, self.values = other.keys.copy(), other.values.copy()
            return self
        self.keys, self.values = merge_sorted_keys(self.keys, self.values,
                                                   other.keys, other.values)
        return self

    def to_dense(self, n_words: int) -> np.ndarray:
        """V x K dense array (for tests and small problems)."""
        out = np.zeros((n_words, self.n_topics), np.float64)
        out[self.words, self.topics] = self.values
        return out

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    def to_bytes(self) -> bytes:
        return pack_arrays(_MAGIC_TRIP, {"K": self.n_topics},
                           [("keys", "<i8", self.keys), ("values", "<f8", self.values)])

    @classmethod
    def from_bytes(cls, data: bytes) -> "SparseTriplets":
        h, a = unpack_arrays(_MAGIC_TRIP, data)
        K, keys = _header_topics(h, "SparseTriplets"), a["keys"]
        if len(keys) > 1 and np.any(np.diff(keys) <= 0):
            raise ValueError("SparseTriplets keys are not sorted and unique")
        return cls(K, keys, a["values"])

    def __getstate__(self):
        return self.to_bytes()

    def __setstate__(self, data):
        o = SparseTriplets.from_bytes(data)
        self.n_topics, self.keys, self.values = o.n_topics, o.keys, o.values

    def __repr__(self):
        return "SparseTriplets(K=%d, nnz=%d)" % (self.n_topics, len(self.keys))


@dataclass
class TopicStats(SuffStats):
    """Base of SCVB0's and sparse Gibbs-VB's minibatch statistics: ``n_topics`` and the
    common counters as dataclass fields (subclasses add theirs after them, so construct
    with keywords), the merge compatibility check and the byte frame (``MAGIC``; the header
    holds the counters, ``n_topics`` and the subclass's ``SAME`` fields)."""

    MAGIC: ClassVar[bytes] = b""
    LABEL: ClassVar[str] = ""                # "SCVB0" in messages
    SAME: ClassVar[Tuple[str, ...]] = ()     # scalar fields two mergeable statistics share

    n_topics: int = 0
    n_docs: int = 0
    n_tokens: int = 0
    n_empty: int = 0
    n_iterations: int = 0
    n_capped: int = 0

    def check_mergeable(self, other: SuffStats) -> None:
        """ValueError unless ``other`` is the same kind of statistics with the same K (and
        the same ``SAME`` fields)."""
        if not (isinstance(other, type(self)) and other.n_topics == self.n_topics
                and all(getattr(other, f) == getattr(self, f) for f in self.SAME)):
            raise ValueError("cannot merge %r into %s statistics of %d topics"
                             % (type(other).__name__, self.LABEL, self.n_topics))

    def pack(self, arrays: Sequence[Tuple[str, str, np.ndarray]]) -> bytes:
        """The frame of ``to_bytes``: counters, ``n_topics`` and ``SAME`` in the header."""
        return pack_arrays(self.MAGIC, self._header(), arrays)

    def write_packed(self, f, arrays: Sequence[Tuple[str, str, np.ndarray]],
                     checksum: bool = True) -> int:
        """:meth:`pack`'s bytes written to ``f`` straight from the arrays; their number."""
        return write_arrays(f, self.MAGIC, self._header(), arrays, checksum)

    def _header(self) -> Dict[str, Any]:
        header = dict(self.counters(), n_topics=int(self.n_topics))
        header.update((f, int(getattr(self, f))) for f in self.SAME)
        return header

    @classmethod
    def read_packed(cls, f, size: int, build, verify: bool = True) -> "TopicStats":
        """:meth:`unpack` of the next ``size`` bytes of the binary file ``f``, each array read
        into its own allocation."""
        return cls._unpacked(*read_arrays(f, cls.MAGIC, size, verify=verify), build)

    @classmethod
    def unpack(cls, data: bytes, build) -> "TopicStats":
        """Inverse of :meth:`pack`: ``build(K, arrays)`` returns the subclass's own fields
        (ValueError for shapes that do not fit); any damage is a ValueError."""
        return cls._unpacked(*unpack_arrays(cls.MAGIC, data), build)

    @classmethod
    def _unpacked(cls, h, a, build) -> "TopicStats":
        try:
            K = int(h["n_topics"])
            fields = dict(build(K, a), **{f: int(h[f]) for f in cls.SAME + cls.COUNTERS})
            return cls(n_topics=K, **fields)
        except (KeyError, TypeError) as e:
            raise ValueError("damaged %s statistics: %s" % (cls.LABEL, e)) from None
