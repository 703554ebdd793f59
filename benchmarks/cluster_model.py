#!/usr/bin/env python3
"""Cost model of a training run on Dataflow / Flink, fed by the constants the benchmarks measured.

Every number the model uses is either read from a results file of another benchmark script
(each printed with the file, row and run it came from), measured here on the bundled
Wikipedia sample or on the code itself (a state's and a statistics block's bytes), or a cloud
constant stated as an assumption in ``CLOUD`` below. When a results file lacks a key written
by its newer script, the older file's value is used and the output says "from the older run".

The model of one training step of online VB on W workers of c vCPUs each::

    E-step      = ceil(S / (W c)) x t_doc              documents are the unit spread over cores
                  t_doc = nnz/doc x iterations x CPU-s per (non-zero x iteration) at K
    delivery    = 2 x bytes / bandwidth                written once by the global step's
                  worker, then read by every worker at once (the whole state when the
                  runner reloads it every step, else the combined statistics)
    combine     = W x partial bytes / bandwidth        combiner-lifted: one reducer receives a
                  partial per worker (``--combine tree``: ceil(log2 W) x partial bytes;
                  ``--combine sharded``, a design not built: statistics keyed by word block,
                  partial bytes once, the global step spread over W, each worker reading only
                  its words' rows of the state)
                  partial bytes = min(V, ceil(S/W) x nnz/doc) x K x bytes per statistic
    global step = measured global step x (K V) / (K0 V0)   serial
    overhead    = the runner's measured per-step overhead  serial, assumed independent of W
    step        = E-step + delivery + combine + global step + overhead

    train     = windows x job start + steps x step        steps = ceil(D/S); one pipeline per
                                                           window of ceil(docs per window / S)
    vectorize = job start + D x vectorize CPU-s per document / (W c)
    cost      = W x (c x $/vCPU-h + GB x $/GB-h) x (train + vectorize) hours

Run (a): the 3.3 M-article Wikipedia run of Hoffman et al. (K = 100, V = 7,995), documents
shaped like the bundled sample's articles under a 7,995-word vocabulary; run (b): 100 M
documents at K = 1,000, V = 100,000, shaped like the documents the E-step benchmark timed.
Both for W = 1, 2, 4, ..., 256; speed-up against W is plotted (matplotlib) or tabulated (CSV).

    python benchmarks/cluster_model.py [--minibatch 4096] [--combine lifted|tree|sharded]
        [--job-start SECONDS] [--bandwidth BYTES_PER_S] [--estep-json F] [--beam-json F]
        [--vectorize-json F] [--json OUT] [--plot OUT.png] [--markdown OUT.md]
"""
from __future__ import annotations

import argparse
import bz2
import csv
import json
import math
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402

RESULTS = os.path.join(common.REPO, "benchmarks", "results")
SAMPLE = os.path.join(common.REPO, "data", "enwiki-sample-206pages.xml.bz2")
WORKERS = [2 ** i for i in range(9)]                 # 1 .. 256

# Cloud constants: assumptions, not measurements (replace them with your own).
CLOUD = {
    "machine_type": "n2-standard-4",
    "vcpus_per_worker": 4,                # 1 vCPU there taken as 1 CPU of the benchmark machine
    "memory_gb_per_worker": 16.0,
    "price_per_vcpu_hour": 0.056,         # Dataflow batch list price, us-central1
    "price_per_gb_hour": 0.003557,        # (disks, Shuffle and storage extra)
    "job_start_s": 240.0,                 # a Dataflow job's worker VMs booting, per pipeline
    "network_bytes_per_s": 250e6,         # per worker, object-store reads/writes (2 Gbit/s)
}

# The two runs projected; non-zeros per document, iterations and vectorize CPU per document
# are filled in from the measurements (``load_constants``).
RUN_A = {"name": "(a) Wikipedia, 3.3 M articles, K=100", "D": 3_300_000, "K": 100, "V": 7995}
RUN_B = {"name": "(b) 100 M documents, K=1,000, V=100,000", "D": 100_000_000, "K": 1000,
         "V": 100_000}


# ------------------------------------------------------------------------- the model
def step_parts(c: dict, cloud: dict, run: dict, W: int, S: int, combine: str = "lifted") -> dict:
    """Seconds of each part of one training step on ``W`` workers (module docstring)."""
    K, V = run["K"], run["V"]
    cores = W * cloud["vcpus_per_worker"]
    bw = cloud["network_bytes_per_s"]
    t_doc = run["nnz_per_doc"] * run["iterations"] * c["estep_s_per_nnz_iter"][K]
    partial = min(V, math.ceil(S / W) * run["nnz_per_doc"]) * K * c["stats_bytes_per_value"]
    combined = min(V, S * run["nnz_per_doc"]) * K * c["stats_bytes_per_value"]
    state = K * V * c["state_bytes_per_value"]
    kv0, g0 = min(c["global_step_points"], key=lambda p: abs(math.log(p[0] / (K * V))))
    global_step = g0 * (K * V) / kv0
    # written once by the global step's worker, then read by every worker (in parallel)
    delivery = 2 * (state if c["state_reloaded_per_step"] else combined) / bw
    if combine == "tree":
        combine_s = math.ceil(math.log2(W)) * partial / bw if W > 1 else partial / bw
    elif combine == "lifted":
        combine_s = W * partial / bw
    elif combine == "sharded":
        # keyed by word block: every worker sends 1/W of its partial to each of W reducers,
        # which apply the global step to their rows; a worker then reads only its words' rows
        combine_s = partial / bw
        global_step /= W
        delivery = (state / W + min(V, math.ceil(S / W) * run["nnz_per_doc"]) * K
                    * c["state_bytes_per_value"]) / bw
    else:
        raise ValueError("combine must be 'lifted', 'tree' or 'sharded', got %r" % (combine,))
    return {
        "estep": math.ceil(S / cores) * t_doc,
        "delivery": delivery,
        "combine": combine_s,
        "global_step": global_step,
        "overhead": c["per_step_overhead_s"],
    }


