"""Numba kernels of the collapsed samplers (batch Gibbs, o-LDA, incremental Gibbs, particle filter).

Everything here works on *token arrays*: a corpus of bag-of-words documents is expanded into one
entry per token (``tok_w`` word id, ``tok_d`` document index, ``doc_ptr`` token offsets per
document) with the topic assignment ``z``. Counts (float-free, int32):

* ``nwk[w, k]`` word-topic counts (V x K, word-major so the per-word row is contiguous),
* ``nk[k]`` topic totals, ``ndk[d, k]`` document-topic counts.

The collapsed conditional (Griffiths & Steyvers 2004, eq. 5)::

    P(z_i = k | rest) ∝ (n_kw^¬i + β) / (n_k^¬i + Vβ) · (n_dk^¬i + α)

is evaluated with the bucket split of SparseLDA (Yao, Mimno & McCallum 2009): with the document
coefficient ``c_k = (n_dk + α) / (n_k + Vβ)`` (kept up to date incrementally: only the two topics
touched by a token change), the unnormalised mass is

    p_k = β·c_k  +  n_wk·c_k          (smoothing+document bucket,  word bucket)

so the normaliser is ``β Σ_k c_k`` (a running sum, O(1) per token) plus the dot product
``Σ_k n_wk c_k`` over the word's row; a uniform draw falls in the word bucket most of the time
(after burn-in), where the search only visits topics with ``n_wk > 0``.

Randomness: a SplitMix64 generator whose whole state is one uint64. Batch Gibbs derives one stream
per (seed, sweep, document) so a sweep's result does not depend on how documents are split over
threads; the online samplers carry a single stream (saved in checkpoints for exact resume).

Why one module of ~600 lines: the kernels share the inline generator (``rng_uniform``,
``rng_below``, ``stream_seed``) and the bucket draw (``_draw_bucket``), and every sampler's
checkpoints resume bit for bit only while all of them draw exactly alike. The variants --
per-document sweeps (serial and AD-LDA), tokens in stream order with rejuvenation, particles
with weights, fold-in of held-out documents -- differ in the loop around the draw and in the
count layout (one chain: ``nwk`` V x K; particles: P x V x K), so each is written out for its
layout in numba and kept here, next to the primitives it must agree with.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0


# ------------------------------------------------------------------------------------------
# random numbers
# ------------------------------------------------------------------------------------------
@njit(inline="always")
def _mix(z):
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(inline="always")
def rng_uniform(s):
    """One SplitMix64 step: returns (new state, uniform in [0, 1))."""
    s = s + _GOLDEN
    return s, np.float64(_mix(s) >> _S11) * _INV53


@njit(inline="always")
def rng_below(s, n):
    """(new state, integer uniform in [0, n))."""
    s, u = rng_uniform(s)
    r = np.int64(u * n)
    if r >= n:
        r = n - 1
    return s, r


@njit(inline="always")
def stream_seed(seed, a, b):
    """The start state of the stream for (seed, a, b), e.g. (seed, sweep, document)."""
    z = _mix(np.uint64(seed) * _M1 + _GOLDEN)
    z = _mix(z ^ (np.uint64(a) * _M2 + _GOLDEN))
    return _mix(z ^ (np.uint64(b) * _M1 + _M2))


def seed_state(seed: int, a: int = 0, b: int = 0) -> int:
    """Python-side start state (int) of the stream for (seed, a, b)."""
    return int(stream_seed(np.uint64(seed), np.uint64(a), np.uint64(b)))


# ------------------------------------------------------------------------------------------
# token expansion
# ------------------------------------------------------------------------------------------
@njit(cache=True)
def expand_tokens(indptr, word_ids, counts, seed, first_doc):
    """Bag-of-words CSR -> token word ids, in a per-document order shuffled by the stream
    (seed, 0, first_doc + j) (Fisher-Yates), so the order is fixed by the seed and the document's
    position in the stream, not by how the stream was cut into batches."""
    n_docs = len(indptr) - 1
    n_tok = 0
    for i in range(len(counts)):
        n_tok += counts[i]
    tok_w = np.empty(n_tok, np.int32)
    doc_ptr = np.empty(n_docs + 1, np.int64)
    doc_ptr[0] = 0
    t = 0
    for d in range(n_docs):
        start = t
        for j in range(indptr[d], indptr[d + 1]):
            for _ in range(counts[j]):
                tok_w[t] = word_ids[j]
                t += 1
        s = stream_seed(seed, 0, first_doc + d)
        for i in range(t - 1, start, -1):
            s, r = rng_below(s, i - start + 1)
            j = start + r
            tmp = tok_w[i]
            tok_w[i] = tok_w[j]
            tok_w[j] = tmp
        doc_ptr[d + 1] = t
    return tok_w, doc_ptr


@njit(cache=True)
def counts_from_z(tok_w, tok_d, z, n_words, n_docs, K):
    """Recompute (nwk, nk, ndk) from the assignments (used on resume and by invariant checks)."""
    nwk = np.zeros((n_words, K), np.int32)
    nk = np.zeros(K, np.int64)
    ndk = np.zeros((n_docs, K), np.int32)
    for i in range(len(z)):
        k = z[i]
        nwk[tok_w[i], k] += 1
        nk[k] += 1
        ndk[tok_d[i], k] += 1
    return nwk, nk, ndk


# ------------------------------------------------------------------------------------------
# the conditional, shared by every sampler
# ------------------------------------------------------------------------------------------
@njit(inline="always")
def _draw_bucket(row, c, sumc, beta, u01, K):
    """Sample k ∝ β c_k + n_wk c_k. Returns k."""
    q = 0.0
    for k in range(K):
        q += row[k] * c[k]
    total = q + beta * sumc
    u = u01 * total
    if u < q:
        for k in range(K):
            if row[k] > 0:
                u -= row[k] * c[k]
                if u <= 0.0:
                    return k
        # rounding: the last topic with mass
        for k in range(K - 1, -1, -1):
            if row[k] > 0:
                return k
    u = (u - q) / beta
    for k in range(K):
        u -= c[k]
        if u <= 0.0:
            return k
    return K - 1


@njit(cache=True)
def conditional(nwk_row, nk, ndk_row, alpha, beta, vbeta):
    """The normalised collapsed conditional (reference implementation for tests):
    p_k ∝ (n_wk + β)/(n_k + Vβ) · (n_dk + α)."""
    K = len(nk)
    p = np.empty(K)
    for k in range(K):
        p[k] = (nwk_row[k] + beta) / (nk[k] + vbeta) * (ndk_row[k] + alpha)
    return p / p.sum()


@njit(cache=True)
def _build_nonzero(nwk, nzl, nzn):
    """Per word, the list of topics with n_wk > 0 (``nzl[w, :nzn[w]]``)."""
    V, K = nwk.shape
    for w in range(V):
        n = 0
        for k in range(K):
            if nwk[w, k] > 0:
                nzl[w, n] = k
                n += 1
        nzn[w] = n


@njit(cache=True)
def _gibbs_docs(docs, doc_ptr, tok_w, z, nwk, nk, ndk, alpha, beta, vbeta, seed, sweep, nzl,
                nzn):
    """One collapsed-Gibbs sweep over ``docs`` (in order), updating the given counts in place.

    SparseLDA word bucket: ``nzl[w, :nzn[w]]`` lists the topics with n_wk > 0 (rebuilt at the
    start of the sweep; a topic whose count drops to 0 stays listed until the next rebuild,
    contributing 0 mass; a topic whose count becomes 1 is appended if absent), so the word
    bucket q = Σ_k n_wk c_k costs O(topics of w), not O(K). The smoothing+document bucket
    η Σ_k c_k is a running sum; it is searched over all K topics, but is chosen rarely
    (probability η Σc / (η Σc + q))."""
    # one numba loop over documents and tokens: every step updates the shared running sums
    K = nk.shape[0]
    c = np.empty(K)
    inv = np.empty(K)
    buf = np.empty(K)
    _build_nonzero(nwk, nzl, nzn)
    for k in range(K):
        inv[k] = 1.0 / (nk[k] + vbeta)
    for di in range(len(docs)):
        d = docs[di]
        s = stream_seed(seed, sweep + 1, d)
        sumc = 0.0
        for k in range(K):
            c[k] = (ndk[d, k] + alpha) * inv[k]
            sumc += c[k]
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            w = tok_w[i]
            k0 = z[i]
            # remove token i from the counts (the "¬i" counts)
            nwk[w, k0] -= 1
            nk[k0] -= 1
            ndk[d, k0] -= 1
            inv[k0] = 1.0 / (nk[k0] + vbeta)
            old = c[k0]
            c[k0] = (ndk[d, k0] + alpha) * inv[k0]
            sumc += c[k0] - old
            # word bucket over the listed topics
            nn = nzn[w]
            q = 0.0
            for j in range(nn):
                v = nwk[w, nzl[w, j]] * c[nzl[w, j]]
                buf[j] = v
                q += v
            s, u01 = rng_uniform(s)
            u = u01 * (q + beta * sumc)
            k1 = -1
            if u < q:
                for j in range(nn):
                    u -= buf[j]
                    if u <= 0.0 and buf[j] > 0.0:
                        k1 = nzl[w, j]
                        break
                if k1 < 0:                      # rounding: the last listed topic with mass
                    for j in range(nn - 1, -1, -1):
                        if buf[j] > 0.0:
                            k1 = nzl[w, j]
                            break
            if k1 < 0:
                u = (u - q) / beta
                k1 = K - 1
                for k in range(K):
                    u -= c[k]
                    if u <= 0.0:
                        k1 = k
                        break
            z[i] = k1
            if nwk[w, k1] == 0:                 # 0 -> 1: list the topic if it is not listed
                listed = False
                for j in range(nn):
                    if nzl[w, j] == k1:
                        listed = True
                        break
                if not listed:
                    nzl[w, nn] = k1
                    nzn[w] = nn + 1
            nwk[w, k1] += 1
            nk[k1] += 1
            ndk[d, k1] += 1
            inv[k1] = 1.0 / (nk[k1] + vbeta)
            old = c[k1]
            c[k1] = (ndk[d, k1] + alpha) * inv[k1]
            sumc += c[k1] - old


@njit(cache=True)
def gibbs_sweep_serial(doc_ptr, tok_w, z, nwk, nk, ndk, alpha, beta, vbeta, seed, sweep, nzl,
                       nzn):
    """Exact sequential collapsed-Gibbs sweep over all documents."""
    docs = np.arange(len(doc_ptr) - 1)
    _gibbs_docs(docs, doc_ptr, tok_w, z, nwk, nk, ndk, alpha, beta, vbeta, seed, sweep, nzl, nzn)


@njit(cache=True, parallel=True)
def gibbs_sweep_adlda(part_ptr, part_docs, doc_ptr, tok_w, z, nwk, nk, ndk, alpha, beta, vbeta,
                      seed, sweep, loc_nwk, loc_nk, loc_nzl, loc_nzn):
    """Approximate distributed sweep (AD-LDA, Newman et al. 2009): each document partition
    samples against its own copy of (nwk, nk) taken at the start of the sweep; afterwards the
    global counts become  n + Σ_p (n_p − n), which equals the counts of the new z exactly.
    The result depends on the partitioning and the seed only (not on the number of threads)."""
    P = len(part_ptr) - 1
    V = nwk.shape[0]
    for p in prange(P):
        loc_nwk[p, :, :] = nwk
        loc_nk[p, :] = nk
        _gibbs_docs(part_docs[part_ptr[p]:part_ptr[p + 1]], doc_ptr, tok_w, z, loc_nwk[p],
                    loc_nk[p], ndk, alpha, beta, vbeta, seed, sweep, loc_nzl[p], loc_nzn[p])
    for w in prange(V):
        for k in range(nwk.shape[1]):
            acc = nwk[w, k]
            base = nwk[w, k]
            for p in range(P):
                acc += loc_nwk[p, w, k] - base
            nwk[w, k] = acc
    for k in range(nk.shape[0]):
        acc = nk[k]
        base = nk[k]
        for p in range(P):
            acc += loc_nk[p, k] - base
        nk[k] = acc


# ------------------------------------------------------------------------------------------
# online samplers: o-LDA (n_rejuv = 0) and incremental Gibbs
# ------------------------------------------------------------------------------------------
@njit(inline="always")
def _sample_token(j, w, d, z, nwk, nk, ndk, alpha, beta, vbeta, c, s):
    """Draw z_j (word w, document d) from the conditional given the counts, which do not hold
    token j, then count it. ``c`` is scratch of K; returns the generator state."""
    K = nk.shape[0]
    sumc = 0.0
    for k in range(K):
        c[k] = (ndk[d, k] + alpha) / (nk[k] + vbeta)
        sumc += c[k]
    s, u = rng_uniform(s)
    k1 = _draw_bucket(nwk[w], c, sumc, beta, u, K)
    z[j] = k1
    nwk[w, k1] += 1
    nk[k1] += 1
    ndk[d, k1] += 1
    return s


@njit(inline="always")
def _resample_token(j, tok_w, tok_d, z, nwk, nk, ndk, alpha, beta, vbeta, c, s):
    """Resample z_j from its full conditional given all other assignments (rejuvenation)."""
    w = tok_w[j]
    d = tok_d[j]
    k0 = z[j]
    nwk[w, k0] -= 1
    nk[k0] -= 1
    ndk[d, k0] -= 1
    return _sample_token(j, w, d, z, nwk, nk, ndk, alpha, beta, vbeta, c, s)


@njit(inline="always")
def pick_rejuvenation(s, n, decay_scale):
    """A position in [0, n): uniform (decay_scale <= 0) or n−1−G with G geometric of mean
    ``decay_scale`` words (wrapped into range), favouring recent words (Marthi et al. 2002)."""
    if decay_scale <= 0.0:
        return rng_below(s, n)
    s, u = rng_uniform(s)
    g = np.int64(-np.log(1.0 - u) * decay_scale)
    return s, n - 1 - (g % n)


@njit(cache=True)
def online_add(tok_w, tok_d, z, start, end, nwk, nk, ndk, alpha, beta, vbeta,
               n_rejuv, decay_scale, rng):
    """Tokens ``start..end-1`` arrive in order: each is sampled once from the conditional given
    all earlier tokens (o-LDA), then, if ``n_rejuv > 0``, ``n_rejuv`` earlier positions
    R(i) ⊂ [0, i] are resampled from their full conditionals (incremental Gibbs).
    ``rng`` is a 1-element uint64 array holding the stream state (updated)."""
    K = nk.shape[0]
    c = np.empty(K)
    s = rng[0]
    for i in range(start, end):
        s = _sample_token(i, tok_w[i], tok_d[i], z, nwk, nk, ndk, alpha, beta, vbeta, c, s)
        for _ in range(n_rejuv):
            s, j = pick_rejuvenation(s, i + 1, decay_scale)
            s = _resample_token(j, tok_w, tok_d, z, nwk, nk, ndk, alpha, beta, vbeta, c, s)
    rng[0] = s


# ------------------------------------------------------------------------------------------
# inference with the topics frozen
# ------------------------------------------------------------------------------------------
@njit(cache=True, parallel=True)
def fold_in_theta(indptr, word_ids, counts, phi, alpha, n_iter):
    """θ of each document with φ fixed: the fixed point θ_k ← α + θ_k Σ_w n_w φ_kw / Σ_j θ_j φ_jw
    (normalised; the shared evaluator's iteration), ``n_iter`` iterations. Rows sum to 1;
    an empty document gets the uniform θ."""
    n = len(indptr) - 1
    K = phi.shape[0]
    out = np.empty((n, K))
    for d in prange(n):
        th = np.full(K, 1.0 / K)
        nxt = np.empty(K)
        for _ in range(n_iter):
            for k in range(K):
                nxt[k] = 0.0
            for j in range(indptr[d], indptr[d + 1]):
                w = word_ids[j]
                norm = 0.0
                for k in range(K):
                    norm += th[k] * phi[k, w]
                if norm <= 0.0:
                    continue
                f = counts[j] / norm
                for k in range(K):
                    nxt[k] += th[k] * phi[k, w] * f
            tot = 0.0
            for k in range(K):
                nxt[k] += alpha
                tot += nxt[k]
            for k in range(K):
                th[k] = nxt[k] / tot
        out[d] = th
    return out


# ------------------------------------------------------------------------------------------
# particle filter (Canini, Shi & Griffiths 2009, Algorithm 4)
# ------------------------------------------------------------------------------------------
@njit(cache=True)
def pf_advance(tok_w, tok_d, start, end, nwk, nk, ndk, ndoc, logw, alpha, beta, vbeta, ess_thr,
               zbuf, rng):
    """Advance every particle over tokens ``start..`` until the effective sample size
    1/Σω² falls to ``ess_thr`` or ``end`` is reached. For particle p and token i (word w,
    document d)::

        ω_p ← ω_p · P(w | z^(p), w_<i) = ω_p · Σ_k (n_kw+β)/(n_k+Vβ) · (n_dk+α)/(n_d+Kα)
        z_i^(p) ~ P(z_i | z^(p), w_≤i)              (the optimal proposal)

    Per-particle counts: nwk (P,V,K), nk (P,K), ndk (P,D,K) and ndoc (D,) tokens seen per
    document (shared: every particle has seen the same tokens). Weights are kept as logs.
    New assignments go to ``zbuf[p, i - start]``. Returns the index after the last token
    processed (resampling is due if it is < end or the ESS is low)."""
    P = nwk.shape[0]
    K = nk.shape[1]
    s = rng[0]
    p_k = np.empty(K)
    w_ = np.empty(P)
    i = start
    while i < end:
        w = tok_w[i]
        d = tok_d[i]
        denom = ndoc[d] + K * alpha
        for p in range(P):
            tot = 0.0
            for k in range(K):
                v = (nwk[p, w, k] + beta) / (nk[p, k] + vbeta) * (ndk[p, d, k] + alpha)
                p_k[k] = v
                tot += v
            logw[p] += np.log(tot / denom)
            s, u = rng_uniform(s)
            u *= tot
            k1 = K - 1
            for k in range(K):
                u -= p_k[k]
                if u <= 0.0:
                    k1 = k
                    break
            zbuf[p, i - start] = k1
            nwk[p, w, k1] += 1
            nk[p, k1] += 1
            ndk[p, d, k1] += 1
        ndoc[d] += 1
        i += 1
        # normalise and check the ESS
        m = logw.max()
        tot = 0.0
        for p in range(P):
            w_[p] = np.exp(logw[p] - m)
            tot += w_[p]
        sq = 0.0
        for p in range(P):
            logw[p] = np.log(w_[p] / tot)
            sq += (w_[p] / tot) ** 2
        if 1.0 / sq <= ess_thr:
            break
    rng[0] = s
    return i


@njit(cache=True)
def residual_resample(logw, rng):
    """Residual resampling (Liu & Chen 1998): particle p gets floor(P ω_p) copies, the remaining
    R = P − Σ floor(P ω_p) are drawn multinomially from the residual weights. Returns the
    number of copies per particle (int64, sums to P)."""
    P = len(logw)
    m = logw.max()
    w = np.exp(logw - m)
    w /= w.sum()
    copies = np.zeros(P, np.int64)
    resid = np.empty(P)
    n_det = 0
    for p in range(P):
        c = np.int64(np.floor(P * w[p]))
        copies[p] = c
        n_det += c
        resid[p] = P * w[p] - c
    R = P - n_det
    s = rng[0]
    if R > 0:
        rs = resid.sum()
        for _ in range(R):
            s, u = rng_uniform(s)
            u *= rs
            pick = P - 1
            for p in range(P):
                u -= resid[p]
                if u <= 0.0:
                    pick = p
                    break
            copies[pick] += 1
    rng[0] = s
    return copies


@njit(cache=True)
def _copy_rows(src_of, a2, n):
    for q in range(len(src_of)):
        s = src_of[q]
        if s != q:
            a2[q, :n] = a2[s, :n]


def pf_copy_counts(src_of, nwk, nk, ndk, n_docs):
    """Particle slot q takes the counts of slot src_of[q] (src_of[q] == q: unchanged). Slots are
    only overwritten if dead (no copy kept), so sources are read before being overwritten.
    Only the first ``n_docs`` rows of n_dk are in use. (Flat contiguous row copies.)"""
    P = len(src_of)
    _copy_rows(src_of, nwk.reshape(P, -1), nwk.shape[1] * nwk.shape[2])
    _copy_rows(src_of, nk, nk.shape[1])
    _copy_rows(src_of, ndk.reshape(P, -1), n_docs * ndk.shape[2])


@njit(cache=True)
def pf_pick_positions(n_pos, n_rejuv, decay_scale, P, rng):
    """R(i): ``n_rejuv`` positions per particle, each uniform in [0, n_pos) (or decayed)."""
    out = np.empty((P, n_rejuv), np.int64)
    s = rng[0]
    for p in range(P):
        for r in range(n_rejuv):
            s, j = pick_rejuvenation(s, n_pos, decay_scale)
            out[p, r] = j
    rng[0] = s
    return out


@njit(cache=True)
def pf_rejuvenate(positions, zcur, tok_w, tok_d, nwk, nk, ndk, alpha, beta, vbeta, rng):
    """Resample z_j^(p) for every j in R(i) (``positions[p]``, current values ``zcur[p]`` read
    from the particle store) from its full conditional in particle p::

        P(z_j = k | z_¬j^(p), w) ∝ (n_kw^¬j + β)/(n_k^¬j + Vβ) · (n_dk^¬j + α)

    Returns the new values (P, R). A position listed twice for a particle sees its updated value."""
    P, R = positions.shape
    K = nk.shape[1]
    out = np.empty((P, R), np.int64)
    pk = np.empty(K)
    s = rng[0]
    for p in range(P):
        for r in range(R):
            pos = positions[p, r]
            k0 = zcur[p, r]
            for r2 in range(r):
                if positions[p, r2] == pos:
                    k0 = out[p, r2]
            w = tok_w[pos]
            d = tok_d[pos]
            nwk[p, w, k0] -= 1
            nk[p, k0] -= 1
            ndk[p, d, k0] -= 1
            tot = 0.0
            for k in range(K):
                v = (nwk[p, w, k] + beta) / (nk[p, k] + vbeta) * (ndk[p, d, k] + alpha)
                pk[k] = v
                tot += v
            s, u = rng_uniform(s)
            u *= tot
            k1 = K - 1
            for k in range(K):
                u -= pk[k]
                if u <= 0.0:
                    k1 = k
                    break
            nwk[p, w, k1] += 1
            nk[p, k1] += 1
            ndk[p, d, k1] += 1
            out[p, r] = k1
    rng[0] = s
    return out


@njit(cache=True)
def random_init(tok_w, tok_d, z, start, end, nwk, nk, ndk, seed):
    """z_i uniform over the K topics for tokens start..end-1 (stream (seed, 2^32, document)),
    counts updated: the usual batch-Gibbs start."""
    K = nk.shape[0]
    d_prev = -1
    s = np.uint64(0)
    for i in range(start, end):
        d = tok_d[i]
        if d != d_prev:
            s = stream_seed(seed, 4294967296, d)
            d_prev = d
        s, k = rng_below(s, K)
        z[i] = k
        nwk[tok_w[i], k] += 1
        nk[k] += 1
        ndk[d, k] += 1
