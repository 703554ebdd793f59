"""Online training on an unbounded stream: Hoffman et al.'s "true online" setting on Beam.

Documents arrive as JSON (one object per Pub/Sub message, or one per line of files that keep
arriving in a directory) and become minibatches by *arrival time*: every fixed window of
``window_seconds`` is one minibatch. The graph::

    source (Pub/Sub | fileio.MatchContinuously + ReadMatches | a test's TestStream)
      | ParseDocuments            JSON -> (doc_id, word ids, counts) with the model's fixed
      |                           vocabulary; malformed / empty -> dead letters
      | WindowInto(FixedWindows(W), AfterWatermark(late=AfterCount(1)), allowed lateness L)
      | key 0, GroupByKey         one pane per window: the minibatch (on time) or late panes
      | SplitLate                 late panes -> dead letters (their window was already applied)
      | EStepLatest               local step against the latest *published* checkpoint
      |                           (LATEST pointer re-read per bundle; the state is loaded once
      |                           per process and version through ``Shared``) -- runs on any
      |                           worker, in parallel with everything else
      | re-window into the global window (state is per key *and* window)
      | ApplyGlobalStep           single key, stateful: buffers window results, and when the
                                  watermark passes a window's end applies the windows in
                                  order: if the E-step used the state this step starts from
                                  its statistics are used as they are, otherwise (it ran
                                  against an older checkpoint) the E-step is recomputed here
                                  against the current state; then the lda_core global step
                                  and one published checkpoint per window

Because the statistics of a window are always those of the state the step starts from (the
stale case is recomputed), the checkpoints equal those of the in-process trainer fed the same
minibatches (each window's documents in doc_id order) -- bit for bit. When windows are long
compared with the time a step takes (the usual streaming case: a minute of documents, a
second of work), the parallel E-step has read the newest checkpoint and nothing is recomputed;
the number of recomputed E-steps is a Beam counter (``ldabeam/stale_estep_recomputed``) and
recorded in each checkpoint's ``info["stream"]``.

D: with ``corpus_size`` None the online-VB step scales by the documents seen so far (the
stream setting, D grows without bound); a configured D keeps Hoffman's D/S scaling.

The topic state lives in the checkpoint store, not in Beam state: the stateful DoFn keeps the
algorithm object in memory (one per worker) and in Beam state only the step it has applied; a
restarted worker reloads that step's checkpoint. Checkpoints are published (atomically, see
:mod:`lda_core.storage.checkpoint`) before the Beam state is committed; each records what the stream
has applied (recent windows and doc ids, the bytes applied of each input file:
:func:`pipelines.streaming.stream_step.next_record`), and the step continues from the newest checkpoint
and skips what it records, and a restarted job reads each file after its recorded bytes --
so a retried bundle, a re-delivered window or a restarted job applies nothing twice.
"""
from __future__ import annotations

import json
import logging
import math
import time
from typing import Any, Dict, List, Optional, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger, window
from apache_beam.utils.windowed_value import PaneInfoTiming

from lda_core.algorithms.params import check_int
from lda_core.errors import InputError, UsageError
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.vocab_file import Vocabulary
from lda_core.training.run_params import MINIBATCH_KEY
from lda_core.training.session import is_sequential, Session
from lda_core.training.spec import Output
from pipelines.ingest import dataset
from pipelines.ingest.tokenize import TokenizerConfig
from pipelines.runtime import paths
from pipelines.runtime.model_dir import open_model
from pipelines.runtime.paths import join, write_atomic as write_bytes_atomic
from pipelines.streaming.stream_parse import dead_letter, parse_document, ParseConfig
from pipelines.streaming.stream_step import (applied_record, ApplyGlobalStepFn, EStepLatestFn,
                                             latest_step, ORDERS)
from pipelines.training.algorithm_options import build_algorithm

logger = logging.getLogger(__name__)

NS = "ldabeam"
DEAD = "deadletter"


