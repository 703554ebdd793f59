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

The numba kernel runs ``prange`` over chunks of documents (balanced by non-zeros, a few
chunks per thread), copies each document's rows of B into a small local tile, and computes in
``eb.dtype`` (float32 or float64). It keeps each document's final exp(E[log θ_d]) and
n_dw / phinorm_dw; a second parallel pass over the batch's words then sums the statistics in
float64, documents in a fixed order — so the result is the same bit for bit whatever the
thread count or chunking, and no per-thread U x K buffer is needed. exp(E[log θ]) and
exp(E[log β]) come from :func:`exp_digamma` (no log, at most one exp per value; in float32
from :func:`exp_digamma_f32` / :func:`exp_digamma_f32_vec`). ``numba`` compiles once and caches the
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

from lda_core import numba_config  # noqa: F401  (sets OMP_WAIT_POLICY before numba's threads start)
from numba import njit, prange  # noqa: E402
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
    """ψ(x) for x > 0 (NaN for x ≤ 0 or NaN), absolute error < 2e-13, no loop.

    For x < 6 the recurrence ψ(x) = ψ(x + 6) − Σ_{i=0}^{5} 1/(x + i) is applied once, with the
    six reciprocals summed as one fraction (one division instead of six); then the asymptotic
    series ψ(y) = ln y − 1/(2y) − Σ_n B_2n / (2n y^2n) through y^-14 at y ≥ 6."""
    if not (x > 0.0):
        return np.nan
    r = 0.0
    if x < 6.0:
        x1 = x + 1.0
        x2 = x + 2.0
        x3 = x + 3.0
        x4 = x + 4.0
        x5 = x + 5.0
        p01 = x * x1
        p23 = x2 * x3
        p45 = x4 * x5
        num = (x + x1) * p23 * p45 + (x2 + x3) * p01 * p45 + (x4 + x5) * p01 * p23
        r = -num / (p01 * p23 * p45)
        x = x + 6.0
    inv = 1.0 / x
    f = inv * inv
    t = f * (-1.0 / 12.0 + f * (1.0 / 120.0 + f * (-1.0 / 252.0 + f * (1.0 / 240.0 + f * (
        -1.0 / 132.0 + f * (691.0 / 32760.0 + f * (-1.0 / 12.0)))))))
    return r + math.log(x) - 0.5 * inv + t


@njit(cache=True)
def digamma_array(x):
    """Elementwise :func:`digamma` (float64), for tests and small arrays."""
    out = np.empty(x.size, np.float64)
    xf = x.ravel()
    for i in range(x.size):
        out[i] = digamma(np.float64(xf[i]))
    return out.reshape(x.shape)


@njit(cache=True, inline="always")
def exp_digamma(x):
    """exp(ψ(x)) for x > 0 without computing a log (0 for x ≤ 0, NaN for NaN).

    At y ≥ 6, exp(ψ(y)) = y·exp(u) with u = −1/(2y) − Σ_n B_2n/(2n y^2n), |u| < 0.086, and
    exp(u) by its Taylor polynomial of degree 9 (relative error < 1e-16): no libm call. Below 6
    the recurrence gives exp(ψ(x)) = exp(ψ(x + 6))·exp(−Σ_{i=0}^{5} 1/(x + i)): one exp.
    Relative error < 1e-13; used for exp(E[log θ]) and exp(E[log β]), where ψ itself is not
    needed (exp(ψ(a) − ψ(b)) = exp_digamma(a) / exp_digamma(b))."""
    if x != x:
        return np.nan
    if not (x > 0.0):
        return 0.0
    f = 1.0
    if x < 6.0:
        x1 = x + 1.0
        x2 = x + 2.0
        x3 = x + 3.0
        x4 = x + 4.0
        x5 = x + 5.0
        p01 = x * x1
        p23 = x2 * x3
        p45 = x4 * x5
        num = (x + x1) * p23 * p45 + (x2 + x3) * p01 * p45 + (x4 + x5) * p01 * p23
        f = math.exp(-num / (p01 * p23 * p45))
        x = x + 6.0
    inv = 1.0 / x
    q = inv * inv
    u = -0.5 * inv + q * (-1.0 / 12.0 + q * (1.0 / 120.0 + q * (-1.0 / 252.0 + q * (
        1.0 / 240.0 + q * (-1.0 / 132.0 + q * (691.0 / 32760.0 + q * (-1.0 / 12.0)))))))
    e = 1.0 + u * (1.0 + u * (1.0 / 2.0 + u * (1.0 / 6.0 + u * (1.0 / 24.0 + u * (
        1.0 / 120.0 + u * (1.0 / 720.0 + u * (1.0 / 5040.0 + u * (1.0 / 40320.0 + u * (
            1.0 / 362880.0)))))))))
    return f * x * e


