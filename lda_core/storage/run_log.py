"""The run log: one JSON object per line, appended as training goes (in-process and Beam).

Record kinds (key ``event``):

* ``"start"``  — run settings: algorithm, K, V, D, S, passes, seed, runner, resumed_from_step.
* ``"step"``   — one per global step: ``step`` (t after the step, 1-based), ``pass``, ``batch``
  (index within the pass), ``docs_seen``, ``docs`` / ``tokens`` / ``empty`` / ``capped`` of the
  minibatch, ``rho``, ``mean_change`` (mean absolute change of λ), ``metrics`` (dict, only when
  evaluated: e.g. ``completion_ll_per_token``, ``per_word_bound``), ``wall_time`` (Unix time),
  ``elapsed`` (seconds since this process started training), ``checkpoint`` (path, when one
  was published after this step).
* ``"end"``    — final step, docs seen, elapsed seconds, final metrics, checkpoint path.
* ``"error"``  — a step that was refused (e.g. non-finite statistics) and the message.
* ``"timing"`` — the cost of a run's (in-process) or a window's (Beam) steps by phase:
  ``steps``, ``wall``, ``seconds`` and ``bytes`` per phase, ``workers``, ``parallel``
  (:func:`lda_core.training.phase_times.timing_record`).

Values are made JSON-able (numpy scalars -> Python numbers; NaN/inf -> null). A resumed run
appends to the same file. A run killed mid-write can leave a torn last line: every writer
repairs it before appending (:func:`repair_tail`: a complete record that lost only its newline
is kept, a partial one is cut off -- it belongs to a step after the last checkpoint, which the
resumed run logs again), and every reader skips and counts a line that is not a JSON object
(a warning names the lines) instead of failing, so a damaged log never makes the model
unreadable.

On an object store (``gs://``, ``s3://``, ...: a file layer with ``can_append = False``, see
:mod:`lda_core.storage.state` and ``pipelines.runtime.object_store_files``) an object cannot be appended to,
so the log is still one object, ``MODEL_DIR/run_log.jsonl``, with the same lines, but it is
*rewritten whole* (one upload: readers see the previous or the new version, never part) at
each flush point: every ``start``, ``end`` and ``error`` record, every record that names a
published checkpoint, :meth:`RunLog.flush` and :meth:`RunLog.close`. Records in between are
held in memory. A resumed run first reads the existing object and keeps its records. If the
process dies, the records after the last flush are lost -- they are those of steps after the
last checkpoint, which the resumed run computes and logs again (locally they stay in the file
and appear twice). Each rewrite uploads the whole log: about 0.5 kB per step, so the log
stays far smaller than the checkpoint published at the same moment until a run has taken
thousands of steps per megabyte of topic state.
"""
from __future__ import annotations

import json
import logging
import math
import os
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

from lda_core.faults import armed, die
from lda_core.storage.files import files_for
from lda_core.storage.output_paths import check_not_link

logger = logging.getLogger(__name__)

RUN_LOG_FILE = "run_log.jsonl"


def jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return jsonable(v.tolist())
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if v is None or isinstance(v, (str, int, bool)):
        return v
    return str(v)


