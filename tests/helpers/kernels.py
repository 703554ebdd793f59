"""The numba kernels compiled cold, once per test session, and what they compute.

``python kernels.py DOCWORD [--warmup]`` (a new process: numba reads ``NUMBA_CACHE_DIR`` and
``NUMBA_CPU_NAME`` at import) trains every algorithm a few steps on the first 240 documents of
DOCWORD (UCI KOS; "": none) and prints, as its last line, the sha256 of every array of each final state
and of each inference (:func:`train_all`). With ``--warmup`` it first runs the image's warm-up
(``templates/dataflow/warmup.py``, every local/global-step algorithm) as the Dockerfile and the
docs run it, printing its lines. Run with an empty ``NUMBA_CACHE_DIR`` this is the suite's one
cold compile (``cold_numba_cache`` in conftest.py): the warm-up test, the cached-kernel test
and the docs' warm-up samples all use its cache and its output.
"""
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WARMUP = os.path.join(REPO, "templates", "dataflow", "warmup.py")


def fingerprint(obj) -> dict:
    """The sha256 of every array of ``obj.to_state()``."""
    st = obj.to_state()
    return {k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
            for k, v in sorted(st.arrays.items())}


def train_all(docword: str) -> dict:
    """Fingerprints of every algorithm trained a few steps on 240 KOS documents (K = 10, and
    K = 100 for float32 online VB: the vectorised loops then run many full lanes)."""
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
        "online-vb-f32": OnlineVB(10, V, corpus_size=240, seed=1,
                                  dtype="float32"),
        "online-vb-f64": OnlineVB(10, V, corpus_size=240, seed=1,
                                  dtype="float64"),
        "online-vb-f32-K100": OnlineVB(100, V, corpus_size=240, seed=1,
                                       dtype="float32"),
        "scvb0": SCVB0(10, V, seed=1),
        "sparse-gibbs-vb": SparseGibbsVB(10, V, corpus_size=240, seed=1),
    }
    for name, algo in stochastic.items():
        for b in batches:
            algo.global_step(algo.local_step(b))
        out[name] = fingerprint(algo)
        out[name + ":infer"] = hashlib.sha256(algo.infer(batches[0]).tobytes()).hexdigest()
    g = CollapsedGibbs(10, V, seed=1)
    g.fit(DocBatch.concat(batches[:2]), sweeps=3)
    out["gibbs"] = fingerprint(g)
    ig = IncrementalGibbs(10, V, n_rejuv=4, seed=1)
    pf = ParticleFilter(10, V, n_particles=8, ess_threshold=4, n_rejuv=5, seed=1,
                        init_docs=20)
    for b in batches[:2]:
        ig.process(b)
        pf.process(b)
    out["incremental-gibbs"] = fingerprint(ig)
    out["particle-filter"] = fingerprint(pf)
    return out


def run(cache_dir: str, docword: str, warmup: bool = False, timeout: float = 1800):
    """``kernels.py DOCWORD [--warmup]`` in a new process with ``NUMBA_CACHE_DIR=cache_dir``
    and ``NUMBA_CPU_NAME=generic`` (as the image compiles): (stdout, the fingerprints)."""
    import subprocess
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, NUMBA_CPU_NAME="generic")
    env["PYTHONPATH"] = os.pathsep.join([REPO, os.path.dirname(HERE)] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    r = subprocess.run([sys.executable, os.path.abspath(__file__), docword]
                       + (["--warmup"] if warmup else []), cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout, json.loads(r.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))        # tests/: the helpers package
    if "--warmup" in sys.argv[2:]:
        import runpy
        sys.argv, argv = [WARMUP], sys.argv
        try:
            runpy.run_path(WARMUP, run_name="__main__")
        except SystemExit as e:
            if e.code:
                raise
        sys.argv = argv
        sys.stdout.flush()
    print(json.dumps(train_all(sys.argv[1]) if sys.argv[1] else {}))
