#!/usr/bin/env python3
"""CPU cost of the in-process trainer per document and per global step, one thread: the
one-machine baseline of ``benchmarks/cluster_model.py``.

Process CPU seconds (not wall: the machine is shared), numba on one thread, for each
algorithm (online VB, SCVB0; every setting at ``ldabeam train``'s default) and each shape:

* ``wiki`` (K = 100): the bundled Wikipedia sample's articles under the 7,995 most frequent
  words (``ldabeam vectorize --keep-n 7995 --no-below 2 --stopwords gensim``, as the cluster
  model shapes run (a)), several passes;
* ``20news`` (K = 100 and K = 1,000): the 20 Newsgroups training split as
  ``benchmarks/prepare_20news.py`` prepares it (the E-step benchmark's documents, the shape
  of run (b)), one pass (a part of it at K = 1,000).

Each is :func:`lda_core.training.trainer.train` at the algorithm's default minibatch (a fresh
algorithm, timed from its first step, after another compiled the kernels) with its
``global_step`` wrapped to count its CPU seconds and the rows its statistics touch: the rest
is the per-document cost (E-step, reading the minibatch from the shard, merging).

Also measured: the global step alone at the projected runs' shapes (K = 100, V = 7,995 and
K = 1,000, V = 100,000) with statistics touching few rows and every row (their
``local_step`` on synthetic documents; re-seeding off), which shows whether its cost follows
V or the rows touched, and the shards' bytes and read-and-decode CPU per
document (``read_shard_counted``: what a reader task of the remote exchange does with a
whole shard). Results: ``benchmarks/results/inprocess_speed.json``.

    python benchmarks/inprocess_speed_bench.py [--algorithms online-vb,scvb0] [--quick]
        [--parts read,trainer,global] [--json OUT]
"""
from __future__ import annotations

import glob
import json
import os
import sys
import time

import numba
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402
from benchmarks.passes_to_score_bench import training_shards  # noqa: E402
from benchmarks.prepare_20news import prepare as prepare_20news  # noqa: E402
from benchmarks.quality_bench import load_corpus  # noqa: E402
from lda_core.docbatch import DocBatch  # noqa: E402
from lda_core.storage.vocab_file import Vocabulary  # noqa: E402
from lda_core.training.trainer import train  # noqa: E402
from pipelines.ingest.shards import read_shard_counted  # noqa: E402
from pipelines.training.algorithm_options import build_algorithm, default_minibatch  # noqa: E402
from pipelines.training.shard_stream import ShardStream  # noqa: E402

SAMPLE = os.path.join(common.REPO, "data", "enwiki-sample-206pages.xml.bz2")
ALGORITHMS = ("online-vb", "scvb0")
# (shape, K, documents timed at most, passes over them)
SHAPES = (("wiki", 100, None, 4), ("20news", 100, None, 1), ("20news", 1000, 3000, 1))
GLOBAL_SHAPES = ((100, 7995), (1000, 100_000))
# --quick (a smoke run): K = 100 only, a part of 20 Newsgroups
QUICK_SHAPES = (("wiki", 100, None, 1), ("20news", 100, 1000, 1))
QUICK_GLOBAL_SHAPES = ((100, 7995),)


def wiki_shards(cache: str) -> list:
    out = os.path.join(cache, "wiki-7995")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        common.run(common.LDABEAM + ["--log-level", "WARNING", "vectorize", "--input", SAMPLE,
                                     "--output", out, "--overwrite", "--keep-n", 7995,
                                     "--no-below", 2, "--stopwords", "gensim",
                                     "--holdout-fraction", 0], quiet=True)
    return sorted(glob.glob(os.path.join(out, "**", "*.parquet"), recursive=True))