def project(c: dict, cloud: dict, run: dict, W: int, S: int, combine: str = "lifted") -> dict:
    """Wall seconds and dollars of vectorize + one training pass of ``run`` on ``W`` workers."""
    parts = step_parts(c, cloud, run, W, S, combine)
    step = sum(parts.values())
    steps = math.ceil(run["D"] / S)
    per_window = min(c["max_window"], max(1, math.ceil(c["docs_per_window"] / S)))
    windows = math.ceil(steps / per_window)
    cores = W * cloud["vcpus_per_worker"]
    train = windows * cloud["job_start_s"] + steps * step
    vectorize = cloud["job_start_s"] + run["D"] * run["vectorize_cpu_s_per_doc"] / cores
    total = train + vectorize
    per_hour = W * (cloud["vcpus_per_worker"] * cloud["price_per_vcpu_hour"]
                    + cloud["memory_gb_per_worker"] * cloud["price_per_gb_hour"])
    return {"workers": W, "S": S, "steps": steps, "windows": windows, "step_s": step,
            "parts_s": parts, "train_s": train, "vectorize_s": vectorize, "total_s": total,
            "cost_usd": per_hour * total / 3600.0}


def serial_s(c: dict, cloud: dict, run: dict, S: int, combine: str = "lifted") -> float:
    """What no number of workers shortens (Amdahl's serial part, a lower bound of every W's
    total): the job starts, and per step the parts at W -> infinity -- one document's E-step
    per core, the state delivery, the global step (spread over W only when sharded) and the
    overhead; the combine is left out (it is >= 0 and, lifted, grows with W)."""
    p = project(c, cloud, run, 1, S, combine)
    parts = step_parts(c, cloud, run, 2 ** 40, S, combine)
    per_step = sum(v for k, v in parts.items() if k != "combine")
    return (p["windows"] + 1) * cloud["job_start_s"] + p["steps"] * per_step


def sweep(c: dict, cloud: dict, run: dict, S: int, workers=WORKERS,
          combine: str = "lifted") -> List[dict]:
    """``project`` for every W, with the speed-up over W = 1 and the Amdahl limit."""
    rows = [project(c, cloud, run, W, S, combine) for W in workers]
    base = project(c, cloud, run, 1, S, combine)["total_s"]
    limit = base / serial_s(c, cloud, run, S, combine)
    for r in rows:
        r["speedup"] = base / r["total_s"]
        r["amdahl_limit"] = limit
    return rows


def time_shares(r: dict, job_start_s: float) -> Dict[str, float]:
    """Where the total of one ``project`` row goes, as fractions: job starts, vectorize work,
    E-step, bytes moved (state delivery + combine), global step + overhead."""
    p, n = r["parts_s"], r["steps"]
    parts = {"job starts": (r["windows"] + 1) * job_start_s,
             "vectorize": r["vectorize_s"] - job_start_s,
             "E-step": n * p["estep"],
             "bytes moved": n * (p["delivery"] + p["combine"]),
             "global step + overhead": n * (p["global_step"] + p["overhead"])}
    return {k: v / r["total_s"] for k, v in parts.items()}


def flattening_point(rows: List[dict], gain: float = 1.10) -> Optional[int]:
    """The first W whose doubling gains less than ``gain`` in speed-up (None: never)."""
    for a, b in zip(rows, rows[1:]):
        if b["speedup"] < gain * a["speedup"]:
            return a["workers"]
    return None


def busy_minibatch(c: dict, cloud: dict, run: dict, W: int, share: float,
                   combine: str = "lifted") -> Optional[int]:
    """The smallest power-of-two S (256 .. min(2^22, D)) whose step spends at least ``share``
    of its time in the E-step on ``W`` workers (None: none does)."""
    for e in range(8, 23):
        if 2 ** e > run["D"]:
            break
        parts = step_parts(c, cloud, run, W, 2 ** e, combine)
        if parts["estep"] >= share * sum(parts.values()):
            return 2 ** e
    return None


# ------------------------------------------------------------------- the measurements
def _load(path: str) -> dict:
    if not os.path.exists(path):
        raise SystemExit("%s is absent: run %s first (or pass its path)"
                         % (path, os.path.basename(path).replace(".json", ".py")))
    with open(path) as f:
        return json.load(f)


def _results_name(path: str) -> str:
    """``benchmarks/results/NAME`` for a results file of any checkout, else the path."""
    path = os.path.abspath(path)
    i = path.find(os.path.join("benchmarks", "results", ""))
    return path[i:] if i >= 0 else path


def _run_tag(doc: dict, path: str) -> str:
    run = doc.get("run", {})
    return "%s (run %s, commit %s, load %s)" % (
        _results_name(path), run.get("utc", "?"), run.get("git_commit", "?"),
        "%.1f" % run["load_average_at_end"][0] if run.get("load_average_at_end") else "?")


