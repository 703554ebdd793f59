"""Documents/second of ``ldabeam vectorize`` against gensim ``WikiCorpus(processes=2)``.

Input: one MediaWiki dump (``.xml.bz2``) made of real articles: the 20 Newsgroups posts of
``../shared/data`` wrapped as dump pages (title = group/id, text = the post, XML-escaped)
followed by the real pages of the bundled sample. No larger real dump exists offline.

Both sides produce the same thing: a vocabulary pruned with ``filter_extremes`` defaults
(5, 0.5, 100000) and the bag-of-words of every article with at least 50 tokens.

* gensim, as its ``make_wiki`` script does: ``WikiCorpus(dump, processes=2)`` (pass 1 builds
  the Dictionary), ``filter_extremes``, then one more pass over ``wiki`` to get every
  article's bag of words (what ``MmCorpus.serialize(..., wiki)`` iterates; not written to
  disk here, to time only the text processing). We also report the first pass alone.
* ldabeam: ``vectorize`` (one pass over the dump; the vocabulary is built from token counts
  kept in the pipeline) writing Parquet shards, in-process (DirectRunner in_memory) and with
  ``--direct_running_mode=multi_processing --direct_num_workers=2``.

The numbers are wall-clock documents/second of one run each, in this one script (gensim's
workers are other processes, so process CPU time does not compare). Timings on this shared
2-core machine are noisy; compare the ratios.

    python benchmarks/vectorize_bench.py [--limit N] [--json results.json]

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


def run_ldabeam(dump: str, out: str, beam_argv):
    from pipelines.vectorize import VectorizeOptions, vectorize
    opts = VectorizeOptions(inputs=[dump], output=out, deaccent=False, overwrite=True)
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    m = vectorize(opts, beam_argv)
    t = time.perf_counter() - t0
    return {"docs": m["counts"]["documents_kept"], "tokens": m["tokens"]["total"],
            "vocab": m["vocabulary"]["size"], "total_s": t, "total_cpu_s": cpu_seconds() - c0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=0,
                    help="use only the first N 20 Newsgroups posts (default: all 18,846)")
    ap.add_argument("--json", default=RESULTS_JSON,
                    help="write the results here ('': do not write)")
    ap.add_argument("--keep", action="store_true", help="keep the dump and the outputs")
    ap.add_argument("--skip-multi", action="store_true", help="skip the 2-worker Beam run")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not os.path.exists(NEWS20):
        raise SystemExit("20 Newsgroups archive %s is absent" % NEWS20)
    tmp = tempfile.mkdtemp(prefix="vectorize-bench-")
    dump = os.path.join(tmp, "news20-as-wiki.xml.bz2")
    pages = build_dump(dump, args.limit)
    print("dump: %d pages (20 Newsgroups posts as pages + the real 206-page sample), %.1f MB"
          % (pages, os.path.getsize(dump) / 1e6))

    res = {"pages": pages, "cpus": os.cpu_count()}
    res["gensim"] = g = run_gensim(dump, 2)
    print("gensim WikiCorpus(processes=2): %d docs, %d tokens, V=%d; pass 1 %.1f s "
          "(%.1f CPU s), dictionary + bag-of-words pass %.1f s (%.1f CPU s) -> %.0f docs/s"
          % (g["docs"], g["tokens"], g["vocab"], g["pass1_s"], g["pass1_cpu_s"],
             g["total_s"], g["total_cpu_s"], g["docs"] / g["total_s"]))
    runs = [("in-process", ["--runner=DirectRunner", "--direct_running_mode=in_memory"])]
    if not args.skip_multi:
        runs.append(("multi_processing x2", ["--runner=DirectRunner",
                                             "--direct_running_mode=multi_processing",
                                             "--direct_num_workers=2"]))
    for name, beam_argv in runs:
        r = run_ldabeam(dump, os.path.join(tmp, "out"), beam_argv)
        res["ldabeam " + name] = r
        ratio = (r["docs"] / r["total_s"]) / (g["docs"] / g["total_s"])
        ratio1 = (r["docs"] / r["total_s"]) / (g["docs"] / g["pass1_s"])
        r["ratio_vs_gensim"] = ratio
        r["ratio_vs_gensim_pass1"] = ratio1
        r["cpu_ratio_vs_gensim"] = g["total_cpu_s"] / r["total_cpu_s"]
        r["cpu_ratio_vs_gensim_pass1"] = g["pass1_cpu_s"] / r["total_cpu_s"]
        same = (r["docs"], r["tokens"], r["vocab"]) == (g["docs"], g["tokens"], g["vocab"])
        r["same_output_size"] = same
        print("ldabeam vectorize %s: %d docs, %d tokens, V=%d in %.1f s (%.1f CPU s) -> "
              "%.0f docs/s; ratio vs gensim %.2f (vs gensim's first pass alone %.2f); "
              "CPU-time ratio %.2f (vs first pass %.2f)%s"
              % (name, r["docs"], r["tokens"], r["vocab"], r["total_s"], r["total_cpu_s"],
                 r["docs"] / r["total_s"], ratio, ratio1, r["cpu_ratio_vs_gensim"],
                 r["cpu_ratio_vs_gensim_pass1"],
                 "" if same else "  [counts differ from gensim!]"))
    res["limit"] = args.limit
    if args.json:
        common.save_results(res, args.json, argv, os.path.basename(__file__))
    if args.keep:
        print("dump and outputs kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
