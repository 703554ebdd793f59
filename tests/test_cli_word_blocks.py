"""`ldabeam train --word-blocks 4` writes checkpoints as 4 word-block files, and every reader
(topics, export, evaluate, infer, report) and `--resume` reads them: the readers give the
same output as from the same model stored as one array, and a resumed run ends on the bits of
an uninterrupted one (online VB and SCVB0; the bundled Wikipedia sample)."""
import json
import os
import shutil

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.state import BLOCKED_FORMAT_VERSION, TopicState
from pipelines import cli
from pipelines.infer import read_theta

B = 4


def ldabeam(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 0, (argv, err[-3000:])
    return out


@pytest.fixture(scope="module")
def ds(wiki_sample, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("wb") / "ds")
    assert cli.main(["--log-level", "WARNING", "vectorize", "--input", wiki_sample, "--output",
                     out, "--holdout-fraction", "0.1"]) == 0
    return out


def train_args(ds, algorithm):
    return ["train", "--shards", ds, "--algorithm", algorithm, "--topics", 5, "--minibatch", 16,
            "--seed", 2, "--passes", 1, "--word-blocks", B, "--checkpoint-every", 2,
            "--eval-every", 0, "--no-progress"]


def is_blocked(path):
    meta = json.load(open(os.path.join(path, "state.json")))
    return (meta["version"] == BLOCKED_FORMAT_VERSION
            and meta["arrays"]["ntilde"]["n_blocks"] == B
            and all(os.path.exists(os.path.join(path, "ntilde.block-%04d.npy" % b))
                    for b in range(B)))


@pytest.mark.slow
def test_readers_read_a_blocked_model_as_the_same_model_in_one_array(ds, tmp_path, capsys):
    blocked = str(tmp_path / "blocked")
    ldabeam(capsys, *train_args(ds, "online-vb"), "--output", blocked)
    store = CheckpointStore(blocked)
    assert all(is_blocked(c.path) for c in store.list_checkpoints())
    # the same model stored as one word-order array (the layout before word blocks)
    plain = str(tmp_path / "plain")
    os.makedirs(plain)
    shutil.copy(os.path.join(blocked, "vocab.tsv"), plain)
    state = store.latest()
    path = CheckpointStore(plain).publish(state)
    assert not is_blocked(path) and TopicState.load(path) == state

    def outputs(m):
        got = {"topics": ldabeam(capsys, "topics", "--model", m, "--top", 8, "--format", "json")}
        ev = json.loads(ldabeam(capsys, "evaluate", "--model", m, "--shards", ds))
        # everything but timings and the model's path
        got["evaluate"] = {k: v for k, v in ev.items() if "seconds" not in k and "time" not in k
                           and not (isinstance(v, str) and m in v)}
        phi = str(tmp_path / ("%s-phi.npy" % os.path.basename(m)))
        ldabeam(capsys, "export", "--model", m, "--format", "phi-npy", "--output", phi)
        got["phi"] = open(phi, "rb").read()
        theta = str(tmp_path / ("%s-theta" % os.path.basename(m)))
        ldabeam(capsys, "infer", "--model", m, "--shards", ds, "--output", theta)
        t = read_theta(theta)
        got["theta"] = {c: t.column(c).to_pylist() for c in ("doc_id", "theta")}
        report = str(tmp_path / ("%s-report.html" % os.path.basename(m)))
        ldabeam(capsys, "report", "--model", m, "--shards", ds, "--output", report)
        got["report"] = os.path.getsize(report) > 0
        return got

    a, b = outputs(blocked), outputs(plain)
    assert a["report"] and b["report"]
    for k in a:
        assert a[k] == b[k], k


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["online-vb", "scvb0"])
def test_resume_from_blocked_checkpoints_is_bit_for_bit(algorithm, ds, tmp_path, capsys):
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    ldabeam(capsys, *train_args(ds, algorithm), "--output", full)
    ldabeam(capsys, *train_args(ds, algorithm), "--output", part, "--max-steps", 3)
    stopped = CheckpointStore(part).latest()
    assert stopped.step == 3 and is_blocked(CheckpointStore(part).path(3))
    ldabeam(capsys, "train", "--shards", ds, "--output", part, "--resume", "--no-progress")
    sa, sb = CheckpointStore(full).latest(), CheckpointStore(part).latest()
    assert sa.step == sb.step > 3
    assert is_blocked(CheckpointStore(part).path(sb.step))
    for k in sa.arrays:
        assert np.asarray(sa.arrays[k]).tobytes() == np.asarray(sb.arrays[k]).tobytes(), k
