"""Issue 32, "Nothing lost, round two": the output rules reach every output, file or folder,
and the Python API (items 1-4), labels are read, changed and written under the model's lease
and go with the model they name (9), no partial file is left under a final name and a
vectorize that keeps nothing publishes nothing (10), and the messages of an interrupted or
resumed update say what is true (11). On the bundled Wikipedia sample, a real small model
and real inference results; every refused case leaves every file as it was."""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from gensim.models import LdaModel as GensimLdaModel

import ldabeam
from lda_core.errors import OutputError, Terminated
from lda_core.storage import output_paths
from lda_core.storage.checkpoint import CheckpointStore
from helpers.cli import error_lines, ldabeam as ldabeam_cli, one_error_line as one_line_error
from pipelines import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "data", "enwiki-sample-sections.jsonl.bz2")
TRAIN = ["--topics", "4", "--algorithm", "online-vb", "--minibatch", "64", "--seed", "3",
         "--heldout", "none", "--no-progress"]




def snapshot(folder):
    """{relative path: sha256} of every file and link under ``folder``."""
    out = {}
    for d, dirs, files in os.walk(str(folder)):
        for f in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, str(folder))
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            else:
                with open(p, "rb") as fh:
                    out[rel] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A dataset of the bundled sample's sections, a model trained on it, a copy of that
    model standing for another model, inference results, and a user's own files."""
    root = tmp_path_factory.mktemp("lost")
    ds, m, inf = root / "ds", root / "m", root / "inf"
    assert cli.main(["vectorize", "--input", SAMPLE, "--format", "jsonl", "--output", str(ds),
                     "--holdout-fraction", "0.1", "--no-below", "3", "--keep-n", "3000"]) == 0
    assert cli.main(["train", "--shards", str(ds), "--output", str(m), "--max-steps", "4",
                     "--checkpoint-every", "2"] + TRAIN) == 0
    shutil.copytree(str(m), str(root / "m2"))
    assert cli.main(["infer", "--model", str(m), "--shards", str(ds), "--split", "heldout",
                     "--output", str(inf)]) == 0
    user = root / "user"
    user.mkdir()
    (user / "notes.txt").write_text("my notes\n")
    (user / "g.state").write_text("not gensim\n")
    (user / "dir").mkdir()
    os.symlink(str(user / "notes.txt"), str(user / "link.npy"))
    return {"root": str(root), "ds": str(ds), "m": str(m), "m2": str(root / "m2"),
            "inf": str(inf), "user": str(user)}


def _checkpoint(m):
    return CheckpointStore(m).pointer_path()


