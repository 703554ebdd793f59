"""The Beam trainer's DoFns and composite transforms of the whole-state exchanges: the E-step
over a minibatch's pieces (:class:`EStepFn`, :class:`MinibatchStatistics`), the global step
(:class:`GlobalStepFn`, :class:`TrainStep`) and the in-process fused chain
(:class:`InProcessStepFn`). No maths: every
step is the ``lda_core`` one, validated by :func:`lda_core.training.session.apply_step`
(module docstring of :mod:`pipelines.training.beam_train`)."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from lda_core.docbatch import DocBatch
from lda_core.training import session as _session
from lda_core.training.pieces import local_step_pieces
from lda_core.algorithms.algorithm import SuffStats
from pipelines.runtime import memory, scratch as scratch_space
from pipelines.training import scratch_names
from pipelines.training import beam_cost, beam_state
from pipelines.training.beam_state import StateRef
from pipelines.training.beam_stats import spill_stats, StatsCombineFn

logger = logging.getLogger(__name__)
from pipelines.training.beam_plan import ReadTask, StepPlan, read_task

METRICS_NAMESPACE = "ldabeam"

# ------------------------------------------------------------------------------ DoFns

class LeanDoFn(beam.DoFn):
    """A DoFn whose ``dir()`` lists only the methods Beam calls on it.

    Beam looks for user state and timer parameters by walking ``dir(dofn)`` and taking the
    signature of every method (``apache_beam.transforms.userstate.get_dofn_specs``, ~30
    methods inherited from DoFn); it does so ~8 times per DoFn instance, when the graph is
    built and again for every bundle. With one DoFn per minibatch step that was ~2.5 ms a
    call, ~20 ms a step here -- as much as the E-step of 256 documents. These DoFns have no
    state or timers; listing only the lifecycle methods gives Beam the same answer (empty
    specs) for a fraction of the cost. Nothing else in Beam reads ``dir()`` of a DoFn."""

    _BEAM_METHODS = ("process", "process_batch", "setup", "start_bundle", "finish_bundle",
                     "teardown")

    def __dir__(self):
        return [m for m in self._BEAM_METHODS if hasattr(self, m)]

    def setup(self):
        # a worker process's allocator settings (pipelines.runtime.memory): large arrays
        # freed are returned to the system, not kept in per-thread arenas
        if memory.worker_process():
            memory.tune_allocator()

    def finish_bundle(self):
        # what the bundle freed inside a worker's arenas (the data plane's receive buffers)
        # goes back to the system before the next stage's data arrives
        if memory.worker_process():
            memory.release()


class StepMetrics:
    """The Beam counters of the E-step (namespace ``ldabeam``)."""

    def __init__(self):
        self.docs = Metrics.counter(METRICS_NAMESPACE, "documents")
        self.tokens = Metrics.counter(METRICS_NAMESPACE, "tokens")
        self.empty = Metrics.counter(METRICS_NAMESPACE, "empty_documents")
        self.iterations = Metrics.counter(METRICS_NAMESPACE, "estep_iterations")
        self.capped = Metrics.counter(METRICS_NAMESPACE, "documents_at_iteration_cap")
        self.pieces = Metrics.counter(METRICS_NAMESPACE, "pieces")

    def report(self, stats: SuffStats, pieces: int = 1) -> None:
        """The counters of ``stats`` (the statistics of ``pieces`` pieces)."""
        self.docs.inc(int(stats.n_docs) + int(stats.n_empty))
        self.tokens.inc(int(stats.n_tokens))
        self.empty.inc(int(stats.n_empty))
        self.iterations.inc(int(stats.n_iterations))
        self.capped.inc(int(stats.n_capped))
        self.pieces.inc(pieces)


class EStepFn(LeanDoFn):
    """Local step of one piece of a minibatch with the frozen state ``ref`` (side input).

    ``spill_dir``: a folder every worker reads (local runners); the piece's statistics are
    written there and only a :class:`~pipelines.training.beam_stats.SpilledStats` reference goes on."""

    def __init__(self, n_threads: Optional[int] = None, spill_dir: Optional[str] = None):
        self.n_threads = n_threads
        self.spill_dir = spill_dir
        self.metrics = StepMetrics()

    def process(self, element, ref: Optional[StateRef]):
        position, task = element
        if ref is None:           # an earlier step of this window failed: nothing to do
            return
        with beam_cost.step(run_of(ref), position):
            algo = beam_state.acquire(ref, self.n_threads)
            out = piece_statistics(algo, task, self.metrics, self.spill_dir)
        yield position, (task.piece, out)


def run_of(ref: StateRef) -> str:
    """The run key of a state version ("<run id>/<position>")."""
    return ref.key.rsplit("/", 1)[0]


def piece_statistics(algo, task, metrics: "StepMetrics", spill_dir: Optional[str]):
    """The E-step of one piece (read, ``local_step``, Beam counters and costs): its
    statistics, or with ``spill_dir`` the :class:`~pipelines.training.beam_stats.SpilledStats`
    reference of the file they were written to."""
    beam_cost.mark(beam_cost.FIRST_ESTEP)
    with beam_cost.timed("read"):
        batch = read_task(task)
    with beam_cost.timed("estep"):
        stats = algo.local_step(batch)
    metrics.report(stats)
    if spill_dir is None:
        return stats
    t0 = time.perf_counter()
    spilled = spill_stats(stats, scratch_names.stats_path(spill_dir, task.position, task.piece))
    beam_cost.report("stats_encode", time.perf_counter() - t0, spilled.nbytes)
    return spilled


def apply_global_step(algo, stats: SuffStats, run_key: str, position: int, n_docs: int,
                      scratch: Optional[str]) -> Optional[StateRef]:
    """``algo`` (state ``position``) + merged statistics -> the reference of state
    ``position + 1`` (``algo`` is updated in place: the caller passes a copy where others may
    still read it). The step's log info, or its error, is stored under the new version's key
    for the driver; None when the step failed (the rest of the window then does nothing)."""
    key = "%s/%d" % (run_key, position + 1)
    info = global_step_info(algo, stats, position, n_docs)
    if "error" in info:
        store_step_info(scratch, key, info)
        logger.error("global step at position %d failed: %s", position, info["error"])
        return None
    if scratch is None:
        beam_state.put_local(key, algo)
        new = StateRef(key, None, position + 1)
    else:
        t0 = time.perf_counter()
        path = scratch_names.state_path(scratch, position + 1)
        beam_state.save_scratch(algo, path)
        new = StateRef(key, path, position + 1)
        beam_state.offer(new, algo)
        beam_cost.report("publish", time.perf_counter() - t0)
    store_step_info(scratch, key, info)
    beam_cost.mark(beam_cost.LAST_STEP)
    return new


def global_step_info(algo, stats: SuffStats, position: int, n_docs: int) -> Dict[str, Any]:
    """The validated global step (:func:`lda_core.training.session.apply_step`) from ``position``:
    its info with the driver's bookkeeping, or ``{"error": reason, "position": ...}``."""
    t0 = time.time()
    info, err = _session.apply_step(algo.global_step, stats)
    if err is not None:
        return {"error": err, "position": position + 1}
    info["global_step_seconds"] = time.time() - t0
    beam_cost.report("global_step", info["global_step_seconds"])
    info["docs_in_minibatch"] = n_docs
    info["docs_seen"] = _session.docs_seen(algo)
    info["position"] = position + 1
    return info


