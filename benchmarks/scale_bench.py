#!/usr/bin/env python3
"""Scale evidence (issue 7): throughput and peak memory of training as the corpus grows.

Trains one pass of online VB (K=100, S=256, alpha=0.1, eta=0.01, kappa=0.7, tau0=64: the 20
Newsgroups settings of ../shared/bench) with ``ldabeam train`` (the in-process runner, numba
threads) in a child process on

* synthetic corpora from the LDA generative model (:mod:`pipelines.ingest.synthetic`; V=8,000 like
  Hoffman et al.'s 7,995-word Wikipedia vocabulary, 100 planted topics, mean length 150
  tokens) of 20k, 80k and 320k documents, 20k documents per shard;
* 20 Newsgroups prepared as the bench harness does (``benchmarks/prepare_20news.py``; 17,784
  training documents, V = 29,403) written 1x, 4x and 16x (doc ids made distinct;
  ``benchmarks/memory_bench.write_repeated``),

and reports per size: documents, tokens, wall seconds of the child, the trainer's own
training seconds and CPU seconds (from the run log's ``end`` record: all threads of the child,
start-up and data generation excluded), documents per second of training (wall) and per CPU
second, the rate per CPU second *after start-up* (the same child is first run stopped after
2 steps; its CPU seconds -- loading the numba kernels, reading the first shard, initialising
lambda -- are subtracted, so the one-time cost does not flatter the large corpora: this is
the throughput compared across sizes and used by the projection), the steady-state wall rate
(run log: from the step at 10% of the run to the last), and the child's peak RSS
(``os.wait4`` rusage of exactly that child). One E-step thread by default (``--threads``):
CPU seconds are then work rather than threads spinning on the loaded machine, and the rate
is per core.

``--fixed-iter N`` adds a measurement that takes the algorithm's convergence out of the
comparison. Every size is trained twice more with a fixed E-step: exactly N iterations per
document (``--max-iter N``; the child sets the convergence threshold to 0 -- the CLI and
``OnlineVB`` refuse ``--tol 0`` -- so no document stops early, and the measured iterations
per document, reported, equal N), and exactly 1. The work per document is then the same at
every size, so documents per CPU second at N iterations (``fixed_docs_per_cpu_s``: this is
the rate to compare across sizes for "throughput flat") must be flat unless something in the
system degrades with the corpus size. Steady state throughout: CPU seconds of the child from
the end of step 2 to the end of the last step, timed inside the child, so neither start-up
nor the final write counts. From the two passes, CPU per document = overhead + per iteration
x iterations: ``cpu_us_per_doc_iteration`` and ``cpu_us_per_doc_overhead`` (the CPU a
document costs whatever its iterations: in the E-step its gamma initialisation, its share of
exp(E[log beta]) for the minibatch's words, the statistics and the bound; outside it,
``other_cpu_us_per_doc``, the global step, shard reading and the trainer's bookkeeping, per
document). The normal run's steady CPU per document (``steady_cpu_us_per_doc``) is compared
with the model at its iterations (``model_cpu_us_per_doc``; weighted by the documents'
distinct words, as an iteration over a long document costs more). Also
``fixed_docs_per_s`` (wall, the same steps) and ``fixed_peak_rss_mb``. The overhead is why
the normal run's rate per document-iteration falls on the larger corpora, whose documents
need fewer iterations, even when both costs are flat.

Targets: throughput flat (largest / smallest within +-15%) and peak RSS growing < 20% from the
smallest to the largest size. The machine is shared and loaded, so the wall-clock rate moves
with the other jobs; the CPU-second rate is the steadier of the two and is the one the
projection in docs/cluster.md uses. Nothing here asserts: it prints ratios and writes a CSV
(``benchmarks/results/scale_bench.csv`` by default; one row appended as each run finishes,
so a partial run still leaves its numbers).

    python benchmarks/scale_bench.py                    # everything (~30-60 min here)
    python benchmarks/scale_bench.py --sizes 20000,80000 --news-times 1,4   # quicker
    python benchmarks/scale_bench.py --fixed-iter 20    # plus the fixed-work columns
"""
from __future__ import annotations

import csv
import json
import os
import platform
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402

