"""The training session (lda_core.training.session): every runner refuses the same bad step the same way.

The same injections go into each runner -- the in-process trainer, the Beam trainer
unrolled and one pipeline per minibatch, a detached window, the sequential samplers' Beam
window (two of them) and the streaming job's global step:

* non-finite statistics (the E-step of minibatch 3 returns NaN; the VB global step refuses
  them),
* a step whose log info holds a non-finite checked value (``score`` = inf), which only the
  session's check catches, and
* a step that leaves a non-finite value in the new state (the lazy scale of λ becomes NaN)
  with a clean info, which only the session's state check catches.

Each time: :class:`lda_core.training.session.TrainingError` "minibatch 3 ... could not be applied:
... non-finite ...", and the latest checkpoint is the one before that minibatch.
Also: the statistics of every algorithm round-trip through ``to_bytes`` as data (a damaged
byte string is refused; a pickle is never accepted), and the multi-process scratch folder is
private and unpredictable.
"""
import math
import os
import pickle
import stat

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.algorithms.online_vb import OnlineVB
from lda_core.training.session import CHECKED, TrainingError, apply_step, check_info, eval_due

from helpers.trainers import new_vb
from helpers.uci import kos_train_dataset as make_kos_dataset

REFUSAL = r"minibatch 3\b.*could not be applied: .*non-finite"
BAD_T = 2          # the global step t (0-based) whose minibatch is poisoned: minibatch 3


@pytest.fixture(scope="module")
def kos200(kos_paths, tmp_path_factory):
    """200 KOS documents in 2 shards: 4 minibatches of 50."""
    return make_kos_dataset(kos_paths, str(tmp_path_factory.mktemp("kos200") / "ds"), 200,
                            n_shards=2)


def _poison_stats(monkeypatch):
    real = OnlineVB.local_step

    def local_step(self, batch, **kw):
        st = real(self, batch, **kw)
        if self.step == BAD_T:
            st.sstats = st.sstats * np.nan
        return st
    monkeypatch.setattr(OnlineVB, "local_step", local_step)


def _after_global_step(monkeypatch, change):
    """OnlineVB's global step, with ``change(algo, info) -> info`` applied after minibatch 3."""
    real = OnlineVB.global_step

    def global_step(self, stats):
        info = real(self, stats)
        return change(self, info) if self.step == BAD_T + 1 else info
    monkeypatch.setattr(OnlineVB, "global_step", global_step)


def _poison_info(monkeypatch):
    _after_global_step(monkeypatch, lambda algo, info: dict(info, score=float("inf")))


def _poison_state(monkeypatch):
    def nan_scale(algo, info):
        algo._pi = float("nan")          # every λ entry is a + π Ñ
        return info
    _after_global_step(monkeypatch, nan_scale)


POISONS = {"stats": _poison_stats, "info": _poison_info, "state": _poison_state}


def _latest_position(md):
    st = CheckpointStore(md).latest()
    return None if st is None else st.info["trainer"]["minibatches_done"]


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_in_process_trainer_refuses(kos200, tmp_path, monkeypatch, poison):
    from lda_core.training.trainer import train
    from pipelines.training.shard_stream import ShardStream
    algo, files = new_vb(kos200)
    POISONS[poison](monkeypatch)
    md = str(tmp_path / "m")
    with pytest.raises(TrainingError, match=REFUSAL):
        train(algo, ShardStream(files, minibatch=50, seed=1), progress=False,
              checkpoint_store=CheckpointStore(md), checkpoint_every=2)
    assert _latest_position(md) == 2


