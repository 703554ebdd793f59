"""The in-process trainer: the fast single-machine path and the reference for the Beam trainer.

For every minibatch (in the seeded order of :mod:`lda_core.training.ordering`)::

    stats = algorithm.local_step(batch)     # E-step, global state frozen
    info  = algorithm.global_step(stats)    # λ ← (1−ρ_t)λ + ρ_t(η + D/S·sstats), t ← t+1

(``algorithm.process(batch)`` for the stream-order samplers of
:class:`lda_core.algorithms.algorithm.SequentialSampler`). Around that loop: one INFO log line per global
step (t, ρ, documents, mean change of λ, score when evaluated), a tqdm progress bar on stderr
(only when stderr is a terminal), held-out evaluation every ``eval_every`` steps with
:mod:`lda_core.evaluation.metrics` (document completion; the per-word bound of paper eq. 16 when the
algorithm has one), a checkpoint every ``checkpoint_every`` steps and at the end (published
atomically by :class:`lda_core.storage.checkpoint.CheckpointStore`), and a JSON-lines run log
(:mod:`lda_core.storage.run_log`) -- the bookkeeping of :class:`lda_core.training.session.Session`, shared with
every other runner; this module supplies only the loop.

Resume: the trainer starts at the algorithm's position (``algorithm.step`` global steps
applied, or ``start_step``) and asks the minibatch source for the minibatches from there on
(``source.iter_from(step)``), so ``N`` steps equal ``N/2`` steps + checkpoint + reload + ``N/2``
steps bit for bit. A source without ``iter_from`` is a plain iterable from step 0: the
minibatches already applied are read and dropped.

A global step that raises (the VB global step refuses non-finite statistics and leaves the
state untouched) or whose info holds a non-finite ``rho``, ``mean_change``, ``elbo`` or
``score`` (:func:`lda_core.training.session.apply_step`) stops the run with :class:`TrainingError`; nothing is published for it, so the last good checkpoint stays the
latest.

Batch VB (``algorithm.accumulates_passes`` true, e.g. ``BatchVB``: S = D, ρ = 1) goes through
the same loop: the statistics of all minibatches of a pass are merged (float64 sums, bounded
memory: one minibatch of documents at a time) and applied as one global step per pass; the run
stops when the relative change of the ELBO (``info["elbo"]``) falls below ``rel_tol`` (1e-5).
For it, a "step" is a pass.

This module does no file I/O of its own except through ``CheckpointStore`` and ``RunLog``.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterable, Iterator, List, NamedTuple, Optional

from lda_core.docbatch import DocBatch
from lda_core.errors import UsageError
from lda_core.faults import fault_point
from lda_core.training import pieces as _pieces, session as _session, staleness as _staleness
from lda_core.storage.pending import Pending
from lda_core.training.phase_times import PhaseTimes
from lda_core.training.runner import TrainData
from lda_core.training.session import open_session, Session, TrainingInterrupted
from lda_core.training.spec import split_keywords, TrainSpec

logger = logging.getLogger(__name__)


class Minibatch(NamedTuple):
    """One minibatch of the seeded order: ``step`` is its 0-based global index; ``beyond``:
    past the end of the schedule (read only to E-step it ahead, :func:`_iterate`)."""
    step: int
    pass_index: int
    batch_index: int
    batch: DocBatch
    beyond: bool = False


@dataclass
class TrainResult:
    algorithm: Any
    step: int
    docs_seen: int
    steps_run: int
    elapsed: float
    metrics: Dict[str, float] = field(default_factory=dict)
    checkpoint: Optional[str] = None
    converged: Optional[bool] = None


def _iterate(minibatches, start_step: int, lookahead: int = 0) -> Iterator[Minibatch]:
    """The minibatches from ``start_step`` on. ``lookahead``: a pipelined run also E-steps
    the next ``lookahead`` minibatches past the schedule's end (its last checkpoint carries
    their statistics); a source that can go on past its passes (``extends``) yields them,
    marked :attr:`Minibatch.beyond` so that they are never applied."""
    if hasattr(minibatches, "iter_from"):
        if lookahead and getattr(minibatches, "extends", False):
            it = minibatches.iter_from(start_step, extra_steps=lookahead)
        else:
            it = minibatches.iter_from(start_step)
        skip = 0
    else:
        it = iter(minibatches)
        skip = start_step
    i = 0
    for item in it:
        if isinstance(item, Minibatch):
            mb = item
        elif isinstance(item, DocBatch):
            mb = Minibatch(i if skip else start_step + i, -1, -1, item)
        else:  # (pass, batch, DocBatch)
            p, b, batch = item
            mb = Minibatch(i if skip else start_step + i, int(p), int(b), batch)
        i += 1
        if mb.step < start_step:
            continue
        yield mb


def _position(algorithm, start_step: Optional[int]) -> int:
    if start_step is not None:
        return int(start_step)
    return int(algorithm.step)


def _progress(progress: bool, total: Optional[int], initial: int):
    if not progress or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, initial=initial, unit="step", file=sys.stderr, dynamic_ncols=True,
                leave=True)


def _check_settings(spec: TrainSpec) -> None:
    for name, v in (("eval_every", spec.evaluation.every),
                    ("checkpoint_every", spec.output.checkpoint_every)):
        if int(v) < 0:
            raise UsageError("%s must be >= 0 (0 = only at the end), got %r" % (name, v))
    max_steps = spec.schedule.max_steps
    if max_steps is not None and int(max_steps) < 0:
        raise UsageError("max_steps must be >= 0, got %r" % (max_steps,))
    if not (spec.schedule.rel_tol > 0):
        raise UsageError("rel_tol must be > 0, got %r" % (spec.schedule.rel_tol,))


def train(algorithm, minibatches: Iterable, **options) -> TrainResult:
    """The in-process run in keyword form: ``options`` are the spec's keywords
    (:data:`lda_core.training.spec.KEYWORDS`: ``heldout``, ``eval_every``,
    ``checkpoint_store``, ``checkpoint_every``, ``run_log``, ``progress``, ``max_steps``,
    ``total_steps``, ``start_step``, ``rel_tol``, ``run_info``, ``pass_stop``) and the runner's
    ``pieces`` (:class:`InProcessRunner`). ``minibatches``: a source with ``iter_from(step)``
    (e.g. ``pipelines.training.shard_stream``) or an iterable of :class:`Minibatch` /
    ``DocBatch`` / ``(pass, batch, DocBatch)`` from step 0."""
    spec_kw, own = split_keywords(options, ("pieces",))
    return InProcessRunner(**own).run(TrainSpec.from_keywords(algorithm, spec_kw), algorithm,
                                      TrainData(minibatches=minibatches))


@dataclass(frozen=True)
class InProcessRunner:
    """The training loop in this process (module docstring).

    ``pieces``: the minibatch's E-step runs in this many pieces summed in piece order
    (:mod:`lda_core.training.pieces`; default ``run_info["pieces_per_minibatch"]``, else
    :data:`~lda_core.training.pieces.DEFAULT_PIECES`), recorded in ``run_info``: the same sums as
    the Beam trainer's with any number of workers.

    ``warm_start`` (batch VB on documents held in memory): each pass starts every document's
    E-step from the better of its previous γ and a fresh draw, and a pass's ELBO is that of
    the state after it (:class:`_PassLoop`)."""
    pieces: Optional[int] = None
    warm_start: bool = False

    def run(self, spec: TrainSpec, algorithm, data: TrainData, session=None) -> TrainResult:
        """Run the loop over ``data.minibatches``. ``spec.schedule.max_steps`` is the absolute
        global step at which to stop; ``total_steps`` only sizes the progress bar.
        ``eval_every`` / ``checkpoint_every``: 0 = only at the end. ``pass_stop`` (``--passes
        auto``): evaluate at the end of every pass and stop when the rule says so; its history
        is kept in ``info["run"]["passes_auto"]`` of every checkpoint and in the step record of
        each pass end."""
        _check_settings(spec)
        sched = spec.schedule
        minibatches = data.minibatches
        accumulate = _session.accumulates_passes(algorithm)
        bpp = getattr(minibatches, "batches_per_pass", None)
        run_info = spec.info()
        run_info[_pieces.RUN_KEY] = _pieces.resolve_pieces(
            self.pieces, _pieces.recorded_pieces(run_info, False))
        s = _staleness.resolve_staleness(None, _staleness.recorded_staleness(run_info, False))
        if s or _staleness.RUN_KEY in run_info:
            _staleness.check_pipelinable(algorithm, s)
            run_info[_staleness.RUN_KEY] = s
        warmup = _staleness.warmup_of(run_info)
        if s:
            run_info[_staleness.WARMUP_KEY] = warmup
        if sched.pass_stop is not None:
            check_pass_stop(algorithm, spec.evaluation.heldout, bpp, accumulate)
        if accumulate and not bpp:
            raise ValueError("%s applies one global step per pass: give a minibatch source "
                             "with `batches_per_pass` and `iter_from` (e.g. "
                             "pipelines.training.shard_stream)"
                             % algorithm.name)
        ses = open_session(session, spec, _position(algorithm, sched.start),
                           run_info=run_info, vocab_hash=run_info.get("vocab_hash"),
                           batches_per_pass=1 if accumulate else bpp)
        ses.progress = False      # the loop's own bar (_ProgressBar) shows the progress
        ses.start(algorithm, max_steps=sched.max_steps, total_steps=sched.total_steps,
                  checkpoint_every=spec.output.checkpoint_every, run=ses.run_info)
        ses.catch_up(algorithm)
        if self.warm_start and not (accumulate and hasattr(algorithm, "best_start")):
            raise UsageError("warm_start applies to batch VB, not %s" % algorithm.name)
        loop = (_PassLoop(algorithm, bpp, sched.rel_tol, self.warm_start) if accumulate
                else _StepLoop(algorithm, run_info[_pieces.RUN_KEY], s, ses.position,
                                                 warmup))
        start = ses.position * bpp if accumulate else ses.position
        stream = _iterate(minibatches, start, lookahead=s)
        return _loop(ses, loop, algorithm, stream, spec)


def _loop(ses: Session, loop, algorithm, stream, spec: TrainSpec) -> TrainResult:
    """The steps of an in-process run until the stream ends or a stopping rule says so."""
    max_steps, total_steps = spec.schedule.max_steps, spec.schedule.total_steps

    def stop() -> bool:
        return ((max_steps is not None and ses.position >= max_steps) or ses.passes_stopped
                or interrupt.hit)

    with _Interrupt() as interrupt, _ProgressBar(
            spec.output.progress, total_steps if max_steps is None else
            (min(total_steps, max_steps) if total_steps else max_steps), ses.position) as bar:
        for mb, stats in loop.steps(stream, stop):
            if stop():
                break
            fault_point("estep")     # a test's kill point: the E-step is done, nothing applied
            rec, metrics = _apply(ses, loop, algorithm, mb, stats,
                                  spec.output.checkpoint_every, bar)
            bar.update(metrics)
            if ses.passes_stopped:
                break
            if loop.converged:
                logger.info("batch VB converged: relative ELBO change %.3g < %g",
                            rec["elbo_rel_change"], spec.schedule.rel_tol)
                break
        if interrupt.hit:
            _interrupted(ses, algorithm, getattr(loop, "times", None), interrupt.signum)
        loop.finish()
        return _finish(ses, algorithm, loop.converged, getattr(loop, "times", None),
                       interrupt)


class _Interrupt:
    """Ctrl-C (SIGINT) or SIGTERM during training: the step in progress completes, the loop
    stops and the state is published (:func:`_interrupted`); a second signal stops at once.
    Only in the main thread (the one that receives signals); elsewhere a no-op."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.hit = False
        self.signum: Optional[int] = None
        self.prev: Dict[int, Any] = {}

    def _handler(self, signum, frame):
        if self.hit:
            raise KeyboardInterrupt
        self.hit, self.signum = True, int(signum)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.prev[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, prev in self.prev.items():
            signal.signal(sig, prev)
        return False


def _interrupted(ses: Session, algorithm, times=None, signum: Optional[int] = None) -> None:
    """The run was interrupted between two steps: publish the steps done since the last
    checkpoint, write the timing and end records, and raise :class:`TrainingInterrupted`."""
    ckpt = ses.publish(algorithm) if ses.steps_run else None
    if times is not None and ses.steps_run:
        ses.write(times.record(ses.steps_run, time.time() - ses.t_start))
    end = ses.end(_session.docs_seen(algorithm), interrupted=True,
                  cpu_seconds=time.process_time() - ses.c_start)
    name = signal.Signals(signum).name if signum else "SIGINT"
    raise TrainingInterrupted(
        "interrupted (%s) at step %d (%d steps in this run): %s; continue with --resume"
        % (name, ses.position, ses.steps_run, "checkpoint %s published" % ckpt if ckpt else
           "the latest checkpoint is %s" % (end["checkpoint"] or "none")), ses.position,
        end["checkpoint"], signum or int(signal.SIGINT))


def _apply(ses: Session, loop, algorithm, mb: Minibatch, stats, checkpoint_every: int, bar):
    """Apply one minibatch's step, then evaluate / feed --passes auto / publish / log as due.
    Returns (its step record, the metrics evaluated after it or None)."""
    info, err = loop.apply(mb, stats)
    if err is not None:
        bar.close()
        ses.fail(mb.step + 1, err, " (pass %d, batch %d, %d documents)"
                 % (mb.pass_index, mb.batch_index, mb.batch.n_docs),
                 pass_index=mb.pass_index, batch=mb.batch_index)
    ses.applied(1)      # minibatches consumed (== t unless one was all empty)
    step = ses.position
    rec = _session.step_record(step, mb.pass_index, mb.batch_index, info,
                               n_docs=mb.batch.n_docs, n_docs_seen=_session.docs_seen(algorithm),
                               t=algorithm.step, extra_scalars=loop.sequential)
    loop.note(rec)
    try:
        # a pass end's score is the --passes auto rule's input, which the checkpoint records;
        # other evaluations follow the checkpoint
        metrics = ses.pass_end(algorithm, rec)
        # the cadence, and every pass end of a --passes auto run (the best one is kept)
        ckpt = ses.publish(algorithm) if ses.checkpoint_due(checkpoint_every) else None
        metrics = ses.evaluate(algorithm, done=1) or metrics
    except Exception:
        _publish_on_failure(ses, algorithm)
        raise
    ses.log_steps([rec], metrics, ckpt)
    return rec, metrics


def _publish_on_failure(ses: Session, algorithm) -> None:
    """An evaluation failed between two steps: publish the steps done before the error
    propagates, so it never costs the trained state (a pass end published before its score
    is scored on resume: :meth:`Session.catch_up`)."""
    try:
        ses.publish(algorithm)
    except Exception:  # noqa: BLE001 - the evaluation's error is the one to report
        logger.debug("publishing after a failed evaluation failed too", exc_info=True)


def _finish(ses: Session, algorithm, converged, times=None, interrupt=None) -> TrainResult:
    """The final checkpoint, evaluation, per-phase timing record (``times``) and end record of
    a run (no evaluation once ``interrupt`` was hit)."""
    # nothing changed in a run that applied no step: do not republish the same state;
    # published before the last evaluation, which then cannot cost the trained state
    if ses.steps_run or ses.latest_path() is None:
        ses.publish(algorithm)
    # --passes auto stopped after a pass worse than its best: the best becomes the model
    algorithm = ses.keep_best(algorithm)
    if interrupt is None or not interrupt.hit:
        ses.evaluate(algorithm)
    if times is not None and ses.steps_run:
        ses.write(times.record(ses.steps_run, time.time() - ses.t_start))
    end = ses.end(_session.docs_seen(algorithm),
                  cpu_seconds=time.process_time() - ses.c_start, converged=converged)
    logger.info("training finished at step %d (%d steps in this run, %.1f s)%s", ses.position,
                ses.steps_run, end["elapsed"],
                "" if not ses.metrics else ": " + ", ".join(
                    "%s=%.4f" % (k, v) for k, v in ses.metrics.items()))
    return TrainResult(algorithm, ses.position, _session.docs_seen(algorithm), ses.steps_run,
                       end["elapsed"], dict(ses.metrics), end["checkpoint"], converged)


class _ProgressBar:
    """The tqdm bar of a run (only when stderr is a terminal and ``progress``), with log
    lines printed above it instead of through it; a no-op otherwise."""

    def __init__(self, progress: bool, total: Optional[int], initial: int):
        self.bar = _progress(progress, total, initial)
        self.redirect = contextlib.ExitStack()

    def __enter__(self):
        if self.bar is not None:
            try:
                from tqdm.contrib.logging import logging_redirect_tqdm
                self.redirect.enter_context(logging_redirect_tqdm())
            except ImportError:  # pragma: no cover
                pass
        return self

    def update(self, metrics) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if metrics:
                self.bar.set_postfix_str(_session.score_text(metrics).strip())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __exit__(self, *exc):
        self.redirect.close()
        self.close()
        return False


def check_pass_stop(algorithm, heldout, bpp, accumulate) -> None:
    name = algorithm.name
    if heldout is None:
        raise UsageError("passes auto stops when the held-out score stops improving: it needs "
                         "held-out documents (--heldout)")
    if (accumulate or not bpp or _session.is_sequential(algorithm)
            or _session.whole_corpus(algorithm)):
        raise UsageError("passes auto needs an algorithm that makes several minibatch steps "
                         "per pass (online-vb, scvb0, sparse-gibbs-vb); %s: give --passes N"
                         % name)


class _StepLoop:
    """One global step (or ``process`` call) per minibatch.

    ``staleness`` s > 0 with warm-up W (:mod:`lda_core.training.staleness`): before step t
    is applied, every minibatch whose E-step reads the state after t steps is E-stepped
    (``version_read``: minibatch t + s once past the warm-up, t itself before it), and its
    statistics are held until their own step; the ones in flight ride on the algorithm
    (``pending``), so every checkpoint published between two steps carries them. A run that
    starts without them (fresh, or from a checkpoint written with s = 0) E-steps those
    minibatches with the state it starts from."""
    converged: Optional[bool] = None

    def __init__(self, algorithm, pieces: int = 1, staleness: int = 0, start: int = 0,
                 warmup: int = 0):
        self.algorithm = algorithm
        self.pieces = pieces
        self.staleness = int(staleness)
        self.warmup = int(warmup)
        self.start = int(start)
        self.sequential = _session.is_sequential(algorithm)
        self.times = PhaseTimes()
        # [minibatch, its statistics or None]: read and not applied yet
        self.ahead: Deque[List[Any]] = deque()

    def steps(self, stream, stop):
        it = iter(stream)
        if self.staleness:
            yield from self._pipelined(it, stop)
            return
        while True:
            mb = self.times.timed("read", next, it, None)
            if mb is None or mb.beyond:
                return
            yield mb, None

    def _estep(self, batch):
        return self.times.timed("estep", _pieces.local_step_pieces, self.algorithm, batch,
                                self.pieces)

    def _pipelined(self, it, stop):
        s, W = self.staleness, self.warmup
        ahead = self.ahead
        ended = False

        def entry(m: int) -> Optional[List[Any]]:
            """The entry of minibatch ``m`` (read from the stream up to it), None past the
            stream's end."""
            nonlocal ended
            while not ended and (not ahead or ahead[-1][0].step < m):
                mb = self.times.timed("read", next, it, None)
                if mb is None:
                    ended = True
                else:
                    ahead.append([mb, None])
            for e in ahead:
                if e[0].step == m:
                    return e
            return None

        want = _staleness.in_flight(self.start, s, W)
        got = [entry(m) for m in range(self.start, self.start + want)]
        carried = getattr(self.algorithm, "pending", None)
        a = 0
        if carried is not None and want and None not in got and \
                carried.covers(self.start, want):
            for e, st in zip(got, carried.stats):
                e[1] = st
        else:
            if carried is not None and (carried.stats or want):
                logger.warning("the statistics in flight of the checkpoint (minibatches from "
                               "%d) are not this run's (from %d, staleness %d): recomputed "
                               "with the state it starts from", carried.first, self.start, s)
            a = self.start
        self._carry(self.start)
        t = self.start
        while not stop():
            # every minibatch whose E-step reads the state after t steps, now
            for m in range(t, t + s + 1):
                if _staleness.version_read(m, s, W, a) != t:
                    continue
                e = entry(m)
                if e is None:
                    break
                if e[1] is None:
                    e[1] = self._estep(e[0].batch)
            if not ahead or ahead[0][0].beyond:
                return
            mb, stats = ahead.popleft()
            yield mb, stats
            t += 1

    def _carry(self, first: int) -> None:
        self.algorithm.pending = (Pending(first, [st for mb, st in self.ahead
                                                  if st is not None and mb.step >= first])
                                  if self.staleness else None)

    def apply(self, mb: Minibatch, stats):
        if self.sequential:
            return _session.apply_step(self.algorithm.process, mb.batch)
        if stats is None:
            stats = self._estep(mb.batch)
        out = self.times.timed("global_step", _session.apply_step, self.algorithm.global_step,
                               stats)
        if self.staleness and out[1] is None:
            self._carry(mb.step + 1)
        return out

    def note(self, rec) -> None:
        pass

    def finish(self) -> None:
        pass


class _PassLoop:
    """Batch VB: the statistics of all minibatches of a pass are merged (float64 sums, one
    minibatch of documents in memory at a time) and applied as one global step per pass; the
    step's ``elbo`` is that of the state *before* it (γ fit by this pass's E-step: the sequence
    lags one pass but costs no extra pass over the corpus). Stops when the relative ELBO
    change falls below ``rel_tol``.

    ``warm``: every minibatch's documents stay in memory with their γ; each pass starts a
    document's E-step from the better of its previous γ and a fresh draw
    (``algorithm.best_start``: every ELBO_d at least the warm-started one, so the ELBO does
    not decrease), the statistics are summed onto ``empty_stats()``, and the step's ``elbo``
    is the exact one of the state after it, with those γ."""

    sequential = False

    def __init__(self, algorithm, batches_per_pass: int, rel_tol: float, warm: bool = False):
        self.algorithm, self.bpp, self.rel_tol = algorithm, int(batches_per_pass), rel_tol
        self.pending = None
        self.pending_docs = 0
        self.prev_elbo: Optional[float] = None
        self.converged: Optional[bool] = None
        self.warm = bool(warm)
        self.batches: Dict[int, DocBatch] = {}
        self.gammas: Dict[int, Any] = {}

    def _warm_local_step(self, mb: Minibatch):
        b = mb.batch_index
        self.batches[b] = mb.batch
        start = self.algorithm.best_start(mb.batch, self.gammas.get(b))
        st = self.algorithm.local_step(mb.batch, return_gamma=True, gamma0=start)
        self.gammas[b] = st.gamma
        st.gamma = None
        st.gamma_doc_ids = None
        if self.pending is None:
            self.pending = self.algorithm.empty_stats()
        return st

    def steps(self, stream, stop):
        for mb in stream:
            if stop():
                return
            st = (self._warm_local_step(mb) if self.warm
                  else self.algorithm.local_step(mb.batch))
            self.pending = st if self.pending is None else self.pending.merge(st)
            self.pending_docs += mb.batch.n_docs
            if mb.batch_index != self.bpp - 1:
                continue
            stats, self.pending, self.pending_docs = self.pending, None, 0
            yield mb, stats

    def apply(self, mb: Minibatch, stats):
        if self.warm:
            info, err = _session.apply_step(self.algorithm.global_step, stats)
            if err is None:
                order = sorted(self.batches)
                info["elbo"] = self.algorithm.elbo([self.batches[b] for b in order],
                                                   [self.gammas[b] for b in order])
                err = _session.check_info(info)
            return (None, err) if err else (info, None)
        extra = None
        if hasattr(self.algorithm, "topic_term") and hasattr(stats, "score"):
            extra = {"elbo": float(stats.score) + float(self.algorithm.topic_term())}
        return _session.apply_step(self.algorithm.global_step, stats, extra=extra)

    def note(self, rec) -> None:
        if rec.get("elbo") is None:
            return
        elbo = float(rec["elbo"])
        if self.prev_elbo is not None:
            rel = abs(elbo - self.prev_elbo) / max(abs(self.prev_elbo), 1e-300)
            rec["elbo_rel_change"] = rel
            self.converged = rel < self.rel_tol
        self.prev_elbo = elbo

    def finish(self) -> None:
        if self.pending is not None:
            logger.warning("the minibatch stream ended in the middle of a pass (%d documents "
                           "of statistics not applied)", self.pending_docs)


def fit_whole_corpus(algorithm, docs: DocBatch, sweeps: int, ses: Session) -> Optional[str]:
    """Train a ``whole_corpus`` sampler (batch collapsed Gibbs): every training document in
    memory, ``sweeps`` sweeps (the first ``algorithm.burn_in`` not averaged into φ), then one
    checkpoint at position ``sweeps``, published through the session. The one code path of
    both runners (in-process, and the Beam window's DoFn)."""
    if not _session.whole_corpus(algorithm):
        raise ValueError("%s is not trained on the whole corpus at once"
                         % algorithm.name)
    if sweeps <= algorithm.burn_in:
        logger.warning("%s: %d sweeps <= burn-in %d: no sweep is averaged, the topics are the "
                       "last sample's (raise --passes or lower the burn-in)", algorithm.name,
                       sweeps, algorithm.burn_in)
    else:
        logger.info("%s: %d documents in memory, %d sweeps, the first %d burn-in, phi "
                    "averaged over the last %d", algorithm.name, docs.n_docs, sweeps,
                    algorithm.burn_in, sweeps - algorithm.burn_in)
    algorithm.fit(docs, sweeps=int(sweeps))
    ses.applied(int(sweeps))
    return ses.publish(algorithm)


@dataclass(frozen=True)
class WholeCorpusRunner:
    """A ``whole_corpus`` sampler (batch collapsed Gibbs) in this process: all training
    documents in memory (``data.documents()``), ``spec.schedule.passes`` sweeps of which the
    first ``algorithm.burn_in`` are not averaged into φ, one checkpoint at the end
    (:func:`fit_whole_corpus`, as on Beam)."""

    def run(self, spec: TrainSpec, algorithm, data: TrainData, session=None) -> TrainResult:
        sweeps = spec.schedule.passes
        ses = open_session(session, spec, 0, run_info=spec.info(), vocab_hash=data.vocab_hash)
        ses.progress = False
        ses.start(algorithm, sweeps=sweeps, burn_in=algorithm.burn_in, run=spec.info())
        ckpt = fit_whole_corpus(algorithm, data.documents(), sweeps, ses)
        ses.evaluate(algorithm)
        end = ses.end(algorithm.docs_seen)
        return TrainResult(algorithm, sweeps, algorithm.docs_seen, sweeps, end["elapsed"],
                           dict(ses.metrics), ckpt)
