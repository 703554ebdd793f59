"""Sparse Gibbs-within-VB (lda_core.algorithms.sparse_gibbs_vb) against small numpy references."""
import pickle

import numba
import numpy as np
import pytest
from scipy.special import digamma
from scipy.stats import chisquare

from lda_core.docbatch import DocBatch
from lda_core.algorithms.sparse_gibbs_kernel import _draw, merge_into_csr
from lda_core.algorithms.sparse_gibbs_vb import SparseGibbsStats, SparseGibbsVB
from helpers.planted import match_topics, planted_tokens as planted_corpus
from helpers.trainers import run_both_trainers


@numba.njit(cache=False)
def _draw_many(n, seed, u, ndk, nzl, nnz, r, u_indptr, u_topics, u_coef, ck, e0, alpha,
               s_cum, s_tot, qbuf):
    np.random.seed(seed)
    out = np.zeros(ck.shape[0], np.int64)
    for _ in range(n):
        out[_draw(u, ndk, nzl, nnz, r, u_indptr, u_topics, u_coef, ck, e0, alpha, s_cum, s_tot,
                  qbuf)] += 1
    return out


def test_sparse_sampler_matches_dense_conditional():
    """The three-bucket sampler draws from p_k ∝ (α + N_dk)·exp(E[log β_kw]) (chi-square)."""
    rng = np.random.default_rng(0)
    K, V, eta, alpha = 30, 50, 0.5, 0.1
    lam_n = np.zeros((K, V))
    for w in range(V):                                  # a few topics per word
        ks = rng.choice(K, size=rng.integers(0, 6), replace=False)
        lam_n[ks, w] = rng.gamma(1.0, 5.0, len(ks))
    lam_n[:, 7] = 0.0                                   # a word with no topic at all
    m = SparseGibbsVB(K, V, eta=eta, alpha=alpha)
    rows = np.repeat(np.arange(V), (lam_n > 0).sum(0))
    m._indptr = np.concatenate([[0], np.cumsum((lam_n > 0).sum(0))]).astype(np.int64)
    m._topics = np.concatenate([np.nonzero(lam_n[:, w])[0] for w in range(V)]).astype(np.int32)
    m._vals = lam_n[m._topics, rows]
    m.topic_totals = lam_n.sum(1)
    ndk = np.zeros(K, np.int64)
    ndk[[1, 4, 9]] = [3, 1, 6]                           # the document's other tokens
    nzl = np.array([1, 4, 9] + [0] * (K - 3), np.int64)
    for w in (2, 7, 13):
        batch = DocBatch.from_rows([([w], [1])])
        _, _, u_indptr, u_topics, coef, ck, e0 = m._tile(batch)
        s_cum = np.cumsum(alpha * e0 * ck)
        r = e0 * float((ndk * ck).sum())
        qbuf = np.zeros(K)
        n = 200_000
        counts = _draw_many(n, 123 + w, 0, ndk, nzl, 3, r, u_indptr, u_topics, coef, ck, e0,
                            alpha, s_cum, s_cum[-1], qbuf)
        lam = eta + lam_n
        elogb = digamma(lam[:, w]) - digamma(lam.sum(1))
        p = (alpha + ndk) * np.exp(elogb)
        p /= p.sum()
        assert counts.sum() == n
        res = chisquare(counts, p * n)
        assert res.pvalue > 1e-3, (w, res)


def test_merge_into_csr_equals_dense_addition():
    rng = np.random.default_rng(4)
    K, V = 6, 25
    dense = np.where(rng.random((V, K)) < 0.2, rng.random((V, K)), 0.0)
    indptr = np.concatenate([[0], np.cumsum((dense > 0).sum(1))]).astype(np.int64)
    topics = np.concatenate([np.nonzero(dense[w])[0] for w in range(V)]).astype(np.int32)
    vals = dense[dense > 0]
    add = np.where(rng.random((V, K)) < 0.15, rng.integers(1, 5, (V, K)), 0).astype(float)
    sw, st = np.nonzero(add)
    ip, tp, vp = merge_into_csr(indptr, topics, vals, sw.astype(np.int64), st.astype(np.int32),
                                add[sw, st], 0.5)
    out = np.zeros((V, K))
    for w in range(V):
        assert np.all(np.diff(tp[ip[w]:ip[w + 1]]) > 0)
        out[w, tp[ip[w]:ip[w + 1]]] = vp[ip[w]:ip[w + 1]]
    np.testing.assert_allclose(out, dense + 0.5 * add, rtol=1e-15)


