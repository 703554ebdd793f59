"""The file layer of the topic state, checkpoints and run log on object stores (``gs://``,
``s3://``, ``azfs://``, ... any scheme Apache Beam's ``FileSystems`` knows).

``lda_core`` has no Beam import: :class:`lda_core.storage.state.TopicState`,
:class:`lda_core.storage.checkpoint.CheckpointStore` and :class:`lda_core.storage.run_log.RunLog` do every
file operation through a small file-layer object (:class:`lda_core.storage.state.LocalFiles` for local
paths). :class:`ObjectStoreFiles` is that object for URLs, backed by
``apache_beam.io.filesystems.FileSystems`` -- the same calls Dataflow workers use to read the
shards, so a worker reads a checkpoint or a scratch state on ``gs://`` the way the driver
wrote it. :func:`register` (run when :mod:`pipelines.ingest.dataset` or :mod:`pipelines.training.beam_state`
is imported) makes it the default layer of every URL scheme, so
``CheckpointStore("gs://bucket/model")`` and ``TopicState.load("gs://...")`` need no
argument.

What an object store gives, and what the layer does with it:

* objects, no directories: a "directory" is the set of objects under ``prefix/``;
  ``isdir`` is a one-object listing, ``makedirs`` does nothing;
* an object appears whole when its upload completes (GCS, S3, Azure blobs), so
  ``write_atomic`` is a single upload;
* no rename of a directory (GCS and S3 "rename" copies every object): the layer declares
  ``atomic_dir_rename = False``. ``TopicState.save`` then writes every file under its final
  name (``make_temp_dir`` returns the final directory, ``publish_dir`` does nothing), the
  ``state.json`` with every array's sha256 last, and the checkpoint store names each
  checkpoint uniquely (``step-000000120-<random>``) and commits it by writing the ``LATEST``
  pointer object last (see :mod:`lda_core.storage.checkpoint`);
* no append: ``can_append = False``; the run log buffers its records and rewrites its one
  object at flush points (see :mod:`lda_core.storage.run_log`).
"""
from __future__ import annotations

import io
import logging
from typing import BinaryIO, List

logger = logging.getLogger(__name__)

_MIME = "application/octet-stream"


def is_remote(path) -> bool:
    """True for a URL handled by Beam ``FileSystems`` (``gs://``, ``s3://``, ...); a local
    path or a ``file://`` URL is not. The one test every module uses."""
    from lda_core.storage.state import path_scheme
    return path is not None and path_scheme(path) is not None


def _fs():
    from apache_beam.io.filesystems import FileSystems
    return FileSystems


def _uncompressed():
    from apache_beam.io.filesystem import CompressionTypes
    return CompressionTypes.UNCOMPRESSED


class _ReadHandle(io.RawIOBase):
    """Adds ``readinto`` to a Beam read channel that lacks it (most already have it)."""

    def __init__(self, f):
        super().__init__()
        self._f = f

    def readable(self):
        return True

    def seekable(self):
        return True

    def read(self, n=-1):
        return self._f.read(n)

    def readinto(self, b):
        data = self._f.read(len(b))
        n = len(data)
        memoryview(b).cast("B")[:n] = data
        return n

    def seek(self, pos, whence=0):
        return self._f.seek(pos, whence)

    def tell(self):
        return self._f.tell()

    def close(self):
        try:
            self._f.close()
        finally:
            super().close()


