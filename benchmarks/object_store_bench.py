#!/usr/bin/env python3
"""Beam training with the model on an object store: local disk against a GCS API emulator
reached through Beam's own GCS file system, with 0, 20 and 50 ms added per request.

Corpus: the synthetic LDA corpus of ``python -m pipelines.commands.synth --docs 3000 --words
2000 --topics 20`` (written once under ``--data``). ``ldabeam train``: online VB, K = 20,
S = 256, one pass (12 steps, one window), P = 4 pieces per minibatch, the DirectRunner with 2
worker processes (``multi_processing``), ``--exchange remote`` (``--exchange``), for each
B of ``--word-blocks`` (default 2 and 8), ``--staleness 1`` without warm-up (the remote
exchange's steps once a run is past its warm-up; ``--staleness`` to change). Each run is a
child process (``python -m
pipelines.cli``, from the source tree ``--code``: this repository, or a checkout of another
commit to measure it with the same script), its shards on local disk (``--shards-on-store``:
uploaded to the store as well), its model directory:

* ``local``: a local folder (the window's scratch states in ``/dev/shm``);
* ``emulator``: ``gs://bench/model`` on fake-gcs-server (tools/gcs_emulator.py; its scratch
  in ``MODEL_DIR/.beam-scratch``, as on a remote runner), reached directly;
* ``emulator+N ms``: the same through tools/latency_proxy.py adding N ms per request (one
  round trip; the emulator names the proxy in its media links, so downloads pass it too).

Each emulator row has a fresh server. Per row: the training's wall seconds (the run log's end
record) and per step, the seconds after the pipeline started per step (the timing record's
``pipeline_start`` and ``pipeline_build`` left out), the timing breakdown, the requests the
server served during the command by kind (tools/gcs_emulator.request_kind) and per step, the
objects left behind (leases, ``.beam-scratch``, temporary files; locally also the run's
``/dev/shm`` scratch), and whether the final state equals the local run's bit for bit. Every
emulator row also runs two passes in one window: the difference of the requests over
the difference of the steps is what one more step costs (``requests_per_step_marginal``: a
window's start and end cancel), the rest is the window's (``requests_per_window``); the same
for the wall time (``marginal_step_s``, and against the ``0 ms``
row ``marginal_step_vs_0ms``: the cost of a step of a long window, where the window's own
files are spread over hundreds of steps). Ratios
printed: each row's wall against the local row of the same B, each latency row's per-step
seconds against the ``0 ms`` proxied row. The load average is recorded at each row (the
machine is shared: compare ratios, not seconds).

    python benchmarks/object_store_bench.py [--word-blocks 2,8] [--latencies-ms 0,20,50]
        [--exchange remote] [--shards-on-store] [--code DIR] [--output FILE]

Results: ``benchmarks/results/object_store_bench.json``.
"""
from __future__ import annotations

import argparse
import functools
import glob
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402


def source_root() -> str:
    """The project's source tree: this script's, or (a copy of the script elsewhere) the one
    the Python path finds ``lda_core`` in (found without importing it)."""
    if os.path.isdir(os.path.join(common.REPO, "tools")):
        return common.REPO
    spec = importlib.util.find_spec("lda_core")
    return os.path.dirname(os.path.dirname(spec.origin)) if spec else common.REPO


sys.path.insert(0, os.path.join(source_root(), "tools"))
import gcs_emulator  # noqa: E402  (tools/ is not a package)
import latency_proxy  # noqa: E402

