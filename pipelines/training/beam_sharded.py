"""The word-sharded exchange: a step in which no worker holds the whole state.

The state of a word-sharded algorithm (``word_sharded`` on its class: online VB, SCVB0) is
cut into B contiguous word blocks (:mod:`lda_core.algorithms.word_blocks`; B is the
algorithm's ``word_blocks`` setting, recorded in its checkpoints) plus a small *header*
(the K-vectors and scalars: column sums, α, η, the lazy scale, the step counters). Inside a
window every state version lives in the run's scratch folder as one header file and B block
files (``.npy``, data only), and a step is::

    read tasks of minibatch t
      | ParDo(ShardedEStepFn, side = ref[t-1])   header + only the rows of the piece's words
      |                                          (range reads of the block files); the
      |                                          piece's statistics cut by word block:
      |                                          (block b, (piece, bytes)) for every b
      | GroupByKey                               block b's pieces reach b's owner
      | ParDo(BlockStepFn, side = ref[t-1])      the pieces summed in piece order; the plan
      |                                          of the step (from the statistics' small
      |                                          part: every owner computes the same); the
      |                                          owner's rows updated and written as version
      |                                          t (temporary name + rename: a retry writes
      |                                          the same bytes); its K-vector partial
      | GroupByKey (one key)
      | ParDo(FinishStepFn)                      partials added in block order -> header of
      |                                          version t before re-seeding, and the
      |                                          re-seeding decisions
    Create(blocks)
      | ParDo(SplitBlockFn, side = that)         owners apply the re-seeding splits to their
      |                                          rows (nothing read when there is none)
      | GroupByKey (one key)
      | ParDo(FinishSplitsFn)                    -> header of version t, the step's info for
                                                    the driver -> ref[t]

Every sum is the one the in-process trainer makes at the same B (pieces in piece order,
partials in block order), so the final state is bit for bit the in-process one at the same
(seed, S, P, B), whatever the number of workers, their bundling or a retry. What a worker
moves per step: the header and its pieces' rows in, its pieces' statistics out; an owner
receives its block's statistics and reads and writes its block. Bytes are counted by
:mod:`lda_core.storage.traffic`. The window's first version is written by the driver from
the checkpoint it starts from, and the driver assembles the last one
(``from_shards``) to publish the window's checkpoint.
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
from lda_core.algorithms.word_blocks import (BlockHeader, BlockPartial, Splits, block_bounds,
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

# which block files hold a version's rows: written by the block step ("u"), or rewritten by
# the re-seeding splits ("s")
UPDATED, SPLIT = "u", "s"


class ShardRef(NamedTuple):
    """A word-sharded state version as it travels through the graph (a few dozen bytes)."""
    key: str           # "<run id>/<position>"
    folder: str        # the run's scratch folder
    position: int      # minibatches consumed
    stage: str         # UPDATED or SPLIT: which block files hold the rows


class PreSplitRef(NamedTuple):
    """The header of a version before re-seeding, and the splits to apply (FinishStepFn)."""
    key: str
    folder: str
    position: int


def header_path(folder: str, position: int, pre: bool = False) -> str:
    return os.path.join(folder, "header-%09d%s.bin" % (position, "-pre" if pre else ""))


def rows_path(folder: str, position: int, block: int, stage: str) -> str:
    return os.path.join(folder, "rows-%09d-%04d-%s.npy" % (position, block, stage))


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


# ------------------------------------------------------------------------------ headers

_LOCK = threading.Lock()
_HEADERS: Dict[str, Any] = {}      # version key -> decoded header (a few per process)


def _decode_header(data: bytes):
    try:
        return BlockHeader.from_bytes(data)
    except ValueError as e:
        raise DataIntegrityError("a word-block header in the run's scratch folder is damaged "
                                 "(%s): resume the run" % e) from None


def load_header(folder: str, position: int, key: str, pre: bool = False):
    """The header of version ``key`` (decoded once per process)."""
    tag = key + ("/pre" if pre else "")
    with _LOCK:
        h = _HEADERS.get(tag)
    if h is None:
        h = _decode_header(_read(header_path(folder, position, pre), traffic.SCALARS))
        with _LOCK:
            if len(_HEADERS) > 8:
                _HEADERS.clear()
            _HEADERS[tag] = h
    return h


def write_start(algorithm, folder: str, run_key: str, position: int) -> ShardRef:
    """The window's first version, written by the driver from ``algorithm``."""
    header = algorithm.shard_header()
    _write(header_path(folder, position), header.to_bytes(), traffic.SCALARS)
    for b in range(header.n_blocks):
        write_rows(rows_path(folder, position, b, UPDATED), algorithm.block_rows(b))
    return ShardRef("%s/%d" % (run_key, position), folder, position, UPDATED)


