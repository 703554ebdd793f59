"""The Beam trainer: the in-process trainer's loop, with each minibatch's work spread over
Beam workers.

Training is a sequence of *windows*; a window is one pipeline run over the next ``M``
minibatches of the seeded order (:mod:`lda_core.training.ordering`, the in-process trainer's
order). At the end of every window a checkpoint is published
(:class:`lda_core.storage.checkpoint.CheckpointStore`, atomic) and the next window starts from
it; a run killed mid-window loses only that window.

How a step's state and statistics move between workers is the run's *exchange*, one strategy
object each (:func:`choose_exchange`, :func:`exchange_windows`):

* ``remote`` (remote runners' default for online VB and SCVB0; ``--exchange remote`` runs it on
  any runner): the state cut into word blocks held by owners, every row, request, statistic and
  document moving through Beam's shuffle inside the window, files only at its ends
  (:mod:`pipelines.training.beam_remote`); with staleness 1 one shuffle barrier per step;
* ``local`` (worker processes of this machine): each worker advances its own copy of the
  state from the statistics pieces the workers spill to a local scratch folder
  (:mod:`pipelines.training.beam_chain`);
* ``state`` (a remote runner's exchange for an algorithm without word blocks: sparse Gibbs-VB):
  per step the E-step of the pieces with the whole state as a side input, the pieces combined
  in piece order and the global step in one worker, which hands the next state on as a
  scratch file (:class:`pipelines.training.beam_steps.TrainStep`);
* ``in-process`` (the DirectRunner in this process): one fused chain of whole steps
  (:class:`pipelines.training.beam_steps.InProcessStepFn`).

Every exchange gives the in-process trainer's state bit for bit at the same (seed, S, P, B,
staleness): the Beam code contains no maths (the local step, the merge and the global step are
``lda_core``'s), and every sum is made in a fixed order (pieces in piece order, word blocks in
block order), so the result depends neither on the number of workers nor on their bundling,
a retry or a resume at another worker count. Each window logs the cost of its steps by phase
in a ``timing`` run-log record (:mod:`pipelines.training.beam_cost`).

Windows are sized in documents on this machine (a pipeline run's start-up against the work
lost to a crash) and in steps on a remote runner (as many as one job's graph holds:
:func:`default_window`). ``--no-unroll`` makes every window one minibatch.

Detached (``BeamSettings.detach``, ``ldabeam train --detach``; Dataflow Flex Templates, whose
launcher must return soon after ``run()``): exactly one window is submitted and the call
returns without waiting; the window's pipeline ends in a DoFn that publishes the checkpoint,
evaluates, appends the window's run-log records and removes the scratch, as the driver does
after a waiting window (:mod:`pipelines.training.beam_detached`).
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Dict, List, Optional, Sequence, Tuple

from lda_core.algorithms.algorithm import StochasticAlgorithm
from lda_core.errors import InputError, UsageError
from lda_core.storage.blocks import algorithm_from_state
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.training import session as _session
from lda_core.training import pieces as pieces_mod
from lda_core.training import staleness as staleness_mod
from lda_core.training.ordering import n_batches
from lda_core.training.phase_times import PhaseTimes
from lda_core.training.pieces import DEFAULT_PIECES, MAX_PIECES, REMOTE_MIN_PIECES
from lda_core.training.runner import TrainData
from lda_core.training.session import resume_position
from lda_core.training.session import open_session, Session
from lda_core.training.spec import split_keywords, TrainSpec
from lda_core.training.trainer import TrainResult
from pipelines.ingest import dataset
from pipelines.ingest.shards import shard_row_counts
from pipelines.runtime import scratch as scratch_space
from pipelines.runtime.beam_options import runner_config, RunnerConfig
from pipelines.training import beam_state, scratch_names
from pipelines.training.beam_chain import PARALLEL_PHASES
from pipelines.training.beam_detached import HeldOutShards, submit_window
from pipelines.training.beam_plan import plan_steps
from pipelines.training.beam_remote import LazyAlgorithm, RemoteWindows
from pipelines.training.beam_run import (after_window, default_scratch_root, log_window,
                                         planned_windows, start_record, window_end, WindowSetup)
from pipelines.training.beam_state import StateRef
from pipelines.training.beam_window import run_pipeline, run_unrolled

logger = logging.getLogger(__name__)

# minibatches per window when not given, from documents per window: large enough that a
# pipeline run's start-up is a small part of the window, small enough that a crash loses
# little; worker processes start a pipeline run more slowly, so their windows hold 4x more
# (docs/beam-training.md)
DOCS_PER_WINDOW_IN_PROCESS = 65536
DOCS_PER_WINDOW_WORKERS = 262144
MAX_WINDOW = 10000           # cap on the graph depth of one unrolled pipeline
# on a remote runner a window is a job, whose start costs minutes: as many steps as fit in
# Dataflow's 10 MB job graph with a margin (the graph bytes per step do not depend on the
# minibatch size; docs/beam-training.md "Graph size and jobs"), so a one-pass run of 3.3 M
# documents at S = 4,096 (806 steps) is one job
REMOTE_WINDOW_STEPS = 900


# ------------------------------------------------------------------------------ driver

@dataclass
class BeamTrainResult(TrainResult):
    """:class:`lda_core.training.trainer.TrainResult` plus the windows run and the Beam counters (the
    CLI prints either)."""
    windows: int = 0
    beam_metrics: Dict[str, int] = field(default_factory=dict)


def _check_inputs(algorithm, files: Sequence[str], model_dir: Optional[str]):
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
    found = checkpoint_store.latest_checkpoint(row_order=True)
    if found is None:
        return algorithm, position, None, {}
    ck, state = found
    state.validate(algorithm=algorithm.name, n_topics=algorithm.n_topics,
                   n_words=algorithm.n_words, vocab_hash=vocab_hash)
    if state.step != getattr(algorithm, "step", state.step):
        algorithm = algorithm_from_state(state, take=True)
    position = resume_position(state)
    logger.info("resuming from checkpoint %s (position %d)", ck.path, position)
    return algorithm, position, ck.path, dict((state.info or {}).get("run") or {})


def default_pieces(cfg: RunnerConfig) -> int:
    """Pieces per minibatch for a fresh run when ``pieces_per_minibatch`` is not given
    (:mod:`lda_core.training.pieces`: the value is recorded in the checkpoints and every later
    resume keeps it, so the sums never depend on the worker count). Local runners, in-process
    or worker processes: :data:`~lda_core.training.pieces.DEFAULT_PIECES` (2), as the in-process
    trainer. Remote runners: at least one piece per worker the first run may use
    (``--num_workers`` / ``--max_num_workers``), so the E-step spreads over them."""
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


def _check_settings(spec: TrainSpec, settings: "BeamSettings") -> None:
    for name, v in (("passes", spec.schedule.passes), ("minibatch", spec.schedule.minibatch)):
        if int(v) < 1:
            raise UsageError("%s must be >= 1, got %r" % (name, v))
    M = settings.minibatches_per_window
    if M is not None and not (1 <= int(M) <= MAX_WINDOW):
        raise UsageError("minibatches_per_window must be in [1, %d], got %r"
                         % (MAX_WINDOW, M))


def default_window(cfg: RunnerConfig, minibatch: int) -> int:
    """Minibatches per window when not given (see DOCS_PER_WINDOW_*, REMOTE_WINDOW_STEPS)."""
    if not cfg.local:
        return REMOTE_WINDOW_STEPS
    docs = DOCS_PER_WINDOW_IN_PROCESS if cfg.in_process else DOCS_PER_WINDOW_WORKERS
    return int(min(MAX_WINDOW, max(1, -(-docs // max(1, int(minibatch))))))


@dataclass(frozen=True)
class BeamSettings:
    """The Beam runner's own settings.

    ``beam_argv``: Beam pipeline options (``--runner``, ``--direct_running_mode``, ...);
    ``runner``: the Beam runner's name (None: the ``--runner`` in ``beam_argv``).
    ``minibatches_per_window`` (M): default :func:`default_window`. ``unroll``: chain the
    window's minibatches in one pipeline (default True); False runs one pipeline per minibatch
    and applies the global step on the driver. ``pieces_per_minibatch``: read tasks per
    minibatch (default: :func:`default_pieces`). ``n_threads``: E-step threads per worker
    (default: the algorithm's setting in-process; cores / workers with worker processes).
    ``scratch_dir``: where states inside a window are exchanged between worker processes
    (default: :func:`default_scratch_root`). ``detach``: submit one window and return
    (Dataflow Flex Templates; :mod:`pipelines.training.beam_detached`)."""
    beam_argv: Tuple[str, ...] = ()
    runner: Optional[str] = None
    minibatches_per_window: Optional[int] = None
    unroll: Optional[bool] = None
    pieces_per_minibatch: Optional[int] = None
    n_threads: Optional[int] = None
    scratch_dir: Optional[str] = None
    detach: bool = False
    exchange: Optional[str] = None


# how a step's state and statistics move between workers (BeamSettings.exchange); one
# strategy object each (:func:`exchange_windows`)
EXCHANGE_REMOTE = "remote"          # word blocks through Beam's shuffle (beam_remote)
EXCHANGE_WORD_BLOCKS = "word-blocks"  # the remote exchange's earlier name
EXCHANGE_LOCAL = "local"            # worker processes of this machine, each its own copy
EXCHANGE_STATE = "state"            # the whole state to every worker, one reducer
EXCHANGE_IN_PROCESS = "in-process"  # the in-process runner: one fused chain of steps
EXCHANGES = (EXCHANGE_REMOTE, EXCHANGE_WORD_BLOCKS, EXCHANGE_LOCAL, EXCHANGE_STATE)
# the remote exchange's staleness when neither the user nor a checkpoint sets one (with the
# default warm-up, lda_core.training.staleness.DEFAULT_WARMUP)
REMOTE_STALENESS = 1


def choose_exchange(exchange: Optional[str], cfg: RunnerConfig, algorithm) -> str:
    """The exchange a run's steps use (one of :data:`EXCHANGES` but the alias, or
    ``in-process``).

    Default: on a remote runner the remote exchange (:mod:`pipelines.training.beam_remote`)
    for an algorithm whose state can be cut by word block (``word_sharded``: online VB,
    SCVB0), else the state exchange; on this machine the in-process runner's fused chain or,
    with worker processes, the local one (:mod:`pipelines.training.beam_chain`).
    ``--exchange remote`` runs the cluster's exchange on any runner (the in-process one
    included), so that the cluster's path can be run and tested here; where a named exchange
    cannot run, a usage error says why."""
    if exchange is not None and exchange not in EXCHANGES:
        raise UsageError("--exchange must be one of %s, got %r" % (", ".join(EXCHANGES),
                                                                   exchange))
    capable = bool(getattr(type(algorithm), "word_sharded", False))
    if exchange in (EXCHANGE_REMOTE, EXCHANGE_WORD_BLOCKS):
        if not capable:
            raise UsageError("--exchange %s: algorithm %s keeps no word-block state "
                             "(online-vb and scvb0 do)" % (exchange,
                                                           getattr(algorithm, "name", "?")))
        return EXCHANGE_REMOTE
    if exchange == EXCHANGE_LOCAL:
        if cfg.in_process or not cfg.local:
            raise UsageError("--exchange local: worker processes of this machine only "
                             "(--direct_running_mode=multi_processing)")
        return EXCHANGE_LOCAL
    if exchange == EXCHANGE_STATE:
        return EXCHANGE_IN_PROCESS if cfg.in_process else EXCHANGE_STATE
    if not cfg.local:
        return EXCHANGE_REMOTE if capable else EXCHANGE_STATE
    return EXCHANGE_IN_PROCESS if cfg.in_process else EXCHANGE_LOCAL


def word_blocks_exchange(exchange: Optional[str], cfg: RunnerConfig, algorithm) -> bool:
    """Whether the steps run the remote exchange (:func:`choose_exchange`)."""
    return choose_exchange(exchange, cfg, algorithm) == EXCHANGE_REMOTE


SETTINGS_FIELDS = tuple(f.name for f in dataclass_fields(BeamSettings))


def train(algorithm, shard_files: Sequence[str], model_dir: str, **options):
    """The Beam run in keyword form: ``options`` are the spec's keywords
    (:data:`lda_core.training.spec.KEYWORDS`: ``passes``, ``seed``, ``minibatch``,
    ``heldout``, ``eval_every``, ``checkpoint_store``, ``checkpoint_every``, ``run_log``,
    ``resume``, ``max_steps``, ``run_info``, ``progress``, ``pass_stop``) and
    :class:`BeamSettings`' fields. Returns what :meth:`BeamRunner.run` returns."""
    spec_kw, own = split_keywords(options, SETTINGS_FIELDS)
    spec_kw.setdefault("minibatch", 256)
    if "beam_argv" in own:
        own["beam_argv"] = tuple(own["beam_argv"] or ())
    spec = TrainSpec.from_keywords(algorithm, dict(spec_kw, model_dir=model_dir))
    return BeamRunner(BeamSettings(**own)).run(spec, algorithm,
                                               TrainData(files=tuple(shard_files)))


