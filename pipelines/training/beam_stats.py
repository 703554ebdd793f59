"""A thin ``beam.CombineFn`` around an algorithm's :class:`~lda_core.algorithms.algorithm.SuffStats`, and a
raw-bytes coder for statistics.

The maths of merging lives in ``lda_core`` (``SuffStats.merge``: float64 sums, sparse column
blocks for online VB); this module only adapts it to Beam:

* :func:`encode_stats` / :func:`decode_stats` and :class:`SuffStatsCoder` (registered for
  the ``SuffStats`` type hint): the class's ``to_bytes`` / ``from_bytes`` (arrays and a
  checksum: data only, never pickle). The class is named in a short header -- only
  :class:`~lda_core.algorithms.algorithm.SuffStats` subclasses defined in ``lda_core`` are accepted
  when decoding -- so any algorithm's statistics round-trip (a 20 MB array costs ~9 ms to encode as raw bytes vs
  ~110 ms through the default pickling coder). The coders estimate sizes from ``nbytes``:
  Beam samples element sizes for its counters, and the default estimate encodes the element
  (measured: ten encodes of every minibatch's statistics per step).
* :class:`StatsCombineFn`: create / add / merge / extract. Each element is one *piece* of a
  minibatch (``piece id``, statistics). With ``deterministic=True`` (default) the accumulator
  keeps the pieces apart and ``extract_output`` merges them in piece-id order, so the float64
  sums are bit-identical whatever the bundling, the worker count or the order Beam delivers
  the pieces in (that is what makes a resumed run end with *exactly* the same state as an
  uninterrupted one). Memory: one statistics block per piece of the minibatch (the trainer
  cuts a minibatch into a few pieces per worker). With ``deterministic=False`` pieces are summed
  as they arrive (bounded memory, results equal to float64 rounding); use that with
  ``with_fanout`` for very many workers.

No shuffle sits between the E-step and this combine: ``CombineGlobally`` is lifted, so each
bundle pre-combines its own pieces and only accumulators cross worker boundaries.

Spilled pieces (:class:`SpilledStats`): when every worker shares a file system with the others
(the local runners), the E-step writes its piece's encoded statistics to a scratch file and
only the path travels through Beam. Measured here with two worker processes: a minibatch's
pieces (~10 MB each at K=100) going through Beam's gRPC data plane to the runner and on to the
combining worker cost ~1 s per step, several times the E-step itself; a file in ``/dev/shm``
is written and read back in a few ms. The combine treats a spilled piece like any other and
loads it when it merges (``extract_output``), in the same piece order.

Every statistics byte encoded, decoded, spilled or read back here is counted (and throttled
when asked) as ``statistics`` by :mod:`lda_core.storage.traffic`: :func:`encode_stats` /
:func:`decode_stats` (so every coder, the accumulators' included, and the hand-over to the
driver), :func:`spill_stats` and the reads of a :class:`SpilledStats` file.
"""
from __future__ import annotations

import importlib
import struct
import time
from typing import Any, Dict, NamedTuple, Optional, Tuple

import apache_beam as beam
from apache_beam.coders import Coder

from lda_core.algorithms.algorithm import SuffStats
from lda_core.storage import traffic
from pipelines.training import beam_cost

_MAGIC_BYTES = b"SB"     # stats serialised by the class's own to_bytes
_MAGIC_SPILLED = b"SF"   # a SpilledStats reference (the statistics are in a file)


