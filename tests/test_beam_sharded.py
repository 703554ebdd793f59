"""The word-sharded exchange (pipelines.training.beam_sharded): no worker holds the whole
state, and the result is the in-process trainer's, bit for bit, at the same (seed, S, P, B)
for any number of worker processes, and for a run killed at one worker count and resumed at
another. Real KOS documents."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from lda_core.errors import UsageError
from test_beam_pieces import _beam, _inprocess, _mp, _same_bits, kos_pieces  # noqa: F401

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
P, B = 4, 3


def _vb(dataset_dir, **kw):
    from lda_core.algorithms.online_vb import OnlineVB
    from pipelines.ingest import dataset
    from lda_core.storage.vocab_file import Vocabulary
    files = dataset.resolve_shards(dataset_dir)
    vh = dataset.check_vocab_hash(files, None)
    V = len(Vocabulary.read(dataset_dir))
    D = dataset.count_documents(files)
    settings = dict(batch_size=40, corpus_size=D, seed=3, dtype="float64", tau0=16.0,
                    word_blocks=B)
    settings.update(kw)
    return OnlineVB(5, V, vocab_hash=vh, **settings), files


def _scvb0(dataset_dir, **kw):
    from lda_core.algorithms.scvb0 import SCVB0
    from pipelines.ingest import dataset
    from lda_core.storage.vocab_file import Vocabulary
    files = dataset.resolve_shards(dataset_dir)
    vh = dataset.check_vocab_hash(files, None)
    V = len(Vocabulary.read(dataset_dir))
    settings = dict(batch_size=40, seed=3, word_blocks=B)
    settings.update(kw)
    return SCVB0(6, V, vocab_hash=vh, **settings), files


def _sharded(algo, files, md, workers, **kw):
    return _beam(algo, files, md, _mp(workers), pieces_per_minibatch=P,
                 exchange="word-blocks", **kw)


@pytest.mark.parametrize("workers", [1, 2, pytest.param(4, marks=pytest.mark.slow),
                                     pytest.param(8, marks=pytest.mark.slow)])
def test_online_vb_same_bits_as_inprocess_for_any_worker_count(kos_pieces, tmp_path, workers):
    ref, files = _vb(kos_pieces)
    _inprocess(ref, files, pieces=P)
    algo, _ = _vb(kos_pieces)
    res = _sharded(algo, files, str(tmp_path / "m"), workers)
    assert res.beam_metrics["documents"] == 300
    _same_bits(ref, res.algorithm)
    assert np.array_equal(ref.topic_word(), res.algorithm.topic_word())


@pytest.mark.parametrize("workers", [2, pytest.param(4, marks=pytest.mark.slow),
                                     pytest.param(8, marks=pytest.mark.slow)])
def test_scvb0_same_bits_as_inprocess_for_any_worker_count(kos_pieces, tmp_path, workers):
    ref, files = _scvb0(kos_pieces)
    _inprocess(ref, files, pieces=P)
    algo, _ = _scvb0(kos_pieces)
    res = _sharded(algo, files, str(tmp_path / "m"), workers)
    assert res.beam_metrics["documents"] == 300
    _same_bits(ref, res.algorithm)


def test_reseeding_and_hyperparameter_steps_cross_blocks_unchanged(kos_pieces, tmp_path):
    """Re-seeding splits (which touch every block) and the α / η Newton steps (sums over
    every block) on the word-sharded exchange land on the in-process bits."""
    kw = dict(reseed=0.3, optimize_alpha=True, optimize_eta=True)
    from lda_core.storage.run_log import RunLog, read_run_log
    ref, files = _vb(kos_pieces, **kw)
    _inprocess(ref, files, pieces=P)
    algo, _ = _vb(kos_pieces, **kw)
    log = str(tmp_path / "run.jsonl")
    with RunLog(log) as run_log:
        res = _sharded(algo, files, str(tmp_path / "m"), 2, run_log=run_log)
    _same_bits(ref, res.algorithm)
    steps = read_run_log(log, "step")
    assert steps
    assert sum(int(r.get("reseeded") or 0) for r in steps) > 0     # splits were exercised


def test_stopped_at_two_workers_resumed_at_four_same_bits(kos_pieces, tmp_path):
    ref, files = _vb(kos_pieces)
    _inprocess(ref, files, pieces=P)
    md = str(tmp_path / "m")
    algo, _ = _vb(kos_pieces)
    _sharded(algo, files, md, 2, minibatches_per_window=3, max_steps=4)
    algo, _ = _vb(kos_pieces)
    res = _sharded(algo, files, md, 4, minibatches_per_window=3, resume=True)
    assert res.steps_run == 4
    _same_bits(ref, res.algorithm)


def _cli_argv(ds, md, *extra):
    return ["train", "--shards", ds, "--output", md, "--algorithm", "online-vb",
            "--topics", "5", "--minibatch", "40", "--passes", "1", "--seed", "3",
            "--pieces", str(P), "--word-blocks", str(B), "--eval-every", "0"] + list(extra)


def _mp_cli(workers):
    return ["--runner", "DirectRunner", "--direct_running_mode=multi_processing",
            "--direct_num_workers=%d" % workers, "--exchange", "word-blocks"]


@pytest.mark.slow
def test_sigkill_at_two_workers_resumed_at_four_same_bits(kos_pieces, tmp_path):
    """`ldabeam train` on 2 worker processes is SIGKILLed while it publishes its second
    window's checkpoint; `--resume` on 4 worker processes ends on the bits of an
    uninterrupted in-process run."""
    from lda_core.storage.checkpoint import CheckpointStore
    from pipelines import cli
    ref_md = str(tmp_path / "ref")
    assert cli.main(_cli_argv(kos_pieces, ref_md, "--runner", "inprocess")) == 0
    md = str(tmp_path / "m")
    env = dict(os.environ, PYTHONPATH=REPO, LDABEAM_FAULT="publish-written:2")
    p = subprocess.run([sys.executable, "-m", "pipelines.cli"]
                       + _cli_argv(kos_pieces, md, "--minibatches-per-window", "2")
                       + _mp_cli(2), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=900)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()[-2000:]
    assert cli.main(_cli_argv(kos_pieces, md, "--minibatches-per-window", "2", "--resume")
                    + _mp_cli(4)) == 0
    ref, got = CheckpointStore(ref_md).latest(), CheckpointStore(md).latest()
    assert (got.step, got.docs_seen) == (ref.step, ref.docs_seen)
    for k in ref.arrays:
        assert np.array_equal(got.arrays[k], ref.arrays[k]), k


def test_word_blocks_exchange_refusals(kos_pieces):
    from pipelines.runtime.beam_options import runner_config
    from pipelines.training.beam_train import word_blocks_exchange
    from lda_core.algorithms.gibbs import CollapsedGibbs
    vb, _ = _vb(kos_pieces)
    local = runner_config(None, _mp(2))
    inproc = runner_config(None, ["--runner=DirectRunner"])
    assert word_blocks_exchange("word-blocks", local, vb) is True
    assert word_blocks_exchange(None, local, vb) is False          # this machine: state
    assert word_blocks_exchange("state", local, vb) is False
    with pytest.raises(UsageError, match="in-process runner has one worker"):
        word_blocks_exchange("word-blocks", inproc, vb)
    with pytest.raises(UsageError, match="--detach"):
        word_blocks_exchange("word-blocks", local, vb, detach=True)
    with pytest.raises(UsageError, match="unrolled"):
        word_blocks_exchange("word-blocks", local, vb, unroll=False)
    with pytest.raises(UsageError, match="keeps no word-block state"):
        word_blocks_exchange("word-blocks", local, CollapsedGibbs(3, 10))
    with pytest.raises(UsageError, match="must be one of"):
        word_blocks_exchange("blocks", local, vb)


def test_block_rows_are_read_by_range(tmp_path):
    """An E-step reads only its words' rows of a block file, and says which file is bad."""
    from lda_core.errors import DataIntegrityError
    from pipelines.training.beam_sharded import read_rows, write_rows
    rows = np.arange(60, dtype=np.float64).reshape(20, 3)
    path = str(tmp_path / "rows.npy")
    write_rows(path, rows)
    ids = np.array([0, 1, 2, 7, 9, 10, 19])
    assert np.array_equal(read_rows(path, ids), rows[ids])
    assert read_rows(path, np.array([], np.int64)).shape == (0, 3)
    with pytest.raises(DataIntegrityError, match="20 rows"):
        read_rows(path, np.array([20]))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 8)
    with pytest.raises(DataIntegrityError, match="truncated"):
        read_rows(path, np.array([19]))
    bad = str(tmp_path / "bad.npy")
    with open(bad, "wb") as f:
        f.write(b"not a block")
    with pytest.raises(DataIntegrityError, match="bad.npy"):
        read_rows(bad, np.array([0]))


