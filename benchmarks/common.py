"""Helpers shared by the benchmark scripts (paths, the bench harness, timing, child RSS).

Benchmarks print ratios measured in one run on this (shared, noisy) machine; they never
assert on time.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Dict, Optional, Sequence

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("LDABEAM_SHARED", os.path.join(os.path.dirname(REPO), "shared"))
BENCH_DIR = os.path.join(SHARED, "bench")
BENCH_PEERS = os.path.join(BENCH_DIR, "bench_peers.py")
TEXT2UCI = os.path.join(BENCH_DIR, "text2uci.py")
NEWS20_TAR = os.path.join(SHARED, "data", "20news-bydate", "20news-bydate.tar.gz")
CACHE = os.environ.get("LDABEAM_BENCH_CACHE", os.path.join(REPO, "benchmarks", ".cache"))
PYTHON = sys.executable
LDABEAM = [PYTHON, "-m", "pipelines.cli"]

# the protocol of ../shared/bench/README.md (20 Newsgroups reference table)
K = 100
ALPHA = 0.1
ETA = 0.01
KAPPA = 0.7
TAU0 = 64.0
BATCH = 256
REF_GENSIM_LL = -8.347      # gensim LdaModel in the harness's reference table
TARGET_LL = -8.37           # issue 3: no worse than -8.35 - 0.02


def passes_to(target: float, scores: Sequence[float]) -> Optional[float]:
    """Passes (fractional) until the held-out scores after passes 1, 2, ... first reach
    ``target``: p when pass p is the first at or above it, minus the part of that pass not
    needed, linear between the scores of passes p - 1 and p (pass 0 taken as unreached: the
    whole first pass is counted). None when no pass reaches it."""
    for i, ll in enumerate(scores):
        if ll >= target:
            if i == 0:
                return 1.0
            prev = scores[i - 1]
            return i + (target - prev) / (ll - prev) if ll > prev else float(i + 1)
    return None


def protocol_train_args(shards: str, model: str, threads=None) -> list:
    """``ldabeam train`` arguments for one pass of online VB with the protocol above, no
    held-out evaluation and one checkpoint at the end (what the training benchmarks time)."""
    args = ["--shards", shards, "--output", model, "--algorithm", "online-vb", "--topics", K,
            "--alpha", ALPHA, "--eta", ETA, "--minibatch", BATCH, "--kappa", KAPPA, "--tau0", TAU0,
            "--passes", 1, "--heldout", "none", "--eval-every", 0, "--checkpoint-every", 0,
            "--no-progress"]
    if threads:
        args += ["--threads", threads]
    return args


def bench_module():
    """``../shared/bench/bench_peers.py`` imported as a module (its evaluator and systems)."""
    if not os.path.exists(BENCH_PEERS):
        raise SystemExit("the bench harness %s is absent" % BENCH_PEERS)
    spec = importlib.util.spec_from_file_location("bench_peers", BENCH_PEERS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(cmd: Sequence[str], quiet: bool = False, **kw) -> subprocess.CompletedProcess:
    """Run a command (echoed), raising with its output if it fails."""
    cmd = [str(c) for c in cmd]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", REPO)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=kw.pop("cwd", REPO),
                       **kw)
    if p.returncode != 0:
        raise SystemExit("command failed (%d): %s\n%s\n%s" % (p.returncode, " ".join(cmd),
                                                               p.stdout[-3000:], p.stderr[-3000:]))
    if not quiet and p.stdout.strip():
        print(p.stdout.strip()[-2000:], file=sys.stderr)
    return p


class Timer:
    """Wall and process CPU seconds (all threads of this process) of a block."""

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0


def run_child_peak_rss(cmd: Sequence[str], env: Optional[Dict[str, str]] = None):
    """Run ``cmd`` as a child; return (wall seconds, peak RSS in MB of that child, stdout).

    The peak comes from ``os.wait4``'s rusage of exactly that child (ru_maxrss, KiB)."""
    cmd = [str(c) for c in cmd]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    e = dict(os.environ)
    e.setdefault("PYTHONPATH", REPO)
    if env:
        e.update(env)
    t0 = time.perf_counter()
    out_path = os.path.join(CACHE, ".child-%d.out" % os.getpid())
    os.makedirs(CACHE, exist_ok=True)
    with open(out_path, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=e, cwd=REPO)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    text = open(out_path).read()
    os.unlink(out_path)
    if p.returncode != 0:
        raise SystemExit("child failed (%d): %s\n%s" % (p.returncode, " ".join(cmd),
                                                        text[-3000:]))
    return wall, ru.ru_maxrss / 1024.0, text


def npz_docbatch(path: str):
    """A harness ``.npz`` CSR matrix as a DocBatch (document ids = row numbers)."""
    import scipy.sparse as sp
    from lda_core.docbatch import DocBatch
    X = sp.load_npz(path).tocsr()
    X.data = np.round(X.data)
    return DocBatch.from_csr(X)


def base_parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", default=os.path.join(CACHE, "20news"),
                   help="prepared 20 Newsgroups (benchmarks/prepare_20news.py)")
    return p


def print_json(rec) -> None:
    print(json.dumps(rec, indent=1, sort_keys=True, default=float))


def save_results(res, path: str, argv=None, script: Optional[str] = None) -> None:
    """``res`` as JSON at ``path`` (atomically), with when, where and how it was measured
    (script, arguments, UTC time, git commit, CPUs, load average, Python)."""
    import datetime
    import platform
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    run = {"script": script or os.path.basename(sys.argv[0]),
           "argv": list(sys.argv[1:] if argv is None else argv),
           "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "git_commit": commit, "cpus": os.cpu_count(),
           "load_average_at_end": list(os.getloadavg()),
           "python": platform.python_version()}
    rec = dict(res, run=run) if isinstance(res, dict) else {"results": res, "run": run}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True, default=float)
        f.write("\n")
    os.replace(tmp, path)
    print("results written to %s" % path)
