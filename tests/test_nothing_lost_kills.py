"""Issue 32, item 10 and the acceptance count: a kill (SIGKILL) or a Ctrl-C (SIGINT) of
`export`, `report` or `infer` at the moment a file of its output is complete under its
temporary name and not yet renamed (the fault point ``atomic-written``) leaves no partial
file under a final name: each file present under its final name is whole (an array loads
and equals a complete export's, a pickle is a whole stream, a page ends with its mark, a
summary parses), and after a Ctrl-C no temporary file is left either. Every arrival
of the point in a gensim export (its side files, then its main file) is killed in turn."""
import json
import os
import pickletools
import subprocess
import sys

import numpy as np
import pytest

from lda_core.faults import ENV
from lda_core.storage import output_paths
from pipelines import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "data", "enwiki-sample-sections.jsonl.bz2")
TRAIN = ["--topics", "4", "--algorithm", "online-vb", "--minibatch", "64", "--seed", "3",
         "--heldout", "none", "--no-progress", "--max-steps", "2"]
RUN_CLI = "import sys; from pipelines import cli; sys.exit(cli.main(sys.argv[1:]))"
KILLED, INTERRUPTED = -9, 130
MIN_KILLS = 10              # the acceptance count per CI run


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("kills")
    ds, m = str(root / "ds"), str(root / "m")
    assert cli.main(["vectorize", "--input", SAMPLE, "--format", "jsonl", "--output", ds,
                     "--holdout-fraction", "0.1", "--no-below", "3", "--keep-n", "3000"]) == 0
    assert cli.main(["train", "--shards", ds, "--output", m] + TRAIN) == 0
    ref = root / "ref"
    ref.mkdir()
    assert cli.main(["export", "--model", m, "--format", "gensim", "--output",
                     str(ref / "g")]) == 0
    return {"root": str(root), "ds": ds, "m": m, "ref": str(ref)}


def commands(world, out):
    """name -> (argv writing into the folder ``out``, the final names it writes)."""
    m, ds = world["m"], world["ds"]
    return {
        "export-phi-npy": ["export", "--model", m, "--output", os.path.join(out, "phi.npy")],
        "export-gensim": ["export", "--model", m, "--format", "gensim", "--output",
                          os.path.join(out, "g")],
        "report": ["report", "--model", m, "--output", os.path.join(out, "r.html"),
                   "--max-docs", "20"],
        "infer": ["infer", "--model", m, "--shards", ds, "--split", "heldout", "--output",
                  os.path.join(out, "inf")],
    }


def killed_run(argv, point_spec, cwd):
    env = dict(os.environ, **{ENV: point_spec})
    p = subprocess.run([sys.executable, "-c", RUN_CLI] + argv, capture_output=True,
                       text=True, env=env, cwd=cwd, timeout=300)
    return p.returncode, p.stderr


def final_files(folder):
    """Files under their final names (temporaries start with '.')."""
    out = []
    for d, dirs, files in os.walk(folder):
        out += [os.path.join(d, f) for f in files if not f.startswith(".")]
    return sorted(out)


def temporaries(folder):
    out = []
    for d, dirs, files in os.walk(folder):
        out += [os.path.join(d, f) for f in files + dirs if ".tmp-" in f]
    return out


def check_whole(world, name, folder):
    """Every file under a final name in ``folder`` is whole."""
    for p in final_files(folder):
        base = os.path.basename(p)
        if name == "export-phi-npy":
            assert np.load(p).shape == (4, 3000), p
        elif name == "export-gensim":
            if base.endswith(".npy"):
                assert np.array_equal(np.load(p), np.load(os.path.join(world["ref"], base))), p
            else:       # a whole pickle stream, read opcode by opcode (nothing unpickled)
                with open(p, "rb") as f:
                    ops = list(pickletools.genops(f.read()))
                assert ops and ops[-1][0].name == "STOP", p
        elif name == "report":
            assert output_paths.file_kind(p) == "report", p
        elif base.endswith(".json"):
            with open(p) as f:
                json.load(f)


def test_kills_and_ctrl_c_leave_no_partial_file_under_a_final_name(world, tmp_path):
    """At least MIN_KILLS kills and Ctrl-Cs of export, report and infer between a file's
    write and its rename: each ends as killed (-9) or interrupted (130), and leaves only whole
    files under final names; a Ctrl-C leaves no temporary file. A gensim export is killed at
    every one of its files in turn."""
    cases = 0
    for name in ("export-phi-npy", "export-gensim", "report", "infer"):
        for sig in ("KILL", "INT"):
            for n in range(1, 10):
                out = str(tmp_path / ("%s-%s-%d" % (name, sig, n)))
                os.makedirs(out)
                argv = commands(world, out)[name]
                rc, err = killed_run(argv, "atomic-written:%d:%s" % (n, sig), str(tmp_path))
                if rc == 0:                 # fewer files than n: every arrival was killed
                    assert n > 1, (name, sig, err[-2000:])
                    break
                assert rc == (KILLED if sig == "KILL" else INTERRUPTED), (name, sig, n, rc,
                                                                          err[-2000:])
                check_whole(world, name, out)
                if sig == "INT":
                    assert temporaries(out) == [], (name, n, temporaries(out))
                    assert "Traceback" not in err, err[-2000:]
                cases += 1
                if name != "export-gensim" or sig == "INT":
                    break                   # one file (or one interrupt) tells it
    assert cases >= MIN_KILLS, cases


@pytest.mark.parametrize("command", ["vectorize", "infer"])
def test_a_kill_while_marking_the_folder_does_not_block_the_rerun(world, tmp_path, command):
    """A directory writer killed while it writes its folder's marker (the first atomic write)
    leaves the marker's temporary sibling; the same command run again, without --overwrite,
    removes it and writes its output (it was refused as 'a file this command did not write')."""
    out = str(tmp_path / "out")
    argv = {"vectorize": ["vectorize", "--input", SAMPLE, "--format", "jsonl", "--output", out,
                          "--no-below", "3", "--keep-n", "3000"],
            "infer": ["infer", "--model", world["m"], "--shards", world["ds"], "--split",
                      "heldout", "--output", out]}[command]
    rc, err = killed_run(argv, "atomic-written:1", str(tmp_path))
    assert rc == KILLED, err[-2000:]
    left = os.listdir(out)
    assert [n for n in left if n.startswith("." + output_paths.MARKER_FILE + ".tmp-")], left
    assert cli.main(argv) == 0
    assert [n for n in os.listdir(out) if ".tmp-" in n] == []
