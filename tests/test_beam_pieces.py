"""The fixed reduction shape (lda_core.training.pieces): P pieces per minibatch, summed in piece
order, recorded in the checkpoints. The state -- λ for online VB, N^Φ for SCVB0 -- is then the
same bits for the in-process trainer and the Beam trainer with any number of worker processes,
and for a run stopped at one worker count and resumed at another. Real KOS documents."""
import os

import numpy as np
import pytest

from helpers.bits import same_bits as _same_bits
from helpers.trainers import (mp_argv as _mp, new_scvb0, new_vb,
                              train_beam as _beam, train_inprocess as _inprocess)


# ------------------------------------------------------------------ the shape itself

def test_piece_bounds_cover_the_minibatch_in_order():
    from lda_core.training.pieces import piece_bounds
    assert piece_bounds(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert piece_bounds(3, 4) == [(0, 1), (1, 2), (2, 3)]
    assert piece_bounds(0, 4) == [(0, 0)]
    for n in (1, 7, 50, 257):
        for p in (1, 2, 3, 4, 8):
            b = piece_bounds(n, p)
            assert b[0][0] == 0 and b[-1][1] == n
            assert all(b[i][1] == b[i + 1][0] for i in range(len(b) - 1))


def test_beam_plan_cuts_minibatches_like_the_inprocess_pieces(kos_pieces):
    from lda_core.training.pieces import piece_bounds
    from pipelines.ingest import dataset
    from lda_core.storage.vocab_file import Vocabulary
    from pipelines.training.beam_plan import plan_steps
    files = dataset.resolve_shards(kos_pieces)
    sizes = [dataset.count_documents([f]) for f in files]
    for sp in plan_steps(files, sizes, seed=3, minibatch=40, start=0, stop=8,
                         pieces_per_minibatch=3):
        got = [sum(len(r) for _, r in t.parts) for t in sp.tasks]
        assert got == [hi - lo for lo, hi in piece_bounds(sp.n_docs, 3)]


def test_scvb0_statistics_do_not_depend_on_the_thread_count(kos_pieces):
    """The SCVB0 kernel split its documents by thread: 1 and 2 threads gave other bits."""
    from pipelines.training.shard_stream import ShardStream
    a1, files = new_scvb0(kos_pieces, n_threads=1, S=150)
    a2, _ = new_scvb0(kos_pieces, n_threads=2, S=150)
    mb = next(iter(ShardStream(files, minibatch=150, seed=3, passes=1)))
    s1, s2 = a1.local_step(mb.batch), a2.local_step(mb.batch)
    assert s1.block.values.tobytes() == s2.block.values.tobytes()
    assert s1.nz.tobytes() == s2.nz.tobytes()


def test_inprocess_and_beam_in_process_same_bits_with_the_default_pieces(kos_pieces, tmp_path):
    from lda_core.storage.checkpoint import CheckpointStore
    from lda_core.training.pieces import DEFAULT_PIECES, RUN_KEY
    ref, files = new_vb(kos_pieces, K=5, S=40, seed=3)
    _inprocess(ref, files)
    got, _ = new_vb(kos_pieces, K=5, S=40, seed=3)
    md = str(tmp_path / "m")
    res = _beam(got, files, md, ["--runner=DirectRunner"], minibatches_per_window=3)
    _same_bits(ref, res.algorithm)
    assert CheckpointStore(md).latest().info["run"][RUN_KEY] == DEFAULT_PIECES


def test_resume_keeps_the_recorded_pieces_and_refuses_another(kos_pieces, tmp_path):
    from lda_core.errors import UsageError
    from lda_core.storage.checkpoint import CheckpointStore
    from lda_core.training.pieces import RUN_KEY
    full, files = new_vb(kos_pieces, K=5, S=40, seed=3)
    _inprocess(full, files, pieces=3)
    md = str(tmp_path / "m")
    algo, _ = new_vb(kos_pieces, K=5, S=40, seed=3)
    _beam(algo, files, md, ["--runner=DirectRunner"], pieces_per_minibatch=3, max_steps=4)
    assert CheckpointStore(md).latest().info["run"][RUN_KEY] == 3
    algo, _ = new_vb(kos_pieces, K=5, S=40, seed=3)
    with pytest.raises(UsageError, match="pieces_per_minibatch 5: this run was trained with 3"):
        _beam(algo, files, md, ["--runner=DirectRunner"], pieces_per_minibatch=5, resume=True)
    algo, _ = new_vb(kos_pieces, K=5, S=40, seed=3)
    res = _beam(algo, files, md, ["--runner=DirectRunner"], resume=True)   # the recorded 3
    _same_bits(full, res.algorithm)


# ------------------------------------------------------------------ worker processes

@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_online_vb_same_bits_for_any_worker_count(kos_pieces, tmp_path, workers):
    ref, files = new_vb(kos_pieces, K=5, S=40, seed=3)
    _inprocess(ref, files, pieces=4)
    algo, _ = new_vb(kos_pieces, K=5, S=40, seed=3)
    res = _beam(algo, files, str(tmp_path / "m"), _mp(workers), pieces_per_minibatch=4)
    assert res.beam_metrics["documents"] == 300
    _same_bits(ref, res.algorithm)


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_scvb0_same_bits_for_any_worker_count(kos_pieces, tmp_path, workers):
    ref, files = new_scvb0(kos_pieces)
    _inprocess(ref, files, pieces=4)
    algo, _ = new_scvb0(kos_pieces)
    res = _beam(algo, files, str(tmp_path / "m"), _mp(workers), pieces_per_minibatch=4)
    assert res.beam_metrics["documents"] == 300
    _same_bits(ref, res.algorithm)


@pytest.mark.serial
@pytest.mark.slow
def test_stopped_at_two_workers_resumed_at_four_same_bits(kos_pieces, tmp_path):
    ref, files = new_vb(kos_pieces, K=5, S=40, seed=3)
    _inprocess(ref, files, pieces=4)
    md = str(tmp_path / "m")
    algo, _ = new_vb(kos_pieces, K=5, S=40, seed=3)
    _beam(algo, files, md, _mp(2), minibatches_per_window=3, max_steps=4,
          pieces_per_minibatch=4)
    algo, _ = new_vb(kos_pieces, K=5, S=40, seed=3)
    res = _beam(algo, files, md, _mp(4), minibatches_per_window=3, resume=True)
    assert res.steps_run == 4
    _same_bits(ref, res.algorithm)


def test_cli_resume_uses_the_recorded_pieces_and_refuses_another(kos_pieces, tmp_path, capsys):
    """`ldabeam train --pieces 3` is recorded; `--resume --pieces 2` is a one-line usage
    error naming the option and the recorded value; `--resume` alone continues with 3, ending
    on the bits of an uninterrupted in-process run with 3 pieces."""
    from lda_core.storage.checkpoint import CheckpointStore
    from pipelines import cli
    md = str(tmp_path / "m")
    base = ["train", "--shards", kos_pieces, "--output", md, "--algorithm", "online-vb",
            "--topics", "5", "--minibatch", "40", "--seed", "3", "--passes", "1",
            "--runner", "inprocess", "--no-progress"]

    def run(*extra):
        rc = cli.main(base + list(extra))
        return rc, capsys.readouterr()

    rc, _ = run("--pieces", "3", "--max-steps", "3")
    assert rc == 0
    assert CheckpointStore(md).latest().info["run"]["pieces_per_minibatch"] == 3
    rc, (out, err) = run("--resume", "--pieces", "2")
    assert rc == 2 and "--pieces 2: this run was trained with 3 pieces" in err
    rc, _ = run("--resume")
    assert rc == 0
    got = CheckpointStore(md).latest()
    assert got.info["run"]["pieces_per_minibatch"] == 3
    rc, _ = run("--pieces", "3", "--output", str(tmp_path / "ref"))
    assert rc == 0
    ref = CheckpointStore(str(tmp_path / "ref")).latest()
    assert ref.step == got.step == 8
    for k in ref.arrays:
        assert ref.arrays[k].tobytes() == got.arrays[k].tobytes(), k


def test_timing_record_reports_graph_bytes_per_step(kos_pieces, tmp_path):
    """Each window's `timing` record gives the size of the graph the runner received (runner
    API proto) per step: the figure that bounds how many steps one job can hold."""
    from lda_core.storage.run_log import RunLog, read_run_log
    algo, files = new_vb(kos_pieces, K=5, S=40, seed=3)
    md = str(tmp_path / "m")
    os.makedirs(md)
    log = os.path.join(md, "run_log.jsonl")
    with RunLog(log) as rl:
        _beam(algo, files, md, ["--runner=DirectRunner"], minibatches_per_window=5,
              run_log=rl)
    recs = read_run_log(log, "timing")
    assert [r["steps"] for r in recs] == [5, 3]
    for r in recs:
        assert r["graph_bytes_per_step"] > 0
        assert r["graph_bytes_per_step"] == r["bytes"]["pipeline_build"] / r["steps"]


@pytest.mark.serial
@pytest.mark.slow
def test_one_piece_two_stage_worker_run_equals_inprocess(kos_pieces, tmp_path, monkeypatch):
    """P = 1 (the local default) on worker processes with two stages per step (the shape remote
    runners run): the single piece goes straight to the global step. It used to be spilled to a
    scratch file that no combine read, and the global step failed on the file reference."""
    ref, files = new_vb(kos_pieces, K=5, S=40, seed=3)
    _inprocess(ref, files, pieces=1)
    algo, _ = new_vb(kos_pieces, K=5, S=40, seed=3)
    res = _beam(algo, files, str(tmp_path / "m"), _mp(2), pieces_per_minibatch=1,
                exchange="state")
    assert res.beam_metrics["documents"] == 300
    _same_bits(ref, res.algorithm)
