"""Integer run parameters that are part of a run's result (pieces P, staleness s, its warm-up
W): checked, read from a checkpoint's run information, and resolved against what the user
gives, by one rule for all of them.

A resumed run keeps the recorded value and refuses a different explicit one (it would change
every later step); a fresh run takes the explicit value, else the default. A checkpoint
written before a parameter was recorded resumes with the value those runs had (``legacy``).
The minibatch size S is read by :func:`recorded_minibatch`, which also reads where checkpoints
written before S was stored once kept it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from lda_core.algorithms.params import check_int
from lda_core.errors import UsageError


def recorded(run_info: Optional[Dict[str, Any]], key: str, lo: int, hi: Optional[int],
             resumed: bool, legacy: int) -> Optional[int]:
    """The value recorded under ``key`` in a checkpoint's run information; ``legacy`` for a
    resumed run whose checkpoint predates the record; None for a fresh run."""
    if run_info and run_info.get(key) is not None:
        return check_int("the checkpoint's " + key, run_info[key], lo, hi)
    return legacy if resumed else None


def resolve(explicit: Optional[int], recorded_value: Optional[int], default: int, lo: int,
            hi: Optional[int], option: str, trained_with: str) -> int:
    """The value for this run (module docstring). ``trained_with`` % value says what the run
    was trained with, e.g. ``"%d pieces per minibatch"``."""
    if explicit is not None:
        explicit = check_int(option, explicit, lo, hi)
    if recorded_value is not None:
        if explicit is not None and explicit != recorded_value:
            raise UsageError("%s %d: this run was trained with %s (recorded in its "
                             "checkpoint); resume without %s or with %s %d"
                             % (option, explicit, trained_with % recorded_value, option,
                                option, recorded_value))
        return int(recorded_value)
    return explicit if explicit is not None else check_int("default " + option, default, lo,
                                                           hi)


# the minibatch size S in a checkpoint's run information: the one place a checkpoint records it
MINIBATCH_KEY = "minibatch"
# where checkpoints written before S was recorded only there also kept it: the algorithm's
# parameters, as ``batch_size``
LEGACY_MINIBATCH_PARAM = "batch_size"


def recorded_minibatch(run_info: Optional[Dict[str, Any]],
                       params: Optional[Dict[str, Any]] = None) -> Optional[int]:
    """The minibatch size S a checkpoint was trained with: its run information's
    ``minibatch``, else (a checkpoint written before S was stored once) its algorithm
    parameters' ``batch_size``; None when it records neither. This is the only reader of the
    older key."""
    for where, key, record in (("run information", MINIBATCH_KEY, run_info),
                               ("parameters", LEGACY_MINIBATCH_PARAM, params)):
        if record and record.get(key) is not None:
            return check_int("the checkpoint's %s' %s" % (where, key), record[key], 1)
    return None


def run_info_of(state) -> Dict[str, Any]:
    """A checkpoint's run information (``info["run"]``, a copy) with its minibatch size under
    :data:`MINIBATCH_KEY` wherever the checkpoint recorded it (:func:`recorded_minibatch`), so a
    model loaded from an older checkpoint publishes S in the one place."""
    run = dict((state.info or {}).get("run") or {})
    s = recorded_minibatch(run, state.params)
    if s is not None:
        run[MINIBATCH_KEY] = s
    return run
