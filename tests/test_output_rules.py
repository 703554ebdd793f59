"""The output rules (lda_core.storage.output_paths), one test per defect of issue 22 they fix:
an output never is, contains or lies inside an input; ``--overwrite`` removes only what the
output's own manifest or summary lists; every directory writer holds the lease and publishes
its listing last; readers accept only published outputs. Plus the lesser items: leftovers of
killed checkpoint publishes, a symlinked run log, an empty lease file."""
import json
import os
import uuid

import pytest

from lda_core.errors import DataIntegrityError, OutputError
from lda_core.storage import output_paths
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.lease import LEASE_FILE, ModelLease
from lda_core.storage.run_log import RUN_LOG_FILE, RunLog

from helpers.cli import ldabeam, one_line_error
from helpers.reuters import reuters_texts
from helpers.uci import kos_dataset as make_dataset

TRAIN = ["--algorithm", "online-vb", "--topics", 4, "--minibatch", 50, "--seed", 2,
         "--passes", 1, "--checkpoint-every", 2, "--eval-every", 0, "--heldout", "none",
         "--no-progress"]


def snapshot(folder):
    """{relative path: bytes} of every file under ``folder``."""
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


VEC = ["--format", "text", "--no-below", 1, "--no-above", 1.0]


@pytest.fixture(scope="module")
def kos_ds(tmp_path_factory, kos_paths):
    return make_dataset(str(tmp_path_factory.mktemp("rules") / "ds"), kos_paths, n_train=150,
                        n_held=30, n_shards=2)


@pytest.fixture(scope="module")
def model(tmp_path_factory, kos_ds):
    from pipelines import cli
    m = str(tmp_path_factory.mktemp("rulesm") / "m")
    assert cli.main(["train", "--shards", kos_ds, "--output", m] + [str(a) for a in TRAIN]) == 0
    return m