class ObjectStoreFiles:
    """The :class:`lda_core.storage.state.LocalFiles` operations for Beam ``FileSystems`` URLs."""

    atomic_dir_rename = False     # publish by a pointer written last, not by a rename
    can_append = False            # the run log rewrites its object at flush points

    # -- names (string operations: URLs are never normalised against the working directory)
    def join(self, *parts: str) -> str:
        out = parts[0].rstrip("/")
        for p in parts[1:]:
            p = p.strip("/")
            if p:
                out = out + "/" + p
        return out

    def basename(self, path: str) -> str:
        return path.rstrip("/").rsplit("/", 1)[-1]

    def dirname(self, path: str) -> str:
        head = path.rstrip("/").rsplit("/", 1)[0]
        return head

    # -- queries ------------------------------------------------------------------------------
    def _prefix(self, path: str) -> str:
        return path.rstrip("/") + "/"

    def _list(self, path: str, limit=None) -> List[str]:
        """Paths of the objects under ``path/`` (recursive), sorted."""
        from apache_beam.io.filesystem import BeamIOError
        try:
            res = _fs().match([self._prefix(path) + "**"],
                              limits=None if limit is None else [limit])[0]
        except BeamIOError as e:     # e.g. the bucket prefix holds nothing
            logger.debug("listing %s failed: %s", path, e)
            return []
        return sorted(m.path for m in res.metadata_list)

    def isdir(self, path: str) -> bool:
        return bool(self._list(path, limit=1))

    def exists(self, path: str) -> bool:
        return _fs().exists(path) or self.isdir(path)

    def listdir(self, path: str) -> List[str]:
        pre = self._prefix(path)
        names = set()
        for p in self._list(path):
            if p.startswith(pre):
                rest = p[len(pre):]
                if rest:
                    names.add(rest.split("/", 1)[0])
        return sorted(names)

    def size(self, path: str) -> int:
        res = _fs().match([path])[0].metadata_list
        if not res:
            raise FileNotFoundError(path)
        return int(res[0].size_in_bytes)

    # -- reading and writing --------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        """Nothing to do: an object store has no directories."""

    def open_read(self, path: str) -> BinaryIO:
        f = _fs().open(path, mime_type=_MIME, compression_type=_uncompressed())
        if not hasattr(f, "readinto"):
            return _ReadHandle(f)
        return f

    def open_write(self, path: str) -> BinaryIO:
        """The object appears when the handle is closed (upload complete)."""
        return _fs().create(path, mime_type=_MIME, compression_type=_uncompressed())

    def sync_file(self, f) -> None:
        """Nothing to do: durability comes with the completed upload (on close)."""

    def read_bytes(self, path: str) -> bytes:
        with self.open_read(path) as f:
            return f.read()

    def write_atomic(self, path: str, data: bytes) -> None:
        """One object upload: readers see the old object or the new one, never part."""
        with self.open_write(path) as f:
            f.write(data)

    # -- directories of objects ----------------------------------------------------------------
    def make_temp_dir(self, final: str) -> str:
        """No rename on object stores: the state is written under its final name (objects
        left there by an earlier attempt are deleted first); the caller commits it by a
        pointer written last (the checkpoint store) or by ``state.json`` written last."""
        if self.isdir(final):
            self.remove_tree(final)
        return final

    def publish_dir(self, tmp: str, final: str) -> None:
        if tmp.rstrip("/") != final.rstrip("/"):
            raise ValueError("object stores cannot rename a directory (%s -> %s)"
                             % (tmp, final))

    def remove_file(self, path: str) -> None:
        try:
            _fs().delete([path])
        except Exception as e:  # missing or already deleted: nothing to do
            logger.debug("delete %s: %s", path, e)

    def remove_tree(self, path: str) -> None:
        paths = self._list(path)
        if not paths:
            return
        try:
            _fs().delete(paths)
        except Exception as e:
            logger.warning("could not delete every object under %s: %s", path, e)


OBJECT_STORE_FILES = ObjectStoreFiles()


def register() -> None:
    """Make :class:`ObjectStoreFiles` the file layer of every URL scheme in ``lda_core``
    (idempotent; a layer registered for one scheme explicitly still wins for that scheme)."""
    from lda_core.storage.state import register_files
    register_files("*", OBJECT_STORE_FILES, replace=False)


def files_for(path: str):
    """The file layer for ``path``: local files or this object-store layer."""
    register()
    from lda_core.storage.state import files_for as _files_for
    return _files_for(path)
