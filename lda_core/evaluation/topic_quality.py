"""Topic-quality metrics: one implementation of each (tests, benchmarks, the trainer's log,
``ldabeam evaluate``, the report); :mod:`lda_core.evaluation.metrics` re-exports them with the
held-out estimates.

Every function takes a topic-word matrix ``phi`` (K x V, any positive scale; rows are
normalised where a distribution is needed) and :class:`lda_core.docbatch.DocBatch` documents
(or a CSR document-term matrix where said).

* :func:`umass_coherence` — UMass topic coherence (Mimno et al. 2011) of the top words.
* :func:`topic_usage` (each topic's share of a seeded sample of documents; dead and effective
  topics), :func:`npmi_coherence` (document co-occurrence NPMI of the top words),
  :func:`topic_diversity` — the harness's definitions and numbers (``../shared/bench``);
  :func:`topic_health` bundles them, on a sample of training documents
  (``pipelines.ingest.doc_sample``: the trainer's log, ``ldabeam evaluate``, the report).
* :func:`top_words`, :func:`normalized_mutual_information`.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

from lda_core.docbatch import DocBatch
from lda_core.errors import InputError
from lda_core.evaluation import kernels

logger = logging.getLogger(__name__)

#: the benchmark protocol's evaluation prior and iteration count (../shared/bench/README.md)
PROTOCOL_ALPHA = 0.1
PROTOCOL_ITERS = 100
PROTOCOL_TOPN = 10


def as_batch(x, name: str) -> DocBatch:
    if isinstance(x, DocBatch):
        return x
    if sp.issparse(x):
        return DocBatch.from_csr(x)
    raise ValueError("%s must be a DocBatch or a scipy sparse documents x words matrix, got %s"
                     % (name, type(x).__name__))


ROW_CHUNK = 64      # topics per chunk when scanning K x V matrices (bounded temporaries)


def check_phi(phi, name="phi") -> np.ndarray:
    """``phi`` as a float64 K x V array (no copy if it already is one), checked finite and
    non-negative chunk by chunk (no K x V temporaries)."""
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 2 or phi.shape[0] < 1 or phi.shape[1] < 1:
        raise ValueError("%s must be a K x V matrix with K, V >= 1, got shape %s"
                         % (name, phi.shape))
    for s in range(0, phi.shape[0], ROW_CHUNK):
        blk = phi[s:s + ROW_CHUNK]
        if not np.isfinite(blk).all() or (blk < 0).any():
            raise ValueError("%s must be finite and non-negative" % name)
    return phi


def normalized_phi_T(phi) -> np.ndarray:
    """V x K float64: rows of ``phi`` floored at 1e-300 and normalised (as the harness does:
    ``phi = max(phi, 1e-300); phi /= phi.sum(1)``), transposed so that one word's K values
    are contiguous. Built row-chunk by row-chunk: the only K x V allocation is the result."""
    K, V = phi.shape
    phiT = np.empty((V, K))
    for s in range(0, K, ROW_CHUNK):
        blk = np.maximum(phi[s:s + ROW_CHUNK], 1e-300)
        blk /= blk.sum(1, keepdims=True)
        phiT[:, s:s + len(blk)] = blk.T
    return phiT


def check_words(batch: DocBatch, V: int, name: str) -> None:
    if batch.nnz and batch.max_word_id() >= V:
        raise ValueError("%s has word id %d but phi has only V=%d words"
                         % (name, batch.max_word_id(), V))



# ---------------------------------------------------------------------------------------------
# coherence, top words
# ---------------------------------------------------------------------------------------------
def _binary_docs_T(batch_or_csr, V: int) -> sp.csr_matrix:
    """The reference documents as a binary V x D CSR matrix (word -> documents containing it)."""
    if sp.issparse(batch_or_csr):
        X = sp.csr_matrix(batch_or_csr)
        if X.shape[1] != V:
            raise ValueError("the reference matrix has %d columns but phi has V=%d"
                             % (X.shape[1], V))
        X.eliminate_zeros()
        X.sum_duplicates()
        X = sp.csr_matrix((np.ones(X.nnz), X.indices, X.indptr), shape=X.shape)
    else:
        ref = as_batch(batch_or_csr, "batch_or_csr")
        check_words(ref, V, "the reference documents")
        X = sp.csr_matrix((np.ones(ref.nnz), ref.word_ids, ref.indptr), shape=(ref.n_docs, V))
    return X.T.tocsr()


def _top_indices(phi: np.ndarray, topn: int) -> np.ndarray:
    """K x topn word ids of each topic's top words (``np.argsort(-phi)``, as the harness)."""
    K = phi.shape[0]
    top = np.empty((K, topn), np.int64)
    for s in range(0, K, ROW_CHUNK):
        top[s:s + ROW_CHUNK] = np.argsort(-phi[s:s + ROW_CHUNK], axis=1)[:, :topn]
    return top