def test_lazy_scaled_lambda_equals_eager_decay():
    batch, _ = planted_corpus(n_docs=120)
    D = batch.n_docs
    m = SparseGibbsVB(4, 40, corpus_size=D, seed=5, tau0=1.0, renorm_below=0.3)
    eager = np.zeros((4, 40))
    renormalised = False
    for i in range(6):
        st = m.local_step(batch.take(range(i * 20, (i + 1) * 20)))
        assert st.triplets.values.sum() == st.n_tokens * m.samples      # counts over kept sweeps
        rho = m.rho(m.step)
        nhat = st.triplets.to_dense(40).T / m.samples
        eager = (1 - rho) * eager + rho * (D / st.n_docs) * nhat           # paper eq. 11
        info = m.global_step(st)
        renormalised |= info["pi"] == 1.0 and i > 0
        np.testing.assert_allclose(m.lambda_n(), eager, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(m.topic_totals, eager.sum(1), rtol=1e-10)
    assert renormalised, "the renormalisation path was not exercised"


def test_split_and_merge_equal_whole_batch_exactly():
    batch, _ = planted_corpus(n_docs=60)
    m = SparseGibbsVB(4, 40, corpus_size=600, seed=3)
    for i in range(2):                                   # give it some non-zero topics first
        m.global_step(m.local_step(batch.take(range(i * 30, (i + 1) * 30))))
    whole = m.local_step(batch)
    parts = [m.local_step(batch.take(range(a, b))) for a, b in ((0, 7), (7, 40), (40, 60))]
    merged = m.empty_stats().merge(parts[2]).merge(parts[0].merge(parts[1]))
    np.testing.assert_array_equal(whole.triplets.keys, merged.triplets.keys)
    np.testing.assert_array_equal(whole.triplets.values, merged.triplets.values)
    for c in ("n_docs", "n_tokens", "n_empty", "n_iterations", "n_capped"):
        assert getattr(whole, c) == getattr(merged, c)
    one = SparseGibbsVB.from_state(m.to_state(), n_threads=1)
    np.testing.assert_array_equal(one.local_step(batch).triplets.values, whole.triplets.values)
    p = pickle.loads(pickle.dumps(merged))
    np.testing.assert_array_equal(p.triplets.keys, merged.triplets.keys)


def test_planted_topics_recovered():
    batch, truth = planted_corpus()
    m = SparseGibbsVB(4, 40, corpus_size=batch.n_docs, seed=0, eta=0.1,
                      tau0=10.0)
    rng = np.random.default_rng(0)
    for _ in range(6):
        perm = rng.permutation(batch.n_docs)
        for s in range(0, batch.n_docs, 20):
            m.global_step(m.local_step(batch.take(perm[s:s + 20])))
    phi = m.topic_word()
    np.testing.assert_allclose(phi.sum(1), 1.0, rtol=1e-12)
    assert match_topics(phi, truth).min() > 0.95
    theta = m.infer(batch.take(range(10)))
    np.testing.assert_allclose(theta.sum(1), 1.0, rtol=1e-12)
    # the document's dominant planted topic is found
    lam = m.lambda_n()
    assert m.nnz < lam.size                                # sparse storage stays sparse


def test_checkpoint_resume_bit_for_bit(tmp_path):
    from lda_core.storage.state import TopicState
    batch, _ = planted_corpus(n_docs=100)
    steps = [batch.take(range(i * 20, (i + 1) * 20)) for i in range(5)]

    def run(m, bs):
        for b in bs:
            m.global_step(m.local_step(b))
        return m

    full = run(SparseGibbsVB(4, 40, corpus_size=100, seed=9), steps)
    part = run(SparseGibbsVB(4, 40, corpus_size=100, seed=9), steps[:2])
    part.to_state().save(str(tmp_path / "ck"))
    resumed = SparseGibbsVB.from_state(TopicState.load(str(tmp_path / "ck")))
    run(resumed, steps[2:])
    for a in ("_indptr", "_topics", "_vals", "topic_totals"):
        np.testing.assert_array_equal(getattr(full, a), getattr(resumed, a))
    assert full._pi == resumed._pi and full.step == resumed.step == 5
    assert full.docs_seen == resumed.docs_seen == 100


def test_non_finite_statistics_refused_and_state_untouched():
    batch, _ = planted_corpus(n_docs=20)
    m = SparseGibbsVB(4, 40, corpus_size=100)
    m.global_step(m.local_step(batch))
    st = m.local_step(batch)
    st.triplets.values[3] = np.inf
    before = [m._vals.copy(), m.topic_totals.copy(), m._pi, m.step]
    with pytest.raises(ValueError, match="non-finite"):
        m.global_step(st)
    np.testing.assert_array_equal(m._vals, before[0])
    np.testing.assert_array_equal(m.topic_totals, before[1])
    assert [m._pi, m.step] == before[2:]


@pytest.mark.parametrize("kw,name", [
    (dict(alpha=-1), "alpha"), (dict(eta=0), "eta"), (dict(kappa=0.5), "kappa"),
    (dict(tau0=-1), "tau0"), (dict(corpus_size=0), "corpus_size"),
    (dict(burn_in=-1), "burn_in"), (dict(samples=0), "samples"), (dict(seed=1.5), "seed"),
    (dict(renorm_below=0), "renorm_below"), (dict(n_threads=0), "n_threads"),
])
def test_settings_validated(kw, name):
    with pytest.raises(ValueError, match=name):
        SparseGibbsVB(3, 10, **kw)


def test_empty_documents_and_counters():
    m = SparseGibbsVB(3, 10, burn_in=1, samples=2)
    b = DocBatch.from_rows([([], []), ([2, 5], [3, 1])])
    st = m.local_step(b)
    assert (st.n_docs, st.n_empty, st.n_tokens, st.n_iterations) == (2, 1, 4, 4)
    assert st.triplets.values.sum() == 4 * 2
    th = m.infer(b)
    np.testing.assert_allclose(th[0], 1 / 3)
    with pytest.raises(ValueError, match="word ids"):
        m.local_step(DocBatch.from_rows([([11], [1])]))


def test_inprocess_and_beam_trainers_agree_exactly(kos_paths, tmp_path):
    a, b = run_both_trainers("sparse-gibbs-vb", kos_paths, tmp_path, corpus_size=400)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(b[k], a[k], err_msg=k)
