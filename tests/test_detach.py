"""``--detach`` (Dataflow Flex Templates: the launcher returns after submitting its job).

* ``ldabeam train --runner DirectRunner --detach``, launched repeatedly (each launch = one
  window, the job publishes its own checkpoint, evaluates and appends its run-log records),
  ends with the state of an uninterrupted waiting run with the same window size, bit for bit,
  every checkpoint included, and the run log holds every step record (same values); a local
  model directory and the test-only object store ``fakegs://`` (tests/fake_object_store.py),
  the in-process DirectRunner and two worker processes;
* a step that fails mid-window: the steps before it are published, the error is logged and
  the launch fails; the next launch resumes from there and still ends bit for bit equal;
* a launch after the last window submits nothing; ``--detach`` with the in-process trainer,
  a stream sampler is refused before any work;
* ``ldabeam vectorize --detach`` / ``ldabeam infer --detach`` write what the waiting commands
  write.

The DirectRunner runs its job inside the submitting process (``run()`` returns when the job
is done), so the CLI waits for it; the handle of every submission is kept
(``pipelines.commands.train.LAST_SUBMITTED`` ...) and waited on here all the same.
"""
import json
import os

import numpy as np
import pytest

from helpers import fake_object_store as fos
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import read_run_log
from lda_core.storage.state import TopicState
from lda_core.storage.files import files_for
from pipelines import cli
from pipelines.ingest import dataset
from pipelines.ingest import manifest
from pipelines.runtime import paths
from lda_core.storage.vocab_file import Vocabulary
from pipelines.commands import infer as infer_cmd
from pipelines.commands import train as train_cmd
from pipelines.commands import vectorize as vectorize_cmd
from pipelines.training.beam_detached import SubmittedWindow

from helpers.uci import kos_dataset as make_dataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# 300 documents, S = 50: 6 minibatches per pass, 2 passes = 12 steps; windows of 5 -> 0..5,
# 5..10, 10..12; held-out evaluation every 4 steps (inside each window)
ARGS = ["--algorithm", "online-vb", "--topics", 5, "--minibatch", 50, "--seed", 2, "--dtype", "float64", "--alpha", 0.1,
        "--eta", 0.01, "--no-progress", "--passes", 2, "--eval-every", 4,
        "--keep-checkpoints", 0, "--runner", "DirectRunner", "--minibatches-per-window", 5]
RESUME = ["--no-progress", "--runner", "DirectRunner", "--minibatches-per-window", 5,
          "--eval-every", 4, "--keep-checkpoints", 0]   # not kept in the checkpoint
WINDOWS = [(0, 5), (5, 10), (10, 12)]
# run-log fields that differ between two runs by nature (times, paths, run ids)
VOLATILE = {"wall_time", "elapsed", "eval_seconds", "global_step_seconds", "checkpoint",
            "run_key"}


@pytest.fixture(scope="module")
def ds(tmp_path_factory, kos_paths):
    return make_dataset(str(tmp_path_factory.mktemp("detachds") / "ds"), kos_paths,
                        n_train=300, n_held=60)