def load_state(ref: ShardRef):
    """The whole algorithm of version ``ref`` (the driver, after a window)."""
    header = load_header(ref.folder, ref.position, ref.key)
    cls = algorithm_class(header.algorithm)
    rows = [read_block(rows_path(ref.folder, ref.position, b, ref.stage))
            for b in range(header.n_blocks)]
    return cls.from_shards(header, rows)


# ------------------------------------------------------------------------------ DoFns

class ShardedEStepFn(LeanDoFn):
    """The E-step of one piece with only its words' rows of state ``ref`` (side input); its
    statistics cut by word block, ``(block, (piece, encoded statistics))`` for every block."""

    def __init__(self, n_threads: Optional[int] = None):
        self.n_threads = n_threads
        self.metrics = StepMetrics()

    def process(self, element, ref: Optional[ShardRef]):
        if ref is None:              # an earlier step of this window failed
            return []
        with beam_cost.step(_run_of(ref.key), element[0]):
            return self._estep(element, ref)

    def _estep(self, element, ref: ShardRef):
        position, task = element
        beam_cost.mark(beam_cost.FIRST_ESTEP)
        header = load_header(ref.folder, ref.position, ref.key)
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
            parts.append(read_rows(rows_path(ref.folder, ref.position, b, ref.stage),
                                   ids[i0:i1] - lo))
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
    """The owner of one word block: the step applied to its rows (version t-1 -> t)."""

    def __init__(self, step: StepPlan):
        self.step = step.bare()
        self.n_pieces = len(step.tasks)

    def process(self, element):
        b, pieces = element
        pieces = list(pieces)
        ref = pieces[0][2]          # the version every E-step read (the same for all)
        # charged to this block's owner, not to the process (which may own several blocks)
        with beam_cost.block_step(_run_of(ref.key), self.step.position, b):
            return list(self._process(b, pieces, ref))

    def _process(self, b: int, pieces, ref: ShardRef):
        pos = self.step.position
        header = load_header(ref.folder, ref.position, ref.key)
        cls = algorithm_class(header.algorithm)
        t0 = time.perf_counter()
        with beam_cost.timed("stats_combine"):
            stats = _merge_pieces(pieces, self.n_pieces, b, pos)
        try:
            plan = cls.plan_step(header, stats)
        except StepRefused as e:
            yield 0, (b, None, None, str(e), ref)
            return
        rows = read_block(rows_path(ref.folder, ref.position, b, ref.stage))
        part = cls.update_block(header, plan, b, rows, stats)
        write_rows(rows_path(ref.folder, pos + 1, b, UPDATED), rows)
        beam_cost.report("global_step", time.perf_counter() - t0)
        # the plan is not data of the model: block 0's owner hands it to the finisher as it is
        yield 0, (b, part.to_bytes(), plan if b == 0 else None, None, ref)


def _run_of(key: str) -> str:
    """The run key of a version key ("<run id>/<position>")."""
    return key.rsplit("/", 1)[0]


def _in_block_order(parts, n_blocks: int, position: int):
    parts = sorted(parts, key=lambda p: p[0])
    if [p[0] for p in parts] != list(range(n_blocks)):
        raise DataIntegrityError("step %d: partials of blocks %s arrived, expected 0..%d"
                                 % (position + 1, [p[0] for p in parts], n_blocks - 1))
    return parts