def estep_constants(path: str, c: dict, src: dict) -> None:
    """CPU-s per (non-zero x iteration), iterations and the documents' shape, per K (float32
    rows: the E-step's default dtype)."""
    doc = _load(path)
    tag = _run_tag(doc, path)
    c["estep_s_per_nnz_iter"], c["estep_rows"] = {}, {}
    for r in doc["results"]:
        if r.get("dtype") != "float32":
            continue
        K = int(r["K"])
        # iterations per non-zero (each document's weighted by its non-zeros) when measured:
        # the work is sum_d nnz_d x iterations_d
        its = r.get("nnz_weighted_iterations") or r["mean_iterations"]
        c["estep_s_per_nnz_iter"][K] = r["ours_cpu_s"] / (r["nnz"] * its)
        row = {"iterations": its}
        if "docs" in r and "tokens" in r:
            row.update(nnz_per_doc=r["nnz"] / r["docs"], tokens_per_doc=r["tokens"] / r["docs"])
            how = tag
        else:
            how = tag + ", from the older run (no docs/tokens keys)"
        c["estep_rows"][K] = row
        key = "nnz_weighted_iterations" if r.get("nnz_weighted_iterations") else \
            "mean_iterations"
        src["estep K=%d" % K] = ("%.3g CPU-ns per non-zero x iteration, %.1f iterations "
                                 "[ours_cpu_s / (nnz x %s)]: %s"
                                 % (c["estep_s_per_nnz_iter"][K] * 1e9, its, key, how))
        if "flops_per_s" in r and "peak_fraction" in r:
            src["estep K=%d" % K] += "; %.0f %% of float32 peak" % (100 * r["peak_fraction"])
    if not c["estep_s_per_nnz_iter"]:
        raise SystemExit("%s has no float32 rows" % path)


# phases of a window, not of a step: the model charges a job start per window instead
WINDOW_PHASES = ("pipeline_build", "pipeline_start", "pipeline_finish", "checkpoint")


# the runners closest to a cluster first: worker processes running the two stages per step
# that remote runners run (local runs chain one stage per step through files every worker
# reads: pipelines.training.beam_window.chained), then an external worker pool, then any workers
CLUSTER_RUNNERS = ("beam-workers-2-two-stage", "portable-pool", "beam-workers-2",
                   "beam 2 workers")


def _beam_row(rows: List[dict]) -> dict:
    """The row for a cluster (``CLUSTER_RUNNERS`` in order); of that runner's rows the
    smallest model (the K = 100 run, not the big-model one), then the largest minibatch."""
    for name in CLUSTER_RUNNERS:
        cand = [r for r in rows if r.get("runner") == name]
        if cand:
            return min(cand, key=lambda r: (r.get("K", 0) * r.get("V", 0), -r.get("S", 0)))
    raise SystemExit("beam_train_bench.json has no worker-process row")


def _overhead(r: dict, tag: str, src: dict) -> float:
    """Serial seconds per step besides the E-step and the global step: the bench's
    ``per_step_overhead_s`` less the window's start/finish share (``WINDOW_PHASES``, charged
    as the job start instead); the older file: Beam's wall minus the in-process trainer's."""
    if "per_step_overhead_s" in r:
        per = r.get("breakdown") or {}
        window = sum(per.get(k, 0.0) for k in WINDOW_PHASES)
        v = r["per_step_overhead_s"] - window
        src["per-step overhead"] = (
            "%.3f s = per_step_overhead_s %.3f - window start/finish %.3f (%s), runner %r, "
            "K=%d, V=%d, S=%d; breakdown per step: %s: %s" % (
                v, r["per_step_overhead_s"], window, "+".join(WINDOW_PHASES), r["runner"],
                r["K"], r["V"], r["S"],
                ", ".join("%s %.3f" % kv for kv in sorted(per.items())), tag))
        return v
    D = round(r["docs_per_s"] * r["wall"])
    steps = math.ceil(D / r["S"])
    v = (r["wall"] - r["inprocess_wall"]) / steps
    src["per-step overhead"] = (
        "%.3f s = (wall - in-process wall) / %d steps, runner %r, S=%d (includes the workers' "
        "start-up): %s, from the older run" % (v, steps, r["runner"], r["S"], tag))
    return v


def measured_global_step(K: int = 100, V: int = 8000, repeats: int = 5) -> float:
    """Seconds of one online-VB global step at (K, V) with every word touched (the fastest of
    ``repeats``): the fallback when no results file has the global step."""
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.algorithms.vb_stats import VBStats
    rng = np.random.default_rng(0)
    algo = OnlineVB(K, V, batch_size=4096, corpus_size=1_000_000, seed=0)
    best = float("inf")
    for _ in range(repeats):
        stats = VBStats(n_topics=K, n_words=V, word_ids=np.arange(V, dtype=np.int32),
                        sstats=rng.random((V, K)), n_docs=4096, n_tokens=600_000)
        t0 = time.perf_counter()
        algo.global_step(stats)
        best = min(best, time.perf_counter() - t0)
    return best


def measured_bytes_per_value(K: int = 20, V: int = 500) -> Dict[str, float]:
    """Bytes per topic-word value of the online-VB state's arrays and of a dense statistics
    block as encoded for the combine, measured on the code at a small (K, V)."""
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.algorithms.vb_stats import VBStats
    state = OnlineVB(K, V, seed=0).to_state()
    state_bytes = sum(np.asarray(a).nbytes for a in state.arrays.values())
    stats = VBStats(n_topics=K, n_words=V, word_ids=np.arange(V, dtype=np.int32),
                    sstats=np.ones((V, K)), n_docs=1, n_tokens=1)
    return {"state": state_bytes / (K * V), "stats": len(stats.to_bytes()) / (K * V)}


