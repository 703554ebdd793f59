"""Throughput of ``ldabeam vectorize``: MB of input per CPU second on every input format, and
documents/second against gensim ``WikiCorpus(processes=2)`` on a dump.

Inputs, all made of the same real text: the 20 Newsgroups posts of ``../shared/data``

* ``jsonl``   -- one JSON object per post (``id``, ``text``, ``label``);
* ``csv`` / ``parquet`` -- the same records as a table (only when this checkout's
  ``ldabeam vectorize`` reads that format; otherwise the format is skipped with a message);
* ``wiki``    -- a MediaWiki dump (``.xml.bz2``): the posts wrapped as dump pages (title =
  group/id, text = the post, XML-escaped) followed by the real pages of the bundled sample.
  No larger real dump exists offline.

MB/CPU-s = MB of input (decompressed, for the ``.bz2`` dump: what is parsed) / CPU seconds of
one ``vectorize`` run (this process plus its finished children, start-up included), in-process
and with ``--direct_running_mode=multi_processing --direct_num_workers=2``; printed with its
ratio to the target (15 MB/CPU-s for text / tables, 10 for dumps). For reference the script
also measures, in the same process, the two ceilings: ``bz2`` decompression of the dump alone
and the batch tokenizer (:func:`pipelines.tokenize.count_batch`) alone on the posts.

gensim comparison (``wiki``): both sides produce a vocabulary pruned with ``filter_extremes``
defaults (5, 0.5, 100000) and the bag-of-words of every article with at least 50 tokens.

* gensim, as its ``make_wiki`` script does: ``WikiCorpus(dump, processes=2)`` (pass 1 builds
  the Dictionary), ``filter_extremes``, then one more pass over ``wiki`` to get every
  article's bag of words (what ``MmCorpus.serialize(..., wiki)`` iterates; not written to
  disk here, to time only the text processing). We also report the first pass alone.
* ldabeam: ``vectorize`` (one pass over the dump; the vocabulary is built from token counts
  kept in the pipeline) writing Parquet shards, in-process (DirectRunner in_memory) and with
  2 workers.

Wall-clock documents/second of one run each, in this one script (gensim's workers are other
processes). Timings on this shared 2-core machine are noisy; compare the ratios.

    python benchmarks/vectorize_bench.py [--limit N] [--formats jsonl,csv,parquet,wiki]
        [--skip-gensim] [--skip-multi] [--json results.json]

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


def build_table_inputs(tmp: str, formats, limit: int = 0) -> dict:
    """Write the posts in each requested table / JSON-lines format; returns {format: path}."""
    records = list(news20_records(limit))
    out = {}
    if "jsonl" in formats:
        out["jsonl"] = os.path.join(tmp, "news20.jsonl")
        with open(out["jsonl"], "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if "csv" in formats or "parquet" in formats:
        import pyarrow as pa
        table = pa.Table.from_pylist(records)
        if "csv" in formats:
            import pyarrow.csv as pacsv
            out["csv"] = os.path.join(tmp, "news20.csv")
            pacsv.write_csv(table, out["csv"])
        if "parquet" in formats:
            import pyarrow.parquet as pq
            out["parquet"] = os.path.join(tmp, "news20.parquet")
            pq.write_table(table, out["parquet"])
    return out


def readable_formats() -> set:
    """The input formats this checkout's ``ldabeam vectorize`` reads."""
    from pipelines import text_sources
    return set(text_sources.FORMATS)


def input_mb(path: str) -> float:
    """MB of input as parsed: a ``.bz2`` file's decompressed size, else the file size."""
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
    from pipelines.tokenize import count_batch
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


def run_ldabeam(path: str, out: str, beam_argv, fmt: str = "wiki"):
    from pipelines.vectorize import VectorizeOptions, vectorize
    kw = dict(deaccent=False) if fmt == "wiki" else dict(format=fmt)
    opts = VectorizeOptions(inputs=[path], output=out, overwrite=True, **kw)
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    m = vectorize(opts, beam_argv)
    t = time.perf_counter() - t0
    return {"docs": m["counts"]["documents_kept"], "tokens": m["tokens"]["total"],
            "vocab": m["vocabulary"]["size"], "total_s": t, "total_cpu_s": cpu_seconds() - c0}


RUNS = [("in-process", ["--runner=DirectRunner", "--direct_running_mode=in_memory"]),
        ("multi_processing x2", ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                                 "--direct_num_workers=2"])]


