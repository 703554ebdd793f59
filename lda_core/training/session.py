"""The training session: everything around the maths that every runner shares.

A runner (the in-process loop of :mod:`lda_core.training.trainer`, the Beam driver unrolled or one
pipeline per minibatch, a detached window's last DoFn, the sequential samplers' Beam window,
the streaming job's global step) only *applies* minibatches: it calls
:func:`apply_step` for each (``global_step`` or ``process``), which validates the step, and
hands the session the infos and the new state. The session owns the rest, in one place:

* the **position**: minibatches of the seeded order consumed so far (``position``; it equals
  the algorithm's global step ``t`` unless a minibatch held no non-empty document). A
  checkpoint records it as ``info["trainer"]["minibatches_done"]``
  (:func:`resume_position` reads it back);
* the **validation** of every step (:data:`CHECKED`: the step refused with an exception, a
  non-finite ``rho``, ``mean_change``, ``elbo`` or ``score``, or a non-finite value in the new
  state, :func:`check_state`) and the **one error type**,
  :class:`TrainingError`, with one message (:func:`error_message`);
* the **evaluation cadence** (:func:`eval_due`), the held-out evaluation and the
  ``--passes auto`` stopping rule (:class:`lda_core.training.pass_stop.PassStop`);
* the **checkpoint stamp** (:func:`stamp`) and :meth:`Session.publish`;
* the **run-log records** (:func:`start_record`, :func:`step_record`, :func:`error_record`,
  :func:`end_record`, the per-phase cost :func:`lda_core.training.phase_times.timing_record`) and the one-line step log;
* **progress** on a terminal.

Framework-free: no Beam, no file I/O except through the checkpoint store and the run log the
caller gives.
"""
from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from lda_core.errors import StepRefused, TrainingError, UsageError
from lda_core.training.heldout import evaluate_health, timed_evaluate
from lda_core.training.pass_stop import AUTO_KEY, PassStop
from lda_core.training.spec import Evaluation, Output, TrainSpec

from lda_core.storage.pending import add_block_files
logger = logging.getLogger(__name__)

