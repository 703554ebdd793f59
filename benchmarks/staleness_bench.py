#!/usr/bin/env python3
"""What pipelined steps cost in topic quality: staleness s = 1 against s = 0 (issue 35).

With staleness s the E-step of minibatch m reads the state after max(m − s, 0) steps
(:mod:`lda_core.training.staleness`; 0 is the run's start): on a cluster the E-step of step t + 1 overlaps the
block owners' update of step t. This script measures what that costs in the topics.

Every run is the in-process trainer (:func:`lda_core.training.trainer.train`, the reference
the Beam trainer matches bit for bit) over the seeded minibatch order of ``ldabeam train``
(:class:`pipelines.training.shard_stream.ShardStream`, over shards of the training split
written here), with ``run_info={"staleness": s}``; the algorithm is built by
``ldabeam train``'s own :func:`build_algorithm` with every setting at its default (online
VB: α = η = 1/K, κ = 0.7, τ0 = 64, float32; SCVB0: α = 0.1, η = 0.01, its step-size
schedules), so a run is ``ldabeam train --algorithm A --minibatch S --staleness s --seed N``.
One process: the numba kernels compile once.

Each (corpus, algorithm, minibatch S, seed) trains side by side s = 0 and, for each other s
(``--staleness``) and each W of ``--sync-steps``, s with its first W steps at s = 0 (W = 0:
pipelined from the first step; W = 32 is the variant that keeps s = 1 within the bound,
docs/training.md "Pipelined steps (staleness)"), one pass at a time (a ``train`` call per
pass with ``max_steps`` at the pass end; a pipelined run's statistics in flight ride on the
algorithm into the next call, so the passes are one uninterrupted run), until ``--passes
auto``'s rule (:class:`lda_core.training.pass_stop.PassStop`: a pass must gain ``--min-gain``
nats/token over the best earlier one; at most ``--max-passes``) has stopped every run. The
runs of a seed share the minibatch order and the initial state, so their differences are
paired.

Every topic-word matrix is judged by the shared harness's own evaluator
(``../shared/bench/bench_peers.py``: ``heldout_completion`` after every pass;
``quality_extras`` — dead / effective topics, NPMI, diversity — after pass 1 and at the pass
where the rule stopped; imported, never a private variant; see ``quality_bench.judge``).

Corpora (``--corpora``), each split once by ``bench_peers.py prepare`` (seed 0: a fixed
held-out set; each held-out document's tokens shuffled with a fixed seed and cut in halves
for document completion):

* ``20news`` — benchmarks/prepare_20news.py (the harness protocol; K = 100);
* ``nips`` — ../shared/data/uci-bow-nips (``quality_bench.prepare_small``; K = 50);
* ``wiki`` — the bundled Wikipedia sample ``data/enwiki-sample-sections.jsonl.bz2``
  vectorised as ``make demo`` does (gensim stop words, words of 3+ letters, no-below 3,
  no-above 0.2) but with no held-out fraction; its documents are written as UCI docword and
  split by ``bench_peers.py prepare`` like NIPS (a tenth held out; K = 20).

Minibatches (``--kinds``): each algorithm's default (SCVB0 100, online VB 256) and each
``--large`` S (default 1,024) where the training split makes at least ``--min-steps-per-pass``
steps a pass (a cluster runs large minibatches: few steps a pass is where a stale step weighs
most). ``--kinds``, ``--algorithms``, ``--first-seed`` and ``--seeds`` split a run over
processes; ``--summarise`` joins their logs.

Printed: per configuration, variant and seed the held-out LL/token difference (s − 0) after
pass 1, at each run's own ``--passes auto`` stop, and at equal passes (the s=0 run's stop); their
mean, standard deviation and range over the seeds, against the ``--bound`` (0.01 nats/token);
dead / effective topics and NPMI of each. Results: ``benchmarks/results/staleness_bench.json``
(``common.save_results``); ``--summarise LOG`` rebuilds the tables from the JSON records a run
printed.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402
from benchmarks.passes_to_score_bench import training_shards  # noqa: E402
from benchmarks.prepare_20news import prepare as prepare_20news  # noqa: E402
from benchmarks.quality_bench import load_corpus, prepare_small  # noqa: E402
from lda_core.storage.vocab_file import Vocabulary  # noqa: E402
from lda_core.training import staleness  # noqa: E402
from lda_core.training.pass_stop import AUTO_MIN_GAIN, PassStop  # noqa: E402
from lda_core.training.trainer import train  # noqa: E402
from pipelines.ingest import dataset  # noqa: E402
from pipelines.training.algorithm_options import build_algorithm, default_minibatch  # noqa: E402
from pipelines.training.shard_stream import ShardStream, read_docs  # noqa: E402

CORPORA = ("20news", "nips", "wiki")
TOPICS = {"20news": 100, "nips": 50, "wiki": 20}
ALGORITHMS = ("scvb0", "online-vb")
WIKI_SAMPLE = os.path.join(common.REPO, "data", "enwiki-sample-sections.jsonl.bz2")
# make demo's vectorisation of the sample (Makefile), without its held-out fraction
WIKI_VECTORIZE = ["--format", "jsonl", "--title-field", "title", "--no-below", 3,
                  "--no-above", 0.2, "--stopwords", "gensim", "--min-token-len", 3]
# the first steps run unpipelined in the variant that keeps s = 1 within the bound (docs/
# training.md, "Pipelined steps (staleness)")
SYNC_STEPS = 32
EXTRAS = ("dead_topics", "effective_topics", "npmi", "topic_diversity")


def prepare_wiki(cache: str) -> str:
    """The Wikipedia sample split the harness's way: vectorised (``make demo``'s settings, no
    held-out fraction), written as UCI docword + vocab, split by ``bench_peers.py prepare``
    (seed 0). Returns the prepared directory (train.npz, test_a/test_b.npz, vocab.txt)."""
    out = os.path.join(cache, "wiki")
    if os.path.exists(os.path.join(out, "test_b.npz")):
        return out
    if not os.path.exists(WIKI_SAMPLE):
        raise SystemExit("%s is absent (the bundled sample, data/README.md)" % WIKI_SAMPLE)
    ds = os.path.join(cache, "wiki-vectorized")
    if not os.path.exists(os.path.join(ds, "manifest.json")):
        common.run(common.LDABEAM + ["--log-level", "WARNING", "vectorize", "--input",
                                     WIKI_SAMPLE, "--output", ds, "--overwrite",
                                     "--holdout-fraction", 0] + WIKI_VECTORIZE, quiet=True)
    vocab = Vocabulary.read(ds)
    docs = read_docs(dataset.resolve_shards(ds))
    uci = os.path.join(cache, "wiki-uci")
    os.makedirs(uci, exist_ok=True)
    bench = common.bench_module()
    bench._write_uci(docs.to_csr(len(vocab)), os.path.join(uci, "docword.txt"))
    with open(os.path.join(uci, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab.tokens) + "\n")
    common.run([common.PYTHON, common.BENCH_PEERS, "prepare", "--docword",
                os.path.join(uci, "docword.txt"), "--vocab", os.path.join(uci, "vocab.txt"),
                "--out", out, "--seed", "0"], quiet=True)
    return out


def prepare(name: str, a) -> str:
    """The harness-prepared directory of corpus ``name``."""
    if name == "20news":
        prepare_20news(a.cache)
        return os.path.join(a.cache, "bench")
    cache = os.path.join(common.CACHE, "staleness")
    if name == "nips":
        return prepare_small(common.bench_module(), "nips", cache)
    if name == "wiki":
        return prepare_wiki(cache)
    raise SystemExit("unknown corpus %r (choose from %s)" % (name, ", ".join(CORPORA)))


def minibatches(a, algorithm: str, n_docs: int) -> list:
    """(label, S): the algorithm's default, then each ``--large`` S that makes at least
    ``--min-steps-per-pass`` steps a pass over ``n_docs`` documents."""
    default = default_minibatch(algorithm)
    out = [("default", default)] if "default" in a.kinds else []
    for S in (a.large if "large" in a.kinds else ()):
        if S == default:
            continue
        if n_docs / S >= a.min_steps_per_pass:
            out.append(("large", S))
        else:
            print("# S = %d skipped for %s: %.1f steps a pass over %d training documents "
                  "(< %g)" % (S, algorithm, n_docs / S, n_docs, a.min_steps_per_pass),
                  flush=True)
    return out


class Run:
    """One training run (algorithm, S, s, W, seed) advanced a pass at a time, with the
    ``--passes auto`` rule fed the harness's held-out score after every pass. ``W``
    (``sync``): the first W steps run with s = 0, the rest with s (from step W the pipeline
    starts afresh: minibatches W .. W + s − 1 read the state after W steps)."""

    def __init__(self, a, files, data, algorithm, K, S, s, seed, sync=0):
        self.s, self.sync, self.data = s, (sync if s else 0), data
        self.stream = ShardStream(files, minibatch=S, seed=seed, passes=a.max_passes)
        self.alg = build_algorithm(algorithm, K, len(data["vocab"]), settings={},
                                   corpus_size=self.stream.n_docs, seed=seed,
                                   vocab_hash=self.stream.vocab_hash,
                                   corpus_tokens=self.stream.count_tokens)
        self.rule = PassStop(a.min_gain, a.max_passes)
        self.scores, self.train_s, self.train_cpu_s, self.stop = [], 0.0, 0.0, None
        self.first = self.final = None

    @property
    def stopped(self) -> bool:
        return self.stop is not None

    def one_pass(self, bench) -> None:
        p = len(self.scores) + 1
        end = p * self.stream.batches_per_pass
        t0, c0 = time.perf_counter(), time.process_time()
        train(self.alg, self.stream, progress=False, max_steps=end,
              run_info={staleness.RUN_KEY: self.s, staleness.WARMUP_KEY: self.sync})
        self.train_s += time.perf_counter() - t0
        self.train_cpu_s += time.process_time() - c0
        assert self.alg.step == end, (self.alg.step, end)
        phi = self.alg.topic_word()
        ll, _ = bench.heldout_completion(phi, self.data["Xa"], self.data["Xb"])
        self.scores.append(float(ll))
        if p == 1:
            self.first = judge_extras(bench, self.data, phi, ll)
        if not self.stopped and self.rule.add(ll):
            self.stop = p
            self.final = self.first if p == 1 else judge_extras(bench, self.data, phi, ll)


def warm_up(a, files, data, algorithm) -> None:
    """Two steps of ``algorithm`` with every s, untimed: the numba kernels compile here, not
    in the first measured run."""
    for s in a.staleness:
        r = Run(a, files, data, algorithm, 2, 64, s, 0)
        train(r.alg, r.stream, progress=False, max_steps=2,
              run_info={staleness.RUN_KEY: s, staleness.WARMUP_KEY: 0})


def judge_extras(bench, data, phi, ll) -> dict:
    """The harness's ``quality_extras`` of ``phi`` with its held-out score ``ll``
    (``quality_bench.judge`` without scoring the held-out set twice)."""
    rec = {"heldout_ll_per_token": float(ll)}
    rec.update(bench.quality_extras(np.asarray(phi, np.float64), data["Xtr"]))
    return rec


def variants(a) -> list:
    """(s, W) of the runs of one seed: s = 0, then every other s with every ``--sync-steps``
    W."""
    return [(0, 0)] + [(s, w) for s in a.staleness if s for w in a.sync_steps]


def run_config(a, bench, corpus, data, files, algorithm, label, S, seed) -> list:
    """The :func:`variants` for one seed, a pass at a time in lockstep until the rule has
    stopped every run; one record per run."""
    K = a.K or TOPICS[corpus]
    runs = [Run(a, files, data, algorithm, K, S, s, seed, w) for s, w in variants(a)]
    while not all(r.stopped for r in runs):
        for r in runs:
            r.one_pass(bench)
    recs = []
    for r in runs:
        rec = {"corpus": corpus, "algorithm": algorithm, "minibatch": label, "S": S,
               "K": K, "seed": seed, "staleness": r.s, "sync_steps": r.sync,
               "steps_per_pass": r.stream.batches_per_pass, "ll_by_pass": r.scores,
               "stop_pass": r.stop, "train_s": r.train_s, "train_cpu_s": r.train_cpu_s,
               "pass1": r.first, "at_stop": r.final}
        recs.append(rec)
        print(json.dumps(rec), flush=True)
    return recs


def _stats(xs) -> dict:
    xs = np.asarray(xs, np.float64)
    return {"mean": float(xs.mean()), "sd": float(xs.std(ddof=1)) if len(xs) > 1 else 0.0,
            "min": float(xs.min()), "max": float(xs.max()), "n": int(len(xs)),
            "per_seed": [float(x) for x in xs]}


def summarise(records, bound: float) -> list:
    """Per (corpus, algorithm, S): the paired differences s − 0 over the seeds."""
    out = []
    keys = sorted({(r["corpus"], r["algorithm"], r["S"], r["minibatch"]) for r in records},
                  key=lambda k: (CORPORA.index(k[0]) if k[0] in CORPORA else 9, k[1], k[2]))
    for corpus, alg, S, label in keys:
        rs = [r for r in records if (r["corpus"], r["algorithm"], r["S"]) == (corpus, alg, S)]
        by = {(r["seed"], r["staleness"], r.get("sync_steps", 0)): r for r in rs}
        for s, w in sorted({(st, w) for (_, st, w) in by if st}):
            seeds = sorted(sd for (sd, st, ww) in by if (st, ww) == (s, w) and (sd, 0, 0) in by)
            if not seeds:
                continue
            pairs = [(by[(sd, 0, 0)], by[(sd, s, w)]) for sd in seeds]
            row = {"corpus": corpus, "algorithm": alg, "minibatch": label, "S": S,
                   "K": pairs[0][0]["K"], "staleness": s, "sync_steps": w, "seeds": seeds,
                   "steps_per_pass": pairs[0][0]["steps_per_pass"]}
            # held-out LL/token: after pass 1, at each run's own stop, at the s=0 run's stop
            row["diff_pass1"] = _stats([b["ll_by_pass"][0] - z["ll_by_pass"][0]
                                        for z, b in pairs])
            row["diff_at_stop"] = _stats([b["at_stop"]["heldout_ll_per_token"]
                                          - z["at_stop"]["heldout_ll_per_token"]
                                          for z, b in pairs])
            row["diff_equal_passes"] = _stats([b["ll_by_pass"][z["stop_pass"] - 1]
                                               - z["ll_by_pass"][z["stop_pass"] - 1]
                                               for z, b in pairs])
            for tag, runs in (("s0", [z for z, _ in pairs]), ("s1", [b for _, b in pairs])):
                row[tag] = {"stop_pass": float(np.mean([r["stop_pass"] for r in runs])),
                            "ll_pass1": float(np.mean([r["ll_by_pass"][0] for r in runs])),
                            "train_cpu_s": float(np.mean([r["train_cpu_s"] for r in runs]))}
                for k in ("heldout_ll_per_token",) + EXTRAS:
                    row[tag][k] = float(np.mean([r["at_stop"][k] for r in runs]))
                    row[tag][k + "_pass1"] = float(np.mean([r["pass1"][k] for r in runs]))
            worst = min(row["diff_pass1"]["mean"], row["diff_at_stop"]["mean"],
                        row["diff_equal_passes"]["mean"])
            row["within_bound"] = bool(worst >= -bound)
            out.append(row)
    return out


def print_summary(rows, bound: float) -> None:
    print("\nHeld-out LL/token difference s − 0 (W: the first W steps with s = 0; paired by "
          "seed; mean ± sd over the seeds [min, max]); bound: a loss of at most %.3g "
          "nats/token" % bound)
    print("| corpus | algorithm | S (steps/pass) | s, W | seeds | after pass 1 | at --passes "
          "auto stop | at equal passes | passes s=0 / s | within |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    fmt = lambda d: "%+.4f ± %.4f [%+.4f, %+.4f]" % (d["mean"], d["sd"], d["min"], d["max"])
    for r in rows:
        print("| %s | %s | %d (%d) | %d, %d | %d | %s | %s | %s | %.1f / %.1f | %s |" % (
            r["corpus"], r["algorithm"], r["S"], r["steps_per_pass"], r["staleness"],
            r["sync_steps"], len(r["seeds"]),
            fmt(r["diff_pass1"]), fmt(r["diff_at_stop"]), fmt(r["diff_equal_passes"]),
            r["s0"]["stop_pass"], r["s1"]["stop_pass"], "yes" if r["within_bound"] else "NO"))
    print("\nPer seed (s − 0: after pass 1 / at the stop / at equal passes)")
    for r in rows:
        print("%s %s S=%d s=%d W=%d: %s" % (
            r["corpus"], r["algorithm"], r["S"], r["staleness"], r["sync_steps"], "; ".join(
            "seed %d: %+.4f / %+.4f / %+.4f" % (sd, a, b, c) for sd, a, b, c in zip(
                r["seeds"], r["diff_pass1"]["per_seed"], r["diff_at_stop"]["per_seed"],
                r["diff_equal_passes"]["per_seed"]))))
    print("\nTopic quality at the stop (after pass 1), means over the seeds: s=0 → s, W")
    print("| corpus | algorithm | S | s, W | held-out LL/token | dead topics | effective "
          "topics | NPMI | training CPU s/s=0 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        z, b = r["s0"], r["s1"]
        cell = lambda k, f: (f + " → " + f + " (" + f + " → " + f + ")") % (
            z[k], b[k], z[k + "_pass1"], b[k + "_pass1"])
        print("| %s | %s | %d | %d, %d | %s | %s | %s | %s | %.2f |" % (
            r["corpus"], r["algorithm"], r["S"], r["staleness"], r["sync_steps"],
            cell("heldout_ll_per_token", "%.4f"),
            cell("dead_topics", "%.1f"), cell("effective_topics", "%.1f"),
            cell("npmi", "%.3f"), b["train_cpu_s"] / z["train_cpu_s"] if z["train_cpu_s"]
            else float("nan")))


def parse_args(argv):
    p = common.base_parser(__doc__)
    p.add_argument("--corpora", default=",".join(CORPORA),
                   help="comma-separated: %s" % ", ".join(CORPORA))
    p.add_argument("--algorithms", default=",".join(ALGORITHMS))
    p.add_argument("--seeds", type=int, default=3, help="N seeds: FIRST..FIRST+N-1")
    p.add_argument("--first-seed", type=int, default=0,
                   help="FIRST (more seeds for a configuration: run again from here and "
                        "--summarise both logs)")
    p.add_argument("--staleness", default="0,1", help="comma-separated s values (0 first)")
    p.add_argument("--sync-steps", default="0,%d" % SYNC_STEPS,
                   help="comma-separated W: each s > 0 also runs with its first W steps at "
                        "s = 0 (0: pipelined from the first step)")
    p.add_argument("--large", default="1024",
                   help="large minibatch sizes, run where they make --min-steps-per-pass steps "
                        "a pass (empty: the defaults only)")
    p.add_argument("--min-steps-per-pass", type=float, default=4.0)
    p.add_argument("--kinds", default="default,large",
                   help="which minibatches: the algorithm's default, the --large ones, or both "
                        "(e.g. one process each)")
    p.add_argument("--K", type=int, default=None,
                   help="topics for every corpus (default: 20news 100, nips 50, wiki 20)")
    p.add_argument("--max-passes", type=int, default=10)
    p.add_argument("--min-gain", type=float, default=AUTO_MIN_GAIN,
                   help="--passes auto's gain per pass (nats/token)")
    p.add_argument("--bound", type=float, default=0.01,
                   help="largest acceptable held-out LL/token loss of s=1 (nats/token)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 1 seed, K = 5, at most 2 passes, large S = 256, W = 0, 8")
    p.add_argument("--summarise", metavar="LOG", nargs="+", default=None,
                   help="train nothing: summarise the JSON records printed by earlier runs")
    p.add_argument("--json", default=os.path.join(common.REPO, "benchmarks", "results",
                                                  "staleness_bench.json"))
    a = p.parse_args(argv)
    if a.quick:
        a.seeds, a.K, a.max_passes, a.large = 1, a.K or 5, min(a.max_passes, 2), "256"
        a.sync_steps = "0,8"
    a.corpora = [c for c in a.corpora.split(",") if c]
    a.algorithms = [x for x in a.algorithms.split(",") if x]
    a.staleness = [staleness.check_staleness(int(x), "--staleness") for x in
                   a.staleness.split(",") if x]
    if not a.staleness or a.staleness[0] != 0:
        p.error("--staleness must start with 0 (the reference every other s is compared to)")
    a.large = [int(x) for x in a.large.split(",") if x]
    a.kinds = [x for x in a.kinds.split(",") if x]
    if not a.kinds or set(a.kinds) - {"default", "large"}:
        p.error("--kinds: default, large or both")
    a.sync_steps = [int(x) for x in a.sync_steps.split(",") if x] or [0]
    return a


def main(argv=None):
    a = parse_args(argv)
    if a.summarise:
        records = []
        for path in a.summarise:
            with open(path) as f:
                records += [json.loads(line) for line in f if line.startswith('{"corpus"')]
    else:
        bench = common.bench_module()
        records = []
        for corpus in a.corpora:
            data = load_corpus(bench, prepare(corpus, a))
            files = training_shards(data, data["path"])
            print("# %s: %d training documents, %d held-out, V = %d, K = %d" % (
                corpus, data["Xtr"].shape[0], data["Xa"].shape[0], len(data["vocab"]),
                a.K or TOPICS[corpus]), flush=True)
            for algorithm in a.algorithms:
                warm_up(a, files, data, algorithm)
                for label, S in minibatches(a, algorithm, data["Xtr"].shape[0]):
                    for seed in range(a.first_seed, a.first_seed + a.seeds):
                        records += run_config(a, bench, corpus, data, files, algorithm,
                                              label, S, seed)
    rows = summarise(records, a.bound)
    print_summary(rows, a.bound)
    with open("/proc/loadavg") as f:
        print("load average at the end: %s (2 cores, shared)" % f.read().split()[0])
    if a.json:
        common.save_results({"summary": rows, "records": records, "bound": a.bound}, a.json,
                            argv)


if __name__ == "__main__":
    main()
