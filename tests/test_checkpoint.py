"""CheckpointStore: atomic publication, LATEST pointer, fall-back over damaged checkpoints."""
import gzip
import logging
import os

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore, checkpoint_name
from lda_core.storage.state import StateFormatError, TopicState


@pytest.fixture(scope="module")
def nips_counts(nips_paths):
    """Word counts of the first 100 NIPS documents (V = 12,419) as a dense (100, V) array."""
    docword, _ = nips_paths
    with gzip.open(docword, "rt") as f:
        D, W, _ = int(f.readline()), int(f.readline()), int(f.readline())
        X = np.zeros((100, W))
        for line in f:
            d, w, c = map(int, line.split())
            if d > 100:
                break
            X[d - 1, w - 1] = c
    return X


def make_state(X, step, K=8):
    """A state at ``step`` whose lambda aggregates the documents seen so far."""
    n = min(len(X), 10 * step)
    lam = np.full((K, X.shape[1]), 0.01)
    for d in range(n):
        lam[d % K] += X[d]
    return TopicState("online-vb", K, X.shape[1], "ab" * 32, {"lambda": lam},
                      {"alpha": 0.1, "eta": 0.01, "kappa": 0.7, "tau0": 64.0, "S": 10},
                      step=step, docs_seen=n)


def corrupt(path):
    p = os.path.join(path, "lambda.npy")
    with open(p, "r+b") as f:
        f.seek(-3, os.SEEK_END)
        f.write(b"\x00\x01\x02")


def test_publish_list_load(nips_counts, tmp_path):
    store = CheckpointStore(str(tmp_path))
    assert store.latest() is None and store.list_checkpoints() == []
    states = {s: make_state(nips_counts, s) for s in (3, 1, 2)}
    for s in (1, 2, 3):
        path = store.publish(states[s])
        assert path == os.path.join(str(tmp_path), "checkpoints", checkpoint_name(s))
        assert open(os.path.join(str(tmp_path), "checkpoints", "LATEST")).read() == \
            checkpoint_name(s) + "\n"
    assert checkpoint_name(123) == "step-000000123"
    assert [c.step for c in store.list_checkpoints()] == [1, 2, 3]
    assert store.latest() == states[3]
    assert store.load(2) == states[2]
    assert sorted(os.listdir(os.path.join(str(tmp_path), "checkpoints"))) == \
        ["LATEST", "step-000000001", "step-000000002", "step-000000003"]
    with pytest.raises(FileNotFoundError):
        store.load(7)


def test_latest_skips_a_corrupt_newest_checkpoint(nips_counts, tmp_path, caplog):
    store = CheckpointStore(str(tmp_path))
    for s in (1, 2, 3):
        store.publish(make_state(nips_counts, s))
    corrupt(store.path(3))
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        got = store.latest()
    assert got == make_state(nips_counts, 2)
    warn = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("step-000000003" in r.getMessage() and "corrupt" in r.getMessage()
               for r in warn), caplog.text