class FinishStepFn(LeanDoFn):
    """The blocks' partials added in block order: the header of version t before
    re-seeding, and the re-seeding decisions (-> a :class:`PreSplitRef`)."""

    def __init__(self, step: StepPlan):
        self.step = step.bare()

    def process(self, element):
        _, parts = element
        parts = list(parts)
        ref = parts[0][4]          # the version every owner read (the same for all)
        with beam_cost.step(_run_of(ref.key), self.step.position):
            return list(self._process(parts, ref))

    def _process(self, parts, ref: ShardRef):
        pos = self.step.position
        key = "%s/%d" % (ref.key.rsplit("/", 1)[0], pos + 1)
        header = load_header(ref.folder, ref.position, ref.key)
        cls = algorithm_class(header.algorithm)
        parts = _in_block_order(parts, header.n_blocks, pos)
        refused = [p[3] for p in parts if p[3]]
        try:
            if refused:
                raise StepRefused(refused[0])
            for p in parts:
                traffic.record_in(len(p[1]), traffic.SCALARS)
            plan = parts[0][2]
            partials = [BlockPartial.from_bytes(p[1]) for p in parts]
            header2, splits, info = cls.finish_step(header, plan, partials)
        except StepRefused as e:
            store_step_info(ref.folder, key, {"error": str(e), "position": pos + 1})
            logger.error("global step at position %d refused: %s", pos, e)
            return
        _write(header_path(ref.folder, pos + 1, pre=True), header2.to_bytes(), traffic.SCALARS)
        _write(_splits_path(ref.folder, pos + 1), splits.to_bytes(), traffic.SCALARS)
        _write(_splits_path(ref.folder, pos + 1) + ".json", _json_bytes(info),
               traffic.SCALARS)
        yield PreSplitRef(key, ref.folder, pos + 1)


def _json_bytes(obj) -> bytes:
    import json
    from lda_core.storage.run_log import jsonable
    return json.dumps(jsonable(obj), sort_keys=True).encode("utf-8")


def _splits_path(folder: str, position: int) -> str:
    return os.path.join(folder, "splits-%09d.bin" % position)


def _load_pre(pre: PreSplitRef, with_info: bool = False):
    """(header before re-seeding, the splits, the step's info so far or None)."""
    import json
    header2 = load_header(pre.folder, pre.position, pre.key, pre=True)
    splits = Splits.from_bytes(_read(_splits_path(pre.folder, pre.position), traffic.SCALARS))
    info = (json.loads(_read(_splits_path(pre.folder, pre.position) + ".json",
                             traffic.SCALARS)) if with_info else None)
    return header2, splits, info


class SplitBlockFn(LeanDoFn):
    """The owner of one block applies the step's re-seeding splits to its rows."""

    def process(self, b, pre: Optional[PreSplitRef]):
        if pre is None:
            return []
        # charged to the block's owner, as its block step is
        with beam_cost.block_step(_run_of(pre.key), pre.position - 1, b):
            return list(self._process(b, pre))

    def _process(self, b, pre: Optional[PreSplitRef]):
        if pre is None:
            return
        header2, splits, _ = _load_pre(pre)
        if not splits.needs_blocks:          # nothing to split or sum: no block is read
            yield 0, (b, None, pre)
            return
        cls = algorithm_class(header2.algorithm)
        rows = read_block(rows_path(pre.folder, pre.position, b, UPDATED))
        part = cls.split_block(header2, splits, b, rows)
        if splits.pairs:
            write_rows(rows_path(pre.folder, pre.position, b, SPLIT), rows)
        yield 0, (b, part.to_bytes(), pre)


