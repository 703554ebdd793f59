"""The Beam path of the stream-order samplers (o-LDA, incremental Gibbs, the particle filter,
and batch collapsed Gibbs): a single-worker step per window.

These samplers do not split into a parallel local step and a global step: every token's topic
is drawn given all earlier assignments (and the particle filter couples its particles at every
token), so the documents must go through one sampler, in stream order. In the Beam world a
window is therefore one pipeline whose single element goes to ONE DoFn::

    Create([SequentialWindow])     a few hundred bytes: the model directory, the state to start
      |                            from, the shard files with their row counts, seed, minibatch
      |                            size and the window's step range [start, stop)
    ParDo(SequentialWindowFn)      load the start state (the latest published checkpoint, or
                                   the run's initial state for a fresh run); plan the window's
                                   reads with beam_plan.plan_steps (the seeded order of
                                   lda_core.training.ordering, as the in-process trainer's
                                   ShardStream); read each minibatch (beam_plan.read_task)
                                   and call
                                   sampler.process(batch) in order; publish the state as a
                                   checkpoint (CheckpointStore: written under a temporary name,
                                   then renamed, then LATEST) and write a small JSON result for
                                   the driver

The driver loops over windows (``minibatches_per_window``; default ``checkpoint_every``, or the
whole stream when that is 0), evaluates on held-out documents at the end of a window in which a
multiple of ``eval_every`` was reached (and at the end), and writes the run log (the in-process
trainer's records). Nothing large enters the graph: the window element carries file names and
numbers, the DoFn plans its own reads.

With the in-process DirectRunner the DoFn runs in the driver's process: the sampler object is
handed from one window to the next in memory (``_LIVE``, keyed by run and checkpoint path),
so a window does not reload what the previous one published. With worker processes (or any
other runner) each window loads the checkpoint it starts from; ``from_state`` is exact, so the
states are the same bit for bit either way, and equal to the in-process trainer's
(:class:`lda_core.training.trainer.InProcessRunner`) for the same seed and minibatch size.

Resume: a run killed mid-window loses that window; the next run (``resume=True``) starts from
the latest published checkpoint and ends with the state an uninterrupted run ends with.

Batch collapsed Gibbs (``gibbs``) runs as one window: the DoFn reads every training document
(shard file order, as the in-process CLI path), runs the sweeps and publishes one checkpoint.

The model directory may be a local path, a file system every worker mounts, or an object-store
URL (``gs://``, ``s3://``, ... through Beam's ``FileSystems``): the DoFn publishes the
checkpoint itself through :class:`lda_core.storage.checkpoint.CheckpointStore`, which on an object
store writes the checkpoint under a unique name and commits it with the ``LATEST`` object
written last; the run's scratch folder (initial state, per-window results) is then
``MODEL_DIR/.beam-scratch``.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.docbatch import DocBatch
from lda_core.errors import UsageError
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.state import TopicState
from lda_core.training import session as _session
from lda_core.training.ordering import n_batches
from lda_core.training.runner import TrainData
from lda_core.training.session import resume_position
from lda_core.training.session import Session, TrainingError, open_session
from lda_core.training.spec import Output, TrainSpec, split_keywords
from lda_core.training.trainer import fit_whole_corpus
from pipelines.runtime import paths, scratch as scratch_space
from pipelines.runtime.beam_options import RunnerConfig, runner_config
from pipelines.training import scratch_names
from pipelines.training import beam_state
from pipelines.training.beam_plan import plan_steps, read_task
from pipelines.training.beam_run import default_scratch_root
from pipelines.training.beam_steps import METRICS_NAMESPACE
from pipelines.training.beam_train import (BeamTrainResult, check_shards,
                                           resume_from_latest)
from pipelines.training.beam_window import query_counters
from pipelines.training.shard_stream import read_docs

logger = logging.getLogger(__name__)

# sampler objects handed between windows inside one process: key -> sampler
_LIVE: Dict[str, Any] = {}
_LIVE_LOCK = threading.Lock()


def _live_key(run_key: str, path: str) -> str:
    return "%s|%s" % (run_key, paths.absolute(path))


def _put_live(key: str, algo) -> None:
    with _LIVE_LOCK:
        _LIVE[key] = algo


def _take_live(key: str):
    with _LIVE_LOCK:
        return _LIVE.pop(key, None)


def _peek_live(key: str):
    with _LIVE_LOCK:
        return _LIVE.get(key)


def _drop_live(run_key: str) -> None:
    with _LIVE_LOCK:
        for k in [k for k in _LIVE if k.startswith(run_key + "|")]:
            del _LIVE[k]


# ------------------------------------------------------------------------------ the element

@dataclass(frozen=True)
class SequentialWindow:
    """Everything the single DoFn of a window needs (small: names and numbers only)."""
    run_key: str
    model_dir: str
    keep_last: Optional[int]
    start_path: str                 # state directory to start from
    start_is_checkpoint: bool       # True: a published checkpoint (LATEST must still name it)
    position: int                   # minibatches consumed before the window
    stop: int                       # the window ends at this position
    files: Tuple[str, ...]
    sizes: Tuple[int, ...]
    seed: int
    minibatch: int
    vocab_hash: Optional[str]
    result_path: str
    runner: str
    run_info: Dict[str, Any] = field(default_factory=dict)
    sweeps: int = 0                 # gibbs: sweeps over all documents (one window)


def _load_start(window: SequentialWindow):
    """The sampler the window starts from: handed over in memory, or loaded from disk."""
    if window.start_is_checkpoint:
        store = CheckpointStore(window.model_dir)
        ptr = store.pointer_path()
        if ptr is None or paths.absolute(ptr) != paths.absolute(window.start_path):
            raise RuntimeError("the latest checkpoint of %s is no longer %s (another run wrote "
                               "into the model directory?)" % (window.model_dir,
                                                              window.start_path))
    algo = _take_live(_live_key(window.run_key, window.start_path))
    if algo is not None:
        return algo
    state = TopicState.load(window.start_path)
    pos = resume_position(state)
    if pos != window.position:
        raise RuntimeError("state %s is at minibatch %d, the window starts at %d"
                           % (window.start_path, pos, window.position))
    return algorithm_class(state.algorithm).from_state(state)


def _session_in_worker(window: SequentialWindow, position: int) -> Session:
    """The window's session inside the DoFn: it publishes; the driver logs."""
    store = CheckpointStore(window.model_dir, keep_last=window.keep_last)
    return Session(position=position, output=Output(checkpoint_store=store, progress=False),
                   runner=window.runner, run_info=window.run_info,
                   vocab_hash=window.vocab_hash)


