"""The input layer of ``ldabeam vectorize``, against references in the same process.

1. **A folder of many small files against the same posts as one tarball.** The 20 Newsgroups
   training posts (11,314 files under ``<group>/<id>``, from ``../shared/data``) are written
   as a folder and as a ``.tar.gz``; ``vectorize`` runs on each in-process, and on the folder
   once more with ``FILES_PER_GROUP = 1`` (every file its own Beam element, as before the
   files were grouped: the reference). Reported: CPU seconds of each run, the ratios
   folder / tarball (grouped and per-file) and grouped / per-file, and the output digests
   (vocabulary, shard sha256s, counts) of the grouped and per-file folder runs, which must
   be equal.

2. **smart-open against the standard-library file layer it replaced.** ``vectorize``
   in-process on JSON lines (the posts, ``--copies`` copies, gzip-compressed: the
   decompressor is on the path) and on the ``.xml.bz2`` dump of ``vectorize_bench.py`` (the
   posts as dump pages plus the bundled sample), each run with the current
   :func:`pipelines.ingest.input_files.open_decompressed` (smart-open's decompressors) and
   with the reference below (``gzip.GzipFile`` / ``bz2.BZ2File`` on the raw file, as the
   layer was written before), alternating ``--repeats`` times. Reported: the lowest CPU
   seconds of each, the ratio new / old, and whether the digests are equal.

CPU seconds: this process plus its finished children (the in-process DirectRunner runs in
this process); wall time is also recorded. The machine is shared: compare the ratios.

3. **The decompressing layer alone** (``decompress``): the same two layers reading whole
   files as the readers do (1 MiB chunks, or lines): the dump, the JSON lines, the 20
   Newsgroups ``.tar.gz`` and NIPS's ``docword.nips.txt.gz``; lowest CPU seconds of
   ``max(--repeats, 3)`` alternating reads, ratio new / old.

    python benchmarks/ingest_bench.py [--limit N] [--copies 1] [--repeats 2]
        [--parts folder,smart_open,decompress] [--json benchmarks/results/ingest_bench.json]
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import io
import json
import lzma
import os
import shutil
import sys
import tarfile
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks import common  # noqa: E402
from benchmarks.vectorize_bench import (NEWS20, build_dump, cpu_seconds, digest,  # noqa: E402
                                        news20_records, replicated)

RESULTS_JSON = os.path.join(REPO, "benchmarks", "results", "ingest_bench.json")
IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def run_vectorize(inputs, out: str, **kw) -> dict:
    from pipelines.ingest.vectorize import VectorizeOptions, vectorize
    opts = VectorizeOptions(inputs=list(inputs), output=out, overwrite=True, **kw)
    c0, t0 = cpu_seconds(), time.perf_counter()
    m = vectorize(opts, IN_PROCESS)
    return {"cpu_s": cpu_seconds() - c0, "wall_s": time.perf_counter() - t0,
            "docs": m["counts"]["documents_read"], "digest": digest(out)}


# ----------------------------------------------------------------------------- 1. folder

def write_folder_and_tar(tmp: str, limit: int):
    """The training posts as ``tmp/folder/<group>/<id>`` and ``tmp/posts.tar.gz``."""
    os.makedirs(tmp, exist_ok=True)
    folder = os.path.join(tmp, "folder")
    tar_path = os.path.join(tmp, "posts.tar.gz")
    n = 0
    with tarfile.open(NEWS20, "r:gz") as src, tarfile.open(tar_path, "w:gz") as dst:
        for m in src:
            if not m.isfile() or not m.name.startswith("20news-bydate-train/"):
                continue
            if limit and n >= limit:
                break
            data = src.extractfile(m).read()
            p = os.path.join(folder, m.name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
            dst.addfile(m, io.BytesIO(data))      # (a second extractfile would seek back)
            n += 1
    return folder, tar_path, n


def folder_part(tmp: str, limit: int) -> dict:
    from pipelines.ingest import vectorize_steps
    folder, tar_path, n = write_folder_and_tar(tmp, limit)
    kw = dict(encoding="latin-1", strip_headers=True)
    tar = run_vectorize([tar_path], os.path.join(tmp, "o_tar"), **kw)
    grouped = run_vectorize([folder], os.path.join(tmp, "o_grouped"), **kw)
    saved = vectorize_steps.FILES_PER_GROUP
    vectorize_steps.FILES_PER_GROUP = 1          # the reference: one element per file
    try:
        per_file = run_vectorize([folder], os.path.join(tmp, "o_per_file"), **kw)
    finally:
        vectorize_steps.FILES_PER_GROUP = saved
    res = {"files": n, "tarball": tar, "folder_grouped": grouped, "folder_per_file": per_file,
           "ratio_folder_grouped_to_tarball": grouped["cpu_s"] / tar["cpu_s"],
           "ratio_folder_per_file_to_tarball": per_file["cpu_s"] / tar["cpu_s"],
           "ratio_grouped_to_per_file": grouped["cpu_s"] / per_file["cpu_s"],
           "same_digest_grouped_and_per_file":
               grouped["digest"]["sha256"] == per_file["digest"]["sha256"]}
    print("folder of %d posts: %.1f CPU s grouped, %.1f CPU s one element per file; the "
          "tarball %.1f CPU s; folder / tarball %.2f (per file: %.2f); grouped / per file "
          "%.2f; same output: %s" % (n, grouped["cpu_s"], per_file["cpu_s"], tar["cpu_s"],
                                     res["ratio_folder_grouped_to_tarball"],
                                     res["ratio_folder_per_file_to_tarball"],
                                     res["ratio_grouped_to_per_file"],
                                     res["same_digest_grouped_and_per_file"]))
    return res


# ----------------------------------------------------------------------------- 2. smart-open

def stdlib_open_decompressed(path: str):
    """The reference: the file layer before smart-open -- the raw file decompressed by the
    standard library's GzipFile / BZ2File / LZMAFile, chosen by the file name."""
    from pipelines.ingest import input_files as inf
    raw = inf.open_binary(path)
    comp = inf.compression_of(path)
    if comp == "gzip":
        return inf._Decompressed(gzip.GzipFile(fileobj=raw, mode="rb"), raw)
    if comp == "bz2":
        return inf._Decompressed(bz2.BZ2File(raw, mode="rb"), raw)
    if comp == "xz":
        return inf._Decompressed(lzma.LZMAFile(raw, mode="rb"), raw)
    return raw


