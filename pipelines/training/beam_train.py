"""The Beam trainer: the in-process trainer's loop, with each minibatch's E-step spread over
Beam workers.

Training is a sequence of *windows*; a window is one pipeline run over the next ``M``
minibatches of the seeded order (:mod:`lda_core.training.ordering`, the same order as the in-process
trainer). At the end of every window the driver publishes the state as a checkpoint
(:class:`lda_core.storage.checkpoint.CheckpointStore`, atomic) and the next window starts from it.

Inside a window, for minibatch ``t`` (all composite transforms below)::

    Create(read tasks of t)      a few (piece id, [(shard file, rows)]) records: which rows of
      |                          which shard make up each piece of the minibatch -- decided
      |                          by plan_pass from the shard row counts alone, so membership
      |                          never depends on how Beam bundles or splits the work
    ParDo(EStepFn, side=ref[t-1])  read the rows (pyarrow, one cached shard per process),
      |                            algorithm.local_step(piece) with the state of version
      |                            ref[t-1] (loaded once per process: pipelines.training.beam_state),
      |                            Beam metrics, emit (piece id, stats) as raw bytes
    CombinePerKey(StatsCombineFn)  lifted: per-bundle pre-combine, no shuffle of pieces;
      |                            pieces merged in piece order (bit-reproducible sums);
      |                            skipped when the minibatch is one piece (in-process)
    ParDo(GlobalStepFn, side=ref[t-1])  -> ref[t]: a copy of state t-1, algorithm.global_step,
                                           state t stored (in memory for the in-process runner,
                                           else a scratch directory beside the checkpoints)

With the in-process runner (one worker, one piece per minibatch) the window is instead one
fused chain of :class:`InProcessStepFn` ParDos taking the state reference as main input (see
there); with worker processes on this machine each step is one stage in which every worker
advances its own copy of the state (:mod:`pipelines.training.beam_chain`). Each window logs the cost
of its steps by phase in a ``timing`` run-log record (:mod:`pipelines.training.beam_cost`). *Unrolled* (``unroll=True``, the default): the ``M`` minibatches of a window are
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

import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from lda_core.errors import InputError, UsageError
from lda_core.training import session as _session
from lda_core.training import pieces as pieces_mod
from lda_core.training.phase_times import PhaseTimes
from lda_core.training.session import Session, TrainingError  # noqa: F401 (what the Beam trainers raise)
from lda_core.training.trainer import TrainResult
from pipelines.training import beam_state
from pipelines.runtime.beam_options import RunnerConfig, runner_config
from pipelines.training.beam_state import StateRef
from pipelines.training.beam_plan import StepPlan, plan_steps
from pipelines.training.beam_chain import PARALLEL_PHASES
from pipelines.training.beam_detached import (  # noqa: F401 (SubmittedWindow: what train returns)
    HeldOutShards, SubmittedWindow, submit_window)
from pipelines.training.beam_run import (  # noqa: F401 (API)
    SCRATCH_DIR, after_window, default_scratch_root, start_record)
from pipelines.training.beam_window import _run_stepwise, _run_unrolled, chained

logger = logging.getLogger(__name__)

# minibatches per window when not given, from documents per window: in-process a pipeline
# run costs ~0.3-0.45 s to start and 65,536 documents are ~5 s of E-step at K = 100 here
# (~8% start-up; a crash loses at most those seconds); worker processes cost ~3.3-6 s per
# pipeline run, so their windows hold 4x more.
DOCS_PER_WINDOW_IN_PROCESS = 65536
DOCS_PER_WINDOW_WORKERS = 262144
MAX_WINDOW = 10000           # cap on the graph depth of one unrolled pipeline


# ------------------------------------------------------------------------------ driver

@dataclass
class BeamTrainResult(TrainResult):
    """:class:`lda_core.training.trainer.TrainResult` plus the windows run and the Beam counters (the
    CLI prints either)."""
    windows: int = 0
    beam_metrics: Dict[str, int] = field(default_factory=dict)


def _check_inputs(algorithm, files: Sequence[str], model_dir: Optional[str]):
    from lda_core.algorithms.algorithm import StochasticAlgorithm
    if not model_dir:
        raise UsageError("--output MODEL_DIR is required (the model directory to write)")
    if not isinstance(algorithm, StochasticAlgorithm):
        raise UsageError("the Beam trainer runs local/global-step algorithms; %s is a "
                         "stream-order sampler: use --runner inprocess"
                         % getattr(algorithm, "name", type(algorithm).__name__))
    if _session.accumulates_passes(algorithm):
        raise UsageError("%s applies one global step per pass; the Beam trainer runs "
                         "minibatch algorithms only: use --runner inprocess"
                         % getattr(algorithm, "name", type(algorithm).__name__))
    return check_shards(algorithm, files)


def check_shards(algorithm, files: Sequence[str]):
    """(files, documents per file, vocabulary hash) of a non-empty shard set whose vocabulary
    is ``algorithm``'s; a clear error before any work otherwise (both Beam trainers)."""
    from pipelines.ingest import dataset
    from pipelines.training.shard_stream import shard_row_counts
    files = list(files)
    if not files:
        raise FileNotFoundError("no shard files to train on (empty shard set)")
    vh = dataset.check_vocab_hash(files, getattr(algorithm, "vocab_hash", None))
    sizes = shard_row_counts(files)
    if sum(sizes) == 0:
        raise InputError("the shards %s hold no documents" % ", ".join(files[:3]))
    return files, sizes, vh