@dataclass(frozen=True)
class BeamRunner:
    """Train a :class:`~lda_core.algorithms.algorithm.StochasticAlgorithm` (at its current
    position) on the shards in windows of Beam pipeline runs (module docstring), waiting for
    each; with ``settings.detach``, submit the next window and return a
    :class:`SubmittedWindow` without waiting.

    ``checkpoint_every`` is accepted for the CLI's sake: the Beam trainer publishes a
    checkpoint at the end of every window. ``eval_every``: held-out evaluation at the end of a
    window in which a multiple of it was reached (and at the end). The held-out set: a
    :class:`lda_core.training.heldout.HeldOut`, or a :class:`HeldOutShards` (read when
    evaluated). ``pass_stop`` (``--passes auto``; not with ``detach``): windows end at pass
    ends at the latest, where :func:`after_window` feeds the held-out score to the rule, and
    the run stops when it says so. ``resume``: continue from the latest checkpoint."""
    settings: BeamSettings = BeamSettings()

    def run(self, spec: TrainSpec, algorithm, data: TrainData, session=None):
        setup, algorithm = self.setup(spec, algorithm, data)
        if self.settings.detach:
            return submit_window(setup, spec, algorithm, self.settings.scratch_dir)
        return _run_windows(setup, spec, algorithm, self.settings.scratch_dir, session)

    def setup(self, spec: TrainSpec, algorithm, data: TrainData):
        """The run's :class:`WindowSetup` and the algorithm to start from (the latest
        checkpoint's when resuming)."""
        t_start = time.time()
        st, sched = self.settings, spec.schedule
        _check_settings(spec, st)
        files, sizes, vh = _check_inputs(algorithm, data.files, spec.output.model_dir)
        cfg = runner_config(st.runner, list(st.beam_argv or ()))   # else argv's --runner
        M = int(st.minibatches_per_window or default_window(cfg, sched.minibatch))
        if st.unroll is False:
            # one pipeline per minibatch: a window of one step
            logger.info("--no-unroll: windows of one minibatch (--minibatches-per-window 1)")
            M = 1
        n_threads = st.n_threads
        if n_threads is None and not cfg.in_process:
            # worker processes share the machine's cores; on a remote runner every SDK
            # process is one of several on its VM, each given work of its own
            n_threads = (max(1, (os.cpu_count() or 1) // max(1, cfg.num_workers))
                         if cfg.local else 1)
        position = int(getattr(algorithm, "step", 0) or 0)
        recorded, prev_run = None, None
        if sched.resume:
            algorithm, position, path, prev_run = _resume(_store(spec), algorithm, vh,
                                                          position)
            recorded = pieces_mod.recorded_pieces(prev_run, path is not None)
        run_info = spec.info()
        explicit = (st.pieces_per_minibatch if st.pieces_per_minibatch is not None
                    else run_info.get(pieces_mod.RUN_KEY))
        pieces = pieces_mod.resolve_pieces(explicit, recorded, default_pieces(cfg),
                                           "pieces_per_minibatch")
        run_info[pieces_mod.RUN_KEY] = pieces
        exchange = choose_exchange(st.exchange, cfg, algorithm)
        # the remote exchange pipelines its steps by default (one shuffle barrier a step
        # instead of two) after the warm-up, where staleness_bench measured no loss
        staleness = staleness_mod.resolve_staleness(
            run_info.get(staleness_mod.RUN_KEY),
            staleness_mod.recorded_staleness(prev_run if recorded is not None else None,
                                             recorded is not None),
            REMOTE_STALENESS if exchange == EXCHANGE_REMOTE
            else staleness_mod.DEFAULT_STALENESS)
        staleness_mod.check_pipelinable(algorithm, staleness)
        run_info[staleness_mod.RUN_KEY] = staleness
        if staleness:
            resumed_s = recorded is not None and (prev_run or {}).get(staleness_mod.RUN_KEY)
            run_info[staleness_mod.WARMUP_KEY] = staleness_mod.resolve_warmup(
                run_info.get(staleness_mod.WARMUP_KEY),
                staleness_mod.recorded_warmup(prev_run, bool(resumed_s))
                if resumed_s else None)
        B = n_batches(int(sum(sizes)), sched.minibatch)
        total = int(sched.passes) * B
        stop = total if sched.max_steps is None else min(total, int(sched.max_steps))
        sharded = exchange == EXCHANGE_REMOTE
        if (sharded and not cfg.local and recorded is None and int(position) == 0
                and "word_blocks" not in spec.algorithm.settings
                and int(getattr(algorithm, "word_blocks", 1)) == 1):
            # a fresh remote run: one word block per piece (at least one per worker), so
            # the global step spreads over the workers as the E-step does; recorded in the
            # checkpoints like any setting, so every resume keeps it
            algorithm.set_word_blocks(pieces)
        run_info["exchange"] = exchange
        return WindowSetup(cfg, files, sizes, position, stop, total, B, M, pieces, n_threads,
                           run_info, t_start, exchange), algorithm


def _store(spec: TrainSpec):
    """The spec's checkpoint store (one in its model directory when it names none)."""
    if spec.output.checkpoint_store is not None:
        return spec.output.checkpoint_store
    return CheckpointStore(spec.output.model_dir)


def with_store(spec: TrainSpec) -> TrainSpec:
    """``spec`` with its checkpoint store opened (:func:`_store`)."""
    if spec.output.checkpoint_store is not None:
        return spec
    return spec.replace(output=replace(spec.output, checkpoint_store=_store(spec)))


def _run_windows(setup: WindowSetup, spec: TrainSpec, algorithm, scratch_dir: Optional[str],
                 session=None):
    """The waiting run: the session, the windows from ``setup.position`` to ``setup.stop``,
    the final evaluation and the scratch clean-up; a :class:`BeamTrainResult`."""
    cfg, B = setup.cfg, setup.n_per_pass
    spec = with_store(spec)
    heldout = spec.evaluation.heldout
    if isinstance(heldout, HeldOutShards):
        spec = spec.replace(evaluation=replace(spec.evaluation, heldout=heldout.load()))

    run_key = uuid.uuid4().hex[:12]
    scratch_root = default_scratch_root(spec.output.model_dir, cfg, scratch_dir)
    scratch = None
    if setup.exchange != EXCHANGE_IN_PROCESS:
        scratch_space.remove_stale_scratch(scratch_root)   # a killed run's: removed unread
        scratch = scratch_space.new_scratch(scratch_root)

    ses = open_session(session, spec, setup.position, runner=cfg.describe(),
                       run_info=setup.run_info, batches_per_pass=B, t_start=setup.t_start)
    ses.write(start_record(setup, spec, algorithm, ses.run_info))
    staleness = int(setup.run_info.get(staleness_mod.RUN_KEY, 0))
    logger.info("Beam trainer: %s, %s exchange, %d minibatches of %d documents per pass "
                "(D=%d), steps %d..%d, windows of %d minibatch(es), %d piece(s) per "
                "minibatch%s", cfg.describe(), setup.exchange, B, spec.schedule.minibatch,
                setup.n_docs, setup.position, setup.stop, setup.M, setup.pieces,
                ", staleness %d" % staleness if staleness else "")
    run = exchange_windows(setup, spec, staleness, run_key, scratch)
    windows, counters_total = 0, {}
    try:
        algorithm, windows, counters_total = run.windows(algorithm, ses)
        # --passes auto stopped after a pass worse than its best: the best becomes the model
        algorithm = ses.keep_best(algorithm)
        ses.evaluate(algorithm)
    finally:
        ses.close_progress()
        if isinstance(algorithm, LazyAlgorithm):
            algorithm.published(ses.last_checkpoint or ses.latest_path())
        if scratch is not None:
            scratch_space.remove_run(scratch, scratch_root)
        beam_state.drop_local(run_key + "/")
    end = ses.end(_session.docs_seen(algorithm), windows=windows, beam_metrics=counters_total)
    logger.info("Beam training finished at step %d (%d steps, %d windows, %.1f s)%s",
                ses.position, ses.steps_run, windows, end["elapsed"],
                "" if not ses.metrics else ": " + ", ".join(
                    "%s=%.4f" % (k, v) for k, v in ses.metrics.items()))
    return BeamTrainResult(algorithm, ses.position, _session.docs_seen(algorithm),
                           ses.steps_run, end["elapsed"], dict(ses.metrics),
                           end["checkpoint"], None, windows, counters_total)


def exchange_windows(setup: WindowSetup, spec: TrainSpec, staleness: int, run_key: str,
                     scratch: Optional[str]):
    """The strategy object of the run's exchange: its loop over windows
    (``windows(algorithm, session) -> (algorithm, windows run, Beam counters)``)."""
    seed, minibatch = int(spec.schedule.seed), int(spec.schedule.minibatch)
    if setup.exchange == EXCHANGE_REMOTE:
        return RemoteWindows(setup, seed, minibatch, staleness,
                             staleness_mod.warmup_of(setup.run_info), run_key, scratch,
                             run_pipeline, plan_steps)
    if staleness:
        raise UsageError("--staleness %d runs on the remote exchange (--exchange remote) or "
                         "in process (--runner inprocess)" % staleness)
    return VersionWindows(setup, seed, minibatch, run_key, scratch)


@dataclass
class VersionWindows:
    """The exchanges that hand a whole state version from step to step (in-process, local
    worker processes, the state exchange): a waiting run's fixed settings, and its loop over
    windows."""
    setup: WindowSetup
    seed: int
    minibatch: int
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
        # load it far faster than a checkpoint directory (sha256 of every array)
        path = scratch_names.state_path(self.scratch, pos)
        beam_state.save_scratch(algo, path)
        return StateRef(key, path, pos)

    def parallel_phases(self) -> List[str]:
        """The phases every worker runs at once for each step (their seconds, summed over
        the workers in the timing records, overlap in wall time)."""
        if self.setup.exchange == EXCHANGE_IN_PROCESS:
            return []
        if self.setup.exchange == EXCHANGE_LOCAL:
            return list(PARALLEL_PHASES)
        return ["read", "estep", "stats_encode"]

    def windows(self, algorithm, ses: Session):
        """Window after window until ``stop``: run the window's pipeline, then
        :func:`after_window`. Returns (final algorithm, windows run, Beam counters)."""
        st = self.setup
        cfg, stop, M = st.cfg, st.stop, st.M
        counters_total: Dict[str, int] = {}
        windows = 0
        n_windows = planned_windows(ses, stop, M)
        while ses.position < stop and not ses.passes_stopped:
            w_start = time.time()
            end = window_end(ses, stop, M)     # --passes auto: windows end at pass ends
            steps = plan_steps(st.files, st.sizes, seed=self.seed,
                               minibatch=self.minibatch, start=ses.position, stop=end,
                               pieces_per_minibatch=st.pieces)
            times = PhaseTimes()
            start_ref = times.timed("state_delivery", self.state_ref, algorithm, ses.position)
            infos, new_algo, error, counters = run_unrolled(
                cfg, st.exchange, steps, start_ref, self.run_key, self.scratch, st.n_threads,
                times, run_steps=stop - ses.position if windows == 0 else None)
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
                                       runner=cfg.describe(), workers=cfg.num_workers,
                                       parallel=self.parallel_phases()))
                if self.scratch is not None:
                    scratch_space.clean(self.scratch)
                else:
                    beam_state.drop_local(self.run_key + "/")
            log_window(ses, windows, n_windows, steps[:len(infos)], counters, stop,
                       time.time() - w_start, _session.docs_seen(algorithm))
        return algorithm, windows, counters_total
