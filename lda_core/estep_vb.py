"""The variational E-step of LDA (Hoffman, Blei & Bach 2010): a numba kernel and a numpy reference.

For a document with unique words w (counts n_w), with λ frozen and B_wk = exp(E[log β_kw])
(``eb``, word-major, only the batch's words: U x K), iterate from an initial γ:

    E[log θ_k] = ψ(γ_k) − ψ(Σ_j γ_j),       t_k = exp(E[log θ_k])
    phinorm_w  = Σ_k t_k B_wk + ε             (ε = machine epsilon of the dtype, as gensim)
    γ_k       ← α_k + t_k Σ_w (n_w / phinorm_w) B_wk
    (recompute t and phinorm)  stop when mean_k |γ_k − γ_k^old| < tol, or after max_iter.

This is exactly gensim's ``LdaModel.inference`` loop (same order of updates and stopping rule).
Sufficient statistics without materialising φ:
    sstats_wk = B_wk · Σ_d t_dk n_dw / phinorm_dw                    (float64 sums)
and the per-document bound (paper eq. 16's numerator, φ at its optimum for the final γ):
    ELBO_d = Σ_w n_w log phinorm_w + Σ_k (α_k − γ_k) E[log θ_k] + log Γ(γ_k) − log Γ(α_k)
             + log Γ(Σ α) − log Γ(Σ γ).

The numba kernel runs ``prange`` over chunks of documents (balanced by non-zeros, one chunk
per thread, one float64 statistics buffer per chunk — so results are deterministic for a
given thread count), copies each document's rows of B into a small local tile, and computes
in ``eb.dtype`` (float32 or float64) with float64 sums. ``numba`` compiles once and caches the
machine code (``cache=True``) in ``__pycache__`` or ``$NUMBA_CACHE_DIR`` (see
``lda_core.numba_config``).

γ initialisation: gensim draws Gamma(100, 1/100); :func:`init_gamma` does the same from a
counter-based generator (splitmix64 + Marsaglia–Tsang) keyed by a 64-bit key per document
(:func:`doc_keys` hashes (seed, step, doc id)), so the draws do not depend on how documents
are split across workers.
"""
from __future__ import annotations

import hashlib
import math
from typing import NamedTuple, Optional, Sequence

import numpy as np
from numba import njit, prange
from scipy.special import gammaln, psi

_U64_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_U64_M1 = np.uint64(0xBF58476D1CE4E5B9)
_U64_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
GAMMA_INIT_SHAPE = 100.0           # gensim: random_state.gamma(100., 1. / 100., ...)
GAMMA_INIT_SCALE = 1.0 / 100.0


# ---------------------------------------------------------------------------------------------
# scalar helpers
# ---------------------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def digamma(x):
    """ψ(x) for x > 0: recurrence ψ(x) = ψ(x+1) − 1/x up to x ≥ 10, then the asymptotic series
    ψ(x) = ln x − 1/(2x) − Σ_n B_2n / (2n x^2n) through x^-14 (absolute error < 1e-14).
    Returns NaN for x ≤ 0 or NaN (the loop runs at most 11 times)."""
    if not (x > 0.0):
        return np.nan
    r = 0.0
    while x < 10.0:
        r -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    t = f * (-1.0 / 12.0 + f * (1.0 / 120.0 + f * (-1.0 / 252.0 + f * (1.0 / 240.0 + f * (
        -1.0 / 132.0 + f * (691.0 / 32760.0 + f * (-1.0 / 12.0)))))))
    return r + math.log(x) - 0.5 / x + t


@njit(cache=True)
def digamma_array(x):
    """Elementwise :func:`digamma` (float64), for tests and small arrays."""
    out = np.empty(x.size, np.float64)
    xf = x.ravel()
    for i in range(x.size):
        out[i] = digamma(np.float64(xf[i]))
    return out.reshape(x.shape)


@njit(cache=True, inline="always")
def _splitmix(state):
    state = state + _U64_GOLDEN
    z = state
    z = (z ^ (z >> _S30)) * _U64_M1
    z = (z ^ (z >> _S27)) * _U64_M2
    z = z ^ (z >> _S31)
    return state, z


