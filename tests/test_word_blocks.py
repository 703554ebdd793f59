"""The global step by word blocks (lda_core.algorithms.word_blocks): a simulated cluster -- each
block's owner holding only its rows and a header decoded from bytes, statistics split by block
and merged in piece order, partials passed as bytes, E-steps through views holding only a
piece's rows -- ends bit for bit where the in-process trainer does at the same B; a numpy
reference of one step; refused steps; B recorded in checkpoints."""
import numpy as np
import pytest

from lda_core.algorithms.online_vb import OnlineVB
from lda_core.algorithms.scvb0 import SCVB0
from lda_core.algorithms.word_blocks import (BlockHeader, BlockPartial, block_bounds,
                                             blocks_of, in_word_order, rows_of_words,
                                             split_draw)
from lda_core.errors import StepRefused
from lda_core.training.pieces import local_step_pieces, piece_bounds
from helpers.uci import uci_docbatch

K = 8
S = 50
PIECES = 3
STEPS = 5


@pytest.fixture(scope="module")
def kos(kos_paths):
    batch, V = uci_docbatch(kos_paths[0], S * STEPS)
    return batch, V


def minibatches(batch):
    return [batch.take(np.arange(i, i + S)) for i in range(0, batch.n_docs, S)]


def rows_of(owners, bounds, ids):
    """The rows of the sorted word ids ``ids`` gathered from the owners' blocks (what a worker
    reads: only its words' rows)."""
    out = []
    for (lo, hi), rows, sl in zip(bounds, owners, blocks_of(ids, bounds[-1][1], len(bounds))):
        out.append(rows[ids[sl] - lo])
    return np.concatenate(out)


def cluster_run(cls, V, batches, B, settings):
    """The simulated cluster; returns (final algorithm rebuilt from the owners, infos)."""
    start = cls(K, V, word_blocks=B, seed=3, **settings)
    header_bytes = start.shard_header().to_bytes()
    owners = [start.block_rows(b).copy() for b in range(B)]    # each owner's own copy
    bounds = block_bounds(V, B)
    infos = []
    for batch in batches:
        header = BlockHeader.from_bytes(header_bytes)
        block_stats = [None] * B
        for lo, hi in piece_bounds(batch.n_docs, PIECES):
            piece = batch.take(np.arange(lo, hi))
            ids = np.sort(rows_of_words(np.unique(piece.word_ids), V, B))   # state rows
            view = cls.estep_view(BlockHeader.from_bytes(header_bytes), ids,
                                  rows_of(owners, bounds, ids))
            for b, sb in enumerate(view.local_step(piece).split_by_block(B)):
                sb = type(sb).from_bytes(sb.to_bytes())
                block_stats[b] = sb if block_stats[b] is None else block_stats[b].merge(sb)
        parts = []
        for b in range(B):             # each owner: its header copy, its plan, its rows
            own = BlockHeader.from_bytes(header_bytes)
            plan = cls.plan_step(own, block_stats[b])
            part = cls.update_block(own, plan, b, owners[b], block_stats[b])
            parts.append(BlockPartial.from_bytes(part.to_bytes()))
        plan = cls.plan_step(header, block_stats[0])
        header2, info = cls.finish_step(header, plan, parts)
        header_bytes = header2.to_bytes()
        infos.append(info)
    return cls.from_shards(BlockHeader.from_bytes(header_bytes), owners), infos


def inprocess_run(cls, V, batches, B, settings):
    algo = cls(K, V, word_blocks=B, seed=3, **settings)
    infos = [algo.global_step(local_step_pieces(algo, b, PIECES)) for b in batches]
    return algo, infos


def assert_same_state(a, b):
    assert np.array_equal(a.topic_word(), b.topic_word())
    sa, sb = a.to_state(), b.to_state()
    assert sa.step == sb.step and sa.docs_seen == sb.docs_seen
    assert sorted(sa.arrays) == sorted(sb.arrays)
    for k in sa.arrays:
        assert np.array_equal(sa.arrays[k], sb.arrays[k]), k


VB_SETTINGS = {"reseed": {"reseed": 0.3},
               "hyper": {"optimize_alpha": True, "optimize_eta": True}}


@pytest.mark.parametrize("B", [1, 2, 3, 8])
@pytest.mark.parametrize("what", sorted(VB_SETTINGS))
def test_online_vb_cluster_equals_inprocess(kos, B, what):
    batch, V = kos
    batches = minibatches(batch)
    settings = VB_SETTINGS[what]
    ref, ref_infos = inprocess_run(OnlineVB, V, batches, B, settings)
    got, infos = cluster_run(OnlineVB, V, batches, B, settings)
    assert_same_state(got, ref)
    assert ref.step == STEPS and got.word_blocks == B
    if what == "reseed":       # the splits were exercised
        assert sum(i["reseeded"] for i in ref_infos) > 0
        assert [i["reseeded"] for i in infos] == [i["reseeded"] for i in ref_infos]
    else:                      # α and η moved
        assert not np.allclose(ref.alpha, 1.0 / K) and ref.eta != 1.0 / K
        assert [i["eta"] for i in infos] == [i["eta"] for i in ref_infos]


