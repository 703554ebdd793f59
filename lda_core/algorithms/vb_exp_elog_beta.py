"""exp(E[log β]) for a set of word rows of the lazily scaled λ = a + π·Ñ (online VB's state):
B[i, k] = exp(ψ(λ_{rows[i],k}) − ψ(Σ_v λ_vk)), word-major (U x K), in the E-step's dtype.

Computed once per minibatch for its words only (Hoffman et al.'s expElogbeta, restricted to the
batch), then read by every iteration of every document's fixed point (lda_core.algorithms.estep_vb).
Values below :func:`tiny_cutoff` are stored as 0 (why: its docstring).
"""
from __future__ import annotations

import numpy as np

from lda_core.algorithms import numba_config

numba_config.prefer_passive_wait()     # before numba starts its threads
from lda_core.algorithms.vb_digamma import exp_digamma, exp_digamma_f32_vec  # noqa: E402
from numba import njit, prange  # noqa: E402
from scipy.special import psi  # noqa: E402


@njit(cache=True, inline="always", error_model="numpy")
def tiny_cutoff(arr):
    """Values below this are stored as 0 in ``arr`` (1e-18 for float32, 1e-150 for float64):
    (1) subnormal numbers are read as 0 on a thread with the DAZ/FTZ flags set and not on
    another, which made results depend on the thread that handled a document or word; (2) the
    E-step multiplies two stored values (exp(E[log θ]) x exp(E[log β])): with both above the
    square root of the smallest normal number the product is never subnormal, and subnormal
    arithmetic is slow on most CPUs -- on a well-trained model (most λ_kw near η, so most
    exp(E[log β_kw]) tiny) it would slow the E-step and exp(E[log β]) down. Such values are far below the ε (1.2e-7 in float32) that every
    phinorm includes: flushing them changes γ and the statistics by less than float32's own
    rounding."""
    return 1e-18 if arr.itemsize == 4 else 1e-150


@njit(cache=True, error_model="numpy")
def _exp_elog_beta_block(ntilde, rows, i0, i1, a, pi, inv_exp_psi_colsum, out):
    """Rows i0..i1-1: out[i, k] = exp(ψ(a + π ñ[rows[i], k])) / exp(ψ(Σ_v λ_vk)). A function of
    its own, called per block of rows from the prange, so that LLVM vectorises the loops over
    k (it does not inside a prange body)."""
    K = ntilde.shape[1]
    tiny = out.dtype.type(tiny_cutoff(out))
    zero = out.dtype.type(0.0)
    for i in range(i0, i1):
        w = rows[i]
        orow = out[i]
        if out.itemsize == 4:   # decided outside the k loops, or they do not vectorise
            # λ (float64) to float32 in a loop of its own: converting inside the exp loop
            # keeps that loop from vectorising
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