@njit(cache=True, inline="always")
def _uniform(z):
    """A uint64 -> uniform double in (0, 1)."""
    return (np.float64(z >> _S11) + 0.5) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def _gamma_draws(key, shape, scale, out):
    """``out[:] ~ Gamma(shape, scale)`` (shape ≥ 1) from the counter-based stream ``key``
    (Marsaglia & Tsang 2000 with Box–Muller normals; each draw's rejection loop is capped)."""
    d = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    state = key
    for i in range(out.shape[0]):
        val = shape * scale                      # fallback if the (capped) loop never accepts
        for _ in range(64):
            state, z1 = _splitmix(state)
            state, z2 = _splitmix(state)
            state, z3 = _splitmix(state)
            u1 = _uniform(z1)
            u2 = _uniform(z2)
            x = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
            v = 1.0 + c * x
            if v <= 0.0:
                continue
            v = v * v * v
            u = _uniform(z3)
            if math.log(u) < 0.5 * x * x + d - d * v + d * math.log(v):
                val = d * v * scale
                break
        out[i] = val


@njit(cache=True)
def _init_gamma_kernel(keys, out):
    tmp = np.empty(out.shape[1], np.float64)
    for d in range(out.shape[0]):
        _gamma_draws(keys[d], GAMMA_INIT_SHAPE, GAMMA_INIT_SCALE, tmp)
        for k in range(out.shape[1]):
            out[d, k] = tmp[k]


def doc_keys(doc_ids: Sequence[str], seed: int, step: int, salt: str = "gamma") -> np.ndarray:
    """Stable 64-bit keys, one per document: blake2b(salt, seed, step, doc id)."""
    pre = ("%s:%d:%d:" % (salt, int(seed), int(step))).encode("utf-8")
    keys = np.empty(len(doc_ids), np.uint64)
    for i, d in enumerate(doc_ids):
        keys[i] = int.from_bytes(hashlib.blake2b(pre + str(d).encode("utf-8"),
                                                 digest_size=8).digest(), "little")
    return keys