# step info values that must be finite for a step to be accepted
CHECKED = ("rho", "mean_change", "elbo", "score")
# exceptions with which a global step (or a sampler's process) refuses its input; any other
# exception is not a refusal and propagates (an input error, or a bug)
REFUSALS = (StepRefused, FloatingPointError, ArithmeticError)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM: ``signum``) stopped the run between two steps, after publishing the
    steps done (``step``: the position, ``checkpoint``: the latest checkpoint); ``str()`` is
    the one line to print."""

    def __init__(self, message: str, step: int, checkpoint: Optional[str], signum: int = 2):
        super().__init__(message)
        self.step = int(step)
        self.checkpoint = checkpoint
        self.signum = int(signum)


# ------------------------------------------------------------------------------ capabilities

def is_sequential(algorithm) -> bool:
    """A stream-order sampler (:class:`lda_core.algorithms.algorithm.SequentialSampler`)."""
    return bool(getattr(algorithm, "sequential", False))


def accumulates_passes(algorithm) -> bool:
    """One global step per pass over the corpus (batch VB)."""
    return bool(getattr(algorithm, "accumulates_passes", False))


def whole_corpus(algorithm) -> bool:
    """Trains on the whole corpus at once, sweep after sweep (batch collapsed Gibbs): no
    minibatches, no resume; ``passes`` are its sweeps."""
    return bool(getattr(algorithm, "whole_corpus", False))


# ------------------------------------------------------------------------------ one step

def _finite(v) -> bool:
    try:
        return v is None or math.isfinite(float(v))
    except (TypeError, ValueError):
        return True


def check_info(info: Dict[str, Any]) -> Optional[str]:
    """Why the step whose log info is ``info`` must be refused (non-finite values), or None."""
    bad = [k for k in CHECKED if not _finite(info.get(k))]
    return "the step produced non-finite %s" % ", ".join(bad) if bad else None


def apply_step(fn: Callable[..., Optional[Dict[str, Any]]], *args,
               extra: Optional[Dict[str, Any]] = None) -> Tuple[Optional[Dict[str, Any]],
                                                                 Optional[str]]:
    """Run one step ``fn(*args)`` (``algorithm.global_step(stats)``, ``sampler.process(batch)``)
    and validate it: ``(info, None)``, or ``(None, reason)`` when the step raised one of
    :data:`REFUSALS`, its info (updated with ``extra``) holds a non-finite checked value, or
    the algorithm whose method ``fn`` is holds a non-finite state (:func:`check_state`)."""
    try:
        info = dict(fn(*args) or {})
    except REFUSALS as e:
        return None, str(e)
    if extra:
        info.update(extra)
    err = check_info(info) or check_state(getattr(fn, "__self__", None))
    return (None, err) if err else (info, None)


def check_state(algorithm) -> Optional[str]:
    """Why the global state ``algorithm`` holds after a step must be refused (a non-finite
    value: :meth:`nonfinite_state` of the algorithm interfaces), or None. Only reads."""
    bad = algorithm.nonfinite_state() if hasattr(algorithm, "nonfinite_state") else None
    return "the step left non-finite values in the state (%s)" % bad if bad else None


def error_message(step: int, reason: str, last_checkpoint: Optional[str],
                  detail: str = "", stored: bool = True) -> str:
    """The message of a step that could not be applied (``step``: 1-based position);
    ``stored``: the run publishes checkpoints (an in-memory run has none to name)."""
    if not stored:
        return "minibatch %d%s could not be applied: %s; training stopped" % (step, detail,
                                                                             reason)
    return ("minibatch %d%s could not be applied: %s; training stopped, the last good "
            "checkpoint (%s) stays the latest" % (step, detail, reason,
                                                   last_checkpoint or "none written"))


# ------------------------------------------------------------------------------ position

def resume_position(state) -> int:
    """Minibatches of the seeded order already consumed by the run that wrote ``state``
    (``info["trainer"]["minibatches_done"]``; ``state.step`` for states written elsewhere)."""
    tr = (state.info or {}).get("trainer") or {}
    return int(tr.get("minibatches_done", state.step))


def eval_due(position: int, done: int, eval_every: int) -> bool:
    """Whether steps ``position - done + 1 .. position`` passed a multiple of ``eval_every``
    (evaluated once, after them)."""
    return bool(done and eval_every and
                position // eval_every > (position - done) // eval_every)




def docs_seen(algorithm) -> int:
    return int(getattr(algorithm, "docs_seen", 0) or 0)


# ------------------------------------------------------------------------------ checkpoints

def stamp(state, position: int, n_docs_seen: int, *, runner: Optional[str] = None,
          run_info: Optional[Dict[str, Any]] = None, vocab_hash: Optional[str] = None,
          sequential: bool = False, wall_time: Optional[float] = None):
    """Stamp ``state`` (a :class:`lda_core.storage.state.TopicState`) for publishing: the trainer
    info (position, documents seen, time, runner), the run's settings, the step a sampler
    without one is named by, and the vocabulary hash of algorithms that do not keep it."""
    if sequential and not state.step:
        state.step = int(position)            # checkpoints are named by step
    if not state.vocab_hash and vocab_hash:
        state.vocab_hash = vocab_hash
    info = dict(state.info or {})
    info["trainer"] = dict(minibatches_done=int(position), docs_seen=int(n_docs_seen),
                           wall_time=time.time() if wall_time is None else wall_time)
    if runner is not None:
        info["trainer"]["runner"] = runner
    if run_info:
        info["run"] = dict(run_info)
    state.info = info
    return state


# ------------------------------------------------------------------------------ run log

def start_record(position: int, algorithm, *, max_steps=None, total_steps=None, eval_every=0,
                 checkpoint_every=0, run: Optional[Dict[str, Any]] = None,
                 wall_time: Optional[float] = None, **extra) -> Dict[str, Any]:
    rec = dict(event="start", wall_time=time.time() if wall_time is None else wall_time,
               start_step=position,
               algorithm=algorithm.name,
               n_topics=getattr(algorithm, "n_topics", None),
               n_words=getattr(algorithm, "n_words", None), max_steps=max_steps,
               total_steps=total_steps, eval_every=eval_every,
               checkpoint_every=checkpoint_every)
    rec.update(extra)
    rec["run"] = dict(run or {})
    return rec


# info keys a step record always has, and scalar ones it copies when the step reports them
_STEP_OPTIONAL = ("elbo", "bound", "alpha", "eta", "skipped", "reseeded")


def step_record(step: int, pass_index: int, batch: int, info: Dict[str, Any], *,
                n_docs: int, n_docs_seen: int, t: Optional[int] = None,
                extra_scalars: bool = False) -> Dict[str, Any]:
    """The run-log record of the step that brought the position to ``step``. With
    ``extra_scalars`` every other scalar of ``info`` is kept too (the samplers' resampling
    counts, ESS ...)."""
    rec = dict(event="step", step=step, t=info.get("t", step) if t is None else t,
               pass_index=pass_index,
               batch=batch, docs_seen=n_docs_seen, docs=info.get("docs", n_docs),
               tokens=info.get("tokens"), empty=info.get("empty", info.get("n_empty")),
               capped=info.get("capped", info.get("n_capped")), rho=info.get("rho"),
               mean_change=info.get("mean_change"))
    for k in _STEP_OPTIONAL:
        if k in info and np.ndim(info[k]) == 0:
            rec[k] = info[k]
    if extra_scalars:
        for k, v in scalar_info(info).items():
            rec.setdefault(k, v)
    return rec


def scalar_info(info: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON scalars of a step's info (arrays and objects dropped)."""
    out = {}
    for k, v in (info or {}).items():
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[k] = v
        elif hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
            out[k] = v.item()
    return out


