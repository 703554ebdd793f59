"""Running one window of the Beam trainer's whole-state exchanges: build its pipeline, run it
(:func:`run_pipeline`, which every exchange's windows go through), and collect the steps'
infos and the last good state (:func:`collect_window`, also run by a detached window's last
DoFn)."""
from __future__ import annotations

import logging
import time
from typing import Dict, List, Optional, Sequence

import apache_beam as beam

from lda_core.errors import UsageError
from lda_core.training.phase_times import PhaseTimes
from pipelines.runtime import scratch as scratch_space
from pipelines.training import beam_cost, beam_state, scratch_names
from pipelines.training.beam_chain import build_chain
from pipelines.runtime.beam_options import RunnerConfig
from pipelines.training.beam_plan import StepPlan
from pipelines.training.beam_state import StateRef
from pipelines.training.beam_steps import (IN_PROCESS_DOCS_PER_TRANSFORM, METRICS_NAMESPACE,
                                           InProcessStepFn, TrainStep, WindowTasks,
                                           collect_infos, group_steps)

logger = logging.getLogger(__name__)


def query_counters(result) -> Dict[str, int]:
    out: Dict[str, int] = {}
    try:
        res = result.metrics().query()
    except Exception as e:  # pragma: no cover - runner-specific
        logger.debug("metrics unavailable: %s", e)
        return out
    for c in res.get("counters", []):
        if c.key.metric.namespace == METRICS_NAMESPACE:
            v = c.committed if c.committed is not None else c.attempted
            out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(v or 0)
    return out


# Dataflow's limits on one job ("Request quotas"): the graph a job stages, and the JSON request
GRAPH_LIMIT_BYTES = 10 * 1024 * 1024
REQUEST_LIMIT_BYTES = 20 * 1024 * 1024


