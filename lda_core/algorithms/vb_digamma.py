"""ψ and exp(ψ) in numba for the VB kernels (the E-step's exp(E[log θ]), exp(E[log β])).

exp(E[log θ_k]) = exp(ψ(γ_k) − ψ(Σ_j γ_j)) = exp_digamma(γ_k) / exp_digamma(Σ_j γ_j): only
exp(ψ(x)) is ever needed, never ψ and a log/exp pair. :func:`exp_digamma` (float64),
:func:`exp_digamma_f32` (float32, one libm ``expf``) and :func:`exp_digamma_f32_vec` (float32,
branch-free and without libm calls so loops over it vectorise) share one scheme: below 6 the
recurrence ψ(x) = ψ(x + 6) − Σ_{i<6} 1/(x + i) with the six reciprocals summed as one fraction,
then the asymptotic series at y ≥ 6. :func:`digamma` is ψ itself (the bound needs it).
The ``*_array`` wrappers are for tests. Compiled with ``cache=True`` (lda_core.algorithms.numba_config).
"""
from __future__ import annotations

import math

import numpy as np

from lda_core.algorithms import numba_config

numba_config.prefer_passive_wait()     # before numba starts its threads
from numba import njit, types  # noqa: E402
from numba.extending import intrinsic  # noqa: E402


@njit(cache=True, inline="always", error_model="numpy")
def _six_reciprocals(x):
    """Σ_{i=0}^{5} 1/(x + i) as one fraction (one division instead of six), float64: the
    recurrence ψ(x) = ψ(x + 6) − Σ_{i<6} 1/(x + i) used below 6."""
    x1 = x + 1.0
    x2 = x + 2.0
    x3 = x + 3.0
    x4 = x + 4.0
    x5 = x + 5.0
    p01 = x * x1
    p23 = x2 * x3
    p45 = x4 * x5
    num = (x + x1) * p23 * p45 + (x2 + x3) * p01 * p45 + (x4 + x5) * p01 * p23
    return num / (p01 * p23 * p45)


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
        r = -_six_reciprocals(x)
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
        f = math.exp(-_six_reciprocals(x))
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
    cheaper than ``exp``) and shorter series; relative error < 1e-5, below what a float32
    E-step resolves (gensim's float32 E-step computes ψ and exp in float32 too)."""
    if x != x:
        return np.nan
    if not (x > 0.0):
        return 0.0
    f = 1.0
    if x < 6.0:
        f = np.float64(math.exp(np.float32(-_six_reciprocals(x))))
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
_F_ONE, _F_HALF, _F_SIX, F_ZERO = _F32(1.0), _F32(0.5), _F32(6.0), _F32(0.0)
_F_TWO, _F_THREE, _F_FOUR, _F_FIVE = _F32(2.0), _F32(3.0), _F32(4.0), _F32(5.0)
_F_LOG2E = _F32(1.4426950408889634)
_F_TMAX = _F32(125.0)           # 2^-125: still a normal float32, far below tiny_cutoff (1e-18)
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
    so that a loop over it vectorises (8 float32 lanes with AVX2, where
    :func:`exp_digamma_f32` is evaluated one value at a time). x > 0 assumed (float32).

    As :func:`exp_digamma`: below 6 the recurrence exp(ψ(x)) = exp(ψ(x+6))·exp(−R) with
    R = Σ_{i<6} 1/(x+i) (one division); exp(−R) = 2^−t, t = R·log2(e) capped at 125, as
    2^−(t−n) by a polynomial times 2^−n built from its exponent bits (n = round(t));
    exp(ψ(y)) = y·exp(u) at y ≥ 6 by series. Relative error < 3.5e-7·(1 + |ψ(x)|) -- that of
    ψ rounded to float32, as in gensim's float32 E-step -- wherever the value is above 1e-28;
    values below ~5e-30 are returned as exactly 0 (the E-step stores values below 1e-18 as 0
    anyway, see :func:`tiny_cutoff`; a subnormal intermediate would be slow)."""
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
    t = t if small else F_ZERO
    t = t if t < _F_TMAX else _F_TMAX
    n = np.int32(t + _F_HALF)                   # round(t), in [0, 125]
    f = t - _F32(n)                             # in [-1/2, 1/2]
    s = _F_T0 + f * (_F_T1 + f * (_F_T2 + f * (_F_T3 + f * (_F_T4 + f * (_F_T5 + f * (
        _F_T6 + f * _F_T7))))))
    s = s * _f32_from_bits((_I_127 - n) << _I_23)     # 2^-n, exactly
    s = s if t < _F_TFLUSH else F_ZERO
    y = x + _F_SIX if small else x
    inv = _F_ONE / y
    q = inv * inv
    u = -_F_HALF * inv + q * (_F_B1 + q * (_F_B2 + q * (_F_B3 + q * _F_B4)))
    e = _F_ONE + u * (_F_ONE + u * (_F_E2 + u * (_F_E3 + u * (_F_E4 + u * _F_E5))))
    return s * y * e


@njit(cache=True, inline="always", error_model="numpy")
def exp_digamma_for(arr, x):
    """exp(ψ(x)) at the precision of ``arr``'s dtype."""
    if arr.itemsize == 4:
        return exp_digamma_f32(x)
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