class SequentialWindowFn(beam.DoFn):
    """The window's only DoFn: start state -> process every minibatch in order -> publish."""

    def __init__(self):
        self.docs = Metrics.counter(METRICS_NAMESPACE, "documents")
        self.tokens = Metrics.counter(METRICS_NAMESPACE, "tokens")
        self.minibatches = Metrics.counter(METRICS_NAMESPACE, "minibatches")

    def process(self, window: SequentialWindow):
        t0 = time.time()
        algo = _load_start(window)
        if window.sweeps:
            result = self._gibbs(algo, window)
        else:
            result = self._stream(algo, window)
        result["seconds"] = time.time() - t0
        beam_state.write_json_atomic(window.result_path, result)
        yield window.result_path

    def _stream(self, algo, window: SequentialWindow) -> Dict[str, Any]:
        steps = plan_steps(list(window.files), list(window.sizes), seed=window.seed,
                           minibatch=window.minibatch, start=window.position,
                           stop=window.stop, pieces_per_minibatch=1)
        infos: List[Dict[str, Any]] = []
        error = None
        for sp in steps:
            batch = read_task(sp.tasks[0]) if len(sp.tasks) == 1 else \
                _concat([read_task(t) for t in sp.tasks])
            info, err = _session.apply_step(algo.process, batch)
            if err is not None:
                error = [sp.position + 1, err]
                break
            infos.append(_session.step_record(
                sp.position + 1, sp.pass_index, sp.batch_index, info, n_docs=batch.n_docs,
                n_docs_seen=_session.docs_seen(algo),
                t=int(algo.step), extra_scalars=True))
            self.docs.inc(int(batch.n_docs))
            self.tokens.inc(int(info.get("tokens") or 0))
            self.minibatches.inc()
        out: Dict[str, Any] = {"infos": infos, "error": error, "checkpoint": None,
                               "position": window.position}
        if error is None and infos:
            # a step that raised may have changed the sampler half-way: nothing of a failed
            # window is published, the previous checkpoint stays the latest
            pos = window.position + len(infos)
            path = _session_in_worker(window, window.position).publish(algo, pos)
            _put_live(_live_key(window.run_key, path), algo)
            out.update(checkpoint=path, position=pos)
        return out

    def _gibbs(self, algo, window: SequentialWindow) -> Dict[str, Any]:
        docs = read_docs(list(window.files), window.vocab_hash,
                         columns=("doc_id", "word_ids", "counts"))
        path = fit_whole_corpus(algo, docs, window.sweeps, _session_in_worker(window, 0))
        self.docs.inc(int(docs.n_docs))
        self.tokens.inc(int(docs.n_tokens) * window.sweeps)
        _put_live(_live_key(window.run_key, path), algo)
        return {"infos": [], "error": None, "checkpoint": path, "position": window.sweeps,
                "docs_seen": int(algo.docs_seen)}


