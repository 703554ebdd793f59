"""Statistics written to and read from scratch files without byte copies, and merged into
a sum sized once: the same bytes, errors, sums and layout as the in-memory forms."""
import copy

import numpy as np
import pytest

from lda_core.algorithms.algorithm import read_arrays, unpack_arrays
from lda_core.algorithms.vb_stats import VBStats


def _piece(rng, V, K, n_words, step=3):
    ids = np.sort(rng.choice(V, n_words, replace=False)).astype(np.int32)
    st = VBStats.empty(K, V, step=step)
    st.add_block(ids, rng.gamma(0.3, 1.0, (n_words, K)))
    st.n_docs, st.n_tokens, st.score = n_words, 3 * n_words, -float(n_words)
    st.sum_elogtheta = rng.normal(size=K)
    return st


def _same(a: VBStats, b: VBStats):
    assert a.dense == b.dense
    assert np.array_equal(a.word_ids, b.word_ids)
    assert a.sstats.tobytes() == b.sstats.tobytes()
    assert a.sum_elogtheta.tobytes() == b.sum_elogtheta.tobytes()
    assert a.topic_mass.tobytes() == b.topic_mass.tobytes()
    assert (a.score, a.n_docs, a.n_tokens, a.step) == (b.score, b.n_docs, b.n_tokens, b.step)


def test_write_to_read_from_round_trip_and_errors(tmp_path):
    rng = np.random.default_rng(0)
    st = _piece(rng, 500, 7, 120)
    path = tmp_path / "s.bin"
    with open(path, "wb") as f:
        n = st.write_to(f)
    raw = path.read_bytes()
    assert raw == st.to_bytes() and n == len(raw)
    with open(path, "rb") as f:
        _same(VBStats.read_from(f, n), st)
    with open(path, "rb") as f:
        assert np.array_equal(VBStats.read_row_ids(f, n), st.word_ids)
    h_mem, a_mem = unpack_arrays(b"LDAVBS02", raw)
    with open(path, "rb") as f:
        h_file, a_file = read_arrays(f, b"LDAVBS02", n)
    assert h_mem == h_file and all(np.array_equal(a_mem[k], a_file[k]) for k in a_mem)
    # a damaged byte: the CRC check names it; a truncated file: the array named
    bad = bytearray(raw)
    bad[-9] ^= 0xFF
    path.write_bytes(bytes(bad))
    with open(path, "rb") as f, pytest.raises(ValueError, match="CRC-32"):
        VBStats.read_from(f, n)
    cut = 100 + st.topic_mass.nbytes          # into sstats, past the K-vectors after it
    path.write_bytes(raw[:-cut])
    with open(path, "rb") as f, pytest.raises(ValueError, match="truncated.*array sstats"):
        VBStats.read_from(f, n - cut)          # sizes checked before the allocation
    with open(path, "rb") as f, pytest.raises(ValueError, match="truncated.*array sstats"):
        VBStats.read_from(f, n)                # the file ends before its stated size


@pytest.mark.parametrize("n_words", [30, 90, 260])   # stays sparse / crosses to dense / dense
def test_reserved_merge_equals_sequential_merge(tmp_path, monkeypatch, n_words):
    import lda_core.algorithms.algorithm
    from pipelines.training.beam_stats import merge_in_order, spill_stats
    monkeypatch.setattr(lda_core.algorithms.algorithm, "_CHUNK_BYTES", 200)   # several row blocks
    rng = np.random.default_rng(n_words)
    V, K = 400, 6
    pieces = {i: _piece(rng, V, K, n_words) for i in range(4)}
    pieces[2] = VBStats.empty(K, V, step=3)          # an empty piece in the middle
    ref = None
    for i in sorted(pieces):                         # the plain pairwise merge
        p = copy.deepcopy(pieces[i])
        ref = p if ref is None else ref.merge(p)
    spilled = {i: spill_stats(s, str(tmp_path / ("p%d.bin" % i))) for i, s in pieces.items()}
    _same(merge_in_order(spilled), ref)
    _same(merge_in_order(copy.deepcopy(pieces)), ref)
    # a running total given first: sized for all the pieces
    first = copy.deepcopy(pieces[0])
    _same(merge_in_order({i: spilled[i] for i in (1, 2, 3)}, first), ref)


def test_streamed_merge_refuses_mismatched_pieces_before_adding(tmp_path):
    from pipelines.training.beam_stats import merge_in_order, spill_stats
    rng = np.random.default_rng(5)
    a, b = _piece(rng, 300, 4, 40, step=3), _piece(rng, 300, 4, 40, step=4)
    before = copy.deepcopy(a)
    spilled = spill_stats(b, str(tmp_path / "b.bin"))
    with pytest.raises(ValueError, match="global steps 3 and 4"):
        merge_in_order({1: spilled}, a)
    assert np.array_equal(a.to_dense(), before.to_dense())   # the sums untouched
