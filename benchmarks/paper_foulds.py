#!/usr/bin/env python3
"""SCVB0 vs online VB: held-out log-likelihood per token against training time (Foulds et al.
2013, Figs. 1-3), on 20 Newsgroups, KOS and NIPS.

Protocol (the paper's settings where it gives them, ../shared/bench for the rest):
- data: the harness's fixed split (``bench_peers.py prepare``, seed 0; 20 Newsgroups as in
  ../shared/bench/README.md via benchmarks/prepare_20news.py), K = 100, minibatches of 100
  documents in a seeded random order, several passes;
- SCVB0: α = 0.1, η = 0.01, one burn-in pass, topic schedule 10/(1000+t)^0.9, document
  schedule 1/(10+t)^0.9, C = training tokens (the paper's settings);
- online VB ("SVB" in the paper): α = 0.1, η = 0.01 and, as the paper also tried, the +0.5
  offsets α = 0.6, η = 0.51; schedule (64 + t)^-0.7 (the harness protocol: the paper's
  s/(τ+t)^κ with s = 10 cannot be expressed by OnlineVB's (τ0+t)^-κ), D = training documents;
- score: document completion (``lda_core.evaluation.metrics.document_completion``, the harness's
  evaluator, α = 0.1, 100 iterations) on the held-out halves, every ``--eval-points`` along
  the run; the clock (wall and process CPU) counts training only, evaluation is excluded.

Also measured on the same minibatches: documents per CPU-second of the SCVB0 E-step vs the
online-VB E-step (``local_step`` only), K = 100.

Writes benchmarks/results/paper_foulds_curves.csv (one row per evaluation),
paper_foulds_summary.csv (per corpus: final scores, time for SCVB0 to reach online VB's best
final score, ratios) and paper_foulds.png. Expected (paper): SCVB0 reaches online VB's final
score sooner and ends at least as high.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchmarks import common  # noqa: E402

RESULTS = os.path.join(HERE, "results")

CORPORA = {
    # name: (docword, vocab) under ../shared/data, or None for 20 Newsgroups (prepare_20news)
    "20news": None,
    "kos": ("uci-bow-kos/docword.kos.txt.gz", "uci-bow-kos/vocab.kos.txt"),
    "nips": ("uci-bow-nips/docword.nips.txt.gz", "uci-bow-nips/vocab.nips.txt"),
}


def prepared_dir(name: str) -> str:
    """The harness-prepared directory (train.npz, test_a.npz, test_b.npz, vocab.txt)."""
    if name == "20news":
        d = os.path.join(common.CACHE, "20news", "bench")
        if not os.path.exists(os.path.join(d, "test_b.npz")):
            common.run([common.PYTHON, os.path.join(HERE, "prepare_20news.py")])
        return d
    d = os.path.join(common.CACHE, name)
    if not os.path.exists(os.path.join(d, "test_b.npz")):
        dw, vo = CORPORA[name]
        common.run([common.PYTHON, common.BENCH_PEERS, "prepare",
                    "--docword", os.path.join(common.SHARED, "data", dw),
                    "--vocab", os.path.join(common.SHARED, "data", vo), "--out", d])
    return d


def load(name: str):
    d = prepared_dir(name)
    train = common.npz_docbatch(os.path.join(d, "train.npz"))
    a = common.npz_docbatch(os.path.join(d, "test_a.npz"))
    b = common.npz_docbatch(os.path.join(d, "test_b.npz"))
    with open(os.path.join(d, "vocab.txt")) as f:
        V = sum(1 for _ in f)
    return train, a, b, V


def score(algo, a, b) -> float:
    from lda_core.evaluation.metrics import document_completion
    return float(document_completion(algo.topic_word(), a, b)["ll_per_token"])


def make(kind: str, V: int, train, K: int, batch: int, seed: int, threads):
    if kind == "scvb0":
        from lda_core.algorithms.scvb0 import SCVB0
        return SCVB0(K, V, alpha=0.1, eta=0.01, corpus_tokens=train.n_tokens,
                     seed=seed, n_threads=threads)
    if kind == "sparse-gibbs-vb":
        from lda_core.algorithms.sparse_gibbs_vb import SparseGibbsVB
        return SparseGibbsVB(K, V, corpus_size=train.n_docs, seed=seed,
                             n_threads=threads)
    from lda_core.algorithms.online_vb import OnlineVB
    off = 0.5 if kind == "online-vb+0.5" else 0.0
    return OnlineVB(K, V, alpha=0.1 + off, eta=0.01 + off, kappa=0.7, tau0=64.0,
                    corpus_size=train.n_docs, seed=seed, n_threads=threads)


def minibatches(train, batch: int, passes: int, seed: int):
    """(pass, batch) pairs in a seeded random order per pass (the same for every algorithm)."""
    for p in range(passes):
        perm = np.random.default_rng([seed, p]).permutation(train.n_docs)
        for s in range(0, train.n_docs, batch):
            yield p, train.take(perm[s:s + batch])


def curve(kind, name, train, a, b, V, *, K=100, batch=100, passes=2, eval_points=10, seed=0,
          threads=None, time_budget=None, target=None, log=print):
    """Train ``kind`` for ``passes`` (or until ``time_budget`` training seconds, or until the
    score reaches ``target``), evaluating ``eval_points`` times per pass. Returns rows."""
    algo = make(kind, V, train, K, batch, seed, threads)
    steps_per_pass = -(-train.n_docs // batch)
    every = max(1, steps_per_pass // eval_points)
    rows, wall, cpu, step = [], 0.0, 0.0, 0
    for p, mb in minibatches(train, batch, passes, seed):
        t0, c0 = time.perf_counter(), time.process_time()
        algo.global_step(algo.local_step(mb))
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        step += 1
        last = step == passes * steps_per_pass
        if step % every == 0 or last:
            ll = score(algo, a, b)
            rows.append(dict(corpus=name, algorithm=kind, step=step, docs=algo.docs_seen,
                             passes=round(step / steps_per_pass, 3), train_wall_s=round(wall, 3),
                             train_cpu_s=round(cpu, 3), ll_per_token=round(ll, 5)))
            log("%-8s %-15s step %5d pass %.2f  wall %7.1fs cpu %7.1fs  LL/token %.4f"
                % (name, kind, step, step / steps_per_pass, wall, cpu, ll))
            if (time_budget and wall >= time_budget) or (target is not None and ll >= target):
                break
    return rows, algo


def estep_speed(train, V, K=100, batch=100, n_batches=20, seed=0, threads=None, warm=50):
    """Documents per CPU-second and per wall-second of local_step, SCVB0 vs online VB, on the
    same minibatches, after ``warm`` minibatches of training each (so both E-steps see
    trained topics; VB's iteration count depends on them); calls interleaved so both share
    the machine's noise."""
    algos = {k: make(k, V, train, K, batch, seed, threads) for k in ("scvb0", "online-vb")}
    it = (m for _, m in minibatches(train, batch, 2, seed))
    for _ in range(warm):
        mb = next(it)
        for al in algos.values():
            al.global_step(al.local_step(mb))
    mbs = [next(it) for _ in range(n_batches)]
    cpu = {k: 0.0 for k in algos}
    wall = {k: 0.0 for k in algos}
    docs = sum(mb.n_docs for mb in mbs)
    for mb in mbs:
        for k, al in algos.items():
            t0, c0 = time.perf_counter(), time.process_time()
            al.local_step(mb)
            wall[k] += time.perf_counter() - t0
            cpu[k] += time.process_time() - c0
    out = {}
    for k in algos:
        out[k] = dict(docs_per_cpu_s=docs / cpu[k], docs_per_wall_s=docs / wall[k])
    out["ratio_cpu"] = out["scvb0"]["docs_per_cpu_s"] / out["online-vb"]["docs_per_cpu_s"]
    out["ratio_wall"] = out["scvb0"]["docs_per_wall_s"] / out["online-vb"]["docs_per_wall_s"]
    return out


def time_to(rows, target):
    for r in rows:
        if r["ll_per_token"] >= target:
            return r["train_wall_s"], r["train_cpu_s"]
    return None, None


def write_csv(path, rows):
    keys = list(rows[0].keys())
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    corpora = list(dict.fromkeys(r["corpus"] for r in rows))
    fig, axes = plt.subplots(1, len(corpora), figsize=(5.2 * len(corpora), 4.2), squeeze=False)
    for ax, c in zip(axes[0], corpora):
        for kind in dict.fromkeys(r["algorithm"] for r in rows if r["corpus"] == c):
            rr = [r for r in rows if r["corpus"] == c and r["algorithm"] == kind]
            ax.plot([r["train_wall_s"] for r in rr], [r["ll_per_token"] for r in rr], "o-",
                    ms=3, label=kind)
        ax.set_title("%s, K=100" % c)
        ax.set_xlabel("training wall-clock seconds")
        ax.set_ylabel("held-out LL / token (document completion)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", default="20news,kos,nips")
    ap.add_argument("--passes", default="20news=3,kos=8,nips=10",
                    help="passes per corpus (name=N,...)")
    ap.add_argument("--K", type=int, default=100)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--eval-points", type=int, default=8, help="evaluations per pass")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--algorithms", default="scvb0,online-vb,online-vb+0.5")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--tag", default="paper_foulds")
    ap.add_argument("--estep-only", action="store_true",
                    help="only the E-step speed comparison on 20news, with 1 and 2 threads")
    a = ap.parse_args(argv)
    if a.estep_only:
        os.makedirs(a.out, exist_ok=True)
        train, _, _, V = load("20news")
        rows = []
        for th in (1, 2):
            sp = estep_speed(train, V, K=a.K, batch=a.batch, threads=th, n_batches=40)
            rows.append(dict(K=a.K, batch=a.batch, threads=th,
                             scvb0_docs_per_cpu_s=sp["scvb0"]["docs_per_cpu_s"],
                             vb_docs_per_cpu_s=sp["online-vb"]["docs_per_cpu_s"],
                             scvb0_docs_per_wall_s=sp["scvb0"]["docs_per_wall_s"],
                             vb_docs_per_wall_s=sp["online-vb"]["docs_per_wall_s"],
                             ratio_cpu=sp["ratio_cpu"], ratio_wall=sp["ratio_wall"]))
            print("# E-step K=%d, %d thread(s): SCVB0 %.0f docs/CPU-s, online VB %.0f docs/CPU-s"
                  ", ratio %.2f CPU, %.2f wall" % (a.K, th, sp["scvb0"]["docs_per_cpu_s"],
                                                   sp["online-vb"]["docs_per_cpu_s"],
                                                   sp["ratio_cpu"], sp["ratio_wall"]),
                  flush=True)
        write_csv(os.path.join(a.out, a.tag + "_estep.csv"), rows)
        return 0
    passes = dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in a.passes.split(","))
    os.makedirs(a.out, exist_ok=True)
    all_rows, summary = [], []
    for name in a.corpora.split(","):
        train, ha, hb, V = load(name)
        print("# %s: %d training documents, %d tokens, V=%d; %d held-out documents"
              % (name, train.n_docs, train.n_tokens, V, ha.n_docs), flush=True)
        per = {}
        for kind in a.algorithms.split(","):
            rows, _ = curve(kind, name, train, ha, hb, V, K=a.K, batch=a.batch,
                            passes=passes.get(name, 2), eval_points=a.eval_points,
                            threads=a.threads, log=lambda s: print(s, flush=True))
            per[kind] = rows
            all_rows += rows
            write_csv(os.path.join(a.out, a.tag + "_curves.csv"), all_rows)
        vb_kinds = [k for k in per if k.startswith("online-vb")]
        rec = dict(corpus=name, n_train=train.n_docs, train_tokens=train.n_tokens, V=V,
                   passes=passes.get(name, 2))
        for k, rows in per.items():
            rec["final_ll_" + k] = rows[-1]["ll_per_token"]
            rec["best_ll_" + k] = max(r["ll_per_token"] for r in rows)
            rec["wall_s_" + k] = rows[-1]["train_wall_s"]
            rec["cpu_s_" + k] = rows[-1]["train_cpu_s"]
        if "scvb0" in per and vb_kinds:
            best_vb = max(per[k][-1]["ll_per_token"] for k in vb_kinds)
            best_kind = max(vb_kinds, key=lambda k: per[k][-1]["ll_per_token"])
            w, c = time_to(per["scvb0"], best_vb)
            vb_w = per[best_kind][-1]["train_wall_s"]
            vb_c = per[best_kind][-1]["train_cpu_s"]
            rec.update(best_vb=best_kind, best_vb_final_ll=best_vb,
                       scvb0_wall_s_to_vb_final=w, scvb0_cpu_s_to_vb_final=c,
                       vb_wall_s_to_its_final=vb_w,
                       wall_ratio_scvb0_over_vb=(w / vb_w) if w else None,
                       cpu_ratio_scvb0_over_vb=(c / vb_c) if c else None,
                       scvb0_ends_at_least_as_high=per["scvb0"][-1]["ll_per_token"] >= best_vb)
            print("# %s: SCVB0 final %.4f vs best online VB (%s) final %.4f; SCVB0 reaches it "
                  "after %s s wall / %s s CPU vs %.1f s / %.1f s for online VB"
                  % (name, per["scvb0"][-1]["ll_per_token"], best_kind, best_vb,
                     "%.1f" % w if w else "never", "%.1f" % c if c else "never", vb_w, vb_c),
                  flush=True)
        if name == "20news" and "scvb0" in per:
            sp = estep_speed(train, V, K=a.K, batch=a.batch, threads=a.threads)
            rec.update(estep_docs_per_cpu_s_scvb0=sp["scvb0"]["docs_per_cpu_s"],
                       estep_docs_per_cpu_s_vb=sp["online-vb"]["docs_per_cpu_s"],
                       estep_ratio_cpu=sp["ratio_cpu"], estep_ratio_wall=sp["ratio_wall"])
            print("# E-step documents per CPU-second at K=%d: SCVB0 %.0f, online VB %.0f, "
                  "ratio %.2f (wall ratio %.2f)" % (a.K, sp["scvb0"]["docs_per_cpu_s"],
                                                    sp["online-vb"]["docs_per_cpu_s"],
                                                    sp["ratio_cpu"], sp["ratio_wall"]), flush=True)
        summary.append(rec)
        write_csv(os.path.join(a.out, a.tag + "_summary.csv"), summary)
        plot(all_rows, os.path.join(a.out, a.tag + ".png"),
             "SCVB0 vs online VB (Foulds et al. 2013 Figs. 1-3 protocol)")
    print(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
