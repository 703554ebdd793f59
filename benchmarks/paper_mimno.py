#!/usr/bin/env python3
"""Sparse Gibbs-within-VB vs online VB (Mimno, Hoffman & Blei 2012) on 20 Newsgroups.

1. Quality at K = 200 (paper Fig. 2): after the same number of passes (minibatches of 100
   documents, the same seeded order), the UMass coherence of every topic (top 10 words,
   ε = 1, on the training documents: ``lda_core.evaluation.topic_quality.umass_coherence``), its mean, and
   the number of very poor topics, counted two ways: topics in the worst decile of the pooled
   per-topic coherences of all models of the run, and topics with C(k) < ``--poor`` (default
   -250, i.e. below ≈ -5.6 per word pair). Held-out document completion is reported too.
   Models: sparse Gibbs-VB with its defaults (η = 0.5, κ = 0.6, τ0 = 1000, B = 2, S = 3),
   online VB with the harness protocol (α = 0.1, η = 0.01, κ = 0.7, τ0 = 64, E-step to
   convergence) and online VB with η = 0.5 (the paper's point is partly the larger η; this
   separates the two effects), each also with the paper's baseline E-step of 5
   coordinate-ascent iterations (= B + S sweeps, §4.2: "-5iter").
2. Speed (paper §4.5, "milliseconds per 10,000 documents similar for K = 1000 and 2000"):
   seconds (wall and process CPU) per 1,000 documents of training (local + global step) at
   K = 100, 500, 1000, 2000, measured on ``--time-docs`` documents after ``--warm-docs``
   documents of warm-up training at that K (so λ^N has its working sparsity). Online VB is
   timed the same way for comparison (it grows linearly in K).

Writes benchmarks/results/paper_mimno_quality.csv, paper_mimno_topics.csv (per topic),
paper_mimno_speed.csv and paper_mimno.png.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchmarks import paper_foulds as pf  # noqa: E402


def make(kind, K, V, train, seed, threads):
    if kind == "sparse-gibbs-vb":
        from lda_core.algorithms.sparse_gibbs_vb import SparseGibbsVB
        return SparseGibbsVB(K, V, corpus_size=train.n_docs, seed=seed,
                             n_threads=threads)
    from lda_core.algorithms.online_vb import OnlineVB
    eta = 0.5 if "eta0.5" in kind else 0.01
    # "-5iter": the paper's online-VB baseline, as many coordinate-ascent steps per document
    # as the sampler makes sweeps (B + S = 5, §4.2)
    max_iter = 5 if kind.endswith("-5iter") else 100
    return OnlineVB(K, V, alpha=0.1, eta=eta, kappa=0.7, tau0=64.0, corpus_size=train.n_docs, seed=seed, n_threads=threads, max_iter=max_iter)


def train_model(kind, K, train, V, passes, seed, threads):
    algo = make(kind, K, V, train, seed, threads)
    wall = cpu = 0.0
    for _, mb in pf.minibatches(train, 100, passes, seed):
        t0, c0 = time.perf_counter(), time.process_time()
        algo.global_step(algo.local_step(mb))
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
    return algo, wall, cpu


def speed(kind, K, train, V, warm_docs, time_docs, seed, threads):
    algo = make(kind, K, V, train, seed, threads)
    it = (mb for _, mb in pf.minibatches(train, 100, 10, seed))
    done = 0
    while done < warm_docs:
        mb = next(it)
        algo.global_step(algo.local_step(mb))
        done += mb.n_docs
    wall = cpu = 0.0
    docs = 0
    while docs < time_docs:
        mb = next(it)
        t0, c0 = time.perf_counter(), time.process_time()
        algo.global_step(algo.local_step(mb))
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        docs += mb.n_docs
    rec = dict(algorithm=kind, K=K, docs_timed=docs, warm_docs=warm_docs,
               wall_s_per_1000_docs=1000 * wall / docs, cpu_s_per_1000_docs=1000 * cpu / docs)
    if hasattr(algo, "nnz"):
        rec["lambda_nnz"] = algo.nnz
        rec["lambda_density"] = algo.nnz / float(K * V)
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--K", type=int, default=200)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--poor", type=float, default=-250.0)
    ap.add_argument("--speed-K", default="100,500,1000,2000")
    ap.add_argument("--speed-vb-K", default="100,500,1000",
                    help="K values at which online VB is timed too ('' for none)")
    ap.add_argument("--warm-docs", type=int, default=3000)
    ap.add_argument("--time-docs", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--models", default="sparse-gibbs-vb,online-vb,online-vb-eta0.5,"
                                        "online-vb-5iter,online-vb-eta0.5-5iter")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--out", default=pf.RESULTS)
    ap.add_argument("--plot-only", action="store_true",
                    help="redraw paper_mimno.png from the CSV files in --out")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    def saved(name):
        """The rows of a CSV written by an earlier run ([] if there is none), so that a run
        with --skip-quality or --skip-speed still plots the other half."""
        import csv
        path = os.path.join(a.out, name)
        if not os.path.exists(path):
            return []
        return [{k: (float(v) if k in ("umass", "cpu_s_per_1000_docs") else
                     (int(v) if k in ("K", "topic") else v)) for k, v in r.items()}
                for r in csv.DictReader(open(path))]

    if a.plot_only:
        plot(saved("paper_mimno_quality.csv"), saved("paper_mimno_topics.csv"),
             saved("paper_mimno_speed.csv"), os.path.join(a.out, "paper_mimno.png"))
        return 0
    from lda_core.evaluation.metrics import document_completion
    from lda_core.evaluation.topic_quality import umass_coherence
    train, ha, hb, V = pf.load("20news")
    print("# 20news: %d training documents, V=%d" % (train.n_docs, V), flush=True)
    quality, topics = [], []
    if not a.skip_quality:
        per = {}
        for kind in a.models.split(","):
            algo, wall, cpu = train_model(kind, a.K, train, V, a.passes, a.seed, a.threads)
            phi = algo.topic_word()
            coh = umass_coherence(phi, train)
            ll = document_completion(phi, ha, hb)["ll_per_token"]
            per[kind] = np.asarray(coh["per_topic"], np.float64)
            quality.append(dict(algorithm=kind, K=a.K, passes=a.passes, train_wall_s=wall,
                                train_cpu_s=cpu, heldout_ll_per_token=ll,
                                umass_mean_sum=float(coh["mean_sum"]),
                                umass_mean_pair=float(coh["mean_pair"]),
                                umass_median=float(np.median(per[kind]))))
            print("# %-17s K=%d: UMass mean %.1f (per pair %.3f), held-out LL %.4f, "
                  "%.0f s wall / %.0f s CPU" % (kind, a.K, coh["mean_sum"], coh["mean_pair"],
                                                ll, wall, cpu), flush=True)
            for k, c in enumerate(per[kind]):
                topics.append(dict(algorithm=kind, topic=k, umass=float(c)))
        pooled = np.concatenate(list(per.values()))
        decile = float(np.percentile(pooled, 10))
        for q in quality:
            c = per[q["algorithm"]]
            q["poor_pooled_decile"] = int((c < decile).sum())
            q["pooled_decile_threshold"] = decile
            q["poor_below_%g" % a.poor] = int((c < a.poor).sum())
        pf.write_csv(os.path.join(a.out, "paper_mimno_quality.csv"), quality)
        pf.write_csv(os.path.join(a.out, "paper_mimno_topics.csv"), topics)
        print(json.dumps(quality, indent=1), flush=True)
    speed_rows = []
    if not a.skip_speed:
        vbK = [int(k) for k in a.speed_vb_K.split(",") if k]
        for K in [int(k) for k in a.speed_K.split(",")]:
            for kind in ["sparse-gibbs-vb"] + (["online-vb"] if K in vbK else []):
                rec = speed(kind, K, train, V, a.warm_docs, a.time_docs, a.seed, a.threads)
                speed_rows.append(rec)
                print("# speed %-15s K=%4d: %.2f s wall, %.2f s CPU per 1,000 documents%s"
                      % (kind, K, rec["wall_s_per_1000_docs"], rec["cpu_s_per_1000_docs"],
                         ", lambda density %.3f" % rec["lambda_density"]
                         if "lambda_density" in rec else ""), flush=True)
                pf.write_csv(os.path.join(a.out, "paper_mimno_speed.csv"), speed_rows)
        sg = {r["K"]: r for r in speed_rows if r["algorithm"] == "sparse-gibbs-vb"}
        if len(sg) >= 2:
            # the two largest K measured (K=2000 / K=1000 by default, the paper's pair)
            k1, k2 = sorted(sg)[-2:]
            r = sg[k2]["cpu_s_per_1000_docs"] / sg[k1]["cpu_s_per_1000_docs"]
            rw = sg[k2]["wall_s_per_1000_docs"] / sg[k1]["wall_s_per_1000_docs"]
            print("# sparse Gibbs-VB time ratio K=%d / K=%d: %.2f CPU, %.2f wall "
                  "(expected <= %.3g: sub-linear in K)" % (k2, k1, r, rw, k2 / float(k1)),
                  flush=True)
    if a.skip_quality:
        quality, topics = saved("paper_mimno_quality.csv"), saved("paper_mimno_topics.csv")
    if a.skip_speed:
        speed_rows = saved("paper_mimno_speed.csv")
    plot(quality, topics, speed_rows, os.path.join(a.out, "paper_mimno.png"))
    return 0


def plot(quality, topics, speed_rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    if topics:
        kinds = list(dict.fromkeys(t["algorithm"] for t in topics))
        data = [[t["umass"] for t in topics if t["algorithm"] == k] for k in kinds]
        try:
            axes[0].boxplot(data, tick_labels=kinds)      # matplotlib >= 3.9
        except TypeError:
            axes[0].boxplot(data, labels=kinds)
        axes[0].set_ylabel("UMass coherence per topic (top 10 words)")
        axes[0].set_title("20 Newsgroups, K=%d" % quality[0]["K"])
        axes[0].tick_params(axis="x", labelsize=8)
    if speed_rows:
        for kind in dict.fromkeys(r["algorithm"] for r in speed_rows):
            rr = [r for r in speed_rows if r["algorithm"] == kind]
            axes[1].plot([r["K"] for r in rr], [r["cpu_s_per_1000_docs"] for r in rr], "o-",
                         label=kind)
        axes[1].set_xlabel("K")
        axes[1].set_ylabel("CPU seconds per 1,000 documents")
        axes[1].set_title("time per document vs K")
        axes[1].legend()
        axes[1].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
