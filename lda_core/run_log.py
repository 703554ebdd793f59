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

Values are made JSON-able (numpy scalars -> Python numbers; NaN/inf -> null). A resumed run
appends to the same file; a reader ignores a truncated last line (a run killed mid-write).

On an object store (``gs://``, ``s3://``, ...: a file layer with ``can_append = False``, see
:mod:`lda_core.state` and ``pipelines.object_store_files``) an object cannot be appended to,
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

from lda_core.state import LocalFiles, files_for

logger = logging.getLogger(__name__)

RUN_LOG_FILE = "run_log.jsonl"


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return _jsonable(v.tolist())
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

    ``files``: the file layer (default :func:`lda_core.state.files_for` ``(path)``); on one
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
                    old = f.read()
                if old and not old.endswith(b"\n"):
                    # cannot happen with whole-object writes; a copied-in partial line would
                    # otherwise end up in the middle of the log
                    old = old[:old.rfind(b"\n") + 1]
                self._data += old
            return
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")

    def write(self, record: Dict[str, Any]) -> None:
        line = json.dumps(_jsonable(record), sort_keys=True, allow_nan=False)
        if self._buffered:
            if self._closed:
                raise ValueError("write to a closed run log %s" % self.path)
            self._data += (line + "\n").encode("utf-8")
            self._dirty = True
            if record.get("event") in ("start", "end", "error") or record.get("checkpoint"):
                self.flush()
            return
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


def run_log_exists(path: str, files=None) -> bool:
    """True when the run log ``path`` (local or, through its file layer, an object) exists."""
    return (files or files_for(path)).exists(path)


def iter_run_log(path: str, files=None) -> Iterator[Dict[str, Any]]:
    """Records of a run log in file order; a truncated (unparsable) last line is skipped with a
    warning, an unparsable line elsewhere raises ValueError naming the line. ``files``: the
    file layer (default :func:`lda_core.state.files_for` ``(path)``)."""
    files = files or files_for(path)
    if isinstance(files, LocalFiles):
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    else:
        with files.open_read(path) as f:
            lines = f.read().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as e:
            if n == len(lines):
                logger.warning("run log %s: ignoring a truncated last line %d", path, n)
                return
            raise ValueError("run log %s line %d is not JSON: %s" % (path, n, e))


def read_run_log(path: str, event: Optional[str] = None, files=None) -> List[Dict[str, Any]]:
    """All records (or only those of kind ``event``) of a local or object-store run log."""
    return [r for r in iter_run_log(path, files) if event is None or r.get("event") == event]