def _pair_cooccurrences(XT: sp.csr_matrix, top: np.ndarray, topic_chunk: int = 256):
    """For chunks of ``topic_chunk`` topics: (first topic, co, wm, wl) with ``co`` the
    co-document counts of the chunk's distinct top words and ``co[wm, wl]`` (chunk x pairs)
    the counts of each topic's pairs (l < m, m outer and l inner: the harness's order)."""
    topn = top.shape[1]
    m_idx, l_idx = np.tril_indices(topn, -1)           # pairs l < m, m = 1..topn-1
    order = np.lexsort((l_idx, m_idx))
    m_idx, l_idx = m_idx[order], l_idx[order]
    step = max(1, int(topic_chunk))
    for s in range(0, top.shape[0], step):
        t = top[s:s + step]
        u, inv = np.unique(t.ravel(), return_inverse=True)
        inv = inv.reshape(t.shape)
        M = XT[u]
        co = (M @ M.T).toarray()                       # |u| x |u| co-document counts
        yield s, co, inv[:, m_idx], inv[:, l_idx]


def umass_coherence(phi, batch_or_csr, topn: int = PROTOCOL_TOPN, eps: float = 1.0,
                    topic_chunk: int = 256) -> Dict[str, Any]:
    """UMass coherence (Mimno, Wallach, Talley, Leenders & McCallum 2011) of each topic.

    With the top ``topn`` words w_1..w_topn of topic k (``np.argsort(-phi[k])``, as the
    harness), and D(w) / D(w, w') the number of reference documents containing w / both::

        C(k) = Σ_{m=2..topn} Σ_{l<m} log((D(w_m, w_l) + eps) / D(w_l))

    Returns ``per_topic`` (K,), ``mean_sum`` (mean of C(k), Mimno's definition) and
    ``mean_pair`` (mean_sum / (topn choose 2), gensim's 'u_mass'), plus ``top`` (K x topn
    word ids). The reference documents (usually the training documents) are binarised. A top
    word that occurs in no reference document makes its topic's C(k) infinite (as in the
    harness); a warning is logged. Memory: co-occurrences are computed for ``topic_chunk``
    topics at a time (a dense (chunk·topn)² matrix at most).
    """
    if isinstance(topn, bool) or not isinstance(topn, (int, np.integer)) or topn < 2:
        raise ValueError("topn must be an integer >= 2, got %r" % (topn,))
    if not (eps > 0):
        raise ValueError("eps must be > 0, got %r" % (eps,))
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 2:
        raise ValueError("phi must be a K x V matrix, got shape %s" % (phi.shape,))
    K, V = phi.shape
    topn = min(int(topn), V)                           # a vocabulary smaller than topn
    XT = _binary_docs_T(batch_or_csr, V)               # V x D, binary
    top = _top_indices(phi, topn)
    per_topic = np.zeros(K)
    for s, co, wm, wl in _pair_cooccurrences(XT, top, topic_chunk):
        with np.errstate(divide="ignore"):
            vals = np.log((co[wm, wl] + eps) / co[wl, wl])
        per_topic[s:s + len(wm)] = vals.sum(1)
    if not np.all(np.isfinite(per_topic)):
        bad = np.nonzero(~np.isfinite(per_topic))[0]
        logger.warning("UMass coherence is infinite for %d topic(s) (e.g. topic %d): a top word "
                       "occurs in none of the reference documents", len(bad), bad[0])
    npairs = topn * (topn - 1) / 2
    mean_sum = float(per_topic.mean())
    return {"per_topic": per_topic, "mean_sum": mean_sum, "mean_pair": mean_sum / npairs,
            "top": top}