def test_online_vb_blocks_agree_with_one_block(kos):
    """B changes only the summation order: B = 3 and B = 1 agree to rounding."""
    batch, V = kos
    a, _ = inprocess_run(OnlineVB, V, minibatches(batch), 1, VB_SETTINGS["reseed"])
    b, _ = inprocess_run(OnlineVB, V, minibatches(batch), 3, VB_SETTINGS["reseed"])
    np.testing.assert_allclose(b.topic_word(), a.topic_word(), rtol=1e-10, atol=0)


def test_online_vb_step_matches_numpy_reference(kos):
    """One global step at B = 3 against the dense update of the paper (eq. 6-7):
    λ ← (1 − ρ) λ + ρ (η + (D/S) sstats), ρ = (τ0 + t)^−κ."""
    batch, V = kos
    algo = OnlineVB(K, V, word_blocks=3, seed=3, reseed=0.0, corpus_size=1000, tau0=4.0)
    mb = minibatches(batch)
    algo.global_step(algo.local_step(mb[0]))      # a state that is not the initial draw
    lam = algo.lambda_()
    stats = local_step_pieces(algo, mb[1], PIECES)
    sst = in_word_order(stats.to_dense(), 3).T        # statistics are kept by state row
    rho = (4.0 + 1) ** -0.7
    want = (1 - rho) * lam + rho * (algo.eta + (1000.0 / stats.n_docs) * sst)
    algo.global_step(stats)
    np.testing.assert_allclose(algo.lambda_(), want, rtol=1e-12, atol=0)
    np.testing.assert_allclose(algo._colsum(), want.sum(axis=1), rtol=1e-12)


def test_split_draw_is_a_slice_of_the_whole_draw():
    whole = split_draw(5, 7, 2, 0, 1000)
    for lo, hi in block_bounds(1000, 7):
        assert np.array_equal(split_draw(5, 7, 2, lo, hi), whole[lo:hi])


def test_block_bounds_and_blocks_of():
    """Words are dealt to the blocks round-robin (word w: block w mod B, row w // B in it),
    so that the frequent words -- the low ids -- spread over every block."""
    assert block_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    ids = np.array([0, 2, 3, 7, 9])
    assert [ids[s].tolist() for s in blocks_of(ids, 10, 3)] == [[0, 2, 3], [], [7, 9]]
    rows = rows_of_words(np.arange(10), 10, 3)
    assert rows.tolist() == [0, 4, 7, 1, 5, 8, 2, 6, 9, 3]
    from lda_core.algorithms.word_blocks import words_of_rows
    assert np.array_equal(words_of_rows(10, 3)[rows], np.arange(10))
    assert np.array_equal(rows_of_words(np.arange(7), 7, 1), np.arange(7))
    # the first words of a frequency-ordered vocabulary land in different blocks
    first = rows_of_words(np.arange(3), 10, 3)
    assert [int(np.searchsorted([4, 7, 10], r, side="right")) for r in first] == [0, 1, 2]


def _poisoned(algo, batch, block):
    """The minibatch's statistics with one row of word block ``block`` made NaN."""
    stats = local_step_pieces(algo, batch, PIECES)
    lo, hi = block_bounds(algo.n_words, algo.word_blocks)[block]
    i = int(np.nonzero((stats.word_ids >= lo) & (stats.word_ids < hi))[0][0])
    stats.sstats[i, 1] = np.nan
    return stats


def test_refused_step_leaves_every_block_and_the_header_unchanged(kos):
    batch, V = kos
    mb = minibatches(batch)
    algo = OnlineVB(K, V, word_blocks=3, seed=3)
    algo.global_step(algo.local_step(mb[0]))
    stats = _poisoned(algo, mb[1], 2)
    before = [algo.block_rows(b).copy() for b in range(3)]
    header = algo.shard_header().to_bytes()
    with pytest.raises(StepRefused):
        algo.global_step(stats)
    assert all(np.array_equal(algo.block_rows(b), before[b]) for b in range(3))
    assert algo.shard_header().to_bytes() == header
    # the cluster: the owner of block 2 refuses, finish_step refuses the step
    hdr = BlockHeader.from_bytes(header)
    blocks = stats.split_by_block(3)
    plan = OnlineVB.plan_step(hdr, blocks[0])
    owners = [r.copy() for r in before]
    parts = [OnlineVB.update_block(hdr, plan, b, owners[b], blocks[b]) for b in range(3)]
    assert [p.flags["finite"] for p in parts] == [True, True, False]
    assert np.array_equal(owners[2], before[2])       # the refusing owner wrote nothing
    with pytest.raises(StepRefused):
        OnlineVB.finish_step(hdr, plan, parts)


