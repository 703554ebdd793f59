#!/usr/bin/env python3
"""Beam trainer throughput vs the in-process trainer (issue 4), 20 Newsgroups, K=100, one pass.

On 20 Newsgroups prepared as in ../shared/bench/README.md (``benchmarks/prepare_20news.py``;
17,784 training documents, V = 29,403), with the protocol's settings (K=100, α=0.1, η=0.01,
κ=0.7, τ0=64), for each minibatch size S given: one pass of

1. the in-process trainer (``lda_core.trainer.train``: numba threads, the reference);
2. the Beam trainer on the DirectRunner in-process (``in_memory``), default window settings;
3. the Beam trainer on the DirectRunner with 2 worker processes (``multi_processing``),
   default window settings;

and prints documents/second of each, the ratios Beam / in-process (target >= 0.70; printed,
not asserted), wall and CPU seconds (CPU: ``time.process_time`` of this process plus the
reaped worker processes' ``RUSAGE_CHILDREN``), and the max relative difference of the final λ
against the in-process run (the trainers must agree). numba is warmed up first so no run pays
the compile. The machine is shared and noisy: compare ratios from one run.

    python benchmarks/beam_train_bench.py [--minibatch 256,2048] [--skip-workers]
"""
from __future__ import annotations

import logging
import os
import resource
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402


def _cpu():
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def _algo(files, V, D, S, vh):
    from lda_core.online_vb import OnlineVB
    return OnlineVB(common.K, V, alpha=common.ALPHA, eta=common.ETA, kappa=common.KAPPA,
                    tau0=common.TAU0, batch_size=S, corpus_size=D, seed=0, vocab_hash=vh)


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--minibatch", default="256,4096",
                   help="comma-separated minibatch sizes S to measure")
    p.add_argument("--skip-workers", action="store_true",
                   help="skip the 2-worker-process runs")
    p.add_argument("--json", default=os.path.join(common.REPO, "benchmarks", "results",
                                                  "beam_train_bench.json"),
                   help="write the results here ('' not at all)")
    p.add_argument("--window", type=int, default=None,
                   help="minibatches per window (default: the Beam trainer's default)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from benchmarks.prepare_20news import prepare
    from lda_core.trainer import train as inprocess_train
    from pipelines import beam_train, dataset
    from pipelines.shard_stream import ShardStream, read_shard

    prepare(args.cache)
    ds = os.path.join(args.cache, "ds_train")
    files = dataset.resolve_shards(ds)
    vh = dataset.check_vocab_hash(files, None)
    V = len(dataset.Vocabulary.read(ds))
    D = dataset.count_documents(files)
    print("20 Newsgroups: D=%d V=%d K=%d, %d shard(s)" % (D, V, common.K, len(files)))
    warm = _algo(files, V, D, 64, vh)
    warm.local_step(read_shard(files[0]).take(range(64)))     # numba compile / cache load
    tmp = tempfile.mkdtemp(prefix="beam-bench-")
    rows = []
    try:
        for S in [int(s) for s in args.minibatch.split(",") if s.strip()]:
            res = {}
            algo = _algo(files, V, D, S, vh)
            stream = ShardStream(files, batch_size=S, seed=0, passes=1)
            c0, t0 = _cpu(), time.time()
            inprocess_train(algo, stream, progress=False)
            res["inprocess"] = (time.time() - t0, _cpu() - c0, algo)
            runs = [("beam in-process", ["--runner=DirectRunner",
                                         "--direct_running_mode=in_memory"])]
            if not args.skip_workers:
                runs.append(("beam 2 workers", ["--runner=DirectRunner",
                                                "--direct_running_mode=multi_processing",
                                                "--direct_num_workers=2"]))
            for name, bargv in runs:
                md = os.path.join(tmp, "%s-%d" % (name.replace(" ", "_"), S))
                a = _algo(files, V, D, S, vh)
                c0, t0 = _cpu(), time.time()
                r = beam_train.train(a, files, md, passes=1, seed=0, batch_size=S,
                                     minibatches_per_window=args.window, beam_argv=bargv,
                                     progress=False)
                res[name] = (time.time() - t0, _cpu() - c0, r.algorithm, r.windows)
                shutil.rmtree(md, ignore_errors=True)
            ref_wall, ref_cpu, ref_algo = res["inprocess"]
            lam = ref_algo.lambda_()
            print("\nS=%d (%d steps): in-process trainer %.1f s wall, %.1f s CPU, %.0f docs/s"
                  % (S, ref_algo.step, ref_wall, ref_cpu, D / ref_wall))
            for name in [n for n, _ in runs]:
                wall, cpu, a, windows = res[name]
                diff = float(np.max(np.abs(a.lambda_() - lam) / lam))
                ratio = ref_wall / wall
                print("  %-16s %5.1f s wall, %5.1f s CPU, %6.0f docs/s, %d window(s): "
                      "docs/s ratio %.2f (target >= 0.70), CPU ratio %.2f, max rel diff of "
                      "lambda %.1e" % (name, wall, cpu, D / wall, windows, ratio,
                                       ref_cpu / max(cpu, 1e-9), diff))
                rows.append(dict(S=S, runner=name, wall=wall, cpu=cpu, docs_per_s=D / wall,
                                 ratio=ratio, inprocess_wall=ref_wall, windows=windows,
                                 max_rel_diff=diff))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    common.print_json(rows)
    if args.json:
        common.save_results(rows, args.json, argv, os.path.basename(__file__))


if __name__ == "__main__":
    main()
