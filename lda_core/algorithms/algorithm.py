"""The interfaces every algorithm implements, so any runner can drive any algorithm.

Two families:

* :class:`StochasticAlgorithm` — online VB, batch VB, SCVB0, sparse Gibbs-within-VB. Training
  alternates a *local step* (frozen global state, batch of documents -> sufficient statistics;
  embarrassingly parallel, statistics merge associatively) and a *global step* (state, summed
  statistics -> new state). The in-process trainer calls them in a loop; the Beam trainer runs
  ``local_step`` in parallel DoFns, merges the statistics in a ``CombineFn`` and calls
  ``global_step`` on the driver. Neither runner contains maths of its own.
* :class:`SequentialSampler` — collapsed Gibbs, o-LDA, incremental Gibbs, particle filter:
  documents are consumed in stream order by one worker.

Capabilities are declared on the class, never guessed from a name: ``sequential`` (consumes
documents in stream order with ``process``; a :class:`SequentialSampler`),
``accumulates_passes`` (one global step per pass over the corpus: batch VB) and
``whole_corpus`` (holds the whole corpus and sweeps it: batch collapsed Gibbs, trained with
``fit``) and ``variational_gamma`` (``local_step(batch, return_gamma=True, salt=...)`` gives
the documents' variational γ: the VB algorithms). Runners ask
:mod:`lda_core.training.session` (``is_sequential`` ...).

Every algorithm declares its settings once, as a :class:`~lda_core.algorithms.params.ParamSpec`
(``SPEC``): the constructor takes them as keywords, ``params()`` records them, and
``from_state`` rebuilds them; every ``from_state`` takes ``n_threads`` and ``take`` and every
``to_state`` takes ``copy``, so callers never ask which arguments a class accepts.

Both expose ``topic_word()`` (K x V, rows sum to 1) for the shared evaluator in
``lda_core.evaluation.metrics`` and convert to/from :class:`lda_core.storage.state.TopicState` for checkpoints.
"""
from __future__ import annotations

import abc
import importlib
import json
import struct
import zlib
from typing import Any, ClassVar, Dict, Optional, Sequence, Tuple

import numpy as np

from lda_core.algorithms.params import ParamSpec
from lda_core.docbatch import DocBatch
from lda_core.errors import UsageError