# the environment the benchmark was started with: importing the pipelines (here, to read the
# results) changes os.environ, and the commands under test (--code) must not inherit that
BASE_ENV = dict(os.environ)
BUCKET = "bench"
RESULTS = os.path.join(common.REPO, "benchmarks", "results", "object_store_bench.json")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--words", type=int, default=2000)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--minibatch", type=int, default=256)
    ap.add_argument("--pieces", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--word-blocks", default="2,8", help="comma-separated B values")
    ap.add_argument("--latencies-ms", default="0,20,50",
                    help="comma-separated delays per request through the proxy")
    ap.add_argument("--no-direct", action="store_true",
                    help="skip the emulator row without the proxy")
    ap.add_argument("--exchange", default="remote", help="ldabeam train --exchange")
    ap.add_argument("--staleness", type=int, default=1,
                    help="ldabeam train --staleness (with --exchange remote; default 1 with "
                         "no warm-up: the steps of a long run after its warm-up)")
    ap.add_argument("--shards-on-store", action="store_true",
                    help="read the shards from the store too (default: local disk)")
    ap.add_argument("--credential-lookup", action="store_true",
                    help="no credentials file: every process waits out Beam's credential "
                         "look-up (google.auth.default retried with back-off) before its "
                         "first request, as a client without credentials does")
    ap.add_argument("--code", default=source_root(),
                    help="the source tree the commands run from (default: this repository)")
    ap.add_argument("--data", default=os.path.join(common.CACHE, "object_store_bench"),
                    help="where the synthetic corpus is written once")
    ap.add_argument("--output", default=RESULTS)
    return ap.parse_args(argv)


def synth(args) -> str:
    out = os.path.join(args.data, "synth-%d-%d-%d" % (args.docs, args.words, args.topics))
    if not os.path.exists(os.path.join(out, "manifest.json")):
        common.run([common.PYTHON, "-m", "pipelines.commands.synth", "--output", out,
                    "--docs", args.docs, "--words", args.words, "--topics", args.topics,
                    "--overwrite"], quiet=True)
    return out


def train_argv(args, shards, model, B, passes=1):
    return ["--log-level", "WARNING", "train", "--shards", shards, "--output", model,
            "--overwrite", "--algorithm", "online-vb", "--topics", str(args.topics),
            "--minibatch", str(args.minibatch), "--passes", str(passes),
            "--pieces", str(args.pieces),
            "--word-blocks", str(B), "--heldout", "none", "--eval-every", "0",
            "--checkpoint-every", "0", "--no-progress", "--runner", "DirectRunner",
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=%d" % args.workers, "--exchange", args.exchange] + (
                ["--staleness", str(args.staleness), "--staleness-warmup", "0"]
                if args.exchange == "remote" and args.staleness else [])


def run_train(args, argv, env, log_path):
    """``ldabeam train`` as a child process from ``--code``; its wall seconds."""
    e = dict(BASE_ENV)
    e.update(env)
    e["PYTHONPATH"] = os.pathsep.join([args.code] + [p for p in e.get("PYTHONPATH", "")
                                                      .split(os.pathsep) if p])
    cmd = [common.PYTHON, "-m", "pipelines.cli"] + argv
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(log_path, "w") as out:
        p = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=e, cwd=args.code,
                           # killed with the benchmark (it outlives a SIGTERM while its
                           # client retries a store that is gone)
                           preexec_fn=functools.partial(gcs_emulator.die_with_parent,
                                                        signal.SIGKILL))
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        with open(log_path) as f:
            raise SystemExit("train failed (%d):\n%s" % (p.returncode, f.read()[-4000:]))
    return wall


def run_log_summary(lines):
    """Steps, the end record's elapsed seconds and the timing record's seconds."""
    recs = [json.loads(l) for l in lines if l.strip()]
    end = [r for r in recs if r.get("event") == "end"][-1]
    timing = [r for r in recs if r.get("event") == "timing"]
    seconds = {}
    for t in timing:
        for k, v in (t.get("seconds") or {}).items():
            seconds[k] = seconds.get(k, 0.0) + float(v)
    steps = int(end["steps_run"])
    wall = float(end["elapsed"])
    started = wall - seconds.get("pipeline_start", 0.0) - seconds.get("pipeline_build", 0.0)
    return {"steps": steps, "wall_s": round(wall, 3), "per_step_s": round(wall / steps, 4),
            "after_start_per_step_s": round(started / steps, 4),
            "breakdown_s": {k: round(v, 3) for k, v in sorted(seconds.items())}}


