"""Issue 32, "Nothing lost, round two", items 5-7: inputs are read honestly (a glob walks a
symlink loop once, a CSV record with an unterminated quote is a dead letter and reading goes
on, --encoding-errors ignore counts what it drops, a lone surrogate is a counted dead letter),
loaded arrays are checked like published ones (a NaN or a negative count in a checkpoint whose
sha256 was recomputed falls back to the previous checkpoint, or is one line when named), and
nothing a model or an input folder holds can hang a reader (a FIFO in place of a model file or
among the inputs, a token pattern that backtracks without bound): every such case is bounded
by 10 s, so a hang fails the test instead of the run -- by an alarm in this process, or, for
the token pattern, by running the command in a process of its own that is killed at the bound
(a backtracking match runs inside the regular-expression engine, which no alarm interrupts)."""
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from helpers import warm
from helpers.cli import error_lines, one_error_line
from helpers.paths import repo_env
from pipelines import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "data", "enwiki-sample-sections.jsonl.bz2")
TRAIN = ["--topics", "4", "--algorithm", "online-vb", "--minibatch", "64", "--seed", "3",
         "--heldout", "none", "--no-progress"]
BOUND = 10      # seconds: no case of this module waits longer


class Hung(Exception):
    pass


@contextlib.contextmanager
def bounded(seconds=BOUND):
    """Raise Hung in the main thread after ``seconds`` (a blocked open() of a FIFO or a
    backtracking regex is interrupted by the signal)."""
    def ring(signum, frame):
        raise Hung("still running after %d s" % seconds)
    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run(capsys, *argv):
    with bounded():
        rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_bounded_child(capsys, *argv):
    """``ldabeam ARGV`` in a process of its own, killed after BOUND seconds: a hang fails the
    test at the bound even where the main thread cannot take a signal."""
    try:
        p = warm.run(["-m", "pipelines.cli"] + [str(a) for a in argv], env=repo_env(),
                     capture_output=True, text=True, timeout=BOUND)
    except subprocess.TimeoutExpired:
        pytest.fail("ldabeam %s still running after %d s" % (argv[0], BOUND))
    return p.returncode, p.stdout, p.stderr


def one_line_error(capsys, argv, *matches):
    return one_error_line(capsys, argv, *matches, run=run)


def manifest(ds):
    with open(os.path.join(str(ds), "manifest.json")) as f:
        return json.load(f)


