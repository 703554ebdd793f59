"""Named fault points for the crash tests: a process dies (SIGKILL) where one is armed.

``LDABEAM_FAULT=<point>[:<n>[:<signal>]]`` in the environment kills the process at the n-th
(default first) arrival at ``fault_point(<point>)``; ``<signal>`` ``INT`` or ``TERM`` sends
that signal instead of SIGKILL (a Ctrl-C or a ``kill`` at that point, which the process may
handle). Unset -- always, outside the fault-injection tests
-- a fault point costs one dictionary lookup. The points:

* ``estep``            the trainer, after a minibatch's E-step, before its global step;
* ``publish-written``  a checkpoint's files are written, ``LATEST`` not yet;
* ``publish-pointer``  ``LATEST`` names the new checkpoint, older ones not yet pruned;
* ``prune``            between two deletions of old checkpoints;
* ``runlog``           half of a run-log record is written (a torn line is left);
* ``ended``            ``ldabeam train`` has written its end record and summary, its lease is
                       not yet released (a kill while the process exits);
* ``atomic-written``   a local file written atomically (``LocalFiles.write_atomic``: a
                       checkpoint's file, an export, a report page, a summary) is complete
                       under its temporary name, not yet renamed to its final one.
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
    point, _, rest = spec.partition(":")
    if point != name:
        return False
    nth = rest.partition(":")[0]
    _seen[name] = _seen.get(name, 0) + 1
    return _seen[name] == (int(nth) if nth else 1)


def _signal() -> int:
    """The signal ``LDABEAM_FAULT`` asks for (its third field), SIGKILL by default."""
    sig = (os.environ.get(ENV) or "").split(":")[2:3]
    return getattr(signal, "SIG" + sig[0].upper(), signal.SIGKILL) if sig else signal.SIGKILL


def die() -> None:
    """Send this process the signal ``LDABEAM_FAULT`` names (SIGKILL: it ends here; SIGINT or
    SIGTERM: its handler runs, as for a Ctrl-C or a kill arriving at this point)."""
    os.kill(os.getpid(), _signal())


def fault_point(name: str, before: Optional[Callable[[], None]] = None) -> None:
    """Die here if ``LDABEAM_FAULT`` arms this arrival (after running ``before``)."""
    if armed(name):
        if before is not None:
            before()
        die()
