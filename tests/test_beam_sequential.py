"""The Beam path of the stream-order samplers (pipelines.training.beam_sequential) on real KOS documents:
each window is one pipeline whose single element goes to one DoFn that loads the window's start
state, runs the sampler over the minibatches in stream order and publishes the checkpoint.

Equivalence: bit for bit the in-process trainer's state (lda_core.training.trainer.train over the same
ShardStream order) for o-LDA and the particle filter, with the state handed between windows in
memory and with every window loading its checkpoint; resume after a stop (inside the batch
prefix too); the CLI's --runner DirectRunner for the samplers and batch Gibbs; a failing
minibatch keeps the last good checkpoint.
"""
import os

import numpy as np
import pytest

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.errors import StepRefused
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import RunLog, read_run_log

from helpers.uci import kos_train_dataset as make_kos_dataset

DIRECT = ["--runner=DirectRunner"]
S = 32                           # 240 documents: 8 minibatches, the last one short (16)
SETTINGS = {
    # the prefix (100 documents) ends inside minibatch 4: windows of 3 publish a checkpoint
    # inside it
    "o-lda": dict(alpha=0.1, eta=0.1, init_docs=100, init_sweeps=4, seed=7),
    "particle-filter": dict(alpha=0.1, eta=0.1, n_particles=5, ess_threshold=2.5, n_rejuv=3,
                            init_docs=100, init_sweeps=4, seed=7),
}


@pytest.fixture(scope="module")
def kos_seq(kos_paths, tmp_path_factory):
    """240 KOS documents in 3 shards (a dataset directory)."""
    return make_kos_dataset(kos_paths, str(tmp_path_factory.mktemp("kosseq") / "ds"), 240)


def _files(ds):
    from pipelines.ingest import dataset
    from lda_core.storage.vocab_file import Vocabulary
    files = dataset.resolve_shards(ds)
    return files, dataset.check_vocab_hash(files, None), len(Vocabulary.read(ds))


def _new(name, V, K=5):
    return algorithm_class(name)(K, V, **SETTINGS[name])


def _inprocess(ds, name):
    from lda_core.training.trainer import train
    from pipelines.training.shard_stream import ShardStream
    files, vh, V = _files(ds)
    algo = _new(name, V)
    train(algo, ShardStream(files, minibatch=S, seed=3, passes=1), progress=False)
    return algo


def _beam(ds, md, name, algo=None, **kw):
    from pipelines.training import beam_sequential
    files, vh, V = _files(ds)
    algo = algo if algo is not None else _new(name, V)
    return beam_sequential.train(algo, files, md, seed=3, minibatch=S, beam_argv=DIRECT,
                                 progress=False, **kw)


def assert_same_state(a, b):
    """Bit-for-bit equal sampler states (wall-clock seconds aside)."""
    sa, sb = a.to_state(), b.to_state()
    assert (sa.algorithm, sa.step, sa.docs_seen, sa.rng, sa.params) == \
        (sb.algorithm, sb.step, sb.docs_seen, sb.rng, sb.params)
    drop = ("seconds", "trainer", "run")
    assert {k: v for k, v in sa.info.items() if k not in drop} == \
        {k: v for k, v in sb.info.items() if k not in drop}
    assert sa.arrays.keys() == sb.arrays.keys()
    for k in sa.arrays:
        assert np.array_equal(sa.arrays[k], sb.arrays[k]), k


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_direct_runner_equals_inprocess_trainer(kos_seq, tmp_path, name):
    ref = _inprocess(kos_seq, name)
    md = str(tmp_path / "m")
    os.makedirs(md)
    with RunLog(os.path.join(md, "run_log.jsonl")) as log:
        res = _beam(kos_seq, md, name, minibatches_per_window=3, run_log=log)
    assert (res.step, res.steps_run, res.windows, res.docs_seen) == (8, 8, 3, 240)
    assert res.beam_metrics["documents"] == 240 and res.beam_metrics["minibatches"] == 8
    assert_same_state(res.algorithm, ref)
    store = CheckpointStore(md)
    assert [c.step for c in store.list_checkpoints()] == [3, 6, 8]
    assert store.load(3).info["initialised"] is False        # published inside the prefix
    st = store.latest()
    assert st.info["trainer"]["minibatches_done"] == 8 and st.vocab_hash == _files(kos_seq)[1]
    assert_same_state(algorithm_class(name).from_state(st), ref)
    steps = read_run_log(os.path.join(md, "run_log.jsonl"), "step")
    assert [r["step"] for r in steps] == list(range(1, 9))
    assert [r["docs_seen"] for r in steps] == [32 * i for i in range(1, 8)] + [240]
    assert [r["step"] for r in steps if r.get("checkpoint")] == [3, 6, 8]


