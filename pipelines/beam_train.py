"""The Beam trainer: the in-process trainer's loop, with each minibatch's E-step spread over
Beam workers.

Training is a sequence of *windows*; a window is one pipeline run over the next ``M``
minibatches of the seeded order (:mod:`lda_core.ordering`, the same order as the in-process
trainer). At the end of every window the driver publishes the state as a checkpoint
(:class:`lda_core.checkpoint.CheckpointStore`, atomic) and the next window starts from it.

Inside a window, for minibatch ``t`` (all composite transforms below)::

    Create(read tasks of t)      a few (piece id, [(shard file, rows)]) records: which rows of
      |                          which shard make up each piece of the minibatch -- decided
      |                          by plan_pass from the shard row counts alone, so membership
      |                          never depends on how Beam bundles or splits the work
    ParDo(EStepFn, side=ref[t-1])  read the rows (pyarrow, one cached shard per process),
      |                            algorithm.local_step(piece) with the state of version
      |                            ref[t-1] (loaded once per process: pipelines.beam_state),
      |                            Beam metrics, emit (piece id, stats) as raw bytes
    CombinePerKey(StatsCombineFn)  lifted: per-bundle pre-combine, no shuffle of pieces;
      |                            pieces merged in piece order (bit-reproducible sums);
      |                            skipped when the minibatch is one piece (in-process)
    ParDo(GlobalStepFn, side=ref[t-1])  -> ref[t]: a copy of state t-1, algorithm.global_step,
                                           state t stored (in memory for the in-process runner,
                                           else a scratch directory beside the checkpoints)

With the in-process runner (one worker, one piece per minibatch) the window is instead one
fused chain of :class:`InProcessStepFn` ParDos taking the state reference as main input (see
there). *Unrolled* (``unroll=True``, the default): the ``M`` minibatches of a window are
chained in one pipeline, ``ref[t]`` being the singleton side input of step ``t+1``. *One pipeline per
minibatch* (``unroll=False``): each pipeline stops after the combine, and the driver applies
the global step itself (for very large minibatches, or runners where a deep graph is a
problem). Both give the same states as the in-process trainer: the Beam code contains no
maths; the local step, the merge and the global step are the ``lda_core`` ones.

The trade-off (numbers in docs/beam-training.md): each pipeline run costs a start-up
(~0.3-0.45 s in-process, ~3.3-6 s with worker processes) and, with worker processes, each
chained step ~0.2 s of stage scheduling plus the state hand-over; a window costs one
start-up, and a crash loses at most one window of work. Windows are therefore sized in
documents (:func:`default_window`).

Resume: the run continues from the latest published checkpoint; a run killed mid-window
loses only that window, and because every step is deterministic (per-document random draws
from (seed, step, doc id), sums in a fixed order) the resumed run ends with the same state,
bit for bit, as an uninterrupted one.

Detached (``detach=True``, ``ldabeam train --detach``; Dataflow Flex Templates, whose launcher
must return soon after ``run()``): exactly one window is submitted and the call returns
without waiting; the window's pipeline ends in :class:`FinishWindowFn`, which publishes the
checkpoint, evaluates, appends the window's run-log records and removes the scratch, as the
driver does after a waiting window (docs/beam-training.md, "Detached windows").
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.metrics import Metrics

from lda_core.algorithm import SuffStats
from lda_core.docbatch import DocBatch
from lda_core.trainer import TrainResult, timed_evaluate
from pipelines import beam_state
from pipelines.beam_options import RunnerConfig, runner_config
from pipelines.beam_stats import (StatsCombineFn, decode_stats, encode_stats, spill_stats)
from pipelines.beam_state import StateRef

logger = logging.getLogger(__name__)

METRICS_NAMESPACE = "ldabeam"
SCRATCH_DIR = ".beam-scratch"
# minibatches per window when not given, from documents per window: in-process a pipeline
# run costs ~0.3-0.45 s to start and 65,536 documents are ~5 s of E-step at K = 100 here
# (~8% start-up; a crash loses at most those seconds); worker processes cost ~3.3-6 s per
# pipeline run, so their windows hold 4x more.
DOCS_PER_WINDOW_IN_PROCESS = 65536
DOCS_PER_WINDOW_WORKERS = 262144
MAX_WINDOW = 10000           # cap on the graph depth of one unrolled pipeline


# ------------------------------------------------------------------------------ read tasks

@dataclass(frozen=True)
class ReadTask:
    """One piece of a minibatch: rows of one or more shards (minibatch order)."""
    position: int                              # global step index of the minibatch
    piece: int                                 # piece index within the minibatch
    parts: Tuple[Tuple[str, np.ndarray], ...]  # (shard file, row indices)

    @property
    def n_docs(self) -> int:
        return int(sum(len(r) for _, r in self.parts))


@dataclass
class StepPlan:
    position: int       # global step index (0-based minibatch of the seeded order)
    pass_index: int
    batch_index: int
    n_docs: int
    tasks: List[ReadTask] = field(default_factory=list)


def _split_rows(members: List[Tuple[int, np.ndarray]], n_pieces: int
                ) -> List[List[Tuple[int, np.ndarray]]]:
    """Cut a minibatch ``[(shard, rows), ...]`` (minibatch order) into ``n_pieces`` runs of
    consecutive documents of nearly equal size."""
    total = sum(len(r) for _, r in members)
    n_pieces = max(1, min(int(n_pieces), total))
    bounds = [total * i // n_pieces for i in range(n_pieces + 1)]
    out: List[List[Tuple[int, np.ndarray]]] = [[] for _ in range(n_pieces)]
    pos = 0
    for shard, rows in members:
        i = 0
        while i < len(rows):
            g = pos + i
            p = next(k for k in range(n_pieces) if bounds[k] <= g < bounds[k + 1])
            take = min(len(rows) - i, bounds[p + 1] - g)
            out[p].append((shard, rows[i:i + take]))
            i += take
        pos += len(rows)
    return [o for o in out if o]


def plan_steps(files: Sequence[str], shard_sizes: Sequence[int], *, seed: int,
               batch_size: int, start: int, stop: int, pieces_per_minibatch: int
               ) -> List[StepPlan]:
    """The read tasks of global steps ``[start, stop)`` (from ``plan_pass``)."""
    from lda_core.ordering import locate_step, n_batches, plan_pass
    D = int(sum(shard_sizes))
    B = n_batches(D, batch_size)
    out: List[StepPlan] = []
    pos = start
    while pos < stop:
        p, b0 = locate_step(pos, D, batch_size)
        last = min(stop, (p + 1) * B)          # this pass's part of the range
        plan = plan_pass(shard_sizes, seed, p, batch_size)
        members: Dict[int, List[Tuple[int, np.ndarray]]] = OrderedDict()
        b1 = last - p * B
        for seg in plan.iter_segments(b0):
            if seg.batch >= b1:
                break
            members.setdefault(seg.batch, []).append((seg.shard, seg.rows))
        for b in range(b0, b1):
            m = members.get(b, [])
            sp = StepPlan(p * B + b, p, b, int(sum(len(r) for _, r in m)))
            for k, piece in enumerate(_split_rows(m, pieces_per_minibatch)):
                sp.tasks.append(ReadTask(sp.position, k, tuple((files[s], np.asarray(r))
                                                             for s, r in piece)))
            out.append(sp)
        pos = last
    return out


# ------------------------------------------------------------------------------ shard cache

_SHARD_CACHE: "OrderedDict[Tuple[str, float, int], DocBatch]" = OrderedDict()
_SHARD_CACHE_SIZE = 2


def _read_shard_cached(path: str) -> DocBatch:
    """Whole shard as a DocBatch, cached per process (at most two shards in memory): the rows
    of a minibatch are spread over its shard, so the pieces of a window read the same shards."""
    from pipelines import dataset
    from pipelines.shard_stream import read_shard
    if dataset.is_remote(path):
        key = (path, 0.0, 0)
    else:
        st = os.stat(path)
        key = (path, st.st_mtime, st.st_size)
    hit = _SHARD_CACHE.get(key)
    if hit is not None:
        _SHARD_CACHE.move_to_end(key)
        return hit
    batch = read_shard(path)
    _SHARD_CACHE[key] = batch
    while len(_SHARD_CACHE) > _SHARD_CACHE_SIZE:
        _SHARD_CACHE.popitem(last=False)
    return batch


def read_task(task: ReadTask) -> DocBatch:
    from pipelines.shard_stream import gather
    parts = []
    for path, rows in task.parts:
        shard = _read_shard_cached(path)
        if len(rows) and int(np.max(rows)) >= shard.n_docs:
            raise ValueError("shard %s has %d rows but the plan needs row %d (was it rewritten "
                             "during training?)" % (path, shard.n_docs, int(np.max(rows))))
        parts.append(gather(shard, rows))
    return parts[0] if len(parts) == 1 else DocBatch.concat(parts)


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


class _StepMetrics:
    """The Beam counters of the E-step (namespace ``ldabeam``)."""

    def __init__(self):
        self.docs = Metrics.counter(METRICS_NAMESPACE, "documents")
        self.tokens = Metrics.counter(METRICS_NAMESPACE, "tokens")
        self.empty = Metrics.counter(METRICS_NAMESPACE, "empty_documents")
        self.iterations = Metrics.counter(METRICS_NAMESPACE, "estep_iterations")
        self.capped = Metrics.counter(METRICS_NAMESPACE, "documents_at_iteration_cap")
        self.pieces = Metrics.counter(METRICS_NAMESPACE, "pieces")

    def report(self, stats: SuffStats) -> None:
        self.docs.inc(int(stats.n_docs) + int(stats.n_empty))
        self.tokens.inc(int(stats.n_tokens))
        self.empty.inc(int(stats.n_empty))
        self.iterations.inc(int(stats.n_iterations))
        self.capped.inc(int(stats.n_capped))
        self.pieces.inc()


def _spill_path(spill_dir: str, position: int, piece: int) -> str:
    return os.path.join(spill_dir, "stats-%09d-%04d.bin" % (position, piece))


class EStepFn(LeanDoFn):
    """Local step of one piece of a minibatch with the frozen state ``ref`` (side input).

    ``spill_dir``: a folder every worker reads (local runners); the piece's statistics are
    written there and only a :class:`~pipelines.beam_stats.SpilledStats` reference goes on."""

    def __init__(self, n_threads: Optional[int] = None, spill_dir: Optional[str] = None):
        self.n_threads = n_threads
        self.spill_dir = spill_dir
        self.metrics = _StepMetrics()

    def process(self, element, ref: Optional[StateRef]):
        position, task = element
        if ref is None:           # an earlier step of this window failed: nothing to do
            return
        algo = beam_state.acquire(ref, self.n_threads)
        stats = algo.local_step(read_task(task))
        self.metrics.report(stats)
        if self.spill_dir is not None:
            stats = spill_stats(stats, _spill_path(self.spill_dir, position, task.piece))
        yield position, (task.piece, stats)


def apply_global_step(algo, stats: SuffStats, run_key: str, position: int, n_docs: int,
                      scratch: Optional[str]) -> Optional[StateRef]:
    """``algo`` (state ``position``) + merged statistics -> the reference of state
    ``position + 1`` (``algo`` is updated in place: the caller passes a copy where others may
    still read it). The step's log info, or its error, is stored under the new version's key
    for the driver; None when the step failed (the rest of the window then does nothing)."""
    key = "%s/%d" % (run_key, position + 1)
    t0 = time.time()
    try:
        info = dict(algo.global_step(stats) or {})
    except (ValueError, FloatingPointError, ArithmeticError) as e:
        _store_info(scratch, key, {"error": str(e), "position": position + 1})
        logger.error("global step at position %d failed: %s", position, e)
        return None
    bad = [k for k in ("rho", "mean_change") if not _finite(info.get(k))]
    if bad:
        _store_info(scratch, key, {"error": "the step produced non-finite %s"
                                   % ", ".join(bad), "position": position + 1})
        return None
    info["global_step_seconds"] = time.time() - t0
    info["docs_in_minibatch"] = n_docs
    info["docs_seen"] = int(getattr(algo, "docs_seen", 0) or 0)
    info["position"] = position + 1
    if scratch is None:
        beam_state.put_local(key, algo)
        new = StateRef(key, None, position + 1)
    else:
        path = os.path.join(scratch, "state-%09d.npz" % (position + 1))
        beam_state.save_scratch(algo, path)
        new = StateRef(key, path, position + 1)
        beam_state.offer(new, algo)
    _store_info(scratch, key, info)
    return new


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
        base = beam_state.acquire(ref, self.n_threads)
        # DirectRunner (in-process or worker processes): no bundle retries, and every reader
        # of version t-1 (the E-steps of step t) has finished before this step starts, so the
        # step is applied in place (in-process the driver copied the window's starting
        # state). Runners that retry bundles get a private copy.
        algo = base if self.in_place else beam_state.private_copy(base)
        new = apply_global_step(algo, stats, self.run_key, self.position, self.n_docs,
                                self.scratch)
        if new is None:
            return
        if self.in_place and self.scratch is not None:
            # every reader of state t-1 and of step t's spilled pieces has finished (see
            # above): free their scratch files now rather than at the end of the window
            # (a window of 64 steps would otherwise hold 64 states of 24 MB in /dev/shm)
            _remove_quietly(os.path.join(self.scratch, "state-%09d.npz" % self.position))
            for name in beam_state.list_names(self.scratch):
                if name.startswith("stats-%09d-" % self.position):
                    _remove_quietly(os.path.join(self.scratch, name))
        yield new


def _remove_quietly(path: str) -> None:
    beam_state.remove_file(path)


class InProcessStepFn(LeanDoFn):
    """Whole steps for the in-process runner: state ``ref[t-1]`` (main input) -> ``ref[t+G-1]``
    after the ``G`` consecutive minibatches of ``steps``, each with its own global step.

    In-process a minibatch is a single piece (the numba kernel already uses every core), so
    there is nothing to combine; and the state reference travels as the *main* input, so the
    transforms of a window form one chain of ParDos that Beam fuses into a single stage (with
    the reference as a side input every step was a stage of its own: ~0.1 s of Beam
    scheduling per step here, as much as the E-step of 256 documents). Each transform still
    costs Beam ~10-20 ms to build, translate and set up per bundle whatever its work, so small
    minibatches are grouped (``G`` = :data:`IN_PROCESS_DOCS_PER_TRANSFORM` / S, at least 1):
    the same calls as one transform per minibatch -- ``local_step`` of the minibatch, then
    :func:`apply_global_step` in place on the window's private copy -- for each of them, in
    order; a failing step stops the group and the rest of the window."""

    def __init__(self, steps: Sequence[StepPlan], run_key: str,
                 n_threads: Optional[int] = None):
        steps = list(steps)
        if not steps or any(len(sp.tasks) != 1 for sp in steps):
            raise ValueError("InProcessStepFn runs single-piece minibatches")
        self.steps, self.run_key, self.n_threads = steps, run_key, n_threads
        self.metrics = _StepMetrics()

    def process(self, ref: StateRef):
        algo = beam_state.acquire(ref, self.n_threads)
        new = ref
        for sp in self.steps:
            stats = algo.local_step(read_task(sp.tasks[0]))
            self.metrics.report(stats)
            new = apply_global_step(algo, stats, self.run_key, sp.position, sp.n_docs, None)
            if new is None:
                return
        yield new


# in-process, consecutive minibatches are grouped into one transform until it holds this many
# documents (see InProcessStepFn)
IN_PROCESS_DOCS_PER_TRANSFORM = 4096


def _group_steps(steps: Sequence[StepPlan], docs_per_group: int) -> List[List[StepPlan]]:
    groups: List[List[StepPlan]] = []
    docs = 0
    for sp in steps:
        if not groups or docs >= docs_per_group:
            groups.append([])
            docs = 0
        groups[-1].append(sp)
        docs += sp.n_docs
    return groups


def _finite(v) -> bool:
    try:
        return v is None or math.isfinite(float(v))
    except (TypeError, ValueError):
        return True


def _info_path(scratch: str, key: str) -> str:
    return os.path.join(scratch, "info-%09d.json" % int(key.rsplit("/", 1)[1]))


def _store_info(scratch: Optional[str], key: str, info: Dict[str, Any]) -> None:
    if scratch is None:
        beam_state.put_local_info(key, info)
    else:
        beam_state.write_json_atomic(_info_path(scratch, key), info)


def _load_info(scratch: Optional[str], key: str) -> Optional[Dict[str, Any]]:
    if scratch is None:
        return beam_state.get_local_info(key)
    return beam_state.read_json(_info_path(scratch, key))


class WriteStatsFn(LeanDoFn):
    """Non-unrolled mode: hand the merged statistics of one minibatch to the driver."""

    def __init__(self, run_key: str, position: int, scratch: Optional[str]):
        self.run_key, self.position, self.scratch = run_key, position, scratch

    def process(self, element):
        _, stats = element
        key = "%s/stats-%d" % (self.run_key, self.position)
        if self.scratch is None:
            beam_state.put_local_info(key, stats)
        else:
            from pipelines.dataset import write_bytes_atomic
            write_bytes_atomic(os.path.join(self.scratch, "stats-%09d.bin" % self.position),
                               encode_stats(stats))
        yield key


# ------------------------------------------------------------------------------ transforms

def _only_piece(element):
    position, (_, stats) = element
    return position, stats


class MinibatchStatistics(beam.PTransform):
    """Read tasks ``(position, ReadTask)`` of one minibatch -> ``(position, merged stats)``.

    ``single_piece``: the minibatch is one piece (the in-process runner, whose E-step kernel
    already uses every core), so there is nothing to combine: the E-step output goes straight
    on, and the E-step and the global step fuse into one stage (one stage per step instead of
    two plus a shuffle)."""

    def __init__(self, ref_view, n_threads: Optional[int] = None, deterministic: bool = True,
                 fanout: Optional[int] = None, single_piece: bool = False,
                 spill_dir: Optional[str] = None):
        super().__init__()
        self.ref_view, self.n_threads = ref_view, n_threads
        self.deterministic, self.fanout = deterministic, fanout
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
        combine = beam.CombinePerKey(StatsCombineFn(self.deterministic))
        if self.fanout:
            combine = combine.with_hot_key_fanout(self.fanout)
        return pieces | "Combine" >> combine.with_output_types(Tuple[int, SuffStats])


class TrainStep(beam.PTransform):
    """One unrolled step: (read tasks of minibatch t, state ref[t-1]) -> ref[t]."""

    def __init__(self, step: StepPlan, run_key: str, scratch: Optional[str],
                 n_threads: Optional[int] = None, deterministic: bool = True,
                 fanout: Optional[int] = None, in_place: bool = False,
                 spill: bool = False):
        super().__init__()
        self.step, self.run_key, self.scratch = step, run_key, scratch
        self.n_threads, self.deterministic, self.fanout = n_threads, deterministic, fanout
        self.in_place = in_place
        self.spill = spill and scratch is not None

    def expand(self, pcolls):
        tasks, prev_ref = pcolls
        view = beam.pvalue.AsSingleton(prev_ref, default_value=None)
        stats = tasks | "Statistics" >> MinibatchStatistics(
            view, self.n_threads, self.deterministic, self.fanout,
            single_piece=len(self.step.tasks) == 1,
            spill_dir=self.scratch if self.spill else None)
        return stats | "GlobalStep" >> beam.ParDo(
            GlobalStepFn(self.run_key, self.step.position, self.step.n_docs, self.scratch,
                         self.n_threads, self.in_place), view)


class WindowTasks(beam.PTransform):
    """All read tasks of a window, spread over the workers once, split by minibatch."""

    def __init__(self, steps: List[StepPlan]):
        super().__init__()
        self.steps = steps

    def expand(self, pbegin):
        first = self.steps[0].position
        tasks = [(sp.position, t) for sp in self.steps for t in sp.tasks]
        created = pbegin | "Create" >> beam.Create(tasks, reshuffle=True)
        if len(self.steps) == 1:
            return [created]
        return created | "ByMinibatch" >> beam.Partition(
            lambda kv, n: kv[0] - first, len(self.steps))


# ------------------------------------------------------------------------------ driver

@dataclass
class BeamTrainResult(TrainResult):
    """:class:`lda_core.trainer.TrainResult` plus the windows run and the Beam counters (the
    CLI prints either)."""
    windows: int = 0
    beam_metrics: Dict[str, int] = field(default_factory=dict)


class BeamTrainingError(ValueError):
    """A window failed (e.g. non-finite statistics); the last good checkpoint stays latest."""


def _query_counters(result) -> Dict[str, int]:
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


def _run_pipeline(cfg: RunnerConfig, build) -> Dict[str, int]:
    t0 = time.time()
    p = beam.Pipeline(runner=cfg.make_runner(), options=cfg.pipeline_options())
    build(p)
    t1 = time.time()
    result = p.run()
    result.wait_until_finish()      # metrics are complete only after this
    logger.debug("pipeline built in %.2f s, ran in %.2f s", t1 - t0, time.time() - t1)
    return _query_counters(result)


def _check_inputs(algorithm, files: Sequence[str], model_dir: Optional[str]):
    from lda_core.algorithm import StochasticAlgorithm
    if not model_dir:
        raise ValueError("--output MODEL_DIR is required (the model directory to write)")
    if not isinstance(algorithm, StochasticAlgorithm):
        raise ValueError("the Beam trainer runs local/global-step algorithms; %s is a "
                         "stream-order sampler: use --runner inprocess"
                         % getattr(algorithm, "name", type(algorithm).__name__))
    if getattr(algorithm, "accumulate_passes", getattr(algorithm, "name", "") == "batch-vb"):
        raise ValueError("%s applies one global step per pass; the Beam trainer runs "
                         "minibatch algorithms only: use --runner inprocess"
                         % getattr(algorithm, "name", type(algorithm).__name__))
    return check_shards(algorithm, files)


def check_shards(algorithm, files: Sequence[str]):
    """(files, documents per file, vocabulary hash) of a non-empty shard set whose vocabulary
    is ``algorithm``'s; a clear error before any work otherwise (both Beam trainers)."""
    from pipelines import dataset
    from pipelines.shard_stream import shard_row_counts
    files = list(files)
    if not files:
        raise FileNotFoundError("no shard files to train on (empty shard set)")
    vh = dataset.check_vocab_hash(files, getattr(algorithm, "vocab_hash", None))
    sizes = shard_row_counts(files)
    if sum(sizes) == 0:
        raise ValueError("the shards %s hold no documents" % ", ".join(files[:3]))
    return files, sizes, vh