# ----------------------------------------------------------------------------- parsing
class ParseDocumentsFn(beam.DoFn):
    """JSON -> Doc (main) and dead letters (tag ``deadletter``)."""

    def __init__(self, cfg: ParseConfig):
        self.cfg = cfg
        self.parsed = Metrics.counter(NS, "stream_documents")
        self.dead = Metrics.counter(NS, "stream_dead_letters")
        self.oov = Metrics.counter(NS, "stream_oov_tokens_dropped")

    def setup(self):
        vocab = Vocabulary.read(self.cfg.vocab_path)
        if len(vocab) != self.cfg.n_words:
            raise InputError("vocabulary %s has %d words, the model %d"
                             % (self.cfg.vocab_path, len(vocab), self.cfg.n_words))
        self.index = vocab.index
        self.tokenizer = self.cfg.tokenizer or TokenizerConfig(lowercase=self.cfg.lowercase,
                                         deaccent=self.cfg.deaccent,
                                         min_len=self.cfg.min_token_len,
                                         max_len=self.cfg.max_token_len)

    def process(self, raw):
        pos = ()
        if isinstance(raw, tuple):            # (line, file, byte offset of the line's end)
            raw, pos = raw[0], tuple(raw[1:])
        doc, dead, oov = parse_document(raw, self.index, self.cfg, self.tokenizer)
        if oov:
            self.oov.inc(oov)
        if dead is not None:
            self.dead.inc()
            yield beam.pvalue.TaggedOutput(DEAD, dead)
        else:
            self.parsed.inc()
            yield doc + pos


class SplitLateFn(beam.DoFn):
    """Panes of a window: the on-time pane is the window's minibatch; late panes (documents
    that arrived after the watermark passed their window, within the allowed lateness) are
    dead letters, since that window's step was already applied."""

    def __init__(self):
        self.late = Metrics.counter(NS, "stream_late_documents")
        self.windows = Metrics.counter(NS, "stream_windows")

    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        _, docs = kv
        docs = list(docs)
        if pane.timing == PaneInfoTiming.LATE:
            for d in docs:
                self.late.inc()
                yield beam.pvalue.TaggedOutput(DEAD, dead_letter(
                    "doc %s" % d[0], "late: arrived after its window [%s, %s) was applied"
                    % (w.start.to_utc_datetime().isoformat(), w.end.to_utc_datetime()
                       .isoformat())))
            return
        self.windows.inc()
        yield int(w.max_timestamp().micros), docs


# ----------------------------------------------------------------------------- transforms

class StreamTrain(beam.PTransform):
    """Raw JSON documents (timestamped, unbounded) -> published-step records (main) and dead
    letters (``result[DEAD]``); see the module docstring."""

    def __init__(self, model_dir: str, parse: ParseConfig, window_seconds: float,
                 allowed_lateness: float = 86400.0, keep_last: Optional[int] = None,
                 n_threads: Optional[int] = None, corpus_size: Optional[int] = -1,
                 order: str = "watermark", files: Optional[Dict[str, int]] = None):
        super().__init__()
        self.files = files
        if order not in ORDERS:
            raise UsageError("order=%r is not allowed; choose one of %s" % (order, ORDERS))
        self.order = order
        if not window_seconds > 0:
            raise UsageError("window_seconds=%r is outside the allowed range (0, inf)"
                             % (window_seconds,))
        if not allowed_lateness >= 0:
            raise UsageError("allowed_lateness=%r is outside the allowed range [0, inf)"
                             % (allowed_lateness,))
        self.model_dir, self.parse, self.window_seconds = model_dir, parse, window_seconds
        self.allowed_lateness, self.keep_last = allowed_lateness, keep_last
        self.n_threads, self.corpus_size = n_threads, corpus_size

    def expand(self, raw):
        parsed = raw | "Parse" >> beam.ParDo(ParseDocumentsFn(self.parse)).with_outputs(
            DEAD, main="docs")
        panes = (parsed.docs
                 | "Window" >> beam.WindowInto(
                     window.FixedWindows(self.window_seconds),
                     trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                     accumulation_mode=trigger.AccumulationMode.DISCARDING,
                     allowed_lateness=self.allowed_lateness)
                 | "Key" >> beam.Map(lambda d: (0, d))
                 | "Minibatch" >> beam.GroupByKey()
                 | "SplitLate" >> beam.ParDo(SplitLateFn()).with_outputs(DEAD, main="ontime"))
        steps = (panes.ontime
                 | "EStep" >> beam.ParDo(EStepLatestFn(self.model_dir, self.n_threads))
                 | "StampWindowEnd" >> beam.Map(
                     lambda kv: window.TimestampedValue(kv, kv[1][0] / 1e6))
                 | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
                 | "GlobalStep" >> beam.ParDo(ApplyGlobalStepFn(
                     self.model_dir, self.keep_last, self.n_threads, self.corpus_size,
                     self.order, self.files))
                 .with_input_types(Tuple[int, Any]))
        # the two dead-letter streams have different windowings; Flatten needs one
        dead = ((parsed[DEAD] | "DeadParsedGlobal" >> beam.WindowInto(window.GlobalWindows()),
                 panes[DEAD] | "DeadLateGlobal" >> beam.WindowInto(window.GlobalWindows()))
                | "DeadLetters" >> beam.Flatten())
        return {"steps": steps, DEAD: dead}


