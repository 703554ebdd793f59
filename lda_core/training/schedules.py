"""Learning-rate schedules shared by the stochastic algorithms (online VB, SCVB0, sparse VB).

All of them are the Robbins-Monro family ``rho_t = scale * (tau0 + t) ** (-kappa)``:

* online VB (Hoffman, Blei & Bach 2010, eq. 7 / Algorithm 2): ``rho_t = (tau0 + t)^-kappa``
  with ``t = 0, 1, 2, ...`` the number of global steps applied *before* this one (gensim and
  Hoffman's ``onlineldavb.py`` use the same offset), ``kappa in (0.5, 1]``, ``tau0 >= 0``;
* SCVB0 (Foulds et al. 2013): ``rho = s / (tau + t)^kappa`` for the topic statistics
  (s=10, tau=1000, kappa=0.9) and for the per-document statistics (s=1, tau=10, kappa=0.9).

The value is clipped to ``[0, 1]`` (a step above 1 would make the convex combination
``(1 - rho) x + rho x_hat`` extrapolate); ``tau0 + t == 0`` gives ``rho = 1``.

An update of a trained model on new documents (``ldabeam.LdaModel.update``, ``ldabeam train
--update``) steps instead by the running average :func:`history_rho`: the state before it
counts as ``history`` documents (online VB; tokens for SCVB0) and every minibatch of the
update as its own, so after the update the old state and the new documents weigh by their
sizes, however many passes the update makes (each pass's visits count 1/passes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lda_core.errors import UsageError


def check_schedule(tau0: float, kappa: float, scale: float = 1.0, *, strict_kappa: bool = True,
                   prefix: str = "") -> None:
    """Validate schedule parameters; ValueError naming the parameter, value and allowed range.

    ``strict_kappa`` requires ``kappa in (0.5, 1]`` (the Robbins-Monro conditions that online
    VB's convergence proof needs); otherwise ``kappa in (0, 1]`` is accepted."""
    if not (isinstance(kappa, (int, float, np.floating, np.integer)) and math.isfinite(kappa)):
        raise UsageError("%skappa must be a finite number, got %r" % (prefix, kappa))
    if strict_kappa and not (0.5 < kappa <= 1.0):
        raise UsageError("%skappa=%r is outside the allowed range (0.5, 1]" % (prefix, kappa))
    if not strict_kappa and not (0.0 < kappa <= 1.0):
        raise UsageError("%skappa=%r is outside the allowed range (0, 1]" % (prefix, kappa))
    if not (isinstance(tau0, (int, float, np.floating, np.integer)) and math.isfinite(tau0)
            and tau0 >= 0):
        raise UsageError("%stau0=%r is outside the allowed range [0, inf)" % (prefix, tau0))
    if not (isinstance(scale, (int, float, np.floating, np.integer)) and math.isfinite(scale)
            and scale > 0):
        raise UsageError("%sscale=%r is outside the allowed range (0, inf)" % (prefix, scale))


def rho(t: float, tau0: float, kappa: float, scale: float = 1.0) -> float:
    """``min(1, scale * (tau0 + t) ** -kappa)``; ``t`` counts the steps applied before this one."""
    if t < 0:
        raise ValueError("t=%r is outside the allowed range [0, inf)" % (t,))
    base = float(tau0) + float(t)
    if base <= 0.0:
        return 1.0
    return float(min(1.0, float(scale) * base ** (-float(kappa))))


def history_rho(n: float, history: float, seen_since: float) -> float:
    """The running-average step of an update: ``n / (history + seen_since + n)`` for a
    minibatch of ``n`` documents (or tokens) after ``seen_since`` were applied since the
    update began, the state before it counting as ``history`` (module docstring); 1 when
    there is no history (the new documents replace the state)."""
    den = float(history) + float(seen_since) + float(n)
    return 1.0 if den <= 0.0 else float(min(1.0, max(0.0, float(n) / den)))


@dataclass(frozen=True)
class PowerSchedule:
    """``rho_t = min(1, scale * (tau0 + t)^-kappa)`` as an object (validated on creation)."""

    tau0: float = 64.0
    kappa: float = 0.7
    scale: float = 1.0
    strict_kappa: bool = True

    def __post_init__(self):
        check_schedule(self.tau0, self.kappa, self.scale, strict_kappa=self.strict_kappa)

    def __call__(self, t: float) -> float:
        return rho(t, self.tau0, self.kappa, self.scale)