class FinishSplitsFn(LeanDoFn):
    """The split partials added in block order: the header of version t and the step's info
    for the driver (-> ``ref[t]``); the files of version t-2 are removed."""

    def __init__(self, step: StepPlan):
        self.step = step.bare()

    def process(self, element):
        _, parts = element
        parts = list(parts)
        pre = parts[0][2]
        with beam_cost.step(_run_of(pre.key), self.step.position):
            return list(self._process(parts, pre))

    def _process(self, parts, pre: PreSplitRef):
        t0 = time.perf_counter()
        header2, splits, info = _load_pre(pre, with_info=True)
        cls = algorithm_class(header2.algorithm)
        parts = _in_block_order([(b, d) for b, d, _ in parts], header2.n_blocks,
                                self.step.position)
        for _, data in parts:
            traffic.record_in(len(data or b""), traffic.SCALARS)
        decoded = ([BlockPartial.from_bytes(d) for _, d in parts] if splits.needs_blocks
                   else [])
        try:
            header3, info = cls.finish_splits(header2, splits, decoded, info)
        except StepRefused as e:
            store_step_info(pre.folder, pre.key, {"error": str(e), "position": pre.position})
            return
        _write(header_path(pre.folder, pre.position), header3.to_bytes(), traffic.SCALARS)
        info = dict(info)
        info["global_step_seconds"] = time.perf_counter() - t0
        info["docs_in_minibatch"] = self.step.n_docs
        info["docs_seen"] = int(getattr(header3, "docs_seen", 0))
        info["position"] = pre.position
        stage = SPLIT if splits.pairs else UPDATED
        info["shard_stage"] = stage
        err = _session.check_info(info)
        if err:
            store_step_info(pre.folder, pre.key, {"error": err, "position": pre.position})
            return
        store_step_info(pre.folder, pre.key, info)
        _remove_version(pre.folder, pre.position - 2, header2.n_blocks)
        beam_cost.mark(beam_cost.LAST_STEP)
        yield ShardRef(pre.key, pre.folder, pre.position, stage)


def _remove_version(folder: str, position: int, n_blocks: int) -> None:
    """Files of a version no step reads any more (every reader of version t-2 finished
    before step t's block step started)."""
    if position < 0:
        return
    for pre in (False, True):
        scratch_space.remove_file(header_path(folder, position, pre))
    scratch_space.remove_file(_splits_path(folder, position))
    scratch_space.remove_file(_splits_path(folder, position) + ".json")
    for b in range(n_blocks):
        for stage in (UPDATED, SPLIT):
            scratch_space.remove_file(rows_path(folder, position, b, stage))


# ------------------------------------------------------------------------------ transforms

class ShardedStep(beam.PTransform):
    """One word-sharded step: (read tasks of minibatch t, blocks, ref[t-1]) -> ref[t]."""

    def __init__(self, step: StepPlan, n_threads: Optional[int] = None):
        super().__init__()
        self.step, self.n_threads = step, n_threads

    def expand(self, pcolls):
        tasks, blocks, prev = pcolls
        view = beam.pvalue.AsSingleton(prev, default_value=None)
        partials = (tasks
                    | "EStep" >> beam.ParDo(ShardedEStepFn(self.n_threads), view)
                    | "ByBlock" >> beam.GroupByKey()
                    | "BlockStep" >> beam.ParDo(BlockStepFn(self.step))
                    | "Partials" >> beam.GroupByKey())
        pre = partials | "Finish" >> beam.ParDo(FinishStepFn(self.step))
        pre_view = beam.pvalue.AsSingleton(pre, default_value=None)
        return (blocks
                | "Split" >> beam.ParDo(SplitBlockFn(), pre_view)
                | "SplitPartials" >> beam.GroupByKey()
                | "FinishSplits" >> beam.ParDo(FinishSplitsFn(self.step)))


def build_sharded(p, tasks, steps: Sequence[StepPlan], start: ShardRef, n_blocks: int,
                  n_threads: Optional[int]):
    """The unrolled window's word-sharded steps in pipeline ``p``; ``tasks``: the window's
    read tasks split by minibatch (:class:`~pipelines.training.beam_steps.WindowTasks`)."""
    ref = p | "State%d" % start.position >> beam.Create([start], reshuffle=False)
    blocks = p | "Blocks" >> beam.Create(list(range(n_blocks)))
    for j, sp in enumerate(steps):
        ref = (tasks[j], blocks, ref) | "Step%d" % sp.position >> ShardedStep(sp, n_threads)
    return ref


def collect(steps: Sequence[StepPlan], start: ShardRef, run_key: str):
    """After a word-sharded window: the steps' infos up to the first missing or failed one,
    the whole state after the last good step (None if none) and the error or None."""
    infos, error = collect_infos(steps, start.folder, run_key)
    if not infos:
        return infos, None, error
    last = infos[-1]
    pos = int(last["position"])
    ref = ShardRef("%s/%d" % (run_key, pos), start.folder, pos, last["shard_stage"])
    return infos, load_state(ref), error
