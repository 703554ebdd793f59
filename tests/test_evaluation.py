"""The shared evaluation metrics, checked against the peer benchmark harness and sklearn."""
import re

import numpy as np
import pytest
import scipy.sparse as sp

from lda_core.docbatch import DocBatch
from lda_core.evaluation import metrics as ev
from lda_core.evaluation import topic_quality as tq
from helpers.evaluation import fit_phi
from helpers.news20 import news20_posts
from helpers.uci import uci_csr, uci_vocab


def read_20ng(tar_path, per_group=25, min_df=3):
    """A slice of 20 Newsgroups train: ``per_group`` posts of each group, headers dropped,
    lowercase alphabetic tokens of 3+ letters, words in >= ``min_df`` posts."""
    docs, labels = [], []
    for post in news20_posts(tar_path, "train", per_group=per_group):
        docs.append(re.findall(r"[a-z]{3,}", post.body.lower()))
        labels.append(post.group)
    df = {}
    for toks in docs:
        for w in set(toks):
            df[w] = df.get(w, 0) + 1
    vocab = sorted(w for w, c in df.items() if c >= min_df)
    index = {w: i for i, w in enumerate(vocab)}
    rows, cols = [], []
    for d, toks in enumerate(docs):
        for w in toks:
            if w in index:
                rows.append(d)
                cols.append(index[w])
    X = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(docs), len(vocab)))
    X.sum_duplicates()
    X.sort_indices()
    return X, vocab, labels


@pytest.fixture(scope="module")
def kos(kos_paths):
    X, V = uci_csr(kos_paths[0], 1500)
    vocab = uci_vocab(kos_paths[1], V)
    return X, vocab


@pytest.fixture(scope="module")
def news20(news20_tar):
    return read_20ng(news20_tar)


# ------------------------------------------------------------------------------- split
def test_split_halves_equals_the_harness(bp, kos, nips_paths):
    X, _ = kos
    test = X[:400]
    for seed in (0, 3):
        Xa, Xb = bp.split_halves(test, np.random.RandomState(seed))
        a, b = ev.split_halves(DocBatch.from_csr(test), seed)
        assert (a.to_csr(X.shape[1]) != Xa).nnz == 0
        assert (b.to_csr(X.shape[1]) != Xb).nnz == 0
    Xn, _ = uci_csr(nips_paths[0], 60)
    Xa, Xb = bp.split_halves(Xn, np.random.RandomState(11))
    a, b = ev.split_halves(DocBatch.from_csr(Xn), 11)
    assert (a.to_csr(Xn.shape[1]) != Xa).nnz == 0 and (b.to_csr(Xn.shape[1]) != Xb).nnz == 0


