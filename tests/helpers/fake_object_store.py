"""A fake object store for tests: the Beam file system of the scheme ``fakegs://`` (tests only).

``fakegs://bucket/key`` is the file ``$LDABEAM_FAKEGS_ROOT/bucket/key``, with object-store
semantics rather than a file system's:

* an object appears only when its upload completes (``create`` writes a hidden upload file,
  closing the handle moves it into place), as on GCS and S3;
* there are no directories: ``exists`` is true for objects only, listing is by key prefix
  (recursive), ``mkdirs`` does nothing;
* ``rename`` and ``copy`` work on objects only: a "directory" cannot be renamed (the point of
  the test: nothing may rely on an atomic directory rename).

Importing this module registers the scheme (Beam finds file systems among the subclasses of
``FileSystem``). Worker processes of the multi-process DirectRunner do not import the tests;
:func:`worker_site_dir` writes a ``sitecustomize.py`` that imports this module at start-up, to
be put on the workers' ``PYTHONPATH``.
"""
import os
import shutil
import uuid

from apache_beam.io.filesystem import (BeamIOError, CompressedFile, CompressionTypes,
                                       FileMetadata, FileSystem)

SCHEME = "fakegs"
ROOT_ENV = "LDABEAM_FAKEGS_ROOT"
LOG_ENV = "LDABEAM_FAKEGS_LOG"     # if set: one line "<op> <pid> <url>" per open/create/delete
_UPLOADS = ".uploads"


def root() -> str:
    r = os.environ.get(ROOT_ENV)
    if not r:
        raise RuntimeError("set %s to the folder that backs fakegs://" % ROOT_ENV)
    return r


def _log(op: str, url: str) -> None:
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write("%s %d %s\n" % (op, os.getpid(), url))


def read_log(path: str):
    """``[(op, pid, url)]`` of an operations log."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(a, int(b), c) for a, b, c in (l.split(" ", 2) for l in f.read().splitlines())]


def local_path(url: str) -> str:
    """The backing file of ``fakegs://bucket/key``."""
    prefix = SCHEME + "://"
    if not url.startswith(prefix):
        raise ValueError("not a %s URL: %r" % (SCHEME, url))
    key = url[len(prefix):]
    if not key or key.startswith("/") or ".." in key.split("/"):
        raise ValueError("bad %s URL: %r" % (SCHEME, url))
    return os.path.join(root(), key)


class _Upload:
    """Write handle: the object appears (atomically) when the handle is closed."""

    def __init__(self, final: str):
        self._final = final
        up = os.path.join(root(), _UPLOADS)
        os.makedirs(up, exist_ok=True)
        self._tmp = os.path.join(up, uuid.uuid4().hex)
        self._f = open(self._tmp, "wb")
        self.closed = False

    def write(self, b):
        return self._f.write(b)

    def flush(self):
        self._f.flush()

    def tell(self):
        return self._f.tell()

    def writable(self):
        return True

    def close(self):
        if self.closed:
            return
        self.closed = True
        self._f.close()
        os.makedirs(os.path.dirname(self._final), exist_ok=True)
        os.replace(self._tmp, self._final)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FakeObjectStore(FileSystem):
    @classmethod
    def scheme(cls):
        return SCHEME

    def join(self, basepath, *paths):
        out = basepath.rstrip("/")
        for p in paths:
            out += "/" + p.strip("/")
        return out

    def split(self, path):
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path):
        pass

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        prefix = dir_or_prefix
        bucket_url = SCHEME + "://" + prefix[len(SCHEME) + 3:].split("/", 1)[0]
        base = local_path(bucket_url)
        if not os.path.isdir(base):
            return
        for dirpath, _, files in os.walk(base):
            for name in files:
                p = os.path.join(dirpath, name)
                url = bucket_url + "/" + os.path.relpath(p, base).replace(os.sep, "/")
                if url.startswith(prefix):
                    yield FileMetadata(url, os.path.getsize(p), os.path.getmtime(p))

    def create(self, path, mime_type="application/octet-stream",
               compression_type=CompressionTypes.AUTO):
        f = _Upload(local_path(path))
        _log("create", path)
        ct = FileSystem._get_compression_type(path, compression_type)
        return f if ct == CompressionTypes.UNCOMPRESSED else CompressedFile(f, ct)

    def open(self, path, mime_type="application/octet-stream",
             compression_type=CompressionTypes.AUTO):
        p = local_path(path)
        if not os.path.isfile(p):
            raise BeamIOError("Open operation failed", {path: FileNotFoundError(path)})
        f = open(p, "rb")
        _log("open", path)
        ct = FileSystem._get_compression_type(path, compression_type)
        return f if ct == CompressionTypes.UNCOMPRESSED else CompressedFile(f, ct)

    def _objects_only(self, op, sources, destinations):
        errors = {}
        for s, d in zip(sources, destinations):
            ps = local_path(s)
            if not os.path.isfile(ps):
                errors[(s, d)] = IOError("%s: %s is not an object (an object store has no "
                                         "directories to %s)" % (op, s, op))
                continue
            pd = local_path(d)
            os.makedirs(os.path.dirname(pd), exist_ok=True)
            shutil.copyfile(ps, pd)
            if op == "rename":
                os.unlink(ps)
        if errors:
            raise BeamIOError("%s operation failed" % op, errors)

    def copy(self, source_file_names, destination_file_names):
        self._objects_only("copy", source_file_names, destination_file_names)

    def rename(self, source_file_names, destination_file_names):
        self._objects_only("rename", source_file_names, destination_file_names)

    def exists(self, path):
        return os.path.isfile(local_path(path))

    def size(self, path):
        return os.path.getsize(local_path(path))

    def last_updated(self, path):
        return os.path.getmtime(local_path(path))

    def checksum(self, path):
        return str(self.size(path))

    def metadata(self, path):
        p = local_path(path)
        if not os.path.isfile(p):
            raise BeamIOError("Metadata operation failed", {path: FileNotFoundError(path)})
        return FileMetadata(path, os.path.getsize(p), os.path.getmtime(p))

    def delete(self, paths):
        errors = {}
        for path in paths:
            p = local_path(path)
            if os.path.isfile(p):
                os.unlink(p)
                _log("delete", path)
            else:
                errors[path] = FileNotFoundError(path)
        if errors:
            raise BeamIOError("Delete operation failed", errors)


def worker_site_dir(folder: str) -> str:
    """A folder with a ``sitecustomize.py`` that registers this scheme in any Python process
    started with the folder on its ``PYTHONPATH`` (Beam's worker processes)."""
    os.makedirs(folder, exist_ok=True)
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
        f.write("import sys\nsys.path.insert(0, %r)\nimport helpers.fake_object_store  # noqa\n"
                % tests)
    return folder


def objects_under(root_url):
    """The keys of the objects under ``root_url`` (a model folder on the store), relative to
    it, as the project's file layer lists them."""
    from pipelines.runtime.object_store_files import ObjectStoreFiles
    fs = ObjectStoreFiles()
    return [p[len(root_url) + 1:] for p in fs._list(root_url)]
