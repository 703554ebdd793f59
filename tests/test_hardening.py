"""Hostile input, crashes and concurrent writers: word ids checked once in DocBatch, one writer
per model directory (lease), no model over its own input, torn run-log lines, damaged
state.json, leftovers in an output directory."""
import json
import os
import subprocess
import sys
import time

import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.files import files_for
from lda_core.docbatch import DocBatch
from lda_core.storage.lease import LEASE_FILE, LeaseHeld, ModelLease, check_output_location
from lda_core.storage.run_log import RUN_LOG_FILE, RunLog, read_run_log

from test_cli_train import COMMON, _one_line_error as one_line_error, ldabeam, make_dataset


@pytest.fixture(scope="module")
def ds(tmp_path_factory, kos_paths):
    return make_dataset(str(tmp_path_factory.mktemp("hardds") / "ds"), kos_paths,
                        n_train=300, n_held=60, n_shards=2)


TRAIN = ["--passes", 1, "--checkpoint-every", 2, "--eval-every", 0] + COMMON


# ----------------------------------------------------------------------- word ids in DocBatch
@pytest.mark.parametrize("rows, match", [
    ([([1, 2], [1, 1]), ([0, -3], [1, 1])], "negative word id -3"),
    ([([1, 2], [1, 1]), ([5, 4], [1, 1])], "not sorted and unique (4 follows 5)"),
    ([([1, 1], [1, 1])], "not sorted and unique (1 follows 1)"),
    ([([1, 2], [1, 0])], "has count 0"),
])
def test_docbatch_refuses_bad_word_ids_naming_the_document(rows, match):
    with pytest.raises(ValueError, match=r"document '\d'.*") as e:
        DocBatch.from_rows(rows)
    assert match in str(e.value)


def test_a_new_document_may_start_with_a_lower_id_and_empty_documents_pass():
    b = DocBatch.from_rows([([3, 7], [1, 2]), ([], []), ([0, 1], [1, 1]), ([2], [4])])
    assert b.n_docs == 4 and b.nnz == 5


def test_local_step_refuses_negative_and_too_large_ids():
    from lda_core.algorithms.online_vb import OnlineVB
    m = OnlineVB(4, 10, seed=1)
    with pytest.raises(ValueError, match="negative word id"):
        m.local_step(DocBatch.from_rows([([-3, 2], [1, 1])]))
    with pytest.raises(ValueError, match="document '0' has word id 10, outside"):
        m.local_step(DocBatch.from_rows([([2, 10], [1, 1])]))


def test_a_shard_with_a_negative_word_id_is_refused_naming_shard_and_document(tmp_path):
    import pyarrow as pa
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    t = pa.table({"doc_id": ["a", "b"], "title": [None, None],
                  "word_ids": pa.array([[0, 1], [2, -3]], pa.list_(pa.int32())),
                  "counts": pa.array([[1, 1], [1, 1]], pa.list_(pa.int32())),
                  "n_tokens": pa.array([2, 2], pa.int32())})
    p = str(tmp_path / "part-00000-of-00001.parquet")
    dataset.write_shard(p, t, "h" * 64)
    with pytest.raises(ValueError) as e:
        list(dataset.iter_shard_batches([p]))
    assert "'b'" in str(e.value) and "part-00000-of-00001.parquet" in str(e.value)


# ----------------------------------------------------------------------- output vs. input
def test_output_equal_to_containing_or_inside_the_input_is_refused(tmp_path, ds, capsys):
    for out in (ds, os.path.dirname(ds), os.path.join(ds, "train", "model")):
        one_line_error(capsys, ["train", "--shards", ds, "--output", out, "--overwrite"]
                       + TRAIN, "choose an --output outside every input")
    assert os.path.exists(os.path.join(ds, "vocab.tsv"))
    assert not os.path.exists(os.path.join(ds, LEASE_FILE))
    # through a symlink too
    link = str(tmp_path / "link")
    os.symlink(ds, link)
    one_line_error(capsys, ["train", "--shards", link, "--output", ds, "--overwrite"] + TRAIN,
                   "is the input")
    assert os.path.exists(os.path.join(ds, "vocab.tsv"))
    check_output_location(str(tmp_path / "model"), [ds, None])      # disjoint: fine
    with pytest.raises(ValueError, match="contains the input"):
        check_output_location("gs://b/m", ["gs://b/m/ds/train/*.parquet"])


