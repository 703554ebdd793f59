"""The seeded minibatch order shared by every trainer (in-process and Beam).

A corpus is a list of shards with known row counts ``n_0, ..., n_{m-1}`` (from the Parquet
metadata; the vectorize pipeline writes rows in a hashed, pseudo-random order). For pass ``p``
with seed ``s`` and minibatch size ``S``:

1. the shards are visited in the order ``shard_order = perm_m(rng(s, p))``;
2. the rows of shard ``j`` are visited in the order ``row_order_j = perm_{n_j}(rng(s, p, j))``;
3. the pass sequence is the concatenation, over ``shard_order``, of ``(j, row_order_j)``;
4. minibatch ``b`` of the pass is positions ``[b*S, (b+1)*S)`` of that sequence: minibatches
   cross shard boundaries, and the **last minibatch of a pass is short** (``D mod S``
   documents, when ``D`` is not a multiple of ``S``); nothing is carried over into the next
   pass, so every pass has ``ceil(D / S)`` minibatches and each pass is self-contained.

Everything is a function of ``(shard_sizes, seed, pass_index, minibatch)`` only, so any
runner decides the minibatch of every ``(shard, row)`` deterministically, whatever its bundling
(:meth:`PassPlan.assign`), and a stream reader needs one shard plus one minibatch in memory
(:meth:`PassPlan.shard_segments`). Global step ``t`` (0-based, counting minibatches over all
passes) is minibatch ``t mod B`` of pass ``t // B`` with ``B = ceil(D / S)``
(:func:`locate_step`).

Random streams: numpy ``Generator(PCG64(SeedSequence([TAG, seed, pass, shard+1])))``; the tag
keeps these streams apart from every other use of the run seed. This module is pure numpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from lda_core.errors import InputError

# distinguishes the ordering streams from other uses of the same seed ("ORDR")
_TAG = 0x4F524452


def _rng(seed: int, pass_index: int, shard: int = -1) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(
        np.random.SeedSequence([_TAG, int(seed) & 0xFFFFFFFFFFFFFFFF, int(pass_index),
                                int(shard) + 1])))


def _check(shard_sizes, seed, pass_index, minibatch):
    sizes = np.asarray(list(shard_sizes), dtype=np.int64)
    if sizes.ndim != 1 or (len(sizes) and sizes.min() < 0):
        raise ValueError("shard_sizes must be non-negative row counts, got %r" % (shard_sizes,))
    if int(minibatch) < 1:
        raise ValueError("minibatch (S) must be >= 1, got %r" % (minibatch,))
    if int(pass_index) < 0:
        raise ValueError("pass_index must be >= 0, got %r" % (pass_index,))
    if int(seed) < 0:
        raise ValueError("seed must be >= 0, got %r" % (seed,))
    return sizes


def n_batches(n_docs: int, minibatch: int) -> int:
    """Minibatches per pass: ``ceil(D / S)`` (the last one short when S does not divide D)."""
    return -(-int(n_docs) // int(minibatch)) if n_docs > 0 else 0


def locate_step(step: int, n_docs: int, minibatch: int) -> Tuple[int, int]:
    """Global step ``t`` (0-based) -> ``(pass_index, batch_index)``."""
    b = n_batches(n_docs, minibatch)
    if b == 0:
        raise InputError("the corpus has no documents")
    return int(step) // b, int(step) % b


@dataclass(frozen=True)
class Segment:
    """A run of consecutive pass positions that lie in one shard and one minibatch."""
    batch: int           # minibatch index within the pass
    shard: int           # shard index (position in the shard list, not in the visiting order)
    rows: np.ndarray     # row indices within the shard, in minibatch order (int64)
    start: int           # position of the first row within its minibatch


@dataclass(frozen=True)
class PassPlan:
    """The order of one pass (see module docstring). Cheap to build: O(number of shards);
    row permutations are drawn on demand, one shard at a time."""

    shard_sizes: Tuple[int, ...]
    seed: int
    pass_index: int
    minibatch: int
    shard_order: np.ndarray = field(repr=False)    # visiting order of the shards
    shard_start: np.ndarray = field(repr=False)    # pass position of each shard's first row

    @property
    def n_docs(self) -> int:
        return int(sum(self.shard_sizes))

    @property
    def n_batches(self) -> int:
        return n_batches(self.n_docs, self.minibatch)

    def batch_sizes(self) -> np.ndarray:
        """Documents in each minibatch of the pass (all S, the last one possibly fewer)."""
        nb, S, D = self.n_batches, self.minibatch, self.n_docs
        out = np.full(nb, S, np.int64)
        if nb:
            out[-1] = D - S * (nb - 1)
        return out

    def row_order(self, shard: int) -> np.ndarray:
        """Permutation of the rows of ``shard`` for this pass (int64)."""
        n = self.shard_sizes[shard]
        return _rng(self.seed, self.pass_index, shard).permutation(n).astype(np.int64)

    def positions(self, shard: int, rows: Optional[Sequence[int]] = None) -> np.ndarray:
        """Pass positions of ``rows`` of ``shard`` (all rows if None), 0 <= pos < D."""
        order = self.row_order(shard)
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order), dtype=np.int64)
        if rows is not None:
            inv = inv[np.asarray(rows, dtype=np.int64)]
        return self.shard_start[shard] + inv

    def assign(self, shard: int, rows: Optional[Sequence[int]] = None
               ) -> Tuple[np.ndarray, np.ndarray]:
        """Minibatch index and position within that minibatch of each of ``rows`` of
        ``shard`` — what a Beam DoFn needs to key documents, whatever bundle they arrive in."""
        pos = self.positions(shard, rows)
        return pos // self.minibatch, pos % self.minibatch

    def shards_of_batch(self, batch: int) -> List[int]:
        """Shards (in visiting order) that hold documents of minibatch ``batch``."""
        lo, hi = batch * self.minibatch, min((batch + 1) * self.minibatch, self.n_docs)
        out = []
        for j in self.shard_order:
            s, n = int(self.shard_start[j]), self.shard_sizes[j]
            if n and s < hi and s + n > lo:
                out.append(int(j))
        return out

    def shard_segments(self, shard: int) -> List[Segment]:
        """The rows of ``shard`` cut into per-minibatch runs, in pass order."""
        order = self.row_order(shard)
        start = int(self.shard_start[shard])
        S = self.minibatch
        segs = []
        i = 0
        while i < len(order):
            pos = start + i
            b, off = pos // S, pos % S
            take = min(S - off, len(order) - i)
            segs.append(Segment(b, int(shard), order[i:i + take], off))
            i += take
        return segs

    def batch_members(self, batch: int) -> List[Tuple[int, np.ndarray]]:
        """Minibatch ``batch`` as ``[(shard, rows), ...]`` in minibatch order."""
        out = []
        for j in self.shards_of_batch(batch):
            for seg in self.shard_segments(j):
                if seg.batch == batch:
                    out.append((seg.shard, seg.rows))
        return out

    def iter_segments(self, start_batch: int = 0) -> Iterator[Segment]:
        """All segments of the pass in order, from minibatch ``start_batch`` on; shards wholly
        before that minibatch are skipped without drawing their permutation."""
        lo = start_batch * self.minibatch
        for j in self.shard_order:
            j = int(j)
            n = self.shard_sizes[j]
            if n == 0 or self.shard_start[j] + n <= lo:
                continue
            for seg in self.shard_segments(j):
                if seg.batch >= start_batch:
                    yield seg

    def describe(self) -> Dict[int, List[Tuple[int, np.ndarray]]]:
        """Every minibatch's members ``{batch: [(shard, rows), ...]}`` (small corpora/tests)."""
        out: Dict[int, List[Tuple[int, np.ndarray]]] = {}
        for seg in self.iter_segments():
            out.setdefault(seg.batch, []).append((seg.shard, seg.rows))
        return out


def plan_pass(shard_sizes: Sequence[int], seed: int, pass_index: int,
              minibatch: Optional[int] = None, *, batch_size: Optional[int] = None
              ) -> PassPlan:
    """The minibatch order of pass ``pass_index`` over shards of ``shard_sizes`` rows, in
    minibatches of ``minibatch`` documents (``batch_size``: its earlier keyword name)."""
    if minibatch is None:
        if batch_size is None:
            raise InputError("plan_pass needs the minibatch size (minibatch=S)")
        minibatch = batch_size
    sizes = _check(shard_sizes, seed, pass_index, minibatch)
    order = _rng(seed, pass_index).permutation(len(sizes)).astype(np.int64)
    start = np.zeros(len(sizes), np.int64)
    pos = 0
    for j in order:
        start[j] = pos
        pos += int(sizes[j])
    return PassPlan(tuple(int(n) for n in sizes), int(seed), int(pass_index), int(minibatch),
                    order, start)
