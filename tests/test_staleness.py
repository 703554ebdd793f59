"""Pipelined steps (lda_core.training.staleness): the E-step of minibatch m reads the state after
m minibatches in the warm-up (m < W), after max(m - s, W, start) minibatches past it;
checkpoints carry the statistics in flight, so a resumed run has the bits of an uninterrupted
one. On real KOS documents streamed from shards."""
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
    kw = dict(seed=seed, word_blocks=blocks)
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


def _run_info(s, pieces=2, warmup=0):
    """Most tests here run without a warm-up (W = 0), so that every step is pipelined."""
    info = {staleness.RUN_KEY: s, "pieces_per_minibatch": pieces}
    if warmup is not None:
        info[staleness.WARMUP_KEY] = warmup
    return info


def test_the_rule_reads_the_previous_state_in_the_warm_up_and_s_back_after_it():
    v = [staleness.version_read(m, 1, 4, 0) for m in range(8)]
    assert v == [0, 1, 2, 3, 4, 4, 5, 6]
    assert [staleness.version_read(m, 2, 3, 0) for m in range(7)] == [0, 1, 2, 3, 3, 3, 4]
    assert [staleness.version_read(m, 1, 0, 5) for m in range(5, 8)] == [5, 5, 6]
    assert [staleness.version_read(m, 0, 4, 0) for m in range(6)] == list(range(6))
    # in flight at p: the minibatches m >= p whose E-step read a state before p
    for s, W in ((1, 4), (2, 3), (1, 0), (3, 0)):
        for p in range(1, 10):
            expect = sum(1 for m in range(p, p + 5) if staleness.version_read(m, s, W, 0) < p)
            assert staleness.in_flight(p, s, W) == expect, (s, W, p)
    assert staleness.in_flight(0, 1, 0) == 0
    assert staleness.warmup_of({staleness.RUN_KEY: 1}) == staleness.DEFAULT_WARMUP
    assert staleness.warmup_of({staleness.RUN_KEY: 0, staleness.WARMUP_KEY: 9}) == 0
    assert staleness.resolve_warmup(None, None) == staleness.DEFAULT_WARMUP
    assert staleness.resolve_warmup(None, 0) == 0       # resumed: a checkpoint without W
    assert staleness.resolve_warmup(8, None) == 8
    with pytest.raises(UsageError, match="warm-up of 4"):
        staleness.resolve_warmup(8, 4)
    with pytest.raises(UsageError, match=r"must be an integer in \[0, inf\)"):
        staleness.resolve_warmup(-1, None)


@pytest.mark.parametrize("name", ALGOS)
@pytest.mark.parametrize("s,W", [(1, 0), (2, 0), (1, 4), (2, 3)])
def test_the_trainer_is_the_reference_loop(kos_shards, name, s, W):
    """Minibatch m E-stepped (2 pieces, summed in piece order) with a copy of the state after
    version_read(m) steps (m in the warm-up, max(m - s, W) after it), applied in order: the
    trainer's bits exactly."""
    files, _, V = kos_shards
    stream = ShardStream(files, minibatch=64, seed=3, passes=2)     # 10 minibatches
    ref = _make(name, V, stream.n_docs)
    versions = [_copy(ref)]
    for mb in stream:
        seen = versions[staleness.version_read(mb.step, s, W, 0)]
        ref.global_step(local_step_pieces(seen, mb.batch, 2))
        versions.append(_copy(ref))
    got = _make(name, V, stream.n_docs)
    res = train(got, stream, progress=False, run_info=_run_info(s, warmup=W))
    assert res.steps_run == 10
    _same(got, ref)
    plain = _make(name, V, stream.n_docs)
    train(plain, stream, progress=False, run_info=_run_info(0))
    assert not np.array_equal(plain.topic_word(), got.topic_word()), \
        "stale statistics must change the result"
    # the run's last s statistics (minibatches 10 .. 10 + s - 1, read past the schedule's
    # end) ride on the algorithm for its last checkpoint
    assert got.pending.first == 10 and len(got.pending.stats) == s