def test_output_that_is_a_regular_file_is_one_clear_error(tmp_path, ds, capsys):
    f = tmp_path / "model"
    f.write_text("not a model")
    one_line_error(capsys, ["train", "--shards", ds, "--output", f] + TRAIN,
                   "is a regular file, not a directory")
    assert f.read_text() == "not a model"


# ----------------------------------------------------------------------- the lease
def test_a_second_writer_is_refused_naming_the_holder(tmp_path, ds, capsys):
    model = str(tmp_path / "m")
    with ModelLease(model, "test holder", heartbeat_seconds=0):
        one_line_error(capsys, ["train", "--shards", ds, "--output", model] + TRAIN,
                       "is being written by test holder")
        rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", model, *TRAIN)
        assert rc == 2 and "pid %d on host" % os.getpid() in err
        assert not CheckpointStore(model).list_checkpoints()
    # released: now the run goes through and leaves no lease behind
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", model, *TRAIN)
    assert rc == 0, err
    assert not os.path.exists(os.path.join(model, LEASE_FILE))


def test_two_leases_one_winner_and_release_only_removes_ones_own(tmp_path):
    model = str(tmp_path / "m")
    a = ModelLease(model, "a", heartbeat_seconds=0).acquire()
    with pytest.raises(LeaseHeld, match="being written by a by"):
        ModelLease(model, "b", heartbeat_seconds=0).acquire()
    a.release()
    b = ModelLease(model, "b", heartbeat_seconds=0).acquire()
    a.release()                                   # not held any more: a no-op
    assert json.load(open(os.path.join(model, LEASE_FILE)))["owner"].startswith("b by")
    b.release()
    assert not os.path.exists(os.path.join(model, LEASE_FILE))


def test_a_stale_lease_of_a_dead_process_is_taken_over(tmp_path, ds, capsys):
    model = str(tmp_path / "m")
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    os.makedirs(model)
    lease = ModelLease(model, "dead trainer", heartbeat_seconds=0)
    rec = dict(lease.record, pid=p.pid)
    with open(os.path.join(model, LEASE_FILE), "w") as f:
        json.dump(rec, f)
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", model, *TRAIN)
    assert rc == 0, err
    assert CheckpointStore(model).latest() is not None


def test_stale_by_heartbeat_on_another_host_and_torn_lease(tmp_path):
    model = str(tmp_path / "m")
    os.makedirs(model)
    path = os.path.join(model, LEASE_FILE)
    old = ModelLease(model, "far away", heartbeat_seconds=0)
    fresh = dict(old.record, host="another-host", heartbeat=time.time())
    with open(path, "w") as f:
        json.dump(fresh, f)
    with pytest.raises(LeaseHeld, match="another-host"):
        ModelLease(model, "me", heartbeat_seconds=0).acquire()
    with open(path, "w") as f:
        json.dump(dict(fresh, heartbeat=time.time() - 3600), f)
    ModelLease(model, "me", heartbeat_seconds=0, stale_seconds=60).acquire().release()
    # a torn lease file names no holder (a writer never shows one: it links a whole record
    # into place): taken over at once
    with open(path, "w") as f:
        f.write('{"own')
    ModelLease(model, "me", heartbeat_seconds=0, stale_seconds=60).acquire().release()


