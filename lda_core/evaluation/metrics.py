"""Held-out estimates, and every evaluation metric in one namespace: one implementation of
each, used by tests, benchmarks, reports and the CLI.

Every function takes a topic-word matrix ``phi`` (K x V, any positive scale; rows are
normalised where a distribution is needed) and :class:`lda_core.docbatch.DocBatch` documents,
so it judges any algorithm (and any other system's exported matrix) the same way.

* :func:`document_completion` — held-out **log-likelihood per token** by document completion
  (an *estimate* of held-out predictive performance, not a bound): θ is fitted on the first
  half of each held-out document's tokens, the second half is scored. Same protocol and
  numbers as ``../shared/bench/bench_peers.py`` (``split_halves`` + ``heldout_completion``).
* :func:`left_to_right` — the left-to-right held-out estimate of log p(w_d) (Wallach et al.
  2009), seeded particles over a bounded sample of documents.
* :func:`unigram_baseline`.
* :func:`evaluate_model` — all that apply, in one call, plus the algorithm's own per-word
  perplexity *bound* (Hoffman et al. 2010 eq. 16, implemented in ``lda_core.algorithms.online_vb``)
  when it has one.
* topic quality, defined in :mod:`lda_core.evaluation.topic_quality` and re-exported here:
  :func:`umass_coherence`, :func:`npmi_coherence`, :func:`topic_usage`,
  :func:`topic_diversity`, :func:`topic_health` / :func:`health_scalars`, :func:`top_words`,
  :func:`normalized_mutual_information`.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from lda_core.docbatch import DocBatch
from lda_core.errors import InputError
from lda_core.evaluation import kernels
from lda_core.evaluation.topic_quality import (as_batch, check_phi, check_words, fit_theta_numpy,
                                               normalized_phi_T, PROTOCOL_ALPHA, PROTOCOL_ITERS,
                                               PROTOCOL_TOPN, top_words, umass_coherence)

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# document completion split
# ---------------------------------------------------------------------------------------------
def split_halves(batch: DocBatch, seed: int) -> Tuple[DocBatch, DocBatch]:
    """Document completion split: each document's tokens, shuffled, cut into two halves.

    Exactly the protocol of ``bench_peers.split_halves``: with ``rng =
    np.random.RandomState(seed)``, for each document in order its tokens are expanded
    (``np.repeat(word_ids, counts)``, word ids ascending), shuffled in place with
    ``rng.shuffle``, and the first ``n // 2`` tokens go to the first half, the rest to the
    second. (``bench_peers.py prepare --seed S`` uses ``RandomState(S + 1)`` for the split.)
    Both halves keep every document (possibly empty), its id, title and label, so they stay
    aligned with ``batch``.
    """
    if (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
            or not 0 <= seed < 2 ** 32):
        raise ValueError("seed must be an integer in [0, 2**32), got %r" % (seed,))
    rng = np.random.RandomState(int(seed))
    n = batch.n_docs
    lens = batch.doc_lengths
    toks = np.repeat(batch.word_ids.astype(np.int64), batch.counts.astype(np.int64))
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=starts[1:])
    for d in range(n):                       # the draws must follow the harness, doc by doc
        s, e = starts[d], starts[d + 1]
        if e - s > 1:
            rng.shuffle(toks[s:e])
    doc_of = np.repeat(np.arange(n, dtype=np.int64), lens)
    pos = np.arange(len(toks), dtype=np.int64) - starts[doc_of]
    first = pos < (lens // 2)[doc_of]
    return (_tokens_to_batch(batch, doc_of[first], toks[first]),
            _tokens_to_batch(batch, doc_of[~first], toks[~first]))


def _tokens_to_batch(like: DocBatch, doc_of: np.ndarray, words: np.ndarray) -> DocBatch:
    n = like.n_docs
    width = int(words.max()) + 1 if len(words) else 1
    key = doc_of * width + words
    u, c = np.unique(key, return_counts=True)
    d = u // width
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(d, minlength=n), out=indptr[1:])
    return DocBatch(like.doc_ids, indptr, (u % width).astype(np.int32), c.astype(np.int32),
                    titles=like.titles, labels=like.labels)


# ---------------------------------------------------------------------------------------------
# document completion
# ---------------------------------------------------------------------------------------------
def _completion_docs_numpy(phiT, a: DocBatch, b: DocBatch, alpha, iters, chunk=2000):
    """Reference implementation (vectorised over a chunk of documents, like the harness).
    Returns the per-document log-likelihood of the second halves."""
    D = a.n_docs
    out = np.zeros(D)
    V = phiT.shape[0]
    for s in range(0, D, chunk):
        idx = np.arange(s, min(D, s + chunk))
        A = a.take(idx).to_csr(V).tocoo()
        B = b.take(idx).to_csr(V).tocoo()
        theta = fit_theta_numpy(phiT, A, alpha, iters)
        p = np.einsum("ik,ik->i", theta[B.row], phiT[B.col])
        out[idx] = np.bincount(B.row, weights=B.data * np.log(p), minlength=len(idx))
    return out


def _get_completion_kernel():
    """The per-document numba kernel (:func:`lda_core.evaluation.kernels.completion`;
    compiled once, cached on disk), or None without numba."""
    return kernels.completion


def document_completion(phi, batch_a: DocBatch, batch_b: DocBatch, alpha: float = PROTOCOL_ALPHA,
                        iters: int = PROTOCOL_ITERS, backend: str = "auto") -> Dict[str, Any]:
    """Held-out log-likelihood per token by document completion (the harness's evaluator).

    For each document d, θ_d (initialised uniform, 1/K) is fitted on the first half
    ``batch_a`` by ``iters`` fixed-point iterations::

        θ_dk ← α + θ_dk Σ_w n_dw φ_kw / Σ_j θ_dj φ_jw,   then θ_d ← θ_d / Σ_k θ_dk

    and the second half ``batch_b`` is scored: ``ll = Σ_d Σ_w n_dw log Σ_k θ_dk φ_kw``.
    Returns ``ll_per_token = ll / N_b`` (N_b = tokens of ``batch_b``), ``n_tokens = N_b``,
    ``perplexity = exp(-ll_per_token)`` (an estimate, not a bound) and ``n_docs``.
    ``phi`` is floored at 1e-300 and row-normalised first, as the harness does. ``alpha`` is
    the *evaluation* prior (the protocol fixes 0.1 for every system), not necessarily the
    model's. ``backend``: "numba" (per-document kernel, parallel over documents, O(K) memory
    per thread), "numpy" (the harness's vectorised formulation, chunks of 2,000 documents),
    or "auto" (numba when available).
    """
    a = as_batch(batch_a, "batch_a")
    b = as_batch(batch_b, "batch_b")
    if a.n_docs != b.n_docs:
        raise ValueError("batch_a has %d documents but batch_b has %d; they must be the two "
                         "halves of the same documents (split_halves)" % (a.n_docs, b.n_docs))
    if not (isinstance(alpha, (int, float, np.floating)) and alpha > 0 and math.isfinite(alpha)):
        raise ValueError("alpha must be a finite number > 0, got %r" % (alpha,))
    if (isinstance(iters, bool) or not isinstance(iters, (int, np.integer))
            or not 0 <= iters <= 100000):
        raise ValueError("iters must be an integer in [0, 100000], got %r" % (iters,))
    if backend not in ("auto", "numba", "numpy"):
        raise ValueError("backend must be 'auto', 'numba' or 'numpy', got %r" % (backend,))
    phi = check_phi(phi)
    V = phi.shape[1]
    check_words(a, V, "batch_a")
    check_words(b, V, "batch_b")
    n_tokens = b.n_tokens
    if n_tokens == 0:
        raise InputError("batch_b has no tokens to score")
    phiT = normalized_phi_T(phi)          # V x K: one word's K values are contiguous
    kernel = _get_completion_kernel() if backend in ("auto", "numba") else None
    if backend == "numba" and kernel is None:
        raise ValueError("backend='numba' asked for but numba is not installed")
    if kernel is not None:
        per_doc = np.zeros(a.n_docs)
        kernel(phiT, a.indptr, a.word_ids, a.counts.astype(np.float64), b.indptr, b.word_ids,
               b.counts.astype(np.float64), float(alpha), int(iters), per_doc)
    else:
        per_doc = _completion_docs_numpy(phiT, a, b, float(alpha), int(iters))
    ll = float(per_doc.sum())
    ll_tok = ll / n_tokens
    return {"ll_per_token": ll_tok, "n_tokens": int(n_tokens),
            "perplexity": float(math.exp(-ll_tok)), "n_docs": int(a.n_docs)}


# ---------------------------------------------------------------------------------------------
# left-to-right held-out estimate (Wallach, Murray, Salakhutdinov & Mimno 2009, Algorithm 3)
# ---------------------------------------------------------------------------------------------
_L2R_KERNEL = []


def _get_l2r_kernel():
    if not _L2R_KERNEL:
        from numba import njit

        @njit(cache=True)
        def draw(nk_r, phiT, w, alpha, p):   # pragma: no cover (compiled)
            """Sample k ∝ (N_k + α) φ_kw; returns (k, Σ_k (N_k + α) φ_kw)."""
            K = p.shape[0]
            acc = 0.0
            for k in range(K):
                acc += (nk_r[k] + alpha) * phiT[w, k]
                p[k] = acc
            u = np.random.random() * acc
            k1 = 0
            while k1 < K - 1 and p[k1] <= u:
                k1 += 1
            return k1, acc

        @njit(cache=True)
        def kernel(phiT, words, alpha, R, seed, out_p):   # pragma: no cover (compiled)
            """out_p[n] = (1/R) Σ_r p(w_n | w_<n, z^r_<n) for one document's token sequence."""
            np.random.seed(seed)
            N = words.shape[0]
            K = phiT.shape[1]
            z = np.zeros((R, N), np.int64)
            nk = np.zeros((R, K))
            p = np.empty(K)
            for n in range(N):
                total = 0.0
                for r in range(R):
                    for m in range(n):                 # resample the earlier tokens once
                        nk[r, z[r, m]] -= 1.0
                        k1, _ = draw(nk[r], phiT, words[m], alpha, p)
                        z[r, m] = k1
                        nk[r, k1] += 1.0
                    k1, acc = draw(nk[r], phiT, words[n], alpha, p)
                    total += acc / (n + K * alpha)
                    z[r, n] = k1
                    nk[r, k1] += 1.0
                out_p[n] = total / R
        _L2R_KERNEL.append(kernel)
    return _L2R_KERNEL[0]


def left_to_right(phi, batch: DocBatch, alpha: float = PROTOCOL_ALPHA, particles: int = 20,
                  max_docs: int = 200, seed: int = 0) -> Dict[str, Any]:
    """Held-out log p(w_d | φ, α) by the left-to-right particle algorithm (Wallach et al. 2009,
    Algorithm 3, the estimator of their and Mimno et al.'s comparisons)::

        p(w_n | w_<n) ≈ (1/R) Σ_r Σ_k φ_k,w_n (N^r_k,<n + α) / (n − 1 + Kα)

    where each of the R particles re-samples the topics of the earlier tokens once (collapsed
    Gibbs given φ) before scoring w_n, then samples z_n; log p(w_d) = Σ_n log p(w_n | w_<n).
    A bag of words has no order: each document's tokens are put in a seeded random order.
    Cost O(R·N_d²·K) per document, bounded by scoring a seeded sample of at most ``max_docs``
    documents. Returns ``ll_per_token`` (Σ_d log p(w_d) / Σ_d N_d), ``log_p`` per scored
    document, ``n_tokens``, ``n_docs``, ``doc_index`` (positions in ``batch``)."""
    phi = check_phi(phi)
    batch = as_batch(batch, "batch")
    K, V = phi.shape
    check_words(batch, V, "the documents")
    if isinstance(particles, bool) or not isinstance(particles, (int, np.integer)) \
            or particles < 1:
        raise ValueError("particles must be an integer >= 1, got %r" % (particles,))
    if not alpha > 0:
        raise ValueError("alpha must be > 0, got %r" % (alpha,))
    phiT = normalized_phi_T(phi)
    rng = np.random.RandomState(seed)
    idx = np.sort(rng.permutation(batch.n_docs)[:max_docs])
    idx = idx[batch.doc_lengths[idx] > 0]
    if len(idx) == 0:
        raise InputError("left_to_right needs at least one non-empty document")
    kernel = _get_l2r_kernel()
    log_p = np.zeros(len(idx))
    n_tok = 0
    for j, d in enumerate(idx):
        w, c = batch.doc(int(d))
        words = np.repeat(w.astype(np.int64), c)
        doc_seed = int(rng.randint(0, 2 ** 31 - 1))
        words = words[np.random.RandomState(doc_seed).permutation(len(words))]
        out = np.empty(len(words))
        kernel(phiT, words, float(alpha), int(particles), doc_seed, out)
        log_p[j] = float(np.log(out).sum())
        n_tok += len(words)
    return {"ll_per_token": float(log_p.sum() / n_tok), "log_p": log_p, "n_tokens": int(n_tok),
            "n_docs": int(len(idx)), "doc_index": idx}


def unigram_baseline(train_batch: DocBatch, batch_a: DocBatch, batch_b: DocBatch,
                     n_words: Optional[int] = None, smoothing: float = 0.0) -> Dict[str, Any]:
    """Per-token log-likelihood of the second halves under a unigram model (a sanity floor).

    p(w) ∝ n_train(w) + smoothing, the word frequencies of the training documents (the
    first halves are not used: a unigram model does not adapt to a document; the argument
    keeps the signature of :func:`document_completion`). A held-out word with p(w) = 0 makes
    the score -inf; pass ``smoothing > 0`` to avoid that. Returns ``ll_per_token``,
    ``n_tokens``, ``perplexity``."""
    tr = as_batch(train_batch, "train_batch")
    b = as_batch(batch_b, "batch_b")
    V = n_words if n_words is not None else max(tr.max_word_id(), b.max_word_id()) + 1
    if smoothing < 0:
        raise ValueError("smoothing must be >= 0, got %r" % (smoothing,))
    check_words(b, V, "batch_b")
    check_words(tr, V, "train_batch")
    cnt = np.bincount(tr.word_ids, weights=tr.counts.astype(np.float64), minlength=V)
    cnt = cnt + smoothing
    with np.errstate(divide="ignore"):
        logp = np.log(cnt) - math.log(cnt.sum())
    n = b.n_tokens
    if n == 0:
        raise InputError("batch_b has no tokens to score")
    ll = float(np.dot(b.counts.astype(np.float64), logp[b.word_ids]))
    return {"ll_per_token": ll / n, "n_tokens": int(n), "perplexity": float(math.exp(-ll / n))}


# ---------------------------------------------------------------------------------------------
# everything at once
# ---------------------------------------------------------------------------------------------
def evaluate_model(algorithm, heldout_batch: DocBatch, train_batch: Optional[DocBatch] = None,
                   seed: int = 0, topn: int = PROTOCOL_TOPN, alpha: float = PROTOCOL_ALPHA,
                   iters: int = PROTOCOL_ITERS, vocab_tokens: Optional[Sequence[str]] = None,
                   n_top_words: int = 10) -> Dict[str, Any]:
    """All the metrics a report or ``ldabeam evaluate`` prints, in one call.

    ``algorithm`` is anything with ``topic_word()`` (an algorithm object) or a K x V array.
    Held-out documents with fewer than 2 tokens are dropped (as the harness does), the rest
    split with :func:`split_halves` (``seed``). Returns::

        completion_ll_per_token, completion_perplexity, completion_n_tokens, n_heldout_docs,
        umass_mean_sum, umass_mean_pair, umass_per_topic (list), coherence_docs,
        per_word_bound (only if the algorithm has ``per_word_bound``; the paper's eq. 16
        bound on held-out documents — a bound, not a perplexity estimate),
        unigram_ll_per_token (only with ``train_batch``), top_words.

    Coherence is computed on ``train_batch`` when given, else on the held-out documents.
    """
    phi = algorithm.topic_word() if hasattr(algorithm, "topic_word") else algorithm
    phi = np.asarray(phi, dtype=np.float64)
    held = as_batch(heldout_batch, "heldout_batch")
    keep = np.nonzero(held.doc_lengths >= 2)[0]
    held2 = held if len(keep) == held.n_docs else held.take(keep)
    if held2.n_docs == 0:
        raise InputError("no held-out document has 2 or more tokens")
    a, b = split_halves(held2, seed)
    dc = document_completion(phi, a, b, alpha=alpha, iters=iters)
    out: Dict[str, Any] = {"completion_ll_per_token": dc["ll_per_token"],
                           "completion_perplexity": dc["perplexity"],
                           "completion_n_tokens": dc["n_tokens"],
                           "n_heldout_docs": held2.n_docs}
    ref = train_batch if train_batch is not None else held
    coh = umass_coherence(phi, ref, topn=topn)
    out.update(umass_mean_sum=coh["mean_sum"], umass_mean_pair=coh["mean_pair"],
               umass_per_topic=[float(x) for x in coh["per_topic"]],
               coherence_docs="train" if train_batch is not None else "heldout")
    bound = getattr(algorithm, "per_word_bound", None)
    if callable(bound):
        out["per_word_bound"] = float(bound(held.non_empty()))
    if train_batch is not None:
        out["unigram_ll_per_token"] = unigram_baseline(train_batch, a, b,
                                                       n_words=phi.shape[1])["ll_per_token"]
    out["top_words"] = top_words(phi, vocab_tokens, n=n_top_words)
    return out