def npmi_coherence(phi, batch_or_csr, topn: int = PROTOCOL_TOPN, topic_chunk: int = 256,
                   top: Optional[np.ndarray] = None) -> Dict[str, Any]:
    """Document co-occurrence NPMI (Bouma 2009; Aletras & Stevenson 2013) of each topic's top
    ``topn`` words on the reference documents (usually the training documents)::

        NPMI(w, w') = log(p(w, w') / (p(w) p(w'))) / −log p(w, w')

    with p the fraction of documents containing the word(s); a pair that never co-occurs
    scores −1, a pair in every document 1. ``per_topic`` is the mean over the topn·(topn−1)/2
    pairs, ``mean`` the mean over topics (the harness's ``npmi``). gensim's ``c_npmi`` with a
    sliding window longer than every document is the same quantity (up to its ε = 1e-12).
    ``top``: each topic's words in :func:`_top_indices` order, at least ``topn`` of them
    (:func:`topic_health` sorts once for NPMI and diversity), else sorted here."""
    phi = _check_topn(phi, topn)
    K, V = phi.shape
    topn = min(int(topn), V)
    XT = _binary_docs_T(batch_or_csr, V)
    D = XT.shape[1]
    if D == 0:
        raise InputError("NPMI needs at least one reference document")
    top = _top_indices(phi, topn) if top is None else top[:, :topn]
    per_topic = np.zeros(K)
    for s, co, wm, wl in _pair_cooccurrences(XT, top, topic_chunk):
        co = co / D
        pj = co[wm, wl]
        pm, pl = co[wm, wm], co[wl, wl]
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.log(pj / (pm * pl)) / -np.log(pj)
        v = np.where(pj <= 0, -1.0, np.where(pj >= 1, 1.0, v))
        per_topic[s:s + len(pj)] = v.mean(1)
    return {"per_topic": per_topic, "mean": float(per_topic.mean()), "top": top}


DIVERSITY_TOPN = 25


def topic_diversity(phi, topn: int = DIVERSITY_TOPN, top: Optional[np.ndarray] = None) -> float:
    """Topic diversity (Dieng, Ruiz & Blei 2020): distinct words among all topics' top
    ``topn`` words / (topn·K); 1 when no two topics share a top word. A vocabulary of
    fewer than ``topn`` words takes all of them. ``top`` as in :func:`npmi_coherence`."""
    phi = _check_topn(phi, topn)
    n = min(int(topn), phi.shape[1])
    top = _top_indices(phi, n) if top is None else top[:, :n]
    return float(len(np.unique(top)) / top.size)


def _check_topn(phi, topn) -> np.ndarray:
    if isinstance(topn, bool) or not isinstance(topn, (int, np.integer)) or topn < 2:
        raise ValueError("topn must be an integer >= 2, got %r" % (topn,))
    return check_phi(phi)     # the callers clamp topn to V


#: documents sampled for topic usage, and its fixed-point iterations (the harness's values)
USAGE_DOCS = 2000
USAGE_ITERS = 50


def topic_usage(phi, batch_or_csr, alpha: float = PROTOCOL_ALPHA, max_docs: int = USAGE_DOCS,
                iters: int = USAGE_ITERS, seed: int = 0, backend: str = "auto"
                ) -> Dict[str, Any]:
    """Each topic's share of the tokens of a seeded sample of (training) documents.

    ``max_docs`` documents are drawn without replacement (``RandomState(seed).permutation``,
    as the harness; all when there are fewer), θ_d is fit by the document-completion fixed
    point (``iters`` iterations from uniform), and every token's responsibility
    θ_dk φ_kw / Σ_j θ_dj φ_jw is summed per topic. Returns ``shares`` (K, sum 1), ``dead``
    (topics with a share below 0.1/K, a tenth of uniform), ``effective`` (exp of the
    entropy of the shares: K when all are used equally) and ``n_docs``. Memory is bounded by
    the sample, whatever the size of the documents given. ``backend``: "numba" (parallel
    over documents), "numpy" (the harness's formulation) or "auto" (numba when available)."""
    if backend not in ("auto", "numba", "numpy"):
        raise ValueError("backend must be 'auto', 'numba' or 'numpy', got %r" % (backend,))
    phi = check_phi(phi)
    return _usage_of_sample(phi, usage_sample(batch_or_csr, max_docs, seed), alpha, iters,
                            backend)