class SpilledStats(NamedTuple):
    """Statistics written to a scratch file every worker can read (see module docstring)."""
    path: str
    nbytes: int

    def load(self) -> SuffStats:
        """The statistics, each array read from the file straight into its own allocation
        (the class's ``read_from``: no buffer of the file's bytes)."""
        return self._read(lambda cls, f, size: cls.read_from(f, size, verify=False))

    def merge_into(self, total: SuffStats) -> SuffStats:
        """``total.merge(self.load())`` without loading the piece whole: the class's
        ``merge_from`` adds it as it is read."""
        def into(cls, f, size):
            return (total.merge_from(f, size, verify=False) if cls is type(total)
                    else total.merge(cls.read_from(f, size, verify=False)))
        return self._read(into)

    def load_reserved(self, ids) -> SuffStats:
        """``load()`` then ``reserve_rows(ids)``, the reserved layout allocated first
        (the class's ``read_reserved``)."""
        return self._read(lambda cls, f, size: cls.read_reserved(f, size, ids, verify=False))

    def row_ids(self):
        """The statistics' ``row_ids`` (``SuffStats.read_row_ids``), read from the file."""
        return self._read(lambda cls, f, size: cls.read_row_ids(f, size))

    def segment(self):
        """(statistics class, path, offset, size): where the class's ``write_to`` bytes lie
        (counted as read whole: whoever is handed the segment reads it)."""
        return self._read(lambda cls, f, size: (cls, self.path, f.tell(), size), whole=True)

    def _read(self, fn, whole: bool = False):
        import os
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(4)
            if bytes(head[:2]) != _MAGIC_BYTES or len(head) < 4:
                raise ValueError("%s: not an encoded statistics file (header %r)"
                                 % (self.path, bytes(head[:2])))
            (n,) = struct.unpack("<H", head[2:4])
            cls = _load_class(f.read(n).decode())
            out = fn(cls, f, size - 4 - n)
            traffic.record_in(size if whole else f.tell(), traffic.STATISTICS)
            return out


