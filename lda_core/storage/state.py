"""The topic state: everything needed to resume a run exactly, and its on-disk format.

A state is a directory::

    state.json          algorithm, format version, K, V, vocabulary hash, params, step,
                        docs_seen, rng, info, and for every array: file, dtype, shape, sha256
    <name>.npy          one NumPy .npy file per array (read with allow_pickle=False)

Model files are data, never code: no pickles, the JSON is parsed with ``json`` and every
array's dtype must be a plain numeric/bool dtype. On load the JSON is checked (format version
first, then fields and types), each array's declared shape and dtype are checked against the
``.npy`` header and the file size *before* anything is allocated from them, and the sha256 of
each file is compared with the one recorded at save time; every mismatch is reported with
the file name and both values.

``save`` writes the whole directory under a temporary sibling name and publishes it with an
atomic rename, so a reader never sees a half-written state. If the target already exists it
is renamed aside, the new directory renamed in, and the old one removed.

``lda_core`` has no Beam import: every file operation goes through a small *file layer*
object (:mod:`lda_core.storage.files`; :class:`LocalFiles` for local paths). :func:`files_for` picks
the layer of a path; other layers are registered by scheme with :func:`register_files` -- the
pipelines layer registers one backed by ``apache_beam.io.filesystems`` for every URL scheme
(``gs://``, ``s3://``, ...: :mod:`pipelines.runtime.object_store_files`). A layer that cannot rename a
directory atomically (``atomic_dir_rename = False``) gets every file written under its final name with
``state.json`` (which holds the sha256 of every array) last; publication is then the job of a
pointer object written last (see ``lda_core.storage.checkpoint``), and a reader that finds a
``state.json`` whose checksums verify has the complete state.

The format is documented for users in ``docs/model-format.md``.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from lda_core.errors import DataIntegrityError, InputError, TrainingError, UsageError
from lda_core.storage import npy
from lda_core.storage.files import files_for, LocalFiles, map_in_order

logger = logging.getLogger(__name__)

STATE_FORMAT_VERSION = 1
FORMAT_NAME = "ldabeam-topic-state"
STATE_FILE = "state.json"
MAX_STATE_JSON_BYTES = 64 << 20      # a state.json larger than this is refused unread
_ARRAY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_CHUNK = 16 << 20                    # bytes per read/hash chunk (bounded memory besides the array)


class StateFormatError(DataIntegrityError):
    """A state directory that is incomplete, corrupt, or of another format version."""




# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def _json_default(o):
    """numpy scalars / small arrays in params, info or rng become plain JSON values."""
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray) and o.size <= 4096 and not o.dtype.hasobject:
        return o.tolist()
    raise TypeError("value of type %s is not JSON-able (put arrays in TopicState.arrays)"
                    % type(o).__name__)


def _check_dtype(dtype: np.dtype, where: str) -> np.dtype:
    if dtype.hasobject or dtype.kind not in "biufc" or dtype.fields is not None \
            or dtype.subdtype is not None:
        raise StateFormatError("%s: dtype %s is not allowed (only plain bool/integer/float/"
                               "complex arrays; model files are data, never code)"
                               % (where, dtype))
    return dtype


def _short(h: Optional[str]) -> str:
    return "None" if h is None else str(h)


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit equality (NaNs with the same payload compare equal)."""
    a = np.asarray(a)
    b = np.asarray(b)
    return (a.dtype == b.dtype and a.shape == b.shape
            and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())


def _values_equal(a, b) -> bool:
    """Arrays bit for bit; word-blocked arrays (:class:`RowBlocks`) by block count and rows."""
    if isinstance(a, RowBlocks) or isinstance(b, RowBlocks):
        return (isinstance(a, RowBlocks) and isinstance(b, RowBlocks)
                and a.n_blocks == b.n_blocks and _arrays_equal(a.rows(), b.rows()))
    return _arrays_equal(a, b)