def vectorize(capsys, inputs, out, *extra):
    rc, o, err = run(capsys, "vectorize", "--input", *inputs, "--output", out,
                     "--no-below", "1", "--no-above", "1.0", *extra)
    assert rc == 0, err[-3000:]
    return manifest(out)["counts"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The bundled sample as a dataset and an online-VB model with checkpoints at steps 2
    and 4."""
    root = tmp_path_factory.mktemp("inputs")
    ds, m = str(root / "ds"), str(root / "m")
    assert cli.main(["vectorize", "--input", SAMPLE, "--format", "jsonl", "--output", ds,
                     "--holdout-fraction", "0.1", "--no-below", "3", "--keep-n", "3000"]) == 0
    assert cli.main(["train", "--shards", ds, "--output", m, "--max-steps", "4",
                     "--checkpoint-every", "2"] + TRAIN) == 0
    return {"root": str(root), "ds": ds, "m": m}


# ----------------------------------------------------------------------------- item 5

def test_i5_a_glob_walks_a_symlink_loop_once(tmp_path, capsys):
    """`--input 'd/**/*.txt'` with d/self -> ../d: each of the 10 files is one document
    (410 from 10 files on main)."""
    d = tmp_path / "d"
    d.mkdir()
    for i in range(10):
        (d / ("f%d.txt" % i)).write_text("war army peace treaty soldier number%d\n" % i)
    os.symlink("../d", str(d / "self"))
    c = vectorize(capsys, [str(d / "**" / "*.txt")], str(tmp_path / "ds"), "--format", "text")
    assert c["documents_read"] == 10 and c["documents_kept"] == 10, c


def test_i5_an_unterminated_csv_quote_is_one_dead_letter_and_reading_goes_on(tmp_path, capsys):
    """Row 5 of 1,000 opens a quote it never closes: one dead letter, the other 999 rows are
    documents (main: '6 read, 0 dead-lettered', one document of the rest)."""
    src = tmp_path / "t.csv"
    rows = ["id,text"] + ["%d,war army peace treaty row%d" % (i, i) for i in range(1000)]
    rows[6] = '5,"unterminated war army'
    src.write_text("\n".join(rows) + "\n")
    c = vectorize(capsys, [str(src)], str(tmp_path / "ds"), "--format", "csv")
    assert c["dead_letters"] == 1 and c["documents_read"] == 999, c
    assert c["documents_kept"] == 999, c


def test_i5_ignore_counts_the_bytes_it_drops(tmp_path, capsys):
    """--encoding-errors ignore drops undecodable bytes and counts them as replace does."""
    src = tmp_path / "t.txt"
    src.write_bytes(b"war army \xff\xfe peace treaty \xa3 soldier\n")
    for mode in ("ignore", "replace"):
        c = vectorize(capsys, [str(src)], str(tmp_path / mode), "--format", "text",
                      "--encoding-errors", mode)
        assert c["replaced_characters"] == 3 and c["documents_kept"] == 1, (mode, c)


def test_i7_a_lone_surrogate_is_a_counted_dead_letter(tmp_path, capsys):
    """Item 7: a JSON line holding a lone surrogate is a dead letter of vectorize (exit 0,
    the other documents kept; an internal UnicodeEncodeError on main)."""
    src = tmp_path / "s.jsonl"
    src.write_text('{"id": "a", "text": "war \\ud800 army"}\n'
                   '{"id": "b", "text": "war army peace treaty"}\n'
                   '{"id": "c", "text": "peace treaty soldier army"}\n')
    c = vectorize(capsys, [str(src)], str(tmp_path / "ds"), "--format", "jsonl")
    assert c["dead_letters"] == 1 and c["documents_kept"] == 2, c


def test_i7_a_lone_surrogate_is_a_counted_dead_letter_of_infer(world, tmp_path, capsys):
    """Item 7: the same line given to `infer --input`: exit 0, the other document inferred,
    the surrogate's line counted in the summary's dead letters."""
    src = tmp_path / "s.jsonl"
    src.write_text('{"id": "a", "text": "war \\ud800 army"}\n'
                   '{"id": "b", "text": "war army peace treaty"}\n')
    out = str(tmp_path / "inf")
    rc, o, err = run(capsys, "infer", "--model", world["m"], "--input", str(src), "--format",
                     "jsonl", "--output", out)
    assert rc == 0, err[-3000:]
    with open(os.path.join(out, "_summary.json")) as f:
        summary = json.load(f)
    assert summary["dead_letters"] == 1 and summary["documents"] == 1, summary


# ----------------------------------------------------------------------------- item 6

def _edit_array(ckpt, name, change):
    """Change array ``name`` of checkpoint ``ckpt`` in place and record the new sha256 in
    its state.json, as a careful vandal would."""
    path = os.path.join(ckpt, name + ".npy")
    a = np.load(path)
    change(a)
    np.save(path, a)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(ckpt, "state.json")) as f:
        state = json.load(f)
    state["arrays"][name]["sha256"] = sha
    with open(os.path.join(ckpt, "state.json"), "w") as f:
        json.dump(state, f)


@pytest.mark.parametrize("value", [np.nan, np.inf, -1e6], ids=["nan", "inf", "negative"])
def test_i6_a_damaged_latest_checkpoint_falls_back_and_a_named_one_is_one_line(
        world, tmp_path, capsys, value):
    """Item 6: NaN, +inf or -1e6 in ntilde.npy of the latest checkpoint (sha256 recomputed):
    topics and export read the previous checkpoint (finite, no 'nan' printed), infer runs;
    the checkpoint named directly is one line."""
    m = str(tmp_path / "m")
    shutil.copytree(world["m"], m)
    latest = CheckpointStore(m).pointer_path()
    assert latest.endswith("step-000000004")

    def damage(a):
        a.flat[7] = value
    _edit_array(latest, "ntilde", damage)
    rc, out, err = run(capsys, "topics", "--model", m)
    assert rc == 0 and "nan" not in out.lower() and "inf" not in out.split(), err[-3000:]
    assert "step 2" in out, out
    phi = str(tmp_path / "phi.npy")
    assert run(capsys, "export", "--model", m, "--output", phi)[0] == 0
    assert np.isfinite(np.load(phi)).all() and (np.load(phi) >= 0).all()
    rc, out, err = run(capsys, "infer", "--model", m, "--shards", world["ds"], "--split",
                       "heldout", "--output", str(tmp_path / "inf"))
    assert rc == 0, err[-3000:]
    one_line_error(capsys, ["topics", "--model", latest], latest)


# ----------------------------------------------------------------------------- item 7

@pytest.mark.parametrize("name", ["ntilde.npy", "state.json", "vocab.tsv", "LATEST"])
def test_i7_a_fifo_in_a_model_never_hangs_topics(world, tmp_path, capsys, name):
    """Item 7: a FIFO as an array, state.json, vocab.tsv or LATEST: topics ends within the
    bound (a checkpoint's file: the previous checkpoint is read; LATEST or vocab.tsv: one
    line naming the FIFO, or a listing from the newest readable checkpoint)."""
    m = str(tmp_path / "m")
    shutil.copytree(world["m"], m)
    where = {"ntilde.npy": CheckpointStore(m).pointer_path(),
             "state.json": CheckpointStore(m).pointer_path(),
             "vocab.tsv": m, "LATEST": os.path.join(m, "checkpoints")}[name]
    path = os.path.join(where, name)
    os.unlink(path)
    os.mkfifo(path)
    rc, out, err = run(capsys, "topics", "--model", m)
    assert "Traceback" not in err, err[-3000:]
    if rc == 0:
        assert "step" in out, out
    else:
        lines = error_lines(err)
        assert rc == 2 and len(lines) == 1 and path in lines[0], err[-3000:]
    if name in ("ntilde.npy", "state.json"):
        assert rc == 0 and "step 2" in out, (rc, out, err[-2000:])


def test_i7_a_fifo_among_the_inputs_is_skipped(tmp_path, capsys):
    """Item 7: a FIFO in an input folder is skipped (main: vectorize hangs on it); named on
    its own it is one line."""
    d = tmp_path / "in"
    d.mkdir()
    for i in range(3):
        (d / ("f%d.txt" % i)).write_text("war army peace treaty soldier %d\n" % i)
    os.mkfifo(str(d / "pipe.txt"))
    c = vectorize(capsys, [str(d)], str(tmp_path / "ds"), "--format", "text")
    assert c["documents_read"] == 3, c
    one_line_error(capsys, ["vectorize", "--input", str(d / "pipe.txt"), "--format", "text",
                            "--output", str(tmp_path / "ds2")], "pipe.txt")


def test_i7_a_model_cannot_hang_infer_with_its_token_pattern(world, tmp_path, capsys):
    """Item 7: "(a|aa)+$" in a model's tokenizer.json, on a document "aaaa...b": infer
    --input refuses the pattern at once (one line naming it) instead of backtracking (on
    4287b45, in this process, the match ran long past the alarm and infer exited 0)."""
    m = str(tmp_path / "m")
    shutil.copytree(world["m"], m)
    tok = os.path.join(m, "tokenizer.json")
    with open(tok) as f:
        rec = json.load(f)
    rec["settings"]["token_pattern"] = "(a|aa)+$"
    with open(tok, "w") as f:
        json.dump(rec, f)
    src = tmp_path / "q.jsonl"
    src.write_text(json.dumps({"id": "q", "text": "a" * 40 + "b"}) + "\n")
    # in a child killed at the bound: the alarm of bounded() is not taken while the regular
    # expression engine backtracks, so in this process a hang would last as long as the match
    one_error_line(capsys, ["infer", "--model", m, "--input", str(src), "--format", "jsonl",
                            "--output", str(tmp_path / "inf")], "(a|aa)+$", "refused",
                   run=run_bounded_child)
