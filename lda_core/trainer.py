"""The in-process trainer: the fast single-machine path and the reference for the Beam trainer.

For every minibatch (in the seeded order of :mod:`lda_core.ordering`)::

    stats = algorithm.local_step(batch)     # E-step, global state frozen
    info  = algorithm.global_step(stats)    # λ ← (1−ρ_t)λ + ρ_t(η + D/S·sstats), t ← t+1

(``algorithm.process(batch)`` for the stream-order samplers of
:class:`lda_core.algorithm.SequentialSampler`). Around that loop: one INFO log line per global
step (t, ρ, documents, mean change of λ, score when evaluated), a tqdm progress bar on stderr
(only when stderr is a terminal), held-out evaluation every ``eval_every`` steps with
:mod:`lda_core.evaluation` (document completion; the per-word bound of paper eq. 16 when the
algorithm has one), a checkpoint every ``checkpoint_every`` steps and at the end (published
atomically by :class:`lda_core.checkpoint.CheckpointStore`), and a JSON-lines run log
(:mod:`lda_core.run_log`).

Resume: the trainer starts at the algorithm's position (``algorithm.step`` global steps
applied, or ``start_step``) and asks the minibatch source for the minibatches from there on
(``source.iter_from(step)``), so ``N`` steps equal ``N/2`` steps + checkpoint + reload + ``N/2``
steps bit for bit. A source without ``iter_from`` is a plain iterable from step 0: the
minibatches already applied are read and dropped.

A global step that raises (the VB global step refuses non-finite statistics and leaves the
state untouched) or that reports a non-finite change stops the run with
:class:`TrainingError`; nothing is published for it, so the last good checkpoint stays the
latest.

Batch VB (``algorithm.accumulate_passes`` true, e.g. ``BatchVB``: S = D, ρ = 1) goes through
the same loop: the statistics of all minibatches of a pass are merged (float64 sums, bounded
memory: one minibatch of documents at a time) and applied as one global step per pass; the run
stops when the relative change of the ELBO (``info["elbo"]``) falls below ``rel_tol`` (1e-5).
For it, a "step" is a pass.

This module does no file I/O of its own except through ``CheckpointStore`` and ``RunLog``.
"""
from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, NamedTuple, Optional, Tuple

import numpy as np

from lda_core.docbatch import DocBatch

logger = logging.getLogger(__name__)


class TrainingError(ValueError):
    """A minibatch could not be applied (e.g. non-finite statistics); the run stopped."""


class Minibatch(NamedTuple):
    """One minibatch of the seeded order: ``step`` is its 0-based global index."""
    step: int
    pass_index: int
    batch_index: int
    batch: DocBatch


@dataclass
class HeldOut:
    """A held-out set prepared once: the documents and their document-completion halves."""
    docs: DocBatch
    first: DocBatch
    second: DocBatch
    seed: int = 0

    @classmethod
    def from_batch(cls, docs: DocBatch, seed: int = 0) -> "HeldOut":
        """Non-empty documents for the bound; those with >= 2 tokens split in halves for
        document completion (as the harness does)."""
        from lda_core.evaluation import split_halves
        docs = docs.non_empty()
        keep = np.nonzero(docs.doc_lengths >= 2)[0]
        two = docs if len(keep) == docs.n_docs else docs.take(keep)
        a, b = split_halves(two, seed)
        return cls(docs, a, b, seed)

    @classmethod
    def from_halves(cls, docs: DocBatch, first: DocBatch, second: DocBatch) -> "HeldOut":
        """A split made elsewhere (e.g. the bench harness's test_a / test_b)."""
        return cls(docs.non_empty(), first, second, -1)


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


def algorithm_alpha(algorithm) -> Any:
    """The document-topic prior used by the document-completion evaluator (scalar or K-vector)."""
    a = getattr(algorithm, "alpha", None)
    if callable(a):
        a = a()
    if a is None:
        a = 1.0 / algorithm.n_topics
    a = np.asarray(a, dtype=np.float64)
    return float(a) if a.ndim == 0 or a.size == 1 else a


