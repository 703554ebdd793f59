"""Throughput of ``ldabeam vectorize``: MB of input per CPU second on every input format,
against the cost of its two unavoidable stages measured in the same process, and documents /
second against gensim ``WikiCorpus(processes=2)`` on a dump.

Inputs, all made of the same real text: the 20 Newsgroups posts of ``../shared/data``,
replicated (``--copies``, each copy's ids suffixed ``#k``) so that the start-up is small
against the work:

* ``jsonl``   -- one JSON object per post (``id``, ``text``, ``label``), ``--copies`` copies
  (default 3: ~116 MB);
* ``csv`` / ``parquet`` -- the same records as a table, ``--table-copies`` copies (default 2:
  ~74 MB of CSV);
* ``wiki``    -- a MediaWiki dump (``.xml.bz2``): the posts wrapped as dump pages (title =
  group/id, text = the post, XML-escaped) followed by the real pages of the bundled sample.
  No larger real dump exists offline.

MB of input: the file size (JSON lines, CSV), the uncompressed size of the column data
(Parquet: the Parquet metadata's ``total_uncompressed_size``), the decompressed XML (dump).
CPU seconds: this process plus its finished children (Beam's worker processes), of one
``vectorize`` run, start-up included; in-process (DirectRunner ``in_memory``) and with
``--direct_running_mode=multi_processing --direct_num_workers=2``. Each row of the results
has ``format``, ``runner``, ``mb``, ``cpu_s``, ``mb_per_cpu_s``, ``target`` (15 MB/CPU-s for
text / tables, 10 for dumps), ``met``; plus ``startup_cpu_s`` (the same run on the first 200
records) and ``steady_mb_per_cpu_s`` (MB / (CPU s - start-up)), the ratios to the ceilings,
and a digest of the output (vocabulary hash, shard sha256s, manifest counts).

Ceilings, measured in the same process: ``bz2`` decompression of the dump alone, and the
batch tokenizer (:func:`pipelines.ingest.tokenize.count_batch`) alone on the posts.

Same output: the digests of the JSON-lines, CSV and Parquet runs (same records) must be equal,
and equal across runners; ``--baseline RESULTS.json`` (a results file of this script from an
earlier checkout, e.g. run with ``--digest-only``) compares each format's digest with it.

gensim comparison (``wiki``, unless ``--skip-gensim``): both sides produce a vocabulary
pruned with ``filter_extremes`` defaults (5, 0.5, 100000) and the bag-of-words of every
article with at least 50 tokens: gensim as its ``make_wiki`` script does
(``WikiCorpus(dump, processes=2)``, ``filter_extremes``, one more pass for the bags of
words), ldabeam ``vectorize``.

Timings on this shared 2-core machine are noisy; compare the ratios.

    python benchmarks/vectorize_bench.py [--limit N] [--copies 3] [--table-copies 2]
        [--formats jsonl,csv,parquet,wiki] [--skip-gensim] [--skip-multi] [--digest-only]
        [--baseline OLD.json] [--json results.json]

The numbers (and the run's circumstances) are written to
``benchmarks/results/vectorize_bench.json`` (``--json PATH`` elsewhere, ``--json ''`` not at
all).
"""
from __future__ import annotations

import argparse
import bz2
import json
import logging
import os
import re
import resource
import shutil
import sys
import tarfile
import tempfile
import time
from xml.sax.saxutils import escape

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks import common  # noqa: E402

SHARED = os.environ.get("LDABEAM_SHARED", os.path.join(os.path.dirname(REPO), "shared"))
NEWS20 = os.path.join(SHARED, "data", "20news-bydate", "20news-bydate.tar.gz")
SAMPLE = os.path.join(REPO, "data", "enwiki-sample-206pages.xml.bz2")
RESULTS_JSON = os.path.join(REPO, "benchmarks", "results", "vectorize_bench.json")
# characters XML 1.0 forbids (a few posts contain form feeds / escape codes)
XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f]")


