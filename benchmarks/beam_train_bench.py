#!/usr/bin/env python3
"""Beam trainer throughput and per-step cost breakdown vs the in-process trainer.

Corpus: the synthetic LDA corpus of ``python -m pipelines.commands.synth --docs D --words V
--topics K`` (default D = 200,000, V = 8,000, K = 100; written once into ``--data``). The
default algorithm of ``ldabeam train`` (SCVB0) with its own defaults, or ``--algorithm
online-vb`` (α=0.1, η=0.01, κ=0.7, τ0=64); minibatch S (default 4,096), one pass, the
trainers' default pieces per minibatch P (``--pieces`` for another, the same for every row),
in one process, one after the other -- the issue's ``ldabeam train ... --minibatch 4096
--passes 1`` in-process and with ``--runner DirectRunner --direct_running_mode=multi_processing
--direct_num_workers=2``:

1. ``in-process``: the in-process trainer (``lda_core.training.trainer.train``, numba threads: the
   reference);
2. ``beam-in-process``: the Beam trainer on the DirectRunner in-process (``in_memory``);
3. ``beam-workers-2``: the Beam trainer on the DirectRunner with 2 worker processes
   (``multi_processing``): one stage per window, each worker advancing its own copy of the
   state (:mod:`pipelines.training.beam_chain`); and ``beam-workers-2-two-stage``, the same with the
   two stages per step remote runners run (E-step; combine and global step in one worker,
   state handed to the others as a file);
4. ``portable-pool`` (``--portable``): the PortableRunner with a local job service and an
   external worker pool (docs/cluster.md §2), both started and stopped by this script.

For each it prints documents/second and the ratio to the in-process trainer (from this one
run: the machine is shared; the load average is printed and saved), wall and CPU seconds (CPU:
``time.process_time`` of this process plus the reaped worker processes' ``RUSAGE_CHILDREN``;
the portable pool's workers are not children of this process and are not counted), the
breakdown per step summed from the run log's ``timing`` records
(:func:`lda_core.training.phase_times.timing_record`: E-step, state delivery, statistics
encode/combine/decode, global step, publish, pipeline start-up, and the remainder), and the
final λ against the in-process run (bit-identical, or the max relative difference).

``--big``: one more row, ``beam-workers-2`` on a K = 1,000, V = 100,000 synthetic corpus
(``--big-docs`` documents) with the peak RSS of each worker process (``VmHWM`` of the
driver's child processes, sampled while the run lasts) against the state size.

Rows go to ``benchmarks/results/beam_train_bench.json`` (``benchmarks.common.save_results``)
with the keys the cluster model reads (``runner``, ``K``, ``V``, ``S``, ``docs``, ``steps``,
``wall_s``, ``cpu_s``, ``docs_per_s_ratio``, ``estep_s``, ``global_step_s``,
``per_step_overhead_s``, ``state_bytes``, ``stats_bytes_per_step``, ``read_bytes_per_step``
(Parquet bytes decoded, summed over the workers; Beam runners), ``breakdown``,
``final_state``).

``--workers-sweep``: what a step moves with W = 1, 2, 4, 8, 16 worker processes (``--sweep-workers``)
run as a cluster runner runs them (docs/beam-training.md "What a step moves"): the DirectRunner's
``multi_processing`` mode with two stages per step (E-step; combine and global step in one
worker), statistics through the runner (never spilled to files), states in a scratch folder
on disk (not ``/dev/shm``), and every counted transfer throttled to ``--emulate-bandwidth``
bytes per second (:mod:`lda_core.storage.traffic`), so that 16 processes on a few cores wait
for their bytes as on a network. Synthetic corpus D = 4,096, V = 5,000, K = 20, S = 256 (16
steps, one window), P = 2 W pieces per minibatch (``--sweep-pieces-per-worker``; as in issue
24's table). Per W: documents/second and its ratio to the
in-process trainer with the same pieces (run just before, in this process; unthrottled: it
moves nothing), the ``timing`` record's ``bytes.in_per_worker_step``,
``bytes.out_per_worker_step``, ``bytes.reducer_in_step`` and ``graph_bytes_per_step``, the
state bytes, the statistics bytes per piece, and the final λ against the in-process run. Rows
go to ``benchmarks/results/beam_train_bench_workers.json`` with the load average at each row.

    python benchmarks/beam_train_bench.py [--docs 200000] [--minibatch 4096] [--portable]
                                          [--skip-workers] [--big [--big-docs 4096]]
    python benchmarks/beam_train_bench.py --workers-sweep [--sweep-workers 1,2,4,8,16]
                                          [--emulate-bandwidth 50e6]
"""
from __future__ import annotations

