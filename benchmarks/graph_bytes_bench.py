"""Graph bytes of the Beam trainer's remote window, per step, and how many steps one Dataflow
job holds.

Builds the window a remote runner runs (two stages per step) for one pass of 3,300,000
documents over 165 shards of 20,000 rows (synthetic row counts: nothing is read) and measures

* the runner API graph (``Pipeline.to_runner_api().ByteSize()``, the ``graph_bytes_per_step``
  of the timing record) of windows of 4 and 20 steps at S = 256 and S = 4,096: bytes per
  step from their difference;
* with ``--dataflow`` (needs ``ldabeam[gcp]``): the DataflowRunner's dry-run translation
  (``--dry_run=True --no_auth``) of the whole 806-step window at S = 4,096: the JSON request
  (``result.job.json()``) and the staged pipeline (``result.job.proto_pipeline``) against
  Dataflow's 20 MB and 10 MB limits.

Run it in two trees (``--label before|after``) to compare: results are merged into
``benchmarks/results/graph_bytes.json`` under the label, and the ratio after/before of the
bytes per step is printed when both are there.

    PYTHONPATH=. python benchmarks/graph_bytes_bench.py --label after --dataflow
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

D, SHARD_ROWS, PIECES = 3_300_000, 20_000, 16
GRAPH_LIMIT = 10 * 1024 * 1024
REQUEST_LIMIT = 20 * 1024 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "graph_bytes.json")


def dataflow_config(dry_run: bool):
    """The DataflowRunner configuration of the measurements (valid-looking, never submitted)."""
    from pipelines.runtime.beam_options import runner_config
    argv = ["--project=ldabeam-dry-run", "--region=us-central1",
            "--temp_location=gs://ldabeam-dry-run/tmp",
            "--staging_location=gs://ldabeam-dry-run/staging", "--no_auth",
            "--sdk_location=container", "--num_workers=16"]
    return runner_config("DataflowRunner", argv + (["--dry_run=True"] if dry_run else []))


def wikipedia_window(p, cfg, n_steps: int, minibatch: int, exchange: str = "state"):
    """The remote runner's window of ``n_steps`` steps over the synthetic 3.3 M-document plan,
    built in ``p``; ``exchange`` "word-blocks": the word-sharded steps
    (:mod:`pipelines.training.beam_remote`, B = PIECES word blocks)."""
    from pipelines.training.beam_plan import plan_steps
    from pipelines.training.beam_state import StateRef
    from pipelines.training.beam_window import build_window
    n_shards = -(-D // SHARD_ROWS)
    sizes = [min(SHARD_ROWS, D - i * SHARD_ROWS) for i in range(n_shards)]
    files = ["gs://ldabeam-corpus/enwiki/shards/train-%05d-of-%05d.parquet" % (i, n_shards)
             for i in range(n_shards)]
    steps = plan_steps(files, sizes, seed=0, minibatch=minibatch, start=0, stop=n_steps,
                       pieces_per_minibatch=PIECES)
    scratch = "gs://ldabeam-dry-run/model/.beam-scratch/ldabeam-scratch-run"
    if exchange in ("remote", "remote-s0"):
        from pipelines.training.beam_remote import Schedule, Start, build_window as remote
        s = 0 if exchange == "remote-s0" else 1
        ahead = plan_steps(files, sizes, seed=0, minibatch=minibatch, start=n_steps,
                           stop=n_steps + s, pieces_per_minibatch=PIECES)
        schedule = Schedule.of_steps(Start(scratch, 0, PIECES, 0, 0), steps, ahead, s)
        remote(p, schedule, steps[0].read_plan, "run", 100_000, 1)
        return
    build_window(p, cfg, "state", steps, StateRef("run/0", scratch + "/state-000000000.npz",
                                                  0), "run", scratch, 1)


def runner_api_per_step(minibatch: int, exchange: str = "state") -> float:
    import apache_beam as beam
    sizes = []
    for n in (4, 20):
        p = beam.Pipeline()
        wikipedia_window(p, dataflow_config(False), n, minibatch, exchange)
        sizes.append(p.to_runner_api().ByteSize())
    return (sizes[1] - sizes[0]) / 16.0


def dataflow_dry_run(n_steps: int, minibatch: int, exchange: str = "state"):
    import apache_beam as beam
    cfg = dataflow_config(True)
    p = beam.Pipeline(runner=cfg.make_runner(), options=cfg.pipeline_options())
    t0 = time.process_time()
    wikipedia_window(p, cfg, n_steps, minibatch, exchange)
    result = p.run()
    return {"steps": n_steps, "request_bytes": len(result.job.json().encode("utf-8")),
            "pipeline_bytes": result.job.proto_pipeline.ByteSize(),
            "cpu_seconds": round(time.process_time() - t0, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", default="after")
    ap.add_argument("--commit", help="the commit of the code measured (default: HEAD of the "
                    "tree pipelines is imported from)")
    ap.add_argument("--exchange", choices=("state", "remote", "remote-s0"), default="remote",
                    help="the remote window's steps: the state exchange, or the word-sharded "
                         "one (record it with --label word-blocks)")
    ap.add_argument("--dataflow", action="store_true",
                    help="also the DataflowRunner dry-run of the 806-step window")
    args = ap.parse_args(argv)
    from lda_core.training.ordering import n_batches
    import pipelines
    out = {"commit": args.commit or subprocess.run(
               ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
               cwd=os.path.dirname(os.path.abspath(pipelines.__file__))).stdout.strip(),
           "run": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "load": round(os.getloadavg()[0], 1),
           "documents": D, "shards": -(-D // SHARD_ROWS), "pieces": PIECES,
           "exchange": args.exchange,
           "runner_api_bytes_per_step": {}}
    for S in (256, 4096):
        b = runner_api_per_step(S, args.exchange)
        out["runner_api_bytes_per_step"][str(S)] = round(b)
        print("%s: runner API graph %.0f bytes per step at S=%d: %d steps fit in %d MB"
              % (args.label, b, S, GRAPH_LIMIT // b, GRAPH_LIMIT // 2 ** 20))
    if args.dataflow:
        n = n_batches(D, 4096)
        dr = dataflow_dry_run(n, 4096, args.exchange)
        dr["pipeline_within_limit"] = dr["pipeline_bytes"] <= GRAPH_LIMIT
        dr["request_within_limit"] = dr["request_bytes"] <= REQUEST_LIMIT
        out["dataflow_dry_run"] = dr
        print("%s: Dataflow dry run of %d steps: request %d bytes, pipeline %d bytes (%.2f x "
              "the 10 MB limit)" % (args.label, n, dr["request_bytes"], dr["pipeline_bytes"],
                                    dr["pipeline_bytes"] / GRAPH_LIMIT))
    results = {}
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            results = json.load(f)
    results[args.label] = out
    if "before" in results and "after" in results:
        for S in ("256", "4096"):
            r = (results["after"]["runner_api_bytes_per_step"][S]
                 / results["before"]["runner_api_bytes_per_step"][S])
            print("graph bytes per step at S=%s, after/before: %.3f" % (S, r))
            results.setdefault("ratios_after_over_before", {})[S] = round(r, 3)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    print("wrote", RESULTS)


if __name__ == "__main__":
    main()
