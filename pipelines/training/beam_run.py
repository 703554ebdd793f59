"""What the waiting Beam driver (:mod:`pipelines.training.beam_train`) and a detached window
(:mod:`pipelines.training.beam_detached`) share: where a run's scratch states go, the run log's
start record, and the bookkeeping after a window."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from lda_core.training import session as _session
from lda_core.training.session import Session
from lda_core.training.spec import TrainSpec
from pipelines.runtime import scratch as scratch_space
from pipelines.runtime.beam_options import RunnerConfig
from pipelines.training.beam_plan import StepPlan

logger = logging.getLogger(__name__)

def default_scratch_root(model_dir: str, cfg: RunnerConfig,
                         scratch_dir: Optional[str] = None) -> str:
    """Where the states of the steps inside a window go when workers are other processes
    (:func:`pipelines.runtime.scratch.default_root`)."""
    return scratch_space.default_root(model_dir, cfg.local, scratch_dir)


@dataclass(frozen=True)
class WindowSetup:
    """A Beam run's set-up, resolved once by the driver (``BeamRunner.run``) before any
    window: the runner, the shards and their row counts, the positions (start, where this run
    stops, where the schedule ends), the minibatches per pass, the window size ``M``, the
    pieces per minibatch, the E-step threads per worker, the run information (pieces recorded)
    and when the run started, and the exchange of its steps."""
    cfg: RunnerConfig
    files: List[str]
    sizes: List[int]
    position: int
    stop: int
    total: int
    n_per_pass: int
    M: int
    pieces: int
    n_threads: Optional[int]
    run_info: Dict[str, Any]
    t_start: float
    exchange: str                 # pipelines.training.beam_train.EXCHANGES (or in-process)

    @property
    def n_docs(self) -> int:
        return int(sum(self.sizes))


def start_record(setup: WindowSetup, spec: TrainSpec, algorithm,
                 run_info: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The run log's start record of a Beam run (waiting, or one detached window);
    ``run_info``: the session's (default the set-up's)."""
    return _session.start_record(
        setup.position, algorithm, max_steps=spec.schedule.max_steps, total_steps=setup.total,
        eval_every=spec.evaluation.every, checkpoint_every=spec.output.checkpoint_every,
        wall_time=setup.t_start,
        run=dict(setup.run_info if run_info is None else run_info, runner=setup.cfg.describe(),
                 minibatches_per_window=setup.M, exchange=setup.exchange,
                 pieces_per_minibatch=setup.pieces))


def after_window(ses: Session, algo, steps: Sequence[StepPlan], infos: List[Dict[str, Any]],
                 error, publish, **error_fields) -> Optional[Dict[str, float]]:
    """What follows a window, wherever it runs (the waiting driver, or a detached window's
    last DoFn): move the session past the ``len(infos)`` steps applied, evaluate when a
    multiple of ``eval_every`` was passed, publish the state (``publish(algo, position)``),
    log the step records (``--passes auto``: at a pass end, the rule is fed its score before
    the state is published); then, when a step failed (``error = (step, reason)``), log the
    error and raise :class:`TrainingError`. Returns the evaluation, if any."""
    done = len(infos)
    ses.applied(done)
    recs = _session.records_for([(sp.position, sp.pass_index, sp.batch_index, sp.n_docs)
                                 for sp in steps[:done]], infos)
    metrics = ses.evaluate(algo, done=done) if done else None
    metrics = (ses.pass_end(algo, recs[-1]) if done else None) or metrics   # --passes auto
    ckpt = publish(algo, ses.position) if done else None
    if ckpt:
        ses.last_checkpoint = ckpt
    ses.log_steps(recs, metrics, ckpt)
    if error is not None:
        ses.fail(error[0], error[1], **error_fields)
    return metrics


def window_end(ses: Session, stop: int, M: int, position: Optional[int] = None) -> int:
    """Where the window starting at ``position`` (default: the session's) ends: ``M``
    minibatches on, at ``stop`` at the latest, and with ``--passes auto`` at the end of its
    pass."""
    pos = ses.position if position is None else int(position)
    end = min(stop, pos + M)
    if ses.pass_stop is not None:
        end = min(end, (pos // ses.batches_per_pass + 1) * ses.batches_per_pass)
    return end


def planned_windows(ses: Session, stop: int, M: int) -> int:
    """The windows from the session's position to ``stop`` (:func:`window_end`): with
    ``--passes auto`` those of every pass up to the cap, of which the rule may run fewer."""
    pos, n = ses.position, 0
    while pos < stop:
        pos, n = window_end(ses, stop, M, pos), n + 1
    return max(1, n)


def log_window(ses: Session, windows: int, n_windows: int, steps: Sequence[StepPlan],
                counters: Dict[str, int], stop: int, seconds: float, n_docs_seen: int):
    """The INFO line and the progress line after a window."""
    done = len(steps)
    rate = ses.steps_run / max(1e-9, time.time() - ses.t_start)
    eta = (stop - ses.position) / rate if rate > 0 else float("nan")
    score = _session.score_text(ses.metrics)
    of = ("%d" if ses.pass_stop is None else "at most %d") % n_windows
    logger.info("window %d of %s: steps %d..%d (%d docs, %.1f s, %s) docs_seen=%d%s ETA %.0f s",
                windows, of, ses.position - done, ses.position,
                sum(s.n_docs for s in steps), seconds,
                ", ".join("%s=%d" % kv for kv in sorted(counters.items())) or "-",
                n_docs_seen, score, eta)
    ses.show("window %d of %s  step %d/%d  docs %d%s  ETA %.0fs"
             % (windows, of, ses.position, stop, n_docs_seen, score, eta))
