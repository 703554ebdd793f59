"""The lazily scaled λ of online VB (lda_core.algorithms.online_vb): λ_wk = a + π·Ñ_wk, word-major.

A global step λ ← (1 − ρ) λ + ρ (η + (D/S) sstats) touches only the minibatch's rows:
    a ← (1 − ρ) a + ρ η,   π ← (1 − ρ) π,   Ñ_w ← Ñ_w + ρ (D/S) sstats_w / π
exactly the dense update in real arithmetic. When π falls below ``RENORM_PI`` (always when
ρ = 1, i.e. batch VB) it is folded into Ñ (Ñ ← π Ñ, π ← 1) before the rows are added.
Nothing is modified unless every new value is finite.

The rows are updated per word block (``lda_core.algorithms.word_blocks``): a
:class:`LazyLambdaUpdate` per block checks the statistics' rows of its block (chunk by chunk:
a minibatch's summed statistics need not be held whole; nothing written), and after every
block was checked applies them in the same order. Each row's arithmetic and every running sum
over a block's rows is that of one chunk holding all of them; the blocks' sums are then added
in block order.
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
def _apply_row_update(ntilde, ids, s, coef, delta_colsum):
    """Ñ_w ← Ñ_w + coef·s_w for the touched rows; delta_colsum_k += Σ_w coef·s_wk (row by
    row)."""
    K = s.shape[1]
    for i in range(ids.shape[0]):
        w = ids[i]
        for k in range(K):
            d = coef * s[i, k]
            ntilde[w, k] = ntilde[w, k] + d
            delta_colsum[k] += d


def refuse_update(step: int, rho: float, scale: float):
    return StepRefused("refusing the update at step %d: it would make λ non-finite (rho=%g, "
                       "D/S=%g); the state is left unchanged" % (step, rho, scale))


class LazyLambdaStep:
    """The scalars of λ ← (1 − ρ) λ + ρ (η + scale·s) on λ = a + π Ñ (module docstring): the
    new a and π, whether π is folded into Ñ first (``renorm``, by ``fold``), and the
    coefficient of the statistics' rows."""

    def __init__(self, a: float, pi: float, rho: float, scale: float, eta: float):
        self.a, self.pi, self.rho, self.scale = a, pi, rho, scale
        self.new_a = (1.0 - rho) * a + rho * eta
        new_pi = (1.0 - rho) * pi
        self.renorm = new_pi < RENORM_PI
        self.fold = new_pi if self.renorm else 1.0
        self.pi_after = 1.0 if self.renorm else new_pi
        self.coef = rho * scale / self.pi_after


class LazyLambdaUpdate:
    """One word block's part of a :class:`LazyLambdaStep` on its rows ``ntilde`` (rows
    ``[lo, lo + len)`` of Ñ), the statistics' rows given in chunks of (global word ids, s):
    :meth:`check` every chunk (reads only), :meth:`ok`, :meth:`start` (folds π in if due),
    :meth:`apply` the same chunks in the same order. Running sums start at 0 in each block:
    ``total``/``size`` (Σ |Δλ| over the rows checked) and the column-sum change
    (:meth:`colsum_part`)."""

    def __init__(self, ntilde: np.ndarray, lo: int, plan: LazyLambdaStep):
        self.ntilde, self.lo, self.plan = ntilde, int(lo), plan
        self.total = 0.0          # Σ |Δλ| over the rows checked
        self.size = 0             # entries checked
        self.finite = True
        self._delta = np.zeros(ntilde.shape[1], np.float64)

    def _local(self, ids: np.ndarray) -> np.ndarray:
        return ids - self.lo if self.lo else ids

    def check(self, ids: np.ndarray, s: np.ndarray) -> None:
        """Read-only pass over one chunk: are its new values finite, and their |Δλ|."""
        p, ids = self.plan, self._local(ids)
        if p.renorm:
            old_rows = self.ntilde[ids]
            new_rows = old_rows * p.fold + p.coef * s
            self.finite = self.finite and bool(np.all(np.isfinite(new_rows)))
            if len(ids):       # np.mean's sum when the rows come in one chunk
                self.total += float(np.sum(np.abs((p.new_a + p.pi_after * new_rows)
                                                  - (p.a + p.pi * old_rows))))
        else:
            self.total = _check_row_update(self.ntilde, ids, s, p.coef, p.a, p.pi,
                                           p.new_a, p.pi_after, self.total)
        self.size += s.size

    def ok(self) -> bool:
        """Every new value checked is finite (the λ check of this block)."""
        return self.finite and math.isfinite(self.total)

    def start(self) -> None:
        """After the step was accepted: fold π into this block's rows if it is due."""
        if self.plan.renorm:
            self.ntilde *= self.plan.fold

    def apply(self, ids: np.ndarray, s: np.ndarray) -> None:
        p, ids = self.plan, self._local(ids)
        if p.renorm:
            # the rows were folded by start(): these rows are the old rows × fold, as checked
            self.ntilde[ids] = self.ntilde[ids] + p.coef * s
        else:
            _apply_row_update(self.ntilde, ids, s, p.coef, self._delta)

    def colsum_part(self) -> np.ndarray:
        """After :meth:`apply`: this block's part of Σ_w Ñ_w after the step -- its rows'
        column sums when π was folded in, else the change of the column sums."""
        return self.ntilde.sum(axis=0) if self.plan.renorm else self._delta


def new_colsum(plan: LazyLambdaStep, colsum: np.ndarray, part: np.ndarray) -> np.ndarray:
    """Σ_w Ñ_w after the step from the blocks' :meth:`LazyLambdaUpdate.colsum_part` summed in
    block order and ``colsum``, the sums before it."""
    return part if plan.renorm else colsum + part
