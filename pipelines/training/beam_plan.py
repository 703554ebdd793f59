"""Shard planning for the Beam trainer: which rows of which shard make up each piece of each
minibatch of a window, and reading a piece's rows (:func:`read_task`; one cached shard per
process).

The graph carries no row indices. A window's read tasks are named by ``(position, piece)``
plus one :class:`ReadPlan` (shard files, their row counts, seed, S, P) that the graph holds
once; each worker derives a task's rows from them (``lda_core.training.ordering.plan_pass``:
the same rows, in the same order, as the in-process trainer's stream), so membership never
depends on how Beam bundles the work and the graph grows by the transforms of a step only.
"""
from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError
from lda_core.storage import traffic
from lda_core.training.ordering import locate_step, n_batches, plan_pass
from lda_core.training.pieces import piece_bounds
from pipelines.ingest.shards import gather, read_shard_counted
from pipelines.runtime import paths
from pipelines.training import beam_cost

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ read tasks

@dataclass(frozen=True)
class ReadPlan:
    """Everything a worker needs to derive any read task of a run: the shard files, their
    row counts (from the Parquet metadata), the order's seed, the minibatch size S and the
    pieces per minibatch P."""
    files: Tuple[str, ...]
    sizes: Tuple[int, ...]
    seed: int
    minibatch: int
    pieces: int

    @property
    def n_docs(self) -> int:
        return int(sum(self.sizes))

    def step_size(self, position: int) -> Tuple[int, int, int]:
        """``(pass index, batch index, documents)`` of global step ``position``."""
        D, S = self.n_docs, self.minibatch
        p, b = locate_step(position, D, S)
        n = S if b < n_batches(D, S) - 1 else D - S * b
        return p, b, int(n)

    def n_pieces(self, position: int) -> int:
        """Read tasks (non-empty pieces) of step ``position``."""
        return len(piece_bounds(self.step_size(position)[2], self.pieces))

    def piece_rows(self, position: int, piece: int) -> List[Tuple[int, np.ndarray]]:
        """Piece ``piece`` of step ``position`` as ``[(shard index, rows), ...]`` in minibatch
        order."""
        return _step_pieces(self, int(position))[int(piece)]


class ReadTask:
    """One piece of a minibatch: ``(position, piece)`` of a :class:`ReadPlan`; its rows
    (``parts``: ``(shard file, row indices)`` in minibatch order) are derived where they are
    read."""
    __slots__ = ("position", "piece", "plan")

    def __init__(self, position: int, piece: int, plan: ReadPlan):
        self.position, self.piece, self.plan = int(position), int(piece), plan

    def __reduce__(self):
        return ReadTask, (self.position, self.piece, self.plan)

    def __repr__(self):
        return "ReadTask(position=%d, piece=%d)" % (self.position, self.piece)

    @property
    def parts(self) -> Tuple[Tuple[str, np.ndarray], ...]:
        return tuple((self.plan.files[s], rows)
                     for s, rows in self.plan.piece_rows(self.position, self.piece))

    @property
    def n_docs(self) -> int:
        return int(sum(len(r) for _, r in self.parts))


@dataclass
class StepPlan:
    position: int       # global step index (0-based minibatch of the seeded order)
    pass_index: int
    batch_index: int
    n_docs: int
    tasks: List[ReadTask] = field(default_factory=list)

    def bare(self) -> "StepPlan":
        """This step without its read tasks (what a DoFn that reads nothing carries)."""
        return StepPlan(self.position, self.pass_index, self.batch_index, self.n_docs)

    @property
    def read_plan(self) -> Optional[ReadPlan]:
        return self.tasks[0].plan if self.tasks else None