def usage_sample(batch_or_csr, max_docs: int = USAGE_DOCS, seed: int = 0) -> DocBatch:
    """The documents topic usage is measured on: ``max_docs`` rows drawn without replacement
    (``RandomState(seed).permutation``, as the harness), in row order; all when fewer."""
    if sp.issparse(batch_or_csr):
        X = sp.csr_matrix(batch_or_csr)
        rows = np.sort(np.random.RandomState(seed).permutation(X.shape[0])[:max_docs])
        return DocBatch.from_csr(X[rows])
    batch = as_batch(batch_or_csr, "batch_or_csr")
    rows = np.sort(np.random.RandomState(seed).permutation(batch.n_docs)[:max_docs])
    return batch if len(rows) == batch.n_docs else batch.take(rows)


def _usage_of_sample(phi, sample: DocBatch, alpha, iters, backend) -> Dict[str, Any]:
    K, V = phi.shape
    check_words(sample, V, "the documents")
    if sample.n_tokens == 0:
        raise InputError("topic usage needs documents with at least one token")
    phiT = normalized_phi_T(phi)
    if kernels.usage is not None and backend in ("auto", "numba"):
        per_doc = np.zeros((sample.n_docs, K))
        kernels.usage(phiT, sample.indptr, sample.word_ids,
                      sample.counts.astype(np.float64), float(alpha), int(iters), per_doc)
        use = per_doc.sum(0)
    else:
        use = _usage_numpy(phiT, sample, alpha, iters)
    shares = use / use.sum()
    nz = shares[shares > 0]
    return {"shares": shares, "dead": int((shares < 0.1 / K).sum()),
            "effective": float(np.exp(-(nz * np.log(nz)).sum())), "n_docs": int(sample.n_docs)}


def fit_theta_numpy(phiT, A: sp.coo_matrix, alpha: float, iters: int) -> np.ndarray:
    """θ (documents x K) of the documents ``A`` (COO, documents x V) by ``iters`` iterations
    of the fixed point from uniform, vectorised over the documents as the harness writes it::

        θ_dk ← α + θ_dk Σ_w n_dw φ_kw / Σ_j θ_dj φ_jw,   then θ_d ← θ_d / Σ_k θ_dk

    The reference of :func:`lda_core.evaluation.kernels.fit_theta` (document completion and
    topic usage)."""
    rows, cols, n = A.row, A.col, A.data
    theta = np.full((A.shape[0], phiT.shape[1]), 1.0 / phiT.shape[1])
    for _ in range(int(iters)):
        denom = np.einsum("ik,ik->i", theta[rows], phiT[cols])
        R = sp.csr_matrix((n / denom, (rows, cols)), shape=A.shape)
        theta = alpha + theta * (R @ phiT)
        theta /= theta.sum(1, keepdims=True)
    return theta


def _usage_numpy(phiT, sample: DocBatch, alpha: float, iters: int) -> np.ndarray:
    """Topic usage summed over ``sample`` (the harness's vectorised formulation: the
    reference of :func:`lda_core.evaluation.kernels.usage`)."""
    V, K = phiT.shape
    doc = np.repeat(np.arange(sample.n_docs), np.diff(sample.indptr))
    w, n = sample.word_ids.astype(np.int64), sample.counts.astype(np.float64)
    coo = sp.csr_matrix((n, (doc, w)), shape=(sample.n_docs, V)).tocoo()
    r, c, n = coo.row, coo.col, coo.data
    theta = fit_theta_numpy(phiT, coo, alpha, iters)
    resp = theta[r] * phiT[c]
    resp /= resp.sum(1, keepdims=True)
    return (resp * n[:, None]).sum(0)


def topic_health(phi, train_docs, alpha: float = PROTOCOL_ALPHA, seed: int = 0,
                 topn: int = PROTOCOL_TOPN) -> Dict[str, Any]:
    """Topic usage, NPMI and diversity in one call (what the trainer logs, ``ldabeam
    evaluate`` prints and the report plots): ``dead_topics``, ``effective_topics``, ``npmi``,
    ``topic_diversity``, ``topic_shares`` and ``npmi_per_topic`` (lists). NPMI is computed
    on the same seeded sample of documents as the usage (bounded cost on any corpus); on the
    whole corpus when it has no more than ``USAGE_DOCS`` documents."""
    phi = check_phi(phi)
    if sp.issparse(train_docs):
        use = topic_usage(phi, train_docs, alpha=alpha, seed=seed)
        X = sp.csr_matrix(train_docs)
        if X.shape[0] > USAGE_DOCS:
            X = X[np.sort(np.random.RandomState(seed).permutation(X.shape[0])[:USAGE_DOCS])]
    else:                     # NPMI on the very documents of the usage sample (one draw)
        X = usage_sample(train_docs, USAGE_DOCS, seed)
        use = _usage_of_sample(phi, X, alpha, USAGE_ITERS, "auto")
    top = _top_indices(phi, min(max(int(topn), DIVERSITY_TOPN), phi.shape[1]))  # one sort
    npmi = npmi_coherence(phi, X, topn=topn, top=top)
    return {"dead_topics": use["dead"], "effective_topics": use["effective"],
            "npmi": npmi["mean"], "topic_diversity": topic_diversity(phi, top=top),
            "topic_shares": [float(x) for x in use["shares"]],
            "npmi_per_topic": [float(x) for x in npmi["per_topic"]],
            "health_docs": use["n_docs"]}