@njit(cache=True, inline="always")
def exp_digamma_f32(x):
    """:func:`exp_digamma` for the float32 E-step: the one exp in single precision (``expf``,
    about twice as fast here) and shorter series; relative error < 1e-5, below what a float32
    E-step resolves (gensim's float32 E-step computes ψ and exp in float32 too)."""
    if x != x:
        return np.nan
    if not (x > 0.0):
        return 0.0
    f = 1.0
    if x < 6.0:
        x1 = x + 1.0
        x2 = x + 2.0
        x3 = x + 3.0
        x4 = x + 4.0
        x5 = x + 5.0
        p01 = x * x1
        p23 = x2 * x3
        p45 = x4 * x5
        num = (x + x1) * p23 * p45 + (x2 + x3) * p01 * p45 + (x4 + x5) * p01 * p23
        f = np.float64(math.exp(np.float32(-num / (p01 * p23 * p45))))
        x = x + 6.0
    inv = 1.0 / x
    q = inv * inv
    u = -0.5 * inv + q * (-1.0 / 12.0 + q * (1.0 / 120.0 + q * (-1.0 / 252.0 + q * (
        1.0 / 240.0))))
    e = 1.0 + u * (1.0 + u * (0.5 + u * (1.0 / 6.0 + u * (1.0 / 24.0 + u * (
        1.0 / 120.0 + u * (1.0 / 720.0))))))
    return f * x * e


@njit(cache=True, inline="always")
def exp_digamma_f32_vec(x):
    """:func:`exp_digamma_f32` without branches or libm calls, so that loops over it vectorise
    (x > 0 assumed). exp(−R) is (Taylor_8(−R/256))^256 with R capped at 100 (exp(−100) is
    below what float32 E-step values keep anyway); relative error < 1e-6."""
    x1 = x + 1.0
    x2 = x + 2.0
    x3 = x + 3.0
    x4 = x + 4.0
    x5 = x + 5.0
    p01 = x * x1
    p23 = x2 * x3
    p45 = x4 * x5
    num = (x + x1) * p23 * p45 + (x2 + x3) * p01 * p45 + (x4 + x5) * p01 * p23
    small = x < 6.0
    rr = num / (p01 * p23 * p45)
    rr = rr if small else 0.0
    rr = rr if rr < 100.0 else 100.0
    z = rr * (-1.0 / 256.0)
    f = 1.0 + z * (1.0 + z * (0.5 + z * (1.0 / 6.0 + z * (1.0 / 24.0 + z * (1.0 / 120.0 + z * (
        1.0 / 720.0 + z * (1.0 / 5040.0 + z * (1.0 / 40320.0))))))))
    f = f * f
    f = f * f
    f = f * f
    f = f * f
    f = f * f
    f = f * f
    f = f * f
    f = f * f
    y = x + 6.0 if small else x
    inv = 1.0 / y
    q = inv * inv
    u = -0.5 * inv + q * (-1.0 / 12.0 + q * (1.0 / 120.0 + q * (-1.0 / 252.0 + q * (
        1.0 / 240.0))))
    e = 1.0 + u * (1.0 + u * (0.5 + u * (1.0 / 6.0 + u * (1.0 / 24.0 + u * (
        1.0 / 120.0 + u * (1.0 / 720.0))))))
    return f * y * e


@njit(cache=True, inline="always")
def _exp_digamma_for(arr, x):
    """exp(ψ(x)) at the precision of ``arr``'s dtype."""
    if arr.itemsize == 4:
        return exp_digamma_f32(x)
    return exp_digamma(x)


@njit(cache=True, inline="always")
def _exp_digamma_rows_for(arr, x):
    """As :func:`_exp_digamma_for`, for exp(E[log β]): in float32 the branch-free version
    (measured ~30% faster there; in the per-document loop the libm ``expf`` one was faster)."""
    if arr.itemsize == 4:
        return exp_digamma_f32_vec(x)
    return exp_digamma(x)


@njit(cache=True)
def exp_digamma_array(x, single=0):
    """Elementwise :func:`exp_digamma` (``single`` 1: :func:`exp_digamma_f32`, 2:
    :func:`exp_digamma_f32_vec`), for tests."""
    out = np.empty(x.size, np.float64)
    xf = x.ravel()
    for i in range(x.size):
        v = np.float64(xf[i])
        if single == 1:
            out[i] = exp_digamma_f32(v)
        elif single == 2:
            out[i] = exp_digamma_f32_vec(v)
        else:
            out[i] = exp_digamma(v)
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
@njit(cache=True, inline="always")
def _tiny(arr):
    """Values below this are stored as 0 in ``arr`` (1e-30 for float32, 1e-300 for float64):
    subnormal numbers are read as 0 on a thread with the DAZ/FTZ flags set and not on another,
    which made results depend on the thread that handled a document or word. Such values are
    far below the ε that every phinorm includes, so flushing them changes nothing else."""
    return 1e-30 if arr.itemsize == 4 else 1e-300


