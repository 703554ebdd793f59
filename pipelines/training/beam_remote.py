"""The remote exchange: word-sharded steps whose state moves through Beam's shuffle.

The state of a word-sharded algorithm (online VB, SCVB0: ``word_sharded`` on its class) is cut
into B word blocks plus an O(K) *header* (:mod:`lda_core.algorithms.word_blocks`). Inside a
window nothing is written to files: every block lives with its *owner*, and everything a step
moves is an element of a ``GroupByKey``:

* an E-step task (one per piece of a minibatch) receives its documents and, from each block's
  owner, only the rows of its documents' words; it sends its statistics cut by block to the
  owners of the step that applies them;
* an owner receives its block's rows (from the owner of the previous step), the pieces'
  statistics of its block and the rows requests of later E-steps; it merges the pieces in
  piece order, applies the step to its rows (``plan_step``, ``update_block``: the plan is the
  same on every owner), hands the rows on and answers the requests;
* the owners' O(B K) *partials* are a side input of the next stage: every task that needs the
  header of a version adds them in block order (``finish_step``), the same bits everywhere.

Requests and documents come from *readers*: a reader task reads one piece of a minibatch from
the shards (the only object-store requests a step makes), sends its documents to the E-step's
stage and, for each block, the row ids it needs to the owner that will hold those rows.

With staleness s and warm-up W (:mod:`lda_core.training.staleness`) the E-step of minibatch m
reads the state after m minibatches when m < W, after ``max(m - s, W, start)`` past it. Every role is placed in the earliest stage after its
inputs (:class:`Schedule`): with s = 1 the E-step of minibatch m + 1 and the owners of step m
share a stage, one shuffle barrier per step; with s = 0 a step takes two.

Files are read and written only at a window's ends, in the run's scratch folder
(:func:`start_paths`): the window's first stage loads every block (and the statistics in
flight) from there; its last stage (the *final* owners) writes the blocks, the statistics in
flight for the next window and the last header, and one task writes the window's log (every
step's info). The driver publishes the checkpoint from those files without loading the state
(``Session.publish_blocks``), and the next window starts from the same files.

Every sum is the in-process trainer's at the same (seed, S, P, B, s, W): pieces in piece order,
partials in block order; so the final state is the in-process one bit for bit, whatever the
number of workers, their bundling, a retry or a resume at another worker count.
"""
from __future__ import annotations

import io
import json
import logging
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np

from lda_core.algorithms.algorithm import algorithm_class, pack_arrays, unpack_arrays
from lda_core.algorithms.word_blocks import (BlockHeader, BlockPartial, block_bounds,
                                             rows_of_words)
from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, StepRefused
from lda_core.storage import npy, traffic
from lda_core.storage.blocks import algorithm_from_state
from lda_core.storage.files import files_for, map_in_order
from lda_core.storage.pending import array_name, as_bytes_array
from lda_core.storage.state import TopicState
from lda_core.training import session as _session, staleness as staleness_rule
from lda_core.training.phase_times import PhaseTimes
from pipelines.runtime import scratch as scratch_space
from pipelines.training import scratch_names
from pipelines.training import beam_cost
from pipelines.training.beam_plan import ReadPlan, ReadTask, StepPlan, read_task
from pipelines.training.beam_run import after_window, log_window, planned_windows, window_end
from pipelines.training.beam_stats import decode_stats, encode_stats
from pipelines.training.beam_steps import LeanDoFn, StepMetrics

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ file names

class Start(NamedTuple):
    """A window's start as the graph carries it: the scratch folder and the position whose
    files (header, B row blocks, statistics in flight of minibatches ``pending_first`` ..
    ``pending_first + pending_n - 1``) the first stage reads."""
    folder: str
    position: int
    n_blocks: int
    pending_first: int
    pending_n: int

    def pending_minibatches(self) -> range:
        return range(self.pending_first, self.pending_first + self.pending_n)


def start_paths(start: Start) -> List[str]:
    """Every file of a window's start (what the run removes once it is no longer needed)."""
    out = [scratch_names.header_path(start.folder, start.position)]
    out += [scratch_names.rows_path(start.folder, start.position, b)
            for b in range(start.n_blocks)]
    out += [scratch_names.pending_path(start.folder, start.position, m, b)
            for m in start.pending_minibatches() for b in range(start.n_blocks)]
    return out


# ------------------------------------------------------------------------------ files

def write_rows(path: str, rows: np.ndarray) -> None:
    """A block's rows as an ``.npy`` file (data only), published whole."""
    rows = np.ascontiguousarray(rows)
    head = io.BytesIO()
    npy.write_header(head, rows.dtype, rows.shape)
    scratch_space.write_bytes(path, [head.getvalue(),
                                     memoryview(rows.reshape(-1).view(np.uint8))])
    traffic.record_out(rows.nbytes, traffic.STATE)


def read_rows(path: str) -> np.ndarray:
    """A block file written by :func:`write_rows` (no pickle; two-dimensional rows only)."""
    data = scratch_space.read_bytes(path)     # one request on an object store
    with io.BytesIO(data) as f:
        try:
            rows = npy.read_array(f)
        except (ValueError, OSError, EOFError) as e:
            raise DataIntegrityError("%s: not a block file (%s); the run's scratch folder was "
                                     "damaged: resume the run" % (path, e)) from None
    if rows.ndim != 2:
        raise DataIntegrityError("%s: not a block of rows (shape %s); the run's scratch "
                                 "folder was damaged: resume the run" % (path, rows.shape))
    traffic.record_in(rows.nbytes, traffic.STATE)
    return rows


def write_blob(path: str, data: bytes) -> None:
    scratch_space.write_bytes(path, data)
    traffic.record_out(len(data), traffic.STATISTICS)


