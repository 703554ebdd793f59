"""A lease on a model directory: one writer at a time.

Two writers on one model directory would publish the same ``step-N`` names, prune each other's
checkpoints and delete each other's scratch; so every command that writes a model (``ldabeam
train`` on any runner, ``ldabeam stream``) holds ``MODEL_DIR/lease.json`` while it runs.
Readers (topics, report, infer, evaluate, export) never need it.

The lease is a small JSON object: ``owner`` (command and user), ``host``, ``pid``,
``pid_start`` (the process start time in clock ticks from ``/proc``, so a recycled pid is not
taken for the holder), ``start_time``, ``heartbeat`` (Unix times) and a random ``token``. A
thread rewrites ``heartbeat`` every ``heartbeat_seconds`` while the lease is held.

* **Locally** the record is written to a temporary sibling and hard-linked to ``lease.json``
  (``link`` fails when the name exists): of two writers exactly one creates it, and the lease
  appears with its whole record, so a lease file is never seen empty while its writer lives.
  A second writer is refused with one line (:class:`LeaseHeld`) naming the holder.
* **An empty or unreadable lease** (not valid JSON: written by hand, or a disk that lost the
  write) cannot name a live holder, since no writer ever shows one: it is taken over at once,
  with a warning naming the file.
* **Stale leases** are taken over: the holder ran on this host and its process is gone (or
  the pid now belongs to a process started at another time), or -- for a holder on another
  host, whose process cannot be checked -- its heartbeat is older than ``stale_seconds``.
  Locally the stale file is first renamed to a unique name (one taker wins the rename), the
  renamed file is checked to be the very lease judged stale (else it is linked back, no
  clobber), and the new lease is then created with ``O_EXCL`` again.
* **On an object store** (a file layer without ``create_new``, e.g. ``gs://`` through Beam's
  ``FileSystems``, which offers no create-if-absent or generation precondition) the lease is
  written when absent and read back after ``settle_seconds``: the writer whose token is read
  back holds it. Two writers starting within that interval can both see the object absent
  and both write it; the later upload wins and the earlier writer then reads the other's
  token and stops. The residual race is that interval (both writers pass the read-back only
  if the store serves a stale read), documented in docs/reliability.md.
"""
from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Dict, Optional

from lda_core.errors import OutputError
from lda_core.storage.files import files_for, LocalFiles

logger = logging.getLogger(__name__)

LEASE_FILE = "lease.json"
HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 600.0
_MAX_LEASE_BYTES = 64 << 10


def _pid_start(pid: int) -> Optional[int]:
    """Start time of process ``pid`` in clock ticks since boot (Linux /proc), None if unknown."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _pid_alive(pid: int, start: Optional[int]) -> bool:
    """True when process ``pid`` exists on this host and (when known) started at ``start``."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass                                   # exists, owned by another user
    if start is not None:
        now = _pid_start(pid)
        if now is not None and now != start:
            return False                       # the pid was recycled
    return True


def describe_holder(rec: Dict[str, Any]) -> str:
    started = rec.get("start_time")
    beat = rec.get("heartbeat")
    fmt = lambda t: (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
                     if isinstance(t, (int, float)) else "?")
    return ("%s (pid %s on host %s, started %s, last heartbeat %s)"
            % (rec.get("owner", "?"), rec.get("pid", "?"), rec.get("host", "?"),
               fmt(started), fmt(beat)))


class LeaseHeld(OutputError):
    """Another live writer holds the lease of the model directory."""


