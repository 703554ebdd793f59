"""`ldabeam train --passes auto`: the stopping rule, its record in the run log and the
checkpoints, resume under the same rule, and the runners/algorithms that refuse it (real KOS
documents, the dataset of tests/test_cli_train.py)."""
import os

import numpy as np
import pytest

from lda_core.algorithm import available_algorithms
from lda_core.checkpoint import CheckpointStore
from lda_core.run_log import read_run_log
from lda_core.session import AUTO_MIN_GAIN, PassStop
from lda_core.trainer import AUTO_KEY
from tests.test_cli_train import COMMON, _final_arrays, _one_line_error, ldabeam, make_dataset

pytestmark = pytest.mark.skipif("online-vb" not in available_algorithms(),
                                reason="online-vb is not installed")
BPP = 8      # 500 training documents, --minibatch 64


@pytest.fixture(scope="module")
def ds(tmp_path_factory, kos_paths):
    return make_dataset(str(tmp_path_factory.mktemp("kosauto") / "ds"), kos_paths)


def test_rule():
    r = PassStop(min_gain=0.01, max_passes=4)
    assert not r.stopped
    assert not r.add(-8.0)                 # one pass: nothing to compare with
    assert not r.add(-7.9)                 # gained 0.1
    assert r.add(-7.895)                   # gained 0.005 < 0.01
    assert "pass 3 gained" in r.reason()
    assert PassStop.from_info(r.to_info()).scores == r.scores
    assert PassStop.from_info(r.to_info()).stopped
    # a worse pass stops too (compared with the best earlier pass); the cap stops
    assert PassStop(0.01, 4, [-8.0, -7.5, -7.6]).stopped
    capped = PassStop(0.0, 2, [-8.0, -7.0])
    assert capped.stopped and "cap of 2" in capped.reason()
    with pytest.raises(ValueError, match="min_gain"):
        PassStop(min_gain=-1)
    with pytest.raises(ValueError, match="max_passes"):
        PassStop(max_passes=0)


def _auto_records(model):
    return [r for r in read_run_log(os.path.join(model, "run_log.jsonl"), "step")
            if AUTO_KEY in r]


def test_auto_stops_when_the_heldout_score_stops_improving(tmp_path, ds, capsys):
    m = str(tmp_path / "m")
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", m, "--passes", "auto",
                           "--eval-every", 0, *COMMON)
    assert rc == 0, err
    recs = _auto_records(m)
    scores = recs[-1][AUTO_KEY]["scores"]
    n = len(scores)
    assert 2 <= n < recs[-1][AUTO_KEY]["max_passes"]
    # one record per pass end, each with the score evaluated there
    assert [r["step"] for r in recs] == [BPP * (i + 1) for i in range(n)]
    assert [r["metrics"]["completion_ll_per_token"] for r in recs] == scores
    # every pass but the last gained at least min_gain over the best before it
    for i in range(1, n - 1):
        assert scores[i] >= max(scores[:i]) + AUTO_MIN_GAIN
    assert scores[-1] < max(scores[:-1]) + AUTO_MIN_GAIN
    st = CheckpointStore(m).latest()
    assert st.step == BPP * n
    assert st.info["run"][AUTO_KEY]["scores"] == scores and st.info["run"][AUTO_KEY]["stopped"]
    assert "--passes auto: pass %d gained" % n in out
    # resuming a run the rule stopped applies no further step
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", m, "--resume",
                           "--no-progress")
    assert rc == 0, err
    assert CheckpointStore(m).latest().step == BPP * n


@pytest.mark.parametrize("stop", [12, 16])   # mid-pass 2; exactly at the end of pass 2
def test_auto_resume_continues_the_same_rule(tmp_path, ds, capsys, stop):
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    args = ["--shards", ds, "--passes", "auto", "--checkpoint-every", 5, "--eval-every", 0]
    assert ldabeam(capsys, "train", "--output", full, *args, *COMMON)[0] == 0
    rc, out, err = ldabeam(capsys, "train", "--output", part, "--max-steps", stop, *args,
                           *COMMON)
    assert rc == 0, err
    assert len(CheckpointStore(part).latest().info["run"][AUTO_KEY]["scores"]) == stop // BPP
    rc, out, err = ldabeam(capsys, "train", "--output", part, "--shards", ds, "--resume",
                           "--no-progress")
    assert rc == 0, err
    sa, a = _final_arrays(full)
    sb, b = _final_arrays(part)
    assert sa.step == sb.step
    assert sa.info["run"][AUTO_KEY] == sb.info["run"][AUTO_KEY]
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def test_auto_refused_where_it_cannot_run(tmp_path, ds, capsys):
    m = str(tmp_path / "m")
    base = ["train", "--shards", ds, "--output", m, "--topics", 5, "--passes", "auto"]
    _one_line_error(capsys, base + ["--runner", "DirectRunner"], "in-process runner only")
    _one_line_error(capsys, base + ["--heldout", "none"], "held-out")
    if "batch-vb" in available_algorithms():
        _one_line_error(capsys, base + ["--algorithm", "batch-vb"], "batch-vb: give --passes N")
    with pytest.raises(SystemExit):     # argparse: usage and one error line
        ldabeam(capsys, "train", "--shards", ds, "--output", m, "--topics", 5,
                "--passes", "often")
    assert "expected a number of passes or 'auto', got 'often'" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(m, "checkpoints"))