def left_behind(paths):
    return sorted(p for p in paths if p.endswith("/lease.json") or "/.beam-scratch/" in p
                  or ".tmp-" in p or "beam-temp" in p)


def final_arrays(model_dir):
    from lda_core.storage.checkpoint import CheckpointStore
    state = CheckpointStore(model_dir).latest()
    return {k: np.asarray(v) for k, v in state.arrays.items()}


def same_bits(a, b):
    return sorted(a) == sorted(b) and all(
        a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


def local_row(args, shards, B, work):
    from pipelines.runtime import scratch
    model = os.path.join(work, "local-B%d" % B)
    load = os.getloadavg()[0]
    cmd_wall = run_train(args, train_argv(args, shards, model, B), {},
                         os.path.join(work, "local-B%d.log" % B))
    with open(os.path.join(model, "run_log.jsonl")) as f:
        row = run_log_summary(f.read().splitlines())
    files = [os.path.join(d, n).replace(os.sep, "/") for d, _, ns in os.walk(model) for n in ns]
    shm = glob.glob(scratch.default_root(model, True) + "-*")
    row.update({"storage": "local", "B": B, "latency_ms": None, "command_wall_s":
                round(cmd_wall, 3), "load_average": round(load, 2),
                "objects_left": len(left_behind(files)) + len(shm)})
    return row, final_arrays(model)


def emulator_row(args, shards, B, work, latency_ms, passes=1):
    """One run against a fresh emulator, directly (``latency_ms`` None) or through the proxy;
    ``passes`` over the corpus, in one window."""
    proxy_port = gcs_emulator.free_port() if latency_ms is not None else None
    external = "http://127.0.0.1:%d" % proxy_port if proxy_port else None
    label = "emulator" if latency_ms is None else "emulator+%g ms" % latency_ms
    with gcs_emulator.GcsEmulator([BUCKET], external_url=external) as emu:
        if args.shards_on_store:
            emu.upload(shards, "gs://%s/shards" % BUCKET)
            shards = "gs://%s/shards" % BUCKET
        proxy = None
        if latency_ms is not None:
            proxy = subprocess.Popen(
                [common.PYTHON, latency_proxy.__file__, "--target",
                 "127.0.0.1:%d" % emu.port, "--delay-ms", str(latency_ms), "--port",
                 str(proxy_port)], stdout=subprocess.PIPE, text=True,
                preexec_fn=gcs_emulator.die_with_parent)
            if not proxy.stdout.readline().startswith("listening on"):
                raise SystemExit("the latency proxy did not start")
        try:
            model = "gs://%s/model" % BUCKET
            env = emu.environment(endpoint=external)
            if args.credential_lookup:
                del env["GOOGLE_APPLICATION_CREDENTIALS"]
            load = os.getloadavg()[0]
            m = emu.log.mark()
            cmd_wall = run_train(args, train_argv(args, shards, model, B, passes), env,
                                 os.path.join(work, "%s-B%d.log" % (label.replace(" ", ""), B)))
            counts = emu.log.counts(m)
            row = run_log_summary(emu.read(model + "/run_log.jsonl").decode().splitlines())
            left = left_behind(emu.objects(model))
            with emu.exported(endpoint=external):    # media links name the proxy
                arrays = final_arrays(model)
        finally:
            if proxy is not None:
                proxy.terminate()
                proxy.wait(10)
                proxy.stdout.close()
    steps = row["steps"]
    row.update({"storage": label, "B": B, "latency_ms": latency_ms,
                "command_wall_s": round(cmd_wall, 3), "load_average": round(load, 2),
                "requests": counts, "requests_per_step": round(counts["total"] / steps, 1),
                "requests_per_step_by_kind": {k: round(counts[k] / steps, 1)
                                              for k in gcs_emulator.KINDS if counts[k]},
                "objects_left": len(left), "objects_left_examples": left[:5]})
    return row, arrays


def main(argv=None):
    args = parse_args(argv)
    args.code = os.path.abspath(args.code)
    from pipelines.runtime import object_store_files
    object_store_files.register()
    shards = synth(args)
    blocks = [int(b) for b in args.word_blocks.split(",") if b]
    latencies = [float(x) for x in args.latencies_ms.split(",") if x]
    work = tempfile.mkdtemp(prefix="object-store-bench-")
    rows = []
    try:
        # untimed: compiles the numba kernels of --code once (their cache lives beside the
        # sources) and warms the page cache, so that the first timed row does not pay for it
        run_train(args, train_argv(args, shards, os.path.join(work, "warm-up"), blocks[0]), {},
                  os.path.join(work, "warm-up.log"))
        for B in blocks:
            local, ref = local_row(args, shards, B, work)
            rows.append(local)
            print(json.dumps(local, sort_keys=True), flush=True)
            emu_latencies = ([] if args.no_direct else [None]) + latencies
            zero = None
            for lat in emu_latencies:
                row, arrays = emulator_row(args, shards, B, work, lat)
                row["same_bits_as_local"] = same_bits(arrays, ref)
                row["wall_vs_local"] = round(row["wall_s"] / local["wall_s"], 3)
                if lat == 0:
                    zero = row
                # what one more step costs: the same run for two passes in one window, less
                # the one-pass run (the window's start and end -- its files, the checkpoint
                # published from them -- cancel)
                two, _ = emulator_row(args, shards, B, work, lat, passes=2)
                extra = two["steps"] - row["steps"]
                row["requests_per_step_marginal"] = round(
                    (two["requests"]["total"] - row["requests"]["total"]) / extra, 1)
                row["requests_per_window"] = round(
                    row["requests"]["total"] - row["requests_per_step_marginal"] * row["steps"],
                    1)
                row["marginal_step_s"] = round((two["wall_s"] - row["wall_s"]) / extra, 4)
                if zero is not None and lat is not None:
                    row["per_step_vs_0ms"] = round(row["per_step_s"] / zero["per_step_s"], 3)
                    row["after_start_per_step_vs_0ms"] = round(
                        row["after_start_per_step_s"] / zero["after_start_per_step_s"], 3)
                    row["marginal_step_vs_0ms"] = round(
                        row["marginal_step_s"] / zero["marginal_step_s"], 3)
                rows.append(row)
                print(json.dumps(row, sort_keys=True), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n%-16s %3s %8s %8s %9s %9s %9s %9s %9s %9s %6s %5s" % (
        "storage", "B", "wall_s", "vs_local", "s/step", "vs_0ms", "step+1 s", "vs_0ms",
        "req/step", "marginal", "left", "bits"))
    for r in rows:
        print("%-16s %3d %8.1f %8s %9.3f %9s %9s %9s %9s %9s %6d %5s" % (
            r["storage"], r["B"], r["wall_s"], r.get("wall_vs_local", "-"), r["per_step_s"],
            r.get("per_step_vs_0ms", "-"), r.get("marginal_step_s", "-"),
            r.get("marginal_step_vs_0ms", "-"), r.get("requests_per_step", "-"),
            r.get("requests_per_step_marginal", "-"), r["objects_left"],
            {True: "same", False: "DIFF"}.get(r.get("same_bits_as_local"), "-")))
    code_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.code,
                                 capture_output=True, text=True).stdout.strip()
    common.save_results({"rows": rows, "config": {
        "docs": args.docs, "words": args.words, "topics": args.topics,
        "minibatch": args.minibatch, "pieces": args.pieces, "workers": args.workers,
        "exchange": args.exchange, "staleness": args.staleness,
        "shards_on_store": args.shards_on_store,
        "credential_lookup": args.credential_lookup,
        "code": args.code, "code_commit": code_commit}}, args.output)


if __name__ == "__main__":
    main()