def ldabeam(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def waiting_run(ds, tmp_path_factory):
    """The uninterrupted waiting Beam run with the same windows (3 windows in one call)."""
    m = str(tmp_path_factory.mktemp("waiting") / "model")
    assert cli.main([str(a) for a in ["train", "--shards", ds, "--output", m] + ARGS]) == 0
    return m


def _same_state(a: TopicState, b: TopicState):
    assert (a.step, a.docs_seen, a.algorithm, a.params, a.rng, a.vocab_hash) == \
        (b.step, b.docs_seen, b.algorithm, b.params, b.rng, b.vocab_hash)
    assert sorted(a.arrays) == sorted(b.arrays)
    for k in a.arrays:
        assert a.arrays[k].dtype == b.arrays[k].dtype
        assert a.arrays[k].tobytes() == b.arrays[k].tobytes(), k
    ta, tb = a.info["trainer"], b.info["trainer"]
    assert (ta["minibatches_done"], ta["docs_seen"], ta["runner"]) == \
        (tb["minibatches_done"], tb["docs_seen"], tb["runner"])
    assert a.info["run"] == b.info["run"]


def _strip(rec):
    out = {}
    for k, v in rec.items():
        if k in VOLATILE:
            continue
        out[k] = _strip(v) if isinstance(v, dict) else v
    return out


def _detached_launches(capsys, ds, md, n=len(WINDOWS), extra=(), fresh=True):
    """``n`` detached launches (the first fresh unless ``fresh`` is False, then --resume),
    each waited for through its handle; returns the SubmittedWindow of each."""
    subs = []
    for i in range(n):
        argv = (["train", "--shards", ds, "--output", md, "--detach"]
                + (ARGS if i == 0 and fresh else ["--resume"] + RESUME) + list(extra))
        train_cmd.LAST_SUBMITTED = None
        rc, out, err = ldabeam(capsys, *argv)
        assert rc == 0, err
        sub = train_cmd.LAST_SUBMITTED
        assert sub is not None and sub.result is not None
        assert str(sub.wait()).endswith("DONE")
        subs.append(sub)
        assert "window of minibatches %d..%d" % (sub.start, sub.stop) in out
    return subs


def _check_against_waiting(md, waiting, windows=WINDOWS):
    ref_store, store = CheckpointStore(waiting), CheckpointStore(md)
    # every window published its checkpoint, each equal to the waiting run's
    assert [c.step for c in store.list_checkpoints()] == [b for _, b in windows]
    assert [c.step for c in ref_store.list_checkpoints()] == [b for _, b in windows]
    for _, b in windows:
        _same_state(store.load(b), ref_store.load(b))
    _same_state(store.latest(), ref_store.latest())
    # the run log: every step record once, with the waiting run's values and evaluations
    log = paths.join(md, "run_log.jsonl")
    recs, ref = read_run_log(log), read_run_log(paths.join(waiting, "run_log.jsonl"))
    steps = [r for r in recs if r["event"] == "step"]
    ref_steps = [r for r in ref if r["event"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 13))
    assert [_strip(r) for r in steps] == [_strip(r) for r in ref_steps]
    for r in steps:
        if r["step"] in [b for _, b in windows]:
            assert r["checkpoint"].rsplit("/", 1)[1].startswith("step-%09d" % r["step"])
        else:
            assert "checkpoint" not in r
    assert [r["step"] for r in steps if r.get("metrics")] == [5, 10, 12]
    # one start and one end per launch, in order; the start records name the window
    kinds = [r["event"] for r in recs if r["event"] != "step"]
    assert kinds == ["start", "end"] * len(windows)
    starts = [r for r in recs if r["event"] == "start"]
    assert [tuple(r["window"]) for r in starts] == list(windows)
    assert all(r["run"]["detached"] is True for r in starts)
    ends = [r for r in recs if r["event"] == "end"]
    assert [r["step"] for r in ends] == [b for _, b in windows]
    assert ends[-1]["metrics"]["completion_ll_per_token"] == \
        [r for r in ref if r["event"] == "end"][-1]["metrics"]["completion_ll_per_token"]
    for s, e in zip(starts, ends):
        assert s["run_key"] == e["run_key"]
    return recs


# ------------------------------------------------------------------ train, local model dir

def test_detached_windows_equal_a_waiting_run(ds, waiting_run, tmp_path, capsys):
    md = str(tmp_path / "model")
    subs = _detached_launches(capsys, ds, md)
    assert [(s.start, s.stop) for s in subs] == WINDOWS
    assert all(s.runs_here and s.total == 12 for s in subs)
    _check_against_waiting(md, waiting_run)
    # nothing is left in the scratch folders of the runs
    from pipelines.runtime.beam_options import runner_config
    from pipelines.training.beam_run import default_scratch_root
    root = default_scratch_root(md, runner_config("DirectRunner", []))
    assert not os.path.exists(root) or os.listdir(root) == []
    # a launch after the last window submits nothing and says so
    train_cmd.LAST_SUBMITTED = None
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--detach",
                           "--resume", *RESUME)
    assert rc == 0, err
    assert "training is complete: position 12 of 12" in out and "no job submitted" in out
    assert train_cmd.LAST_SUBMITTED.result is None
    assert CheckpointStore(md).pointer() == 12
    assert len(read_run_log(os.path.join(md, "run_log.jsonl"), "start")) == 3


REMOTE = ["--exchange", "remote", "--staleness", "1", "--staleness-warmup", "2", "--pieces", "2",
          "--word-blocks", "2"]


