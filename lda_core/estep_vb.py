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
import time
from typing import NamedTuple, Optional, Sequence

import numpy as np

from lda_core import numba_config  # noqa: F401  (sets OMP_WAIT_POLICY before numba's threads start)
from numba import njit, prange, types  # noqa: E402
from numba.extending import intrinsic  # noqa: E402
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
@njit(cache=True, inline="always", error_model="numpy")
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


@njit(cache=True, error_model="numpy")
def digamma_array(x):
    """Elementwise :func:`digamma` (float64), for tests and small arrays."""
    out = np.empty(x.size, np.float64)
    xf = x.ravel()
    for i in range(x.size):
        out[i] = digamma(np.float64(xf[i]))
    return out.reshape(x.shape)


@njit(cache=True, inline="always", error_model="numpy")
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


@njit(cache=True, inline="always", error_model="numpy")
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


# float32 constants of exp_digamma_f32_vec (a float64 literal would promote the arithmetic)
_F32 = np.float32
_F_ONE, _F_HALF, _F_SIX, _F_ZERO = _F32(1.0), _F32(0.5), _F32(6.0), _F32(0.0)
_F_TWO, _F_THREE, _F_FOUR, _F_FIVE = _F32(2.0), _F32(3.0), _F32(4.0), _F32(5.0)
_F_LOG2E = _F32(1.4426950408889634)
_F_TMAX = _F32(125.0)           # 2^-125: still a normal float32, far below _tiny (1e-18)
_F_TFLUSH = _F32(100.0)         # exp(-R) below 2^-100 ~ 8e-31 is returned as exactly 0: the
#                                 callers flush such values anyway, and multiplying them by
#                                 a normaliser first would make subnormal numbers (slow)
_F_B1, _F_B2, _F_B3, _F_B4 = _F32(-1.0 / 12.0), _F32(1.0 / 120.0), _F32(-1.0 / 252.0), \
    _F32(1.0 / 240.0)
_F_E2, _F_E3, _F_E4, _F_E5 = _F32(1.0 / 2.0), _F32(1.0 / 6.0), _F32(1.0 / 24.0), \
    _F32(1.0 / 120.0)
# 2^-f = exp(-f ln 2) on [-1/2, 1/2]: Taylor polynomial of degree 7 (relative error < 2e-9)
_F_T0, _F_T1, _F_T2, _F_T3, _F_T4, _F_T5, _F_T6, _F_T7 = (
    _F32((-math.log(2.0)) ** i / math.factorial(i)) for i in range(8))
_I_127, _I_23 = np.int32(127), np.int32(23)


@intrinsic
def _f32_from_bits(typingctx, bits):
    """The float32 whose IEEE bits are the int32 ``bits`` (an LLVM bitcast: vectorises)."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return sig, codegen


@njit(cache=True, inline="always", error_model="numpy")
def exp_digamma_f32_vec(x):
    """exp(ψ(x)) for the float32 E-step, in float32 arithmetic without branches or libm calls,
    so that a loop over it vectorises (8 lanes with AVX2; measured ~2 ns per value against
    ~15 ns for :func:`exp_digamma_f32`). x > 0 assumed (float32).

    As :func:`exp_digamma`: below 6 the recurrence exp(ψ(x)) = exp(ψ(x+6))·exp(−R) with
    R = Σ_{i<6} 1/(x+i) (one division); exp(−R) = 2^−t, t = R·log2(e) capped at 125, as
    2^−(t−n) by a polynomial times 2^−n built from its exponent bits (n = round(t));
    exp(ψ(y)) = y·exp(u) at y ≥ 6 by series. Relative error < 3.5e-7·(1 + |ψ(x)|) -- that of
    ψ rounded to float32, as in gensim's float32 E-step -- wherever the value is above 1e-28;
    values below ~5e-30 are returned as exactly 0 (the E-step stores values below 1e-18 as 0
    anyway, see :func:`_tiny`; a subnormal intermediate would cost ~100 cycles)."""
    x1 = x + _F_ONE
    x2 = x + _F_TWO
    x3 = x + _F_THREE
    x4 = x + _F_FOUR
    x5 = x + _F_FIVE
    p01 = x * x1
    p23 = x2 * x3
    p45 = x4 * x5
    num = (x + x1) * p23 * p45 + (x2 + x3) * p01 * p45 + (x4 + x5) * p01 * p23
    small = x < _F_SIX
    t = num / (p01 * p23 * p45) * _F_LOG2E
    t = t if small else _F_ZERO
    t = t if t < _F_TMAX else _F_TMAX
    n = np.int32(t + _F_HALF)                   # round(t), in [0, 125]
    f = t - _F32(n)                             # in [-1/2, 1/2]
    s = _F_T0 + f * (_F_T1 + f * (_F_T2 + f * (_F_T3 + f * (_F_T4 + f * (_F_T5 + f * (
        _F_T6 + f * _F_T7))))))
    s = s * _f32_from_bits((_I_127 - n) << _I_23)     # 2^-n, exactly
    s = s if t < _F_TFLUSH else _F_ZERO
    y = x + _F_SIX if small else x
    inv = _F_ONE / y
    q = inv * inv
    u = -_F_HALF * inv + q * (_F_B1 + q * (_F_B2 + q * (_F_B3 + q * _F_B4)))
    e = _F_ONE + u * (_F_ONE + u * (_F_E2 + u * (_F_E3 + u * (_F_E4 + u * _F_E5))))
    return s * y * e


@njit(cache=True, inline="always", error_model="numpy")
def _exp_digamma_for(arr, x):
    """exp(ψ(x)) at the precision of ``arr``'s dtype."""
    if arr.itemsize == 4:
        return exp_digamma_f32(x)
    return exp_digamma(x)


