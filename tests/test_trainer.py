"""The in-process trainer (lda_core.training.trainer) on real KOS documents streamed from shards."""
import logging
import os

import numpy as np
import pytest

from lda_core.algorithms.algorithm import algorithm_class, available_algorithms
from lda_core.errors import StepRefused
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import RunLog, iter_run_log, read_run_log
from lda_core.training.trainer import Minibatch, train
from lda_core.training.heldout import HeldOut
from lda_core.training.session import TrainingError
from pipelines.training.shard_stream import ShardStream, read_docs

from helpers.uci import kos_shards as write_kos_shards

ALGOS = [a for a in ("online-vb", "scvb0") if a in available_algorithms()]


def _make(name, V, D, S=64, seed=3):
    cls = algorithm_class(name)
    kw = dict(seed=seed)
    if name == "online-vb":
        kw.update(corpus_size=D, alpha=0.1, eta=0.01, dtype="float64")
    return cls(10, V, **kw)


def _arrays(algo):
    st = algo.to_state()
    return {k: np.asarray(v) for k, v in st.arrays.items()}, st.step, st.docs_seen


@pytest.fixture
def kos_shards(tmp_path, kos_paths):
    files, corpus, W = write_kos_shards(tmp_path, kos_paths, n_docs=300,
                                        sizes=(80, 0, 150, 70))
    return files, corpus, W


@pytest.mark.parametrize("name", ALGOS)
def test_resume_is_bit_for_bit_also_across_a_pass_boundary(tmp_path, kos_shards, name):
    files, corpus, V = kos_shards
    S = 64
    stream = ShardStream(files, minibatch=S, seed=3, passes=3)   # 5 minibatches per pass
    assert stream.batches_per_pass == 5
    full = _make(name, V, stream.n_docs)
    res = train(full, stream, progress=False)
    assert res.step == 15 and res.steps_run == 15
    ref, ref_step, ref_docs = _arrays(full)
    assert ref_docs == 3 * 300
    for stop in (7, 5, 3):   # 7: resume mid-pass 1; 5: exactly at the pass boundary
        model_dir = str(tmp_path / ("m-%s-%d" % (name, stop)))
        store = CheckpointStore(model_dir)
        first = _make(name, V, stream.n_docs)
        r1 = train(first, stream, checkpoint_store=store, max_steps=stop, progress=False)
        assert r1.step == stop and r1.checkpoint
        state = CheckpointStore(model_dir).latest()
        assert state.step == stop and state.info["trainer"]["minibatches_done"] == stop
        resumed = algorithm_class(name).from_state(state)
        r2 = train(resumed, stream, checkpoint_store=store, progress=False)
        assert r2.steps_run == 15 - stop
        got, step, docs = _arrays(resumed)
        assert (step, docs) == (ref_step, ref_docs)
        assert got.keys() == ref.keys()
        for k in ref:
            assert np.array_equal(got[k], ref[k]), "array %s differs after resume" % k


@pytest.mark.parametrize("name", ALGOS)
def test_eval_checkpoints_and_run_log(tmp_path, kos_shards, name):
    files, corpus, V = kos_shards
    stream = ShardStream(files, minibatch=50, seed=1, passes=2)
    held = HeldOut.from_batch(read_docs(files[:1], max_docs=60), seed=0)
    store = CheckpointStore(str(tmp_path / "m"), keep_last=2)
    log_path = str(tmp_path / "m" / "run_log.jsonl")
    algo = _make(name, V, stream.n_docs, S=50)
    with RunLog(log_path) as log:
        res = train(algo, stream, heldout=held, eval_every=4, checkpoint_store=store,
                    checkpoint_every=5, run_log=log, progress=False)
    assert res.step == stream.total_steps == 12
    recs = read_run_log(log_path)
    assert recs[0]["event"] == "start" and recs[-1]["event"] == "end"
    steps = [r for r in recs if r["event"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 13))
    assert [r["pass_index"] for r in steps] == [0] * 6 + [1] * 6
    assert all(r["rho"] is not None and 0 < r["rho"] <= 1 for r in steps)
    evaluated = [r["step"] for r in steps if r.get("metrics")]
    assert evaluated == [4, 8, 12]
    for r in steps:
        if r.get("metrics"):
            m = r["metrics"]
            assert -15 < m["completion_ll_per_token"] < 0
    assert [r["step"] for r in steps if r.get("checkpoint")] == [5, 10]
    assert recs[-1]["checkpoint"].endswith("step-000000012")
    assert [c.step for c in store.list_checkpoints()] == [10, 12]   # keep_last=2
    assert res.metrics["completion_ll_per_token"] == steps[-1]["metrics"][
        "completion_ll_per_token"]
    # evaluation did not disturb training: same state as a run without it
    plain = _make(name, V, stream.n_docs, S=50)
    train(plain, stream, progress=False)
    a, _, _ = _arrays(plain)
    b, _, _ = _arrays(algo)
    assert all(np.array_equal(a[k], b[k]) for k in a)


