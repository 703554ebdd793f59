#!/usr/bin/env python3
"""Passes to a held-out score against the minibatch size S (and the staleness s): what a run on
a cluster pays for large minibatches, measured with the in-process trainer.

For each algorithm (SCVB0, online VB) on 20 Newsgroups (K = 100, the harness's split: held-out
document completion judged by ``../shared/bench/bench_peers.py``'s own evaluator), every
setting at ``ldabeam train``'s default (:func:`build_algorithm` with no options), the seeded
minibatch order of ``ldabeam train`` (:class:`ShardStream` over one shard of the training
split):

* the *reference* run: s = 0 at the algorithm's default S (SCVB0 100, online VB 256), one
  pass; its held-out LL/token after that pass is the *target* of that seed;
* every ``--sizes`` S (S <= training documents / 2) at every ``--staleness`` s: passes, one at
  a time, until the held-out score reaches the target or ``--max-passes`` have run.

A record per run (printed as one JSON line, saved in ``benchmarks/results/
passes_to_score.json``) has the fields of ``benchmarks/staleness_bench.py``'s records
(corpus, algorithm, S, K, seed, staleness, sync_steps, steps_per_pass, ll_by_pass, train_s,
train_cpu_s) plus the target and the passes to it (fractional: linear between the two passes
around the crossing; null when not reached). ``benchmarks/cluster_model.py`` reads these
records (and staleness_bench.py's, when present) for the passes a run needs at each S.

    python benchmarks/passes_to_score_bench.py [--sizes 256,1024,4096] [--staleness 0,1]
        [--seeds 2] [--first-seed 0] [--max-passes 16] [--algorithms scvb0,online-vb]
        [--json OUT]

(Split over processes by ``--algorithms`` / ``--first-seed`` with one ``--json`` each: the
cluster model pools every ``passes_to_score*.json``.)
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402
from benchmarks.prepare_20news import prepare as prepare_20news  # noqa: E402
from benchmarks.quality_bench import load_corpus  # noqa: E402
from lda_core.docbatch import DocBatch  # noqa: E402
from lda_core.storage.vocab_file import vocab_hash  # noqa: E402
from lda_core.training import staleness  # noqa: E402
from lda_core.training.trainer import train  # noqa: E402
from pipelines.ingest import dataset  # noqa: E402
from pipelines.training.algorithm_options import build_algorithm, default_minibatch  # noqa: E402
from pipelines.training.shard_stream import ShardStream  # noqa: E402

K = 100
ALGORITHMS = ("scvb0", "online-vb")


def training_shards(data: dict, root: str) -> List[str]:
    """The training split as one shard (rows in the harness's order), written once."""
    path = os.path.join(root, "shards", dataset.shard_name(0, 1))
    if not os.path.exists(path):
        X = data["Xtr"].tocsr().copy()
        X.data = np.round(X.data)
        batch = DocBatch.from_csr(X, doc_ids=[str(i) for i in range(X.shape[0])])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        dataset.write_shard(path, dataset.docbatch_to_table(batch), vocab_hash(data["vocab"]))
    return [path]


class Run:
    """One run (algorithm, S, s, seed), advanced a pass at a time and judged after each."""

    def __init__(self, files, data, algorithm, S, s, seed, max_passes):
        self.S, self.s = S, s
        self.stream = ShardStream(files, minibatch=S, seed=seed, passes=max_passes)
        self.alg = build_algorithm(algorithm, K, len(data["vocab"]), settings={},
                                   corpus_size=self.stream.n_docs, seed=seed,
                                   vocab_hash=self.stream.vocab_hash,
                                   corpus_tokens=self.stream.count_tokens)
        self.scores: List[float] = []
        self.train_s = self.train_cpu_s = 0.0

    def one_pass(self, bench, data) -> float:
        end = (len(self.scores) + 1) * self.stream.batches_per_pass
        t0, c0 = time.perf_counter(), time.process_time()
        train(self.alg, self.stream, progress=False, max_steps=end,
              run_info={staleness.RUN_KEY: self.s, staleness.WARMUP_KEY: 0})
        self.train_s += time.perf_counter() - t0
        self.train_cpu_s += time.process_time() - c0
        ll, _ = bench.heldout_completion(self.alg.topic_word(), data["Xa"], data["Xb"])
        self.scores.append(float(ll))
        return float(ll)


def measure(a, bench, data, files, algorithm: str, seed: int) -> List[dict]:
    """The reference run and every (S, s) run of one algorithm and seed."""
    S0 = default_minibatch(algorithm)
    n_docs = data["Xtr"].shape[0]
    ref = Run(files, data, algorithm, S0, 0, seed, 1)
    target = ref.one_pass(bench, data)
    out = []

    def record(r: Run) -> None:
        rec = {"corpus": "20news", "algorithm": algorithm, "S": r.S, "K": K, "seed": seed,
               "staleness": r.s, "sync_steps": 0, "steps_per_pass": r.stream.batches_per_pass,
               "n_docs": n_docs, "reference_S": S0, "target_ll": target,
               "ll_by_pass": r.scores, "passes_to_target": common.passes_to(target, r.scores),
               "train_s": r.train_s, "train_cpu_s": r.train_cpu_s}
        print(json.dumps(rec), flush=True)
        out.append(rec)
    record(ref)
    sizes = [S for S in a.sizes if S != S0 and S <= n_docs // 2]
    # the reference S pipelined too, then every S at every s
    for S, s in [(S0, s) for s in a.staleness if s] + [(S, s) for S in sizes
                                                        for s in a.staleness]:
        r = Run(files, data, algorithm, S, s, seed, a.max_passes)
        while len(r.scores) < a.max_passes and r.one_pass(bench, data) < target:
            pass
        record(r)
    return out


def summarise(records: List[dict]) -> List[dict]:
    """Per (algorithm, S, s): steps per pass and the passes to the target over the seeds
    (mean; a seed that never reached it counts as its passes run, flagged)."""
    rows = []
    for key in sorted({(r["algorithm"], r["S"], r["staleness"]) for r in records}):
        rs = [r for r in records if (r["algorithm"], r["S"], r["staleness"]) == key]
        ps = [r["passes_to_target"] if r["passes_to_target"] is not None
              else float(len(r["ll_by_pass"])) for r in rs]
        rows.append({"algorithm": key[0], "S": key[1], "staleness": key[2],
                     "steps_per_pass": rs[0]["steps_per_pass"], "seeds": len(rs),
                     "passes_mean": float(np.mean(ps)), "passes_min": float(min(ps)),
                     "passes_max": float(max(ps)),
                     "all_reached": all(r["passes_to_target"] is not None for r in rs)})
        print("%-10s S=%5d s=%d: %5.1f steps a pass, %.2f passes to the target (%.2f-%.2f)%s"
              % (key[0], key[1], key[2], rows[-1]["steps_per_pass"], rows[-1]["passes_mean"],
                 rows[-1]["passes_min"], rows[-1]["passes_max"],
                 "" if rows[-1]["all_reached"] else "  [not reached by every seed]"))
    return rows


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--algorithms", default=",".join(ALGORITHMS))
    p.add_argument("--sizes", default="256,1024,4096")
    p.add_argument("--staleness", default="0,1")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--max-passes", type=int, default=16)
    p.add_argument("--json", default=os.path.join(common.REPO, "benchmarks", "results",
                                                  "passes_to_score.json"))
    a = p.parse_args(argv)
    a.sizes = [int(x) for x in a.sizes.split(",") if x]
    a.staleness = [staleness.check_staleness(int(x)) for x in a.staleness.split(",") if x]
    prepare_20news(a.cache)
    bench = common.bench_module()
    data = load_corpus(bench, os.path.join(a.cache, "bench"))
    files = training_shards(data, os.path.join(common.CACHE, "passes_to_score"))
    records = []
    for algorithm in [x for x in a.algorithms.split(",") if x]:
        for seed in range(a.first_seed, a.first_seed + a.seeds):
            records += measure(a, bench, data, files, algorithm, seed)
    rows = summarise(records)
    print("load average at the end: %.1f (2 cores, shared)" % os.getloadavg()[0])
    if a.json:
        common.save_results({"summary": rows, "records": records}, a.json, argv)


if __name__ == "__main__":
    main()
