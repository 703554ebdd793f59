"""The streaming job's training half: the E-step of a window against the newest checkpoint
(:class:`EStepLatestFn`) and the single-key stateful global step (:class:`ApplyGlobalStepFn`:
windows applied in order, validated by :func:`lda_core.session.apply_step`, one checkpoint
stamped by :func:`lda_core.session.stamp` per window). See :mod:`pipelines.stream`."""
from __future__ import annotations

import logging
import os
import struct
import time
from typing import Optional

import apache_beam as beam
from apache_beam.coders import Coder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (BagStateSpec, ReadModifyWriteStateSpec,
                                              TimerSpec, on_timer)
from apache_beam.utils import shared

from lda_core import session as _session
from lda_core.docbatch import DocBatch
from lda_core.session import TrainingError

logger = logging.getLogger("pipelines.stream")

NS = "ldabeam"


# ----------------------------------------------------------------------------- state access

class _Held:
    def __init__(self, algorithm):
        self.algorithm = algorithm


_SHARED = shared.Shared()


def latest_step(model_dir: str) -> Optional[int]:
    from lda_core.checkpoint import CheckpointStore
    return CheckpointStore(model_dir).pointer()


def load_step(model_dir: str, step: int, n_threads: Optional[int] = None):
    """The algorithm of checkpoint ``step`` of ``model_dir``, one copy per process and step
    (read-only: callers that modify it take a deep copy)."""
    from lda_core.algorithm import algorithm_class
    from lda_core.checkpoint import CheckpointStore
    from lda_core.state import TopicState

    def load():
        path = CheckpointStore(model_dir).path(step)
        logger.info("stream: loading checkpoint %s (pid %d)", path, os.getpid())
        st = TopicState.load(path)
        return _Held(algorithm_class(st.algorithm).from_state(st))

    from pipelines import dataset
    algo = _SHARED.acquire(load, tag="%s@%d" % (dataset.absolute(model_dir), step)).algorithm
    if n_threads is not None and hasattr(algo, "n_threads"):
        algo.n_threads = int(n_threads)
    return algo


class EStepLatestFn(beam.DoFn):
    """``(window max timestamp µs, docs)`` -> ``(0, (window, docs, stats, step used))``: the
    local step against the newest published checkpoint (may be stale; see module docstring)."""

    def __init__(self, model_dir: str, n_threads: Optional[int] = None):
        self.model_dir, self.n_threads = model_dir, n_threads
        self.docs = Metrics.counter(NS, "documents")
        self.tokens = Metrics.counter(NS, "tokens")

    def process(self, element):
        wend, docs = element
        from pipelines.stream import docs_to_batch
        batch = docs_to_batch(docs)
        step = latest_step(self.model_dir)
        stats = None
        if step is not None:
            algo = load_step(self.model_dir, step, self.n_threads)
            stats = algo.local_step(batch)
            self.docs.inc(int(stats.n_docs) + int(stats.n_empty))
            self.tokens.inc(int(stats.n_tokens))
        yield 0, (wend, batch, stats, step)


ORDERS = ("watermark", "arrival")


class WindowResultCoder(Coder):
    """Data-only coder of a buffered window result ``(window end µs, DocBatch, statistics or
    None, step used or None)``: the documents as arrays (:func:`lda_core.algorithm.pack_arrays`)
    and the statistics through :func:`pipelines.beam_stats.encode_stats` -- no pickle in the
    job's state."""

    _MAGIC = b"LDAWIN01"

    def encode(self, value) -> bytes:
        from lda_core.algorithm import pack_arrays
        from pipelines.beam_stats import encode_stats
        wend, batch, stats, used = value
        stats_b = b"" if stats is None else encode_stats(stats)
        head = pack_arrays(self._MAGIC, dict(wend=int(wend), used=used,
                                             doc_ids=list(batch.doc_ids),
                                             has_stats=stats is not None),
                           [("indptr", "<i8", batch.indptr), ("word_ids", "<i4", batch.word_ids),
                            ("counts", "<i4", batch.counts)])
        return struct.pack("<Q", len(head)) + head + stats_b

    def decode(self, data: bytes):
        from lda_core.algorithm import unpack_arrays
        from pipelines.beam_stats import decode_stats
        (n,) = struct.unpack("<Q", data[:8])
        h, a = unpack_arrays(self._MAGIC, data[8:8 + n])
        batch = DocBatch(tuple(h["doc_ids"]), a["indptr"], a["word_ids"], a["counts"])
        stats = decode_stats(data[8 + n:]) if h["has_stats"] else None
        used = None if h["used"] is None else int(h["used"])
        return int(h["wend"]), batch, stats, used

    def is_deterministic(self) -> bool:
        return False