class ReadJsonFilesContinuously(beam.PTransform):
    """Files arriving under a glob -> ``(JSON line, file, byte offset of the line's end)``,
    timestamped by arrival (processing time of the match). ``fileio.MatchContinuously`` polls
    every ``interval`` seconds and emits each new file once.

    Its listing is per job: a new job (a restart) matches every file of the inbox again. With
    ``model_dir``, the input position recorded by that model's newest checkpoint
    (``info["stream"]["files"]``: file -> bytes applied, written by the global step from the
    positions its documents carry) is read when the pipeline is built, and each file is read
    from there: what a previous job applied is not read again, however many documents the
    inbox holds."""

    def __init__(self, pattern: str, interval: float = 10.0,
                 stop_after: Optional[float] = None, model_dir: Optional[str] = None):
        super().__init__()
        self.pattern, self.interval, self.stop_after = pattern, interval, stop_after
        self.applied: Dict[str, int] = {}
        if model_dir is not None:
            step = latest_step(model_dir)
            if step is not None:
                self.applied = {str(k): int(v) for k, v in
                                (applied_record(model_dir, step).get("files") or {}).items()}

    def expand(self, p):
        from apache_beam.io import fileio
        from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp
        start = Timestamp.now()
        stop = MAX_TIMESTAMP if self.stop_after is None else start + self.stop_after
        return (p
                | "Match" >> fileio.MatchContinuously(self.pattern, interval=self.interval,
                                                      start_timestamp=start,
                                                      stop_timestamp=stop)
                | "Open" >> fileio.ReadMatches()
                | "Lines" >> beam.FlatMap(_file_lines, self.applied))


def _file_lines(readable_file, applied: Optional[Dict[str, int]] = None):
    """``(line, file, byte offset after it)`` of the non-empty lines of ``readable_file``
    after the ``applied[file]`` bytes already applied."""
    path = readable_file.metadata.path
    pos = int((applied or {}).get(path, 0))
    with readable_file.open() as f:
        if pos:
            f.seek(pos)
        for line in f:
            pos += len(line)
            line = line.strip()
            if line:
                yield line, path, pos


def _dead_json(d) -> str:
    return json.dumps(d, sort_keys=True)


def write_dead_letters(dead, path: str):
    """Dead letters as JSON lines under ``path`` (one file per window and shard)."""
    from apache_beam.io import fileio
    return (dead
            | "DeadWindow" >> beam.WindowInto(window.FixedWindows(60))
            | "DeadJson" >> beam.Map(_dead_json)
            | "DeadWrite" >> fileio.WriteToFiles(path, shards=1,
                                                 file_naming=fileio.default_file_naming(
                                                     "deadletter", ".jsonl")))


def initial_checkpoint(model_dir: str, *, topics: Optional[int], vocab_path: Optional[str],
                       algorithm: str = "online-vb", minibatch: int = 256,
                       corpus_size: Optional[int] = None, seed: int = 0,
                       settings: Optional[Dict[str, Any]] = None,
                       keep_last: Optional[int] = None) -> Tuple[Any, str]:
    """The model to continue: MODEL_DIR's latest checkpoint, or a fresh one (K topics over the
    fixed vocabulary ``vocab_path``) published as step 0, recording the nominal ``minibatch``
    size in its run information (every window's checkpoint carries it on; the actual minibatch
    is each window's documents). Returns (algorithm, vocab path)."""
    store = CheckpointStore(model_dir, keep_last=keep_last, check_algorithm=True)
    model_vocab = paths.join(model_dir, dataset.VOCAB_FILE)
    if store.latest_checkpoint() is not None:
        m = open_model(model_dir)
        if topics is not None and topics != m.state.n_topics:
            raise UsageError("--topics %d differs from the model's K=%d" % (topics,
                                                                             m.state.n_topics))
        if m.vocab is None:
            raise FileNotFoundError("%s has checkpoints but no vocab.tsv" % model_dir)
        return m.algorithm(), model_vocab
    if topics is None or vocab_path is None:
        raise UsageError("%s holds no checkpoint: give --topics K and --vocab VOCAB_TSV to "
                         "start a fresh model (or train one with `ldabeam train`)" % model_dir)
    vocab = Vocabulary.read(vocab_path)
    algo = build_algorithm(algorithm, topics, len(vocab), settings=dict(settings or {}),
                           corpus_size=corpus_size, seed=seed, vocab_hash=vocab.hash)
    if is_sequential(algo):
        raise UsageError("algorithm %s is a stream-order sampler; the streaming job needs a "
                         "local/global-step algorithm (online-vb, scvb0, sparse-gibbs-vb)"
                         % algorithm)
    paths.make_dirs(model_dir)
    if not paths.exists(model_vocab):       # a local folder or an object store (atomic)
        with paths.open_read(vocab_path) as f:
            paths.write_atomic(model_vocab, f.read())
    Session(output=Output(checkpoint_store=store, progress=False)).publish(
        algo, position=0, info={"stream": dict(initial=True),
                                "run": {MINIBATCH_KEY: check_int("minibatch", minibatch, 1)}})
    return algo, model_vocab


