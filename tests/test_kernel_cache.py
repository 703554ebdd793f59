"""A numba kernel loaded from the compile cache computes exactly what the freshly compiled one
computed.

Resume equivalence (N steps == N/2 + checkpoint + N/2, bit for bit) crosses process
boundaries: the first process usually compiles the kernels, the resumed one loads them from
the cache. With ``fastmath`` the optimiser may contract or reassociate differently in those two
paths (it did: ``_word_sstats`` gave sstats differing in the last bits between a cold and a
warm process, so a SIGKILL + resume run ended a few ULPs away from the uninterrupted one).
This test trains every algorithm a few steps in a process with an empty cache, then again in a
process that loads the cache, and compares fingerprints of the complete state.
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fingerprint(obj) -> dict:
    st = obj.to_state()
    return {k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
            for k, v in sorted(st.arrays.items())}


def _train_all(docword: str) -> dict:
    from lda_core.docbatch import DocBatch
    from lda_core.algorithms.gibbs import CollapsedGibbs
    from lda_core.algorithms.online_samplers import IncrementalGibbs
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.algorithms.particle_filter import ParticleFilter
    from lda_core.algorithms.scvb0 import SCVB0
    from lda_core.algorithms.sparse_gibbs_vb import SparseGibbsVB

    from helpers.uci import uci_rows
    rows, V = uci_rows(docword, 240)
    batches = [DocBatch.from_rows(rows[i:i + 60], doc_ids=["kos%d" % j
                                                           for j in range(i, i + 60)])
               for i in range(0, 240, 60)]
    out = {}
    stochastic = {
        "online-vb-f32": OnlineVB(10, V, batch_size=60, corpus_size=240, seed=1,
                                  dtype="float32"),
        "online-vb-f64": OnlineVB(10, V, batch_size=60, corpus_size=240, seed=1,
                                  dtype="float64"),
        # K = 100: the kernels' vectorised loops run many full lanes (K = 10: one)
        "online-vb-f32-K100": OnlineVB(100, V, batch_size=60, corpus_size=240, seed=1,
                                       dtype="float32"),
        "scvb0": SCVB0(10, V, batch_size=60, seed=1),
        "sparse-gibbs-vb": SparseGibbsVB(10, V, batch_size=60, corpus_size=240, seed=1),
    }
    for name, algo in stochastic.items():
        for b in batches:
            algo.global_step(algo.local_step(b))
        out[name] = _fingerprint(algo)
        out[name + ":infer"] = hashlib.sha256(algo.infer(batches[0]).tobytes()).hexdigest()
    g = CollapsedGibbs(10, V, seed=1)
    g.fit(DocBatch.concat(batches[:2]), sweeps=3)
    out["gibbs"] = _fingerprint(g)
    ig = IncrementalGibbs(10, V, n_rejuv=4, seed=1)
    pf = ParticleFilter(10, V, n_particles=8, ess_threshold=4, n_rejuv=5, seed=1,
                        init_docs=20)
    for b in batches[:2]:
        ig.process(b)
        pf.process(b)
    out["incremental-gibbs"] = _fingerprint(ig)
    out["particle-filter"] = _fingerprint(pf)
    return out


def _run(cache_dir: str, docword: str) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO, NUMBA_CACHE_DIR=cache_dir)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), docword], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_cached_kernels_compute_what_fresh_ones_computed(kos_paths, tmp_path):
    cache = str(tmp_path / "numba-cache")
    cold = _run(cache, kos_paths[0])           # compiles every kernel and fills the cache
    assert os.listdir(cache), "the kernels were not cached"
    warm = _run(cache, kos_paths[0])           # loads them from the cache
    assert sorted(cold) == sorted(warm)
    differ = [k for k in cold if cold[k] != warm[k]]
    assert not differ, "cached kernels give different results for: %s" % differ


if __name__ == "__main__":
    print(json.dumps(_train_all(sys.argv[1])))