def resume_from_latest(checkpoint_store, algorithm, vocab_hash, position: int):
    """(algorithm, position, checkpoint path) to continue from: the latest valid checkpoint
    of ``checkpoint_store`` (validated against ``algorithm``'s name, K, V and the shards'
    vocabulary hash; its state replaces ``algorithm`` when the steps differ), or the inputs
    unchanged (path None) when there is none."""
    algorithm, position, path, _ = _resume(checkpoint_store, algorithm, vocab_hash, position)
    return algorithm, position, path


def _resume(checkpoint_store, algorithm, vocab_hash, position: int):
    """:func:`resume_from_latest` and the checkpoint's run information (``info["run"]``)."""
    from lda_core.training.trainer import resume_position
    found = checkpoint_store.latest_checkpoint()
    if found is None:
        return algorithm, position, None, {}
    ck, state = found
    state.validate(algorithm=algorithm.name, n_topics=algorithm.n_topics,
                   n_words=algorithm.n_words, vocab_hash=vocab_hash)
    if state.step != getattr(algorithm, "step", state.step):
        from lda_core.algorithms.algorithm import algorithm_class
        algorithm = algorithm_class(state.algorithm).from_state(state)
    position = resume_position(state)
    logger.info("resuming from checkpoint %s (position %d)", ck.path, position)
    return algorithm, position, ck.path, dict((state.info or {}).get("run") or {})


def default_pieces(cfg: RunnerConfig) -> int:
    """Pieces per minibatch for a fresh run when ``pieces_per_minibatch`` is not given
    (:mod:`lda_core.training.pieces`: the value is recorded in the checkpoints and every later
    resume keeps it, so the sums never depend on the worker count). Local runners, in-process
    or worker processes: :data:`~lda_core.training.pieces.DEFAULT_PIECES` (1), as the in-process
    trainer. Remote runners: at least one piece per worker the first run may use
    (``--num_workers`` / ``--max_num_workers``), so the E-step spreads over them."""
    from lda_core.training.pieces import DEFAULT_PIECES, MAX_PIECES, REMOTE_MIN_PIECES
    if cfg.local:
        return DEFAULT_PIECES
    workers = [cfg.num_workers]
    for a in cfg.argv:
        if a.startswith(("--max_num_workers=", "--num_workers=")):
            try:
                workers.append(int(a.split("=", 1)[1]))
            except ValueError:
                pass
    return int(min(MAX_PIECES, max([REMOTE_MIN_PIECES] + workers)))


