"""What `ldabeam` prints and returns when something goes wrong (docs/reliability.md, "Exit codes
and error classes"): a user error (bad option or input, an OSError with its path, memory) is one
line and exit 2; SIGINT / SIGTERM one line and exit 130 / 143; anything else a traceback,
exit 1 and a line asking to report it. Repros of issue 22 items 12-14, on a KOS-derived
dataset and the bundled Wikipedia sample."""
import json
import os
import select
import signal
import subprocess
import time

import pytest

from lda_core.errors import InputError, ResourceError
from pipelines import cli
from pipelines.ingest import dataset
from pipelines.ingest import manifest
from lda_core.storage.vocab_file import Vocabulary

from helpers import warm
from helpers.cli import error_lines, ldabeam, one_error_line as one_line_error
from helpers.paths import repo_env
from helpers.uci import kos_dataset as make_dataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def ds(tmp_path_factory, kos_paths):
    return make_dataset(str(tmp_path_factory.mktemp("kos") / "ds"), kos_paths, n_train=200,
                        n_held=40, n_shards=2)


@pytest.fixture(scope="module")
def model(ds, tmp_path_factory):
    md = str(tmp_path_factory.mktemp("model") / "m")
    rc = cli.main(["train", "--shards", ds, "--output", md, "--topics", "5", "--algorithm",
                   "online-vb", "--max-steps", "1", "--heldout", "none", "--no-progress"])
    assert rc == 0
    return md


@pytest.fixture(scope="module")
def infer_output(model, ds, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("infer") / "theta")
    assert cli.main(["infer", "--model", model, "--shards", os.path.join(ds, "heldout"),
                     "--output", out]) == 0
    return out


@pytest.fixture
def mount_tmpfs(tmp_path):
    """mount(size, read_only) -> a fresh tmpfs directory (skips where mounting is refused)."""
    mounted = []

    def mount(size="64k", read_only=False):
        d = tmp_path / ("fs%d" % len(mounted))
        d.mkdir()
        opts = "size=%s%s" % (size, ",ro" if read_only else "")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(d)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip("cannot mount a tmpfs (%s)" % (r.stderr.strip() or "not permitted"))
        mounted.append(str(d))
        return str(d)
    yield mount
    for d in mounted:
        subprocess.run(["umount", d], capture_output=True)


# ------------------------------------------------------------------ internal errors vs user errors
def test_an_internal_error_is_a_traceback_exit_1_and_a_request_to_report(model, capsys,
                                                                          monkeypatch):
    """A plain ValueError / KeyError from inside a command is a bug, not bad input (the old
    command line printed any ValueError as a one-line user error)."""
    from pipelines.commands import topics

    for exc in (ValueError("operands could not be broadcast together"), KeyError("phi")):
        def broken(args, beam_argv, exc=exc):
            raise exc
        monkeypatch.setattr(topics, "run", broken)
        rc, out, err = ldabeam(capsys, "topics", "--model", model)
        assert rc == 1, err
        assert "Traceback (most recent call last)" in err and type(exc).__name__ in err
        assert err.strip().split("\n")[-1] == (
            "ldabeam topics: internal error (%s): please report this as a bug with the "
            "command line and the traceback" % type(exc).__name__)


def test_memory_error_is_one_line(model, capsys, monkeypatch):
    from pipelines.commands import topics

    def out_of_memory(args, beam_argv):
        raise MemoryError("Unable to allocate 5.02 TiB for an array")
    monkeypatch.setattr(topics, "run", out_of_memory)
    one_line_error(capsys, ["topics", "--model", model], "out of memory", "5.02 TiB",
                   "fewer --topics")


def test_a_huge_topic_state_is_refused_before_numpy_allocates(ds, tmp_path, capsys):
    """K x V far beyond the memory: a ResourceError naming the estimate and the memory
    available (a MemoryError traceback from numpy before)."""
    md = str(tmp_path / "m")
    line = one_line_error(capsys, ["train", "--shards", ds, "--output", md, "--topics",
                                   10 ** 9, "--algorithm", "online-vb", "--heldout", "none",
                                   "--no-progress"], "K = 1000000000", "V = 6906",
                          "needs about", "every copy of the state", "is available",
                          "the largest K that fits is")
    assert "TiB" in line
    assert not os.path.exists(os.path.join(md, "checkpoints"))


def test_state_memory_estimate():
    from lda_core.resources import check_state_memory
    assert check_state_memory(3, 7, available=1000) == 3 * 7 * 8
    with pytest.raises(ResourceError, match=r"K = 1000 topics x V = 1000 words needs at least "
                                            r"7\.6 MiB .* 1\.0 MiB of memory is available"):
        check_state_memory(1000, 1000, available=1 << 20)
    with pytest.raises(OSError):            # a ResourceError is an OSError for callers
        check_state_memory(1000, 1000, available=0)


