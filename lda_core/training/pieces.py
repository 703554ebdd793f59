"""The fixed reduction shape of a minibatch: P pieces, summed in piece order.

A minibatch of ``n`` documents (in the seeded order of :mod:`lda_core.training.ordering`) is cut
into ``P`` runs of consecutive documents, piece ``k`` being positions
``[n*k // P, n*(k+1) // P)`` (:func:`piece_bounds`). Each piece's E-step statistics are computed
on their own and the pieces are summed in piece order (:func:`merge_in_piece_order`). Every
trainer does exactly this -- the in-process loop here, the Beam trainer with one read task per
piece -- so the float64 sums, and hence λ (online VB) or N^Φ (SCVB0), depend on
(seed, minibatch size, P) only: not on the runner, the number of workers, their threads, a retry
or a resume at another worker count.

P is a run parameter: recorded in the run information of every checkpoint
(``info["run"]["pieces_per_minibatch"]``); a resumed run uses the recorded value and refuses a
different explicit one (:func:`resolve_pieces`). Checkpoints written before P was recorded
resume with P = 1 (what the in-process trainer did then).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from lda_core.algorithms.params import check_int
from lda_core.training import run_params

# Pieces per minibatch when none is given and none is recorded, on every local runner (the
# in-process trainer, Beam in-process, local worker processes), whatever the worker count, so
# the bits never follow the runner. Two: one piece per process of two local workers, each on
# one core, so defaults give parallelism and exactness together; the in-process trainer runs
# both pieces in one E-step (an algorithm's local_step_pieces: SCVB0's kernel sums each piece
# apart in the same parallel region) rather than one after the other. More pieces cost every
# runner: each piece's statistics cover most of the minibatch's words, so every piece adds a
# block to zero, sum, spill and read (docs/beam-training.md, "The reduction shape"). A remote
# runner's first run takes at least REMOTE_MIN_PIECES, or one per worker it may use, so the
# E-step spreads over the workers.
DEFAULT_PIECES = 2
REMOTE_MIN_PIECES = 4
# Pieces of runs whose checkpoints predate the recorded value (the in-process trainer's one).
LEGACY_PIECES = 1
MAX_PIECES = 4096
RUN_KEY = "pieces_per_minibatch"


def check_pieces(value: Any, what: str = "pieces_per_minibatch") -> int:
    return check_int(what, value, 1, MAX_PIECES)


def recorded_pieces(run_info: Optional[Dict[str, Any]], resumed: bool) -> Optional[int]:
    """The P recorded in a checkpoint's run information; for a resumed run whose checkpoint
    predates the record, :data:`LEGACY_PIECES`; None for a fresh run."""
    return run_params.recorded(run_info, RUN_KEY, 1, MAX_PIECES, resumed, LEGACY_PIECES)


def resolve_pieces(explicit: Optional[int], recorded: Optional[int],
                   default: int = DEFAULT_PIECES, option: str = "--pieces") -> int:
    """P for this run: the recorded one when resuming (an explicit different value is refused:
    it would change the sums mid-run), else the explicit one, else ``default``."""
    return run_params.resolve(explicit, recorded, default, 1, MAX_PIECES, option,
                              "%d pieces per minibatch")


def piece_bounds(n_docs: int, pieces: int) -> List[Tuple[int, int]]:
    """Document ranges ``[(lo, hi), ...]`` of the non-empty pieces of an ``n_docs`` minibatch
    (fewer than ``pieces`` when the minibatch has fewer documents)."""
    n, p = int(n_docs), max(1, int(pieces))
    p = max(1, min(p, n))
    b = [n * k // p for k in range(p + 1)]
    return [(b[k], b[k + 1]) for k in range(p) if b[k + 1] > b[k]] or [(0, n)]


def local_step_pieces(algorithm, batch, pieces: int, **kw):
    """The E-step statistics of ``batch`` in ``pieces`` pieces (:func:`piece_bounds`) summed
    left to right with ``SuffStats.merge``, the first piece's object being the total (as the
    Beam trainer's combine does). An algorithm whose class has a ``local_step_pieces(batch,
    bounds)`` gives those sums from one E-step over the batch (an object that only forwards
    to an algorithm, e.g. one wrapping its ``local_step``, gets the pieces' own calls)."""
    bounds = piece_bounds(batch.n_docs, pieces)
    if len(bounds) == 1:
        return algorithm.local_step(batch, **kw)
    if getattr(type(algorithm), "local_step_pieces", None) is not None and not kw:
        return algorithm.local_step_pieces(batch, bounds)
    total = None
    for lo, hi in bounds:
        st = algorithm.local_step(batch.take(np.arange(lo, hi)), **kw)
        total = st if total is None else total.merge(st)
    return total