@njit(cache=True, inline="always", error_model="numpy")
def _exp_digamma_rows_for(arr, x):
    """As :func:`_exp_digamma_for` in loops that should vectorise: in float32 the branch-free
    float32 version (:func:`exp_digamma_f32_vec`)."""
    if arr.itemsize == 4:
        return exp_digamma_f32_vec(np.float32(x))
    return exp_digamma(x)


@njit(cache=True, error_model="numpy")
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
            out[i] = exp_digamma_f32_vec(np.float32(v))
        else:
            out[i] = exp_digamma(v)
    return out.reshape(x.shape)


@njit(cache=True, inline="always", error_model="numpy")
def _splitmix(state):
    state = state + _U64_GOLDEN
    z = state
    z = (z ^ (z >> _S30)) * _U64_M1
    z = (z ^ (z >> _S27)) * _U64_M2
    z = z ^ (z >> _S31)
    return state, z


@njit(cache=True, inline="always", error_model="numpy")
def _uniform(z):
    """A uint64 -> uniform double in (0, 1)."""
    return (np.float64(z >> _S11) + 0.5) * (1.0 / 9007199254740992.0)


@njit(cache=True, error_model="numpy")
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


@njit(parallel=True, cache=True, error_model="numpy")
def _init_gamma_kernel(keys, out):
    """Row d from the stream keys[d] alone: documents in parallel, same draws."""
    for d in prange(out.shape[0]):
        _gamma_draws(keys[d], GAMMA_INIT_SHAPE, GAMMA_INIT_SCALE, out[d])


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
@njit(cache=True, inline="always", error_model="numpy")
def _tiny(arr):
    """Values below this are stored as 0 in ``arr`` (1e-18 for float32, 1e-150 for float64):
    (1) subnormal numbers are read as 0 on a thread with the DAZ/FTZ flags set and not on
    another, which made results depend on the thread that handled a document or word; (2) the
    E-step multiplies two stored values (exp(E[log θ]) x exp(E[log β])): with both above the
    square root of the smallest normal number the product is never subnormal, and subnormal
    arithmetic costs ~100 cycles an operation here -- on a well-trained model (most λ_kw near
    η, so most exp(E[log β_kw]) tiny) that had made the E-step ~20% and exp(E[log β]) ~2x
    slower per document. Such values are far below the ε (1.2e-7 in float32) that every
    phinorm includes: flushing them changes γ and the statistics by less than float32's own
    rounding."""
    return 1e-18 if arr.itemsize == 4 else 1e-150