def read_blob(path: str) -> bytes:
    data = scratch_space.read_bytes(path)
    traffic.record_in(len(data), traffic.STATISTICS)
    return data


def write_start(algorithm, folder: str, position: int, in_flight: int) -> Start:
    """A window's start files from an algorithm in memory (a fresh run, or a checkpoint the
    driver loaded): its header, its B row blocks and, split by block, the statistics in
    flight (``algorithm.pending``) for the minibatches from ``position`` on when they are the
    ``in_flight`` ones the run's rule expects there (else none: the window recomputes them
    from the state it starts with)."""
    header = algorithm.shard_header()
    B = header.n_blocks
    scratch_space.write_bytes(scratch_names.header_path(folder, position), header.to_bytes())
    # the B blocks at once where the store serves each object with its own round trips
    map_in_order(lambda b: write_rows(scratch_names.rows_path(folder, position, b),
                                      algorithm.block_rows(b)),
                 list(range(B)), getattr(files_for(folder), "write_threads", 1))
    pending = getattr(algorithm, "pending", None)
    first, n = position, 0
    if pending is not None and not pending.covers(position, in_flight):
        if pending.stats or in_flight:
            logger.warning("the statistics in flight of the checkpoint (minibatches from %d) "
                           "are not this run's (from %d): recomputed with the state it starts "
                           "from", pending.first, position)
    elif pending is not None:
        first, n = int(pending.first), len(pending.stats)
        for i, st in enumerate(pending.stats):
            for b, part in enumerate(st.split_by_block(B) if B > 1 else [st]):
                write_blob(scratch_names.pending_path(folder, position, first + i, b),
                           encode_stats(part))
    return Start(folder, int(position), B, first, n)


# ------------------------------------------------------------------------------ elements

# what a shuffled value holds (first byte), with two integers naming its piece, block or
# minibatch; the rest is the payload
ROWS, STATS, REQUEST, PIECE_ROWS, DOCS, TASK = range(6)
_HEAD = struct.Struct("<Bqq")
_MAGIC_DOCS = b"LDAWDOC1"


def envelope(kind: int, a: int, b: int, payload=b"") -> bytes:
    return b"".join([_HEAD.pack(kind, int(a), int(b)), payload])


def opened(value) -> Tuple[int, int, int, memoryview]:
    mv = memoryview(value)
    kind, a, b = _HEAD.unpack(mv[:_HEAD.size])
    return kind, a, b, mv[_HEAD.size:]


def docs_bytes(batch: DocBatch) -> bytes:
    """A piece's documents as data (ids, CSR arrays)."""
    return pack_arrays(_MAGIC_DOCS, {"doc_ids": list(batch.doc_ids)},
                       [("indptr", "<i8", batch.indptr), ("word_ids", "<i4", batch.word_ids),
                        ("counts", "<i4", batch.counts)])


def docs_of(data) -> DocBatch:
    head, a = unpack_arrays(_MAGIC_DOCS, data)
    return DocBatch(head["doc_ids"], a["indptr"], a["word_ids"], a["counts"])


def needed_rows(batch: DocBatch, n_words: int, n_blocks: int) -> np.ndarray:
    """The state rows (sorted, unique) of a piece's words."""
    return np.sort(rows_of_words(np.unique(batch.word_ids), n_words, n_blocks))


def rows_by_block(rows: np.ndarray, n_words: int, n_blocks: int):
    """Per block b with rows among ``rows``: (b, the rows relative to the block's first)."""
    out = []
    for b, (lo, hi) in enumerate(block_bounds(n_words, n_blocks)):
        i0, i1 = np.searchsorted(rows, [lo, hi])
        if i1 > i0:
            out.append((b, rows[i0:i1] - lo))
    return out


# ------------------------------------------------------------------------------ the schedule

def _key(role: str, *ids: int) -> str:
    return ":".join([role] + [str(int(i)) for i in ids])


Route = Tuple[int, str]        # (stage, key prefix): where a block's data goes


