"""Online and batch VB: settings, split invariance, the VBStats accumulator, lazily scaled λ,
refusal of non-finite statistics, resume bit for bit, ELBO monotonicity, planted topics."""
import pickle

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from lda_core.algorithms import hyperparams, vb_lazy_lambda
from lda_core.training import schedules
from lda_core.algorithms.algorithm import algorithm_class
from lda_core.docbatch import DocBatch
from lda_core.algorithms.online_vb import BatchVB, OnlineVB
from lda_core.algorithms.vb_stats import VBStats
from lda_core.training.in_memory import fit_batch_vb
from helpers.models import run_and_resume
from helpers.uci import uci_docbatch


@pytest.fixture(scope="module")
def kos(kos_paths):
    return uci_docbatch(kos_paths[0], 400)


def planted_corpus(K=5, V=250, D=800, doc_len=100, seed=0, doc_alpha=0.05):
    """Documents from the LDA generative model with well separated topics (each topic puts
    90% of its mass on its own block of V/K words)."""
    rng = np.random.default_rng(seed)
    beta = np.full((K, V), 0.1 / (V - V // K))
    blk = V // K
    for k in range(K):
        beta[k, k * blk:(k + 1) * blk] = 0.9 / blk
    beta /= beta.sum(1, keepdims=True)
    rows = []
    for _ in range(D):
        theta = rng.dirichlet(np.full(K, doc_alpha))
        z = rng.choice(K, size=doc_len, p=theta)
        w = np.concatenate([rng.choice(V, size=np.count_nonzero(z == k), p=beta[k])
                            for k in range(K)])
        ids, c = np.unique(w, return_counts=True)
        rows.append((ids, c))
    return DocBatch.from_rows(rows, doc_ids=["p%d" % i for i in range(D)]), beta


def matched_l1(tw, beta):
    cost = np.abs(tw[:, None, :] - beta[None, :, :]).sum(-1)
    r, c = linear_sum_assignment(cost)
    return cost[r, c]


# -- settings -------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,param", [
    (dict(n_topics=0), "n_topics"), (dict(n_words=0), "n_words"),
    (dict(kappa=0.49), "kappa"), (dict(kappa=1.01), "kappa"), (dict(kappa=float("nan")), "kappa"),
    (dict(tau0=-1.0), "tau0"),
    (dict(alpha=0.0), "alpha"), (dict(alpha=-1.0), "alpha"), (dict(alpha=[0.1, 0.2]), "alpha"),
    (dict(eta=0.0), "eta"), (dict(eta=float("inf")), "eta"), (dict(max_iter=0), "max_iter"),
    (dict(tol=0.0), "tol"), (dict(tol=-1e-3), "tol"), (dict(corpus_size=0), "corpus_size"),
    (dict(dtype="float16"), "dtype"), (dict(seed=-1), "seed"), (dict(n_threads=0), "n_threads"),
    (dict(n_topics=2.5), "n_topics"),
])
def test_bad_settings_name_the_parameter(kw, param):
    args = dict(n_topics=4, n_words=10)
    args.update(kw)
    with pytest.raises(ValueError, match=param):
        OnlineVB(args.pop("n_topics"), args.pop("n_words"), **args)


def test_defaults_and_registry():
    m = OnlineVB(8, 50)
    assert np.allclose(m.alpha, 1 / 8) and m.eta == 1 / 8 and m.kappa == 0.7 and m.tau0 == 64
    assert algorithm_class("online-vb") is OnlineVB and algorithm_class("batch-vb") is BatchVB
    tw = m.topic_word()
    assert tw.shape == (8, 50) and np.allclose(tw.sum(1), 1)


def test_schedule():
    assert schedules.rho(0, 64, 0.7) == pytest.approx(64 ** -0.7)
    assert schedules.rho(10, 64, 0.7) == pytest.approx(74 ** -0.7)
    assert schedules.rho(0, 0, 0.7) == 1.0 and schedules.rho(1, 0, 0.7) == 1.0
    assert schedules.rho(0, 1000, 0.9, scale=10) == pytest.approx(10 * 1000 ** -0.9)
    with pytest.raises(ValueError, match="kappa"):
        schedules.PowerSchedule(64, 0.3)
    assert schedules.PowerSchedule(10, 0.3, strict_kappa=False)(5) == pytest.approx(15 ** -0.3)