# the overlap cases: (name, argv with {ds} {m} {m2} {inf} {user} {ckpt}, words of the line)
OVERLAPS = [
    ("export-npy-over-manifest", ["export", "--model", "{m}", "--format", "phi-npy",
                                  "--output", "{ds}/manifest.json"], "inside a dataset"),
    ("export-gensim-over-vocab", ["export", "--model", "{m}", "--format", "gensim",
                                  "--output", "{ds}/vocab.tsv"], "inside a dataset"),
    ("export-npy-over-shard", ["export", "--model", "{m}", "--output",
                               "{ds}/train/part-00000-of-00001.parquet"], "inside a dataset"),
    ("report-over-shard", ["report", "--model", "{m}", "--output",
                           "{ds}/train/part-00000-of-00001.parquet"], "inside a dataset"),
    ("report-over-other-latest", ["report", "--model", "{m}", "--output",
                                  "{m2}/checkpoints/LATEST"], "inside a model"),
    ("topics-over-other-run-log", ["topics", "--model", "{m}", "--output",
                                   "{m2}/run_log.jsonl"], "inside a model"),
    ("pyldavis-into-split", ["export", "--model", "{m}", "--format", "pyldavis",
                             "--output", "{ds}/train"], "inside a dataset"),
    ("export-npy-into-inference", ["export", "--model", "{m}", "--output",
                                   "{inf}/part-00000-of-00001.parquet"], "inside inference"),
    ("report-over-summary", ["report", "--model", "{m}", "--output", "{inf}/_summary.json"],
     "inside inference"),
    ("export-over-user-file", ["export", "--model", "{m}", "--output", "{user}/notes.txt"],
     "a file ldabeam did not write"),
    ("export-over-user-file-overwrite", ["export", "--model", "{m}", "--output",
                                         "{user}/notes.txt", "--overwrite"],
     "only by the same kind"),
    ("report-over-user-file-overwrite", ["report", "--model", "{m}", "--output",
                                         "{user}/notes.txt", "--overwrite"],
     "only by the same kind"),
    ("topics-over-user-file-overwrite", ["topics", "--model", "{m}", "--output",
                                         "{user}/notes.txt", "--overwrite"],
     "only by the same kind"),
    ("gensim-over-user-side-file", ["export", "--model", "{m}", "--format", "gensim",
                                    "--output", "{user}/g", "--overwrite"], "g.state"),
    ("report-onto-directory", ["report", "--model", "{m}", "--output", "{user}/dir"],
     "Is a directory"),
    ("export-through-link", ["export", "--model", "{m}", "--output", "{user}/link.npy",
                             "--overwrite"], "symbolic link"),
    ("infer-into-own-checkpoints", ["infer", "--model", "{ckpt}", "--shards", "{ds}",
                                    "--output", "{m}/checkpoints/step-000000099"],
     "inside a model"),
    ("infer-into-other-model", ["infer", "--model", "{m}", "--shards", "{ds}", "--output",
                                "{m2}/theta"], "inside a model"),
    ("vectorize-into-dataset", ["vectorize", "--input", SAMPLE, "--format", "jsonl",
                                "--output", "{ds}/more"], "inside a dataset"),
    ("train-into-split", ["train", "--shards", "{ds}", "--output", "{inf}/model"] + TRAIN,
     "inside inference"),
    ("synth-into-model", ["synth", "--output", "{m2}/synthetic", "--docs", "30", "--words",
                          "40", "--topics", "3"], "inside a model"),
    ("update-input-is-model", ["train", "--update", "--output", "{m}", "--input", "{m}"],
     "is the input"),
    # as text, every file of the model is a document (4287b45: trained on them, exit 0)
    ("update-input-is-model-as-text", ["train", "--update", "--output", "{m}", "--input",
                                       "{m}", "--format", "text"], "is the input"),
    ("update-input-in-model", ["train", "--update", "--output", "{m}", "--input",
                               "{m}/vocab.tsv", "--format", "lines"], "contains the input"),
]


@pytest.mark.parametrize("name,argv,words", OVERLAPS, ids=[c[0] for c in OVERLAPS])
def test_i1_i3_i4_every_output_overlap_is_refused_and_nothing_changes(world, capsys, name,
                                                                       argv, words):
    """Items 1, 3 and 4: export, report and topics never overwrite another output's files
    or a user's file of another kind; infer never writes into a model; an update's --input
    never lies inside its model; and every directory writer is refused inside another
    output. Each case is one line, exit 2, and every file under the fixture is unchanged."""
    before = snapshot(world["root"])
    fields = dict(world, ckpt=_checkpoint(world["m"]))
    one_line_error(capsys, [a.format(**fields) for a in argv], words)
    assert snapshot(world["root"]) == before


def test_i1_an_export_replaces_its_own_kind_only_with_overwrite(world, tmp_path, capsys):
    """The same kind of output at the path: refused without --overwrite, replaced with it;
    a gensim export is replaced as a whole (its side files too) and still loads."""
    phi = str(tmp_path / "phi.npy")
    assert ldabeam_cli(capsys, "export", "--model", world["m"], "--output", phi)[0] == 0
    one_line_error(capsys, ["export", "--model", world["m"], "--output", phi],
                   "already holds a topic-word matrix", "--overwrite")
    assert ldabeam_cli(capsys, "export", "--model", world["m"], "--output", phi,
                       "--overwrite")[0] == 0
    assert np.load(phi).shape[0] == 4
    g = str(tmp_path / "g" / "lda")
    assert ldabeam_cli(capsys, "export", "--model", world["m"], "--format", "gensim",
                       "--output", g)[0] == 0
    first = sorted(os.listdir(os.path.dirname(g)))
    one_line_error(capsys, ["export", "--model", world["m"], "--format", "gensim",
                            "--output", g], "already holds a gensim model export")
    assert ldabeam_cli(capsys, "export", "--model", world["m"], "--format", "gensim",
                       "--output", g, "--overwrite")[0] == 0
    assert sorted(os.listdir(os.path.dirname(g))) == first       # no temporary, no leftover
    assert GensimLdaModel.load(g).num_topics == 4
    page = str(tmp_path / "r.html")
    for extra in ([], ["--overwrite"]):
        assert ldabeam_cli(capsys, "report", "--model", world["m"], "--output", page,
                           "--max-docs", "20", *extra)[0] == 0
        if not extra:
            one_line_error(capsys, ["report", "--model", world["m"], "--output", page],
                           "already holds an ldabeam report page")
    assert output_paths.file_kind(page) == "report"


