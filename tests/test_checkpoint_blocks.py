"""Checkpoints of word-sharded algorithms held as B word-block files (lda_core.storage.blocks):
bit-identical round trips for B = 1, 2, 4 (online VB, SCVB0), B = 1 written byte for byte as
before, checkpoints written by the previous code still open everywhere, a damaged block is
never read as good (the previous checkpoint is used), ``publish_blocks`` from .npy block files
equals ``publish`` of the assembled algorithm and never holds the state, and ``latest_blocks``
seeds block files from any checkpoint."""
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from lda_core.algorithms.online_vb import OnlineVB
from lda_core.algorithms.scvb0 import SCVB0
from lda_core.errors import TrainingError
from lda_core.storage.blocks import (algorithm_from_state, checkpoint_state, copy_blocks,
                                     read_block_header)
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.state import (BLOCKED_FORMAT_VERSION, STATE_FORMAT_VERSION, RowBlocks,
                                    StateFormatError, TopicState)
from helpers.uci import uci_docbatch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = 7
S = 60
STEPS = 3
SETTINGS = {OnlineVB: dict(seed=3, dtype="float64", corpus_size=S * 20),
            SCVB0: dict(seed=3, corpus_tokens=S * 2000)}


@pytest.fixture(scope="module")
def kos(kos_paths):
    batch, V = uci_docbatch(kos_paths[0], S * (STEPS + 1))
    return [batch.take(np.arange(i, i + S)) for i in range(0, batch.n_docs, S)], V


def trained(cls, kos, B, steps=STEPS):
    batches, V = kos
    algo = cls(K, V, word_blocks=B, **SETTINGS[cls])
    for batch in batches[:steps]:
        algo.global_step(algo.local_step(batch))
    return algo


def files_of(path):
    return {f: open(os.path.join(path, f), "rb").read() for f in sorted(os.listdir(path))}


def same_algorithm(a, b):
    sa, sb = a.to_state(), b.to_state()
    assert sa == sb
    for k in sa.arrays:
        assert np.asarray(sa.arrays[k]).tobytes() == np.asarray(sb.arrays[k]).tobytes(), k


def old_state_module():
    """lda_core/storage/state.py as main had it before blocked checkpoints (git show)."""
    src = subprocess.run(["git", "show", "ecde241:lda_core/storage/state.py"], cwd=REPO,
                         capture_output=True, text=True)
    if src.returncode != 0:
        pytest.skip("the repository history (commit ecde241) is not available: %s"
                    % src.stderr.strip())
    if "old_lda_state" not in sys.modules:
        spec = importlib.util.spec_from_loader("old_lda_state", loader=None)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["old_lda_state"] = mod          # dataclasses look their module up
        exec(compile(src.stdout, "old_state.py", "exec"), mod.__dict__)
    return sys.modules["old_lda_state"]


def old_checkpoint(algo, model_dir):
    """A checkpoint of ``algo`` written by the previous state writer (one word-order ntilde)."""
    st = algo.to_state()
    old = old_state_module()
    path = os.path.join(model_dir, "checkpoints", "step-%09d" % st.step)
    old.TopicState(algorithm=st.algorithm, n_topics=st.n_topics, n_words=st.n_words,
                   vocab_hash=st.vocab_hash, arrays=st.arrays, params=st.params, step=st.step,
                   docs_seen=st.docs_seen, rng=st.rng, info=st.info).save(path)
    with open(os.path.join(model_dir, "checkpoints", "LATEST"), "w") as f:
        f.write(os.path.basename(path) + "\n")
    return path


# ------------------------------------------------------------------ round trips