def resume_from_latest(checkpoint_store, algorithm, vocab_hash, position: int):
    """(algorithm, position, checkpoint path) to continue from: the latest valid checkpoint
    of ``checkpoint_store`` (validated against ``algorithm``'s name, K, V and the shards'
    vocabulary hash; its state replaces ``algorithm`` when the steps differ), or the inputs
    unchanged (path None) when there is none."""
    from lda_core.trainer import resume_position
    found = checkpoint_store.latest_checkpoint()
    if found is None:
        return algorithm, position, None
    ck, state = found
    state.validate(algorithm=algorithm.name, n_topics=algorithm.n_topics,
                   n_words=algorithm.n_words, vocab_hash=vocab_hash)
    if state.step != getattr(algorithm, "step", state.step):
        from lda_core.algorithm import algorithm_class
        algorithm = algorithm_class(state.algorithm).from_state(state)
    position = resume_position(state)
    logger.info("resuming from checkpoint %s (position %d)", ck.path, position)
    return algorithm, position, ck.path


def default_scratch_root(model_dir: str, cfg: RunnerConfig,
                         scratch_dir: Optional[str] = None) -> str:
    """Where the states of the steps inside a window go when workers are other processes.

    Local runners: a folder in shared memory (``/dev/shm``) named after the model directory --
    every worker is on this machine, and a 24 MB state is written there without disk
    write-back. Remote runners, and any model directory on an object store (``gs://`` ...):
    ``MODEL_DIR/.beam-scratch`` (read and written through Beam's ``FileSystems`` there). A
    killed run's folder is removed unread by the next run on the same model directory."""
    import hashlib
    from pipelines import dataset
    tag = hashlib.sha1(os.path.abspath(model_dir).encode()).hexdigest()[:16]
    if scratch_dir:
        return os.path.join(scratch_dir, "ldabeam-scratch-%s" % tag)
    if dataset.is_remote(model_dir):
        return dataset.join(model_dir, SCRATCH_DIR)
    if cfg.local and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return os.path.join("/dev/shm", "ldabeam-scratch-%s" % tag)
    return os.path.join(model_dir, SCRATCH_DIR)