@dataclass
class Schedule:
    """Where every role of a window runs (module docstring): the stage (1, 2, ...) of the
    owners of each step, of each minibatch's E-step and of its readers (stage 0: the
    window's first transform, before any shuffle), the first stage (``load``: the blocks
    read from the start files) and the last (``final``). Built on the driver; each stage's
    DoFn gets only its own part (:meth:`roles`), so the graph grows by a constant per stage.

    ``start``: the window's start files; ``n_steps``: the minibatches the window applies
    (positions ``a .. T-1``, T = ``end``); ``pieces`` and ``docs``: per minibatch from ``a``
    to ``T + s - 1``, its read tasks and documents (the last ``s`` are E-stepped for the
    next window)."""
    start: Start
    n_steps: int
    staleness: int
    pieces: Dict[int, int]
    docs: Dict[int, int]
    warmup: int = 0
    owner: Dict[int, int] = field(default_factory=dict)    # minibatch m -> stage of O_m
    estep: Dict[int, int] = field(default_factory=dict)    # minibatch m -> stage of E_m
    reader: Dict[int, int] = field(default_factory=dict)   # minibatch m -> stage of R_m
    load: int = 1
    final: int = 0

    def __post_init__(self):
        loaded = set(self.start.pending_minibatches())
        for m in list(range(self.first, self.end)) + list(self.pending_after()):
            if m not in loaded:
                k = self.version_read(m)
                self.estep[m] = self.producer_stage(k) + 1
                self.reader[m] = self.producer_stage(k) - 1
            if m < self.end:
                self.owner[m] = 1 + max(self.producer_stage(m), self.stats_stage(m))
        self.final = 1 + max([self.producer_stage(self.end)] +
                             [self.stats_stage(m) for m in self.pending_after()])

    @classmethod
    def of_steps(cls, start: Start, steps: Sequence[StepPlan], ahead: Sequence[StepPlan],
                 staleness: int, warmup: int = 0) -> "Schedule":
        plans = list(steps) + list(ahead)
        return cls(start, len(steps), int(staleness),
                   {sp.position: len(sp.tasks) for sp in plans},
                   {sp.position: sp.n_docs for sp in plans}, int(warmup))

    @property
    def first(self) -> int:
        return self.start.position

    @property
    def end(self) -> int:
        return self.first + self.n_steps

    @property
    def n_stages(self) -> int:
        return self.final

    def pending_after(self) -> range:
        """The minibatches whose statistics the window leaves in flight."""
        return range(self.end, self.end + staleness_rule.in_flight(self.end, self.staleness,
                                                                   self.warmup))

    def version_read(self, m: int) -> int:
        """The version (position) the E-step of minibatch ``m`` reads (the window's start
        plays the run's start when it brings no statistics in flight)."""
        return staleness_rule.version_read(m, self.staleness, self.warmup, self.first)

    def producer_stage(self, k: int) -> int:
        """The stage that holds version ``k``'s rows once it is made."""
        return self.load if k == self.first else self.owner[k - 1]

    def producer_prefix(self, k: int) -> str:
        return "l" if k == self.first else "o:%d" % (k - 1)

    def stats_stage(self, m: int) -> int:
        """The stage that sends minibatch ``m``'s statistics (its E-step, or the load)."""
        return self.estep.get(m, self.load)

    def rows_route(self, k: int) -> Route:
        """Whoever takes version ``k``'s blocks on."""
        return (self.final, "f") if k == self.end else (self.owner[k], "o:%d" % k)

    def stats_route(self, m: int) -> Route:
        return (self.owner[m], "o:%d" % m) if m < self.end else (self.final, "f")

    def versions_at(self, stage: int) -> List[int]:
        """The versions whose header some role of ``stage`` needs."""
        out = {m for m, st in self.owner.items() if st == stage}
        out |= {self.version_read(m) for m, st in self.estep.items() if st == stage}
        if stage == self.final:
            out.add(self.end)
        return sorted(out)

    def roles(self, stage: int) -> "StageRoles":
        """What the DoFn of ``stage`` needs to know (constant size per stage)."""
        mine = ({m for m, st in self.owner.items() if st == stage} |
                {m for m, st in self.estep.items() if st == stage} |
                {m for m, st in self.reader.items() if st == stage})
        holders = {m + 1 for m, st in self.owner.items() if st == stage}
        if stage == self.load:
            holders.add(self.first)
        if stage == self.final:
            mine |= set(self.pending_after())
        asking = {m for m in self.estep if self.version_read(m) in holders}
        rows_to = {k: self.rows_route(k) for k in holders}
        stats_to = {m: self.stats_route(m) for m in mine | set(self.start.pending_minibatches())
                    if m in self.estep or m in self.start.pending_minibatches()}
        return StageRoles(
            stage=stage, start=self.start, staleness=self.staleness, warmup=self.warmup,
            end=self.end,
            load=stage == self.load, final=stage == self.final,
            pieces={m: (self.pieces[m] if m in self.estep else -1) for m in mine},
            docs={m: self.docs[m] for m in mine if m in self.docs},
            version={m: self.version_read(m) for m in mine},
            estep_stage={m: self.estep[m] for m in asking | (mine & set(self.estep))},
            producer={self.version_read(m): (self.producer_stage(self.version_read(m)),
                                             self.producer_prefix(self.version_read(m)))
                      for m in mine if m in self.reader and self.reader[m] == stage},
            rows_to=rows_to, stats_to=stats_to)

    def describe(self) -> str:
        per: Dict[int, List[str]] = {}
        for kind, table in (("O", self.owner), ("E", self.estep), ("R", self.reader)):
            for m, st in table.items():
                per.setdefault(st, []).append("%s%d" % (kind, m))
        per.setdefault(self.load, []).append("load")
        per.setdefault(self.final, []).append("final")
        return "; ".join("%d: %s" % (st, " ".join(per[st])) for st in sorted(per))


@dataclass(frozen=True)
class StageRoles:
    """One stage's part of a :class:`Schedule`: per minibatch it handles, its pieces (-1:
    its statistics come from the start files), documents and the version its E-step reads;
    where the stage sends rows (``rows_to``: per version it holds) and statistics
    (``stats_to``), the stages of the E-steps that ask it for rows (``estep_stage``) and,
    for its readers, the stage and key of the owners of the version read (``producer``)."""
    stage: int
    start: Start
    staleness: int
    warmup: int
    end: int
    load: bool
    final: bool
    pieces: Dict[int, int]
    docs: Dict[int, int]
    version: Dict[int, int]
    estep_stage: Dict[int, int]
    producer: Dict[int, Route]
    rows_to: Dict[int, Route]
    stats_to: Dict[int, Route]

    @property
    def n_blocks(self) -> int:
        return self.start.n_blocks

    @property
    def targets(self) -> List[int]:
        """The later stages this stage sends elements to (its tagged outputs)."""
        out = {st for st, _ in self.rows_to.values()} | {st for st, _ in self.stats_to.values()}
        out |= set(self.estep_stage.values()) | {st for st, _ in self.producer.values()}
        return sorted(t for t in out if t > self.stage)

    def pending_after(self) -> range:
        return range(self.end, self.end + staleness_rule.in_flight(self.end, self.staleness,
                                                                   self.warmup))


# ------------------------------------------------------------------------------ versions

