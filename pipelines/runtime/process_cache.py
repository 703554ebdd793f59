"""The one per-process cache of loaded model states, shared by the DoFns of a worker process:
the Beam trainer's window states (:mod:`pipelines.training.beam_state`) and the streaming
job's checkpoints (:mod:`pipelines.streaming.stream_step`). Beam's ``Shared`` keeps a weak
reference per tag, so a state stays loaded while some DoFn holds it and is loaded once however
many threads ask."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from apache_beam.utils import shared

_HANDLE = shared.Shared()          # one per process (module global, never pickled)


class Held:
    """A loaded algorithm and its checkpoint's info (weak-referenceable, as ``Shared`` needs)."""

    def __init__(self, algorithm, info: Optional[Dict[str, Any]] = None):
        self.algorithm = algorithm
        self.info = info or {}


def acquire(tag: str, load: Callable[[], Held]) -> Held:
    """The held state of ``tag`` in this process, made by ``load()`` the first time."""
    return _HANDLE.acquire(load, tag=tag)
