"""Particle filter: the tree of hash tables against naive copy-on-resample, memory and time.

Runs the particle filter (100 particles, ESS threshold 20, |R(i)| = 30, the Canini et al.
diff-3 settings) over the diff-3 stream of 20 Newsgroups (alt.atheism, rec.sport.baseball,
sci.space; ~2.8k documents, ~300k tokens), once with each store, each in its own process so
that peak RSS (``ru_maxrss``) is that store's. Both runs start from the same batch Gibbs sample
on the first 10% and the same seed, so they must give identical assignments (checked with a
hash of every particle's assignment vector). Reported per store at 25/50/100% of the stream:
CPU seconds (thread time), CPU seconds spent in resampling + rejuvenation, stored assignment
entries and their size, tree depth; and the peak RSS of the process.

    python benchmarks/pf_memory.py            # writes benchmarks/results/pf_memory.json
"""
import argparse
import hashlib
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (benchmarks/common.py)


def worker(store, data_path, particles, ess, n_rejuv, seed):
    from lda_core.algorithms.gibbs import CollapsedGibbs
    from lda_core.algorithms.particle_filter import ParticleFilter
    with open(data_path, "rb") as f:
        stream, V, K = pickle.load(f)
    D = len(stream.doc_ids)
    n_init = int(np.ceil(0.1 * D))
    init = stream.take(np.arange(n_init))
    g = CollapsedGibbs(K, V, alpha=0.1, eta=0.1, seed=seed).fit(init, sweeps=100)
    pf = ParticleFilter(K, V, alpha=0.1, eta=0.1, n_particles=particles, ess_threshold=ess,
                        n_rejuv=n_rejuv, store=store, seed=seed)
    pf.initialise(init, g.assignments)
    # warm-up compile on a copy so the timings below exclude numba compilation
    warm = ParticleFilter(K, V, alpha=0.1, eta=0.1, n_particles=4, ess_threshold=3,
                          n_rejuv=2, store=store, seed=seed)
    warm.initialise(init, g.assignments)
    warm.process(stream.take(np.arange(n_init, n_init + 5)))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    points = []
    cpu = 0.0
    cuts = np.linspace(n_init, D, 5).round().astype(int)
    for a, b in zip(cuts[:-1], cuts[1:]):
        t = time.thread_time()
        pf.process(stream.take(np.arange(a, b)))
        cpu += time.thread_time() - t
        points.append({"fraction": round((b - n_init) / (D - n_init), 3),
                       "tokens": int(pf.corpus.n_tokens), "cpu_s": cpu,
                       "resample_wall_s": pf.resample_seconds,
                       "resamples": pf.n_resamples, "entries": pf.store.n_entries(),
                       "store_mb": pf.store.nbytes() / 2 ** 20, "depth": pf.store.depth()})
    h = hashlib.sha256()
    for p in range(particles):
        h.update(np.ascontiguousarray(pf.store.full(p), np.int64).tobytes())
    return {"store": store, "points": points, "max_depth": pf.max_depth,
            "assignments_sha256": h.hexdigest(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_stream_mb": rss_before / 1024,
            "counts_mb": (pf.nwk.nbytes + pf.ndk.nbytes) / 2 ** 20}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--particles", type=int, default=100)
    ap.add_argument("--ess", type=float, default=20.0)
    ap.add_argument("--rejuv", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dataset", default="diff-3")
    ap.add_argument("--max-docs", type=int, default=0,
                    help="use N posts of the dataset, evenly spaced over its groups (smoke "
                         "tests; default: all)")
    ap.add_argument("--worker", choices=["tree", "naive"])
    ap.add_argument("--data")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "pf_memory.json"))
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a.data, a.particles, a.ess, a.rejuv, a.seed)))
        return 0
    from paper_canini import build_dataset
    batch, vocab = build_dataset(a.dataset, max_docs=a.max_docs)
    perm = np.random.default_rng(1000 + a.seed).permutation(len(batch.doc_ids))
    stream = batch.take(perm)
    K = len(set(batch.labels))
    fd, data = tempfile.mkstemp(suffix=".pkl")
    with os.fdopen(fd, "wb") as f:
        pickle.dump((stream, len(vocab), K), f)
    print("%s: %d documents, %d tokens, V=%d, K=%d; P=%d, ESS threshold %g, |R(i)|=%d"
          % (a.dataset, len(stream.doc_ids), int(stream.counts.sum()), len(vocab), K,
             a.particles, a.ess, a.rejuv), flush=True)
    res = {}
    for store in ("tree", "naive"):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", store,
                              "--data", data, "--particles", str(a.particles), "--ess",
                              str(a.ess), "--rejuv", str(a.rejuv), "--seed", str(a.seed)],
                             capture_output=True, text=True)
        if out.returncode:
            print(out.stderr[-3000:])
            raise SystemExit("worker %s failed" % store)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        res[store] = r
        for p in r["points"]:
            print("%-5s %5.0f%% of stream: %7d tokens, CPU %7.1f s (resampling+rejuvenation "
                  "%6.1f s wall), %5d resamples, %9d stored entries (%7.1f MB), depth %d"
                  % (store, 100 * p["fraction"], p["tokens"], p["cpu_s"], p["resample_wall_s"],
                     p["resamples"], p["entries"], p["store_mb"], p["depth"]), flush=True)
        print("%-5s peak RSS %.0f MB (counts %.0f MB), max depth %d"
              % (store, r["peak_rss_mb"], r["counts_mb"], r["max_depth"]), flush=True)
    os.unlink(data)
    same = res["tree"]["assignments_sha256"] == res["naive"]["assignments_sha256"]
    t, n = res["tree"]["points"][-1], res["naive"]["points"][-1]
    res["summary"] = {"identical_assignments": same,
                      "cpu_ratio_naive_over_tree": n["cpu_s"] / t["cpu_s"],
                      "store_mb_tree": t["store_mb"], "store_mb_naive": n["store_mb"],
                      "peak_rss_mb_tree": res["tree"]["peak_rss_mb"],
                      "peak_rss_mb_naive": res["naive"]["peak_rss_mb"],
                      "load_avg": os.getloadavg()[0]}
    print("identical assignments: %s; CPU naive/tree = %.2f; stored assignments %.1f MB (tree) "
          "vs %.1f MB (naive); peak RSS %.0f vs %.0f MB"
          % (same, res["summary"]["cpu_ratio_naive_over_tree"], t["store_mb"], n["store_mb"],
             res["tree"]["peak_rss_mb"], res["naive"]["peak_rss_mb"]))
    common.save_results(res, a.out, argv, os.path.basename(__file__))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