class VersionOut(NamedTuple):
    """What an owner of step m hands on for the header of version m + 1: its partial (bytes;
    None when it refused), the plan and the header of version m (block 0's owner only: every
    owner computed the same), the refusal or None, and for the step's log the documents
    and the owner's seconds."""
    m: int
    block: int
    partial: Optional[bytes]
    plan: Any
    header: Optional[bytes]
    error: Optional[str]
    n_docs: int
    seconds: float


_HEADERS: Dict[Tuple[str, int], Tuple[BlockHeader, Optional[Dict[str, Any]]]] = {}


def _cached(run: str, k: int):
    return _HEADERS.get((run, k))


def _remember(run: str, k: int, value) -> None:
    if len(_HEADERS) > 16:
        _HEADERS.clear()
    _HEADERS[(run, k)] = value


def decode_header(data) -> BlockHeader:
    try:
        return BlockHeader.from_bytes(bytes(data))
    except ValueError as e:
        raise DataIntegrityError("a word-block header of the run is damaged (%s): resume "
                                 "the run" % e) from None


def resolve(run: str, start: Start, k: int, outs: Sequence[VersionOut]
            ) -> Tuple[BlockHeader, Optional[Dict[str, Any]]]:
    """(header of version ``k``, the info of the step that made it or None for the window's
    start), from the start files or from the partials of step k - 1 (``outs``: every
    VersionOut of the stage's side input), added in block order; cached per process.
    StepRefused when that step was refused; LookupError when its partials are missing (a
    step before failed)."""
    got = _cached(run, k)
    if got is not None:
        return got
    if k == start.position:
        header = decode_header(read_blob(scratch_names.header_path(start.folder, start.position)))
        got = (header, None)
        _remember(run, k, got)
        return got
    mine = sorted((o for o in outs if o.m == k - 1), key=lambda o: o.block)
    if not mine:
        raise LookupError("no partials of step %d" % k)
    refused = [o.error for o in mine if o.error]
    if refused:
        raise StepRefused(refused[0])
    first = mine[0]
    header = decode_header(first.header)
    if [o.block for o in mine] != list(range(header.n_blocks)):
        raise DataIntegrityError("step %d: partials of blocks %s arrived, expected 0..%d"
                                 % (k, [o.block for o in mine], header.n_blocks - 1))
    t0 = time.perf_counter()
    cls = algorithm_class(header.algorithm)
    header2, info = cls.finish_step(header, first.plan,
                                    [BlockPartial.from_bytes(o.partial) for o in mine])
    info = dict(info)
    info["global_step_seconds"] = max(o.seconds for o in mine) + time.perf_counter() - t0
    info["docs_in_minibatch"] = first.n_docs
    info["docs_seen"] = int(header2.counters.get("docs_seen", 0))
    info["position"] = k
    err = _session.check_info(info)
    if err:
        raise StepRefused(err)
    got = (header2, info)
    _remember(run, k, got)
    return got


# ------------------------------------------------------------------------------ the stage DoFn

class LogRecord(NamedTuple):
    """One line of a window's log: a step's info (``info``, at ``position``), a refusal
    (``error``), or a file the final stage wrote (``written``)."""
    position: int
    info: Optional[Dict[str, Any]] = None
    error: Optional[str] = None
    written: Optional[str] = None


LOG = "log"
VERSIONS = "versions"


def _to(stage: int) -> str:
    return "to%d" % stage


class _Stopped(Exception):
    """A role ends without output (a step before it failed or was refused); ``record``: the
    refusal's log record, when this role reports it."""

    def __init__(self, record=None):
        super().__init__()
        self.record = record