def test_a_worker_moves_only_its_words_rows_and_an_owner_only_its_block(kos_pieces, tmp_path):
    """What the DoFns move, exactly (lda_core.storage.traffic): an E-step reads the header and
    the rows of its piece's distinct words -- never the whole state -- and sends its
    statistics cut by block; a block's owner receives that block's statistics from every
    piece, reads its own block and writes it back."""
    from lda_core.algorithms.word_blocks import block_bounds
    from lda_core.storage import traffic
    from pipelines.ingest import dataset
    from lda_core.storage.vocab_file import Vocabulary
    from pipelines.training import beam_sharded as bs
    from pipelines.training.beam_plan import plan_steps, read_task
    algo, files = _vb(kos_pieces, word_blocks=4)
    K, V = algo.n_topics, algo.n_words
    folder = str(tmp_path)
    traffic.reset()
    start = bs.write_start(algo, folder, "run", 0)
    header_bytes = os.path.getsize(bs.header_path(folder, 0))
    sizes = [dataset.count_documents([f]) for f in files]
    step = plan_steps(files, sizes, seed=3, batch_size=40, start=0, stop=1,
                      pieces_per_minibatch=P)[0]
    by_block = {}
    for task in step.tasks:
        traffic.reset()
        out = bs.ShardedEStepFn().process((0, task), [start])
        got = traffic.totals()
        words = np.unique(read_task(task).word_ids)
        state_in = got.inbound.get(traffic.STATE, 0)
        assert state_in == len(words) * K * 8 < V * K * 8
        assert got.inbound.get(traffic.SCALARS, 0) <= header_bytes    # once per process
        assert got.outbound[traffic.STATISTICS] == sum(len(v[1]) for _, v in out)
        assert [b for b, _ in out] == list(range(4))
        for b, v in out:
            by_block.setdefault(b, []).append(v)
    outs = []
    for b, (lo, hi) in enumerate(block_bounds(V, 4)):
        traffic.reset()
        (elem,) = bs.BlockStepFn(step).process((b, by_block[b]))
        got = traffic.totals()
        assert got.inbound[traffic.STATISTICS] == sum(len(v[1]) for v in by_block[b])
        rows_file = os.path.getsize(bs.rows_path(folder, 1, b))
        assert got.inbound[traffic.STATE] == rows_file < (hi - lo) * K * 8 + 256
        assert got.outbound[traffic.STATE] == rows_file
        outs.append(elem)
    # the next step's tasks take the owners' partials (O(B K) bytes), not the state
    traffic.reset()
    version = bs.resolve_version(outs)
    assert version.ref.position == 1 and version.info["position"] == 1
    got = traffic.totals()
    assert got.inbound.get(traffic.STATE, 0) == 0
    assert got.inbound[traffic.SCALARS] == sum(len(o.partial) for o in outs) < 4 * (4 * K * 8
                                                                                    + 512)
