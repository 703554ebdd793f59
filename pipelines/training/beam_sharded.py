"""The word-sharded exchange: a step in which no worker holds the whole state.

The state of a word-sharded algorithm (``word_sharded`` on its class: online VB, SCVB0) is
cut into B word blocks (:mod:`lda_core.algorithms.word_blocks`; B is the algorithm's
``word_blocks`` setting, recorded in its checkpoints) plus a small *header* (the K-vectors
and scalars: column sums, α, η, the lazy scale, the step counters). Inside a window every
state version lives in the run's scratch folder as one header file and B block files
(``.npy``, data only), and a step is two stages::

    read tasks of minibatch t
      | ParDo(ShardedEStepFn, side = version t-1)   the header of version t-1 (from the
      |                                          owners' partials of step t-1: every task
      |                                          adds them the same way, and piece 0
      |                                          publishes it) + only the rows of the
      |                                          piece's words (range reads of the block
      |                                          files); the piece's statistics cut by
      |                                          word block: (block b, (piece, bytes)) for
      |                                          every b
      | GroupByKey                               block b's pieces reach b's owner
      | ParDo(BlockStepFn)                       the pieces summed in piece order; the plan
                                                 of the step (from the statistics' small
                                                 part, re-seeding included: every owner
                                                 computes the same); the owner's rows
                                                 updated, re-seeded and written as version
                                                 t (temporary name + rename: a retry writes
                                                 the same bytes); its K-vector partial
                                                 -> "version t" for step t+1

After a window's last step one more task (``FinishWindowFn``) adds the last partials. Every
sum is the one the in-process trainer makes at the same B (pieces in piece order, partials
in block order), so the final state is bit for bit the in-process one at the same
(seed, S, P, B), whatever the number of workers, their bundling or a retry. What a worker
moves per step: the partials of the previous step (O(B K)) and its pieces' rows in, its
pieces' statistics out; an owner receives its block's statistics and reads and writes its
block. Bytes are counted by :mod:`lda_core.storage.traffic`. The window's first version is
written by the driver from the checkpoint it starts from, and the driver assembles the last
one (``from_shards``) to publish the window's checkpoint.
"""
from __future__ import annotations

import io
import logging
import os
import threading
import time
from typing import Any, Dict, NamedTuple, Optional, Sequence

import apache_beam as beam
import numpy as np

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.algorithms.word_blocks import (BlockHeader, BlockPartial, block_bounds,
                                             rows_of_words)
from lda_core.errors import DataIntegrityError, StepRefused
from lda_core.storage import traffic
from lda_core.training import session as _session
from pipelines.runtime import object_store_files, scratch as scratch_space
from pipelines.training import beam_cost
from pipelines.training.beam_plan import StepPlan, read_task
from pipelines.training.beam_stats import decode_stats, encode_stats
from pipelines.training.beam_steps import (LeanDoFn, StepMetrics, collect_infos,
                                           store_step_info)

logger = logging.getLogger(__name__)


class ShardRef(NamedTuple):
    """A word-sharded state version as it travels through the graph (a few dozen bytes)."""
    key: str           # "<run id>/<position>"
    folder: str        # the run's scratch folder
    position: int      # minibatches consumed


class BlockOut(NamedTuple):
    """What a block's owner hands on after step ``ref.position + 1``: its partial (bytes;
    None when the step was refused), the step's plan (block 0's owner only: every owner
    computed the same), the refusal or None, the version the step started from, and for
    the step's log the minibatch's documents and the owner's seconds."""
    block: int
    partial: Optional[bytes]
    plan: Any
    error: Optional[str]
    ref: ShardRef
    n_docs: int
    seconds: float


def header_path(folder: str, position: int) -> str:
    return os.path.join(folder, "header-%09d.bin" % position)


def rows_path(folder: str, position: int, block: int) -> str:
    return os.path.join(folder, "rows-%09d-%04d.npy" % (position, block))


# ------------------------------------------------------------------------------ files

def _read(path: str, what: str) -> bytes:
    data = scratch_space.read_bytes(path)
    traffic.record_in(len(data), what)
    return data


