"""Numba kernels of sparse Gibbs-within-VB (Mimno, Hoffman & Blei, ICML 2012).

Sampling distribution for token i (word w) of document d, topics frozen for the minibatch:

    p(z_i = k) ∝ (α + N_dk^¬i) · exp(E[log β_kw]),
    exp(E[log β_kw]) = exp(ψ(η + λ^N_kw)) · c_k,   c_k = exp(-ψ(Vη + Σ_v λ^N_kv)).

Split normaliser (paper Appendix A): with e0 = exp(ψ(η)) and coef_kw = (exp(ψ(η+λ^N_kw)) - e0)·c_k
(non-zero only where λ^N_kw > 0),

    Σ_k p_k = q_w + r_d + s
    q_w = Σ_{k: λ^N_kw > 0} (α + N_dk) coef_kw      (walk the word's sparse row, O(nnz_w))
    r_d = e0 Σ_{k: N_dk > 0} N_dk c_k                (document bucket, updated in O(1) as N_dk
                                                      changes; walked over the doc's topics)
    s   = α e0 Σ_k c_k                               (constant per minibatch; binary search in
                                                      its cumulative sum)

so a draw costs O(nnz_w + K_d + log K) instead of O(K). The kept sweeps' (word, topic)
counts are summed INSIDE the kernel into a per-thread open-addressing hash table (key
u·K + k, u the word's index among the minibatch's distinct words), then each table is sorted
and the thread results merged linearly; counts are integers in float64, so sums are exact
and independent of the thread split. Every document reseeds the generator with its own seed
(derived from (seed, step, doc id)), so its draws do not depend on the thread that runs it.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange

from lda_core.algorithms.sparse_stats import merge_sorted_keys


@numba.njit(cache=True)
def gather_rows(rows, w_indptr, w_topics, w_vals):
    """The CSR slices of ``rows`` (the minibatch's distinct words) as a local CSR."""
    U = rows.shape[0]
    indptr = np.zeros(U + 1, np.int64)
    for i in range(U):
        r = rows[i]
        indptr[i + 1] = indptr[i] + (w_indptr[r + 1] - w_indptr[r])
    topics = np.empty(indptr[U], np.int32)
    vals = np.empty(indptr[U], np.float64)
    for i in range(U):
        r = rows[i]
        lo = w_indptr[r]
        n = w_indptr[r + 1] - lo
        for j in range(n):
            topics[indptr[i] + j] = w_topics[lo + j]
            vals[indptr[i] + j] = w_vals[lo + j]
    return indptr, topics, vals


@numba.njit(cache=True)
def merge_into_csr(w_indptr, w_topics, w_vals, s_words, s_topics, s_vals, scale):
    """Ñ += scale·stats: merge sorted (word, topic) statistics into the word-major CSR.

    Untouched rows are copied as blocks; touched rows are merged (topics stay sorted)."""
    V = w_indptr.shape[0] - 1
    n_old = w_topics.shape[0]
    n_new = s_words.shape[0]
    topics = np.empty(n_old + n_new, np.int32)
    vals = np.empty(n_old + n_new, np.float64)
    indptr = np.zeros(V + 1, np.int64)
    out = 0
    j = 0
    prev = 0
    while j < n_new:
        w = s_words[j]
        # copy untouched rows prev..w-1 as one block
        lo, hi = w_indptr[prev], w_indptr[w]
        for p in range(lo, hi):
            topics[out] = w_topics[p]
            vals[out] = w_vals[p]
            out += 1
        for r in range(prev, w):
            indptr[r + 1] = indptr[r] + (w_indptr[r + 1] - w_indptr[r])
        # merge row w
        a, ae = w_indptr[w], w_indptr[w + 1]
        start = out
        while j < n_new and s_words[j] == w:
            t = s_topics[j]
            while a < ae and w_topics[a] < t:
                topics[out] = w_topics[a]
                vals[out] = w_vals[a]
                out += 1
                a += 1
            if a < ae and w_topics[a] == t:
                topics[out] = t
                vals[out] = w_vals[a] + scale * s_vals[j]
                a += 1
            else:
                topics[out] = t
                vals[out] = scale * s_vals[j]
            out += 1
            j += 1
        while a < ae:
            topics[out] = w_topics[a]
            vals[out] = w_vals[a]
            out += 1
            a += 1
        indptr[w + 1] = indptr[w] + (out - start)
        prev = w + 1
    lo, hi = w_indptr[prev], w_indptr[V]
    for p in range(lo, hi):
        topics[out] = w_topics[p]
        vals[out] = w_vals[p]
        out += 1
    for r in range(prev, V):
        indptr[r + 1] = indptr[r] + (w_indptr[r + 1] - w_indptr[r])
    return indptr, topics[:out].copy(), vals[:out].copy()


@numba.njit(cache=True)
def _draw(u, ndk, nzl, nnz, r, u_indptr, u_topics, u_coef, ck, e0, alpha, s_cum, s_tot, qbuf):
    """One draw from p_k ∝ (α + N_dk)·exp(E[log β_kw]) using the split normaliser."""
    lo = u_indptr[u]
    hi = u_indptr[u + 1]
    q = 0.0
    for j in range(lo, hi):
        v = (alpha + ndk[u_topics[j]]) * u_coef[j]
        qbuf[j - lo] = v
        q += v
    if r < 0.0 or nnz == 0:
        r = 0.0
    x = np.random.random() * (q + r + s_tot)
    if x < q:
        for j in range(lo, hi):
            x -= qbuf[j - lo]
            if x < 0.0:
                return u_topics[j]
        return u_topics[hi - 1]
    x -= q
    if x < r:
        for j in range(nnz):
            k = nzl[j]
            x -= e0 * ndk[k] * ck[k]
            if x < 0.0:
                return k
        return nzl[nnz - 1]
    x -= r
    # smoothing bucket: binary search in the cumulative α·e0·c_k
    K = s_cum.shape[0]
    a, b = 0, K - 1
    while a < b:
        m = (a + b) // 2
        if s_cum[m] > x:
            b = m
        else:
            a = m + 1
    return a


@numba.njit(cache=True, inline="always")
def _add_topic(k, ndk, nzl, pos, nnz):
    """One more token of topic ``k`` in the document; a topic new to it joins the list
    ``nzl[:nnz]`` of its non-zero topics (``pos[k]`` its place). Returns the list's length."""
    ndk[k] += 1
    if ndk[k] == 1:
        pos[k] = nnz
        nzl[nnz] = k
        nnz += 1
    return nnz


@numba.njit(cache=True)
def gibbs_doc(toks, z, ndk, nzl, pos, u_indptr, u_topics, u_coef, ck, e0, alpha, s_cum,
              s_tot, burn_in, samples, seed, random_init, hk, hv, accumulate, theta_row, qbuf):
    """Initialise z, run ``burn_in`` + ``samples`` sweeps over one document's tokens.

    Adds the kept sweeps' counts to the hash table (hk, hv) when ``accumulate`` and the mean
    N_dk over kept sweeps to ``theta_row``. ``ndk``/``pos`` must be zero/-1 on entry and are
    left so. Returns the number of sweeps (initialisation included)."""
    np.random.seed(seed)
    n = toks.shape[0]
    K = ck.shape[0]
    mask = hk.shape[0] - 1
    nnz = 0
    r = 0.0
    for i in range(n):
        if random_init:
            k = np.random.randint(0, K)
        else:   # sequential initialisation: the conditional given the tokens before i
            k = _draw(toks[i], ndk, nzl, nnz, r, u_indptr, u_topics, u_coef, ck, e0, alpha,
                      s_cum, s_tot, qbuf)
        nnz = _add_topic(k, ndk, nzl, pos, nnz)
        r += e0 * ck[k]
        z[i] = k
    inv_s = 1.0 / samples
    for sweep in range(burn_in + samples):
        keep = sweep >= burn_in
        r = 0.0                                  # recomputed each sweep: no drift
        for j in range(nnz):
            r += ndk[nzl[j]] * ck[nzl[j]]
        r *= e0
        for i in range(n):
            k = z[i]
            ndk[k] -= 1
            r -= e0 * ck[k]
            if ndk[k] == 0:                      # remove k from the doc's topic list
                p = pos[k]
                last = nzl[nnz - 1]
                nzl[p] = last
                pos[last] = p
                pos[k] = -1
                nnz -= 1
            k = _draw(toks[i], ndk, nzl, nnz, r, u_indptr, u_topics, u_coef, ck, e0, alpha,
                      s_cum, s_tot, qbuf)
            nnz = _add_topic(k, ndk, nzl, pos, nnz)
            r += e0 * ck[k]
            z[i] = k
            if keep and accumulate:
                key = np.int64(toks[i]) * K + k
                h = ((key * np.int64(0x9E3779B1)) ^ (key >> 16)) & mask
                while True:
                    if hk[h] == key:
                        hv[h] += 1.0
                        break
                    if hk[h] == -1:
                        hk[h] = key
                        hv[h] = 1.0
                        break
                    h = (h + 1) & mask
        if keep:
            for j in range(nnz):
                kk = nzl[j]
                theta_row[kk] += ndk[kk] * inv_s
    for j in range(nnz):
        kk = nzl[j]
        ndk[kk] = 0
        pos[kk] = -1
    return 1 + burn_in + samples


@numba.njit(parallel=True, cache=True)
def sgvb_estep(indptr, local_ids, counts, u_indptr, u_topics, u_coef, ck, e0, alpha,
               burn_in, samples, seeds, random_init, n_chunks, accumulate, want_theta):
    """Gibbs sweeps over a minibatch; returns (keys u·K+k sorted, counts summed over kept
    sweeps, θ-counts n x K (mean N_dk over kept sweeps) or 0 x K, sweeps per document)."""
    # one numba kernel: sizing the per-chunk hash tables, then the parallel sweeps over chunks
    n_docs = indptr.shape[0] - 1
    K = ck.shape[0]
    s_cum = np.cumsum(alpha * e0 * ck)
    s_tot = s_cum[K - 1]
    per = (n_docs + n_chunks - 1) // n_chunks
    # per-chunk token totals -> hash capacities (power of two, load <= 1/2)
    cap = 16
    maxlen = 1
    maxrow = 1
    for c in range(n_chunks):
        tot = 0
        for d in range(c * per, min(n_docs, (c + 1) * per)):
            L = 0
            for p in range(indptr[d], indptr[d + 1]):
                L += counts[p]
            tot += L
            if L > maxlen:
                maxlen = L
        # distinct (word, topic) keys <= min(tokens x kept sweeps, U x K)
        need = 2 * min(tot * samples, (u_indptr.shape[0] - 1) * K) + 16
        while cap < need:
            cap *= 2
    for u in range(u_indptr.shape[0] - 1):
        if u_indptr[u + 1] - u_indptr[u] > maxrow:
            maxrow = u_indptr[u + 1] - u_indptr[u]
    if not accumulate:
        cap = 2
    hk = np.full((n_chunks, cap), -1, np.int64)
    hv = np.zeros((n_chunks, cap), np.float64)
    n_th = 0
    if want_theta:
        n_th = n_docs
    theta = np.zeros((n_th, K), np.float64)
    sweeps = np.zeros(n_docs, np.int64)
    for c in prange(n_chunks):
        ndk = np.zeros(K, np.int64)
        pos = np.full(K, -1, np.int64)
        nzl = np.zeros(K, np.int64)
        z = np.zeros(maxlen, np.int64)
        toks = np.zeros(maxlen, np.int64)
        qbuf = np.zeros(maxrow, np.float64)
        dummy = np.zeros(K, np.float64)
        for d in range(c * per, min(n_docs, (c + 1) * per)):
            n = 0
            for p in range(indptr[d], indptr[d + 1]):
                for _ in range(counts[p]):
                    toks[n] = local_ids[p]
                    n += 1
            if n == 0:
                continue
            if want_theta:
                row = theta[d]
            else:
                row = dummy
            sweeps[d] = gibbs_doc(toks[:n], z[:n], ndk, nzl, pos, u_indptr, u_topics,
                                  u_coef, ck, e0, alpha, s_cum, s_tot, burn_in, samples,
                                  seeds[d], random_init, hk[c], hv[c], accumulate, row, qbuf)
    # extract, sort and merge the per-chunk tables (linear merges of sorted keys)
    keys = np.zeros(0, np.int64)
    vals = np.zeros(0, np.float64)
    if accumulate:
        for c in range(n_chunks):
            m = 0
            for h in range(cap):
                if hk[c, h] != -1:
                    m += 1
            ck_keys = np.empty(m, np.int64)
            ck_vals = np.empty(m, np.float64)
            m = 0
            for h in range(cap):
                if hk[c, h] != -1:
                    ck_keys[m] = hk[c, h]
                    ck_vals[m] = hv[c, h]
                    m += 1
            o = np.argsort(ck_keys)
            keys, vals = merge_sorted_keys(keys, vals, ck_keys[o], ck_vals[o])
    return keys, vals, theta, sweeps
