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

        Words are taken eight at a time: their eight denominators are independent dot
        products (one pass over θ), and ``acc`` is read and written once per eight words
        instead of once per word, adding the eight terms in word order. The remaining words
        go one at a time."""
        K = phiT.shape[1]
        s, e = ptr[d], ptr[d + 1]
        for k in range(K):
            theta[k] = 1.0 / K
        for it in range(iters):
            for k in range(K):
                acc[k] = 0.0
            j = s
            while j + 8 <= e:
                p0, p1 = phiT[w_ids[j]], phiT[w_ids[j + 1]]
                p2, p3 = phiT[w_ids[j + 2]], phiT[w_ids[j + 3]]
                p4, p5 = phiT[w_ids[j + 4]], phiT[w_ids[j + 5]]
                p6, p7 = phiT[w_ids[j + 6]], phiT[w_ids[j + 7]]
                d0 = d1 = d2 = d3 = d4 = d5 = d6 = d7 = 0.0
                for k in range(K):
                    t = theta[k]
                    d0 += t * p0[k]
                    d1 += t * p1[k]
                    d2 += t * p2[k]
                    d3 += t * p3[k]
                    d4 += t * p4[k]
                    d5 += t * p5[k]
                    d6 += t * p6[k]
                    d7 += t * p7[k]
                r0, r1, r2, r3 = cnt[j] / d0, cnt[j + 1] / d1, cnt[j + 2] / d2, cnt[j + 3] / d3
                r4, r5, r6, r7 = (cnt[j + 4] / d4, cnt[j + 5] / d5, cnt[j + 6] / d6,
                                  cnt[j + 7] / d7)
                for k in range(K):
                    acc[k] = (acc[k] + r0 * p0[k] + r1 * p1[k] + r2 * p2[k] + r3 * p3[k]
                              + r4 * p4[k] + r5 * p5[k] + r6 * p6[k] + r7 * p7[k])
                j += 8
            while j < e:
                p0 = phiT[w_ids[j]]
                d0 = 0.0
                for k in range(K):
                    d0 += theta[k] * p0[k]
                r0 = cnt[j] / d0
                for k in range(K):
                    acc[k] += r0 * p0[k]
                j += 1
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
