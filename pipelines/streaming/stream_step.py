"""The streaming job's training half: the E-step of a window against the newest checkpoint
(:class:`EStepLatestFn`) and the single-key stateful global step (:class:`ApplyGlobalStepFn`:
windows applied in order by :meth:`lda_core.training.session.Session.step`, one checkpoint
published by :meth:`lda_core.training.session.Session.publish` per window). See
:mod:`pipelines.streaming.stream`."""
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
from lda_core.algorithms.algorithm import algorithm_class, pack_arrays, unpack_arrays
from lda_core.docbatch import DocBatch
from lda_core.storage.checkpoint import CheckpointStore, RACE_RETRIES
from lda_core.storage.state import StateFormatError, TopicState
from lda_core.training.session import Session, TrainingError
from lda_core.training.spec import Output
from pipelines.runtime import paths, process_cache
from pipelines.streaming.stream_parse import docs_to_batch, files_read
from pipelines.training.beam_stats import decode_stats, encode_stats

logger = logging.getLogger(__name__)

NS = "ldabeam"


# ----------------------------------------------------------------------------- state access

def latest_step(model_dir: str) -> Optional[int]:
    return CheckpointStore(model_dir).pointer()


def _held(model_dir: str, step: int) -> process_cache.Held:
    """Checkpoint ``step`` of ``model_dir`` (algorithm and info), loaded once per process."""

    def load():
        path = CheckpointStore(model_dir).path(step)
        logger.info("stream: loading checkpoint %s (pid %d)", path, os.getpid())
        st = TopicState.load(path)
        return process_cache.Held(algorithm_class(st.algorithm).from_state(st), st.info)

    return process_cache.acquire("%s@%d" % (paths.absolute(model_dir), step), load)


def load_step(model_dir: str, step: int, n_threads: Optional[int] = None):
    """The algorithm of checkpoint ``step`` of ``model_dir``, one copy per process and step
    (read-only: callers that modify it take a deep copy)."""
    algo = _held(model_dir, step).algorithm
    if n_threads is not None:            # the streaming job runs local/global-step algorithms
        algo.n_threads = int(n_threads)
    return algo


def load_latest(model_dir: str, n_threads: Optional[int] = None):
    """``(step, algorithm)`` of the checkpoint LATEST names (``(None, None)`` when there is
    none). When that checkpoint vanishes under the reader (the global step published a newer
    one and pruned it), LATEST is read again and the newer one loaded (bounded retries)."""
    for attempt in range(RACE_RETRIES + 1):
        step = latest_step(model_dir)
        if step is None:
            return None, None
        try:
            return step, load_step(model_dir, step, n_threads)
        except (OSError, StateFormatError):
            if attempt == RACE_RETRIES or latest_step(model_dir) == step:
                raise
    raise AssertionError("unreachable")   # pragma: no cover


def applied_record(model_dir: str, step: int) -> dict:
    """``info["stream"]`` of checkpoint ``step``: what the stream has applied up to it (see
    :func:`next_record`); empty for a checkpoint not written by the stream."""
    return dict(_held(model_dir, step).info.get("stream") or {})


# What a checkpoint records of the stream applied so far (``info["stream"]``), so that a
# restarted job, a retried bundle or a re-delivered message applies nothing twice:
#   windows   the last MAX_WINDOWS applied windows as [window end µs, documents, sha256 of
#             their sorted doc ids]: a window delivered again with the same documents is
#             skipped whole, however large it is;
#   doc_ids   the ids of the last MAX_DOC_IDS applied documents: a document delivered again
#             (a Pub/Sub message redelivered into a later window, a restarted job's
#             unacknowledged messages) is dropped from its window. Doc ids identify documents.
#   files     the input position: input file -> bytes applied (the directory driver's, see
#             pipelines.streaming.stream.run_local_directory; on a streaming runner the positions the
#             documents of pipelines.streaming.stream.ReadJsonFilesContinuously carry), carried
#             forward by every checkpoint and read back by a restarted job.
MAX_WINDOWS = 1024
MAX_DOC_IDS = 20_000