class ModelLease:
    """The lease of one model directory (see module docstring); a context manager."""

    def __init__(self, model_dir: str, owner: str, files=None,
                 heartbeat_seconds: float = HEARTBEAT_SECONDS,
                 stale_seconds: float = STALE_SECONDS, settle_seconds: float = 1.0):
        self.model_dir = model_dir
        self.files = files or files_for(model_dir)
        self.path = self.files.join(model_dir, LEASE_FILE)
        self.heartbeat_seconds = float(heartbeat_seconds)
        self.stale_seconds = float(stale_seconds)
        self.settle_seconds = float(settle_seconds)
        now = time.time()
        try:
            user = getpass.getuser()
        except Exception:                      # no user name (containers): the uid
            user = str(os.getuid()) if hasattr(os, "getuid") else "?"
        self.record = {"owner": "%s by %s" % (owner, user), "host": socket.gethostname(),
                       "pid": os.getpid(), "pid_start": _pid_start(os.getpid()),
                       "start_time": now, "heartbeat": now, "token": uuid.uuid4().hex}
        self._local = isinstance(self.files, LocalFiles)
        self._held = False
        self._created_dir = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.lost = False

    # -- reading ----------------------------------------------------------------------------
    def read(self) -> Optional[Dict[str, Any]]:
        """The lease record in the store; ``{}`` for an unreadable one, None when absent."""
        try:
            with self.files.open_read(self.path) as f:
                raw = f.read(_MAX_LEASE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as e:
            if not self.files.exists(self.path):
                return None
            logger.warning("cannot read the lease %s (%s)", self.path, e)
            return {}
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return {}
        return rec if isinstance(rec, dict) else {}

    def is_stale(self, rec: Dict[str, Any], mtime: Optional[float] = None) -> bool:
        """True when the holder of ``rec`` is gone (module docstring). An empty or
        unreadable lease names no holder and is never shown by a live writer: stale."""
        now = time.time()
        if not rec:
            return True
        if rec.get("host") == self.record["host"] and isinstance(rec.get("pid"), int):
            start = rec.get("pid_start")
            return not _pid_alive(rec["pid"], start if isinstance(start, int) else None)
        beat = rec.get("heartbeat")
        if not isinstance(beat, (int, float)):
            return True
        return now - float(beat) > self.stale_seconds

    # -- acquiring ---------------------------------------------------------------------------
    def acquire(self) -> "ModelLease":
        if self._local:
            if os.path.lexists(self.model_dir) and not os.path.isdir(self.model_dir):
                raise OutputError("%s is a regular file, not a directory; choose another "
                                  "--output" % self.model_dir)
            if not os.path.isdir(self.model_dir):
                os.makedirs(self.model_dir, exist_ok=True)
                self._created_dir = True
        for _ in range(3):
            if self._create():
                break
            rec = self.read()
            if rec is None:
                continue                       # released meanwhile: try again
            if not self.is_stale(rec, self._mtime()):
                raise LeaseHeld("%s is being written by %s; wait for it to finish, stop it, "
                                "or choose another --output (a lease of a process that is "
                                "gone is taken over automatically; %s can be deleted by hand "
                                "if the holder is certainly dead)"
                                % (self.model_dir, describe_holder(rec), self.path))
            logger.warning("taking over the stale lease of %s held by %s", self.model_dir,
                           describe_holder(rec) if rec else
                           "nobody (%s is empty or not JSON)" % self.path)
            self._break(rec)
        else:
            raise LeaseHeld("could not take the lease %s (another writer keeps taking it)"
                            % self.path)
        self._held = True
        if self.heartbeat_seconds > 0:
            self._thread = threading.Thread(target=self._beat, name="ldabeam-lease",
                                            daemon=True)
            self._thread.start()
        return self

    def _data(self) -> bytes:
        return (json.dumps(self.record, sort_keys=True) + "\n").encode("utf-8")

    def _mtime(self) -> Optional[float]:
        if self._local:
            try:
                return os.stat(self.path).st_mtime
            except OSError:
                return None
        return None

    def _create(self) -> bool:
        """Create the lease if there is none; True when this writer now holds it."""
        if self._local:
            tmp = "%s.new-%s" % (self.path, uuid.uuid4().hex)
            try:
                with open(tmp, "wb") as f:
                    f.write(self._data())
                    f.flush()
                    os.fsync(f.fileno())
                os.link(tmp, self.path)        # fails when a lease exists: no clobber
            except FileExistsError:
                return False
            finally:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
            return True
        if self.files.exists(self.path):
            return False
        self.files.write_atomic(self.path, self._data())
        if self.settle_seconds > 0:
            time.sleep(self.settle_seconds)
        rec = self.read()
        return bool(rec) and rec.get("token") == self.record["token"]

    def _break(self, stale: Dict[str, Any]) -> None:
        """Remove the stale lease ``stale`` (and only it)."""
        if not self._local:
            self.files.remove_file(self.path)
            return
        aside = "%s.stale-%s" % (self.path, uuid.uuid4().hex)
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return                             # another taker moved it first
        try:
            with open(aside, "rb") as f:
                moved = json.loads(f.read(_MAX_LEASE_BYTES).decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            moved = {}
        if isinstance(moved, dict) and moved.get("token") != stale.get("token"):
            # a live lease created after the stale one was read: put it back, never clobber
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
        os.unlink(aside)

    # -- holding -----------------------------------------------------------------------------
    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                self.heartbeat()
            except Exception as e:             # keep the thread alive; the next beat retries
                logger.warning("lease heartbeat of %s failed: %s", self.path, e)

    def heartbeat(self) -> None:
        """Rewrite the heartbeat, unless the lease was taken over (then log an error)."""
        rec = self.read()
        if not rec or rec.get("token") != self.record["token"]:
            if not self.lost:
                logger.error("the lease %s is no longer ours (now %s): another writer took "
                             "the model directory over", self.path,
                             describe_holder(rec) if rec else "absent")
            self.lost = True
            return
        self.record["heartbeat"] = time.time()
        self.files.write_atomic(self.path, self._data())

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        rec = self.read()
        if rec and rec.get("token") == self.record["token"]:
            self.files.remove_file(self.path)
        if self._created_dir:
            try:
                os.rmdir(self.model_dir)       # only if nothing else was written
            except OSError:
                pass

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def check_output_location(output: str, inputs) -> None:
    """OutputError when the directory ``output`` is, contains, or lies inside one of
    ``inputs``: :func:`lda_core.storage.output_paths.check_disjoint` (the one rule)."""
    from lda_core.storage.output_paths import check_disjoint
    check_disjoint(output, inputs)


class _Held:
    """Context manager of :func:`hold_model_dir`."""

    def __init__(self, lease: ModelLease):
        self.lease = lease

    def __enter__(self) -> ModelLease:
        return self.lease.acquire()

    def __exit__(self, *exc):
        self.lease.release()


def hold_model_dir(model_dir: str, owner: str, inputs=(), files=None, kind=None,
                   **kw) -> _Held:
    """Check that ``model_dir`` does not overlap ``inputs``, lies inside no other output and
    holds no other kind of output than the writer's (``kind``; default: the kind ``owner``, e.g. "ldabeam vectorize",
    produces, :data:`lda_core.storage.output_paths.COMMAND_KINDS`), then hold its lease for
    the ``with`` block (what every directory-writing command does)."""
    from lda_core.storage import output_paths
    check_output_location(model_dir, list(inputs))
    kind = kind or output_paths.COMMAND_KINDS.get(" ".join(str(owner).split()[:2]))
    if kind is not None:
        output_paths.check_place(model_dir, kind)
    return _Held(ModelLease(model_dir, owner, files=files, **kw))
