"""Model directories on an object store, without network: the test-only scheme ``fakegs://``
(tests/fake_object_store.py: objects appear only when their upload completes, no directories,
no directory rename) stands for gs:// / s3://.

* the file layer (pipelines.runtime.object_store_files) under the topic state, the checkpoint store and
  the run log: unique checkpoint names committed by LATEST written last, never a rename;
* a half-written checkpoint (files present but LATEST not naming it, a truncated array, no
  state.json yet) is never loaded: the previous one is used with a warning naming it;
* ``ldabeam train --output fakegs://...`` in-process, stopped and ``--resume``d, ends with the
  state of an uninterrupted local run bit for bit; nothing is created locally;
* ``ldabeam topics / evaluate / report / export / infer --model fakegs://...``;
* the Beam trainer (DirectRunner in-process, and with two worker processes that see the fake
  scheme through a sitecustomize: the window's scratch states go to MODEL/.beam-scratch on the
  store, no statistics spill) and the Beam path of the stream samplers (o-LDA, with resume).
"""
import json
import logging
import os
import re

import numpy as np
import pytest

from helpers import fake_object_store as fos
from helpers.fake_object_store import objects_under as _objects
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import RunLog, read_run_log
from lda_core.storage.state import StateFormatError, TopicState
from pipelines import cli
from pipelines.ingest import dataset
from pipelines.runtime import paths as fspaths
from pipelines.runtime.object_store_files import ObjectStoreFiles

from helpers.uci import kos_dataset as make_dataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))




def make_state(step, K=4, V=50, seed=0):
    rng = np.random.default_rng(seed + step)
    return TopicState("online-vb", K, V, "ab" * 32,
                      {"lambda": rng.gamma(1.0, 1.0, (K, V)), "alpha": np.full(K, 0.1)},
                      {"alpha": 0.1, "eta": 0.01, "kappa": 0.7, "tau0": 64.0},
                      step=step, docs_seen=10 * step,
                      rng=np.random.default_rng(step).bit_generator.state)


# ------------------------------------------------------------------ the file layer

def test_checkpoints_on_an_object_store(store_root, tmp_path):
    md = store_root + "/model"
    store = CheckpointStore(md, keep_last=2)
    assert isinstance(store.files, ObjectStoreFiles) and store.unique_names
    assert store.latest() is None and store.list_checkpoints() == []
    paths = [store.publish(make_state(s)) for s in (1, 2, 3)]
    names = [p.rsplit("/", 1)[1] for p in paths]
    assert all(n.startswith("step-%09d-" % s) and len(n) == 14 + 1 + 12
               for n, s in zip(names, (1, 2, 3)))
    objs = _objects(md)
    assert "checkpoints/LATEST" in objs
    assert not any(o.startswith("checkpoints/" + names[0]) for o in objs)   # pruned
    assert [c.step for c in store.list_checkpoints()] == [2, 3]
    with ObjectStoreFiles().open_read(md + "/checkpoints/LATEST") as f:
        assert f.read() == (names[2] + "\n").encode()
    assert store.pointer() == 3 and store.pointer_path() == paths[2]
    assert store.latest() == make_state(3)
    assert store.load(2) == make_state(2) and store.path(3) == paths[2]
    # LATEST was written after every file of the checkpoint it names, state.json last
    ops = [u for op, _, u in fos.read_log(str(tmp_path / "ops.log")) if op == "create"]
    last = [u for u in ops if names[2] in u or u.endswith("/LATEST")]
    assert last[-2].endswith(names[2] + "/state.json") and last[-1].endswith("/LATEST")
    assert not any(".tmp" in u for u in ops)         # final names only: nothing to rename
    # the state files read back through the Beam FileSystems layer on their own
    assert TopicState.load(paths[2]) == make_state(3)


@pytest.mark.parametrize("damage", ["not_committed", "truncated", "no_state_json",
                                    "latest_truncated"])
