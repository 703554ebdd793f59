"""Pipelined steps (lda_core.training.staleness): the E-step of minibatch m reads the state after
max(m - s, start) minibatches; checkpoints carry the statistics in flight, so a resumed run has
the bits of an uninterrupted one. On real KOS documents streamed from shards."""
import numpy as np
import pytest

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.errors import UsageError
from lda_core.storage.blocks import algorithm_from_state
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.training import staleness
from lda_core.training.pieces import local_step_pieces
from lda_core.training.trainer import train
from pipelines.training.shard_stream import ShardStream

from helpers.uci import kos_dataset, kos_shards as write_kos_shards

ALGOS = ("online-vb", "scvb0")


def _make(name, V, D, S=64, seed=3, blocks=1):
    kw = dict(batch_size=S, seed=seed, word_blocks=blocks)
    if name == "online-vb":
        kw.update(corpus_size=D, alpha=0.1, eta=0.01, dtype="float64")
    return algorithm_class(name)(10, V, **kw)


def _arrays(algo):
    st = algo.to_state()
    return {k: np.asarray(v) for k, v in st.arrays.items()}, st.step, st.docs_seen


def _same(a, b):
    (x, sx, dx), (y, sy, dy) = _arrays(a), _arrays(b)
    assert (sx, dx) == (sy, dy)
    assert x.keys() == y.keys()
    for k in x:
        assert np.array_equal(x[k], y[k]), "array %s differs" % k


def _copy(algo):
    return algorithm_class(algo.name).from_state(algo.to_state())


@pytest.fixture
def kos_shards(tmp_path, kos_paths):
    files, corpus, W = write_kos_shards(tmp_path, kos_paths, n_docs=300,
                                        sizes=(80, 0, 150, 70))
    return files, corpus, W


def _run_info(s, pieces=2):
    return {staleness.RUN_KEY: s, "pieces_per_minibatch": pieces}


@pytest.mark.parametrize("name", ALGOS)
@pytest.mark.parametrize("s", [1, 2])
def test_the_trainer_is_the_reference_loop(kos_shards, name, s):
    """Minibatch m E-stepped (2 pieces, summed in piece order) with a copy of the state after
    max(m - s, 0) steps, applied in order: the trainer's bits exactly."""
    files, _, V = kos_shards
    stream = ShardStream(files, batch_size=64, seed=3, passes=2)     # 10 minibatches
    ref = _make(name, V, stream.n_docs)
    versions = [_copy(ref)]
    for mb in stream:
        seen = versions[max(mb.step - s, 0)]
        ref.global_step(local_step_pieces(seen, mb.batch, 2))
        versions.append(_copy(ref))
    got = _make(name, V, stream.n_docs)
    res = train(got, stream, progress=False, run_info=_run_info(s))
    assert res.steps_run == 10
    _same(got, ref)
    plain = _make(name, V, stream.n_docs)
    train(plain, stream, progress=False, run_info=_run_info(0))
    assert not np.array_equal(plain.topic_word(), got.topic_word()), \
        "stale statistics must change the result"
    # the run's last s statistics (minibatches 10 .. 10 + s - 1, read past the schedule's
    # end) ride on the algorithm for its last checkpoint
    assert got.pending.first == 10 and len(got.pending.stats) == s


@pytest.mark.parametrize("name", ALGOS)
@pytest.mark.parametrize("blocks", [1, 3])
def test_resume_continues_with_the_statistics_in_flight(tmp_path, kos_shards, name, blocks):
    files, _, V = kos_shards
    stream = ShardStream(files, batch_size=64, seed=3, passes=3)     # 15 minibatches
    full = _make(name, V, stream.n_docs, blocks=blocks)
    train(full, stream, progress=False, run_info=_run_info(1))
    for stop in (7, 5):          # 5: exactly at a pass boundary
        model_dir = str(tmp_path / ("m-%s-%d-%d" % (name, blocks, stop)))
        store = CheckpointStore(model_dir)
        first = _make(name, V, stream.n_docs, blocks=blocks)
        r1 = train(first, stream, checkpoint_store=store, max_steps=stop, progress=False,
                   run_info=_run_info(1))
        assert r1.step == stop
        state = CheckpointStore(model_dir).latest(row_order=True)
        assert state.info["pending"] == {"first": stop, "n": 1, "blocks": 1}
        assert state.arrays["pending.%d" % stop].dtype == np.uint8
        assert state.info["run"][staleness.RUN_KEY] == 1
        resumed = algorithm_from_state(state, take=True)
        assert resumed.pending.first == stop
        r2 = train(resumed, stream, checkpoint_store=store, progress=False,
                   run_info=_run_info(1))
        assert r2.steps_run == 15 - stop
        _same(resumed, full)


