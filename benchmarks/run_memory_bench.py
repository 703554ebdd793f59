#!/usr/bin/env python3
"""A training run's peak memory against the estimate the memory check refuses by (issue 32,
item 8), for every algorithm, at two numbers of topics.

Each run is `ldabeam train` on the bundled Wikipedia sample (V = 3,000 words, 1,488 documents,
a tenth held out and evaluated on at the end of the run, as a default run does) in a child
process of its own: the child first trains K = 2 (imports, kernel compiles), then
resets its resident-memory high-water mark (/proc/self/clear_refs), trains K topics and prints
how far the high-water mark rose above the resident memory before the run. glibc's mmap
threshold is fixed in the child (MALLOC_MMAP_THRESHOLD_), so a freed array is returned to the
system and the next allocation shows in the resident memory: the rise is what the run's own
arrays reach at its peak, not what an earlier run left in the heap.

Printed per algorithm: the rise at both sizes, bytes per topic-word cell at each size and the
slope between them (what one more cell costs), the estimate of
:func:`lda_core.resources.algorithm_run_estimate` and the ratio peak / estimate. The samplers
whose state also grows with the documents (the particle filter's n_dk per particle, batch
Gibbs' n_dk) run with the whole sample, so that term is in the peak.

    python benchmarks/run_memory_bench.py            # writes benchmarks/results/run_memory_bench.json
    python benchmarks/run_memory_bench.py --algorithms gibbs o-lda --sizes 500 2000
    python benchmarks/run_memory_bench.py --recompute   # the stored peaks against the
                                                        # declarations as they are now
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
from benchmarks import common  # noqa: E402

SAMPLE = os.path.join(REPO, "data", "enwiki-sample-sections.jsonl.bz2")
V = 3000
SIZES = (500, 2000)
# the dataset's held-out share: every run evaluates on it at its end (the default run of a
# dataset with a held-out split), so the peak includes an evaluation's topic-word matrix
HOLDOUT = 0.1
# what each algorithm's run is given beyond --topics: enough to reach the state a long run
# holds (an evaluation-free checkpoint after at least one whole step), short enough to run
# in seconds
RUNS = {
    "online-vb": ["--minibatch", "256", "--max-steps", "2"],
    "scvb0": ["--minibatch", "256", "--max-steps", "2"],
    "batch-vb": ["--passes", "2"],
    # a whole pass: the sparse counts fill as tokens arrive
    "sparse-gibbs-vb": ["--minibatch", "256", "--passes", "1"],
    # a burn-in sweep, then two sweeps averaged into phi (phi_sum and a sweep's phi held)
    "gibbs": ["--passes", "3", "--burn-in", "1"],
    "o-lda": ["--init-sweeps", "2"],
    "incremental-gibbs": ["--init-fraction", "0.1", "--init-sweeps", "2"],
    # run once per number of particles in PARTICLES
    "particle-filter": ["--init-fraction", "0.1", "--init-sweeps", "2", "--rejuvenation", "4"],
}
# the particle filter's state is P copies of the counts: its sizes are smaller, and a second
# number of particles gives the bytes each particle adds
PARTICLE_SIZES = (100, 400)
PARTICLES = (8, 32)

CHILD = r"""
import json, os, shutil, sys
from pipelines import cli
shards, out, algo, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
extra = sys.argv[5:]
common = ["--seed", "1", "--no-progress"]
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
assert cli.main(["--log-level", "WARNING", "train", "--shards", shards, "--output", out + "-warm",
                 "--topics", "2", "--algorithm", algo] + common + extra) == 0
shutil.rmtree(out + "-warm")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
assert cli.main(["--log-level", "WARNING", "train", "--shards", shards, "--output", out,
                 "--topics", str(k), "--algorithm", algo] + common + extra) == 0
print("PEAK " + json.dumps({"peak": status("VmHWM") - before, "before": before}))
"""


def measure(shards: str, work: str, algo: str, k: int, extra) -> int:
    out = os.path.join(work, "m")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072",
               PYTHONPATH=os.pathsep.join([REPO] + [p for p in os.environ.get(
                   "PYTHONPATH", "").split(os.pathsep) if p]))
    p = subprocess.run([sys.executable, "-c", CHILD, shards, out, algo, str(k)] + list(extra),
                       capture_output=True, text=True, env=env, cwd=work, timeout=1800)
    if p.returncode != 0:
        raise SystemExit("%s K=%d failed:\n%s" % (algo, k, p.stderr[-3000:]))
    line = [l for l in p.stdout.splitlines() if l.startswith("PEAK ")][-1]
    shutil.rmtree(out, ignore_errors=True)
    return json.loads(line[5:])["peak"]


def settings_of(extra) -> dict:
    """The algorithm settings a run's options give (what the estimate depends on)."""
    out = {}
    if "--particles" in extra:
        out["n_particles"] = int(extra[extra.index("--particles") + 1])
    if "--gibbs-parts" in extra:
        out["n_parts"] = int(extra[extra.index("--gibbs-parts") + 1])
    return out