def test_every_window_loading_its_checkpoint_gives_the_same_state(kos_seq, tmp_path,
                                                                  monkeypatch):
    """No hand-over in memory (as with worker processes): each window's DoFn loads the
    checkpoint the previous one published."""
    from pipelines.training import beam_sequential
    monkeypatch.setattr(beam_sequential, "_put_live", lambda key, algo: None)
    ref = _inprocess(kos_seq, "particle-filter")
    res = _beam(kos_seq, str(tmp_path / "m"), "particle-filter", minibatches_per_window=2)
    assert res.windows == 4
    assert_same_state(res.algorithm, ref)


@pytest.mark.serial
@pytest.mark.slow
def test_worker_process_equals_inprocess_trainer(kos_seq, tmp_path):
    """The DoFn in a worker process (multi_processing DirectRunner): loads and publishes the
    checkpoints there; the driver reads the result."""
    ref = _inprocess(kos_seq, "o-lda")
    from pipelines.training import beam_sequential
    files, vh, V = _files(kos_seq)
    md = str(tmp_path / "m")
    res = beam_sequential.train(_new("o-lda", V), files, md, seed=3, minibatch=S,
                                minibatches_per_window=5, progress=False,
                                beam_argv=DIRECT + ["--direct_running_mode=multi_processing",
                                                    "--direct_num_workers=1"])
    assert res.windows == 2 and res.beam_metrics["documents"] == 240
    assert_same_state(res.algorithm, ref)
    assert [c.step for c in CheckpointStore(md).list_checkpoints()] == [5, 8]


@pytest.mark.parametrize("name,stop", [("o-lda", 2), ("particle-filter", 5)])
def test_stop_then_resume_is_bit_for_bit(kos_seq, tmp_path, name, stop):
    """Stopped inside the batch prefix (2) or after it (5), resumed from the checkpoint."""
    ref = _inprocess(kos_seq, name)
    md = str(tmp_path / "m")
    r1 = _beam(kos_seq, md, name, minibatches_per_window=3, max_steps=stop)
    assert r1.step == stop and CheckpointStore(md).latest().step == stop
    files, vh, V = _files(kos_seq)
    res = _beam(kos_seq, md, name, algo=_new(name, V), minibatches_per_window=3, resume=True)
    assert res.steps_run == 8 - stop and res.step == 8
    assert_same_state(res.algorithm, ref)


class _FailAt:
    """A real sampler whose ``process`` refuses minibatch ``k`` (StepRefused)."""

    def __init__(self, algo, k):
        self._a, self.k = algo, k

    def __getattr__(self, name):
        return getattr(self._a, name)

    def process(self, batch):
        if self._a.step + 1 == self.k:
            raise StepRefused("refused on purpose")
        return self._a.process(batch)


def test_a_failing_minibatch_stops_and_keeps_the_last_good_checkpoint(kos_seq, tmp_path):
    from lda_core.training.session import TrainingError
    files, vh, V = _files(kos_seq)
    md = str(tmp_path / "m")
    with pytest.raises(TrainingError, match="minibatch 5 could not be applied: refused"):
        _beam(kos_seq, md, "o-lda", algo=_FailAt(_new("o-lda", V), 5),
              minibatches_per_window=3)
    assert [c.step for c in CheckpointStore(md).list_checkpoints()] == [3]


def test_bad_input(kos_seq, tmp_path):
    from pipelines.training import beam_sequential
    files, vh, V = _files(kos_seq)
    with pytest.raises(ValueError, match="passes must be 1"):
        _beam(kos_seq, str(tmp_path / "a"), "o-lda", passes=2)
    # object-store model directories work (tests/test_object_store.py); a URL scheme no Beam
    # file system serves is refused by Beam's FileSystems before any pipeline runs
    with pytest.raises(ValueError, match="Unable to get filesystem"):
        beam_sequential.train(_new("o-lda", V), files, "nosuchfs://bucket/model",
                              beam_argv=DIRECT)
    from lda_core.algorithms.online_vb import OnlineVB
    with pytest.raises(ValueError, match="beam_train"):
        beam_sequential.train(OnlineVB(3, V), files, str(tmp_path / "b"), beam_argv=DIRECT)


# ------------------------------------------------------------------ through the CLI

