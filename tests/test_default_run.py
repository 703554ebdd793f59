"""What a user meets with the default command (issues 22 and 25): a short log on a non-terminal,
held-out scoring that leaves topic health to the end, the checkpoint published before the
evaluation that follows it, metrics that work for any V, Ctrl-C that keeps the steps done, and
one line about the first numba compile."""
import json
import logging
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import read_run_log

from helpers import warm
from helpers.paths import repo_env
from helpers.uci import uci_file_slice

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    return repo_env()


def _cli(*argv, check=True, **kw):
    p = warm.run(["-m", "pipelines.cli"] + [str(a) for a in argv], cwd=REPO, env=_env(),
                 capture_output=True, text=True, **kw)
    if check:
        assert p.returncode == 0, (argv, p.stdout[-2000:], p.stderr[-3000:])
    return p


@pytest.fixture(scope="module")
def kos_ds(tmp_path_factory, kos_paths):
    """1,200 KOS documents vectorized with a 5 % held-out split."""
    root = tmp_path_factory.mktemp("kos_default")
    src = uci_file_slice(str(root / "uci"), kos_paths[0], kos_paths[1], 1200)
    ds = str(root / "ds")
    _cli("--log-level", "WARNING", "vectorize", "--format", "uci", "--input", src, "--output",
         ds, "--holdout-fraction", 0.05)
    return ds


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, kos_ds):
    """The bare default command on it, output captured (not a terminal)."""
    m = str(tmp_path_factory.mktemp("kos_default_model") / "m")
    p = _cli("train", "--shards", kos_ds, "--output", m, "--topics", 10)
    return m, p


def test_default_train_log_is_short_on_a_non_terminal(default_run):
    """One line per pass, evaluation and checkpoint, not two per step: <= 60 lines in all
    (the old log had two INFO lines per step, ~12 steps per pass here)."""
    m, p = default_run
    lines = (p.stdout + p.stderr).strip().splitlines()
    steps = read_run_log(os.path.join(m, "run_log.jsonl"), "step")
    assert len(steps) > 60                       # more steps than the log may have lines
    assert len(lines) <= 60, "\n".join(lines)
    assert not any("step t=" in l for l in lines), "a per-step line at INFO"
    passes = [l for l in lines if "pass " in l and " done" in l]
    auto = [r["passes_auto"] for r in steps if "passes_auto" in r][-1]
    assert len(passes) == len(auto["scores"])    # one line per pass end


def test_pass_ends_score_completion_and_the_end_adds_topic_health(default_run):
    """The pass-end evaluations (the --passes auto rule's input) are document completion
    only; topic health is evaluated once, in the run's last evaluation."""
    m, _ = default_run
    log = os.path.join(m, "run_log.jsonl")
    evals = [r["metrics"] for r in read_run_log(log, "step") if r.get("metrics")]
    assert len(evals) >= 2
    for e in evals:
        assert "completion_ll_per_token" in e
        assert "dead_topics" not in e and "npmi" not in e, e
    end = read_run_log(log, "end")[-1]["metrics"]
    for k in ("completion_ll_per_token", "dead_topics", "effective_topics", "npmi",
              "topic_diversity"):
        assert k in end, k
    # the last pass's score is the end's: the position was scored once
    auto = [r["passes_auto"] for r in read_run_log(log, "step") if "passes_auto" in r][-1]
    assert end["completion_ll_per_token"] == auto["scores"][-1]


def test_vocabulary_smaller_than_the_top_n_of_every_metric(tmp_path, wiki_sample):
    """V = 20 < 25 (topic diversity's top-N): train publishes its checkpoint and evaluates,
    evaluate and report work (topic_diversity failed in all three)."""
    ds, m, rep = str(tmp_path / "ds"), str(tmp_path / "m"), str(tmp_path / "report.html")
    _cli("--log-level", "WARNING", "vectorize", "--input", wiki_sample, "--output", ds,
         "--holdout-fraction", 0.1, "--keep-n", 20)
    p = _cli("train", "--shards", ds, "--output", m, "--topics", 4, "--passes", 2,
             "--no-progress")
    st = CheckpointStore(m).latest()
    assert st is not None and st.n_words == 20
    end = read_run_log(os.path.join(m, "run_log.jsonl"), "end")[-1]["metrics"]
    assert 0 < end["topic_diversity"] <= 1 and np.isfinite(end["npmi"])
    ev = json.loads(_cli("--log-level", "WARNING", "evaluate", "--model", m, "--shards",
                         ds).stdout)
    assert 0 < ev["topic_diversity"] <= 1 and np.isfinite(ev["umass_mean_sum"])
    _cli("--log-level", "WARNING", "report", "--model", m, "--shards", ds, "--output", rep)
    assert os.path.getsize(rep) > 0
    assert "step" in p.stdout


