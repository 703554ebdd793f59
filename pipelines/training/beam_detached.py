"""Detached windows (``train(..., detach=True)``, ``ldabeam train --detach``): one window is
submitted and the call returns; the window's pipeline ends in :class:`FinishWindowFn`, which
runs the same after-window hook as the waiting driver
(:func:`pipelines.training.beam_run.after_window`: evaluate, publish, log) and appends the run-log
records itself (docs/beam-training.md, "Detached windows")."""
from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import apache_beam as beam

from lda_core.errors import UsageError
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import append_records, read_run_log, run_log_exists
from lda_core.training import session as _session, staleness as staleness_rule
from lda_core.training.session import Session, TrainingError
from lda_core.training.spec import Evaluation, Output, TrainSpec
from pipelines.runtime import scratch as scratch_space
from pipelines.training import beam_remote, detached
from pipelines.training import beam_run, beam_state, beam_window
from pipelines.training import scratch_names
from pipelines.training.beam_plan import StepPlan, plan_steps
from pipelines.training.beam_run import WindowSetup
from pipelines.training.beam_state import StateRef
from pipelines.training.beam_steps import LeanDoFn
from pipelines.training.beam_window import build_window, collect_window
from pipelines.training.shard_stream import HeldOutShards

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------------------ detached windows

@dataclass
class SubmittedWindow:
    """What ``train(..., detach=True)`` returns: the submitted window and its job.

    ``result``: the runner's ``PipelineResult`` (``result.wait_until_finish()`` waits for the
    job), None when nothing was submitted (``start == total``: training already complete).
    ``start``/``stop``: positions (minibatches of the seeded order) before and after the
    window if every step succeeds; ``total``: where training stops (passes or max_steps).
    ``runs_here``: the runner runs the job inside this process (the DirectRunner: ``run()``
    returned only when the job was done; :mod:`pipelines.training.detached`). ``dry_run``:
    the runner's ``--dry_run`` translated the job without submitting it (nothing ran, nothing
    will be published; the window's scratch is removed)."""
    result: Any
    runner: str
    model_dir: str
    start: int
    stop: int
    total: int
    run_key: Optional[str] = None
    runs_here: bool = False
    dry_run: bool = False      # the runner's --dry_run: translated, never submitted

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
    steps' infos and the last good state (:func:`collect_window`); evaluates on the held-out
    documents (read here) when a multiple of ``eval_every`` was reached in the window or, as
    at the end of a waiting run, when the window ends the launch unevaluated; publishes the
    checkpoint through :class:`lda_core.storage.checkpoint.CheckpointStore` (the object-store layer
    for URLs), with the trainer info the driver writes; appends the window's run-log records
    (start, one per step, end -- or error) in one write (:func:`_append_records`); removes the
    run's scratch folder. A step that failed publishes the steps before it, logs the error
    and fails the job (TrainingError).

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
                raise TrainingError(msg)
            return
        infos, algo, error = collect_window(f.steps, f.start_ref, f.run_key, f.scratch)
        records = _Records()
        records.write(f.start_record)
        heldout = None
        if f.heldout is not None and infos:
            heldout = f.heldout.load() if isinstance(f.heldout, HeldOutShards) else f.heldout
        store = CheckpointStore(f.model_dir, keep_last=f.keep_last)
        ses = Session(position=f.start_ref.position,
                      output=Output(checkpoint_store=store, run_log=records, progress=False),
                      evaluation=Evaluation(heldout, f.eval_every), runner=f.runner,
                      run_info=f.run_info, t_start=f.t_start)
        msg = None
        try:
            beam_run.after_window(ses, algo, f.steps, infos, error,
                                  lambda a, pos: _publish_once(store, a, pos, f.runner, f.run_info),
                                  run_key=f.run_key)
            ses.evaluate(algo)
            # Beam's counters are complete only after wait_until_finish(), which a detached
            # launch never calls: see the job in the runner's console instead
            ses.end(_session.docs_seen(algo), windows=1, beam_metrics=None, run_key=f.run_key)
        except TrainingError as e:
            msg = str(e)
        if f.run_log_path is not None:
            _append_records(f.run_log_path, records.items)
        beam_state.drop_local(f.run_key + "/")
        scratch_space.remove_tree(f.run_dir)
        logger.info("detached window %s: steps %d..%d published as %s%s", f.run_key,
                    f.start_ref.position, ses.position, ses.last_checkpoint or "nothing",
                    "" if not ses.metrics else ": " + ", ".join(
                        "%s=%.4f" % (k, v) for k, v in sorted(ses.metrics.items())))
        if msg is not None:
            raise TrainingError(msg)
        yield ses.position