def init_gamma(keys: np.ndarray, n_topics: int, dtype="float64") -> np.ndarray:
    """Initial γ (n x K) ~ Gamma(100, 1/100), row d drawn from the stream ``keys[d]``."""
    out = np.empty((len(keys), int(n_topics)), np.float64)
    _init_gamma_kernel(np.ascontiguousarray(keys, dtype=np.uint64), out)
    return out.astype(dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# exp(E[log beta]) for a set of word rows of the lazily scaled lambda = a + pi * Ntilde
# ---------------------------------------------------------------------------------------------
@njit(fastmath=True, parallel=True, cache=True)
def _exp_elog_beta_rows(ntilde, rows, a, pi, psi_colsum, out):
    K = ntilde.shape[1]
    for i in prange(rows.shape[0]):
        w = rows[i]
        for k in range(K):
            out[i, k] = math.exp(digamma(a + pi * ntilde[w, k]) - psi_colsum[k])


def exp_elog_beta_rows(ntilde: np.ndarray, rows: np.ndarray, a: float, pi: float,
                       colsum: np.ndarray, dtype="float32") -> np.ndarray:
    """B[i, k] = exp(ψ(λ_{rows[i],k}) − ψ(Σ_v λ_vk)) with λ = a + π·Ñ (word-major), U x K."""
    psi_colsum = psi(np.asarray(colsum, np.float64))
    out = np.empty((len(rows), ntilde.shape[1]), dtype=dtype)
    _exp_elog_beta_rows(ntilde, np.ascontiguousarray(rows, dtype=np.int64), float(a), float(pi),
                        psi_colsum, out)
    return out


# ---------------------------------------------------------------------------------------------
# the E-step
# ---------------------------------------------------------------------------------------------
class EStepResult(NamedTuple):
    gamma: np.ndarray          # n x K (eb.dtype), final γ
    sstats: np.ndarray         # U x K float64, word-major (rows = the batch's unique words)
    iterations: np.ndarray     # n int32, iterations run per document
    converged: np.ndarray      # n bool
    scores: np.ndarray         # n float64, ELBO_d
    sum_elogtheta: np.ndarray  # K float64, Σ_d E[log θ_d]


@njit(cache=True, inline="always")
def _expect(g, elogt, et):
    """elogt = ψ(g) − ψ(Σ g) (float64), et = exp(elogt) (in et's dtype)."""
    s = 0.0
    for k in range(g.shape[0]):
        s += g[k]
    ps = digamma(s)
    for k in range(g.shape[0]):
        e = digamma(np.float64(g[k])) - ps
        elogt[k] = e
        et[k] = math.exp(e)


@njit(cache=True, inline="always")
def _phinorm(tile, n, et, eps, out):
    K = et.shape[0]
    for j in range(n):
        s = tile[j, 0] * et[0]
        for k in range(1, K):
            s += tile[j, k] * et[k]
        out[j] = s + eps


@njit(fastmath=True, parallel=True, cache=True)
def _estep_kernel(indptr, lids, cts, eb, alpha, gamma, chunks, max_iter, tol, eps, alpha_const,
                  sbuf, ebuf, iters, converged, scores):
    K = eb.shape[1]
    one = eb[0, 0] * 0 + 1          # 1 in eb's dtype
    for c in prange(chunks.shape[0] - 1):
        d0 = chunks[c]
        d1 = chunks[c + 1]
        maxlen = 1
        for d in range(d0, d1):
            maxlen = max(maxlen, indptr[d + 1] - indptr[d])
        tile = np.empty((maxlen, K), eb.dtype)
        phin = np.empty(maxlen, eb.dtype)
        ratio = np.empty(maxlen, eb.dtype)
        et = np.empty(K, eb.dtype)
        last = np.empty(K, eb.dtype)
        acc = np.empty(K, eb.dtype)
        elogt = np.empty(K, np.float64)
        for d in range(d0, d1):
            s = indptr[d]
            n = indptr[d + 1] - s
            for j in range(n):
                w = lids[s + j]
                for k in range(K):
                    tile[j, k] = eb[w, k]
            g = gamma[d]
            _expect(g, elogt, et)
            _phinorm(tile, n, et, eps, phin)
            it = 0
            conv = False
            while it < max_iter:
                it += 1
                for k in range(K):
                    last[k] = g[k]
                    acc[k] = 0
                for j in range(n):
                    ratio[j] = cts[s + j] * one / phin[j]
                for j in range(n):
                    r = ratio[j]
                    for k in range(K):
                        acc[k] += r * tile[j, k]
                for k in range(K):
                    g[k] = alpha[k] + et[k] * acc[k]
                _expect(g, elogt, et)
                _phinorm(tile, n, et, eps, phin)
                mc = 0.0
                for k in range(K):
                    mc += abs(np.float64(g[k]) - np.float64(last[k]))
                if mc / K < tol:
                    conv = True
                    break
            iters[d] = it
            converged[d] = conv
            # statistics (float64): sbuf[w, k] += t_k n_w / phinorm_w ; score terms
            ll = 0.0
            for j in range(n):
                w = lids[s + j]
                r = np.float64(cts[s + j]) / np.float64(phin[j])
                ll += cts[s + j] * math.log(np.float64(phin[j]))
                for k in range(K):
                    sbuf[c, w, k] += r * et[k]
            gs = 0.0
            for k in range(K):
                gk = np.float64(g[k])
                gs += gk
                ebuf[c, k] += elogt[k]
                ll += (alpha[k] - gk) * elogt[k] + math.lgamma(gk)
            scores[d] = ll + alpha_const - math.lgamma(gs)


@njit(fastmath=True, parallel=True, cache=True)
def _reduce_sstats(sbuf, eb, out):
    for w in prange(out.shape[0]):
        for k in range(out.shape[1]):
            s = 0.0
            for c in range(sbuf.shape[0]):
                s += sbuf[c, w, k]
            out[w, k] = s * eb[w, k]


def balanced_chunks(indptr: np.ndarray, n_chunks: int) -> np.ndarray:
    """Document boundaries of ``n_chunks`` contiguous chunks with about equal non-zeros."""
    n = len(indptr) - 1
    n_chunks = max(1, min(int(n_chunks), n))
    if n == 0:
        return np.zeros(1, np.int64)
    targets = indptr[-1] * np.arange(1, n_chunks) / n_chunks
    cuts = np.searchsorted(indptr[1:], targets, side="left") + 1
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 1, n - 1) if n > 1 else [], [n]]))
    return bounds.astype(np.int64)


def _check_inputs(indptr, lids, cts, eb, alpha, gamma0):
    n = len(indptr) - 1
    if gamma0.shape != (n, eb.shape[1]):
        raise ValueError("gamma0 has shape %s, expected (%d, %d)" % (gamma0.shape, n, eb.shape[1]))
    if len(alpha) != eb.shape[1]:
        raise ValueError("alpha has %d entries for K=%d" % (len(alpha), eb.shape[1]))
    if len(lids) and (lids.min() < 0 or lids.max() >= eb.shape[0]):
        raise ValueError("local word ids outside [0, %d)" % eb.shape[0])


