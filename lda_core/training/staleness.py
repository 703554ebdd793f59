"""Pipelined steps: the E-step of step t reads the state after step t − 1 − s.

With staleness s = 0 (the default) every minibatch's E-step reads the state the previous step
made, as the papers' algorithms do. With s = 1 the E-step of minibatch t + 1 reads the state
after step t − 1, so on a cluster it can run while the owners of the word blocks apply step t:
one barrier per step instead of two (``docs/cluster.md``). The statistics are a step older
than the state they are applied to, as in a delayed stochastic gradient; the learning rate and
every other part of the step are unchanged.

The result depends on (seed, S, P, B, s) only. Every trainer does exactly this:

* minibatch m (0-based position in the seeded order) is E-stepped with the state after
  ``max(m − s, a)`` minibatches, where ``a`` is the position the run starts from when it has
  no statistics in flight (a fresh run, or a checkpoint written without them);
* a checkpoint at position p carries the statistics in flight: those of minibatches
  p, ..., p + s − 1, each computed with the state after ``max(m − s, a)`` minibatches
  (:class:`lda_core.storage.pending.Pending`, stored in the checkpoint), so a resumed run
  continues with the same bits as an uninterrupted one.

s is a run parameter recorded in every checkpoint's run information
(``info["run"]["staleness"]``); a resumed run keeps it and refuses a different explicit value
(:func:`resolve_staleness`). Checkpoints written before it was recorded resume with s = 0.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from lda_core.errors import UsageError

RUN_KEY = "staleness"
DEFAULT_STALENESS = 0
MAX_STALENESS = 3


def check_staleness(value: Any, what: str = "staleness") -> int:
    try:
        s = int(value)
    except (TypeError, ValueError):
        s = -1
    if isinstance(value, bool) or s != value or not 0 <= s <= MAX_STALENESS:
        raise UsageError("%s must be an integer in [0, %d], got %r" % (what, MAX_STALENESS,
                                                                        value))
    return s


def recorded_staleness(run_info: Optional[Dict[str, Any]], resumed: bool) -> Optional[int]:
    """The s recorded in a checkpoint's run information; 0 for a resumed run whose checkpoint
    predates the record; None for a fresh run."""
    if run_info and run_info.get(RUN_KEY) is not None:
        return check_staleness(run_info[RUN_KEY], "the checkpoint's " + RUN_KEY)
    return 0 if resumed else None


def resolve_staleness(explicit: Optional[int], recorded: Optional[int],
                      default: int = DEFAULT_STALENESS, option: str = "--staleness") -> int:
    """s for this run: the recorded one when resuming (a different explicit value is
    refused: it would change every later step), else the explicit one, else ``default``."""
    if explicit is not None:
        explicit = check_staleness(explicit, option)
    if recorded is not None:
        if explicit is not None and explicit != recorded:
            raise UsageError("%s %d: this run was trained with staleness %d (recorded in its "
                             "checkpoint); resume without %s or with %s %d"
                             % (option, explicit, recorded, option, option, recorded))
        return int(recorded)
    return explicit if explicit is not None else check_staleness(default, "default staleness")


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