def _cli(capsys, *argv):
    from pipelines import cli
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _latest_arrays(md):
    st = CheckpointStore(md).latest()
    return st, {k: np.asarray(v) for k, v in st.arrays.items()}


def test_cli_direct_runner_samplers_equal_inprocess_and_resume(kos_seq, tmp_path, capsys):
    common = ["--shards", kos_seq, "--topics", 4, "--minibatch", 40, "--seed", 2,
              "--heldout", "none", "--no-progress", "--checkpoint-every", 2]
    # o-lda: prefix of 10% = 24 documents; incremental Gibbs with rejuvenation
    for algo, extra in (("o-lda", []), ("incremental-gibbs", ["--rejuvenation", 2])):
        a, b, c = (str(tmp_path / (algo + x)) for x in ("-in", "-beam", "-resumed"))
        assert _cli(capsys, "train", "--output", a, "--algorithm", algo, *extra, *common)[0] == 0
        rc, out, err = _cli(capsys, "train", "--output", b, "--algorithm", algo, *extra,
                            *common, "--runner", "DirectRunner")
        assert rc == 0, err
        assert "trained %s" % algo in out
        sa, xa = _latest_arrays(a)
        sb, xb = _latest_arrays(b)
        assert (sa.step, sa.docs_seen, sa.rng) == (sb.step, sb.docs_seen, sb.rng) == \
            (6, 240, sb.rng)
        assert xa.keys() == xb.keys() and all(np.array_equal(xa[k], xb[k]) for k in xa)
        assert sb.info["trainer"]["runner"].startswith("DirectRunner")
        # stop at 3 (mid-window), resume through the CLI
        rc, out, err = _cli(capsys, "train", "--output", c, "--algorithm", algo, *extra,
                            *common, "--runner", "DirectRunner", "--max-steps", 3)
        assert rc == 0, err
        assert [x.step for x in CheckpointStore(c).list_checkpoints()] == [2, 3]
        rc, out, err = _cli(capsys, "train", "--output", c, "--shards", kos_seq, "--resume",
                            "--runner", "DirectRunner", "--heldout", "none", "--no-progress")
        assert rc == 0, err
        sc, xc = _latest_arrays(c)
        assert (sc.step, sc.docs_seen, sc.rng) == (sa.step, sa.docs_seen, sa.rng)
        assert all(np.array_equal(xa[k], xc[k]) for k in xa)
        steps = read_run_log(os.path.join(c, "run_log.jsonl"), "step")
        assert [r["step"] for r in steps] == list(range(1, 7))


def test_cli_direct_runner_batch_gibbs_equals_inprocess(kos_seq, tmp_path, capsys):
    common = ["--shards", kos_seq, "--topics", 4, "--algorithm", "gibbs", "--passes", 6,
              "--burn-in", 3, "--no-progress", "--heldout", os.path.join(kos_seq, "train"),
              "--heldout-max-docs", 60]     # (training documents: only to compare scores)
    a, b = str(tmp_path / "in"), str(tmp_path / "beam")
    rc, out_a, err = _cli(capsys, "train", "--output", a, *common)
    assert rc == 0, err
    rc, out_b, err = _cli(capsys, "train", "--output", b, *common, "--runner", "DirectRunner")
    assert rc == 0, err
    sa, xa = _latest_arrays(a)
    sb, xb = _latest_arrays(b)
    assert (sa.step, sa.docs_seen, sa.params) == (sb.step, sb.docs_seen, sb.params)
    assert sb.params["n_kept"] == 3
    assert xa.keys() == xb.keys() and all(np.array_equal(xa[k], xb[k]) for k in xa)
    # the same held-out score (same topics, same split)
    line = [l for l in out_a.splitlines() if "held-out document completion" in l]
    assert line and line == [l for l in out_b.splitlines()
                             if "held-out document completion" in l]


def test_cli_beam_options_that_do_not_apply_to_samplers(kos_seq, tmp_path, capsys):
    m = str(tmp_path / "m")
    for argv, match in (
            (["--algorithm", "o-lda", "--unroll"], "--unroll does not apply to algorithm o-lda"),
            (["--algorithm", "gibbs", "--minibatches-per-window", 2],
             "--minibatches-per-window does not apply to algorithm gibbs")):
        rc, out, err = _cli(capsys, "train", "--shards", kos_seq, "--output", m, "--topics", 3,
                            "--runner", "DirectRunner", *argv)
        assert rc == 2 and match in err, err
    assert not os.path.exists(os.path.join(m, "checkpoints"))
