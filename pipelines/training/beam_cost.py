"""Per-phase cost of the Beam trainer's steps, measured where the work runs.

Workers (other processes, or other machines) report each phase of a step
(:data:`lda_core.training.phase_times.TIMING_PHASES`: state delivery, read, E-step, statistics
encode/decode/combine, global step, publish) as Beam counters in namespace
:data:`NAMESPACE`: ``<phase>_us`` (microseconds) and ``<phase>_bytes``. The first E-step
start and the last global-step end of a window are distributions of Unix milliseconds
(``first_estep_ms`` min, ``last_step_ms`` max), from which the driver derives the
pipeline's start-up and finish. The driver reads them after ``wait_until_finish()`` and writes
one ``timing`` record per window (:func:`window_times`, :func:`lda_core.training.phase_times.timing_record`).

Bytes moved per step (:mod:`lda_core.storage.traffic`): a worker runs each step's work inside
``with step(run, position):``; every byte it records is charged to that step in the process,
and the process's running totals for the step are reported as distributions
``step_in@<position>``, ``step_out@<position>`` and ``step_reduce_in@<position>`` (the
statistics received: what a reducer, a block owner, takes in). A distribution's maximum is then
the most any one process moved in that step (its last report is its total); the driver takes
the mean over the window's steps (:func:`window_times`: ``bytes.in_per_worker_step``,
``bytes.out_per_worker_step``, ``bytes.reducer_in_step`` of the ``timing`` record).
"""
from __future__ import annotations

import time
from typing import Any, Dict, Optional

from apache_beam.metrics import Metrics

from lda_core.storage import traffic
from lda_core.training.phase_times import PhaseTimes

NAMESPACE = "ldabeam_cost"
FIRST_ESTEP = "first_estep_ms"
LAST_STEP = "last_step_ms"
# per-step traffic distributions: "<prefix><position>" (module docstring)
STEP_IN, STEP_OUT, STEP_REDUCE_IN = "step_in@", "step_out@", "step_reduce_in@"
# what one word block's owner moved in a step (the word-sharded exchange): in, out
OWNER_IN, OWNER_OUT = "owner_in@", "owner_out@"
_PREFIXES = (STEP_IN, STEP_OUT, STEP_REDUCE_IN, OWNER_IN, OWNER_OUT)
# the kinds of bytes a reducer (block owner) receives
REDUCER_KINDS = (traffic.STATISTICS,)


def step(run_key: str, position: int):
    """``with step(run_key, position):`` charges the bytes this thread moves to that step."""
    return traffic.step((run_key, int(position)))


def block_step(run_key: str, position: int, block: int):
    """``with block_step(run_key, position, block):`` charges the bytes this thread moves to
    the owner of word block ``block`` in that step (reported per owner: what it received as
    the statistics of its block is the step's reducer input, :data:`STEP_REDUCE_IN`)."""
    return traffic.step((run_key, int(position), int(block)))


def _report_step(key, moved: "traffic.StepBytes") -> None:
    """The traffic listener: this process's totals so far for step ``key`` (a block owner's
    for a :func:`block_step` key)."""
    if not isinstance(key, tuple) or len(key) not in (2, 3):
        return
    pos = int(key[1])
    if len(key) == 3:
        red = sum(moved.inbound.get(k, 0) for k in REDUCER_KINDS)
        for prefix, n in ((OWNER_IN, moved.n_in), (OWNER_OUT, moved.n_out),
                          (STEP_REDUCE_IN, red)):
            if n:
                Metrics.distribution(NAMESPACE, prefix + str(pos)).update(n)
        return
    if moved.n_in:
        Metrics.distribution(NAMESPACE, STEP_IN + str(pos)).update(moved.n_in)
    if moved.n_out:
        Metrics.distribution(NAMESPACE, STEP_OUT + str(pos)).update(moved.n_out)
    red = sum(moved.inbound.get(k, 0) for k in REDUCER_KINDS)
    if red:
        Metrics.distribution(NAMESPACE, STEP_REDUCE_IN + str(pos)).update(red)


traffic.set_listener(_report_step)


def report(phase: str, seconds: float, nbytes: Optional[int] = None) -> None:
    """Add ``seconds`` (and ``nbytes``) to ``phase`` of the current window."""
    Metrics.counter(NAMESPACE, phase + "_us").inc(int(seconds * 1e6))
    if nbytes is not None:
        Metrics.counter(NAMESPACE, phase + "_bytes").inc(int(nbytes))


def mark(name: str) -> None:
    """Record now (Unix ms) under ``name`` (:data:`FIRST_ESTEP`, :data:`LAST_STEP`)."""
    Metrics.distribution(NAMESPACE, name).update(int(time.time() * 1000))


class timed:
    """``with timed(phase): ...`` reports the block's seconds to ``phase``."""

    def __init__(self, phase: str, nbytes: Optional[int] = None):
        self.phase, self.nbytes = phase, nbytes

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        report(self.phase, time.perf_counter() - self.t0, self.nbytes)


def query(result) -> Dict[str, Any]:
    """This namespace's counters and distributions of a finished pipeline:
    ``{"us": {phase: int}, "bytes": {phase: int}, "first_estep_ms": .., "last_step_ms": ..,
    "steps": {position: (max bytes in, max out, max reducer in)}}``."""
    out: Dict[str, Any] = {"us": {}, "bytes": {}, "steps": {}}
    try:
        res = result.metrics().query()
    except Exception:  # pragma: no cover - runner-specific
        return out
    for c in res.get("counters", []):
        if c.key.metric.namespace != NAMESPACE:
            continue
        v = int((c.committed if c.committed is not None else c.attempted) or 0)
        name = c.key.metric.name
        for suffix, table in (("_us", out["us"]), ("_bytes", out["bytes"])):
            if name.endswith(suffix):
                phase = name[:-len(suffix)]
                table[phase] = table.get(phase, 0) + v
    for d in res.get("distributions", []):
        if d.key.metric.namespace != NAMESPACE:
            continue
        v = d.committed if d.committed is not None else d.attempted
        if v is None or not v.count:
            continue
        name = d.key.metric.name
        for i, prefix in enumerate(_PREFIXES):
            if name.startswith(prefix):
                row = out["steps"].setdefault(int(name[len(prefix):]), [0] * len(_PREFIXES))
                row[i] = max(row[i], int(v.max))
        if name == FIRST_ESTEP:
            out[name] = min(out.get(name, v.min), v.min)
        elif name == LAST_STEP:
            out[name] = max(out.get(name, v.max), v.max)
    return out


def window_times(costs: Dict[str, Any], t_build: float, t_run: float,
                 t_end: float) -> PhaseTimes:
    """The window's :class:`PhaseTimes` from the workers' costs and the driver's clock:
    ``t_build`` .. ``t_run`` built the graph, ``t_run`` .. ``t_end`` ran it."""
    times = PhaseTimes()
    times.add("pipeline_build", t_run - t_build)
    for phase, us in costs.get("us", {}).items():
        times.add(phase, us / 1e6, costs.get("bytes", {}).get(phase))
    first, last = costs.get(FIRST_ESTEP), costs.get(LAST_STEP)
    if first is not None:
        times.add("pipeline_start", max(0.0, first / 1000.0 - t_run))
    if last is not None:
        times.add("pipeline_finish", max(0.0, t_end - last / 1000.0))
    for pos, row in costs.get("steps", {}).items():
        times.add_step_traffic(pos, *row)
    return times