def beam_constants(path: str, c: dict, src: dict, big_path: str = "") -> None:
    """Per-step overhead of the runner closest to a cluster, the global step (its points from
    ``path`` and from the big-model run in ``big_path``), bytes."""
    doc = _load(path)
    tag = _run_tag(doc, path)
    rows = doc["results"] if isinstance(doc.get("results"), list) else doc.get("rows", [])
    r = _beam_row(rows)
    c["runner"] = r["runner"]
    c["per_step_overhead_s"] = _overhead(r, tag, src)
    points = [p + (tag,) for p in _global_step_from_rows(rows)]
    if big_path and os.path.exists(big_path):
        big = _load(big_path)
        have = {kv for kv, _, _, _ in points}
        points += [p + (_run_tag(big, big_path),)
                   for p in _global_step_from_rows(big.get("results") or []) if p[0] not in have]
        points.sort()
    if points:
        c["global_step_points"] = [[kv, sec] for kv, sec, _, _ in points]
        src["global step"] = "; ".join("%.4f s at K x V = %s (%s): %s"
                                       % (sec, format(kv, ","), how, t)
                                       for kv, sec, how, t in points)
    else:
        c["global_step_points"] = [[100 * 8000, measured_global_step()]]
        src["global step"] = ("%.4f s at K=100, V=8,000, every word touched: measured here "
                              "(no results file has it)" % c["global_step_points"][0][1])
    src["global step"] += "; scaled by K x V from the point nearest in K x V"
    per_value = measured_bytes_per_value()
    c["state_bytes_per_value"] = per_value["state"]
    c["stats_bytes_per_value"] = per_value["stats"]
    src["state bytes"] = ("%.2f bytes per topic-word value: measured on OnlineVB(K=20, V=500)"
                          ".to_state()" % per_value["state"])
    if r.get("state_bytes") and r.get("K") and r.get("V"):
        src["state bytes"] += "; the bench's run: %.2f (%d bytes at K=%d, V=%d)" % (
            r["state_bytes"] / (r["K"] * r["V"]), r["state_bytes"], r["K"], r["V"])
    src["statistics bytes"] = ("%.2f bytes per topic-word value of a dense block: measured on "
                               "VBStats.to_bytes()" % per_value["stats"])
    if r.get("stats_bytes_per_step") and r.get("K") and r.get("V"):
        src["statistics bytes"] += "; the bench's run: %d bytes per step at K=%d, V=%d" % (
            r["stats_bytes_per_step"], r["K"], r["V"])
    c["state_reloaded_per_step"], src["state delivery"] = _state_delivery(r, tag)
    worker_memory(rows, tag, src)


def worker_memory(rows: List[dict], tag: str, src: dict) -> None:
    """The largest model's measured worker peak RSS against its state, when a row has it."""
    big = [x for x in rows if x.get("worker_peak_rss_bytes") and x.get("state_bytes")]
    if big:
        b = max(big, key=lambda x: x["K"] * x["V"])
        src["worker memory"] = ("peak RSS of a worker process %.2f x the state (%.0f MB) at "
                                "K=%d, V=%d, runner %r: %s" % (
                                    max(b["worker_peak_rss_bytes"]) / b["state_bytes"],
                                    b["state_bytes"] / 1e6, b["K"], b["V"], b["runner"], tag))


def _state_delivery(r: dict, tag: str) -> tuple:
    """(does every worker read the whole state each step?, how we know): from the bench's
    state bytes delivered per step (summed over workers) against the state's bytes."""
    if r.get("state_delivery_bytes_per_step") is None or not r.get("state_bytes"):
        return True, ("every worker reads the whole state each step (the runner's behaviour: "
                      "docs/beam-training.md, 'States inside a window'; the older run has no "
                      "bytes delivered)")
    ratio = r["state_delivery_bytes_per_step"] / r["state_bytes"]
    how = ("%.2f state sizes delivered per step (summed over workers), runner %r: %s"
           % (ratio, r["runner"], tag))
    if ratio >= 0.5:
        return True, "every worker reads the whole state each step: " + how
    return False, "the state is shipped once per worker, then the statistics: " + how


def _global_step_from_rows(rows: List[dict]) -> List[tuple]:
    """[(K x V, seconds per global step, how)], one per K x V measured, from the row of the
    runner nearest a cluster (``CLUSTER_RUNNERS`` order, then any) (``global_step_s``: wall
    seconds per step; the ``breakdown`` sums them over workers)."""
    have = [r for r in rows if r.get("global_step_s") is not None and r.get("K") and r.get("V")]
    rank = {n: i for i, n in enumerate(CLUSTER_RUNNERS)}
    out = {}
    for r in sorted(have, key=lambda r: -rank.get(r["runner"], len(rank))):
        out[r["K"] * r["V"]] = (r["K"] * r["V"], r["global_step_s"],
                                "global_step_s, runner %r" % r["runner"])
    return [out[kv] for kv in sorted(out)]


def sample_stats(src: dict) -> dict:
    """Shape of the bundled sample's articles under a Hoffman-sized vocabulary: ``ldabeam
    vectorize`` of data/ with the 7,995 most frequent words (gensim stop words removed, words
    in >= 2 articles); non-zeros and tokens per kept article from its shards, and the dump's
    decompressed and compressed bytes per kept article (redirects and skipped pages included)."""
    import pyarrow.parquet as pq
    with tempfile.TemporaryDirectory(prefix="cluster-model-") as tmp:
        out = os.path.join(tmp, "sample")
        common.run(common.LDABEAM + ["vectorize", "--input", SAMPLE, "--output", out,
                                     "--keep-n", 7995, "--no-below", 2, "--stopwords", "gensim"],
                   quiet=True)
        with open(os.path.join(out, "manifest.json")) as f:
            man = json.load(f)
        nnz = tokens = docs = 0
        for sh in man["splits"]["train"]["shards"]:
            t = pq.read_table(os.path.join(out, sh["file"]), columns=["word_ids", "n_tokens"])
            nnz += sum(len(w) for w in t.column("word_ids").to_pylist())
            tokens += int(np.sum(t.column("n_tokens").to_numpy()))
            docs += t.num_rows
    with bz2.open(SAMPLE, "rb") as f:
        raw = sum(len(b) for b in iter(lambda: f.read(1 << 20), b""))
    s = {"docs": docs, "pages_skipped": man["counts"]["skipped_pages"],
         "V": man["vocabulary"]["size"], "nnz_per_doc": nnz / docs,
         "tokens_per_doc": tokens / docs, "mb_per_doc": raw / 1e6 / docs,
         "file_mb_per_doc": os.path.getsize(SAMPLE) / 1e6 / docs}
    src["Wikipedia article shape"] = (
        "%.0f non-zeros and %.0f tokens per article, %.1f KB of XML (%.1f KB bz2) per kept "
        "article: ldabeam vectorize of data/%s (%d articles kept, %d pages skipped, V=%d: the "
        "7,995 most frequent words, gensim stop words removed), measured here"
        % (s["nnz_per_doc"], s["tokens_per_doc"], s["mb_per_doc"] * 1e3,
           s["file_mb_per_doc"] * 1e3, os.path.basename(SAMPLE), docs, s["pages_skipped"],
           s["V"]))
    return s