class StageFn(LeanDoFn):
    """Every role of one stage (:class:`Schedule`), by the key of the group it is given:
    ``l:b`` (load block b), ``o:m:b`` (owner of block b in step m), ``e:m:p`` (E-step of
    piece p of minibatch m), ``r:m:p`` (reader), ``f:b`` (final owner of block b). Main
    outputs are tagged with the stage they go to; ``versions`` carries the owners' partials
    (the next stages' side input) and ``log`` the window's log records."""

    def __init__(self, roles: StageRoles, run: str, n_words: int, n_threads: Optional[int]):
        self.roles = roles
        self.run = run
        self.n_words = int(n_words)
        self.n_threads = n_threads
        self.metrics = None

    def setup(self):
        super().setup()
        # made here, not in the graph: every stage's DoFn is pickled into it
        self.metrics = StepMetrics()

    def process(self, element, outs):
        key, values = element
        role, *ids = key.split(":")
        ids = [int(i) for i in ids]
        try:
            if role == "l":
                yield from self._load(ids[0], values)
            elif role == "o":
                yield from self._owner(ids[0], ids[1], values, outs)
            elif role == "e":
                yield from self._estep(ids[0], ids[1], values, outs)
            elif role == "r":
                yield from self._read(ids[0], ids[1], values)
            elif role == "f":
                yield from self._final(ids[0], values, outs)
            else:
                raise ValueError("unknown role %r" % key)
        except _Stopped as stop:
            if stop.record is not None:
                yield stop.record

    # -- helpers
    @property
    def B(self) -> int:
        return self.roles.n_blocks

    def _version(self, k: int, outs, log_block: Optional[int] = None):
        """Header and info of version ``k``; a refusal is logged by block 0's owner
        (``log_block``) and stops the role, as a missing earlier step does."""
        try:
            return resolve(self.run, self.roles.start, k, outs)
        except StepRefused as e:
            if log_block != 0:
                raise _Stopped()
            logger.error("global step at position %d refused: %s", k - 1, e)
            raise _Stopped(beam.pvalue.TaggedOutput(LOG, LogRecord(k, error=str(e))))
        except LookupError:
            raise _Stopped()

    def _send_rows(self, k: int, b: int, rows: np.ndarray, requests) -> Iterable:
        """Version ``k``'s block ``b``: the whole block to whoever takes it on, and the
        requested rows to each E-step that asked."""
        stage, prefix = self.roles.rows_to[k]
        yield beam.pvalue.TaggedOutput(_to(stage), ("%s:%d" % (prefix, b),
                                                    envelope(ROWS, k, b, rows.data)))
        for m, p, ids in requests:
            sub = np.ascontiguousarray(rows[ids])
            traffic.record_out(sub.nbytes, traffic.STATE)
            yield beam.pvalue.TaggedOutput(_to(self.roles.estep_stage[m]), (
                _key("e", m, p), envelope(PIECE_ROWS, b, len(ids), sub.data)))

    @staticmethod
    def _unpack(values) -> Dict[int, list]:
        out: Dict[int, list] = {}
        for v in values:
            if isinstance(v, ReadTask):
                out.setdefault(TASK, []).append(v)
                continue
            kind, a, b, payload = opened(v)
            out.setdefault(kind, []).append((a, b, payload))
        return out

    @staticmethod
    def _requests(got) -> List[Tuple[int, int, np.ndarray]]:
        return sorted(((m, p, np.frombuffer(payload, np.int64))
                       for (m, p, payload) in got.get(REQUEST, [])), key=lambda t: t[:2])

    def _merged(self, parts, m: int, b: int):
        """A block's statistics pieces, decoded and summed in piece order."""
        parts = sorted(parts, key=lambda t: t[0])
        pieces = [p for p, _, _ in parts]
        n = self.roles.pieces[m]
        want = list(range(n)) if n >= 0 else [-1]
        if pieces != want:
            raise DataIntegrityError("minibatch %d, block %d: statistics of pieces %s "
                                     "arrived, expected %s" % (m, b, pieces, want))
        total = None
        for _, _, payload in parts:
            st = decode_stats(payload)
            total = st if total is None else total.merge(st)
        return total

    def _block_rows(self, got, header: BlockHeader, k: int, b: int) -> np.ndarray:
        rows = got.get(ROWS, [])
        if len(rows) != 1:
            raise DataIntegrityError("version %d, block %d: %d row blocks arrived"
                                     % (k, b, len(rows)))
        lo, hi = header.bounds(b)
        dtype = algorithm_class(header.algorithm).row_dtype(header)
        out = np.frombuffer(rows[0][2], dtype).reshape(hi - lo, header.n_topics).copy()
        traffic.record_in(out.nbytes, traffic.STATE)
        return out

    # -- roles
    def _load(self, b: int, values):
        """Block ``b`` of the window's start: its rows to the first step's owner, the rows
        the first E-steps asked for, the statistics in flight to their owners."""
        start = self.roles.start
        got = self._unpack(values)
        with beam_cost.block_step(self.run, start.position, b):
            with beam_cost.timed("state_delivery"):
                rows = read_rows(scratch_names.rows_path(start.folder, start.position, b))
            yield from self._send_rows(start.position, b, rows, self._requests(got))
            for m in start.pending_minibatches():
                data = read_blob(scratch_names.pending_path(start.folder, start.position, m, b))
                stage, prefix = self.roles.stats_to[m]
                yield beam.pvalue.TaggedOutput(_to(stage), ("%s:%d" % (prefix, b),
                                                            envelope(STATS, -1, m, data)))

    def _read(self, m: int, p: int, values):
        """Piece ``p`` of minibatch ``m`` read from the shards: the documents to the E-step,
        and to each block's owner of the version it reads, the rows it needs."""
        tasks = [v for v in values if isinstance(v, ReadTask)]
        if len(tasks) != 1:
            raise DataIntegrityError("reader %d/%d got %d read tasks" % (m, p, len(tasks)))
        with beam_cost.step(self.run, m):
            with beam_cost.timed("read"):
                batch = read_task(tasks[0])
            rows = needed_rows(batch, self.n_words, self.B)
            data = docs_bytes(batch)
            yield beam.pvalue.TaggedOutput(_to(self.roles.estep_stage[m]), (
                _key("e", m, p), envelope(DOCS, m, p, data)))
            stage, prefix = self.roles.producer[self.roles.version[m]]
            for b, ids in rows_by_block(rows, self.n_words, self.B):
                req = np.ascontiguousarray(ids, np.int64)
                yield beam.pvalue.TaggedOutput(_to(stage), (
                    "%s:%d" % (prefix, b), envelope(REQUEST, m, p, req.data)))

    def _estep(self, m: int, p: int, values, outs):
        header, _ = self._version(self.roles.version[m], outs)
        got = self._unpack(values)
        if len(got.get(DOCS, [])) != 1:
            raise DataIntegrityError("E-step %d/%d: %d document sets arrived"
                                     % (m, p, len(got.get(DOCS, []))))
        with beam_cost.step(self.run, m):
            beam_cost.mark(beam_cost.FIRST_ESTEP)
            payload = got[DOCS][0][2]
            traffic.record_in(len(payload), traffic.READ)
            batch = docs_of(payload)
            with beam_cost.timed("state_delivery"):
                ids = needed_rows(batch, self.n_words, self.B)
                rows = self._gather(header, ids, got.get(PIECE_ROWS, []), m, p)
            cls = algorithm_class(header.algorithm)
            with beam_cost.timed("estep"):
                view = cls.estep_view(header, ids, rows, n_threads=self.n_threads)
                stats = view.local_step(batch)
            self.metrics.report(stats)
            del view, rows
            t0 = time.perf_counter()
            parts = stats.split_by_block(self.B) if self.B > 1 else [stats]
            del stats
            stage, prefix = self.roles.stats_to[m]
            nbytes = 0
            for b in range(len(parts)):
                part, parts[b] = parts[b], None
                data = encode_stats(part)
                nbytes += len(data)
                yield beam.pvalue.TaggedOutput(_to(stage), ("%s:%d" % (prefix, b),
                                                            envelope(STATS, p, m, data)))
            beam_cost.report("stats_encode", time.perf_counter() - t0, nbytes)

    def _gather(self, header: BlockHeader, ids: np.ndarray, parts, m: int, p: int):
        """The piece's rows in row order, from the blocks' answers to its requests."""
        K = header.n_topics
        dtype = algorithm_class(header.algorithm).row_dtype(header)
        want = [b for b, _ in rows_by_block(ids, self.n_words, self.B)]
        parts = sorted(parts, key=lambda t: t[0])
        if [b for b, _, _ in parts] != want:
            raise DataIntegrityError("E-step %d/%d: rows of blocks %s arrived, expected %s"
                                     % (m, p, [b for b, _, _ in parts], want))
        out = np.empty((len(ids), K), dtype)
        at = 0
        for _, n, payload in parts:
            block = np.frombuffer(payload, dtype).reshape(n, K)
            traffic.record_in(block.nbytes, traffic.STATE)
            out[at:at + n] = block
            at += n
        if at != len(ids):
            raise DataIntegrityError("E-step %d/%d: %d rows arrived, %d needed"
                                     % (m, p, at, len(ids)))
        return out

    def _owner(self, m: int, b: int, values, outs):
        """Step ``m`` applied to block ``b`` (version m -> m + 1)."""
        header, info = self._version(m, outs, log_block=b)
        if b == 0 and info is not None:
            yield beam.pvalue.TaggedOutput(LOG, LogRecord(m, info=info))
        got = self._unpack(values)
        cls = algorithm_class(header.algorithm)
        n_docs = self.roles.docs[m]
        with beam_cost.block_step(self.run, m, b):
            rows = self._block_rows(got, header, m, b)
            t0 = time.perf_counter()
            with beam_cost.timed("stats_combine"):
                stats = self._merged(got.get(STATS, []), m, b)
            head = header.to_bytes() if b == 0 else None
            try:
                plan = cls.plan_step(header, stats)
            except StepRefused as e:
                yield beam.pvalue.TaggedOutput(VERSIONS, VersionOut(
                    m, b, None, None, head, str(e), n_docs, 0.0))
                return
            part = cls.update_block(header, plan, b, rows, stats)
            del stats
            seconds = time.perf_counter() - t0
            beam_cost.report("global_step", seconds)
            yield beam.pvalue.TaggedOutput(VERSIONS, VersionOut(
                m, b, part.to_bytes(), plan if b == 0 else None, head, None, n_docs, seconds))
            yield from self._send_rows(m + 1, b, rows, self._requests(got))

    def _final(self, b: int, values, outs):
        """The window's last version: block ``b`` written to the scratch folder with its
        part of the statistics in flight; block 0 also writes the header."""
        roles = self.roles
        end = roles.end
        header, info = self._version(end, outs, log_block=b)
        got = self._unpack(values)
        folder = roles.start.folder
        with beam_cost.block_step(self.run, end - 1, b):
            rows = self._block_rows(got, header, end, b)
            path = scratch_names.rows_path(folder, end, b)
            with beam_cost.timed("publish"):
                write_rows(path, rows)
            yield beam.pvalue.TaggedOutput(LOG, LogRecord(end, written=path))
            by_m: Dict[int, list] = {}
            for piece, m, payload in got.get(STATS, []):
                by_m.setdefault(m, []).append((piece, m, payload))
            for m in roles.pending_after():
                stats = self._merged(by_m.get(m, []), m, b)
                path = scratch_names.pending_path(folder, end, m, b)
                write_blob(path, encode_stats(stats))
                yield beam.pvalue.TaggedOutput(LOG, LogRecord(end, written=path))
            if b == 0:
                scratch_space.write_bytes(scratch_names.header_path(folder, end),
                                          header.to_bytes())
                if info is not None:
                    yield beam.pvalue.TaggedOutput(LOG, LogRecord(end, info=info))
            beam_cost.mark(beam_cost.LAST_STEP)