def test_i2_save_follows_the_output_rules(world, tmp_path):
    """Item 2: LdaModel.save never writes into a dataset, a split folder, inference results
    or a folder holding another writer's vocab.tsv; saving to a new folder works."""
    model = ldabeam.load(world["m"])
    before = snapshot(world["root"])
    for target, words in [(world["ds"], "holds a dataset"),
                          (os.path.join(world["ds"], "train"), "inside a dataset"),
                          (world["inf"], "holds inference results"),
                          (os.path.join(world["m2"], "checkpoints"), "inside a model")]:
        with pytest.raises(OutputError, match=words):
            model.save(target)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "vocab.tsv").write_text("a\t1\t1\n")
    with pytest.raises(OutputError, match="vocab.tsv, which is not a model's"):
        model.save(str(theirs))
    assert (theirs / "vocab.tsv").read_text() == "a\t1\t1\n"
    assert snapshot(world["root"]) == before
    path = model.save(str(tmp_path / "copy"))
    assert ldabeam.load(str(tmp_path / "copy")).step == model.step and os.path.isdir(path)


LABELLER = """
import sys
from pipelines import cli
m, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for k in range(first, first + n):
    assert cli.main(["topics", "--model", m, "--label", str(k), "name-%d" % k, "--top", "1"]) == 0
"""