def build_dump(path: str, limit: int = 0) -> int:
    """Write the benchmark dump; returns the number of pages."""
    raw = bz2.decompress(open(SAMPLE, "rb").read()).decode("utf-8")
    first = raw.index("<page>")
    last = raw.rindex("</page>") + len("</page>")
    header, sample_pages = raw[:first], raw[first:last]
    n = 0
    with bz2.open(path, "wt", encoding="utf-8", compresslevel=9) as out:
        out.write(header)
        with tarfile.open(NEWS20, "r:gz") as tar:
            for m in tar:
                if not m.isfile():
                    continue
                if limit and n >= limit:
                    break
                text = XML_INVALID.sub(" ", tar.extractfile(m).read().decode("latin-1"))
                n += 1
                out.write("  <page>\n    <title>%s</title>\n    <ns>0</ns>\n    <id>%d</id>\n"
                          "    <revision>\n      <id>%d</id>\n      <text xml:space=\"preserve\">"
                          "%s</text>\n    </revision>\n  </page>\n"
                          % (escape(m.name), 10 ** 8 + n, 10 ** 8 + n, escape(text)))
        out.write("  " + sample_pages + "\n</mediawiki>\n")
    return n + sample_pages.count("<page>")


FORMATS = ("jsonl", "csv", "parquet", "wiki")
TARGET_MB_PER_CPU_S = {"jsonl": 15.0, "csv": 15.0, "parquet": 15.0, "wiki": 10.0}


def news20_records(limit: int = 0):
    """``{"id", "text", "label"}`` of the 20 Newsgroups posts, in archive order."""
    with tarfile.open(NEWS20, "r:gz") as tar:
        n = 0
        for m in tar:
            if not m.isfile():
                continue
            if limit and n >= limit:
                break
            n += 1
            yield {"id": m.name, "text": tar.extractfile(m).read().decode("latin-1"),
                   "label": m.name.split("/")[-2]}


def replicated(records, copies: int):
    """``copies`` copies of the records, the ids of copy ``k > 0`` suffixed ``#k``."""
    for k in range(copies):
        for r in records:
            yield r if k == 0 else dict(r, id="%s#%d" % (r["id"], k))


def write_inputs(tmp: str, formats, records, copies: int, table_copies: int,
                 stem: str = "news20") -> dict:
    """Write the records in each requested table / JSON-lines format; returns {format: path}."""
    out = {}
    if "jsonl" in formats:
        out["jsonl"] = os.path.join(tmp, stem + ".jsonl")
        with open(out["jsonl"], "w", encoding="utf-8") as f:
            for r in replicated(records, copies):
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if "csv" in formats or "parquet" in formats:
        import pyarrow as pa
        table = pa.Table.from_pylist(list(replicated(records, table_copies)))
        if "csv" in formats:
            import pyarrow.csv as pacsv
            out["csv"] = os.path.join(tmp, stem + ".csv")
            pacsv.write_csv(table, out["csv"])
        if "parquet" in formats:
            import pyarrow.parquet as pq
            out["parquet"] = os.path.join(tmp, stem + ".parquet")
            pq.write_table(table, out["parquet"])
    return out


def readable_formats() -> set:
    """The input formats this checkout's ``ldabeam vectorize`` reads."""
    from pipelines.ingest import input_files
    return set(input_files.FORMATS)