class WriteLogFn(LeanDoFn):
    """The window's log, one JSON file: every record of every stage."""

    def __init__(self, path: str):
        self.path = path

    def process(self, records):
        records = sorted(list(records), key=lambda r: (r.position, r.written or ""))
        data = json.dumps([r._asdict() for r in records], default=_json_default).encode()
        scratch_space.write_bytes(self.path, data)
        yield self.path


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError("%s is not JSON data" % type(o).__name__)


# ------------------------------------------------------------------------------ the graph

def _reader_tasks(spec):
    """The reader elements of a window from its one graph element: (key, task)."""
    plan, readers = spec
    for m, n_pieces, _ in readers:
        for p in range(n_pieces):
            yield _key("r", m, p), ReadTask(m, p, plan)


def _load_tasks(n_blocks):
    for b in range(n_blocks):
        yield _key("l", b), envelope(TASK, b, 0)


class _StageOf:
    """The partition function of the root elements: a reader's stage is its minibatch's;
    the loads go to the first stage."""

    def __init__(self, reader_stage: Dict[int, int], load_stage: int):
        self.reader_stage, self.load_stage = reader_stage, load_stage

    def __call__(self, kv, n):
        role, m, _ = (kv[0].split(":") + ["0", "0"])[:3]
        return self.reader_stage[int(m)] if role == "r" else self.load_stage


