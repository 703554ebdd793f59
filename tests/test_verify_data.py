"""Verification wherever data is read (issue 22 defects 5, 6, 8 and the manifest rules): every
reader of shards checks them against the manifest of their dataset, however they are named; a
checkpoint records its dataset and --resume compares it; the model records the dataset's
tokenizer settings. All on the bundled Wikipedia sample, vectorized by the CLI."""
import hashlib
import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lda_core.errors import DataIntegrityError, InputError
from pipelines import cli
from pipelines.ingest import dataset
from pipelines.ingest import manifest as dataset_manifest
from lda_core.storage.vocab_file import Vocabulary

from helpers import warm

SHARD = os.path.join("train", "part-00000-of-00001.parquet")
TRAIN = ["--topics", "4", "--passes", "1", "--heldout", "none", "--no-progress"]


def ldabeam(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def ds(tmp_path_factory, wiki_sample):
    out = str(tmp_path_factory.mktemp("wiki") / "ds")
    assert cli.main(["vectorize", "--input", wiki_sample, "--output", out,
                     "--holdout-fraction", "0.1", "--no-below", "2"]) == 0
    return out


@pytest.fixture(scope="module")
def model(ds, tmp_path_factory):
    m = str(tmp_path_factory.mktemp("model") / "m")
    assert cli.main(["train", "--shards", ds, "--output", m] + TRAIN) == 0
    return m


def copy_of(ds, dst):
    shutil.copytree(ds, str(dst))
    return str(dst)


def rewrite_shard(path, edit):
    """Rewrite a shard as valid Parquet with the same vocabulary hash after ``edit`` (a
    function of the word_ids and counts lists, changed in place)."""
    t = pq.read_table(path)
    words, counts = t.column("word_ids").to_pylist(), t.column("counts").to_pylist()
    edit(words, counts)
    cols = {n: t.column(n).to_pylist() for n in dataset.SHARD_SCHEMA.names}
    cols["word_ids"], cols["counts"] = words, counts
    table = pa.Table.from_pydict(cols, schema=dataset.SHARD_SCHEMA)
    data = dataset.table_bytes(table, dataset.shard_vocab_hash(path))
    with open(path, "wb") as f:
        f.write(data)


def plus_one(words, counts):
    counts[0][0] += 1


def relist(d):
    """Record the shards now in dataset ``d`` in its manifest (names, rows, sha256), as
    vectorize would have: a consistent dataset of other documents."""
    man = dataset_manifest.read_manifest(d)
    for split in ("train", "heldout"):
        for e in man["splits"][split]["shards"]:
            path = os.path.join(d, e["file"])
            e["documents"] = pq.ParquetFile(path).metadata.num_rows
            with open(path, "rb") as f:
                e["sha256"] = hashlib.sha256(f.read()).hexdigest()
    dataset_manifest.write_manifest(d, man)


# ----------------------------------------------------------------------------- defect 5

def test_a_changed_shard_is_refused_however_it_is_named(ds, model, tmp_path, capsys):
    """One count + 1, rewritten as valid Parquet: refused through the dataset root, the split
    folder, a glob and the file itself, by train, evaluate, infer, report and export."""
    bad = copy_of(ds, tmp_path / "bad")
    rewrite_shard(os.path.join(bad, SHARD), plus_one)
    for i, shards in enumerate([bad, os.path.join(bad, "train"),
                                os.path.join(bad, "train", "*.parquet"),
                                os.path.join(bad, SHARD)]):
        out = str(tmp_path / ("m%d" % i))
        rc, _, err = ldabeam(capsys, "train", "--shards", shards, "--output", out, *TRAIN)
        assert rc == 2 and "sha256 mismatch" in err and "train/part-00000" in err, err
        assert not os.path.exists(os.path.join(out, "checkpoints"))
    glob = os.path.join(bad, "train", "*.parquet")
    for argv in (["evaluate", "--model", model, "--shards", glob],
                 ["evaluate", "--model", model, "--shards", bad],      # coherence: train split
                 ["infer", "--model", model, "--shards", glob, "--output", tmp_path / "inf"],
                 ["report", "--model", model, "--shards", glob, "--output",
                  tmp_path / "r.html"],
                 ["export", "--model", model, "--format", "pyldavis", "--shards", glob,
                  "--output", tmp_path / "vis"]):
        rc, _, err = ldabeam(capsys, *argv)
        assert rc == 2 and "sha256 mismatch" in err, (argv[0], err)
    assert not os.path.exists(str(tmp_path / "r.html"))


def test_shards_without_a_manifest_need_unverified(ds, tmp_path, capsys):
    """A killed vectorize leaves shards and no manifest: refused, the error names
    --unverified; with it training runs and the model records the tokenizer as unknown."""
    killed = copy_of(ds, tmp_path / "killed")
    os.unlink(os.path.join(killed, dataset.MANIFEST_FILE))
    for shards in (killed, os.path.join(killed, "train"),
                   os.path.join(killed, "train", "*.parquet")):
        rc, _, err = ldabeam(capsys, "train", "--shards", shards, "--output",
                             tmp_path / "m", *TRAIN)
        assert rc == 2 and "--unverified" in err and "manifest.json" in err, err
        assert len(err.strip().splitlines()) == 1
    m = str(tmp_path / "m")
    rc, _, err = ldabeam(capsys, "train", "--shards", os.path.join(killed, "train"),
                         "--output", m, "--unverified", *TRAIN)
    assert rc == 0, err
    with open(os.path.join(m, dataset_manifest.TOKENIZER_FILE)) as f:
        assert json.load(f)["settings"] == dataset_manifest.TOKENIZER_UNKNOWN
    assert dataset_manifest.read_tokenizer(m) == dataset_manifest.TOKENIZER_UNKNOWN


def test_a_shard_not_listed_or_missing_is_refused(ds, tmp_path, capsys):
    extra = copy_of(ds, tmp_path / "extra")
    shutil.copyfile(os.path.join(extra, SHARD),
                    os.path.join(extra, "train", "part-00007-of-00009.parquet"))
    rc, _, err = ldabeam(capsys, "train", "--shards", os.path.join(extra, "train", "*.parquet"),
                         "--output", tmp_path / "m", *TRAIN)
    assert rc == 2 and "train/part-00007-of-00009.parquet is not listed" in err, err
    # a glob that leaves the stray shard out reads the listed one
    assert len(dataset_manifest.open_shards(os.path.join(extra, "train", "part-00000*")).files) == 1
    gone = copy_of(ds, tmp_path / "gone")
    os.unlink(os.path.join(gone, "heldout", "part-00000-of-00001.parquet"))
    with pytest.raises(DataIntegrityError, match="heldout/part-00000-of-00001.parquet listed "
                                                 "in manifest.json is missing"):
        dataset_manifest.verify(gone)
    shutil.copyfile(os.path.join(gone, SHARD),
                    os.path.join(gone, "heldout", "part-00000-of-00002.parquet"))
    # the held-out split training evaluates on is verified as well
    rc, _, err = ldabeam(capsys, "train", "--shards", gone, "--output", tmp_path / "m2",
                         "--topics", 4, "--passes", 1, "--no-progress")
    assert rc == 2 and "heldout/part-00000-of-00002.parquet is not listed" in err, err


# ----------------------------------------------------------------------------- manifest rules

@pytest.mark.parametrize("entry", ["../outside.parquet", "train/../../outside.parquet",
                                   "ABSOLUTE", "gs://bucket/x.parquet"])
def test_manifest_entries_are_confined_to_the_dataset(ds, tmp_path, capsys, entry):
    """A listed shard outside the dataset (here a copy of the real one, so that reading it
    would succeed) is refused, not opened."""
    d = copy_of(ds, tmp_path / "d")
    outside = str(tmp_path / "outside.parquet")
    shutil.copyfile(os.path.join(d, SHARD), outside)
    man = dataset_manifest.read_manifest(d)
    man["splits"]["heldout"]["shards"][0]["file"] = outside if entry == "ABSOLUTE" else entry
    dataset_manifest.write_manifest(d, man)
    rc, _, err = ldabeam(capsys, "train", "--shards", d, "--output", tmp_path / "m", *TRAIN)
    assert rc == 2 and "not a path inside the dataset" in err, err
    with pytest.raises(DataIntegrityError, match="not a path inside the dataset"):
        dataset_manifest.verify(d)


@pytest.mark.parametrize("manifest", [{}, {"splits": {}}, {"splits": {"train": {}}}, []])
def test_a_manifest_listing_no_shards_is_an_integrity_error(ds, tmp_path, capsys, manifest):
    """A manifest that lists nothing does not switch verification off."""
    d = copy_of(ds, tmp_path / "d")
    with open(os.path.join(d, dataset.MANIFEST_FILE), "w") as f:
        json.dump(manifest, f)
    for shards in (d, os.path.join(d, "train")):
        rc, _, err = ldabeam(capsys, "train", "--shards", shards, "--output", tmp_path / "m",
                             *TRAIN)
        assert rc == 2 and "manifest.json" in err and "lists no shards" in err \
            or "is not a JSON object" in err, err
        assert not os.path.exists(str(tmp_path / "m" / "checkpoints"))
    with pytest.raises(DataIntegrityError):
        dataset_manifest.verify(d)


def test_hashing_is_done_once_per_process(ds, monkeypatch):
    """The train split, then the same shards again (held-out readers, the infer driver's two
    checks): each file is hashed once."""
    calls = []
    real = dataset.hashlib.sha256
    monkeypatch.setattr(dataset_manifest, "_HASHED", {})
    monkeypatch.setattr(dataset.hashlib, "sha256", lambda *a: calls.append(1) or real(*a))
    dataset_manifest.open_shards(ds)
    dataset_manifest.open_shards(os.path.join(ds, "train"))
    dataset_manifest.open_shards(os.path.join(ds, SHARD))
    assert len(calls) == 1


# ----------------------------------------------------------------------------- defect 8

def test_resume_on_another_dataset_with_the_same_vocabulary_is_refused(ds, tmp_path, capsys):
    other = copy_of(ds, tmp_path / "other")
    rewrite_shard(os.path.join(other, SHARD), plus_one)
    relist(other)                        # a consistent dataset, other documents
    m = str(tmp_path / "m")
    common = ["--topics", "4", "--passes", "2", "--minibatch", "40", "--heldout", "none",
              "--no-progress"]
    rc, _, err = ldabeam(capsys, "train", "--shards", ds, "--output", m, "--max-steps", 2,
                         *common)
    assert rc == 0, err
    rc, _, err = ldabeam(capsys, "train", "--shards", other, "--output", m, "--resume",
                         *common)
    assert rc == 2 and "not the dataset the checkpoint" in err and "new --output" in err, err
    assert "train/part-00000-of-00001.parquet" in err
    rc, _, err = ldabeam(capsys, "train", "--shards", os.path.join(ds, "train", "*.parquet"),
                         "--output", m, "--resume", *common)
    assert rc == 0, err          # the same dataset, named by a glob this time


# ----------------------------------------------------------------------------- defect 6

def test_a_model_trained_from_a_glob_records_the_dataset_tokenizer(ds, tmp_path, capsys):
    m = str(tmp_path / "m")
    rc, _, err = ldabeam(capsys, "train", "--shards", os.path.join(ds, "train", "*.parquet"),
                         "--output", m, *TRAIN)
    assert rc == 0, err
    recorded = dataset_manifest.read_tokenizer(m)
    settings = dataset_manifest.read_manifest(ds)["settings"]
    assert isinstance(recorded, dict) and recorded
    assert recorded == {k: settings[k] for k in dataset_manifest.TOKENIZER_KEYS if k in settings}


# ----------------------------------------------------------------------------- defect 14 (data)

def test_non_utf8_vocabulary_and_tokenizer_name_file_and_line(ds, tmp_path):
    vpath = str(tmp_path / "vocab.tsv")
    with open(os.path.join(ds, dataset.VOCAB_FILE), "rb") as f:
        lines = f.read().split(b"\n")
    lines[2] = lines[2].replace(lines[2][:1], b"\xe9", 1)
    with open(vpath, "wb") as f:
        f.write(b"\n".join(lines))
    with pytest.raises(InputError, match=r"vocab.tsv is not UTF-8 text \(byte \d+\) at line 3"):
        Vocabulary.read(vpath)
    m = tmp_path / "m"
    m.mkdir()
    (m / dataset_manifest.TOKENIZER_FILE).write_bytes(b'{"settings":\n {"stopwords": "caf\xe9"}}\n')
    with pytest.raises(InputError, match=r"tokenizer.json is not a tokenizer record .*not "
                                         r"UTF-8 text: byte \d+ at line 2"):
        dataset_manifest.read_tokenizer(str(m))
    (m / dataset_manifest.TOKENIZER_FILE).write_bytes(b'[1, 2]')
    with pytest.raises(InputError, match="tokenizer.json"):
        dataset_manifest.read_tokenizer(str(m))


def test_a_word_id_beyond_the_vocabulary_names_document_and_shard(ds, tmp_path, capsys):
    d = copy_of(ds, tmp_path / "d")
    V = len(Vocabulary.read(d))

    def beyond(words, counts):
        words[5][-1] = V + 7
    rewrite_shard(os.path.join(d, SHARD), beyond)
    relist(d)
    doc = pq.read_table(os.path.join(d, SHARD)).column("doc_id")[5].as_py()
    rc, _, err = ldabeam(capsys, "train", "--shards", d, "--output", tmp_path / "m", *TRAIN)
    assert rc == 2 and "part-00000-of-00001.parquet" in err and repr(doc) in err, err
    assert "word id %d" % (V + 7) in err


# ----------------------------------------------------------------------------- defect 11

@pytest.mark.slow
def test_readers_racing_a_pruning_trainer(ds, model, tmp_path, capsys):
    """A real trainer publishing a checkpoint every step and keeping one (so each publish
    prunes the previous) in a subprocess; meanwhile the readers -- open_model (topics,
    report, export), CheckpointStore.latest_checkpoint (resume, stream) and an in-process
    `ldabeam infer` -- read the model in a loop. Every read succeeds, none reports damage.
    The in-process infer runs once on another model first: its first run in a test process
    loads (or compiles) its kernels, which may take longer than the whole trainer does, and
    the readers must race the trainer, not that."""
    import subprocess
    import time
    from lda_core.storage.checkpoint import CheckpointStore
    from pipelines.runtime.model_dir import open_model
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    m = str(tmp_path / "m")
    cmd = ["-m", "pipelines.cli", "--log-level", "WARNING", "train",
           "--shards", ds, "--output", m, "--topics", "4", "--minibatch", "2", "--passes", "6",
           "--checkpoint-every", "1", "--keep-checkpoints", "1", "--heldout", "none",
           "--no-progress"]
    env = dict(os.environ, PYTHONPATH=repo)
    rc, _, err = ldabeam(capsys, "infer", "--model", model, "--shards", ds, "--split",
                         "heldout", "--output", tmp_path / "warm-up")
    assert rc == 0, err
    trainer = warm.popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reads, steps, failures, infers = 0, set(), [], 0
    try:
        deadline = time.time() + 600
        while CheckpointStore(m).pointer() is None and trainer.poll() is None:
            assert time.time() < deadline, "the trainer published nothing"
            time.sleep(0.05)
        while trainer.poll() is None:
            try:
                steps.add(open_model(m).state.step)
                found = CheckpointStore(m, check_algorithm=True).latest_checkpoint()
                steps.add(found[0].step)
                reads += 2
                if reads in (10, 30):
                    out = tmp_path / ("inf%d" % infers)
                    rc, _, err = ldabeam(capsys, "infer", "--model", m, "--shards", ds,
                                         "--split", "heldout", "--output", out)
                    assert rc == 0, err
                    infers += 1
            except Exception as e:            # what the old readers raised mid-prune
                failures.append("%s: %s" % (type(e).__name__, e))
        _, err = trainer.communicate()
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
    assert trainer.returncode == 0, err.decode()[-2000:]
    assert failures == [], "%d of %d reads failed, first: %s" % (len(failures), reads,
                                                                 failures[0])
    assert reads >= 30 and len(steps) >= 10 and infers == 2, (reads, infers, sorted(steps))
    assert "damaged" not in capsys.readouterr().err