def _concat(batches):
    return DocBatch.concat(batches)


# ------------------------------------------------------------------------------ driver

def _run_window(cfg: RunnerConfig, window: SequentialWindow) -> Tuple[Dict[str, Any],
                                                                      Dict[str, int]]:
    """One pipeline: the window element into the single DoFn; the DoFn's JSON result."""
    p = beam.Pipeline(runner=cfg.make_runner(), options=cfg.pipeline_options())
    (p
     | "Window%d" % window.position >> beam.Create([window], reshuffle=False)
     | "Sampler" >> beam.ParDo(SequentialWindowFn()))
    result = p.run()
    result.wait_until_finish()
    counters = query_counters(result)
    out = beam_state.read_json(window.result_path)
    if out is None:
        raise TrainingError("the window starting at minibatch %d produced no result "
                                "(the sampler's DoFn did not run)" % window.position)
    return out, counters


def _check_inputs(algorithm, files: Sequence[str], model_dir: Optional[str]):
    if not model_dir:
        raise UsageError("--output MODEL_DIR is required (the model directory to write)")
    if not _session.is_sequential(algorithm):
        raise UsageError("%s is a local/global-step algorithm: its Beam trainer is "
                         "pipelines.training.beam_train" % algorithm.name)
    return check_shards(algorithm, files)


def _check_settings(algorithm, spec: TrainSpec, minibatches_per_window) -> None:
    gibbs = _session.whole_corpus(algorithm)
    passes = spec.schedule.passes
    for name, v in (("passes", passes), ("minibatch", spec.schedule.minibatch)):
        if int(v) < 1:
            raise UsageError("%s must be >= 1, got %r" % (name, v))
    if not gibbs and int(passes) != 1:
        raise UsageError("%s consumes the documents as a stream, each once: passes must be 1 "
                         "(got %d)" % (algorithm.name, passes))
    if minibatches_per_window is not None:
        if gibbs:
            raise UsageError("minibatches_per_window does not apply to algorithm gibbs (its "
                             "sweeps run as one window)")
        if int(minibatches_per_window) < 1:
            raise UsageError("minibatches_per_window must be >= 1, got %r"
                             % (minibatches_per_window,))
    if int(spec.output.checkpoint_every) < 0 or int(spec.evaluation.every) < 0:
        raise UsageError("checkpoint_every and eval_every must be >= 0")


@dataclass(frozen=True)
class SequentialSettings:
    """The sequential Beam runner's own settings: Beam pipeline options (``beam_argv``, and
    the runner's name, None: the ``--runner`` in ``beam_argv``), minibatches per window
    (default ``checkpoint_every``, a checkpoint per window, or the whole remaining stream when
    that is 0) and where the run's scratch folder goes."""
    beam_argv: Tuple[str, ...] = ()
    runner: Optional[str] = None
    minibatches_per_window: Optional[int] = None
    scratch_dir: Optional[str] = None


SETTINGS_FIELDS = ("beam_argv", "runner", "minibatches_per_window", "scratch_dir")


def train(algorithm, shard_files: Sequence[str], model_dir: str, **options) -> BeamTrainResult:
    """The sequential Beam run in keyword form: ``options`` are the spec's keywords
    (:data:`lda_core.training.spec.KEYWORDS`) and :class:`SequentialSettings`' fields, as
    for :func:`pipelines.training.beam_train.train` where they apply; ``passes`` must be 1
    (each document is consumed once), except for batch Gibbs (``gibbs``), where it is the
    number of sweeps."""
    spec_kw, own = split_keywords(options, SETTINGS_FIELDS)
    spec_kw.setdefault("minibatch", 256)
    if "beam_argv" in own:
        own["beam_argv"] = tuple(own["beam_argv"] or ())
    spec = TrainSpec.from_keywords(algorithm, dict(spec_kw, model_dir=model_dir))
    return SequentialRunner(SequentialSettings(**own)).run(
        spec, algorithm, TrainData(files=tuple(shard_files)))