def test_heartbeat_refreshes_and_notices_a_takeover(tmp_path):
    model = str(tmp_path / "m")
    a = ModelLease(model, "a", heartbeat_seconds=0).acquire()
    t0 = a.record["heartbeat"]
    time.sleep(0.01)
    a.heartbeat()
    rec = json.load(open(os.path.join(model, LEASE_FILE)))
    assert rec["heartbeat"] > t0 and rec["token"] == a.record["token"]
    with open(os.path.join(model, LEASE_FILE), "w") as f:
        json.dump(dict(rec, token="other"), f)
    a.heartbeat()
    assert a.lost
    a.release()
    assert os.path.exists(os.path.join(model, LEASE_FILE))     # not ours: left alone


def test_lease_on_the_object_store(store_root):
    from pipelines.runtime import object_store_files
    model = "fakegs://bucket/models/m"
    files = files_for(model)
    a = ModelLease(model, "a", files=files, heartbeat_seconds=0, settle_seconds=0).acquire()
    with pytest.raises(LeaseHeld, match="being written by a by"):
        ModelLease(model, "b", files=files, heartbeat_seconds=0, settle_seconds=0).acquire()
    a.release()
    assert not files.exists(files.join(model, LEASE_FILE))
    b = ModelLease(model, "b", files=files, heartbeat_seconds=0, settle_seconds=0).acquire()
    b.release()


# ----------------------------------------------------------------------- the run log
def test_a_torn_run_log_line_is_repaired_on_resume_and_readers_keep_working(tmp_path, ds,
                                                                              capsys, caplog):
    model = str(tmp_path / "m")
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", model, "--max-steps", 2,
                           *TRAIN)
    assert rc == 0, err
    log = os.path.join(model, RUN_LOG_FILE)
    with open(log, "a") as f:
        f.write('{"event": "step", "step": 3, "docs')          # killed mid-record
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", model, "--resume",
                           "--no-progress")
    assert rc == 0, err
    damaged = []
    from lda_core.storage.run_log import iter_run_log
    recs = list(iter_run_log(log, damaged=damaged))
    assert damaged == [] and open(log, "rb").read().endswith(b"\n")
    assert [r["step"] for r in recs if r["event"] == "step"] == list(range(1, 6))
    # a damaged line in the middle (edited, invalid UTF-8, not an object): skipped and counted
    lines = open(log, "rb").read().split(b"\n")
    lines[1:1] = [b"\xff\xfe not json", b"[1, 2]", b"{" * 5000]
    open(log, "wb").write(b"\n".join(lines))
    damaged = []
    assert list(iter_run_log(log, damaged=damaged)) == recs
    assert damaged == [2, 3, 4]
    rc, out, err = ldabeam(capsys, "report", "--model", model, "--output",
                           tmp_path / "r.html", "--max-docs", 50)
    assert rc == 0, err
    assert "skipped 3 damaged line(s) (line 2, 3, 4)" in caplog.text
    from pipelines.runtime.model_dir import training_shards
    assert training_shards(model) == os.path.abspath(ds)
    rc, out, err = ldabeam(capsys, "export", "--model", model, "--output",
                           tmp_path / "export")                      # the training shards
    assert rc == 0, err


def test_repair_keeps_a_complete_last_record_and_the_object_store_log(tmp_path, store_root):
    from lda_core.storage.run_log import append_records, repair_tail
    p = str(tmp_path / "log.jsonl")
    open(p, "w").write('{"event": "start"}\n{"event": "end"}')        # only the newline lost
    repair_tail(p)
    assert open(p).read() == '{"event": "start"}\n{"event": "end"}\n'
    with RunLog(p) as log:
        log.write({"event": "step", "step": 1})
    assert [r["event"] for r in read_run_log(p)] == ["start", "end", "step"]
    url = "fakegs://bucket/m/run_log.jsonl"
    from pipelines.runtime import object_store_files
    files = files_for(url)
    files.write_atomic(url, b'{"event": "start"}\n{"event": "st')
    append_records(url, [{"event": "step", "step": 1}])
    assert [r["event"] for r in read_run_log(url)] == ["start", "step"]