class SuffStats(abc.ABC):
    """A framework-free accumulator of a local step's statistics (create/add/merge/extract).

    ``merge`` must be associative and commutative up to float rounding (sums in float64).
    Statistics travel between workers and through scratch files as data only:
    ``to_bytes`` / ``from_bytes`` (plain little-endian arrays, a JSON header and a CRC-32 of
    the payload; :func:`pack_arrays`), never pickled. Counters every algorithm reports
    (:data:`COUNTERS`, added by :meth:`merge_counters`): ``n_docs``, ``n_tokens``,
    ``n_empty`` (skipped documents), ``n_iterations`` (E-step iterations summed over
    documents), ``n_capped`` (documents that hit the iteration cap)."""

    COUNTERS: ClassVar[Tuple[str, ...]] = ("n_docs", "n_tokens", "n_empty", "n_iterations",
                                           "n_capped")
    n_docs: int = 0
    n_tokens: int = 0
    n_empty: int = 0
    n_iterations: int = 0
    n_capped: int = 0

    @abc.abstractmethod
    def merge(self, other: "SuffStats") -> "SuffStats":
        """Add ``other`` into ``self`` and return ``self``."""

    def merge_counters(self, other: "SuffStats") -> None:
        """Add ``other``'s :data:`COUNTERS` into ``self`` (every ``merge`` calls this)."""
        for c in self.COUNTERS:
            setattr(self, c, int(getattr(self, c)) + int(getattr(other, c)))

    def counters(self) -> Dict[str, int]:
        return {c: int(getattr(self, c)) for c in self.COUNTERS}

    @abc.abstractmethod
    def to_bytes(self) -> bytes:
        """The statistics as data (no pickle); :meth:`from_bytes` is the inverse."""

    @classmethod
    @abc.abstractmethod
    def from_bytes(cls, data: bytes) -> "SuffStats":
        ...

    # The file forms below are for scratch files: ``checksum=False`` writes a frame without
    # its CRC-32 where the writer's own folder holds it only while a window runs (as the
    # scratch states), and ``verify=False`` reads one without checking it; a frame without a
    # CRC-32 is refused wherever one is verified.
    def write_to(self, f, checksum: bool = True) -> int:
        """Write :meth:`to_bytes`'s bytes to the binary file ``f``; returns their number.
        Classes with large arrays write them straight from their memory
        (:func:`write_arrays`; only those can leave the CRC-32 out)."""
        b = self.to_bytes()
        f.write(b)
        return len(b)

    @classmethod
    def read_from(cls, f, size: int, verify: bool = True) -> "SuffStats":
        """Inverse of :meth:`write_to`: the statistics from the next ``size`` bytes of
        ``f``."""
        return cls.from_bytes(f.read(size))

    # Row-structured statistics (a block of rows per word) let a merge of many pieces size
    # its sum once: ``reserve_rows`` with the union of the pieces' ``row_ids`` first, so
    # each ``merge`` adds in place instead of reallocating the growing sum. The sums, their
    # order and the resulting layout are those of merging without it.
    def row_ids(self) -> Optional[np.ndarray]:
        """Sorted ids of the rows these statistics hold; None when not row-structured."""
        return None

    @classmethod
    def read_row_ids(cls, f, size: int) -> Optional[np.ndarray]:
        """:meth:`row_ids` of the statistics :meth:`write_to` wrote to the next ``size``
        bytes of ``f``, reading only as far as needed."""
        return None

    def reserve_rows(self, ids: np.ndarray) -> None:
        """Make room (zero rows) for the sorted unique row ids ``ids``."""

    @classmethod
    def read_reserved(cls, f, size: int, ids: np.ndarray, verify: bool = True) -> "SuffStats":
        """:meth:`read_from` then :meth:`reserve_rows` ``(ids)``; row-structured classes
        allocate the reserved layout first and add the rows as they are read."""
        st = cls.read_from(f, size, verify)
        st.reserve_rows(ids)
        return st

    def merge_from(self, f, size: int, verify: bool = True) -> "SuffStats":
        """:meth:`merge` of the statistics :meth:`write_to` wrote to the next ``size`` bytes
        of ``f``; row-structured classes add the rows as they are read."""
        return self.merge(type(self).read_from(f, size, verify))

    @classmethod
    def lazy_sum(cls, parts: Sequence[Tuple[str, int, int]],
                 verify: bool = True) -> Optional[Any]:
        """The sum, in the order given, of the statistics :meth:`write_to` wrote to the file
        segments ``parts`` = ``[(path, offset, size)]``, as an object the algorithm's
        ``global_step`` takes in place of the merged statistics without the sum ever being
        held whole; None when the class has no such form (merge the pieces instead)."""
        return None


def _packed_prefix(magic: bytes, header: Dict[str, Any],
                   arrays: Sequence[Tuple[str, str, np.ndarray]], checksum: bool = True
                   ) -> Tuple[bytes, list]:
    """(``magic | u32 header length | JSON header``, the arrays as contiguous little-endian
    arrays) of :func:`pack_arrays`; the CRC-32 is taken over the arrays' own memory (null
    without ``checksum``)."""
    out, spec, crc = [], [], 0 if checksum else None
    for name, dt, a in arrays:
        a = np.ascontiguousarray(a, dtype=dt)
        spec.append([name, dt, list(a.shape)])
        if checksum:
            crc = zlib.crc32(raw_bytes(a), crc)
        out.append(a)
    h = json.dumps(dict(header, arrays=spec, crc32=crc), separators=(",", ":")).encode()
    return magic + struct.pack("<I", len(h)) + h, out