def test_a_half_written_checkpoint_is_never_loaded(store_root, damage, caplog):
    md = store_root + "/model"
    store = CheckpointStore(md)
    store.publish(make_state(1))
    good = store.publish(make_state(2))
    fs = ObjectStoreFiles()
    if damage == "latest_truncated":
        # LATEST names step 2, whose lambda object is cut short: fall back to step 1
        bad = good
        lam = bad + "/lambda.npy"
        data = fs.read_bytes(lam)
        fs.write_atomic(lam, data[:len(data) // 2])
        expect, words = 1, ("skipping checkpoint", "truncated")
    else:
        # a checkpoint of step 3 being written (or of a run that died before LATEST)
        bad = md + "/checkpoints/step-000000003-0123456789ab"
        st = make_state(3)
        st.save(bad, files=fs)
        if damage == "truncated":
            data = fs.read_bytes(bad + "/lambda.npy")
            fs.write_atomic(bad + "/lambda.npy", data[:100])
        elif damage == "no_state_json":
            fs.remove_file(bad + "/state.json")
        expect, words = 2, ("newer than LATEST", "never committed")
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        got = store.latest()
    assert got == make_state(expect)
    name = bad.rsplit("/", 1)[1]
    assert name in caplog.text and all(w in caplog.text for w in words), caplog.text
    # an uncommitted attempt at a step is replaced when that step is published again
    if damage != "latest_truncated":
        again = store.publish(make_state(3))
        assert again != bad and not fs.isdir(bad)
        assert [c.step for c in store.list_checkpoints()] == [1, 2, 3]
        assert store.latest() == make_state(3)


def test_without_latest_only_a_complete_verified_state_is_used(store_root, caplog):
    md = store_root + "/model"
    fs = ObjectStoreFiles()
    make_state(4).save(md + "/checkpoints/step-000000004-aaaaaaaaaaaa", files=fs)
    half = md + "/checkpoints/step-000000005-bbbbbbbbbbbb"
    make_state(5).save(half, files=fs)
    fs.remove_file(half + "/state.json")            # the upload died before state.json
    store = CheckpointStore(md)
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        assert store.latest() == make_state(4)
    assert "no LATEST pointer" in caplog.text and "step-000000005-bbbbbbbbbbbb" in caplog.text
    fs.remove_tree(md + "/checkpoints/step-000000004-aaaaaaaaaaaa")
    with pytest.raises(StateFormatError, match="no valid checkpoint .*step-000000005-bbbb"):
        store.latest()


def test_local_store_reads_a_copied_object_store_model(store_root, tmp_path):
    """`gsutil cp -r gs://b/model .`: the suffixed names read the same locally."""
    md = store_root + "/model"
    CheckpointStore(md).publish(make_state(7))
    local = tmp_path / "copy"
    fs = ObjectStoreFiles()
    for rel in _objects(md):
        p = local / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(fs.read_bytes(md + "/" + rel))
    st = CheckpointStore(str(local)).latest()
    assert st == make_state(7)


def test_run_log_on_an_object_store(store_root):
    path = store_root + "/model/run_log.jsonl"
    fs = ObjectStoreFiles()
    log = RunLog(path)
    log.write({"event": "start", "x": 1})
    assert [r["event"] for r in read_run_log(path)] == ["start"]       # flushed at start
    log.write({"event": "step", "step": 1})
    assert len(read_run_log(path)) == 1                                # buffered
    log.write({"event": "step", "step": 2, "checkpoint": "c2"})        # flush point
    assert [r.get("step") for r in read_run_log(path)] == [None, 1, 2]
    log.write({"event": "step", "step": 3, "rho": np.float64(np.nan)})
    log.close()
    recs = read_run_log(path)
    assert [r.get("step") for r in recs] == [None, 1, 2, 3] and recs[-1]["rho"] is None
    # a resumed run keeps the earlier records (one object, rewritten whole)
    with RunLog(path) as log2:
        log2.write({"event": "start", "resumed": True})
        log2.write({"event": "end"})
    assert [r["event"] for r in read_run_log(path)] == ["start"] + ["step"] * 3 + \
        ["start", "end"]
    assert fs.read_bytes(path).decode().count("\n") == 6
    with pytest.raises(ValueError, match="closed"):
        log.write({"event": "step"})


def test_a_url_without_a_registered_layer_is_refused():
    from lda_core.storage.files import files_for, REGISTRY
    saved = dict(REGISTRY)
    REGISTRY.clear()
    try:
        with pytest.raises(ValueError, match="no file layer is registered"):
            files_for("gs://b/model")
        assert files_for("/tmp/x").__class__.__name__ == "LocalFiles"
    finally:
        REGISTRY.update(saved)


# ------------------------------------------------------------------ the CLI, in-process

@pytest.fixture(scope="module")
def ds(tmp_path_factory, kos_paths):
    return make_dataset(str(tmp_path_factory.mktemp("kosds") / "ds"), kos_paths,
                        n_train=300, n_held=60)


def ldabeam(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


ARGS = ["--algorithm", "online-vb", "--topics", 5, "--minibatch", 50, "--seed", 2, "--dtype", "float64", "--alpha", 0.1,
        "--eta", 0.01, "--no-progress", "--passes", 2, "--checkpoint-every", 2,
        "--eval-every", 4, "--keep-checkpoints", 0]


def _same_state(a: TopicState, b: TopicState):
    assert (a.step, a.docs_seen, a.algorithm, a.params, a.rng) == \
        (b.step, b.docs_seen, b.algorithm, b.params, b.rng)
    assert sorted(a.arrays) == sorted(b.arrays)
    for k in a.arrays:
        assert a.arrays[k].dtype == b.arrays[k].dtype
        assert a.arrays[k].tobytes() == b.arrays[k].tobytes(), k


@pytest.fixture(scope="module")
def local_reference(ds, tmp_path_factory):
    m = str(tmp_path_factory.mktemp("ref") / "model")
    assert cli.main([str(a) for a in ["train", "--shards", ds, "--output", m] + ARGS]) == 0
    return CheckpointStore(m).latest()


def test_cli_train_resume_and_read_commands(store_root, ds, local_reference, capsys, caplog,
                                            tmp_path):
    md = store_root + "/model"
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--max-steps", 5,
                           *ARGS)
    assert rc == 0, err
    store = CheckpointStore(md)
    assert store.pointer() == 5 and [c.step for c in store.list_checkpoints()] == [2, 4, 5]
    # a run that died while writing its next checkpoint: files of step 6 under a unique name,
    # one array cut short, LATEST still naming step 5
    fs = ObjectStoreFiles()
    half = md + "/checkpoints/step-000000006-deadbeef0000"
    nxt = store.latest()
    nxt.step = 6
    nxt.save(half, files=fs)
    big = max(nxt.arrays, key=lambda k: nxt.arrays[k].nbytes)
    fs.write_atomic(half + "/%s.npy" % big, fs.read_bytes(half + "/%s.npy" % big)[:64])
    # an existing model is not overwritten silently
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, *ARGS)
    assert rc == 2 and "already holds checkpoints" in err
    with caplog.at_level(logging.WARNING, logger="lda_core.storage.checkpoint"):
        rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--resume",
                               "--no-progress", "--checkpoint-every", 2, "--eval-every", 4)
    assert rc == 0, err
    assert "step-000000006-deadbeef0000" in caplog.text and "never committed" in caplog.text
    final = CheckpointStore(md).latest()
    _same_state(final, local_reference)
    assert not fs.isdir(half)          # the dead attempt at step 6 was replaced
    recs = read_run_log(md + "/run_log.jsonl")
    # one start and one end per run (each run's timing record comes before its end)
    assert [r["event"] for r in recs if r["event"] not in ("step", "timing")] == \
        ["start", "end"] * 2
    assert [r["event"] for r in recs if r["event"] in ("timing", "end")] == \
        ["timing", "end"] * 2
    assert [r["step"] for r in recs if r["event"] == "step"] == list(range(1, 6)) + \
        list(range(6, 13))
    assert fs.exists(md + "/vocab.tsv")

    # reading commands, straight from the object store
    rc, out, err = ldabeam(capsys, "topics", "--model", md, "--top", 4, "--format", "json")
    assert rc == 0, err
    assert len(json.loads(out)) == 5
    rc, out, err = ldabeam(capsys, "topics", "--model", md, "--label", 1, "politics")
    assert rc == 0 and fs.exists(md + "/topic_labels.json")
    rc, out, err = ldabeam(capsys, "evaluate", "--model", md, "--shards", ds,
                           "--train-shards", "none", "--seed", 2)
    assert rc == 0, err
    res = json.loads(out)
    assert res["step"] == 12 and res["model"] == md
    assert res["completion_ll_per_token"] == pytest.approx(
        [r for r in recs if r.get("metrics")][-1]["metrics"]["completion_ll_per_token"],
        rel=1e-12)
    phi = str(tmp_path / "phi.npy")
    rc, out, err = ldabeam(capsys, "export", "--model", md, "--output", phi)
    assert rc == 0, err
    assert np.load(phi).shape == (5, final.n_words)
    # one checkpoint directory as --model
    ck = CheckpointStore(md).pointer_path()
    rc, out, err = ldabeam(capsys, "topics", "--model", ck, "--top", 2)
    assert rc == 0 and "step 12" in out
    pytest.importorskip("matplotlib")
    html = store_root + "/reports/report.html"
    rc, out, err = ldabeam(capsys, "report", "--model", md, "--output", html, "--max-docs",
                           100)
    assert rc == 0, err
    page = fs.read_bytes(html).decode("utf-8")
    data = json.loads(page.split('id="report-data">', 1)[1].split("</script>", 1)[0])
    assert data["model"] == md and data["step"] == 12 and data["sample"]["documents"] > 0
    assert data["heldout"]["step"] == [4, 8, 12]                # from the run log
    assert [c["step"] for c in data["evolution"]["checkpoints"]][-1] == 12
    assert data["topics"][1]["label"] == "politics"