# ----------------------------------------------------------------------- OSErrors with their path
def test_export_to_an_existing_directory_is_one_line(model, tmp_path, capsys):
    out = tmp_path / "exists"
    out.mkdir()
    one_line_error(capsys, ["export", "--model", model, "--format", "phi-npy", "--output", out],
                   str(out), "Is a directory", "give the path of a file")
    assert os.listdir(str(out)) == []
    assert not [n for n in os.listdir(str(tmp_path)) if n.startswith(".")]


def test_too_long_a_path_is_one_line_naming_it(model, ds, tmp_path, capsys):
    long_name = "x" * 300
    one_line_error(capsys, ["export", "--model", model, "--format", "phi-npy", "--output",
                            tmp_path / (long_name + ".npy")],
                   long_name, "File name too long", "choose a shorter path")
    one_line_error(capsys, ["vectorize", "--input", os.path.join(REPO, "data",
                                                          "enwiki-sample-206pages.xml.bz2"),
                            "--output",
                            tmp_path / long_name / "ds"],
                   long_name, "File name too long")


def test_read_only_and_full_disks_are_one_line(model, ds, mount_tmpfs, capsys):
    ro = mount_tmpfs(read_only=True)
    one_line_error(capsys, ["export", "--model", model, "--format", "phi-npy", "--output",
                            os.path.join(ro, "phi.npy")],
                   ro, "Read-only file system", "writable file system")
    one_line_error(capsys, ["infer", "--model", model, "--shards", os.path.join(ds, "heldout"),
                            "--output", os.path.join(ro, "theta")],
                   ro, "Read-only file system")
    full = mount_tmpfs(size="64k")             # phi is 5 x 6906 float64 = 276 kB
    one_line_error(capsys, ["export", "--model", model, "--format", "phi-npy", "--output",
                            os.path.join(full, "phi.npy")],
                   full, "No space left on device", "free space")
    assert not [n for n in os.listdir(full) if n.startswith(".")]     # no temporary left


# ------------------------------------------------------------------------ input errors (issue 22)
def test_shards_at_an_infer_output_say_so(model, infer_output, tmp_path, capsys):
    """A KeyError on 'word_ids' (a traceback) before, in every command reading shards."""
    for argv in (["train", "--shards", infer_output, "--vocab",
                  os.path.join(model, "vocab.tsv"), "--output", tmp_path / "m2", "--topics",
                  3, "--heldout", "none", "--no-progress"],
                 ["evaluate", "--model", model, "--shards", infer_output],
                 ["infer", "--model", model, "--shards", infer_output, "--output",
                  tmp_path / "t2"]):
        one_line_error(capsys, argv, infer_output, "an output of `ldabeam infer`",
                       "not a dataset shard", "ldabeam vectorize --output DIR")


@pytest.mark.parametrize("content", [b"[1, 2]", b"{not json", b'{"settings": "lower"}',
                                     b'{"settings": {"lowercase": true}}\xff'])
def test_a_malformed_tokenizer_json_names_its_path(model, tmp_path, content):
    md = tmp_path / "m"
    md.mkdir()
    (md / manifest.TOKENIZER_FILE).write_bytes(content)
    with pytest.raises(InputError, match="%s is not a tokenizer record" %
                       os.path.join(str(md), manifest.TOKENIZER_FILE)):
        manifest.read_tokenizer(str(md))


def test_infer_with_a_malformed_tokenizer_json_is_one_line(model, tmp_path, capsys):
    """AttributeError ('list' object has no attribute 'get') before."""
    import shutil
    md = str(tmp_path / "m")
    shutil.copytree(model, md)
    with open(os.path.join(md, manifest.TOKENIZER_FILE), "w") as f:
        json.dump([{"lowercase": True}], f)
    text = tmp_path / "docs.txt"
    text.write_text("a document about the economy and the election\n")
    one_line_error(capsys, ["infer", "--model", md, "--input", text, "--format", "lines",
                            "--output", tmp_path / "theta"],
                   os.path.join(md, manifest.TOKENIZER_FILE), "not a tokenizer record")


def test_a_vocabulary_that_is_not_utf8_names_its_path(tmp_path):
    p = tmp_path / "vocab.tsv"
    p.write_bytes(b"token\tid\tdf\tcf\ncaf\xe9\t0\t1\t1\n")
    with pytest.raises(InputError, match=r"%s is not UTF-8 text \(byte 18\)" % p):
        Vocabulary.read(str(p))