def test_detached_windows_of_the_remote_exchange_equal_a_waiting_run(ds, tmp_path, capsys):
    """The exchange a template launch runs on a cluster: each window's job publishes its
    checkpoint (with the statistics in flight) from the window's end files, and the next
    launch resumes from it: the waiting run's checkpoints and run log."""
    waiting = str(tmp_path / "waiting")
    rc, _, err = ldabeam(capsys, "train", "--shards", ds, "--output", waiting, *ARGS, *REMOTE)
    assert rc == 0, err
    md = str(tmp_path / "model")
    _detached_launches(capsys, ds, md, extra=REMOTE)
    _check_against_waiting(md, waiting)
    assert CheckpointStore(md).latest().info["pending"]["first"] == 12


def test_a_refused_step_of_the_remote_exchange_is_published_up_to_the_step_before(
        ds, tmp_path, capsys, monkeypatch):
    """A detached remote window cannot re-run itself: the launch that meets the refusal
    publishes nothing and logs it; the next launch stops its window before that step and
    publishes the state there; the one after stops on the refusal again."""
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.errors import StepRefused
    real = OnlineVB.plan_step.__func__

    def refusing(cls, header, stats):
        if header.counters["step"] == 6:
            raise StepRefused("refusing a minibatch with non-finite statistics (test)")
        return real(cls, header, stats)

    md = str(tmp_path / "model")
    _detached_launches(capsys, ds, md, n=1, extra=REMOTE)
    monkeypatch.setattr(OnlineVB, "plan_step", classmethod(refusing))
    argv = ["train", "--shards", ds, "--output", md, "--detach", "--resume"] + RESUME + REMOTE
    rc, out, err = ldabeam(capsys, *argv)
    assert rc == 2 and "minibatch 7 could not be applied" in err, err
    assert CheckpointStore(md).pointer() == 5
    rc, out, err = ldabeam(capsys, *argv)
    assert rc == 0, err
    assert CheckpointStore(md).pointer() == 6
    rc, out, err = ldabeam(capsys, *argv)
    assert rc == 2 and "minibatch 7 could not be applied" in err, err
    assert CheckpointStore(md).pointer() == 6


def test_the_python_api_returns_without_waiting_for_a_remote_runner(ds, tmp_path):
    """``beam_train.train(..., detach=True)`` returns the submitted window (the runner's
    PipelineResult): here the DirectRunner, whose job is done when run() returns."""
    from pipelines.training import beam_train
    from pipelines.training.algorithm_options import build_algorithm
    files = dataset.resolve_shards(ds)
    vh = dataset.check_vocab_hash(files, None)
    algo = build_algorithm("online-vb", 5, len(Vocabulary.read(ds)),
                           settings={"dtype": "float64"}, corpus_size=dataset.count_documents(files), seed=2, vocab_hash=vh)
    md = str(tmp_path / "api")
    sub = beam_train.train(algo, files, md, seed=2, minibatch=50, minibatches_per_window=4,
                           beam_argv=["--runner=DirectRunner"], progress=False, detach=True)
    assert isinstance(sub, SubmittedWindow)
    assert (sub.start, sub.stop, sub.total) == (0, 4, 6)
    assert str(sub.wait()).endswith("DONE")
    assert CheckpointStore(md).pointer() == 4
    assert algo.step == 0          # the driver's object is not trained: the job is


def test_a_failed_step_publishes_the_steps_before_it_and_the_next_launch_resumes(
        ds, waiting_run, tmp_path, capsys, monkeypatch):
    from lda_core.algorithms.online_vb import OnlineVB
    md = str(tmp_path / "model")
    _detached_launches(capsys, ds, md, n=1)
    real = OnlineVB.global_step

    def failing(self, stats):
        if self.step == 6:
            raise FloatingPointError("injected failure at step 7")
        return real(self, stats)

    monkeypatch.setattr(OnlineVB, "global_step", failing)
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--detach",
                           "--resume", *RESUME)
    assert rc == 2 and "minibatch 7 could not be applied" in err, err
    assert CheckpointStore(md).pointer() == 6
    recs = read_run_log(os.path.join(md, "run_log.jsonl"))
    assert [r["event"] for r in recs][-3:] == ["start", "step", "error"]
    assert recs[-2]["step"] == 6 and recs[-2]["checkpoint"].endswith("step-000000006")
    monkeypatch.setattr(OnlineVB, "global_step", real)
    subs = _detached_launches(capsys, ds, md, n=2, fresh=False)
    assert [(s.start, s.stop) for s in subs] == [(6, 11), (11, 12)]
    _same_state(CheckpointStore(md).latest(), CheckpointStore(waiting_run).latest())
    steps = read_run_log(os.path.join(md, "run_log.jsonl"), "step")
    assert [r["step"] for r in steps] == list(range(1, 13))