def error_record(step: int, message: str, **extra) -> Dict[str, Any]:
    return dict(event="error", step=step, message=message, wall_time=time.time(), **extra)


def end_record(position: int, n_docs_seen: int, steps_run: int, elapsed: float,
               metrics: Optional[Dict[str, float]], checkpoint: Optional[str],
               **extra) -> Dict[str, Any]:
    rec = dict(event="end", step=position, docs_seen=n_docs_seen, steps_run=steps_run,
               elapsed=elapsed, metrics=metrics, checkpoint=checkpoint)
    rec.update(extra)
    rec["wall_time"] = time.time()
    return rec


def fmt(v) -> str:
    if v is None:
        return "-"
    try:
        return "%.4g" % float(v)
    except (TypeError, ValueError):
        return str(v)


def score_text(metrics: Optional[Dict[str, float]]) -> str:
    if not metrics:
        return ""
    s = " completion_ll/token=%.4f" % metrics.get("completion_ll_per_token", float("nan"))
    if "per_word_bound" in metrics:
        s += " per_word_bound=%.4f" % metrics["per_word_bound"]
    return s


def log_step(rec: Dict[str, Any]) -> None:
    """The DEBUG line of one step (per-step detail; :func:`log_event` is the INFO line)."""
    logger.debug("step t=%d pass=%s batch=%s rho=%s docs=%s docs_seen=%s mean_change=%s%s",
                rec["step"], rec.get("pass_index"), rec.get("batch"), fmt(rec.get("rho")),
                rec.get("docs"), rec.get("docs_seen"), fmt(rec.get("mean_change")),
                score_text(rec.get("metrics")))


def log_event(rec: Dict[str, Any], elapsed: float, pass_done: Optional[int]) -> None:
    """The one INFO line of a step that ended a pass or was evaluated (with the checkpoint
    store's line per checkpoint, a log that is not a terminal gets one line per pass,
    evaluation and checkpoint, not one per step)."""
    what = ["step %d" % rec["step"]]
    if pass_done is not None:
        what.append("pass %d done" % pass_done)
    text = ", ".join(what) + " (%.1f s)" % elapsed
    m = rec.get("metrics")
    if m and "completion_ll_per_token" in m:
        text += ": held-out completion %.4f/token" % m["completion_ll_per_token"]
        if "per_word_bound" in m:
            text += ", per-word bound %.4f" % m["per_word_bound"]
    logger.info(text)


# ------------------------------------------------------------------------------ the session

