#!/usr/bin/env python3
"""One pass of online LDA on 20 Newsgroups: ours vs gensim LdaModel / LdaMulticore(2) / VW.

Settings of ../shared/bench/README.md: K=100, α=0.1, η=0.01, S=256, κ=0.7, τ0=64, one pass.

* ours: ``ldabeam train`` (in-process runner) in a child process on the prepared shards
  (benchmarks/prepare_20news.py); training seconds from its run log (the training loop
  including shard reads; Python start-up and imports excluded, as the harness excludes them);
* gensim LdaModel and LdaMulticore(workers=2), and Vowpal Wabbit ``--lda``: trained by the
  harness's own ``bench_peers.py _child`` (exact harness arguments and timing) in child
  processes; VW only where ``vowpalwabbit`` imports (``--vw-python`` names an interpreter
  that has it, e.g. a separate venv: it is not a project dependency);
* every topic-word matrix is judged by OUR evaluator (``lda_core.evaluation.metrics``
  document completion on the harness's fixed halves test_a / test_b, α = 0.1), and ours also
  by the harness itself (``ldabeam export --format phi-npy`` + ``bench_peers.py evaluate``),
  which must give the same number.

Prints held-out LL/token of each and wall-clock ratios (LdaMulticore / ours, VW / ours, ...).
Targets (issue 3): ours ≥ −8.37 and ≥ gensim LdaModel; ≥ 5× faster than LdaMulticore(2),
≥ 2× faster than VW. The ratios are printed, not asserted (the machine is shared).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402


def train_ours(cache: str, seed: int = 0, dtype: str = "float32", threads=None) -> dict:
    model = os.path.join(cache, "model_ours")
    shutil.rmtree(model, ignore_errors=True)
    cmd = (common.LDABEAM + ["--log-level", "WARNING", "train"]
           + common.protocol_train_args(os.path.join(cache, "ds_train"), model, threads)
           + ["--seed", seed, "--dtype", dtype])
    wall, rss, out = common.run_child_peak_rss(cmd)
    from lda_core.storage.run_log import read_run_log
    end = read_run_log(os.path.join(model, "run_log.jsonl"), "end")[-1]
    phi_path = os.path.join(cache, "phi_ours.npy")
    # the cache's matrix of the previous run is replaced (export refuses without --overwrite)
    common.run(common.LDABEAM + ["--log-level", "WARNING", "export", "--model", model,
                                 "--format", "phi-npy", "--output", phi_path, "--overwrite"],
               quiet=True)
    return dict(system="ours (ldabeam train, in-process, %s)" % dtype, train_s=end["elapsed"],
                train_cpu_s=end.get("cpu_seconds"),
                child_wall_s=wall, peak_rss_mb=rss, phi=np.load(phi_path), phi_path=phi_path,
                steps=end["step"])


def train_peer(cache: str, system: str, python: str, workers: int = 1, seed: int = 0) -> dict:
    tmp = tempfile.mkdtemp(prefix="bench-%s-" % system)
    phi_path = os.path.join(tmp, "phi.npy")
    try:
        wall, rss, out = common.run_child_peak_rss(
            [python, common.BENCH_PEERS, "_child", "--data", os.path.join(cache, "bench"),
             "--system", system, "--K", common.K, "--batch", common.BATCH, "--workers", workers,
             "--iters", 0, "--seed", seed, "--phi-out", phi_path])
        with open(phi_path + ".json") as f:
            res = json.load(f)
        return dict(system="%s%s" % (system, "(workers=%d)" % workers if workers > 1 else ""),
                    train_s=res["train_s"], child_wall_s=wall, peak_rss_mb=rss,
                    phi=np.load(phi_path), train_cpu_s=res.get("train_cpu_s"),
                    other_load_cores=res.get("other_load_cores"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def has_vw(python: str) -> bool:
    import subprocess
    try:
        return subprocess.run([python, "-c", "from vowpalwabbit import pyvw"],
                              capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):     # e.g. --vw-python names no interpreter
        return False


def evaluate_all(cache: str, results) -> None:
    from lda_core.evaluation.metrics import document_completion
    a = common.npz_docbatch(os.path.join(cache, "bench", "test_a.npz"))
    b = common.npz_docbatch(os.path.join(cache, "bench", "test_b.npz"))
    for r in results:
        r["heldout_ll_per_token"] = document_completion(r["phi"], a, b,
                                                        alpha=common.ALPHA)["ll_per_token"]


def harness_score(cache: str, phi_path: str) -> float:
    p = common.run([common.PYTHON, common.BENCH_PEERS, "evaluate", "--data",
                    os.path.join(cache, "bench"), "--phi", phi_path, "--name", "ours"],
                   quiet=True)
    return json.loads(p.stdout.strip().split("\n")[-1])["heldout_ll_per_token"]


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--skip-peers", action="store_true", help="train ours only")
    p.add_argument("--vw-python", default=os.environ.get("LDABEAM_VW_PYTHON", sys.executable),
                   help="a Python interpreter where `vowpalwabbit` imports (a separate venv)")
    p.add_argument("--results", default=None, help="append the records (JSON lines) here")
    p.add_argument("--json", default=os.path.join(common.REPO, "benchmarks", "results",
                                                  "train_bench.json"),
                   help="write this run's records and ratios here ('': do not write)")
    a = p.parse_args(argv)
    from benchmarks.prepare_20news import prepare
    meta = prepare(a.cache)
    print("data: %d training documents, %d tokens, V=%d; %d held-out documents"
          % (meta["n_train"], meta["train_tokens"], meta["V"], meta["n_test"]), flush=True)
    results = [train_ours(a.cache, a.seed, a.dtype)]
    vw_note = None
    if not a.skip_peers:
        results.append(train_peer(a.cache, "gensim_lda", common.PYTHON, 1, a.seed))
        results.append(train_peer(a.cache, "gensim_multicore", common.PYTHON, 2, a.seed))
        if has_vw(a.vw_python):
            results.append(train_peer(a.cache, "vw_lda", a.vw_python, 1, a.seed))
        else:
            vw_note = ("Vowpal Wabbit: not measured (`vowpalwabbit` does not import in %s; "
                       "pass --vw-python of a venv that has it)" % a.vw_python)
    evaluate_all(a.cache, results)
    ours = results[0]
    ours["harness_ll_per_token"] = harness_score(a.cache, ours["phi_path"])

    print()
    print("| system | train s (wall) | train CPU s | peak RSS MB | held-out LL/token "
          "(our evaluator) |")
    print("|---|---|---|---|---|")
    for r in results:
        cpu = r.get("train_cpu_s")
        print("| %s | %.2f | %s | %.0f | %.4f |" % (
            r["system"], r["train_s"], "%.2f" % cpu if cpu is not None else "n/a",
            r["peak_rss_mb"], r["heldout_ll_per_token"]))
    with open("/proc/loadavg") as f:
        print("\nload average at the end: %s (2 cores; wall-clock ratios are noisy when other "
              "work runs)" % f.read().split()[0])
    print()
    print("ours: %.4f by our evaluator, %.4f by bench_peers.py evaluate (difference %.2g)"
          % (ours["heldout_ll_per_token"], ours["harness_ll_per_token"],
             ours["heldout_ll_per_token"] - ours["harness_ll_per_token"]))
    print("quality: ours %.4f vs target >= %.2f: %s" % (
        ours["heldout_ll_per_token"], common.TARGET_LL,
        "met" if ours["heldout_ll_per_token"] >= common.TARGET_LL else "NOT met"))
    def cpu_ratio(r):
        if r.get("train_cpu_s") and ours.get("train_cpu_s"):
            return "; CPU seconds %.2fx" % (r["train_cpu_s"] / ours["train_cpu_s"])
        return ""
    byname = {r["system"].split("(")[0]: r for r in results}
    ratios = {name: {"wall": r["train_s"] / ours["train_s"],
                     "cpu": (r["train_cpu_s"] / ours["train_cpu_s"]
                             if r.get("train_cpu_s") and ours.get("train_cpu_s") else None)}
              for name, r in byname.items() if r is not ours}
    if "gensim_lda" in byname:
        g = byname["gensim_lda"]
        print("quality: ours %.4f vs gensim LdaModel %.4f (same split, same evaluator): %s"
              % (ours["heldout_ll_per_token"], g["heldout_ll_per_token"],
                 "met" if ours["heldout_ll_per_token"] >= g["heldout_ll_per_token"]
                 else "NOT met"))
        print("speed: gensim LdaModel / ours = %.2fx wall%s"
              % (g["train_s"] / ours["train_s"], cpu_ratio(g)))
    if "gensim_multicore" in byname:
        r = byname["gensim_multicore"]
        print("speed: gensim LdaMulticore(workers=2) / ours = %.2fx wall (target >= 5x)%s"
              % (r["train_s"] / ours["train_s"], cpu_ratio(r)))
    if "vw_lda" in byname:
        r = byname["vw_lda"]
        print("speed: Vowpal Wabbit --lda / ours = %.2fx wall (target >= 2x)%s"
              % (r["train_s"] / ours["train_s"], cpu_ratio(r)))
    if vw_note:
        print(vw_note)
    if a.json:
        common.save_results({"systems": [{k: v for k, v in r.items() if k != "phi"}
                                         for r in results],
                             "peer_over_ours": ratios,
                             "quality_target_ll": common.TARGET_LL}, a.json, argv)
    if a.results:
        with open(a.results, "a") as f:
            for r in results:
                f.write(json.dumps({k: v for k, v in r.items() if k != "phi"}, default=float)
                        + "\n")


if __name__ == "__main__":
    main()
