"""The lazily scaled λ of online VB (lda_core.algorithms.online_vb): λ_wk = a + π·Ñ_wk, word-major.

A global step λ ← (1 − ρ) λ + ρ (η + (D/S) sstats) touches only the minibatch's rows:
    a ← (1 − ρ) a + ρ η,   π ← (1 − ρ) π,   Ñ_w ← Ñ_w + ρ (D/S) sstats_w / π
exactly the dense update in real arithmetic. When π falls below ``RENORM_PI`` (always when
ρ = 1, i.e. batch VB) it is folded into Ñ (Ñ ← π Ñ, π ← 1) before the rows are added.
Nothing is modified unless every new value is finite.

The statistics may come in blocks of rows (a minibatch's summed statistics need not be held
whole): :class:`LazyLambdaUpdate` checks every block first (nothing written), then applies
them in the same order; each row's arithmetic, and every running sum over rows, is the one
of a single block holding all the rows, so the result is bit for bit the same however the
rows are cut.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from lda_core.errors import StepRefused

RENORM_PI = 1e-30          # fold the lazy scale π into Ñ when it gets smaller than this


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _check_row_update(ntilde, ids, s, coef, a, pi, new_a, new_pi, total):
    """``total`` + Σ |λ_new − λ_old| over the touched rows for Ñ_w ← Ñ_w + coef·s_w,
    λ = a + π Ñ. Reads only. A new value that is not finite makes the sum NaN or inf (no
    branch, so the loop vectorises; reassociating the sum within a row is allowed, NaN and inf
    keep their meaning). The running sum is carried from row to row, so a call per block of
    rows, each given the previous block's result, gives the sum of one call over all of them."""
    K = s.shape[1]
    for i in range(ids.shape[0]):
        w = ids[i]
        for k in range(K):
            old = ntilde[w, k]
            new = old + coef * s[i, k]
            total += abs((new_a + new_pi * new) - (a + pi * old))
    return total


@njit(cache=True, error_model="numpy")
def _apply_row_update(ntilde, ids, s, coef, delta_colsum, mass):
    """Ñ_w ← Ñ_w + coef·s_w for the touched rows; delta_colsum_k += Σ_w coef·s_wk and
    mass_k += Σ_w s_wk (row by row: the sums of ``s.sum(axis=0)``'s order)."""
    K = s.shape[1]
    for i in range(ids.shape[0]):
        w = ids[i]
        for k in range(K):
            d = coef * s[i, k]
            ntilde[w, k] = ntilde[w, k] + d
            delta_colsum[k] += d
            mass[k] += s[i, k]


@njit(cache=True, error_model="numpy")
def _add_row_sums(s, mass):
    """mass_k += Σ_w s_wk, row by row (the order of ``s.sum(axis=0)``)."""
    for i in range(s.shape[0]):
        for k in range(s.shape[1]):
            mass[k] += s[i, k]


def _refuse(step: int, rho: float, scale: float):
    return StepRefused("refusing the update at step %d: it would make λ non-finite (rho=%g, "
                       "D/S=%g); the state is left unchanged" % (step, rho, scale))


class LazyLambdaUpdate:
    """λ ← (1 − ρ) λ + ρ (η + scale·s) on ``ntilde`` (module docstring), the rows of s given
    in blocks: :meth:`check` every block (reads only), :meth:`start` (ValueError, nothing
    modified, if a new value would not be finite), :meth:`apply` the same blocks in the same
    order, :meth:`finish`. ``colsum`` is Σ_w Ñ_w before the step."""

    def __init__(self, ntilde: np.ndarray, colsum: np.ndarray, a: float, pi: float,
                 rho: float, scale: float, eta: float, step: int):
        self.ntilde, self.colsum, self.a, self.pi = ntilde, colsum, a, pi
        self.rho, self.scale, self.step = rho, scale, step
        self.new_a = (1.0 - rho) * a + rho * eta
        new_pi = (1.0 - rho) * pi
        self.renorm = new_pi < RENORM_PI
        self.fold = new_pi if self.renorm else 1.0
        self.pi_after = 1.0 if self.renorm else new_pi
        self.coef = rho * scale / self.pi_after
        self.total = 0.0          # Σ |Δλ| over the rows checked
        self.size = 0             # entries checked
        self.finite = True
        self.mass = np.zeros(ntilde.shape[1], np.float64)
        self._delta = np.zeros(ntilde.shape[1], np.float64)

    def check(self, ids: np.ndarray, s: np.ndarray) -> None:
        """Read-only pass over one block: are its new values finite, and their |Δλ|."""
        if self.renorm:
            old_rows = self.ntilde[ids]
            new_rows = old_rows * self.fold + self.coef * s
            self.finite = self.finite and bool(np.all(np.isfinite(new_rows)))
            if len(ids):       # np.mean's sum when the rows come in one block
                self.total += float(np.sum(np.abs((self.new_a + self.pi_after * new_rows)
                                                  - (self.a + self.pi * old_rows))))
        else:
            self.total = _check_row_update(self.ntilde, ids, s, self.coef, self.a, self.pi,
                                           self.new_a, self.pi_after, self.total)
        self.size += s.size

    def start(self) -> None:
        """After every block was checked: refuse (ValueError, nothing modified) a step that
        would make λ non-finite; otherwise fold π into Ñ if it is due."""
        if not (math.isfinite(self.new_a) and self.finite and math.isfinite(self.total)):
            raise _refuse(self.step, self.rho, self.scale)
        if self.renorm:
            self.ntilde *= self.fold

    def apply(self, ids: np.ndarray, s: np.ndarray) -> None:
        if self.renorm:
            # Ñ was folded by start(): these rows are the old rows × fold, as checked
            self.ntilde[ids] = self.ntilde[ids] + self.coef * s
            _add_row_sums(s, self.mass)
        else:
            _apply_row_update(self.ntilde, ids, s, self.coef, self._delta, self.mass)

    def finish(self):
        """(Σ_w Ñ_w after, a, π, mean |Δλ| over the touched rows); ``self.mass`` holds
        Σ_w s_w over the blocks applied."""
        colsum = (self.ntilde.sum(axis=0) if self.renorm else self.colsum + self._delta)
        mean_change = self.total / self.size if self.size else 0.0
        return colsum, self.new_a, self.pi_after, mean_change