class Session:
    """One training run's bookkeeping, shared by every runner (module docstring).

    ``output`` (:class:`lda_core.training.spec.Output`): its ``run_log`` is anything with
    ``write(record)`` (a :class:`lda_core.storage.run_log.RunLog`, or a list-like buffer for a
    detached window), or None; its ``checkpoint_store`` is where :meth:`publish` publishes
    (None: nothing is published); None: neither, and no progress line. ``evaluation``: the
    held-out documents and cadence. ``runner``: recorded in each
    checkpoint's trainer info (None: not recorded). ``pass_stop`` (``--passes auto``) with
    ``batches_per_pass``: :meth:`pass_end` feeds it the held-out score at each pass end."""

    def __init__(self, *, position: int = 0, output: Optional[Output] = None,
                 evaluation: Optional[Evaluation] = None, runner: Optional[str] = None,
                 run_info: Optional[Dict[str, Any]] = None, vocab_hash: Optional[str] = None,
                 t_start: Optional[float] = None, pass_stop: Optional[PassStop] = None,
                 batches_per_pass: int = 0):
        output = output if output is not None else Output(progress=False)
        evaluation = evaluation if evaluation is not None else Evaluation()
        if int(evaluation.every) < 0:
            raise UsageError("eval_every must be >= 0 (0 = only at the end), got %r"
                             % (evaluation.every,))
        self.run_log = output.run_log
        self.store = output.checkpoint_store
        self.heldout = evaluation.heldout
        self.eval_every = int(evaluation.every)
        self.vocab_hash = vocab_hash
        self.c_start = time.process_time()
        self.steps_run = 0
        self.metrics: Dict[str, float] = {}
        self.last_eval = -1
        self.last_health = -1
        self.last_checkpoint: Optional[str] = None
        self.last_published = -1
        self.progress = (output.progress and hasattr(sys.stderr, "isatty")
                         and sys.stderr.isatty())
        self.pass_stop = pass_stop
        self.position = int(position)
        self.runner = runner
        self.run_info = run_info
        self.t_start = time.time() if t_start is None else t_start
        self.batches_per_pass = int(batches_per_pass or 0)
        if pass_stop is not None and self.batches_per_pass:
            self.run_info = dict(run_info or {}, **{AUTO_KEY: pass_stop.to_info()})

    @classmethod
    def for_spec(cls, spec: TrainSpec, **fields) -> "Session":
        """The session of ``spec``: its output, evaluation, run information and ``--passes
        auto`` rule; ``fields`` as for :meth:`begin` (and ``vocab_hash``)."""
        kw: Dict[str, Any] = dict(output=spec.output, evaluation=spec.evaluation,
                                  run_info=spec.info(), pass_stop=spec.schedule.pass_stop)
        kw.update(fields)
        return cls(**kw)

    def begin(self, position: int, *, runner: Optional[str] = None,
              run_info: Optional[Dict[str, Any]] = None, batches_per_pass: int = 0,
              t_start: Optional[float] = None) -> "Session":
        """Set what a runner knows only after its set-up: the position it starts at (after a
        resume), its description (recorded in each checkpoint), the run information (with
        what the runner adds, e.g. its pieces per minibatch), the minibatches per pass (which
        ``--passes auto`` needs) and when the run started."""
        self.position = int(position)
        self.runner = runner
        self.run_info = run_info
        self.t_start = time.time() if t_start is None else t_start
        self.c_start = time.process_time()
        self.batches_per_pass = int(batches_per_pass or 0)
        if self.pass_stop is not None:
            if self.batches_per_pass < 1:
                raise ValueError("passes auto needs the number of minibatches per pass")
            self.run_info = dict(run_info or {}, **{AUTO_KEY: self.pass_stop.to_info()})
        return self

    # -- records
    def write(self, record: Dict[str, Any]) -> None:
        if self.run_log is not None:
            self.run_log.write(record)

    def start(self, algorithm, **fields) -> Dict[str, Any]:
        rec = start_record(self.position, algorithm, eval_every=self.eval_every,
                           wall_time=self.t_start, **fields)
        self.write(rec)
        return rec

    def applied(self, n: int) -> None:
        """``n`` more minibatches were applied: move the position past them."""
        self.position += int(n)
        self.steps_run += int(n)

    def log_steps(self, records: Sequence[Dict[str, Any]], metrics=None,
                  checkpoint: Optional[str] = None) -> None:
        """Log the step records of consecutive steps just applied (the last one carries the
        evaluation and the checkpoint that followed them)."""
        now = time.time()
        for i, rec in enumerate(records):
            if i == len(records) - 1:
                if metrics:
                    rec["metrics"] = metrics
                if checkpoint:
                    rec["checkpoint"] = checkpoint
            rec["wall_time"] = now
            rec["elapsed"] = now - self.t_start
            log_step(rec)
            self.write(rec)
        if not records:
            return
        last = records[-1]
        bpp = self.batches_per_pass
        ends = [r for r in records if bpp and int(r["step"]) % bpp == 0]
        pass_done = int(ends[-1]["step"]) // bpp if ends else None
        if pass_done is not None or last.get("metrics"):
            log_event(last, now - self.t_start, pass_done)
        if AUTO_KEY in last and self.passes_stopped:
            logger.info("passes auto: stopping after pass %d: %s", len(self.pass_stop.scores),
                        self.pass_stop.reason())

    def fail(self, step: int, reason: str, detail: str = "", **extra) -> None:
        """Log the refusal of step ``step`` and raise :class:`TrainingError`."""
        msg = error_message(step, reason, self.last_checkpoint or self.latest_path(), detail,
                            stored=self.store is not None)
        logger.error(msg)
        self.write(error_record(step, msg, **extra))
        raise TrainingError(msg)

    def end(self, n_docs_seen: int, **extra) -> Dict[str, Any]:
        if self.last_checkpoint is None:
            self.last_checkpoint = self.latest_path()
        rec = end_record(self.position, n_docs_seen, self.steps_run,
                         time.time() - self.t_start, self.metrics, self.last_checkpoint,
                         **extra)
        self.write(rec)
        return rec

    # -- evaluation
    def evaluate(self, algorithm, done: Optional[int] = None) -> Optional[Dict[str, float]]:
        """Held-out metrics of ``algorithm`` at the current position. With ``done`` (the
        cadence): the held-out score alone (:meth:`score`), only if those last steps passed
        a multiple of ``eval_every`` and the position was not scored yet. Without ``done``:
        the run's last evaluation, the score (unless the position was just scored) plus topic
        health, once per position. None when nothing was evaluated."""
        if self.heldout is None:
            return None
        if done is not None:
            if self.last_eval == self.position or not eval_due(self.position, done,
                                                               self.eval_every):
                return None
            return self.score(algorithm)
        if self.last_health == self.position:
            return None
        if self.last_eval != self.position:
            self.score(algorithm)
        te = time.time()
        health = evaluate_health(algorithm.topic_word(), self.heldout)
        if health:
            self.metrics = dict(self.metrics, health_seconds=time.time() - te, **health)
        self.last_health = self.position
        return self.metrics

    def score(self, algorithm) -> Dict[str, float]:
        """The cheap held-out score at the current position (document completion on the
        held-out set, and the algorithm's bound when it has one; no topic health): what the
        cadence and every ``--passes auto`` pass end evaluate."""
        self.metrics = timed_evaluate(algorithm, self.heldout, health=False)
        self.last_eval = self.position
        logger.debug("held-out score at step %d:%s (%.2f s)", self.position,
                     score_text(self.metrics), self.metrics["eval_seconds"])
        return self.metrics

    def pass_end(self, algorithm, record: Optional[Dict[str, Any]] = None
                 ) -> Optional[Dict[str, float]]:
        """``--passes auto``, when the position is the end of a pass: score the held-out set
        (unless the cadence just did), feed the score to the rule, and record its state in
        ``record`` (the pass end's step record) and in the run info the next checkpoint
        carries. Returns the metrics it evaluated, if any."""
        if (self.pass_stop is None or not self.position
                or self.position % self.batches_per_pass):
            return None
        metrics = self.score(algorithm) if self.last_eval != self.position else None
        self._add_pass(algorithm)
        if record is not None:
            record[AUTO_KEY] = self.pass_stop.to_info()
        return metrics

    def _add_pass(self, algorithm) -> None:
        """Feed the rule the score of the pass that just ended, record its state in the run
        info, keep the best pass's checkpoint from pruning and warn of a collapse."""
        rule = self.pass_stop
        rule.add(self.metrics["completion_ll_per_token"], step=int(getattr(
            algorithm, "step", self.position)))
        self.run_info = dict(self.run_info or {}, **{AUTO_KEY: rule.to_info()})
        best = rule.best_step()
        if self.store is not None and best is not None and hasattr(self.store, "pinned"):
            self.store.pinned = {best}
        if rule.collapsed:
            logger.warning("passes auto: %s; stopping now and keeping pass %d",
                           rule.reason(), rule.best + 1)

    def checkpoint_due(self, checkpoint_every: int) -> bool:
        """Whether the position calls for a checkpoint: the ``checkpoint_every`` cadence, or
        a pass end of a ``--passes auto`` run (each may become the model kept)."""
        pos = self.position
        return bool((checkpoint_every and pos % checkpoint_every == 0) or (
            self.pass_stop is not None and self.batches_per_pass and pos
            and pos % self.batches_per_pass == 0))

    def keep_best(self, algorithm):
        """``--passes auto`` stopped on a pass that was not its best: make the best pass's
        checkpoint the model -- re-published with the rule's final state, LATEST naming it,
        the later checkpoints removed -- and return its algorithm (the one to evaluate and
        report). Otherwise ``algorithm`` itself. A run log record (``passes_auto_kept``) and
        a log line say which pass was kept."""
        rule = self.pass_stop
        if rule is None or not rule.stopped or not rule.scores:
            return algorithm
        b, last = rule.best, len(rule.scores) - 1
        kept = dict(event="passes_auto_kept", kept_pass=b + 1, passes=last + 1,
                    score=rule.scores[b], last_score=rule.scores[-1])
        if b == last:
            self.write(dict(kept, step=int(getattr(algorithm, "step", self.position))))
            return algorithm
        step = rule.best_step()
        if step is None or self.store is None:
            logger.warning("passes auto: pass %d scored best (%.4f) but its checkpoint is not "
                           "recorded; the model is the last pass's (%.4f)", b + 1,
                           rule.scores[b], rule.scores[-1])
            return algorithm
        # the state module imports nothing from training; the algorithm is rebuilt as every
        # reader of a checkpoint rebuilds it
        from lda_core.storage.blocks import algorithm_from_state
        state = self.store.load(step, row_order=True)
        info = dict(state.info or {})
        info["run"] = dict(info.get("run") or {}, **{AUTO_KEY: rule.to_info()})
        state.info = info
        self.last_checkpoint = self.store.publish(state)
        gone = self.store.discard_after(step)
        self.position = resume_position(state)
        self.last_published = self.position
        self.run_info = dict(self.run_info or {}, **{AUTO_KEY: rule.to_info()})
        self.write(dict(kept, step=int(step), checkpoint=self.last_checkpoint,
                        removed=len(gone)))
        logger.warning("passes auto: keeping pass %d (held-out %.4f, step %d), the best; the "
                       "last pass scored %.4f (%d later checkpoint(s) removed)",
                       b + 1, rule.scores[b], step, rule.scores[-1], len(gone))
        return algorithm_from_state(state, take=True)

    def catch_up(self, algorithm) -> None:
        """``--passes auto`` resumed from a checkpoint published at a pass end before that
        pass was scored (the scoring failed, and the trainer published the steps done before
        reporting it): score the state now so the rule has every pass's score."""
        if (self.pass_stop is None or self.heldout is None or not self.position
                or self.position % self.batches_per_pass
                or len(self.pass_stop.scores) >= self.position // self.batches_per_pass):
            return
        self.score(algorithm)
        self._add_pass(algorithm)
        logger.info("passes auto: pass %d scored on resume: %.4f", len(self.pass_stop.scores),
                    self.pass_stop.scores[-1])

    @property
    def passes_stopped(self) -> bool:
        return self.pass_stop is not None and self.pass_stop.stopped

    # -- one step with statistics computed elsewhere
    def step(self, algorithm, stats, detail: str = "") -> Dict[str, Any]:
        """Apply one global step of ``algorithm`` with ``stats`` computed elsewhere (a
        streaming window's E-step), validated as every runner's step (:func:`apply_step`):
        a refusal raises :class:`TrainingError` (:meth:`fail`, ``detail`` naming the input);
        otherwise the position moves past it and the step's info is returned."""
        info, err = apply_step(algorithm.global_step, stats)
        if err is not None:
            self.fail(self.position + 1, err, detail)
        self.applied(1)
        return info

    # -- checkpoints
    def publish(self, algorithm, position: Optional[int] = None,
                info: Optional[Dict[str, Any]] = None) -> Optional[str]:
        """Publish ``algorithm`` at ``position`` (default: the session's) as a checkpoint,
        stamped (:func:`stamp`); not twice for one position. ``info``: records the caller
        keeps in the checkpoint's info (a streaming window's record, an estimator's
        parameters, a loaded model's run records, which then stay as they were rather than
        the stamp's); what the algorithm keeps there itself comes first."""
        pos = self.position if position is None else int(position)
        if self.store is None or self.last_published == pos:
            return None
        # word-sharded algorithms with B > 1: their rows as B block files, uncopied
        from lda_core.storage.blocks import checkpoint_state
        state = checkpoint_state(algorithm)
        own = dict(state.info or {})
        state = stamp(state, pos, docs_seen(algorithm),
                      runner=self.runner, run_info=self.run_info, vocab_hash=self.vocab_hash,
                      sequential=is_sequential(algorithm))
        if info:
            state.info = dict(state.info)
            state.info.update(info)
            state.info.update(own)
        self.last_checkpoint = self.store.publish(state)
        self.last_published = pos
        return self.last_checkpoint

    def publish_blocks(self, header, sources, position: Optional[int] = None,
                       pending=None) -> Optional[str]:
        """:meth:`publish` of the word-sharded algorithm whose word-block header is ``header``
        and whose row blocks are the ``.npy`` files ``sources`` (block order), without
        assembling it (:meth:`lda_core.storage.checkpoint.CheckpointStore.publish_blocks`):
        the same checkpoint, stamped the same way. ``pending``: the statistics in flight
        (``(first minibatch, count, {array name: uint8 array})``, one array per minibatch
        and word block: :mod:`lda_core.storage.pending`)."""
        pos = self.position if position is None else int(position)
        if self.store is None or self.last_published == pos:
            return None
        n_docs = int(header.counters.get("docs_seen", 0))

        def prepare(state):
            if pending is not None:
                first, n, arrays = pending
                state.arrays.update(arrays)
                add_block_files(state, first, n, int(header.n_blocks))
            return stamp(state, pos, n_docs, runner=self.runner, run_info=self.run_info,
                         vocab_hash=self.vocab_hash)
        self.last_checkpoint = self.store.publish_blocks(header, sources, prepare=prepare)
        self.last_published = pos
        return self.last_checkpoint

    def latest_path(self) -> Optional[str]:
        store = self.store
        if store is None:
            return None
        try:
            if hasattr(store, "pointer"):
                p = store.pointer()
                return store.path(p) if p is not None else None
            ckpts = store.list_checkpoints()
            return ckpts[-1].path if ckpts else None
        except Exception:  # pragma: no cover - only used in messages
            return None

    # -- progress
    def show(self, text: str) -> None:
        if self.progress:
            print("\r" + text + "   ", end="", file=sys.stderr, flush=True)

    def close_progress(self) -> None:
        if self.progress:
            print("", file=sys.stderr)


def records_for(steps: Iterable[Tuple[int, int, int, int]], infos: Sequence[Dict[str, Any]],
                extra_scalars: bool = False) -> List[Dict[str, Any]]:
    """Step records of steps ``(position before, pass, batch, documents)`` with the infos
    the runner collected (``info["docs_seen"]`` after each step)."""
    return [step_record(pos + 1, p, b, info, n_docs=n, n_docs_seen=info.get("docs_seen"),
                        extra_scalars=extra_scalars)
            for (pos, p, b, n), info in zip(steps, infos)]


def open_session(session: Optional["Session"], spec: TrainSpec, position: int, *,
                 vocab_hash: Optional[str] = None, **fields) -> "Session":
    """A runner's session: ``session`` (the caller's, built from ``spec``), or a new one from
    ``spec``, begun at ``position`` with ``fields`` (:meth:`Session.begin`)."""
    if session is None:
        session = Session.for_spec(spec)
    if vocab_hash is not None:
        session.vocab_hash = vocab_hash
    return session.begin(position, **fields)