class _Records:
    """A run-log stand-in that keeps the records (written together at the end)."""

    def __init__(self):
        self.items: List[Dict[str, Any]] = []

    def write(self, record: Dict[str, Any]) -> None:
        self.items.append(record)


def _append_records(path: str, records: Sequence[Dict[str, Any]]) -> None:
    """Append ``records`` to the run log ``path`` in one write (one writer per window at a
    time): :func:`lda_core.storage.run_log.append_records`."""
    append_records(path, records)


def _window_in_log(path: Optional[str], run_key: str):
    """``("end", None)`` / ``("error", message)`` when the run log already holds the window
    ``run_key``'s last record, else None."""
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


def _publish_once(store, algo, pos: int, runner: str, run_info) -> Optional[str]:
    """:meth:`lda_core.training.session.Session.publish`, unless LATEST already records position
    ``pos`` (a retried bundle: its path is returned) or a later one (another run went on:
    nothing is published, so LATEST never moves back)."""
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
    return Session(output=Output(checkpoint_store=store, progress=False), runner=runner,
                   run_info=run_info).publish(algo, pos)


@dataclass
class RemoteFinish:
    """What the last DoFn of a detached window of the remote exchange needs (the window's
    :class:`~pipelines.training.beam_remote.Schedule` and its steps without read tasks:
    a few dozen bytes per step in the graph)."""
    model_dir: str
    keep_last: Optional[int]
    run_log_path: Optional[str]
    run_key: str
    run_dir: str
    schedule: Any
    steps: List[StepPlan]
    eval_every: int
    heldout: Any
    runner: str
    run_info: Optional[Dict[str, Any]]
    start_record: Dict[str, Any]
    t_start: float


class FinishRemoteWindowFn(LeanDoFn):
    """:class:`FinishWindowFn` for a window of the remote exchange: after its log is written
    (main input), the checkpoint is published from the window's end files, evaluated when
    due, the run-log records appended and the run's scratch folder removed. A step refused
    inside the window leaves no end files: nothing is published and the error is logged; the
    next launch runs the window up to the step before (:func:`refused_position`), which
    publishes that state, and the launch after it stops on the refusal again, as a waiting
    run stops."""

    def __init__(self, spec: RemoteFinish):
        self.spec = spec

    def process(self, _):
        f = self.spec
        seen = _window_in_log(f.run_log_path, f.run_key)
        if seen is not None:
            kind, msg = seen
            logger.info("window %s is already in the run log (%s): a retried bundle",
                        f.run_key, kind)
            if kind == "error":
                raise TrainingError(msg)
            return
        got = beam_remote.collect(f.schedule)
        records = _Records()
        records.write(f.start_record)
        heldout = None
        if f.heldout is not None and got.start is not None:
            heldout = f.heldout.load() if isinstance(f.heldout, HeldOutShards) else f.heldout
        store = CheckpointStore(f.model_dir, keep_last=f.keep_last)
        ses = Session(position=f.schedule.first,
                      output=Output(checkpoint_store=store, run_log=records, progress=False),
                      evaluation=Evaluation(heldout, f.eval_every), runner=f.runner,
                      run_info=f.run_info, t_start=f.t_start)
        algo = (beam_remote.LazyAlgorithm(got.start, got.header) if got.start is not None
                else None)
        infos = got.infos if got.start is not None else []

        def publish(_, pos):
            done = _published_position(store)
            if done is not None and done >= pos:
                return store.pointer_path() if done == pos else None
            return ses.publish_blocks(got.header, beam_remote.end_sources(got.start), pos,
                                      beam_remote.pending_of(got.start))
        msg = None
        try:
            beam_run.after_window(ses, algo, f.steps, infos, got.error, publish,
                                  run_key=f.run_key)
            ses.evaluate(algo)
            ses.end(int(algo.docs_seen), windows=1, beam_metrics=None, run_key=f.run_key)
        except TrainingError as e:
            msg = str(e)
        if f.run_log_path is not None:
            _append_records(f.run_log_path, records.items)
        scratch_space.remove_tree(f.run_dir)
        logger.info("detached window %s: steps %d..%d published as %s", f.run_key,
                    f.schedule.first, ses.position, ses.last_checkpoint or "nothing")
        if msg is not None:
            raise TrainingError(msg)
        yield ses.position


