"""Pipelined steps: the E-step of step t reads the state after step t − 1 − s.

With staleness s = 0 (the default) every minibatch's E-step reads the state the previous step
made, as the papers' algorithms do. With s = 1 the E-step of minibatch t + 1 reads the state
after step t − 1, so on a cluster it can run while the owners of the word blocks apply step t:
one barrier per step instead of two (``docs/cluster.md``). The statistics are a step older
than the state they are applied to, as in a delayed stochastic gradient; the learning rate and
every other part of the step are unchanged.

The first steps of a run move the topics most, and there a step-old state costs held-out
score that later passes do not win back (``benchmarks/results/staleness_bench.json``:
docs/training.md, *Pipelined steps*). So the first W minibatches (the warm-up, default
:data:`DEFAULT_WARMUP` when s > 0) run with s = 0, and the pipeline fills from minibatch W on.

The result depends on (seed, S, P, B, s, W) only. Every trainer does exactly this
(:func:`version_read`, :func:`in_flight`):

* minibatch m (0-based position in the seeded order) is E-stepped with the state after m
  minibatches when m < W, else with the state after ``max(m − s, W, a)`` minibatches, where
  ``a`` is the position the run starts from when it has no statistics in flight (a fresh run,
  or a checkpoint written without them);
* a checkpoint at position p carries the statistics in flight: those of the minibatches
  m ≥ p whose E-step read a state before p -- p, ..., p + s − 1 once p > W, none before
  (:class:`lda_core.storage.pending.Pending`, stored in the checkpoint), so a resumed run
  continues with the same bits as an uninterrupted one.

s and W are run parameters recorded in every checkpoint's run information
(``info["run"]["staleness"]``, ``info["run"]["staleness_warmup"]``); a resumed run keeps them
and refuses a different explicit value (:func:`resolve_staleness`, :func:`resolve_warmup`).
Checkpoints written before they were recorded resume with s = 0, and with W = 0 when they
record s but not W.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from lda_core.algorithms.params import check_int
from lda_core.errors import UsageError
from lda_core.training import run_params

RUN_KEY = "staleness"
WARMUP_KEY = "staleness_warmup"
DEFAULT_STALENESS = 0
MAX_STALENESS = 3
# minibatches run with s = 0 before the pipeline fills (the staleness benchmark's W)
DEFAULT_WARMUP = 32


def check_staleness(value: Any, what: str = "staleness") -> int:
    return check_int(what, value, 0, MAX_STALENESS)


def recorded_staleness(run_info: Optional[Dict[str, Any]], resumed: bool) -> Optional[int]:
    """The s recorded in a checkpoint's run information; 0 for a resumed run whose checkpoint
    predates the record; None for a fresh run."""
    return run_params.recorded(run_info, RUN_KEY, 0, MAX_STALENESS, resumed, 0)


def resolve_staleness(explicit: Optional[int], recorded: Optional[int],
                      default: int = DEFAULT_STALENESS, option: str = "--staleness") -> int:
    """s for this run: the recorded one when resuming (a different explicit value is
    refused: it would change every later step), else the explicit one, else ``default``."""
    return run_params.resolve(explicit, recorded, default, 0, MAX_STALENESS, option,
                              "staleness %d")


def check_pipelinable(algorithm, staleness: int) -> None:
    """UsageError unless ``algorithm`` can run with ``staleness``: s > 0 needs minibatch steps
    (a stream-order sampler has no E-step apart from its update; batch VB applies one step
    per pass)."""
    if not staleness:
        return
    cls = type(algorithm)
    if getattr(cls, "sequential", False) or getattr(cls, "accumulates_passes", False) \
            or getattr(cls, "stats_type", None) is None:
        raise UsageError("--staleness %d needs an algorithm with minibatch steps (online-vb, "
                         "scvb0, sparse-gibbs-vb); %s: give --staleness 0"
                         % (staleness, getattr(algorithm, "name", cls.__name__)))


def recorded_warmup(run_info: Optional[Dict[str, Any]], resumed: bool) -> Optional[int]:
    """The W recorded in a checkpoint's run information; 0 for a resumed run whose checkpoint
    records a staleness but no warm-up (it ran without one); None for a fresh run."""
    return run_params.recorded(run_info, WARMUP_KEY, 0, None, resumed, 0)


def resolve_warmup(explicit: Optional[int], recorded: Optional[int],
                   option: str = "--staleness-warmup") -> int:
    """W for this run: the recorded one when resuming (a different explicit value is refused),
    else the explicit one, else :data:`DEFAULT_WARMUP`."""
    return run_params.resolve(explicit, recorded, DEFAULT_WARMUP, 0, None, option,
                              "a staleness warm-up of %d minibatches")


def warmup_of(run_info: Dict[str, Any]) -> int:
    """The W of a run whose information holds its staleness: the recorded W, else
    :data:`DEFAULT_WARMUP` (0 when s = 0: nothing to warm up)."""
    if not int(run_info.get(RUN_KEY) or 0):
        return 0
    w = run_info.get(WARMUP_KEY)
    return DEFAULT_WARMUP if w is None else check_int(WARMUP_KEY, w, 0)


def version_read(m: int, staleness: int, warmup: int, start: int) -> int:
    """The position whose state the E-step of minibatch ``m`` reads (module docstring);
    ``start``: the position the run or window started from without statistics in flight."""
    if not staleness or m < warmup:
        return m
    return max(m - staleness, warmup, start)


def in_flight(position: int, staleness: int, warmup: int) -> int:
    """How many minibatches from ``position`` on have statistics computed before step
    ``position`` (the statistics a checkpoint at ``position`` carries): s once past the
    warm-up, else none."""
    return int(staleness) if staleness and position > warmup else 0