class ApplyGlobalStepFn(beam.DoFn):
    """The single-key stateful step (module docstring): windows applied in order, one
    checkpoint published per window; emits ``{"step", "checkpoint", "window_end", ...}``.

    ``order="watermark"`` (default): window results are buffered and applied in window order
    when the watermark passes their end (an event-time timer), so the order never depends on
    which E-step finished first. ``order="arrival"``: each window result is applied when it
    arrives -- for the local FnApiRunner, whose watermark does not advance past
    ``fileio.MatchContinuously`` (a splittable DoFn) so event-time timers never fire there;
    windows of a stream that arrives slower than it is processed still come in order."""

    BUFFER = BagStateSpec("buffer", WindowResultCoder())
    APPLIED = ReadModifyWriteStateSpec("applied_step", VarIntCoder())
    FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

    def __init__(self, model_dir: str, keep_last: Optional[int] = None,
                 n_threads: Optional[int] = None, corpus_size: Optional[int] = -1,
                 order: str = "watermark"):
        if order not in ORDERS:
            raise ValueError("order=%r is not allowed; choose one of %s" % (order, ORDERS))
        self.order = order
        self.model_dir, self.keep_last, self.n_threads = model_dir, keep_last, n_threads
        self.corpus_size = corpus_size
        self.recomputed = Metrics.counter(NS, "stale_estep_recomputed")
        self.steps = Metrics.counter(NS, "global_steps")
        self.algo = None

    def setup(self):
        from lda_core.checkpoint import CheckpointStore
        self.store = CheckpointStore(self.model_dir, keep_last=self.keep_last)

    def _current(self, applied: Optional[int]):
        """The algorithm at the step recorded in Beam state (reloaded if this worker's copy
        is not that step: a restarted or moved key)."""
        import copy
        want = applied if applied is not None else self.store.pointer()
        if want is None:
            raise RuntimeError("no checkpoint in %s to continue from" % self.model_dir)
        if self.algo is None or int(getattr(self.algo, "step", -1)) != int(want):
            self.algo = copy.deepcopy(load_step(self.model_dir, int(want)))
            if self.n_threads is not None and hasattr(self.algo, "n_threads"):
                self.algo.n_threads = int(self.n_threads)
        return self.algo

    def process(self, kv, buffer=beam.DoFn.StateParam(BUFFER),
                applied=beam.DoFn.StateParam(APPLIED),
                flush=beam.DoFn.TimerParam(FLUSH), ts=beam.DoFn.TimestampParam):
        if self.order == "arrival":
            yield from self._apply([kv[1]], applied)
            return
        buffer.add(kv[1])
        flush.set(ts)

    @on_timer(FLUSH)
    def on_flush(self, buffer=beam.DoFn.StateParam(BUFFER),
                 applied=beam.DoFn.StateParam(APPLIED), ts=beam.DoFn.TimestampParam):
        now = ts.micros
        items = sorted(buffer.read(), key=lambda x: x[0])
        due = [x for x in items if x[0] <= now]
        if not due:
            return
        buffer.clear()
        for x in items:
            if x[0] > now:
                buffer.add(x)
        yield from self._apply(due, applied)

    def _apply(self, due, applied):
        algo = self._current(applied.read())
        for wend, batch, stats, used in due:
            recomputed = used is None or int(used) != int(algo.step)
            if recomputed:
                self.recomputed.inc()
                stats = algo.local_step(batch)
            if self.corpus_size != -1 and hasattr(algo, "corpus_size"):
                algo.corpus_size = self.corpus_size
            t0 = time.time()
            before = int(algo.step)
            info, err = _session.apply_step(algo.global_step, stats)
            if err is not None:
                # the window is refused and the job fails; this worker's copy may hold the
                # refused step, so the next attempt reloads the latest checkpoint
                self.algo = None
                raise TrainingError(_session.error_message(
                    before + 1, err, self.store.pointer_path(), " (window ending %s)" % wend))
            if info.get("skipped"):
                continue
            state = _session.stamp(algo.to_state(), int(algo.step), _session.docs_seen(algo))
            state.info["stream"] = dict(window_end_micros=int(wend), docs=int(batch.n_docs),
                                        estep_recomputed=bool(recomputed),
                                        estep_state_step=used, rho=info.get("rho"),
                                        global_step_seconds=time.time() - t0)
            path = self.store.publish(state)
            applied.write(int(algo.step))
            self.steps.inc()
            logger.info("stream: window ending %s: %d documents, step %d, rho=%.4g%s -> %s",
                        window.Timestamp(micros=wend).to_utc_datetime().isoformat(),
                        batch.n_docs, algo.step, float(info.get("rho", float("nan"))),
                        " (E-step recomputed)" if recomputed else "", path)
            yield {"step": int(algo.step), "checkpoint": path, "window_end_micros": int(wend),
                   "docs": int(batch.n_docs), "estep_recomputed": bool(recomputed)}