def _as_group(kv):
    return kv[0], [kv[1]]


def build_window(p, schedule: Schedule, read_plan: ReadPlan, run: str, n_words: int,
                 n_threads: Optional[int]):
    """The window's stages in pipeline ``p`` (module docstring); its log is written to
    :func:`log_path` of the window's end."""
    n = schedule.n_stages
    inputs: Dict[int, List[Any]] = {st: [] for st in range(1, n + 1)}
    readers = tuple((m, schedule.pieces[m], st) for m, st in sorted(schedule.reader.items()))
    tasks = (p | "Readers" >> beam.Create([(read_plan, readers)], reshuffle=False)
             | "ReaderTasks" >> beam.FlatMap(_reader_tasks))
    loads = (p | "Loads" >> beam.Create([schedule.start.n_blocks], reshuffle=False)
             | "LoadTasks" >> beam.FlatMap(_load_tasks))
    by_stage = ((tasks, loads) | "Roots" >> beam.Flatten()
                | "RootsByStage" >> beam.Partition(_StageOf(dict(schedule.reader),
                                                            schedule.load), n + 1))
    for st in range(1, n + 1):
        inputs[st].append(by_stage[st])
    if 0 in schedule.reader.values():
        roles0 = schedule.roles(0)
        first = (by_stage[0]
                 | "Stage0Spread" >> beam.Reshuffle()
                 | "Stage0Groups" >> beam.Map(_as_group)
                 | "Stage0" >> beam.ParDo(StageFn(roles0, run, n_words, n_threads),
                                          []).with_outputs(
                     LOG, VERSIONS, *[_to(t) for t in roles0.targets]))
        for t in roles0.targets:
            inputs[t].append(first[_to(t)])
    versions: Dict[int, Any] = {}      # stage -> its owners' VersionOut
    logs = []
    for st in range(1, n + 1):
        grouped = (tuple(inputs[st]) | ("In%d" % st) >> beam.Flatten()
                   | ("Group%d" % st) >> beam.GroupByKey())
        sources = sorted({schedule.owner[v - 1] for v in schedule.versions_at(st)
                          if v != schedule.first})
        side = ([versions[x] for x in sources] if sources else
                [p | ("NoVersions%d" % st) >> beam.Create([], reshuffle=False)])
        side = side[0] if len(side) == 1 else tuple(side) | ("Versions%d" % st) >> beam.Flatten()
        roles = schedule.roles(st)
        out = grouped | ("Stage%d" % st) >> beam.ParDo(
            StageFn(roles, run, n_words, n_threads),
            beam.pvalue.AsList(side)).with_outputs(LOG, VERSIONS,
                                                   *[_to(t) for t in roles.targets])
        versions[st] = out[VERSIONS]
        logs.append(out[LOG])
        for t in roles.targets:
            inputs[t].append(out[_to(t)])
    path = scratch_names.window_log_path(schedule.start.folder, schedule.end)
    return (tuple(logs) | "Log" >> beam.Flatten()
            | "LogAll" >> beam.combiners.ToList()
            | "WriteLog" >> beam.ParDo(WriteLogFn(path)))


# ------------------------------------------------------------------------------ after a window

@dataclass
class WindowEnd:
    """What the driver reads after a window: the steps' infos up to the first missing or
    refused one, the error ``(step, message)`` or None, and the window's end files (None
    unless every one was written)."""
    infos: List[Dict[str, Any]]
    error: Optional[Tuple[int, str]]
    start: Optional[Start]
    header: Optional[BlockHeader]


def collect(schedule: Schedule) -> WindowEnd:
    """Read the window's log (module docstring)."""
    sched = schedule
    folder = sched.start.folder
    try:
        records = json.loads(scratch_space.read_bytes(
            scratch_names.window_log_path(folder, sched.end)))
    except (OSError, ValueError) as e:
        logger.debug("window log unreadable: %s", e)
        records = []
    infos = {r["position"]: r["info"] for r in records if r.get("info")}
    errors = {r["position"]: r["error"] for r in records if r.get("error")}
    written = {r["written"] for r in records if r.get("written")}
    out, error = [], None
    for pos in range(sched.first + 1, sched.end + 1):
        if pos in errors:
            error = (pos, errors[pos])
            break
        if pos not in infos:
            error = (pos, "the pipeline produced no state for this step")
            break
        out.append(infos[pos])
    done = error is None
    end = Start(folder, sched.end, sched.start.n_blocks, sched.end, len(sched.pending_after()))
    want = set(start_paths(end)) - {scratch_names.header_path(folder, sched.end)}
    if not done or not want <= written:
        return WindowEnd(out, error or (sched.end, "the window's last stage wrote no state"),
                         None, None)
    header = decode_header(read_blob(scratch_names.header_path(folder, sched.end)))
    return WindowEnd(out, None, end, header)


def end_sources(start: Start) -> List[str]:
    """The row-block files of a window's end (what the checkpoint is published from)."""
    return [scratch_names.rows_path(start.folder, start.position, b)
            for b in range(start.n_blocks)]


def pending_of(start: Start):
    """The statistics in flight of a window's end as ``Session.publish_blocks`` takes them
    (None when there are none)."""
    if not start.pending_n:
        return None
    return start.pending_first, start.pending_n, read_pending(start)


def read_pending(start: Start) -> Dict[str, np.ndarray]:
    """The statistics in flight of a window's end files as the checkpoint's arrays
    (``pending.<m>.<b>``: the encoded statistics of each block, data only)."""
    out = {}
    for m in start.pending_minibatches():
        for b in range(start.n_blocks):
            data = decode_stats(read_blob(scratch_names.pending_path(start.folder,
                                                                     start.position, m, b)))
            out[array_name(m, b)] = as_bytes_array(data.to_bytes())
    return out


