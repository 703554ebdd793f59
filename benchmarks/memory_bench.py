#!/usr/bin/env python3
"""Peak memory of training stays flat as the corpus grows (issue 3: within +20% at 4×).

Trains one pass of online VB (K=100, S=256, the 20 Newsgroups settings) with ``ldabeam train``
in a child process on the prepared 20 Newsgroups shards, then on the same corpus written 4
times (4× the shards, doc ids made distinct), and prints the peak RSS of each child
(``os.wait4`` rusage of exactly that child) and their ratio. The trainer holds one shard and
one minibatch at a time, so the peak is set by λ (V×K), the shard size and the interpreter,
not by the number of documents. Held-out evaluation is off so that only training is measured.
"""
from __future__ import annotations

import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402


def write_repeated(src: str, dst: str, times: int) -> None:
    """Dataset ``dst`` = the train shards of ``src`` written ``times`` times (ids suffixed)."""
    from lda_core.docbatch import DocBatch
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    from pipelines.ingest.shards import read_shard
    if os.path.exists(os.path.join(dst, "manifest.json")):
        return
    shutil.rmtree(dst, ignore_errors=True)
    files = dataset.resolve_shards(src)
    vh = dataset.check_vocab_hash(files, None)
    os.makedirs(os.path.join(dst, "train"))
    n = times * len(files)
    i = 0
    for r in range(times):
        for f in files:
            b = read_shard(f, ("doc_id", "word_ids", "counts"))
            b = DocBatch(tuple("%s#%d" % (d, r) for d in b.doc_ids), b.indptr, b.word_ids,
                         b.counts)
            dataset.write_shard(os.path.join(dst, "train", dataset.shard_name(i, n)),
                                dataset.docbatch_to_table(b), vh)
            i += 1
    shutil.copyfile(os.path.join(src, "vocab.tsv"), os.path.join(dst, "vocab.tsv"))
    man = manifest.read_manifest(src)
    man["repeated"] = times
    man["splits"] = manifest.shard_listing(dst)   # dst's shards, verified like src's
    manifest.write_manifest(dst, man)


def train_peak(shards: str, model: str, threads=None):
    shutil.rmtree(model, ignore_errors=True)
    cmd = (common.LDABEAM + ["--log-level", "WARNING", "train"]
           + common.protocol_train_args(shards, model, threads))
    wall, rss, _ = common.run_child_peak_rss(cmd)
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    n = dataset.count_documents(dataset.resolve_shards(shards))
    return dict(docs=n, wall_s=wall, peak_rss_mb=rss)


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--times", type=int, default=4)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=os.path.join(common.REPO, "benchmarks", "results",
                                                  "memory_bench.json"),
                   help="write the results here ('': do not write)")
    a = p.parse_args(argv)
    from benchmarks.prepare_20news import prepare
    prepare(a.cache)
    src = os.path.join(a.cache, "ds_train")
    big = os.path.join(a.cache, "ds_train_x%d" % a.times)
    write_repeated(src, big, a.times)
    one = train_peak(src, os.path.join(a.cache, "model_mem_1"), a.threads)
    many = train_peak(big, os.path.join(a.cache, "model_mem_%d" % a.times), a.threads)
    for d in ("model_mem_1", "model_mem_%d" % a.times):
        shutil.rmtree(os.path.join(a.cache, d), ignore_errors=True)
    ratio = many["peak_rss_mb"] / one["peak_rss_mb"]
    print("| corpus | documents | wall s | peak RSS MB |")
    print("|---|---|---|---|")
    print("| 20 Newsgroups train | %d | %.1f | %.0f |" % (one["docs"], one["wall_s"],
                                                        one["peak_rss_mb"]))
    print("| the same x%d | %d | %.1f | %.0f |" % (a.times, many["docs"], many["wall_s"],
                                                  many["peak_rss_mb"]))
    print("peak RSS ratio x%d / x1 = %.3f (target <= 1.20: %s)"
          % (a.times, ratio, "met" if ratio <= 1.2 else "NOT met"))
    if a.json:
        common.save_results({"x1": one, "x%d" % a.times: many, "times": a.times,
                             "peak_rss_ratio": ratio, "target": "<= 1.20",
                             "met": bool(ratio <= 1.2)}, a.json, argv)


if __name__ == "__main__":
    main()
