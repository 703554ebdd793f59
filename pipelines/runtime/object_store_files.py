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
  object at flush points (see :mod:`lda_core.storage.run_log`);
* ``gs://`` whole-object reads and writes (``read_bytes``, ``write_atomic``: states, step
  infos, pointers, the run log) go straight to the blob of Beam's GCS client: one download
  (checksum verified) and, up to 8 MiB, one upload request, where Beam's read and write
  channels take two each (metadata then media; a resumable upload's start then its data);
* deletes: one object is one single delete; a tree is one listing and the store's batch
  delete (Beam's ``delete_batch`` on ``gs://``: up to 100 objects a request), and when a store
  refuses the batch (a GCS emulator answers "not multi-part") or some of its items, the
  refused objects are deleted one by one. What still cannot be removed is counted and
  reported once, in one warning naming the prefix and the count (:meth:`remove_tree`
  returns the count).

Requests: ``google-cloud-storage`` looks a bucket's metadata up in a background request the
first time each client touches the bucket, only to label tracing spans, and Beam's
``GCSFileSystem`` makes a new client for every call -- one extra request per file operation.
Unless tracing is switched on (``ENABLE_GCS_PYTHON_CLIENT_OTEL_TRACES``) the layer turns that
lookup off for this process and the processes it starts (:func:`skip_bucket_metadata_lookups`,
run on import).
"""
from __future__ import annotations

import io
import logging
import os
from typing import BinaryIO, Dict, List, Sequence

from lda_core.storage.files import register_files

logger = logging.getLogger(__name__)

_MIME = "application/octet-stream"

# google-cloud-storage's switches of its span labels (google/cloud/storage/_opentelemetry_tracing)
TRACES_ENV = "ENABLE_GCS_PYTHON_CLIENT_OTEL_TRACES"
BUCKET_METADATA_ENV = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"


def skip_bucket_metadata_lookups() -> None:
    """Turn off google-cloud-storage's background bucket lookup (module docstring) unless
    its tracing is on or the variable is set already; exported, so worker processes started
    from here inherit it."""
    if os.environ.get(TRACES_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return
    os.environ.setdefault(BUCKET_METADATA_ENV, "true")


skip_bucket_metadata_lookups()


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
    write_threads = 8             # a state's objects written at once: their round trips overlap

    def __init__(self):
        self._reported = set()    # objects a delete failed on, already in a warning

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
        """One metadata request (a ``match`` of a plain name asks twice: exists, then
        metadata)."""
        try:
            return int(_fs().get_filesystem(path).metadata(path).size_in_bytes)
        except Exception as e:
            _raise_missing(path, e)
            raise

    # -- reading and writing --------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        """Nothing to do: an object store has no directories."""

    def open_read(self, path: str) -> BinaryIO:
        """A read handle (FileNotFoundError when there is no such object, whatever the store's
        client raises)."""
        try:
            f = _fs().open(path, mime_type=_MIME, compression_type=_uncompressed())
        except Exception as e:
            _raise_missing(path, e)
            raise
        if not hasattr(f, "readinto"):
            return _ReadHandle(f)
        return f

    def open_write(self, path: str) -> BinaryIO:
        """The object appears when the handle is closed (upload complete)."""
        return _fs().create(path, mime_type=_MIME, compression_type=_uncompressed())

    def sync_file(self, f) -> None:
        """Nothing to do: durability comes with the completed upload (on close)."""

    def read_bytes(self, path: str) -> bytes:
        """The whole object. On ``gs://`` one download request, its checksum verified (a read
        channel first asks for the object's metadata); elsewhere the read channel."""
        gcs = _gcs_client(path)
        if gcs is not None:
            from google.api_core.exceptions import NotFound   # with the gs file system
            try:
                return _gcs_blob(gcs, path).download_as_bytes(raw_download=True)
            except NotFound as e:
                raise FileNotFoundError(path) from e
        with self.open_read(path) as f:
            return f.read()

    def write_atomic(self, path: str, data: bytes) -> None:
        """One object upload: readers see the old object or the new one, never part. On
        ``gs://`` one request up to 8 MiB (a write channel makes every upload resumable: a
        request to start it, then the data)."""
        gcs = _gcs_client(path)
        if gcs is not None:
            _gcs_blob(gcs, path).upload_from_string(bytes(data), content_type=_MIME)
            return
        with self.open_write(path) as f:
            f.write(data)

    # -- directories of objects ----------------------------------------------------------------
    def make_temp_dir(self, final: str) -> str:
        """No rename on object stores: the state is written under its final name (objects
        left there by an earlier attempt are deleted first); the caller commits it by a
        pointer written last (the checkpoint store) or by ``state.json`` written last."""
        self.remove_tree(final)       # one listing; nothing more when there is nothing
        return final

    def publish_dir(self, tmp: str, final: str) -> None:
        if tmp.rstrip("/") != final.rstrip("/"):
            raise ValueError("object stores cannot rename a directory (%s -> %s)"
                             % (tmp, final))

    def remove_file(self, path: str) -> int:
        """Delete one object (one request); a missing one is not an error. Returns 1 when it
        could not be deleted (reported once, see :meth:`remove_files`), else 0."""
        return self.remove_files([path], path)

    def remove_tree(self, path: str) -> int:
        """Delete every object under ``path/``: one listing, then :meth:`remove_files`.
        Returns how many objects are left."""
        paths = self._list(path)
        return self.remove_files(paths, path) if paths else 0

    def remove_files(self, paths: Sequence[str], where: str = None) -> int:
        """Delete the objects ``paths`` (missing ones are not an error): the store's batch
        delete, then single deletes for what the batch refused. Returns how many are left;
        they are reported in one warning naming ``where`` (default: the first path) and the
        count, objects this layer reported before left out."""
        paths = list(paths)
        if not paths:
            return 0
        return self._report(where or paths[0], self._delete(paths), len(paths))

    def _report(self, where: str, left: Dict[str, BaseException], asked: int) -> int:
        new = sorted(p for p in left if p not in self._reported)
        if new:
            self._reported.update(new)
            logger.warning("could not delete %d of %d object(s) under %s (first: %s: %s); "
                           "nothing reads them again, they can be deleted by hand",
                           len(new), asked, where, new[0], _one_line(left[new[0]]))
        return len(left)

    def _delete(self, paths: Sequence[str]) -> Dict[str, BaseException]:
        """Delete ``paths``; {path: error} of those that could not be deleted."""
        gcs = _gcs_client(paths[0])
        refused: Dict[str, BaseException] = {}
        if len(paths) > 1:
            refused = (_gcs_batch_delete(gcs, paths) if gcs is not None
                       else _batch_delete(paths))
            if refused:
                logger.debug("batch delete refused %d of %d object(s) (first: %s); deleting "
                             "them one by one", len(refused), len(paths),
                             _one_line(next(iter(refused.values()))))
        todo = list(refused) if len(paths) > 1 else list(paths)
        left = {}
        for p in todo:
            try:
                if gcs is not None:
                    gcs.delete(p)             # a missing object is not an error
                else:
                    _single_delete(p)
            except Exception as e:            # kept, counted and reported by the caller
                left[p] = e
        return left


def _raise_missing(path: str, e: BaseException) -> None:
    """FileNotFoundError from ``e`` when ``path`` is not an object (asked only after an
    error, so a found object costs no request more)."""
    if isinstance(e, FileNotFoundError):
        raise e
    if not _fs().exists(path):
        raise FileNotFoundError(path) from e


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _gcs_client(path: str):
    """The ``GcsIO`` of the ``gs://`` file system (its client and retry settings), or None for
    another scheme: Beam's ``FileSystems.delete`` lists every path before deleting it and has
    no single-object delete, ``GcsIO`` has both (``delete_batch``, ``delete``)."""
    try:
        fs = _fs().get_filesystem(path)
    except ValueError:                        # no file system for the scheme: deletes fail
        return None                           # one by one and are counted
    make = getattr(fs, "_gcsIO", None) if fs.scheme() == "gs" else None
    return make() if make is not None else None


def _gcs_blob(gcs, path: str):
    """The ``google-cloud-storage`` blob of ``gs://bucket/name`` on ``gcs``'s client."""
    from apache_beam.io.gcp.gcsio import parse_gcs_path   # with the gs file system
    bucket, name = parse_gcs_path(path)
    return gcs.client.bucket(bucket).blob(name)


def _gcs_batch_delete(gcs, paths: Sequence[str]) -> Dict[str, BaseException]:
    """``GcsIO.delete_batch``: {path: error} of the refused items (every path when the
    store refuses the batch request itself); a missing object counts as deleted."""
    try:
        results = gcs.delete_batch(list(paths))
    except Exception as e:                    # the batch request itself refused
        return {p: e for p in paths}
    return {p: IOError("HTTP status %s" % code) for p, code in results if code is not None}


def _batch_delete(paths: Sequence[str]) -> Dict[str, BaseException]:
    """``FileSystems.delete`` of every path: {path: error} of the refused ones."""
    from apache_beam.io.filesystem import BeamIOError
    try:
        _fs().delete(list(paths))
    except BeamIOError as e:
        details = e.exception_details or {}
        named = {p: details[p] for p in paths if p in details}
        return named or {p: e for p in paths}
    except Exception as e:
        return {p: e for p in paths}
    return {}


def _single_delete(path: str) -> None:
    """``FileSystems.delete`` of one object; an object that is gone counts as deleted."""
    try:
        _fs().delete([path])
    except Exception:
        if _fs().exists(path):
            raise


OBJECT_STORE_FILES = ObjectStoreFiles()


def register() -> None:
    """Make :class:`ObjectStoreFiles` the file layer of every URL scheme in ``lda_core``
    (idempotent; a layer registered for one scheme explicitly still wins for that scheme)."""
    register_files("*", OBJECT_STORE_FILES, replace=False)
