#!/usr/bin/env python3
"""E-step throughput: our numba kernel vs gensim ``LdaModel.inference`` on the same minibatches.

Both get the same λ (a few online-VB steps on the corpus, so topics have real structure), the
same initial γ for every document, the same α, the same cap and threshold (mean absolute
change of γ_d < 1e-3); each side runs the same minibatches of real documents. Reported per K
and dtype: non-zeros (unique words of a document) processed per CPU-second — CPU seconds from
``time.process_time()``, i.e. all threads of this process — and per wall second, and our/gensim
ratios (issue 3 target: ≥ 5× per CPU-second at K=100 and K=1000). Our timing includes
computing exp(E[log β]) for the minibatch's words from the lazily scaled λ; gensim's
``expElogbeta`` is precomputed by ``sync_state`` and not timed (favouring gensim), so the
ratio without that part (timed apart on the same words) is printed too.

Documents: 20 Newsgroups as prepared by ``benchmarks/prepare_20news.py`` (the
``../shared/bench`` protocol) when present, else KOS or NIPS from ../shared/data
(``--corpus``). Usage::

    .venv/bin/python benchmarks/estep_bench.py [--corpus 20news|kos|nips] [--topics 100 1000]
        [--dtypes float32 float64] [--minibatch 256] [--batches 8] [--threads N] [--json OUT]

Timings on the shared 2-core machine are noisy; the ratios are from one run in one process,
each side's fastest of ``--rounds`` passes over the same minibatches (other jobs on the
machine only ever add time). Results go to ``benchmarks/results/estep_bench.json``.

FLOP rate (docs/algorithms.md, "The VB E-step kernel"): the fixed point's inner loop does, per
non-zero (d, w) and iteration, one dot product phinorm_dw = Σ_k t_dk B_wk and one axpy
acc_d += (n_dw / phinorm_dw) B_w, i.e. 2 multiply-adds per topic = ``4 K`` FLOPs
(:func:`flops_per_nnz_iter`); the one division per non-zero and the per-document, per-topic
exp(ψ(γ)) of each iteration are not counted (nor are the bound and the statistics, done
once per document), so the count is a lower bound on the work done. FLOPs of a run =
4 K · Σ_d iterations_d · nnz_d, divided by the CPU seconds of :func:`lda_core.algorithms.estep_vb.estep`
(the E-step given the minibatch's exp(E[log β]) rows: fixed point + bound + statistics) --
FLOPs per busy core-second -- against one core's float32 peak (:func:`cpu_peak`: clock × SIMD
lanes × FMA units × 2). ``peak_fraction_fixed_point`` leaves out the bound and the statistics
(the fixed-point kernel alone), ``peak_fraction_local_step`` divides by the whole
``local_step`` (with exp(E[log β])).

Roofline (:mod:`benchmarks.estep_roofline`, printed first and saved under ``roofline``; skip it
with ``--no-roofline``): the FMA rate a numba loop reaches on this CPU with 256-bit vectors (as
numba compiles by default) and with 512-bit vectors (a child process), and the rate of the
fixed point's two passes alone over tiles that fit L1 or only L2 -- the ceiling the E-step's
memory pattern allows, as a fraction of the same nominal peak.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import scipy.sparse as sp

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from lda_core.algorithms import estep_vb  # noqa: E402
from lda_core.docbatch import DocBatch  # noqa: E402
from lda_core.algorithms.vb_gamma_init import doc_keys, init_gamma  # noqa: E402
from lda_core.algorithms.online_vb import OnlineVB  # noqa: E402

SHARED_DATA = os.environ.get("LDABEAM_SHARED_DATA",
                             os.path.join(os.path.dirname(REPO), "shared", "data"))
NEWS20 = os.path.join(os.environ.get("LDABEAM_BENCH_CACHE",
                                     os.path.join(REPO, "benchmarks", ".cache")),
                      "20news", "bench", "train.npz")


def read_uci(path):
    with gzip.open(path, "rt") as f:
        D, W, nnz = (int(f.readline()) for _ in range(3))
        data = np.loadtxt(f, dtype=np.int64, ndmin=2)
    X = sp.csr_matrix((data[:, 2], (data[:, 0] - 1, data[:, 1] - 1)), shape=(D, W))
    return X


def load_corpus(name):
    if name == "20news":
        if not os.path.exists(NEWS20):
            raise SystemExit("%s is absent: run benchmarks/prepare_20news.py first, or pass "
                             "--corpus kos" % NEWS20)
        X = sp.load_npz(NEWS20).tocsr()
    else:
        X = read_uci(os.path.join(SHARED_DATA, "uci-bow-%s" % name, "docword.%s.txt.gz" % name))
    X = X[np.diff(X.indptr) > 0]
    return DocBatch.from_csr(X, doc_ids=["d%d" % i for i in range(X.shape[0])]), X.shape[1]


def flops_per_nnz_iter(n_topics: int) -> int:
    """FLOPs of one fixed-point iteration per non-zero: 2 multiply-adds per topic (module
    docstring)."""
    return 4 * int(n_topics)


def _cpuinfo():
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def cpu_peak(clock_ghz=None, fma_units=None, dtype="float32") -> dict:
    """This CPU's peak FLOP rate from /proc/cpuinfo: per core clock × SIMD lanes × FMA units ×
    2 (a fused multiply-add is 2 FLOPs), and × physical cores for the machine. Lanes from the
    widest vector flag (avx512f: 512 bits, avx/avx2: 256, else 128) and the dtype; the clock
    is the largest "cpu MHz" (in a VM the nominal clock -- turbo, if any, is invisible and
    would make the true peak higher); FMA units are not in the flags: 2 (every AVX2/AVX-512
    Xeon core since Haswell/Skylake-SP has two) unless ``fma_units`` says otherwise."""
    info = _cpuinfo()
    flags, mhz, cores = set(), [], set()
    phys = core = None
    for line in info.splitlines():
        key, _, val = line.partition(":")
        key, val = key.strip(), val.strip()
        if key == "flags" and not flags:
            flags = set(val.split())
        elif key == "cpu MHz":
            mhz.append(float(val))
        elif key == "physical id":
            phys = val
        elif key == "core id":
            core = val
            cores.add((phys, core))
    bits = 512 if "avx512f" in flags else 256 if "avx" in flags else 128
    lanes = bits // (8 * np.dtype(dtype).itemsize)
    fma = fma_units if fma_units is not None else (2 if "fma" in flags else 1)
    per_fma = 2 if "fma" in flags else 1       # without FMA: a multiply and an add, 1 each
    ghz = clock_ghz if clock_ghz is not None else (max(mhz) / 1000.0 if mhz else float("nan"))
    n_cores = len(cores) or os.cpu_count() or 1
    core_peak = ghz * 1e9 * lanes * fma * per_fma
    return {"clock_ghz": ghz, "simd_bits": bits, "lanes": lanes, "fma_units": fma,
            "cores": n_cores, "core_peak_flops_per_s": core_peak,
            "machine_peak_flops_per_s": core_peak * n_cores}


def gensim_model(m, dtype):
    import gensim
    g = gensim.models.LdaModel(num_topics=m.n_topics,
                               id2word={i: str(i) for i in range(m.n_words)},
                               alpha=m.alpha.copy(), eta=m.eta, iterations=m.max_iter,
                               gamma_threshold=m.tol, dtype=np.dtype(dtype))
    g.state.sstats = (m.lambda_() - m.eta).astype(dtype)
    g.sync_state()
    return g


class FixedDraw:
    """Stands in for gensim's random_state so it starts from our γ."""

    def __init__(self):
        self.g0 = None

    def gamma(self, shape, scale, size):
        assert self.g0.shape == tuple(size)
        return self.g0