@pytest.mark.parametrize("name", ALGOS)
def test_more_passes_after_the_end_continue_exactly(tmp_path, kos_shards, name):
    """The last checkpoint of a 2-pass run carries the statistics of the next pass's first
    minibatch: resuming it for a third pass gives the 3-pass run's bits."""
    files, _, V = kos_shards
    three = _make(name, V, 300)
    train(three, ShardStream(files, batch_size=64, seed=3, passes=3), progress=False,
          run_info=_run_info(1))
    store = CheckpointStore(str(tmp_path / "m"))
    two = _make(name, V, 300)
    train(two, ShardStream(files, batch_size=64, seed=3, passes=2), checkpoint_store=store,
          progress=False, run_info=_run_info(1))
    state = store.latest()
    assert state.info["pending"]["first"] == 10
    resumed = algorithm_from_state(state, take=True)
    train(resumed, ShardStream(files, batch_size=64, seed=3, passes=3),
          checkpoint_store=store, progress=False, run_info=_run_info(1))
    _same(resumed, three)


def test_statistics_of_another_run_are_recomputed(kos_shards, caplog):
    """Statistics in flight for another position (the model was updated, or the run starts
    elsewhere) are not applied: the first s minibatches are E-stepped from the state the run
    starts with, as a fresh run's are, and the log says so."""
    files, _, V = kos_shards
    stream = ShardStream(files, batch_size=64, seed=3, passes=1)
    a = _make("scvb0", V, 300)
    train(a, stream, progress=False, run_info=_run_info(1), max_steps=2)
    fresh = _make("scvb0", V, 300)
    train(fresh, stream, progress=False, run_info=_run_info(1), max_steps=2)
    a.pending.first = 99           # statistics of some other position
    b = _copy(fresh)
    b.pending = a.pending
    fresh.pending = None
    train(b, stream, progress=False, run_info=_run_info(1), max_steps=4)
    train(fresh, stream, progress=False, run_info=_run_info(1), max_steps=4)
    _same(b, fresh)
    assert "not this run's" in caplog.text


def test_settings_are_checked():
    with pytest.raises(UsageError, match=r"staleness must be an integer in \[0, 3\]"):
        staleness.check_staleness(4)
    with pytest.raises(UsageError, match="trained with staleness 1"):
        staleness.resolve_staleness(0, 1)
    assert staleness.resolve_staleness(None, None) == 0
    assert staleness.resolve_staleness(None, 1) == 1
    assert staleness.recorded_staleness({}, resumed=True) == 0
    batch = algorithm_class("batch-vb")(5, 20, batch_size=4)
    with pytest.raises(UsageError, match="minibatch steps"):
        staleness.check_pipelinable(batch, 1)
    staleness.check_pipelinable(batch, 0)


def test_the_command_line_resumes_with_the_statistics_in_flight(tmp_path, kos_paths):
    """`ldabeam train --staleness 1`, stopped by --max-steps and resumed: the uninterrupted
    run's bits (the resume reads the statistics from the checkpoint the store has just
    checked is loadable)."""
    from pipelines import cli
    ds = kos_dataset(str(tmp_path / "ds"), kos_paths, n_train=300, n_held=60)
    common = ["train", "--shards", ds, "--algorithm", "scvb0", "--topics", "5",
              "--minibatch", "50", "--passes", "2", "--staleness", "1", "--pieces", "2",
              "--no-progress", "--eval-every", "0"]
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    assert cli.main(common + ["--output", full]) == 0
    assert cli.main(common + ["--output", part, "--max-steps", "7"]) == 0
    assert cli.main(common + ["--output", part, "--resume"]) == 0
    a, b = CheckpointStore(full).latest(), CheckpointStore(part).latest()
    assert a.step == b.step == 12 and b.info["pending"]["first"] == 12
    for k in a.arrays:
        assert a.arrays[k].tobytes() == b.arrays[k].tobytes(), k
    assert cli.main(common + ["--output", part, "--resume", "--staleness", "0",
                              "--passes", "3"]) == 2
