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
* extract: ``word_ids``/``sstats`` (or ``to_dense()``) for the global step, which reads them
  through ``row_blocks()``.

:class:`VBStatsSum` is the sum of pieces written to files (``VBStats.lazy_sum``) that is never
held whole: the global step reads it block by block of rows, each block summed from the
pieces' files as it is needed (a minibatch of a big model touches more than half of V, so its
summed statistics are as large as λ).

``to_bytes``/``from_bytes`` give a compact raw-bytes form (a JSON header and the arrays'
raw little-endian bytes; no pickle, no ``np.save``) for a Beam coder.
"""
from __future__ import annotations

import math
import os
import zlib
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
from numba import njit

from lda_core.algorithms.algorithm import (array_layout, pack_arrays, raw_bytes, read_arrays,
                                           read_full, SuffStats, unpack_arrays, write_arrays)
from lda_core.algorithms.word_blocks import block_bounds, blocks_of

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
    ``sum_elogtheta`` (K) is Σ_d E[log θ_d] (used by the α Newton step); ``topic_mass`` (K)
    is Σ_w sstats_w, the minibatch's tokens per topic (re-seeding decides from it before any
    word block is updated; merging adds it, in the pieces' order). ``gamma`` (n x K) and
    ``gamma_doc_ids`` are present only when the local step was asked for them. ``step`` is the
    global step of the state the statistics were computed with (-1 if unknown). ``span``
    (lo, hi): the statistics of one word block (:meth:`split_by_block`): rows only in
    ``[lo, hi)``, and ``dense`` means all of those rows; None: all V words."""

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
    topic_mass: np.ndarray = None
    step: int = -1
    gamma: Optional[np.ndarray] = None
    gamma_doc_ids: Optional[Tuple[str, ...]] = None
    span: Optional[Tuple[int, int]] = None

    def __post_init__(self):
        K = int(self.n_topics)
        if self.span is not None:
            self.span = (int(self.span[0]), int(self.span[1]))
            if not 0 <= self.span[0] <= self.span[1] <= self.n_words:
                raise ValueError("span %s is not a word range of V=%d" % (self.span, self.n_words))
        if self.word_ids is None:
            self.word_ids = np.zeros(0, np.int32)
        if self.sstats is None:
            self.sstats = np.zeros((len(self.word_ids), K), np.float64)
        if self.sum_elogtheta is None:
            self.sum_elogtheta = np.zeros(K, np.float64)
        self.word_ids = np.ascontiguousarray(self.word_ids, dtype=np.int32)
        self.sstats = np.ascontiguousarray(self.sstats, dtype=np.float64)
        self.sum_elogtheta = np.ascontiguousarray(self.sum_elogtheta, dtype=np.float64)
        if self.topic_mass is None:          # the rows' column sums, row by row
            self.topic_mass = self.sstats.sum(axis=0)
        self.topic_mass = np.ascontiguousarray(self.topic_mass, dtype=np.float64)
        if self.topic_mass.shape != (K,):
            raise ValueError("topic_mass has shape %s, expected (%d,)"
                             % (self.topic_mass.shape, K))
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

    def rows_range(self) -> Tuple[int, int]:
        """The word range these statistics may hold rows of: ``span``, else (0, V)."""
        return self.span if self.span is not None else (0, int(self.n_words))

    def split_by_block(self, n_blocks: int) -> List["VBStats"]:
        """One :class:`VBStats` per word block (``lda_core.algorithms.word_blocks``): that
        block's rows (its ``span``) and, in every one, the whole statistics' counters, score,
        Σ E[log θ] and step (γ, per document, in none). Merging the pieces' block statistics
        in piece order gives each row the bits of the whole minibatch's merge."""
        if self.span is not None:
            raise ValueError("statistics of the word block %s cannot be split again"
                             % (self.span,))
        V = int(self.n_words)
        out = []
        for (lo, hi), sl in zip(block_bounds(V, n_blocks), blocks_of(self.word_ids, V, n_blocks)):
            out.append(VBStats(n_topics=self.n_topics, n_words=V,
                               word_ids=self.word_ids[sl].copy(), sstats=self.sstats[sl].copy(),
                               dense=self.dense, score=self.score,
                               sum_elogtheta=self.sum_elogtheta.copy(),
                               topic_mass=self.topic_mass.copy(), step=self.step,
                               span=None if (lo, hi) == (0, V) else (lo, hi),
                               **self.counters()))
        return out

    @classmethod
    def join_blocks(cls, parts: Sequence["VBStats"]) -> "VBStats":
        """The inverse of :meth:`split_by_block`: the parts of blocks 0..B-1 (block order)
        as one :class:`VBStats` of all V words. Every part carries the same small part
        (counters, score, Σ E[log θ], topic mass, step); ValueError when they differ."""
        parts = list(parts)
        first = parts[0]
        V = int(first.n_words)
        for p in parts[1:]:
            if (p.n_topics, p.n_words, p.step, p.counters(), p.score) != (
                    first.n_topics, first.n_words, first.step, first.counters(), first.score) \
                    or not np.array_equal(p.sum_elogtheta, first.sum_elogtheta) \
                    or not np.array_equal(p.topic_mass, first.topic_mass):
                raise ValueError("word-block statistics of different minibatches cannot be "
                                 "joined")
        if len(parts) == 1 and first.span is None:
            return first
        spans = [p.rows_range() for p in parts]
        if spans[0][0] != 0 or spans[-1][1] != V or any(
                a[1] != b[0] for a, b in zip(spans, spans[1:])):
            raise ValueError("word-block statistics cover %s, not the V=%d words in block "
                             "order" % (spans, V))
        dense = all(p.dense for p in parts)
        return VBStats(n_topics=first.n_topics, n_words=V,
                       word_ids=np.concatenate([p.word_ids for p in parts]),
                       sstats=np.concatenate([p.sstats for p in parts]), dense=dense,
                       score=first.score, sum_elogtheta=first.sum_elogtheta.copy(),
                       topic_mass=first.topic_mass.copy(), step=first.step,
                       **first.counters())

    # -- add ------------------------------------------------------------------------------
    def add_block(self, word_ids: np.ndarray, block: np.ndarray) -> "VBStats":
        """Add a word-major block (rows ``word_ids``, sorted unique) into the statistics, and
        its column sums into ``topic_mass``."""
        block = np.asarray(block, dtype=np.float64)
        self._add_word_rows(word_ids, block)          # checks the block's shape
        self.topic_mass = self.topic_mass + block.sum(axis=0)
        return self

    def _add_word_rows(self, word_ids: np.ndarray, block: np.ndarray) -> "VBStats":
        """The rows of :meth:`add_block` only (``merge`` adds the small part apart)."""
        word_ids = np.ascontiguousarray(word_ids, dtype=np.int32)
        block = np.asarray(block, dtype=np.float64)
        if block.shape != (len(word_ids), self.n_topics):
            raise ValueError("block has shape %s, expected (%d, %d)"
                             % (block.shape, len(word_ids), self.n_topics))
        lo, hi = self.rows_range()
        if len(word_ids) and (word_ids[0] < lo or word_ids[-1] >= hi):
            raise ValueError("word ids outside [%d, %d)" % (lo, hi))
        if self.dense:
            self.sstats[word_ids - lo if lo else word_ids] += block
            return self
        if len(self.word_ids) == 0:
            self.word_ids, self.sstats = word_ids.copy(), block.copy()
        elif np.array_equal(self.word_ids, word_ids):
            self.sstats += block
        else:
            if not _is_subset(word_ids, self.word_ids):
                self.reserve_rows(word_ids)
                if self.dense:
                    self.sstats[word_ids - lo if lo else word_ids] += block
                    return self
            self.sstats[np.searchsorted(self.word_ids, word_ids)] += block
        if len(self.word_ids) > DENSE_FRACTION * (hi - lo):
            self._densify()
        return self

    def _check_mergeable(self, n_topics: int, n_words: int, step: int, span=None) -> None:
        if n_topics != self.n_topics or n_words != self.n_words:
            raise ValueError("cannot merge statistics of K=%d, V=%d into K=%d, V=%d"
                             % (n_topics, n_words, self.n_topics, self.n_words))
        span = None if span is None else (int(span[0]), int(span[1]))
        if span != self.span and self.span is None and len(self.word_ids) == 0 \
                and not self.dense:
            self.span = span          # an empty accumulator takes the first block's range
        if span != self.span:
            raise ValueError("cannot merge statistics of the word range %s into those of %s"
                             % (span, self.span))
        if self.step >= 0 and step >= 0 and self.step != step:
            raise ValueError("cannot merge statistics computed at global steps %d and %d"
                             % (self.step, step))

    def merge_from(self, f, size: int, verify: bool = True) -> "VBStats":
        """:meth:`merge` of the statistics :meth:`write_to` wrote to the next ``size`` bytes
        of ``f``, their rows added into ``self`` as they are read (~32 MB at a time: the
        piece is never held whole); the same sums and layout as ``merge(read_from(...))``."""
        at = {}

        def add_rows(rows, r0, header, arrays):
            if not at:
                self._check_mergeable(int(header["n_topics"]), int(header["n_words"]),
                                      int(header["step"]), header.get("span"))
                wid = arrays["word_ids"]
                if bool(header["dense"]):
                    self._densify()
                else:
                    self.reserve_rows(wid)
                at["pos"] = np.searchsorted(self.word_ids, wid)
            self.sstats[at["pos"][r0:r0 + len(rows)]] += rows

        header, arrays = read_arrays(f, _MAGIC, size, sinks={"sstats": add_rows},
                                     verify=verify)
        if at and len(self.word_ids) > DENSE_FRACTION * (self.rows_range()[1]
                                                         - self.rows_range()[0]):
            self._densify()
        arrays["word_ids"] = np.zeros(0, np.int32)      # the rest: counters, score, ...
        arrays["sstats"] = np.zeros((0, self.n_topics), np.float64)
        return self.merge(self._from_unpacked(header, arrays))

    @classmethod
    def read_reserved(cls, f, size: int, ids: np.ndarray, verify: bool = True) -> "VBStats":
        start = f.tell()
        header, arrays = read_arrays(f, _MAGIC, size, stop_after="word_ids")
        f.seek(start)
        try:
            out = cls.empty(int(header["n_topics"]), int(header["n_words"]))
            out.span = None if header.get("span") is None else tuple(header["span"])
        except (KeyError, TypeError) as e:
            raise ValueError("damaged VBStats byte string: %s" % e) from None
        out.reserve_rows(np.union1d(arrays["word_ids"], ids).astype(np.int32))
        return out.merge_from(f, size, verify)

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
        lo, hi = self.rows_range()
        if len(union) > DENSE_FRACTION * (hi - lo):
            self._densify()
            return
        out = np.zeros((len(union), self.n_topics), np.float64)
        out[np.searchsorted(union, self.word_ids)] = self.sstats
        self.word_ids, self.sstats = union, out

    def _densify(self) -> None:
        if self.dense:
            return
        lo, hi = self.rows_range()
        out = np.zeros((hi - lo, self.n_topics), np.float64)
        out[self.word_ids - lo if lo else self.word_ids] = self.sstats
        self.word_ids = np.arange(lo, hi, dtype=np.int32)
        self.sstats = out
        self.dense = True

    # -- merge ----------------------------------------------------------------------------
    def merge(self, other: "VBStats") -> "VBStats":
        """Add ``other`` into ``self`` (union of word ids, float64 sums); returns ``self``."""
        if not isinstance(other, VBStats):
            raise TypeError("can only merge VBStats, got %s" % type(other).__name__)
        self._check_mergeable(other.n_topics, other.n_words, other.step, other.span)
        if len(other.word_ids):
            if other.dense and not self.dense:
                self._densify()
            self._add_word_rows(other.word_ids, other.sstats)
        self.merge_counters(other)
        self.score += other.score
        self.sum_elogtheta = self.sum_elogtheta + other.sum_elogtheta
        self.topic_mass = self.topic_mass + other.topic_mass
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
        if self.dense and self.span is None:
            return self.sstats
        out = np.zeros((self.n_words, self.n_topics), np.float64)
        out[self.word_ids] = self.sstats
        return out

    def is_finite(self) -> bool:
        return bool(np.all(np.isfinite(self.sstats)) and np.all(np.isfinite(self.sum_elogtheta))
                    and np.all(np.isfinite(self.topic_mass)) and math.isfinite(self.score))

    @property
    def nbytes(self) -> int:
        return int(self.word_ids.nbytes + self.sstats.nbytes
                   + (0 if self.gamma is None else self.gamma.nbytes))

    def row_blocks(self) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """The rows for the global step: here one block, (int64 word ids, sstats)."""
        yield self.word_ids.astype(np.int64), self.sstats

    @classmethod
    def lazy_sum(cls, parts: Sequence[Tuple[str, int, int]],
                 verify: bool = True) -> "VBStatsSum":
        return VBStatsSum(parts, verify=verify)

    # -- bytes ----------------------------------------------------------------------------
    _ARRAYS = (("word_ids", "<i4"), ("sstats", "<f8"), ("sum_elogtheta", "<f8"),
               ("topic_mass", "<f8"), ("gamma", "<f8"))

    def to_bytes(self) -> bytes:
        """Data only (:func:`lda_core.algorithms.algorithm.pack_arrays`): counters, score and step in
        the header, the arrays raw little-endian, a CRC-32 of them."""
        return pack_arrays(_MAGIC, *self._packable())

    def write_to(self, f, checksum: bool = True) -> int:
        """:meth:`to_bytes`'s bytes written straight from the arrays (no byte copy)."""
        return write_arrays(f, _MAGIC, *self._packable(), checksum=checksum)

    def _packable(self):
        header = dict(self.counters(), n_topics=int(self.n_topics), n_words=int(self.n_words),
                      dense=bool(self.dense), score=repr(float(self.score)),
                      step=int(self.step),
                      gamma_doc_ids=None if self.gamma is None else list(self.gamma_doc_ids))
        if self.span is not None:
            header["span"] = list(self.span)
        return header, [(name, dt, getattr(self, name)) for name, dt in self._ARRAYS
                        if getattr(self, name) is not None]

    @classmethod
    def from_bytes(cls, b: bytes) -> "VBStats":
        return cls._from_unpacked(*unpack_arrays(_MAGIC, b))

    @classmethod
    def read_from(cls, f, size: int, verify: bool = True) -> "VBStats":
        """:meth:`from_bytes` of the next ``size`` bytes of ``f``, each array read into its
        own allocation (no file-bytes buffer)."""
        return cls._from_unpacked(*read_arrays(f, _MAGIC, size, verify=verify))

    @classmethod
    def _from_unpacked(cls, header, arrays) -> "VBStats":
        try:
            gids = header["gamma_doc_ids"]
            return cls(n_topics=int(header["n_topics"]), n_words=int(header["n_words"]),
                       word_ids=arrays["word_ids"], sstats=arrays["sstats"],
                       dense=bool(header["dense"]), score=float(header["score"]),
                       sum_elogtheta=arrays["sum_elogtheta"],
                       topic_mass=arrays.get("topic_mass"), step=int(header["step"]),
                       gamma=arrays.get("gamma"),
                       gamma_doc_ids=None if gids is None else tuple(gids),
                       span=None if header.get("span") is None else tuple(header["span"]),
                       **{c: int(header[c]) for c in cls.COUNTERS})
        except (KeyError, TypeError) as e:
            raise ValueError("damaged VBStats byte string: %s" % e) from None