def load_algorithm(start: Start, header: BlockHeader):
    """The whole algorithm of a window's end files (for the driver's evaluation)."""
    cls = algorithm_class(header.algorithm)
    rows = [read_rows(scratch_names.rows_path(start.folder, start.position, b))
            for b in range(start.n_blocks)]
    return cls.from_shards(header, rows)


# ------------------------------------------------------------------------------ the driver

class LazyAlgorithm:
    """The state a window ended with, read from its end files only when something needs
    the whole model (an evaluation); its step and documents seen come from the header."""

    def __init__(self, start: Start, header: BlockHeader):
        self._start, self._header, self._algo = start, header, None
        self._checkpoint: Optional[str] = None
        self.step = int(header.counters.get("step", 0))
        self.docs_seen = int(header.counters.get("docs_seen", 0))
        self.name = header.algorithm

    def published(self, checkpoint: Optional[str]) -> None:
        """The end files are about to go: read the state from ``checkpoint`` (the one
        published from them) from now on."""
        self._checkpoint = checkpoint

    def load(self):
        if self._algo is None:
            if self._checkpoint is not None:
                self._algo = algorithm_from_state(TopicState.load(self._checkpoint,
                                                                  row_order=True), take=True)
            else:
                self._algo = load_algorithm(self._start, self._header)
        return self._algo

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.load(), name)


@dataclass
class RemoteWindows:
    """The remote exchange's loop over windows (:class:`pipelines.training.beam_train.BeamRunner`
    hands it the run's set-up): each window one pipeline (:func:`build_window`), then the
    checkpoint published from the window's end files and the session's bookkeeping
    (:func:`pipelines.training.beam_run.after_window`). A window whose step is refused is
    run again up to the step before, so the last good state is published before the run
    stops with the refusal."""
    setup: Any                  # beam_run.WindowSetup
    seed: int
    minibatch: int
    staleness: int
    warmup: int
    run_key: str
    scratch: str
    run_pipeline: Any           # beam_window.run_pipeline
    plan_steps: Any             # beam_plan.plan_steps

    def windows(self, algorithm, ses):
        st = self.setup
        stop, M = st.stop, st.M
        counters_total: Dict[str, int] = {}
        windows = 0
        n_windows = planned_windows(ses, stop, M)
        times = PhaseTimes()
        start = times.timed("state_delivery", write_start, algorithm, self.scratch,
                            ses.position, staleness_rule.in_flight(ses.position,
                                                                   self.staleness, self.warmup))
        n_words = int(algorithm.n_words)
        current = algorithm
        while ses.position < stop and not ses.passes_stopped:
            w_start = time.time()
            end = window_end(ses, stop, M)     # --passes auto: windows end at pass ends
            got, counters, steps = self._window(start, end, n_words, times,
                                                run_steps=stop - ses.position
                                                if windows == 0 else None)
            if got.error is not None and got.infos:
                # publish the last good state: the same window up to the refused step
                good = start.position + len(got.infos)
                logger.info("re-running the window up to step %d, before the refused one",
                            good)
                redo, c2, _ = self._window(start, good, n_words, times)
                counters = {k: counters.get(k, 0) + c2.get(k, 0)
                            for k in set(counters) | set(c2)}
                if redo.error is None:
                    got = WindowEnd(redo.infos, got.error, redo.start, redo.header)
                else:
                    got = WindowEnd([], redo.error, None, None)
            for k, v in counters.items():
                counters_total[k] = counters_total.get(k, 0) + v
            windows += 1
            if got.start is not None:
                current = LazyAlgorithm(got.start, got.header)

            def publish(_, pos, got=got):
                return times.timed("checkpoint", ses.publish_blocks, got.header,
                                   end_sources(got.start), pos, pending_of(got.start))
            try:
                after_window(ses, current, steps, got.infos, got.error, publish)
            finally:
                ses.write(times.record(len(got.infos), time.time() - w_start, window=windows,
                                       graph_bytes_per_step=times.nbytes.get(
                                           "pipeline_build", 0) / max(1, len(steps)),
                                       runner=st.cfg.describe(), workers=st.cfg.num_workers,
                                       parallel=["read", "estep", "stats_encode",
                                                 "state_delivery"]))
                times = PhaseTimes()
            if got.start is not None:
                scratch_space.remove_files(start_paths(start) + [
                    scratch_names.window_log_path(self.scratch, got.start.position)])
                start = got.start
            log_window(ses, windows, n_windows, steps[:len(got.infos)], counters, stop,
                        time.time() - w_start, int(current.docs_seen))
        return current, windows, counters_total

    def _window(self, start: Start, end: int, n_words: int, times, run_steps=None):
        st = self.setup
        steps = self.plan_steps(st.files, st.sizes, seed=self.seed, minibatch=self.minibatch,
                                start=start.position, stop=end, pieces_per_minibatch=st.pieces)
        ahead = self.plan_steps(st.files, st.sizes, seed=self.seed, minibatch=self.minibatch,
                                start=end, stop=end + staleness_rule.in_flight(
                                    end, self.staleness, self.warmup),
                                pieces_per_minibatch=st.pieces)
        schedule = Schedule.of_steps(start, steps, ahead, self.staleness, self.warmup)
        read_plan = steps[0].read_plan
        logger.debug("remote window %d..%d: %s", start.position, end, schedule.describe())

        def build(p):
            build_window(p, schedule, read_plan, self.run_key, n_words, st.n_threads)

        counters = self.run_pipeline(st.cfg, build, times, run_steps, len(steps))
        return collect(schedule), counters, steps