# ----------------------------------------------------------------------- output leftovers
def test_leftovers_without_checkpoints_do_not_break_topics_or_infer(tmp_path, ds, kos_paths,
                                                                   capsys, caplog):
    other = make_dataset(str(tmp_path / "other"), kos_paths, n_train=60, n_held=10,
                         n_shards=1, vocab_edit=True)
    model = str(tmp_path / "m")
    os.makedirs(model)
    import shutil
    shutil.copy(os.path.join(other, "vocab.tsv"), os.path.join(model, "vocab.tsv"))
    with open(os.path.join(model, RUN_LOG_FILE), "w") as f:
        f.write(json.dumps({"event": "start", "shards": other}) + "\n")
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", model, *TRAIN)
    assert rc == 0, err
    assert "leftover of another vocabulary" in caplog.text
    rc, out, err = ldabeam(capsys, "topics", "--model", model, "--top", 3)
    assert rc == 0, err
    rc, out, err = ldabeam(capsys, "infer", "--model", model, "--shards", ds, "--output",
                           tmp_path / "theta", "--batch-size", 64)
    assert rc == 0, err
    starts = read_run_log(os.path.join(model, RUN_LOG_FILE), "start")
    assert len(starts) == 1 and starts[0]["run"]["shards"] == os.path.abspath(ds)


# ----------------------------------------------------------------------- damaged state.json
def _damage(path, how):
    p = os.path.join(path, "state.json")
    meta = json.load(open(p))
    if how == "nested":
        text = json.dumps(meta)[:-1] + ', "x": ' + "[" * 100000 + "]" * 100000 + "}"
    elif how == "huge-sizes":
        meta["n_topics"] = 10 ** 9
        text = json.dumps(meta)
    elif how == "missing-param":
        meta["params"].pop("kappa")
        text = json.dumps(meta)
    else:
        meta["params"]["tau0"] = "sixty-four"
        text = json.dumps(meta)
    open(p, "w").write(text)


@pytest.mark.parametrize("how", ["nested", "huge-sizes", "missing-param", "wrong-type"])
def test_damaged_state_json_falls_back_to_the_previous_checkpoint(tmp_path, ds, capsys, caplog,
                                                                  how):
    model = str(tmp_path / "m")
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", model, *TRAIN)
    assert rc == 0, err
    store = CheckpointStore(model, check_algorithm=True)
    newest = store.list_checkpoints()[-1]
    _damage(newest.path, how)
    rc, out, err = ldabeam(capsys, "topics", "--model", model, "--top", 3)
    assert rc == 0, err
    assert "damaged checkpoint, using the previous one" in caplog.text
    assert newest.path in caplog.text and "Traceback" not in err
    assert store.latest().step < newest.step


def test_stream_takes_the_lease_too(tmp_path, capsys):
    model = str(tmp_path / "m")
    with ModelLease(model, "a trainer", heartbeat_seconds=0):
        one_line_error(capsys, ["stream", "--model", model, "--input-glob",
                                str(tmp_path / "in" / "*.json")], "is being written by a trainer")


def test_sizes_without_an_array_behind_them_are_checked_before_allocation(tmp_path):
    from lda_core.algorithms.gibbs import CollapsedGibbs
    from lda_core.storage.state import StateFormatError, read_state_json
    g = CollapsedGibbs(4, 50, seed=1)
    g.process(DocBatch.from_rows([([1, 3, 7], [1, 2, 1]), ([0, 49], [2, 2])]))
    path = str(tmp_path / "g")
    g.to_state().save(path)
    meta = json.load(open(os.path.join(path, "state.json")))
    meta.update(n_topics=100000, n_words=100000)     # V x K + D x K counts to allocate
    json.dump(meta, open(os.path.join(path, "state.json"), "w"))
    with pytest.raises(StateFormatError, match="ask for 10000200000 values but the arrays "
                                               "hold only"):
        read_state_json(path)


