#!/usr/bin/env python3
"""Runs longer than one job: chained windows against one long-running loop, on one machine.

The word-sharded step (``pipelines/training/beam_sharded.py``) is the same in both, built here
from ``lda_core``'s word-block API only (``shard_header``, ``estep_view``, ``plan_step``,
``update_block``, ``finish_step``), with every version of the state in a
*channel* folder (files published whole: temporary name + rename)::

    E-step of piece k of step t     header t-1 + the rows of its words (from rows-(t-1)-b)
                                    -> its statistics cut by word block: (b, bytes)
    owner of block b                the pieces summed in piece order, the plan, its rows
                                    updated -> rows-t-b, partial-t-b (block 0: its
                                    statistics too, for the plan of the finish)
    finish of step t                partials in block order -> header-t (by whoever
                                    needs header t first: the next step's E-steps, the
                                    loop's source, the driver at the end)

(a) **chained windows**: N windows of M steps, each window a new pipeline (a Dataflow job)
    started from the channel the previous one left; a step is two stages: the E-steps (the
    previous step's owners' outputs as their side input) and, after a GroupByKey by block,
    the owners, which read their block from the channel.
(b) **a streaming loop**: ONE pipeline. A splittable DoFn is the unbounded source of
    minibatch tasks: it emits step t's tasks once the channel holds every partial of step
    t-1 (the feedback: Beam graphs are acyclic, so the statistics come back through the
    channel) and otherwise defers itself; each block's rows live in the state of a stateful
    DoFn keyed by block (``ReadModifyWriteStateSpec``; the pieces wait in a
    ``BagStateSpec`` until all P are there), which publishes its new rows and partial.

Both must end on the in-process trainer's bits (``algo.global_step(local_step_pieces(...))``
at the same (seed, S, P, B)); the results file says whether they did. Runner: Beam's
FnApiRunner (what ``--runner DirectRunner`` runs), in-process and with ``--workers`` local
worker processes (step times then from the partials' file times). The streaming DirectRunner
(``BundleBasedDirectRunner``, ``streaming=True``) cannot run any splittable source here --
``PeriodicImpulse``, ``fileio.MatchContinuously`` or this one -- (its transform overrides
fail: "... ProcessKeyedElements/GroupByKey/GroupByKey, _GroupByKeyOnly) was not replaced as
expected", apache/beam#21103); the FnApiRunner runs the loop in batch mode, re-queueing the
source's deferred remainder behind the stages that are ready (it does not wait for the
requested resume time, so the source sleeps ``--poll`` itself before deferring).

Printed: per-step seconds of each, the window start against a step, the loop's per-step
round trip against a chained step, and what ``benchmarks/cluster_model.py``'s job start
(240 s) and per-stage latency make of runs (a) and (b) of that model.

    PYTHONPATH=. LDABEAM_SHARED_DATA=/work/shared/data \\
        python benchmarks/streaming_loop_bench.py [--windows 4] [--window-steps 4]
        [--repeats 2] [--workers 2] [--topics 20] [--minibatch 128] [--pieces 2]
        [--blocks 4] [--poll 0.002] [--json OUT]
"""
from __future__ import annotations

import argparse
import io
import math
import os
import shutil
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import apache_beam as beam  # noqa: E402
from apache_beam.coders import BytesCoder, TupleCoder, VarIntCoder  # noqa: E402
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker  # noqa: E402
from apache_beam.transforms.core import RestrictionProvider  # noqa: E402
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec  # noqa: E402

from lda_core.algorithms.online_vb import OnlineVB  # noqa: E402
from lda_core.algorithms.vb_stats import VBStats  # noqa: E402
from lda_core.algorithms.word_blocks import BlockHeader, BlockPartial, rows_of_words  # noqa: E402
from lda_core.errors import DataIntegrityError  # noqa: E402
from lda_core.training.pieces import local_step_pieces, piece_bounds  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "streaming_loop_bench.json")
ALGO, STATS = OnlineVB, VBStats
# the settings the results file was measured with (re-seeding and the η step run in the same
# two rounds: the owners apply the splits, the partials carry the η sums)
SETTINGS = {"reseed": 0.0, "optimize_alpha": False, "optimize_eta": False}

