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
from typing import Any, BinaryIO, Dict, Optional

import numpy as np

from lda_core.errors import DataIntegrityError, InputError

logger = logging.getLogger(__name__)

STATE_FORMAT_VERSION = 1
FORMAT_NAME = "ldabeam-topic-state"
STATE_FILE = "state.json"
MAX_STATE_JSON_BYTES = 64 << 20      # a state.json larger than this is refused unread
_ARRAY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_CHUNK = 16 << 20                    # bytes per read/hash chunk (bounded memory besides the array)


class StateFormatError(DataIntegrityError):
    """A state directory that is incomplete, corrupt, or of another format version."""


# the file layer (lda_core.storage.files); imported here by the modules that used to find it here
from lda_core.storage.files import (LOCAL_FILES, LocalFiles, REGISTRY, files_for,  # noqa: F401
                            path_scheme, register_files)


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
        np.lib.format.write_array(w, arr, allow_pickle=False)
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
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                hshape, forder, hdtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                hshape, forder, hdtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError("unsupported .npy version %s" % (version,))
        except ValueError as e:
            raise StateFormatError("%s: %s is not a valid .npy file (%s)" % (directory, fname, e))
        offset = f.tell()
        if hdtype.hasobject:
            raise StateFormatError("%s: %s holds Python objects; model files are data, never "
                                   "code" % (directory, fname))
        if hdtype != dtype:
            raise StateFormatError("%s: %s has dtype %s in its header but state.json says %s"
                                   % (directory, fname, hdtype.str, dtype.str))
        if tuple(hshape) != shape:
            raise StateFormatError("%s: %s has shape %s in its header but state.json says %s"
                                   % (directory, fname, tuple(hshape), shape))
        if fsize - offset != nbytes:
            raise StateFormatError(
                "%s: %s is %s: expected %d bytes of data for shape %s %s, the file has %d"
                % (directory, fname, "truncated" if fsize - offset < nbytes else "too long",
                   nbytes, shape, dtype.str, fsize - offset))
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
        return all(_arrays_equal(self.arrays[k], other.arrays[k]) for k in self.arrays)

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
    def save(self, directory: str, files: Optional[LocalFiles] = None) -> None:
        """Write the complete state under a temporary name, then publish it as ``directory``.

        The JSON is serialised first (so a non-JSON-able value fails before anything is
        written); the temporary directory is removed if anything fails. ``files``: the file
        layer (default :func:`files_for` ``(directory)``); on a layer without atomic directory
        rename (object stores) the files are written under ``directory`` itself, ``state.json``
        last."""
        files = files or files_for(directory)
        if self.version != STATE_FORMAT_VERSION:
            raise ValueError("cannot save a state of format version %s; this ldabeam writes "
                             "version %d" % (self.version, STATE_FORMAT_VERSION))
        arrays = {}
        for k, a in self.arrays.items():
            a = np.asarray(a)
            _check_dtype(a.dtype, "array %r" % k)
            arrays[k] = a
        # fail early on non-JSON-able params / info / rng
        json.dumps(self._header({}), default=_json_default)
        tmp = files.make_temp_dir(directory)
        try:
            entries = {}
            for k in sorted(arrays):
                entries[k] = _write_npy(files, files.join(tmp, k + ".npy"), arrays[k])
            data = json.dumps(self._header(entries), default=_json_default, indent=1,
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
    def load(cls, directory: str, files: Optional[LocalFiles] = None) -> "TopicState":
        """Read a state directory, checking version, fields, shapes, dtypes and checksums.

        Raises FileNotFoundError if ``directory`` does not exist and :class:`StateFormatError`
        (a ValueError) saying precisely what is wrong otherwise."""
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
            arrays[name] = _read_npy(files, directory, name, entries[name])
        try:
            return cls(algorithm=meta["algorithm"], n_topics=meta["n_topics"],
                       n_words=meta["n_words"], vocab_hash=meta["vocab_hash"], arrays=arrays,
                       params=meta["params"], step=meta["step"], docs_seen=meta["docs_seen"],
                       rng=meta["rng"], info=meta["info"], version=meta["version"])
        except ValueError as e:
            raise StateFormatError("%s/state.json: %s" % (directory, e))

    # -- conveniences -------------------------------------------------------------------
    def nbytes(self) -> int:
        return int(sum(np.asarray(a).nbytes for a in self.arrays.values()))

    def describe(self) -> str:
        arrs = ", ".join("%s %s %s" % (k, np.asarray(a).dtype, tuple(np.shape(a)))
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
        raw = f.read(MAX_STATE_JSON_BYTES + 1)
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
    if version != STATE_FORMAT_VERSION:
        raise StateFormatError("%s was written by format version %s, this ldabeam reads "
                               "version %d" % (path, version, STATE_FORMAT_VERSION))
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
