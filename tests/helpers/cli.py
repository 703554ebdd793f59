"""The ``ldabeam`` command line run in this process: ``pipelines.cli.main(argv)``, its exit
code and what it printed (pytest's ``capsys``). A test that needs the command in a process of
its own (to kill or signal it) uses ``helpers.warm`` instead."""
import numpy as np

from pipelines import cli

#: ``ldabeam train`` settings of the CLI tests: online VB, 8 topics, float64, no progress bar
COMMON = ["--algorithm", "online-vb", "--topics", 8, "--minibatch", 64, "--seed", 4,
          "--dtype", "float64", "--alpha", 0.1, "--eta", 0.01, "--no-progress"]


def ldabeam(capsys, *argv):
    """``ldabeam ARGV`` in this process: (exit code, stdout, stderr)."""
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(capsys, argv, match):
    """``ldabeam ARGV`` fails as a user error: exit 2 and one line (warnings aside) naming
    ``match``."""
    rc, out, err = ldabeam(capsys, *argv)
    assert rc == 2, (rc, out, err)
    lines = [l for l in err.strip().split("\n") if l and "WARNING" not in l]
    assert len(lines) == 1, err
    assert match in lines[0], lines[0]


def error_lines(err):
    """stderr without log records (they start with a timestamp)."""
    return [l for l in err.strip().split("\n") if l and not l[:4].isdigit()]


def one_error_line(capsys, argv, *matches, run=ldabeam):
    """``ldabeam ARGV`` (through ``run``) is one line ``ldabeam COMMAND: error: ...`` naming
    every one of ``matches``, exit 2, no traceback; returns the line."""
    rc, out, err = run(capsys, *argv)
    lines = error_lines(err)
    assert rc == 2, (rc, err[-3000:])
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith("ldabeam %s: error: " % argv[0]), lines[0]
    for m in matches:
        assert m in lines[0], (m, lines[0])
    return lines[0]


def final_arrays(model_dir):
    """(the latest checkpoint's state, its arrays as numpy arrays)."""
    from lda_core.storage.checkpoint import CheckpointStore
    st = CheckpointStore(model_dir).latest()
    return st, {k: np.asarray(v) for k, v in st.arrays.items()}