def jobs_line(runner: str, run_steps: int, window_steps: int, graph_bytes: int) -> str:
    """One line: how many jobs (windows) a run of ``run_steps`` steps takes in windows of
    ``window_steps``, and why -- the window's graph bytes per step against Dataflow's graph
    limit, which bounds the steps one job can hold."""
    per_step = graph_bytes / max(1, window_steps)
    fits = int(GRAPH_LIMIT_BYTES // max(1.0, per_step))
    jobs = max(1, -(-int(run_steps) // max(1, int(window_steps))))
    head = ("%s: this run is %d job%s (%d steps, windows of %d, one job each); its graph is "
            "%.1f kB per step, so one job holds at most %d steps within Dataflow's %d MB graph "
            "limit" % (runner, jobs, "" if jobs == 1 else "s", run_steps, window_steps,
                       per_step / 1000.0, fits, GRAPH_LIMIT_BYTES // (1024 * 1024)))
    if graph_bytes > GRAPH_LIMIT_BYTES:
        return head + ": this window is over it, give --minibatches-per-window %d or fewer" % fits
    if jobs > 1 and run_steps <= fits:
        return head + " (--minibatches-per-window %d makes it one job)" % run_steps
    if jobs > 1 and window_steps < fits:
        return head + " (--minibatches-per-window %d: %d jobs)" % (
            fits, -(-int(run_steps) // fits))
    return head


def run_pipeline(cfg: RunnerConfig, build, times: Optional[PhaseTimes] = None,
                  run_steps: Optional[int] = None, window_steps: int = 1) -> Dict[str, int]:
    """Build and run one pipeline; its Beam counters. The per-phase costs the workers
    reported (:mod:`pipelines.training.beam_cost`) are added to ``times``. ``run_steps``
    (the steps left in the run, given for its first window): on a remote runner the driver
    says how many jobs the run takes (:func:`jobs_line`) before submitting this one."""
    t0 = time.time()
    p = beam.Pipeline(runner=cfg.make_runner(), options=cfg.pipeline_options())
    build(p)
    t1 = time.time()
    # the graph's size as a runner receives it (the runner API proto): what bounds the steps
    # one job can hold (Dataflow's request and graph limits)
    graph_bytes = p.to_runner_api().ByteSize() \
        if times is not None or (run_steps and not cfg.local) else None
    if run_steps and not cfg.local:
        line = jobs_line(cfg.runner, run_steps, window_steps, graph_bytes)
        if graph_bytes > GRAPH_LIMIT_BYTES:
            # the service would refuse the job: say so before submitting it
            raise UsageError(line)
        logger.info(line)
    t1b = time.time()
    result = run_checked(p)
    result.wait_until_finish()      # metrics are complete only after this
    t2 = time.time()
    logger.debug("pipeline built in %.2f s, ran in %.2f s", t1 - t0, t2 - t1b)
    if times is not None:
        times.merge(beam_cost.window_times(beam_cost.query(result), t0, t1, t2))
        times.add("pipeline_build", t1b - t1, graph_bytes)
    return query_counters(result)


def run_checked(p):
    """``p.run()``, with the runner's refusal of its options (Dataflow's "Pipeline has
    validations errors": an invalid project id, bucket name, ...) as one line."""
    try:
        return p.run()
    except ValueError as e:
        if "validations errors" not in str(e):
            raise
        lines = [ln.strip() for ln in str(e).splitlines()[1:] if ln.strip()]
        raise UsageError("%s refused its options: %s" % (type(p.runner).__name__,
                                                         "; ".join(lines))) from e


def build_window(p, cfg: RunnerConfig, exchange: str, steps: List[StepPlan],
                 start_ref: StateRef, run_key: str, scratch: Optional[str], n_threads):
    """The window's transforms in pipeline ``p`` for the whole-state exchanges
    (``exchange``: ``in-process``, ``local`` or ``state``; the remote one is
    :mod:`pipelines.training.beam_remote`); returns the PCollection of the final state's
    reference (empty when a step failed)."""
    ref = p | "State%d" % start_ref.position >> beam.Create([start_ref], reshuffle=False)
    if exchange == "in-process":
        # one fused chain of whole steps (InProcessStepFn)
        for group in group_steps(steps, IN_PROCESS_DOCS_PER_TRANSFORM):
            ref = ref | "Steps%d" % group[0].position >> beam.ParDo(
                InProcessStepFn(group, run_key, n_threads)).with_output_types(StateRef)
        return ref
    tasks = p | "Tasks" >> WindowTasks(steps)
    spill = spill_dir(cfg, scratch) is not None
    if exchange == "local" and spill:
        # worker processes on this machine: one stage per window, each worker advancing its
        # own copy of the state (pipelines.training.beam_chain)
        return build_chain(p, tasks, steps, ref, run_key, scratch, n_threads)
    for j, sp in enumerate(steps):
        ref = (tasks[j], ref) | "Step%d" % sp.position >> TrainStep(
            sp, run_key, scratch, n_threads,
            in_place=cfg.runner in ("DirectRunner", "FnApiRunner"), spill=spill)
    return ref


# False: statistics always travel through the runner, never as files in a local scratch
# folder (the cluster-like configuration of benchmarks/beam_train_bench.py --workers-sweep)
SPILL_STATS = True


def spill_dir(cfg: RunnerConfig, scratch: Optional[str]) -> Optional[str]:
    """Where E-steps spill their statistics (:func:`pipelines.runtime.scratch.spill_dir`),
    or None when they go through the runner (or :data:`SPILL_STATS` is False)."""
    return scratch_space.spill_dir(scratch, cfg.local) if SPILL_STATS else None


def run_unrolled(cfg, exchange: str, steps: List[StepPlan], start_ref: StateRef, run_key: str,
                 scratch: Optional[str], n_threads, times: Optional[PhaseTimes] = None,
                 run_steps: Optional[int] = None):
    """One pipeline for the whole window; returns (infos, final algorithm, error, counters).
    ``run_steps``: the steps left in the run (first window: see :func:`run_pipeline`)."""

    def build(p):
        build_window(p, cfg, exchange, steps, start_ref, run_key, scratch, n_threads)

    counters = run_pipeline(cfg, build, times, run_steps, len(steps))
    infos, algo, error = collect_window(steps, start_ref, run_key, scratch)
    return infos, algo, error, counters


def collect_window(steps: Sequence[StepPlan], start_ref: StateRef, run_key: str,
                    scratch: Optional[str]):
    """After an unrolled window: the global steps' infos up to the first missing or failed
    one, the state after the last good step (None if none) and the error ``(step, message)``
    or None. Run by the driver, or (``--detach``) by the window's last DoFn."""
    infos, error = collect_infos(steps, scratch, run_key)
    if not infos:
        return infos, None, error
    last_key = "%s/%d" % (run_key, steps[len(infos) - 1].position + 1)
    if scratch is None:
        algo = beam_state.get_local(last_key)
    else:
        algo = beam_state.load_algorithm(scratch_names.state_path(
            scratch, steps[len(infos) - 1].position + 1))
    return infos, algo, error