@pytest.mark.parametrize("poison", sorted(POISONS))
@pytest.mark.parametrize("unroll", [True, False])
def test_beam_trainer_refuses(kos200, tmp_path, monkeypatch, poison, unroll):
    from pipelines.training import beam_train
    algo, files = new_vb(kos200)
    POISONS[poison](monkeypatch)
    md = str(tmp_path / "m")
    with pytest.raises(TrainingError, match=REFUSAL):
        beam_train.train(algo, files, md, minibatch=50, seed=1, minibatches_per_window=2,
                         unroll=unroll, beam_argv=["--runner=DirectRunner"], progress=False)
    assert _latest_position(md) == 2


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_detached_window_refuses(kos200, tmp_path, monkeypatch, poison):
    from lda_core.storage.run_log import RunLog, read_run_log
    from pipelines.training import beam_train
    algo, files = new_vb(kos200)
    md = str(tmp_path / "m")
    os.makedirs(md)
    log = os.path.join(md, "run_log.jsonl")
    kw = dict(minibatch=50, seed=1, minibatches_per_window=2, detach=True,
              beam_argv=["--runner=DirectRunner"], progress=False)
    with RunLog(log) as rl:
        beam_train.train(algo, files, md, run_log=rl, **kw).wait()
    POISONS[poison](monkeypatch)
    # the job raises the window's TrainingError (wrapped by the runner in its own error)
    with pytest.raises(Exception, match=REFUSAL):
        with RunLog(log) as rl:
            beam_train.train(algo, files, md, run_log=rl, resume=True, **kw).wait()
    assert _latest_position(md) == 2
    err = read_run_log(log, "error")
    assert len(err) == 1 and err[0]["step"] == 3 and "non-finite" in err[0]["message"]


@pytest.mark.parametrize("poison", ["raises", "info"])
def test_sequential_window_refuses(kos200, tmp_path, monkeypatch, poison):
    from lda_core.algorithms.online_samplers import OLDA
    from pipelines.training import beam_sequential
    from pipelines.ingest import dataset
    from lda_core.storage.vocab_file import Vocabulary
    from pipelines.training.algorithm_options import build_algorithm
    files = dataset.resolve_shards(kos200)
    V = len(Vocabulary.read(kos200))
    algo = build_algorithm("o-lda", 5, V, settings={}, corpus_size=200, seed=1,
                           vocab_hash=dataset.check_vocab_hash(files, None))
    assert isinstance(algo, OLDA)
    real = OLDA.process

    def process(self, batch):
        if self.step == BAD_T:
            if poison == "raises":
                raise FloatingPointError("non-finite counts (injected)")
            real(self, batch)
            return {"docs": batch.n_docs, "score": float("nan")}
        return real(self, batch)
    monkeypatch.setattr(OLDA, "process", process)
    md = str(tmp_path / "m")
    with pytest.raises(TrainingError, match=REFUSAL):
        beam_sequential.train(algo, files, md, minibatch=50, seed=1, minibatches_per_window=2,
                              beam_argv=["--runner=DirectRunner"], progress=False)
    assert _latest_position(md) == 2


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_stream_global_step_refuses(tmp_path, monkeypatch, poison):
    from apache_beam.transforms import window
    from pipelines.streaming import stream_step
    from pipelines.ingest import synthetic
    from helpers.streams import stream_model as _model
    spec = synthetic.SyntheticSpec(n_docs=200, n_words=300, n_topics=5, doc_length=50.0,
                                   alpha=0.1, eta=0.05, seed=3)
    batch, vocab = synthetic.generate(spec), synthetic.vocabulary(spec)
    model, _, algo0 = _model(tmp_path, vocab)
    POISONS[poison](monkeypatch)
    fn = stream_step.ApplyGlobalStepFn(model, order="arrival")
    fn.setup()

    class Cell:
        v = None

        def read(self):
            return self.v

        def write(self, x):
            self.v = x

    applied = Cell()
    algo = OnlineVB.from_state(algo0.to_state())
    for w in range(4):
        mb = batch.take(np.arange(50 * w, 50 * w + 50))
        item = (w + 1, mb, None, None)          # E-step recomputed at the current state
        if w < BAD_T:
            list(fn._apply([item], applied))
            continue
        with pytest.raises(TrainingError, match=REFUSAL):
            list(fn._apply([item], applied))
        break
    assert CheckpointStore(model).pointer() == BAD_T
    del algo


def test_check_info_and_apply_step():
    assert check_info({"rho": 0.5, "score": None, "other": float("nan")}) is None
    for k in CHECKED:
        assert k in check_info({k: float("nan")})

    def boom(_):
        raise ArithmeticError("overflow")
    assert apply_step(boom, 1) == (None, "overflow")
    info, err = apply_step(lambda x: {"rho": x}, 0.5, extra={"elbo": -math.inf})
    assert info is None and "elbo" in err
    assert eval_due(4, 1, 4) and not eval_due(5, 1, 4) and eval_due(9, 5, 4)
    assert not eval_due(8, 0, 4) and not eval_due(8, 3, 0)


# ------------------------------------------------------------------ statistics as data