@njit(cache=True, error_model="numpy")
def _exp_elog_beta_block(ntilde, rows, i0, i1, a, pi, inv_exp_psi_colsum, out):
    """Rows i0..i1-1: out[i, k] = exp(ψ(a + π ñ[rows[i], k])) / exp(ψ(Σ_v λ_vk)). A function of
    its own, called per block of rows from the prange, so that LLVM vectorises the loops over
    k (it does not inside a prange body)."""
    K = ntilde.shape[1]
    tiny = out.dtype.type(_tiny(out))
    zero = out.dtype.type(0.0)
    for i in range(i0, i1):
        w = rows[i]
        orow = out[i]
        if out.itemsize == 4:   # decided outside the k loops, or they do not vectorise
            # λ (float64) to float32 in a loop of its own: converting inside the exp loop
            # halved its speed (3.5 vs 7 ns per value here)
            for k in range(K):
                orow[k] = a + pi * ntilde[w, k]
            for k in range(K):
                v = exp_digamma_f32_vec(orow[k]) * inv_exp_psi_colsum[k]
                orow[k] = v if v >= tiny else zero
        else:
            for k in range(K):
                v = exp_digamma(a + pi * ntilde[w, k]) * inv_exp_psi_colsum[k]
                orow[k] = v if v >= tiny else zero


_ROWS_PER_BLOCK = 64


@njit(parallel=True, cache=True, error_model="numpy")
def _exp_elog_beta_rows(ntilde, rows, a, pi, inv_exp_psi_colsum, out):
    """``inv_exp_psi_colsum`` has ``out``'s dtype (float32 lanes stay float32)."""
    n = rows.shape[0]
    nb = (n + _ROWS_PER_BLOCK - 1) // _ROWS_PER_BLOCK
    for b in prange(nb):
        i0 = b * _ROWS_PER_BLOCK
        _exp_elog_beta_block(ntilde, rows, i0, min(n, i0 + _ROWS_PER_BLOCK), a, pi,
                             inv_exp_psi_colsum, out)


def exp_elog_beta_rows(ntilde: np.ndarray, rows: np.ndarray, a: float, pi: float,
                       colsum: np.ndarray, dtype="float32") -> np.ndarray:
    """B[i, k] = exp(ψ(λ_{rows[i],k}) − ψ(Σ_v λ_vk)) with λ = a + π·Ñ (word-major), U x K."""
    out = np.empty((len(rows), ntilde.shape[1]), dtype=dtype)
    inv = np.exp(-psi(np.asarray(colsum, np.float64))).astype(out.dtype)
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


@njit(cache=True, inline="always", error_model="numpy")
def _exp_expect(g, et):
    """et = exp(ψ(g) − ψ(Σ g)) = exp_digamma(g) / exp_digamma(Σ g) (in et's dtype); values
    below ``_tiny(et)`` are stored as 0 (see :func:`_tiny`)."""
    tiny = _tiny(et)
    s = 0.0
    for k in range(g.shape[0]):
        s += g[k]
    inv = 1.0 / _exp_digamma_for(et, s)
    if et.itemsize == 4:
        # float32 lanes, vectorised: this loop was about half of an iteration's time at
        # K = 100 and K = 1000 with one libm expf per topic
        inv32 = np.float32(inv)
        tiny32 = np.float32(tiny)
        for k in range(g.shape[0]):
            v = exp_digamma_f32_vec(np.float32(g[k])) * inv32
            et[k] = v if v >= tiny32 else _F_ZERO
    else:
        for k in range(g.shape[0]):
            v = _exp_digamma_for(et, np.float64(g[k])) * inv
            et[k] = v if v >= tiny else 0.0


@njit(cache=True, inline="always", error_model="numpy")
def _phinorm(tile, n, et, eps, out):
    """out[j] = Σ_k tile[j, k] et[k] + ε, four rows at a time (each et[k] loaded once for
    four dot products)."""
    K = et.shape[0]
    j = 0
    while j + 4 <= n:
        r0 = tile[j]
        r1 = tile[j + 1]
        r2 = tile[j + 2]
        r3 = tile[j + 3]
        e = et[0]
        s0 = r0[0] * e
        s1 = r1[0] * e
        s2 = r2[0] * e
        s3 = r3[0] * e
        for k in range(1, K):
            e = et[k]
            s0 += r0[k] * e
            s1 += r1[k] * e
            s2 += r2[k] * e
            s3 += r3[k] * e
        out[j] = s0 + eps
        out[j + 1] = s1 + eps
        out[j + 2] = s2 + eps
        out[j + 3] = s3 + eps
        j += 4
    while j < n:
        row = tile[j]
        s = row[0] * et[0]
        for k in range(1, K):
            s += row[k] * et[k]
        out[j] = s + eps
        j += 1