@pytest.mark.parametrize("cls", [OnlineVB, SCVB0])
@pytest.mark.parametrize("B", [1, 2, 4])
def test_round_trip_is_bit_identical(cls, B, kos, tmp_path):
    algo = trained(cls, kos, B)
    store = CheckpointStore(str(tmp_path / "m"), check_algorithm=True)
    path = store.publish(checkpoint_state(algo))
    meta = json.load(open(os.path.join(path, "state.json")))
    if B == 1:
        assert meta["version"] == STATE_FORMAT_VERSION and "ntilde.npy" in os.listdir(path)
    else:
        assert meta["version"] == BLOCKED_FORMAT_VERSION
        assert sorted(f for f in os.listdir(path) if f.startswith("ntilde.")) == [
            "ntilde.block-%04d.npy" % b for b in range(B)]
        assert meta["arrays"]["ntilde"]["n_blocks"] == B
        assert meta["arrays"]["ntilde"]["shape"] == [algo.n_words, K]
        # each block file is the block's rows, row order
        for b in range(B):
            assert np.load(os.path.join(path, "ntilde.block-%04d.npy" % b)).tobytes() \
                == algo.block_rows(b).tobytes()
    # every reader's default: the word-order state the algorithm's to_state gives
    assert store.latest() == algo.to_state()
    same_algorithm(cls.from_state(store.latest()), algo)
    # the resume path: the blocks are the algorithm's own array (no word-order copy)
    state = store.latest(row_order=True)
    resumed = algorithm_from_state(state, take=True)
    same_algorithm(resumed, algo)
    if B > 1:
        assert isinstance(state.arrays["ntilde"], RowBlocks)
        assert np.shares_memory(resumed.block_rows(0), state.arrays["ntilde"].whole)
    # and it goes on exactly as the original
    batch = kos[0][STEPS]
    algo.global_step(algo.local_step(batch))
    resumed.global_step(resumed.local_step(batch))
    same_algorithm(resumed, algo)


@pytest.mark.parametrize("cls", [OnlineVB, SCVB0])
def test_one_block_is_written_byte_for_byte_as_before(cls, kos, tmp_path):
    """B = 1: checkpoint_state is to_state, and the directory is what the previous writer
    wrote (the state module of main before blocked checkpoints)."""
    algo = trained(cls, kos, 1)
    new = CheckpointStore(str(tmp_path / "new")).publish(checkpoint_state(algo))
    old = old_checkpoint(algo, str(tmp_path / "old"))
    assert files_of(new) == files_of(old)


# ------------------------------------------------------------------ older checkpoints

@pytest.mark.parametrize("cls", [OnlineVB, SCVB0])
def test_old_single_array_checkpoints_still_open(cls, kos, tmp_path):
    """A B = 4 run's checkpoint written by the previous code (one ntilde in word order):
    every reader, the resume path and the block copy read it as before."""
    algo = trained(cls, kos, 4)
    md = str(tmp_path / "m")
    path = old_checkpoint(algo, md)
    assert json.load(open(os.path.join(path, "state.json")))["version"] == 1
    store = CheckpointStore(md, check_algorithm=True)
    assert store.latest() == algo.to_state()
    state = store.latest(row_order=True)
    assert not isinstance(state.arrays["ntilde"], RowBlocks)      # word order, as written
    same_algorithm(algorithm_from_state(state, take=True), algo)
    dest = [str(tmp_path / ("b%d.npy" % b)) for b in range(4)]
    ck, header = store.latest_blocks(dest)
    assert ck.path == path and header.to_bytes() == algo.shard_header().to_bytes()
    for b in range(4):
        assert np.load(dest[b]).tobytes() == algo.block_rows(b).tobytes()


# ------------------------------------------------------------------ damage

def damage(path, how):
    f = os.path.join(path, "ntilde.block-0002.npy")
    if how == "missing":
        os.remove(f)
    elif how == "truncated":
        with open(f, "r+b") as h:
            h.truncate(os.path.getsize(f) - 8)
    elif how == "flipped":
        data = bytearray(open(f, "rb").read())
        data[-3] ^= 0x10
        open(f, "wb").write(bytes(data))
    elif how == "entry":
        meta = json.load(open(os.path.join(path, "state.json")))
        meta["arrays"]["ntilde"]["blocks"][2]["rows"] += 1
        json.dump(meta, open(os.path.join(path, "state.json"), "w"))
    return f