# ----------------------------------------------------------------------- overlapping paths
# Every writing command refuses an output that is, contains or lies inside one of its inputs,
# or that holds another kind of output, with one line and before touching anything; a writer
# of a directory held by another gets one line naming the holder. Counted for the report.
OVERLAP = {"cases": 0, "refused": 0, "files_lost": 0, "tracebacks": 0}


@pytest.fixture(scope="module")
def hmodel(tmp_path_factory, ds):
    from pipelines import cli
    m = str(tmp_path_factory.mktemp("hmodel") / "m")
    assert cli.main(["train", "--shards", ds, "--output", m] + [str(a) for a in TRAIN]) == 0
    return m


def _tree(folder):
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


def _refused(capsys, argv, match, watch):
    """One case: ``argv`` ends in one line naming ``match`` (exit 2); nothing under the
    ``watch`` folders changed."""
    before = {w: _tree(w) for w in watch}
    OVERLAP["cases"] += 1
    rc, out, err = ldabeam(capsys, *argv)
    OVERLAP["tracebacks"] += "Traceback" in err
    lines = [l for l in err.strip().split("\n") if l and "WARNING" not in l]
    ok = rc == 2 and len(lines) == 1 and match in lines[0]
    OVERLAP["refused"] += ok
    lost = sum(_tree(w) != b for w, b in before.items())
    OVERLAP["files_lost"] += lost
    assert ok, (argv, rc, err)
    assert lost == 0, argv


def test_overlapping_paths_and_held_outputs_of_every_writing_command(tmp_path, ds, hmodel,
                                                                     kos_paths, capsys,
                                                                     monkeypatch):
    from test_output_rules import reuters_texts
    texts = str(tmp_path / "texts")
    reuters_texts(texts, 5)
    infer_out = str(tmp_path / "theta")
    assert ldabeam(capsys, "infer", "--model", hmodel, "--shards", ds, "--output", infer_out,
                   "--split", "heldout")[0] == 0
    other = make_dataset(str(tmp_path / "other"), kos_paths, n_train=30, n_held=5, n_shards=1)
    link = str(tmp_path / "texts-link")
    os.symlink(texts, link)
    monkeypatch.chdir(str(tmp_path))
    vec = ["--format", "text", "--no-below", 1]
    train = [str(a) for a in TRAIN]
    watch = [texts, ds, hmodel, infer_out, other]
    inside = "lies inside the input"
    cases = [
        (["vectorize", "--input", texts, "--output", texts] + vec, "is the input"),
        (["vectorize", "--input", texts, "--output", texts + "/ds"] + vec, inside),
        (["vectorize", "--input", texts + "/*.txt", "--output", ".", "--overwrite"] + vec,
         "contains the input"),
        (["vectorize", "--input", link, "--output", "texts", "--overwrite"] + vec,
         "is the input"),
        (["vectorize", "--input", texts, "--vocab", os.path.join(other, "vocab.tsv"),
          "--output", other, "--overwrite"] + vec, "contains the input"),
        (["vectorize", "--input", texts, "--output", hmodel] + vec, "holds a model"),
        (["vectorize", "--input", texts, "--output", infer_out, "--overwrite"] + vec,
         "holds inference results"),
        (["synth", "--output", hmodel, "--docs", 20, "--overwrite"], "holds a model"),
        (["synth", "--output", other, "--docs", 20, "--overwrite"], "did not write"),
        (["infer", "--model", hmodel, "--shards", ds, "--output", hmodel], "is the input"),
        (["infer", "--model", hmodel, "--shards", ds, "--output", hmodel + "/theta"], inside),
        (["infer", "--model", hmodel, "--shards", ds, "--output", ds, "--overwrite"],
         "is the input"),
        (["infer", "--model", hmodel, "--shards", ds + "/train/*.parquet", "--output",
          ds + "/train", "--overwrite"], "is the input"),
        (["infer", "--model", hmodel, "--input", texts + "/r000.txt", "--format", "text",
          "--output", texts, "--overwrite"], "contains the input"),
        (["infer", "--model", hmodel, "--shards", ds, "--output", other, "--overwrite"],
         "holds a dataset"),
        (["train", "--shards", ds, "--output", ds + "/heldout", "--overwrite"] + train, inside),
        (["train", "--shards", ds, "--output", other, "--overwrite"] + train,
         "holds a dataset, not a model"),
        (["train", "--shards", ds, "--output", infer_out, "--overwrite"] + train,
         "holds inference results"),
        (["export", "--model", hmodel, "--output", hmodel + "/phi.npy"], inside),
        (["export", "--model", hmodel, "--format", "pyldavis", "--shards", ds, "--output",
          ds], "is the input"),
        (["report", "--model", hmodel, "--output", hmodel + "/report.html"], inside),
        (["stream", "--model", texts, "--input-glob", texts + "/*.json"], "is the input"),
    ]
    for argv, match in cases:
        _refused(capsys, argv, match, watch)
    # a held directory: every writing command gets one line naming the holder
    held = str(tmp_path / "held")
    with ModelLease(held, "the first writer", heartbeat_seconds=0):
        for argv in (["vectorize", "--input", texts, "--output", held] + vec,
                     ["synth", "--output", held, "--docs", 20],
                     ["infer", "--model", hmodel, "--shards", ds, "--output", held],
                     ["train", "--shards", ds, "--output", held] + train,
                     ["stream", "--model", held, "--input-glob", texts + "/*.json"]):
            _refused(capsys, argv, "is being written by the first writer", watch + [held])
    print("overlapping-path and held-output cases: %(cases)d, refused with one line "
          "%(refused)d, files lost %(files_lost)d, tracebacks %(tracebacks)d" % OVERLAP)
    assert OVERLAP["cases"] >= 20 and OVERLAP["refused"] == OVERLAP["cases"]