def test_i9_concurrent_labellers_lose_no_label(world, tmp_path, capsys):
    """Item 9: eight `ldabeam topics --label` processes at once, five labels each, on a
    model of 40 topics: all 40 labels survive (each read-modify-write holds the model's
    lease; without it, labels written in between are overwritten)."""
    m = str(tmp_path / "m")
    argv = ["train", "--shards", world["ds"], "--output", m, "--max-steps", "1"] + TRAIN
    argv[argv.index("--topics") + 1] = "40"
    assert ldabeam_cli(capsys, *argv)[0] == 0
    procs = [subprocess.Popen([sys.executable, "-c", LABELLER, m, str(5 * i), "5"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              cwd=str(tmp_path)) for i in range(8)]
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err.decode()[-2000:]
    labels = json.load(open(os.path.join(m, output_paths.LABELS_FILE)))
    assert labels == {str(k): "name-%d" % k for k in range(40)}, sorted(labels, key=int)
    assert not os.path.exists(os.path.join(m, "lease.json"))


def test_i9_overwrite_removes_the_old_models_labels(world, tmp_path, capsys):
    """Item 9: `train --output M --overwrite` removes what the old model owned: a new
    model's topic 1 never shows the old topic 1's label."""
    m = str(tmp_path / "m")
    assert ldabeam_cli(capsys, "train", "--shards", world["ds"], "--output", m,
                       "--max-steps", "2", *TRAIN)[0] == 0
    assert ldabeam_cli(capsys, "topics", "--model", m, "--label", "1", "war")[0] == 0
    assert ldabeam_cli(capsys, "train", "--shards", world["ds"], "--output", m, "--overwrite",
                       "--max-steps", "2", "--seed", "9", *TRAIN[:-1])[0] == 0
    assert not os.path.exists(os.path.join(m, output_paths.LABELS_FILE))
    rc, out, err = ldabeam_cli(capsys, "topics", "--model", m, "--format", "json")
    assert rc == 0 and all(t["label"] == "" for t in json.loads(out))


@pytest.fixture
def mount_tmpfs(tmp_path):
    """mount(size) -> a fresh tmpfs directory (skips where mounting is refused)."""
    mounted = []

    def mount(size="64k"):
        d = tmp_path / ("fs%d" % len(mounted))
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", str(d)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip("cannot mount a tmpfs (%s)" % (r.stderr.strip() or "not permitted"))
        mounted.append(str(d))
        return str(d)
    yield mount
    for d in mounted:
        subprocess.run(["umount", d], capture_output=True)


def test_i10_gensim_export_on_a_full_disk_names_the_path_and_leaves_nothing(
        world, mount_tmpfs, capsys):
    """Item 10: a full disk during `export --format gensim` is one line naming the output,
    and no file (final or temporary) is left."""
    full = mount_tmpfs(size="256k")
    out = os.path.join(full, "g")
    one_line_error(capsys, ["export", "--model", world["m"], "--format", "gensim",
                            "--output", out], out, "No space left on device", "free space")
    assert os.listdir(full) == []


def test_i10_a_vectorize_that_keeps_nothing_publishes_nothing(tmp_path, capsys):
    """Item 10: no document kept -> one line, no manifest; a rerun into the same folder is
    not told it already holds a dataset."""
    src = tmp_path / "few.jsonl"
    src.write_text('{"id": "a", "text": "the of and"}\n{"id": "b", "text": "x"}\n')
    out = str(tmp_path / "ds")
    argv = ["vectorize", "--input", str(src), "--output", out, "--stopwords", "gensim"]
    for _ in range(2):
        one_line_error(capsys, argv, "no document was kept", "no dataset was published")
        assert not os.path.exists(os.path.join(out, "manifest.json"))
        assert [n for n in os.listdir(out) if not n.startswith(".")] == []


def test_i11_an_interrupted_update_says_what_to_do(world, tmp_path, capsys, monkeypatch):
    """Item 11: Ctrl-C or SIGTERM during `train --update` says the model is unchanged and
    to run the same update again -- not --resume, which --update refuses."""
    m = str(tmp_path / "m")
    shutil.copytree(world["m"], m)
    before = snapshot(m)
    for exc, code, name in ((KeyboardInterrupt, 130, "SIGINT"), (Terminated, 143, "SIGTERM")):
        def interrupted(self, *a, exc=exc, **kw):
            raise exc("interrupted")
        monkeypatch.setattr(ldabeam.LdaModel, "update", interrupted)
        rc, out, err = ldabeam_cli(capsys, "train", "--update", "--output", m, "--input",
                                   SAMPLE, "--format", "jsonl")
        assert rc == code, err
        line = error_lines(err)[-1]
        assert line.startswith("ldabeam train: interrupted (%s)" % name), line
        assert "the same `ldabeam train --update` again" in line and "--resume" not in line
    assert snapshot(m) == before


def test_i11_resume_after_an_update_reports_the_step_it_publishes(world, tmp_path, capsys):
    """Item 11: `train --resume` after an update reports the global step its checkpoint is
    named by (the update's steps lie outside the run's minibatch order)."""
    m = str(tmp_path / "m")
    assert ldabeam_cli(capsys, "train", "--shards", world["ds"], "--output", m,
                       "--passes", "1", *TRAIN)[0] == 0
    texts = tmp_path / "new.txt"
    texts.write_text("\n".join("war army peace treaty soldier battle %d" % i
                               for i in range(150)) + "\n")
    assert ldabeam_cli(capsys, "train", "--update", "--output", m, "--input", str(texts),
                       "--format", "lines")[0] == 0
    rc, out, err = ldabeam_cli(capsys, "train", "--resume", "--shards", world["ds"],
                               "--output", m, "--passes", "2", "--no-progress")
    assert rc == 0, err
    published = CheckpointStore(m).pointer()
    step_line = [l for l in out.splitlines() if l.strip().startswith("step ")][0]
    assert step_line.split()[1] == str(published), (step_line, published)
    assert "checkpoint: %s" % os.path.join(m, "checkpoints", "step-%09d" % published) in out
