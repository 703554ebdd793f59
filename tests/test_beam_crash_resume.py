"""Crash and resume of `ldabeam train --runner DirectRunner` (the Beam trainer), end to end.

* The driver is killed with SIGKILL during a window (right after the first checkpoint is
  published), then `--resume` finishes the run: the final state equals an uninterrupted run's
  bit for bit (every step is deterministic: per-document draws from (seed, step, doc id),
  statistics merged in piece order).
* The newest checkpoint is corrupted: it is rejected with a warning naming it, the previous
  one is used, and the resumed run again ends with the uninterrupted run's state.
"""
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from helpers import warm
from helpers.paths import REPO, repo_env
from helpers.uci import kos_train_dataset as make_kos_dataset

STEPS = 12


@pytest.fixture(scope="module")
def kos_ds(kos_paths, tmp_path_factory):
    return make_kos_dataset(kos_paths, str(tmp_path_factory.mktemp("kos") / "ds"), 360, 3)


def _args(ds, md, *extra):
    return ["-m", "pipelines.cli", "train", "--shards", ds, "--output", md, "--topics", "6",
            "--algorithm", "online-vb", "--minibatch", "30", "--seed", "3", "--dtype", "float64", "--runner",
            "DirectRunner", "--unroll", "--minibatches-per-window", "2", "--eval-every", "0",
            "--heldout", "none", "--keep-checkpoints", "0", "--no-progress"] + list(extra)


def _run(ds, md, *extra):
    r = warm.run(_args(ds, md, *extra), cwd=REPO, env=repo_env(), capture_output=True,
                 text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


def _final_arrays(md):
    from lda_core.storage.checkpoint import CheckpointStore
    st = CheckpointStore(md).latest()
    assert st.step == STEPS
    return st.arrays


@pytest.fixture(scope="module")
def uninterrupted(kos_ds, tmp_path_factory):
    md = str(tmp_path_factory.mktemp("ref") / "model")
    _run(kos_ds, md)
    return md, {k: v.copy() for k, v in _final_arrays(md).items()}


def test_sigkill_mid_window_then_resume_is_identical(kos_ds, uninterrupted, tmp_path):
    _, ref = uninterrupted
    md = str(tmp_path / "model")
    latest = os.path.join(md, "checkpoints", "LATEST")
    proc = warm.popen(_args(kos_ds, md), cwd=REPO, env=repo_env(), stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL)
    try:
        t0 = time.time()
        while not os.path.exists(latest) and proc.poll() is None and time.time() - t0 < 300:
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    from lda_core.storage.checkpoint import CheckpointStore
    st = CheckpointStore(md).latest()
    assert 0 < st.step < STEPS          # killed mid-run: only finished windows are published
    _run(kos_ds, md, "--resume")
    got = _final_arrays(md)
    assert sorted(got) == sorted(ref)
    for name in ref:
        assert np.array_equal(got[name], ref[name]), name


def test_corrupt_newest_checkpoint_is_rejected_and_previous_used(kos_ds, uninterrupted,
                                                                 tmp_path):
    import shutil
    src, ref = uninterrupted
    md = str(tmp_path / "model")
    shutil.copytree(src, md)
    newest = os.path.join(md, "checkpoints", "step-%09d" % STEPS)
    npy = os.path.join(newest, "ntilde.npy")
    with open(npy, "r+b") as f:           # a torn write: the array file is cut short
        f.truncate(os.path.getsize(npy) // 2)
    r = _run(kos_ds, md, "--resume")
    assert "step-%09d" % STEPS in r.stderr          # the warning names the bad checkpoint
    assert "skipping checkpoint" in r.stderr
    got = _final_arrays(md)                          # redone from step 10: same final state
    for name in ref:
        assert np.array_equal(got[name], ref[name]), name