def _write(path: str, data, what: str) -> None:
    """Publish ``data`` (bytes, or a list of buffers) whole at ``path`` (temporary name +
    rename locally; one upload on an object store), counted as bytes out."""
    scratch_space.write_bytes(path, data)
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    traffic.record_out(sum(memoryview(p).nbytes for p in parts), what)


def write_rows(path: str, rows: np.ndarray) -> None:
    """A block's rows as an ``.npy`` file, written from the array's own memory."""
    rows = np.ascontiguousarray(rows)
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(rows))
    _write(path, [head.getvalue(), memoryview(rows.reshape(-1).view(np.uint8))], traffic.STATE)


def _npy_layout(f, path: str):
    """(shape, dtype, data offset) of the ``.npy`` file open as ``f``; data arrays only."""
    try:
        version = np.lib.format.read_magic(f)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(f)
    except (ValueError, OSError) as e:
        raise DataIntegrityError("%s: not a block file (%s); the run's scratch folder was "
                                 "damaged: resume the run" % (path, e)) from None
    if fortran or dtype.hasobject or len(shape) != 2:
        raise DataIntegrityError("%s: not a block file of rows" % path)
    return shape, dtype, f.tell()


def read_block(path: str) -> np.ndarray:
    """A whole block file (its owner's rows) read straight into a new writable array,
    counted as bytes in."""
    with object_store_files.files_for(path).open_read(path) as f:
        shape, dtype, offset = _npy_layout(f, path)
        out = np.empty(shape, dtype)
        view = memoryview(out.reshape(-1).view(np.uint8))
        done = 0
        while done < len(view):
            got = f.readinto(view[done:])
            if not got:
                raise DataIntegrityError("%s: truncated block file" % path)
            done += got
    traffic.record_in(offset + out.nbytes, traffic.STATE)
    return out


def read_rows(path: str, local_ids: np.ndarray) -> np.ndarray:
    """Rows ``local_ids`` (sorted, unique, relative to the block's first word) of a block
    file: one ranged read per run of consecutive rows, and only those bytes counted."""
    with object_store_files.files_for(path).open_read(path) as f:
        shape, dtype, offset = _npy_layout(f, path)
        n, k = shape
        row_bytes = k * dtype.itemsize
        out = np.empty((len(local_ids), k), dtype)
        if len(local_ids) == 0:
            return out
        if local_ids[0] < 0 or local_ids[-1] >= n:
            raise DataIntegrityError("%s holds %d rows; row %d was asked for"
                                     % (path, n, int(local_ids[-1])))
        breaks = np.nonzero(np.diff(local_ids) != 1)[0] + 1
        starts = np.concatenate([[0], breaks])
        ends = np.concatenate([breaks, [len(local_ids)]])
        view = out.reshape(-1).view(np.uint8)
        for s, e in zip(starts.tolist(), ends.tolist()):
            f.seek(offset + int(local_ids[s]) * row_bytes)
            want = (e - s) * row_bytes
            got = f.readinto(memoryview(view)[s * row_bytes:e * row_bytes]) \
                if hasattr(f, "readinto") else None
            if got is None:
                chunk = f.read(want)
                got = len(chunk)
                view[s * row_bytes:s * row_bytes + got] = np.frombuffer(chunk, np.uint8)
            if got != want:
                raise DataIntegrityError("%s: truncated block file" % path)
        traffic.record_in(len(local_ids) * row_bytes, traffic.STATE)
        return out


# ------------------------------------------------------------------------------ versions

_LOCK = threading.Lock()
_HEADERS: Dict[str, Any] = {}      # version key -> (header, step info or None); a few per process


def _decode_header(data: bytes):
    try:
        return BlockHeader.from_bytes(data)
    except ValueError as e:
        raise DataIntegrityError("a word-block header in the run's scratch folder is damaged "
                                 "(%s): resume the run" % e) from None


def _cached(key: str):
    with _LOCK:
        return _HEADERS.get(key)


def _cache(key: str, value) -> None:
    with _LOCK:
        if len(_HEADERS) > 8:
            _HEADERS.clear()
        _HEADERS[key] = value


