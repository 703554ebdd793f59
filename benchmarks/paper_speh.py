#!/usr/bin/env python3
"""Collapsed Gibbs vs batch VB vs online VB on the same corpus (Špeh et al., "A comparison of
algorithms for LDA", the review paper of issue 6).

The paper trains the three algorithms on growing Wikipedia training sets (10k ... 80k
documents), K = 100, α = β = 0.01, and reports the training time (its Fig. 3) and the
perplexity on held-out documents (its Fig. 4) against the number of training documents. Its
findings: online VB is by far the fastest; batch VB and collapsed Gibbs take similar time
(VB converged every time, Gibbs never met its convergence criterion); online VB's perplexity is
worse than the other two, "but in practice still gives reasonably good results".

Here (no Wikipedia-sized corpus offline): 20 Newsgroups prepared as in ../shared/bench
(``benchmarks/prepare_20news.py``: 17,784 training documents, V = 29,403, the harness's 1,000
held-out documents split in halves), training sets of the first N documents of a fixed random
permutation (``--sizes``, default 2000, 4000, 8000 and all 17,784), K = 100, α = η = 0.01:

* online VB: one pass, S = 256, κ = 0.7, τ0 = 64 (the harness protocol), float32 E-step;
* batch VB: ``BatchVB.fit`` until the relative ELBO change is below 1e-5 or ``--vb-passes``
  passes (default 50); the number of passes and whether it converged are recorded;
* collapsed Gibbs: ``--sweeps`` sweeps (default 300; the paper ran 1000 without converging),
  φ averaged over the sweeps after the first half (burn-in), AD-LDA on 2 threads.

Every model is judged by the same evaluator (``lda_core.evaluation.metrics.document_completion``, the
harness's protocol: θ fit on one half of each held-out document, log-likelihood per token of
the other half; perplexity = exp(−that)), and the VB models also by the per-word bound of
Hoffman et al. eq. 16 (the paper's perplexity bound) on the whole held-out documents. Training
seconds exclude evaluation. Writes ``benchmarks/results/paper_speh.csv`` and
``paper_speh.png`` (time and perplexity against training documents, as the paper's Figs. 3-4).

    python benchmarks/paper_speh.py [--sizes 2000,4000,8000,0] [--sweeps 300] [--vb-passes 50]
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchmarks import common  # noqa: E402

RESULTS = os.path.join(HERE, "results")
ALPHA = ETA = 0.01            # the paper's α = β = 0.01
K = 100
FIELDS = ["algorithm", "train_docs", "train_tokens", "train_wall_s", "train_cpu_s",
          "completion_ll_per_token", "completion_perplexity", "per_word_bound",
          "bound_perplexity", "passes_or_sweeps", "converged"]


def _load():
    from benchmarks.paper_foulds import load
    return load("20news")


def _evaluate(algo, a, b, whole):
    from lda_core.evaluation.metrics import document_completion
    ll = float(document_completion(algo.topic_word(), a, b, alpha=ALPHA)["ll_per_token"])
    bound = float(algo.per_word_bound(whole)) if hasattr(algo, "per_word_bound") else None
    return ll, bound


def train_online_vb(train, V, seed, threads):
    from lda_core.algorithms.online_vb import OnlineVB
    algo = OnlineVB(K, V, alpha=ALPHA, eta=ETA, kappa=common.KAPPA, tau0=common.TAU0,
                    corpus_size=train.n_docs, seed=seed,
                    n_threads=threads)
    perm = np.random.default_rng([seed, 0]).permutation(train.n_docs)
    for s in range(0, train.n_docs, common.BATCH):
        algo.global_step(algo.local_step(train.take(np.sort(perm[s:s + common.BATCH]))))
    return algo, 1, None


def train_batch_vb(train, V, seed, threads, max_passes):
    from lda_core.algorithms.online_vb import BatchVB
    from lda_core.training.in_memory import fit_batch_vb
    algo = BatchVB(K, V, alpha=ALPHA, eta=ETA, corpus_size=train.n_docs, seed=seed,
                   n_threads=threads)
    chunks = [train.take(range(s, min(train.n_docs, s + 4096)))
              for s in range(0, train.n_docs, 4096)]
    res = fit_batch_vb(algo, chunks, max_passes=max_passes, rel_tol=1e-5)
    return algo, res["passes"], bool(res["converged"])


def train_gibbs(train, V, seed, sweeps):
    from lda_core.algorithms.gibbs import CollapsedGibbs
    algo = CollapsedGibbs(K, V, alpha=ALPHA, eta=ETA, n_parts=2, seed=seed,
                          burn_in=sweeps // 2)
    algo.fit(train, sweeps=sweeps)
    return algo, sweeps, None


def run(args):
    train_all, a, b, V = _load()
    whole = _concat_halves(a, b)
    perm = np.random.default_rng(args.seed).permutation(train_all.n_docs)
    sizes = [train_all.n_docs if s in (0, -1) or s > train_all.n_docs else s
             for s in args.sizes]
    # warm-up: numba loads (or compiles) each algorithm's kernels on first use, not timed
    tiny = train_all.take(range(min(200, train_all.n_docs)))
    train_online_vb(tiny, V, args.seed, args.threads)
    train_batch_vb(tiny, V, args.seed, args.threads, 1)
    train_gibbs(tiny, V, args.seed, 2)
    rows = []
    for n in sizes:
        train = train_all.take(np.sort(perm[:n]))
        for name in args.algorithms:
            c0, w0 = time.process_time(), time.perf_counter()
            if name == "online-vb":
                algo, passes, conv = train_online_vb(train, V, args.seed, args.threads)
            elif name == "batch-vb":
                algo, passes, conv = train_batch_vb(train, V, args.seed, args.threads,
                                                    args.vb_passes)
            else:
                algo, passes, conv = train_gibbs(train, V, args.seed, args.sweeps)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            ll, bound = _evaluate(algo, a, b, whole)
            row = {"algorithm": name, "train_docs": n, "train_tokens": int(train.n_tokens),
                   "train_wall_s": round(wall, 3), "train_cpu_s": round(cpu, 3),
                   "completion_ll_per_token": round(ll, 5),
                   "completion_perplexity": round(math.exp(-ll), 2),
                   "per_word_bound": None if bound is None else round(bound, 5),
                   "bound_perplexity": None if bound is None else round(math.exp(-bound), 2),
                   "passes_or_sweeps": passes, "converged": conv}
            rows.append(row)
            print("%-10s N=%6d  %8.1f s wall %8.1f s CPU  completion LL/token %.4f "
                  "(perplexity %.0f)%s  [%s %d%s]"
                  % (name, n, wall, cpu, ll, math.exp(-ll),
                     "" if bound is None else "  bound %.4f" % bound,
                     "sweeps" if name == "gibbs" else "passes", passes,
                     "" if conv is None else (", converged" if conv else ", not converged")),
                  flush=True)
    return rows


def _concat_halves(a, b):
    """The held-out documents whole (both halves' counts summed), for the per-word bound."""
    import scipy.sparse as sp
    from lda_core.docbatch import DocBatch
    n = max(a.max_word_id(), b.max_word_id()) + 1
    X = a.to_csr(n) + b.to_csr(n)
    return DocBatch.from_csr(X, doc_ids=list(a.doc_ids))


def summarize(rows):
    """The paper's findings, checked on these rows (per training size)."""
    out = []
    for n in sorted({r["train_docs"] for r in rows}):
        by = {r["algorithm"]: r for r in rows if r["train_docs"] == n}
        if {"online-vb", "batch-vb", "gibbs"} <= set(by):
            o, v, g = by["online-vb"], by["batch-vb"], by["gibbs"]
            out.append("N=%d: online VB %.1fx faster than batch VB and %.1fx faster than Gibbs; "
                       "completion LL/token online %.4f, batch VB %.4f, Gibbs %.4f"
                       % (n, v["train_wall_s"] / o["train_wall_s"],
                          g["train_wall_s"] / o["train_wall_s"], o["completion_ll_per_token"],
                          v["completion_ll_per_token"], g["completion_ll_per_token"]))
    return out


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, style in (("online-vb", "o-"), ("batch-vb", "s-"), ("gibbs", "^-")):
        rr = sorted((r for r in rows if r["algorithm"] == name), key=lambda r: r["train_docs"])
        if not rr:
            continue
        x = [r["train_docs"] for r in rr]
        ax1.plot(x, [r["train_wall_s"] for r in rr], style, label=name)
        ax2.plot(x, [r["completion_perplexity"] for r in rr], style, label=name)
    ax1.set_yscale("log")
    ax1.set_xlabel("training documents")
    ax1.set_ylabel("training time (s, wall)")
    ax1.set_title("time (cf. Špeh et al. Fig. 3)")
    ax2.set_xlabel("training documents")
    ax2.set_ylabel("held-out perplexity (document completion)")
    ax2.set_title("perplexity (cf. Fig. 4)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("20 Newsgroups, K = 100, α = η = 0.01")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="2000,4000,8000,0",
                   help="training-set sizes (0: all training documents)")
    p.add_argument("--algorithms", default="online-vb,batch-vb,gibbs")
    p.add_argument("--sweeps", type=int, default=300, help="collapsed Gibbs sweeps")
    p.add_argument("--vb-passes", type=int, default=50, help="batch VB pass cap")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=RESULTS, help="folder for paper_speh.csv / .png")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.algorithms = [s.strip() for s in args.algorithms.split(",") if s.strip()]
    unknown = set(args.algorithms) - {"online-vb", "batch-vb", "gibbs"}
    if unknown:
        raise SystemExit("unknown algorithm(s): %s" % ", ".join(sorted(unknown)))
    rows = run(args)
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "paper_speh.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    png = os.path.join(args.out, "paper_speh.png")
    plot(rows, png)
    print()
    for line in summarize(rows):
        print(line)
    print("wrote %s and %s" % (csv_path, png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