def estep(indptr: np.ndarray, lids: np.ndarray, cts: np.ndarray, eb: np.ndarray,
          alpha: np.ndarray, gamma0: np.ndarray, max_iter: int = 100, tol: float = 1e-3,
          n_chunks: Optional[int] = None) -> EStepResult:
    """The numba E-step (see module docstring). ``lids`` index the rows of ``eb`` (U x K, its
    dtype sets the compute precision); ``gamma0`` (n x K) is the initial γ (not modified)."""
    import numba
    eb = np.ascontiguousarray(eb)
    dt = eb.dtype
    indptr = np.ascontiguousarray(indptr, np.int64)
    lids = np.ascontiguousarray(lids, np.int64)
    cts = np.ascontiguousarray(cts, np.int32)
    alpha = np.ascontiguousarray(alpha, np.float64)
    gamma = np.array(gamma0, dtype=dt, order="C", copy=True)
    _check_inputs(indptr, lids, cts, eb, alpha, gamma)
    n, K, U = len(indptr) - 1, eb.shape[1], eb.shape[0]
    if n_chunks is None:
        n_chunks = numba.get_num_threads()
    chunks = balanced_chunks(indptr, n_chunks)
    nc = max(1, len(chunks) - 1)
    sbuf = np.zeros((nc, U, K), np.float64)
    ebuf = np.zeros((nc, K), np.float64)
    iters = np.zeros(n, np.int32)
    conv = np.zeros(n, np.bool_)
    scores = np.zeros(n, np.float64)
    alpha_const = float(gammaln(alpha.sum()) - gammaln(alpha).sum())
    eps = dt.type(np.finfo(dt).eps)
    if n:
        _estep_kernel(indptr, lids, cts, eb, alpha.astype(dt), gamma, chunks, int(max_iter),
                      float(tol), eps, alpha_const, sbuf, ebuf, iters, conv, scores)
    sstats = np.empty((U, K), np.float64)
    if U:
        _reduce_sstats(sbuf, eb, sstats)
    return EStepResult(gamma, sstats, iters, conv, scores, ebuf.sum(axis=0))


def estep_reference(indptr: np.ndarray, lids: np.ndarray, cts: np.ndarray, eb: np.ndarray,
                    alpha: np.ndarray, gamma0: np.ndarray, max_iter: int = 100,
                    tol: float = 1e-3) -> EStepResult:
    """Plain numpy E-step, document by document (the reference the kernel is tested against)."""
    eb = np.asarray(eb)
    dt = eb.dtype
    alpha64 = np.asarray(alpha, np.float64)
    alpha_d = alpha64.astype(dt)
    gamma = np.array(gamma0, dtype=dt, copy=True)
    _check_inputs(np.asarray(indptr), np.asarray(lids), cts, eb, alpha64, gamma)
    n, K, U = len(indptr) - 1, eb.shape[1], eb.shape[0]
    eps = np.finfo(dt).eps
    acc = np.zeros((U, K), np.float64)
    iters = np.zeros(n, np.int32)
    conv = np.zeros(n, np.bool_)
    scores = np.zeros(n, np.float64)
    sum_elog = np.zeros(K, np.float64)

    def expect(g):
        g64 = g.astype(np.float64)
        e = psi(g64) - psi(g64.sum())
        return e, np.exp(e).astype(dt)

    for d in range(n):
        s, e_ = indptr[d], indptr[d + 1]
        ids = lids[s:e_]
        c = np.asarray(cts[s:e_]).astype(dt)
        B = eb[ids]                                  # n_d x K
        g = gamma[d].copy()
        elogt, et = expect(g)
        phin = B @ et + eps
        it = 0
        while it < max_iter:
            it += 1
            last = g
            g = alpha_d + et * ((c / phin) @ B)
            elogt, et = expect(g)
            phin = B @ et + eps
            if np.mean(np.abs(g.astype(np.float64) - last.astype(np.float64))) < tol:
                conv[d] = True
                break
        iters[d] = it
        gamma[d] = g
        c64 = c.astype(np.float64)
        p64 = phin.astype(np.float64)
        acc[ids] += np.outer(c64 / p64, et.astype(np.float64))
        g64 = g.astype(np.float64)
        sum_elog += elogt
        scores[d] = (np.sum(c64 * np.log(p64)) + np.sum((alpha64 - g64) * elogt)
                     + np.sum(gammaln(g64) - gammaln(alpha64))
                     + gammaln(alpha64.sum()) - gammaln(g64.sum()))
    return EStepResult(gamma, acc * eb.astype(np.float64), iters, conv, scores, sum_elog)