STARTUP_STEPS = 2
FIELDS = ["corpus", "scale", "documents", "tokens", "vocabulary", "shards", "wall_s",
          "train_s", "cpu_s", "docs_per_s", "docs_per_cpu_s", "steady_docs_per_s",
          "incr_docs_per_cpu_s", "startup_cpu_s", "estep_iterations_per_doc",
          "incr_doc_iterations_per_cpu_s", "tokens_per_cpu_s",
          "peak_rss_mb", "threads", "load_avg_1m", "started_utc"]
# with --fixed-iter N (appended to FIELDS; the default CSV is unchanged)
FIXED_FIELDS = ["fixed_iter", "fixed_iterations_per_doc", "fixed_docs_per_cpu_s",
                "fixed_docs_per_s", "fixed_peak_rss_mb", "cpu_us_per_doc_iteration",
                "cpu_us_per_doc_overhead", "other_cpu_us_per_doc", "steady_cpu_us_per_doc",
                "model_cpu_us_per_doc"]


def synthetic_dataset(root: str, n_docs: int, doc_length: float, seed: int) -> str:
    from pipelines.ingest import synthetic
    out = os.path.join(root, "syn_%d_L%g_s%d" % (n_docs, doc_length, seed))
    if os.path.exists(os.path.join(out, "manifest.json")):
        return out
    spec = synthetic.SyntheticSpec(n_docs=n_docs, n_words=8000, n_topics=100,
                                   doc_length=doc_length, alpha=0.1, eta=0.01, seed=seed)
    t0 = time.time()
    synthetic.write_dataset(spec, out + ".partial", overwrite=True)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(out + ".partial", out)
    print("generated %s in %.0f s" % (out, time.time() - t0), file=sys.stderr, flush=True)
    return out


def news_dataset(cache: str, times: int) -> str:
    from benchmarks.memory_bench import write_repeated
    from benchmarks.prepare_20news import prepare
    prepare(cache)
    src = os.path.join(cache, "ds_train")
    if times == 1:
        return src
    dst = os.path.join(cache, "ds_train_x%d" % times)
    write_repeated(src, dst, times)
    return dst


