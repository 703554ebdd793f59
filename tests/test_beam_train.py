"""The Beam trainer (pipelines.training.beam_train) against the in-process trainer, on real KOS documents.

Equivalence: same seed, settings and minibatch order -> the same topics as
``lda_core.training.trainer.train`` (max relative difference of λ <= 1e-5 with the float64 E-step; in
practice ~1e-13: the only difference is the order of float64 sums over the pieces of a
minibatch). float32 E-step: the per-document kernel computes the same float32 values in a
piece as in the whole minibatch, so the Beam and in-process states agree to float64
rounding as well; the tolerance stated for float32 is 1e-4 relative (the float32 kernel's own
accuracy against float64, ~1e-6 per step, compounded over steps), which is what the test checks.

Also: the CombineFn (split-and-merge in any order gives bit-identical sums, pickle and coder
round trips), the read plan (every document exactly once per pass, in the in-process order),
and bad input (vocabulary-hash mismatch, empty shard set, missing output, a checkpoint of
another algorithm or K).
"""
import os
import pickle
import shutil

import numpy as np
import pytest

from lda_core.errors import TrainingError

from lda_core.docbatch import DocBatch

from helpers import warm
from helpers.bits import max_rel
from helpers.paths import repo_env
from helpers.trainers import beam_run, inprocess_reference, new_vb
from helpers.uci import kos_train_dataset as make_kos_dataset, read_kos, write_dataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def kos_small(kos_paths, tmp_path_factory):
    """400 KOS documents in 3 shards."""
    return make_kos_dataset(kos_paths, str(tmp_path_factory.mktemp("kos") / "ds"), 400)


# ------------------------------------------------------------------ equivalence

def test_unrolled_in_process_equals_inprocess_trainer(kos_small, tmp_path):
    """Two passes (16 steps) in windows of 5 unrolled minibatches (the last one short, one
    window crossing the pass boundary) == the in-process trainer."""
    from lda_core.storage.checkpoint import CheckpointStore
    from lda_core.storage.run_log import RunLog, read_run_log
    ref = inprocess_reference(kos_small, passes=2)
    md = str(tmp_path / "m")
    log_path = str(tmp_path / "m" / "run_log.jsonl")
    os.makedirs(md)
    with RunLog(log_path) as log:
        res = beam_run(kos_small, md, passes=2, minibatches_per_window=5, run_log=log)
    got = res.algorithm
    assert got.step == ref.step == 16 and res.steps_run == 16 and res.windows == 4
    assert got.docs_seen == ref.docs_seen == 800
    assert max_rel(ref.lambda_(), got.lambda_()) <= 1e-5
    # the metrics the E-step DoFns reported cover every document once per pass
    assert res.beam_metrics["documents"] == 800
    assert res.beam_metrics["tokens"] > 0
    assert res.beam_metrics["estep_iterations"] >= 800
    # one checkpoint per window, the last at the final step, resumable by either trainer
    store = CheckpointStore(md)
    assert [c.step for c in store.list_checkpoints()] == [5, 10, 15, 16]
    st = store.latest()
    assert st.step == 16 and st.info["trainer"]["minibatches_done"] == 16
    steps = read_run_log(log_path, "step")
    assert [r["step"] for r in steps] == list(range(1, 17))
    assert all(r["rho"] > 0 and r["docs"] == 50 for r in steps)
    assert sum(1 for r in steps if r.get("checkpoint")) == 4
    assert read_run_log(log_path, "end")[0]["step"] == 16


def test_in_process_steps_are_grouped_by_documents():
    """In-process, consecutive minibatches share one transform until it holds
    IN_PROCESS_DOCS_PER_TRANSFORM documents (Beam's cost per transform is fixed)."""
    from pipelines.training.beam_plan import StepPlan
    from pipelines.training.beam_steps import group_steps
    steps = [StepPlan(i, 0, i, 100) for i in range(10)]
    groups = group_steps(steps, 250)
    assert [[sp.position for sp in g] for g in groups] == [[0, 1, 2], [3, 4, 5], [6, 7, 8],
                                                           [9]]
    assert [len(g) for g in group_steps(steps, 1)] == [1] * 10     # big minibatches: alone
    assert group_steps([], 10) == []