def vectorize_constants(path: str, src: dict) -> dict:
    """CPU-s per MB of input (decompressed) for a dump and for JSON lines, in-process, and the
    JSON-lines input's MB per document."""
    doc = _load(path)
    tag = _run_tag(doc, path)
    out = {}
    rows = [r for key in ("rows", "results") if isinstance(doc.get(key), list)
            for r in doc[key]]
    for fmt, names in (("wiki", ("xml.bz2", "wiki")), ("jsonl", ("jsonl",))):
        new = [r for r in rows if r.get("format") in names
               and r.get("runner") == "in-process" and r.get("mb_per_cpu_s")]
        old = (doc.get("throughput") or {}).get(fmt) or {}
        if new:
            r = max(new, key=lambda r: r.get("mb", 0))
            # steady state (start-up left out: a cluster worker pays it once, in the job start)
            key = "steady_mb_per_cpu_s" if r.get("steady_mb_per_cpu_s") else "mb_per_cpu_s"
            out[fmt] = 1.0 / r[key]
            src["vectorize %s" % fmt] = "%.2f MB/CPU-s in-process (%s, %.0f MB): %s" % (
                r[key], key, r.get("mb", float("nan")), tag)
            if fmt == "jsonl" and r.get("docs") and r.get("mb"):
                out[fmt + "_mb_per_doc"] = r["mb"] / r["docs"]
        elif old.get("in-process"):
            out[fmt] = 1.0 / old["in-process"]["mb_per_cpu_s"]
            src["vectorize %s" % fmt] = ("%.2f MB/CPU-s in-process (%.0f MB): %s, from the "
                                         "older run" % (old["in-process"]["mb_per_cpu_s"],
                                                        old["input_mb"], tag))
        else:
            raise SystemExit("%s has no in-process %s throughput" % (path, fmt))
        if fmt == "jsonl" and fmt + "_mb_per_doc" not in out and old.get("in-process"):
            out[fmt + "_mb_per_doc"] = old["input_mb"] / old["in-process"]["docs"]
            src["vectorize %s" % fmt] += "; %.2f KB per document: %s, from the older run" % (
                out[fmt + "_mb_per_doc"] * 1e3, tag)
    return out


def load_constants(args) -> tuple:
    """(constants, the two runs with their document shapes, sources)."""
    src: Dict[str, str] = {}
    c: dict = {}
    estep_constants(args.estep_json, c, src)
    beam_constants(args.beam_json, c, src, args.beam_big_json)
    if args.beam_big_json and os.path.exists(args.beam_big_json):
        doc = _load(args.beam_big_json)
        worker_memory(doc.get("results") or [], _run_tag(doc, args.beam_big_json), src)
    vec = vectorize_constants(args.vectorize_json, src)
    c["docs_per_window"], c["max_window"] = window_settings(src)
    sample = sample_stats(src)
    union_bound_check(src)
    runs = []
    for base in (RUN_A, RUN_B):
        run = dict(base)
        K = run["K"]
        if K not in c["estep_s_per_nnz_iter"]:
            raise SystemExit("%s has no float32 row at K=%d" % (args.estep_json, K))
        run["iterations"] = c["estep_rows"][K]["iterations"]
        if base is RUN_A:
            run["nnz_per_doc"] = sample["nnz_per_doc"]
            run["vectorize_cpu_s_per_doc"] = sample["mb_per_doc"] * vec["wiki"]
            run["shape"] = "the bundled sample's articles (vectorize: wiki MB/CPU-s)"
        else:
            bench = c["estep_rows"][K]
            run["nnz_per_doc"] = bench.get("nnz_per_doc") or _older_nnz_per_doc(args, K, src)
            run["vectorize_cpu_s_per_doc"] = vec["jsonl_mb_per_doc"] * vec["jsonl"]
            run["shape"] = ("the E-step benchmark's documents (20 Newsgroups posts; vectorize: "
                            "JSON lines MB/CPU-s and KB per post)")
        run["t_doc_s"] = run["nnz_per_doc"] * run["iterations"] * c["estep_s_per_nnz_iter"][K]
        runs.append(run)
    return c, runs, src


def _older_nnz_per_doc(args, K: int, src: dict) -> float:
    """Non-zeros per document of the older E-step file, which has no ``docs`` key: its
    arguments were the script's defaults (``--minibatch 256 --batches 8``: 2,048 documents)."""
    doc = _load(args.estep_json)
    r = [r for r in doc["results"] if r.get("dtype") == "float32" and int(r["K"]) == K][0]
    argv = doc.get("run", {}).get("argv", [])
    if argv:
        raise SystemExit("%s has no 'docs' key and was run with arguments %s: cannot tell how "
                         "many documents it timed; rerun benchmarks/estep_bench.py"
                         % (args.estep_json, argv))
    src["estep K=%d" % K] += "; %.1f non-zeros per document = nnz / 2,048 documents (the " \
                             "script's default --minibatch 256 --batches 8)" % (r["nnz"] / 2048)
    return r["nnz"] / 2048