def with_estimates(row: dict) -> dict:
    """``row`` (an algorithm's settings, V, D, sizes and measured peaks) with the estimate of
    the declarations as they are now, and peak / estimate."""
    from lda_core import resources
    from lda_core.algorithms.algorithm import algorithm_class
    cls = algorithm_class(row["algorithm"])
    est = [resources.algorithm_run_estimate(cls, k, row["V"], row["D"], row["settings"])
           for k in row["sizes"]]
    per_topic = (est[1] - est[0]) / float(row["sizes"][1] - row["sizes"][0])
    return dict(row, estimates=est,
                peak_over_estimate=[p / float(e) for p, e in zip(row["peaks"], est)],
                declared_bytes_per_cell=resources.run_bytes_per_cell(cls, row["settings"]),
                declared_bytes_per_doc_cell=resources.run_bytes_per_doc_cell(
                    cls, row["settings"]),
                estimate_per_topic_over_slope=per_topic / (row["slope_bytes_per_cell"]
                                                           * row["V"]))


def show(row: dict) -> None:
    print("%-18s %-20s K=%s: peak %s MB (%s bytes/cell), slope %.1f bytes/cell; declared "
          "%.0f + %.0f per doc cell; estimate %s MB; peak/estimate %s; estimate/slope %.2f"
          % (row["algorithm"], json.dumps(row["settings"]), tuple(row["sizes"]),
             ", ".join("%.0f" % (p / 1e6) for p in row["peaks"]),
             ", ".join("%.1f" % b for b in row["bytes_per_cell_at"]),
             row["slope_bytes_per_cell"], row["declared_bytes_per_cell"],
             row["declared_bytes_per_doc_cell"],
             ", ".join("%.0f" % (e / 1e6) for e in row["estimates"]),
             ", ".join("%.2f" % r for r in row["peak_over_estimate"]),
             row["estimate_per_topic_over_slope"]), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algorithms", nargs="+", default=list(RUNS))
    ap.add_argument("--sizes", nargs=2, type=int, default=list(SIZES))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "run_memory_bench.json"))
    ap.add_argument("--recompute", action="store_true",
                    help="no runs: the peaks stored in --out against the declarations as they "
                         "are now (the file is rewritten, its measuring run kept)")
    args = ap.parse_args(argv)
    if args.recompute:
        with open(args.out) as f:
            stored = json.load(f)
        rows = [with_estimates(r) for r in stored["rows"]]
        for r in rows:
            show(r)
        measured = stored.get("measured_by", stored.get("run"))
        common.save_results({"rows": rows, "measured_by": measured}, args.out)
        return
    from pipelines import cli
    work = tempfile.mkdtemp(prefix="run-memory-")
    try:
        shards = os.path.join(work, "ds")
        assert cli.main(["vectorize", "--input", SAMPLE, "--format", "jsonl", "--output",
                         shards, "--no-below", "3", "--keep-n", str(V),
                         "--holdout-fraction", str(HOLDOUT)]) == 0
        with open(os.path.join(shards, "manifest.json")) as f:
            n_docs = json.load(f)["counts"]["train_documents"]
        rows = []
        for algo in args.algorithms:
            # resampling at the default's share of the particles (20 of 100)
            variants = ([RUNS[algo] + ["--particles", str(p), "--ess-threshold", str(p / 5.0)]
                         for p in PARTICLES]
                        if algo == "particle-filter" else [RUNS[algo]])
            sizes = PARTICLE_SIZES if algo == "particle-filter" else tuple(args.sizes)
            for extra in variants:
                settings = settings_of(extra)
                peaks = [measure(shards, work, algo, k, extra) for k in sizes]
                slope = (peaks[1] - peaks[0]) / float((sizes[1] - sizes[0]) * V)
                row = with_estimates({
                    "algorithm": algo, "settings": settings, "V": V, "D": n_docs,
                    "sizes": list(sizes), "peaks": peaks,
                    "bytes_per_cell_at": [p / float(k * V) for p, k in zip(peaks, sizes)],
                    "slope_bytes_per_cell": slope})
                rows.append(row)
                show(row)
        common.save_results({"rows": rows}, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
