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
"""
from __future__ import annotations

import json
import logging
import math
import os
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

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
    """Append-only JSON-lines writer (each record flushed; fsync optional)."""

    def __init__(self, path: str, fsync: bool = False):
        self.path = path
        self.fsync = fsync
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")

    def write(self, record: Dict[str, Any]) -> None:
        line = json.dumps(_jsonable(record), sort_keys=True, allow_nan=False)
        self._f.write(line + "\n")
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def iter_run_log(path: str) -> Iterator[Dict[str, Any]]:
    """Records of a run log in file order; a truncated (unparsable) last line is skipped with a
    warning, an unparsable line elsewhere raises ValueError naming the line."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
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


def read_run_log(path: str, event: Optional[str] = None) -> List[Dict[str, Any]]:
    """All records (or only those of kind ``event``)."""
    return [r for r in iter_run_log(path) if event is None or r.get("event") == event]