def test_word_blocks_recorded_in_checkpoints(kos):
    batch, V = kos
    algo = OnlineVB(K, V, word_blocks=4, seed=3)
    algo.global_step(algo.local_step(minibatches(batch)[0]))
    state = algo.to_state()
    assert state.params["word_blocks"] == 4
    assert OnlineVB.from_state(state).word_blocks == 4
    del state.params["word_blocks"]                   # a checkpoint written before blocks
    assert OnlineVB.from_state(state).word_blocks == 1


def test_header_and_partial_bytes_round_trip(kos):
    batch, V = kos
    algo = OnlineVB(K, V, word_blocks=2, seed=3, optimize_alpha=True)
    h = algo.shard_header()
    h2 = BlockHeader.from_bytes(h.to_bytes())
    assert h2.params == h.params and h2.counters == h.counters
    assert all(np.array_equal(h.arrays[k], h2.arrays[k]) for k in h.arrays)
    assert len(h.to_bytes()) < 2000 + 64 * K
    with pytest.raises(ValueError):
        BlockHeader.from_bytes(h.to_bytes()[:-3])


# -- SCVB0 ----------------------------------------------------------------------------------


SCVB0_SETTINGS = {"reseed": {"reseed": 0.95, "corpus_tokens": 200000},
                  "float32": {"dtype": "float32", "renorm_below": 0.5, "s_phi": 1.0,
                              "tau_phi": 1.0}}


@pytest.mark.parametrize("B", [1, 2, 3, 8])
@pytest.mark.parametrize("what", sorted(SCVB0_SETTINGS))
def test_scvb0_cluster_equals_inprocess(kos, B, what):
    batch, V = kos
    batches = minibatches(batch)
    settings = SCVB0_SETTINGS[what]
    ref, ref_infos = inprocess_run(SCVB0, V, batches, B, settings)
    got, infos = cluster_run(SCVB0, V, batches, B, settings)
    assert_same_state(got, ref)
    assert ref.step == STEPS and got.word_blocks == B
    assert [i["reseeded"] for i in infos] == [i["reseeded"] for i in ref_infos]
    if what == "reseed":
        assert sum(i["reseeded"] for i in ref_infos) > 0


def test_scvb0_refused_step_leaves_every_block_and_the_header_unchanged(kos):
    batch, V = kos
    mb = minibatches(batch)
    algo = SCVB0(K, V, word_blocks=3, seed=3)
    algo.global_step(algo.local_step(mb[0]))
    stats = local_step_pieces(algo, mb[1], PIECES)
    lo, hi = block_bounds(V, 3)[1]
    i = int(np.nonzero((stats.block.rows >= lo) & (stats.block.rows < hi))[0][0])
    stats.block.values[i, 0] = np.inf
    before = [algo.block_rows(b).copy() for b in range(3)]
    header = algo.shard_header().to_bytes()
    with pytest.raises(StepRefused):
        algo.global_step(stats)
    assert all(np.array_equal(algo.block_rows(b), before[b]) for b in range(3))
    assert algo.shard_header().to_bytes() == header
    hdr = BlockHeader.from_bytes(header)
    blocks = stats.split_by_block(3)
    plan = SCVB0.plan_step(hdr, blocks[0])
    owners = [r.copy() for r in before]
    parts = [SCVB0.update_block(hdr, plan, b, owners[b], blocks[b]) for b in range(3)]
    assert [p.flags["finite"] for p in parts] == [True, False, True]
    assert np.array_equal(owners[1], before[1])
    with pytest.raises(StepRefused):
        SCVB0.finish_step(hdr, plan, parts)


def test_scvb0_word_blocks_recorded_in_checkpoints(kos):
    batch, V = kos
    algo = SCVB0(K, V, word_blocks=4, seed=3)
    algo.global_step(algo.local_step(minibatches(batch)[0]))
    state = algo.to_state()
    assert state.params["word_blocks"] == 4
    assert SCVB0.from_state(state).word_blocks == 4
    del state.params["word_blocks"]
    assert SCVB0.from_state(state).word_blocks == 1