def _end_record(model: str):
    end, steps = None, []
    with open(os.path.join(model, "run_log.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "end":
                end = rec
            elif rec.get("event") == "step":
                steps.append((int(rec["step"]), int(rec["docs_seen"]), float(rec["elapsed"])))
    if end is None:
        raise SystemExit("no end record in %s/run_log.jsonl" % model)
    return end, steps


def startup_run(shards: str, model: str, threads=None) -> dict:
    """The same child stopped after STARTUP_STEPS steps: its CPU seconds are the one-time
    start-up (kernels loaded, first shard read, lambda initialised) plus those steps."""
    shutil.rmtree(model, ignore_errors=True)
    cmd = _train_cmd(shards, model, threads) + ["--max-steps", STARTUP_STEPS]
    common.run_child_peak_rss(cmd)
    end, _ = _end_record(model)
    it = _iterations(model)["iterations"]
    shutil.rmtree(model, ignore_errors=True)
    return dict(docs=int(end["docs_seen"]), cpu=float(end["cpu_seconds"]),
                elapsed=float(end["elapsed"]), iterations=it)


ITERATIONS_FILE = "scale_bench_iterations.json"
STEPS_FILE = "scale_bench_steps.json"


def child_main(argv, zero_tol: bool = False) -> int:
    """``scale_bench.py --child LDABEAM ARGS...``: run ``ldabeam`` exactly as the CLI does,
    counting the E-step iterations of every global step (``stats.n_iterations``: the E-step
    cost is proportional to them) into MODEL/ITERATIONS_FILE, and per global step into
    MODEL/STEPS_FILE: this process's CPU seconds at the step's end, the CPU seconds of its
    E-step (``OnlineVB._estep``) and of the global step, its documents, E-step iterations and
    non-zero-iterations (a document's iterations times its distinct words, summed: an
    iteration's cost is proportional to the document's distinct words).
    ``zero_tol`` (``--child-zero-tol``): every E-step runs with convergence threshold 0, i.e.
    exactly ``--max-iter`` iterations per document (the threshold is a strict ``<``; the
    state's own ``tol`` is restored after each call, so checkpoints are unchanged)."""
    from lda_core.algorithms.online_vb import OnlineVB
    from pipelines.cli import main
    total = {"iterations": 0, "docs": 0}
    steps = {k: [] for k in ("cpu_end", "estep_cpu", "global_cpu", "docs", "iterations",
                             "nnz_iterations")}
    cur = {"estep_cpu": 0.0, "nnz_iterations": 0}
    step = OnlineVB.global_step
    estep = OnlineVB._estep

    def timed_estep(self, *a, **kw):
        tol = self.tol
        if zero_tol:
            self.tol = 0.0
        c0 = time.process_time()
        try:
            out = estep(self, *a, **kw)
        finally:
            cur["estep_cpu"] += time.process_time() - c0
            self.tol = tol
        res, ne = out[0], out[2]
        cur["nnz_iterations"] += int(np.dot(res.iterations.astype(np.int64),
                                            np.diff(ne.indptr).astype(np.int64)))
        return out

    def counting(self, stats):
        total["iterations"] += int(stats.n_iterations)
        total["docs"] += int(stats.n_docs)
        c0 = time.process_time()
        info = step(self, stats)
        c1 = time.process_time()
        for k, v in (("cpu_end", c1), ("estep_cpu", cur["estep_cpu"]), ("global_cpu", c1 - c0),
                     ("docs", int(stats.n_docs)), ("iterations", int(stats.n_iterations)),
                     ("nnz_iterations", cur["nnz_iterations"])):
            steps[k].append(v)
        cur.update(estep_cpu=0.0, nnz_iterations=0)
        return info

    OnlineVB.global_step = counting
    OnlineVB._estep = timed_estep
    rc = main(argv)
    model = argv[argv.index("--output") + 1]
    with open(os.path.join(model, ITERATIONS_FILE), "w") as f:
        json.dump(total, f)
    with open(os.path.join(model, STEPS_FILE), "w") as f:
        json.dump(steps, f)
    return rc


def steady_breakdown(model: str, skip: int = STARTUP_STEPS) -> dict:
    """From MODEL/STEPS_FILE, the steps after the first ``skip`` (start-up and the final write
    left out): documents, E-step iterations, CPU seconds (whole steps), of which the E-step's
    (``OnlineVB._estep``) and the global step's."""
    with open(os.path.join(model, STEPS_FILE)) as f:
        s = {k: np.asarray(v, dtype=np.float64) for k, v in json.load(f).items()}
    n = len(s["docs"])
    if n < skip + 2:
        raise SystemExit("%d steps in %s: too few for a steady state after %d (a larger "
                         "corpus is needed)" % (n, model, skip))
    return dict(steps=n - skip, docs=float(s["docs"][skip:].sum()),
                iterations=float(s["iterations"][skip:].sum()),
                nnz_iterations=float(s["nnz_iterations"][skip:].sum()),
                cpu=float(s["cpu_end"][-1] - s["cpu_end"][skip - 1]),
                estep_cpu=float(s["estep_cpu"][skip:].sum()),
                global_cpu=float(s["global_cpu"][skip:].sum()))


def fixed_work_run(shards: str, model: str, threads, n_iter: int) -> dict:
    """One pass with every document's E-step running exactly ``n_iter`` iterations: the
    steady breakdown, the steady wall rate (run log, the same steps) and the peak RSS."""
    shutil.rmtree(model, ignore_errors=True)
    cmd = _train_cmd(shards, model, threads, zero_tol=True) + ["--max-iter", n_iter]
    _, rss, _ = common.run_child_peak_rss(cmd)
    b = steady_breakdown(model)
    _, steps = _end_record(model)
    k0, k1 = steps[STARTUP_STEPS - 1], steps[-1]
    shutil.rmtree(model, ignore_errors=True)
    b["wall_rate"] = (k1[1] - k0[1]) / (k1[2] - k0[2]) if k1[2] > k0[2] else ""
    b["peak_rss_mb"] = rss
    return b


def fixed_work_columns(free: dict, shards: str, model: str, threads, n_iter: int) -> dict:
    """The --fixed-iter columns: passes with exactly ``n_iter`` and exactly 1 E-step
    iteration per document; CPU per document = overhead + per_iteration x iterations, solved
    from the two (the same documents and steps); the normal run (``free``, its steady
    breakdown) modelled with them, its iterations weighted by the documents' distinct words
    (a long document's iteration costs more, and long documents converge in fewer)."""
    full = fixed_work_run(shards, model, threads, n_iter)
    one = fixed_work_run(shards, model, threads, 1)
    per_doc_n = full["cpu"] / full["docs"]
    per_doc_1 = one["cpu"] / one["docs"]
    it_n = full["iterations"] / full["docs"]
    it_1 = one["iterations"] / one["docs"]
    per_it = (per_doc_n - per_doc_1) / (it_n - it_1)
    overhead = per_doc_1 - per_it * it_1
    # the same per non-zero-iteration (in the fixed passes those are N and 1 x non-zeros)
    per_nnz_it = ((full["cpu"] - one["cpu"]) / (full["nnz_iterations"] - one["nnz_iterations"]))
    return dict(
        fixed_iter=n_iter, fixed_iterations_per_doc=round(it_n, 3),
        fixed_docs_per_cpu_s=round(1.0 / per_doc_n, 1),
        fixed_docs_per_s=round(full["wall_rate"], 1) if full["wall_rate"] else "",
        fixed_peak_rss_mb=round(full["peak_rss_mb"], 1),
        cpu_us_per_doc_iteration=round(1e6 * per_it, 3),
        cpu_us_per_doc_overhead=round(1e6 * overhead, 2),
        other_cpu_us_per_doc=round(1e6 * (full["cpu"] - full["estep_cpu"]) / full["docs"], 2),
        steady_cpu_us_per_doc=round(1e6 * free["cpu"] / free["docs"], 2),
        model_cpu_us_per_doc=round(1e6 * (overhead + per_nnz_it * free["nnz_iterations"]
                                          / free["docs"]), 2))


def _iterations(model: str) -> dict:
    with open(os.path.join(model, ITERATIONS_FILE)) as f:
        return json.load(f)


def _train_cmd(shards: str, model: str, threads=None, zero_tol: bool = False):
    return ([common.PYTHON, os.path.abspath(__file__),
             "--child-zero-tol" if zero_tol else "--child"] + common.LDABEAM[3:]
            + ["--log-level", "WARNING", "train"]
            + common.protocol_train_args(shards, model, threads))


def train_once(shards: str, model: str, threads=None, fixed_iter: int = 0) -> dict:
    """One pass in a child; wall, peak RSS and the trainer's own seconds (with
    ``fixed_iter``, also the CPU breakdown and the fixed-work pass)."""
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    from lda_core.storage.vocab_file import Vocabulary
    before = startup_run(shards, model, threads)
    shutil.rmtree(model, ignore_errors=True)
    cmd = _train_cmd(shards, model, threads)
    load = os.getloadavg()[0]
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    wall, rss, _ = common.run_child_peak_rss(cmd)
    end, steps = _end_record(model)
    iters = _iterations(model)["iterations"]
    free = steady_breakdown(model) if fixed_iter else None
    shutil.rmtree(model, ignore_errors=True)
    extra = fixed_work_columns(free, shards, model, threads, fixed_iter) if fixed_iter else {}
    # the start-up measured before and after the full run, the cheaper one: a numba
    # recompile (another process touching lda_core's sources invalidates the cache) must
    # not be counted as start-up
    after = startup_run(shards, model, threads)
    start = min(before, after, key=lambda r: r["cpu"])
    files = dataset.resolve_shards(shards)
    man = manifest.read_manifest(shards) if os.path.exists(
        os.path.join(shards, "manifest.json")) else {}
    tokens = (man.get("tokens") or {}).get("train")
    if man.get("repeated"):
        tokens = tokens * int(man["repeated"]) if tokens else None
    vocab = Vocabulary.read(os.path.join(shards, "vocab.tsv"))
    docs = int(end["docs_seen"])
    # steady state: from the step at 10% of the run to the last step (the one-time start-up
    # -- loading the numba kernels, the first shard, initialising lambda -- left out)
    steady = ""
    if len(steps) >= 10:
        k0 = steps[len(steps) // 10]
        k1 = steps[-1]
        if k1[2] > k0[2]:
            steady = round((k1[1] - k0[1]) / (k1[2] - k0[2]), 1)
    shutil.rmtree(model, ignore_errors=True)
    return dict(documents=docs, tokens=tokens, vocabulary=len(vocab), shards=len(files),
                wall_s=round(wall, 2), train_s=round(end["elapsed"], 2),
                cpu_s=round(end["cpu_seconds"], 2),
                docs_per_s=round(docs / end["elapsed"], 1),
                docs_per_cpu_s=round(docs / end["cpu_seconds"], 1),
                steady_docs_per_s=steady,
                incr_docs_per_cpu_s=round((docs - start["docs"])
                                          / max(1e-9, end["cpu_seconds"] - start["cpu"]), 1),
                startup_cpu_s=round(start["cpu"], 2),
                estep_iterations_per_doc=round(iters / max(1, docs), 2),
                incr_doc_iterations_per_cpu_s=round(
                    (iters - start["iterations"])
                    / max(1e-9, end["cpu_seconds"] - start["cpu"]), 0),
                tokens_per_cpu_s=round(tokens / end["cpu_seconds"], 0) if tokens else "",
                peak_rss_mb=round(rss, 1), threads=threads or "", load_avg_1m=round(load, 2),
                started_utc=started, **extra)


def report(rows, label: str) -> None:
    rows = [r for r in rows if r["corpus"] == label]
    if len(rows) < 2:
        return
    a, b = rows[0], rows[-1]
    thr_wall = float(b["docs_per_s"]) / float(a["docs_per_s"])
    thr_cpu = float(b["incr_docs_per_cpu_s"]) / float(a["incr_docs_per_cpu_s"])
    thr_cpu_raw = float(b["docs_per_cpu_s"]) / float(a["docs_per_cpu_s"])
    thr_it = (float(b["incr_doc_iterations_per_cpu_s"])
              / float(a["incr_doc_iterations_per_cpu_s"]))
    thr_steady = (float(b["steady_docs_per_s"]) / float(a["steady_docs_per_s"])
                  if a["steady_docs_per_s"] and b["steady_docs_per_s"] else float("nan"))
    rss = float(b["peak_rss_mb"]) / float(a["peak_rss_mb"])
    ok = lambda r: "met" if 0.85 <= r <= 1.15 else "NOT met"
    print("%s: %s -> %s documents: throughput ratio (largest/smallest): per CPU second "
          "after start-up %.3f (target 0.85..1.15: %s); including start-up %.3f, wall %.3f, "
          "steady-state wall %.3f (wall rates move with the machine's load); peak RSS ratio "
          "%.3f (target < 1.20: %s)"
          % (label, a["documents"], b["documents"], thr_cpu, ok(thr_cpu), thr_cpu_raw,
             thr_wall, thr_steady, rss, "met" if rss < 1.2 else "NOT met"))
    print("%s: E-step iterations per document %.1f -> %.1f (documents get cheaper as the "
          "topics sharpen, so a larger corpus, which spends more of its pass past the first "
          "steps, averages fewer iterations per document); document-iterations per CPU "
          "second after start-up, ratio %.3f"
          % (label, float(a["estep_iterations_per_doc"]), float(b["estep_iterations_per_doc"]),
             thr_it))
    if a.get("fixed_iter"):
        r = lambda k: float(b[k]) / float(a[k])
        fw = (r("fixed_docs_per_s") if a["fixed_docs_per_s"] and b["fixed_docs_per_s"]
              else float("nan"))
        print("%s: fixed E-step work (exactly %s iterations per document; measured %s -> %s): "
              "documents per CPU second (steady state) ratio %.3f (target 0.85..1.15: %s); "
              "wall %.3f; peak RSS ratio %.3f"
              % (label, a["fixed_iter"], a["fixed_iterations_per_doc"],
                 b["fixed_iterations_per_doc"], r("fixed_docs_per_cpu_s"),
                 ok(r("fixed_docs_per_cpu_s")), fw, r("fixed_peak_rss_mb")))
        print("%s: CPU per document = overhead + per iteration x iterations: per "
              "document-iteration %.2f -> %.2f us (ratio %.3f), overhead per document %.1f -> "
              "%.1f us (ratio %.3f; of which outside the E-step %.1f -> %.1f us); the normal "
              "run's steady CPU per document %.1f -> %.1f us, modelled %.1f -> %.1f us (at "
              "its own iterations)"
              % (label, float(a["cpu_us_per_doc_iteration"]),
                 float(b["cpu_us_per_doc_iteration"]), r("cpu_us_per_doc_iteration"),
                 float(a["cpu_us_per_doc_overhead"]), float(b["cpu_us_per_doc_overhead"]),
                 r("cpu_us_per_doc_overhead"), float(a["other_cpu_us_per_doc"]),
                 float(b["other_cpu_us_per_doc"]), float(a["steady_cpu_us_per_doc"]),
                 float(b["steady_cpu_us_per_doc"]), float(a["model_cpu_us_per_doc"]),
                 float(b["model_cpu_us_per_doc"])))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        return child_main(argv[1:])
    if argv[:1] == ["--child-zero-tol"]:
        return child_main(argv[1:], zero_tol=True)
    p = common.base_parser(__doc__)
    p.add_argument("--sizes", default="20000,80000,320000",
                   help="synthetic corpus sizes (documents), comma-separated ('' to skip)")
    p.add_argument("--news-times", default="1,4,16",
                   help="20 Newsgroups repetitions, comma-separated ('' to skip)")
    p.add_argument("--doc-length", type=float, default=150.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="E-step threads (numba); 1 by default so CPU seconds are work, not "
                        "threads spinning on a loaded machine, and docs/CPU-s is per core")
    p.add_argument("--synthetic-dir", default=os.path.join(common.CACHE, "synthetic"))
    p.add_argument("--csv", default=os.path.join(common.REPO, "benchmarks", "results",
                                                 "scale_bench.csv"))
    p.add_argument("--keep-data", action="store_true",
                   help="keep the generated synthetic corpora (they are large)")
    p.add_argument("--fixed-iter", type=int, default=0,
                   help="also train every size with exactly N E-step iterations per document "
                        "(the same work per document at every size) and split the CPU "
                        "seconds; adds the columns %s (default 0: off)"
                        % ", ".join(FIXED_FIELDS))
    a = p.parse_args(argv)
    if a.fixed_iter == 1 or a.fixed_iter < 0:
        p.error("--fixed-iter must be 0 (off) or >= 2 (it is compared with 1 iteration)")
    fields = FIELDS + (FIXED_FIELDS if a.fixed_iter else [])
    sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
    times = [int(x) for x in a.news_times.split(",") if x.strip()]
    os.makedirs(os.path.dirname(os.path.abspath(a.csv)), exist_ok=True)
    with open(a.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
    print("# %s, %s, %d cores; K=%d S=%d one pass, in-process trainer"
          % (platform.node(), platform.python_version(), os.cpu_count() or 1, common.K,
             common.BATCH), flush=True)
    rows = []
    model = os.path.join(common.CACHE, "scale_model_%d" % os.getpid())

    def emit(row):
        rows.append(row)
        with open(a.csv, "a", newline="") as f:
            csv.DictWriter(f, fields).writerow(row)
        print("| %s | %s | %d docs | train %.1f s, CPU %.1f s (start-up %.1f) | %.0f docs/s "
              "(steady %s), %.0f docs/CPU-s, %.0f after start-up | peak RSS %.0f MB | "
              "load %.1f |"
              % (row["corpus"], row["scale"], row["documents"], row["train_s"], row["cpu_s"],
                 row["startup_cpu_s"], row["docs_per_s"], row["steady_docs_per_s"],
                 row["docs_per_cpu_s"], row["incr_docs_per_cpu_s"], row["peak_rss_mb"],
                 row["load_avg_1m"]), flush=True)
        if a.fixed_iter:
            print("|   fixed work: %s E-step iterations/doc (measured %s) | %.0f docs/CPU-s, "
                  "%s docs/s (steady) | peak RSS %.0f MB | CPU per document %.1f us overhead "
                  "+ %.2f us per iteration; normal run %.1f us per document, modelled %.1f |"
                  % (row["fixed_iter"], row["fixed_iterations_per_doc"],
                     row["fixed_docs_per_cpu_s"], row["fixed_docs_per_s"],
                     row["fixed_peak_rss_mb"], row["cpu_us_per_doc_overhead"],
                     row["cpu_us_per_doc_iteration"], row["steady_cpu_us_per_doc"],
                     row["model_cpu_us_per_doc"]), flush=True)

    # one throw-away run first: compiles the numba kernels if the cache is stale, so no
    # measured run pays for compiling
    warm = synthetic_dataset(a.synthetic_dir, 2000, a.doc_length, a.seed)
    startup_run(warm, model, a.threads)
    shutil.rmtree(warm, ignore_errors=True)
    for n in sizes:
        ds = synthetic_dataset(a.synthetic_dir, n, a.doc_length, a.seed)
        r = train_once(ds, model, a.threads, a.fixed_iter)
        emit(dict(r, corpus="synthetic-lda", scale=n))
        if not a.keep_data:
            shutil.rmtree(ds, ignore_errors=True)
    for t in times:
        ds = news_dataset(a.cache, t)
        r = train_once(ds, model, a.threads, a.fixed_iter)
        emit(dict(r, corpus="20newsgroups", scale="x%d" % t))
    print()
    report(rows, "synthetic-lda")
    report(rows, "20newsgroups")
    print("CSV: %s" % a.csv)


if __name__ == "__main__":
    sys.exit(main())
