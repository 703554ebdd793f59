"""The numba kernels of the evaluation metrics: one fixed point fits a document's θ given φ
(document completion, topic usage), parallel over documents (``prange``: every core).

fastmath lets LLVM vectorise the K-loops; all values are positive and finite (φ is floored at
1e-300, θ_k >= α / Σθ), and the results still equal the numpy formulations (the harness's) to
~1e-15 per token. Compiled on first use and cached beside this module (``cache=True``).
"""
from __future__ import annotations

import numpy as np

try:  # numba is a dependency; the numpy formulations are the reference and the fall-back
    import numba as _numba
except ImportError:  # pragma: no cover
    _numba = None

if _numba is not None:
    _njit, _prange = _numba.njit, _numba.prange

    @_njit(cache=True, fastmath=True)
    def fit_theta(phiT, ptr, w_ids, cnt, d, alpha, iters, theta, acc):  # pragma: no cover
        """θ_d (into ``theta``) from uniform by ``iters`` fixed-point iterations on the
        words ``ptr[d]:ptr[d+1]`` of ``w_ids``/``cnt``::

            θ_k ← α + θ_k Σ_w n_w φ_kw / Σ_j θ_j φ_jw,   then θ ← θ / Σ_k θ_k
        """
        K = phiT.shape[1]
        for k in range(K):
            theta[k] = 1.0 / K
        for it in range(iters):
            for k in range(K):
                acc[k] = 0.0
            for j in range(ptr[d], ptr[d + 1]):
                w = w_ids[j]
                den = 0.0
                for k in range(K):
                    den += theta[k] * phiT[w, k]
                r = cnt[j] / den
                for k in range(K):
                    acc[k] += r * phiT[w, k]
            tot = 0.0
            for k in range(K):
                theta[k] = alpha + theta[k] * acc[k]
                tot += theta[k]
            for k in range(K):
                theta[k] /= tot

    @_njit(parallel=True, cache=True, fastmath=True)
    def completion(phiT, a_ptr, a_w, a_c, b_ptr, b_w, b_c, alpha, iters, out):  # pragma: no cover
        """out[d] = Σ_w n_w log Σ_k θ_dk φ_kw over the second half ``b`` of document d, θ_d
        fit on its first half ``a``."""
        D = a_ptr.shape[0] - 1
        K = phiT.shape[1]
        for d in _prange(D):
            theta = np.empty(K)
            acc = np.empty(K)
            fit_theta(phiT, a_ptr, a_w, a_c, d, alpha, iters, theta, acc)
            ll = 0.0
            for j in range(b_ptr[d], b_ptr[d + 1]):
                w = b_w[j]
                p = 0.0
                for k in range(K):
                    p += theta[k] * phiT[w, k]
                ll += b_c[j] * np.log(p)
            out[d] = ll

    @_njit(parallel=True, cache=True, fastmath=True)
    def usage(phiT, ptr, w_ids, cnt, alpha, iters, out):  # pragma: no cover
        """out[d, k] = Σ_w n_w θ_dk φ_kw / Σ_j θ_dj φ_jw for document d (θ_d fit on all its
        words): each topic's share of the document's tokens."""
        D = ptr.shape[0] - 1
        K = phiT.shape[1]
        for d in _prange(D):
            theta = np.empty(K)
            acc = np.empty(K)
            fit_theta(phiT, ptr, w_ids, cnt, d, alpha, iters, theta, acc)
            for j in range(ptr[d], ptr[d + 1]):
                w = w_ids[j]
                den = 0.0
                for k in range(K):
                    den += theta[k] * phiT[w, k]
                r = cnt[j] / den
                for k in range(K):
                    out[d, k] += r * theta[k] * phiT[w, k]
else:  # pragma: no cover
    fit_theta = completion = usage = None