def load_header(ref: ShardRef):
    """The header of version ``ref`` from its file (decoded once per process)."""
    got = _cached(ref.key)
    if got is None:
        got = (_decode_header(_read(header_path(ref.folder, ref.position), traffic.SCALARS)),
               None)
        _cache(ref.key, got)
    return got[0]


def write_start(algorithm, folder: str, run_key: str, position: int) -> ShardRef:
    """The window's first version, written by the driver from ``algorithm``."""
    header = algorithm.shard_header()
    _write(header_path(folder, position), header.to_bytes(), traffic.SCALARS)
    for b in range(header.n_blocks):
        write_rows(rows_path(folder, position, b), algorithm.block_rows(b))
    return version_ref(run_key, folder, position)


def version_ref(run_key: str, folder: str, position: int) -> ShardRef:
    """The reference of the version after ``position`` minibatches of run ``run_key``."""
    return ShardRef("%s/%d" % (run_key, position), folder, position)


def load_state(ref: ShardRef):
    """The whole algorithm of version ``ref`` (the driver, after a window)."""
    header = load_header(ref)
    cls = algorithm_class(header.algorithm)
    rows = [read_block(rows_path(ref.folder, ref.position, b))
            for b in range(header.n_blocks)]
    return cls.from_shards(header, rows)


def _run_of(key: str) -> str:
    """The run key of a version key ("<run id>/<position>")."""
    return key.rsplit("/", 1)[0]


def _in_block_order(outs, n_blocks: int, position: int):
    outs = sorted(outs, key=lambda o: o.block)
    if [o.block for o in outs] != list(range(n_blocks)):
        raise DataIntegrityError("step %d: partials of blocks %s arrived, expected 0..%d"
                                 % (position + 1, [o.block for o in outs], n_blocks - 1))
    return outs


class Version(NamedTuple):
    ref: ShardRef
    header: Any
    info: Optional[Dict[str, Any]]    # the log of the step that made it (None: the start)


def resolve_version(side: Sequence[Any]) -> Optional[Version]:
    """The state version a step starts from, given its side input: the window's start
    ``[ShardRef]``, or the owners' :class:`BlockOut` of the previous step, whose partials are
    added here in block order into that step's header (the same bits in every task; cached
    per process). None when the previous step produced nothing (an earlier step failed);
    StepRefused when that step was refused (by a block, or by its log's checks)."""
    side = list(side)
    if not side:
        return None
    if len(side) == 1 and isinstance(side[0], ShardRef):
        return Version(side[0], load_header(side[0]), None)
    prev = side[0].ref
    ref = version_ref(_run_of(prev.key), prev.folder, prev.position + 1)
    got = _cached(ref.key)
    if got is not None:
        return Version(ref, got[0], got[1])
    header = load_header(prev)
    outs = _in_block_order(side, header.n_blocks, prev.position)
    refused = [o.error for o in outs if o.error]
    if refused:
        raise StepRefused(refused[0])
    for o in outs:
        traffic.record_in(len(o.partial), traffic.SCALARS)
    t0 = time.perf_counter()
    cls = algorithm_class(header.algorithm)
    header2, info = cls.finish_step(header, outs[0].plan,
                                    [BlockPartial.from_bytes(o.partial) for o in outs])
    info = dict(info)
    info["global_step_seconds"] = max(o.seconds for o in outs) + time.perf_counter() - t0
    info["docs_in_minibatch"] = outs[0].n_docs
    info["docs_seen"] = int(header2.counters.get("docs_seen", 0))
    info["position"] = ref.position
    err = _session.check_info(info)
    if err:
        raise StepRefused(err)
    _cache(ref.key, (header2, info))
    return Version(ref, header2, info)


def publish_version(v: Version) -> None:
    """Write version ``v``'s header and its step's log for the owners of the next step and
    the driver (the same bytes from any task that does it: a retry rewrites them), and
    remove the files of the version two steps back, which no step reads any more (every
    reader of version t-2 finished before step t's owners started)."""
    _write(header_path(v.ref.folder, v.ref.position), v.header.to_bytes(), traffic.SCALARS)
    store_step_info(v.ref.folder, v.ref.key, v.info)
    _remove_version(v.ref.folder, v.ref.position - 2, v.header.n_blocks)