@njit(fastmath=True, parallel=True, cache=True)
def _exp_elog_beta_rows(ntilde, rows, a, pi, inv_exp_psi_colsum, out):
    K = ntilde.shape[1]
    tiny = _tiny(out)
    for i in prange(rows.shape[0]):
        w = rows[i]
        for k in range(K):
            v = _exp_digamma_rows_for(out, a + pi * ntilde[w, k]) * inv_exp_psi_colsum[k]
            out[i, k] = v if v >= tiny else 0.0


def exp_elog_beta_rows(ntilde: np.ndarray, rows: np.ndarray, a: float, pi: float,
                       colsum: np.ndarray, dtype="float32") -> np.ndarray:
    """B[i, k] = exp(ψ(λ_{rows[i],k}) − ψ(Σ_v λ_vk)) with λ = a + π·Ñ (word-major), U x K."""
    inv = np.exp(-psi(np.asarray(colsum, np.float64)))
    out = np.empty((len(rows), ntilde.shape[1]), dtype=dtype)
    _exp_elog_beta_rows(ntilde, np.ascontiguousarray(rows, dtype=np.int64), float(a), float(pi),
                        inv, out)
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
def _exp_expect(g, et):
    """et = exp(ψ(g) − ψ(Σ g)) = exp_digamma(g) / exp_digamma(Σ g) (in et's dtype); values
    below ``_tiny(et)`` are stored as 0 (see :func:`_tiny`)."""
    tiny = _tiny(et)
    s = 0.0
    for k in range(g.shape[0]):
        s += g[k]
    inv = 1.0 / _exp_digamma_for(et, s)
    for k in range(g.shape[0]):
        v = _exp_digamma_for(et, np.float64(g[k])) * inv
        et[k] = v if v >= tiny else 0.0


@njit(cache=True, inline="always")
def _phinorm(tile, n, et, eps, out):
    K = et.shape[0]
    for j in range(n):
        row = tile[j]
        s = row[0] * et[0]
        for k in range(1, K):
            s += row[k] * et[k]
        out[j] = s + eps


@njit(fastmath=True, cache=True)
def _doc_fixed_point(tile, n, cts, alpha, g, et, last, acc, phin, ratio, max_iter, tol, eps):
    """γ fixed point of one document, gensim's loop: γ from the current phinorm, then t and
    phinorm of the new γ, stop on the mean absolute change of γ. A separate function so that
    LLVM vectorises the loops over K (it does not inside the prange body). (Fusing the phinorm
    and γ passes into one pass over the rows measured 1.2-1.5x slower in float32 here: each
    row's axpy then waits for its dot product.)"""
    K = g.shape[0]
    one = tile[0, 0] * 0 + 1
    _exp_expect(g, et)
    _phinorm(tile, n, et, eps, phin)
    it = 0
    conv = False
    while it < max_iter:
        it += 1
        for k in range(K):
            last[k] = g[k]
            acc[k] = 0
        for j in range(n):
            ratio[j] = cts[j] * one / phin[j]
        for j in range(n):
            r = ratio[j]
            row = tile[j]
            for k in range(K):
                acc[k] += r * row[k]
        for k in range(K):
            g[k] = alpha[k] + et[k] * acc[k]
        _exp_expect(g, et)
        _phinorm(tile, n, et, eps, phin)
        mc = 0.0
        for k in range(K):
            mc += abs(np.float64(g[k]) - np.float64(last[k]))
        if mc / K < tol:
            conv = True
            break
    return it, conv


@njit(fastmath=True, parallel=True, cache=True)
def _estep_kernel(indptr, lids, cts, eb, alpha, gamma, chunks, max_iter, tol, eps,
                  et_out, p_out, iters, converged):
    """Per document d (chunks of documents in parallel): the fixed point for γ_d, then
    et_out[d] = exp(E[log θ_d]) and p_out[j] = phinorm_dw for its non-zeros. The statistics
    are summed word by word afterwards (:func:`_word_sstats`) and the bound is computed by
    :func:`_doc_scores`, so nothing depends on the chunking or the thread count."""
    K = eb.shape[1]
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
        for d in range(d0, d1):
            s = indptr[d]
            n = indptr[d + 1] - s
            for j in range(n):
                w = lids[s + j]
                for k in range(K):
                    tile[j, k] = eb[w, k]
            g = gamma[d]
            it, conv = _doc_fixed_point(tile, n, cts[s:s + n], alpha, g, et, last, acc, phin,
                                        ratio, max_iter, tol, eps)
            iters[d] = it
            converged[d] = conv
            for j in range(n):
                p_out[s + j] = phin[j]
            for k in range(K):
                et_out[d, k] = et[k]