def _check_settings(passes, batch_size, minibatches_per_window, unroll: bool,
                    detach: bool) -> None:
    for name, v in (("passes", passes), ("batch_size", batch_size)):
        if int(v) < 1:
            raise UsageError("%s must be >= 1, got %r" % (name, v))
    if minibatches_per_window is not None and not (1 <= int(minibatches_per_window)
                                                   <= MAX_WINDOW):
        raise UsageError("minibatches_per_window must be in [1, %d], got %r"
                         % (MAX_WINDOW, minibatches_per_window))
    if detach and not unroll:
        raise UsageError("--detach runs the window as one unrolled pipeline that publishes "
                         "its own checkpoint; --no-unroll applies the global steps on the "
                         "driver, which a detached launch does not wait for")


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
          detach: bool = False, pass_stop=None):
    """Train ``algorithm`` (a :class:`~lda_core.algorithms.algorithm.StochasticAlgorithm` at its current
    position) on ``shard_files`` in windows of Beam pipeline runs (module docstring).

    ``minibatches_per_window`` (M): default :func:`default_window` (65,536 documents per window
    in-process, 262,144 with worker processes or a cluster).
    ``unroll``: chain the window's minibatches in one pipeline (default True); False runs one
    pipeline per minibatch and applies the global step on the driver. ``checkpoint_every`` is
    accepted for the CLI's sake: the Beam trainer publishes a checkpoint at the end of every
    window. ``eval_every``: held-out evaluation at the end of a window in which a multiple of
    it was reached (and at the end). ``pieces_per_minibatch``: read tasks per minibatch
    (default: :func:`default_pieces`). ``n_threads``: E-step threads per worker (default: the
    algorithm's setting in-process; cores / workers with worker processes).
    ``beam_argv``: Beam pipeline options (``--runner``, ``--direct_running_mode``, ...).
    ``scratch_dir``: where states inside a window are exchanged between worker processes
    (default: :func:`default_scratch_root`). ``heldout``: a
    :class:`lda_core.training.trainer.HeldOut`, or a :class:`HeldOutShards` (read when evaluated).
    ``pass_stop`` (``--passes auto``, :class:`lda_core.training.pass_stop.PassStop`; not with
    ``detach``): windows end at pass ends at the latest, where :func:`after_window` feeds the
    held-out score to the rule, and the run stops when it says so.

    ``detach``: run exactly one window (the next ``M`` minibatches from the algorithm's
    position, or from the latest checkpoint with ``resume``) and return a
    :class:`SubmittedWindow` as soon as its pipeline is submitted, without waiting
    (Dataflow Flex Templates). The pipeline itself then publishes the checkpoint, evaluates,
    appends the window's run-log records and removes its scratch folder, in a last DoFn
    (:class:`FinishWindowFn`); see "Detached windows" in docs/beam-training.md. Returns a
    :class:`BeamTrainResult` otherwise.
    """
    # set-up and position here; the waiting run is _run_windows
    from lda_core.training.ordering import n_batches
    t_start = time.time()
    unroll = True if unroll is None else bool(unroll)
    _check_settings(passes, batch_size, minibatches_per_window, unroll, detach)
    files, sizes, vh = _check_inputs(algorithm, shard_files, model_dir)
    argv = list(beam_argv or ())
    cfg = runner_config(runner or _strip_runner(argv), argv)
    M = int(minibatches_per_window or default_window(cfg, batch_size))
    if n_threads is None and not cfg.in_process:
        # worker processes share the machine's cores; on a remote runner every SDK process
        # is one of several on its VM, each given work of its own
        n_threads = (max(1, (os.cpu_count() or 1) // max(1, cfg.num_workers)) if cfg.local
                     else 1)
    if checkpoint_store is None:
        from lda_core.storage.checkpoint import CheckpointStore
        checkpoint_store = CheckpointStore(model_dir)

    # --- position ----------------------------------------------------------------------------
    position = int(getattr(algorithm, "step", 0) or 0)
    recorded = None
    if resume:
        algorithm, position, path, prev_run = _resume(checkpoint_store, algorithm, vh, position)
        recorded = pieces_mod.recorded_pieces(prev_run, path is not None)
    run_info = dict(run_info or {})
    explicit = (pieces_per_minibatch if pieces_per_minibatch is not None
                else run_info.get(pieces_mod.RUN_KEY))
    pieces = pieces_mod.resolve_pieces(explicit, recorded, default_pieces(cfg),
                                       "pieces_per_minibatch")
    run_info[pieces_mod.RUN_KEY] = pieces
    D = int(sum(sizes))
    B = n_batches(D, batch_size)
    total = int(passes) * B
    stop = total if max_steps is None else min(total, int(max_steps))
    if detach:
        return submit_window(
            cfg, algorithm, files, sizes, model_dir, position=position, stop=stop,
            total=total, M=M, pieces=pieces, seed=seed, batch_size=batch_size,
            heldout=heldout, eval_every=eval_every, checkpoint_store=checkpoint_store,
            checkpoint_every=checkpoint_every, run_log=run_log, max_steps=max_steps,
            run_info=run_info, n_threads=n_threads, deterministic=deterministic_combine,
            fanout=fanout, scratch_dir=scratch_dir, t_start=t_start)
    return _run_windows(
        cfg, algorithm, files, sizes, model_dir, position=position, stop=stop, total=total,
        n_per_pass=B, n_docs=D, M=M, pieces=pieces, seed=seed, batch_size=batch_size,
        unroll=unroll, heldout=heldout, eval_every=eval_every,
        checkpoint_store=checkpoint_store, checkpoint_every=checkpoint_every, run_log=run_log,
        max_steps=max_steps, run_info=run_info, n_threads=n_threads,
        deterministic_combine=deterministic_combine, fanout=fanout, progress=progress,
        scratch_dir=scratch_dir, pass_stop=pass_stop, t_start=t_start)


def _run_windows(cfg, algorithm, files, sizes, model_dir, *, position, stop, total, n_per_pass,
                 n_docs, M, pieces, seed, batch_size, unroll, heldout, eval_every,
                 checkpoint_store, checkpoint_every, run_log, max_steps, run_info, n_threads,
                 deterministic_combine, fanout, progress, scratch_dir, pass_stop, t_start):
    """The waiting run of :func:`train`: the session, the windows from ``position`` to
    ``stop``, the final evaluation and the scratch clean-up; a :class:`BeamTrainResult`."""
    B, D = n_per_pass, n_docs
    if isinstance(heldout, HeldOutShards):
        heldout = heldout.load()

    run_key = uuid.uuid4().hex[:12]
    scratch_root = default_scratch_root(model_dir, cfg, scratch_dir)
    scratch = None
    if not cfg.in_process:
        beam_state.remove_stale_scratch(scratch_root)   # a killed run's: removed unread
        scratch = beam_state.new_scratch(scratch_root)

    ses = Session(position=position, run_log=run_log, checkpoint_store=checkpoint_store,
                  runner=cfg.describe(), run_info=run_info, heldout=heldout,
                  eval_every=eval_every, progress=progress, t_start=t_start,
                  pass_stop=pass_stop, batches_per_pass=B)
    ses.write(start_record(t_start, position, algorithm, max_steps, total, eval_every,
                           checkpoint_every, ses.run_info, cfg.describe(), M, unroll, pieces))
    logger.info("Beam trainer: %s, %d minibatches of %d documents per pass (D=%d), steps "
                "%d..%d, windows of %d minibatch(es), %s, %d piece(s) per minibatch",
                cfg.describe(), B, batch_size, D, position, stop, M,
                "unrolled" if unroll else "one pipeline per minibatch", pieces)
    run = _WindowRun(cfg, files, sizes, int(seed), int(batch_size), pieces, M, stop, unroll,
                     n_threads, deterministic_combine, fanout, run_key, scratch)
    windows, counters_total = 0, {}
    try:
        algorithm, windows, counters_total = run.windows(algorithm, ses)
        ses.evaluate(algorithm)
    finally:
        ses.close_progress()
        if scratch is not None:
            beam_state.remove_tree(scratch)
            if beam_state.is_remote(scratch_root):
                beam_state.remove_tree(scratch_root)
        beam_state.drop_local(run_key + "/")
    end = ses.end(_session.docs_seen(algorithm), windows=windows, beam_metrics=counters_total)
    logger.info("Beam training finished at step %d (%d steps, %d windows, %.1f s)%s",
                ses.position, ses.steps_run, windows, end["elapsed"],
                "" if not ses.metrics else ": " + ", ".join(
                    "%s=%.4f" % (k, v) for k, v in ses.metrics.items()))
    return BeamTrainResult(algorithm, ses.position, _session.docs_seen(algorithm),
                           ses.steps_run, end["elapsed"], dict(ses.metrics),
                           end["checkpoint"], None, windows, counters_total)


@dataclass
class _WindowRun:
    """A waiting run's fixed settings, and its loop over windows."""
    cfg: RunnerConfig
    files: List[str]
    sizes: List[int]
    seed: int
    batch_size: int
    pieces: int
    M: int
    stop: int
    unroll: bool
    n_threads: Optional[int]
    deterministic: bool
    fanout: Optional[int]
    run_key: str
    scratch: Optional[str]

    def state_ref(self, algo, pos) -> StateRef:
        key = "%s/%d" % (self.run_key, pos)
        if self.scratch is None:
            # the window's steps update this copy in place (GlobalStepFn); the driver's
            # object stays the last published state until the window has succeeded
            beam_state.put_local(key, beam_state.private_copy(algo))
            return StateRef(key, None, pos)
        # a scratch copy even when the state was just published as a checkpoint: workers
        # load it in tens of ms, a checkpoint directory (sha256 of every array) took ~1.2 s
        path = os.path.join(self.scratch, "state-%09d.npz" % pos)
        beam_state.save_scratch(algo, path)
        return StateRef(key, path, pos)

    def parallel_phases(self) -> List[str]:
        """The phases every worker runs at once for each step (their seconds, summed over
        the workers in the timing records, overlap in wall time)."""
        if self.cfg.in_process:
            return []
        if self.unroll and chained(self.cfg, self.scratch) and self.deterministic \
                and not self.fanout:
            return list(PARALLEL_PHASES)
        return ["read", "estep", "stats_encode"]

    def windows(self, algorithm, ses: Session):
        """Window after window until ``stop``: run the window's pipeline(s), then
        :func:`after_window`. Returns (final algorithm, windows run, Beam counters)."""
        counters_total: Dict[str, int] = {}
        windows = 0
        n_windows = max(1, -(-(self.stop - ses.position) // self.M))
        while ses.position < self.stop and not ses.passes_stopped:
            w_start = time.time()
            end = min(self.stop, ses.position + self.M)
            if ses.pass_stop is not None:    # --passes auto: windows end at pass ends
                end = min(end, (ses.position // ses.batches_per_pass + 1) * ses.batches_per_pass)
            steps = plan_steps(self.files, self.sizes, seed=self.seed,
                               batch_size=self.batch_size, start=ses.position, stop=end,
                               pieces_per_minibatch=self.pieces)
            times = PhaseTimes()
            start_ref = times.timed("state_delivery", self.state_ref, algorithm, ses.position)
            if self.unroll:
                infos, new_algo, error, counters = _run_unrolled(
                    self.cfg, steps, start_ref, self.run_key, self.scratch, self.n_threads,
                    self.deterministic, self.fanout, times,
                    run_steps=self.stop - ses.position if windows == 0 else None)
            else:
                infos, new_algo, error, counters = _run_stepwise(
                    self.cfg, steps, algorithm, start_ref, self.run_key, self.scratch,
                    self.n_threads, self.deterministic, self.fanout, self.state_ref, times)
            for k, v in counters.items():
                counters_total[k] = counters_total.get(k, 0) + v
            if infos:
                algorithm = new_algo
            windows += 1
            try:
                after_window(ses, algorithm, steps, infos, error,
                             lambda a, pos: times.timed("checkpoint", ses.publish, a, pos))
            finally:
                ses.write(times.record(len(infos), time.time() - w_start, window=windows,
                                       graph_bytes_per_step=times.nbytes.get(
                                           "pipeline_build", 0) / max(1, len(steps)),
                                       runner=self.cfg.describe(),
                                       workers=self.cfg.num_workers,
                                       parallel=self.parallel_phases()))
                if self.scratch is not None:
                    _clean_scratch(self.scratch, keep=None)
                else:
                    beam_state.drop_local(self.run_key + "/")
            _log_window(ses, windows, n_windows, steps[:len(infos)], counters, self.stop,
                        time.time() - w_start, _session.docs_seen(algorithm))
        return algorithm, windows, counters_total


def _log_window(ses: Session, windows: int, n_windows: int, steps: Sequence[StepPlan],
                counters: Dict[str, int], stop: int, seconds: float, n_docs_seen: int):
    """The INFO line and the progress line after a window."""
    done = len(steps)
    rate = ses.steps_run / max(1e-9, time.time() - ses.t_start)
    eta = (stop - ses.position) / rate if rate > 0 else float("nan")
    score = _session.score_text(ses.metrics)
    logger.info("window %d/%d: steps %d..%d (%d docs, %.1f s, %s) docs_seen=%d%s ETA %.0f s",
                windows, n_windows, ses.position - done, ses.position,
                sum(s.n_docs for s in steps), seconds,
                ", ".join("%s=%d" % kv for kv in sorted(counters.items())) or "-",
                n_docs_seen, score, eta)
    ses.show("window %d/%d  step %d/%d  docs %d%s  ETA %.0fs"
             % (windows, n_windows, ses.position, stop, n_docs_seen, score, eta))


def _strip_runner(argv: List[str]) -> Optional[str]:
    from pipelines.runtime.beam_options import _strip_option
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