def test_vectorize_of_zero_documents_is_an_error(tmp_path, capsys):
    """Exit 0 with V = 0 before."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "empty.txt").write_bytes(b"")
    one_line_error(capsys, ["vectorize", "--input", src, "--format", "text", "--output",
                            tmp_path / "ds"],
                   "no document was kept", str(src), "1 read: 1 empty", "0 dead letters")


def test_vectorize_names_an_input_file_name_that_is_not_utf8(tmp_path, capsys):
    """Beam's string coder failed on the name with a traceback before, after --overwrite had
    removed the old dataset; now the file is named and the old dataset kept."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "ok.txt").write_text("a text about topics and words and models and more words\n")
    with open(os.path.join(os.fsencode(str(src)), b"caf\xe9.txt"), "wb") as f:
        f.write(b"another text about topics and words\n")
    out = tmp_path / "ds"
    (out / "train").mkdir(parents=True)
    (out / "manifest.json").write_text("{}")
    line = one_line_error(capsys, ["vectorize", "--input", src, "--format", "text", "--output",
                                   out, "--overwrite"],
                          "caf\\xe9.txt", "is not valid UTF-8", "rename the file")
    assert str(src) in line
    assert sorted(os.listdir(str(out))) == ["manifest.json", "train"]


# --------------------------------------------------------------------------- SIGINT and SIGTERM
def _interrupt(argv, sig, marker, cwd):
    """Run ``ldabeam ARGV`` in a subprocess, send ``sig`` once ``marker`` appears on its
    standard error; returns (exit code, standard error)."""
    p = warm.popen(["-m", "pipelines.cli"] + [str(a) for a in argv], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True, env=repo_env(), cwd=str(cwd),
                   interruptible=True)
    seen = ""
    deadline = time.time() + 600
    while marker not in seen and time.time() < deadline and p.poll() is None:
        if select.select([p.stderr], [], [], 1.0)[0]:
            seen += p.stderr.readline()
    assert marker in seen, seen[-3000:]
    # soon after the marker, with seconds of work left: a signal after the command has
    # finished would test nothing (the process then ignores it and exits with the command's code)
    time.sleep(0.2)
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("no exit within 300 s of the signal")
    return p.returncode, seen + err


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_vectorize_interrupted_is_one_line_and_publishes_nothing(tmp_path, sig, code):
    """162 lines of traceback on Ctrl-C before (Beam re-raises the KeyboardInterrupt from a
    DoFn as a RuntimeError); SIGTERM ended the process with no word."""
    out = tmp_path / "ds"
    rc, err = _interrupt(["vectorize", "--output", out], sig,
                         "INFO pipelines.ingest.vectorize: vectorize:", tmp_path)
    lines = error_lines(err)
    assert rc == code, err[-3000:]
    assert "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("ldabeam vectorize: interrupted (%s); " % signal.Signals(sig).name)
    assert not os.path.exists(str(out / dataset.MANIFEST_FILE))


@pytest.mark.slow
def test_infer_and_train_interrupted_are_one_line(model, ds, tmp_path):
    rc, err = _interrupt(["infer", "--model", model, "--shards", ds, "--output",
                          tmp_path / "theta"], signal.SIGINT, "INFO pipelines.infer: infer:",
                         tmp_path)
    assert rc == 130 and "Traceback" not in err, err[-3000:]
    assert error_lines(err) == ["ldabeam infer: interrupted (SIGINT); outputs that were not "
                                "finished are not published (no manifest or summary); run "
                                "the command again"], err[-3000:]
    rc, err = _interrupt(["train", "--shards", ds, "--output", tmp_path / "m", "--topics", 5,
                          "--algorithm", "online-vb", "--passes", 1000, "--minibatch", 20,
                          "--heldout", "none", "--no-progress"], signal.SIGTERM, "pass 1 done",
                         tmp_path)
    assert rc == 143 and "Traceback" not in err, err[-3000:]
    last = error_lines(err)[-1]
    assert last.startswith("ldabeam train: interrupted (SIGTERM) at step "), err[-3000:]
    # the steps done are published, or -- when the signal lands just after a checkpoint was
    # due at that very step -- already are: either way the line names the checkpoint
    tail = "; continue with --resume"
    assert last.endswith(tail), err[-3000:]
    step = int(last.split(" at step ")[1].split(" ")[0])
    named = last[:-len(tail)]
    assert (named.endswith("checkpoints/step-%09d published" % step)
            or "the latest checkpoint is " in named
            and named.endswith("checkpoints/step-%09d" % step)), err[-3000:]


@pytest.mark.slow
def test_stream_stopped_with_ctrl_c_is_one_line(model, tmp_path):
    """Ctrl-C is stream's documented stop: one line (a traceback before), exit 130, and the
    checkpoints it published stay."""
    import shutil
    md = str(tmp_path / "m")
    shutil.copytree(model, md)
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text('{"id": "a", "word_ids": [1, 2], "counts": [1, 1]}\n')
    rc, err = _interrupt(["stream", "--model", md, "--input-glob", src / "*.jsonl",
                          "--window-seconds", 1], signal.SIGINT, "published checkpoint",
                         tmp_path)
    assert rc == 130 and "Traceback" not in err, err[-3000:]
    assert error_lines(err) == ["ldabeam stream: interrupted (SIGINT); the latest published "
                                "checkpoint stays the latest; start the stream again to "
                                "continue from it"], err[-3000:]
    from lda_core.storage.checkpoint import CheckpointStore
    assert CheckpointStore(md).latest().step >= 2