def test_dirichlet_newton_step_finds_the_mle():
    rng = np.random.default_rng(1)
    true = np.array([0.2, 0.5, 1.0, 3.0])
    theta = rng.dirichlet(true, 20000)
    a = np.full(4, 1.0)
    for _ in range(50):
        a = hyperparams.newton_dirichlet_step(a, len(theta), np.log(theta).sum(0), 1.0)
    assert np.allclose(a, true, rtol=0.05)
    # a step that would leave the domain is halved until it stays positive
    assert np.all(hyperparams.newton_dirichlet_step(a, 10, np.full(4, -1e9), 1.0) > 0)
    # symmetric eta: topics drawn from Dir(eta_true) give back eta_true
    V, K, eta_true = 200, 300, 0.05
    beta = np.clip(rng.dirichlet(np.full(V, eta_true), K), 1e-300, None)
    eta = 1.0
    for _ in range(100):
        eta = hyperparams.newton_symmetric_eta_step(eta, K, V, float(np.log(beta).sum()), 1.0)
    assert eta == pytest.approx(eta_true, rel=0.05)


# -- local step -----------------------------------------------------------------------------
def test_split_invariance_and_empty_documents(kos):
    batch, V = kos
    batch = batch.take(range(200))
    empty = DocBatch.from_rows([([], []), ([], [])], doc_ids=["e1", "e2"])
    batch = DocBatch.concat([batch, empty])
    m = OnlineVB(15, V, alpha=0.1, eta=0.05, dtype="float64", seed=5)
    whole = m.local_step(batch, return_gamma=True)
    assert whole.n_empty == 2 and whole.n_docs == 200 and whole.n_tokens == batch.n_tokens
    rng = np.random.default_rng(0)
    perm = rng.permutation(batch.n_docs)
    parts = np.array_split(perm, 3)
    acc = m.empty_stats()
    for p in parts:
        acc.merge(m.local_step(batch.take(np.sort(p)), return_gamma=True))
    assert acc.n_docs == whole.n_docs and acc.n_empty == 2 and acc.n_tokens == whole.n_tokens
    assert acc.n_iterations == whole.n_iterations and acc.n_capped == whole.n_capped
    a, b = acc.to_dense(), whole.to_dense()
    assert np.max(np.abs(a - b)) <= 1e-12 * np.max(np.abs(b))
    assert acc.score == pytest.approx(whole.score, rel=1e-12)
    pos = {d: i for i, d in enumerate(acc.gamma_doc_ids)}
    idx = [pos[d] for d in whole.gamma_doc_ids]
    assert np.array_equal(acc.gamma[idx], whole.gamma)     # per-document γ: identical
    theta = m.infer(batch)
    assert np.allclose(theta.sum(1), 1) and np.allclose(theta[-1], m.alpha / m.alpha.sum())


def test_word_outside_vocabulary_is_refused():
    m = OnlineVB(3, 10)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        m.local_step(DocBatch.from_rows([([2, 10], [1, 1])]))


# -- VBStats --------------------------------------------------------------------------------
def _random_stats(rng, K=4, V=50, n_rows=10, gamma=True, tag="x"):
    ids = np.sort(rng.choice(V, n_rows, replace=False)).astype(np.int32)
    n = int(rng.integers(1, 4))
    return VBStats(n_topics=K, n_words=V, word_ids=ids, sstats=rng.random((n_rows, K)),
                   n_docs=n, n_tokens=int(rng.integers(10, 100)), n_empty=1, n_iterations=7,
                   n_capped=1, score=-float(rng.random()), sum_elogtheta=-rng.random(K),
                   gamma=rng.random((n, K)) if gamma else None,
                   gamma_doc_ids=tuple("%s%d" % (tag, i) for i in range(n)) if gamma else None)


