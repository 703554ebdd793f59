"""Online VB's global step from the pieces' files block by block of rows (``VBStatsSum``):
the same state, bit for bit, as the step from the merged statistics, whatever the blocks;
everything checked before λ changes."""
import copy
import os

import numpy as np
import pytest

from lda_core.algorithms.online_vb import BatchVB, OnlineVB
from lda_core.algorithms.vb_stats import VBStats, VBStatsSum
from helpers.uci import uci_docbatch


@pytest.fixture(scope="module")
def kos(kos_paths):
    return uci_docbatch(kos_paths[0], 400)


def _model(cls, V, **kw):
    return cls(20, V, seed=3, corpus_size=3000, **kw)


def _pieces(algo, batch, n_docs, n_pieces):
    cut = np.linspace(0, n_docs, n_pieces + 1).astype(int)
    return [algo.local_step(batch.take(np.arange(a, b))) for a, b in zip(cut[:-1], cut[1:])]


def _write(pieces, folder, lead=b"xyz"):
    """Each piece written after ``lead`` junk bytes (a segment at an offset, as the spilled
    files hold them behind their class header); returns the parts."""
    parts = []
    for i, st in enumerate(pieces):
        path = os.path.join(str(folder), "p%d.bin" % i)
        with open(path, "wb") as f:
            f.write(lead)
            n = st.write_to(f)
        parts.append((path, len(lead), n))
    return parts


def _merged(pieces):
    out = None
    for p in pieces:
        p = copy.deepcopy(p)
        out = p if out is None else out.merge(p)
    return out


def _same_state(a, b):
    assert a._ntilde.tobytes() == b._ntilde.tobytes()
    assert a._ntilde_colsum.tobytes() == b._ntilde_colsum.tobytes()
    assert (a._a, a._pi, a.eta, a.step, a.docs_seen) == (b._a, b._pi, b.eta, b.step,
                                                         b.docs_seen)
    assert a.alpha.tobytes() == b.alpha.tobytes()


@pytest.mark.parametrize("n_docs", [24, 400])       # the summed rows stay sparse / go dense
def test_blockwise_step_equals_whole_array_step_bit_for_bit(kos, tmp_path, n_docs):
    batch, V = kos
    whole = _model(OnlineVB, V, optimize_alpha=True, reseed=0.3)
    blocks = copy.deepcopy(whole)
    reseeded = 0
    for step in range(3):
        pieces = _pieces(whole, batch, n_docs, 4)
        ref = _merged(pieces)
        lazy = VBStatsSum(_write(pieces, tmp_path), block_bytes=20 * 8 * 37)  # 37 rows a block
        assert lazy.dense == ref.dense and np.array_equal(lazy.word_ids, ref.word_ids)
        assert len(lazy.word_ids) > 5 * 37                                   # several blocks
        assert (lazy.n_docs, lazy.n_tokens, lazy.score, lazy.step) == (
            ref.n_docs, ref.n_tokens, ref.score, ref.step)
        info_w = whole.global_step(ref)
        info_b = blocks.global_step(lazy)
        assert info_b == info_w                # mean_change, reseeded, bound: same bits
        _same_state(whole, blocks)
        reseeded += info_w["reseeded"]
    assert ref.dense == (n_docs == 400)
    assert reseeded > 0             # the topic mass that decides re-seeding is summed as well


def test_blockwise_batch_vb_step_folds_the_scale_identically(kos, tmp_path):
    """ρ = 1 folds π into Ñ every step: the state is bit for bit the same; the logged mean
    |Δλ| is the sum of per-block sums (equal to float64 rounding)."""
    batch, V = kos
    whole = _model(BatchVB, V)
    blocks = copy.deepcopy(whole)
    pieces = _pieces(whole, batch, 200, 3)
    info_w = whole.global_step(_merged(pieces))
    info_b = blocks.global_step(VBStatsSum(_write(pieces, tmp_path), block_bytes=20 * 8 * 50))
    _same_state(whole, blocks)
    assert info_b["mean_change"] == pytest.approx(info_w["mean_change"], rel=1e-12)
    assert {k: v for k, v in info_b.items() if k != "mean_change"} == {
        k: v for k, v in info_w.items() if k != "mean_change"}


@pytest.mark.parametrize("damage", ["nan", "negative", "crc"])
def test_blockwise_step_checks_every_block_before_writing(kos, tmp_path, damage):
    batch, V = kos
    algo = _model(OnlineVB, V)
    pieces = _pieces(algo, batch, 200, 3)
    last = pieces[-1]
    if damage == "nan":
        last.sstats[-1, -1] = np.nan           # in the last piece's last row: the last block
    elif damage == "negative":
        last.sstats[-1, 0] = -1.0
    parts = _write(pieces, tmp_path)
    if damage == "crc":
        path, off, n = parts[-1]
        raw = bytearray(open(path, "rb").read())
        raw[off + n - 8 * 20 - 3] ^= 0x10     # a byte of the last piece's Σ E[log θ]
        open(path, "wb").write(bytes(raw))
    before = copy.deepcopy(algo)
    msg = {"nan": "non-finite statistics", "negative": "negative statistics",
           "crc": "p2.bin: statistics byte string fails its CRC-32"}[damage]
    with pytest.raises(ValueError, match=msg):
        algo.global_step(VBStatsSum(parts, block_bytes=20 * 8 * 40))
    _same_state(algo, before)


def test_sum_in_order_of_spilled_pieces_is_the_lazy_sum(kos, tmp_path):
    """The Beam workers' path: spilled pieces give a ``VBStatsSum`` whose step equals the
    step from ``merge_in_order``'s merged statistics; pieces in memory are merged."""
    from pipelines.training.beam_stats import merge_in_order, spill_stats, sum_in_order
    batch, V = kos
    algo = _model(OnlineVB, V)
    pieces = _pieces(algo, batch, 120, 3)
    spilled = {i: spill_stats(st, str(tmp_path / ("s%d.bin" % i))) for i, st in
               enumerate(pieces)}
    lazy = sum_in_order(dict(reversed(list(spilled.items()))))     # piece order, not arrival
    assert isinstance(lazy, VBStatsSum)
    other = copy.deepcopy(algo)
    assert algo.global_step(lazy) == other.global_step(merge_in_order(spilled))
    _same_state(algo, other)
    assert isinstance(sum_in_order(dict(enumerate(copy.deepcopy(pieces)))), VBStats)