# ----------------------------------------------------------------------------- local driver

def run_local_directory(pattern: str, model_dir: str, parse: ParseConfig, *,
                        window_seconds: float, poll_seconds: float,
                        stop_after: Optional[float], deadletter_dir: str,
                        keep_last: Optional[int] = None, n_threads: Optional[int] = None,
                        corpus_size: Optional[int] = -1, clock=time.time,
                        sleep=time.sleep) -> int:
    """``--input-glob`` on this machine: poll the directory every ``poll_seconds``; the new
    complete lines of a file arrive at the time they are first seen; as soon as a window of
    ``window_seconds`` has closed, its documents go through :class:`StreamTrain` in a
    bounded pipeline of its own on the FnApiRunner (one checkpoint per window, as on a
    streaming runner). Runs ``stop_after`` seconds (then the open window is applied too), or until
    interrupted. Returns the number of checkpoints published.

    Exactly once across restarts: each window's checkpoint records the input position after
    that window (``info["stream"]["files"]``: file -> bytes applied), published atomically
    with the state. A restarted driver reads the position of the newest checkpoint and
    continues after it: files applied are not read again, files that grew are read from their
    recorded offset, and a window never reuses the end of the last applied window. (A window
    with no valid document publishes no checkpoint; its lines are read again after a restart,
    as dead letters again.) A line is read once it ends with a newline, or once the file has
    not grown for a poll.

    Why not ``fileio.MatchContinuously`` here: the local runners cannot run it as a stream
    (the bundle-based DirectRunner cannot execute its splittable DoFn; the FnApiRunner reads
    only the files present at its first listings). On Dataflow / Flink the pipeline of
    :class:`ReadJsonFilesContinuously` is used instead."""
    offsets, next_w = _start_position(model_dir, window_seconds)
    sizes: Dict[str, int] = {}            # size at the previous poll (a stable partial line)
    # pending reads: (window index, arrival time, file, start offset, end offset, lines)
    pending: List[Tuple[int, float, str, int, int, List[str]]] = []
    published = 0
    t_stop = None if stop_after is None else clock() + float(stop_after)
    max_polls = 10 ** 12 if stop_after is None else int(stop_after / poll_seconds) + 2
    for _ in range(max_polls):
        now = clock()
        done = t_stop is not None and now >= t_stop
        for path, size in paths.match_sizes(pattern):
            start = offsets.get(path, 0)
            if size == start:             # nothing new: the file is not opened
                continue
            got = _read_new_lines(path, start, sizes, done)
            if got is None:
                continue
            end, lines = got
            offsets[path] = end
            w = max(int(math.floor(now / window_seconds)), next_w)
            pending.append((w, now, path, start, end, lines))
            logger.info("stream: %s: %d documents arrived", path, len(lines))
        closed, pending = _close_windows(pending, done, now, window_seconds)
        # one bounded pipeline per window, in window order (the FnApiRunner does not fire
        # the event-time timer of the last window of a bounded run, so the step is applied on
        # arrival -- which is window order here by construction)
        for w in sorted(closed):
            reads = closed[w]
            later = [x for v in sorted(closed) if v > w for x in closed[v]] + pending
            position = _position_after(later, offsets)
            t0 = w * window_seconds
            items = [(min(max(t, t0), t0 + window_seconds * 0.999), line)
                     for _, t, _, _, _, lines in reads for line in lines]
            if items:
                published += _run_bounded(items, model_dir, parse, window_seconds,
                                          deadletter_dir, keep_last, n_threads, corpus_size,
                                          position)
            next_w = max(next_w, w + 1)
        if done:
            break
        sleep(poll_seconds)
    return published