class _Poison:
    """Wraps a real algorithm; its global step refuses the k-th minibatch as the VB global step
    refuses non-finite statistics (StepRefused, state untouched)."""

    def __init__(self, algo, bad_step):
        self._a = algo
        self.bad_step = bad_step

    def __getattr__(self, k):
        return getattr(self._a, k)

    def global_step(self, stats):
        if self._a.step + 1 == self.bad_step:
            raise StepRefused("non-finite sufficient statistics (nan) in the minibatch")
        return self._a.global_step(stats)


@pytest.mark.parametrize("name", ALGOS)
def test_non_finite_minibatch_stops_and_last_good_checkpoint_stays_latest(
        tmp_path, kos_shards, name, caplog):
    files, corpus, V = kos_shards
    stream = ShardStream(files, minibatch=30, seed=2, passes=1)
    store = CheckpointStore(str(tmp_path / "m"))
    algo = _Poison(_make(name, V, stream.n_docs, S=30), bad_step=6)
    with caplog.at_level(logging.ERROR), pytest.raises(TrainingError) as ei:
        train(algo, stream, checkpoint_store=store, checkpoint_every=2, progress=False)
    msg = str(ei.value)
    assert "minibatch 6" in msg and "non-finite" in msg and "step-000000004" in msg
    latest = store.latest()
    assert latest.step == 4
    assert [c.step for c in store.list_checkpoints()] == [2, 4]


@pytest.mark.parametrize("name", ALGOS)
def test_real_nan_statistics_are_refused(tmp_path, kos_shards, name):
    """Non-finite statistics from a real local step never become the state."""
    files, corpus, V = kos_shards
    stream = ShardStream(files, minibatch=100, seed=2, passes=1)
    algo = _make(name, V, stream.n_docs, S=100)
    store = CheckpointStore(str(tmp_path / "m"))
    train(algo, stream, checkpoint_store=store, max_steps=1, progress=False)

    class Corrupt:
        def __init__(self, a):
            self._a = a

        def __getattr__(self, k):
            return getattr(self._a, k)

        def local_step(self, batch, **kw):
            st = self._a.local_step(batch, **kw)
            for k, v in vars(st).items():
                if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size:
                    v.flat[0] = np.nan
            return st

    with pytest.raises(TrainingError, match="minibatch 2"):
        train(Corrupt(algo), stream, checkpoint_store=store, progress=False)
    assert store.latest().step == 1


def test_plain_iterable_source_and_bad_settings(kos_shards):
    files, corpus, V = kos_shards
    name = ALGOS[0] if ALGOS else pytest.skip("no stochastic algorithm installed")
    stream = ShardStream(files, minibatch=100, seed=0, passes=1)
    a = _make(name, V, stream.n_docs, S=100)
    b = _make(name, V, stream.n_docs, S=100)
    train(a, stream, progress=False)
    train(b, [m.batch for m in stream], progress=False)   # plain DocBatch iterable
    x, _, _ = _arrays(a)
    y, _, _ = _arrays(b)
    assert all(np.array_equal(x[k], y[k]) for k in x)
    with pytest.raises(ValueError, match="eval_every"):
        train(a, stream, eval_every=-1)
    with pytest.raises(ValueError, match="max_steps"):
        train(a, stream, max_steps=-2)


