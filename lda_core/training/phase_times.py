"""Per-phase step costs: what every runner reports in its ``timing`` run-log records.

The in-process trainer times its phases directly; the Beam runners gather the workers' costs
(:mod:`pipelines.training.beam_cost`) into the same :class:`PhaseTimes`. The record itself is built here,
in one place (:func:`timing_record`), and summed over a run by :func:`sum_timing`.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Optional

# the phases of a step whose cost every runner reports in its ``timing`` records (seconds;
# ``*_bytes`` counts go to the record's ``bytes``). Worker-side phases are summed over the
# workers; ``estep`` over the pieces of each minibatch.
TIMING_PHASES = (
    "pipeline_build",   # driver: building the window's pipeline graph
    "pipeline_start",   # from run() to the first E-step of the window
    "pipeline_finish",  # from the window's last global step to the end of run()
    "state_delivery",   # workers loading a state version (file or object store)
    "read",             # reading the minibatch's rows from the shards
    "estep",            # local_step (the E-step)
    "stats_encode",     # encoding (and spilling) the statistics of a piece
    "stats_decode",     # decoding (loading) spilled or shipped statistics
    "stats_combine",    # merging the pieces of a minibatch
    "stats_wait",       # a worker waiting for the pieces other workers compute
    "global_step",      # global_step (the M-step)
    "publish",          # handing state t to the next step's readers (scratch file)
    "checkpoint",       # driver: publishing the window's checkpoint
)

# bytes moved per step (lda_core.storage.traffic), in a ``timing`` record's ``bytes``: the most
# any worker process took in / sent out in a step, and the most statistics any reducer (block
# owner) received in a step, each the mean over the record's steps -- per step, not summed
# like the phases' bytes (sum_timing weighs them by the steps)
STEP_BYTES = ("in_per_worker_step", "out_per_worker_step", "reducer_in_step",
              "owner_in_step", "owner_out_step")


class PhaseTimes:
    """Seconds (and bytes) per phase, summed over a run's or a window's steps
    (:data:`TIMING_PHASES`); :meth:`record` is its ``timing`` run-log record."""

    def __init__(self):
        self.seconds: Dict[str, float] = {}
        self.nbytes: Dict[str, int] = {}
        # step position -> [max bytes in, max out, max reducer in] over the worker processes
        self.step_traffic: Dict[int, list] = {}

    def add_step_traffic(self, position: int, n_in: int, n_out: int, reducer_in: int,
                         owner_in: int = 0, owner_out: int = 0) -> None:
        """The most one worker process moved in step ``position`` (in, out), the most
        statistics one reducer received, and the most one word block's owner moved (in, out;
        the word-sharded exchange) -- maxima over what is added for the step."""
        row = self.step_traffic.setdefault(int(position), [0] * len(STEP_BYTES))
        for i, v in enumerate((n_in, n_out, reducer_in, owner_in, owner_out)):
            row[i] = max(row[i], int(v))

    def merge(self, other: "PhaseTimes") -> None:
        """Add ``other``'s seconds, bytes and step traffic to these."""
        for phase, sec in other.seconds.items():
            self.add(phase, sec, other.nbytes.get(phase))
        for pos, row in other.step_traffic.items():
            self.add_step_traffic(pos, *row)

    def step_bytes(self, steps: int) -> Dict[str, float]:
        """:data:`STEP_BYTES` from the steps' traffic: the mean over ``steps`` steps (a step
        that moved nothing counts as 0; {} when no step reported any traffic)."""
        rows = list(self.step_traffic.values())
        if not rows:
            return {}
        n = max(int(steps), len(rows))
        out = {name: sum(r[i] for r in rows) / n for i, name in enumerate(STEP_BYTES)}
        if not (out["owner_in_step"] or out["owner_out_step"]):
            del out["owner_in_step"], out["owner_out_step"]     # no word-block owners
        return out

    def add(self, phase: str, seconds: float, nbytes: Optional[int] = None) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + float(seconds)
        if nbytes is not None:
            self.nbytes[phase] = self.nbytes.get(phase, 0) + int(nbytes)

    def timed(self, phase: str, fn: Callable, *args):
        """``fn(*args)``, its seconds added to ``phase``."""
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.add(phase, time.perf_counter() - t0)

    def record(self, steps: int, wall: float, **extra) -> Dict[str, Any]:
        rec = timing_record(steps, wall, self.seconds, self.nbytes, **extra)
        rec["bytes"].update(self.step_bytes(steps))
        return rec


def timing_record(steps: int, wall: float, seconds: Dict[str, float],
                  nbytes: Dict[str, int], **extra) -> Dict[str, Any]:
    """The run-log record of the cost of ``steps`` steps that took ``wall`` seconds: seconds
    and bytes per phase (:data:`TIMING_PHASES`), summed over the steps (and over the workers
    for the phases run in workers; ``extra`` may say how many ``workers`` ran them and which
    phases ran on all of them at once, ``parallel``).
    One per window on Beam, one per run in-process."""
    rec = dict(event="timing", steps=int(steps), wall=float(wall),
               seconds={k: float(v) for k, v in sorted(seconds.items())},
               bytes={k: int(v) for k, v in sorted(nbytes.items())})
    rec.update(extra)
    rec["wall_time"] = time.time()
    return rec


def sum_timing(records: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    """``timing`` records summed: steps, wall, seconds and bytes per phase, and both per step
    (``per_step``, ``bytes_per_step``); ``workers``: the most worker processes a record ran
    its E-steps on, and ``parallel`` the phases they all ran at once (their seconds overlap
    in wall time). The per-step byte fields (:data:`STEP_BYTES`) are weighed by each record's
    steps: ``bytes`` holds their sum over the steps, ``bytes_per_step`` their mean;
    ``graph_bytes_per_step`` is the pipeline graph's bytes per step."""
    steps, wall, sec, nb, workers, parallel = 0, 0.0, {}, {}, 1, set()
    for r in records:
        workers = max(workers, int(r.get("workers") or 1))
        parallel.update(r.get("parallel") or ())
        steps += int(r.get("steps") or 0)
        wall += float(r.get("wall") or 0.0)
        for k, v in (r.get("seconds") or {}).items():
            sec[k] = sec.get(k, 0.0) + float(v)
        for k, v in (r.get("bytes") or {}).items():
            w = int(r.get("steps") or 0) if k in STEP_BYTES else 1
            nb[k] = nb.get(k, 0) + v * w
    n = max(1, steps)
    return dict(steps=steps, wall=wall, seconds=sec, bytes=nb, workers=workers,
                parallel=sorted(parallel),
                per_step={k: v / n for k, v in sec.items()},
                bytes_per_step={k: v / n for k, v in nb.items()},
                graph_bytes_per_step=nb.get("pipeline_build", 0) / n)