# event times of the runs (the FnApiRunner in-process runs the DoFns in this process):
# (what, step) -> perf_counter seconds, the first occurrence kept
EVENTS: Dict[Tuple[str, int], float] = {}


def _event(what: str, t: int, last: bool = False) -> None:
    """Record when ``what`` of step t happened (its first time; ``last``: its latest)."""
    if last:
        EVENTS[(what, int(t))] = time.perf_counter()
    else:
        EVENTS.setdefault((what, int(t)), time.perf_counter())


POLLS: Dict[int, int] = {}     # step -> source invocations that found it not ready


# ------------------------------------------------------------------------- the channel

class Channel:
    """The folder holding every published version: header-t, rows-t-b, partial-t-b and
    block 0's statistics of step t (for the plan). A file is published whole (temporary
    name + rename), and a step's partial is its owner's last file: when every partial of
    step t is there, so is everything of step t."""

    def __init__(self, folder: str, n_blocks: int, n_pieces: int):
        self.folder, self.n_blocks, self.n_pieces = folder, int(n_blocks), int(n_pieces)

    def path(self, what: str, t: int, b: Optional[int] = None) -> str:
        name = "%s-%06d" % (what, t) + ("" if b is None else "-%04d" % b)
        return os.path.join(self.folder, name + (".npy" if what == "rows" else ".bin"))

    def publish(self, path: str, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def publish_rows(self, t: int, b: int, rows: np.ndarray) -> None:
        self.publish(self.path("rows", t, b), npy_bytes(rows))

    def rows(self, t: int, b: int, mmap: bool = False) -> np.ndarray:
        return np.load(self.path("rows", t, b), allow_pickle=False,
                       mmap_mode="r" if mmap else None)

    def publish_pieces(self, pieces) -> None:
        """The documents of piece k of step t (``pieces[t-1][k]``), one ``.npz`` each: what
        an E-step reads (the trainer's workers read theirs from the corpus shards)."""
        for t, mb in enumerate(pieces, 1):
            for k, piece in enumerate(mb):
                out = io.BytesIO()
                np.savez(out, indptr=piece.indptr, word_ids=piece.word_ids,
                         counts=piece.counts, doc_ids=np.array(piece.doc_ids, dtype=str))
                self.publish(self.path("docs", t, k), out.getvalue())

    def piece(self, t: int, k: int):
        from lda_core.docbatch import DocBatch
        with np.load(self.path("docs", t, k), allow_pickle=False) as z:
            return DocBatch(tuple(str(d) for d in z["doc_ids"]), z["indptr"], z["word_ids"],
                            z["counts"])

    def step_done(self, t: int) -> bool:
        """Every partial of step t is published (t = 0: the start version)."""
        if t == 0:
            return os.path.exists(self.path("header", 0))
        return all(os.path.exists(self.path("partial", t, b)) for b in range(self.n_blocks))

    def start(self, algo) -> None:
        """Version 0: the header and the blocks' rows of ``algo``."""
        os.makedirs(self.folder, exist_ok=True)
        for b in range(self.n_blocks):
            self.publish_rows(0, b, algo.block_rows(b))
        self.publish(self.path("header", 0), algo.shard_header().to_bytes())

    def header(self, t: int) -> bytes:
        """Header t, computed from header t-1 and step t's partials (and published) when
        not there yet; the same bytes whoever computes it."""
        path = self.path("header", t)
        if os.path.exists(path):
            return self.read(path)
        prev = BlockHeader.from_bytes(self.header(t - 1))
        stats0 = STATS.from_bytes(self.read(self.path("stats0", t)))
        plan = ALGO.plan_step(prev, stats0)
        parts = [BlockPartial.from_bytes(self.read(self.path("partial", t, b)))
                 for b in range(self.n_blocks)]
        header2, _ = ALGO.finish_step(prev, plan, parts)
        data = header2.to_bytes()
        self.publish(path, data)
        return data

    def final(self, t: int):
        """The algorithm at version t (header and every block's rows)."""
        return ALGO.from_shards(BlockHeader.from_bytes(self.header(t)),
                                [self.rows(t, b) for b in range(self.n_blocks)])


def npy_bytes(rows: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, np.ascontiguousarray(rows), allow_pickle=False)
    return out.getvalue()


def npy_rows(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


# ------------------------------------------------------------------- the step's pieces

def estep(ch: Channel, t: int, k: int, header_bytes: bytes):
    """E-step of piece k of step t (1-based) on version t-1: [(b, statistics bytes)]."""
    _event("estep", t)
    header = BlockHeader.from_bytes(header_bytes)
    piece = ch.piece(t, k)
    V, B = header.n_words, header.n_blocks
    ids = np.sort(rows_of_words(np.unique(piece.word_ids), V, B))
    cuts = np.searchsorted(ids, [header.bounds(b)[0] for b in range(B)] + [V])
    rows = np.concatenate([ch.rows(t - 1, b, mmap=True)[ids[cuts[b]:cuts[b + 1]]
                                                        - header.bounds(b)[0]]
                           for b in range(B)])
    view = ALGO.estep_view(header, ids, rows, n_threads=1)
    stats = view.local_step(piece)
    return [(b, sb.to_bytes()) for b, sb in enumerate(stats.split_by_block(B))]


def owner_step(ch: Channel, t: int, b: int, header_bytes: bytes, rows: np.ndarray,
               pieces: Sequence[Tuple[int, bytes]]) -> None:
    """Block b's owner at step t: the pieces (k, bytes) summed in piece order, its rows
    updated in place and published with its partial (the partial last)."""
    if sorted(k for k, _ in pieces) != list(range(ch.n_pieces)):
        raise DataIntegrityError("step %d block %d: pieces %s arrived, expected 0..%d"
                                 % (t, b, sorted(k for k, _ in pieces), ch.n_pieces - 1))
    total = None
    for _, data in sorted(pieces, key=lambda p: p[0]):
        st = STATS.from_bytes(data)
        total = st if total is None else total.merge(st)
    header = BlockHeader.from_bytes(header_bytes)
    plan = ALGO.plan_step(header, total)
    part = ALGO.update_block(header, plan, b, rows, total)
    ch.publish_rows(t, b, rows)
    if b == 0:
        ch.publish(ch.path("stats0", t), total.to_bytes())
    ch.publish(ch.path("partial", t, b), part.to_bytes())
    _event("owner", t)
    _event("owner_done", t, last=True)


# ------------------------------------------------------------------ (a) chained windows

class _EStepFn(beam.DoFn):
    def __init__(self, ch: Channel, t: int, n_before: int):
        self.ch, self.t, self.n_before = ch, t, n_before

    def process(self, k, before):
        # ``before``: the previous step's owners (side input: this step waits for them)
        if len(before) != self.n_before:
            raise DataIntegrityError("step %d started before step %d's owners finished"
                                     % (self.t, self.t - 1))
        return [(b, (k, data)) for b, data in
                estep(self.ch, self.t, k, self.ch.header(self.t - 1))]


class _BlockOwnerFn(beam.DoFn):
    def __init__(self, ch: Channel, t: int):
        self.ch, self.t = ch, t

    def process(self, element):
        b, pieces = element
        rows = self.ch.rows(self.t - 1, b)
        owner_step(self.ch, self.t, b, self.ch.header(self.t - 1), rows, list(pieces))
        yield b


def chained_window(ch: Channel, first: int, last: int, workers: int = 0) -> None:
    """Steps first..last as one pipeline, two stages per step."""
    P = ch.n_pieces
    with _pipeline(workers) as p:
        tasks = (p | "tasks" >> beam.Create([(t, k) for t in range(first, last + 1)
                                             for k in range(P)])
                 | "by step" >> beam.Partition(lambda tk, n: tk[0] - first, last - first + 1))
        after = p | "start" >> beam.Create([first - 1])
        for i, t in enumerate(range(first, last + 1)):
            n_before = 1 if t == first else ch.n_blocks
            after = (tasks[i] | "piece %d" % t >> beam.Map(lambda tk: tk[1])
                     | "E-step %d" % t >> beam.ParDo(_EStepFn(ch, t, n_before),
                                                    beam.pvalue.AsList(after))
                     | "group %d" % t >> beam.GroupByKey()
                     | "owner %d" % t >> beam.ParDo(_BlockOwnerFn(ch, t)))


# ---------------------------------------------------------------- (b) the streaming loop

class _Steps(RestrictionProvider):
    """The loop's steps (first, last) (its one element) as an offset range, one per step."""

    def initial_restriction(self, element):
        first, last = element
        return OffsetRange(first, last + 1)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class StepSourceFn(beam.DoFn):
    """The unbounded source of minibatch tasks: step t's (t, k, header t-1) once the
    channel holds every partial of step t-1; otherwise it sleeps ``poll`` seconds and
    defers its remainder (a runner with real streaming resumes it after the delay)."""

    def __init__(self, ch: Channel, first: int, last: int, poll: float):
        self.ch, self.first, self.last, self.poll = ch, first, last, poll

    def process(self, element, tracker=beam.DoFn.RestrictionParam(_Steps())):
        t = tracker.current_restriction().start
        if not self.ch.step_done(t - 1):
            POLLS[t] = POLLS.get(t, 0) + 1
            time.sleep(self.poll)
            tracker.defer_remainder()
            return
        if not tracker.try_claim(t):
            return
        _event("claim", t)
        header = self.ch.header(t - 1)
        for k in range(self.ch.n_pieces):
            yield t, k, header
        if t < self.last:
            tracker.defer_remainder()     # ends the bundle: step t's tasks flow now


class _LoopEStepFn(beam.DoFn):
    def __init__(self, ch: Channel):
        self.ch = ch

    def process(self, task):
        t, k, header = task
        for b, data in estep(self.ch, t, k, header):
            yield b, (t, k, header, data)


class BlockStateFn(beam.DoFn):
    """Owner of block b: its rows in keyed state, the pieces of the current step in a bag;
    when all P pieces of step t are there the step is applied and published."""

    ROWS = ReadModifyWriteStateSpec("rows", BytesCoder())
    PIECES = BagStateSpec("pieces", TupleCoder([VarIntCoder(), VarIntCoder(), BytesCoder(),
                                                BytesCoder()]))

    def __init__(self, ch: Channel):
        self.ch = ch

    def process(self, element, rows_state=beam.DoFn.StateParam(ROWS),
                bag=beam.DoFn.StateParam(PIECES)):
        b, (t, k, header, data) = element
        bag.add((t, k, header, data))
        waiting = list(bag.read())
        if len(waiting) < self.ch.n_pieces:
            return
        if any(w[0] != t for w in waiting):
            raise DataIntegrityError("block %d holds pieces of steps %s at once"
                                     % (b, sorted({w[0] for w in waiting})))
        held = rows_state.read()
        rows = self.ch.rows(t - 1, b) if held is None else npy_rows(held)
        owner_step(self.ch, t, b, header, rows, [(w[1], w[3]) for w in waiting])
        rows_state.write(npy_bytes(rows))
        bag.clear()
        yield t, b


def streaming_loop(ch: Channel, first: int, last: int, poll: float = 0.002,
                   workers: int = 0) -> None:
    """Steps first..last as ONE pipeline (the loop)."""
    with _pipeline(workers) as p:
        _ = (p | beam.Create([(first, last)])
             | "tasks" >> beam.ParDo(StepSourceFn(ch, first, last, poll))
             | "E-step" >> beam.ParDo(_LoopEStepFn(ch)).with_output_types(
                 Tuple[int, Tuple[int, int, bytes, bytes]])
             | "block owners" >> beam.ParDo(BlockStateFn(ch)))


# ------------------------------------------------------------------------- the runs

def split_pieces(minibatches, n_pieces: int):
    return [[mb.take(np.arange(lo, hi)) for lo, hi in piece_bounds(mb.n_docs, n_pieces)]
            for mb in minibatches]


def new_algo(K: int, V: int, B: int, seed: int = 3):
    return ALGO(K, V, word_blocks=B, seed=seed, n_threads=1, **SETTINGS)


def inprocess(K, V, B, P, minibatches):
    algo = new_algo(K, V, B)
    for mb in minibatches:
        algo.global_step(local_step_pieces(algo, mb, P))
    return algo


def same_state(a, b) -> bool:
    sa, sb = a.to_state(), b.to_state()
    return (np.array_equal(a.topic_word(), b.topic_word()) and sa.step == sb.step
            and sa.docs_seen == sb.docs_seen and sorted(sa.arrays) == sorted(sb.arrays)
            and all(np.array_equal(sa.arrays[k], sb.arrays[k]) for k in sa.arrays))


def _pipeline(workers: int):
    """A pipeline on the FnApiRunner: in-process (``workers`` 0) or with that many local
    worker processes (the DirectRunner's multi_processing mode)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    argv = (["--direct_running_mode=multi_processing", "--direct_num_workers=%d" % workers]
            if workers else [])
    return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(argv))


def run_chained(folder, K, V, B, P, minibatches, window_steps, workers=0):
    """(final algorithm, per-window records) of the chained windows."""
    ch = Channel(folder, B, P)
    ch.start(new_algo(K, V, B))
    ch.publish_pieces(split_pieces(minibatches, P))
    windows = []
    n = len(minibatches)
    for first in range(1, n + 1, window_steps):
        last = min(n, first + window_steps - 1)
        EVENTS.clear()
        t0, w0 = time.perf_counter(), time.time()
        chained_window(ch, first, last, workers)
        t1, w1 = time.perf_counter(), time.time()
        windows.append(_file_timing(ch, w0, w1, first, last) if workers
                       else _timing(t0, t1, first, last))
    return ch.final(n), windows


def run_loop(folder, K, V, B, P, minibatches, poll=0.002, workers=0):
    ch = Channel(folder, B, P)
    ch.start(new_algo(K, V, B))
    ch.publish_pieces(split_pieces(minibatches, P))
    n = len(minibatches)
    EVENTS.clear()
    POLLS.clear()
    t0, w0 = time.perf_counter(), time.time()
    streaming_loop(ch, 1, n, poll, workers)
    t1, w1 = time.perf_counter(), time.time()
    if workers:
        return ch.final(n), _file_timing(ch, w0, w1, 1, n)
    rec = _timing(t0, t1, 1, n)
    claims = [EVENTS[("claim", t)] for t in range(1, n + 1)]
    rec["round_trip_s"] = float(np.median(np.diff(claims))) if n > 1 else None
    rec["polls_not_ready"] = sum(POLLS.values())
    return ch.final(n), rec


def _timing(t0, t1, first, last) -> dict:
    """A pipeline's start (run -> first E-step), per step (first E-step -> last owner, over
    the steps), finish (last owner -> run returned) and the intervals between consecutive
    steps' last owners (the steady per-step time, without a pipeline's first-step setup)."""
    e = EVENTS[("estep", first)]
    o = EVENTS[("owner_done", last)]
    steps = last - first + 1
    done = [EVENTS[("owner_done", t)] for t in range(first, last + 1)]
    return {"steps": steps, "wall_s": t1 - t0, "start_s": e - t0,
            "per_step_s": (o - e) / steps, "finish_s": t1 - o,
            "step_intervals_s": [float(x) for x in np.diff(done)]}


def _file_timing(ch: Channel, w0, w1, first, last) -> dict:
    """With worker processes (whose events this process does not see): the intervals
    between the steps' last published partials (file times), and start + finish as the
    wall time less the steps at the median interval."""
    done = [max(os.stat(ch.path("partial", t, b)).st_mtime for b in range(ch.n_blocks))
            for t in range(first, last + 1)]
    steps = last - first + 1
    iv = [float(x) for x in np.diff(done)]
    step = float(np.median(iv)) if iv else w1 - w0
    return {"steps": steps, "wall_s": w1 - w0, "per_step_s": step,
            "start_s": (w1 - w0) - steps * step, "finish_s": 0.0, "step_intervals_s": iv}


# ------------------------------------------------------------------------- the model

def model_rows() -> List[dict]:
    """Runs (a) and (b) of benchmarks/cluster_model.py at its S = 4,096, with its job start
    (``CLOUD["job_start_s"]``) and per-stage latencies: the jobs each option needs and what
    it pays beyond the steps' work. Chained: jobs x job start + steps x 2 stages x latency
    (the fused word-block step); loop: one job start + steps x 2 hops x latency (to the
    owners, back through the channel), the same latency per hop taken as per stage (an
    assumption: no streaming runner was measured). ``break_even_s``: the extra latency per
    step of the loop (its feedback channel) at which its saved job starts are used up."""
    from benchmarks import cluster_model as cm
    from pipelines.training.beam_train import REMOTE_WINDOW_STEPS
    S = 4096
    start = cm.CLOUD["job_start_s"]
    out = []
    for run in (cm.RUN_A, cm.RUN_B):
        steps = math.ceil(run["D"] / S)
        jobs = math.ceil(steps / REMOTE_WINDOW_STEPS)
        for L in cm.STAGE_LATENCIES_S:
            chained = jobs * start + steps * 2 * L
            loop = start + steps * 2 * L
            out.append({"run": run["name"], "S": S, "steps": steps,
                        "steps_per_job": REMOTE_WINDOW_STEPS, "chained_jobs": jobs,
                        "job_start_s": start, "stage_latency_s": L,
                        "chained_overhead_s": chained, "loop_overhead_s": loop,
                        "job_starts_share_chained": jobs * start / chained,
                        "loop_saves_s": chained - loop,
                        "break_even_s": (jobs - 1) * start / steps})
    return out


def load_kos(n_docs: int):
    """(DocBatch of the first ``n_docs`` documents of KOS, V) from the shared data
    (``LDABEAM_SHARED_DATA``, else ../shared/data beside the repository), read by the
    project's UCI reader; a dead letter is an error here (the corpus is a fixed input)."""
    from lda_core.docbatch import DocBatch
    from pipelines.ingest.bow_sources import iter_bow_documents, read_bow_vocab
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    data = os.environ.get("LDABEAM_SHARED_DATA",
                          os.path.join(os.path.dirname(here), "shared", "data"))
    path = os.path.join(data, "uci-bow-kos", "docword.kos.txt.gz")
    V = len(read_bow_vocab(path, "uci", None))
    rows, ids = [], []
    for item in iter_bow_documents(path, "uci", V):
        if not isinstance(item, tuple):
            raise DataIntegrityError("%s: %s" % (path, item))
        ids.append("kos%s" % item[0])
        rows.append((item[1], item[2]))
        if len(rows) == n_docs:
            break
    return DocBatch.from_rows(rows, doc_ids=ids), V


