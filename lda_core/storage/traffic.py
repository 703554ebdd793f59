"""What this process moves: one byte counter for every transfer of training data, and an
optional bandwidth throttle.

Every place a training worker moves bytes (a state loaded or written, statistics encoded,
spilled or read back, a step's info file, the Parquet rows of an E-step) calls
:func:`record_in` or :func:`record_out` with the byte count and the kind (``what``: one of
:data:`KINDS`, or another short name). The counts are kept per process:

* :func:`totals`: everything this process moved, per direction and kind;
* per step: a step's work runs inside ``with step(key):`` (``key``: anything hashable that
  names the step, e.g. ``(run, position)``); bytes recorded by the thread inside the block are
  charged to ``key``. Bytes a thread records *outside* any block are charged by direction:
  what it reads goes to the thread's next step (a worker decodes a step's inputs before the
  step's code runs), what it writes to its previous step (a worker encodes a step's outputs
  when its bundle ends). :func:`step_bytes` gives the bytes charged to a key so far in this
  process, and :func:`take` the bytes charged since the last take (the mark moves).
  A listener (:func:`set_listener`) is called with ``(key, StepBytes)`` after each charge:
  the Beam workers report their per-step counts from there (``pipelines.training.beam_cost``).

The throttle emulates a network on one machine: with a bandwidth set (environment variable
:data:`ENV`, bytes per second, e.g. ``12.5e6``; read once per process, so local Beam worker
processes inherit it; or :func:`set_bandwidth`), every counted transfer is followed by a
sleep of ``nbytes / bandwidth`` seconds in the thread that made it.
"""
from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from typing import Callable, Dict, Hashable, NamedTuple, Optional

from lda_core.errors import UsageError

ENV = "LDABEAM_EMULATE_BANDWIDTH"

STATE = "state"            # state rows (a scratch state, a checkpoint's arrays)
SCALARS = "scalars"        # the small part of a state (K-vectors, scalars, counters)
STATISTICS = "statistics"  # sufficient statistics (encoded, spilled, read back)
INFO = "info"              # a step's info hand-over (JSON)
READ = "read"              # the E-step's Parquet rows
KINDS = (STATE, SCALARS, STATISTICS, INFO, READ)

# per-step buckets kept per process (older keys are dropped: a worker runs steps in order)
MAX_STEPS = 4096


class StepBytes(NamedTuple):
    """Bytes in and out, per kind."""
    inbound: Dict[str, int]
    outbound: Dict[str, int]

    @property
    def n_in(self) -> int:
        return sum(self.inbound.values())

    @property
    def n_out(self) -> int:
        return sum(self.outbound.values())


def _empty() -> StepBytes:
    return StepBytes({}, {})


def _add(table: Dict[str, int], what: str, n: int) -> None:
    table[what] = table.get(what, 0) + n


class _Thread(threading.local):
    def __init__(self):
        self.current: Optional[Hashable] = None   # the step whose block the thread is in
        self.previous: Optional[Hashable] = None  # the last step the thread was in
        self.pending_in: Dict[str, int] = {}      # read outside a block: the next step's
        self.mark: Dict[Hashable, StepBytes] = {}


_LOCK = threading.Lock()
_TOTAL = _empty()
_STEPS: "OrderedDict[Hashable, StepBytes]" = OrderedDict()
_THREAD = _Thread()
_UNSET = object()
_BANDWIDTH = [_UNSET]                 # bytes per second, None (no throttle) or unread
_SLEEP: list = [time.sleep]
_LISTENER: list = [None]


def parse_bandwidth(text: Optional[str]) -> Optional[float]:
    """``text`` (bytes per second) as a positive float; None for empty/unset."""
    if text is None or not str(text).strip():
        return None
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v > 0 or v == float("inf"):
        raise UsageError("%s=%r: give the emulated bandwidth in bytes per second, a positive "
                         "number such as 12.5e6, or unset it" % (ENV, text))
    return v


def bandwidth() -> Optional[float]:
    """The throttle's bandwidth (bytes per second), or None; the environment is read once."""
    if _BANDWIDTH[0] is _UNSET:
        _BANDWIDTH[0] = parse_bandwidth(os.environ.get(ENV))
    return _BANDWIDTH[0]


