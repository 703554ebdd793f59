"""SIGKILL the trainer at named points (lda_core.faults: during E-steps, while publishing,
while pruning, while writing the run log, while exiting), in-process and on the Beam runner:
after each kill the model directory is readable, ``--resume`` (or a fresh start when no
checkpoint was committed) ends with the uninterrupted run's state bit for bit, and the run log
has no damaged line. ENOSPC while a checkpoint is written (a small tmpfs): the previous
checkpoint stays the latest and the error says the disk is full. ``ldabeam vectorize`` and
``ldabeam infer`` killed before, while and after they write: the inputs are untouched and the
output is the uninterrupted run's, whole, or refused.

Every run kills every named point at its first, middle and last arrival
(:data:`CI_PLAN`; :func:`test_every_named_point_is_planned` fails on a point the plan
misses) and the writers at fixed moments of their output. The killed commands are forked
from a warm interpreter (``helpers.warm``): a new process that dies as a cold one would,
without re-importing Beam for every kill. The sweeps of every arrival plus kills at random
times are opt-in (marker ``sweep``, run with ``make test-sweep``).
"""
import os
import random
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.faults import ENV
from lda_core.storage.run_log import RUN_LOG_FILE, iter_run_log
from pipelines import cli

from helpers import warm
from helpers.paths import REPO, repo_env
from helpers.uci import kos_dataset as make_dataset

STEPS = 8                      # 240 documents, minibatches of 30, one pass
BASE = ["--algorithm", "online-vb", "--topics", "6", "--minibatch", "30", "--seed", "3", "--dtype", "float64",
        "--checkpoint-every", "1", "--keep-checkpoints", "2", "--eval-every", "0",
        "--heldout", "none", "--no-progress"]
RUNNERS = {"inprocess": [],
           "beam": ["--runner", "DirectRunner", "--unroll", "--minibatches-per-window", "2"]}
# (point, arrivals) per runner: every arrival at which a kill leaves a different state
POINTS = {"inprocess": {"estep": range(1, 9), "publish-written": range(1, 9),
                        "publish-pointer": range(1, 9), "prune": range(1, 7),
                        "runlog": range(1, 11), "ended": range(1, 2),
                        "atomic-written": range(1, 11)},
          "beam": {"publish-written": range(1, 5), "publish-pointer": range(1, 5),
                   "prune": range(1, 3), "runlog": range(1, 6), "ended": range(1, 2),
                   "atomic-written": range(1, 7)}}
RANDOM_KILLS = {"inprocess": 0, "beam": 4}
KILLED = []


