"""SIGKILL the trainer at named points (lda_core.faults: during E-steps, while publishing,
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
from lda_core.faults import ENV
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
                        "runlog": range(1, 11), "ended": range(1, 2)},
          "beam": {"publish-written": range(1, 5), "publish-pointer": range(1, 5),
                   "prune": range(1, 3), "runlog": range(1, 6), "ended": range(1, 2)}}
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
    log = os.path.join(md, RUN_LOG_FILE)
    records = list(iter_run_log(log, damaged=[])) if os.path.exists(log) else []
    ended = bool(records) and records[-1]["event"] == "end"
    if store.latest() is not None:
        # a killed model directory is readable as it is
        assert cli.main(["topics", "--model", md, "--top", "3"]) == 0, label
        if ended:
            # killed while exiting, after the run's end record: the run is complete, and
            # --resume says so (exit 2, no step would run) rather than pretending to work
            assert cli.main([str(a) for a in _argv(ds, md, runner, "--resume")]) == 2, label
            assert "no step would run" in capsys.readouterr().err, label
        else:
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
    if not ended:       # a kill after the end record may leave a stale lease, taken over later
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


# ----------------------------------------------------------------------------- vectorize / infer
# SIGKILL `ldabeam vectorize` and `ldabeam infer` at random points (a random time of the
# uninterrupted run, or just after the n-th file of the output appeared): the inputs are never
# touched, and the output is either published complete (verified, identical to the
# uninterrupted run's) or unpublished and refused by every reader and by a rerun without
# --overwrite; a rerun with --overwrite then publishes the uninterrupted run's output.
WRITER_KILLS = 16                  # per command
OUTPUT_KILLS = {"kills": 0, "published": 0, "refused": 0, "recovered": 0, "lost_inputs": 0,
                "half_accepted": 0, "tracebacks": 0}


def _tree(folder):
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, folder)] = fh.read()
    return out


def _files_under(folder):
    return sum(len(f) for _, _, f in os.walk(folder)) if os.path.isdir(folder) else 0


def _kill_writer(argv, out, rng, t_ref):
    """Run ``ldabeam argv`` in a subprocess and SIGKILL it at a random point; the time it
    ran, or None when it finished first."""
    import time
    env = dict(os.environ, PYTHONPATH=REPO)
    p = subprocess.Popen([sys.executable, "-m", "pipelines.cli"] + [str(a) for a in argv],
                         cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    t0 = time.time()
    try:
        if rng.random() < 0.5:                    # a random time of the whole run
            deadline, nth = t0 + rng.uniform(0.2, 1.0) * t_ref, None
        else:                                     # just after the n-th output file appeared
            deadline, nth = t0 + 2 * t_ref, rng.randint(1, 6)
        while p.poll() is None and time.time() < deadline:
            if nth is not None and _files_under(out) >= nth:
                time.sleep(rng.uniform(0.0, 0.05))
                break
            time.sleep(0.01)
        if p.poll() is not None:
            return None
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return time.time() - t0


def _no_traceback(capsys, label):
    err = capsys.readouterr().err
    if "Traceback" in err:
        OUTPUT_KILLS["tracebacks"] += 1
    assert "Traceback" not in err, (label, err)


def _check_killed_vectorize(out, ref_manifest, argv, recover, capsys, label):
    from lda_core.errors import OutputError
    from lda_core.storage import output_paths
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    shards = lambda m: [(s["file"], s["sha256"]) for sp in ("train", "heldout")
                        for s in m["splits"][sp]["shards"]]
    if os.path.exists(os.path.join(out, dataset.MANIFEST_FILE)):
        # accepted by the reader: it must be the uninterrupted run's dataset, whole
        same = shards(manifest.read_manifest(out)) == shards(ref_manifest)
        OUTPUT_KILLS["half_accepted"] += not same
        assert same, label
        assert manifest.verify(out)["documents"] == ref_manifest["counts"]["documents_kept"]
        OUTPUT_KILLS["published"] += 1
    else:
        if dataset.is_dataset_dir(out):
            with pytest.raises(ValueError, match="no manifest.json"):
                manifest.verify(out)
        left = [f for f in (_tree(out) if os.path.isdir(out) else {})
                if not f.startswith("lease.json") and f != output_paths.MARKER_FILE]
        if left:
            rc = cli.main([str(a) for a in argv])          # no --overwrite: refused
            assert rc == 2, label
            with pytest.raises(OutputError):
                output_paths.clear_output(out, "dataset", overwrite=False)
        OUTPUT_KILLS["refused"] += 1
    if recover:
        assert cli.main([str(a) for a in argv] + ["--overwrite"]) == 0, label
        assert shards(manifest.read_manifest(out)) == shards(ref_manifest), label
        manifest.verify(out)
        OUTPUT_KILLS["recovered"] += 1
    _no_traceback(capsys, label)


def _check_killed_infer(out, ref, argv, recover, capsys, label):
    import pyarrow.parquet as pq
    from lda_core.errors import DataIntegrityError
    from lda_core.storage import output_paths
    from pipelines.infer import read_theta
    if output_paths.summary_path(out) is not None:
        # accepted by the reader: it must be the uninterrupted run's results, whole
        same = read_theta(out).equals(ref)
        OUTPUT_KILLS["half_accepted"] += not same
        assert same, label
        assert pq.read_table(out).num_rows == ref.num_rows, label
        OUTPUT_KILLS["published"] += 1
    else:
        if os.path.isdir(out):
            with pytest.raises(DataIntegrityError):
                read_theta(out)
        OUTPUT_KILLS["refused"] += 1
    if recover:
        assert cli.main([str(a) for a in argv] + ["--overwrite"]) == 0, label
        assert read_theta(out).equals(ref), label
        OUTPUT_KILLS["recovered"] += 1
    _no_traceback(capsys, label)


@pytest.fixture(scope="module")
def small_model(ds, tmp_path_factory):
    md = str(tmp_path_factory.mktemp("fimodel") / "m")
    _inproc(_argv(ds, md, "inprocess"))
    return md


def _kill_sweep(name, argv_of, check, ref, inputs, tmp_path, capsys, rng, t_ref):
    kills = attempts = 0
    snap = {p: _tree(p) if os.path.isdir(p) else open(p, "rb").read() for p in inputs}
    while kills < WRITER_KILLS and attempts < 3 * WRITER_KILLS:
        attempts += 1
        out = str(tmp_path / ("%s-%d" % (name, attempts)))
        if _kill_writer(argv_of(out), out, rng, t_ref) is None:
            shutil.rmtree(out, ignore_errors=True)
            continue
        kills += 1
        OUTPUT_KILLS["kills"] += 1
        for p, before in snap.items():
            now = _tree(p) if os.path.isdir(p) else open(p, "rb").read()
            if now != before:
                OUTPUT_KILLS["lost_inputs"] += 1
            assert now == before, (name, p)
        check(out, ref, argv_of(out), kills % 4 == 0, capsys, (name, attempts))
        shutil.rmtree(out, ignore_errors=True)
    assert kills == WRITER_KILLS, (name, kills, attempts)


@pytest.mark.slow
def test_kills_during_vectorize_and_infer(ds, small_model, tmp_path, capsys):
    import time
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    from pipelines.infer import read_theta
    from test_output_rules import reuters_texts
    rng = random.Random(22)
    texts = str(tmp_path / "texts")
    reuters_texts(texts, 40)
    vec = lambda out: ["vectorize", "--input", texts, "--format", "text", "--output", out,
                       "--no-below", 1, "--holdout-fraction", 0.2, "--num-shards", 4,
                       "--heldout-shards", 2]
    ref_out = str(tmp_path / "vec-ref")
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "pipelines.cli"] + [str(a) for a in vec(ref_out)],
                   cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_sweep("vectorize", vec, _check_killed_vectorize, manifest.read_manifest(ref_out),
                [texts], tmp_path, capsys, rng, time.time() - t0)

    inf = lambda out: ["infer", "--model", small_model, "--shards", ds, "--output", out,
                       "--batch-size", 20]
    ref_out = str(tmp_path / "inf-ref")
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "pipelines.cli"] + [str(a) for a in inf(ref_out)],
                   cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_sweep("infer", inf, _check_killed_infer, read_theta(ref_out), [ds, small_model],
                tmp_path, capsys, rng, time.time() - t0)
    print("vectorize/infer kills: %(kills)d (published complete %(published)d, unpublished "
          "and refused %(refused)d, recovered with --overwrite %(recovered)d); input files "
          "lost %(lost_inputs)d, half outputs accepted %(half_accepted)d, tracebacks "
          "%(tracebacks)d" % OUTPUT_KILLS)
    assert OUTPUT_KILLS["kills"] >= 30
    assert OUTPUT_KILLS["lost_inputs"] == OUTPUT_KILLS["tracebacks"] == 0
    assert OUTPUT_KILLS["half_accepted"] == 0