def _refused_step(side: Sequence[Any], error: str) -> None:
    """Record the refusal of the step the side input ``side`` ended."""
    prev = side[0].ref
    ref = version_ref(_run_of(prev.key), prev.folder, prev.position + 1)
    store_step_info(ref.folder, ref.key, {"error": error, "position": ref.position})
    logger.error("global step at position %d refused: %s", prev.position, error)


def _remove_version(folder: str, position: int, n_blocks: int) -> None:
    """Files of a version no step reads any more."""
    if position < 0:
        return
    scratch_space.remove_file(header_path(folder, position))
    for b in range(n_blocks):
        scratch_space.remove_file(rows_path(folder, position, b))


# ------------------------------------------------------------------------------ DoFns

class ShardedEStepFn(LeanDoFn):
    """The E-step of one piece with only its words' rows of the version the side input
    names; its statistics cut by word block, ``(block, (piece, encoded statistics, ref))``
    for every block. Piece 0's task also publishes that version (:func:`publish_version`)."""

    def __init__(self, n_threads: Optional[int] = None):
        self.n_threads = n_threads
        self.metrics = StepMetrics()

    def process(self, element, side):
        position, task = element
        try:
            version = resolve_version(side)
        except StepRefused as e:
            if task.piece == 0:
                _refused_step(side, str(e))
            return []
        if version is None:            # an earlier step of this window failed
            return []
        with beam_cost.step(_run_of(version.ref.key), position):
            if version.info is not None and task.piece == 0:
                publish_version(version)
            return self._estep(task, version)

    def _estep(self, task, version: Version):
        beam_cost.mark(beam_cost.FIRST_ESTEP)
        header, ref = version.header, version.ref
        cls = algorithm_class(header.algorithm)
        with beam_cost.timed("read"):
            batch = read_task(task)
        with beam_cost.timed("state_delivery"):
            ids = np.sort(rows_of_words(np.unique(batch.word_ids), header.n_words,
                                        header.n_blocks))
            rows = _gather_rows(ref, header, ids)
        with beam_cost.timed("estep"):
            view = cls.estep_view(header, ids, rows, n_threads=self.n_threads)
            stats = view.local_step(batch)
        self.metrics.report(stats)
        del view, rows                        # a worker holds one piece's copy at a time
        t0 = time.perf_counter()
        parts = stats.split_by_block(header.n_blocks)
        del stats
        out = []
        for b in range(len(parts)):
            part, parts[b] = parts[b], None
            data = encode_stats(part)         # counted as statistics out there
            out.append((b, (task.piece, data, ref)))
        beam_cost.report("stats_encode", time.perf_counter() - t0,
                         sum(len(v[1]) for _, v in out))
        return out