def _start_position(model_dir: str, window_seconds: float):
    """Where a (re)started driver continues: the input position recorded with the newest
    checkpoint (file -> bytes applied) and the first window index free after its window."""
    step = CheckpointStore(model_dir).pointer()
    record = applied_record(model_dir, step) if step is not None else {}
    offsets: Dict[str, int] = {str(k): int(v) for k, v in (record.get("files") or {}).items()}
    # the first window index free after the newest checkpoint's window
    last_end = record.get("window_end_micros")
    next_w = (0 if last_end is None
              else int(math.floor((int(last_end) + 1) / 1e6 / window_seconds - 1e-9)) + 1)
    return offsets, next_w


def _close_windows(pending: list, done: bool, now: float, window_seconds: float):
    """The pending reads of the windows closed at ``now`` (all of them when ``done``), by
    window index, and the reads still open; one pass, linear in the pending reads."""
    closed: Dict[int, list] = {}
    still: list = []
    for x in pending:                 # one pass: linear in the pending reads
        if done or (x[0] + 1) * window_seconds <= now:
            closed.setdefault(x[0], []).append(x)
        else:
            still.append(x)
    return closed, still


def _read_new_lines(path: str, offset: int, sizes: Dict[str, int],
                    take_partial: bool) -> Optional[Tuple[int, List[str]]]:
    """The non-empty lines of ``path`` after byte ``offset``: ``(new offset, lines)``, or None
    if there is nothing new. A last line without a newline is taken only when the file has not
    grown since the previous poll (or ``take_partial``)."""
    with paths.open_read(path) as f:
        if offset:
            f.seek(offset)
        data = f.read()
    size = offset + len(data)
    stable = sizes.get(path) == size
    sizes[path] = size
    if not data:
        return None
    cut = data.rfind(b"\n") + 1
    if cut < len(data) and (take_partial or stable):
        cut = len(data)
    if cut == 0:
        return None
    lines = [l.strip() for l in data[:cut].decode("utf-8", "replace").splitlines()]
    return offset + cut, [l for l in lines if l]


def _position_after(pending, offsets: Dict[str, int]) -> Dict[str, int]:
    """Bytes of each file applied once the windows before ``pending`` are: everything read
    so far except the reads still pending for a later window (a file's reads are in order,
    so its position is the start of its first pending read)."""
    pos = dict(offsets)
    for x in pending:
        pos[x[2]] = min(pos[x[2]], x[3])
    return pos


def _run_bounded(items, model_dir, parse, window_seconds, deadletter_dir, keep_last,
                 n_threads, corpus_size, files=None) -> int:
    import uuid
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    key = uuid.uuid4().hex
    _COLLECTED[key] = {"steps": [], DEAD: []}
    try:
        # in-process runner: the collecting function runs in this process
        from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
        opts = PipelineOptions([])
        # streaming semantics for the window/timer graph (event-time timers of the
        # stateful step fire as the watermark passes each window)
        opts.view_as(StandardOptions).streaming = True
        with beam.Pipeline(runner=FnApiRunner(), options=opts) as p:
            out = (p | "Arrivals" >> beam.Create([window.TimestampedValue(l, t)
                                                  for t, l in items])
                   | "Train" >> StreamTrain(model_dir, parse, window_seconds, 3600.0,
                                            keep_last=keep_last, n_threads=n_threads,
                                            corpus_size=corpus_size, order="arrival",
                                            files=files))
            out["steps"] | "CollectSteps" >> beam.Map(_collect, key, "steps")
            out[DEAD] | "CollectDead" >> beam.Map(_collect, key, DEAD)
        steps, dead = _COLLECTED[key]["steps"], _COLLECTED[key][DEAD]
    finally:
        _COLLECTED.pop(key, None)
    if dead:
        name = "deadletter-local-%s.jsonl" % time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        write_bytes_atomic(join(deadletter_dir, name),
                           "".join(_dead_json(d) + "\n" for d in dead).encode("utf-8"))
    return len(steps)


_COLLECTED: Dict[str, Dict[str, list]] = {}


def _collect(x, key: str, kind: str):
    _COLLECTED[key][kind].append(x)