def set_bandwidth(bytes_per_second: Optional[float],
                  sleep: Optional[Callable[[float], None]] = None) -> None:
    """Set (or with None remove) the throttle of this process; ``sleep``: the function that
    waits (default ``time.sleep``; tests pass a fake clock's)."""
    _BANDWIDTH[0] = (None if bytes_per_second is None
                     else parse_bandwidth(str(bytes_per_second)))
    _SLEEP[0] = sleep or time.sleep


def set_listener(fn: Optional[Callable[[Hashable, StepBytes], None]]) -> None:
    """Call ``fn(key, step_bytes(key))`` after bytes are charged to a step (None: no one)."""
    _LISTENER[0] = fn


def record_in(nbytes: int, what: str) -> None:
    """This process received ``nbytes`` of kind ``what``."""
    _record(int(nbytes), what, True)


def record_out(nbytes: int, what: str) -> None:
    """This process sent (wrote) ``nbytes`` of kind ``what``."""
    _record(int(nbytes), what, False)


def _record(n: int, what: str, inbound: bool) -> None:
    if n <= 0:
        return
    th = _THREAD
    key = th.current
    if key is None:
        if inbound:
            _add(th.pending_in, what, n)
        else:
            key = th.previous
    with _LOCK:
        _add(_TOTAL.inbound if inbound else _TOTAL.outbound, what, n)
        charged = _charge(key, what, n, inbound) if key is not None else None
    if charged is not None and _LISTENER[0] is not None:
        _LISTENER[0](key, charged)
    bw = bandwidth()
    if bw:
        _SLEEP[0](n / bw)


def _bucket(key: Hashable) -> StepBytes:
    b = _STEPS.get(key)
    if b is None:
        b = _STEPS[key] = _empty()
        while len(_STEPS) > MAX_STEPS:
            _STEPS.popitem(last=False)
    return b


def _charge(key: Hashable, what: str, n: int, inbound: bool) -> StepBytes:
    b = _bucket(key)
    _add(b.inbound if inbound else b.outbound, what, n)
    return StepBytes(dict(b.inbound), dict(b.outbound))


class step:
    """``with step(key):`` charges what this thread moves inside the block to ``key`` (and
    what it read since its last block; module docstring). Blocks may nest: the inner key
    applies inside it."""

    def __init__(self, key: Hashable):
        self.key = key

    def __enter__(self):
        th = _THREAD
        self.outer = th.current
        th.current = self.key
        pending, th.pending_in = th.pending_in, {}
        if pending:
            with _LOCK:
                for what, n in pending.items():
                    charged = _charge(self.key, what, n, True)
            if _LISTENER[0] is not None:
                _LISTENER[0](self.key, charged)
        return self

    def __exit__(self, *exc):
        th = _THREAD
        th.current = self.outer
        th.previous = self.key
        return False


def step_bytes(key: Hashable) -> StepBytes:
    """The bytes this process has charged to step ``key`` so far."""
    with _LOCK:
        b = _STEPS.get(key)
        return StepBytes(dict(b.inbound), dict(b.outbound)) if b else _empty()


def take(key: Hashable) -> StepBytes:
    """The bytes charged to ``key`` in this process since this thread's last ``take(key)``."""
    now = step_bytes(key)
    marks = _THREAD.mark
    last = marks.pop(key, _empty())
    marks[key] = now
    while len(marks) > MAX_STEPS:
        del marks[next(iter(marks))]
    return StepBytes({k: v - last.inbound.get(k, 0) for k, v in now.inbound.items()
                      if v - last.inbound.get(k, 0)},
                     {k: v - last.outbound.get(k, 0) for k, v in now.outbound.items()
                      if v - last.outbound.get(k, 0)})


def totals() -> StepBytes:
    """Everything this process has moved, per direction and kind."""
    with _LOCK:
        return StepBytes(dict(_TOTAL.inbound), dict(_TOTAL.outbound))


def reset() -> None:
    """Forget every count of this process (tests, benchmarks between runs)."""
    with _LOCK:
        _TOTAL.inbound.clear()
        _TOTAL.outbound.clear()
        _STEPS.clear()
    _THREAD.current = _THREAD.previous = None
    _THREAD.pending_in = {}
    _THREAD.mark = {}
