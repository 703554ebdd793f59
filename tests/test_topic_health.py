"""Topic health: usage, NPMI and diversity against the harness and gensim, and the re-seeding
of collapsed topics in online/batch VB (a planted corpus, exact resume)."""
import os

import numpy as np
import pytest

from lda_core.evaluation import metrics as ev
from lda_core.evaluation import topic_quality as tq
from lda_core.docbatch import DocBatch
from lda_core.algorithms.online_vb import BatchVB, OnlineVB
from lda_core.training.in_memory import fit_batch_vb
from helpers.models import run_and_resume
from helpers.uci import uci_csr, uci_vocab


@pytest.fixture(scope="module")
def kos_csr(kos_paths):
    docword, vocab = kos_paths
    if not os.path.exists(docword):
        pytest.skip("%s is absent" % docword)
    X, W = uci_csr(docword, 600)
    return X, uci_vocab(vocab, W)


def planted(K=10, W=30, D=600, N=60, seed=0):
    """Documents of two of K planted topics (disjoint blocks of W words), N tokens each."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(D):
        t = rng.choice(K, size=2, replace=False)
        words = np.concatenate([rng.integers(0, W, N // 2) + t[0] * W,
                                rng.integers(0, W, N // 2) + t[1] * W])
        u, c = np.unique(words, return_counts=True)
        rows.append((u, c))
    return DocBatch.from_rows(rows), K * W


def train(batch, V, K, seed, reseed=None, passes=3, S=50):
    kw = {} if reseed is None else {"reseed": reseed}      # None: the default
    m = OnlineVB(K, V, alpha=0.1, eta=0.01, corpus_size=batch.n_docs, seed=seed,
                 **kw)
    for _ in range(passes):
        for s in range(0, batch.n_docs, S):
            m.global_step(m.local_step(batch.take(range(s, min(s + S, batch.n_docs)))))
    return m


def test_planted_topics_die_without_reseeding_and_live_with_it():
    batch, V = planted()
    old = [tq.topic_usage(train(batch, V, 10, seed, 0.0).topic_word(), batch)["dead"]
           for seed in range(4)]
    new = [tq.topic_usage(train(batch, V, 10, seed).topic_word(), batch)["dead"]
           for seed in range(4)]
    assert sum(old) >= 4 and min(old) >= 1          # every seed lost a topic before
    assert new == [0, 0, 0, 0]


def test_reseeding_resumes_bit_for_bit_and_is_split_independent(tmp_path):
    batch, V = planted()
    steps = [batch.take(range(s, s + 50)) for s in range(0, 600, 50)]

    def split_step(m, b):
        # the statistics of a minibatch split in two (what Beam workers send), merged
        return m.global_step(m.local_step(b.take(range(0, 20))).merge(
            m.local_step(b.take(range(20, 50)))))

    full, _, infos = run_and_resume(
        lambda: OnlineVB(10, V, alpha=0.1, eta=0.01, corpus_size=600, seed=1), steps, 6,
        tmp_path, apply=split_step)
    assert sum(i["reseeded"] for i in infos) > 0     # the path under test was taken
    one = OnlineVB(10, V, alpha=0.1, eta=0.01, corpus_size=600, seed=1)
    for b in steps:
        one.global_step(one.local_step(b))
    _, resumed, _ = run_and_resume(
        lambda: OnlineVB(10, V, alpha=0.1, eta=0.01, corpus_size=600, seed=1), steps, 6,
        tmp_path)
    a, b, c = one.to_state(), resumed.to_state(), full.to_state()
    assert a.params["reseed"] == b.params["reseed"] == 0.02
    for k in a.arrays:
        assert np.array_equal(a.arrays[k], b.arrays[k]), k          # resume: bit for bit
        assert np.allclose(a.arrays[k], c.arrays[k], rtol=1e-9, atol=0), k   # split + merge


def test_reseed_conserves_mass_and_batch_vb_keeps_all_topics():
    batch, V = planted()
    m = BatchVB(10, V, alpha=0.1, eta=0.01, seed=3)
    fit_batch_vb(m, [batch], max_passes=15)
    assert tq.topic_usage(m.topic_word(), batch)["dead"] == 0
    from lda_core.algorithms.word_blocks import dead_topic_splits, split_rows
    o = OnlineVB(10, V, seed=0)
    before = o._ntilde.copy()
    mass = np.array([5.0, 9.0] + [5.0] * 7 + [0.0])
    splits = dead_topic_splits(mass, o.reseed, o.seed, o.step)
    assert splits.pairs == [(9, 1)]                  # topic 9 is split off topic 1
    sums = split_rows(o._ntilde, 0, splits, V, 1)
    # topic 1's data part is shared between topics 1 and 9; the others are untouched
    assert np.allclose(o._ntilde[:, 1] + o._ntilde[:, 9], before[:, 1], rtol=1e-12)
    assert np.array_equal(o._ntilde[:, :1], before[:, :1])
    assert np.array_equal(o._ntilde[:, 2:9], before[:, 2:9])
    # the split columns' sums the global step adds to the column sums
    assert np.allclose(sums[0], [o._ntilde[:, 9].sum(), o._ntilde[:, 1].sum()], rtol=1e-12)
    with pytest.raises(ValueError, match="reseed"):
        OnlineVB(10, V, reseed=1.5)


def test_metrics_match_the_harness(bp, kos_csr):
    X, _ = kos_csr
    K, V = 12, X.shape[1]
    phi = np.random.default_rng(0).gamma(0.3, 1.0, (K, V))
    ref = bp.quality_extras(phi, X)
    h = tq.topic_health(phi, X)
    assert h["dead_topics"] == ref["dead_topics"]
    assert abs(h["effective_topics"] - ref["effective_topics"]) < 1e-6
    assert abs(h["npmi"] - ref["npmi"]) < 1e-6
    assert abs(h["topic_diversity"] - ref["topic_diversity"]) < 1e-12
    # the same from a DocBatch, and the usage sample with fewer documents than asked for
    b = DocBatch.from_csr(X)
    assert abs(tq.npmi_coherence(phi, b)["mean"] - ref["npmi"]) < 1e-6
    shares, dead, eff = bp.topic_usage(phi, X, max_docs=100, seed=5)
    u = tq.topic_usage(phi, b, max_docs=100, seed=5)
    assert np.max(np.abs(u["shares"] - shares)) < 1e-9 and u["dead"] == dead
    assert abs(u["effective"] - eff) < 1e-6 and u["n_docs"] == 100


def test_coherence_matches_gensim_coherence_model(kos_csr):
    gensim = pytest.importorskip("gensim")
    from gensim.corpora import Dictionary
    from gensim.models.coherencemodel import CoherenceModel
    X, vocab = kos_csr
    texts = []
    for d in range(X.shape[0]):
        row = X[d]
        texts.append([vocab[w] for w in row.indices])
    dictionary = Dictionary(texts)
    # top words drawn from the 80 most frequent words: every pair co-occurs somewhere, so
    # gensim's ε (1e-12 added to the joint probability) is all that differs
    df = np.asarray((X > 0).sum(0)).ravel()
    frequent = np.argsort(-df, kind="stable")[:80]
    rng = np.random.default_rng(1)
    phi = np.full((6, X.shape[1]), 1e-6)
    for k in range(6):
        phi[k, rng.choice(frequent, 10, replace=False)] = np.linspace(1.0, 0.5, 10)
    from lda_core.evaluation.topic_quality import _top_indices
    top = _top_indices(phi, 10)
    topics = [[vocab[w] for w in t] for t in top]
    bow = [dictionary.doc2bow(t) for t in texts]
    cm = CoherenceModel(topics=topics, corpus=bow, dictionary=dictionary, coherence="u_mass",
                        topn=10)
    # gensim's u_mass: log((D(w_m, w_l)/D + 1e-12) / (D(w_l)/D)) over the same pairs, per
    # pair mean: ours with ε = 1e-12·D
    ours = tq.umass_coherence(phi, X, topn=10, eps=1e-12 * X.shape[0])
    assert np.allclose(ours["per_topic"] / 45.0, cm.get_coherence_per_topic(), atol=1e-9)
    longest = max(len(t) for t in texts)
    cm = CoherenceModel(topics=topics, texts=texts, dictionary=dictionary, coherence="c_npmi",
                        window_size=longest + 1, topn=10)
    got = tq.npmi_coherence(phi, X, topn=10)["per_topic"]
    assert np.allclose(got, cm.get_coherence_per_topic(), atol=1e-6)
    assert np.all(np.abs(got) > 1e-3)                 # not vacuous


def _exact_log_p(phi, words, alpha):
    """log p(w) by enumerating every topic assignment (Dirichlet-multinomial over z)."""
    import itertools
    from scipy.special import gammaln
    K = phi.shape[0]
    phi = phi / phi.sum(1, keepdims=True)
    total = 0.0
    for z in itertools.product(range(K), repeat=len(words)):
        nk = np.bincount(z, minlength=K)
        prior = (gammaln(K * alpha) - gammaln(len(words) + K * alpha)
                 + np.sum(gammaln(nk + alpha) - gammaln(alpha)))
        total += np.exp(prior + sum(np.log(phi[k, w]) for k, w in zip(z, words)))
    return np.log(total)


def test_left_to_right_matches_exact_enumeration_on_tiny_documents():
    rng = np.random.default_rng(0)
    K, V = 3, 6
    phi = rng.gamma(0.5, 1.0, (K, V)) + 1e-3
    docs = [([0, 2, 5], [1, 2, 1]), ([1, 3], [2, 2]), ([4], [3])]
    batch = DocBatch.from_rows(docs)
    got = ev.left_to_right(phi, batch, alpha=0.5, particles=2000, seed=1)
    exact = [_exact_log_p(phi, np.repeat(w, c), 0.5) for w, c in docs]
    assert got["n_docs"] == 3 and got["n_tokens"] == 11
    assert np.allclose(got["log_p"], exact, atol=0.03), (got["log_p"], exact)
    # seeded: the same numbers again; another seed differs slightly
    assert np.array_equal(ev.left_to_right(phi, batch, alpha=0.5, particles=2000,
                                           seed=1)["log_p"], got["log_p"])
    one = ev.left_to_right(phi, DocBatch.from_rows([([4], [1])]), alpha=0.5, particles=1)
    # a one-token document needs no particles: p(w) = Σ_k φ_kw / K exactly
    p = phi / phi.sum(1, keepdims=True)
    assert np.isclose(one["log_p"][0], np.log(p[:, 4].mean()), rtol=1e-12)


def test_kappa_one_half_is_accepted_with_a_warning(caplog):
    with caplog.at_level("WARNING", logger="lda_core.algorithms.online_vb"):
        m = OnlineVB(4, 10, kappa=0.5)
    assert m.kappa == 0.5 and "convergence guarantee" in caplog.text
    with pytest.raises(ValueError, match="kappa"):
        OnlineVB(4, 10, kappa=0.49)


def test_scvb0_reseeding_resumes_bit_for_bit(tmp_path):
    from lda_core.algorithms.scvb0 import SCVB0
    batch, V = planted(K=20)
    steps = [batch.take(range(s, s + 50)) for s in range(0, 600, 50)] * 2
    kw = dict(alpha=0.1, eta=0.01, seed=0, corpus_tokens=batch.n_tokens)
    full, resumed, infos = run_and_resume(lambda: SCVB0(20, V, **kw), steps, 5, tmp_path)
    assert sum(i["reseeded"] for i in infos) >= 1    # the path under test was taken
    a, b = full.to_state(), resumed.to_state()
    assert a.params["reseed"] == 0.02
    for k in a.arrays:
        assert np.array_equal(a.arrays[k], b.arrays[k]), k
    assert np.isclose(full.nz.sum(), full._pi * full._ntilde.sum(), rtol=1e-6)