def test_vbstats_merge_is_associative_and_round_trips():
    rng = np.random.default_rng(3)
    a, b, c = (_random_stats(rng, tag=t) for t in "abc")
    left = a.copy().merge(b.copy()).merge(c.copy())
    right = a.copy().merge(b.copy().merge(c.copy()))
    assert np.allclose(left.to_dense(), right.to_dense(), rtol=1e-15, atol=0)
    assert left.n_docs == a.n_docs + b.n_docs + c.n_docs and left.n_capped == 3
    assert np.array_equal(left.gamma, right.gamma)
    assert np.all(np.diff(left.word_ids) > 0)
    e = VBStats.empty(4, 50).merge(a.copy())                 # identity element
    assert np.array_equal(e.to_dense(), a.to_dense()) and e.gamma_doc_ids == a.gamma_doc_ids
    for s in (left, _random_stats(rng, gamma=False)):
        r = VBStats.from_bytes(s.to_bytes())
        assert np.array_equal(r.word_ids, s.word_ids) and np.array_equal(r.sstats, s.sstats)
        assert r.score == s.score and r.n_docs == s.n_docs and r.dense == s.dense
        assert (r.gamma is None) == (s.gamma is None)
        p = pickle.loads(pickle.dumps(s))
        assert np.array_equal(p.sstats, s.sstats)
    with pytest.raises(ValueError, match="magic"):
        VBStats.from_bytes(b"nonsense" * 4)
    with pytest.raises(ValueError, match="truncated"):
        VBStats.from_bytes(left.to_bytes()[:-8])


def test_vbstats_densify_when_most_words_are_touched():
    rng = np.random.default_rng(4)
    a = _random_stats(rng, V=30, n_rows=12, gamma=False)
    b = _random_stats(rng, V=30, n_rows=12, gamma=False)
    expect = a.to_dense() + b.to_dense()
    m = a.copy().merge(b)
    assert m.dense and m.sstats.shape == (30, 4)
    assert np.allclose(m.to_dense(), expect, rtol=1e-15, atol=0)
    sparse = _random_stats(rng, V=30, n_rows=3, gamma=False)
    assert np.allclose(sparse.copy().merge(m).to_dense(), expect + sparse.to_dense())