def union_bound_check(src: dict, sizes=(16, 256, 4096)) -> None:
    """How far the model's bound on the words a partial touches, min(V, n x nnz/doc), is
    above the distinct words of n random documents of the E-step benchmark's corpus (20
    Newsgroups as prepared by benchmarks/prepare_20news.py; skipped when absent)."""
    import scipy.sparse as sp
    path = os.path.join(common.CACHE, "20news", "bench", "train.npz")
    if not os.path.exists(path):
        src["statistics words"] = "bound min(V, n x nnz/doc) not checked: %s absent" % path
        return
    X = sp.load_npz(path).tocsr()
    X = X[np.diff(X.indptr) > 0]
    D, V = X.shape
    rng = np.random.default_rng(0)
    out = []
    for n in sizes:
        u = len(np.unique(X[rng.permutation(D)[:n]].indices))
        out.append("n=%d: %d words, bound/measured %.2f" % (n, u, min(V, n * X.nnz / D) / u))
    src["statistics words"] = ("the bound min(V, n x nnz/doc) on the words of n documents' "
                               "statistics, against n random 20 Newsgroups posts (V=%d, as "
                               "benchmarks/prepare_20news.py prepares them): %s"
                               % (V, "; ".join(out)))


def window_settings(src: dict) -> tuple:
    """Documents per window with worker processes / a cluster, and the cap on minibatches per
    window: the Beam trainer's own defaults."""
    from pipelines.training import beam_train
    src["windows"] = ("%d documents per window (at most %d minibatches): "
                      "pipelines.training.beam_train.DOCS_PER_WINDOW_WORKERS / MAX_WINDOW; one pipeline "
                      "(a Dataflow job) per window" % (beam_train.DOCS_PER_WINDOW_WORKERS,
                                                       beam_train.MAX_WINDOW))
    return beam_train.DOCS_PER_WINDOW_WORKERS, beam_train.MAX_WINDOW


# ------------------------------------------------------------------------ reporting
def _hms(s: float) -> str:
    return "%.1f h" % (s / 3600) if s >= 3 * 3600 else "%.1f min" % (s / 60)


def print_run(c: dict, run: dict, rows: List[dict]) -> None:
    print("\n%s: D=%s, K=%d, V=%s, S=%d; per document %.0f non-zeros x %.1f iterations = "
          "%.2f CPU-ms of E-step, %.2f CPU-ms of vectorize (%s)"
          % (run["name"], format(run["D"], ","), run["K"], format(run["V"], ","), rows[0]["S"],
             run["nnz_per_doc"], run["iterations"], run["t_doc_s"] * 1e3,
             run["vectorize_cpu_s_per_doc"] * 1e3, run["shape"]))
    print("%7s %6s %7s | %9s %9s %9s %9s %9s %8s | %10s %10s %10s %9s %8s"
          % ("workers", "steps", "windows", "E-step s", "deliver s", "combine s", "global s",
             "overhd s", "step s", "train", "vectorize", "total", "cost $", "speed-up"))
    for r in rows:
        p = r["parts_s"]
        print("%7d %6d %7d | %9.3f %9.3f %9.3f %9.3f %9.3f %8.3f | %10s %10s %10s %9.2f %8.2f"
              % (r["workers"], r["steps"], r["windows"], p["estep"], p["delivery"],
                 p["combine"], p["global_step"], p["overhead"], r["step_s"], _hms(r["train_s"]),
                 _hms(r["vectorize_s"]), _hms(r["total_s"]), r["cost_usd"], r["speedup"]))
    state = run["K"] * run["V"] * c["state_bytes_per_value"]
    print("State %.0f MB per copy (2 copies: %.1f %% of a %.0f GB worker); statistics %.0f KB "
          "per document before merging" % (state / 1e6, 200 * state / 1e9
                                           / CLOUD["memory_gb_per_worker"],
                                           CLOUD["memory_gb_per_worker"],
                                           run["nnz_per_doc"] * run["K"]
                                           * c["stats_bytes_per_value"] / 1e3))
    flat = flattening_point(rows)
    print("Amdahl limit of the speed-up (what no W shortens: job starts; per step one "
          "document's E-step, the state, the global step, the overhead): %.1f; speed-up "
          "flattens (doubling W gains < 10 %%) from W = %s"
          % (rows[0]["amdahl_limit"], flat if flat else "never within 256"))


def variants(c: dict) -> List[tuple]:
    """(label, constants, combine): the runner as measured, then cumulatively changed where
    the data moves -- the fewest pipelines (``--minibatches-per-window`` at its cap, so a
    Dataflow job boots its workers fewer times), a tree combine (Beam's hot-key ``fanout``),
    and the state shipped once per worker (workers apply the global step to their own copy
    from the combined statistics). Each uses the same measured constants."""
    fewest = dict(c, docs_per_window=10 ** 15)
    return [("as measured (defaults)", c, "lifted"),
            ("+ windows of %d minibatches" % c["max_window"], fewest, "lifted"),
            ("+ tree combine", fewest, "tree"),
            ("+ state shipped once", dict(fewest, state_reloaded_per_step=False), "tree"),
            ("+ sharded by word (a design, not built)", fewest, "sharded")]


def _best(rows: List[dict], within: float = 0.95) -> dict:
    """The fewest workers whose speed-up is within 5 % of the fastest W's (beyond it more
    workers cost more for little)."""
    top = max(r["speedup"] for r in rows)
    return min((r for r in rows if r["speedup"] >= within * top), key=lambda r: r["workers"])