# ----------------------------------------------------------------------- the rule itself
def test_check_disjoint_resolves_relative_paths_symlinks_globs_and_urls(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    os.symlink(str(data), str(tmp_path / "alias"))
    monkeypatch.chdir(tmp_path)
    for out, inp, how in [("data", str(data), "is the input"),
                          ("alias/x", "data", "lies inside the input"),
                          (".", "alias/*.txt", "contains the input"),
                          ("./data/../data", "data/train/*.parquet", "contains the input"),
                          ("gs://Bucket//m/", "gs://bucket/m/ds/*.parquet", "contains"),
                          ("s3://b/ds/out", "S3://b/ds", "lies inside")]:
        with pytest.raises(OutputError, match=how):
            output_paths.check_disjoint(out, [None, [inp]])
    for out, inp in [("data/ds", "data/*"), ("data/ds/x", "data/d?"), ("data/ds", "data/**/*.txt"),
                     ("data/ds", "data/*/*.txt")]:
        with pytest.raises(OutputError, match="lies inside the input"):
            output_paths.check_disjoint(out, [inp])
    output_paths.check_disjoint("data2", ["data", "gs://b/data2"])      # disjoint: fine
    output_paths.check_disjoint("data/ds", ["data/*.txt", "data/x?"])    # the glob misses it


# ----------------------------------------------------------------------- defect 1
def test_d1_vectorize_overwrite_never_deletes_its_input(tmp_path, capsys):
    corpus = str(tmp_path / "corpus")
    reuters_texts(os.path.join(corpus, "train"), 4)
    before = snapshot(corpus)
    one_line_error(capsys, ["vectorize", "--input", os.path.join(corpus, "train"), "--output",
                            corpus, "--overwrite"] + VEC, "contains the input")
    assert snapshot(corpus) == before


def test_d1_synth_overwrite_never_deletes_files_it_did_not_write(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "train").mkdir(parents=True)
    (out / "train" / "notes.txt").write_text("mine")
    one_line_error(capsys, ["synth", "--output", out, "--docs", 50, "--words", 40,
                            "--topics", 3, "--overwrite"], "did not write (train/notes.txt)")
    assert (out / "train" / "notes.txt").read_text() == "mine"


def test_overwrite_removes_exactly_what_the_manifest_lists(tmp_path, capsys):
    ds = str(tmp_path / "ds")
    rc, out, err = ldabeam(capsys, "synth", "--output", ds, "--docs", 60, "--words", 40,
                           "--topics", 3, "--heldout-docs", 10, "--docs-per-shard", 20)
    assert rc == 0, err
    one_line_error(capsys, ["synth", "--output", ds, "--docs", 30, "--words", 40,
                            "--topics", 3], "already holds a dataset")
    rc, out, err = ldabeam(capsys, "synth", "--output", ds, "--docs", 30, "--words", 40,
                           "--topics", 3, "--overwrite")
    assert rc == 0, err
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    assert manifest.verify(ds)["documents"] == 30
    assert sorted(os.listdir(os.path.join(ds, "train"))) == ["part-00000-of-00001.parquet"]
    # a file that no listing names makes --overwrite refuse, and nothing is removed
    open(os.path.join(ds, "train", "extra.parquet"), "wb").write(b"x")
    before = snapshot(ds)
    one_line_error(capsys, ["synth", "--output", ds, "--docs", 30, "--words", 40,
                            "--topics", 3, "--overwrite"], "did not write (train/extra.parquet)")
    assert snapshot(ds) == before


# ----------------------------------------------------------------------- defect 2
def test_d2_infer_overwrite_never_deletes_its_input_or_foreign_files(tmp_path, model, kos_ds,
                                                                      capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    docs = work / "mydocs.csv"
    docs.write_text("id,text\n" + "".join("d%d,%s\n" % (i, " ".join(open(p).read().split()[:60]))
                                          for i, p in enumerate(reuters_texts(
                                              str(tmp_path / "r"), 3))))
    before = docs.read_bytes()
    monkeypatch.chdir(str(work))
    one_line_error(capsys, ["infer", "--model", model, "--input", "mydocs.csv", "--format",
                            "csv", "--output", ".", "--overwrite"], "contains the input")
    assert docs.read_bytes() == before
    shards = snapshot(kos_ds)
    one_line_error(capsys, ["infer", "--model", model, "--shards", kos_ds, "--output",
                            os.path.join(kos_ds, "train"), "--overwrite"], "lies inside the input")
    assert snapshot(kos_ds) == shards
    # a results folder holding a file the summary does not list: refused, file kept
    out = str(tmp_path / "theta")
    rc, _, err = ldabeam(capsys, "infer", "--model", model, "--shards", kos_ds, "--output", out)
    assert rc == 0, err
    open(os.path.join(out, "notes.csv"), "w").write("mine")
    one_line_error(capsys, ["infer", "--model", model, "--shards", kos_ds, "--output", out,
                            "--overwrite"], "did not write (notes.csv)")
    assert open(os.path.join(out, "notes.csv")).read() == "mine"
    os.unlink(os.path.join(out, "notes.csv"))
    rc, _, err = ldabeam(capsys, "infer", "--model", model, "--shards", kos_ds, "--output", out,
                         "--overwrite", "--split", "heldout")
    assert rc == 0, err
    from pipelines.infer import read_theta
    assert read_theta(out).num_rows == 30


# ----------------------------------------------------------------------- defect 3
def test_d3_train_never_writes_into_another_dataset(tmp_path, kos_ds, kos_paths, capsys):
    other = make_dataset(str(tmp_path / "other"), kos_paths, n_train=40, n_held=5, n_shards=1,
                         vocab_edit=True)
    before = snapshot(other)
    one_line_error(capsys, ["train", "--shards", kos_ds, "--output", other] + TRAIN,
                   "holds a dataset, not a model")
    assert snapshot(other) == before


# ----------------------------------------------------------------------- defect 7
@pytest.mark.parametrize("cmd", ["vectorize", "synth", "infer"])
def test_d7_a_second_writer_of_a_directory_gets_one_line(tmp_path, model, kos_ds, capsys, cmd):
    out = str(tmp_path / "out")
    texts = reuters_texts(str(tmp_path / "in"), 3)
    argv = {"vectorize": ["vectorize", "--input"] + texts + ["--output", out] + VEC,
            "synth": ["synth", "--output", out, "--docs", 20, "--words", 30, "--topics", 2],
            "infer": ["infer", "--model", model, "--shards", kos_ds, "--output", out]}[cmd]
    with ModelLease(out, "ldabeam %s (the first writer)" % cmd, heartbeat_seconds=0):
        one_line_error(capsys, argv, "is being written by ldabeam %s (the first writer)" % cmd)
        assert sorted(os.listdir(out)) == [LEASE_FILE]
    rc, _, err = ldabeam(capsys, *argv)
    assert rc == 0, err
    assert not os.path.exists(os.path.join(out, LEASE_FILE))


# ----------------------------------------------------------------------- defect 10
def test_d10_vectorize_output_equal_to_or_inside_its_input_folder(tmp_path, capsys):
    corpus = str(tmp_path / "corpus")
    reuters_texts(corpus, 4)
    before = snapshot(corpus)
    for out in (corpus, os.path.join(corpus, "ds")):
        one_line_error(capsys, ["vectorize", "--input", corpus, "--output", out] + VEC,
                       "the input")
    assert snapshot(corpus) == before


# ----------------------------------------------------------------------- readers
def test_read_theta_refuses_an_unpublished_output_and_pyarrow_reads_a_finished_one(
        tmp_path, model, kos_ds, capsys):
    import pyarrow.parquet as pq
    from pipelines.infer import read_theta
    out = str(tmp_path / "theta")
    rc, _, err = ldabeam(capsys, "infer", "--model", model, "--shards", kos_ds, "--output", out,
                         "--batch-size", 40)
    assert rc == 0, err
    assert pq.read_table(out).num_rows == read_theta(out).num_rows == 150
    # the state of a killed infer: parts written, no summary
    os.unlink(os.path.join(out, output_paths.SUMMARY_FILE))
    with pytest.raises(DataIntegrityError, match="no published inference results"):
        read_theta(out)
    one_line_error(capsys, ["infer", "--model", model, "--shards", kos_ds, "--output", out],
                   "already holds unpublished inference results")
    rc, _, err = ldabeam(capsys, "infer", "--model", model, "--shards", kos_ds, "--output",
                         out, "--overwrite")
    assert rc == 0, err
    assert read_theta(out).num_rows == 150


def test_the_legacy_summary_name_is_still_read(tmp_path, model, kos_ds, capsys):
    from pipelines.infer import read_summary, read_theta
    out = str(tmp_path / "theta")
    assert ldabeam(capsys, "infer", "--model", model, "--shards", kos_ds, "--output", out)[0] == 0
    os.rename(os.path.join(out, output_paths.SUMMARY_FILE), os.path.join(out, "summary.json"))
    assert read_summary(out)["documents"] == read_theta(out).num_rows == 150
    rc, _, err = ldabeam(capsys, "infer", "--model", model, "--shards", kos_ds, "--output", out,
                         "--overwrite")
    assert rc == 0, err
    assert not os.path.exists(os.path.join(out, "summary.json"))


# ----------------------------------------------------------------------- lesser items
def test_the_next_writer_removes_leftovers_of_killed_publishes(tmp_path, kos_ds, capsys):
    m = str(tmp_path / "m")
    assert ldabeam(capsys, "train", "--shards", kos_ds, "--output", m, "--max-steps", 2,
                   *TRAIN)[0] == 0
    root = os.path.join(m, "checkpoints")
    left = [".step-000000003.tmp-%s" % uuid.uuid4().hex, ".step-000000002.old-%s"
            % uuid.uuid4().hex, ".LATEST.tmp-%s" % uuid.uuid4().hex]
    os.makedirs(os.path.join(root, left[0]))
    open(os.path.join(root, left[0], "lambda.npy"), "wb").write(b"\x93NUMPY half")
    os.makedirs(os.path.join(root, left[1]))
    open(os.path.join(root, left[2]), "w").write("step-0000")
    rc, _, err = ldabeam(capsys, "train", "--shards", kos_ds, "--output", m, "--resume",
                         "--no-progress")
    assert rc == 0, err
    assert not [n for n in os.listdir(root) if n.startswith(".")]
    assert CheckpointStore(m).pointer() == 3


def test_a_symlinked_run_log_is_refused_and_its_target_untouched(tmp_path, kos_ds, capsys):
    m = tmp_path / "m"
    assert ldabeam(capsys, "train", "--shards", kos_ds, "--output", m, "--max-steps", 1,
                   *TRAIN)[0] == 0
    target = tmp_path / "elsewhere.jsonl"
    os.rename(str(m / RUN_LOG_FILE), str(target))
    with open(str(target), "a") as f:
        f.write('{"half')                                   # what a repair would cut
    before = target.read_bytes()
    os.symlink(str(target), str(m / RUN_LOG_FILE))
    with pytest.raises(OutputError, match="symbolic link"):
        RunLog(str(m / RUN_LOG_FILE))
    one_line_error(capsys, ["train", "--shards", kos_ds, "--output", m, "--resume",
                            "--no-progress"], "is a symbolic link")
    assert target.read_bytes() == before


def test_an_empty_lease_file_is_taken_over_at_once(tmp_path, caplog):
    m = tmp_path / "m"
    m.mkdir()
    (m / LEASE_FILE).write_text("")
    lease = ModelLease(str(m), "me", heartbeat_seconds=0).acquire()
    assert json.loads((m / LEASE_FILE).read_text())["token"] == lease.record["token"]
    assert "is empty or not JSON" in caplog.text
    lease.release()
    assert not (m / LEASE_FILE).exists()