def test_cli_infer_reads_a_model_on_an_object_store(store_root, ds, capsys, tmp_path):
    md = store_root + "/model"
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--max-steps", 2,
                           *ARGS)
    assert rc == 0, err
    out_dir = store_root + "/theta"
    rc, out, err = ldabeam(capsys, "infer", "--model", md, "--shards", ds, "--split",
                           "heldout", "--output", out_dir)
    assert rc == 0, err
    summary = json.loads(ObjectStoreFiles().read_bytes(out_dir + "/_summary.json"))
    assert summary["documents"] == 60 and summary["checkpoint"].startswith(md)


# ------------------------------------------------------------------ the Beam trainers

def test_beam_trainer_in_process_with_a_model_on_an_object_store(store_root, ds, capsys,
                                                                 local_reference):
    from pipelines.runtime.beam_options import runner_config
    from pipelines.training.beam_run import default_scratch_root
    md = store_root + "/beam"
    assert default_scratch_root(md, runner_config("DirectRunner", [])) == md + "/.beam-scratch"
    beam = ["--runner", "DirectRunner", "--minibatches-per-window", 3]
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--max-steps", 5,
                           *(ARGS + beam))
    assert rc == 0, err
    assert CheckpointStore(md).pointer() == 5
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--resume",
                           "--no-progress", *beam)
    assert rc == 0, err
    _same_state(CheckpointStore(md).latest(), local_reference)
    steps = read_run_log(md + "/run_log.jsonl", "step")
    assert [r["step"] for r in steps] == list(range(1, 13))
    assert not any(".beam-scratch" in o for o in _objects(md))