def raw_bytes(a: np.ndarray) -> memoryview:
    """The bytes of the contiguous array ``a`` as a flat memoryview (no copy)."""
    return memoryview(a.reshape(-1).view(np.uint8))


def pack_arrays(magic: bytes, header: Dict[str, Any],
                arrays: Sequence[Tuple[str, str, np.ndarray]]) -> bytes:
    """``magic | u32 header length | JSON header | arrays`` with the arrays' names, dtypes
    (little-endian, e.g. ``"<f8"``), shapes and a CRC-32 of their bytes in the header."""
    prefix, out = _packed_prefix(magic, header, arrays)
    return b"".join([prefix] + [raw_bytes(a) for a in out])


def write_arrays(f, magic: bytes, header: Dict[str, Any],
                 arrays: Sequence[Tuple[str, str, np.ndarray]], checksum: bool = True) -> int:
    """Write :func:`pack_arrays`'s bytes to the binary file ``f`` straight from the arrays'
    memory (no byte copy of a large block); returns the number of bytes written.
    ``checksum=False``: no CRC-32 (a scratch file; see :meth:`SuffStats.write_to`)."""
    prefix, out = _packed_prefix(magic, header, arrays, checksum)
    f.write(prefix)
    for a in out:
        f.write(raw_bytes(a))
    return len(prefix) + sum(a.nbytes for a in out)


_DTYPES = ("<i4", "<i8", "<f4", "<f8")


def _parse_prefix(magic: bytes, head: bytes, size: int):
    """(header length, header bytes needed) check of the first ``len(magic) + 4`` bytes."""
    if bytes(head[:len(magic)]) != magic:
        raise ValueError("not a %s statistics byte string (bad magic)" % magic.decode())
    if len(head) < len(magic) + 4:
        raise ValueError("truncated statistics byte string")
    (hlen,) = struct.unpack("<I", head[len(magic):len(magic) + 4])
    if len(magic) + 4 + hlen > size:
        raise ValueError("truncated statistics byte string (header)")
    return hlen


def _parse_header(raw: bytes):
    """(header, [(name, dtype, shape, nbytes)], crc) of a packed JSON header."""
    try:
        header = json.loads(bytes(raw).decode("utf-8"))
        spec = [(str(n), str(dt), [int(x) for x in shape]) for n, dt, shape in header["arrays"]]
        crc_want = None if header["crc32"] is None else int(header["crc32"])
    except (ValueError, TypeError, KeyError, RecursionError) as e:
        raise ValueError("damaged statistics header: %s" % e) from None
    out = []
    for name, dt, shape in spec:
        if dt not in _DTYPES or any(x < 0 for x in shape):
            raise ValueError("damaged statistics header: array %s %s %s" % (name, dt, shape))
        out.append((name, dt, shape, int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize))
    return header, out, crc_want


def unpack_arrays(magic: bytes, data: bytes) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """Inverse of :func:`pack_arrays`: (header, arrays); ValueError naming what is wrong for
    a truncated, damaged or foreign byte string (sizes checked before any allocation)."""
    mv = memoryview(data)
    hlen = _parse_prefix(magic, mv[:len(magic) + 4], len(mv))
    pos = len(magic) + 4
    header, spec, crc_want = _parse_header(mv[pos:pos + hlen])
    _check_has_crc(crc_want)
    pos += hlen
    arrays: Dict[str, np.ndarray] = {}
    crc = 0
    for name, dt, shape, n in spec:
        if pos + n > len(mv):
            raise ValueError("truncated statistics byte string (array %s)" % name)
        crc = zlib.crc32(mv[pos:pos + n], crc)
        arrays[name] = np.frombuffer(mv[pos:pos + n], dtype=dt).reshape(shape).copy()
        pos += n
    if pos != len(mv):
        raise ValueError("statistics byte string has %d trailing bytes" % (len(mv) - pos))
    if crc != crc_want:
        raise ValueError("statistics byte string fails its CRC-32 check (damaged)")
    return header, arrays


