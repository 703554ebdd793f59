"""SCVB0 (lda_core.algorithms.scvb0) against small numpy references, plus the sparse accumulators."""
import pickle

import numpy as np
import pytest

from lda_core.docbatch import DocBatch
from lda_core.algorithms.scvb0 import SCVB0, SCVB0Stats
from lda_core.algorithms.scvb0_kernel import chunk_bounds, scvb0_estep
from lda_core.algorithms.sparse_stats import RowBlock, SparseTriplets
from helpers.planted import match_topics, planted_tokens as planted_corpus
from helpers.trainers import run_both_trainers
from helpers.uci import uci_docbatch


# ----------------------------------------------------------------------------- helpers
def reference_doc(word_rows, counts, tile, alpha, passes, s, tau, kappa, order=None):
    """Numpy SCVB0 for one document, processing every token separately (no clumping) but
    holding γ fixed for the m copies of a word, as eq. 9 assumes (the schedule index t
    advances once per clump, as in the kernel)."""
    K = tile.shape[1]
    cj = float(sum(counts))
    nt = np.full(K, cj / K)
    acc = np.zeros_like(tile)
    t = 0
    order = range(len(word_rows)) if order is None else order
    for p in range(passes):
        for i in order:
            u, m = word_rows[i], counts[i]
            g = tile[u] * (nt + alpha)
            g /= g.sum()
            rho = min(1.0, s * (tau + t) ** -kappa)
            t += 1
            for _ in range(m):                       # m unclumped updates, γ held fixed
                nt = (1 - rho) * nt + rho * cj * g
            if p == passes - 1:
                acc[u] += m * g
    return nt, acc


# ----------------------------------------------------------------------------- the update
def test_clumped_update_equals_m_unclumped_updates():
    rng = np.random.default_rng(0)
    K, m, cj, rho = 7, 5, 40.0, 0.13
    nt = rng.random(K) * 10
    g = rng.dirichlet(np.ones(K))
    eager = nt.copy()
    for _ in range(m):
        eager = (1 - rho) * eager + rho * cj * g
    clumped = (1 - rho) ** m * nt + cj * g * (1 - (1 - rho) ** m)   # paper eq. 9
    np.testing.assert_allclose(clumped, eager, rtol=1e-12)


def test_kernel_matches_numpy_reference():
    rng = np.random.default_rng(3)
    U, K = 12, 6
    tile = rng.random((U, K)) + 0.05
    docs = [([0, 3, 5, 11], [1, 4, 2, 7]), ([1, 2], [3, 1]), ([], []), ([4, 6, 7, 8, 9], [1, 1, 2, 1, 9])]
    b = DocBatch.from_rows(docs)
    alpha, passes, s, tau, kappa = 0.1, 3, 1.0, 10.0, 0.9
    chunks, piece_chunks = chunk_bounds([(0, b.n_docs)], 2)
    nt, acc, nz, upd = scvb0_estep(b.indptr, b.word_ids, b.counts, tile, alpha, passes, s, tau,
                                   kappa, np.arange(4, dtype=np.int64), False, chunks,
                                   piece_chunks, True)
    ref_acc = np.zeros_like(tile)
    for d, (w, c) in enumerate(docs):
        if not w:
            assert np.all(nt[d] == 0) and upd[d] == 0
            continue
        rnt, racc = reference_doc(w, c, tile, alpha, passes, s, tau, kappa)
        np.testing.assert_allclose(nt[d], rnt, rtol=1e-9)
        ref_acc += racc
        assert upd[d] == passes * len(w)
    np.testing.assert_allclose(acc, ref_acc, rtol=1e-9, atol=1e-12)
    assert nz.tobytes() == acc.sum(0).tobytes()        # N^Z: the rows added in row order
    # Σ_u acc = tokens of the batch (γ sums to 1 per clump)
    assert acc.sum() == pytest.approx(b.n_tokens, rel=1e-12)