def _first_middle_last(r):
    r = list(r)
    return sorted({r[0], r[len(r) // 2], r[-1]})


#: the kills of every run: each named point at its first, middle and last arrival
CI_PLAN = [(runner, "%s:%d" % (p, i)) for runner in POINTS for p, r in POINTS[runner].items()
           for i in _first_middle_last(r)]


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
    """Run ``ldabeam train`` in a child process that dies at ``fault`` (LDABEAM_FAULT) or is
    killed ``after`` seconds; True when it was killed (False: it finished first)."""
    env = repo_env()
    if fault:
        env[ENV] = fault
    p = warm.popen(["-m", "pipelines.cli"] + _argv(ds, md, runner), cwd=REPO, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def test_every_named_point_is_planned():
    """Every fault point the sources name is killed by CI_PLAN, at its first, middle and last
    arrival for each runner that reaches it."""
    named = set()
    for pkg in ("lda_core", "pipelines"):
        for d, _, files in os.walk(os.path.join(REPO, pkg)):
            for f in files:
                if f.endswith(".py") and f != "faults.py":
                    with open(os.path.join(d, f), encoding="utf-8") as fh:
                        named |= set(re.findall(r"""(?:fault_point|armed)\(["']([\w-]+)["']""",
                                                fh.read()))
    assert named and named == set(POINTS["inprocess"]), named
    assert set(POINTS["beam"]) <= named
    for runner, points in POINTS.items():
        for p, r in points.items():
            planned = {int(f.split(":")[1]) for rn, f in CI_PLAN if rn == runner
                       and f.split(":")[0] == p}
            assert planned == set(_first_middle_last(r)), (runner, p, planned)


@pytest.mark.parametrize("runner,fault", CI_PLAN, ids=["%s-%s" % rf for rf in CI_PLAN])
def test_kill_at_named_point(ds, reference, tmp_path, capsys, runner, fault):
    before = len(KILLED)
    _sweep(ds, reference, tmp_path, capsys, [(runner, fault, None)])
    assert len(KILLED) - before == 1, "the run finished before %s" % fault


@pytest.mark.sweep
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
# SIGKILL `ldabeam vectorize` and `ldabeam infer` while they write (every run: at fixed moments
# of their output, from the lease to the published manifest or summary; the opt-in sweep: at
# random times and just after the n-th output file appeared): the inputs are never touched,
# and the output is either published complete (verified, identical to the uninterrupted run's)
# or unpublished and refused by every reader and by a rerun without --overwrite; a rerun with
# --overwrite then publishes the uninterrupted run's output.
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


def _writer(argv):
    return warm.popen(["-m", "pipelines.cli"] + [str(a) for a in argv], cwd=REPO,
                      env=repo_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_writer(argv, out, rng, t_ref):
    """Run ``ldabeam argv`` in a child process and SIGKILL it at a random point; the time it
    ran, or None when it finished first."""
    p = _writer(argv)
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


def _kill_writer_when(argv, out, moment):
    """Run ``ldabeam argv`` in a child process and SIGKILL it as soon as ``moment(out)`` holds
    (polled every 2 ms); True when it was killed, False when it finished first."""
    p = _writer(argv)
    try:
        deadline = time.time() + 900
        while p.poll() is None and time.time() < deadline and not moment(out):
            time.sleep(0.002)
        if p.poll() is not None:
            return False
        assert moment(out), "%s did not reach the moment in 900 s" % argv[0]
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGKILL, p.returncode
    return True


def _exists(name):
    return lambda out: os.path.exists(os.path.join(out, name))


def _parts(n, where=""):
    """The moment ``n`` finished Parquet files are under ``out/where``."""
    def moment(out):
        d = os.path.join(out, where)
        return os.path.isdir(d) and sum(
            f.endswith(".parquet") and not f.startswith(".")
            for _, _, fs in os.walk(d) for f in fs) >= n
    return moment


#: (moment, its test, published at that moment): vectorize writes its lease, the output marker,
#: the vocabulary, 6 shards (2 held-out, 4 training), the manifest (published) and exits
VECTORIZE_MOMENTS = [("lease", _exists("lease.json"), False),
                     ("marker", _exists(".ldabeam-output.json"), False),
                     ("vocabulary", _exists("vocab.tsv"), False),
                     ("first-shard", _parts(1), False),
                     ("half-the-shards", _parts(3), False),
                     ("every-shard", _parts(6), False),
                     ("manifest", _exists("manifest.json"), True)]
#: infer writes its lease, the marker, 12 result files (2 input shards x 6 batches of 20) and
#: the summary (published)
INFER_MOMENTS = [("lease", _exists("lease.json"), False),
                 ("marker", _exists(".ldabeam-output.json"), False),
                 ("first-part", _parts(1), False),
                 ("half-the-parts", _parts(6), False),
                 ("every-part", _parts(12), False),
                 ("summary", _exists("_summary.json"), True)]


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
        # every Parquet file in the folder is a whole part of it (a kill after the summary,
        # before the lease is released, leaves lease.json beside them: taken over later)
        parts = [f for f in os.listdir(out) if f.endswith(".parquet")]
        assert sum(pq.read_table(os.path.join(out, f)).num_rows for f in parts) == \
            ref.num_rows, label
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


def _snapshot(inputs):
    return {p: _tree(p) if os.path.isdir(p) else open(p, "rb").read() for p in inputs}


def _inputs_untouched(snap, name):
    for p, before in snap.items():
        now = _tree(p) if os.path.isdir(p) else open(p, "rb").read()
        if now != before:
            OUTPUT_KILLS["lost_inputs"] += 1
        assert now == before, (name, p)


def _kill_sweep(name, argv_of, check, ref, inputs, tmp_path, capsys, rng, t_ref):
    kills = attempts = 0
    snap = _snapshot(inputs)
    while kills < WRITER_KILLS and attempts < 3 * WRITER_KILLS:
        attempts += 1
        out = str(tmp_path / ("%s-%d" % (name, attempts)))
        if _kill_writer(argv_of(out), out, rng, t_ref) is None:
            shutil.rmtree(out, ignore_errors=True)
            continue
        kills += 1
        OUTPUT_KILLS["kills"] += 1
        _inputs_untouched(snap, name)
        check(out, ref, argv_of(out), kills % 4 == 0, capsys, (name, attempts))
        shutil.rmtree(out, ignore_errors=True)
    assert kills == WRITER_KILLS, (name, kills, attempts)


@pytest.fixture(scope="module")
def writers(ds, small_model, tmp_path_factory):
    """The inputs, commands and uninterrupted outputs of the writer kills: vectorize of 40
    Reuters articles, infer of the small model on the KOS dataset."""
    from pipelines.ingest import manifest
    from pipelines.infer import read_theta
    from helpers.reuters import reuters_texts
    root = tmp_path_factory.mktemp("writers")
    texts = str(root / "texts")
    reuters_texts(texts, 40)
    vec = lambda out: ["vectorize", "--input", texts, "--format", "text", "--output", out,
                       "--no-below", 1, "--holdout-fraction", 0.2, "--num-shards", 4,
                       "--heldout-shards", 2]
    inf = lambda out: ["infer", "--model", small_model, "--shards", ds, "--output", out,
                       "--batch-size", 20]
    _inproc(vec(str(root / "vec-ref")))
    _inproc(inf(str(root / "inf-ref")))
    return {"vectorize": (vec, _check_killed_vectorize,
                          manifest.read_manifest(str(root / "vec-ref")), [texts],
                          manifest.MANIFEST_FILE),
            "infer": (inf, _check_killed_infer, read_theta(str(root / "inf-ref")),
                      [ds, small_model], "_summary.json")}


WRITER_PLAN = [("vectorize",) + m for m in VECTORIZE_MOMENTS] + \
              [("infer",) + m for m in INFER_MOMENTS]


@pytest.mark.parametrize("name,moment,at,published", WRITER_PLAN,
                         ids=["%s-%s" % (w[0], w[1]) for w in WRITER_PLAN])
def test_writer_killed_at(writers, tmp_path, capsys, name, moment, at, published):
    """Killed at ``moment``: the inputs are untouched; before the last file the output is
    unpublished and refused, after it published and whole; either way a rerun with
    --overwrite publishes the uninterrupted run's output. The last moment is the short
    exit of the process: tried up to 5 times to land a kill in it."""
    argv_of, check, ref, inputs, last = writers[name]
    snap = _snapshot(inputs)
    for attempt in range(5 if published else 1):
        out = str(tmp_path / ("%s-%d" % (name, attempt)))
        if _kill_writer_when(argv_of(out), out, at):
            break
        shutil.rmtree(out)
    else:
        pytest.fail("%s finished before every kill at %s" % (name, moment))
    _inputs_untouched(snap, name)
    assert os.path.exists(os.path.join(out, last)) == published, (name, moment)
    check(out, ref, argv_of(out), True, capsys, (name, moment))


@pytest.mark.sweep
def test_kills_during_vectorize_and_infer(writers, tmp_path, capsys):
    rng = random.Random(22)
    for name in ("vectorize", "infer"):
        argv_of, check, ref, inputs, _ = writers[name]
        ref_out = str(tmp_path / ("%s-ref" % name))
        t0 = time.time()
        p = _writer(argv_of(ref_out))
        assert p.wait(timeout=900) == 0
        _kill_sweep(name, argv_of, check, ref, inputs, tmp_path, capsys, rng, time.time() - t0)
    print("vectorize/infer kills: %(kills)d (published complete %(published)d, unpublished "
          "and refused %(refused)d, recovered with --overwrite %(recovered)d); input files "
          "lost %(lost_inputs)d, half outputs accepted %(half_accepted)d, tracebacks "
          "%(tracebacks)d" % OUTPUT_KILLS)
    assert OUTPUT_KILLS["kills"] >= 30
    assert OUTPUT_KILLS["lost_inputs"] == OUTPUT_KILLS["tracebacks"] == 0
    assert OUTPUT_KILLS["half_accepted"] == 0