def test_publish_once_never_publishes_a_position_twice_or_moves_latest_back(tmp_path):
    """A retried bundle of the last DoFn finds its checkpoint already published."""
    from pipelines.training import beam_detached
    from pipelines.training.algorithm_options import build_algorithm
    algo = build_algorithm("online-vb", 3, 20, settings={}, corpus_size=100,
                           seed=0, vocab_hash="ab" * 32)
    store = CheckpointStore(str(tmp_path / "m"))
    first = beam_detached._publish_once(store, algo, 0, "DirectRunner", {"x": 1})
    assert beam_detached._publish_once(store, algo, 0, "DirectRunner", {"x": 1}) == first
    assert [c.step for c in store.list_checkpoints()] == [0]
    st = store.latest()
    st.info = dict(st.info, trainer=dict(st.info["trainer"], minibatches_done=5))
    store.publish(st)                       # someone else is at position 5
    assert beam_detached._publish_once(store, algo, 3, "DirectRunner", None) is None
    assert beam_detached._published_position(store) == 5


# ------------------------------------------------------------------ train, object store



def _objects(url):
    from pipelines.runtime.object_store_files import ObjectStoreFiles
    return [p[len(url) + 1:] for p in ObjectStoreFiles()._list(url)]


def test_detached_windows_on_an_object_store(ds, waiting_run, store_root, capsys, tmp_path):
    md = store_root + "/model"
    subs = _detached_launches(capsys, ds, md)
    assert [(s.start, s.stop) for s in subs] == WINDOWS
    recs = _check_against_waiting(md, waiting_run)
    # the start state of each window went to MODEL/.beam-scratch on the store (the job has no
    # access to the driver's memory) and was removed by the job
    creates = [u for op, _, u in fos.read_log(str(tmp_path / "ops.log")) if op == "create"]
    assert sum(1 for u in creates if "/.beam-scratch/" in u and u.endswith(".npz")) == 3
    assert not any(".beam-scratch" in o for o in _objects(md))
    # the run log is one object, rewritten once per window (read, append, rewrite)
    assert sum(1 for u in creates if u.endswith("/run_log.jsonl")) == 3
    assert len(recs) == 12 + 2 * 3