def test_check_state_names_the_non_finite_part_of_each_state(kos_paths):
    from lda_core.training.session import check_state
    for st in _stats_of_each(kos_paths):
        algo = st.algo
        info, err = apply_step(algo.global_step, st)
        assert err is None and check_state(algo) is None, err
        name, attr = {"online-vb": ("λ", "_ntilde_colsum"), "scvb0": ("N^Φ", "_ntilde"),
                      "sparse-gibbs-vb": ("λ^N", "_vals")}[algo.name]
        arr = getattr(algo, attr)
        saved = arr.copy()
        flat = arr.reshape(-1) if attr != "_ntilde" else arr[algo._touched_rows[-1]]
        flat[-1] = np.inf
        assert apply_step(lambda: {})[1] is None          # a plain function: info check only
        assert check_state(algo) == ("the step left non-finite values in the state (%s)"
                                     % name)
        arr[...] = saved
        assert check_state(algo) is None


def _stats_of_each(kos_paths):
    from lda_core.algorithms.scvb0 import SCVB0
    from lda_core.algorithms.sparse_gibbs_vb import SparseGibbsVB
    from helpers.uci import read_kos
    batch, tokens = read_kos(kos_paths[0], kos_paths[1], 40)
    V = len(tokens)
    out = []
    for algo in [OnlineVB(4, V, corpus_size=400, seed=1),
                 SCVB0(4, V, corpus_tokens=40000, seed=1),
                 SparseGibbsVB(4, V, corpus_size=400, seed=1)]:
        st = algo.local_step(batch)
        st.algo = algo
        out.append(st)
    return out


def test_every_algorithms_statistics_round_trip_as_data(kos_paths):
    from pipelines.training.beam_stats import decode_stats, encode_stats
    for st in _stats_of_each(kos_paths):
        b = st.to_bytes()
        back = type(st).from_bytes(b)
        assert back.to_bytes() == b
        assert back.counters() == st.counters() and st.n_docs == 40
        assert decode_stats(encode_stats(st)).to_bytes() == b
        merged = type(st).from_bytes(b).merge(type(st).from_bytes(b))
        assert merged.n_docs == 80 and merged.n_tokens == 2 * st.n_tokens
        # a flipped payload byte and a truncation are refused with a clear error
        bad = bytearray(b)
        bad[-3] ^= 0xFF
        with pytest.raises(ValueError, match="CRC-32"):
            type(st).from_bytes(bytes(bad))
        with pytest.raises(ValueError, match="truncated|trailing"):
            type(st).from_bytes(b[:-5])


def test_a_pickle_or_a_foreign_class_is_never_decoded(kos_paths):
    from pipelines.training.beam_stats import decode_stats
    st = _stats_of_each(kos_paths)[1]
    with pytest.raises(ValueError):
        decode_stats(b"SP" + pickle.dumps(st))
    cls = b"os:system"
    with pytest.raises(ValueError, match="not a statistics class"):
        decode_stats(b"SB" + len(cls).to_bytes(2, "little") + cls + b"x")
    cls = b"lda_core.docbatch:DocBatch"
    with pytest.raises(ValueError, match="not a statistics class"):
        decode_stats(b"SB" + len(cls).to_bytes(2, "little") + cls + b"x")


# ------------------------------------------------------------------ private scratch folders

def test_scratch_folders_are_fresh_private_and_unpredictable(tmp_path):
    """A run's scratch folder is created fresh (a folder someone prepared at the old,
    predictable name is never used), mode 0700, owned by this user."""
    from pipelines.runtime import scratch as scratch_space
    from pipelines.runtime.beam_options import runner_config
    from pipelines.training.beam_run import default_scratch_root
    md = str(tmp_path / "model")
    root = default_scratch_root(md, runner_config("DirectRunner", []),
                                scratch_dir=str(tmp_path / "shm"))
    os.makedirs(os.path.dirname(root))
    # what another user could prepare at the name the old code used: world-writable, with a
    # planted statistics file
    os.makedirs(root)
    os.chmod(root, 0o777)
    with open(os.path.join(root, "stats-000000000.bin"), "wb") as f:
        f.write(b"planted")
    a, b = scratch_space.new_scratch(root), scratch_space.new_scratch(root)
    assert a != b and root not in (a, b)
    for p in (a, b):
        st = os.lstat(p)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
        assert st.st_uid == os.geteuid() and os.listdir(p) == []
    os.chmod(a, 0o755)
    with pytest.raises(PermissionError, match="not a private folder"):
        scratch_space.check_private(a)
    scratch_space.remove_stale_scratch(root)
    assert not os.path.exists(a) and not os.path.exists(b)