def evaluate(algorithm, heldout: HeldOut, alpha: Optional[float] = None) -> Dict[str, float]:
    """Held-out metrics of the current state (does not modify it): document completion
    (log-likelihood per token of the second halves, θ fit on the first halves with the
    protocol's evaluation prior α = 0.1 unless ``alpha`` is given — the same for every model,
    as in ``../shared/bench``), topic health on the held-out documents (dead and effective
    topics, NPMI: ``lda_core.evaluation.health_scalars``) and, when the algorithm defines
    it, the per-word bound of paper eq. 16 (a bound, not a perplexity)."""
    from lda_core.evaluation import PROTOCOL_ALPHA, document_completion, health_scalars
    out: Dict[str, float] = {}
    alpha = PROTOCOL_ALPHA if alpha is None else float(alpha)
    phi = algorithm.topic_word()
    dc = document_completion(phi, heldout.first, heldout.second, alpha=alpha)
    out["completion_ll_per_token"] = float(dc["ll_per_token"])
    out["completion_perplexity"] = float(dc.get("perplexity", math.exp(-dc["ll_per_token"])))
    out.update(health_scalars(phi, heldout.docs))
    if hasattr(algorithm, "per_word_bound"):
        b = float(algorithm.per_word_bound(heldout.docs))
        out["per_word_bound"] = b
        out["perplexity_bound"] = float(math.exp(-b)) if b > -700 else float("inf")
    return out


def timed_evaluate(algorithm, heldout: HeldOut) -> Dict[str, float]:
    """:func:`evaluate`, plus the seconds it took as ``eval_seconds`` (what every trainer logs
    with an evaluation)."""
    te = time.time()
    metrics = evaluate(algorithm, heldout)
    metrics["eval_seconds"] = time.time() - te
    return metrics


def _iterate(minibatches, start_step: int) -> Iterator[Minibatch]:
    if hasattr(minibatches, "iter_from"):
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


def resume_position(state) -> int:
    """Minibatches of the seeded order already consumed by the run that wrote ``state``
    (``info["trainer"]["minibatches_done"]``; ``state.step`` for states written elsewhere).
    It differs from ``state.step`` only when a minibatch held no non-empty document."""
    tr = (state.info or {}).get("trainer") or {}
    return int(tr.get("minibatches_done", state.step))


def _position(algorithm, start_step: Optional[int]) -> int:
    if start_step is not None:
        return int(start_step)
    return int(getattr(algorithm, "step", 0) or 0)


def _progress(progress: bool, total: Optional[int], initial: int):
    if not progress or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, initial=initial, unit="step", file=sys.stderr, dynamic_ncols=True,
                leave=True)


def _finite(v) -> bool:
    try:
        return v is None or math.isfinite(float(v))
    except (TypeError, ValueError):
        return True