def throughput(fmt: str, path: str, tmp: str, runs) -> dict:
    """MB/CPU-s of vectorize on one input, for each runner; prints one line per run."""
    mb = input_mb(path)
    res = {"input_mb": mb, "input_file_mb": os.path.getsize(path) / 1e6}
    for name, beam_argv in runs:
        r = run_ldabeam(path, os.path.join(tmp, "out-" + fmt), beam_argv, fmt)
        r["mb_per_cpu_s"] = mb / r["total_cpu_s"]
        r["ratio_to_target"] = r["mb_per_cpu_s"] / TARGET_MB_PER_CPU_S[fmt]
        res[name] = r
        print("%-8s %-20s %7.1f MB: %5.2f MB/CPU-s (target %.0f: ratio %.2f), %.2f MB/s wall;"
              " %d docs, %d tokens, V=%d"
              % (fmt, name, mb, r["mb_per_cpu_s"], TARGET_MB_PER_CPU_S[fmt],
                 r["ratio_to_target"], mb / r["total_s"], r["docs"], r["tokens"], r["vocab"]))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=0,
                    help="use only the first N 20 Newsgroups posts (default: all 18,846)")
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help="comma-separated input formats to measure (default: %(default)s); a "
                         "format this checkout cannot read is skipped with a message")
    ap.add_argument("--json", default=RESULTS_JSON,
                    help="write the results here ('': do not write)")
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
    runs = RUNS[:1] if args.skip_multi else RUNS
    tmp = tempfile.mkdtemp(prefix="vectorize-bench-")
    res = {"cpus": os.cpu_count(), "limit": args.limit, "formats": formats,
           "target_mb_per_cpu_s": {f: TARGET_MB_PER_CPU_S[f] for f in formats}}
    inputs = build_table_inputs(tmp, formats + ["jsonl"], args.limit)
    res["ceiling_tokenizer_mb_per_cpu_s"] = ceiling_tokenizer(inputs["jsonl"])
    print("ceiling: batch tokenizer alone on the posts %.1f MB/CPU-s"
          % res["ceiling_tokenizer_mb_per_cpu_s"])
    res["throughput"] = {}
    for fmt in [f for f in formats if f != "wiki"]:
        res["throughput"][fmt] = throughput(fmt, inputs[fmt], tmp, runs)

    if "wiki" in formats:
        dump = os.path.join(tmp, "news20-as-wiki.xml.bz2")
        pages = build_dump(dump, args.limit)
        res["pages"] = pages
        print("dump: %d pages (20 Newsgroups posts as pages + the real 206-page sample), "
              "%.1f MB (%.1f MB of XML)" % (pages, os.path.getsize(dump) / 1e6, input_mb(dump)))
        res["ceiling_bz2_mb_per_cpu_s"] = ceiling_bz2(dump)
        print("ceiling: bz2 decompression of the dump alone %.1f MB of XML/CPU-s"
              % res["ceiling_bz2_mb_per_cpu_s"])
        res["throughput"]["wiki"] = tp = throughput("wiki", dump, tmp, runs)
        if not args.skip_gensim:
            res["gensim"] = g = run_gensim(dump, 2)
            print("gensim WikiCorpus(processes=2): %d docs, %d tokens, V=%d; pass 1 %.1f s "
                  "(%.1f CPU s), dictionary + bag-of-words pass %.1f s (%.1f CPU s) -> %.0f "
                  "docs/s" % (g["docs"], g["tokens"], g["vocab"], g["pass1_s"],
                              g["pass1_cpu_s"], g["total_s"], g["total_cpu_s"],
                              g["docs"] / g["total_s"]))
            for name, _ in runs:
                r = tp[name]
                res["ldabeam " + name] = r
                ratio = (r["docs"] / r["total_s"]) / (g["docs"] / g["total_s"])
                ratio1 = (r["docs"] / r["total_s"]) / (g["docs"] / g["pass1_s"])
                r["ratio_vs_gensim"] = ratio
                r["ratio_vs_gensim_pass1"] = ratio1
                r["cpu_ratio_vs_gensim"] = g["total_cpu_s"] / r["total_cpu_s"]
                r["cpu_ratio_vs_gensim_pass1"] = g["pass1_cpu_s"] / r["total_cpu_s"]
                same = (r["docs"], r["tokens"], r["vocab"]) == (g["docs"], g["tokens"],
                                                                  g["vocab"])
                r["same_output_size"] = same
                print("ldabeam vectorize %s: %d docs, %d tokens, V=%d in %.1f s (%.1f CPU s) "
                      "-> %.0f docs/s; ratio vs gensim %.2f (vs gensim's first pass alone "
                      "%.2f); CPU-time ratio %.2f (vs first pass %.2f)%s"
                      % (name, r["docs"], r["tokens"], r["vocab"], r["total_s"],
                         r["total_cpu_s"], r["docs"] / r["total_s"], ratio, ratio1,
                         r["cpu_ratio_vs_gensim"], r["cpu_ratio_vs_gensim_pass1"],
                         "" if same else "  [counts differ from gensim!]"))
    print("| input | MB | runner | MB/CPU-s | target | ratio |")
    print("|---|---|---|---|---|---|")
    for fmt, tp in res["throughput"].items():
        for name, _ in runs:
            print("| %s | %.1f | %s | %.2f | %.0f | %.2f |"
                  % (fmt, tp["input_mb"], name, tp[name]["mb_per_cpu_s"],
                     TARGET_MB_PER_CPU_S[fmt], tp[name]["ratio_to_target"]))
    if args.json:
        common.save_results(res, args.json, argv, os.path.basename(__file__))
    if args.keep:
        print("inputs and outputs kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