def default_window(cfg: RunnerConfig, batch_size: int) -> int:
    """Minibatches per window when not given (see DOCS_PER_WINDOW_*)."""
    docs = DOCS_PER_WINDOW_IN_PROCESS if cfg.in_process else DOCS_PER_WINDOW_WORKERS
    return int(min(MAX_WINDOW, max(1, -(-docs // max(1, int(batch_size))))))


def train(algorithm, shard_files: Sequence[str], model_dir: str, *, passes: int = 1,
          seed: int = 0, batch_size: int = 256, minibatches_per_window: Optional[int] = None,
          unroll: Optional[bool] = None, heldout=None, eval_every: int = 0,
          checkpoint_store=None, checkpoint_every: int = 0, run_log=None, resume: bool = False,
          max_steps: Optional[int] = None, run_info: Optional[Dict[str, Any]] = None,
          beam_argv: Sequence[str] = (), runner: Optional[str] = None,
          pieces_per_minibatch: Optional[int] = None, n_threads: Optional[int] = None,
          deterministic_combine: bool = True, fanout: Optional[int] = None,
          progress: bool = True, scratch_dir: Optional[str] = None,
          detach: bool = False):
    """Train ``algorithm`` (a :class:`~lda_core.algorithm.StochasticAlgorithm` at its current
    position) on ``shard_files`` in windows of Beam pipeline runs (module docstring).

    ``minibatches_per_window`` (M): default :func:`default_window` (65,536 documents per window
    in-process, 262,144 with worker processes or a cluster).
    ``unroll``: chain the window's minibatches in one pipeline (default True); False runs one
    pipeline per minibatch and applies the global step on the driver. ``checkpoint_every`` is
    accepted for the CLI's sake: the Beam trainer publishes a checkpoint at the end of every
    window. ``eval_every``: held-out evaluation at the end of a window in which a multiple of
    it was reached (and at the end). ``pieces_per_minibatch``: read tasks per minibatch
    (default: 1 in-process, 2 per worker otherwise). ``n_threads``: E-step threads per worker (default: the
    algorithm's setting in-process; cores / workers with worker processes).
    ``beam_argv``: Beam pipeline options (``--runner``, ``--direct_running_mode``, ...).
    ``scratch_dir``: where states inside a window are exchanged between worker processes
    (default: :func:`default_scratch_root`). ``heldout``: a
    :class:`lda_core.trainer.HeldOut`, or a :class:`HeldOutShards` (read when evaluated).

    ``detach``: run exactly one window (the next ``M`` minibatches from the algorithm's
    position, or from the latest checkpoint with ``resume``) and return a
    :class:`SubmittedWindow` as soon as its pipeline is submitted, without waiting
    (Dataflow Flex Templates). The pipeline itself then publishes the checkpoint, evaluates,
    appends the window's run-log records and removes its scratch folder, in a last DoFn
    (:class:`FinishWindowFn`); see "Detached windows" in docs/beam-training.md. Returns a
    :class:`BeamTrainResult` otherwise.
    """
    from lda_core.ordering import n_batches
    t_start = time.time()
    for name, v in (("passes", passes), ("batch_size", batch_size)):
        if int(v) < 1:
            raise ValueError("%s must be >= 1, got %r" % (name, v))
    if minibatches_per_window is not None and not (1 <= int(minibatches_per_window)
                                                   <= MAX_WINDOW):
        raise ValueError("minibatches_per_window must be in [1, %d], got %r"
                         % (MAX_WINDOW, minibatches_per_window))
    files, sizes, vh = _check_inputs(algorithm, shard_files, model_dir)
    argv = list(beam_argv or ())
    cfg = runner_config(runner or _strip_runner(argv), argv)
    M = int(minibatches_per_window or default_window(cfg, batch_size))
    unroll = True if unroll is None else bool(unroll)
    if detach and not unroll:
        raise ValueError("--detach runs the window as one unrolled pipeline that publishes "
                         "its own checkpoint; --no-unroll applies the global steps on the "
                         "driver, which a detached launch does not wait for")
    # in-process the numba kernel already uses every core on a whole minibatch: one piece
    # (no merge at all); with worker processes two pieces per worker balance the load
    pieces = int(pieces_per_minibatch or (1 if cfg.in_process else 2 * cfg.num_workers))
    if n_threads is None and not cfg.in_process and cfg.local:
        n_threads = max(1, (os.cpu_count() or 1) // max(1, cfg.num_workers))
    if checkpoint_store is None:
        from lda_core.checkpoint import CheckpointStore
        checkpoint_store = CheckpointStore(model_dir)

    # --- position ----------------------------------------------------------------------------
    position = int(getattr(algorithm, "step", 0) or 0)
    if resume:
        algorithm, position, _ = resume_from_latest(checkpoint_store, algorithm, vh, position)
    D = int(sum(sizes))
    B = n_batches(D, batch_size)
    total = int(passes) * B
    stop = total if max_steps is None else min(total, int(max_steps))
    if detach:
        return _submit_window(
            cfg, algorithm, files, sizes, model_dir, position=position, stop=stop,
            total=total, M=M, pieces=pieces, seed=seed, batch_size=batch_size,
            heldout=heldout, eval_every=eval_every, checkpoint_store=checkpoint_store,
            checkpoint_every=checkpoint_every, run_log=run_log, max_steps=max_steps,
            run_info=run_info, n_threads=n_threads, deterministic=deterministic_combine,
            fanout=fanout, scratch_dir=scratch_dir, t_start=t_start)
    if isinstance(heldout, HeldOutShards):
        heldout = heldout.load()

    run_key = uuid.uuid4().hex[:12]
    scratch_root = default_scratch_root(model_dir, cfg, scratch_dir)
    beam_state.remove_tree(scratch_root)  # left by a killed run: never read, just removed
    scratch = None if cfg.in_process else os.path.join(scratch_root, run_key)
    if scratch is not None:
        beam_state.make_dirs(scratch)

    if run_log is not None:
        run_log.write(_start_record(t_start, position, algorithm, max_steps, total, eval_every,
                                    checkpoint_every, run_info, cfg.describe(), M, unroll,
                                    pieces))
    logger.info("Beam trainer: %s, %d minibatches of %d documents per pass (D=%d), steps "
                "%d..%d, windows of %d minibatch(es), %s, %d piece(s) per minibatch",
                cfg.describe(), B, batch_size, D, position, stop, M,
                "unrolled" if unroll else "one pipeline per minibatch", pieces)

    metrics: Dict[str, float] = {}
    last_eval_pos = -1
    last_ckpt: Optional[str] = None
    steps_run = 0
    windows = 0
    counters_total: Dict[str, int] = {}
    n_windows = max(1, -(-(stop - position) // M))

    def state_ref(algo, pos) -> StateRef:
        key = "%s/%d" % (run_key, pos)
        if scratch is None:
            # the window's steps update this copy in place (GlobalStepFn); the driver's
            # object stays the last published state until the window has succeeded
            beam_state.put_local(key, beam_state.private_copy(algo))
            return StateRef(key, None, pos)
        # a scratch copy even when the state was just published as a checkpoint: workers
        # load it in tens of ms, a checkpoint directory (sha256 of every array) took ~1.2 s
        path = os.path.join(scratch, "state-%09d.npz" % pos)
        beam_state.save_scratch(algo, path)
        return StateRef(key, path, pos)

    def publish(algo, pos) -> str:
        return _publish(checkpoint_store, algo, pos, cfg.describe(), run_info)

    try:
        while position < stop:
            w_start = time.time()
            w_stop = min(stop, position + M)
            steps = plan_steps(files, sizes, seed=seed, batch_size=batch_size, start=position,
                               stop=w_stop, pieces_per_minibatch=pieces)
            start_ref = state_ref(algorithm, position)
            if unroll:
                infos, new_algo, error, counters = _run_unrolled(cfg, steps, start_ref,
                                                                 run_key, scratch, n_threads,
                                                                 deterministic_combine, fanout)
            else:
                infos, new_algo, error, counters = _run_stepwise(
                    cfg, steps, algorithm, start_ref, run_key, scratch, n_threads,
                    deterministic_combine, fanout, state_ref)
            for k, v in counters.items():
                counters_total[k] = counters_total.get(k, 0) + v
            done = len(infos)
            if done:
                algorithm = new_algo
                position += done
                steps_run += done
            windows += 1
            w_time = time.time() - w_start
            # evaluation (once per window, when a multiple of eval_every was reached)
            rec_metrics = None
            if heldout is not None and _eval_due(position, done, eval_every):
                metrics = timed_evaluate(algorithm, heldout)
                last_eval_pos = position
                rec_metrics = metrics
            if done:
                last_ckpt = publish(algorithm, position)
            _log_steps(run_log, steps[:done], infos, rec_metrics, last_ckpt, t_start)
            if scratch is not None:
                _clean_scratch(scratch, keep=None)
            else:
                beam_state.drop_local(run_key + "/")
            remaining = stop - position
            rate = steps_run / max(1e-9, time.time() - t_start)
            eta = remaining / rate if rate > 0 else float("nan")
            score = ""
            if metrics:
                score = " completion_ll/token=%.4f" % metrics.get("completion_ll_per_token",
                                                                  float("nan"))
            logger.info("window %d/%d: steps %d..%d (%d docs, %.1f s, %s) docs_seen=%d%s "
                        "ETA %.0f s", windows, n_windows, position - done, position,
                        sum(s.n_docs for s in steps[:done]), w_time,
                        ", ".join("%s=%d" % kv for kv in sorted(counters.items())) or "-",
                        int(getattr(algorithm, "docs_seen", 0) or 0), score, eta)
            if progress and hasattr(sys.stderr, "isatty") and sys.stderr.isatty():
                print("\rwindow %d/%d  step %d/%d  docs %d%s  ETA %.0fs   "
                      % (windows, n_windows, position, stop,
                         int(getattr(algorithm, "docs_seen", 0) or 0), score, eta),
                      end="", file=sys.stderr, flush=True)
            if error is not None:
                msg = _error_message(error, last_ckpt)
                logger.error(msg)
                if run_log is not None:
                    run_log.write(dict(event="error", step=error[0], message=msg,
                                       wall_time=time.time()))
                raise BeamTrainingError(msg)
        if heldout is not None and last_eval_pos != position:
            metrics = timed_evaluate(algorithm, heldout)
    finally:
        if progress and hasattr(sys.stderr, "isatty") and sys.stderr.isatty():
            print("", file=sys.stderr)
        if scratch is not None:
            beam_state.remove_tree(scratch_root)
        beam_state.drop_local(run_key + "/")
    if last_ckpt is None and checkpoint_store is not None and steps_run == 0:
        found = checkpoint_store.list_checkpoints()
        last_ckpt = found[-1].path if found else None
    elapsed = time.time() - t_start
    if run_log is not None:
        run_log.write(_end_record(position, algorithm, steps_run, elapsed, metrics, last_ckpt,
                                  windows, counters_total))
    logger.info("Beam training finished at step %d (%d steps, %d windows, %.1f s)%s", position,
                steps_run, windows, elapsed, "" if not metrics else ": " + ", ".join(
                    "%s=%.4f" % (k, v) for k, v in metrics.items()))
    return BeamTrainResult(algorithm, position, int(getattr(algorithm, "docs_seen", 0) or 0),
                           steps_run, elapsed, dict(metrics), last_ckpt, None, windows,
                           counters_total)


# ------------------------------------------------------------------------------ detached windows

@dataclass(frozen=True)
class HeldOutShards:
    """Held-out documents named by their shards (``max_docs`` first ones, vocabulary hash
    checked), read where they are evaluated -- a detached window's last DoFn reads them in
    the worker instead of carrying the documents in the graph. ``load()`` gives the
    :class:`lda_core.trainer.HeldOut` the driver would build (None when it is empty)."""
    files: Tuple[str, ...]
    vocab_hash: Optional[str]
    max_docs: Optional[int]
    seed: int = 0

    def load(self):
        from lda_core.trainer import HeldOut
        from pipelines.shard_stream import read_docs
        held = HeldOut.from_batch(read_docs(list(self.files), self.vocab_hash,
                                            max_docs=self.max_docs), seed=self.seed)
        return held if held.docs.n_docs else None


@dataclass
class SubmittedWindow:
    """What ``train(..., detach=True)`` returns: the submitted window and its job.

    ``result``: the runner's ``PipelineResult`` (``result.wait_until_finish()`` waits for the
    job), None when nothing was submitted (``start == total``: training already complete).
    ``start``/``stop``: positions (minibatches of the seeded order) before and after the
    window if every step succeeds; ``total``: where training stops (passes or max_steps).
    ``runs_here``: the runner runs the job inside this process (the DirectRunner: ``run()``
    returned only when the job was done; :mod:`pipelines.detached`)."""
    result: Any
    runner: str
    model_dir: str
    start: int
    stop: int
    total: int
    run_key: Optional[str] = None
    runs_here: bool = False

    def wait(self) -> Optional[str]:
        """Wait for the job (no-op when none was submitted); returns its final state."""
        if self.result is None:
            return None
        return self.result.wait_until_finish()


@dataclass
class WindowFinish:
    """Everything the last DoFn of a detached window needs (a few kB in the graph)."""
    model_dir: str
    keep_last: Optional[int]
    run_log_path: Optional[str]
    run_key: str
    run_dir: str                    # the run's scratch folder (removed at the end)
    scratch: Optional[str]          # where the steps' states and infos are (None: in memory)
    start_ref: StateRef
    steps: List[StepPlan]           # the window's steps, without their read tasks
    eval_every: int
    heldout: Any                    # HeldOutShards, a HeldOut, or None
    runner: str
    run_info: Optional[Dict[str, Any]]
    start_record: Dict[str, Any]
    t_start: float


class FinishWindowFn(LeanDoFn):
    """The last transform of a detached window: what the driver of a waiting run does after
    the window's pipeline, done inside the job (the driver has returned long ago).

    Runs once (main input: one element), after the window's last global step (its state
    reference is a side input, so Beam runs this only when the window is done). Collects the
    steps' infos and the last good state (:func:`_collect_window`); evaluates on the held-out
    documents (read here) when a multiple of ``eval_every`` was reached in the window or, as
    at the end of a waiting run, when the window ends the launch unevaluated; publishes the
    checkpoint through :class:`lda_core.checkpoint.CheckpointStore` (the object-store layer
    for URLs), with the trainer info the driver writes; appends the window's run-log records
    (start, one per step, end -- or error) in one write (:func:`_append_records`); removes the
    run's scratch folder. A step that failed publishes the steps before it, logs the error
    and fails the job (BeamTrainingError).

    A retried bundle does not publish or log twice: a window whose ``end`` record is already
    in the run log is done; a checkpoint is not published again when LATEST already records
    this window's position (or a later one: another run continued the model)."""

    def __init__(self, spec: WindowFinish):
        self.spec = spec

    def process(self, _, final_ref):
        f = self.spec
        seen = _window_in_log(f.run_log_path, f.run_key)
        if seen is not None:
            kind, msg = seen
            logger.info("window %s is already in the run log (%s): a retried bundle",
                        f.run_key, kind)
            if kind == "error":
                raise BeamTrainingError(msg)
            return
        from lda_core.checkpoint import CheckpointStore
        infos, algo, error = _collect_window(f.steps, f.start_ref, f.run_key, f.scratch)
        done = len(infos)
        position = f.start_ref.position + done
        records = _Records()
        records.write(f.start_record)
        metrics: Dict[str, float] = {}
        rec_metrics = None
        last_eval_pos = -1
        last_ckpt = None
        heldout = None
        if f.heldout is not None and done:
            heldout = f.heldout.load() if isinstance(f.heldout, HeldOutShards) else f.heldout
        if heldout is not None and _eval_due(position, done, f.eval_every):
            metrics = timed_evaluate(algo, heldout)
            last_eval_pos = position
            rec_metrics = metrics
        if done:
            store = CheckpointStore(f.model_dir, keep_last=f.keep_last)
            last_ckpt = _publish_once(store, algo, position, f.runner, f.run_info)
        _log_steps(records, f.steps[:done], infos, rec_metrics, last_ckpt, f.t_start)
        msg = None
        if error is not None:
            msg = _error_message(error, last_ckpt)
            logger.error(msg)
            records.write(dict(event="error", step=error[0], message=msg,
                               wall_time=time.time(), run_key=f.run_key))
        else:
            if heldout is not None and last_eval_pos != position:
                metrics = timed_evaluate(algo, heldout)
            # Beam's counters are complete only after wait_until_finish(), which a detached
            # launch never calls: see the job in the runner's console instead
            end = _end_record(position, algo, done, time.time() - f.t_start, metrics,
                              last_ckpt, 1, None)
            end["run_key"] = f.run_key
            records.write(end)
        if f.run_log_path is not None:
            _append_records(f.run_log_path, records.items)
        beam_state.drop_local(f.run_key + "/")
        beam_state.remove_tree(f.run_dir)
        logger.info("detached window %s: steps %d..%d published as %s%s", f.run_key,
                    f.start_ref.position, position, last_ckpt or "nothing",
                    "" if not metrics else ": " + ", ".join(
                        "%s=%.4f" % (k, v) for k, v in sorted(metrics.items())))
        if msg is not None:
            raise BeamTrainingError(msg)
        yield position


class _Records:
    """A run-log stand-in that keeps the records (written together at the end)."""

    def __init__(self):
        self.items: List[Dict[str, Any]] = []

    def write(self, record: Dict[str, Any]) -> None:
        self.items.append(record)


def _append_records(path: str, records: Sequence[Dict[str, Any]]) -> None:
    """Append ``records`` to the run log ``path`` in one write (one writer per window at a
    time): :func:`lda_core.run_log.append_records`."""
    from lda_core.run_log import append_records
    append_records(path, records)


def _window_in_log(path: Optional[str], run_key: str):
    """``("end", None)`` / ``("error", message)`` when the run log already holds the window
    ``run_key``'s last record, else None."""
    from lda_core.run_log import read_run_log, run_log_exists
    if path is None or not run_log_exists(path):
        return None
    for rec in read_run_log(path):
        if rec.get("run_key") == run_key and rec.get("event") in ("end", "error"):
            return rec["event"], rec.get("message")
    return None


def _published_position(store) -> Optional[int]:
    """The position (minibatches done) of the checkpoint LATEST names, from its state.json
    alone (no array is read), or None."""
    path = store.pointer_path()
    if path is None:
        return None
    try:
        with store.files.open_read(store.files.join(path, "state.json")) as fh:
            meta = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    trainer = (meta.get("info") or {}).get("trainer") or {}
    try:
        return int(trainer.get("minibatches_done", meta.get("step")))
    except (TypeError, ValueError):
        return None


def _eval_due(position: int, done: int, eval_every: int) -> bool:
    """Whether a window that ran ``done`` steps up to ``position`` passed a multiple of
    ``eval_every`` (the window is evaluated once, at its end, then)."""
    return bool(done and eval_every and
                position // eval_every > (position - done) // eval_every)


def _publish_once(store, algo, pos: int, runner: str, run_info) -> Optional[str]:
    """:func:`_publish`, unless LATEST already records position ``pos`` (a retried bundle:
    its path is returned) or a later one (another run went on: nothing is published, so
    LATEST never moves back)."""
    done = _published_position(store)
    if done is not None and done >= pos:
        path = store.pointer_path()
        if done == pos:
            logger.info("checkpoint at position %d already published (%s)", pos, path)
            return path
        logger.warning("LATEST (%s) is at position %d, past this window's %d: another run "
                       "continued the model; this window's state is not published", path,
                       done, pos)
        return None
    return _publish(store, algo, pos, runner, run_info)


def _submit_window(cfg, algorithm, files, sizes, model_dir, *, position, stop, total, M,
                   pieces, seed, batch_size, heldout, eval_every, checkpoint_store,
                   checkpoint_every, run_log, max_steps, run_info, n_threads, deterministic,
                   fanout, scratch_dir, t_start) -> SubmittedWindow:
    """``train(..., detach=True)``: plan the next window, put its start state in the run's
    scratch folder, build the window's pipeline with :class:`FinishWindowFn` at the end and
    submit it without waiting."""
    from pipelines import detached
    runs_here = detached.job_runs_here(cfg.runner, cfg.argv)
    if position >= stop:
        logger.info("training is complete: position %d of %d (%s); no window to submit",
                    position, stop, "--max-steps" if stop < total else "every pass done")
        return SubmittedWindow(None, cfg.describe(), model_dir, position, position, stop,
                               None, runs_here)
    run_key = uuid.uuid4().hex[:12]
    scratch_root = default_scratch_root(model_dir, cfg, scratch_dir)
    # left by a killed run: never read, just removed (launches on one model do not overlap)
    beam_state.remove_tree(scratch_root)
    run_dir = os.path.join(scratch_root, run_key)
    beam_state.make_dirs(run_dir)
    scratch = None if cfg.in_process else run_dir
    w_stop = min(stop, position + M)
    steps = plan_steps(files, sizes, seed=seed, batch_size=batch_size, start=position,
                       stop=w_stop, pieces_per_minibatch=pieces)
    # the window's start state where every worker can read it (the job cannot reach the
    # driver's memory: the driver is gone by then)
    start_path = os.path.join(run_dir, "state-%09d.npz" % position)
    beam_state.save_scratch(algorithm, start_path)
    start_ref = StateRef("%s/%d" % (run_key, position), start_path, position)
    start_record = _start_record(t_start, position, algorithm, max_steps, total, eval_every,
                                 checkpoint_every, run_info, cfg.describe(), M, True, pieces)
    start_record["run"]["detached"] = True
    start_record["run_key"] = run_key
    start_record["window"] = [position, w_stop]
    spec = WindowFinish(
        model_dir=model_dir, keep_last=getattr(checkpoint_store, "keep_last", None),
        run_log_path=getattr(run_log, "path", None), run_key=run_key, run_dir=run_dir,
        scratch=scratch, start_ref=start_ref,
        steps=[StepPlan(sp.position, sp.pass_index, sp.batch_index, sp.n_docs)
               for sp in steps],
        eval_every=int(eval_every or 0), heldout=heldout, runner=cfg.describe(),
        run_info=run_info, start_record=start_record, t_start=t_start)

    p = beam.Pipeline(runner=cfg.make_runner(), options=cfg.pipeline_options())
    final = _build_window(p, cfg, steps, start_ref, run_key, scratch, n_threads,
                          deterministic, fanout)
    (p | "FinishStart" >> beam.Create([None], reshuffle=False)
     | "FinishWindow" >> beam.ParDo(FinishWindowFn(spec),
                                    beam.pvalue.AsSingleton(final, default_value=None)))
    logger.info("Beam trainer, detached: %s, steps %d..%d of %d (window %s), %d piece(s) per "
                "minibatch; the job publishes the checkpoint and the run log",
                cfg.describe(), position, w_stop, stop, run_key, pieces)
    try:
        result = p.run()
    finally:
        if runs_here and cfg.in_process:
            beam_state.drop_local(run_key + "/")
    return SubmittedWindow(result, cfg.describe(), model_dir, position, w_stop, stop,
                           run_key, runs_here)


def _strip_runner(argv: List[str]) -> Optional[str]:
    from pipelines.beam_options import _strip_option
    return _strip_option(argv, "runner")


def _clean_scratch(scratch: str, keep: Optional[str]) -> None:
    if keep is None and beam_state.is_remote(scratch):
        beam_state.remove_tree(scratch)      # objects: no folder to keep
        return
    for name in os.listdir(scratch):
        p = os.path.join(scratch, name)
        if keep is not None and os.path.abspath(p) == os.path.abspath(keep):
            continue
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass


def _build_window(p, cfg, steps: List[StepPlan], start_ref: StateRef, run_key: str,
                  scratch: Optional[str], n_threads, deterministic, fanout):
    """The unrolled window's transforms in pipeline ``p``; returns the PCollection of the
    final state's reference (empty when a step failed)."""
    ref = p | "State%d" % start_ref.position >> beam.Create([start_ref], reshuffle=False)
    if scratch is None and all(len(sp.tasks) == 1 for sp in steps):
        # in-process: one fused chain of whole steps (InProcessStepFn)
        for group in _group_steps(steps, IN_PROCESS_DOCS_PER_TRANSFORM):
            ref = ref | "Steps%d" % group[0].position >> beam.ParDo(
                InProcessStepFn(group, run_key, n_threads)).with_output_types(StateRef)
        return ref
    tasks = p | "Tasks" >> WindowTasks(steps)
    for j, sp in enumerate(steps):
        ref = (tasks[j], ref) | "Step%d" % sp.position >> TrainStep(
            sp, run_key, scratch, n_threads, deterministic, fanout,
            in_place=cfg.runner in ("DirectRunner", "FnApiRunner"),
            spill=cfg.local and not beam_state.is_remote(scratch))
    return ref


def _run_unrolled(cfg, steps: List[StepPlan], start_ref: StateRef, run_key: str,
                  scratch: Optional[str], n_threads, deterministic, fanout):
    """One pipeline for the whole window; returns (infos, final algorithm, error, counters)."""

    def build(p):
        _build_window(p, cfg, steps, start_ref, run_key, scratch, n_threads, deterministic,
                      fanout)

    counters = _run_pipeline(cfg, build)
    infos, algo, error = _collect_window(steps, start_ref, run_key, scratch)
    return infos, algo, error, counters


def _collect_window(steps: Sequence[StepPlan], start_ref: StateRef, run_key: str,
                    scratch: Optional[str]):
    """After an unrolled window: the global steps' infos up to the first missing or failed
    one, the state after the last good step (None if none) and the error ``(step, message)``
    or None. Run by the driver, or (``--detach``) by the window's last DoFn."""
    infos, error = [], None
    last_key = start_ref.key
    for sp in steps:
        key = "%s/%d" % (run_key, sp.position + 1)
        info = _load_info(scratch, key)
        if info is None:
            error = (sp.position + 1, "the pipeline produced no state for this step")
            break
        if "error" in info:
            error = (sp.position + 1, info["error"])
            break
        infos.append(info)
        last_key = key
    if not infos:
        return infos, None, error
    if scratch is None:
        algo = beam_state.get_local(last_key)
    else:
        algo = beam_state.load_algorithm(os.path.join(scratch, "state-%09d.npz"
                                                      % (steps[len(infos) - 1].position + 1)))
    return infos, algo, error


def _run_stepwise(cfg, steps: List[StepPlan], algorithm, start_ref: StateRef, run_key: str,
                  scratch: Optional[str], n_threads, deterministic, fanout, state_ref):
    """One pipeline per minibatch, the global step on the driver."""
    infos: List[Dict[str, Any]] = []
    counters: Dict[str, int] = {}
    ref = start_ref
    algo = algorithm
    error = None
    for sp in steps:
        def build(p, sp=sp, ref=ref):
            r = p | "State" >> beam.Create([ref], reshuffle=False)
            view = beam.pvalue.AsSingleton(r)
            tasks = (p | "Tasks" >> WindowTasks([sp]))[0]
            (tasks
             | "Statistics" >> MinibatchStatistics(
                 view, n_threads, deterministic, fanout,
                 spill_dir=scratch if cfg.local and not beam_state.is_remote(scratch)
                 else None)
             | "Hand" >> beam.ParDo(WriteStatsFn(run_key, sp.position, scratch)))

        c = _run_pipeline(cfg, build)
        for k, v in c.items():
            counters[k] = counters.get(k, 0) + v
        key = "%s/stats-%d" % (run_key, sp.position)
        if scratch is None:
            stats = beam_state.get_local_info(key)
        else:
            path = os.path.join(scratch, "stats-%09d.bin" % sp.position)
            stats = decode_stats(beam_state.read_bytes(path))
        nxt = algo          # the pipeline has finished reading it (its readers use a copy)
        t0 = time.time()
        try:
            info = dict(nxt.global_step(stats) or {})
        except (ValueError, FloatingPointError, ArithmeticError) as e:
            error = (sp.position + 1, str(e))
            break
        info["global_step_seconds"] = time.time() - t0
        info["docs_in_minibatch"] = sp.n_docs
        info["docs_seen"] = int(getattr(nxt, "docs_seen", 0) or 0)
        info["position"] = sp.position + 1
        infos.append(info)
        algo = nxt
        ref = state_ref(algo, sp.position + 1)
    return infos, (algo if infos else None), error, counters


def _publish(checkpoint_store, algo, pos: int, runner: str,
             run_info: Optional[Dict[str, Any]]) -> str:
    """Publish ``algo`` (after ``pos`` minibatches of the order) as a checkpoint, with the
    trainer's info (position, documents seen, runner, run settings)."""
    state = algo.to_state()
    info = dict(state.info or {})
    info["trainer"] = dict(minibatches_done=pos,
                           docs_seen=int(getattr(algo, "docs_seen", 0) or 0),
                           wall_time=time.time(), runner=runner)
    if run_info:
        info["run"] = run_info
    state.info = info
    return checkpoint_store.publish(state)


def _start_record(t_start, position, algorithm, max_steps, total, eval_every,
                  checkpoint_every, run_info, runner: str, M, unroll, pieces) -> Dict[str, Any]:
    return dict(event="start", wall_time=t_start, start_step=position,
                algorithm=algorithm.name, n_topics=algorithm.n_topics,
                n_words=algorithm.n_words, max_steps=max_steps, total_steps=total,
                eval_every=eval_every, checkpoint_every=checkpoint_every,
                run=dict(run_info or {}, runner=runner, minibatches_per_window=M,
                         unroll=unroll, pieces_per_minibatch=pieces))


def _end_record(position, algorithm, steps_run, elapsed, metrics, last_ckpt, windows,
                beam_metrics) -> Dict[str, Any]:
    return dict(event="end", step=position,
                docs_seen=int(getattr(algorithm, "docs_seen", 0) or 0),
                steps_run=steps_run, elapsed=elapsed, metrics=metrics,
                checkpoint=last_ckpt, wall_time=time.time(), windows=windows,
                beam_metrics=beam_metrics)


def _error_message(error, last_ckpt: Optional[str]) -> str:
    return ("minibatch %d could not be applied: %s; training stopped, the last good "
            "checkpoint (%s) stays the latest" % (error[0], error[1],
                                                   last_ckpt or "none written"))


def _log_steps(run_log, steps: List[StepPlan], infos: List[Dict[str, Any]],
               metrics: Optional[Dict[str, float]], ckpt: Optional[str], t_start: float):
    """One run-log record per global step (the in-process trainer's format)."""
    now = time.time()
    for i, (sp, info) in enumerate(zip(steps, infos)):
        last = i == len(infos) - 1
        rec = dict(event="step", step=sp.position + 1, t=info.get("t", sp.position + 1),
                   pass_index=sp.pass_index, batch=sp.batch_index,
                   docs_seen=info.get("docs_seen"), docs=info.get("docs", sp.n_docs),
                   tokens=info.get("tokens"), empty=info.get("empty"),
                   capped=info.get("capped"), rho=info.get("rho"),
                   mean_change=info.get("mean_change"))
        for k in ("elbo", "bound", "alpha", "eta", "skipped"):
            if k in info and np.ndim(info[k]) == 0:
                rec[k] = info[k]
        logger.info("step t=%d pass=%d batch=%d rho=%s docs=%s docs_seen=%s mean_change=%s",
                    sp.position + 1, sp.pass_index, sp.batch_index, _fmt(info.get("rho")),
                    rec["docs"], rec["docs_seen"], _fmt(info.get("mean_change")))
        if last and metrics:
            rec["metrics"] = metrics
        if last and ckpt:
            rec["checkpoint"] = ckpt
        rec["wall_time"] = now
        rec["elapsed"] = now - t_start
        if run_log is not None:
            run_log.write(rec)


def _fmt(v) -> str:
    if v is None:
        return "-"
    try:
        return "%.4g" % float(v)
    except (TypeError, ValueError):
        return str(v)