@pytest.mark.parametrize("damage", ["no_state_json", "truncated_npy", "missing_npy"])
def test_latest_skips_partial_checkpoints(nips_counts, tmp_path, caplog, damage):
    store = CheckpointStore(str(tmp_path))
    store.publish(make_state(nips_counts, 4))
    store.publish(make_state(nips_counts, 8))
    p = store.path(8)
    if damage == "no_state_json":
        os.remove(os.path.join(p, "state.json"))
    elif damage == "truncated_npy":
        f = os.path.join(p, "lambda.npy")
        os.truncate(f, os.path.getsize(f) // 2)
    else:
        os.remove(os.path.join(p, "lambda.npy"))
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        assert store.latest().step == 4
    assert "skipping checkpoint %s" % p in caplog.text


def test_a_checkpoint_being_written_is_never_returned(nips_counts, tmp_path):
    store = CheckpointStore(str(tmp_path))
    store.publish(make_state(nips_counts, 5))
    # simulate a writer that died (or is still writing) before the rename: a temporary
    # directory with a complete-looking state of a newer step
    final = store.path(6)
    tmp = os.path.join(os.path.dirname(final), ".%s.tmp-deadbeef" % os.path.basename(final))
    make_state(nips_counts, 6).save(tmp)
    assert [c.step for c in store.list_checkpoints()] == [5]
    assert store.latest().step == 5


def test_a_directory_newer_than_latest_is_not_committed(nips_counts, tmp_path, caplog):
    store = CheckpointStore(str(tmp_path))
    store.publish(make_state(nips_counts, 5))
    # the run died between the directory rename and the pointer update
    make_state(nips_counts, 6).save(store.path(6))
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        assert store.latest().step == 5
    assert "newer than LATEST" in caplog.text and "step-000000006" in caplog.text


def test_latest_pointing_to_a_missing_checkpoint_falls_back(nips_counts, tmp_path, caplog):
    store = CheckpointStore(str(tmp_path))
    store.publish(make_state(nips_counts, 1))
    store.publish(make_state(nips_counts, 2))
    import shutil
    shutil.rmtree(store.path(2))
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        assert store.latest().step == 1
    assert "step-000000002 named by LATEST is missing" in caplog.text


def test_without_pointer_the_newest_valid_directory_is_used(nips_counts, tmp_path, caplog):
    store = CheckpointStore(str(tmp_path))
    store.publish(make_state(nips_counts, 1))
    store.publish(make_state(nips_counts, 2))
    os.remove(os.path.join(str(tmp_path), "checkpoints", "LATEST"))
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        assert store.latest().step == 2
    assert "no LATEST pointer" in caplog.text
    with open(os.path.join(str(tmp_path), "checkpoints", "LATEST"), "w") as f:
        f.write("garbage")
    assert store.latest().step == 2


def test_all_checkpoints_corrupt_raises(nips_counts, tmp_path):
    store = CheckpointStore(str(tmp_path))
    store.publish(make_state(nips_counts, 1))
    store.publish(make_state(nips_counts, 2))
    corrupt(store.path(1))
    corrupt(store.path(2))
    with pytest.raises(StateFormatError, match=r"no valid checkpoint in .*step-000000002 .*"
                                               r"corrupt.*step-000000001 .*corrupt"):
        store.latest()


def test_step_in_json_must_match_the_directory(nips_counts, tmp_path, caplog):
    store = CheckpointStore(str(tmp_path))
    store.publish(make_state(nips_counts, 1))
    store.publish(make_state(nips_counts, 2))
    import shutil
    shutil.rmtree(store.path(2))
    shutil.copytree(store.path(1), store.path(2))      # a misplaced copy of step 1
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        assert store.latest().step == 1
    assert "state.json says step 1 but the directory is step-000000002" in caplog.text


def test_republishing_a_step_replaces_it(nips_counts, tmp_path):
    store = CheckpointStore(str(tmp_path))
    store.publish(make_state(nips_counts, 3))
    again = make_state(nips_counts, 3, K=4)
    store.publish(again)
    assert store.latest() == again
    assert [c.step for c in store.list_checkpoints()] == [3]
    assert sorted(os.listdir(os.path.join(str(tmp_path), "checkpoints"))) == \
        ["LATEST", "step-000000003"]


def test_keep_last_prunes_old_checkpoints(nips_counts, tmp_path):
    store = CheckpointStore(str(tmp_path), keep_last=2)
    for s in range(1, 6):
        store.publish(make_state(nips_counts, s))
        assert [c.step for c in store.list_checkpoints()] == list(range(max(1, s - 1), s + 1))
    # publishing an older step (a restart from step 1) never deletes what was just published
    store.publish(make_state(nips_counts, 1))
    steps = [c.step for c in store.list_checkpoints()]
    assert 1 in steps and store.latest().step == 1
    # the two newest by step stay too (a later run re-publishing them replaces them); they
    # are newer than LATEST, so latest() ignores them
    assert steps == [1, 4, 5]


def test_keep_last_is_checked(tmp_path):
    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="keep_last must be None"):
            CheckpointStore(str(tmp_path), keep_last=bad)


