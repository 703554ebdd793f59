"""`ldabeam train --passes auto`: the stopping rule, its record in the run log and the
checkpoints, resume under the same rule, and the runners/algorithms that refuse it (real KOS
documents, the dataset of tests/test_cli_train.py)."""
import os

import numpy as np
import pytest

from lda_core.algorithms.algorithm import available_algorithms
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import read_run_log
from lda_core.training import session as session_mod
from lda_core.training.pass_stop import AUTO_KEY, AUTO_MIN_GAIN, PassStop
from helpers.cli import COMMON, final_arrays as _final_arrays, ldabeam, one_line_error as _one_line_error
from helpers.uci import kos_dataset as make_dataset

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
    # the model kept is the best pass's (the last one when it did not score lower)
    best = max(range(n), key=lambda i: (scores[i], -i))
    st = CheckpointStore(m).latest()
    assert st.step == BPP * (best + 1)
    assert st.info["run"][AUTO_KEY]["scores"] == scores and st.info["run"][AUTO_KEY]["stopped"]
    assert st.info["run"][AUTO_KEY]["kept_pass"] == best + 1
    assert "--passes auto: pass %d gained" % n in out
    # the summary names the cap, not '20 passes planned', and the pass kept (issue 30)
    assert "--passes auto: at most 20 passes" in out and "passes planned" not in out
    assert "model kept: pass %d" % (best + 1) in out
    # resuming a run the rule stopped applies no further step
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", m, "--resume",
                           "--no-progress")
    assert rc == 0, err
    assert CheckpointStore(m).latest().step == BPP * (best + 1)


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


def test_collapse_stops_whatever_the_patience():
    """Issue 30, item 4: a pass far below the best stops at once; the best pass is kept."""
    r = PassStop(min_gain=0.005, max_passes=20, patience=3)
    assert not r.add(-8.7, step=8) and not r.add(-8.6, step=16)
    assert r.add(-9.15, step=24)           # 0.55 below the best: a collapse, patience or not
    assert r.collapsed and "collapsed" in r.reason()
    assert r.best == 1 and r.best_step() == 16
    back = PassStop.from_info(r.to_info())
    assert back.steps == [8, 16, 24] and back.best_step() == 16
    assert r.to_info()["kept_pass"] == 2


def test_auto_keeps_the_best_pass_not_the_last(tmp_path, ds, capsys, monkeypatch):
    """Issue 30, item 4: passes scoring -8.0, -7.5, then -7.9 (held-out scores scripted by
    step, the training itself real): the model kept is pass 2's checkpoint, the run log says
    so, and a resume applies no step."""
    real = session_mod.timed_evaluate
    scripted = {BPP: -8.0, 2 * BPP: -7.5, 3 * BPP: -7.9}

    def fake(algorithm, heldout, **kw):
        metrics = dict(real(algorithm, heldout, **kw))
        if int(algorithm.step) in scripted:
            metrics["completion_ll_per_token"] = scripted[int(algorithm.step)]
        return metrics
    monkeypatch.setattr(session_mod, "timed_evaluate", fake)
    m = str(tmp_path / "m")
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", m, "--passes", "auto",
                           "--eval-every", 0, *COMMON)
    assert rc == 0, err
    st = CheckpointStore(m).latest()
    assert st.step == 2 * BPP                     # main kept pass 3's (step 24)
    rule = st.info["run"][AUTO_KEY]
    assert rule["scores"] == [-8.0, -7.5, -7.9] and rule["kept_pass"] == 2
    kept = [r for r in read_run_log(os.path.join(m, "run_log.jsonl"))
            if r.get("event") == "passes_auto_kept"]
    assert kept and kept[-1]["kept_pass"] == 2 and kept[-1]["step"] == 2 * BPP
    assert CheckpointStore(m).list_checkpoints()[-1].step == 2 * BPP   # the later one is gone
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", m, "--resume",
                           "--no-progress")
    assert rc == 0, err
    assert CheckpointStore(m).latest().step == 2 * BPP


def test_patience_rule():
    r = PassStop(min_gain=0.01, max_passes=10, patience=2)
    for x in (-8.0, -7.9, -7.895):        # pass 3 gained < 0.01: one stale pass, go on
        assert not r.add(x)
    assert not r.add(-7.7)                # pass 4 improved on the best: the count restarts
    assert not r.add(-7.71)
    assert r.add(-7.695)                  # passes 5-6 both < best + 0.01
    assert "passes 5-6 gained" in r.reason() and "patience 2" in r.reason()
    back = PassStop.from_info(r.to_info())
    assert back.patience == 2 and back.stopped and back.scores == r.scores
    with pytest.raises(ValueError, match="patience"):
        PassStop(patience=0)


