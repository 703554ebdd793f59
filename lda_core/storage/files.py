"""The file layer: every file operation of :mod:`lda_core` (topic states, checkpoints, the run
log, leases) goes through a small object -- :class:`LocalFiles` for local paths, or a layer
registered for a URL scheme with :func:`register_files` (the pipelines register one backed by
``apache_beam.io.filesystems`` for ``gs://``, ``s3://``, ...: :mod:`pipelines.runtime.object_store_files`)
-- so ``lda_core`` has no Beam import and any store can stand in for the local disk.
:func:`files_for` picks the layer of a path.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import shutil
import stat
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Sequence, Union

from lda_core.errors import InputError, SpecialFileError
from lda_core.faults import fault_point

logger = logging.getLogger(__name__)


def map_in_order(fn: Callable[[Any], Any], items: Sequence[Any], threads: int) -> List[Any]:
    """``[fn(x) for x in items]``, up to ``threads`` at once (a file layer's
    ``write_threads``), results in the order of ``items``; the first error is raised."""
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(int(threads), len(items))) as pool:
        return list(pool.map(fn, items))


class LocalFiles:
    """Local-disk file operations used by :class:`TopicState` and the checkpoint store.

    A layer for another file system implements the same methods (and is registered with
    :func:`register_files`). Handles returned by ``open_read`` must support ``read``,
    ``readinto``, ``seek`` and ``tell``; those of ``open_write`` ``write`` (both are used as
    context managers). Two capabilities are declared as class attributes (a layer without them
    is taken to have both):

    * ``atomic_dir_rename``: ``publish_dir`` makes ``tmp`` visible under ``final`` all at
      once. When False (object stores), ``make_temp_dir(final)`` returns ``final`` itself,
      ``publish_dir`` does nothing, and the checkpoint store gives every checkpoint a unique
      name and commits it with the ``LATEST`` pointer written last;
    * ``can_append``: the run log appends to its file (when False it rewrites the whole
      object at flush points, see :mod:`lda_core.storage.run_log`).

    A third, ``write_threads`` (default 1), is how many files of one state directory are
    written at once (:meth:`lda_core.storage.state.TopicState.save`): an object store serves
    each object with its own requests, so writing several overlaps their round trips.
    """

    atomic_dir_rename = True
    can_append = True
    write_threads = 1

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def basename(self, path: str) -> str:
        return os.path.basename(os.path.normpath(path))

    def dirname(self, path: str) -> str:
        return os.path.dirname(os.path.abspath(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> List[str]:
        return sorted(os.listdir(path))

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def open_read(self, path: str) -> BinaryIO:
        return open_regular(path)

    def open_write(self, path: str) -> BinaryIO:
        return open(path, "wb")

    def sync_file(self, f: BinaryIO) -> None:
        f.flush()
        os.fsync(f.fileno())

    def make_temp_dir(self, final: str) -> str:
        """A fresh directory beside ``final`` whose name starts with a dot (never listed)."""
        parent = self.dirname(final)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, ".%s.tmp-%s" % (self.basename(final), uuid.uuid4().hex))
        os.makedirs(tmp)
        return tmp

    def publish_dir(self, tmp: str, final: str) -> None:
        """Atomically make the complete directory ``tmp`` appear as ``final``.

        ``os.rename`` of a directory is atomic on POSIX. An existing ``final`` is swapped
        with ``tmp`` in one step where the kernel and file system support it (Linux
        ``renameat2(RENAME_EXCHANGE)``), so a reader sees the old or the new directory, never
        none; elsewhere it is first renamed aside (a reader may briefly see none, and the
        checkpoint store then falls back to the previous checkpoint). The old one is removed."""
        _fsync_dir(tmp)
        old = None
        if os.path.isdir(final) and not os.path.islink(final) and _rename_exchange(tmp, final):
            _fsync_dir(self.dirname(final))
            shutil.rmtree(tmp, ignore_errors=True)       # tmp now holds the old directory
            return
        if os.path.lexists(final):
            old = os.path.join(self.dirname(final),
                               ".%s.old-%s" % (self.basename(final), uuid.uuid4().hex))
            os.rename(final, old)
        os.rename(tmp, final)
        _fsync_dir(self.dirname(final))
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write a small file so that a reader sees the old or the new content, never part:
        temporary sibling, fsync, ``os.replace``, fsync of the directory."""
        d = self.dirname(path)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, ".%s.tmp-%s" % (os.path.basename(path), uuid.uuid4().hex))
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            fault_point("atomic-written")    # a test's kill point: complete, not yet renamed
            os.replace(tmp, path)
            _fsync_dir(d)
        except OSError as e:
            if e.filename is not None:
                raise
            # a failed write (a full disk) names no file: name the one the caller asked for
            raise OSError(e.errno, e.strerror, path) from e
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def remove_file(self, path: str) -> None:
        """Delete one file; a missing file is not an error."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def read_bytes(self, path: str) -> bytes:
        with open_regular(path) as f:
            return f.read()


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for binary reading when it is a regular file (or a link to one);
    :class:`lda_core.errors.SpecialFileError` naming it when it is a FIFO, socket, device or
    directory. The file is opened without blocking (a FIFO with no writer would block the
    open itself) and checked on the open descriptor, so nothing can swap it in between."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "a device")
            raise SpecialFileError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL,
                                   "is %s, not a regular file: ldabeam reads only regular "
                                   "files (a FIFO or device could block or never end); put the "
                                   "file itself there" % what, path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


_RENAMEAT2 = []


def _rename_exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False if unsupported."""
    if not _RENAMEAT2:
        fn = None
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fn = libc.renameat2
                fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                               ctypes.c_uint]
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):
                fn = None
        _RENAMEAT2.append(fn)
    fn = _RENAMEAT2[0]
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


