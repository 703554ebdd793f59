"""One in-process loop: every caller that trains in this process goes through the session.

* Static: ``.global_step(`` is called only under ``lda_core/training/``, and no module of
  ``lda_core/``, ``ldabeam/`` or the pipelines (the Beam trainer's package aside, which its
  owner is rewriting) publishes or stamps a checkpoint itself.
* The scikit-learn estimators and ``LdaModel.update`` train through the in-process runner: a
  step the session refuses (non-finite statistics) raises TrainingError naming the minibatch,
  for ``fit``, ``partial_fit`` and ``update``; the model is left as it was.
* ``MemoryMinibatches`` numbers its minibatches from the algorithm's position, so a second
  ``partial_fit`` continues (steps and documents seen add up).
* ``Session.publish(info=...)``: the records a caller keeps stay as they were, what the
  algorithm keeps in its info comes first, and the session stamps the rest.
"""
import os
import re

import numpy as np
import pytest

from lda_core.algorithms.online_vb import OnlineVB
from lda_core.errors import TrainingError
from lda_core.sklearn_api import OnlineLDA, SCVB0LDA
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.training.in_memory import MemoryMinibatches, train_in_memory
from lda_core.training.session import Session
from lda_core.training.spec import Output

from helpers.uci import uci_csr, uci_docbatch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOP_HOME = ("lda_core/training/", "lda_core/storage/")
PUBLISH = re.compile(r"(store\.publish\(|CheckpointStore\([^)]*\)\.publish\(|\.stamp\(|"
                     r"[^_.\w]stamp\()")


def _sources(skip=()):
    for package in ("lda_core", "pipelines", "ldabeam"):
        for folder, _, files in os.walk(os.path.join(REPO, package)):
            for f in files:
                rel = os.path.relpath(os.path.join(folder, f), REPO).replace(os.sep, "/")
                if f.endswith(".py") and not rel.startswith(skip):
                    with open(os.path.join(REPO, rel), encoding="utf-8") as fh:
                        yield rel, fh.read().splitlines()


def _code(line):
    return line.split("#")[0]


def test_global_steps_are_applied_only_by_the_training_package():
    found = [(rel, i) for rel, lines in _sources() if not rel.startswith(LOOP_HOME)
             for i, line in enumerate(lines, 1)
             if "``" not in line and re.search(r"\.global_step\(", _code(line))]
    assert not found, "global steps applied outside lda_core/training: %s" % found


def test_checkpoints_are_published_only_by_the_session_and_the_store():
    found = [(rel, i) for rel, lines in _sources(skip=("pipelines/training/",))
             if not rel.startswith(LOOP_HOME)
             for i, line in enumerate(lines, 1)
             if "``" not in line and not _code(line).lstrip().startswith(("def ", '"', "'"))
             and PUBLISH.search(_code(line))]
    assert not found, "checkpoints published or stamped outside the session: %s" % found


@pytest.fixture(scope="module")
def kos_X(kos_paths):
    return uci_csr(kos_paths[0], 300)


def _refuse_third_step(monkeypatch):
    """OnlineVB's global step refuses its third call (t = 2) as the VB step refuses
    non-finite statistics: the statistics are poisoned before the real step sees them."""
    real = OnlineVB.global_step

    def global_step(self, stats):
        if self.step == 2:
            stats.sstats = stats.sstats * np.nan
        return real(self, stats)
    monkeypatch.setattr(OnlineVB, "global_step", global_step)


@pytest.mark.parametrize("how", ["fit", "partial_fit"])
def test_an_estimator_step_the_session_refuses_raises_training_error(kos_X, monkeypatch, how):
    X, _ = kos_X
    est = OnlineLDA(5, batch_size=50, max_iter=1, random_state=1)
    _refuse_third_step(monkeypatch)
    with pytest.raises(TrainingError, match=r"minibatch 3\b.*could not be applied: .*non-finite"):
        getattr(est, how)(X)


def test_partial_fit_continues_from_the_algorithms_position(kos_X):
    X, _ = kos_X
    est = SCVB0LDA(5, batch_size=40, random_state=2, total_samples=300)
    est.partial_fit(X[:120])
    first = (est.algorithm_.step, est.algorithm_.docs_seen)
    est.partial_fit(X[120:])
    assert first == (3, 120)
    assert (est.algorithm_.step, est.algorithm_.docs_seen) == (3 + 5, 300)
    assert est.n_batch_iter_ == 9


def test_memory_minibatches_are_numbered_from_the_position(kos_paths):
    docs, W = uci_docbatch(kos_paths[0], 90)
    batches = [docs.take(np.arange(lo, lo + 30)) for lo in (0, 30, 60)]
    src = MemoryMinibatches.repeat(batches, passes=2)
    got = [(mb.step, mb.pass_index, mb.batch_index, mb.batch.n_docs) for mb in src.iter_from(7)]
    assert got == [(7 + i, i // 3, i % 3, 30) for i in range(6)]
    algo = OnlineVB(4, W, corpus_size=90, seed=3)
    res = train_in_memory(algo, src)
    assert (res.step, res.steps_run, algo.step, algo.docs_seen) == (6, 6, 6, 180)


def test_publish_keeps_the_callers_records_under_the_algorithms(kos_paths, tmp_path):
    docs, W = uci_docbatch(kos_paths[0], 60)
    algo = OnlineVB(4, W, corpus_size=60, seed=3)
    train_in_memory(algo, MemoryMinibatches.repeat([docs.take(np.arange(60))], 1))
    store = CheckpointStore(str(tmp_path / "m"))
    kept = {"trainer": {"minibatches_done": 99, "docs_seen": 5, "wall_time": 1.0},
            "run": {"minibatch": 60}, "updates": [{"steps": 1}]}
    path = Session(position=int(algo.step), output=Output(checkpoint_store=store,
                                                          progress=False)).publish(algo,
                                                                                   info=kept)
    state = store.latest()
    assert path is not None and state.step == 1
    assert state.info["trainer"] == kept["trainer"] and state.info["updates"] == [{"steps": 1}]
    assert state.info["run"] == {"minibatch": 60}
    # without caller records the session stamps the position and the documents seen
    path2 = Session(position=int(algo.step), output=Output(
        checkpoint_store=CheckpointStore(str(tmp_path / "n")), progress=False)).publish(algo)
    stamped = CheckpointStore(str(tmp_path / "n")).latest().info["trainer"]
    assert path2 is not None
    assert (stamped["minibatches_done"], stamped["docs_seen"]) == (1, 60)