@dataclass(frozen=True)
class SequentialRunner:
    """Train the stream-order sampler ``algorithm`` on the shards in windows, each one Beam
    pipeline with a single DoFn (module docstring)."""
    settings: SequentialSettings = SequentialSettings()

    def run(self, spec: TrainSpec, algorithm, data: TrainData, session=None):
        t_start = time.time()
        st, sched = self.settings, spec.schedule
        model_dir = spec.output.model_dir
        files, sizes, vh = _check_inputs(algorithm, data.files, model_dir)
        gibbs = _session.whole_corpus(algorithm)
        _check_settings(algorithm, spec, st.minibatches_per_window)
        cfg = runner_config(st.runner, list(st.beam_argv or ()))   # else argv's --runner
        if spec.output.checkpoint_store is None:
            spec = spec.replace(output=replace(spec.output,
                                               checkpoint_store=CheckpointStore(model_dir)))
        keep_last = spec.output.keep_checkpoints

        # --- position ----------------------------------------------------------------------
        position = 0 if gibbs else int(getattr(algorithm, "step", 0) or 0)
        start_ckpt: Optional[str] = None
        if sched.resume:
            if gibbs:
                raise UsageError("resume is not available for the batch Gibbs sampler "
                                 "(gibbs); train again with more sweeps")
            algorithm, position, start_ckpt = resume_from_latest(
                spec.output.checkpoint_store, algorithm, vh, position)
        passes = sched.passes
        total = int(passes) if gibbs else n_batches(int(sum(sizes)), sched.minibatch)
        stop = total if sched.max_steps is None or gibbs else min(total, int(sched.max_steps))
        if st.minibatches_per_window is not None:
            M = int(st.minibatches_per_window)
        elif spec.output.checkpoint_every:
            M = int(spec.output.checkpoint_every)
        else:
            M = max(1, stop - position)

        run_key, scratch, start_path = _start_state(algorithm, model_dir, cfg, st.scratch_dir,
                                                    start_ckpt, position, vh)
        run_info = spec.info()
        ses = open_session(session, spec, position, runner=cfg.describe(),
                           run_info=run_info, t_start=t_start)
        ses.start(algorithm, max_steps=sched.max_steps, total_steps=total,
                  checkpoint_every=spec.output.checkpoint_every,
                  sweeps=passes if gibbs else None,
                  burn_in=getattr(algorithm, "burn_in", None) if gibbs else None,
                  run=dict(run_info, runner=cfg.describe(),
                           minibatches_per_window=None if gibbs else M, single_worker=True))
        logger.info("Beam sequential sampler %s: %s, %s", algorithm.name, cfg.describe(),
                    "%d sweeps in one window" % passes if gibbs else
                    "minibatches %d..%d of %d documents in windows of %d"
                    % (position, stop, sched.minibatch, M))
        base = dict(run_key=run_key, model_dir=model_dir, keep_last=keep_last,
                    files=tuple(files), sizes=tuple(int(s) for s in sizes),
                    seed=int(sched.seed), minibatch=int(sched.minibatch), vocab_hash=vh,
                    runner=cfg.describe(), run_info=dict(run_info))

        run = _SeqRun(cfg, base, scratch, run_key, stop, M, {start_path: algorithm})
        return _run_windows(run, ses, gibbs, passes, start_path, start_ckpt)


def _start_state(algorithm, model_dir, cfg, scratch_dir, start_ckpt, position, vh):
    """The run's key, its scratch folder, and the path of its starting state (the resumed
    checkpoint, or the fresh sampler saved in the scratch folder)."""
    run_key = uuid.uuid4().hex[:12]
    scratch_root = default_scratch_root(model_dir, cfg, scratch_dir)
    scratch = scratch_space.new_scratch(scratch_root)
    if start_ckpt is None:
        # the run's starting state, for the first window's DoFn (small for a fresh sampler)
        start_path = scratch_names.initial_state_path(scratch)
        state = algorithm.to_state()         # a fresh sampler: position 0, nothing seen
        state.vocab_hash = state.vocab_hash or vh
        state.save(start_path)
    else:
        start_path = start_ckpt
    if cfg.in_process:
        _put_live(_live_key(run_key, start_path), algorithm)
    return run_key, scratch, start_path