class RunLog:
    """Append-only JSON-lines writer (each record flushed; fsync optional).

    ``files``: the file layer (default :func:`lda_core.storage.files.files_for` ``(path)``); on one
    that cannot append (object stores) the records are buffered and the whole object is
    rewritten at flush points (module docstring)."""

    def __init__(self, path: str, fsync: bool = False, files=None):
        self.path = path
        self.fsync = fsync
        self.files = files or files_for(path)
        self._buffered = not getattr(self.files, "can_append", True)
        if self._buffered:
            self._f = None
            self._closed = False
            self._dirty = False
            self._data = bytearray()
            if self.files.exists(path):
                with self.files.open_read(path) as f:
                    self._data += _complete_lines(f.read())
            return
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        # a link would be followed, "repaired" and appended to wherever it points
        check_not_link(path, "run log")
        repair_tail(path)
        self._f = open(path, "a", encoding="utf-8")

    def write(self, record: Dict[str, Any]) -> None:
        line = json.dumps(jsonable(record), sort_keys=True, allow_nan=False)
        if self._buffered:
            if self._closed:
                raise ValueError("write to a closed run log %s" % self.path)
            self._data += (line + "\n").encode("utf-8")
            self._dirty = True
            if record.get("event") in ("start", "end", "error") or record.get("checkpoint"):
                self.flush()
            return
        if armed("runlog"):
            self._f.write(line[:len(line) // 2])
            self._f.flush()
            die()
        self._f.write(line + "\n")
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())

    def flush(self) -> None:
        """Make every record written so far readable (a no-op for an appended local file,
        which is flushed per record)."""
        if self._buffered:
            if self._dirty:
                self.files.write_atomic(self.path, bytes(self._data))
                self._dirty = False
        elif not self._f.closed:
            self._f.flush()

    def close(self) -> None:
        if self._buffered:
            if not self._closed:
                self.flush()
                self._closed = True
            return
        if not self._f.closed:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line.decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False


def _complete_lines(data: bytes) -> bytes:
    """``data`` ending at a line end: a torn last line is cut off, a complete record that only
    lost its newline gets one."""
    if not data or data.endswith(b"\n"):
        return data
    cut = data.rfind(b"\n") + 1
    if _parses(data[cut:]):
        return data + b"\n"
    logger.warning("run log: dropping a torn last line of %d bytes (a run killed while "
                   "writing it)", len(data) - cut)
    return data[:cut]


def repair_tail(path: str, chunk: int = 1 << 16) -> None:
    """Make the local run log ``path`` end at a line end before appending (see
    :func:`_complete_lines`); reads only the last line."""
    try:
        f = open(path, "rb+")
    except FileNotFoundError:
        return
    with f:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return
        pos, tail = end, b""
        while pos > 0 and b"\n" not in tail:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            tail = f.read(step) + tail
        start = pos + tail.rfind(b"\n") + 1
        fixed = _complete_lines(tail[tail.rfind(b"\n") + 1:])
        f.seek(start)
        f.truncate()
        f.write(fixed)
        f.flush()
        os.fsync(f.fileno())


def append_records(path: str, records, files=None) -> None:
    """Append ``records`` to the run log ``path`` in one write (a torn last line repaired
    first): appended to a local file; on an object store (no append) the object is read, the
    lines added and the whole object rewritten in one upload."""
    files = files or files_for(path)
    data = "".join(json.dumps(jsonable(r), sort_keys=True, allow_nan=False) + "\n"
                   for r in records).encode("utf-8")
    if getattr(files, "can_append", True):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        repair_tail(path)
        with open(path, "ab") as fh:
            fh.write(data)
        return
    old = b""
    if files.exists(path):
        with files.open_read(path) as fh:
            old = _complete_lines(fh.read())
    files.write_atomic(path, old + data)


def run_log_exists(path: str, files=None) -> bool:
    """True when the run log ``path`` (local or, through its file layer, an object) exists."""
    return (files or files_for(path)).exists(path)


def iter_run_log(path: str, files=None, damaged: Optional[List[int]] = None
                 ) -> Iterator[Dict[str, Any]]:
    """Records of a run log in file order. A line that is not a JSON object (torn by a kill,
    edited, invalid UTF-8) is skipped: its number is appended to ``damaged`` when given and a
    warning names the skipped lines. ``files``: the file layer (default
    :func:`lda_core.storage.files.files_for` ``(path)``)."""
    files = files or files_for(path)
    with files.open_read(path) as f:
        raw = f.read()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    bad = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            rec = None
        if not isinstance(rec, dict):
            bad.append(n)
            continue
        yield rec
    if bad:
        logger.warning("run log %s: skipped %d damaged line(s) (line %s)", path, len(bad),
                       ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else ""))
        if damaged is not None:
            damaged.extend(bad)


def read_run_log(path: str, event: Optional[str] = None, files=None) -> List[Dict[str, Any]]:
    """All records (or only those of kind ``event``) of a local or object-store run log."""
    return [r for r in iter_run_log(path, files) if event is None or r.get("event") == event]
