"""The benchmark harness of ../shared/bench as a module, and topic-like rows to evaluate."""
import importlib.util
import os

import numpy as np
import pytest

from helpers.paths import HARNESS


def bench_peers():
    """../shared/bench/bench_peers.py imported as a module (skip if absent)."""
    if not os.path.exists(HARNESS):
        pytest.skip("benchmark harness %s is absent" % HARNESS)
    spec = importlib.util.spec_from_file_location("bench_peers", HARNESS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fit_phi(X, K, seed=0, iters=5, eta=0.01):
    """Topic-like rows by a few hard-EM steps of a multinomial mixture on the documents."""
    import scipy.sparse as sp
    rng = np.random.RandomState(seed)
    z = rng.randint(0, K, X.shape[0])
    for _ in range(iters):
        Z = sp.csr_matrix((np.ones(len(z)), (z, np.arange(len(z)))), shape=(K, X.shape[0]))
        phi = np.asarray((Z @ X).todense()) + eta
        phi /= phi.sum(1, keepdims=True)
        z = np.asarray(X @ np.log(phi).T).argmax(1)
    return phi