def _split_rows(members: List[Tuple[int, np.ndarray]], n_pieces: int
                ) -> List[List[Tuple[int, np.ndarray]]]:
    """Cut a minibatch ``[(shard, rows), ...]`` (minibatch order) into ``n_pieces`` runs of
    consecutive documents of nearly equal size."""
    total = sum(len(r) for _, r in members)
    cuts = piece_bounds(total, n_pieces)         # the in-process trainer's pieces
    n_pieces = len(cuts)
    bounds = [lo for lo, _ in cuts] + [cuts[-1][1]]
    out: List[List[Tuple[int, np.ndarray]]] = [[] for _ in range(n_pieces)]
    pos = 0
    for shard, rows in members:
        i = 0
        while i < len(rows):
            g = pos + i
            p = next(k for k in range(n_pieces) if bounds[k] <= g < bounds[k + 1])
            take = min(len(rows) - i, bounds[p + 1] - g)
            out[p].append((shard, rows[i:i + take]))
            i += take
        pos += len(rows)
    return [o for o in out if o]


@functools.lru_cache(maxsize=4)
def _pass_plan(sizes: Tuple[int, ...], seed: int, pass_index: int, minibatch: int):
    return plan_pass(sizes, seed, pass_index, minibatch)


@functools.lru_cache(maxsize=4)
def _shard_segments(sizes: Tuple[int, ...], seed: int, pass_index: int, minibatch: int,
                    shard: int):
    # consecutive steps read the same shards: their permutations are drawn once per process
    return _pass_plan(sizes, seed, pass_index, minibatch).shard_segments(shard)


@functools.lru_cache(maxsize=8)
def _step_pieces(plan: ReadPlan, position: int) -> List[List[Tuple[int, np.ndarray]]]:
    """The pieces of step ``position``: its members (``PassPlan.batch_members``, the rows
    the in-process stream gathers) cut by :func:`_split_rows`."""
    p, b, _ = plan.step_size(position)
    key = (plan.sizes, plan.seed, p, plan.minibatch)
    members = []
    for j in _pass_plan(*key).shards_of_batch(b):
        members.extend((seg.shard, seg.rows) for seg in _shard_segments(*key, j)
                       if seg.batch == b)
    return _split_rows(members, plan.pieces)


def plan_steps(files: Sequence[str], shard_sizes: Sequence[int], *, seed: int,
               minibatch: int, start: int, stop: int, pieces_per_minibatch: int
               ) -> List[StepPlan]:
    """The steps ``[start, stop)`` with their read tasks (rows derived when read)."""
    plan = ReadPlan(tuple(str(f) for f in files), tuple(int(n) for n in shard_sizes),
                    int(seed), int(minibatch), int(pieces_per_minibatch))
    out: List[StepPlan] = []
    for pos in range(int(start), int(stop)):
        p, b, n = plan.step_size(pos)
        out.append(StepPlan(pos, p, b, n, [ReadTask(pos, k, plan)
                                           for k in range(plan.n_pieces(pos))]))
    return out


# ------------------------------------------------------------------------------ shard cache

_SHARD_CACHE: "OrderedDict[Tuple[str, float, int], DocBatch]" = OrderedDict()
_SHARD_CACHE_SIZE = 2


def _read_shard_cached(path: str) -> DocBatch:
    """Whole shard as a DocBatch, cached per process (at most two shards in memory): the rows
    of a minibatch are spread over its shard, so the pieces of a window read the same shards."""
    key = paths.file_identity(path)
    hit = _SHARD_CACHE.get(key)
    if hit is not None:
        _SHARD_CACHE.move_to_end(key)
        return hit
    batch, nbytes = read_shard_counted(path)
    # what is really read: the Parquet bytes of every shard decoded (a cache hit reads none)
    beam_cost.report("read", 0.0, nbytes)
    traffic.record_in(nbytes, traffic.READ)
    _SHARD_CACHE[key] = batch
    while len(_SHARD_CACHE) > _SHARD_CACHE_SIZE:
        _SHARD_CACHE.popitem(last=False)
    return batch


def read_task(task: ReadTask) -> DocBatch:
    parts = []
    for path, rows in task.parts:
        shard = _read_shard_cached(path)
        if len(rows) and int(np.max(rows)) >= shard.n_docs:
            raise DataIntegrityError(
                "shard %s has %d rows but the plan needs row %d (was it rewritten "
                "during training?)" % (path, shard.n_docs, int(np.max(rows))))
        parts.append(gather(shard, rows))
    return parts[0] if len(parts) == 1 else DocBatch.concat(parts)
