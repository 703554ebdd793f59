#!/usr/bin/env python3
"""What evaluation costs the default command: ``ldabeam train --shards D --output M --topics
K`` (SCVB0, ``--passes auto``) against the same number of passes with ``--heldout none``.

For each corpus (``--corpora``: ``kos``, ``nips``, ``20news``), a dataset is vectorized once
under ``--work`` with ``--holdout-fraction 0.05`` (KOS and NIPS from the UCI files in
../shared/data; 20 Newsgroups from the bag of words ``benchmarks/prepare_20news.py`` writes,
the harness's preprocessing). Then, in this one process, two ``ldabeam train`` children run
one after the other on it (in-process runner, stdout and stderr not a terminal):

* ``default``: the bare default command;
* ``no_heldout``: ``--passes N --heldout none`` with N the passes the default ran.

A short untimed run first fills the numba compile cache, so neither timed run compiles.

Printed per corpus: wall seconds of both children, their ratio (the acceptance of issue 25:
<= 1.5) and the ratio of their CPU seconds (user + system of each child, from ``os.wait4``:
steadier than wall time on a loaded machine), the passes and held-out score by pass of the default run (its stopping decision),
the seconds its run log attributes to evaluation (``eval_seconds`` summed, plus the final
topic health's ``health_seconds``) and the lines the
default command printed. With ``--repeat N``, N such pairs run per corpus and the ratios are
the medians over the pairs (each pair's ratios and load average kept). The load average before
and after each corpus is recorded: on a loaded machine the CPU-seconds ratio is the steadier
figure. Results: ``benchmarks/results/default_eval_bench.json``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402

HOLDOUT = 0.05


def build(name: str, work: str, news_cache: str) -> str:
    """The dataset directory of corpus ``name`` with a 5 % held-out split (built once)."""
    out = os.path.join(work, name)
    if os.path.exists(os.path.join(out, "manifest.json")):
        return out
    data = os.path.join(common.SHARED, "data")
    if name in ("kos", "nips"):
        src = ["--input", os.path.join(data, "uci-bow-" + name, "docword.%s.txt.gz" % name)]
    elif name == "20news":
        from benchmarks.prepare_20news import prepare
        prepare(news_cache)
        uci = os.path.join(news_cache, "uci")
        src = ["--input", os.path.join(uci, "docword.txt"), "--vocab",
               os.path.join(uci, "vocab.txt")]
    else:
        raise SystemExit("unknown corpus %r (kos, nips, 20news)" % name)
    common.run(common.LDABEAM + ["--log-level", "WARNING", "vectorize", "--format", "uci"]
               + src + ["--output", out, "--holdout-fraction", HOLDOUT], quiet=True)
    return out


def train(ds: str, model: str, K: int, extra) -> dict:
    """One ``ldabeam train`` child (output captured: not a terminal): wall seconds, the
    lines it printed, and from its run log the passes, pass scores and evaluation seconds."""
    from lda_core.storage.run_log import read_run_log
    shutil.rmtree(model, ignore_errors=True)
    cmd = common.LDABEAM + ["train", "--shards", ds, "--output", model, "--topics", str(K)]
    cmd += [str(a) for a in extra]
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", common.REPO)
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    out_path = model + ".out"
    os.makedirs(os.path.dirname(model), exist_ok=True)
    t0 = time.perf_counter()
    with open(out_path, "w") as out:
        child = subprocess.Popen(cmd, cwd=common.REPO, env=env, stdout=out,
                                 stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(child.pid, 0)       # the CPU seconds of exactly that child
    wall = time.perf_counter() - t0
    text = open(out_path).read()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit("ldabeam train failed: %s" % text[-3000:])
    log = os.path.join(model, "run_log.jsonl")
    steps = read_run_log(log, "step")
    start = read_run_log(log, "start")[-1]
    end = read_run_log(log, "end")[-1]
    evals = [r["metrics"] for r in steps if r.get("metrics")]
    end_metrics = end.get("metrics") or {}
    auto = [r["passes_auto"] for r in steps if "passes_auto" in r]
    bpp = max(1, -(-int(start["run"]["n_docs"]) // int(start["run"]["minibatch"])))
    timing = read_run_log(log, "timing")
    return dict(wall=wall, cpu=ru.ru_utime + ru.ru_stime, steps=end["step"],
                passes=-(-int(end["step"]) // bpp),
                batches_per_pass=bpp, lines=len(text.splitlines()),
                health_seconds=end_metrics.get("health_seconds"),
                evaluations=len(evals),
                eval_seconds=sum(float(m.get("eval_seconds", 0.0)) for m in evals),
                pass_scores=auto[-1]["scores"] if auto else None,
                final_ll=end_metrics.get("completion_ll_per_token"),
                estep_seconds=(timing[-1]["seconds"].get("estep") if timing else None),
                cpu_seconds=end.get("cpu_seconds"))


def run_corpus(name: str, a) -> dict:
    """``a.repeat`` pairs (default, then ``--heldout none`` with the default's passes), one
    after the other; the ratios are the medians over the pairs (a shared machine's load comes
    and goes between runs), each pair's figures kept."""
    ds = build(name, a.work, a.cache)
    load0 = os.getloadavg()
    base = os.path.join(a.work, "models", name)
    pairs = []
    for _ in range(a.repeat):
        d = train(ds, base + "-default", a.topics, [])
        n = train(ds, base + "-noheldout", a.topics,
                  ["--passes", d["passes"], "--heldout", "none"])
        pairs.append(dict(default=d, no_heldout=n, ratio=d["wall"] / n["wall"],
                          cpu_ratio=d["cpu"] / n["cpu"], load=os.getloadavg()))
    mid = sorted(pairs, key=lambda p: p["ratio"])[(len(pairs) - 1) // 2]
    d, n = mid["default"], mid["no_heldout"]
    rec = dict(corpus=name, K=a.topics, load_before=load0, load_after=os.getloadavg(),
               default=d, no_heldout=n,
               ratio=float(np.median([p["ratio"] for p in pairs])),
               cpu_ratio=float(np.median([p["cpu_ratio"] for p in pairs])),
               ratios=[p["ratio"] for p in pairs], cpu_ratios=[p["cpu_ratio"] for p in pairs],
               pair_loads=[p["load"] for p in pairs],
               eval_fraction=(d["eval_seconds"] + (d["health_seconds"] or 0)) / d["wall"])
    if len(pairs) > 1:
        rec["pairs"] = pairs
    print(json.dumps(dict(corpus=name, ratio=round(rec["ratio"], 3),
                          cpu_ratio=round(rec["cpu_ratio"], 3),
                          ratios=[round(r, 3) for r in rec["ratios"]],
                          cpu_ratios=[round(r, 3) for r in rec["cpu_ratios"]],
                          default_wall=round(d["wall"], 1), no_heldout_wall=round(n["wall"], 1),
                          passes=d["passes"], pass_scores=d["pass_scores"],
                          eval_fraction=round(rec["eval_fraction"], 3),
                          lines=d["lines"], load=load0)), flush=True)
    return rec


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--corpora", default="kos,nips,20news")
    p.add_argument("--topics", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1,
                   help="pairs of runs per corpus; the ratios printed are their medians")
    p.add_argument("--work", default=os.path.join(common.CACHE, "default_eval"),
                   help="where the datasets and models go")
    p.add_argument("--json", default=os.path.join(common.REPO, "benchmarks", "results",
                                                  "default_eval_bench.json"))
    a = p.parse_args(argv)
    corpora = [c.strip() for c in a.corpora.split(",") if c.strip()]
    # not timed: a first run compiles the numba kernels into the cache the timed runs load
    train(build(corpora[0], a.work, a.cache), os.path.join(a.work, "models", "warm-up"),
          a.topics, ["--max-steps", 3])
    rows = [run_corpus(c, a) for c in corpora]
    res = dict(records=rows, max_ratio=max(r["ratio"] for r in rows),
               max_cpu_ratio=max(r["cpu_ratio"] for r in rows),
               acceptance="default <= 1.5x the same passes with --heldout none")
    print("max ratio %.2f (CPU seconds: %.2f) over %s" % (
        res["max_ratio"], res["max_cpu_ratio"], ", ".join(r["corpus"] for r in rows)))
    common.save_results(res, a.json, argv)


if __name__ == "__main__":
    main()
