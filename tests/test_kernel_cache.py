"""A numba kernel loaded from the compile cache computes exactly what the freshly compiled one
computed.

Resume equivalence (N steps == N/2 + checkpoint + N/2, bit for bit) crosses process
boundaries: the first process usually compiles the kernels, the resumed one loads them from
the cache. With ``fastmath`` the optimiser may contract or reassociate differently in those two
paths (it did: ``_word_sstats`` gave sstats differing in the last bits between a cold and a
warm process, so a SIGKILL + resume run ended a few ULPs away from the uninterrupted one).
This test trains every algorithm a few steps in a process with an empty cache (the session's
one cold compile, which the warm-up test and the docs' warm-up samples share; compiled for
the generic x86-64 target, as the image's cache is), then again in a process that loads the
cache, and compares fingerprints of the complete state.
"""
import os

import pytest

from helpers import kernels


@pytest.mark.serial
@pytest.mark.slow
def test_cached_kernels_compute_what_fresh_ones_computed(kos_paths, cold_numba_cache, tmp_path):
    """The session's cold compile (conftest.py ``cold_numba_cache``: every kernel compiled in
    a process with an empty cache) against a new process that loads them from that cache."""
    cold = cold_numba_cache["fingerprints"]
    assert cold, "the cold compile trained nothing (no KOS?)"
    assert os.listdir(cold_numba_cache["dir"]), "the kernels were not cached"
    _, warm = kernels.run(cold_numba_cache["dir"], kos_paths[0])     # loads them from the cache
    assert sorted(cold) == sorted(warm)
    differ = [k for k in cold if cold[k] != warm[k]]
    assert not differ, "cached kernels give different results for: %s" % differ