def measure(a, K, V, B, P, mbs, ref, inproc_step, workers, repeats) -> dict:
    """Both options ``repeats`` times (alternating which goes first), on the FnApiRunner
    in-process (``workers`` 0) or with worker processes; their times, bits and ratios."""
    print("-- FnApiRunner %s" % ("with %d worker processes" % workers if workers
                                 else "in-process"))
    runs = []
    for r in range(repeats):
        for kind in (("chained", "loop") if r % 2 == 0 else ("loop", "chained")):
            folder = tempfile.mkdtemp(prefix="ldabeam-loop-bench-")
            try:
                if kind == "chained":
                    algo, windows = run_chained(folder, K, V, B, P, mbs, a.window_steps, workers)
                    rec = {"kind": kind, "repeat": r, "windows": windows,
                           "start_s": float(np.mean([w["start_s"] + w["finish_s"]
                                                     for w in windows])),
                           "per_step_s": float(np.mean([w["per_step_s"] for w in windows])),
                           "wall_s": float(sum(w["wall_s"] for w in windows))}
                else:
                    algo, rec = run_loop(folder, K, V, B, P, mbs, a.poll, workers)
                    rec = dict(rec, kind=kind, repeat=r,
                               start_s=rec["start_s"] + rec["finish_s"])
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            rec["bit_identical_to_inprocess"] = same_state(algo, ref)
            runs.append(rec)
            print("%-7s repeat %d: wall %.2f s, start+finish %.3f s, per step %.3f s%s, "
                  "bit-identical: %s" % (kind, r, rec["wall_s"], rec["start_s"],
                                         rec["per_step_s"],
                                         (", round trip %.3f s" % rec["round_trip_s"])
                                         if rec.get("round_trip_s") else "",
                                         rec["bit_identical_to_inprocess"]))
    best = {k: min((x for x in runs if x["kind"] == k), key=lambda x: x["wall_s"])
            for k in ("chained", "loop")}
    steady = {"chained": float(np.median([d for x in runs if x["kind"] == "chained"
                                          for w in x["windows"] for d in w["step_intervals_s"]])),
              "loop": float(np.median([d for x in runs if x["kind"] == "loop"
                                       for d in x["step_intervals_s"]]))}
    ratios = {"loop_step_over_chained_step": best["loop"]["per_step_s"]
              / best["chained"]["per_step_s"],
              "loop_steady_step_over_chained_steady_step": steady["loop"] / steady["chained"],
              "window_start_over_chained_step": best["chained"]["start_s"]
              / best["chained"]["per_step_s"],
              "loop_start_over_window_start": best["loop"]["start_s"]
              / best["chained"]["start_s"],
              "chained_step_over_inprocess_step": best["chained"]["per_step_s"] / inproc_step,
              "loop_step_over_inprocess_step": best["loop"]["per_step_s"] / inproc_step}
    print("in-process trainer %.4f s per step; steady step (median interval): chained %.4f s, "
          "loop %.4f s" % (inproc_step, steady["chained"], steady["loop"]))
    for k, v in ratios.items():
        print("%-42s %.2f" % (k, v))
    return {"workers": workers, "runs": runs, "best": best, "steady_step_s": steady,
            "ratios": ratios}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--minibatch", type=int, default=128)
    ap.add_argument("--pieces", type=int, default=2)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--window-steps", type=int, default=4)
    ap.add_argument("--poll", type=float, default=0.002)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2,
                    help="also measure with this many local worker processes (0: not)")
    ap.add_argument("--json", default=RESULTS)
    a = ap.parse_args(argv)
    n = a.windows * a.window_steps
    batch, V = load_kos(a.minibatch * n)
    mbs = [batch.take(np.arange(i, i + a.minibatch)) for i in range(0, batch.n_docs,
                                                                   a.minibatch)]
    K, B, P = a.topics, a.blocks, a.pieces
    ref = inprocess(K, V, B, P, mbs)              # the kernels' first compile
    inproc_step = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        ref = inprocess(K, V, B, P, mbs)
        inproc_step = min(inproc_step, (time.perf_counter() - t0) / n)
    results = {"in_process": measure(a, K, V, B, P, mbs, ref, inproc_step, 0, a.repeats)}
    if a.workers:
        results["worker_processes"] = measure(a, K, V, B, P, mbs, ref, inproc_step,
                                              a.workers, 1)
    model = model_rows()
    for m in model:
        print("%s: %d steps, %d chained job(s) of <= %d steps, %.1f s/stage: chained %.0f s "
              "(job starts %.0f%%), loop %.0f s (saves %.0f s; break-even at %.3f s of "
              "feedback per step)"
              % (m["run"], m["steps"], m["chained_jobs"], m["steps_per_job"],
                 m["stage_latency_s"], m["chained_overhead_s"],
                 100 * m["job_starts_share_chained"], m["loop_overhead_s"], m["loop_saves_s"],
                 m["break_even_s"]))
    from benchmarks.common import save_results
    save_results({"problem": {"corpus": "KOS (first %d documents)" % batch.n_docs,
                              "K": K, "V": V, "S": a.minibatch, "pieces": P, "blocks": B,
                              "steps": n, "window_steps": a.window_steps,
                              "algorithm": ALGO.name, "settings": SETTINGS,
                              "runner": "FnApiRunner (the DirectRunner's engine)",
                              "poll_s": a.poll},
                  "inprocess_step_s": inproc_step, "model": model, **results}, a.json)


if __name__ == "__main__":
    # run from the imported module, so that Beam pickles the DoFns by reference and their
    # events land in this module's EVENTS (a script's own classes are pickled by value)
    from benchmarks import streaming_loop_bench
    streaming_loop_bench.main()