def test_lazy_scaled_nphi_equals_eager_decay():
    batch, _ = planted_corpus(n_docs=120)
    m = SCVB0(4, 40, corpus_tokens=batch.n_tokens, seed=5, renorm_below=0.6, tau_phi=2.0,
              s_phi=1.0)
    eager = m.n_phi().copy()
    eager_nz = m.nz.copy()
    C = batch.n_tokens
    renormalised = False
    for i in range(6):
        b = batch.take(range(i * 20, (i + 1) * 20))
        st = m.local_step(b)
        rho = m.rho_phi(m.step)
        nhat = np.zeros_like(eager)
        nhat[st.block.rows] = st.block.values * C / st.n_tokens
        eager = (1 - rho) * eager + rho * nhat                       # paper eq. 7
        eager_nz = (1 - rho) * eager_nz + rho * st.nz * C / st.n_tokens   # eq. 8
        info = m.global_step(st)
        renormalised |= info["pi"] == 1.0
        np.testing.assert_allclose(m.n_phi(), eager, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(m.nz, eager_nz, rtol=1e-10)
        np.testing.assert_allclose(m.nz, m.n_phi().sum(0), rtol=1e-9)
    assert renormalised, "the renormalisation path was not exercised"


def test_split_and_merge_equal_whole_batch_and_thread_count_free():
    batch, _ = planted_corpus(n_docs=40)
    m = SCVB0(4, 40, corpus_tokens=10000, seed=2)
    whole = m.local_step(batch)
    a = m.local_step(batch.take(range(0, 13)))
    b = m.local_step(batch.take(range(13, 40)))
    merged = m.empty_stats().merge(b).merge(a)
    np.testing.assert_array_equal(whole.block.rows, merged.block.rows)
    np.testing.assert_allclose(whole.block.values, merged.block.values, rtol=1e-12)
    np.testing.assert_allclose(whole.nz, merged.nz, rtol=1e-12)
    for c in ("n_docs", "n_tokens", "n_empty", "n_iterations", "n_capped"):
        assert getattr(whole, c) == getattr(merged, c)
    m1 = SCVB0(4, 40, corpus_tokens=10000, seed=2, n_threads=1)
    np.testing.assert_allclose(m1.infer(batch), m.infer(batch), rtol=1e-12)
    # pickling (Beam ships accumulators) keeps everything
    p = pickle.loads(pickle.dumps(merged))
    np.testing.assert_array_equal(p.block.values, merged.block.values)
    assert p.n_tokens == merged.n_tokens


def test_planted_topics_recovered():
    batch, truth = planted_corpus()
    m = SCVB0(4, 40, corpus_tokens=batch.n_tokens, seed=0, tau_phi=10.0,
              s_phi=1.0)
    rng = np.random.default_rng(0)
    for _ in range(8):
        perm = rng.permutation(batch.n_docs)
        for s in range(0, batch.n_docs, 20):
            m.global_step(m.local_step(batch.take(perm[s:s + 20])))
    phi = m.topic_word()
    np.testing.assert_allclose(phi.sum(1), 1.0, rtol=1e-12)
    assert match_topics(phi, truth).min() > 0.95
    theta = m.infer(batch.take(range(10)))
    assert theta.shape == (10, 4)
    np.testing.assert_allclose(theta.sum(1), 1.0, rtol=1e-12)


def test_checkpoint_resume_bit_for_bit(tmp_path):
    from lda_core.storage.state import TopicState
    batch, _ = planted_corpus(n_docs=100)
    steps = [batch.take(range(i * 20, (i + 1) * 20)) for i in range(5)]

    def run(m, bs):
        for b in bs:
            m.global_step(m.local_step(b))
        return m

    full = run(SCVB0(4, 40, corpus_tokens=batch.n_tokens, seed=9), steps)
    part = run(SCVB0(4, 40, corpus_tokens=batch.n_tokens, seed=9), steps[:2])
    part.to_state().save(str(tmp_path / "ck"))
    resumed = SCVB0.from_state(TopicState.load(str(tmp_path / "ck")))
    assert resumed.step == 2 and resumed.docs_seen == 40
    run(resumed, steps[2:])
    np.testing.assert_array_equal(full._ntilde, resumed._ntilde)
    np.testing.assert_array_equal(full.nz, resumed.nz)
    assert full._pi == resumed._pi and full.step == resumed.step
    np.testing.assert_array_equal(full.topic_word(), resumed.topic_word())


def test_non_finite_statistics_refused_and_state_untouched():
    batch, _ = planted_corpus(n_docs=20)
    m = SCVB0(4, 40, corpus_tokens=5000)
    st = m.local_step(batch)
    st.block.values[0, 0] = np.nan
    before = (m._ntilde.copy(), m.nz.copy(), m._pi, m.step)
    with pytest.raises(ValueError, match="non-finite"):
        m.global_step(st)
    np.testing.assert_array_equal(m._ntilde, before[0])
    np.testing.assert_array_equal(m.nz, before[1])
    assert (m._pi, m.step) == before[2:]


@pytest.mark.parametrize("kw,name", [
    (dict(alpha=0), "alpha"), (dict(eta=-1), "eta"),
    (dict(corpus_tokens=0), "corpus_tokens"), (dict(burn_in=-1), "burn_in"),
    (dict(kappa_phi=0.4), "kappa_phi"), (dict(kappa_theta=1.5), "kappa_theta"),
    (dict(tau_phi=-1), "tau_phi"), (dict(s_phi=0), "s_phi"), (dict(s_theta=float("nan")), "s_theta"),
    (dict(tau_theta=-2), "tau_theta"), (dict(dtype="int8"), "dtype"), (dict(seed=-1), "seed"),
    (dict(n_threads=0), "n_threads"), (dict(renorm_below=2.0), "renorm_below"),
])
def test_settings_validated(kw, name):
    with pytest.raises(ValueError, match=name):
        SCVB0(3, 10, **kw)


def test_word_ids_outside_vocabulary_and_empty_documents():
    m = SCVB0(3, 10)
    with pytest.raises(ValueError, match="word ids"):
        m.local_step(DocBatch.from_rows([([1, 12], [1, 1])]))
    b = DocBatch.from_rows([([], []), ([2], [3])])
    st = m.local_step(b)
    assert (st.n_docs, st.n_empty, st.n_tokens) == (2, 1, 3)
    th = m.infer(b)
    np.testing.assert_allclose(th[0], 1 / 3)


def test_real_kos_slice_beats_unigram(kos_paths):
    from lda_core.evaluation.metrics import document_completion, split_halves, unigram_baseline
    batch, V = uci_docbatch(kos_paths[0], 600)
    train, held = batch.take(range(500)), batch.take(range(500, 600)).non_empty()
    a, b = split_halves(held, 0)
    m = SCVB0(20, V, corpus_tokens=train.n_tokens, seed=0)
    for _ in range(3):
        for s in range(0, 500, 100):
            m.global_step(m.local_step(train.take(range(s, s + 100))))
    ll = document_completion(m.topic_word(), a, b)["ll_per_token"]
    uni = unigram_baseline(train, a, b, n_words=V, smoothing=0.01)["ll_per_token"]
    assert ll > uni + 0.1


# ----------------------------------------------------------------------------- accumulators
def test_rowblock_merge_associative_and_bytes_round_trip():
    rng = np.random.default_rng(0)
    blocks = []
    for _ in range(3):
        rows = np.sort(rng.choice(50, size=10, replace=False)).astype(np.int32)
        blocks.append(RowBlock(4, rows, rng.random((10, 4))))
    dense = sum(b.to_dense(50) for b in blocks)
    copy = lambda b: RowBlock.from_bytes(b.to_bytes())
    left = copy(blocks[0]).merge(copy(blocks[1])).merge(copy(blocks[2]))
    right = copy(blocks[0]).merge(copy(blocks[1]).merge(copy(blocks[2])))
    np.testing.assert_allclose(left.to_dense(50), dense, rtol=1e-12)
    np.testing.assert_allclose(right.to_dense(50), dense, rtol=1e-12)
    assert pickle.loads(pickle.dumps(left)).to_dense(50).tolist() == left.to_dense(50).tolist()
    with pytest.raises(ValueError, match="truncated"):
        RowBlock.from_bytes(left.to_bytes()[:-3])
    with pytest.raises(ValueError, match="magic"):
        RowBlock.from_bytes(b"XXXX" + left.to_bytes()[4:])


def test_sparse_triplets_merge_equals_dense_sum():
    rng = np.random.default_rng(1)
    parts = [SparseTriplets.from_coo(5, rng.integers(0, 30, 40), rng.integers(0, 5, 40),
                                     rng.integers(1, 4, 40)) for _ in range(4)]
    dense = sum(p.to_dense(30) for p in parts)
    acc = SparseTriplets(5)
    for p in parts[::-1]:
        acc.merge(SparseTriplets.from_bytes(p.to_bytes()))
    np.testing.assert_array_equal(acc.to_dense(30), dense)
    assert np.all(np.diff(acc.keys) > 0)
    assert len(pickle.dumps(acc)) < acc.nbytes + 200


# ----------------------------------------------------------------------------- trainers
def test_inprocess_and_beam_trainers_agree(kos_paths, tmp_path):
    a, b = run_both_trainers("scvb0", kos_paths, tmp_path, corpus_tokens=100000)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-9, atol=1e-9, err_msg=k)


def test_float32_storage_close_to_float64():
    batch, _ = planted_corpus(n_docs=60)
    ms = [SCVB0(4, 40, corpus_tokens=batch.n_tokens, seed=4, dtype=dt)
          for dt in ("float64", "float32")]
    for m in ms:
        for i in range(3):
            m.global_step(m.local_step(batch.take(range(i * 20, (i + 1) * 20))))
    assert ms[1]._ntilde.dtype == np.float32
    np.testing.assert_allclose(ms[1].topic_word(), ms[0].topic_word(), rtol=1e-4)