@njit(cache=True, inline="always", error_model="numpy")
def _weighted_rows(tile, n, ratio, acc):
    """acc += Σ_j ratio[j] tile[j], four rows per pass over acc."""
    K = acc.shape[0]
    j = 0
    while j + 4 <= n:
        a0 = ratio[j]
        a1 = ratio[j + 1]
        a2 = ratio[j + 2]
        a3 = ratio[j + 3]
        r0 = tile[j]
        r1 = tile[j + 1]
        r2 = tile[j + 2]
        r3 = tile[j + 3]
        for k in range(K):
            acc[k] += a0 * r0[k] + a1 * r1[k] + a2 * r2[k] + a3 * r3[k]
        j += 4
    while j < n:
        r = ratio[j]
        row = tile[j]
        for k in range(K):
            acc[k] += r * row[k]
        j += 1


@njit(fastmath=True, cache=True, error_model="numpy")
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
        _weighted_rows(tile, n, ratio, acc)
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


@njit(fastmath=True, parallel=True, cache=True, error_model="numpy")
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


@njit(parallel=True, cache=True, error_model="numpy")
def _doc_scores(indptr, cts, p, gamma, alpha, alpha_const, elogt, scores):
    """elogt[d] = E[log θ_d] and ELBO_d = Σ_w n_dw log phinorm_dw + Σ_k (α_k − γ_dk) E[log θ_dk]
    + log Γ(γ_dk) − log Γ(α_k) + log Γ(Σα) − log Γ(Σγ_d). Documents in parallel, each one's
    sums in a fixed order by one thread and without ``fastmath``, so nothing depends on the
    thread count (inside the fastmath kernel's prange the last bits did; serially this was
    10% of a K = 1000 local step, with two libm calls per topic and document)."""
    n, K = gamma.shape
    for d in prange(n):
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


@njit(cache=True, error_model="numpy")
def _word_sstats_block(u0, u1, wptr, wdoc, wpos, cts, p, et, eb, out, acc):
    """Words u0..u1-1 of :func:`_word_sstats` (a function of its own so that the loops over
    k vectorise, which they do not inside a prange body)."""
    K = out.shape[1]
    for u in range(u0, u1):
        for k in range(K):
            acc[k] = 0.0
        for e in range(wptr[u], wptr[u + 1]):
            d = wdoc[e]
            rv = cts[wpos[e]] / p[wpos[e]]
            for k in range(K):
                acc[k] += rv * et[d, k]
        for k in range(K):
            out[u, k] = acc[k] * eb[u, k]


_WORDS_PER_BLOCK = 64


@njit(parallel=True, cache=True, error_model="numpy")
def _word_sstats(wptr, wdoc, wpos, cts, p, et, eb, out):
    """out[u, k] = eb[u, k] · Σ_{d ∋ u} (n_du / phinorm_du) · et[d, k], documents in increasing
    order (float64; the same sums whatever the number of threads: each word's sum is one
    thread's, in a fixed order). No ``fastmath`` here: with it the kernel loaded from numba's
    cache rounded differently from the freshly compiled one (contraction/reciprocal choices),
    so a resumed process drifted a few ULPs from an uninterrupted one
    (tests/test_kernel_cache.py)."""
    U, K = out.shape
    nb = (U + _WORDS_PER_BLOCK - 1) // _WORDS_PER_BLOCK
    for b in prange(nb):
        u0 = b * _WORDS_PER_BLOCK
        acc = np.empty(K, np.float64)
        _word_sstats_block(u0, min(U, u0 + _WORDS_PER_BLOCK), wptr, wdoc, wpos, cts, p, et,
                           eb, out, acc)


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