@pytest.mark.parametrize("failing", ["health_scalars", "document_completion"])
def test_checkpoint_is_published_before_a_failing_evaluation(tmp_path, kos_paths,
                                                            monkeypatch, failing):
    """An evaluation that fails costs nothing trained: topic health (the last evaluation)
    follows the final checkpoint; a failing held-out score (the cadence, every 2 steps)
    publishes the steps done before the error propagates. The old trainer evaluated
    first and published nothing."""
    from helpers.uci import uci_docbatch
    from lda_core.evaluation import metrics, topic_quality
    from lda_core.training.trainer import train
    from lda_core.training.heldout import HeldOut
    from pipelines.training.algorithm_options import build_algorithm
    docs, W = uci_docbatch(kos_paths[0], 500)
    batches = [docs.take(np.arange(lo, lo + 100)) for lo in range(0, 400, 100)]
    held = HeldOut.from_batch(docs.take(np.arange(400, 500)))
    held.health = docs.take(np.arange(400))
    algo = build_algorithm("scvb0", 5, W, settings={}, corpus_size=400,
                           seed=0, vocab_hash=None)

    def broken(*a, **k):
        raise MemoryError("topic health ran out of memory")

    monkeypatch.setattr(topic_quality if failing == "health_scalars" else metrics, failing,
                        broken)
    store = CheckpointStore(str(tmp_path / "m"))
    with pytest.raises(MemoryError):
        train(algo, batches, heldout=held, eval_every=2, checkpoint_store=store,
              checkpoint_every=0, progress=False)
    st = store.latest()
    assert st is not None and st.step == (4 if failing == "health_scalars" else 2)


def test_ctrl_c_publishes_the_steps_done_and_resume_continues(tmp_path, kos_ds):
    """SIGINT in `train` (in-process): the step in progress completes, a checkpoint of the
    steps done since the last one is published, one line is printed and the exit code is
    130; --resume continues from that step."""
    m = str(tmp_path / "m")
    cmd = ["-m", "pipelines.cli", "train", "--shards", kos_ds, "--output", m,
           "--topics", 10, "--passes", 50, "--heldout", "none", "--checkpoint-every", 0,
           "--no-progress"]
    child = warm.popen([str(c) for c in cmd], cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, interruptible=True)
    log = os.path.join(m, "run_log.jsonl")
    deadline = time.time() + 600
    while time.time() < deadline and child.poll() is None:
        if os.path.exists(log) and len(read_run_log(log, "step")) >= 30:
            break
        time.sleep(0.2)
    assert child.poll() is None, child.communicate()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=300)
    assert child.returncode == 130, (out, err)
    last = [l for l in err.strip().splitlines() if l]
    assert last and last[-1].startswith("ldabeam train: interrupted (SIGINT) at step "), err
    assert "Traceback" not in err, err
    steps = read_run_log(log, "step")
    st = CheckpointStore(m).latest()
    assert st is not None and st.step == steps[-1]["step"] >= 30
    assert read_run_log(log, "end")[-1]["interrupted"] is True
    p = _cli("train", "--shards", kos_ds, "--output", m, "--resume", "--max-steps",
             st.step + 5, "--no-progress")
    start = read_run_log(log, "start")[-1]
    assert start["start_step"] == st.step
    assert CheckpointStore(m).latest().step == st.step + 5, p.stderr


def test_first_compile_is_announced_once(caplog):
    """A kernel that is not in the compile cache: one line before compiling, one with the
    seconds after; nothing when every kernel is compiled already."""
    import numba
    from lda_core.training.kernel_warmup import MESSAGE, tiny_corpus, warm_kernels

    @numba.njit(cache=False)
    def token_total(counts):
        s = 0
        for c in counts:
            s += c
        return s

    class Counting:
        """The tiny run's algorithm: its E-step runs a kernel compiled on first call."""

        def __init__(self):
            self.seen = 0

        def local_step(self, batch):
            return token_total(batch.counts)

        def global_step(self, stats):
            self.seen += int(stats)

    made = []

    def make(n_words, n_docs):
        made.append((n_words, n_docs))
        return Counting()

    with caplog.at_level(logging.INFO, logger="lda_core.training.kernel_warmup"):
        took = warm_kernels(make, evaluate=False)
    msgs = [r.getMessage() for r in caplog.records]
    assert took is not None and took > 0
    assert msgs[0] == MESSAGE and msgs[1].startswith("numba kernels compiled in ")
    assert len(msgs) == 2 and made == [(50, tiny_corpus().n_docs)]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lda_core.training.kernel_warmup"):
        assert warm_kernels(make, evaluate=False) is None
    assert not caplog.records


def test_third_party_notices_are_filtered(tmp_path, wiki_sample):
    """vectorize prints no Beam 'apitools not found' warning and no numexpr thread notice."""
    p = _cli("vectorize", "--input", wiki_sample, "--output", str(tmp_path / "ds"),
             "--holdout-fraction", 0.1, "--no-below", 2)
    text = p.stdout + p.stderr
    assert "vectorize: 1 input(s)" in text            # the command's own INFO lines stay
    assert "apitools not found" not in text and "NumExpr defaulting" not in text, text