def timed_trainer(files, n_words: int, algorithm: str, K: int, max_docs, passes: int) -> dict:
    """One thread: CPU seconds per document (all but the global step) and per global step."""
    S = default_minibatch(algorithm)
    stream = ShardStream(files, minibatch=S, seed=0, passes=passes)

    def fresh():
        return build_algorithm(algorithm, K, n_words, settings={"threads": 1}, corpus_size=stream.n_docs, seed=0,
                               vocab_hash=stream.vocab_hash, corpus_tokens=stream.count_tokens)
    train(fresh(), stream, progress=False, max_steps=2)         # compiles the kernels
    alg = fresh()                                               # timed from its first step
    acc = {"cpu": 0.0, "rows": 0, "steps": 0}
    inner = alg.global_step

    def global_step(stats):                 # the trainer's M-step, its CPU counted apart
        c0 = time.process_time()
        info = inner(stats)
        acc["cpu"] += time.process_time() - c0
        acc["steps"] += 1
        acc["rows"] += len(getattr(getattr(stats, "block", None), "rows", ())) or \
            len(getattr(stats, "word_ids", ()))
        return info
    alg.global_step = global_step
    steps = stream.batches_per_pass * passes
    if max_docs:
        steps = min(steps, -(-int(max_docs) // S))
    docs0 = alg.docs_seen
    c0, t0 = time.process_time(), time.perf_counter()
    train(alg, stream, progress=False, max_steps=steps)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    docs = alg.docs_seen - docs0
    nnz = sum(len(mb.batch.word_ids) for mb in _minibatches(stream, 0, steps))
    return {"algorithm": algorithm, "K": K, "V": n_words, "S": S, "docs": docs, "nnz": nnz,
            "steps": acc["steps"], "cpu_s": cpu, "wall_s": wall,
            "global_step_cpu_s": acc["cpu"], "rows_per_step": acc["rows"] / max(1, acc["steps"]),
            "cpu_s_per_doc": (cpu - acc["cpu"]) / docs, "cpu_s_per_nnz": (cpu - acc["cpu"]) / nnz,
            "global_step_cpu_s_per_step": acc["cpu"] / max(1, acc["steps"])}


def _minibatches(stream, start: int, stop: int):
    for i, mb in enumerate(stream.iter_from(start)):
        if start + i >= stop:
            break
        yield mb


def synthetic_batch(n_docs: int, words_per_doc: int, V: int, seed: int = 0) -> DocBatch:
    """``n_docs`` documents of ``words_per_doc`` distinct words each, consecutive ids, so they
    touch min(V, n_docs x words_per_doc) rows."""
    rng = np.random.default_rng(seed)
    ids = (np.arange(n_docs * words_per_doc) % V).astype(np.int32).reshape(n_docs, -1)
    ids.sort(axis=1)
    counts = rng.integers(1, 4, size=ids.shape).astype(np.int32)
    indptr = np.arange(0, n_docs * words_per_doc + 1, words_per_doc, dtype=np.int64)
    return DocBatch([str(i) for i in range(n_docs)], indptr, ids.ravel(), counts.ravel())


def global_step_at(algorithm: str, K: int, V: int, touched: int, repeats: int = 4) -> dict:
    """CPU seconds of one global step at (K, V) whose statistics touch ``touched`` rows (the
    fastest of ``repeats``), one thread, re-seeding off: whether its cost follows V or the
    rows touched."""
    alg = build_algorithm(algorithm, K, V, settings={"threads": 1}, corpus_size=10_000_000, seed=0, vocab_hash="synthetic")
    # a steady-state step: the synthetic documents leave most topics dead, whose re-seeding
    # (splits of whole rows, a real run's first steps) would be timed instead
    alg.reseed = 0.0
    per_doc = 100
    batch = synthetic_batch(-(-touched // per_doc), per_doc, V)
    best = float("inf")
    for _ in range(repeats):
        stats = alg.local_step(batch)
        c0 = time.process_time()
        alg.global_step(stats)
        best = min(best, time.process_time() - c0)
    return {"algorithm": algorithm, "K": K, "V": V, "rows": touched, "cpu_s": best}


def read_cost(files, repeats: int = 2) -> dict:
    """Bytes and read-and-decode CPU per document of whole shards (fastest of ``repeats``)."""
    best, docs, nbytes = float("inf"), 0, 0
    for _ in range(repeats):
        c0, docs, nbytes = time.process_time(), 0, 0
        for f in files:
            batch, n = read_shard_counted(f)
            docs += batch.n_docs
            nbytes += os.path.getsize(f)
        best = min(best, time.process_time() - c0)
    return {"docs": docs, "file_bytes_per_doc": nbytes / docs, "read_cpu_s_per_doc": best / docs}


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--algorithms", default=",".join(ALGORITHMS))
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: K = 100 only, 1,000 documents of 20 Newsgroups")
    p.add_argument("--parts", default="read,trainer,global",
                   help="what to measure (the others are kept from an existing --json)")
    p.add_argument("--json", default=os.path.join(common.REPO, "benchmarks", "results",
                                                  "inprocess_speed.json"))
    a = p.parse_args(argv)
    parts = set(a.parts.split(","))
    shapes_timed = QUICK_SHAPES if a.quick else SHAPES
    global_shapes = QUICK_GLOBAL_SHAPES if a.quick else GLOBAL_SHAPES
    numba.set_num_threads(1)
    prepare_20news(a.cache)
    bench = common.bench_module()
    data = load_corpus(bench, os.path.join(a.cache, "bench"))
    shapes = {"wiki": (wiki_shards(os.path.join(common.CACHE, "inprocess_speed")), None),
              "20news": (training_shards(data, os.path.join(common.CACHE, "passes_to_score")),
                         len(data["vocab"]))}
    wiki_root = os.path.join(common.CACHE, "inprocess_speed", "wiki-7995")
    shapes["wiki"] = (shapes["wiki"][0], len(Vocabulary.read(wiki_root)))
    out = {"trainer": [], "global_step": [], "read": {}}
    if parts != {"read", "trainer", "global"} and a.json and os.path.exists(a.json):
        with open(a.json) as f:
            kept = json.load(f)
        out.update((k, kept[k]) for k in out if k in kept)
        out["kept_from"] = kept.get("run", {})
    if "read" in parts:
        for name, (files, V) in shapes.items():
            out["read"][name] = dict(read_cost(files), V=V)
            print("%s: %s" % (name, json.dumps(out["read"][name])), flush=True)
    algorithms = [x for x in a.algorithms.split(",") if x]
    for key, part in (("trainer", "trainer"), ("global_step", "global")):
        if part in parts:
            out[key] = [r for r in out[key] if r["algorithm"] not in algorithms]
    for algorithm in algorithms:
        for shape, K, max_docs, passes in (shapes_timed if "trainer" in parts else ()):
            files, V = shapes[shape]
            rec = dict(timed_trainer(files, V, algorithm, K, max_docs, passes), shape=shape)
            out["trainer"].append(rec)
            print(json.dumps(rec), flush=True)
        for K, V in (global_shapes if "global" in parts else ()):
            for touched in (max(1000, V // 32), V):
                rec = global_step_at(algorithm, K, V, touched)
                out["global_step"].append(rec)
                print(json.dumps(rec), flush=True)
    print("load average at the end: %.1f (2 cores, shared; CPU seconds reported)"
          % os.getloadavg()[0])
    if a.json:
        common.save_results(out, a.json, argv)


if __name__ == "__main__":
    main()
