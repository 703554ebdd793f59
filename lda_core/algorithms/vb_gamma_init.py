"""The E-step's initial γ: Gamma(100, 1/100) draws (gensim's initialisation) from a
counter-based generator keyed per document, so the draws do not depend on how documents are
split across workers or threads.

:func:`doc_keys` hashes (salt, seed, step, document id) with blake2b into one 64-bit key per
document; :func:`init_gamma` draws row d from the stream of ``keys[d]`` alone (splitmix64 +
Marsaglia–Tsang with Box–Muller normals), documents in parallel.
"""
from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np

from lda_core.algorithms import numba_config

numba_config.prefer_passive_wait()     # before numba starts its threads
from numba import njit, prange  # noqa: E402

_U64_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_U64_M1 = np.uint64(0xBF58476D1CE4E5B9)
_U64_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
GAMMA_INIT_SHAPE = 100.0           # gensim: random_state.gamma(100., 1. / 100., ...)
GAMMA_INIT_SCALE = 1.0 / 100.0


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