def window_digest(doc_ids) -> str:
    import hashlib
    h = hashlib.sha256()
    for d in sorted(doc_ids):
        h.update(d.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def next_record(prev: dict, wend: int, delivered, applied_ids, files=None,
                read=None) -> dict:
    """The applied record after window ``wend`` (delivered with documents ``delivered``, of
    which ``applied_ids`` were new and applied) on top of ``prev``; bounded by MAX_WINDOWS
    and MAX_DOC_IDS. ``files`` replaces the input position (the directory driver's), ``read``
    (file -> bytes read by the window's documents) advances it."""
    ids = list(prev.get("doc_ids") or []) + list(applied_ids)
    wins = list(prev.get("windows") or []) + [[int(wend), len(delivered),
                                               window_digest(delivered)]]
    out = dict(windows=wins[-MAX_WINDOWS:], doc_ids=ids[-MAX_DOC_IDS:])
    files = dict((prev.get("files") or {}) if files is None else files)
    for f, end in (read or {}).items():
        files[f] = max(int(files.get(f, 0)), int(end))
    if files:
        out["files"] = dict(files)
    return out


class EStepLatestFn(beam.DoFn):
    """``(window max timestamp µs, docs)`` -> ``(0, (window, docs, stats, step used, files
    read))``: the local step against the newest published checkpoint (may be stale; see
    module docstring); files read: :func:`pipelines.streaming.stream_parse.files_read` of the documents."""

    def __init__(self, model_dir: str, n_threads: Optional[int] = None):
        self.model_dir, self.n_threads = model_dir, n_threads
        self.docs = Metrics.counter(NS, "documents")
        self.tokens = Metrics.counter(NS, "tokens")

    def process(self, element):
        wend, docs = element
        docs = list(docs)
        batch = docs_to_batch(docs)
        step, algo = load_latest(self.model_dir, self.n_threads)
        stats = None
        if step is not None:
            stats = algo.local_step(batch)
            self.docs.inc(int(stats.n_docs) + int(stats.n_empty))
            self.tokens.inc(int(stats.n_tokens))
        yield 0, (wend, batch, stats, step, files_read(docs))


ORDERS = ("watermark", "arrival")


class WindowResultCoder(Coder):
    """Data-only coder of a buffered window result ``(window end µs, DocBatch, statistics or
    None, step used or None, files read)``: the documents as arrays (:func:`lda_core.algorithms.algorithm.pack_arrays`)
    and the statistics through :func:`pipelines.training.beam_stats.encode_stats` -- no pickle in the
    job's state."""

    _MAGIC = b"LDAWIN01"

    def encode(self, value) -> bytes:
        wend, batch, stats, used = value[:4]
        read = dict(value[4]) if len(value) > 4 else {}
        stats_b = b"" if stats is None else encode_stats(stats)
        head = pack_arrays(self._MAGIC, dict(wend=int(wend), used=used,
                                             doc_ids=list(batch.doc_ids),
                                             has_stats=stats is not None, files=read),
                           [("indptr", "<i8", batch.indptr), ("word_ids", "<i4", batch.word_ids),
                            ("counts", "<i4", batch.counts)])
        return struct.pack("<Q", len(head)) + head + stats_b

    def decode(self, data: bytes):
        (n,) = struct.unpack("<Q", data[:8])
        h, a = unpack_arrays(self._MAGIC, data[8:8 + n])
        batch = DocBatch(tuple(h["doc_ids"]), a["indptr"], a["word_ids"], a["counts"])
        stats = decode_stats(data[8 + n:]) if h["has_stats"] else None
        used = None if h["used"] is None else int(h["used"])
        read = {str(k): int(v) for k, v in (h.get("files") or {}).items()}
        return int(h["wend"]), batch, stats, used, read

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
                 order: str = "watermark", files: Optional[dict] = None):
        if order not in ORDERS:
            raise ValueError("order=%r is not allowed; choose one of %s" % (order, ORDERS))
        self.order = order
        self.model_dir, self.keep_last, self.n_threads = model_dir, keep_last, n_threads
        self.corpus_size = corpus_size
        # the directory driver's input position after this job's (single) window
        self.files = files
        self.recomputed = Metrics.counter(NS, "stale_estep_recomputed")
        self.steps = Metrics.counter(NS, "global_steps")
        self.again_windows = Metrics.counter(NS, "stream_windows_already_applied")
        self.again_docs = Metrics.counter(NS, "stream_documents_already_applied")
        self.algo = None
        self.record = None
        self.run = None

    def setup(self):
        self.store = CheckpointStore(self.model_dir, keep_last=self.keep_last)

    def _current(self, applied: Optional[int]):
        """The algorithm to continue from: the newest published checkpoint, or the step in
        Beam state if that is newer (reloaded if this worker's copy is not that step: a
        restarted or moved key).

        The newest checkpoint, not the step in Beam state: a bundle that published step N+1
        and then failed before its Beam state was committed is retried with the state still
        saying N; with ``--keep-checkpoints 1`` step N is already pruned. Continuing from
        N+1 instead needs no pruned checkpoint -- the store always keeps its newest -- and the
        windows N+1 recorded as applied (``info["stream"]``, :func:`next_record`) are skipped
        by :meth:`_apply`, so the retry publishes nothing twice."""
        import copy
        pointer = self.store.pointer()
        cands = [x for x in (applied, pointer) if x is not None]
        if not cands:
            raise RuntimeError("no checkpoint in %s to continue from" % self.model_dir)
        want = max(int(x) for x in cands)
        if self.algo is None or int(self.algo.step) != want:
            self.algo = copy.deepcopy(load_step(self.model_dir, want))
            if self.n_threads is not None:
                self.algo.n_threads = int(self.n_threads)
            self.record = applied_record(self.model_dir, want)
            self.run = dict(_held(self.model_dir, want).info.get("run") or {})
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

    def _unapplied(self, batch: DocBatch, wend: int) -> Optional[DocBatch]:
        """``batch`` without what the current checkpoint records as applied: None if the
        window itself was applied (same end, same documents), else its documents whose ids
        are not among the recently applied ones."""
        digest = window_digest(batch.doc_ids)
        for w in self.record.get("windows") or []:
            if int(w[0]) == int(wend) and w[2] == digest:
                self.again_windows.inc()
                return None
        seen = set(self.record.get("doc_ids") or [])
        keep = [i for i, d in enumerate(batch.doc_ids) if d not in seen]
        if len(keep) < batch.n_docs:
            self.again_docs.inc(batch.n_docs - len(keep))
            import numpy as np
            batch = batch.take(np.asarray(keep, np.int64))
        return batch if batch.n_docs else None

    def _apply(self, due, applied):
        algo = self._current(applied.read())
        for x in due:
            wend, batch, stats, used = x[:4]
            read = x[4] if len(x) > 4 else None
            fresh = self._unapplied(batch, wend)
            if fresh is None:
                logger.info("stream: window ending %s already applied (checkpoint %d); "
                            "skipped", wend, algo.step)
                continue
            recomputed = used is None or int(used) != int(algo.step) or fresh is not batch
            delivered, batch = batch.doc_ids, fresh
            if recomputed:
                self.recomputed.inc()
                stats = algo.local_step(batch)
            if self.corpus_size != -1 and hasattr(algo, "corpus_size"):
                algo.corpus_size = self.corpus_size
            t0 = time.time()
            session = Session(position=int(algo.step),
                              output=Output(checkpoint_store=self.store, progress=False))
            try:
                info = session.step(algo, stats, " (window ending %s)" % wend)
            except TrainingError:
                # the window is refused and the job fails; this worker's copy may hold the
                # refused step, so the next attempt reloads the latest checkpoint
                self.algo = None
                raise
            if info.get("skipped"):
                continue
            record = next_record(self.record, wend, delivered, batch.doc_ids, self.files,
                                 read)
            stream = dict(window_end_micros=int(wend), docs=int(batch.n_docs),
                          estep_recomputed=bool(recomputed), estep_state_step=used,
                          rho=info.get("rho"), global_step_seconds=time.time() - t0, **record)
            # checkpoints are named by the algorithm's step
            # the run information (the nominal minibatch size) carries on from the checkpoint
            path = session.publish(algo, position=int(algo.step),
                                   info=dict({"stream": stream}, **({"run": self.run}
                                                                    if self.run else {})))
            self.record = record
            applied.write(int(algo.step))
            self.steps.inc()
            logger.info("stream: window ending %s: %d documents, step %d, rho=%.4g%s -> %s",
                        window.Timestamp(micros=wend).to_utc_datetime().isoformat(),
                        batch.n_docs, algo.step, float(info.get("rho", float("nan"))),
                        " (E-step recomputed)" if recomputed else "", path)
            yield {"step": int(algo.step), "checkpoint": path, "window_end_micros": int(wend),
                   "docs": int(batch.n_docs), "estep_recomputed": bool(recomputed)}