@pytest.mark.slow
@pytest.mark.parametrize("cmd", ["vectorize", "synth", "infer"])
def test_two_concurrent_writers_of_one_output(tmp_path, ds, hmodel, cmd):
    """Two processes started together on one output: one publishes, the other ends with one
    line (the lease is held, or the output is already published) and no traceback; the
    published output is complete."""
    from lda_core.storage import output_paths
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    from pipelines.infer import read_theta
    from test_output_rules import reuters_texts
    out = str(tmp_path / "out")
    texts = reuters_texts(str(tmp_path / "texts"), 20)
    argv = {"vectorize": ["vectorize", "--input"] + texts + ["--format", "text", "--output",
                                                              out, "--no-below", 1],
            "synth": ["synth", "--output", out, "--docs", 400, "--words", 200, "--topics", 4,
                      "--docs-per-shard", 100],
            "infer": ["infer", "--model", hmodel, "--shards", ds, "--output", out,
                      "--batch-size", 20]}[cmd]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__)))
    procs = [subprocess.Popen([sys.executable, "-m", "pipelines.cli"] + [str(a) for a in argv],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    res = [(p.wait(timeout=900), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    OVERLAP["cases"] += 1
    codes = sorted(rc for rc, _ in res)
    assert codes == [0, 2], res
    err = [e for rc, e in res if rc == 2][0]
    lines = [l for l in err.strip().split("\n") if l and "WARNING" not in l
             and " INFO " not in l]
    assert len(lines) == 1 and ("is being written by" in lines[0]
                                or "already holds" in lines[0]), err
    assert all("Traceback" not in e for _, e in res)
    OVERLAP["refused"] += 1
    if cmd == "infer":
        assert read_theta(out).num_rows == 300
    else:
        assert manifest.verify(out) is not None
    assert output_paths.kind_of(out) == ("inference" if cmd == "infer" else "dataset")
