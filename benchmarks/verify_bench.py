"""What verifying a dataset costs: sha256 of its shards against reading them.

Every command that reads shards verifies them once per run against the dataset's manifest
(``pipelines.ingest.manifest.open_shards``: Parquet footers, row counts, sha256). This script
measures, in one process, on real corpora vectorized with ``ldabeam vectorize``:

* ``hash_mb_s``: MB/s of the sha256 of every train shard (what verification adds per run);
* ``read_mb_s``: MB/s of reading the same shards into DocBatch (what one training pass, one
  evaluation or one infer reads, at least);
* ``verify_mb_s``: MB/s of the whole ``open_shards`` (footers + hashes, fresh hash cache);
* ``verify_over_read``: the time of ``open_shards`` over the time of one read of the shards.

Files are hot in the page cache for every measurement (the best of ``--repeat`` runs), so the
ratio compares CPU costs; on a cold disk both are bound by the same I/O.

    python benchmarks/verify_bench.py [--corpora kos,nips,synth] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "verify_bench.json")


def build(name: str, work: str) -> str:
    """The dataset of corpus ``name`` under ``work`` (vectorized once)."""
    out = os.path.join(work, name)
    if os.path.exists(os.path.join(out, "manifest.json")):
        return out
    data = os.path.join(common.SHARED, "data")
    if name in ("kos", "nips"):
        common.run(common.LDABEAM + ["--log-level", "WARNING", "vectorize", "--input",
                                     os.path.join(data, "uci-bow-" + name,
                                                  "docword.%s.txt.gz" % name),
                                     "--format", "uci", "--output", out,
                                     "--holdout-fraction", "0.1"], quiet=True)
    elif name == "synth":           # a larger corpus drawn from the LDA generative model
        common.run(common.LDABEAM + ["--log-level", "WARNING", "synth", "--output", out,
                                     "--docs", "200000", "--heldout-docs", "1000"], quiet=True)
    else:
        raise SystemExit("unknown corpus %r" % name)
    return out


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(ds: str, repeat: int) -> dict:
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    files = dataset.resolve_shards(ds)
    nbytes = sum(os.path.getsize(f) for f in files)
    mb = nbytes / 1e6

    def hash_all():
        manifest._HASHED.clear()
        for f in files:
            manifest._file_sha256(f)

    def read_all():
        for _ in dataset.iter_shard_batches(files):
            pass

    def verify_all():
        manifest._HASHED.clear()
        manifest.open_shards(ds)

    read_all()                                   # warm the page cache
    t_hash, t_read, t_verify = (best(hash_all, repeat), best(read_all, repeat),
                                best(verify_all, repeat))
    return {"dataset": ds, "shards": len(files), "mb": mb,
            "documents": dataset.count_documents(files),
            "hash_mb_s": mb / t_hash, "read_mb_s": mb / t_read, "verify_mb_s": mb / t_verify,
            "verify_over_read": t_verify / t_read, "hash_s": t_hash, "read_s": t_read,
            "verify_s": t_verify}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", default="kos,nips,synth")
    p.add_argument("--work", default=os.path.join(common.CACHE, "verify_bench"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args(argv)
    res = {}
    for name in args.corpora.split(","):
        ds = build(name, args.work)
        r = measure(ds, args.repeat)
        res[name] = r
        print("%-7s %7.1f MB in %3d shards: sha256 %7.1f MB/s, read %7.1f MB/s, verify "
              "%7.1f MB/s; verify / one read = %.2f" % (name, r["mb"], r["shards"],
                                                         r["hash_mb_s"], r["read_mb_s"],
                                                         r["verify_mb_s"],
                                                         r["verify_over_read"]))
    common.save_results({"corpora": res}, args.out, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
