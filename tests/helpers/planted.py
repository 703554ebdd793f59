"""Corpora drawn from planted topics (K disjoint blocks of words), and matching estimated
topics to the planted ones."""
import numpy as np

from lda_core.docbatch import DocBatch


def planted_counts(n_docs=300, K=4, words_per_topic=8, doc_len=50, seed=0):
    """Documents from K disjoint planted topics (uniform over their own words), θ ~ Dir(0.1),
    each document's counts one multinomial draw: (DocBatch, φ)."""
    rng = np.random.default_rng(seed)
    V = K * words_per_topic
    phi = np.zeros((K, V))
    for k in range(K):
        phi[k, k * words_per_topic:(k + 1) * words_per_topic] = 1.0 / words_per_topic
    rows = []
    for _ in range(n_docs):
        n = rng.multinomial(doc_len, rng.dirichlet(np.full(K, 0.1)) @ phi)
        w = np.nonzero(n)[0]
        rows.append((w, n[w]))
    return DocBatch.from_rows(rows), phi


def planted_tokens(K=4, words_per_topic=10, n_docs=300, doc_len=60, seed=1):
    """Documents drawn token by token from K planted topics on disjoint word blocks, θ ~
    Dir(0.3), ids ``d0``...: (DocBatch, truth K x V)."""
    rng = np.random.default_rng(seed)
    V = K * words_per_topic
    truth = np.zeros((K, V))
    for k in range(K):
        truth[k, k * words_per_topic:(k + 1) * words_per_topic] = 1.0 / words_per_topic
    rows = []
    for _ in range(n_docs):
        theta = rng.dirichlet(np.full(K, 0.3))
        z = rng.choice(K, size=doc_len, p=theta)
        w = np.array([rng.choice(V, p=truth[k]) for k in z])
        u, c = np.unique(w, return_counts=True)
        rows.append((u, c))
    return DocBatch.from_rows(rows, doc_ids=["d%d" % i for i in range(n_docs)]), truth


def recovered(est, phi):
    """Order-free topic match: mean over true topics of the best cosine similarity."""
    e = est / np.linalg.norm(est, axis=1, keepdims=True)
    t = phi / np.linalg.norm(phi, axis=1, keepdims=True)
    sim = t @ e.T
    return float(sim.max(axis=1).mean())


def match_topics(phi, truth):
    """Order-free matching by cosine similarity (one estimated topic per true one); returns
    the matched similarities."""
    from scipy.optimize import linear_sum_assignment
    a = phi / np.linalg.norm(phi, axis=1, keepdims=True)
    b = truth / np.linalg.norm(truth, axis=1, keepdims=True)
    sim = b @ a.T
    r, c = linear_sum_assignment(-sim)
    return sim[r, c]