def test_split_halves_keeps_documents_aligned(kos):
    X, _ = kos
    batch = DocBatch.from_csr(X[:200], doc_ids=["kos-%d" % i for i in range(200)],
                             labels=["l%d" % (i % 3) for i in range(200)])
    a, b = ev.split_halves(batch, 5)
    assert a.doc_ids == b.doc_ids == batch.doc_ids and a.labels == batch.labels
    la, lb, l0 = a.doc_lengths, b.doc_lengths, batch.doc_lengths
    assert np.array_equal(la, l0 // 2) and np.array_equal(la + lb, l0)
    total = (a.to_csr(X.shape[1]) + b.to_csr(X.shape[1]) - X[:200])
    assert abs(total).sum() == 0
    # deterministic in the seed, different across seeds
    a2, _ = ev.split_halves(batch, 5)
    a3, _ = ev.split_halves(batch, 6)
    assert np.array_equal(a2.word_ids, a.word_ids) and not np.array_equal(a3.word_ids, a.word_ids)
    for bad in (-1, 2 ** 32, 1.5, True):
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
            ev.split_halves(batch, bad)


# --------------------------------------------------------------------- document completion
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_document_completion_equals_the_harness_on_kos(bp, kos, backend):
    X, _ = kos
    train, test = X[300:], X[:300]
    phi = fit_phi(train, K=30)
    Xa, Xb = bp.split_halves(test, np.random.RandomState(1))
    ref_ll, ref_n = bp.heldout_completion(phi, Xa, Xb)
    a, b = ev.split_halves(DocBatch.from_csr(test), 1)
    got = ev.document_completion(phi, a, b, backend=backend)
    assert got["n_tokens"] == ref_n
    assert abs(got["ll_per_token"] - ref_ll) <= 1e-10
    assert got["perplexity"] == pytest.approx(np.exp(-ref_ll), rel=1e-10)
    # another prior, fewer iterations, unnormalised phi with exact zeros
    phi0 = phi * np.arange(1, 31)[:, None]
    phi0[:, :50] = 0.0
    ref_ll, _ = bp.heldout_completion(phi0, Xa, Xb, alpha=0.5, iters=17)
    got = ev.document_completion(phi0, a, b, alpha=0.5, iters=17, backend=backend)
    assert abs(got["ll_per_token"] - ref_ll) <= 1e-10


def test_document_completion_equals_the_harness_on_20ng(bp, news20):
    X, _, _ = news20
    rng = np.random.RandomState(0)
    perm = rng.permutation(X.shape[0])
    test, train = X[perm[:100]], X[perm[100:]]
    phi = fit_phi(train, K=20, seed=1)
    Xa, Xb = bp.split_halves(test, np.random.RandomState(2))
    ref_ll, _ = bp.heldout_completion(phi, Xa, Xb)
    a, b = ev.split_halves(DocBatch.from_csr(test), 2)
    got = ev.document_completion(phi, a, b)
    assert abs(got["ll_per_token"] - ref_ll) <= 1e-10
    # a fitted model beats the unigram floor on held-out 20NG text
    uni = ev.unigram_baseline(DocBatch.from_csr(train), a, b, n_words=X.shape[1],
                              smoothing=0.01)
    assert got["ll_per_token"] > uni["ll_per_token"]


def test_one_topic_completion_is_the_unigram_model(kos):
    X, _ = kos
    train, test = DocBatch.from_csr(X[300:]), DocBatch.from_csr(X[:300])
    a, b = ev.split_halves(test, 0)
    uni = ev.unigram_baseline(train, a, b, n_words=X.shape[1], smoothing=0.5)
    counts = np.bincount(train.word_ids, weights=train.counts, minlength=X.shape[1]) + 0.5
    dc = ev.document_completion(counts[None, :], a, b)
    assert dc["ll_per_token"] == pytest.approx(uni["ll_per_token"], abs=1e-12)
    assert dc["n_tokens"] == uni["n_tokens"] == b.n_tokens


def test_unigram_baseline_by_hand():
    train = DocBatch.from_rows([([0, 1], [3, 1]), ([2], [4])])
    b = DocBatch.from_rows([([0, 2], [1, 2])])
    got = ev.unigram_baseline(train, b, b)
    p = np.array([3, 1, 4]) / 8.0
    assert got["ll_per_token"] == pytest.approx((np.log(p[0]) + 2 * np.log(p[2])) / 3, abs=1e-15)
    unseen = DocBatch.from_rows([([3], [1])])
    assert ev.unigram_baseline(train, unseen, unseen, n_words=4)["ll_per_token"] == -np.inf
    assert np.isfinite(ev.unigram_baseline(train, unseen, unseen, n_words=4,
                                           smoothing=1.0)["ll_per_token"])


def test_document_completion_bad_input(kos):
    X, _ = kos
    a, b = ev.split_halves(DocBatch.from_csr(X[:20]), 0)
    phi = np.ones((3, X.shape[1]))
    with pytest.raises(ValueError, match="batch_a has 20 documents but batch_b has 19"):
        ev.document_completion(phi, a, b.take(range(19)))
    with pytest.raises(ValueError, match="batch_a has word id .* but phi has only V=100"):
        ev.document_completion(phi[:, :100], a, b)
    with pytest.raises(ValueError, match="alpha must be a finite number > 0, got 0"):
        ev.document_completion(phi, a, b, alpha=0)
    with pytest.raises(ValueError, match="iters must be an integer"):
        ev.document_completion(phi, a, b, iters=-1)
    bad = phi.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="phi must be finite and non-negative"):
        ev.document_completion(bad, a, b)
    empty = DocBatch.from_rows([([], [])] * 20)
    with pytest.raises(ValueError, match="batch_b has no tokens"):
        ev.document_completion(phi, a, empty)


# ------------------------------------------------------------------------------- UMass
@pytest.mark.parametrize("topn", [10, 5])
def test_umass_equals_the_harness(bp, kos, topn):
    X, _ = kos
    phi = fit_phi(X, K=25, seed=3)
    Xbin = X.copy()
    Xbin.data[:] = 1
    s, pair, top = bp.umass(phi, Xbin, topn=topn)
    got = tq.umass_coherence(phi, DocBatch.from_csr(X), topn=topn, topic_chunk=7)
    assert np.array_equal(got["top"], top)
    assert got["per_topic"].shape == (25,)
    assert abs(got["mean_sum"] - s) <= 1e-10
    assert abs(got["mean_pair"] - pair) <= 1e-10
    assert got["mean_pair"] == pytest.approx(got["mean_sum"] / (topn * (topn - 1) / 2))
    # a sparse matrix of counts (not binary) gives the same result
    got2 = tq.umass_coherence(phi, X, topn=topn)
    assert np.allclose(got2["per_topic"], got["per_topic"], rtol=0, atol=1e-12)


def test_umass_by_hand():
    # 4 documents over 3 words; topic 0 ranks words 0, 1, 2
    docs = DocBatch.from_rows([([0, 1], [1, 1]), ([0], [2]), ([1, 2], [1, 1]),
                               ([0, 1, 2], [1, 1, 1])])
    phi = np.array([[0.5, 0.3, 0.2]])
    got = tq.umass_coherence(phi, docs, topn=3)
    D = {0: 3, 1: 3, 2: 2}
    D2 = {(1, 0): 2, (2, 0): 1, (2, 1): 2}
    want = sum(np.log((D2[(m, l)] + 1.0) / D[l]) for m in (1, 2) for l in range(m))
    assert got["per_topic"][0] == pytest.approx(want, abs=1e-14)