def health_scalars(phi, docs, seed: int = 0) -> Dict[str, float]:
    """:func:`topic_health` without the per-topic lists (what the trainer logs at its
    evaluation steps): ``dead_topics``, ``effective_topics``, ``npmi``, ``topic_diversity``."""
    h = topic_health(phi, docs, seed=seed)
    return {k: h[k] for k in ("dead_topics", "effective_topics", "npmi", "topic_diversity")}



def top_words(phi, vocab_tokens: Optional[Sequence[str]] = None, n: int = 10
              ) -> List[List[Tuple[Any, float]]]:
    """The ``n`` most probable words of each topic, as ``(token or word id, probability)``
    pairs in decreasing order (probabilities of the row-normalised ``phi``)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError("n must be an integer >= 1, got %r" % (n,))
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 2:
        raise ValueError("phi must be a K x V matrix, got shape %s" % (phi.shape,))
    K, V = phi.shape
    if vocab_tokens is not None and len(vocab_tokens) != V:
        raise ValueError("vocab_tokens has %d tokens but phi has V=%d words"
                         % (len(vocab_tokens), V))
    n = min(int(n), V)
    out = []
    for s0 in range(0, K, ROW_CHUNK):
        rows = phi[s0:s0 + ROW_CHUNK]
        rows = rows / rows.sum(1, keepdims=True)
        if n < V:
            part = np.argpartition(-rows, n - 1, axis=1)[:, :n]
        else:
            part = np.tile(np.arange(V), (len(rows), 1))
        for k in range(len(rows)):
            idx = part[k][np.lexsort((part[k], -rows[k, part[k]]))]   # by weight, then id
            out.append([(vocab_tokens[i] if vocab_tokens is not None else int(i),
                         float(rows[k, i])) for i in idx])
    return out


# ---------------------------------------------------------------------------------------------
# clustering agreement, baseline
# ---------------------------------------------------------------------------------------------
def _entropy(counts: np.ndarray) -> float:
    n = counts.sum()
    p = counts[counts > 0] / n
    return float(-(p * np.log(p)).sum())


def normalized_mutual_information(labels_true: Sequence, labels_pred: Sequence) -> float:
    """NMI with arithmetic-mean normalisation: I(U;V) / ((H(U) + H(V)) / 2), natural logs.

    Same value and edge cases as ``sklearn.metrics.normalized_mutual_info_score`` (default
    ``average_method='arithmetic'``): 1.0 when both labelings are a single cluster (or
    empty), 0.0 when the mutual information is 0. Labels may be any hashable values."""
    lt, lp = list(labels_true), list(labels_pred)
    if len(lt) != len(lp):
        raise ValueError("labels_true has %d entries but labels_pred has %d"
                         % (len(lt), len(lp)))

    def codes(labels):
        index = {}
        return np.array([index.setdefault(x, len(index)) for x in labels], np.int64), len(index)

    a, na = codes(lt)
    b, nb = codes(lp)
    if na == nb == 1 or na == nb == 0:
        return 1.0
    n = len(a)
    cont = np.bincount(a * nb + b, minlength=na * nb).reshape(na, nb).astype(np.float64)
    nz = cont > 0
    pi = cont.sum(1)
    pj = cont.sum(0)
    outer = np.outer(pi, pj)[nz]
    c = cont[nz]
    mi = float(np.sum(c / n * (np.log(c) - np.log(outer) + math.log(n))))
    mi = max(mi, 0.0)
    if mi == 0.0:
        return 0.0
    h = (_entropy(pi) + _entropy(pj)) / 2.0
    return float(mi / max(h, np.finfo(np.float64).eps))