def spill_stats(stats: SuffStats, path: str) -> SpilledStats:
    """Write ``stats`` (encoded: :func:`encode_stats`) to the local scratch file ``path``,
    published by a rename; returns the reference. The header and the body are written one
    after the other (no third copy of a large block in memory); neither fsynced nor
    checksummed (``write_to(checksum=False)``, read back with ``verify=False``): a scratch
    file lives only while its window runs, in the run's private folder, as the scratch
    states do."""
    import os
    import uuid
    head = _encode_head(stats)
    tmp = "%s.tmp-%s" % (path, uuid.uuid4().hex)
    try:
        with open(tmp, "wb") as f:
            f.write(head)
            nbytes = len(head) + stats.write_to(f, checksum=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    traffic.record_out(nbytes, traffic.STATISTICS)
    return SpilledStats(path, nbytes)


def unspill(stats):
    """The statistics themselves, loading a :class:`SpilledStats` reference."""
    return stats.load() if isinstance(stats, SpilledStats) else stats


def _class_path(obj) -> str:
    return "%s:%s" % (type(obj).__module__, type(obj).__qualname__)


def _load_class(path: str):
    """The statistics class named ``module:Class``: a SuffStats subclass of ``lda_core``
    only (a header naming anything else is refused before any import)."""
    mod, _, name = path.partition(":")
    if not (mod.startswith("lda_core.") and name.isidentifier()):
        raise ValueError("encoded statistics name %r, not a statistics class of lda_core"
                         % path)
    obj = getattr(importlib.import_module(mod), name, None)
    if not (isinstance(obj, type) and issubclass(obj, SuffStats)):
        raise ValueError("encoded statistics name %r, not a statistics class" % path)
    return obj


def encode_stats(stats: SuffStats) -> bytes:
    """``SuffStats`` -> bytes (the class's ``to_bytes``); a :class:`SpilledStats` reference
    -> its path."""
    if isinstance(stats, SpilledStats):
        out = _MAGIC_SPILLED + struct.pack("<q", int(stats.nbytes)) + stats.path.encode()
    else:
        out = _encode_head(stats) + stats.to_bytes()
    traffic.record_out(len(out), traffic.STATISTICS)
    return out


def _encode_head(stats: SuffStats) -> bytes:
    """The header of :func:`encode_stats` naming the class (its ``to_bytes`` follows)."""
    if not isinstance(stats, SuffStats):
        raise TypeError("cannot encode %s: not a SuffStats" % type(stats).__name__)
    cls = _class_path(stats).encode()
    return _MAGIC_BYTES + struct.pack("<H", len(cls)) + cls


def decode_stats(data: bytes) -> SuffStats:
    """Inverse of :func:`encode_stats`."""
    data = memoryview(data)
    traffic.record_in(data.nbytes, traffic.STATISTICS)
    magic = bytes(data[:2])
    if magic == _MAGIC_BYTES:
        (n,) = struct.unpack("<H", data[2:4])
        cls = _load_class(bytes(data[4:4 + n]).decode())
        return cls.from_bytes(data[4 + n:])      # a view: no copy of a large block
    if magic == _MAGIC_SPILLED:
        (nb,) = struct.unpack("<q", data[2:10])
        return SpilledStats(bytes(data[10:]).decode(), nb)
    raise ValueError("not an encoded statistics block (header %r)" % magic)


def encode_piece(piece_id: int, stats: SuffStats) -> bytes:
    """One E-step output element: (piece id, statistics) as raw bytes."""
    return struct.pack("<q", int(piece_id)) + encode_stats(stats)


def decode_piece(data: bytes) -> Tuple[int, SuffStats]:
    (pid,) = struct.unpack("<q", data[:8])
    return pid, decode_stats(memoryview(data)[8:])


def stats_nbytes(stats) -> int:
    """A cheap size estimate (Beam samples element sizes for its counters; the default
    estimate encodes the element, i.e. copies a statistics block of up to V x K float64)."""
    if isinstance(stats, SpilledStats):
        return len(stats.path) + 16
    nb = getattr(stats, "nbytes", None)
    if callable(nb):
        nb = nb()
    if isinstance(nb, int):
        return nb + 64
    total = 64
    for v in vars(stats).values() if hasattr(stats, "__dict__") else ():
        total += int(getattr(v, "nbytes", 0) or 0)
    return total


def _costed(phase: str, fn, arg):
    """``fn(arg)``, its seconds (and the encoded bytes) reported as ``phase``'s cost."""
    t0 = time.perf_counter()
    out = fn(arg)
    beam_cost.report(phase, time.perf_counter() - t0,
                     len(out) if phase == "stats_encode" else None)
    return out


class SuffStatsCoder(Coder):
    """Raw-bytes coder for any :class:`SuffStats` (``to_bytes``, see module doc)."""

    def encode(self, value) -> bytes:
        return _costed("stats_encode", encode_stats, value)

    def decode(self, data: bytes):
        return _costed("stats_decode", decode_stats, data)

    def estimate_size(self, value) -> int:
        return stats_nbytes(value)

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return SuffStats

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


# any PCollection declared to hold SuffStats (or (key, SuffStats) pairs) uses the raw coder
beam.coders.registry.register_coder(SuffStats, SuffStatsCoder)


class StatsAccumulator:
    """The combine's accumulator: pieces kept apart (deterministic) or a running sum."""

    __slots__ = ("pieces", "total")

    def __init__(self, pieces: Optional[Dict[int, SuffStats]] = None,
                 total: Optional[SuffStats] = None):
        self.pieces = pieces if pieces is not None else {}
        self.total = total


class StatsAccumulatorCoder(Coder):
    """Raw-bytes coder for :class:`StatsAccumulator` (length-prefixed encoded pieces)."""

    def encode(self, acc: StatsAccumulator) -> bytes:
        return _costed("stats_encode", self._encode, acc)

    def decode(self, data: bytes) -> StatsAccumulator:
        return _costed("stats_decode", self._decode, data)

    @staticmethod
    def _encode(acc: StatsAccumulator) -> bytes:
        parts = []
        items = list(acc.pieces.items())
        if acc.total is not None:
            items.append((-1, acc.total))
        parts.append(struct.pack("<I", len(items)))
        for pid, st in items:
            b = encode_piece(pid, st)
            parts.append(struct.pack("<Q", len(b)))
            parts.append(b)
        return b"".join(parts)

    @staticmethod
    def _decode(data: bytes) -> StatsAccumulator:
        data = memoryview(data)
        (n,) = struct.unpack("<I", data[:4])
        off = 4
        acc = StatsAccumulator()
        for _ in range(n):
            (ln,) = struct.unpack("<Q", data[off:off + 8])
            off += 8
            pid, st = decode_piece(data[off:off + ln])
            off += ln
            if pid < 0:
                acc.total = st
            else:
                acc.pieces[pid] = st
        return acc

    def is_deterministic(self) -> bool:
        return False

    def estimate_size(self, acc: StatsAccumulator) -> int:
        n = sum(stats_nbytes(s) for s in acc.pieces.values())
        return n + (stats_nbytes(acc.total) if acc.total is not None else 0) + 16

    def to_type_hint(self):
        return StatsAccumulator

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


class StatsCombineFn(beam.CombineFn):
    """Sum per-piece statistics of one minibatch (see module docstring).

    Input elements are ``(piece id, SuffStats)`` pairs (or the same as ``bytes`` from
    :func:`encode_piece`); the output is the merged ``SuffStats``."""

    def __init__(self, deterministic: bool = True):
        self.deterministic = deterministic

    def create_accumulator(self) -> StatsAccumulator:
        return StatsAccumulator()

    def _add(self, acc: StatsAccumulator, pid: int, st: SuffStats) -> StatsAccumulator:
        if self.deterministic:
            if pid in acc.pieces:
                raise ValueError("statistics piece %d arrived twice" % pid)
            acc.pieces[pid] = st
        else:
            st = unspill(st)
            acc.total = st if acc.total is None else acc.total.merge(st)
        return acc

    def add_input(self, acc: StatsAccumulator, element) -> StatsAccumulator:
        if isinstance(element, (bytes, memoryview)):
            pid, st = decode_piece(element)
        else:
            pid, st = element
        return self._add(acc, int(pid), st)

    def merge_accumulators(self, accumulators) -> StatsAccumulator:
        out = None
        for acc in accumulators:
            if out is None:
                out = acc
                continue
            for pid, st in acc.pieces.items():
                self._add(out, pid, st)
            if acc.total is not None:
                total = unspill(acc.total)
                out.total = total if out.total is None else unspill(out.total).merge(total)
        return out if out is not None else self.create_accumulator()

    def compact(self, acc: StatsAccumulator) -> StatsAccumulator:
        return acc

    def extract_output(self, acc: StatsAccumulator) -> Optional[SuffStats]:
        return merge_in_order(acc.pieces, acc.total)

    def get_accumulator_coder(self):
        return StatsAccumulatorCoder()


def merge_in_order(pieces: Dict[int, Any], total: Optional[Any] = None) -> Optional[SuffStats]:
    """``total`` (if any) merged with the pieces in piece-id order (canonical order:
    bundling-independent sums): what :class:`StatsCombineFn` outputs. Loading spilled pieces
    and merging are reported as the ``stats_decode`` / ``stats_combine`` costs."""
    t0 = time.perf_counter()
    total = unspill(total)
    order = sorted(pieces)
    if total is not None:
        _reserve(total, [pieces[p] for p in order])
    t_dec, t_merge = time.perf_counter() - t0, 0.0
    for i, pid in enumerate(order):
        t1 = time.perf_counter()
        st = pieces[pid]
        if total is not None and isinstance(st, SpilledStats):
            total = st.merge_into(total)   # read and added block by block: one cost
            t_merge += time.perf_counter() - t1
            continue
        rest = _row_ids([pieces[p] for p in order[i + 1:]]) if total is None else None
        if rest is not None and len(rest) and isinstance(st, SpilledStats):
            total = st.load_reserved(rest)   # sized for all the pieces before it is filled
            t_merge += time.perf_counter() - t1
            continue
        st = unspill(st)
        t2 = time.perf_counter()
        if total is None:
            total = st
            if rest is not None:
                total.reserve_rows(rest)
        else:
            total = total.merge(st)
        st = None                        # the piece is freed before the next one is read
        t_dec, t_merge = t_dec + t2 - t1, t_merge + time.perf_counter() - t2
    beam_cost.report("stats_decode", t_dec)
    beam_cost.report("stats_combine", t_merge)
    return total


def sum_in_order(pieces: Dict[int, Any]):
    """What :func:`merge_in_order` of ``pieces`` gives to a global step, without the sum
    held whole where possible: when every piece is spilled and their class sums files lazily
    (``SuffStats.lazy_sum``), that lazy sum (same values, formed block by block by the
    global step itself); otherwise the merged statistics."""
    order = sorted(pieces)
    if order and all(isinstance(pieces[p], SpilledStats) for p in order):
        t0 = time.perf_counter()
        segs = [pieces[p].segment() for p in order]
        lazy = (segs[0][0].lazy_sum([s[1:] for s in segs], verify=False)
                if all(s[0] is segs[0][0] for s in segs) else None)
        beam_cost.report("stats_decode", time.perf_counter() - t0)
        if lazy is not None:
            return lazy
    return merge_in_order(pieces)


def _reserve(total: SuffStats, rest) -> None:
    """Size ``total`` once for the rows of the pieces ``rest`` still to be merged into it
    (``SuffStats.reserve_rows``), so the sum is not reallocated as it grows."""
    ids = _row_ids(rest)
    if ids is not None:
        total.reserve_rows(ids)


def _row_ids(pieces):
    """The sorted union of the pieces' ``row_ids``; None if a piece is not row-structured."""
    import numpy as np
    ids = []
    for p in pieces:
        r = p.row_ids()
        if r is None:
            return None
        ids.append(r)
    return np.unique(np.concatenate(ids)).astype(np.int32) if ids else np.zeros(0, np.int32)
