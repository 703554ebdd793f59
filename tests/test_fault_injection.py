"""SIGKILL the trainer at named points (lda_core.training.faults: during E-steps, while publishing,
while pruning, while writing the run log) and at random times, in-process and on the Beam
runner: after each kill the model directory is readable, ``--resume`` (or a fresh start when
no checkpoint was committed) ends with the uninterrupted run's state bit for bit, and the
run log has no damaged line. ENOSPC while a checkpoint is written (a small tmpfs): the
previous checkpoint stays the latest and the error says the disk is full.

The full sweep (>= 50 kills) is marked slow; one kill per point runs in the quick suite."""
import os
import random
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.training.faults import ENV
from lda_core.storage.run_log import RUN_LOG_FILE, iter_run_log
from pipelines import cli

from test_cli_train import make_dataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 8                      # 240 documents, minibatches of 30, one pass
BASE = ["--algorithm", "online-vb", "--topics", "6", "--minibatch", "30", "--seed", "3", "--dtype", "float64",
        "--checkpoint-every", "1", "--keep-checkpoints", "2", "--eval-every", "0",
        "--heldout", "none", "--no-progress"]
RUNNERS = {"inprocess": [],
           "beam": ["--runner", "DirectRunner", "--unroll", "--minibatches-per-window", "2"]}
# (point, arrivals) per runner: every arrival at which a kill leaves a different state
POINTS = {"inprocess": {"estep": range(1, 9), "publish-written": range(1, 9),
                        "publish-pointer": range(1, 9), "prune": range(1, 7),
                        "runlog": range(1, 11)},
          "beam": {"publish-written": range(1, 5), "publish-pointer": range(1, 5),
                   "prune": range(1, 3), "runlog": range(1, 6)}}
RANDOM_KILLS = {"inprocess": 0, "beam": 4}
KILLED = []


@pytest.fixture(scope="module")
def ds(tmp_path_factory, kos_paths):
    return make_dataset(str(tmp_path_factory.mktemp("fids") / "ds"), kos_paths, n_train=240,
                        n_held=20, n_shards=2)


def _argv(ds, md, runner, *extra):
    return ["train", "--shards", ds, "--output", md] + BASE + RUNNERS[runner] + list(extra)


def _inproc(argv):
    rc = cli.main([str(a) for a in argv])
    assert rc == 0, argv
    return rc


@pytest.fixture(scope="module")
def reference(ds, tmp_path_factory):
    assert ENV not in os.environ
    out = {}
    for runner in RUNNERS:
        md = str(tmp_path_factory.mktemp("ref") / runner)
        _inproc(_argv(ds, md, runner))
        st = CheckpointStore(md).latest()
        assert st.step == STEPS
        out[runner] = st
    return out


def _kill_run(ds, md, runner, fault=None, after=None):
    """Run ``ldabeam train`` in a subprocess that dies at ``fault`` (LDABEAM_FAULT) or is
    killed ``after`` seconds; True when it was killed (False: it finished first)."""
    env = dict(os.environ, PYTHONPATH=REPO)
    if fault:
        env[ENV] = fault
    p = subprocess.Popen([sys.executable, "-m", "pipelines.cli"] + _argv(ds, md, runner),
                         cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        if after is not None:
            try:
                p.wait(timeout=after)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
        p.wait(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode in (0, -signal.SIGKILL), (fault, p.returncode)
    return p.returncode == -signal.SIGKILL


def _recover_and_check(ds, md, runner, ref, capsys, label):
    store = CheckpointStore(md, check_algorithm=True)
    if store.latest() is not None:
        # a killed model directory is readable as it is
        assert cli.main(["topics", "--model", md, "--top", "3"]) == 0, label
        _inproc(_argv(ds, md, runner, "--resume"))
    else:
        _inproc(_argv(ds, md, runner))          # nothing committed: start again
    st = CheckpointStore(md).latest()
    assert (st.step, st.docs_seen) == (ref.step, ref.docs_seen), label
    assert sorted(st.arrays) == sorted(ref.arrays), label
    for k in ref.arrays:
        assert np.array_equal(st.arrays[k], ref.arrays[k]), (label, k)
    damaged = []
    recs = list(iter_run_log(os.path.join(md, RUN_LOG_FILE), damaged=damaged))
    assert damaged == [] and recs[-1]["event"] == "end", label
    assert not os.path.exists(os.path.join(md, "lease.json")), label
    assert cli.main(["topics", "--model", md, "--top", "3"]) == 0, label
    assert len(store.list_checkpoints()) <= 3, label      # pruning resumed (keep 2 + 1)
    capsys.readouterr()


def _sweep(ds, reference, tmp_path, capsys, plan):
    n = 0
    for runner, fault, after in plan:
        md = str(tmp_path / ("%s-%d" % (runner, n)))
        n += 1
        if not _kill_run(ds, md, runner, fault=fault, after=after):
            continue
        KILLED.append((runner, fault or "random %.1fs" % after))
        _recover_and_check(ds, md, runner, reference[runner], capsys, (runner, fault, after))
        shutil.rmtree(md)


def test_one_kill_per_point_inprocess(ds, reference, tmp_path, capsys):
    plan = [("inprocess", "%s:%d" % (p, list(r)[len(r) // 2]), None)
            for p, r in POINTS["inprocess"].items()]
    before = len(KILLED)
    _sweep(ds, reference, tmp_path, capsys, plan)
    assert len(KILLED) - before == len(plan)


@pytest.mark.slow
def test_every_point_and_random_kills_both_runners(ds, reference, tmp_path, capsys):
    rng = random.Random(14)
    plan = [(runner, "%s:%d" % (p, i), None) for runner in POINTS
            for p, r in POINTS[runner].items() for i in r]
    plan += [("beam", None, rng.uniform(2.0, 5.0)) for _ in range(RANDOM_KILLS["beam"])]
    before = len(KILLED)
    _sweep(ds, reference, tmp_path, capsys, plan)
    kills = len(KILLED) - before
    print("survived %d kills: %s" % (kills, sorted({(r, f.split(":")[0]) for r, f in
                                                   KILLED[before:]})))
    assert kills >= 50


# ----------------------------------------------------------------------------- ENOSPC
@pytest.fixture
def small_disk(tmp_path):
    d = tmp_path / "disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs to fill (%s)" % (r.stderr.strip() or
                                                                  "not permitted"))
    yield str(d)
    subprocess.run(["umount", str(d)], capture_output=True)


def test_disk_full_while_a_checkpoint_is_written(ds, small_disk, capsys):
    # λ of K=6 x V=6906 float64 is 331 kB per checkpoint: the second or third one fills 1.2 MB
    md = os.path.join(small_disk, "m")
    argv = ["train", "--shards", ds, "--output", md, "--topics", 6, "--minibatch", 30,
            "--algorithm", "online-vb",
            "--seed", 3, "--dtype", "float64", "--checkpoint-every", 1, "--eval-every", 0,
            "--heldout", "none", "--no-progress"]
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, err
    lines = [l for l in err.strip().split("\n") if l and "WARNING" not in l]
    assert len(lines) == 1 and "disk is full" in lines[0] and "No space left" in lines[0], err
    store = CheckpointStore(md)
    st = store.latest()
    assert st is not None and 0 < st.step < STEPS
    assert store.pointer() == st.step                      # the previous one stays LATEST
    assert not [n for n in os.listdir(store.root) if n.startswith(".")]    # no temp left
    assert cli.main(["topics", "--model", md, "--top", "3"]) == 0