def test_one_pipeline_per_minibatch_equals_inprocess_trainer(kos_small, tmp_path):
    ref = inprocess_reference(kos_small, S=80)
    res = beam_run(kos_small, str(tmp_path / "m"), S=80, unroll=False,
                   minibatches_per_window=2)
    assert res.algorithm.step == ref.step == 5
    assert max_rel(ref.lambda_(), res.algorithm.lambda_()) <= 1e-5


def test_float32_estep_tolerance(kos_small, tmp_path):
    """float32 E-step: Beam vs in-process within the stated 1e-4 (see module docstring)."""
    ref = inprocess_reference(kos_small, dtype="float32")
    res = beam_run(kos_small, str(tmp_path / "m"), dtype="float32", minibatches_per_window=8)
    assert max_rel(ref.lambda_(), res.algorithm.lambda_()) <= 1e-4


@pytest.mark.serial
@pytest.mark.slow
def test_multi_processing_two_workers_equals_inprocess_trainer(kos_small, tmp_path):
    ref = inprocess_reference(kos_small)
    res = beam_run(kos_small, str(tmp_path / "m"),
                   beam_argv=["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                              "--direct_num_workers=2"])
    assert res.algorithm.step == ref.step == 8
    assert res.beam_metrics["documents"] == 400
    assert max_rel(ref.lambda_(), res.algorithm.lambda_()) <= 1e-5
    from pipelines.runtime.beam_options import runner_config
    from pipelines.training.beam_run import default_scratch_root
    cfg = runner_config("DirectRunner", ["--direct_running_mode=multi_processing"])
    assert not os.path.exists(default_scratch_root(str(tmp_path / "m"), cfg))


def test_max_steps_then_resume_is_bit_identical(kos_small, tmp_path):
    """Stop at step 3 (mid-window), resume from the checkpoint: identical to one run."""
    full = beam_run(kos_small, str(tmp_path / "a"), minibatches_per_window=4).algorithm
    md = str(tmp_path / "b")
    beam_run(kos_small, md, minibatches_per_window=4, max_steps=3)
    from lda_core.storage.checkpoint import CheckpointStore
    from lda_core.algorithms.online_vb import OnlineVB
    st = CheckpointStore(md).latest()
    assert st.step == 3
    res = beam_run(kos_small, md, minibatches_per_window=4, resume=True)
    assert res.steps_run == 5
    a, b = full.to_state(), res.algorithm.to_state()
    for name in a.arrays:
        assert np.array_equal(a.arrays[name], b.arrays[name]), name


# ------------------------------------------------------------------ plan and combine

def test_plan_steps_matches_shard_stream_order(kos_small):
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    from lda_core.storage.vocab_file import Vocabulary
    from pipelines.training.beam_plan import plan_steps, read_task
    from pipelines.training.shard_stream import ShardStream, shard_row_counts
    files = dataset.resolve_shards(kos_small)
    sizes = shard_row_counts(files)
    stream = ShardStream(files, minibatch=60, seed=5, passes=2)
    ref = list(stream)
    plans = plan_steps(files, sizes, seed=5, minibatch=60, start=0, stop=stream.total_steps,
                       pieces_per_minibatch=3)
    assert [p.position for p in plans] == [m.step for m in ref]
    for mb, sp in zip(ref, plans):
        assert [t.piece for t in sp.tasks] == list(range(len(sp.tasks)))
        got = DocBatch.concat([read_task(t) for t in sp.tasks])
        assert got.doc_ids == mb.batch.doc_ids
        assert np.array_equal(got.word_ids, mb.batch.word_ids)
        assert np.array_equal(got.counts, mb.batch.counts)
    # every document exactly once per pass
    for p in range(2):
        ids = [d for sp in plans if sp.pass_index == p
               for t in sp.tasks for d in read_task(t).doc_ids]
        assert len(ids) == len(set(ids)) == 400


def test_stats_combine_is_order_independent_and_round_trips(kos_small):
    import apache_beam as beam
    from apache_beam.testing.util import assert_that
    from pipelines.training.beam_stats import (StatsAccumulatorCoder, StatsCombineFn, decode_piece,
                                               encode_piece, merge_in_order)
    from pipelines.ingest.shards import read_shard
    algo, files = new_vb(kos_small)
    batch = read_shard(files[0])
    pieces = {i: algo.local_step(batch.take(ix))
              for i, ix in enumerate(np.array_split(np.arange(batch.n_docs), 5))}
    whole = algo.local_step(batch)
    ref = merge_in_order({i: pickle.loads(pickle.dumps(s)) for i, s in pieces.items()})
    assert ref.n_docs == whole.n_docs and ref.n_tokens == whole.n_tokens
    assert max_rel(whole.to_dense(), ref.to_dense()) < 1e-12
    fn = StatsCombineFn()
    enc = [encode_piece(i, s) for i, s in pieces.items()]
    rng = np.random.default_rng(0)
    for _ in range(4):   # arbitrary split-and-merge orders: bit-identical result
        order = rng.permutation(len(enc))
        cut = int(rng.integers(1, len(enc)))
        a, b = fn.create_accumulator(), fn.create_accumulator()
        for j in order[:cut]:
            a = fn.add_input(a, enc[j])
        for j in order[cut:]:
            b = fn.add_input(b, enc[j])
        coder = StatsAccumulatorCoder()
        b = coder.decode(coder.encode(b))
        b = pickle.loads(pickle.dumps(b))
        out = fn.extract_output(fn.merge_accumulators([b, a]))
        assert np.array_equal(out.to_dense(), ref.to_dense())
        assert out.n_docs == ref.n_docs and out.n_iterations == ref.n_iterations
    pid, st = decode_piece(enc[2])
    assert pid == 2 and np.array_equal(st.sstats, pieces[2].sstats)
    # the same through a real pipeline
    with beam.Pipeline(runner="FnApiRunner") as p:
        out = (p | beam.Create(enc) | beam.CombineGlobally(StatsCombineFn())
               | beam.Map(lambda s: (s.n_docs, float(s.to_dense().sum()))))
        assert_that(out, lambda got: _check_one(got, (ref.n_docs,
                                                       float(ref.to_dense().sum()))))


def test_spilled_pieces_merge_like_inline_ones(kos_small, tmp_path):
    """Pieces written to scratch files (local runners) combine to bit-identical statistics,
    in any split-and-merge order, and only the short references go through the coder."""
    from pipelines.training.beam_stats import (SpilledStats, StatsAccumulatorCoder, StatsCombineFn,
                                               decode_stats, encode_stats, merge_in_order,
                                               spill_stats)
    from pipelines.ingest.shards import read_shard
    algo, files = new_vb(kos_small)
    batch = read_shard(files[0])
    pieces = {i: algo.local_step(batch.take(ix))
              for i, ix in enumerate(np.array_split(np.arange(batch.n_docs), 4))}
    ref = merge_in_order({i: pickle.loads(pickle.dumps(s)) for i, s in pieces.items()})
    spilled = {i: spill_stats(s, str(tmp_path / ("piece-%d.bin" % i)))
               for i, s in pieces.items()}
    assert all(isinstance(s, SpilledStats) and os.path.getsize(s.path) == s.nbytes
               for s in spilled.values())
    assert decode_stats(encode_stats(spilled[1])) == spilled[1]
    coder = StatsAccumulatorCoder()
    for deterministic in (True, False):
        fn = StatsCombineFn(deterministic)
        a, b = fn.create_accumulator(), fn.create_accumulator()
        for i in (3, 0):
            a = fn.add_input(a, (i, spilled[i]))
        for i in (1, 2):
            b = fn.add_input(b, (i, spilled[i]))
        enc = coder.encode(a)
        if deterministic:      # the accumulator carries references, not the statistics
            assert len(enc) < 1000
        out = fn.extract_output(fn.merge_accumulators([coder.decode(enc), b]))
        if deterministic:
            assert np.array_equal(out.to_dense(), ref.to_dense())
        else:
            assert max_rel(out.to_dense(), ref.to_dense()) < 1e-12
        assert out.n_docs == ref.n_docs


def test_multi_process_global_step_frees_consumed_scratch(kos_small, tmp_path):
    """With worker processes the global step of step t removes state t-1 and step t's spilled
    pieces once it has written state t (a long window must not pile up states in /dev/shm)."""
    from pipelines.training import beam_state
    from pipelines.training.beam_stats import spill_stats
    from pipelines.training.beam_steps import GlobalStepFn
    from pipelines.training.scratch_names import stats_path as _spill_path
    from pipelines.ingest.shards import read_shard
    algo, files = new_vb(kos_small)
    scratch = str(tmp_path / "scratch")
    os.makedirs(scratch)
    prev = os.path.join(scratch, "state-%09d.npz" % 0)
    beam_state.save_scratch(algo, prev)
    ref = beam_state.StateRef("run/0", prev, 0)
    batch = read_shard(files[0])
    st = spill_stats(algo.local_step(batch), _spill_path(scratch, 0, 0))
    from pipelines.training.beam_stats import unspill
    fn = GlobalStepFn("run", 0, batch.n_docs, scratch, in_place=True)
    out = list(fn.process((0, unspill(st)), ref))
    assert len(out) == 1 and out[0].position == 1 and os.path.exists(out[0].path)
    assert sorted(os.listdir(scratch)) == ["info-%09d.json" % 1, "state-%09d.npz" % 1]
    got = beam_state.load_algorithm(out[0].path)
    expect, _ = new_vb(kos_small)
    expect.global_step(expect.local_step(batch))
    assert np.array_equal(got.lambda_(), expect.lambda_())


def _check_one(got, expected):
    assert len(got) == 1 and got[0][0] == expected[0]
    assert abs(got[0][1] - expected[1]) <= 1e-9 * abs(expected[1])


# ------------------------------------------------------------------ bad input

def test_bad_input_is_refused_before_any_work(kos_small, tmp_path, kos_paths):
    from pipelines.training import beam_train
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    from lda_core.storage.vocab_file import Vocabulary
    algo, files = new_vb(kos_small)
    with pytest.raises(FileNotFoundError, match="empty shard set"):
        beam_train.train(algo, [], str(tmp_path / "m1"), beam_argv=["--runner=DirectRunner"])
    with pytest.raises(ValueError, match="--output"):
        beam_train.train(algo, files, "", beam_argv=["--runner=DirectRunner"])
    # a shard vectorised with another vocabulary
    other = str(tmp_path / "other")
    batch, tokens = read_kos(kos_paths[0], kos_paths[1], 30)
    write_dataset(other, batch, tokens[::-1], n_shards=1)
    bad = files + dataset.resolve_shards(other)
    with pytest.raises(ValueError, match="vocabulary"):
        beam_train.train(algo, bad, str(tmp_path / "m2"), beam_argv=["--runner=DirectRunner"])
    with pytest.raises(ValueError, match="runner"):
        beam_train.train(algo, files, str(tmp_path / "m3"), beam_argv=["--runner=NoSuchRunner"])
    with pytest.raises(ValueError, match="job_endpoint"):
        beam_train.train(algo, files, str(tmp_path / "m4"), beam_argv=["--runner=PortableRunner"])
    for d in ("m1", "m2", "m3", "m4"):
        assert not os.path.exists(str(tmp_path / d / "checkpoints"))
    # resuming from a checkpoint of another K or algorithm
    from lda_core.storage.checkpoint import CheckpointStore
    md = str(tmp_path / "m5")
    other_k, _ = new_vb(kos_small, K=5)
    CheckpointStore(md).publish(other_k.to_state())
    with pytest.raises(ValueError, match="n_topics|K"):
        beam_train.train(algo, files, md, resume=True, beam_argv=["--runner=DirectRunner"])
    st = algo.to_state()
    st.algorithm = "scvb0"
    md = str(tmp_path / "m6")
    CheckpointStore(md).publish(st)
    with pytest.raises(ValueError, match="scvb0|algorithm"):
        beam_train.train(algo, files, md, resume=True, beam_argv=["--runner=DirectRunner"])
    assert [c.step for c in CheckpointStore(md).list_checkpoints()] == [0]


def _cli(*args, timeout=300):
    """``ldabeam ARGS`` in a process of its own (its log lines on its standard error)."""
    return warm.run(["-m", "pipelines.cli"] + list(args), cwd=REPO, env=repo_env(),
                    capture_output=True, text=True, timeout=timeout)


def test_cli_bad_checkpoint_and_output(kos_small, tmp_path):
    """Through `ldabeam train --runner DirectRunner`: a checkpoint of another K or algorithm,
    and a missing --output, are one clear line (exit 2) before any work."""
    md = str(tmp_path / "m")
    r = _cli("train", "--shards", kos_small, "--output", md, "--topics", "5", "--minibatch",
             "100", "--algorithm", "online-vb", "--runner", "DirectRunner", "--unroll", "--max-steps", "2",
             "--eval-every", "0", "--heldout", "none")
    assert r.returncode == 0, r.stderr[-3000:]
    r = _cli("train", "--shards", kos_small, "--output", md, "--topics", "6", "--resume",
             "--runner", "DirectRunner")
    assert r.returncode == 2 and "6" in r.stderr and "5" in r.stderr, r.stderr[-2000:]
    r = _cli("train", "--shards", kos_small, "--output", md, "--resume", "--algorithm",
             "scvb0", "--runner", "DirectRunner")
    assert r.returncode == 2 and "scvb0" in r.stderr, r.stderr[-2000:]
    r = _cli("train", "--shards", kos_small, "--topics", "5", "--runner", "DirectRunner")
    assert r.returncode == 2 and "--output" in r.stderr, r.stderr[-2000:]


def test_failing_global_step_stops_and_keeps_the_good_steps(kos_small, tmp_path):
    """A global step that refuses its statistics (here: forced at t=3) ends the run with a
    clear error; the window's earlier steps are published, nothing after them."""
    from lda_core.storage.checkpoint import CheckpointStore
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.errors import StepRefused
    from pipelines.training import beam_train

    class FailingVB(OnlineVB):
        def global_step(self, stats):
            if self.step == 3:
                raise StepRefused("refusing a minibatch with non-finite statistics (test)")
            return super().global_step(stats)

    algo, files = new_vb(kos_small)
    bad = FailingVB.from_state(algo.to_state())
    md = str(tmp_path / "m")
    with pytest.raises(TrainingError, match="minibatch 4 .*non-finite"):
        beam_train.train(bad, files, md, minibatch=50, seed=1, minibatches_per_window=5,
                         beam_argv=["--runner=DirectRunner"], progress=False)
    assert [c.step for c in CheckpointStore(md).list_checkpoints()] == [3]


def test_default_pieces_do_not_follow_local_workers_and_cover_remote_ones(tmp_path):
    """The reduction shape is a run parameter: on this machine the same P for any runner and
    worker count (so the bits do not depend on them); a remote runner's first run gets at
    least one piece per worker it may use (--num_workers / --max_num_workers)."""
    from lda_core.training.pieces import DEFAULT_PIECES
    from pipelines.runtime.beam_options import runner_config
    from pipelines.training import beam_window
    from pipelines.training.beam_run import default_scratch_root
    from pipelines.training.beam_train import default_pieces
    mp = runner_config("DirectRunner", ["--direct_running_mode=multi_processing",
                                        "--direct_num_workers=3"])
    assert default_pieces(runner_config("DirectRunner", [])) == DEFAULT_PIECES
    assert default_pieces(mp) == DEFAULT_PIECES
    local = default_scratch_root(str(tmp_path / "m"), mp)
    assert beam_window.spill_dir(mp, local) == local       # local workers share files
    df = ["--project=p", "--region=r", "--temp_location=gs://b/t"]
    from lda_core.training.pieces import REMOTE_MIN_PIECES
    assert default_pieces(runner_config("DataflowRunner", df)) == REMOTE_MIN_PIECES
    assert default_pieces(runner_config("DataflowRunner", df + ["--num_workers=8",
                                                                "--max_num_workers=32"])) == 32
    assert beam_window.spill_dir(mp, "fakegs://bucket/m/.beam-scratch") is None