def what_ifs(c: dict, run: dict, S: int) -> List[dict]:
    """Best W (fastest total), its speed-up, wall and cost, and the speed-up at 256 workers
    for each of :func:`variants`."""
    out = []
    print("What if (S=%d) %-36s %7s %6s %9s %10s %9s %9s %8s"
          % (S, "", "windows", "best W", "speed-up", "total", "cost $", "at W=256", "Amdahl"))
    for label, cc, combine in variants(c):
        rows = sweep(cc, CLOUD, run, S, combine=combine)
        best = _best(rows)
        out.append({"what": label, "windows": best["windows"], "best_workers": best["workers"],
                    "best_speedup": best["speedup"], "best_total_s": best["total_s"],
                    "best_cost_usd": best["cost_usd"], "speedup_at_256": rows[-1]["speedup"],
                    "total_at_256_s": rows[-1]["total_s"], "cost_at_256_usd": rows[-1]["cost_usd"],
                    "amdahl_limit": rows[0]["amdahl_limit"],
                    "busy_minibatch_at_256": busy_minibatch(cc, CLOUD, run, 256, 0.5, combine)})
        print("  %-50s %7d %6d %9.2f %10s %9.2f %9.2f %8.1f"
              % (label, best["windows"], best["workers"], best["speedup"],
                 _hms(best["total_s"]), best["cost_usd"], rows[-1]["speedup"],
                 rows[0]["amdahl_limit"]))
    return out


def minibatch_table(c: dict, run: dict, sizes=(1024, 4096, 16384, 65536, 262144)) -> List[dict]:
    """For each minibatch size S, as measured and with every change of :func:`variants`: the
    best W with its speed-up, wall and cost, and the E-step's share of a step at 256 workers."""
    first, last = variants(c)[0], variants(c)[-1]
    print("Minibatch size S: %s | %s and every change before it" % (first[0], last[0]))
    print("%8s %6s | %6s %9s %10s %9s %10s | %6s %9s %10s %9s %10s"
          % ("S", "steps", "best W", "speed-up", "total", "cost $", "E-step@256",
             "best W", "speed-up", "total", "cost $", "E-step@256"))
    out = []
    for S in [s for s in sizes if s <= run["D"]]:
        line = {"S": S, "steps": math.ceil(run["D"] / S)}
        cells = []
        for key, (_, cc, combine) in (("measured", first), ("all_changes", last)):
            rows = sweep(cc, CLOUD, run, S, combine=combine)
            best = _best(rows)
            p256 = rows[-1]["parts_s"]
            share = p256["estep"] / sum(p256.values())
            line[key] = {"best_workers": best["workers"], "speedup": best["speedup"],
                         "total_s": best["total_s"], "cost_usd": best["cost_usd"],
                         "estep_share_at_256": share}
            cells.append("%6d %9.2f %10s %9.2f %9.1f%%" % (best["workers"], best["speedup"],
                                                           _hms(best["total_s"]),
                                                           best["cost_usd"], 100 * share))
        print("%8d %6d | %s | %s" % (S, line["steps"], cells[0], cells[1]))
        out.append(line)
    return out


