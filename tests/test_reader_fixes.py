"""Issue 30, item 6: the smaller things a new user met, each reproduced before the fix.

A model saved to a new folder exports without --shards; ``repr`` after an update names no
checkpoint it no longer is; ``ldabeam.load(DATASET_DIR)`` says it is a dataset; θ does not
depend on a document's id; a first call that compiles numba kernels says so; ``infer`` writes
each document's label; ``--exclude`` keeps files of a folder out; the Beam window line and the
summary count the windows and passes ``--passes auto`` may run.

Model: online VB trained by the command line on the bundled Wikipedia sample."""
import csv
import glob
import logging
import os
from types import SimpleNamespace

import numba
import numpy as np
import pytest

import ldabeam
from lda_core.errors import InputError
from lda_core.training.kernel_warmup import MESSAGE, compile_notice
from pipelines.cli import main as cli
from pipelines.infer import read_theta
from pipelines.ingest.vectorize import VectorizeOptions, vectorize
from pipelines.training.beam_run import planned_windows, window_end

TEXT = ("The river flows through the valley past the old mill and the church; the town grew "
        "around its bridge in the middle ages and became a market for the farms nearby.")


@pytest.fixture(scope="module")
def model(wiki_sample, tmp_path_factory):
    work = tmp_path_factory.mktemp("fixes")
    ds = str(work / "wiki")
    vectorize(VectorizeOptions(inputs=[wiki_sample], output=ds, holdout_fraction=0.1))
    out = str(work / "vb")
    assert cli(["train", "--shards", ds, "--output", out, "--topics", "4", "--algorithm",
                "online-vb", "--passes", "1", "--minibatch", "32", "--no-progress"]) == 0
    return {"ds": ds, "model": out}


def test_model_saved_elsewhere_exports_without_shards(model, tmp_path, capsys):
    """main: 'the model's run log names no training shards'."""
    m = ldabeam.load(model["model"])
    copy = str(tmp_path / "copy")
    m.save(copy)
    capsys.readouterr()
    for fmt in ("gensim", "pyldavis"):
        rc = cli(["export", "--model", copy, "--format", fmt, "--output",
                  str(tmp_path / ("out-" + fmt))])
        assert rc == 0, capsys.readouterr().err


def test_repr_after_update_names_no_old_checkpoint(model):
    m = ldabeam.load(model["model"])
    old = m.checkpoint
    assert old and repr(old) in repr(m)
    m.update([TEXT] * 3, passes=1)
    r = repr(m)
    assert "checkpoint=%r" % old not in r and "not saved" in r


def test_load_of_a_dataset_says_how_to_train_on_it(model):
    with pytest.raises(InputError) as e:
        ldabeam.load(model["ds"])
    msg = str(e.value)
    assert "is a dataset" in msg and "--shards %s" % model["ds"] in msg
    assert "--output %s" % model["ds"] not in msg and "\n" not in msg


def test_theta_does_not_depend_on_the_document_id(model):
    m = ldabeam.load(model["model"])
    texts = [TEXT, TEXT + " The mill closed in the nineteenth century."]
    a = m.transform([{"id": "a%d" % i, "text": t} for i, t in enumerate(texts)])
    b = m.transform([{"id": "renamed-%d" % i, "text": t} for i, t in enumerate(texts)])
    np.testing.assert_array_equal(a, b)
    # the same text under two ids in one call: the same row
    c = m.transform([{"id": "x", "text": TEXT}, {"id": "y", "text": TEXT}])
    np.testing.assert_array_equal(c[0], c[1])


def test_a_first_compile_is_announced(capsys, caplog):
    """main: a first fit compiled silently for ~40 s (no notice outside the CLI). Logged at
    INFO when logging is configured (here: pytest's handler), else on stderr."""
    @numba.njit(cache=False)
    def fresh_kernel(x):           # compiled on its first call, inside the block
        return x * 2 + 1

    caplog.set_level(logging.INFO, logger="lda_core.training.kernel_warmup")
    with compile_notice():
        assert fresh_kernel(20) == 41
    said = caplog.text + capsys.readouterr().err
    assert MESSAGE in said and "numba kernels compiled in" in said
    caplog.clear()
    with compile_notice():          # compiled now: nothing said
        fresh_kernel(3)
    assert MESSAGE not in caplog.text + capsys.readouterr().err


def test_an_estimators_fit_and_a_models_transform_run_inside_the_notice(monkeypatch, tmp_path):
    """The issue's case is the first ``OnlineLDA.fit`` (and ``LdaModel.transform``) in
    Python: both enter the notice, so a compile there is announced as above."""
    import contextlib
    import scipy.sparse as sp
    import ldabeam
    from ldabeam import model as model_module
    from lda_core.sklearn_api import OnlineLDA
    from lda_core.training import in_memory
    entered = []

    @contextlib.contextmanager
    def recording():
        entered.append(True)
        yield

    monkeypatch.setattr(in_memory, "compile_notice", recording)
    monkeypatch.setattr(model_module, "compile_notice", recording)
    X = sp.csr_matrix(np.random.RandomState(0).poisson(1.0, (40, 30)).astype(np.float64))
    est = OnlineLDA(n_components=3, max_iter=1, batch_size=20, random_state=0).fit(X)
    assert entered == [True]
    est.save(str(tmp_path / "m"), vocabulary=["w%d" % i for i in range(30)])
    ldabeam.load(str(tmp_path / "m")).transform([["w1", "w2", "w2"], ["w5", "w7"]])
    assert entered == [True, True]


def test_folder_input_labels_and_exclude(model, tmp_path, capsys):
    """infer writes the folder labels; --exclude keeps README.TXT out (main: it became a
    document, and infer had no label column)."""
    src = tmp_path / "docs"
    for label, n in (("rivers", 2), ("towns", 1)):
        (src / label).mkdir(parents=True)
        for i in range(n):
            (src / label / ("d%d.txt" % i)).write_text(TEXT + " %s %d" % (label, i))
    (src / "README.TXT").write_text("How these files were collected. " * 5)
    out = str(tmp_path / "theta")
    rc = cli(["infer", "--model", model["model"], "--input", str(src), "--csv",
              "--output", out, "--exclude", "README.TXT"])
    assert rc == 0, capsys.readouterr().err
    table = read_theta(out)
    rows = []
    for name in sorted(glob.glob(os.path.join(out, "part-*.csv"))):
        with open(name, newline="") as f:
            rows += list(csv.DictReader(f))
    assert sorted(table.column("label").to_pylist()) == ["rivers", "rivers", "towns"]
    assert sorted(r["label"] for r in rows) == ["rivers", "rivers", "towns"]
    assert not any("README" in r["doc_id"] for r in rows)
    ds = str(tmp_path / "ds")
    assert cli(["vectorize", "--input", str(src), "--output", ds, "--exclude", "README.TXT",
                "--no-below", "1", "--holdout-fraction", "0"]) == 0
    assert "3 read" in capsys.readouterr().out


def test_auto_windows_are_counted_by_their_pass_ends():
    """main printed 'window 5/1' under --passes auto: one window planned, the pass ends cutting
    more. Windows of M = 5 minibatches in passes of 8: two per pass, 20 passes at most."""
    ses = SimpleNamespace(position=0, pass_stop=object(), batches_per_pass=8)
    assert window_end(ses, 160, 5) == 5 and window_end(ses, 160, 5, 5) == 8
    assert planned_windows(ses, 160, 5) == 40
    ses.pass_stop = None
    assert planned_windows(ses, 160, 5) == 32 and window_end(ses, 160, 5, 5) == 10