def refused_position(run_log_path: Optional[str], position: int) -> Optional[int]:
    """The step of the last run-log record of the model when it is an error past
    ``position`` (a detached window of the remote exchange refused it without publishing
    the steps before), else None."""
    if run_log_path is None or not run_log_exists(run_log_path):
        return None
    last = None
    for rec in read_run_log(run_log_path):
        if rec.get("event") in ("error", "end"):
            last = rec
    if last is not None and last.get("event") == "error":
        step = last.get("step")
        if isinstance(step, int) and step > position + 1:
            return step
    return None


def submit_remote_window(setup: WindowSetup, spec: TrainSpec, algorithm, run_key: str,
                         run_dir: str, position: int, w_stop: int, runs_here: bool):
    """:func:`submit_window` for the remote exchange."""
    s = int(setup.run_info.get(staleness_rule.RUN_KEY, 0))
    warmup = staleness_rule.warmup_of(setup.run_info)
    run_log_path = getattr(spec.output.run_log, "path", None)
    refused = refused_position(run_log_path, position)
    if refused is not None and refused - 1 < w_stop:
        logger.info("the last launch refused step %d: this window stops before it, so the "
                    "state after step %d is published", refused, refused - 1)
        w_stop = refused - 1
    kw = dict(seed=spec.schedule.seed, minibatch=spec.schedule.minibatch,
              pieces_per_minibatch=setup.pieces)
    steps = plan_steps(setup.files, setup.sizes, start=position, stop=w_stop, **kw)
    ahead = plan_steps(setup.files, setup.sizes, start=w_stop,
                       stop=w_stop + staleness_rule.in_flight(w_stop, s, warmup), **kw)
    start = beam_remote.write_start(algorithm, run_dir, position,
                                    staleness_rule.in_flight(position, s, warmup))
    schedule = beam_remote.Schedule.of_steps(start, steps, ahead, s, warmup)
    start_record = beam_run.start_record(setup, spec, algorithm)
    start_record["run"]["detached"] = True
    start_record["run_key"] = run_key
    start_record["window"] = [position, w_stop]
    finish = RemoteFinish(
        model_dir=spec.output.model_dir, keep_last=spec.output.keep_checkpoints,
        run_log_path=run_log_path, run_key=run_key, run_dir=run_dir, schedule=schedule,
        steps=[sp.bare() for sp in steps], eval_every=int(spec.evaluation.every or 0),
        heldout=spec.evaluation.heldout, runner=setup.cfg.describe(),
        run_info=setup.run_info, start_record=start_record, t_start=setup.t_start)
    cfg = setup.cfg
    p = beam.Pipeline(runner=cfg.make_runner(), options=cfg.pipeline_options())
    log = beam_remote.build_window(p, schedule, steps[0].read_plan, run_key,
                                   int(algorithm.n_words), setup.n_threads)
    log | "FinishWindow" >> beam.ParDo(FinishRemoteWindowFn(finish))
    check_graph(cfg, p, setup.stop - position, w_stop - position)
    logger.info("Beam trainer, detached, remote exchange: %s, steps %d..%d of %d (window %s), "
                "%d piece(s) per minibatch, staleness %d; the job publishes the checkpoint "
                "and the run log", cfg.describe(), position, w_stop, setup.stop, run_key,
                setup.pieces, s)
    return beam_window.run_checked(p), w_stop