def train(algorithm, minibatches: Iterable, *, heldout: Optional[HeldOut] = None,
          eval_every: int = 0, checkpoint_store=None, checkpoint_every: int = 0,
          run_log=None, progress: bool = True, max_steps: Optional[int] = None,
          total_steps: Optional[int] = None, start_step: Optional[int] = None,
          rel_tol: float = 1e-5, run_info: Optional[Dict[str, Any]] = None) -> TrainResult:
    """Run the training loop (see module docstring).

    ``minibatches``: a source with ``iter_from(step)`` (e.g. ``pipelines.shard_stream``) or an
    iterable of :class:`Minibatch` / ``DocBatch`` / ``(pass, batch, DocBatch)`` from step 0.
    ``max_steps`` is the absolute global step at which to stop (so a resumed run with the same
    ``max_steps`` ends where an uninterrupted one would); ``total_steps`` only sizes the
    progress bar. ``eval_every`` / ``checkpoint_every``: 0 = only at the end. ``run_info`` is
    recorded in the run log's start record and in each checkpoint's ``info["run"]``.
    """
    for name, v in (("eval_every", eval_every), ("checkpoint_every", checkpoint_every)):
        if int(v) < 0:
            raise ValueError("%s must be >= 0 (0 = only at the end), got %r" % (name, v))
    if max_steps is not None and int(max_steps) < 0:
        raise ValueError("max_steps must be >= 0, got %r" % (max_steps,))
    if not (rel_tol > 0):
        raise ValueError("rel_tol must be > 0, got %r" % (rel_tol,))
    sequential = hasattr(algorithm, "process") and not hasattr(algorithm, "local_step")
    accumulate = bool(getattr(algorithm, "accumulate_passes",
                              getattr(algorithm, "name", None) == "batch-vb"))
    step = _position(algorithm, start_step)
    steps_run = 0
    last_metrics: Dict[str, float] = {}
    last_ckpt: Optional[str] = None
    last_ckpt_step = -1
    last_eval_step = -1
    converged: Optional[bool] = None
    prev_elbo: Optional[float] = None
    t_start = time.time()
    c_start = time.process_time()
    if run_log is not None:
        run_log.write(dict(event="start", wall_time=t_start, start_step=step,
                           algorithm=getattr(algorithm, "name", type(algorithm).__name__),
                           n_topics=getattr(algorithm, "n_topics", None),
                           n_words=getattr(algorithm, "n_words", None),
                           max_steps=max_steps, total_steps=total_steps, eval_every=eval_every,
                           checkpoint_every=checkpoint_every, run=run_info or {}))
    bar = _progress(progress, total_steps if max_steps is None else
                    (min(total_steps, max_steps) if total_steps else max_steps), step)

    def docs_seen():
        return int(getattr(algorithm, "docs_seen", 0) or 0)

    def publish():
        nonlocal last_ckpt, last_ckpt_step
        if checkpoint_store is None or last_ckpt_step == step:
            return None
        state = algorithm.to_state()
        if sequential and not state.step:
            state.step = step   # checkpoints are named by step
        if not state.vocab_hash and run_info and run_info.get("vocab_hash"):
            state.vocab_hash = run_info["vocab_hash"]   # algorithms that do not keep it
        info = dict(state.info or {})
        info["trainer"] = dict(minibatches_done=step, docs_seen=docs_seen(),
                               wall_time=time.time())
        if run_info:
            info["run"] = run_info
        state.info = info
        last_ckpt = checkpoint_store.publish(state)
        last_ckpt_step = step
        return last_ckpt

    def do_eval():
        nonlocal last_metrics, last_eval_step
        if heldout is None or last_eval_step == step:
            return None
        last_metrics = timed_evaluate(algorithm, heldout)
        last_eval_step = step
        return last_metrics

    def fail(mb: Minibatch, err: str):
        msg = ("minibatch %d (pass %d, batch %d, %d documents) could not be applied: %s; "
               "training stopped, the last good checkpoint (%s) stays the latest"
               % (mb.step + 1, mb.pass_index, mb.batch_index, mb.batch.n_docs, err,
                  last_ckpt or _latest_path(checkpoint_store) or "none written"))
        logger.error(msg)
        if run_log is not None:
            run_log.write(dict(event="error", step=mb.step + 1, pass_index=mb.pass_index,
                               batch=mb.batch_index, message=msg, wall_time=time.time()))
        if bar is not None:
            bar.close()
        raise TrainingError(msg)

    elbo_before = None
    pending = None  # batch VB: statistics merged over the current pass
    pending_docs = 0
    bpp = getattr(minibatches, "batches_per_pass", None)
    if accumulate and not bpp:
        raise ValueError("%s applies one global step per pass: give a minibatch source with "
                         "`batches_per_pass` and `iter_from` (e.g. pipelines.shard_stream)"
                         % getattr(algorithm, "name", type(algorithm).__name__))
    stream = _iterate(minibatches, step * bpp if accumulate else step)
    redirect = contextlib.ExitStack()
    if bar is not None:   # log lines above the bar instead of through it
        try:
            from tqdm.contrib.logging import logging_redirect_tqdm
            redirect.enter_context(logging_redirect_tqdm())
        except ImportError:  # pragma: no cover
            pass
    try:
        for mb in stream:
            if accumulate:
                # one global step per pass: mb.pass_index is the step it contributes to
                if max_steps is not None and step >= max_steps:
                    break
                st = algorithm.local_step(mb.batch)
                pending = st if pending is None else pending.merge(st)
                pending_docs += mb.batch.n_docs
                if mb.batch_index != bpp - 1:
                    continue
                stats, pending, pending_docs = pending, None, 0
                # ELBO of the state *before* this step (γ fit by this pass's E-step): the
                # sequence lags one pass but costs no extra pass over the corpus
                if hasattr(algorithm, "topic_term") and hasattr(stats, "score"):
                    elbo_before = float(stats.score) + float(algorithm.topic_term())
            elif max_steps is not None and step >= max_steps:
                break
            else:
                stats = None if sequential else algorithm.local_step(mb.batch)
            try:
                if sequential:
                    info = algorithm.process(mb.batch) or {}
                else:
                    info = algorithm.global_step(stats) or {}
            except (ValueError, FloatingPointError, ArithmeticError) as e:
                fail(mb, str(e))
            if accumulate and elbo_before is not None:
                info["elbo"] = elbo_before
            bad = [k for k in ("rho", "mean_change", "elbo", "score") if not _finite(info.get(k))]
            if bad:
                fail(mb, "the step produced non-finite %s" % ", ".join(bad))
            step += 1   # minibatches consumed (== t unless a minibatch was all empty)
            steps_run += 1
            rec = dict(event="step", step=step, t=getattr(algorithm, "step", step),
                       pass_index=mb.pass_index, batch=mb.batch_index,
                       docs_seen=docs_seen(), docs=info.get("docs", mb.batch.n_docs),
                       tokens=info.get("tokens"), empty=info.get("empty", info.get("n_empty")),
                       capped=info.get("capped", info.get("n_capped")), rho=info.get("rho"),
                       mean_change=info.get("mean_change"))
            for k in ("elbo", "bound", "alpha", "eta", "skipped"):
                if k in info and np.ndim(info[k]) == 0:
                    rec[k] = info[k]
            if accumulate and info.get("elbo") is not None:
                elbo = float(info["elbo"])
                rec["elbo"] = elbo
                if prev_elbo is not None:
                    rel = abs(elbo - prev_elbo) / max(abs(prev_elbo), 1e-300)
                    rec["elbo_rel_change"] = rel
                    converged = rel < rel_tol
                prev_elbo = elbo
            if heldout is not None and eval_every and step % eval_every == 0:
                rec["metrics"] = do_eval()
            if checkpoint_every and step % checkpoint_every == 0:
                rec["checkpoint"] = publish()
            rec["wall_time"] = time.time()
            rec["elapsed"] = rec["wall_time"] - t_start
            score = ""
            if rec.get("metrics"):
                m = rec["metrics"]
                score = " completion_ll/token=%.4f" % m["completion_ll_per_token"]
                if "per_word_bound" in m:
                    score += " per_word_bound=%.4f" % m["per_word_bound"]
            logger.info("step t=%d pass=%d batch=%d rho=%s docs=%s docs_seen=%d "
                        "mean_change=%s%s", step, mb.pass_index, mb.batch_index,
                        _fmt(info.get("rho")), rec["docs"], rec["docs_seen"],
                        _fmt(info.get("mean_change")), score)
            if run_log is not None:
                run_log.write(rec)
            if bar is not None:
                bar.update(1)
                if score:
                    bar.set_postfix_str(score.strip())
            if converged:
                logger.info("batch VB converged: relative ELBO change %.3g < %g",
                            rec["elbo_rel_change"], rel_tol)
                break
        if pending is not None:
            logger.warning("the minibatch stream ended in the middle of a pass (%d documents "
                           "of statistics not applied)", pending_docs)
    finally:
        redirect.close()
        if bar is not None:
            bar.close()
    if heldout is not None:
        do_eval()
    # nothing changed in a run that applied no step: do not republish the same state
    ckpt = (publish() if steps_run or last_ckpt is None and _latest_path(checkpoint_store)
            is None else None) or last_ckpt or _latest_path(checkpoint_store)
    elapsed = time.time() - t_start
    if run_log is not None:
        run_log.write(dict(event="end", step=step, docs_seen=docs_seen(), steps_run=steps_run,
                           elapsed=elapsed, cpu_seconds=time.process_time() - c_start, metrics=last_metrics, checkpoint=ckpt,
                           converged=converged, wall_time=time.time()))
    logger.info("training finished at step %d (%d steps in this run, %.1f s)%s", step,
                steps_run, elapsed,
                "" if not last_metrics else ": " + ", ".join(
                    "%s=%.4f" % (k, v) for k, v in last_metrics.items()))
    return TrainResult(algorithm, step, docs_seen(), steps_run, elapsed, dict(last_metrics),
                       ckpt, converged)


def _latest_path(store) -> Optional[str]:
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


def _fmt(v) -> str:
    if v is None:
        return "-"
    try:
        return "%.4g" % float(v)
    except (TypeError, ValueError):
        return str(v)