_LAYER_USERS = ("pipelines.ingest.input_files", "pipelines.ingest.text_sources",
                "pipelines.ingest.wiki_source", "pipelines.ingest.bow_sources",
                "pipelines.ingest.bow_triples")


def with_layer(fn):
    """Make ``fn`` the ``open_decompressed`` of every module that imported it; returns the
    functions it replaced (to put back)."""
    import importlib
    old = {}
    for name in _LAYER_USERS:
        mod = importlib.import_module(name)
        if hasattr(mod, "open_decompressed"):
            old[name] = mod.open_decompressed
            mod.open_decompressed = fn
    return old


def restore_layer(old) -> None:
    import importlib
    for name, fn in old.items():
        importlib.import_module(name).open_decompressed = fn


def smart_open_part(tmp: str, limit: int, copies: int, repeats: int) -> dict:
    from pipelines.ingest import input_files
    os.makedirs(tmp, exist_ok=True)
    records = list(news20_records(limit))
    jsonl = os.path.join(tmp, "posts.jsonl.gz")
    with gzip.open(jsonl, "wt", encoding="utf-8") as f:
        for r in replicated(records, copies):
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    dump = os.path.join(tmp, "dump.xml.bz2")
    pages = build_dump(dump, limit)
    current = input_files.open_decompressed
    out = {"jsonl_gz_mb": os.path.getsize(jsonl) / 1e6, "dump_bz2_mb": os.path.getsize(dump) / 1e6,
           "pages": pages, "records": len(records) * copies}
    for name, path, kw in (("jsonl.gz", jsonl, dict(format="jsonl")),
                           ("xml.bz2", dump, dict(deaccent=False))):
        runs = {"smart_open": [], "stdlib": []}
        for _ in range(repeats):
            for variant, fn in (("stdlib", stdlib_open_decompressed), ("smart_open", current)):
                old = with_layer(fn)
                try:
                    runs[variant].append(run_vectorize(
                        [path], os.path.join(tmp, "o_%s_%s" % (name, variant)), **kw))
                finally:
                    restore_layer(old)
        new_cpu = min(r["cpu_s"] for r in runs["smart_open"])
        old_cpu = min(r["cpu_s"] for r in runs["stdlib"])
        same = {r["digest"]["sha256"] for r in runs["smart_open"] + runs["stdlib"]}
        out[name] = {"cpu_s_smart_open": [r["cpu_s"] for r in runs["smart_open"]],
                     "cpu_s_stdlib": [r["cpu_s"] for r in runs["stdlib"]],
                     "wall_s_smart_open": [r["wall_s"] for r in runs["smart_open"]],
                     "wall_s_stdlib": [r["wall_s"] for r in runs["stdlib"]],
                     "ratio_new_to_old_cpu": new_cpu / old_cpu, "same_digest": len(same) == 1,
                     "docs": runs["smart_open"][0]["docs"]}
        print("%s: smart-open layer %.2f CPU s, standard-library layer %.2f CPU s (lowest of "
              "%d); new / old %.3f; same output: %s"
              % (name, new_cpu, old_cpu, repeats, new_cpu / old_cpu, len(same) == 1))
    return out


def read_all(f, lines: bool) -> int:
    """Bytes of a decompressed stream, read as the readers do: 1 MiB chunks through
    :class:`~pipelines.ingest.input_files.ChunkReader` (dumps, text), or lines (JSON lines,
    CSV, bag-of-words)."""
    from pipelines.ingest.input_files import ChunkReader
    n = 0
    if lines:
        for line in iter(lambda: f.readline(1 << 16), b""):
            n += len(line)
        return n
    r = ChunkReader(f)
    for _ in range(1 << 40):
        b = r.read(1 << 20)
        if not b:
            return n
        n += len(b)
    return n