def _check_has_crc(crc_want) -> None:
    if crc_want is None:
        raise ValueError("statistics byte string has no CRC-32 (a scratch file's frame, "
                         "read here where it must be checked)")


def array_layout(f, magic: bytes, size: int
                 ) -> Tuple[Dict[str, Any], list, int]:
    """(header, ``[(name, dtype, shape, offset, nbytes)]``, CRC-32) of the
    :func:`pack_arrays` bytes in the next ``size`` bytes of the binary file ``f``, offsets
    counted from their start: only the header is read (sizes checked as
    :func:`unpack_arrays` does); the arrays are then read where they lie."""
    hlen = _parse_prefix(magic, f.read(len(magic) + 4), size)
    header, spec, crc_want = _parse_header(f.read(hlen))
    pos = len(magic) + 4 + hlen
    out = []
    for name, dt, shape, n in spec:
        if pos + n > size:
            raise ValueError("truncated statistics byte string (array %s)" % name)
        out.append((name, dt, shape, pos, n))
        pos += n
    if pos != size:
        raise ValueError("statistics byte string has %d trailing bytes" % (size - pos))
    return header, out, crc_want


_CHUNK_BYTES = 1 << 25


def read_arrays(f, magic: bytes, size: int, stop_after: Optional[str] = None,
                sinks: Optional[Dict[str, Any]] = None, verify: bool = True
                ) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """:func:`unpack_arrays` of the next ``size`` bytes of the binary file ``f``, each array
    read straight into its own allocation (no file-bytes buffer, no second copy); the same
    checks and errors. ``stop_after``: return once that array is read (the arrays before
    it and it; the CRC, which covers all of them, is then not checked). ``sinks``: arrays
    not kept but handed in blocks of rows (~32 MB) to ``sinks[name](rows, first_row,
    header, arrays_so_far)``, so a large array is consumed without ever being held whole (a CRC
    failure is then reported after the sink has seen the rows). ``verify=False``: the CRC-32
    is neither taken nor required (a scratch file: :meth:`SuffStats.write_to`)."""
    head = f.read(len(magic) + 4)
    hlen = _parse_prefix(magic, head, size)
    header, spec, crc_want = _parse_header(f.read(hlen))
    if verify and stop_after is None:
        _check_has_crc(crc_want)
    pos = len(magic) + 4 + hlen
    arrays: Dict[str, np.ndarray] = {}
    crc = 0
    for name, dt, shape, n in spec:
        if pos + n > size:
            raise ValueError("truncated statistics byte string (array %s)" % name)
        if sinks and name in sinks and shape:
            row = n // shape[0] if shape[0] else 0
            step = max(1, _CHUNK_BYTES // max(1, row))
            block = np.empty([min(step, shape[0])] + shape[1:], dtype=dt)
            for r0 in range(0, shape[0], step):
                rows = block[:min(step, shape[0] - r0)]
                read_full(f, raw_bytes(rows), name)
                if verify:
                    crc = zlib.crc32(raw_bytes(rows), crc)
                sinks[name](rows, r0, header, arrays)
            pos += n
            continue
        a = np.empty(shape, dtype=dt)
        read_full(f, raw_bytes(a), name)
        if verify:
            crc = zlib.crc32(raw_bytes(a), crc)
        arrays[name] = a
        pos += n
        if name == stop_after:
            return header, arrays
    if pos != size:
        raise ValueError("statistics byte string has %d trailing bytes" % (size - pos))
    if verify and crc != crc_want:
        raise ValueError("statistics byte string fails its CRC-32 check (damaged)")
    return header, arrays


def read_full(f, buf: memoryview, name: str) -> None:
    """Fill ``buf`` from ``f`` (a read(2) returns at most ~2 GB at a time)."""
    got = 0
    while got < len(buf):
        k = f.readinto(buf[got:])
        if not k:
            raise ValueError("truncated statistics byte string (array %s)" % name)
        got += k


def nonfinite(**values) -> Optional[str]:
    """``"a, b"``: the names of ``values`` (numbers or arrays, summed in float64) that are or
    contain NaN or ±inf; None when all are finite."""
    bad = [k for k, v in values.items()
           if not np.isfinite(np.sum(np.asarray(v), dtype=np.float64))]
    return ", ".join(bad) or None


class TopicModel(abc.ABC):
    """What both algorithm interfaces share: the capabilities every runner asks about, the
    model (``topic_word``, ``infer``), the state (``to_state`` / ``from_state``) and the state
    check the session runs after every step."""

    name: ClassVar[str]
    SPEC: ClassVar[ParamSpec] = ParamSpec()     # every setting, in params() order
    sequential: ClassVar[bool] = False
    accumulates_passes: ClassVar[bool] = False   # one global step per pass (batch VB)
    whole_corpus: ClassVar[bool] = False   # True: trained by fit(all documents, sweeps)
    variational_gamma: ClassVar[bool] = False    # local_step(return_gamma=True, salt=...)
    # state arrays that are never negative (counts, Dirichlet parameters): a loaded state
    # holding a negative value there is damaged (lda_core.storage.blocks.check_ranges)
    NONNEGATIVE_ARRAYS: ClassVar[Tuple[str, ...]] = ()
    # bytes a training run of this algorithm holds per topic-word cell at its peak, every copy
    # of the state summed (its arrays, a step's statistics, a checkpoint's copy, the topic-word
    # matrix of an evaluation): lda_core.resources.check_algorithm_memory refuses a K x V that
    # does not fit. Each algorithm declares its own, measured at two sizes
    # (benchmarks/run_memory_bench.py; tests/test_memory_estimate.py checks four algorithms);
    # this default, for an algorithm not measured, is eight float64 copies
    RUN_BYTES_PER_CELL: ClassVar[float] = 64.0
    # setting -> bytes a topic-word cell per unit of the setting, for settings that multiply a
    # copy of the state (the particle filter's counts per particle)
    RUN_BYTES_PER_CELL_EACH: ClassVar[Dict[str, float]] = {}
    # bytes per document-topic cell over the documents of the run (the samplers keep every
    # document's topic counts n_dk), and its per-setting part as above
    RUN_BYTES_PER_DOC_CELL: ClassVar[float] = 0.0
    RUN_BYTES_PER_DOC_CELL_EACH: ClassVar[Dict[str, float]] = {}
    # the minibatch size S a run uses when none is given (the paper's, where it has one; None:
    # the trainers' default). S belongs to the schedule (lda_core.training.spec.Schedule
    # .minibatch), not to the algorithm: no step reads it, and a checkpoint records it once,
    # in its run information (lda_core.training.run_params.recorded_minibatch)
    DEFAULT_MINIBATCH: ClassVar[Optional[int]] = None
    n_topics: int
    n_words: int
    docs_seen: int
    step: int          # steps applied so far (global steps, or process() calls)

    def params(self) -> Dict[str, Any]:
        """The settings :attr:`SPEC` records, then :meth:`state_params` (JSON values; every
        checkpoint holds them)."""
        out = self.SPEC.export(self)
        out.update(self.state_params())
        return out

    def state_params(self) -> Dict[str, Any]:
        """Parameters of the state recorded beside the settings (e.g. sweeps done)."""
        return {}

    def nonfinite_state(self) -> Optional[str]:
        """The parts of the global state that hold a non-finite value after a step (e.g.
        ``"λ"``), or None. Runs after every step, so it reads only what is cheap: the lazily
        kept sums and scale factors, which are non-finite iff an entry is. Default: the
        state cannot become non-finite (integer counts)."""
        return None

    @abc.abstractmethod
    def topic_word(self) -> np.ndarray:
        """Topic-word distributions, K x V float64, rows sum to 1."""

    @abc.abstractmethod
    def infer(self, batch: DocBatch) -> np.ndarray:
        """Document-topic proportions (n x K, rows sum to 1) with the global state frozen."""

    @abc.abstractmethod
    def to_state(self, copy: bool = True):
        """The complete :class:`lda_core.storage.state.TopicState` needed to resume exactly.
        ``copy=False``: the state may hold the algorithm's own arrays instead of copies (for a
        caller that writes it out at once)."""

    @classmethod
    @abc.abstractmethod
    def from_state(cls, state, *, n_threads: Optional[int] = None,
                   take: bool = False) -> "TopicModel":
        """The algorithm of ``state``. ``n_threads``: threads of its kernels (ignored by an
        algorithm whose threads are a setting or that has none); ``take``: the caller gives the
        state up, so its arrays may be used without a copy."""


class StochasticAlgorithm(TopicModel):
    """Local/global-step algorithms (see module docstring). Their constructors take, beside
    the settings of :attr:`SPEC`, the keywords ``vocab_hash`` (recorded in the state) and
    ``n_threads`` (the E-step's threads).

    ``stats_type``: the class of what ``local_step`` returns (how a checkpoint's pending
    statistics are read back). ``pending``: the statistics in flight of a pipelined run
    (:class:`lda_core.training.staleness.Pending`), set by the trainer and carried through
    checkpoints by the storage layer; None when there are none."""

    stats_type: ClassVar[Optional[type]] = None
    pending: Any = None

    @abc.abstractmethod
    def empty_stats(self) -> SuffStats:
        """The identity element of ``SuffStats.merge`` for this state."""

    @abc.abstractmethod
    def local_step(self, batch: DocBatch, **kw) -> SuffStats:
        """E-step over ``batch`` with the global state frozen (does not modify ``self``)."""

    @abc.abstractmethod
    def global_step(self, stats: SuffStats) -> Dict[str, Any]:
        """Apply summed statistics of one minibatch; returns log info (t, rho, docs, change)."""


class SequentialSampler(TopicModel):
    """Stream-order samplers (see module docstring)."""

    sequential: ClassVar[bool] = True

    @abc.abstractmethod
    def process(self, batch: DocBatch) -> Dict[str, Any]:
        """Consume the next documents of the stream, in order; returns log info."""


# name used on the command line and in checkpoints -> "module:Class" (imported lazily)
ALGORITHMS: Dict[str, str] = {
    "online-vb": "lda_core.algorithms.online_vb:OnlineVB",
    "batch-vb": "lda_core.algorithms.online_vb:BatchVB",
    "scvb0": "lda_core.algorithms.scvb0:SCVB0",
    "sparse-gibbs-vb": "lda_core.algorithms.sparse_gibbs_vb:SparseGibbsVB",
    "gibbs": "lda_core.algorithms.gibbs:CollapsedGibbs",
    "o-lda": "lda_core.algorithms.online_samplers:OLDA",
    "incremental-gibbs": "lda_core.algorithms.online_samplers:IncrementalGibbs",
    "particle-filter": "lda_core.algorithms.particle_filter:ParticleFilter",
}


def algorithm_class(name: str):
    """The class implementing algorithm ``name`` (ValueError listing the choices otherwise)."""
    if name not in ALGORITHMS:
        raise UsageError("unknown algorithm %r; choose one of %s"
                         % (name, ", ".join(sorted(ALGORITHMS))))
    mod, cls = ALGORITHMS[name].split(":")
    try:
        return getattr(importlib.import_module(mod), cls)
    except (ImportError, AttributeError) as e:
        raise UsageError("algorithm %r is not available in this installation (%s)" % (name, e))


def available_algorithms():
    """The registry's algorithm names (all ship with the package)."""
    return list(ALGORITHMS)