class GlobalStepFn(LeanDoFn):
    """State ``ref[t-1]`` + merged statistics -> state ``ref[t]`` (the lda_core global step)."""

    def __init__(self, run_key: str, position: int, n_docs: int, scratch: Optional[str],
                 n_threads: Optional[int] = None, in_place: bool = False):
        self.run_key = run_key
        self.position = position
        self.n_docs = n_docs
        self.scratch = scratch
        self.n_threads = n_threads
        self.in_place = in_place or scratch is None

    def process(self, element, ref: Optional[StateRef]):
        _, stats = element
        if ref is None or stats is None:
            return
        with beam_cost.step(run_of(ref), self.position):
            new = self._step(ref, stats)
        if new is not None:
            yield new

    def _step(self, ref: StateRef, stats) -> Optional[StateRef]:
        base = beam_state.acquire(ref, self.n_threads)
        # DirectRunner (in-process or worker processes): no bundle retries, and every reader
        # of version t-1 (the E-steps of step t) has finished before this step starts, so the
        # step is applied in place (in-process the driver copied the window's starting
        # state). Runners that retry bundles get a private copy.
        algo = base if self.in_place else beam_state.private_copy(base)
        new = apply_global_step(algo, stats, self.run_key, self.position, self.n_docs,
                                self.scratch)
        if new is None:
            return None
        if self.in_place and self.scratch is not None:
            # every reader of state t-1 and of step t's spilled pieces has finished (see
            # above): free their scratch files now rather than at the end of the window
            # (a window of 64 steps would otherwise hold 64 states of 24 MB in /dev/shm)
            remove_quietly(scratch_names.state_path(self.scratch, self.position))
            for name in scratch_space.list_names(self.scratch):
                if name.startswith(scratch_names.stats_prefix(self.position)):
                    remove_quietly(os.path.join(self.scratch, name))
        return new