def _time_setting(m, bench, g0s, dtype, V, K, n_rounds):
    """Time gensim's and our E-step on the same minibatches and initial γ (fastest of
    ``n_rounds`` per side): (timings, FLOPs, our iterations, max relative sstats difference)."""
    m.dtype = dtype
    m.local_step(bench[0], gamma0=g0s[0])           # compile / load the cache
    # the E-step alone (given exp(E[log beta]) of the minibatch's words), as local_step
    # calls it; lids and B are made outside the timed part
    direct = []
    for b in bench:
        uniq, lids = estep_vb.local_ids(b.word_ids, V)
        direct.append((lids, m.exp_elog_beta(uniq)))
    flops = 0
    g = gensim_model(m, dtype)
    draw = FixedDraw()
    g.random_state = draw
    maxrel = 0.0
    its_o = 0
    chunks = [[list(zip(b.doc(i)[0].tolist(), b.doc(i)[1].tolist()))
               for i in range(b.n_docs)] for b in bench]
    rounds = []
    for rnd in range(n_rounds):
        # the same minibatches, ours and gensim's alternating; per side the fastest
        # round is kept (the machine is shared: other jobs only ever add time)
        t = {"ours_cpu": 0.0, "ours_wall": 0.0, "gensim_cpu": 0.0,
             "gensim_wall": 0.0, "eb_cpu": 0.0, "estep_cpu": 0.0, "estep_wall": 0.0,
             "fixed_point": 0.0, "bound": 0.0, "statistics": 0.0}
        for b, g0, chunk, (lids, eb) in zip(bench, g0s, chunks, direct):
            draw.g0 = g0.astype(dtype)
            c0, w0 = time.process_time(), time.perf_counter()
            _, gs = g.inference(chunk, collect_sstats=True)
            t["gensim_cpu"] += time.process_time() - c0
            t["gensim_wall"] += time.perf_counter() - w0
            c0, w0 = time.process_time(), time.perf_counter()
            st = m.local_step(b, gamma0=g0)
            t["ours_cpu"] += time.process_time() - c0
            t["ours_wall"] += time.perf_counter() - w0
            c0 = time.process_time()          # its exp(E[log beta]) part, timed apart
            m.exp_elog_beta(np.unique(b.word_ids))
            t["eb_cpu"] += time.process_time() - c0
            c0, w0 = time.process_time(), time.perf_counter()
            res = estep_vb.estep(b.indptr, lids, b.counts, eb, m.alpha, g0, m.max_iter,
                                 m.tol, timings=t)
            t["estep_cpu"] += time.process_time() - c0
            t["estep_wall"] += time.perf_counter() - w0
            if rnd == 0:
                flops += flops_per_nnz_iter(K) * int(
                    np.dot(res.iterations.astype(np.int64), np.diff(b.indptr)))
                ours = np.zeros((K, V))
                ours[:, st.word_ids] = st.sstats.T
                maxrel = max(maxrel,
                             float(np.abs(ours - gs).max() / np.abs(gs).max()))
                its_o += st.n_iterations
        rounds.append(t)
    t = {k: min(r[k] for r in rounds) for k in rounds[0]}
    return t, flops, its_o, maxrel