import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402

WORKERS_2 = ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
             "--direct_num_workers=2"]
RUNNERS = {
    "beam-in-process": ["--runner=DirectRunner", "--direct_running_mode=in_memory"],
    "beam-workers-2": WORKERS_2,
    # the same with two stages per step (E-step; combine + global step in one worker, which
    # hands the new state to the others as a file): what remote runners run
    "beam-workers-2-two-stage": WORKERS_2,
}


def _cpu():
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def synth(out: str, docs: int, words: int, topics: int) -> str:
    """The synthetic dataset ``out`` (written by ``pipelines.commands.synth`` when absent)."""
    if not os.path.exists(os.path.join(out, "manifest.json")):
        common.run([common.PYTHON, "-m", "pipelines.commands.synth", "--output", out,
                    "--docs", str(docs), "--words", str(words), "--topics", str(topics),
                    "--overwrite"], quiet=True)
    return out


def _algo(K, V, D, S, vh, algorithm="online-vb", tokens=None):
    """Online VB with the benchmarks' settings (common.ALPHA ...), or ``algorithm`` with its
    own defaults as ``ldabeam train`` builds it (``tokens``: the corpus's token count C)."""
    if algorithm != "online-vb":
        from pipelines.training.algorithm_options import build_algorithm
        return build_algorithm(algorithm, K, V, settings={}, corpus_size=D,
                               seed=0, vocab_hash=vh, corpus_tokens=tokens)
    from lda_core.algorithms.online_vb import OnlineVB
    return OnlineVB(K, V, alpha=common.ALPHA, eta=common.ETA, kappa=common.KAPPA,
                    tau0=common.TAU0, corpus_size=D, seed=0, vocab_hash=vh)


def state_bytes(algo) -> int:
    return int(sum(np.asarray(a).nbytes for a in algo.to_state().arrays.values()))