def markdown(results: List[dict]) -> str:
    """The tables of the run as Markdown (docs/cluster.md section 8 quotes them)."""
    out = []
    for res in results:
        run = res["run"]
        out.append("**%s**, S = %d: %d steps; per document %.0f non-zeros x %.1f iterations = "
                   "%.2f CPU-ms of E-step, %.2f CPU-ms of vectorize.\n"
                   % (run["name"], res["rows"][0]["S"], res["rows"][0]["steps"],
                      run["nnz_per_doc"], run["iterations"], run["t_doc_s"] * 1e3,
                      run["vectorize_cpu_s_per_doc"] * 1e3))
        out.append("| workers | windows | E-step s | state s | combine s | global step s | "
                   "overhead s | step s | train | vectorize | total | cost | speed-up |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in res["rows"]:
            p = r["parts_s"]
            out.append("| %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %s | %s | %s | "
                       "$%.2f | %.2f |" % (r["workers"], r["windows"], p["estep"],
                                           p["delivery"], p["combine"], p["global_step"],
                                           p["overhead"], r["step_s"], _hms(r["train_s"]),
                                           _hms(r["vectorize_s"]), _hms(r["total_s"]),
                                           r["cost_usd"], r["speedup"]))
        out.append("\nAmdahl limit %.1f; flattens (doubling W gains < 10 %%) from W = %s. "
                   "Where the total goes:" % (res["rows"][0]["amdahl_limit"],
                                              res["flattens_from_workers"]))
        best = _best(res["rows"])
        for r in sorted({id(x): x for x in (res["rows"][0], best, res["rows"][-1])}.values(),
                        key=lambda x: x["workers"]):
            out.append("W = %d: %s." % (r["workers"], ", ".join(
                "%s %.0f %%" % (k, 100 * v) for k, v in time_shares(r, CLOUD["job_start_s"])
                .items())) + ("  " if r is not res["rows"][-1] else ""))
        out.append("")
        out.append("| what if (S = %d) | windows | best W | speed-up | total | cost | "
                   "speed-up at 256 | Amdahl limit | S for E-step >= 50 %% at 256 |"
                   % res["rows"][0]["S"])
        out.append("|---|---|---|---|---|---|---|---|---|")
        for w in res["what_if"]:
            busy = w["busy_minibatch_at_256"]
            out.append("| %s | %d | %d | %.2f | %s | $%.2f | %.2f | %.1f | %s |"
                       % (w["what"], w["windows"], w["best_workers"], w["best_speedup"],
                          _hms(w["best_total_s"]), w["best_cost_usd"], w["speedup_at_256"],
                          w["amdahl_limit"], format(busy, ",") if busy else
                          "none <= min(D, 2^22)"))
        out.append("\n| S | steps | as measured: best W | speed-up | total | cost | "
                   "all changes incl. the sharded design: best W | speed-up | total | cost | "
                   "E-step share of a step at 256 workers |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for line in res["by_minibatch"]:
            m, a = line["measured"], line["all_changes"]
            out.append("| %s | %s | %d | %.2f | %s | $%.2f | %d | %.2f | %s | $%.2f | %.1f %% |"
                       % (format(line["S"], ","), format(line["steps"], ","),
                          m["best_workers"], m["speedup"], _hms(m["total_s"]), m["cost_usd"],
                          a["best_workers"], a["speedup"], _hms(a["total_s"]), a["cost_usd"],
                          100 * a["estep_share_at_256"]))
        out.append("")
    return "\n".join(out)


def plot(results: List[dict], path: str) -> str:
    """Speed-up against workers for each run: a PNG if matplotlib is installed, else a CSV."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = os.path.splitext(path)[0] + ".csv"
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["run", "variant", "workers", "speedup", "amdahl_limit"])
            for res in results:
                for key in ("rows", "rows_all_changes"):
                    for r in res[key]:
                        w.writerow([res["run"]["name"], key, r["workers"], r["speedup"],
                                    r["amdahl_limit"]])
        return path
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ws = np.array(WORKERS)
    ax.plot(ws, ws, color="0.7", ls=":", label="ideal")
    for res, color in zip(results, ("C0", "C1")):
        rows, alt = res["rows"], res["rows_all_changes"]
        ax.plot(ws, [r["speedup"] for r in rows], "o-", color=color,
                label=res["run"]["name"] + ": as measured")
        ax.plot(ws, [r["speedup"] for r in alt], "s--", color=color, ms=4, lw=1,
                label="... fewest windows, tree combine, state once, sharded (a design)")
        ax.axhline(rows[0]["amdahl_limit"], color=color, ls=":", lw=0.8)
        ax.axhline(alt[0]["amdahl_limit"], color=color, ls="-.", lw=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("workers (%s, %d vCPU each)" % (CLOUD["machine_type"],
                                                  CLOUD["vcpus_per_worker"]))
    ax.set_ylabel("speed-up of vectorize + one training pass vs 1 worker")
    ax.set_title("Projected speed-up, S = %d (horizontal lines: Amdahl limits)"
                 % results[0]["rows"][0]["S"], fontsize=10)
    ax.set_xticks(ws)
    ax.set_xticklabels([str(w) for w in ws])
    ax.legend(fontsize=8)
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--minibatch", type=int, default=4096,
                    help="minibatch size S (default: the worker runners' default, 4096)")
    ap.add_argument("--combine", choices=["lifted", "tree", "sharded"], default="lifted",
                    help="how the partial statistics reach the global step (default: lifted, "
                         "Beam's CombinePerKey: one reducer receives one partial per worker)")
    ap.add_argument("--job-start", type=float, default=None,
                    help="seconds to start one pipeline's workers (default %.0f: Dataflow "
                         "booting VMs; a standing Flink cluster needs only the job submission)"
                    % CLOUD["job_start_s"])
    ap.add_argument("--bandwidth", type=float, default=None,
                    help="bytes/s per worker (default %.3g)" % CLOUD["network_bytes_per_s"])
    ap.add_argument("--estep-json", default=os.path.join(RESULTS, "estep_bench.json"))
    ap.add_argument("--beam-json", default=os.path.join(RESULTS, "beam_train_bench.json"))
    ap.add_argument("--beam-big-json", default=os.path.join(RESULTS, "beam_train_bench_big.json"),
                    help="the big-model run's results, if kept apart (worker memory only)")
    ap.add_argument("--vectorize-json", default=os.path.join(RESULTS, "vectorize_bench.json"))
    ap.add_argument("--json", default=os.path.join(RESULTS, "cluster_model.json"),
                    help="write the tables here ('' not at all)")
    ap.add_argument("--plot", default=os.path.join(RESULTS, "cluster_model.png"),
                    help="speed-up plot (a CSV beside it without matplotlib; '' none)")
    ap.add_argument("--markdown", default="", help="also write the tables as Markdown here")
    args = ap.parse_args(argv)
    if args.job_start is not None:
        CLOUD["job_start_s"] = args.job_start
    if args.bandwidth is not None:
        CLOUD["network_bytes_per_s"] = args.bandwidth
    c, runs, src = load_constants(args)
    print("Cloud constants (assumptions): %s" % json.dumps(CLOUD))
    print("Measured constants and where they come from:")
    for k, v in src.items():
        print("  %-24s %s" % (k + ":", v))
    results = []
    for run in runs:
        rows = sweep(c, CLOUD, run, args.minibatch, combine=args.combine)
        print_run(c, run, rows)
        busy = {"%d%%" % (100 * share): busy_minibatch(c, CLOUD, run, 256, share, args.combine)
                for share in (0.5, 0.9)}
        print("At 256 workers the E-step is >= 50 %% of a step from S = %s, >= 90 %% from S = %s"
              % (busy["50%"], busy["90%"]))
        whatif = what_ifs(c, run, args.minibatch)
        by_s = minibatch_table(c, run)
        label, cc, combine = variants(c)[-1]
        results.append({"run": run, "rows": rows, "busy_minibatch_at_256": busy,
                        "rows_all_changes": sweep(cc, CLOUD, run, args.minibatch,
                                                  combine=combine),
                        "flattens_from_workers": flattening_point(rows), "what_if": whatif,
                        "by_minibatch": by_s})
    if args.plot:
        print("speed-up plot: %s" % plot(results, args.plot))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(results))
        print("Markdown tables: %s" % args.markdown)
    if args.json:
        common.save_results({"cloud": CLOUD, "constants": c, "sources": src,
                             "combine": args.combine, "minibatch": args.minibatch,
                             "runs": results}, args.json, argv, os.path.basename(__file__))


if __name__ == "__main__":
    main()