def _record(args, K, dtype, bench, t, flops, its_o, maxrel, p):
    """The result row of one (K, dtype) setting, printed; ``p`` is the dtype's peak."""
    nnz = sum(b.nnz for b in bench)
    r = {"corpus": args.corpus, "K": K, "dtype": dtype, "nnz": nnz,
         "ours_nnz_per_cpu_s": nnz / t["ours_cpu"],
         "gensim_nnz_per_cpu_s": nnz / t["gensim_cpu"],
         "ratio_cpu": t["gensim_cpu"] / t["ours_cpu"],
         "ratio_wall": t["gensim_wall"] / t["ours_wall"],
         "ratio_cpu_without_elogbeta": t["gensim_cpu"] / max(1e-9, t["ours_cpu"]
                                                             - t["eb_cpu"]),
         "ours_cpu_s": t["ours_cpu"], "ours_wall_s": t["ours_wall"],
         "gensim_cpu_s": t["gensim_cpu"], "gensim_wall_s": t["gensim_wall"],
         "mean_iterations": its_o / sum(b.n_docs for b in bench),
         "sstats_max_rel_diff": maxrel,
         "docs": sum(b.n_docs for b in bench), "tokens": sum(b.n_tokens for b in bench),
         "flops_per_nnz_iter": flops_per_nnz_iter(K), "flops": flops,
         "nnz_weighted_iterations": flops / flops_per_nnz_iter(K) / nnz,
         "estep_cpu_s": t["estep_cpu"], "estep_wall_s": t["estep_wall"],
         "fixed_point_cpu_s": t["fixed_point"], "bound_cpu_s": t["bound"],
         "statistics_cpu_s": t["statistics"]}
    r.update({"flops_per_s": flops / t["estep_cpu"],
              "peak_flops_per_s": p["core_peak_flops_per_s"],
              "machine_peak_flops_per_s": p["machine_peak_flops_per_s"],
              "peak": p})
    r["peak_fraction"] = r["flops_per_s"] / r["peak_flops_per_s"]
    r["peak_fraction_fixed_point"] = (flops / t["fixed_point"]
                                      / r["peak_flops_per_s"])
    r["peak_fraction_local_step"] = flops / t["ours_cpu"] / r["peak_flops_per_s"]
    r["peak_fraction_wall_machine"] = (flops / t["estep_wall"]
                                       / r["machine_peak_flops_per_s"])
    print("K=%-5d %-7s ours %9.0f nnz/CPU-s (%.2f CPU-s, %.2f wall-s)  gensim %9.0f "
          "nnz/CPU-s (%.2f CPU-s, %.2f wall-s)  ratio CPU %.2fx  wall %.2fx  "
          "(CPU without our exp(E[log beta]) part, %.2f s: %.2fx)  "
          "[%.1f it/doc, sstats max rel diff %.1e]"
          % (K, dtype, r["ours_nnz_per_cpu_s"], t["ours_cpu"], t["ours_wall"],
             r["gensim_nnz_per_cpu_s"], t["gensim_cpu"], t["gensim_wall"],
             r["ratio_cpu"], r["ratio_wall"], t["eb_cpu"],
             r["ratio_cpu_without_elogbeta"], r["mean_iterations"], maxrel), flush=True)
    print("K=%-5d %-7s E-step %.1f GFLOP per CPU-s (%d FLOPs per non-zero and "
          "iteration, %.1f iterations per non-zero) = %.1f%% of one core's peak; "
          "fixed point alone %.1f%%, whole local_step %.1f%%; wall vs %d cores' peak "
          "%.1f%%" % (K, dtype, r["flops_per_s"] / 1e9, r["flops_per_nnz_iter"],
                      r["nnz_weighted_iterations"], 100 * r["peak_fraction"],
                      100 * r["peak_fraction_fixed_point"],
                      100 * r["peak_fraction_local_step"], p["cores"],
                      100 * r["peak_fraction_wall_machine"]), flush=True)
    return r