def test_run_log_survives_a_truncated_last_line(tmp_path):
    p = str(tmp_path / "log.jsonl")
    with RunLog(p) as log:
        log.write(dict(event="step", step=1, rho=np.float64(0.5), change=float("nan"),
                       arr=np.arange(2)))
        log.write(dict(event="end", step=1))
    with open(p, "a") as f:
        f.write('{"event": "step", "st')        # a run killed mid-write
    recs = read_run_log(p)
    assert [r["event"] for r in recs] == ["step", "end"]
    assert recs[0]["rho"] == 0.5 and recs[0]["change"] is None and recs[0]["arr"] == [0, 1]
    assert read_run_log(p, "end") == [{"event": "end", "step": 1}]
    with open(p, "w") as f:
        f.write('garbage\n{"event": "end"}\n')
    # a damaged line elsewhere is skipped and counted; the records around it are kept
    damaged = []
    assert list(iter_run_log(p, damaged=damaged)) == [{"event": "end"}]
    assert damaged == [1]


# ------------------------------------------------------------------ stream-order samplers

SAMPLER_SETTINGS = {
    "o-lda": dict(alpha=0.1, eta=0.1, init_docs=100, init_sweeps=5, seed=5),
    "incremental-gibbs": dict(alpha=0.1, eta=0.1, init_docs=100, init_sweeps=5, n_rejuv=2,
                              seed=5),
    "particle-filter": dict(alpha=0.1, eta=0.1, init_docs=100, init_sweeps=5, n_particles=6,
                            ess_threshold=3.0, n_rejuv=3, seed=5),
}


def _sampler_state(algo):
    st = algo.to_state()
    info = {k: v for k, v in st.info.items() if k != "seconds"}   # wall time differs
    return st, info


@pytest.mark.parametrize("name", sorted(SAMPLER_SETTINGS))
def test_checkpoints_inside_the_batch_prefix_and_resume_bit_for_bit(tmp_path, kos_shards,
                                                                      name):
    """The batch prefix (100 documents) spans minibatches 1-4 of 32 documents; a checkpoint
    every minibatch used to crash at the first one ("cannot checkpoint during the batch
    prefix"). Stopping inside the prefix (2), where it completes (4) and after it (7), then
    resuming from the checkpoint, gives the uninterrupted run's state bit for bit."""
    files, corpus, V = kos_shards
    stream = ShardStream(files, minibatch=32, seed=3, passes=1)     # 10 minibatches
    cls = algorithm_class(name)
    full = cls(6, V, **SAMPLER_SETTINGS[name])
    store = CheckpointStore(str(tmp_path / "full"))
    train(full, stream, checkpoint_store=store, checkpoint_every=1, progress=False)
    assert [c.step for c in store.list_checkpoints()] == list(range(1, 11))
    prefix_state = store.load(2)
    assert prefix_state.info["initialised"] is False and prefix_state.docs_seen == 64
    assert prefix_state.arrays["prefix_indptr"].shape == (65,)
    ref, ref_info = _sampler_state(full)
    assert ref.docs_seen == 300 and ref_info["initialised"] is True
    assert "prefix_indptr" not in ref.arrays
    for stop in (2, 4, 7):
        model_dir = str(tmp_path / ("m%d" % stop))
        first = cls(6, V, **SAMPLER_SETTINGS[name])
        r1 = train(first, stream, checkpoint_store=CheckpointStore(model_dir),
                   checkpoint_every=1, max_steps=stop, progress=False)
        assert r1.step == stop
        state = CheckpointStore(model_dir).latest()
        assert state.step == stop and state.info["trainer"]["minibatches_done"] == stop
        resumed = cls.from_state(state)
        assert resumed.docs_seen == state.docs_seen == min(300, 32 * stop)
        train(resumed, stream, checkpoint_store=CheckpointStore(model_dir),
              checkpoint_every=3, progress=False)
        got, got_info = _sampler_state(resumed)
        assert (got.step, got.docs_seen, got.rng, got.params) == \
            (ref.step, ref.docs_seen, ref.rng, ref.params)
        assert got_info == ref_info
        assert got.arrays.keys() == ref.arrays.keys()
        for k in ref.arrays:
            assert np.array_equal(got.arrays[k], ref.arrays[k]), (stop, k)
        np.testing.assert_array_equal(resumed.topic_word(), full.topic_word())