def test_patience_runs_on_and_resume_keeps_it(tmp_path, ds, capsys):
    one, two, part = (str(tmp_path / n) for n in ("one", "two", "part"))
    args = ["--shards", ds, "--passes", "auto", "--eval-every", 0, "--checkpoint-every", 5]
    assert ldabeam(capsys, "train", "--output", one, *args, *COMMON)[0] == 0
    rc, out, err = ldabeam(capsys, "train", "--output", two, *args, *COMMON,
                           "--passes-patience", 2)
    assert rc == 0, err
    s1 = CheckpointStore(one).latest().info["run"][AUTO_KEY]
    s2 = CheckpointStore(two).latest().info["run"][AUTO_KEY]
    assert s1["patience"] == 1 and s2["patience"] == 2
    n1 = len(s1["scores"])
    # the same passes up to the first stale one, then patience 2 goes on
    assert s2["scores"][:n1] == s1["scores"] and len(s2["scores"]) > n1
    assert PassStop.from_info(s2).stopped
    # stopped mid-run, resumed: the checkpoint's patience continues (another is refused)
    stop = BPP * n1 + 3
    assert ldabeam(capsys, "train", "--output", part, "--max-steps", stop, *args, *COMMON,
                   "--passes-patience", 2)[0] == 0
    _one_line_error(capsys, ["train", "--output", part, "--shards", ds, "--resume",
                             "--passes-patience", 3], "differs from the checkpoint's 2")
    rc, out, err = ldabeam(capsys, "train", "--output", part, "--shards", ds, "--resume",
                           "--no-progress")
    assert rc == 0, err
    sa, a = _final_arrays(two)
    sb, b = _final_arrays(part)
    assert sa.step == sb.step and sa.info["run"][AUTO_KEY] == sb.info["run"][AUTO_KEY]
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def test_auto_on_the_beam_runner(tmp_path, ds, capsys):
    """--passes auto on the Beam trainer (DirectRunner, windows of 5 minibatches): windows
    end at pass ends, where the rule is fed the held-out score; the passes and their scores
    are the in-process run's (the Beam E-step sums the same statistics in another order)."""
    ref, beam = str(tmp_path / "ref"), str(tmp_path / "beam")
    args = ["--shards", ds, "--passes", "auto", "--eval-every", 0] + COMMON
    assert ldabeam(capsys, "train", "--output", ref, *args)[0] == 0
    rc, out, err = ldabeam(capsys, "train", "--output", beam, *args, "--runner",
                           "DirectRunner", "--minibatches-per-window", 5,
                           "--keep-checkpoints", 0)
    assert rc == 0, err
    want = CheckpointStore(ref).latest().info["run"][AUTO_KEY]
    got = CheckpointStore(beam).latest().info["run"][AUTO_KEY]
    n = len(want["scores"])
    assert len(got["scores"]) == n and got["stopped"]
    assert np.allclose(got["scores"], want["scores"], rtol=0, atol=1e-4)
    # one checkpoint per window; every pass end is a window end
    steps = [c.step for c in CheckpointStore(beam).list_checkpoints()]
    # (those after the best pass are removed: the best pass's is the model)
    kept = want["kept_pass"]
    assert got["kept_pass"] == kept
    assert all(BPP * (i + 1) in steps for i in range(kept)) and steps[-1] == BPP * kept
    assert "--passes auto: pass %d gained" % n in out
    assert [r["step"] for r in _auto_records(beam)] == [BPP * (i + 1) for i in range(n)]


def test_default_passes(tmp_path, ds, capsys):
    """Nothing but --topics: scvb0 with --passes auto when there is a held-out set; one pass
    without one; online-vb keeps one pass."""
    if "scvb0" not in available_algorithms():
        pytest.skip("scvb0 is not installed")
    m = str(tmp_path / "m")
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", m, "--topics", 8,
                           "--no-progress")
    assert rc == 0, err
    st = CheckpointStore(m).latest()
    assert st.algorithm == "scvb0" and st.info["run"]["minibatch"] == 100
    auto = st.info["run"][AUTO_KEY]
    assert auto["stopped"] and auto["patience"] == 1 and len(auto["scores"]) >= 2
    assert st.step == 5 * len(auto["scores"])          # 500 documents, S = 100
    m1 = str(tmp_path / "m1")
    assert ldabeam(capsys, "train", "--shards", ds, "--output", m1, "--topics", 8,
                   "--heldout", "none", "--no-progress")[0] == 0
    st = CheckpointStore(m1).latest()
    assert st.step == 5 and AUTO_KEY not in st.info["run"]
    m2 = str(tmp_path / "m2")
    assert ldabeam(capsys, "train", "--shards", ds, "--output", m2, "--topics", 8,
                   "--algorithm", "online-vb", "--no-progress")[0] == 0
    st = CheckpointStore(m2).latest()
    assert st.algorithm == "online-vb" and st.step == 2 and AUTO_KEY not in st.info["run"]


def test_auto_refused_where_it_cannot_run(tmp_path, ds, capsys):
    m = str(tmp_path / "m")
    base = ["train", "--shards", ds, "--output", m, "--topics", 5, "--passes", "auto"]
    _one_line_error(capsys, base + ["--runner", "DirectRunner", "--detach"],
                    "--passes auto does not apply with --detach")
    _one_line_error(capsys, base + ["--heldout", "none"], "held-out")
    _one_line_error(capsys, ["train", "--shards", ds, "--output", m, "--topics", 5,
                             "--passes", 3, "--passes-patience", 2],
                    "--passes-patience applies only with --passes auto")
    if "batch-vb" in available_algorithms():
        _one_line_error(capsys, base + ["--algorithm", "batch-vb"], "batch-vb: give --passes N")
    with pytest.raises(SystemExit):     # argparse: usage and one error line
        ldabeam(capsys, "train", "--shards", ds, "--output", m, "--topics", 5,
                "--passes", "often")
    assert "expected a number of passes or 'auto', got 'often'" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(m, "checkpoints"))
