"""Training on documents held in memory, through the in-process runner.

The library's callers -- the scikit-learn estimators' ``fit`` / ``partial_fit``
(:mod:`lda_core.sklearn_api`), batch VB on a list of batches (:func:`fit_batch_vb`) and
``ldabeam.LdaModel.update`` -- hand their minibatches to :func:`train_in_memory`, which runs
them through :class:`lda_core.training.trainer.InProcessRunner` and so through the one
:class:`lda_core.training.session.Session`: the same E-step in pieces, the same validation of
every step (a refused step raises :class:`lda_core.errors.TrainingError`), the same Ctrl-C
handling, run-log records when a log is given. Nothing is published: these callers hold the
model in memory and save it themselves (through a session, :meth:`Session.publish`).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List

from lda_core.docbatch import DocBatch
from lda_core.errors import UsageError
from lda_core.training.kernel_warmup import compile_notice
from lda_core.training.runner import TrainData
from lda_core.training.spec import AlgorithmSpec, Output, Schedule, TrainSpec
from lda_core.training.trainer import InProcessRunner, Minibatch, TrainResult


@dataclass(frozen=True)
class MemoryMinibatches:
    """A minibatch source over documents in memory: ``passes`` passes, pass ``p`` being the
    minibatches ``make_pass(p)`` gives in order (``batches_per_pass`` of them). The run's
    position numbers them (``iter_from(start)``): a source continues an algorithm that
    already applied ``start`` minibatches, it does not skip them."""
    make_pass: Callable[[int], Iterable[DocBatch]]
    passes: int
    batches_per_pass: int

    @classmethod
    def repeat(cls, batches: List[DocBatch], passes: int = 1) -> "MemoryMinibatches":
        """The same minibatches, in the same order, every pass."""
        batches = list(batches)
        return cls(lambda p: batches, int(passes), len(batches))

    def iter_from(self, start: int) -> Iterator[Minibatch]:
        i = 0
        for p in range(self.passes):
            for b, batch in enumerate(self.make_pass(p)):
                yield Minibatch(int(start) + i, p, b, batch)
                i += 1


class _Records(list):
    """A run log held in memory (the session writes its records here)."""

    def write(self, record: Dict[str, Any]) -> None:
        self.append(record)


def train_in_memory(algorithm, minibatches: MemoryMinibatches, *, pieces: int = 1,
                    warm_start: bool = False, rel_tol: float = 1e-5,
                    run_log=None) -> TrainResult:
    """Apply ``minibatches`` to ``algorithm`` (continuing from its own step) in the in-process
    runner: each minibatch's E-step in ``pieces`` pieces summed in piece order, each step
    validated by the session (a refused one raises TrainingError and stops). ``warm_start``
    and ``rel_tol``: batch VB's (:class:`InProcessRunner`). ``run_log``: anything with
    ``write(record)`` that receives the run's records."""
    spec = TrainSpec(AlgorithmSpec(algorithm.name), Schedule(rel_tol=rel_tol),
                     output=Output(run_log=run_log, progress=False))
    with compile_notice():          # a first call compiles the kernels: never silently
        return InProcessRunner(pieces=pieces, warm_start=warm_start).run(
            spec, algorithm, TrainData(minibatches=minibatches))


def fit_batch_vb(algorithm, batches, max_passes: int = 100, rel_tol: float = 1e-5
                 ) -> Dict[str, Any]:
    """Batch VB (``lda_core.algorithms.online_vb.BatchVB``) on the documents ``batches`` (a
    DocBatch or a list of them) held in memory: E-step over all documents, then λ ← η +
    sstats, until the relative ELBO change |ΔL| / |L| < ``rel_tol`` or ``max_passes``. Each
    pass starts every document's E-step from the better of its previous γ and a fresh draw,
    so the ELBO does not decrease. Returns ``{"elbo": [per pass], "passes", "converged"}``."""
    if isinstance(max_passes, bool) or not isinstance(max_passes, numbers.Integral) \
            or max_passes < 1:
        raise UsageError("max_passes must be an integer >= 1, got %r" % (max_passes,))
    batches = [batches] if isinstance(batches, DocBatch) else list(batches)
    log = _Records()
    res = train_in_memory(algorithm, MemoryMinibatches.repeat(batches, int(max_passes)),
                          warm_start=True, rel_tol=rel_tol, run_log=log)
    elbo = [float(r["elbo"]) for r in log if r.get("event") == "step"]
    return {"elbo": elbo, "passes": len(elbo), "converged": bool(res.converged)}

