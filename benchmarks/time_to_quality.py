#!/usr/bin/env python3
"""Time to quality on 20 Newsgroups, K = 100, 2 cores: SCVB0 vs tomotopy's collapsed Gibbs.

The target is the held-out document-completion log-likelihood per token that tomotopy reaches
after 100 Gibbs sweeps on 2 workers (-7.956 in ../shared/bench/README.md; the script uses
``--target``, default -7.96). In one run of this script:

1. tomotopy is trained by the harness itself (``bench_peers.py run --system tomotopy --iters
   100 --workers 2``, in a child process with the Python that has tomotopy: ``--peers-python``,
   default /tmp/peers/bin/python, else this interpreter), and judged by the harness's
   evaluator; its ``train_s`` (training only, corpus loading excluded) is the reference time.
   tomotopy is NOT a project dependency: if it is absent the script says so and reports
   SCVB0's time alone (install it with ``python -m venv /tmp/peers &&
   /tmp/peers/bin/pip install tomotopy numpy scipy``).
2. SCVB0 (α = 0.1, η = 0.01, the paper's schedules, minibatches of ``--batch`` documents,
   2 numba threads) trains pass after pass on the same training split and is evaluated with
   ``lda_core.evaluation.metrics.document_completion`` (the same protocol) every ``1/--evals-per-pass``
   pass; the clock counts training only (evaluations excluded, as the harness excludes
   tomotopy's). It stops at the first evaluation with LL/token >= target (or after
   ``--max-passes``).

Prints the ratio SCVB0 seconds / tomotopy seconds (< 1: SCVB0 is faster) and writes
benchmarks/results/time_to_quality.csv. The machine is shared: both systems run in the same
invocation so they see similar load; process CPU seconds are reported too.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchmarks import common  # noqa: E402
from benchmarks import paper_foulds as pf  # noqa: E402


def has_tomotopy(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "import tomotopy"], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_tomotopy(python, data_dir, iters, workers, seed):
    res = tempfile.mktemp(prefix="ttq_tomotopy_", suffix=".jsonl")
    cmd = [python, common.BENCH_PEERS, "run", "--data", data_dir, "--system", "tomotopy",
           "--K", "100", "--iters", str(iters), "--workers", str(workers), "--seed", str(seed),
           "--results", res, "--tag", "20news"]
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(res):
        raise SystemExit("tomotopy run failed:\n%s\n%s" % (p.stdout[-2000:], p.stderr[-2000:]))
    with open(res) as f:
        rec = json.loads(f.read().strip().splitlines()[-1])
    os.unlink(res)
    if "error" in rec:
        raise SystemExit("tomotopy run failed: %s" % rec["error"])
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=float, default=-7.96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--max-passes", type=int, default=10)
    ap.add_argument("--evals-per-pass", type=int, default=4)
    ap.add_argument("--tomotopy-iters", type=int, default=100)
    ap.add_argument("--peers-python", default="/tmp/peers/bin/python")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=pf.RESULTS)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    train, ha, hb, V = pf.load("20news")
    data_dir = pf.prepared_dir("20news")
    print("# 20news: %d training documents, %d tokens, V=%d, %d held-out documents"
          % (train.n_docs, train.n_tokens, V, ha.n_docs), flush=True)

    python = a.peers_python if os.path.exists(a.peers_python) else sys.executable
    tomo = None
    if has_tomotopy(python):
        tomo = run_tomotopy(python, data_dir, a.tomotopy_iters, a.threads, a.seed)
        print("# tomotopy %d sweeps, %d workers: %.1f s train (%.1f s CPU), held-out LL/token "
              "%.4f" % (a.tomotopy_iters, a.threads, tomo["train_s"],
                        tomo.get("train_cpu_s", float("nan")), tomo["heldout_ll_per_token"]),
              flush=True)
    else:
        print("# tomotopy is ABSENT (not importable by %s): reporting SCVB0 alone; install it "
              "with: python -m venv /tmp/peers && /tmp/peers/bin/pip install tomotopy numpy "
              "scipy" % python, flush=True)

    # SCVB0: warm the numba kernels (compile or load from cache) outside the clock
    from lda_core.algorithms.scvb0 import SCVB0
    warm = SCVB0(100, V, corpus_tokens=train.n_tokens, n_threads=a.threads)
    warm.global_step(warm.local_step(train.take(range(10))))
    warm.infer(train.take(range(2)))
    steps_per_pass = -(-train.n_docs // a.batch)
    every = max(1, steps_per_pass // a.evals_per_pass)
    algo = SCVB0(100, V, alpha=0.1, eta=0.01, corpus_tokens=train.n_tokens,
                 seed=a.seed, n_threads=a.threads)
    wall = cpu = 0.0
    reached = None
    rows = []
    step = 0
    for p, mb in pf.minibatches(train, a.batch, a.max_passes, a.seed):
        t0, c0 = time.perf_counter(), time.process_time()
        algo.global_step(algo.local_step(mb))
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        step += 1
        if step % every == 0 or step % steps_per_pass == 0:
            ll = pf.score(algo, ha, hb)
            rows.append(dict(system="scvb0", step=step, passes=round(step / steps_per_pass, 3),
                             train_wall_s=round(wall, 3), train_cpu_s=round(cpu, 3),
                             ll_per_token=round(ll, 5)))
            print("scvb0 step %5d pass %.2f  train %.1f s wall / %.1f s CPU  LL/token %.4f"
                  % (step, step / steps_per_pass, wall, cpu, ll), flush=True)
            if ll >= a.target:
                reached = rows[-1]
                break
    summary = dict(target=a.target, threads=a.threads, batch=a.batch,
                   scvb0_reached=reached is not None,
                   scvb0_train_wall_s=reached["train_wall_s"] if reached else None,
                   scvb0_train_cpu_s=reached["train_cpu_s"] if reached else None,
                   scvb0_passes=reached["passes"] if reached else None,
                   scvb0_ll=reached["ll_per_token"] if reached else rows[-1]["ll_per_token"],
                   tomotopy_present=tomo is not None)
    if tomo is not None:
        summary.update(tomotopy_train_s=tomo["train_s"], tomotopy_cpu_s=tomo.get("train_cpu_s"),
                       tomotopy_ll=tomo["heldout_ll_per_token"],
                       tomotopy_other_load_cores=tomo.get("other_load_cores"),
                       tomotopy_version=tomo.get("native", {}).get("tomotopy_version"))
        rows.append(dict(system="tomotopy", step=a.tomotopy_iters, passes=a.tomotopy_iters,
                         train_wall_s=round(tomo["train_s"], 3),
                         train_cpu_s=round(tomo.get("train_cpu_s", float("nan")), 3),
                         ll_per_token=round(tomo["heldout_ll_per_token"], 5)))
        if reached:
            summary["ratio_wall_scvb0_over_tomotopy"] = reached["train_wall_s"] / tomo["train_s"]
            if tomo.get("train_cpu_s"):
                summary["ratio_cpu_scvb0_over_tomotopy"] = (reached["train_cpu_s"]
                                                            / tomo["train_cpu_s"])
    pf.write_csv(os.path.join(a.out, "time_to_quality.csv"), rows)
    pf.write_csv(os.path.join(a.out, "time_to_quality_summary.csv"), [summary])
    print(json.dumps(summary, indent=1), flush=True)
    if tomo is not None and reached:
        print("RATIO SCVB0 / tomotopy wall-clock to LL/token >= %.3f: %.2f (%.1f s vs %.1f s)"
              % (a.target, summary["ratio_wall_scvb0_over_tomotopy"], reached["train_wall_s"],
                 tomo["train_s"]), flush=True)
    elif not reached:
        print("SCVB0 did not reach %.3f within %d passes (last %.4f)"
              % (a.target, a.max_passes, rows[-1]["ll_per_token"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
