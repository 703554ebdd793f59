"""The one runner interface: ``run(spec, algorithm, data, session) -> TrainResult``.

Every way of training implements it: the in-process loop and the whole-corpus sampler
(:mod:`lda_core.training.trainer`), the Beam trainer waiting on its windows or submitting one
detached window (``pipelines.training.beam_train``), and the stream-order samplers' Beam chain
(``pipelines.training.beam_sequential``). A runner is an object holding its own few settings
(e.g. the Beam runner's windows, unroll, pieces and Beam options); everything a run is asked to
do is the :class:`lda_core.training.spec.TrainSpec`. ``ldabeam train`` builds the spec and
picks the runner in one place (``pipelines.commands.train.choose_runner``), which is where a
new runner plugs in.

``algorithm``: the algorithm object at its current position (fresh, or loaded from the
checkpoint being resumed). ``data``: :class:`TrainData`, the shards and what the in-process
runners read them through. ``session``: the :class:`lda_core.training.session.Session` the run
reports to, built from the spec by the caller (:meth:`Session.for_spec`), or None (the runner
opens one); the runner begins it at its start position (:func:`open_session`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Tuple

from lda_core.training.spec import TrainSpec


@dataclass(frozen=True)
class TrainData:
    """What a run trains on: the shard files and their vocabulary hash (the Beam runners read
    the files in their workers), the seeded minibatch source of the in-process runner
    (anything with ``iter_from(step)`` and ``batches_per_pass``, or an iterable from step 0),
    and ``documents``, which reads every training document at once (the whole-corpus
    sampler)."""
    files: Tuple[str, ...] = ()
    vocab_hash: Optional[str] = None
    minibatches: Any = None
    documents: Optional[Callable[[], Any]] = None


class Runner(Protocol):
    """A way of training (module docstring)."""

    def run(self, spec: TrainSpec, algorithm, data: TrainData, session=None) -> Any:
        """Train ``algorithm`` as ``spec`` says on ``data``; a ``TrainResult`` (or, for a
        detached launch, what was submitted)."""