def remove_quietly(path: str) -> None:
    scratch_space.remove_file(path)


class InProcessStepFn(LeanDoFn):
    """Whole steps for the in-process runner: state ``ref[t-1]`` (main input) -> ``ref[t+G-1]``
    after the ``G`` consecutive minibatches of ``steps``, each with its own global step.

    In-process nothing crosses a process: the pieces of each minibatch are read and E-stepped
    as the in-process trainer does (:func:`lda_core.training.pieces.local_step_pieces`: the
    pieces' sums in piece order, from one E-step where the algorithm can), and the state
    reference travels as the *main* input, so
    the transforms of a window form one chain of ParDos that Beam fuses into a single stage
    (with the reference as a side input every step was a stage of its own: ~0.1 s of Beam
    scheduling per step here, as much as the E-step of 256 documents). Each transform still
    costs Beam ~10-20 ms to build, translate and set up per bundle whatever its work, so small
    minibatches are grouped (``G`` = :data:`IN_PROCESS_DOCS_PER_TRANSFORM` / S, at least 1):
    the same calls as one transform per minibatch -- the pieces' E-step and sum, then
    :func:`apply_global_step` in place on the window's private copy -- for each of them,
    in order; a failing step stops the group and the rest of the window."""

    def __init__(self, steps: Sequence[StepPlan], run_key: str,
                 n_threads: Optional[int] = None):
        steps = list(steps)
        if not steps or any(not sp.tasks for sp in steps):
            raise ValueError("InProcessStepFn needs the read tasks of every minibatch")
        self.steps, self.run_key, self.n_threads = steps, run_key, n_threads
        self.metrics = StepMetrics()

    def process(self, ref: StateRef):
        algo = beam_state.acquire(ref, self.n_threads)
        beam_cost.mark(beam_cost.FIRST_ESTEP)
        new = ref
        for sp in self.steps:
            with beam_cost.step(self.run_key, sp.position):
                new = self._step(algo, sp)
            if new is None:
                return
        yield new

    def _step(self, algo, sp: StepPlan) -> Optional[StateRef]:
        tasks = sorted(sp.tasks, key=lambda t: t.piece)
        with beam_cost.timed("read"):
            parts = [read_task(task) for task in tasks]
            batch = parts[0] if len(parts) == 1 else DocBatch.concat(parts)
        # the pieces are the minibatch's piece_bounds: the in-process trainer's E-step
        # (lda_core.training.pieces), one run over the minibatch where the algorithm can
        with beam_cost.timed("estep"):
            stats = local_step_pieces(algo, batch, tasks[0].plan.pieces)
        self.metrics.report(stats, len(tasks))
        return apply_global_step(algo, stats, self.run_key, sp.position, sp.n_docs, None)


# in-process, consecutive minibatches are grouped into one transform until it holds this many
# documents (see InProcessStepFn)
IN_PROCESS_DOCS_PER_TRANSFORM = 4096


def group_steps(steps: Sequence[StepPlan], docs_per_group: int) -> List[List[StepPlan]]:
    groups: List[List[StepPlan]] = []
    docs = 0
    for sp in steps:
        if not groups or docs >= docs_per_group:
            groups.append([])
            docs = 0
        groups[-1].append(sp)
        docs += sp.n_docs
    return groups


def _info_path(scratch: str, key: str) -> str:
    return scratch_names.info_path(scratch, int(key.rsplit("/", 1)[1]))


def store_step_info(scratch: Optional[str], key: str, info: Dict[str, Any]) -> None:
    if scratch is None:
        beam_state.put_local_info(key, info)
    else:
        beam_state.write_json_atomic(_info_path(scratch, key), info)


def collect_infos(steps, scratch: Optional[str], run_key: str):
    """After a window: the steps' infos up to the first missing or failed one, and the error
    ``(step, message)`` or None."""
    infos, error = [], None
    for sp in steps:
        info = load_step_info(scratch, "%s/%d" % (run_key, sp.position + 1))
        if info is None:
            error = (sp.position + 1, "the pipeline produced no state for this step")
            break
        if "error" in info:
            error = (sp.position + 1, info["error"])
            break
        infos.append(info)
    return infos, error