def _run_windows(run, ses, gibbs, passes, start_path, start_ckpt):
    """The windows of :func:`train` (one for batch Gibbs), the final evaluation and the
    scratch clean-up; a :class:`BeamTrainResult`."""
    windows, counters_total = 0, {}
    try:
        if gibbs:
            head_path, windows, counters_total = run.gibbs_window(ses, int(passes), start_path)
        else:
            head_path, windows, counters_total = run.stream_windows(ses, start_path,
                                                                   start_ckpt is not None)
        if ses.heldout is not None:
            ses.evaluate(run.materialise(head_path))
        final = run.materialise(head_path)
    finally:
        ses.close_progress()
        scratch_space.remove_tree(run.scratch)
        _drop_live(run.run_key)
    end = ses.end(_session.docs_seen(final), windows=windows, beam_metrics=counters_total)
    logger.info("Beam sequential sampler finished at %s %d (%d this run, %d windows, %.1f s)%s",
                "sweep" if gibbs else "minibatch", ses.position, ses.steps_run, windows,
                end["elapsed"], "" if not ses.metrics else ": " + ", ".join(
                    "%s=%.4f" % (k, v) for k, v in ses.metrics.items()))
    return BeamTrainResult(final, ses.position, _session.docs_seen(final), ses.steps_run,
                           end["elapsed"], dict(ses.metrics), end["checkpoint"], None,
                           windows, counters_total)


@dataclass
class _SeqRun:
    """A run's fixed settings, its loop over windows and the driver's copy of the sampler."""
    cfg: RunnerConfig
    base: Dict[str, Any]            # the SequentialWindow fields every window shares
    scratch: str
    run_key: str
    stop: int
    M: int
    known: Dict[str, Any]           # checkpoint path -> sampler (the latest one only)

    def materialise(self, path: str):
        """The sampler published at ``path`` (handed over in memory in-process, else loaded
        from the checkpoint: for evaluation and the result only)."""
        if path not in self.known:
            live = _peek_live(_live_key(self.run_key, path))
            if live is None:
                state = TopicState.load(path)
                live = algorithm_class(state.algorithm).from_state(state)
            self.known.clear()
            self.known[path] = live
        return self.known[path]

    def gibbs_window(self, ses: Session, sweeps: int, start_path: str):
        """Batch Gibbs: all its sweeps in one window. Returns (checkpoint, 1, counters)."""
        window = SequentialWindow(start_path=start_path, start_is_checkpoint=False,
                                  position=0, stop=sweeps,
                                  result_path=os.path.join(self.scratch, "result-gibbs.json"),
                                  sweeps=sweeps, **self.base)
        out, counters = _run_window(self.cfg, window)
        ses.applied(sweeps)
        ses.last_checkpoint = out["checkpoint"]
        return out["checkpoint"], 1, counters

    def stream_windows(self, ses: Session, head_path: str, head_is_ckpt: bool):
        """Window after window until ``stop``; each publishes its checkpoint in the DoFn and
        the session logs, evaluates, or fails. Returns (last checkpoint, windows, counters)."""
        counters_total: Dict[str, int] = {}
        windows = 0
        while ses.position < self.stop:
            w_start = time.time()
            window = SequentialWindow(
                start_path=head_path, start_is_checkpoint=head_is_ckpt, position=ses.position,
                stop=min(self.stop, ses.position + self.M),
                result_path=scratch_names.result_path(self.scratch, ses.position),
                **self.base)
            out, counters = _run_window(self.cfg, window)
            windows += 1
            for k, v in counters.items():
                counters_total[k] = counters_total.get(k, 0) + v
            if out.get("error"):
                ses.fail(*out["error"])
            infos = out["infos"]
            done = len(infos)
            if not done:       # pragma: no cover - a window always holds >= 1 minibatch
                break
            ses.applied(done)
            ses.last_checkpoint = head_path = out["checkpoint"]
            head_is_ckpt = True
            metrics = (ses.evaluate(self.materialise(head_path), done=done)
                       if ses.heldout is not None else None)
            ses.log_steps(infos, metrics, head_path)
            logger.info("window %d: minibatches %d..%d (%.1f s in the DoFn, %.1f s in all) "
                        "docs_seen=%d%s", windows, ses.position - done, ses.position,
                        out.get("seconds", float("nan")), time.time() - w_start,
                        int(infos[-1].get("docs_seen") or 0), _session.score_text(metrics))
            ses.show("window %d  minibatch %d/%d%s" % (windows, ses.position, self.stop,
                                                      _session.score_text(metrics)))
        return head_path, windows, counters_total