def _gather_rows(ref: ShardRef, header, ids: np.ndarray) -> np.ndarray:
    """The state rows ``ids`` (sorted unique) of version ``ref``, read block by block."""
    bounds = block_bounds(header.n_words, header.n_blocks)
    parts = []
    for b, (lo, hi) in enumerate(bounds):
        i0, i1 = np.searchsorted(ids, [lo, hi])
        if i1 > i0:
            parts.append(read_rows(rows_path(ref.folder, ref.position, b), ids[i0:i1] - lo))
    if not parts:
        return np.zeros((0, header.n_topics), np.float64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _merge_pieces(pieces, expected: int, block: int, position: int):
    """The block's statistics pieces decoded and summed in piece order."""
    pieces = sorted(pieces, key=lambda kv: kv[0])
    if [kv[0] for kv in pieces] != list(range(expected)):
        raise DataIntegrityError("step %d, block %d: pieces %s arrived, expected 0..%d"
                                 % (position + 1, block, [kv[0] for kv in pieces],
                                    expected - 1))
    total = None
    for _, data, _ in pieces:
        st = decode_stats(data)               # counted as statistics in there
        total = st if total is None else total.merge(st)
    return total


class BlockStepFn(LeanDoFn):
    """The owner of one word block: the step applied to its rows (version t-1 -> t), then
    the step's re-seeding; -> :class:`BlockOut`."""

    def __init__(self, step: StepPlan):
        self.step = step.bare()
        self.n_pieces = len(step.tasks)

    def process(self, element):
        b, pieces = element
        pieces = list(pieces)
        ref = pieces[0][2]          # the version every E-step read (the same for all)
        # charged to this block's owner, not to the process (which may own several blocks)
        with beam_cost.block_step(_run_of(ref.key), self.step.position, b):
            return [self._process(b, pieces, ref)]

    def _process(self, b: int, pieces, ref: ShardRef) -> BlockOut:
        pos = self.step.position
        header = load_header(ref)
        cls = algorithm_class(header.algorithm)
        t0 = time.perf_counter()
        with beam_cost.timed("stats_combine"):
            stats = _merge_pieces(pieces, self.n_pieces, b, pos)
        try:
            plan = cls.plan_step(header, stats)
        except StepRefused as e:
            return BlockOut(b, None, None, str(e), ref, self.step.n_docs, 0.0)
        rows = read_block(rows_path(ref.folder, ref.position, b))
        part = cls.update_block(header, plan, b, rows, stats)
        write_rows(rows_path(ref.folder, pos + 1, b), rows)
        seconds = time.perf_counter() - t0
        beam_cost.report("global_step", seconds)
        # the plan is not data of the model: block 0's owner hands it on as it is
        return BlockOut(b, part.to_bytes(), plan if b == 0 else None, None, ref,
                        self.step.n_docs, seconds)


class FinishWindowFn(LeanDoFn):
    """After a window's last step: its header and log published (-> the last ShardRef)."""

    def process(self, _, side):
        side = list(side)
        try:
            version = resolve_version(side)
        except StepRefused as e:
            _refused_step(side, str(e))
            return
        if version is None or version.info is None:
            return
        with beam_cost.step(_run_of(version.ref.key), version.ref.position - 1):
            publish_version(version)
            beam_cost.mark(beam_cost.LAST_STEP)
        yield version.ref


# ------------------------------------------------------------------------------ transforms

class ShardedStep(beam.PTransform):
    """One word-sharded step: (read tasks of minibatch t, version t-1) -> the owners'
    :class:`BlockOut` of step t (version t)."""

    def __init__(self, step: StepPlan, n_threads: Optional[int] = None):
        super().__init__()
        self.step, self.n_threads = step, n_threads

    def expand(self, pcolls):
        tasks, prev = pcolls
        return (tasks
                | "EStep" >> beam.ParDo(ShardedEStepFn(self.n_threads), beam.pvalue.AsList(prev))
                | "ByBlock" >> beam.GroupByKey()
                | "BlockStep" >> beam.ParDo(BlockStepFn(self.step)))


def build_sharded(p, tasks, steps: Sequence[StepPlan], start: ShardRef, n_threads: Optional[int]):
    """The unrolled window's word-sharded steps in pipeline ``p``; ``tasks``: the window's
    read tasks split by minibatch (:class:`~pipelines.training.beam_steps.WindowTasks`)."""
    version = p | "State%d" % start.position >> beam.Create([start], reshuffle=False)
    for j, sp in enumerate(steps):
        version = (tasks[j], version) | "Step%d" % sp.position >> ShardedStep(sp, n_threads)
    return (p | "End" >> beam.Create([None], reshuffle=False)
            | "FinishWindow" >> beam.ParDo(FinishWindowFn(), beam.pvalue.AsList(version)))


def collect(steps: Sequence[StepPlan], start: ShardRef, run_key: str):
    """After a word-sharded window: the steps' infos up to the first missing or failed one,
    the whole state after the last good step (None if none) and the error or None."""
    infos, error = collect_infos(steps, start.folder, run_key)
    if not infos:
        return infos, None, error
    pos = int(infos[-1]["position"])
    return infos, load_state(version_ref(run_key, start.folder, pos)), error
