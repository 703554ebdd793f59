"""Newton updates of the Dirichlet hyper-parameters α (document-topic) and η (topic-word).

The per-document bound depends on α only through
    L(α) = D·(log Γ(Σ_k α_k) − Σ_k log Γ(α_k)) + Σ_k (α_k − 1)·Σ_d E[log θ_dk],
whose Hessian is diag(h) + z·11ᵀ with h_k = −D ψ'(α_k) and z = D ψ'(Σ α); the Newton step
H⁻¹g therefore costs O(K) (Blei, Ng & Jordan 2003, appendix A.4.2):
    b = Σ_k (g_k / h_k) / (1/z + Σ_k 1/h_k),   (H⁻¹g)_k = (g_k − b) / h_k.
Online VB (Hoffman et al. 2010, eq. 9) takes a damped step α ← α − ρ_t·H⁻¹g using the
minibatch's documents (the gradient is a noisy estimate of the corpus one). A step that would
make a component non-positive is halved (at most ``MAX_HALVINGS`` times) and then rejected
(α kept); gensim rejects it at once.

η is the symmetric scalar topic-word prior; its bound
    L(η) = K·(log Γ(Vη) − V log Γ(η)) + η·Σ_k Σ_w E[log β_kw]
gives a scalar Newton step with g = K V (ψ(Vη) − ψ(η)) + Σ_kw E[log β_kw] and
h = K (V² ψ'(Vη) − V ψ'(η)).
"""
from __future__ import annotations

import logging
import math

import numpy as np
from scipy.special import polygamma, psi

logger = logging.getLogger(__name__)

MAX_HALVINGS = 30


def newton_dirichlet_step(prior: np.ndarray, n: float, sum_elog: np.ndarray, rho: float
                          ) -> np.ndarray:
    """One damped Newton step for a Dirichlet prior (vector), Blei et al. 2003 A.4.2.

    ``n`` observations (documents) with ``sum_elog`` = Σ_d E[log θ_d] (length K).
    Returns the new prior (a new array), or the old one if the step leaves the domain."""
    prior = np.asarray(prior, dtype=np.float64)
    if n <= 0:
        return prior.copy()
    g = n * (psi(prior.sum()) - psi(prior)) + np.asarray(sum_elog, dtype=np.float64)
    h = -n * polygamma(1, prior)
    z = n * polygamma(1, prior.sum())
    b = np.sum(g / h) / (1.0 / z + np.sum(1.0 / h))
    step = (g - b) / h                       # H^-1 g
    for _ in range(MAX_HALVINGS + 1):
        new = prior - rho * step
        if np.all(np.isfinite(new)) and np.all(new > 0):
            return new
        rho *= 0.5
    logger.warning("Dirichlet prior Newton step rejected (would leave the positive orthant)")
    return prior.copy()


def newton_symmetric_eta_step(eta: float, n_topics: int, n_words: int, sum_elogbeta: float,
                              rho: float) -> float:
    """One damped Newton step for the scalar symmetric topic-word prior η (see module doc).

    ``sum_elogbeta`` = Σ_k Σ_w E[log β_kw]. The step is rejected if η would become ≤ 0."""
    K, V = float(n_topics), float(n_words)
    g = K * V * (psi(V * eta) - psi(eta)) + sum_elogbeta
    h = K * (V * V * polygamma(1, V * eta) - V * polygamma(1, eta))
    for _ in range(MAX_HALVINGS + 1):
        new = float(eta - rho * g / h)
        if math.isfinite(new) and new > 0:
            return new
        rho *= 0.5
    logger.warning("eta Newton step rejected (eta would become %r)", new)
    return float(eta)