def submit_window(setup: WindowSetup, spec: TrainSpec, algorithm,
                  scratch_dir: Optional[str] = None) -> SubmittedWindow:
    """A detached launch (``BeamSettings.detach``): plan the next window, put its start
    state in the run's scratch folder, build the window's pipeline with
    :class:`FinishWindowFn` at the end and submit it without waiting."""
    cfg, position, stop, model_dir = setup.cfg, setup.position, setup.stop, \
        spec.output.model_dir
    runs_here = detached.job_runs_here(cfg.runner, cfg.argv)
    if position >= stop:
        logger.info("training is complete: position %d of %d (%s); no window to submit",
                    position, stop, "--max-steps" if stop < setup.total else "every pass done")
        return SubmittedWindow(None, cfg.describe(), model_dir, position, position, stop,
                               None, runs_here)
    run_key = uuid.uuid4().hex[:12]
    scratch_root = beam_run.default_scratch_root(model_dir, cfg, scratch_dir)
    # left by a killed run: never read, just removed (launches on one model do not overlap)
    scratch_space.remove_stale_scratch(scratch_root)
    run_dir = scratch_space.new_scratch(scratch_root)
    scratch = None if cfg.in_process else run_dir
    w_stop = min(stop, position + setup.M)
    dry = is_dry_run(cfg)
    if setup.exchange == "remote":
        try:
            result, w_stop = submit_remote_window(setup, spec, algorithm, run_key, run_dir,
                                                  position, w_stop, runs_here)
        finally:
            if dry:
                scratch_space.remove_run(run_dir, scratch_root)
        return SubmittedWindow(result, cfg.describe(), model_dir, position, w_stop, stop,
                               run_key, runs_here, dry)
    steps = plan_steps(setup.files, setup.sizes, seed=spec.schedule.seed,
                       minibatch=spec.schedule.minibatch, start=position, stop=w_stop,
                       pieces_per_minibatch=setup.pieces)
    # the window's start state where every worker can read it (the job cannot reach the
    # driver's memory: the driver is gone by then)
    start_path = scratch_names.state_path(run_dir, position)
    beam_state.save_scratch(algorithm, start_path)
    start_ref = StateRef("%s/%d" % (run_key, position), start_path, position)
    start_record = beam_run.start_record(setup, spec, algorithm)
    start_record["run"]["detached"] = True
    start_record["run_key"] = run_key
    start_record["window"] = [position, w_stop]
    finish = WindowFinish(
        model_dir=model_dir, keep_last=spec.output.keep_checkpoints,
        run_log_path=getattr(spec.output.run_log, "path", None), run_key=run_key,
        run_dir=run_dir, scratch=scratch, start_ref=start_ref,
        steps=[StepPlan(sp.position, sp.pass_index, sp.batch_index, sp.n_docs)
               for sp in steps],
        eval_every=int(spec.evaluation.every or 0), heldout=spec.evaluation.heldout,
        runner=cfg.describe(), run_info=setup.run_info, start_record=start_record,
        t_start=setup.t_start)

    p = beam.Pipeline(runner=cfg.make_runner(), options=cfg.pipeline_options())
    final = build_window(p, cfg, setup.exchange, steps, start_ref, run_key, scratch,
                         setup.n_threads)
    (p | "FinishStart" >> beam.Create([None], reshuffle=False)
     | "FinishWindow" >> beam.ParDo(FinishWindowFn(finish),
                                    beam.pvalue.AsSingleton(final, default_value=None)))
    logger.info("Beam trainer, detached: %s, steps %d..%d of %d (window %s), %d piece(s) per "
                "minibatch; the job publishes the checkpoint and the run log",
                cfg.describe(), position, w_stop, stop, run_key, setup.pieces)
    check_graph(cfg, p, stop - position, w_stop - position)
    try:
        result = beam_window.run_checked(p)
    finally:
        if runs_here and cfg.in_process:
            beam_state.drop_local(run_key + "/")
        if dry:
            scratch_space.remove_run(run_dir, scratch_root)
    return SubmittedWindow(result, cfg.describe(), model_dir, position, w_stop, stop,
                           run_key, runs_here, dry)


def is_dry_run(cfg) -> bool:
    """Whether the runner's options ask for a dry run (Dataflow's ``--dry_run``)."""
    if cfg.local:
        return False
    v = cfg.pipeline_options().get_all_options().get("dry_run")
    return v is True or str(v).lower() in ("true", "1", "yes")


def check_graph(cfg, p, run_steps: int, window_steps: int) -> None:
    """On a remote runner, the jobs line a waiting run logs (:func:`beam_window.jobs_line`),
    and a UsageError naming the window that fits when this job's graph is over Dataflow's
    limit (the service would refuse the job after the launcher returned)."""
    if cfg.local:
        return
    graph_bytes = p.to_runner_api().ByteSize()
    line = beam_window.jobs_line(cfg.runner, run_steps, window_steps, graph_bytes)
    if graph_bytes > beam_window.GRAPH_LIMIT_BYTES:
        raise UsageError(line)
    logger.info(line)
