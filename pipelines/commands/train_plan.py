"""What ``ldabeam train --plan`` prints: the run a command line would start, resolved as the run
resolves it (algorithm, S, P, B, staleness and its warm-up, the remote defaults), with nothing
written, submitted or looked up in the cloud.

For a Beam runner: the exchange, the windows and the jobs they are, each job's graph against
Dataflow's limit (the remote exchange's measured bytes per step, ``graph_bytes_bench``); on a
remote runner also the cluster model's time and list price for the steps asked
(:func:`pipelines.training.remote_defaults.steps_time`: its constants are measurements on
these machines and stated assumptions, docs/cluster.md section 8).
"""
from __future__ import annotations

import math
import sys
from typing import Any, Dict, List

from lda_core.training import pieces as pieces_mod
from lda_core.training import staleness as staleness_mod
from pipelines.runtime.beam_options import runner_config
from pipelines.runtime.remote_checks import unreachable
from pipelines.training import remote_defaults as rd


def plan_lines(args, beam_argv, algorithm: str, algo, stream,
               run_info: Dict[str, Any]) -> List[str]:
    """The plan as lines (module docstring)."""
    steps = stream.total_steps if args.max_steps is None else min(stream.total_steps,
                                                                  int(args.max_steps))
    S, K, V, D = stream.minibatch, algo.n_topics, algo.n_words, stream.n_docs
    out = ["plan: %s, K=%d, V=%d, D=%d documents, minibatch %d, %d steps (%d pass%s of %d)"
           % (algorithm, K, V, D, S, steps, stream.passes, "" if stream.passes == 1 else "es",
              stream.batches_per_pass)]
    if args.runner.lower() in ("inprocess", "in-process", "local"):
        out.append("  runner: the in-process trainer (one process, %s thread%s)"
                   % (args.threads or "all", "" if args.threads == 1 else "s"))
        return out
    # the Beam trainer's own choices (it imports Beam; so does every Beam run)
    from pipelines.training.beam_train import (choose_exchange, default_pieces, default_window,
                                               EXCHANGE_REMOTE, REMOTE_STALENESS)
    cfg = runner_config(args.runner, list(beam_argv or ()))
    exchange = choose_exchange(getattr(args, "exchange", None), cfg, algo)
    P = int(run_info.get(pieces_mod.RUN_KEY) or default_pieces(cfg))
    s = run_info.get(staleness_mod.RUN_KEY)
    s = int(s if s is not None else REMOTE_STALENESS if exchange == EXCHANGE_REMOTE else 0)
    W = int(run_info.get(staleness_mod.WARMUP_KEY, staleness_mod.DEFAULT_WARMUP)) if s else 0
    B = int(getattr(algo, "word_blocks", 1) or 1)
    if exchange == EXCHANGE_REMOTE and B == 1 and not cfg.local:
        B = P          # a fresh remote run: one word block per piece (beam_train)
    M = 1 if args.unroll is False else int(args.minibatches_per_window
                                           or default_window(cfg, S))
    jobs = max(1, math.ceil(steps / M))
    out.append("  runner: %s; %s exchange; pieces P=%d, word blocks B=%d, staleness %d%s"
               % (cfg.describe(), exchange, P, B, s,
                  " after %d minibatches at 0" % W if s else ""))
    out.append("  windows of %d steps: %d pipeline run%s%s" % (
        M, jobs, "" if jobs == 1 else "s", "" if cfg.local else " (one job each)"))
    graph = rd.MEASURED[algorithm].graph_bytes if algorithm in rd.ALGORITHMS else {}
    if exchange == EXCHANGE_REMOTE and graph.get(s) and graph.get(0):
        # the first window is the largest: its warm-up steps take two stages each
        n = min(M, steps)
        warm = min(W, n) if s else 0
        window = warm * graph[0] + (n - warm) * graph[s]
        fits = int(rd.GRAPH_LIMIT_BYTES // graph[s])
        over = window > rd.GRAPH_LIMIT_BYTES
        out.append("  job graph: ~%.1f kB a step (measured; %.1f kB in the warm-up), %.1f MB "
                   "for the first window of %d steps, %s Dataflow's %d MB limit%s"
                   % (graph[s] / 1000, graph[0] / 1000, window / 1e6, n,
                      "OVER" if over else "within", rd.GRAPH_LIMIT_BYTES // 2 ** 20,
                      ": give --minibatches-per-window %d or fewer" % fits if over else ""))
    here = unreachable(cfg, {"--shards": args.shards, "--output": args.output})
    if here:
        out.append("  note: %s on this machine: the run itself needs them on an object "
                   "store its workers can open" % " and ".join(here))
    if cfg.local or algorithm not in rd.ALGORITHMS or exchange != EXCHANGE_REMOTE:
        return out
    workers = rd.workers_of(list(beam_argv or ()))
    vcpus = rd.vcpus_of(rd.machine_of(list(beam_argv or ())))
    threads = int(args.threads or 1)
    cloud = rd.Cloud()
    lay = rd.Layout(workers, vcpus, S, P, B, threads, s)
    t = rd.steps_time(rd.MEASURED[algorithm], cloud, rd.Shape(D, K, V), lay, steps, M)
    parts = t["parts"]
    out.append("  bytes a step per worker: %.1f MB in, %.1f MB out"
               % (parts["bytes_in_per_worker"] / 1e6, parts["bytes_out_per_worker"] / 1e6))
    out.append("  cluster model (%d workers x %d vCPUs, %g s per barrier, %g s per job start; "
               "docs/cluster.md section 8): %.2f s a step, %s in all, ~$%.2f at list price"
               % (workers, vcpus, cloud.stage_latency_s, cloud.job_start_s, t["step_s"],
                  _duration(t["total_s"]), cloud.price_usd(workers, vcpus, t["total_s"])))
    return out


def _duration(seconds: float) -> str:
    return ("%.1f h" % (seconds / 3600) if seconds >= 3 * 3600
            else "%.0f min" % (seconds / 60) if seconds >= 120 else "%.0f s" % seconds)


def print_plan(*a, **kw) -> None:
    out = kw.pop("out", None) or sys.stdout
    for line in plan_lines(*a, **kw):
        print(line, file=out)
    print("  (--plan: nothing was written or submitted)", file=out)