@pytest.mark.parametrize("how", ["missing", "truncated", "flipped", "entry"])
def test_a_damaged_block_is_never_read_as_good(how, kos, tmp_path, caplog):
    first = trained(OnlineVB, kos, 4, steps=1)
    second = trained(OnlineVB, kos, 4, steps=2)
    md = str(tmp_path / "m")
    store = CheckpointStore(md, check_algorithm=True)
    store.publish(checkpoint_state(first))
    bad = store.publish(checkpoint_state(second))
    f = damage(bad, how)
    with pytest.raises(StateFormatError) as e:
        TopicState.load(bad)
    assert "\n" not in str(e.value) and (os.path.basename(f) in str(e.value)
                                         or "ntilde" in str(e.value))
    with caplog.at_level(logging.WARNING):
        assert store.latest() == first.to_state()
    assert any("skipping checkpoint %s" % bad in r.getMessage() for r in caplog.records)
    dest = [str(tmp_path / ("b%d.npy" % b)) for b in range(4)]
    with pytest.raises(StateFormatError):
        copy_blocks(bad, dest)
    assert not any(os.path.exists(d) for d in dest)     # nothing half-copied is left
    ck, header = store.latest_blocks(dest)
    assert header.counters["step"] == 1 and ck.step == 1
    for b in range(4):
        assert np.load(dest[b]).tobytes() == first.block_rows(b).tobytes()


def test_blocks_without_version_2_are_refused(kos, tmp_path):
    algo = trained(OnlineVB, kos, 2)
    path = CheckpointStore(str(tmp_path / "m")).publish(checkpoint_state(algo))
    meta = json.load(open(os.path.join(path, "state.json")))
    meta["version"] = 1
    json.dump(meta, open(os.path.join(path, "state.json"), "w"))
    with pytest.raises(StateFormatError, match="word-blocked but the version is 1"):
        TopicState.load(path)


# ------------------------------------------------------------------ publish from block files

def block_files(algo, folder):
    os.makedirs(folder, exist_ok=True)
    paths = []
    for b in range(algo.word_blocks):
        paths.append(os.path.join(folder, "rows-0-%d-u.npy" % b))
        np.save(paths[-1], algo.block_rows(b))
    return paths


@pytest.mark.parametrize("cls", [OnlineVB, SCVB0])
@pytest.mark.parametrize("B", [1, 4])
def test_publish_blocks_equals_publish_of_the_assembled_state(cls, B, kos, tmp_path):
    algo = trained(cls, kos, B)
    sources = block_files(algo, str(tmp_path / "scratch"))
    header = algo.shard_header()
    a = CheckpointStore(str(tmp_path / "a")).publish(checkpoint_state(algo))
    b = CheckpointStore(str(tmp_path / "b")).publish_blocks(header, sources)
    assert files_of(a) == files_of(b)
    same_algorithm(algorithm_from_state(TopicState.load(b, row_order=True)), algo)
    assert read_block_header(b).to_bytes() == header.to_bytes()


@pytest.mark.parametrize("cls", [OnlineVB, SCVB0])
def test_session_publish_blocks_is_session_publish(cls, kos, tmp_path, monkeypatch):
    """The trainer's bookkeeping publishes the same checkpoint, stamped the same way, from the
    header and block files as from the assembled algorithm."""
    from lda_core.training import session as session_mod
    from lda_core.training.spec import Output
    monkeypatch.setattr(session_mod.time, "time", lambda: 1234.5)   # the stamp's wall_time
    algo = trained(cls, kos, 4)
    sources = block_files(algo, str(tmp_path / "scratch"))
    paths = []
    for name, publish in (("a", lambda s: s.publish(algo, 7)),
                          ("b", lambda s: s.publish_blocks(algo.shard_header(), sources, 7))):
        ses = session_mod.Session(output=Output(checkpoint_store=CheckpointStore(
            str(tmp_path / name)), progress=False), runner="test", run_info={"x": 1},
            vocab_hash="ab" * 32)
        paths.append(publish(ses))
        assert publish(ses) is None and ses.last_checkpoint == paths[-1]   # once per position
    assert files_of(paths[0]) == files_of(paths[1])
    info = TopicState.load(paths[1]).info
    assert info["trainer"]["minibatches_done"] == 7 and info["run"] == {"x": 1}