@pytest.mark.serial
def test_multi_process_run_uses_a_private_scratch_folder(kos200, tmp_path, monkeypatch):
    """The Beam trainer with worker processes: its scratch folder is one that
    ``new_scratch`` created (0700) and it is gone after the run."""
    from pipelines.runtime import scratch as scratch_space
    from pipelines.training import beam_train
    made = []
    real = scratch_space.new_scratch

    def spy(root):
        p = real(root)
        made.append((p, stat.S_IMODE(os.lstat(p).st_mode)))
        return p
    monkeypatch.setattr(scratch_space, "new_scratch", spy)
    algo, files = new_vb(kos200)
    beam_train.train(algo, files, str(tmp_path / "m"), minibatch=50, seed=1,
                     minibatches_per_window=4, max_steps=2, scratch_dir=str(tmp_path / "shm"),
                     beam_argv=["--runner=DirectRunner",
                                "--direct_running_mode=multi_processing",
                                "--direct_num_workers=2"], progress=False)
    assert len(made) == 1 and made[0][1] == 0o700
    assert not os.path.exists(made[0][0])


# -- the minibatch size S: one name, stored once ----------------------------------------------

def _train_cli(*argv):
    import contextlib
    import io
    from pipelines import cli
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return cli.main([str(a) for a in argv])


def test_the_minibatch_size_is_stored_once_and_resume_reads_it(kos200, tmp_path):
    """A checkpoint records S in its run information only (the algorithm's parameters do not
    hold it: no step uses it), and --resume without --minibatch continues with that value;
    a different --minibatch is refused against it."""
    md = str(tmp_path / "m")
    common = ["--shards", kos200, "--output", md, "--algorithm", "online-vb", "--topics", 3,
              "--heldout", "none", "--no-progress", "--passes", 1]
    assert _train_cli("train", *common, "--minibatch", 40, "--max-steps", 2) == 0
    first = CheckpointStore(md).latest()
    assert first.info["run"]["minibatch"] == 40 and "batch_size" not in first.params
    assert _train_cli("train", *common, "--resume", "--minibatch", 50) == 2
    assert _train_cli("train", *common, "--resume") == 0
    last = CheckpointStore(md).latest()
    # 200 documents in minibatches of 40: the pass is 5 steps, 3 of them after the resume
    assert (last.step, last.docs_seen, last.info["run"]["minibatch"]) == (5, 200, 40)
    assert "batch_size" not in last.params


def test_resume_reads_the_minibatch_of_a_checkpoint_written_before_it_was_stored_once(
        kos200, tmp_path):
    """A checkpoint of an older version (S among the algorithm's parameters as batch_size,
    none in its run information) resumes with that S, and what it publishes next records S in
    the run information only; recorded_minibatch is the one reader of the older key."""
    from lda_core.training.run_params import recorded_minibatch
    assert recorded_minibatch({"minibatch": 40}, {"batch_size": 7}) == 40
    assert recorded_minibatch({"seed": 1}, {"batch_size": 7}) == 7
    assert recorded_minibatch(None, None) is None
    md = str(tmp_path / "m")
    common = ["--shards", kos200, "--output", md, "--algorithm", "online-vb", "--topics", 3,
              "--heldout", "none", "--no-progress", "--passes", 1]
    assert _train_cli("train", *common, "--minibatch", 40, "--max-steps", 2) == 0
    store = CheckpointStore(md)
    old = store.latest()
    del old.info["run"]["minibatch"]       # the older layout of the same checkpoint
    old.params["batch_size"] = 40
    store.publish(old)                      # the newest checkpoint, at the same step
    again = CheckpointStore(md).latest()
    assert "minibatch" not in again.info["run"] and again.params["batch_size"] == 40
    assert _train_cli("train", *common, "--resume", "--minibatch", 50) == 2
    assert _train_cli("train", *common, "--resume") == 0
    last = CheckpointStore(md).latest()
    assert (last.step, last.docs_seen, last.info["run"]["minibatch"]) == (5, 200, 40)
    assert "batch_size" not in last.params