class ChildPeak:
    """Peak resident memory (``VmHWM``) of each descendant process of this one (the SDK
    worker processes and whatever starts them), sampled every ``every`` s while it runs
    (worker processes exit with the pipeline)."""

    def __init__(self, every: float = 0.2):
        self.every, self.peaks = every, {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _children(self):
        parent = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open("/proc/%s/stat" % pid) as f:
                        parent[pid] = f.read().rsplit(")", 1)[1].split()[1]
                except (OSError, IndexError):
                    continue
        mine, frontier = set(), {str(os.getpid())}
        while frontier:
            frontier = {p for p, pp in parent.items() if pp in frontier} - mine
            mine |= frontier
        for pid in mine:
            try:
                with open("/proc/%s/status" % pid) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            yield int(pid), int(line.split()[1]) * 1024
            except (OSError, IndexError, ValueError):
                continue

    def _run(self):
        while not self._stop.wait(self.every):
            for pid, hwm in self._children():
                self.peaks[pid] = max(self.peaks.get(pid, 0), hwm)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def breakdown(run_log_path: str):
    """Phase seconds per step and bytes, summed over the run's ``timing`` records."""
    from lda_core.storage.run_log import read_run_log
    from lda_core.training.phase_times import sum_timing
    return sum_timing(read_run_log(run_log_path, "timing"))


def run_pieces(run_log_path: str):
    """P of a run (``pieces_per_minibatch`` of its run log's start record)."""
    from lda_core.storage.run_log import read_run_log
    for rec in read_run_log(run_log_path, "start"):
        return (rec.get("run") or {}).get("pieces_per_minibatch")
    return None


def compare(a, ref) -> str:
    """"bit-identical" when every array of the two states is, else the largest relative
    difference over their arrays."""
    sa, sr = a.to_state().arrays, ref.to_state().arrays
    if sa.keys() == sr.keys() and all(np.array_equal(sa[k], sr[k]) for k in sr):
        return "bit-identical"
    worst = 0.0
    for k in sr:
        x, y = np.asarray(sa.get(k), np.float64), np.asarray(sr[k], np.float64)
        if x.shape == y.shape and x.size:
            worst = max(worst, float(np.max(np.abs(x - y) / np.maximum(np.abs(y), 1e-300))))
    return "max rel diff %.1e" % worst


def _row(name, K, V, S, D, wall, cpu, ref_wall, timing, algo, ref_algo, load, **extra):
    steps = max(1, int(timing.get("steps") or algo.step))
    per = dict(timing.get("per_step", {}))
    workers = int(timing.get("workers") or 1)
    # wall shares: seconds summed over the workers / the workers running them at once
    parallel = set(timing.get("parallel") or ())
    est, gst = (per.get(k, 0.0) / (workers if k in parallel else 1)
                for k in ("estep", "global_step"))
    attributed = sum(v / (workers if k in parallel else 1) for k, v in per.items())
    per["unattributed"] = wall / steps - attributed
    nbytes = timing.get("bytes_per_step", {})
    row = dict(runner=name, K=K, V=V, S=S, docs=D, steps=steps, wall_s=wall, cpu_s=cpu,
               docs_per_s=D / wall, docs_per_s_ratio=(ref_wall / wall) if ref_wall else None,
               estep_s=est, global_step_s=gst,
               per_step_overhead_s=wall / steps - est - gst,
               state_bytes=state_bytes(algo),
               stats_bytes_per_step=nbytes.get("stats_encode", 0.0),
               state_delivery_bytes_per_step=nbytes.get("state_delivery", 0.0),
               read_bytes_per_step=nbytes.get("read"),
               graph_bytes_per_step=nbytes.get("pipeline_build"),
               workers=workers, breakdown=per,
               final_state=compare(algo, ref_algo) if ref_algo is not None else "reference",
               pieces=timing.get("pieces"), algorithm=getattr(algo, "name", None),
               load_average=load)
    row.update(extra)
    return row


def _print_row(r):
    print("  %-16s P=%s %6.1f s wall %6.1f s CPU %7.0f docs/s ratio %s  overhead/step %.3f s  "
          "final %s  load %.1f" % (r["runner"], r.get("pieces"), r["wall_s"], r["cpu_s"],
                                   r["docs_per_s"], "-" if r["docs_per_s_ratio"] is None
                                   else "%.2f" % r["docs_per_s_ratio"],
                                   r["per_step_overhead_s"], r["final_state"],
                                   (r.get("load_average") or [0.0])[0]))
    print("      per step: " + ", ".join("%s %.3f" % kv for kv in sorted(r["breakdown"].items())))
    if r.get("graph_bytes_per_step") is not None:
        print("      graph bytes per step (runner API proto / steps): %.0f"
              % r["graph_bytes_per_step"])


def run_beam(name, bargv, files, K, V, D, S, vh, tmp, window=None, pieces=None,
             algorithm="online-vb", tokens=None):
    from lda_core.storage.run_log import RunLog
    from pipelines.training import beam_train, beam_window
    exchange = "state" if name.endswith("-two-stage") else None
    md = os.path.join(tmp, name)
    os.makedirs(md, exist_ok=True)
    log_path = os.path.join(md, "run_log.jsonl")
    a = _algo(K, V, D, S, vh, algorithm, tokens)
    c0, t0 = _cpu(), time.time()
    with RunLog(log_path) as rl:
        r = beam_train.train(a, files, md, passes=1, seed=0, minibatch=S,
                             minibatches_per_window=window, pieces_per_minibatch=pieces,
                             beam_argv=bargv, progress=False, run_log=rl, exchange=exchange)
    wall, cpu = time.time() - t0, _cpu() - c0
    timing = breakdown(log_path)
    timing["pieces"] = run_pieces(log_path)
    return wall, cpu, r.algorithm, timing


def portable_pool():
    """(job endpoint args, [processes]): a local job service and an external worker pool."""
    import socket

    def port():
        s = socket.socket()
        s.bind(("localhost", 0))
        p = s.getsockname()[1]
        s.close()
        return p

    jp, wp = port(), port()
    env = dict(os.environ, PATH=os.path.dirname(common.PYTHON) + os.pathsep
               + os.environ.get("PATH", ""), PYTHONPATH=common.REPO)
    procs = [subprocess.Popen([common.PYTHON, "-m",
                               "apache_beam.runners.portability.local_job_service_main",
                               "--port", str(jp)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL),
             subprocess.Popen([common.PYTHON, "-m",
                               "apache_beam.runners.worker.worker_pool_main",
                               "--service_port=%d" % wp], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    time.sleep(4)
    return ["--runner=PortableRunner", "--job_endpoint=localhost:%d" % jp,
            "--environment_type=EXTERNAL", "--environment_config=localhost:%d" % wp], procs


def expected_word_block_bytes(files, S, P, W, K, V, partials_bytes):
    """What the word-sharded exchange should move per step, from the corpus alone: a
    worker's E-step reads the previous step's block partials (``partials_bytes``, all B of
    them) and its pieces' words' rows (P/W pieces of the mean piece's distinct words, K
    float64 each); a block owner (B = W blocks) reads and writes its V/B rows. Mean over the
    run's minibatches."""
    from lda_core.training.pieces import piece_bounds
    from pipelines.training.shard_stream import ShardStream
    piece_words = []
    for mb in ShardStream(files, minibatch=S, seed=0, passes=1):
        batch = mb.batch
        for lo, hi in piece_bounds(batch.n_docs, P):
            piece_words.append(len(np.unique(batch.take(range(lo, hi)).word_ids)))
    rows = float(np.mean(piece_words)) * K * 8
    return dict(estep_in=partials_bytes + rows * P / W, estep_rows_per_piece=rows,
                owner_block_bytes=V / W * K * 8)


def _partial_bytes(K: int) -> float:
    """An online-VB block owner's partial at K (benchmarks/cluster_model.py measures it)."""
    from benchmarks.cluster_model import measured_small_bytes
    return measured_small_bytes(K)["partial"]


def sweep_row(W, P, files, K, V, D, S, vh, tmp, bandwidth, exchange="state"):
    """One ``--workers-sweep`` row: the in-process reference with P pieces, then the
    cluster-like Beam run on W worker processes (module docstring); ``exchange``
    "word-blocks": the word-sharded exchange with B = W word blocks."""
    from lda_core.storage import traffic
    from lda_core.storage.run_log import RunLog
    from lda_core.training.trainer import train as inprocess_train
    from pipelines.training import beam_train, beam_window
    from pipelines.training.shard_stream import ShardStream
    traffic.set_bandwidth(None)
    blocks = W if exchange == "word-blocks" else 1
    ref = _algo(K, V, D, S, vh)
    ref.set_word_blocks(blocks)
    t0 = time.time()
    inprocess_train(ref, ShardStream(files, minibatch=S, seed=0, passes=1), progress=False,
                    pieces=P)
    ref_wall = time.time() - t0
    beam_window.SPILL_STATS = False
    os.environ[traffic.ENV] = repr(float(bandwidth))     # the worker processes inherit it
    traffic.set_bandwidth(bandwidth)                     # and the driver (start state)
    md = os.path.join(tmp, "w%d" % W)
    os.makedirs(md, exist_ok=True)
    log_path = os.path.join(md, "run_log.jsonl")
    a = _algo(K, V, D, S, vh)
    a.set_word_blocks(blocks)
    load_before = os.getloadavg()
    c0, t0 = _cpu(), time.time()
    try:
        with RunLog(log_path) as rl:
            r = beam_train.train(a, files, md, passes=1, seed=0, minibatch=S,
                                 pieces_per_minibatch=P, progress=False, run_log=rl,
                                 beam_argv=["--runner=DirectRunner",
                                            "--direct_running_mode=multi_processing",
                                            "--direct_num_workers=%d" % W],
                                 scratch_dir=os.path.join(tmp, "scratch"),
                                 exchange=exchange)
    finally:
        beam_window.SPILL_STATS = True
        os.environ.pop(traffic.ENV, None)
        traffic.set_bandwidth(None)
    wall, cpu = time.time() - t0, _cpu() - c0
    timing = breakdown(log_path)
    steps = max(1, int(timing["steps"]))
    nb = timing["bytes_per_step"]
    sb = state_bytes(r.algorithm)
    per = dict(timing["per_step"])
    extra = {}
    if exchange == "word-blocks":
        exp = expected_word_block_bytes(files, S, P, W, K, V, W * _partial_bytes(K))
        stats_total = nb.get("stats_encode", 0.0)
        # the documents a worker reads (Parquet bytes, summed over the workers per step)
        exp["estep_in"] += (nb.get("read") or 0.0) / W
        exp["owner_in"] = exp["owner_block_bytes"] + stats_total / W
        exp["owner_out"] = exp["owner_block_bytes"]
        exp["out_per_worker"] = stats_total / W
        extra = dict(expected=exp,
                     in_over_expected=(nb.get("in_per_worker_step") or 0.0) / exp["estep_in"],
                     out_over_expected=(nb.get("out_per_worker_step") or 0.0)
                     / exp["out_per_worker"],
                     owner_in_step=nb.get("owner_in_step"),
                     owner_out_step=nb.get("owner_out_step"),
                     owner_in_over_expected=(nb.get("owner_in_step") or 0.0) / exp["owner_in"],
                     reducer_in_over_even_share=(nb.get("reducer_in_step") or 0.0)
                     / max(1.0, stats_total / W))
    return dict(
        exchange=exchange, word_blocks=blocks, nnz=int(sum(
            len(m.batch.word_ids) for m in ShardStream(files, minibatch=S, seed=0, passes=1))),
        **extra,
        workers=W, pieces=P, K=K, V=V, S=S, docs=D, steps=steps, wall_s=wall, cpu_s=cpu,
        docs_per_s=D / wall, inprocess_docs_per_s=D / ref_wall,
        docs_per_s_ratio=ref_wall / wall, emulate_bandwidth=bandwidth,
        in_per_worker_step=nb.get("in_per_worker_step"),
        out_per_worker_step=nb.get("out_per_worker_step"),
        reducer_in_step=nb.get("reducer_in_step"),
        graph_bytes_per_step=timing["graph_bytes_per_step"],
        state_bytes=sb,
        stats_bytes_per_step=nb.get("stats_encode", 0.0),
        stats_bytes_per_piece=nb.get("stats_encode", 0.0) / P,
        state_loaded_per_step_over_state=nb.get("state_delivery", 0.0) / sb,
        in_per_worker_step_over_state=(nb.get("in_per_worker_step") or 0.0) / sb,
        pipeline_start_s=per.get("pipeline_start", 0.0) * steps,
        breakdown=per, final_state=compare(r.algorithm, ref),
        load_average_before=list(load_before), load_average_after=list(os.getloadavg()))


def _print_sweep(r):
    if r.get("expected"):
        print("  W=%-3d word-blocks: per worker and step, in %.2f x (the B partials + its P/W pieces' "
              "rows + its share of the documents read), out %.2f x (its share of the statistics); busiest block owner: in %.2f x "
              "(its block + its share of the statistics), statistics in %.2f x an even share"
              % (r["workers"], r["in_over_expected"], r["out_over_expected"],
                 r["owner_in_over_expected"], r["reducer_in_over_even_share"]))
    print(("  %-11s W=%-3d" % (r.get("exchange", "state"), r["workers"]))
          + " %6.1f s  %6.0f docs/s  ratio %.3f  in/worker/step %9.0f B (%.2f x state)  "
          "out/worker/step %9.0f B  reducer in/step %9.0f B  graph/step %6.0f B  state %d B  "
          "stats/piece %.0f B  final %s  load %.1f"
          % (r["wall_s"], r["docs_per_s"], r["docs_per_s_ratio"],
             r["in_per_worker_step"] or 0, r["in_per_worker_step_over_state"],
             r["out_per_worker_step"] or 0, r["reducer_in_step"] or 0,
             r["graph_bytes_per_step"], r["state_bytes"], r["stats_bytes_per_piece"],
             r["final_state"], r["load_average_after"][0]))


def workers_sweep(args, argv):
    """``--workers-sweep`` (module docstring)."""
    from pipelines.ingest import dataset
    from pipelines.ingest.shards import read_shard
    K, V, S, D0 = args.sweep_topics, args.sweep_words, args.sweep_minibatch, args.sweep_docs
    ds = synth(os.path.join(args.data, "d%d-v%d-k%d" % (D0, V, K)), D0, V, K)
    files = dataset.resolve_shards(ds)
    vh = dataset.check_vocab_hash(files, None)
    D = dataset.count_documents(files)
    _algo(K, V, D, 64, vh).local_step(read_shard(files[0]).take(range(64)))   # numba
    print("workers sweep: D=%d V=%d K=%d S=%d, cluster-like (two stages per step, statistics "
          "through the runner, scratch on disk), throttle %.3g B/s; load average %s, %d CPUs"
          % (D, V, K, S, args.emulate_bandwidth, "%.2f %.2f %.2f" % os.getloadavg(),
             os.cpu_count() or 0))
    tmp = tempfile.mkdtemp(prefix="beam-sweep-")
    rows = []
    try:
        exchanges = (["state", "word-blocks"] if args.sweep_exchange == "both"
                     else [args.sweep_exchange])
        for W in [int(w) for w in args.sweep_workers.split(",")]:
            for exchange in exchanges:
                rows.append(sweep_row(W, W * args.sweep_pieces_per_worker, files, K, V, D, S,
                                      vh, tmp, args.emulate_bandwidth, exchange))
                _print_sweep(rows[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json is None:
        args.json = os.path.join(common.REPO, "benchmarks", "results",
                                 "beam_train_bench_workers.json")
    res = {"results": rows, "configuration": (
        "DirectRunner multi_processing, W worker processes, P = %d W pieces per minibatch; "
        "two stages per step (--exchange state), statistics through the "
        "runner (beam_window.SPILL_STATS = False), scratch states on disk (scratch_dir), "
        "every counted transfer throttled to %.3g bytes/s (%s)"
        % (args.sweep_pieces_per_worker, args.emulate_bandwidth, "LDABEAM_EMULATE_BANDWIDTH")),
        "machine_load": args.machine_load}
    if args.json:
        common.save_results(res, args.json, argv, os.path.basename(__file__))


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--data", default=os.path.join(common.CACHE, "synth"),
                   help="folder for the synthetic datasets (written once)")
    p.add_argument("--docs", type=int, default=200000, help="documents (smaller: quick run)")
    p.add_argument("--words", type=int, default=8000)
    p.add_argument("--topics", type=int, default=100)
    p.add_argument("--minibatch", type=int, default=4096, help="minibatch size S")
    p.add_argument("--window", type=int, default=None,
                   help="minibatches per window (default: the Beam trainer's default)")
    p.add_argument("--skip-workers", action="store_true", help="skip the worker-process run")
    p.add_argument("--runners", default=None,
                   help="comma-separated Beam runners to time after the in-process reference "
                        "(default: all of %s)" % ", ".join(RUNNERS))
    p.add_argument("--algorithm", default="scvb0",
                   help="the algorithm of the main rows, with its own defaults as `ldabeam "
                        "train` builds it (default scvb0, the command's default); online-vb "
                        "takes the benchmarks' settings (alpha, eta, kappa, tau0 of "
                        "benchmarks/common.py)")
    p.add_argument("--pieces", type=int, default=None,
                   help="E-step pieces per minibatch for every row, the in-process reference "
                        "included, so all rows compute the same sums (default: the trainers' "
                        "own default, lda_core.training.pieces.DEFAULT_PIECES, as `ldabeam "
                        "train` without --pieces)")
    p.add_argument("--portable", action="store_true",
                   help="also run the PortableRunner with an external worker pool")
    p.add_argument("--big", action="store_true",
                   help="also train K=1000, V=100000 on 2 worker processes (memory per worker)")
    p.add_argument("--big-only", action="store_true",
                   help="only the --big run (its row alone in --json)")
    p.add_argument("--big-docs", type=int, default=4096)
    p.add_argument("--big-exchange", choices=("state", "word-blocks"), default="state",
                   help="--big-only: the exchange of the big run (word-blocks: "
                        "--big-workers processes, P = B = W)")
    p.add_argument("--big-workers", type=int, default=4)
    p.add_argument("--big-blocks", type=int, default=None,
                   help="word blocks of the big word-blocks run (default: the workers)")
    p.add_argument("--big-pieces", type=int, default=None,
                   help="pieces per minibatch of the big word-blocks run (default: the workers)")
    p.add_argument("--big-steps", type=int, default=None,
                   help="stop the big word-blocks run after this many steps")
    p.add_argument("--big-minibatch", type=int, default=1024)
    p.add_argument("--json", default=None,
                   help="write the results here ('' not at all; default "
                        "benchmarks/results/beam_train_bench.json, with --big-only "
                        "beam_train_bench_big.json)")
    p.add_argument("--workers-sweep", action="store_true",
                   help="what a step moves for W worker processes run as a cluster runs them "
                        "(module docstring); results to beam_train_bench_workers.json")
    p.add_argument("--sweep-workers", default="1,2,4,8,16")
    p.add_argument("--emulate-bandwidth", type=float, default=50e6,
                   help="bytes/s every counted transfer is throttled to in the sweep")
    p.add_argument("--sweep-pieces-per-worker", type=int, default=2)
    p.add_argument("--sweep-exchange", choices=("state", "word-blocks", "both"),
                   default="both", help="the exchange(s) each W runs (word-blocks: B = W)")
    p.add_argument("--sweep-docs", type=int, default=4096)
    p.add_argument("--sweep-words", type=int, default=5000)
    p.add_argument("--sweep-topics", type=int, default=20)
    p.add_argument("--sweep-minibatch", type=int, default=256)
    p.add_argument("--machine-load", default="",
                   help="what else ran on the machine meanwhile (saved with the results)")
    args = p.parse_args(argv)
    if args.workers_sweep:
        logging.basicConfig(level=logging.WARNING)
        return workers_sweep(args, argv)
    if args.json is None:
        args.json = os.path.join(common.REPO, "benchmarks", "results",
                                 "beam_train_bench_big.json" if args.big_only
                                 else "beam_train_bench.json")
    logging.basicConfig(level=logging.WARNING)
    from lda_core.storage.run_log import RunLog
    from lda_core.training.trainer import train as inprocess_train
    from pipelines.ingest import dataset
    from pipelines.training.shard_stream import ShardStream, read_shard

    if args.big_only:
        tmp = tempfile.mkdtemp(prefix="beam-bench-")
        try:
            rows = [big_word_blocks_run(args, tmp) if args.big_exchange == "word-blocks"
                    else big_run(args, tmp)]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if args.json:
            common.save_results(rows, args.json, argv, os.path.basename(__file__))
        return
    K, V, S = args.topics, args.words, args.minibatch
    ds = synth(os.path.join(args.data, "d%d-v%d-k%d" % (args.docs, V, K)), args.docs, V, K)
    files = dataset.resolve_shards(ds)
    vh = dataset.check_vocab_hash(files, None)
    D = dataset.count_documents(files)
    C = ShardStream(files, minibatch=S, seed=0, passes=1).count_tokens()
    warm = _algo(K, V, D, 64, vh, args.algorithm, C)
    warm.local_step(read_shard(files[0]).take(range(64)))     # numba compile / cache load
    print("synthetic corpus: D=%d V=%d K=%d S=%d, %d shard(s), %s, P %s; load average %s"
          % (D, V, K, S, len(files), args.algorithm, args.pieces or "default",
             "%.2f %.2f %.2f" % os.getloadavg()))
    tmp = tempfile.mkdtemp(prefix="beam-bench-")
    rows = []
    try:
        algo = _algo(K, V, D, S, vh, args.algorithm, C)
        stream = ShardStream(files, minibatch=S, seed=0, passes=1)
        log_path = os.path.join(tmp, "inprocess_run_log.jsonl")
        c0, t0 = _cpu(), time.time()
        with RunLog(log_path) as rl:
            inprocess_train(algo, stream, progress=False, run_log=rl, pieces=args.pieces)
        ref_wall, ref_cpu = time.time() - t0, _cpu() - c0
        ref = algo
        timing = breakdown(log_path)
        timing["pieces"] = run_pieces(log_path)
        rows.append(_row("in-process", K, V, S, D, ref_wall, ref_cpu, ref_wall,
                         timing, algo, None, os.getloadavg()))
        _print_row(rows[-1])
        names = (args.runners.split(",") if args.runners else
                 ["beam-in-process"] + ([] if args.skip_workers else
                                        ["beam-workers-2", "beam-workers-2-two-stage"]))
        for name in names:
            wall, cpu, a, timing = run_beam(name, RUNNERS[name], files, K, V, D, S, vh, tmp,
                                            args.window, args.pieces, args.algorithm, C)
            rows.append(_row(name, K, V, S, D, wall, cpu, ref_wall, timing, a, ref,
                             os.getloadavg()))
            _print_row(rows[-1])
        if args.portable:
            bargv, procs = portable_pool()
            try:
                wall, cpu, a, timing = run_beam("portable-pool", bargv, files, K, V, D, S, vh,
                                                tmp, args.window, args.pieces, args.algorithm,
                                                C)
                rows.append(_row("portable-pool", K, V, S, D, wall, cpu, ref_wall, timing, a,
                                 ref, os.getloadavg(), cpu_note="driver only"))
                _print_row(rows[-1])
            except Exception as e:      # reported in the results, the other rows kept
                print("  portable-pool failed: %s" % e)
                rows.append(dict(runner="portable-pool", K=K, V=V, S=S, docs=D,
                                 error=str(e)))
            finally:
                for pr in procs:
                    pr.terminate()
                    pr.wait(10)
        if args.big:
            rows.append(big_run(args, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    common.print_json(rows)
    if args.json:
        common.save_results(rows, args.json, argv, os.path.basename(__file__))


def big_run(args, tmp):
    """K = 1,000, V = 100,000 on 2 worker processes: peak RSS per worker vs the state."""
    from pipelines.ingest import dataset
    K, V, S = 1000, 100000, args.big_minibatch
    ds = synth(os.path.join(args.data, "d%d-v%d-k%d" % (args.big_docs, V, K)), args.big_docs,
               V, K)
    files = dataset.resolve_shards(ds)
    vh = dataset.check_vocab_hash(files, None)
    D = dataset.count_documents(files)
    with ChildPeak() as peak:
        wall, cpu, a, timing = run_beam("big", RUNNERS["beam-workers-2"], files, K, V, D, S, vh,
                                        tmp)
    sb = state_bytes(a)
    peaks = sorted(peak.peaks.values(), reverse=True)
    row = _row("beam-workers-2", K, V, S, D, wall, cpu, None, timing, a, None, os.getloadavg(),
               worker_peak_rss_bytes=peaks, worker_peak_over_state=(peaks[0] / sb) if peaks
               else None)
    row["final_state"] = "not compared (no in-process run)"
    row["state_definition"] = (
        "state_bytes = the arrays of the saved state, which is what each worker holds "
        "between steps: lambda as ntilde (V x K float64) + its column sums, alpha (K float64 "
        "each) + 3 scalars; exp(E[log beta]) is not held, it is computed per piece for the "
        "piece's words only (U x K float32) during the E-step")
    _print_row(row)
    print("      state %.0f MB; peak RSS of the worker processes: %s (max %.2f x state)"
          % (sb / 1e6, ", ".join("%.0f MB" % (x / 1e6) for x in peaks),
             row["worker_peak_over_state"] or float("nan")))
    return row


def big_word_blocks_run(args, tmp):
    """K = 1,000, V = 100,000 on W = ``--big-workers`` worker processes with the word-sharded
    exchange (P = B = W, scratch on disk, statistics through the runner): peak RSS per worker
    process against the state -- no worker holds the whole state."""
    from lda_core.storage.run_log import RunLog
    from pipelines.ingest import dataset
    from pipelines.training import beam_train
    K, V, S, W = 1000, 100000, args.big_minibatch, args.big_workers
    P = args.big_pieces or W
    B = args.big_blocks or W
    ds = synth(os.path.join(args.data, "d%d-v%d-k%d" % (args.big_docs, V, K)), args.big_docs,
               V, K)
    files = dataset.resolve_shards(ds)
    vh = dataset.check_vocab_hash(files, None)
    D = dataset.count_documents(files)
    a = _algo(K, V, D, S, vh)
    a.set_word_blocks(B)
    md = os.path.join(tmp, "big-word-blocks")
    os.makedirs(md, exist_ok=True)
    log_path = os.path.join(md, "run_log.jsonl")
    c0, t0 = _cpu(), time.time()
    with ChildPeak() as peak, RunLog(log_path) as rl:
        r = beam_train.train(a, files, md, passes=1, seed=0, minibatch=S, progress=False,
                             run_log=rl, pieces_per_minibatch=P, exchange="word-blocks",
                             max_steps=args.big_steps,
                             scratch_dir=os.path.join(tmp, "scratch"),
                             beam_argv=["--runner=DirectRunner",
                                        "--direct_running_mode=multi_processing",
                                        "--direct_num_workers=%d" % W])
    wall, cpu = time.time() - t0, _cpu() - c0
    sb = state_bytes(r.algorithm)
    timing = breakdown(log_path)
    peaks = sorted(peak.peaks.values(), reverse=True)
    worker_peaks = peaks[:W]
    row = dict(runner="beam-workers-%d-word-blocks" % W, exchange="word-blocks", K=K, V=V,
               S=S, docs=D, workers=W, pieces=P, word_blocks=B, steps=timing["steps"],
               wall_s=wall, cpu_s=cpu, state_bytes=sb, worker_peak_rss_bytes=worker_peaks,
               all_descendant_peaks=peaks,
               worker_peak_over_state=(worker_peaks[0] / sb) if worker_peaks else None,
               bytes_per_step=timing["bytes_per_step"], load_average=os.getloadavg())
    print("  %s: %d steps, state %.0f MB; peak RSS of the %d busiest worker processes: %s "
          "(max %.2f x state); per step: in/worker %.1f MB, owner in %.1f MB"
          % (row["runner"], row["steps"], sb / 1e6, W,
             ", ".join("%.0f MB" % (x / 1e6) for x in worker_peaks),
             row["worker_peak_over_state"] or float("nan"),
             (timing["bytes_per_step"].get("in_per_worker_step") or 0) / 1e6,
             (timing["bytes_per_step"].get("owner_in_step") or 0) / 1e6))
    return row


if __name__ == "__main__":
    main()