@njit(cache=True, error_model="numpy")
def _add_rows(out, pos, rows):
    """out[pos[i]] += rows[i] (``pos`` unique): numpy's ``out[pos] += rows`` in one pass."""
    for i in range(pos.shape[0]):
        r = pos[i]
        for k in range(rows.shape[1]):
            out[r, k] += rows[i, k]


class _PieceFile:
    """One :class:`VBStats` that ``write_to`` wrote to bytes ``[offset, offset + size)`` of
    ``path``: everything but ``sstats`` read at once; ``sstats`` rows read on demand into a
    caller's buffer (``os.preadv``: nothing else is allocated), their CRC-32 taken as they are
    read in order."""

    def __init__(self, path: str, offset: int, size: int):
        self.path = path
        with open(path, "rb") as f:
            f.seek(offset)
            header, layout, self.crc_want = array_layout(f, _MAGIC, size)
            arrays, self.before, self.after, seen = {}, [], [], False
            for name, dt, shape, pos, n in layout:
                if name == "sstats":
                    self.rows_at, self.row_shape, seen = offset + pos, shape, True
                    continue
                f.seek(offset + pos)
                a = np.empty(shape, dt)
                read_full(f, raw_bytes(a), name)
                arrays[name] = a
                (self.after if seen else self.before).append(a)
        try:
            K = int(header["n_topics"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError("%s: damaged VBStats byte string: %s" % (path, e)) from None
        self.word_ids = arrays.get("word_ids", np.zeros(0, np.int32))
        if not seen or list(self.row_shape) != [len(self.word_ids), K]:
            raise ValueError("%s: damaged VBStats byte string (sstats does not match its word "
                             "ids)" % path)
        self.row_bytes = 8 * K
        # counters, score, Σ E[log θ], γ: the statistics without their rows
        self.meta = VBStats._from_unpacked(header, dict(
            arrays, word_ids=np.zeros(0, np.int32), sstats=np.zeros((0, K), np.float64)))
        self.dense = bool(header["dense"])
        self.fd, self.crc, self.next_row = None, None, 0

    def open(self, check: bool) -> None:
        self.fd = os.open(self.path, os.O_RDONLY)
        self.next_row = 0
        self.crc = None
        if check:
            self.crc = 0
            for a in self.before:
                self.crc = zlib.crc32(raw_bytes(np.ascontiguousarray(a)), self.crc)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def span(self, lo: int, hi: int) -> Tuple[int, int]:
        """The rows whose word ids lie in ``[lo, hi]``."""
        return (int(np.searchsorted(self.word_ids, lo, "left")),
                int(np.searchsorted(self.word_ids, hi, "right")))

    def read_rows(self, r0: int, r1: int, buf: np.ndarray) -> np.ndarray:
        """Rows ``[r0, r1)`` read into ``buf`` (rows are asked for in order, each once)."""
        if r0 != self.next_row:
            raise ValueError("%s: rows asked for out of order" % self.path)
        out = buf[:r1 - r0]
        view, got, at = raw_bytes(out), 0, self.rows_at + r0 * self.row_bytes
        while got < len(view):
            k = os.preadv(self.fd, [view[got:]], at + got)
            if k <= 0:
                raise ValueError("%s: truncated statistics file (array sstats)" % self.path)
            got += k
        if self.crc is not None:
            self.crc = zlib.crc32(view, self.crc)
        self.next_row = r1
        return out

    def verify(self) -> None:
        """After every row was read with ``check``: the file's CRC-32."""
        if self.next_row != len(self.word_ids):
            raise ValueError("%s: %d of %d statistics rows read" % (self.path, self.next_row,
                                                                   len(self.word_ids)))
        if self.crc_want is None:
            raise ValueError("%s: statistics byte string has no CRC-32 (a scratch file's frame, "
                             "read here where it must be checked)" % self.path)
        crc = self.crc
        for a in self.after:
            crc = zlib.crc32(raw_bytes(np.ascontiguousarray(a)), crc)
        if crc != self.crc_want:
            raise ValueError("%s: statistics byte string fails its CRC-32 check (damaged)"
                             % self.path)


class VBStatsSum:
    """The sum, in the order given, of :class:`VBStats` pieces written to files
    (``write_to``; ``parts`` = ``[(path, offset, size)]``), for the global step without the
    summed statistics ever held whole.

    Counters, score, Σ E[log θ], step and γ are summed at once (small; a piece computed at
    another global step is refused). The rows are formed by :meth:`row_blocks`: consecutive
    blocks of at most ``block_bytes`` of the summed rows, each set to zero and each piece's
    rows of those words added in piece order -- per entry the float64 sums of
    ``merge``-ing the pieces in that order, and the rows those merges would hold (all V words
    when the merged statistics would be dense) -- so a global step from this object is bit
    for bit the one from the merged :class:`VBStats`. Memory: two blocks. The first pass
    over the blocks also checks every piece's CRC-32 (ValueError naming the file, raised
    after its last block)."""

    BLOCK_BYTES = 1 << 25

    def __init__(self, parts: Sequence[Tuple[str, int, int]], block_bytes: Optional[int] = None,
                 verify: bool = True):
        if not parts:
            raise ValueError("no statistics pieces to sum")
        self.block_bytes = int(block_bytes or self.BLOCK_BYTES)
        self.verify = verify
        self._pieces: List[_PieceFile] = [_PieceFile(*p) for p in parts]
        first = self._pieces[0].meta
        meta = VBStats.empty(first.n_topics, first.n_words)
        meta.span = first.span
        for p in self._pieces:
            meta.merge(p.meta)
        self.meta = meta
        for name in VBStats.COUNTERS + ("n_topics", "n_words", "score", "sum_elogtheta",
                                        "topic_mass", "step", "gamma", "gamma_doc_ids", "span"):
            setattr(self, name, getattr(meta, name))
        ids = [p.word_ids for p in self._pieces]
        rest = np.unique(np.concatenate(ids[1:])) if len(ids) > 1 else np.zeros(0, np.int32)
        union = np.union1d(ids[0], rest)
        # merging in order: the first piece is reserved for all the later pieces' rows
        # (dense past DENSE_FRACTION of V) unless they hold none; a dense piece makes it dense
        lo, hi = meta.rows_range()
        self.dense = (any(p.dense for p in self._pieces)
                      or (len(rest) > 0 and len(union) > DENSE_FRACTION * (hi - lo)))
        self.word_ids = (np.arange(lo, hi, dtype=np.int64) if self.dense
                         else union.astype(np.int64))
        self._passes = 0

    def row_blocks(self) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """(word ids, summed rows) block by block in word order; the arrays are reused from
        one block to the next (use a block before asking for the next)."""
        K = self.n_topics
        per = max(1, self.block_bytes // (8 * K))
        check = self.verify and self._passes == 0
        self._passes += 1
        rows = self.word_ids
        block = np.empty((min(per, max(1, len(rows))), K), np.float64)
        buf = np.empty_like(block)
        try:
            for p in self._pieces:
                p.open(check)
            for i0 in range(0, len(rows), per):
                ids = rows[i0:i0 + per]
                out = block[:len(ids)]
                out[:] = 0.0
                for p in self._pieces:
                    j0, j1 = p.span(ids[0], ids[-1])
                    if j1 > j0:
                        _add_rows(out, np.searchsorted(ids, p.word_ids[j0:j1]),
                                  p.read_rows(j0, j1, buf))
                yield ids, out
            if check:
                for p in self._pieces:
                    p.verify()
        finally:
            for p in self._pieces:
                p.close()
