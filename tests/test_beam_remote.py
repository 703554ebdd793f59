"""The remote exchange (pipelines.training.beam_remote): the state moves through Beam's shuffle
inside a window, and the result is the in-process trainer's, bit for bit, at the same
(seed, S, P, B, staleness) for any number of worker processes, across windows, and for a run
killed at one worker count and resumed at another. Real KOS documents."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from lda_core.errors import StepRefused, TrainingError, UsageError
from lda_core.storage.vocab_file import Vocabulary

from helpers.bits import same_bits as _same_bits
from helpers.trainers import (mp_argv as _mp, train_beam as _beam, train_inprocess as _inprocess,
                              with_minibatch)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
P, B = 4, 3
IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def _vb(dataset_dir, **kw):
    from lda_core.algorithms.online_vb import OnlineVB
    from pipelines.ingest import dataset
    files = dataset.resolve_shards(dataset_dir)
    vh = dataset.check_vocab_hash(files, None)
    V = len(Vocabulary.read(dataset_dir))
    D = dataset.count_documents(files)
    settings = dict(corpus_size=D, seed=3, dtype="float64", tau0=16.0,
                    word_blocks=B)
    settings.update(kw)
    return with_minibatch(OnlineVB(5, V, vocab_hash=vh, **settings), 40), files


def _scvb0(dataset_dir, **kw):
    from lda_core.algorithms.scvb0 import SCVB0
    from pipelines.ingest import dataset
    files = dataset.resolve_shards(dataset_dir)
    vh = dataset.check_vocab_hash(files, None)
    V = len(Vocabulary.read(dataset_dir))
    settings = dict(seed=3, word_blocks=B)
    settings.update(kw)
    return with_minibatch(SCVB0(6, V, vocab_hash=vh, **settings), 40), files


def _info(s, warmup=0):
    """Run information with staleness s; warm-up 0 unless given, so that these 8-step runs
    pipeline their steps (the default warm-up outlasts them)."""
    return {"staleness": s, "staleness_warmup": warmup}


def _remote(algo, files, md, argv, s, warmup=0, **kw):
    res = _beam(algo, files, md, argv, pieces_per_minibatch=P, exchange="remote",
                run_info=_info(s, warmup), **kw)
    return res


def _reference(make, kos_pieces, s, warmup=0, **kw):
    ref, files = make(kos_pieces, **kw)
    _inprocess(ref, files, pieces=P, run_info=_info(s, warmup))
    return ref, files


@pytest.mark.parametrize("s,warmup", [(0, 0), (1, 0), (1, 4)], ids=["s0", "s1", "s1-w4"])
@pytest.mark.parametrize("argv", [IN_PROCESS, pytest.param(_mp(2), marks=pytest.mark.serial),
                                  pytest.param(_mp(4), marks=[pytest.mark.slow,
                                                              pytest.mark.serial])],
                         ids=["in-process", "2-workers", "4-workers"])
def test_online_vb_same_bits_as_inprocess(kos_pieces, tmp_path, argv, s, warmup):
    """Windows of 3 steps: every window starts from the files the one before ended on (and,
    with staleness 1, the statistics in flight); with a warm-up of 4 the pipeline fills
    inside the second window."""
    ref, files = _reference(_vb, kos_pieces, s, warmup)
    algo, _ = _vb(kos_pieces)
    res = _remote(algo, files, str(tmp_path / "m"), argv, s, warmup,
                  minibatches_per_window=3)
    assert res.beam_metrics["documents"] == 300 + (s and 40)   # one minibatch read ahead
    _same_bits(ref, res.algorithm)
    assert np.array_equal(ref.topic_word(), res.algorithm.topic_word())


@pytest.mark.serial
@pytest.mark.parametrize("s", [0, 1])
def test_scvb0_same_bits_as_inprocess(kos_pieces, tmp_path, s):
    ref, files = _reference(_scvb0, kos_pieces, s)
    algo, _ = _scvb0(kos_pieces)
    res = _remote(algo, files, str(tmp_path / "m"), _mp(2), s)
    _same_bits(ref, res.algorithm)


def test_reseeding_and_hyperparameter_steps_cross_blocks_unchanged(kos_pieces, tmp_path):
    """Re-seeding splits (which touch every block) and the α / η Newton steps (sums over
    every block) land on the in-process bits."""
    from lda_core.storage.run_log import RunLog, read_run_log
    kw = dict(reseed=0.3, optimize_alpha=True, optimize_eta=True)
    ref, files = _reference(_vb, kos_pieces, 1, **kw)
    algo, _ = _vb(kos_pieces, **kw)
    log = str(tmp_path / "run.jsonl")
    with RunLog(log) as run_log:
        res = _remote(algo, files, str(tmp_path / "m"), IN_PROCESS, 1, run_log=run_log)
    _same_bits(ref, res.algorithm)
    steps = read_run_log(log, "step")
    assert [r["step"] for r in steps] == list(range(1, 9))
    assert sum(int(r.get("reseeded") or 0) for r in steps) > 0     # splits were exercised


@pytest.mark.serial
def test_stopped_at_two_workers_resumed_at_four_same_bits(kos_pieces, tmp_path):
    """The checkpoint at step 4 carries the statistics of minibatch 4 (computed with the
    state after step 3); the run resumed on another worker count applies them."""
    from lda_core.storage.checkpoint import CheckpointStore
    ref, files = _reference(_vb, kos_pieces, 1)
    md = str(tmp_path / "m")
    algo, _ = _vb(kos_pieces)
    _remote(algo, files, md, _mp(2), 1, minibatches_per_window=3, max_steps=4)
    state = CheckpointStore(md).latest()
    assert state.step == 4 and state.info["pending"] == {"first": 4, "n": 1, "blocks": B}
    algo, _ = _vb(kos_pieces)
    res = _remote(algo, files, md, _mp(4), 1, minibatches_per_window=3, resume=True)
    assert res.steps_run == 4
    _same_bits(ref, res.algorithm)


def test_checkpoints_of_either_trainer_resume_on_the_other(kos_pieces, tmp_path):
    """A checkpoint written in process (statistics in flight whole) resumes on the remote
    exchange (which splits them by block), and one written by the remote exchange (by block)
    resumes in process (which joins them): the bits of an uninterrupted run either way."""
    from lda_core.storage.blocks import algorithm_from_state
    from lda_core.storage.checkpoint import CheckpointStore
    from pipelines.training.shard_stream import ShardStream
    ref, files = _reference(_scvb0, kos_pieces, 1)
    a = str(tmp_path / "a")
    algo, _ = _scvb0(kos_pieces)
    stream = ShardStream(files, minibatch=40, seed=3, passes=1)
    from lda_core.training.trainer import train
    train(algo, stream, checkpoint_store=CheckpointStore(a), max_steps=3, progress=False,
          run_info=dict(_info(1), pieces_per_minibatch=P))
    algo, _ = _scvb0(kos_pieces)
    res = _remote(algo, files, a, IN_PROCESS, 1, resume=True)
    _same_bits(ref, res.algorithm)
    b = str(tmp_path / "b")
    algo, _ = _scvb0(kos_pieces)
    _remote(algo, files, b, IN_PROCESS, 1, max_steps=5)
    resumed = algorithm_from_state(CheckpointStore(b).latest(row_order=True), take=True)
    assert resumed.pending.first == 5
    train(resumed, stream, checkpoint_store=CheckpointStore(b), progress=False,
          run_info=dict(_info(1), pieces_per_minibatch=P))
    _same_bits(ref, resumed)


def test_a_refused_step_publishes_the_steps_before_it(kos_pieces, tmp_path, monkeypatch):
    """A step refused by its owners (here: forced at step 5, inside the second window) ends
    the run with the refusal; the state after step 4 -- in the middle of the window the
    pipeline ran -- is published, as the in-process trainer would leave it."""
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.storage.checkpoint import CheckpointStore
    from pipelines.training import beam_train
    real = OnlineVB.plan_step.__func__

    def refusing(cls, header, stats):
        if header.counters["step"] == 4:
            raise StepRefused("refusing a minibatch with non-finite statistics (test)")
        return real(cls, header, stats)

    monkeypatch.setattr(OnlineVB, "plan_step", classmethod(refusing))
    ref, files = _vb(kos_pieces)
    _inprocess(ref, files, pieces=P, run_info=_info(1), max_steps=4)
    algo, _ = _vb(kos_pieces)
    md = str(tmp_path / "m")
    with pytest.raises(TrainingError, match="minibatch 5 .*non-finite"):
        _remote(algo, files, md, IN_PROCESS, 1, minibatches_per_window=3)
    store = CheckpointStore(md)
    assert store.pointer() == 4
    from lda_core.storage.blocks import algorithm_from_state
    _same_bits(ref, algorithm_from_state(store.latest(row_order=True), take=True))


def _cli_argv(ds, md, *extra):
    return ["train", "--shards", ds, "--output", md, "--algorithm", "online-vb",
            "--topics", "5", "--minibatch", "40", "--passes", "1", "--seed", "3",
            "--pieces", str(P), "--word-blocks", str(B), "--staleness", "1",
            "--staleness-warmup", "3", "--eval-every", "0"] + list(extra)


def _mp_cli(workers):
    return ["--runner", "DirectRunner", "--direct_running_mode=multi_processing",
            "--direct_num_workers=%d" % workers, "--exchange", "remote"]


@pytest.mark.serial
@pytest.mark.slow
def test_sigkill_at_two_workers_resumed_at_four_same_bits(kos_pieces, tmp_path):
    """`ldabeam train` on 2 worker processes is SIGKILLed while it publishes its second
    window's checkpoint; `--resume` on 4 worker processes ends on the bits of an
    uninterrupted in-process run."""
    from lda_core.storage.blocks import algorithm_from_state
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
    # the in-process run keeps the statistics in flight whole, the remote exchange by block:
    # compared as the algorithms that resume from them (the blocks joined)
    ra, ga = algorithm_from_state(ref, take=True), algorithm_from_state(got, take=True)
    _same_bits(ra, ga)
    assert ra.pending.first == ga.pending.first
    assert [st.to_bytes() for st in ra.pending.stats] == \
        [st.to_bytes() for st in ga.pending.stats]


def test_the_remote_exchange_pipelines_by_default_after_the_warm_up(kos_pieces, tmp_path):
    """No staleness given: the remote exchange records s = 1 with the default warm-up, and
    its steps inside the warm-up are those of s = 0; the in-process runner keeps s = 0."""
    from lda_core.storage.checkpoint import CheckpointStore
    from lda_core.training import staleness
    algo, files = _vb(kos_pieces)
    md = str(tmp_path / "m")
    res = _beam(algo, files, md, IN_PROCESS, pieces_per_minibatch=P, exchange="remote",
                max_steps=3)
    run = CheckpointStore(md).latest().info["run"]
    assert (run[staleness.RUN_KEY], run[staleness.WARMUP_KEY]) == (1, staleness.DEFAULT_WARMUP)
    ref, _ = _vb(kos_pieces)
    _inprocess(ref, files, pieces=P, run_info=_info(0), max_steps=3)
    _same_bits(ref, res.algorithm)
    algo, _ = _vb(kos_pieces)
    md2 = str(tmp_path / "m2")
    _beam(algo, files, md2, IN_PROCESS, pieces_per_minibatch=P, max_steps=1)
    assert CheckpointStore(md2).latest().info["run"][staleness.RUN_KEY] == 0


def test_exchange_choice_and_refusals(kos_pieces):
    from lda_core.algorithms.gibbs import CollapsedGibbs
    from lda_core.algorithms.sparse_gibbs_vb import SparseGibbsVB
    from pipelines.runtime.beam_options import runner_config
    from pipelines.training.beam_train import choose_exchange
    vb, _ = _vb(kos_pieces)
    local = runner_config(None, _mp(2))
    inproc = runner_config(None, ["--runner=DirectRunner"])
    df = runner_config("DataflowRunner", ["--project=p", "--region=r",
                                          "--temp_location=gs://b/t"])
    assert choose_exchange("remote", local, vb) == "remote"
    assert choose_exchange("remote", inproc, vb) == "remote"          # any runner
    assert choose_exchange("word-blocks", local, vb) == "remote"      # its earlier name
    assert choose_exchange(None, df, vb) == "remote"                  # the remote default
    assert choose_exchange(None, local, vb) == "local"                # this machine
    assert choose_exchange(None, inproc, vb) == "in-process"
    assert choose_exchange("state", local, vb) == "state"
    # an algorithm whose state has no word blocks takes the state exchange on a cluster
    assert choose_exchange(None, df, SparseGibbsVB(3, 10)) == "state"
    with pytest.raises(UsageError, match="worker processes of this machine"):
        choose_exchange("local", df, vb)
    with pytest.raises(UsageError, match="keeps no word-block state"):
        choose_exchange("remote", local, CollapsedGibbs(3, 10))
    with pytest.raises(UsageError, match="must be one of"):
        choose_exchange("blocks", local, vb)


def test_the_schedule_puts_one_barrier_per_step_with_staleness_one():
    """Stages per window: load, the steps, the final stage; with s = 1 the E-step of
    minibatch m + 1 shares its stage with the owners of step m."""
    from pipelines.training.beam_remote import Schedule, Start
    n = 20
    pieces = {m: 4 for m in range(100, 100 + n + 1)}
    docs = {m: 40 for m in pieces}
    fresh = Schedule(Start("/x", 100, 3, 100, 0), n, 1, pieces, docs)
    assert fresh.n_stages == n + 3            # load, E of the first two, n steps, final
    resumed = Schedule(Start("/x", 100, 3, 100, 1), n, 1, pieces, docs)
    assert resumed.n_stages == n + 2          # the first statistics come with the state
    for m in range(101, 100 + n):
        assert resumed.estep[m + 1] == resumed.owner[m]
    plain = Schedule(Start("/x", 100, 3, 100, 0), n, 0, pieces, docs)
    assert plain.n_stages == 2 * n + 2        # two barriers per step
    # a warm-up of 8: two barriers a step up to minibatch 8, one after it; a window that ends
    # inside the warm-up leaves nothing in flight
    warm = Schedule(Start("/x", 100, 3, 100, 0), n, 1, pieces, docs, warmup=108)
    assert warm.n_stages == fresh.n_stages + 8
    for m in range(101, 108):
        assert warm.estep[m] == warm.owner[m - 1] + 1
    for m in range(109, 100 + n):
        assert warm.estep[m + 1] == warm.owner[m]
    assert list(warm.pending_after()) == [120]
    short = Schedule(Start("/x", 100, 3, 100, 0), 5, 1, pieces, docs, warmup=108)
    assert list(short.pending_after()) == [] and short.n_stages == 2 * 5 + 2
    # every stage's DoFn knows a constant amount of the schedule
    sizes = {len(repr(resumed.roles(st))) for st in range(1, resumed.n_stages + 1)}
    assert max(sizes) < 2000


def test_what_each_role_moves(kos_pieces, tmp_path):
    """One step of the remote exchange run role by role, the runner's GroupByKey done by
    hand (lda_core.storage.traffic counts every byte): an E-step receives the rows of its
    piece's distinct words only -- never the whole state -- and sends its statistics cut by
    block; a block's owner receives its block's rows and that block's statistics from every
    piece, and hands on its block; the end files are the in-process trainer's state."""
    from collections import defaultdict
    from lda_core.algorithms.word_blocks import block_bounds
    from lda_core.storage import traffic
    from pipelines.ingest import dataset
    from pipelines.training import beam_remote as br
    from pipelines.training.beam_plan import plan_steps, read_task
    algo, files = _vb(kos_pieces, word_blocks=4)
    ref, _ = _vb(kos_pieces, word_blocks=4)
    _inprocess(ref, files, pieces=P, max_steps=1)
    K, V = algo.n_topics, algo.n_words
    sizes = [dataset.count_documents([f]) for f in files]
    steps = plan_steps(files, sizes, seed=3, minibatch=40, start=0, stop=1,
                       pieces_per_minibatch=P)
    start = br.write_start(algo, str(tmp_path), 0, 0)
    sched = br.Schedule.of_steps(start, steps, [], 0)
    assert (sched.load, sched.estep[0], sched.owner[0], sched.final) == (1, 2, 3, 4)
    inbox = defaultdict(lambda: defaultdict(list))     # stage -> key -> values
    versions = []

    def run(stage, key, values, outs=()):
        fn = br.StageFn(sched.roles(stage), "run", V, None)
        fn.setup()
        traffic.reset()
        for out in fn.process((key, values), list(outs)):
            if out.tag == br.VERSIONS:
                versions.append(out.value)
            elif out.tag.startswith("to"):
                k, v = out.value
                inbox[int(out.tag[2:])][k].append(v)
        return traffic.totals()

    for task in steps[0].tasks:
        run(0, "r:0:%d" % task.piece, [task])
    for b in range(4):
        run(1, "l:%d" % b, inbox[1]["l:%d" % b] + [br.envelope(br.TASK, b, 0)])
    for task in steps[0].tasks:
        got = run(2, "e:0:%d" % task.piece, inbox[2]["e:0:%d" % task.piece])
        words = np.unique(read_task(task).word_ids)
        assert got.inbound[traffic.STATE] == len(words) * K * 8 < V * K * 8
        assert got.outbound[traffic.STATISTICS] > 0
    for b, (lo, hi) in enumerate(block_bounds(V, 4)):
        key = "o:0:%d" % b
        stats_in = sum(len(br.opened(v)[3]) for v in inbox[3][key]
                       if br.opened(v)[0] == br.STATS)
        got = run(3, key, inbox[3][key])
        assert got.inbound[traffic.STATE] == (hi - lo) * K * 8         # its block, nothing more
        assert got.inbound[traffic.STATISTICS] == stats_in
        assert len([v for v in inbox[3][key] if br.opened(v)[0] == br.STATS]) == P
    assert sorted(v.block for v in versions) == [0, 1, 2, 3]
    for b in range(4):
        run(4, "f:%d" % b, inbox[4]["f:%d" % b], versions)
    header = br.decode_header(br.read_blob(br.scratch_names.header_path(str(tmp_path), 1)))
    end = br.Start(str(tmp_path), 1, 4, 1, 0)
    _same_bits(ref, br.load_algorithm(end, header))