def test_umass_top_word_absent_from_the_reference_docs_is_infinite(caplog):
    docs = DocBatch.from_rows([([0, 1], [1, 1])])
    phi = np.array([[0.1, 0.2, 0.7]])
    got = tq.umass_coherence(phi, docs, topn=3)
    assert got["per_topic"][0] == np.inf
    assert "infinite for 1 topic" in caplog.text


# ----------------------------------------------------------------------------- top words
def test_top_words(kos):
    X, vocab = kos
    phi = fit_phi(X, K=6, seed=2)
    tw = tq.top_words(phi, vocab, n=8)
    assert len(tw) == 6 and all(len(t) == 8 for t in tw)
    for k, topic in enumerate(tw):
        weights = [w for _, w in topic]
        assert weights == sorted(weights, reverse=True)
        assert [tok for tok, _ in topic] == [vocab[i] for i in np.argsort(-phi[k])[:8]]
        assert weights[0] == pytest.approx(phi[k].max() / phi[k].sum())
    ids = tq.top_words(np.array([[1.0, 3.0, 3.0, 2.0]]), n=10)
    assert ids == [[(1, 0.3333333333333333), (2, 0.3333333333333333), (3, 2 / 9), (0, 1 / 9)]]
    with pytest.raises(ValueError, match="vocab_tokens has 2 tokens but phi has V=4"):
        tq.top_words(np.ones((1, 4)), ["a", "b"])


# ----------------------------------------------------------------------------------- NMI
def test_nmi_equals_sklearn(news20):
    metrics = pytest.importorskip("sklearn.metrics")
    X, _, labels = news20
    phi = fit_phi(X, K=20, seed=4)
    pred = np.asarray(X @ np.log(phi).T).argmax(1)
    got = tq.normalized_mutual_information(labels, pred)
    assert got == pytest.approx(metrics.normalized_mutual_info_score(labels, pred), abs=1e-12)
    assert 0.0 < got < 1.0
    rng = np.random.RandomState(0)
    for n, ka, kb in ((50, 3, 7), (1000, 20, 20), (7, 7, 1)):
        a, b = rng.randint(0, ka, n), rng.randint(0, kb, n)
        assert tq.normalized_mutual_information(a, b) == pytest.approx(
            metrics.normalized_mutual_info_score(a, b), abs=1e-12)
    for a, b in (([1, 1, 1], [2, 2, 2]), ([], []), ([0, 1, 2], [5, 6, 7]),
                 (["x", "y", "x"], ["q", "q", "q"]), ([0, 0, 1, 1], [1, 1, 0, 0])):
        assert tq.normalized_mutual_information(a, b) == pytest.approx(
            metrics.normalized_mutual_info_score(a, b), abs=1e-12)
    with pytest.raises(ValueError, match="labels_true has 2 entries but labels_pred has 3"):
        tq.normalized_mutual_information([0, 1], [0, 1, 2])


# ------------------------------------------------------------------------ evaluate_model
class _StubAlgorithm:
    def __init__(self, phi):
        self._phi = phi
        self.bound_docs = None

    def topic_word(self):
        return self._phi

    def per_word_bound(self, batch):
        self.bound_docs = batch.n_docs
        return -9.5


def test_evaluate_model_collects_every_metric(bp, kos):
    X, vocab = kos
    train, test = X[300:], X[:300]
    phi = fit_phi(train, K=15, seed=5)
    alg = _StubAlgorithm(phi)
    held = DocBatch.from_csr(test)
    out = ev.evaluate_model(alg, held, DocBatch.from_csr(train), seed=4, vocab_tokens=vocab)
    keep = np.nonzero(held.doc_lengths >= 2)[0]
    Xa, Xb = bp.split_halves(test[keep], np.random.RandomState(4))
    assert abs(out["completion_ll_per_token"] - bp.heldout_completion(phi, Xa, Xb)[0]) <= 1e-10
    Xbin = train.copy()
    Xbin.data[:] = 1
    assert abs(out["umass_mean_sum"] - bp.umass(phi, Xbin)[0]) <= 1e-10
    assert out["per_word_bound"] == -9.5 and alg.bound_docs == held.non_empty().n_docs
    assert out["coherence_docs"] == "train" and len(out["umass_per_topic"]) == 15
    assert out["unigram_ll_per_token"] < out["completion_ll_per_token"]
    assert len(out["top_words"]) == 15 and isinstance(out["top_words"][0][0][0], str)
    # a bare matrix works too (no bound then)
    out2 = ev.evaluate_model(phi, held, seed=4)
    assert "per_word_bound" not in out2 and out2["coherence_docs"] == "heldout"
    assert out2["completion_ll_per_token"] == out["completion_ll_per_token"]