class _HashingWriter:
    """A write-only file wrapper that feeds everything written to sha256."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self.sha = hashlib.sha256()
        self.n = 0

    def write(self, b) -> int:
        mv = memoryview(b).cast("B")
        self.sha.update(mv)
        self.n += len(mv)
        return self._f.write(mv)


def _write_npy(files: LocalFiles, path: str, arr: np.ndarray) -> Dict[str, Any]:
    """Write ``arr`` as .npy (C order), return its JSON entry (file, dtype, shape, sha256)."""
    arr = np.ascontiguousarray(arr)
    with files.open_write(path) as f:
        w = _HashingWriter(f)
        # not a real file object, so numpy writes the data in 16 MiB chunks through ``w``
        npy.write_array(w, arr)
        files.sync_file(f)
    return {"file": os.path.basename(path), "dtype": arr.dtype.str,
            "shape": list(arr.shape), "sha256": w.sha.hexdigest(), "nbytes": int(arr.nbytes)}


def _check_entry(name: str, meta: Any):
    """The file name, dtype, shape and sha256 of array ``name`` in state.json, each checked
    (a plain file name ending in .npy, a data dtype, a list of sizes, a hex digest)."""
    if not isinstance(meta, dict):
        raise StateFormatError("state.json: entry of array %r is not an object" % name)
    fname = meta.get("file")
    if (not isinstance(fname, str) or fname != os.path.basename(fname) or fname in (".", "..")
            or not fname.endswith(".npy") or "/" in fname or "\\" in fname):
        raise StateFormatError("state.json: array %r has an invalid file name %r"
                               % (name, fname))
    try:
        dtype = np.dtype(meta.get("dtype"))
    except TypeError:
        raise StateFormatError("state.json: array %r has an invalid dtype %r"
                               % (name, meta.get("dtype")))
    _check_dtype(dtype, "array %r" % name)
    shape = meta.get("shape")
    if (not isinstance(shape, list) or len(shape) > 32
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                       for s in shape)):
        raise StateFormatError("state.json: array %r has an invalid shape %r" % (name, shape))
    shape = tuple(shape)
    sha = meta.get("sha256")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise StateFormatError("state.json: array %r has an invalid sha256 %r" % (name, sha))
    return fname, dtype, shape, sha


def _block_npy_header(f: BinaryIO, fsize: int, where: str, fname: str, dtype: np.dtype,
                      shape: tuple, says: str, sha) -> int:
    """:func:`_check_npy_header` of a word-block file, which must be in C order; the header's
    bytes are added to the running ``sha`` and the data offset returned."""
    forder, offset = _check_npy_header(f, fsize, where, fname, dtype, shape, says)
    if forder and shape[0] > 1 and shape[1] > 1:
        raise StateFormatError("%s: %s is in Fortran order; block files are C order"
                               % (where, fname))
    f.seek(0)
    sha.update(f.read(offset))
    return offset


def _check_npy_header(f: BinaryIO, fsize: int, where: str, fname: str, dtype: np.dtype,
                      shape: tuple, says: str):
    """Parse the .npy header of the open file ``f`` (``fsize`` bytes) and check it against
    ``dtype`` and ``shape`` (``says``: who declared them, for the message) and the data size
    against the file size; returns ``(fortran_order, data offset)``. Nothing is allocated."""
    try:
        hshape, forder, hdtype = npy.read_header(f)
    except ValueError as e:
        raise StateFormatError("%s: %s is not a valid .npy file (%s)" % (where, fname, e))
    offset = f.tell()
    if hdtype.hasobject:
        raise StateFormatError("%s: %s holds Python objects; model files are data, never "
                               "code" % (where, fname))
    if hdtype != dtype:
        raise StateFormatError("%s: %s has dtype %s in its header but %s %s"
                               % (where, fname, hdtype.str, says, dtype.str))
    if tuple(hshape) != tuple(shape):
        raise StateFormatError("%s: %s has shape %s in its header but %s %s"
                               % (where, fname, tuple(hshape), says, tuple(shape)))
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= int(n)
    if fsize - offset != nbytes:
        raise StateFormatError(
            "%s: %s is %s: expected %d bytes of data for shape %s %s, the file has %d"
            % (where, fname, "truncated" if fsize - offset < nbytes else "too long",
               nbytes, tuple(shape), dtype.str, fsize - offset))
    return forder, offset


def _read_npy(files: LocalFiles, directory: str, name: str, meta: Dict[str, Any]) -> np.ndarray:
    """Read one array after checking its JSON entry against the .npy header and file size.

    Nothing is allocated from the declared shape until the file is known to hold exactly that
    many bytes; the sha256 of the whole file is compared at the end."""
    fname, dtype, shape, sha = _check_entry(name, meta)
    nbytes = dtype.itemsize
    for s in shape:
        nbytes *= s
    path = files.join(directory, fname)
    if not files.exists(path):
        raise StateFormatError("%s: array file %s listed in state.json is missing"
                               % (directory, fname))
    fsize = files.size(path)
    h = hashlib.sha256()
    with files.open_read(path) as f:
        forder, offset = _check_npy_header(f, fsize, directory, fname, dtype, shape,
                                           "state.json says")
        f.seek(0)
        h.update(f.read(offset))
        arr = np.empty(shape, dtype=dtype, order="F" if forder else "C")
        buf = arr.reshape(-1, order="A").view(np.uint8) if arr.size else np.zeros(0, np.uint8)
        pos = 0
        while pos < nbytes:        # each pass advances by >= 1 byte or leaves: bounded
            n = f.readinto(memoryview(buf[pos:pos + _CHUNK]))
            if not n:
                break
            h.update(memoryview(buf[pos:pos + n]))
            pos += n
        if pos != nbytes:
            raise StateFormatError("%s: %s is truncated: read %d of %d data bytes"
                                   % (directory, fname, pos, nbytes))
    got = h.hexdigest()
    if got != sha:
        raise StateFormatError("%s: %s is corrupt: sha256 %s, state.json records %s"
                               % (directory, fname, got, sha))
    if forder:
        arr = np.ascontiguousarray(arr)
    return arr


# ---------------------------------------------------------------------------------------------
# word-blocked arrays (the word-major state of word-sharded algorithms, B > 1)
# ---------------------------------------------------------------------------------------------
BLOCKED_FORMAT_VERSION = 2       # state.json "version" of a directory holding a blocked array
READ_VERSIONS = (STATE_FORMAT_VERSION, BLOCKED_FORMAT_VERSION)
BLOCK_LAYOUT = "word-blocks"


def block_file_name(name: str, b: int) -> str:
    """The file of block ``b`` of the blocked array ``name`` in a state directory."""
    return "%s.block-%04d.npy" % (name, int(b))


def block_bounds(n_words: int, n_blocks: int) -> List[Tuple[int, int]]:
    """The B contiguous *row* ranges ``[(lo, hi)]`` of the word-major state: block b holds the
    words w with w mod B = b (``lda_core.algorithms.word_blocks.rows_of_words``), V // B of them plus one for the first
    V mod B blocks (some empty when B > V)."""
    V, B = int(n_words), int(n_blocks)
    if B < 1:
        raise UsageError("word_blocks must be at least 1, got %d" % B)
    q, r = divmod(V, B)
    lo = [b * q + min(b, r) for b in range(B + 1)]
    return [(lo[b], lo[b + 1]) for b in range(B)]


def block_row_counts(n_words: int, n_blocks: int) -> List[int]:
    """Rows of each of the B word blocks (:func:`block_bounds`)."""
    return [hi - lo for lo, hi in block_bounds(n_words, n_blocks)]


class RowBlocks:
    """A word-major array (``shape`` = V x K) held as B word blocks in *row order*: block b
    holds the words b, b + B, b + 2B, ... (word w is row w // B of block w mod B, as
    ``lda_core.algorithms.word_blocks.rows_of_words`` lays out a word-sharded algorithm's
    state), and the blocks one after the other are the algorithm's row-order array.

    ``parts``: per block its rows, either an array or the path of a plain ``.npy`` file (read
    through ``files``, default :func:`files_for` of the path) that :meth:`TopicState.save`
    copies in bounded chunks. ``whole``: the one contiguous row-order array the parts are
    views of, when there is one (what ``TopicState.load(..., row_order=True)`` gives).

    Nothing converts a RowBlocks to an array implicitly (no ``__array__``): a reader that
    expects word order fails loudly instead of reading rows in the wrong order."""

    def __init__(self, shape, dtype, parts: Sequence[Union[np.ndarray, str]],
                 files: Optional[LocalFiles] = None, whole: Optional[np.ndarray] = None):
        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = _check_dtype(np.dtype(dtype), "word-blocked array")
        self.parts = list(parts)
        self.files = files
        self.whole = whole
        if not self.parts:
            raise ValueError("a word-blocked array needs at least one block")

    @classmethod
    def of_array(cls, whole: np.ndarray, n_blocks: int) -> "RowBlocks":
        """The blocks of the row-order array ``whole`` (views, no copy)."""
        whole = np.asarray(whole)
        cuts = np.cumsum([0] + block_row_counts(whole.shape[0], n_blocks))
        return cls(whole.shape, whole.dtype,
                   [whole[cuts[b]:cuts[b + 1]] for b in range(int(n_blocks))], whole=whole)

    @property
    def n_blocks(self) -> int:
        return len(self.parts)

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    def part(self, b: int) -> np.ndarray:
        """The rows of block ``b`` (a file part is read)."""
        p = self.parts[b]
        if isinstance(p, np.ndarray):
            return p
        files = self.files or files_for(p)
        with files.open_read(p) as f:
            return npy.read_array(f)

    def rows(self) -> np.ndarray:
        """The whole array in row order (``whole`` itself when there is one, else a copy)."""
        if self.whole is not None:
            return self.whole
        return np.concatenate([self.part(b) for b in range(self.n_blocks)]) \
            if self.n_blocks > 1 else np.ascontiguousarray(self.part(0))

    def word_order(self) -> np.ndarray:
        """The array in word order (one new V x K array, filled block by block)."""
        out = np.empty(self.shape, self.dtype)
        for b in range(self.n_blocks):
            out[b::self.n_blocks] = self.part(b)
        return out


def _readinto_full(f: BinaryIO, mv: memoryview) -> int:
    """Fill ``mv`` from ``f`` (several reads if need be); the bytes read (short at EOF)."""
    pos = 0
    while pos < len(mv):       # each pass advances by >= 1 byte or leaves: bounded
        n = f.readinto(mv[pos:])
        if not n:
            break
        pos += n
    return pos


def _nonfinite_counts(a: np.ndarray):
    if a.dtype.kind not in "fc":
        return 0, 0
    return (int(np.count_nonzero(np.isnan(a))),
            int(np.count_nonzero(np.isposinf(a.real if a.dtype.kind == "c" else a))))


_SCAN = 1 << 22          # values per chunk of a scan: no full-size temporaries


def value_problem(name: str, arrays, nonnegative: bool = False) -> Optional[str]:
    """What is wrong with the values of the array ``name`` (one array, or the parts of one:
    ``arrays``): ``"ntilde has 1 NaN, 0 +inf and 3 negative values"``, or None. NaN and +inf
    are never a state's (-inf is: log-weights of dead particles); ``nonnegative``: values
    below 0 are not either (counts, Dirichlet parameters). Scanned in bounded chunks."""
    n_nan = n_inf = n_neg = 0
    for a in (arrays if isinstance(arrays, (list, tuple)) else [arrays]):
        a = np.asarray(a)
        if a.dtype.kind not in "fc":
            continue
        flat = a.reshape(-1)
        for start in range(0, flat.size, _SCAN):
            blk = flat[start:start + _SCAN]
            nan, inf = _nonfinite_counts(blk)
            n_nan += nan
            n_inf += inf
            if nonnegative:
                n_neg += int(np.count_nonzero(blk < 0))
    if not (n_nan or n_inf or n_neg):
        return None
    return "%s has %d NaN%s +inf%s values" % (
        name, n_nan, ", %d" % n_inf if nonnegative else " and %d" % n_inf,
        " and %d negative" % n_neg if nonnegative else "")


def copy_npy(src_files, src: str, files: LocalFiles, path: str, dtype: np.dtype,
             shape: tuple, nonfinite: Optional[List[str]] = None,
             expect_sha: Optional[str] = None, nonnegative: bool = False) -> Dict[str, Any]:
    """Copy the plain .npy file ``src`` (file layer ``src_files``) to ``path`` (layer
    ``files``) in chunks of about 16 MiB, after checking its header against ``dtype`` and
    ``shape`` (2-D) and its size; the written file is byte for byte what the state writer
    writes for the same array. ``nonfinite``: a list to which a message is appended when the
    data holds NaN or +inf (or, with ``nonnegative``, values below 0). ``expect_sha``: the sha256 the source file must have (a block of a
    checkpoint); on a mismatch the copy is deleted and StateFormatError names the source.
    Returns the JSON entry of the copy (file, rows, sha256, nbytes)."""
    shape = (int(shape[0]), int(shape[1]))
    nbytes = dtype.itemsize * shape[0] * shape[1]
    where = "word-block file"
    if not src_files.exists(src):
        raise StateFormatError("%s %s is missing (the block was never written)" % (where, src))
    fsize = src_files.size(src)
    src_sha = hashlib.sha256()
    item = dtype.itemsize
    step = max(item, _CHUNK - _CHUNK % item)
    n_nan = n_inf = n_neg = 0
    with src_files.open_read(src) as f:
        _block_npy_header(f, fsize, where, src, dtype, shape,
                          "the word-block header needs", src_sha)
        with files.open_write(path) as out:
            w = _HashingWriter(out)
            npy.write_header(w, dtype, shape)
            buf = np.empty(min(step, nbytes), np.uint8)
            left = nbytes
            while left:
                mv = memoryview(buf[:min(step, left)])
                n = _readinto_full(f, mv)
                if n != len(mv):
                    raise StateFormatError("%s %s is truncated: read %d of %d data bytes"
                                           % (where, src, nbytes - left + n, nbytes))
                w.write(mv)
                src_sha.update(mv)
                if nonfinite is not None:
                    a, i = _nonfinite_counts(buf[:n].view(dtype))
                    n_nan += a
                    n_inf += i
                    if nonnegative:
                        n_neg += int(np.count_nonzero(buf[:n].view(dtype) < 0))
                left -= n
            files.sync_file(out)
    if expect_sha is not None and src_sha.hexdigest() != expect_sha:
        files.remove_file(path)
        raise StateFormatError("%s is corrupt: sha256 %s, its state.json records %s -- use "
                               "the previous checkpoint (CheckpointStore.latest_blocks falls "
                               "back to it)" % (src, src_sha.hexdigest(), expect_sha))
    if n_nan or n_inf or n_neg:
        nonfinite.append("%s has %d NaN and %d +inf values%s"
                         % (src, n_nan, n_inf, " and %d negative ones" % n_neg if n_neg else ""))
    return {"file": files.basename(path), "rows": int(shape[0]), "sha256": w.sha.hexdigest(),
            "nbytes": int(nbytes)}


def _write_blocks(files: LocalFiles, directory: str, name: str, rb: RowBlocks,
                  nonfinite: Optional[List[str]]) -> Dict[str, Any]:
    """Write the blocked array ``name``: one .npy per block (several at once where the file
    layer says so) and its JSON entry."""
    V, K = rb.shape

    def one(item):
        b, (part, rows) = item
        path = files.join(directory, block_file_name(name, b) if rb.n_blocks > 1
                          else name + ".npy")
        if isinstance(part, np.ndarray):
            if part.shape != (rows, K) or part.dtype != rb.dtype:
                raise ValueError("block %d of array %r is %s %s, expected %s %s"
                                 % (b, name, part.dtype, part.shape, rb.dtype, (rows, K)))
            e = _write_npy(files, path, part)
            return {"file": e["file"], "rows": rows, "sha256": e["sha256"],
                    "nbytes": e["nbytes"]}
        return copy_npy(rb.files or files_for(part), part, files, path, rb.dtype, (rows, K),
                        nonfinite)

    blocks = map_in_order(one, list(enumerate(zip(rb.parts, block_row_counts(V, rb.n_blocks)))),
                       getattr(files, "write_threads", 1))
    return {"layout": BLOCK_LAYOUT, "n_blocks": rb.n_blocks, "dtype": rb.dtype.str,
            "shape": [V, K], "blocks": blocks}


def _check_blocked_entry(directory: str, name: str, meta: Dict[str, Any]):
    """The dtype, shape and ``[(file, rows, sha256)]`` of the blocked array ``name``, each
    checked (the block row counts must be those of ``n_blocks`` word blocks of V words)."""
    where = "%s/%s: array %r" % (directory, STATE_FILE, name)
    B = meta.get("n_blocks")
    blocks = meta.get("blocks")
    if meta.get("layout") != BLOCK_LAYOUT or not isinstance(B, int) or isinstance(B, bool) \
            or B < 1 or not isinstance(blocks, list) or len(blocks) != B:
        raise StateFormatError("%s has an invalid word-block entry (layout %r, n_blocks %r, %s "
                               "block entries)" % (where, meta.get("layout"), B,
                                                   len(blocks) if isinstance(blocks, list)
                                                   else "no"))
    try:
        dtype = np.dtype(meta.get("dtype"))
    except TypeError:
        raise StateFormatError("%s has an invalid dtype %r" % (where, meta.get("dtype")))
    _check_dtype(dtype, where)
    shape = meta.get("shape")
    if not (isinstance(shape, list) and len(shape) == 2 and all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)):
        raise StateFormatError("%s has an invalid shape %r" % (where, shape))
    want = block_row_counts(shape[0], B)
    out = []
    for b, e in enumerate(blocks):
        if not isinstance(e, dict):
            raise StateFormatError("%s: block %d entry is not an object" % (where, b))
        fname, _, _, sha = _check_entry("%s block %d" % (name, b),
                                        dict(e, dtype=dtype.str, shape=[e.get("rows"), 0]))
        if fname != block_file_name(name, b) or e.get("rows") != want[b]:
            raise StateFormatError("%s: block %d is %r with %r rows, expected %s with %d rows"
                                   % (where, b, fname, e.get("rows"),
                                      block_file_name(name, b), want[b]))
        out.append((fname, want[b], sha))
    return dtype, (shape[0], shape[1]), out


def array_files(directory: str, name: str, meta: Any):
    """The dtype, shape and ``[(file, rows, sha256)]`` of the 2-D array ``name`` of a state
    directory from its state.json entry ``meta``, checked: one file for a plain array, one per
    word block for a word-blocked one (:class:`RowBlocks`)."""
    if isinstance(meta, dict) and "layout" in meta:
        return _check_blocked_entry(directory, name, meta)
    fname, dtype, shape, sha = _check_entry(name, meta)
    if len(shape) != 2:
        raise StateFormatError("%s/%s: array %r has shape %s, expected 2 dimensions"
                               % (directory, STATE_FILE, name, shape))
    return dtype, shape, [(fname, shape[0], sha)]


def _read_block(files: LocalFiles, directory: str, fname: str, dtype: np.dtype, shape: tuple,
                sha: str, dest: np.ndarray) -> None:
    """Read block file ``fname`` into ``dest`` (rows x K, any strides) in bounded chunks,
    checking header, size and sha256 (StateFormatError naming the file otherwise)."""
    path = files.join(directory, fname)
    if not files.exists(path):
        raise StateFormatError("%s: word-block file %s listed in state.json is missing"
                               % (directory, fname))
    h = hashlib.sha256()
    with files.open_read(path) as f:
        _block_npy_header(f, files.size(path), directory, fname, dtype, shape,
                          "state.json says", h)
        rows, K = shape
        per = max(1, _CHUNK // max(1, K * dtype.itemsize))
        tmp = None if dest.flags.c_contiguous else np.empty((min(per, rows), K), dtype)
        for r0 in range(0, rows, per):
            r1 = min(rows, r0 + per)
            into = dest[r0:r1] if tmp is None else tmp[:r1 - r0]
            mv = memoryview(into.reshape(-1).view(np.uint8))
            n = _readinto_full(f, mv)
            h.update(mv[:n])
            if n != len(mv):
                raise StateFormatError("%s: %s is truncated" % (directory, fname))
            if tmp is not None:
                dest[r0:r1] = into
    got = h.hexdigest()
    if got != sha:
        raise StateFormatError("%s: %s is corrupt: sha256 %s, state.json records %s -- the "
                               "previous checkpoint is used; delete this one or retrain"
                               % (directory, fname, got, sha))


def _read_blocks(files: LocalFiles, directory: str, name: str, meta: Dict[str, Any],
                 row_order: bool) -> Union[np.ndarray, RowBlocks]:
    """The blocked array ``name``: in word order (a plain array, what every reader gets by
    default), or with ``row_order`` the blocks as one contiguous row-order array (a
    :class:`RowBlocks`; what a resumed word-sharded algorithm holds, no permuted copy)."""
    dtype, shape, blocks = _check_blocked_entry(directory, name, meta)
    B = len(blocks)
    whole = np.empty(shape, dtype)
    lo = 0
    for b, (fname, rows, sha) in enumerate(blocks):
        dest = whole[lo:lo + rows] if row_order else whole[b::B]
        _read_block(files, directory, fname, dtype, (rows, shape[1]), sha, dest)
        lo += rows
    _check_values(directory, name, whole)
    return RowBlocks.of_array(whole, B) if row_order else whole


def _check_values(directory: str, name: str, arr: np.ndarray) -> None:
    """StateFormatError when a loaded array holds NaN or +inf: a loaded state is checked as
    a published one is (``CheckpointStore.publish`` refuses them), so an edited file whose
    sha256 was recomputed is a damaged checkpoint and the previous one is used."""
    problem = value_problem(name, arr)
    if problem is not None:
        raise StateFormatError("%s: %s, which a published state never holds: a damaged or "
                               "edited checkpoint" % (directory, problem))


# ---------------------------------------------------------------------------------------------
# TopicState
# ---------------------------------------------------------------------------------------------
@dataclass(eq=False)
class TopicState:
    """All that is needed to resume a run exactly (see module docstring for the format).

    ``arrays`` holds the algorithm's arrays (λ for the VB family, N^Φ/N^Z for SCVB0, ...);
    ``params`` the JSON-able hyper-parameters and schedule (alpha, eta, kappa, tau0, S, D,
    seed, ...); ``rng`` an optional numpy ``bit_generator.state`` dict. Equality (``==``)
    is bit-for-bit on arrays and exact on everything else. Note that JSON has no tuples:
    tuples in ``params``/``info`` come back as lists.
    """

    algorithm: str
    n_topics: int
    n_words: int
    vocab_hash: Optional[str]
    arrays: Dict[str, np.ndarray]
    params: Dict[str, Any]
    step: int = 0
    docs_seen: int = 0
    rng: Optional[dict] = None
    info: Dict[str, Any] = field(default_factory=dict)
    version: int = STATE_FORMAT_VERSION

    def __post_init__(self):
        if not isinstance(self.algorithm, str) or not self.algorithm:
            raise ValueError("algorithm must be a non-empty string, got %r" % (self.algorithm,))
        for name in ("n_topics", "n_words"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError("%s must be an integer >= 1, got %r" % (name, v))
            setattr(self, name, int(v))
        for name in ("step", "docs_seen"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError("%s must be an integer >= 0, got %r" % (name, v))
            setattr(self, name, int(v))
        if self.vocab_hash is not None and not isinstance(self.vocab_hash, str):
            raise ValueError("vocab_hash must be a string or None, got %r" % (self.vocab_hash,))
        if not isinstance(self.arrays, dict):
            raise ValueError("arrays must be a dict of name -> numpy array")
        for k in self.arrays:
            if not isinstance(k, str) or not _ARRAY_NAME.match(k):
                raise ValueError("array name %r is not allowed (letters, digits, _ . -; at most "
                                 "128 characters, not starting with . or -)" % (k,))
        if self.params is None:
            self.params = {}
        if self.info is None:
            self.info = {}

    # -- comparison -----------------------------------------------------------------------
    def __eq__(self, other):
        if not isinstance(other, TopicState):
            return NotImplemented
        if (self.algorithm, self.n_topics, self.n_words, self.vocab_hash, self.step,
                self.docs_seen, self.version) != (other.algorithm, other.n_topics,
                                                  other.n_words, other.vocab_hash, other.step,
                                                  other.docs_seen, other.version):
            return False
        if self.params != other.params or self.rng != other.rng or self.info != other.info:
            return False
        if set(self.arrays) != set(other.arrays):
            return False
        return all(_values_equal(self.arrays[k], other.arrays[k]) for k in self.arrays)

    __hash__ = None

    # -- checks ---------------------------------------------------------------------------
    def validate(self, algorithm: Optional[str] = None, n_topics: Optional[int] = None,
                 n_words: Optional[int] = None, vocab_hash: Optional[str] = None) -> None:
        """Check that this state fits a run; ValueError naming every mismatch with both values.

        Arguments left ``None`` are not checked. ``vocab_hash`` is the hash of the vocabulary
        the run reads (its shards); a state saved without a hash cannot be checked (a warning
        is logged)."""
        problems = []
        if algorithm is not None and algorithm != self.algorithm:
            problems.append("checkpoint is for algorithm %r, the run asks for %r"
                            % (self.algorithm, algorithm))
        if n_topics is not None and int(n_topics) != self.n_topics:
            problems.append("checkpoint has K=%d, the run asks for K=%d"
                            % (self.n_topics, n_topics))
        if n_words is not None and int(n_words) != self.n_words:
            problems.append("checkpoint has V=%d words, the data has V=%d"
                            % (self.n_words, n_words))
        if vocab_hash is not None:
            if self.vocab_hash is None:
                logger.warning("the topic state records no vocabulary hash; cannot check it "
                               "against the data's %s", vocab_hash)
            elif vocab_hash != self.vocab_hash:
                problems.append("vocabulary hash of the shards %s differs from the model's %s "
                                "(the word ids mean different words)"
                                % (_short(vocab_hash), _short(self.vocab_hash)))
        if problems:
            raise InputError("topic state does not match the run: " + "; ".join(problems))

    # -- JSON -----------------------------------------------------------------------------
    def _header(self, array_entries: Dict[str, Any]) -> Dict[str, Any]:
        return {"format": FORMAT_NAME, "version": int(self.version),
                "algorithm": self.algorithm, "n_topics": self.n_topics,
                "n_words": self.n_words, "vocab_hash": self.vocab_hash,
                "step": self.step, "docs_seen": self.docs_seen,
                "params": self.params, "rng": self.rng, "info": self.info,
                "arrays": array_entries}

    # -- save / load ----------------------------------------------------------------------
    def save(self, directory: str, files: Optional[LocalFiles] = None,
             refuse_nonfinite: bool = False) -> None:
        """Write the complete state under a temporary name, then publish it as ``directory``.

        The JSON is serialised first (so a non-JSON-able value fails before anything is
        written); the temporary directory is removed if anything fails. ``files``: the file
        layer (default :func:`files_for` ``(directory)``); on a layer without atomic directory
        rename (object stores) the files are written under ``directory`` itself, ``state.json``
        last. A :class:`RowBlocks` array of B > 1 blocks is written as B block files (state.json
        version 2); of one block, as the plain array it is. ``refuse_nonfinite``: block files
        copied from ``.npy`` sources are scanned while copied, and NaN or +inf in them is a
        TrainingError before anything is published."""
        files = files or files_for(directory)
        if self.version != STATE_FORMAT_VERSION:
            raise ValueError("cannot save a state of format version %s; this ldabeam writes "
                             "version %d" % (self.version, STATE_FORMAT_VERSION))
        arrays: Dict[str, Any] = {}
        for k, a in self.arrays.items():
            if isinstance(a, RowBlocks):
                if a.n_blocks == 1 and isinstance(a.parts[0], np.ndarray):
                    a = a.parts[0]          # one block is the plain array
                else:
                    arrays[k] = a
                    continue
            a = np.asarray(a)
            _check_dtype(a.dtype, "array %r" % k)
            arrays[k] = a
        blocked = any(isinstance(a, RowBlocks) and a.n_blocks > 1 for a in arrays.values())
        # fail early on non-JSON-able params / info / rng
        json.dumps(self._header({}), default=_json_default)
        tmp = files.make_temp_dir(directory)
        try:
            entries = {}
            nonfinite: Optional[List[str]] = [] if refuse_nonfinite else None
            for k in sorted(arrays):
                if isinstance(arrays[k], RowBlocks):
                    entries[k] = _write_blocks(files, tmp, k, arrays[k], nonfinite)
                    if arrays[k].n_blocks == 1:     # one block file is the plain array
                        e = entries[k]["blocks"][0]
                        entries[k] = {"file": e["file"], "dtype": entries[k]["dtype"],
                                      "shape": entries[k]["shape"], "sha256": e["sha256"],
                                      "nbytes": e["nbytes"]}
            plain = sorted(k for k in arrays if not isinstance(arrays[k], RowBlocks))
            entries.update(zip(plain, map_in_order(
                lambda k: _write_npy(files, files.join(tmp, k + ".npy"), arrays[k]), plain,
                getattr(files, "write_threads", 1))))
            entries = {k: entries[k] for k in sorted(entries)}
            if nonfinite:
                raise TrainingError("refusing to checkpoint step %d of %s: %s (the previous "
                                    "checkpoint stays the latest)"
                                    % (self.step, self.algorithm, "; ".join(sorted(nonfinite))))
            head = self._header(entries)
            if blocked:
                head["version"] = BLOCKED_FORMAT_VERSION
            data = json.dumps(head, default=_json_default, indent=1,
                              sort_keys=False).encode("utf-8")
            with files.open_write(files.join(tmp, STATE_FILE)) as f:
                f.write(data)
                files.sync_file(f)
            files.publish_dir(tmp, directory)
        except BaseException:
            files.remove_tree(tmp)
            raise
        logger.debug("saved %s state at step %d (%d arrays, K=%d, V=%d) to %s",
                     self.algorithm, self.step, len(arrays), self.n_topics, self.n_words,
                     directory)

    @classmethod
    def load(cls, directory: str, files: Optional[LocalFiles] = None,
             row_order: bool = False, skip_arrays: Sequence[str] = ()) -> "TopicState":
        """Read a state directory, checking version, fields, shapes, dtypes and checksums.

        A word-blocked array comes back in word order, as one plain array (what every reader
        expects; read block by block straight into place), or with ``row_order`` as a
        :class:`RowBlocks` over one contiguous row-order array (for
        ``lda_core.storage.blocks.algorithm_from_state``: a word-sharded algorithm takes it
        as its state, no permuted copy). Raises FileNotFoundError if ``directory`` does not
        exist and :class:`StateFormatError` (a ValueError) saying precisely what is wrong
        otherwise. ``skip_arrays``: names of arrays not read (left out of the state; their
        entries are still checked when read later, e.g. by ``lda_core.storage.blocks``)."""
        files = files or files_for(directory)
        if not files.isdir(directory):
            raise FileNotFoundError("no topic state at %s (directory does not exist)"
                                    % directory)
        meta = read_state_json(directory, files)
        arrays = {}
        entries = meta["arrays"]
        for name in entries:
            if not isinstance(name, str) or not _ARRAY_NAME.match(name):
                raise StateFormatError("%s: state.json lists an invalid array name %r"
                                       % (directory, name))
            if name in skip_arrays:
                continue
            if isinstance(entries[name], dict) and "layout" in entries[name]:
                if meta["version"] != BLOCKED_FORMAT_VERSION:
                    raise StateFormatError("%s/%s: array %r is word-blocked but the version is "
                                           "%s, not %d" % (directory, STATE_FILE, name,
                                                           meta["version"],
                                                           BLOCKED_FORMAT_VERSION))
                arrays[name] = _read_blocks(files, directory, name, entries[name], row_order)
            else:
                arrays[name] = _read_npy(files, directory, name, entries[name])
                _check_values(directory, name, arrays[name])
        try:
            return cls(algorithm=meta["algorithm"], n_topics=meta["n_topics"],
                       n_words=meta["n_words"], vocab_hash=meta["vocab_hash"], arrays=arrays,
                       params=meta["params"], step=meta["step"], docs_seen=meta["docs_seen"],
                       rng=meta["rng"], info=meta["info"], version=STATE_FORMAT_VERSION)
        except ValueError as e:
            raise StateFormatError("%s/state.json: %s" % (directory, e))

    # -- conveniences -------------------------------------------------------------------
    def nbytes(self) -> int:
        return int(sum(a.nbytes if isinstance(a, RowBlocks) else np.asarray(a).nbytes
                       for a in self.arrays.values()))

    def describe(self) -> str:
        arrs = ", ".join("%s %s %s in %d word blocks" % (k, a.dtype, a.shape, a.n_blocks)
                         if isinstance(a, RowBlocks)
                         else "%s %s %s" % (k, np.asarray(a).dtype, tuple(np.shape(a)))
                         for k, a in sorted(self.arrays.items()))
        return ("%s state v%d: K=%d V=%d step=%d docs_seen=%d vocab=%s arrays: %s"
                % (self.algorithm, self.version, self.n_topics, self.n_words, self.step,
                   self.docs_seen, (self.vocab_hash or "none")[:12], arrs))


_REQUIRED = {"algorithm": str, "n_topics": int, "n_words": int, "step": int,
             "docs_seen": int, "params": dict, "info": dict, "arrays": dict}


def read_state_json(directory: str, files: Optional[LocalFiles] = None) -> Dict[str, Any]:
    """Parse and check ``state.json`` of a state directory (no arrays are read).

    The format version is checked before any other field, so a state written by another
    version of ldabeam gets the version message, not a confusing field error."""
    files = files or files_for(directory)
    path = files.join(directory, STATE_FILE)
    if not files.exists(path):
        raise StateFormatError("%s has no %s (an incomplete state, or not a topic state)"
                               % (directory, STATE_FILE))
    size = files.size(path)
    if size > MAX_STATE_JSON_BYTES:
        raise StateFormatError("%s is %d bytes, more than the %d allowed for a state.json"
                               % (path, size, MAX_STATE_JSON_BYTES))
    with files.open_read(path) as f:
        # its size, not the cap: read(n) allocates n bytes before it reads
        raw = f.read(size + 1)
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise StateFormatError("%s is not valid JSON (%s)" % (path, e))
    except RecursionError:
        raise StateFormatError("%s is nested too deeply to be a topic state" % path)
    if not isinstance(meta, dict):
        raise StateFormatError("%s: expected a JSON object, got %s" % (path, type(meta).__name__))
    if meta.get("format") != FORMAT_NAME:
        raise StateFormatError("%s: not an ldabeam topic state (format %r, expected %r)"
                               % (path, meta.get("format"), FORMAT_NAME))
    version = meta.get("version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise StateFormatError("%s was written by format version %s, this ldabeam reads "
                               "versions %s" % (path, version,
                                                " and ".join(map(str, READ_VERSIONS))))
    for k, t in _REQUIRED.items():
        if k not in meta:
            raise StateFormatError("%s: field %r is missing" % (path, k))
        v = meta[k]
        if not isinstance(v, t) or isinstance(v, bool):
            raise StateFormatError("%s: field %r should be a %s, got %r"
                                   % (path, k, t.__name__, v))
    if not (meta.get("vocab_hash") is None or isinstance(meta.get("vocab_hash"), str)):
        raise StateFormatError("%s: field 'vocab_hash' should be a string or null, got %r"
                               % (path, meta.get("vocab_hash")))
    if not (meta.get("rng") is None or isinstance(meta.get("rng"), dict)):
        raise StateFormatError("%s: field 'rng' should be an object or null, got %r"
                               % (path, meta.get("rng")))
    meta.setdefault("vocab_hash", None)
    meta.setdefault("rng", None)
    _check_declared_sizes(path, meta)
    return meta


# Sizes an algorithm allocates from state.json (V x K topic-word counts, P x D x K particle
# document counts) that no array backs are allowed up to this many values, or this many
# times the values the arrays hold: an edited state.json cannot make a reader allocate
# terabytes before anything else is checked.
MAX_UNBACKED_VALUES = 1 << 28
UNBACKED_FACTOR = 64


def _check_declared_sizes(path: str, meta: Dict[str, Any]) -> None:
    """StateFormatError when state.json's K, V (and P, D) disagree with its arrays' shapes.

    Arrays whose shape is fixed by K and V are checked exactly (``ntilde`` V x K, ``nz`` /
    ``topic_totals`` / ``alpha`` K, ``indptr`` V + 1); the work sizes allocated from them
    (V x K and, for particle filters, P x D x K) must stay within the bound above."""
    K, V = max(meta["n_topics"], 0), max(meta["n_words"], 0)   # < 1: refused when built
    shapes = {}
    held = 0
    for name, e in meta["arrays"].items():
        shape = e.get("shape") if isinstance(e, dict) else None
        if isinstance(shape, list) and all(isinstance(x, int) and not isinstance(x, bool)
                                           and x >= 0 for x in shape):
            shapes[name] = tuple(shape)
            n = 1
            for x in shape:
                n *= x
            held += n
    expect = {"ntilde": (V, K), "nz": (K,), "topic_totals": (K,), "alpha": (K,),
              "indptr": (V + 1,)}
    for name, want in expect.items():
        if name in shapes and shapes[name] != want:
            raise StateFormatError("%s: array %s has shape %s but n_topics=%d, n_words=%d need "
                                   "%s" % (path, name, shapes[name], K, V, want))
    P = meta["params"].get("n_particles", 1)
    P = P if isinstance(P, int) and not isinstance(P, bool) and P >= 1 else 1
    D = shapes["doc_ptr"][0] - 1 if len(shapes.get("doc_ptr", ())) == 1 else 0
    need = V * K + P * max(D, 0) * K
    if need > max(MAX_UNBACKED_VALUES, UNBACKED_FACTOR * held):
        raise StateFormatError("%s: n_topics=%d, n_words=%d%s ask for %d values but the arrays "
                               "hold only %d: the sizes were edited or damaged"
                               % (path, K, V, ", n_particles=%d" % P if P > 1 else "", need,
                                  held))