LOCAL_FILES = LocalFiles()

# scheme ("gs", "s3", ...; "*" for every scheme) -> file layer, or a factory returning one
REGISTRY: Dict[str, Any] = {}
_SCHEME = re.compile(r"^([A-Za-z][-A-Za-z0-9+.]*)://")


def path_scheme(path: str) -> Optional[str]:
    """The URL scheme of ``path`` (``"gs"`` for ``gs://b/x``), None for a local path
    (``file://`` URLs count as local, as in ``pipelines.runtime.paths.is_remote``)."""
    m = _SCHEME.match(str(path))
    if m is None or m.group(1).lower() == "file":
        return None
    return m.group(1).lower()


def register_files(scheme: str, layer: Union[Any, Callable[[], Any]],
                   replace: bool = True) -> None:
    """Use ``layer`` (a file layer, or a no-argument factory of one) for paths of ``scheme``
    (``"*"``: every URL scheme without a layer of its own). ``lda_core`` registers none:
    ``pipelines.runtime.object_store_files`` registers the Beam ``FileSystems`` one."""
    key = scheme.lower()
    if replace or key not in REGISTRY:
        REGISTRY[key] = layer


def files_for(path: str):
    """The file layer for ``path``: :data:`LOCAL_FILES` for a local path, else the layer
    registered for its scheme (ValueError naming the path when there is none, so a URL is
    never treated as a local file name such as a folder called ``gs:``)."""
    scheme = path_scheme(path)
    if scheme is None:
        return LOCAL_FILES
    layer = REGISTRY.get(scheme, REGISTRY.get("*"))
    if layer is None:
        raise InputError("%s is a %s:// URL but no file layer is registered for it (lda_core "
                         "handles local paths; importing pipelines.runtime.object_store_files "
                         "registers Apache Beam's FileSystems for every scheme)"
                         % (path, scheme))
    if isinstance(layer, type) or (callable(layer) and not hasattr(layer, "open_read")):
        layer = layer()
        REGISTRY[scheme if scheme in REGISTRY else "*"] = layer
    return layer


def decode_text(raw: bytes, path: str, what: str) -> str:
    """``raw`` as UTF-8; InputError naming ``path`` (a ``what``), the offset and the line of
    the first byte that is not UTF-8 otherwise."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise InputError("%s is not UTF-8 text (byte %d) at line %d: a %s is written by "
                         "ldabeam in UTF-8; restore it or save it as UTF-8"
                         % (path, e.start, line, what)) from None