def input_mb(path: str) -> float:
    """MB of input as parsed: a ``.bz2`` file's decompressed size, a Parquet file's uncompressed
    column data, else the file size."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        md = pq.ParquetFile(path).metadata
        return sum(md.row_group(i).column(j).total_uncompressed_size
                   for i in range(md.num_row_groups) for j in range(md.num_columns)) / 1e6
    if path.endswith(".bz2"):
        n = 0
        with bz2.open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                n += len(block)
        return n / 1e6
    return os.path.getsize(path) / 1e6


def ceiling_bz2(path: str) -> float:
    """MB/CPU-s of decompressing the dump alone."""
    c0 = cpu_seconds()
    mb = input_mb(path)
    return mb / max(cpu_seconds() - c0, 1e-9)


def ceiling_tokenizer(path: str) -> float:
    """MB/CPU-s of the batch tokenizer alone on the JSON-lines posts (in 2 MB batches)."""
    from pipelines.ingest.tokenize import count_batch
    texts = [json.loads(line)["text"] for line in open(path, encoding="utf-8")]
    c0 = cpu_seconds()
    batch, size = [], 0
    for t in texts:
        batch.append(t)
        size += len(t)
        if size >= 1 << 21:
            count_batch(batch)
            batch, size = [], 0
    if batch:
        count_batch(batch)
    return os.path.getsize(path) / 1e6 / max(cpu_seconds() - c0, 1e-9)


def cpu_seconds() -> float:
    """CPU seconds of this process plus its finished children (gensim's pool workers and
    Beam's worker processes are waited for when their run ends)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def run_gensim(dump: str, processes: int = 2):
    from gensim.corpora.wikicorpus import WikiCorpus
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    wiki = WikiCorpus(dump, processes=processes)        # pass 1: the Dictionary
    t1 = time.perf_counter()
    c1 = cpu_seconds()
    wiki.dictionary.filter_extremes(no_below=5, no_above=0.5, keep_n=100000)
    n_docs = 0
    n_tokens = 0
    for bow in wiki:                                      # pass 2: bag of words
        n_docs += 1
        n_tokens += sum(c for _, c in bow)
    t2 = time.perf_counter()
    return {"docs": n_docs, "tokens": n_tokens, "vocab": len(wiki.dictionary),
            "pass1_s": t1 - t0, "total_s": t2 - t0, "pass1_cpu_s": c1 - c0,
            "total_cpu_s": cpu_seconds() - c0}


def digest(out: str) -> dict:
    """What must not change: the vocabulary (hash, size, sha256 of vocab.tsv), every shard's
    sha256 and row count, the manifest's counts and tokens (paths left out)."""
    import hashlib
    m = json.load(open(os.path.join(out, "manifest.json")))
    shards = {split: [(sh["file"], sh["sha256"], sh["documents"])
                      for sh in m["splits"][split]["shards"]] for split in ("train", "heldout")}
    with open(os.path.join(out, "vocab.tsv"), "rb") as f:
        vocab_sha = hashlib.sha256(f.read()).hexdigest()
    body = {"vocab_hash": m["vocabulary"]["hash"], "vocab_size": m["vocabulary"]["size"],
            "vocab_tsv_sha256": vocab_sha, "shards": shards, "counts": m["counts"],
            "tokens": m["tokens"]}
    body["sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return body


def run_ldabeam(path: str, out: str, beam_argv, fmt: str = "wiki"):
    from pipelines.ingest.vectorize import VectorizeOptions, vectorize
    kw = dict(deaccent=False) if fmt == "wiki" else dict(format=fmt)
    opts = VectorizeOptions(inputs=[path], output=out, overwrite=True, **kw)
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    m = vectorize(opts, beam_argv)
    t = time.perf_counter() - t0
    return {"docs": m["counts"]["documents_kept"], "tokens": m["tokens"]["total"],
            "vocab": m["vocabulary"]["size"], "total_s": t, "total_cpu_s": cpu_seconds() - c0,
            "digest": digest(out)}


RUNS = [("in-process", ["--runner=DirectRunner", "--direct_running_mode=in_memory"]),
        ("multi_processing x2", ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                                 "--direct_num_workers=2"])]


def throughput(fmt: str, path: str, small: str, tmp: str, runs, ceilings: dict) -> list:
    """One result row per runner: MB/CPU-s of vectorize on ``path``, start-up measured on
    ``small`` (the same format, 200 records); prints one line per row."""
    mb = input_mb(path)
    small_mb = input_mb(small)
    rows = []
    for name, beam_argv in runs:
        startup = run_ldabeam(small, os.path.join(tmp, "small-" + fmt), beam_argv, fmt)
        r = run_ldabeam(path, os.path.join(tmp, "out-" + fmt), beam_argv, fmt)
        cpu, target = r["total_cpu_s"], TARGET_MB_PER_CPU_S[fmt]
        steady = (mb - small_mb) / max(cpu - startup["total_cpu_s"], 1e-9)
        row = {"format": fmt, "runner": name, "mb": mb, "cpu_s": cpu, "mb_per_cpu_s": mb / cpu,
               "target": target, "met": mb / cpu >= target, "wall_s": r["total_s"],
               "startup_cpu_s": startup["total_cpu_s"], "steady_mb_per_cpu_s": steady,
               "steady_met": steady >= target, "docs": r["docs"], "tokens": r["tokens"],
               "vocab": r["vocab"], "digest": r["digest"]}
        for k, v in ceilings.items():
            if k != "bz2" or fmt == "wiki":
                row["ratio_to_" + k] = (mb / cpu) / v
        rows.append(row)
        print("%-8s %-20s %6.1f MB: %5.2f MB/CPU-s (target %.0f: %s), steady %5.2f (start-up "
              "%.1f CPU s); of the ceilings: %s; %d docs, %d tokens, V=%d, digest %s"
              % (fmt, name, mb, mb / cpu, target, "met" if row["met"] else "NOT met", steady,
                 startup["total_cpu_s"],
                 ", ".join("%s %.2f" % (k, row["ratio_to_" + k]) for k in ceilings
                           if "ratio_to_" + k in row),
                 r["docs"], r["tokens"], r["vocab"], r["digest"]["sha256"][:12]))
    return rows


def compare_digests(rows, baseline, same_records_in_jsonl: bool) -> dict:
    """Equal outputs: across runners, across jsonl / csv / parquet (the same records), and
    with a baseline results file's digests per format (when given)."""
    out = {}
    by_fmt = {}
    for r in rows:
        by_fmt.setdefault(r["format"], set()).add(r["digest"]["sha256"])
    out["same_across_runners"] = {f: len(d) == 1 for f, d in by_fmt.items()}
    # the same records (JSON lines: --copies copies, tables: --table-copies) give the same
    # dataset whatever their format
    tables = [f for f in ("csv", "parquet", "jsonl") if f in by_fmt
              and (f != "jsonl" or same_records_in_jsonl)]
    if len(tables) > 1:
        out["same_across_table_formats"] = {f: by_fmt[f] == by_fmt[tables[0]] for f in tables}
    if baseline:
        old = {}
        for r in baseline.get("rows", []):
            old.setdefault(r["format"], set()).add(r["digest"]["sha256"])
        out["same_as_baseline"] = {f: (by_fmt[f] == old[f]) for f in by_fmt if f in old}
    print("same output: %s" % json.dumps(out, sort_keys=True))
    return out


def markdown_table(rows, ceilings) -> str:
    lines = ["| input | runner | MB | MB/CPU-s | steady MB/CPU-s | target | met | "
             + " | ".join("vs %s" % k for k in ceilings) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * len(ceilings)]
    for r in rows:
        lines.append("| %s | %s | %.1f | %.2f | %.2f | %.0f | %s | %s |"
                     % (r["format"], r["runner"], r["mb"], r["mb_per_cpu_s"],
                        r["steady_mb_per_cpu_s"], r["target"], "yes" if r["met"] else "no",
                        " | ".join("%.2f" % r["ratio_to_" + k] if "ratio_to_" + k in r else "-"
                                   for k in ceilings)))
    return "\n".join(lines)


def run_gensim_comparison(dump: str, rows) -> dict:
    g = run_gensim(dump, 2)
    print("gensim WikiCorpus(processes=2): %d docs, %d tokens, V=%d; pass 1 %.1f s (%.1f CPU "
          "s), dictionary + bag-of-words pass %.1f s (%.1f CPU s)"
          % (g["docs"], g["tokens"], g["vocab"], g["pass1_s"], g["pass1_cpu_s"], g["total_s"],
             g["total_cpu_s"]))
    for r in rows:
        if r["format"] != "wiki":
            continue
        r["ratio_vs_gensim"] = (r["docs"] / r["wall_s"]) / (g["docs"] / g["total_s"])
        r["cpu_ratio_vs_gensim"] = g["total_cpu_s"] / r["cpu_s"]
        r["same_output_size_as_gensim"] = (r["docs"], r["tokens"], r["vocab"]) == (
            g["docs"], g["tokens"], g["vocab"])
        print("ldabeam vectorize %s: docs/s ratio vs gensim %.2f, CPU-time ratio %.2f%s"
              % (r["runner"], r["ratio_vs_gensim"], r["cpu_ratio_vs_gensim"],
                 "" if r["same_output_size_as_gensim"] else "  [counts differ from gensim!]"))
    return g


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=0,
                    help="use only the first N 20 Newsgroups posts (default: all 18,846)")
    ap.add_argument("--copies", type=int, default=3,
                    help="copies of the posts in the JSON-lines input (default: %(default)s)")
    ap.add_argument("--table-copies", type=int, default=2,
                    help="copies of the posts in the CSV / Parquet inputs "
                         "(default: %(default)s)")
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help="comma-separated input formats to measure (default: %(default)s); a "
                         "format this checkout cannot read is skipped with a message")
    ap.add_argument("--json", default=RESULTS_JSON,
                    help="write the results here ('': do not write)")
    ap.add_argument("--baseline", default="",
                    help="a results file of this script from another checkout: compare the "
                         "output digests with it")
    ap.add_argument("--digest-only", action="store_true",
                    help="only the in-process runs (for their digests); no ceilings, no gensim")
    ap.add_argument("--keep", action="store_true", help="keep the inputs and the outputs")
    ap.add_argument("--skip-multi", action="store_true", help="skip the 2-worker Beam runs")
    ap.add_argument("--skip-gensim", action="store_true",
                    help="skip the gensim WikiCorpus comparison on the dump")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not os.path.exists(NEWS20):
        raise SystemExit("20 Newsgroups archive %s is absent" % NEWS20)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise SystemExit("unknown --formats %s; expected some of %s"
                         % (",".join(unknown), ",".join(FORMATS)))
    readable = readable_formats()
    for f in [f for f in formats if f not in readable]:
        print("%s: skipped -- this checkout's `ldabeam vectorize` does not read --format %s "
              "yet (it reads: %s)" % (f, f, ", ".join(sorted(readable))))
    formats = [f for f in formats if f in readable]
    runs = RUNS[:1] if args.skip_multi or args.digest_only else RUNS
    tmp = tempfile.mkdtemp(prefix="vectorize-bench-")
    res = {"cpus": os.cpu_count(), "limit": args.limit, "formats": formats,
           "copies": args.copies, "table_copies": args.table_copies,
           "load_average_at_start": list(os.getloadavg())}
    records = list(news20_records(args.limit))
    inputs = write_inputs(tmp, formats + ["jsonl"], records, args.copies, args.table_copies)
    small = write_inputs(tmp, formats, records[:200], 1, 1, stem="small")
    ceilings = {}
    if not args.digest_only:
        once = write_inputs(tmp, ["jsonl"], records, 1, 1, stem="once")["jsonl"]
        ceilings["tokenizer"] = ceiling_tokenizer(once)
        print("ceiling: batch tokenizer alone on the posts %.1f MB/CPU-s" % ceilings["tokenizer"])
    rows = []
    for fmt in [f for f in formats if f != "wiki"]:
        rows.extend(throughput(fmt, inputs[fmt], small[fmt], tmp, runs, ceilings))
    if "wiki" in formats:
        dump = os.path.join(tmp, "news20-as-wiki.xml.bz2")
        res["pages"] = build_dump(dump, args.limit)
        small_dump = os.path.join(tmp, "small-wiki.xml.bz2")
        build_dump(small_dump, 200)
        print("dump: %d pages (20 Newsgroups posts as pages + the real 206-page sample), "
              "%.1f MB (%.1f MB of XML)" % (res["pages"], os.path.getsize(dump) / 1e6,
                                            input_mb(dump)))
        if not args.digest_only:
            ceilings["bz2"] = ceiling_bz2(dump)
            print("ceiling: bz2 decompression of the dump alone %.1f MB of XML/CPU-s"
                  % ceilings["bz2"])
        rows.extend(throughput("wiki", dump, small_dump, tmp, runs, ceilings))
        if not (args.skip_gensim or args.digest_only):
            res["gensim"] = run_gensim_comparison(dump, rows)
    res["ceilings_mb_per_cpu_s"] = ceilings
    res["rows"] = rows
    baseline = json.load(open(args.baseline)) if args.baseline else None
    res["same_output"] = compare_digests(rows, baseline, args.copies == args.table_copies)
    table = markdown_table(rows, ceilings)
    res["table"] = table
    print(table)
    if args.json:
        common.save_results(res, args.json, argv, os.path.basename(__file__))
    if args.keep:
        print("inputs and outputs kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