def test_cli_resume_keeps_the_recorded_word_blocks(kos_paths, tmp_path, capsys):
    """`ldabeam train --word-blocks 4` is recorded; `--resume --word-blocks 2` is a one-line
    usage error; `--resume` alone continues with 4 and ends on the bits of an uninterrupted
    run with 4 blocks."""
    from lda_core.storage.checkpoint import CheckpointStore
    from pipelines import cli
    from helpers.uci import kos_dataset as make_dataset
    ds = make_dataset(str(tmp_path / "ds"), kos_paths, n_train=200, n_held=20)
    md = str(tmp_path / "m")
    base = ["train", "--shards", ds, "--algorithm", "online-vb", "--topics", "5",
            "--minibatch", "40", "--seed", "3", "--passes", "1", "--runner", "inprocess",
            "--no-progress"]

    def run(*extra):
        rc = cli.main(base + list(extra))
        return rc, capsys.readouterr()

    rc, _ = run("--output", md, "--word-blocks", "4", "--max-steps", "2")
    assert rc == 0 and CheckpointStore(md).latest().params["word_blocks"] == 4
    rc, (out, err) = run("--output", md, "--resume", "--word-blocks", "2")
    assert rc == 2 and "--word-blocks 2: this run was trained with 4 word blocks" in err
    rc, _ = run("--output", md, "--resume")
    assert rc == 0
    got = CheckpointStore(md).latest()
    assert got.params["word_blocks"] == 4
    rc, _ = run("--output", str(tmp_path / "ref"), "--word-blocks", "4")
    assert rc == 0
    ref = CheckpointStore(str(tmp_path / "ref")).latest()
    assert ref.step == got.step == 5
    for k in ref.arrays:
        assert ref.arrays[k].tobytes() == got.arrays[k].tobytes(), k


@pytest.mark.parametrize("cls", [OnlineVB, SCVB0])
def test_set_word_blocks_keeps_the_model_and_equals_a_fresh_start(kos, cls):
    """Re-laying out a fresh state in B blocks changes nothing of the model, and training it
    lands on the bits of one constructed with B blocks (what a remote run's default does)."""
    batch, V = kos
    settings = VB_SETTINGS["reseed"] if cls is OnlineVB else SCVB0_SETTINGS["reseed"]
    a = cls(K, V, seed=3, **settings)
    before = a.topic_word()
    a.set_word_blocks(3)
    assert a.word_blocks == 3 and np.array_equal(a.topic_word(), before)
    b = cls(K, V, seed=3, word_blocks=3, **settings)
    for mb in minibatches(batch):
        for algo in (a, b):
            algo.global_step(local_step_pieces(algo, mb, PIECES))
    assert_same_state(a, b)


def test_reseeding_is_decided_from_the_statistics_small_part(kos):
    """The re-seeding splits are part of the plan: every block's cut of a piece carries the
    piece's tokens per topic (``topic_mass``), pieces add it in piece order, so each owner
    decides the same splits from its own block's statistics and applies them in the same
    visit as its update (one round of partials per step)."""
    batch, V = kos
    B = 3
    algo = OnlineVB(K, V, word_blocks=B, seed=3, reseed=0.9)   # most topics count as dead
    pieces = [algo.local_step(batch.take(np.arange(lo, hi)))
              for lo, hi in piece_bounds(S, PIECES)]
    for p in pieces:                 # Σ_w of the piece's rows, row by row
        assert np.array_equal(p.topic_mass, p.sstats.sum(axis=0))
    cuts = [p.split_by_block(B) for p in pieces]
    for p, c in zip(pieces, cuts):
        assert all(np.array_equal(cb.topic_mass, p.topic_mass) for cb in c)
    merged = [None] * B
    for c in cuts:                   # each owner merges its block's cuts in piece order
        for b in range(B):
            cb = type(c[b]).from_bytes(c[b].to_bytes())
            merged[b] = cb if merged[b] is None else merged[b].merge(cb)
    mass = pieces[0].topic_mass + pieces[1].topic_mass + pieces[2].topic_mass
    header = algo.shard_header()
    plans = [OnlineVB.plan_step(header, m) for m in merged]
    assert all(np.array_equal(m.topic_mass, mass) for m in merged)
    pairs = [p.values["splits"].pairs for p in plans]
    assert pairs[0] and all(pr == pairs[0] for pr in pairs)
    # an owner's partial holds the split columns' sums of its rows after the splits
    rows = [algo.block_rows(b).copy() for b in range(B)]
    part = OnlineVB.update_block(header, plans[1], 1, rows[1], merged[1])
    assert part.sums["split"].shape == (len(pairs[0]), 2)
    k, j = pairs[0][-1]
    assert np.isclose(part.sums["split"][-1][0], rows[1][:, k].sum(), rtol=1e-12)