def test_resume_round_trip_is_exact(nips_counts, tmp_path):
    """What the trainer relies on: the latest checkpoint equals the state published."""
    store = CheckpointStore(str(tmp_path))
    st = make_state(nips_counts, 7)
    st.rng = np.random.default_rng(5).bit_generator.state
    store.publish(st)
    back = CheckpointStore(str(tmp_path)).latest()
    assert back == st
    assert back.arrays["lambda"].tobytes() == st.arrays["lambda"].tobytes()


class MemoryFiles:
    """An object-store-like file layer (flat keys, no directories, no atomic rename) that
    replaces lda_core.storage.files.LocalFiles: proves every file operation of the state and the
    store goes through the replaceable object (what the pipelines' gs:// wrapper relies on)."""

    def __init__(self):
        self.objects = {}

    def join(self, *parts):
        return "/".join(p.rstrip("/") for p in parts)

    def basename(self, path):
        return path.rstrip("/").rsplit("/", 1)[-1]

    def dirname(self, path):
        return path.rstrip("/").rsplit("/", 1)[0]

    def exists(self, path):
        return path in self.objects or self.isdir(path)

    def isdir(self, path):
        return any(k.startswith(path.rstrip("/") + "/") for k in self.objects)

    def listdir(self, path):
        pre = path.rstrip("/") + "/"
        return sorted({k[len(pre):].split("/", 1)[0] for k in self.objects if k.startswith(pre)})

    def size(self, path):
        return len(self.objects[path])

    def makedirs(self, path):
        pass

    def open_read(self, path):
        import io
        return io.BytesIO(self.objects[path])

    def open_write(self, path):
        import io
        files = self

        class W(io.BytesIO):
            def close(self):
                files.objects[path] = self.getvalue()
                super().close()
        return W()

    def sync_file(self, f):
        pass

    def make_temp_dir(self, final):
        return final + ".tmp"

    def publish_dir(self, tmp, final):       # copy objects: not atomic, LATEST commits
        for k in [k for k in self.objects if k.startswith(final + "/")]:
            del self.objects[k]
        for k in [k for k in self.objects if k.startswith(tmp + "/")]:
            self.objects[final + k[len(tmp):]] = self.objects.pop(k)

    def write_atomic(self, path, data):
        self.objects[path] = bytes(data)

    def remove_tree(self, path):
        for k in [k for k in self.objects if k.startswith(path.rstrip("/") + "/")]:
            del self.objects[k]


def test_state_and_store_work_through_a_replacement_file_layer(nips_counts, tmp_path, caplog):
    fs = MemoryFiles()
    store = CheckpointStore("gs://bucket/model", keep_last=2, files=fs)
    for s in (1, 2, 3):
        store.publish(make_state(nips_counts, s))
    assert not os.listdir(str(tmp_path))                       # nothing touched the disk
    assert fs.objects["gs://bucket/model/checkpoints/LATEST"] == b"step-000000003\n"
    assert [c.step for c in store.list_checkpoints()] == [2, 3]
    assert store.latest() == make_state(nips_counts, 3)
    key = "gs://bucket/model/checkpoints/step-000000003/lambda.npy"
    fs.objects[key] = fs.objects[key][:-8]
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        assert store.latest().step == 2
    assert "step-000000003" in caplog.text and "truncated" in caplog.text


def test_non_finite_state_is_refused_and_latest_is_unchanged(nips_counts, tmp_path):
    store = CheckpointStore(str(tmp_path))
    store.publish(make_state(nips_counts, 1))
    bad = make_state(nips_counts, 2)
    bad.arrays["lambda"][3, 7] = np.nan
    bad.arrays["lambda"][0, 0] = np.inf
    bad.arrays["logw"] = np.array([0.0, -np.inf])          # -inf is a valid log-weight
    with pytest.raises(ValueError, match=r"refusing to checkpoint step 2 of online-vb: lambda "
                                         r"has 1 NaN and 1 \+inf values"):
        store.publish(bad)
    assert [c.step for c in store.list_checkpoints()] == [1]
    assert store.latest().step == 1
    ok = make_state(nips_counts, 3)
    ok.arrays["logw"] = np.array([0.0, -np.inf])
    store.publish(ok)
    assert store.latest() == ok