@njit(cache=True)
def _doc_scores(indptr, cts, p, gamma, alpha, alpha_const, elogt, scores):
    """elogt[d] = E[log θ_d] and ELBO_d = Σ_w n_dw log phinorm_dw + Σ_k (α_k − γ_dk) E[log θ_dk]
    + log Γ(γ_dk) − log Γ(α_k) + log Γ(Σα) − log Γ(Σγ_d). Serial on purpose: computed inside
    the prange the last bits depended on the thread count (libm calls on worker threads)."""
    n, K = gamma.shape
    for d in range(n):
        ll = 0.0
        for j in range(indptr[d], indptr[d + 1]):
            ll += cts[j] * math.log(p[j])
        gs = 0.0
        for k in range(K):
            gs += np.float64(gamma[d, k])
        psum = digamma(gs)
        for k in range(K):
            gk = np.float64(gamma[d, k])
            e = digamma(gk) - psum
            elogt[d, k] = e
            ll += (alpha[k] - gk) * e + math.lgamma(gk)
        scores[d] = ll + alpha_const - math.lgamma(gs)


@njit(parallel=True, cache=True)
def _word_sstats(wptr, wdoc, wpos, cts, p, et, eb, out):
    """out[u, k] = eb[u, k] · Σ_{d ∋ u} (n_du / phinorm_du) · et[d, k], documents in increasing
    order (float64; the same sums whatever the number of threads). No ``fastmath`` here: with
    it the kernel loaded from numba's cache rounded differently from the freshly compiled one
    (contraction/reciprocal choices), so a resumed process drifted a few ULPs from an
    uninterrupted one (tests/test_kernel_cache.py); plain IEEE costs ~8% of this small part."""
    K = out.shape[1]
    for u in prange(out.shape[0]):
        acc = np.zeros(K, np.float64)
        for e in range(wptr[u], wptr[u + 1]):
            d = wdoc[e]
            rv = cts[wpos[e]] / p[wpos[e]]
            for k in range(K):
                acc[k] += rv * et[d, k]
        for k in range(K):
            out[u, k] = acc[k] * eb[u, k]


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


CHUNKS_PER_THREAD = 4


def estep(indptr: np.ndarray, lids: np.ndarray, cts: np.ndarray, eb: np.ndarray,
          alpha: np.ndarray, gamma0: np.ndarray, max_iter: int = 100, tol: float = 1e-3,
          n_chunks: Optional[int] = None) -> EStepResult:
    """The numba E-step (see module docstring). ``lids`` index the rows of ``eb`` (U x K, its
    dtype sets the compute precision); ``gamma0`` (n x K) is the initial γ (not modified).
    The result does not depend on ``n_chunks`` or the thread count (bit for bit)."""
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
        n_chunks = CHUNKS_PER_THREAD * numba.get_num_threads()
    chunks = balanced_chunks(indptr, n_chunks)
    et = np.zeros((n, K), np.float64)
    elogt = np.zeros((n, K), np.float64)
    p = np.ones(len(lids), np.float64)
    iters = np.zeros(n, np.int32)
    conv = np.zeros(n, np.bool_)
    scores = np.zeros(n, np.float64)
    alpha_const = float(gammaln(alpha.sum()) - gammaln(alpha).sum())
    eps = dt.type(np.finfo(dt).eps)
    if n:
        _estep_kernel(indptr, lids, cts, eb, alpha.astype(dt), gamma, chunks, int(max_iter),
                      float(tol), eps, et, p, iters, conv)
        _doc_scores(indptr, cts, p, gamma, alpha, alpha_const, elogt, scores)
    # word-major index of the non-zeros (documents in increasing order within a word)
    wpos = np.argsort(lids, kind="stable")
    wdoc = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))[wpos]
    wptr = np.zeros(U + 1, np.int64)
    np.cumsum(np.bincount(lids, minlength=U), out=wptr[1:])
    sstats = np.empty((U, K), np.float64)
    if U:
        _word_sstats(wptr, wdoc, wpos, cts, p, et, eb, sstats)
    return EStepResult(gamma, sstats, iters, conv, scores, elogt.sum(axis=0))


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
