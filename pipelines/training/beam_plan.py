"""Shard planning for the Beam trainer: which rows of which shard make up each piece of each
minibatch of a window (:func:`plan_steps`, from ``lda_core.training.ordering.plan_pass`` and the shard
row counts alone, so membership never depends on how Beam bundles the work), and reading a
piece's rows (:func:`read_task`; one cached shard per process)."""
from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import numpy as np

from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ read tasks

@dataclass(frozen=True)
class ReadTask:
    """One piece of a minibatch: rows of one or more shards (minibatch order)."""
    position: int                              # global step index of the minibatch
    piece: int                                 # piece index within the minibatch
    parts: Tuple[Tuple[str, np.ndarray], ...]  # (shard file, row indices)

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


def _split_rows(members: List[Tuple[int, np.ndarray]], n_pieces: int
                ) -> List[List[Tuple[int, np.ndarray]]]:
    """Cut a minibatch ``[(shard, rows), ...]`` (minibatch order) into ``n_pieces`` runs of
    consecutive documents of nearly equal size."""
    from lda_core.training.pieces import piece_bounds
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


def plan_steps(files: Sequence[str], shard_sizes: Sequence[int], *, seed: int,
               batch_size: int, start: int, stop: int, pieces_per_minibatch: int
               ) -> List[StepPlan]:
    """The read tasks of global steps ``[start, stop)`` (from ``plan_pass``)."""
    from lda_core.training.ordering import locate_step, n_batches, plan_pass
    D = int(sum(shard_sizes))
    B = n_batches(D, batch_size)
    out: List[StepPlan] = []
    pos = start
    while pos < stop:
        p, b0 = locate_step(pos, D, batch_size)
        last = min(stop, (p + 1) * B)          # this pass's part of the range
        plan = plan_pass(shard_sizes, seed, p, batch_size)
        members: Dict[int, List[Tuple[int, np.ndarray]]] = OrderedDict()
        b1 = last - p * B
        for seg in plan.iter_segments(b0):
            if seg.batch >= b1:
                break
            members.setdefault(seg.batch, []).append((seg.shard, seg.rows))
        for b in range(b0, b1):
            m = members.get(b, [])
            sp = StepPlan(p * B + b, p, b, int(sum(len(r) for _, r in m)))
            for k, piece in enumerate(_split_rows(m, pieces_per_minibatch)):
                sp.tasks.append(ReadTask(sp.position, k, tuple((files[s], np.asarray(r))
                                                             for s, r in piece)))
            out.append(sp)
        pos = last
    return out


# ------------------------------------------------------------------------------ shard cache

_SHARD_CACHE: "OrderedDict[Tuple[str, float, int], DocBatch]" = OrderedDict()
_SHARD_CACHE_SIZE = 2


def _read_shard_cached(path: str) -> DocBatch:
    """Whole shard as a DocBatch, cached per process (at most two shards in memory): the rows
    of a minibatch are spread over its shard, so the pieces of a window read the same shards."""
    from pipelines.ingest import dataset
    from pipelines.training.shard_stream import read_shard_counted
    if dataset.is_remote(path):
        key = (path, 0.0, 0)
    else:
        st = os.stat(path)
        key = (path, st.st_mtime, st.st_size)
    hit = _SHARD_CACHE.get(key)
    if hit is not None:
        _SHARD_CACHE.move_to_end(key)
        return hit
    batch, nbytes = read_shard_counted(path)
    from pipelines.training import beam_cost
    # what is really read: the Parquet bytes of every shard decoded (a cache hit reads none)
    beam_cost.report("read", 0.0, nbytes)
    _SHARD_CACHE[key] = batch
    while len(_SHARD_CACHE) > _SHARD_CACHE_SIZE:
        _SHARD_CACHE.popitem(last=False)
    return batch


def read_task(task: ReadTask) -> DocBatch:
    from pipelines.training.shard_stream import gather
    parts = []
    for path, rows in task.parts:
        shard = _read_shard_cached(path)
        if len(rows) and int(np.max(rows)) >= shard.n_docs:
            raise DataIntegrityError(
                "shard %s has %d rows but the plan needs row %d (was it rewritten "
                "during training?)" % (path, shard.n_docs, int(np.max(rows))))
        parts.append(gather(shard, rows))
    return parts[0] if len(parts) == 1 else DocBatch.concat(parts)