@njit(cache=True, error_model="numpy")
def _local_ids(word_ids, n_words, mark):
    """(sorted unique word ids, each non-zero's index into them), with ``mark`` (n_words
    int32, all -1) as scratch, left all -1 again. O(nnz + distinct words): a counting pass
    instead of np.unique + searchsorted (~10% of a K = 100 local step)."""
    nnz = word_ids.shape[0]
    n_u = 0
    for i in range(nnz):
        w = word_ids[i]
        if mark[w] < 0:
            mark[w] = 0
            n_u += 1
    uniq = np.empty(n_u, np.int64)
    j = 0
    for i in range(nnz):
        w = word_ids[i]
        if mark[w] == 0:
            mark[w] = 1
            uniq[j] = w
            j += 1
    uniq.sort()
    for u in range(n_u):
        mark[uniq[u]] = u
    lids = np.empty(nnz, np.int64)
    for i in range(nnz):
        lids[i] = mark[word_ids[i]]
    for u in range(n_u):
        mark[uniq[u]] = -1
    return uniq, lids


def local_ids(word_ids: np.ndarray, n_words: int):
    """Sorted unique word ids of a batch and each non-zero's index into them (what
    ``np.unique`` + ``np.searchsorted`` give)."""
    mark = np.full(int(n_words), -1, np.int32)
    return _local_ids(np.ascontiguousarray(word_ids), int(n_words), mark)


@njit(cache=True, error_model="numpy")
def word_major_index(indptr, lids, n_u):
    """The non-zeros grouped by word, documents in increasing order within a word (a counting
    sort): ``wptr`` (n_u + 1), ``wpos`` (position of each in the document-major order) and
    ``wdoc`` (its document) -- np.argsort(lids, stable) and friends, in one O(nnz) pass."""
    nnz = lids.shape[0]
    wptr = np.zeros(n_u + 1, np.int64)
    for i in range(nnz):
        wptr[lids[i] + 1] += 1
    for u in range(n_u):
        wptr[u + 1] += wptr[u]
    fill = wptr[:-1].copy()
    wpos = np.empty(nnz, np.int64)
    wdoc = np.empty(nnz, np.int64)
    for d in range(indptr.shape[0] - 1):
        for i in range(indptr[d], indptr[d + 1]):
            u = lids[i]
            k = fill[u]
            wpos[k] = i
            wdoc[k] = d
            fill[u] = k + 1
    return wptr, wpos, wdoc


CHUNKS_PER_THREAD = 4


class _PhaseClock:
    """Adds the process CPU seconds since the last lap to ``timings[name]`` (no-op without a
    dict)."""

    def __init__(self, timings: Optional[dict]):
        self.timings = timings
        self.t = time.process_time() if timings is not None else 0.0

    def lap(self, name: str) -> None:
        if self.timings is not None:
            t = time.process_time()
            self.timings[name] = self.timings.get(name, 0.0) + t - self.t
            self.t = t


def estep(indptr: np.ndarray, lids: np.ndarray, cts: np.ndarray, eb: np.ndarray,
          alpha: np.ndarray, gamma0: np.ndarray, max_iter: int = 100, tol: float = 1e-3,
          n_chunks: Optional[int] = None, timings: Optional[dict] = None) -> EStepResult:
    """The numba E-step (see module docstring). ``lids`` index the rows of ``eb`` (U x K, its
    dtype sets the compute precision); ``gamma0`` (n x K) is the initial γ (not modified).
    The result does not depend on ``n_chunks`` or the thread count (bit for bit).
    ``timings``, if given, gets the process CPU seconds of the phases added to its keys
    ``fixed_point``, ``bound`` and ``statistics`` (benchmarks/estep_bench.py)."""
    import numba
    clock = _PhaseClock(timings)
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
    et = np.zeros((n, K), dt)     # exp(E[log θ]) as the kernel computed it (exact in float64)
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
        clock.lap("fixed_point")
        _doc_scores(indptr, cts, p, gamma, alpha, alpha_const, elogt, scores)
        clock.lap("bound")
    # word-major index of the non-zeros (documents in increasing order within a word)
    wptr, wpos, wdoc = word_major_index(indptr, lids, U)
    sstats = np.empty((U, K), np.float64)
    if U:
        _word_sstats(wptr, wdoc, wpos, cts, p, et, eb, sstats)
    clock.lap("statistics")
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