@pytest.mark.serial
@pytest.mark.slow
def test_detached_windows_with_worker_processes_on_an_object_store(
        ds, store_root, capsys, tmp_path, monkeypatch):
    """Two DirectRunner worker processes (the fake scheme through a sitecustomize): the last
    DoFn runs in a worker process and publishes there; two detached windows equal one
    waiting run with the same pieces (4 per minibatch), bit for bit."""
    site = fos.worker_site_dir(str(tmp_path / "site"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [site, REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    args = ["--shards", ds, "--algorithm", "online-vb", "--topics", 5, "--minibatch", 100,
            "--seed", 2, "--dtype",
            "float64", "--no-progress", "--eval-every", 2, "--minibatches-per-window", 2,
            "--runner", "DirectRunner", "--direct_running_mode=multi_processing",
            "--direct_num_workers=2", "--keep-checkpoints", 0, "--pieces", 4]
    md = store_root + "/mp"
    for i in range(2):
        train_cmd.LAST_SUBMITTED = None
        rc, out, err = ldabeam(capsys, "train", "--output", md, "--detach",
                               *(args + (["--resume"] if i else [])))
        assert rc == 0, err
        train_cmd.LAST_SUBMITTED.wait()
    got = CheckpointStore(md).latest()
    assert got.step == 3 and [c.step for c in CheckpointStore(md).list_checkpoints()] == [2, 3]
    me = os.getpid()
    ops = fos.read_log(str(tmp_path / "ops.log"))
    assert any(op == "create" and pid != me and "/checkpoints/LATEST" in u
               for op, pid, u in ops), "the checkpoint was not published by a worker"
    assert not any(".beam-scratch" in o for o in _objects(md))
    steps = read_run_log(md + "/run_log.jsonl", "step")
    assert [r["step"] for r in steps] == [1, 2, 3]
    # evaluated where a multiple of --eval-every was reached, and at the end of each launch
    assert [r["step"] for r in steps if r.get("metrics")] == [2]
    ends = read_run_log(md + "/run_log.jsonl", "end")
    assert [r["step"] for r in ends] == [2, 3] and all(r["metrics"] for r in ends)
    # the in-process Beam trainer with the same pieces and E-step threads, waiting
    from pipelines.training import beam_train
    from pipelines.training.algorithm_options import build_algorithm
    files = dataset.resolve_shards(ds)
    vh = dataset.check_vocab_hash(files, None)
    algo = build_algorithm("online-vb", 5, got.n_words, settings={"dtype": "float64"},
                           corpus_size=dataset.count_documents(files), seed=2,
                           vocab_hash=vh)
    res = beam_train.train(algo, files, str(tmp_path / "ref"), seed=2, minibatch=100,
                           minibatches_per_window=2, beam_argv=["--runner=DirectRunner"],
                           pieces_per_minibatch=4, progress=False,
                           n_threads=max(1, (os.cpu_count() or 1) // 2))
    ref = res.algorithm.to_state()
    assert (got.step, got.docs_seen, got.rng) == (ref.step, ref.docs_seen, ref.rng)
    for k, v in got.arrays.items():
        assert v.tobytes() == ref.arrays[k].tobytes(), k


# ------------------------------------------------------------------ refused before any work

@pytest.mark.parametrize("extra, message", [
    (["--runner", "inprocess"], "--detach needs a Beam --runner"),
    (["--runner", "DirectRunner", "--algorithm", "o-lda"], "not available for algorithm o-lda"),
])
def test_detach_is_refused_where_it_cannot_work(ds, tmp_path, capsys, extra, message):
    md = str(tmp_path / "m")
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--topics", 3,
                           "--detach", "--no-progress", *extra)
    assert rc == 2 and message in err, err
    assert not os.path.exists(md)


# ------------------------------------------------------------------ vectorize and infer

LINES = ["the quick brown fox jumps over the lazy dog %d" % i for i in range(40)] + \
    ["topic models find themes in large text collections %d" % i for i in range(40)] + \
    ["beam pipelines run on many workers at once %d" % i for i in range(40)]


def _read_tables(d):
    import pyarrow.parquet as pq
    out = {}
    for split in ("train", "heldout"):
        for f in sorted(os.listdir(os.path.join(d, split))):
            out["%s/%s" % (split, f)] = pq.read_table(os.path.join(d, split, f))
    return out


def test_detached_vectorize_and_infer_write_what_the_waiting_commands_write(
        ds, waiting_run, tmp_path, capsys):
    src = tmp_path / "corpus.txt"
    src.write_text("\n".join(LINES) + "\n")
    common = ["--input", str(src), "--format", "lines", "--holdout-fraction", "0.2",
              "--no-below", 1, "--num-shards", 2]
    a, b = str(tmp_path / "wait"), str(tmp_path / "detach")
    rc, out_a, err = ldabeam(capsys, "vectorize", "--output", a, *common)
    assert rc == 0, err
    vectorize_cmd.LAST_SUBMITTED = None
    rc, out_b, err = ldabeam(capsys, "vectorize", "--output", b, "--detach", *common)
    assert rc == 0, err
    assert str(vectorize_cmd.LAST_SUBMITTED.wait_until_finish()).endswith("DONE")
    assert "runs the job in this process" in out_b
    ma, mb = manifest.read_manifest(a), manifest.read_manifest(b)
    ma["settings"].pop("_inputs", None), mb["settings"].pop("_inputs", None)
    assert ma == mb
    ta, tb = _read_tables(a), _read_tables(b)
    assert sorted(ta) == sorted(tb) and all(ta[k].equals(tb[k]) for k in ta)
    assert open(os.path.join(a, "vocab.tsv")).read() == open(os.path.join(b, "vocab.tsv")).read()
    # the checks run before submission: an existing dataset is refused, nothing submitted
    vectorize_cmd.LAST_SUBMITTED = None
    rc, out, err = ldabeam(capsys, "vectorize", "--output", b, "--detach", *common)
    assert rc == 2 and "already holds a dataset" in err and vectorize_cmd.LAST_SUBMITTED is None

    # infer with the model of the waiting run, waiting and detached
    ia, ib = str(tmp_path / "theta_wait"), str(tmp_path / "theta_detach")
    inf = ["--model", waiting_run, "--shards", ds, "--split", "heldout", "--batch-size", 16]
    rc, out, err = ldabeam(capsys, "infer", "--output", ia, *inf)
    assert rc == 0, err
    infer_cmd.LAST_SUBMITTED = None
    rc, out2, err = ldabeam(capsys, "infer", "--output", ib, "--detach", *inf)
    assert rc == 0, err
    assert str(infer_cmd.LAST_SUBMITTED.wait_until_finish()).endswith("DONE")
    assert out2.splitlines()[-1] == out.splitlines()[-1].replace(ia, ib)
    sa = json.load(open(os.path.join(ia, "_summary.json")))
    sb = json.load(open(os.path.join(ib, "_summary.json")))
    assert sa == sb
    from pipelines.infer import read_theta
    assert read_theta(ia).equals(read_theta(ib))
    infer_cmd.LAST_SUBMITTED = None
    rc, out, err = ldabeam(capsys, "infer", "--output", ib, "--detach", *inf)
    assert rc == 2 and "already holds inference results" in err
    assert infer_cmd.LAST_SUBMITTED is None


def test_detached_infer_to_an_object_store(ds, waiting_run, store_root, capsys):
    out_dir = store_root + "/theta"
    rc, out, err = ldabeam(capsys, "infer", "--model", waiting_run, "--shards", ds, "--split",
                           "heldout", "--output", out_dir, "--detach")
    assert rc == 0, err
    infer_cmd.LAST_SUBMITTED.wait_until_finish()
    s = json.loads(files_for(out_dir + "/_summary.json").read_bytes(out_dir + "/_summary.json"))
    assert s["documents"] == 60 and len(s["files"]) >= 1


# ------------------------------------------------------------------ a job that outlives the launch

@pytest.mark.serial
@pytest.mark.slow
def test_detached_launch_returns_before_a_portable_job_ends(ds, tmp_path, capsys):
    """PortableRunner against the SDK's job service with an EXTERNAL worker pool: the job
    runs outside the submitting process, so ``ldabeam train --detach`` returns as soon as it
    is submitted (no checkpoint yet), and the job then publishes the window's checkpoint and
    run-log records itself -- equal, bit for bit, to the waiting Beam trainer with the same
    pieces (the default for this runner: ``beam_train.default_pieces``)."""
    import time
    from helpers.procs import PY, Service as _Service, job_service as _job_service
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(PY) + os.pathsep + env.get("PATH", "")
    md = str(tmp_path / "model")
    args = [a for a in ARGS if a not in ("--runner", "DirectRunner")]
    with _job_service(tmp_path) as js, \
            _Service([PY, "-m", "apache_beam.runners.worker.worker_pool_main",
                      "--service_port={port}"], str(tmp_path / "pool.log"), env=env) as pool:
        train_cmd.LAST_SUBMITTED = None
        rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--detach",
                               "--runner", "PortableRunner",
                               "--job_endpoint=localhost:%d" % js.port,
                               "--environment_type=EXTERNAL",
                               "--environment_config=localhost:%d" % pool.port, *args)
        assert rc == 0, err
        at_return = CheckpointStore(md).pointer()
        sub = train_cmd.LAST_SUBMITTED
        assert not sub.runs_here and "job: PortableRunner job" in out
        assert "launch again with --resume" in out
        t0 = time.time()
        assert str(sub.wait()).endswith("DONE")
        waited = time.time() - t0
    assert at_return is None, "the launch waited for its job"
    assert CheckpointStore(md).pointer() == 5
    steps = read_run_log(os.path.join(md, "run_log.jsonl"), "step")
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5] and steps[-1]["metrics"]
    assert waited > 0
    from pipelines.training import beam_train
    from pipelines.training.algorithm_options import build_algorithm
    from pipelines.runtime.beam_options import runner_config
    cfg = runner_config("PortableRunner", ["--job_endpoint=localhost:%d" % js.port,
                                           "--environment_type=EXTERNAL",
                                           "--environment_config=localhost:%d" % pool.port])
    launched_pieces = beam_train.default_pieces(cfg)
    files = dataset.resolve_shards(ds)
    vh = dataset.check_vocab_hash(files, None)
    got = CheckpointStore(md).latest()
    algo = build_algorithm("online-vb", 5, got.n_words, settings={"dtype": "float64",
                                                                  "alpha": 0.1, "eta": 0.01},
                           corpus_size=dataset.count_documents(files), seed=2,
                           vocab_hash=vh)
    res = beam_train.train(algo, files, str(tmp_path / "ref"), seed=2, minibatch=50,
                           passes=2, max_steps=5, beam_argv=["--runner=DirectRunner"],
                           pieces_per_minibatch=launched_pieces, progress=False)
    ref = res.algorithm.to_state()
    assert (got.step, got.docs_seen, got.rng) == (ref.step, ref.docs_seen, ref.rng)
    for k, v in got.arrays.items():
        assert v.tobytes() == ref.arrays[k].tobytes(), k
