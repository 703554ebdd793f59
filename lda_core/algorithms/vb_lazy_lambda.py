"""The lazily scaled λ of online VB (lda_core.algorithms.online_vb): λ_wk = a + π·Ñ_wk, word-major.

A global step λ ← (1 − ρ) λ + ρ (η + (D/S) sstats) touches only the minibatch's rows:
    a ← (1 − ρ) a + ρ η,   π ← (1 − ρ) π,   Ñ_w ← Ñ_w + ρ (D/S) sstats_w / π
exactly the dense update in real arithmetic. When π falls below ``RENORM_PI`` (always when
ρ = 1, i.e. batch VB) it is folded into Ñ (Ñ ← π Ñ, π ← 1) before the rows are added.
Nothing is modified unless every new value is finite.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

RENORM_PI = 1e-30          # fold the lazy scale π into Ñ when it gets smaller than this


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _check_row_update(ntilde, ids, s, coef, a, pi, new_a, new_pi):
    """Σ |λ_new − λ_old| over the touched rows for Ñ_w ← Ñ_w + coef·s_w, λ = a + π Ñ. Reads
    only. A new value that is not finite makes the sum NaN or inf (no branch, so the loop
    vectorises; reassociating the sum is allowed, NaN and inf keep their meaning)."""
    total = 0.0
    K = s.shape[1]
    for i in range(ids.shape[0]):
        w = ids[i]
        for k in range(K):
            old = ntilde[w, k]
            new = old + coef * s[i, k]
            total += abs((new_a + new_pi * new) - (a + pi * old))
    return total


@njit(cache=True, error_model="numpy")
def _apply_row_update(ntilde, ids, s, coef, delta_colsum):
    """Ñ_w ← Ñ_w + coef·s_w for the touched rows; delta_colsum_k = Σ_w coef·s_wk."""
    K = s.shape[1]
    for i in range(ids.shape[0]):
        w = ids[i]
        for k in range(K):
            d = coef * s[i, k]
            ntilde[w, k] = ntilde[w, k] + d
            delta_colsum[k] += d


def lazy_lambda_update(ntilde: np.ndarray, colsum: np.ndarray, a: float, pi: float,
                       ids: np.ndarray, s: np.ndarray, rho: float, scale: float, eta: float,
                       step: int):
    """Apply λ ← (1 − ρ) λ + ρ (η + scale·s) to the rows ``ids`` of ``ntilde`` in place (module
    docstring); ``colsum`` is Σ_w Ñ_w before the step. Returns (Σ_w Ñ_w after, a, π, mean
    |Δλ| over the touched rows). ValueError, with nothing modified, if a new value would not
    be finite (``step`` names the step in the message)."""
    # candidate values first (nothing is modified until they are known to be finite)
    new_a = (1.0 - rho) * a + rho * eta
    new_pi = (1.0 - rho) * pi
    renorm = new_pi < RENORM_PI
    fold = new_pi if renorm else 1.0
    pi_after = 1.0 if renorm else new_pi
    coef = rho * scale / pi_after
    if not math.isfinite(new_a):
        raise ValueError("refusing the update at step %d: it would make λ non-finite "
                         "(rho=%g, D/S=%g); the state is left unchanged" % (step, rho,
                                                                          scale))
    if renorm:
        old_rows = ntilde[ids]
        new_rows = old_rows * fold + coef * s
        if not np.all(np.isfinite(new_rows)):
            raise ValueError("refusing the update at step %d: it would make λ non-finite "
                             "(rho=%g, D/S=%g); the state is left unchanged"
                             % (step, rho, scale))
        lam_old = a + pi * old_rows
        ntilde *= fold
        ntilde[ids] = new_rows
        colsum = ntilde.sum(axis=0)
        lam_new = new_a + pi_after * new_rows
        mean_change = float(np.mean(np.abs(lam_new - lam_old))) if len(ids) else 0.0
    else:
        # one numba pass checks that every new value is finite (nothing is written
        # otherwise) and the mean |Δλ|; a second writes the rows and the column sums (the
        # numpy form made U x K temporaries and was ~40% of a K = 100, S = 256 pass)
        delta_colsum = np.zeros(ntilde.shape[1], np.float64)
        total = _check_row_update(ntilde, ids, s, coef, a, pi, new_a,
                                  pi_after)
        if not math.isfinite(total):
            raise ValueError("refusing the update at step %d: it would make λ non-finite "
                             "(rho=%g, D/S=%g); the state is left unchanged"
                             % (step, rho, scale))
        _apply_row_update(ntilde, ids, s, coef, delta_colsum)
        colsum = colsum + delta_colsum
        mean_change = total / s.size if len(ids) else 0.0
    return colsum, new_a, pi_after, mean_change
