"""Named fault points for the crash tests: a process dies (SIGKILL) where one is armed.

``LDABEAM_FAULT=<point>[:<n>]`` in the environment kills the process at the n-th (default
first) arrival at ``fault_point(<point>)``. Unset -- always, outside the fault-injection tests
-- a fault point costs one dictionary lookup. The points:

* ``estep``            the trainer, after a minibatch's E-step, before its global step;
* ``publish-written``  a checkpoint's files are written, ``LATEST`` not yet;
* ``publish-pointer``  ``LATEST`` names the new checkpoint, older ones not yet pruned;
* ``prune``            between two deletions of old checkpoints;
* ``runlog``           half of a run-log record is written (a torn line is left);
* ``ended``            ``ldabeam train`` has written its end record and summary, its lease is
                       not yet released (a kill while the process exits).
"""
from __future__ import annotations

import os
import signal
from typing import Callable, Dict, Optional

ENV = "LDABEAM_FAULT"
_seen: Dict[str, int] = {}


def armed(name: str) -> bool:
    """True when this arrival at point ``name`` is the one ``LDABEAM_FAULT`` asks to die at
    (each call counts as one arrival)."""
    spec = os.environ.get(ENV)
    if not spec:
        return False
    point, _, nth = spec.partition(":")
    if point != name:
        return False
    _seen[name] = _seen.get(name, 0) + 1
    return _seen[name] == (int(nth) if nth else 1)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def fault_point(name: str, before: Optional[Callable[[], None]] = None) -> None:
    """Die here if ``LDABEAM_FAULT`` arms this arrival (after running ``before``)."""
    if armed(name):
        if before is not None:
            before()
        die()