@pytest.mark.serial
def test_beam_worker_processes_exchange_states_through_the_object_store(
        store_root, ds, capsys, tmp_path, monkeypatch):
    """Two DirectRunner worker processes (they import the fake scheme through a
    sitecustomize): the window's scratch states are objects under MODEL/.beam-scratch written
    and read through Beam's FileSystems, statistics are not spilled, the scratch is removed,
    and the result equals the in-process Beam trainer's (same pieces, same merge order)."""
    site = fos.worker_site_dir(str(tmp_path / "site"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [site, REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    md = store_root + "/mp"
    args = ["--shards", ds, "--topics", 5, "--minibatch", 100, "--seed", 2, "--dtype",
            "float64", "--algorithm", "online-vb", "--no-progress", "--eval-every", 0, "--heldout", "none",
            "--minibatches-per-window", 3, "--runner", "DirectRunner", "--pieces", 4]
    rc, out, err = ldabeam(capsys, "train", "--output", md, *args,
                           "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert rc == 0, err
    ops = fos.read_log(str(tmp_path / "ops.log"))
    me = os.getpid()
    scratch = [(op, pid, u) for op, pid, u in ops if "/.beam-scratch/" in u]
    assert any(op == "create" and u.endswith(".npz") for op, _, u in scratch)
    assert any(op == "open" and pid != me and u.endswith(".npz") for op, pid, u in scratch), \
        "no worker process read a scratch state from the object store"
    assert not any(re.search(r"stats-\d{9}-\d{4}\.bin$", u) for _, _, u in scratch), \
        "statistics were spilled"
    assert not any(".beam-scratch" in o for o in _objects(md))    # cleaned up
    got = CheckpointStore(md).latest()
    assert got.step == 3
    # the in-process Beam trainer with the same pieces (4 per minibatch) and
    # E-step threads (1 per worker on 2 cores) on a local model directory
    ref = str(tmp_path / "ref")
    from pipelines.training import beam_train
    from pipelines.training.algorithm_options import build_algorithm
    files = dataset.resolve_shards(ds)
    vh = dataset.check_vocab_hash(files, None)
    algo = build_algorithm("online-vb", 5, got.n_words, settings={"dtype": "float64"},
                           corpus_size=dataset.count_documents(files), seed=2,
                           vocab_hash=vh)
    res = beam_train.train(algo, files, ref, seed=2, minibatch=100, minibatches_per_window=3,
                           beam_argv=["--runner=DirectRunner"], pieces_per_minibatch=4,
                           n_threads=max(1, (os.cpu_count() or 1) // 2), progress=False)
    lam_ref = res.algorithm.to_state().arrays
    for k, v in got.arrays.items():
        assert np.array_equal(v, lam_ref[k]), k


def test_beam_stream_sampler_with_a_model_on_an_object_store(store_root, ds, capsys,
                                                             tmp_path):
    args = ["--shards", ds, "--topics", 5, "--minibatch", 50, "--seed", 2, "--algorithm",
            "o-lda", "--no-progress", "--eval-every", 0, "--checkpoint-every", 2,
            "--heldout", "none"]
    ref = str(tmp_path / "ref")
    assert ldabeam(capsys, "train", "--output", ref, *args)[0] == 0
    md = store_root + "/olda"
    beam = ["--runner", "DirectRunner"]
    rc, out, err = ldabeam(capsys, "train", "--output", md, "--max-steps", 3, *(args + beam))
    assert rc == 0, err
    assert CheckpointStore(md).pointer() == 3
    rc, out, err = ldabeam(capsys, "train", "--output", md, "--shards", ds, "--resume",
                           "--no-progress", "--checkpoint-every", 2, *beam)
    assert rc == 0, err
    assert [c.step for c in CheckpointStore(md).list_checkpoints()][-2:] == [5, 6]
    _same_state(CheckpointStore(md).latest(), CheckpointStore(ref).latest())
    assert not any(".beam-scratch" in o for o in _objects(md))


def test_streaming_job_starts_and_continues_a_model_on_an_object_store(store_root, ds):
    """The streaming job's model directory may be a URL too: its first checkpoint (step 0)
    and the fixed vocabulary are written to the store, and a second start continues it."""
    from pipelines.streaming import stream
    md = store_root + "/streamed"
    vocab = os.path.join(ds, dataset.VOCAB_FILE)
    algo, mv = stream.initial_checkpoint(md, topics=4, vocab_path=vocab, minibatch=50)
    assert mv == md + "/" + dataset.VOCAB_FILE and fspaths.exists(mv)
    assert CheckpointStore(md).pointer() == 0
    again, _ = stream.initial_checkpoint(md, topics=None, vocab_path=None)
    assert again.n_topics == 4 and again.step == 0
    _same_state(CheckpointStore(md).latest(), algo.to_state())