def load_step_info(scratch: Optional[str], key: str) -> Optional[Dict[str, Any]]:
    if scratch is None:
        return beam_state.get_local_info(key)
    return beam_state.read_json(_info_path(scratch, key))


# ------------------------------------------------------------------------------ transforms

def _only_piece(element):
    position, (_, stats) = element
    return position, stats


class MinibatchStatistics(beam.PTransform):
    """Read tasks ``(position, ReadTask)`` of one minibatch -> ``(position, merged stats)``.

    ``single_piece``: the minibatch is one piece, so there is nothing to combine: the E-step
    output goes straight on, and the E-step and the global step fuse into one stage (one
    stage per step instead of two plus a shuffle). Pieces are combined in piece order
    (:class:`~pipelines.training.beam_stats.StatsCombineFn`): the in-process trainer's sums."""

    def __init__(self, ref_view, n_threads: Optional[int] = None, single_piece: bool = False,
                 spill_dir: Optional[str] = None):
        super().__init__()
        self.ref_view, self.n_threads = ref_view, n_threads
        self.single_piece = single_piece
        self.spill_dir = spill_dir

    def expand(self, tasks):
        pieces = (tasks
                  | "EStep" >> beam.ParDo(EStepFn(self.n_threads, self.spill_dir),
                                          self.ref_view)
                  .with_output_types(Tuple[int, Tuple[int, SuffStats]]))
        if self.single_piece:
            return pieces | "OnePiece" >> beam.Map(_only_piece).with_output_types(
                Tuple[int, SuffStats])
        return pieces | "Combine" >> beam.CombinePerKey(StatsCombineFn()).with_output_types(
            Tuple[int, SuffStats])


class TrainStep(beam.PTransform):
    """One step of the state exchange: (read tasks of minibatch t, state ref[t-1]) -> ref[t]."""

    def __init__(self, step: StepPlan, run_key: str, scratch: Optional[str],
                 n_threads: Optional[int] = None, in_place: bool = False,
                 spill: bool = False):
        super().__init__()
        self.step, self.run_key, self.scratch = step, run_key, scratch
        self.n_threads = n_threads
        self.in_place = in_place
        self.spill = spill and scratch is not None

    def expand(self, pcolls):
        tasks, prev_ref = pcolls
        view = beam.pvalue.AsSingleton(prev_ref, default_value=None)
        single = len(self.step.tasks) == 1
        # a single piece goes straight to the global step (no combine to read a spilled file)
        stats = tasks | "Statistics" >> MinibatchStatistics(
            view, self.n_threads, single_piece=single,
            spill_dir=self.scratch if self.spill and not single else None)
        return stats | "GlobalStep" >> beam.ParDo(
            GlobalStepFn(self.run_key, self.step.position, self.step.n_docs, self.scratch,
                         self.n_threads, self.in_place), view)


class WindowTasks(beam.PTransform):
    """All read tasks of a window, spread over the workers once, split by minibatch.

    The graph holds one element: the window's :class:`~pipelines.training.beam_plan.ReadPlan`
    and its positions with their piece counts; the tasks ``(position, ReadTask)`` are made
    from it in a worker, and each derives its rows where it is read -- no row index is in
    the graph, so a step adds only its transforms to it."""

    def __init__(self, steps: List[StepPlan]):
        super().__init__()
        self.steps = steps

    def expand(self, pbegin):
        first = self.steps[0].position
        plan = self.steps[0].read_plan
        if plan is None or any(sp.read_plan != plan for sp in self.steps):
            raise ValueError("WindowTasks needs the read tasks of one ReadPlan")
        spec = (plan, tuple((sp.position, len(sp.tasks)) for sp in self.steps))
        created = (pbegin
                   | "Create" >> beam.Create([spec], reshuffle=False)
                   | "Expand" >> beam.FlatMap(_window_tasks))
        if sum(n for _, n in spec[1]) > 1:
            created = created | "Spread" >> beam.Reshuffle()
        if len(self.steps) == 1:
            return [created]
        return created | "ByMinibatch" >> beam.Partition(
            lambda kv, n: kv[0] - first, len(self.steps))


def _window_tasks(spec):
    plan, positions = spec
    for position, n_pieces in positions:
        for k in range(n_pieces):
            yield position, ReadTask(position, k, plan)