def test_a_warm_up_longer_than_the_run_is_staleness_zero(kos_shards):
    """W = 32 (the default) on a 10-step run: every step reads the state just before it, the
    bits of s = 0, and nothing is in flight at the end."""
    files, _, V = kos_shards
    stream = ShardStream(files, minibatch=64, seed=3, passes=2)
    got = _make("scvb0", V, stream.n_docs)
    info = _run_info(1, warmup=None)
    train(got, stream, progress=False, run_info=info)
    plain = _make("scvb0", V, stream.n_docs)
    train(plain, stream, progress=False, run_info=_run_info(0))
    _same(got, plain)
    assert not got.pending.stats


@pytest.mark.parametrize("stop", [3, 4, 5, 7])
def test_resume_around_the_warm_up_keeps_the_bits(tmp_path, kos_shards, stop):
    """Stopped before, at, just after and past the warm-up's end (W = 4, s = 1): the checkpoint
    carries what is in flight there (none up to W, s after), the resumed run ends on the
    uninterrupted run's bits, and the checkpoint records W."""
    files, _, V = kos_shards
    stream = ShardStream(files, minibatch=64, seed=3, passes=2)     # 10 minibatches
    full = _make("online-vb", V, stream.n_docs)
    train(full, stream, progress=False, run_info=_run_info(1, warmup=4))
    store = CheckpointStore(str(tmp_path / "m"))
    first = _make("online-vb", V, stream.n_docs)
    train(first, stream, checkpoint_store=store, max_steps=stop, progress=False,
          run_info=_run_info(1, warmup=4))
    state = CheckpointStore(str(tmp_path / "m")).latest(row_order=True)
    assert state.info["run"][staleness.WARMUP_KEY] == 4
    n = staleness.in_flight(stop, 1, 4)
    assert (state.info.get("pending") or {}).get("n", 0) == n
    resumed = algorithm_from_state(state, take=True)
    train(resumed, stream, checkpoint_store=store, progress=False,
          run_info=_run_info(1, warmup=4))
    _same(resumed, full)


@pytest.mark.parametrize("name", ALGOS)
@pytest.mark.parametrize("blocks", [1, 3])
def test_resume_continues_with_the_statistics_in_flight(tmp_path, kos_shards, name, blocks):
    files, _, V = kos_shards
    stream = ShardStream(files, minibatch=64, seed=3, passes=3)     # 15 minibatches
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
    train(three, ShardStream(files, minibatch=64, seed=3, passes=3), progress=False,
          run_info=_run_info(1))
    store = CheckpointStore(str(tmp_path / "m"))
    two = _make(name, V, 300)
    train(two, ShardStream(files, minibatch=64, seed=3, passes=2), checkpoint_store=store,
          progress=False, run_info=_run_info(1))
    state = store.latest()
    assert state.info["pending"]["first"] == 10
    resumed = algorithm_from_state(state, take=True)
    train(resumed, ShardStream(files, minibatch=64, seed=3, passes=3),
          checkpoint_store=store, progress=False, run_info=_run_info(1))
    _same(resumed, three)


def test_statistics_of_another_run_are_recomputed(kos_shards, caplog):
    """Statistics in flight for another position (the model was updated, or the run starts
    elsewhere) are not applied: the first s minibatches are E-stepped from the state the run
    starts with, as a fresh run's are, and the log says so."""
    files, _, V = kos_shards
    stream = ShardStream(files, minibatch=64, seed=3, passes=1)
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
    batch = algorithm_class("batch-vb")(5, 20)
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
              "--staleness-warmup", "3", "--no-progress", "--eval-every", "0"]
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
    assert b.info["run"][staleness.WARMUP_KEY] == 3
    wrong_w = [a for a in common if a not in ("--staleness-warmup", "3")]
    assert cli.main(wrong_w + ["--output", part, "--resume", "--passes", "3",
                               "--staleness-warmup", "5"]) == 2
    # the default warm-up (32) outlasts this 12-step run: the bits of staleness 0
    dflt, zero = str(tmp_path / "dflt"), str(tmp_path / "zero")
    assert cli.main(wrong_w + ["--output", dflt]) == 0
    assert cli.main([a if a != "1" else "0" for a in wrong_w] + ["--output", zero]) == 0
    c, d = CheckpointStore(dflt).latest(), CheckpointStore(zero).latest()
    assert c.info["run"][staleness.WARMUP_KEY] == staleness.DEFAULT_WARMUP
    for k in d.arrays:
        assert c.arrays[k].tobytes() == d.arrays[k].tobytes(), k