def run(args):
    batch, V = load_corpus(args.corpus)
    S = args.minibatch
    rng = np.random.default_rng(0)
    order = rng.permutation(batch.n_docs)
    n_train = min(args.train_steps * S, batch.n_docs // 2)
    train = batch.take(order[:n_train])
    pool = order[n_train:]
    bench = [batch.take(np.sort(pool[i * S:(i + 1) * S])) for i in range(args.batches)
             if (i + 1) * S <= len(pool)]
    nnz = sum(b.nnz for b in bench)
    peak = {dt: cpu_peak(args.clock_ghz, args.fma_units, dt) for dt in args.dtypes}
    pk = peak[args.dtypes[0]]
    print("float%d peak per core %.1f GFLOP/s (%.3f GHz x %d lanes x %d FMA units x 2), x %d "
          "cores = %.1f GFLOP/s" % (8 * np.dtype(args.dtypes[0]).itemsize,
                                    pk["core_peak_flops_per_s"] / 1e9, pk["clock_ghz"],
                                    pk["lanes"], pk["fma_units"], pk["cores"],
                                    pk["machine_peak_flops_per_s"] / 1e9), flush=True)
    print("corpus %s: %d documents, V=%d; %d minibatches of %d documents, %d non-zeros, "
          "%d tokens; threads=%s" % (args.corpus, batch.n_docs, V, len(bench), S, nnz,
                                     sum(b.n_tokens for b in bench),
                                     args.threads or "numba default"),
          flush=True)
    results = []
    if args.roofline:
        from benchmarks.estep_roofline import roofline
        args.roofline_result = roofline(
            cpu_peak(args.clock_ghz, args.fma_units, "float32")["core_peak_flops_per_s"],
            seconds=args.roofline_seconds)
    for K in args.topics:
        m = OnlineVB(K, V, alpha=0.1, eta=0.01, corpus_size=batch.n_docs, dtype="float32", n_threads=args.threads, max_iter=args.max_iter,
                     tol=args.tol)
        for i in range(0, n_train, S):        # a λ with real structure
            m.global_step(m.local_step(train.take(range(i, min(i + S, n_train)))))
        g0s = [init_gamma(doc_keys(b.doc_ids, 0, 0), K) for b in bench]
        for dtype in args.dtypes:
            t, flops, its_o, maxrel = _time_setting(m, bench, g0s, dtype, V, K, args.rounds)
            results.append(_record(args, K, dtype, bench, t, flops, its_o, maxrel,
                                   peak[dtype]))
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=None, choices=["20news", "kos", "nips"],
                   help="default: 20news if prepared, else kos")
    p.add_argument("--topics", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--dtypes", nargs="+", default=["float32", "float64"],
                   choices=["float32", "float64"])
    p.add_argument("--minibatch", type=int, default=256)
    p.add_argument("--batches", type=int, default=8, help="minibatches timed per setting")
    p.add_argument("--train-steps", type=int, default=4,
                   help="online-VB steps that make the shared λ")
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--clock-ghz", type=float, default=None,
                   help="clock for the peak FLOP rate (default: the largest 'cpu MHz')")
    p.add_argument("--fma-units", type=int, default=None,
                   help="FMA units per core for the peak (default 2 on an FMA CPU)")
    p.add_argument("--rounds", type=int, default=3,
                   help="timing rounds over the same minibatches; the fastest round of each "
                        "side counts")
    p.add_argument("--no-roofline", dest="roofline", action="store_false",
                   help="skip the roofline measurement (benchmarks/estep_roofline.py)")
    p.add_argument("--roofline-seconds", type=float, default=0.3,
                   help="length of one timed repetition of each roofline measurement")
    p.add_argument("--json", default=os.path.join(REPO, "benchmarks", "results",
                                                  "estep_bench.json"),
                   help="write the results here (default: benchmarks/results/estep_bench.json)")
    args = p.parse_args(argv)
    if args.corpus is None:
        args.corpus = "20news" if os.path.exists(NEWS20) else "kos"
    res = run(args)
    if args.json:
        from benchmarks import common
        common.save_results({"rounds": args.rounds, "threads": args.threads or "numba default",
                             "roofline": getattr(args, "roofline_result", None),
                             "results": res}, args.json, argv, os.path.basename(__file__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