# -- global step ----------------------------------------------------------------------------
def test_non_finite_statistics_are_refused_and_state_untouched(kos):
    batch, V = kos
    m = OnlineVB(10, V, dtype="float64")
    st = m.local_step(batch.take(range(50)))
    before = m.to_state()
    bad = st.copy()
    bad.sstats[3, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        m.global_step(bad)
    bad = st.copy()
    bad.score = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        m.global_step(bad)
    after = m.to_state()
    assert after.step == 0 and all(np.array_equal(before.arrays[k], after.arrays[k])
                                   for k in before.arrays)
    info = m.global_step(st)
    assert info["t"] == 1 and info["docs"] == 50 and np.isfinite(info["mean_change"])


@pytest.mark.parametrize("renorm_pi", [vb_lazy_lambda.RENORM_PI, 0.3])
def test_lazy_lambda_equals_eager_update(kos, monkeypatch, renorm_pi):
    """λ = a + π Ñ with row-only updates equals the dense λ ← (1−ρ)λ + ρ(η + D/S sstats)."""
    monkeypatch.setattr(vb_lazy_lambda, "RENORM_PI", renorm_pi)      # 0.3: fold π in every few steps
    batch, V = kos
    m = OnlineVB(12, V, alpha=0.1, eta=0.02, tau0=1.0, kappa=0.6, corpus_size=4000,
                 dtype="float64", reseed=0.0)          # the paper's update alone
    lam = m.lambda_()
    for i in range(0, 400, 40):
        st = m.local_step(batch.take(range(i, i + 40)))
        rho = schedules.rho(m.step, m.tau0, m.kappa)
        lam = (1 - rho) * lam + rho * (m.eta + 4000 / 40 * st.to_dense().T)
        m.global_step(st)
        got = m.lambda_()
        assert np.max(np.abs(got - lam) / lam) < 1e-12
        assert np.allclose(m._colsum(), lam.sum(1), rtol=1e-12, atol=0)


def test_resume_is_bit_for_bit(kos, tmp_path):
    batch, V = kos
    steps = [batch.take(range(i, i + 50)) for i in range(0, 400, 50)]
    kw = dict(alpha=0.1, eta=0.05, corpus_size=3430, seed=9, optimize_alpha=True)
    full, resumed, _ = run_and_resume(lambda: OnlineVB(10, V, **kw), steps, 4, tmp_path)
    a, b = full.to_state(), resumed.to_state()
    assert a.step == b.step == 8 and a.docs_seen == b.docs_seen == 400
    for k in a.arrays:
        assert np.array_equal(a.arrays[k], b.arrays[k]), k
    assert np.array_equal(full.lambda_(), resumed.lambda_())
    with pytest.raises(ValueError, match="batch-vb"):
        BatchVB.from_state(a)


# -- quality --------------------------------------------------------------------------------
def test_batch_vb_elbo_never_decreases(kos):
    batch, V = kos
    m = BatchVB(10, V, alpha=0.1, eta=0.05, dtype="float64", seed=2)
    out = fit_batch_vb(m, [batch.take(range(0, 150)), batch.take(range(150, 300))],
                       max_passes=25, rel_tol=1e-5)
    elbo = np.array(out["elbo"])
    assert len(elbo) >= 3 and np.all(np.isfinite(elbo))
    assert np.all(np.diff(elbo) >= -1e-9 * np.abs(elbo[:-1]))
    assert elbo[-1] > elbo[0]
    assert m.step == out["passes"]


def test_planted_topics_are_recovered():
    batch, beta = planted_corpus()
    K, V = beta.shape
    online = OnlineVB(K, V, alpha=0.1, eta=0.01, tau0=1.0, kappa=0.6, corpus_size=batch.n_docs,
                      seed=0)
    for _ in range(5):
        for i in range(0, batch.n_docs, 100):
            online.global_step(online.local_step(batch.take(range(i, i + 100))))
    batchvb = BatchVB(K, V, alpha=0.1, eta=0.01, dtype="float64", seed=0)
    fit_batch_vb(batchvb, batch, max_passes=100)
    for m in (online, batchvb):
        l1 = matched_l1(m.topic_word(), beta)
        assert np.all(l1 < 0.25), l1          # 0 = identical, 2 = disjoint
        assert m.per_word_bound(batch) < 0 and np.isfinite(m.perplexity_bound(batch))
    # a model that has learnt nothing scores worse on the same documents
    assert OnlineVB(K, V, alpha=0.1, eta=0.01).per_word_bound(batch) < \
        online.per_word_bound(batch)


def test_hyperparameter_steps_move_and_stay_positive():
    batch, beta = planted_corpus(D=300, doc_len=60)
    K, V = beta.shape
    m = OnlineVB(K, V, alpha=1.0, eta=0.5, corpus_size=300, optimize_alpha=True,
                 optimize_eta=True, dtype="float64", tau0=1.0)
    for i in range(0, 300, 50):
        info = m.global_step(m.local_step(batch.take(range(i, i + 50))))
    assert np.all(m.alpha > 0) and m.eta > 0
    assert m.alpha.mean() < 1.0                          # planted: sparse θ
    assert m.eta != 0.5 and np.isfinite(m.eta)
    assert info["alpha"] == pytest.approx(m.alpha.mean())


def test_all_empty_minibatch_is_skipped_and_dense_stats_apply(kos):
    batch, V = kos
    m = OnlineVB(6, V, dtype="float64", corpus_size=1000)
    empty = DocBatch.from_rows([([], []), ([], [])], doc_ids=["e1", "e2"])
    st = m.local_step(empty, return_gamma=True)
    assert st.n_docs == 0 and st.n_empty == 2 and st.gamma.shape == (2, 6)
    info = m.global_step(st)
    assert info["skipped"] and m.step == 0
    # the same step from sparse and from densified statistics gives the same λ
    st = m.local_step(batch.take(range(40)))
    dense = st.copy()
    dense._densify()
    a = OnlineVB.from_state(m.to_state())
    a.global_step(st)
    m.global_step(dense)
    assert np.allclose(a.lambda_(), m.lambda_(), rtol=1e-14, atol=0)


def test_numpy_kernel_option_matches_numba(kos):
    batch, V = kos
    b = batch.take(range(60))
    fast = OnlineVB(8, V, dtype="float64", seed=4)
    ref = OnlineVB(8, V, dtype="float64", seed=4, kernel="numpy")
    s1, s2 = fast.local_step(b, return_gamma=True), ref.local_step(b, return_gamma=True)
    assert np.allclose(s1.to_dense(), s2.to_dense(), rtol=1e-8, atol=1e-12)
    assert np.allclose(s1.gamma, s2.gamma, rtol=1e-8)
    assert s1.score == pytest.approx(s2.score, rel=1e-10)