def open_part(folder: str, limit: int, repeats: int) -> dict:
    """Opening and reading every post as a file: Python's ``open`` (what the layer uses for
    local files) against ``smart_open.open`` (whose local transport is that ``open`` behind
    a URL parse)."""
    import smart_open
    paths = []
    for i, r in enumerate(news20_records(limit)):
        p = os.path.join(folder, r["label"], "%05d" % i)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="latin-1", errors="replace") as f:
            f.write(r["text"])
        paths.append(p)
    cpu = {"open": [], "smart_open.open": []}
    for _ in range(repeats):
        for variant, fn in (("open", lambda p: open(p, "rb")),
                            ("smart_open.open", lambda p: smart_open.open(
                                p, "rb", compression="disable"))):
            c0 = time.process_time()
            for p in paths:
                with fn(p) as f:
                    f.read()
            cpu[variant].append(time.process_time() - c0)
    ratio = min(cpu["smart_open.open"]) / min(cpu["open"])
    print("open and read %d small files: open %.3f CPU s, smart_open.open %.3f CPU s (lowest "
          "of %d); smart_open / open %.2f" % (len(paths), min(cpu["open"]),
                                               min(cpu["smart_open.open"]), repeats, ratio))
    return {"files": len(paths), "cpu_s_open": cpu["open"],
            "cpu_s_smart_open": cpu["smart_open.open"], "ratio_smart_open_to_open": ratio}


def decompress_part(tmp: str, limit: int, repeats: int) -> dict:
    """The decompressing layer alone (no pipeline), new against old, alternating: the
    bench's ``.xml.bz2`` dump and gzip JSON lines, the 20 Newsgroups ``.tar.gz`` and the
    NIPS ``docword.nips.txt.gz``."""
    from pipelines.ingest import input_files
    os.makedirs(tmp, exist_ok=True)
    dump = os.path.join(tmp, "dump.xml.bz2")
    build_dump(dump, limit)
    jsonl = os.path.join(tmp, "posts.jsonl.gz")
    with gzip.open(jsonl, "wt", encoding="utf-8") as f:
        for r in news20_records(limit):
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    nips = os.path.join(os.path.dirname(os.path.dirname(NEWS20)), "uci-bow-nips",
                        "docword.nips.txt.gz")
    out = {"open_small_files": open_part(os.path.join(tmp, "posts"), limit, repeats)}
    for name, path, lines in (("xml.bz2 chunks", dump, False), ("xml.bz2 lines", dump, True),
                              ("jsonl.gz lines", jsonl, True), ("tar.gz chunks", NEWS20, False),
                              ("docword.gz lines", nips, True)):
        if not os.path.exists(path):
            continue
        cpu = {"smart_open": [], "stdlib": []}
        for _ in range(repeats):
            for variant, fn in (("stdlib", stdlib_open_decompressed),
                                ("smart_open", input_files.open_decompressed)):
                c0 = time.process_time()
                f = fn(path)
                try:
                    n = read_all(f, lines)
                finally:
                    f.close()
                cpu[variant].append(time.process_time() - c0)
        ratio = min(cpu["smart_open"]) / min(cpu["stdlib"])
        out[name] = {"bytes": n, "cpu_s_smart_open": cpu["smart_open"],
                     "cpu_s_stdlib": cpu["stdlib"], "ratio_new_to_old_cpu": ratio}
        print("decompress %s (%.1f MB): smart-open %.3f CPU s, standard library %.3f CPU s "
              "(lowest of %d); new / old %.3f" % (name, n / 1e6, min(cpu["smart_open"]),
                                                   min(cpu["stdlib"]), repeats, ratio))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=0, help="posts (0: all)")
    ap.add_argument("--copies", type=int, default=1, help="copies of the posts in the JSON lines")
    ap.add_argument("--repeats", type=int, default=2, help="alternating runs per layer")
    ap.add_argument("--parts", default="folder,smart_open,decompress")
    ap.add_argument("--json", default=RESULTS_JSON)
    args = ap.parse_args(argv)
    if not os.path.exists(NEWS20):
        sys.exit("20 Newsgroups is absent: %s" % NEWS20)
    import logging
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    parts = set(args.parts.split(","))
    res = {"limit": args.limit, "copies": args.copies, "repeats": args.repeats,
           "load_average_at_start": list(os.getloadavg())}
    tmp = tempfile.mkdtemp(prefix="ingest_bench_")
    try:
        if "folder" in parts:
            res["folder"] = folder_part(os.path.join(tmp, "f"), args.limit)
        if "decompress" in parts:
            res["decompress"] = decompress_part(os.path.join(tmp, "d"), args.limit,
                                                max(args.repeats, 3))
        if "smart_open" in parts:
            res["smart_open"] = smart_open_part(os.path.join(tmp, "s"), args.limit,
                                                args.copies, args.repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        common.save_results(res, args.json)
    return res


if __name__ == "__main__":
    main()
