#!/usr/bin/env python3
"""The default of ``ldabeam train`` against online VB: time to the best held-out score and
dead topics, on small and large corpora.

For each corpus (a dataset directory with ``train/`` and ``heldout/`` splits) and each
configuration, ``ldabeam train`` runs as a child process (in-process runner, a
``--max-minutes`` cap: the child is stopped there and judged on its last checkpoint):

* ``default`` — ``ldabeam train --shards D --output M --topics K`` and nothing else (today:
  SCVB0, its own minibatch, ``--passes auto``);
* ``online-vb auto`` — ``--algorithm online-vb --passes auto`` (its pass-1 evaluation is
  the old default, ``--algorithm online-vb`` with one pass: the same steps and state).

From the run log: every held-out evaluation (document completion LL/token on the trainer's
held-out documents, at every 50 steps and at every pass end) with the training seconds it
came at; the best score and the seconds to reach it; the seconds the default needed to pass
online VB's best. From ``ldabeam evaluate`` on the final checkpoint: dead and effective topics
and NPMI on a seeded sample of training documents (``lda_core.evaluation.metrics``).

Corpora (``--corpora``): ``sample`` (the bundled Wikipedia sample, K = 20), ``kos``, ``nips``
(UCI, K = 100), ``20news16`` (the prepared 20 Newsgroups training shards written 16 times,
its test documents held out, K = 100), ``synth320k`` (``ldabeam synth``, 320,000 documents,
2,000 held out, K = 100). Missing datasets are built under ``--work``.

Ratios and counts from one run; the machine is shared, so seconds are noisy (the load is
recorded). Results: ``benchmarks/results/defaults_bench.json`` (``common.save_results``).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402

CONFIGS = {"default": [], "online-vb auto": ["--algorithm", "online-vb", "--passes", "auto"]}
TOPICS = {"sample": 20, "kos": 100, "nips": 100, "20news16": 100, "synth320k": 100}


def _ldabeam(*args) -> None:
    common.run(common.LDABEAM + ["--log-level", "WARNING"] + [str(a) for a in args],
               quiet=True)


def build(name: str, work: str, news_cache: str) -> str:
    """The dataset directory of corpus ``name`` (built once under ``work``)."""
    out = os.path.join(work, name)
    if os.path.exists(os.path.join(out, "manifest.json")):
        return out
    data = os.path.join(common.SHARED, "data")
    if name == "sample":
        _ldabeam("vectorize", "--output", out, "--holdout-fraction", 0.1, "--no-below", 2,
                 "--no-above", 0.5)
    elif name in ("kos", "nips"):
        _ldabeam("vectorize", "--input", os.path.join(data, "uci-bow-" + name,
                                                      "docword.%s.txt.gz" % name),
                 "--format", "uci", "--output", out, "--holdout-fraction", 0.1)
    elif name == "20news16":
        from benchmarks.memory_bench import write_repeated
        from benchmarks.prepare_20news import prepare
        prepare(news_cache)
        write_repeated(os.path.join(news_cache, "ds_train"), out, 16)
        os.makedirs(os.path.join(out, "heldout"), exist_ok=True)
        for f in glob.glob(os.path.join(news_cache, "ds_test", "train", "*.parquet")):
            shutil.copy(f, os.path.join(out, "heldout"))
    elif name == "synth320k":
        _ldabeam("synth", "--output", out, "--docs", 320000, "--heldout-docs", 2000)
    else:
        raise SystemExit("unknown corpus %r" % name)
    return out


def train(ds: str, model: str, K: int, extra, max_minutes: float) -> dict:
    """One ``ldabeam train`` child, stopped after ``max_minutes``; its evaluations."""
    from lda_core.storage.run_log import read_run_log
    shutil.rmtree(model, ignore_errors=True)
    cmd = common.LDABEAM + ["--log-level", "WARNING", "train", "--shards", ds, "--output",
                            model, "--topics", str(K), "--no-progress"] + list(extra)
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", common.REPO)
    child = subprocess.Popen(cmd, cwd=common.REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
    capped = False
    try:
        _, err = child.communicate(timeout=max_minutes * 60)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGTERM)
        _, err = child.communicate()
        capped = True
    if child.returncode and not capped:
        raise SystemExit("ldabeam train failed: %s" % err.decode()[-2000:])
    log = os.path.join(model, "run_log.jsonl")
    evals = [(r["elapsed"], r["metrics"]["completion_ll_per_token"], r["step"],
              r.get("pass_index")) for r in read_run_log(log, "step") if r.get("metrics")]
    start = read_run_log(log, "start")[0]
    ends = read_run_log(log, "end")
    auto = [r["passes_auto"] for r in read_run_log(log, "step") if "passes_auto" in r]
    best = max(evals, key=lambda e: e[1])
    rec = dict(algorithm=start.get("algorithm") or start.get("run", {}).get("algorithm"),
               minibatch=start.get("run", {}).get("minibatch"), capped=capped,
               evaluations=evals, best_ll=best[1], seconds_to_best=best[0],
               best_step=best[2], seconds=ends[-1]["elapsed"] if ends else evals[-1][0],
               steps=ends[-1]["step"] if ends else evals[-1][2],
               pass_scores=auto[-1]["scores"] if auto else None)
    return rec


def health(ds: str, model: str) -> dict:
    out = common.run(common.LDABEAM + ["--log-level", "WARNING", "evaluate", "--model", model,
                                       "--shards", ds], quiet=True).stdout
    ev = json.loads(out)
    return {k: ev[k] for k in ("dead_topics", "effective_topics", "npmi",
                               "completion_ll_per_token") if k in ev}


def first_reaching(evals, target: float):
    """Seconds of the first evaluation at or above ``target`` (None: never)."""
    for sec, ll, _, _ in evals:
        if ll >= target:
            return sec
    return None


def run_corpus(name: str, a) -> list:
    ds = build(name, a.work, a.cache)
    rows = []
    for cfg, extra in CONFIGS.items():
        model = os.path.join(a.work, "models", "%s-%s" % (name, cfg.replace(" ", "-")))
        rec = dict(corpus=name, K=TOPICS[name], config=cfg, load=os.getloadavg())
        rec.update(train(ds, model, TOPICS[name], extra, a.max_minutes))
        rec.update(health(ds, model))
        rows.append(rec)
        print(json.dumps({k: v for k, v in rec.items() if k != "evaluations"}), flush=True)
    d, o = rows
    reach = first_reaching(d["evaluations"], o["best_ll"])
    summary = dict(corpus=name, K=TOPICS[name],
                   ll_gain=d["best_ll"] - o["best_ll"],
                   default_seconds_to_online_best=reach,
                   time_ratio_to_online_best=(reach / o["seconds_to_best"]
                                              if reach is not None and o["seconds_to_best"]
                                              else None),
                   dead=(d.get("dead_topics"), o.get("dead_topics")))
    print("SUMMARY " + json.dumps(summary), flush=True)
    return rows + [summary]


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--corpora", default="sample,kos,nips,20news16,synth320k")
    p.add_argument("--work", default=os.path.join(common.CACHE, "defaults"),
                   help="where the datasets and models go")
    p.add_argument("--max-minutes", type=float, default=10.0,
                   help="cap on each training run (the run is judged where it stopped)")
    p.add_argument("--json", default=os.path.join(common.REPO, "benchmarks", "results",
                                                  "defaults_bench.json"))
    a = p.parse_args(argv)
    t0 = time.time()
    records = []
    for name in a.corpora.split(","):
        records += run_corpus(name.strip(), a)
        common.save_results({"records": records, "seconds": time.time() - t0}, a.json,
                            argv=argv)


if __name__ == "__main__":
    main()