def test_publish_blocks_checks_each_block_against_the_header(kos, tmp_path):
    algo = trained(OnlineVB, kos, 4)
    sources = block_files(algo, str(tmp_path / "scratch"))
    store = CheckpointStore(str(tmp_path / "m"))
    first = store.publish(checkpoint_state(trained(OnlineVB, kos, 4, steps=1)))
    np.save(sources[1], algo.block_rows(1)[:-1])                  # a block one row short
    with pytest.raises(StateFormatError, match="rows-0-1-u.npy has shape"):
        store.publish_blocks(algo.shard_header(), sources)
    np.save(sources[1], algo.block_rows(1).astype(np.float32))     # another dtype
    with pytest.raises(StateFormatError, match="rows-0-1-u.npy has dtype <f4"):
        store.publish_blocks(algo.shard_header(), sources)
    with open(sources[1], "wb") as f:                               # half-written
        f.write(open(sources[2], "rb").read()[:200])
    with pytest.raises(StateFormatError, match="rows-0-1-u.npy"):
        store.publish_blocks(algo.shard_header(), sources)
    rows = algo.block_rows(1).copy()
    rows[3, 2] = np.nan
    np.save(sources[1], rows)
    with pytest.raises(TrainingError, match="rows-0-1-u.npy has 1 NaN"):
        store.publish_blocks(algo.shard_header(), sources)
    # nothing was published and nothing is left behind
    assert store.pointer_path() == first
    assert os.listdir(store.root) == ["LATEST", os.path.basename(first)]


def test_publish_blocks_on_an_object_store(kos, store_root, tmp_path):
    import helpers.fake_object_store  # noqa: F401 (the fakegs:// Beam file system)
    from pipelines.runtime.object_store_files import register
    register()                  # the Beam FileSystems layer for URLs
    algo = trained(SCVB0, kos, 4)
    sources = block_files(algo, str(tmp_path / "scratch"))
    store = CheckpointStore(store_root + "/m", check_algorithm=True)
    path = store.publish_blocks(algo.shard_header(), sources)
    assert store.pointer_path() == path and store.unique_names
    assert store.latest() == algo.to_state()
    dest = [store_root + "/scratch/rows-%d.npy" % b for b in range(4)]
    ck, header = store.latest_blocks(lambda b: dest[b])
    assert header.to_bytes() == algo.shard_header().to_bytes()
    back = store.latest(row_order=True)
    same_algorithm(algorithm_from_state(back, take=True), algo)
    for b in range(4):
        with store.files.open_read(dest[b]) as f:
            assert np.load(f).tobytes() == algo.block_rows(b).tobytes()


def test_publish_and_seed_never_hold_the_state(tmp_path):
    """V x K = 40 MB of float64 in 8 blocks: publish_blocks and latest_blocks allocate well
    under a quarter of it (one block-sized buffer at most)."""
    V, Kbig, B = 100_000, 50, 8
    algo = OnlineVB(Kbig, V, word_blocks=B, seed=1)
    state_bytes = V * Kbig * 8
    sources = block_files(algo, str(tmp_path / "scratch"))
    header = algo.shard_header()
    del algo
    store = CheckpointStore(str(tmp_path / "m"))
    dest = [str(tmp_path / ("d%d.npy" % b)) for b in range(B)]
    tracemalloc.start()
    try:
        store.publish_blocks(header, sources)
        _, peak_publish = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        store.latest_blocks(dest)
        _, peak_seed = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_publish < 0.25 * state_bytes, (peak_publish, state_bytes)
    assert peak_seed < 0.25 * state_bytes, (peak_seed, state_bytes)
    for b in range(B):
        assert open(dest[b], "rb").read() == open(sources[b], "rb").read()


def test_row_blocks_are_the_word_order_array_re_laid(kos):
    """RowBlocks' word order (block b holds words b, b + B, ...) is the algorithm's."""
    algo = trained(SCVB0, kos, 4)
    rb = checkpoint_state(algo).arrays["ntilde"]
    assert rb.n_blocks == 4
    assert rb.word_order().tobytes() == algo.to_state().arrays["ntilde"].tobytes()


if __name__ == "__main__":          # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
