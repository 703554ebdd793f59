"""What a training run is asked to do, declared once: :class:`TrainSpec`.

A spec says *what* to train and *how long*, never *where*: the algorithm (its registry name and
the settings it was built with), the :class:`Schedule` (passes or the ``--passes auto`` rule,
seed, minibatch size, max steps, where to start), the :class:`Evaluation` (held-out documents
and cadence) and the :class:`Output` (checkpoint store, run log, checkpoint cadence). Where it
runs is a runner's business (:mod:`lda_core.training.runner`): every runner implements
``run(spec, algorithm, data, session) -> TrainResult`` and keeps its own few settings in a small
object of its own (e.g. ``pipelines.training.beam_train.BeamSettings``).

Framework-free (no Beam); frozen, so a runner can hand a spec to a worker or a detached job as
it is.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Dict, Mapping, Optional, Tuple

from lda_core.training.pass_stop import PassStop


@dataclass(frozen=True)
class AlgorithmSpec:
    """The algorithm by its registry name, with the constructor settings the run was given
    (option dest -> value; None = the algorithm's default)."""
    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings or {})))


@dataclass(frozen=True)
class Schedule:
    """Which minibatches a run applies, in which order, and when it stops.

    ``passes``: over the corpus (batch Gibbs: its sweeps); ``pass_stop``: the ``--passes auto``
    rule (stop when the held-out score stops improving), or None. ``minibatch`` and ``seed``
    fix the seeded order (:mod:`lda_core.training.ordering`). ``max_steps``: the absolute step
    at which to stop (a resumed run with the same value ends where an uninterrupted one
    would). ``start``: the position to start from (None: the algorithm's own step).
    ``resume``: continue from the latest checkpoint of the store. ``rel_tol``: batch VB's
    relative-ELBO stopping rule. ``total_steps``: the steps of the whole schedule, when the
    caller knows them (sizes the progress bar)."""
    passes: int = 1
    seed: int = 0
    minibatch: int = 256
    max_steps: Optional[int] = None
    start: Optional[int] = None
    resume: bool = False
    pass_stop: Optional[PassStop] = None
    rel_tol: float = 1e-5
    total_steps: Optional[int] = None


@dataclass(frozen=True)
class Evaluation:
    """Held-out evaluation: the documents (a ``HeldOut``, a not-yet-read held-out shard set, or
    None for none) and the cadence in steps (0: only at the end)."""
    heldout: Any = None
    every: int = 0


@dataclass(frozen=True)
class Output:
    """Where a run writes: the model directory, its checkpoint store (None: the runner opens
    one in ``model_dir``, or publishes nothing), its run log (anything with ``write(record)``,
    or None), a checkpoint every ``checkpoint_every`` steps (0: only at the end; Beam runners
    publish at every window end) and whether a progress bar is shown on a terminal."""
    model_dir: Optional[str] = None
    checkpoint_store: Any = None
    run_log: Any = None
    checkpoint_every: int = 0
    progress: bool = True

    @property
    def keep_checkpoints(self) -> Optional[int]:
        """How many checkpoints the store keeps (None: all)."""
        return getattr(self.checkpoint_store, "keep_last", None)


@dataclass(frozen=True)
class TrainSpec:
    """One training run's declaration (module docstring); ``run_info`` is recorded in the run
    log's start record and in every checkpoint's ``info["run"]``."""
    algorithm: AlgorithmSpec
    schedule: Schedule = field(default_factory=Schedule)
    evaluation: Evaluation = field(default_factory=Evaluation)
    output: Output = field(default_factory=Output)
    run_info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "run_info", MappingProxyType(dict(self.run_info or {})))

    def info(self) -> Dict[str, Any]:
        """A fresh, mutable copy of ``run_info``."""
        return dict(self.run_info)

    def replace(self, **changes) -> "TrainSpec":
        """This spec with whole groups replaced (``schedule=...``, ``run_info=...``)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_keywords(cls, algorithm, options: Mapping[str, Any]) -> "TrainSpec":
        """The spec of the runners' keyword form (``train(algo, data, passes=2, seed=1,
        heldout=..., ...)``): each keyword named in :data:`KEYWORDS` goes to its group. A
        keyword that is not a spec field is a TypeError naming it, as for a function."""
        groups: Dict[str, Dict[str, Any]] = {"schedule": {}, "evaluation": {}, "output": {}}
        run_info = None
        for key, value in options.items():
            if key == "run_info":
                run_info = value
                continue
            if key not in KEYWORDS:
                raise TypeError("unexpected keyword argument %r" % key)
            group, name = KEYWORDS[key]
            groups[group][name] = value
        return cls(AlgorithmSpec(algorithm.name),
                   Schedule(**groups["schedule"]), Evaluation(**groups["evaluation"]),
                   Output(**groups["output"]), run_info or {})


# the runners' keyword names -> (group, field) of the spec
KEYWORDS: Dict[str, Tuple[str, str]] = {
    "passes": ("schedule", "passes"),
    "seed": ("schedule", "seed"),
    "minibatch": ("schedule", "minibatch"),
    "max_steps": ("schedule", "max_steps"),
    "start_step": ("schedule", "start"),
    "resume": ("schedule", "resume"),
    "pass_stop": ("schedule", "pass_stop"),
    "rel_tol": ("schedule", "rel_tol"),
    "total_steps": ("schedule", "total_steps"),
    "heldout": ("evaluation", "heldout"),
    "eval_every": ("evaluation", "every"),
    "model_dir": ("output", "model_dir"),
    "checkpoint_store": ("output", "checkpoint_store"),
    "run_log": ("output", "run_log"),
    "checkpoint_every": ("output", "checkpoint_every"),
    "progress": ("output", "progress"),
}


def split_keywords(options: Mapping[str, Any], settings_fields) -> Tuple[Dict[str, Any],
                                                                          Dict[str, Any]]:
    """(spec keywords, runner-settings keywords) of a runner's keyword form: the names in
    ``settings_fields`` go to the runner's settings object, the rest to the spec."""
    own = {k: v for k, v in options.items() if k in settings_fields}
    return {k: v for k, v in options.items() if k not in settings_fields}, own
