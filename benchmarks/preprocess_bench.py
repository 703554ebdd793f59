"""What the preprocessing options cost: the batch tokenizer's documents per CPU second with
each option, as a ratio to the default tokenizer measured in the same process, on 20 Newsgroups
posts (``../shared/data``), plus the cost of learning the phrases (gensim ``Phrases`` over the
same posts, as ``vectorize --phrases`` does on the driver) against one default tokenizing
pass.

Configurations: ``default`` (gensim's rule, the byte-class fast path), ``stopwords`` (gensim's
list), ``token_pattern`` (a regex: the per-document path), ``phrases`` (the learned table
applied by gensim's FrozenPhrases: the per-document path plus a Python step per token), and
``jieba`` (segmentation: only when the package is installed; run on the same English text it
measures the segmenter's overhead, not its Chinese speed).

    python benchmarks/preprocess_bench.py [--posts 4000] [--repeats 3] [--json PATH]

Results: ``benchmarks/results/preprocess_bench.json`` (``--json ''``: not written). Timings on
a shared machine are noisy; compare the ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from pipelines.ingest.phrases import learn_phrases  # noqa: E402
from pipelines.ingest.tokenize import (TokenizerConfig, count_batch, load_stopwords,  # noqa: E402
                                       tokenize)

DATA = os.environ.get("LDABEAM_SHARED_DATA",
                      os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "data"))


def posts(n):
    path = os.path.join(DATA, "20news-bydate", "20news-bydate.tar.gz")
    out = []
    with tarfile.open(path, "r|gz") as tar:
        for m in tar:
            if m.isfile():
                out.append(tar.extractfile(m).read().decode("latin-1"))
                if len(out) == n:
                    break
    return out


def cpu_seconds(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--posts", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "preprocess_bench.json"))
    args = ap.parse_args(argv)
    texts = posts(args.posts)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    batches = [texts[i:i + 2000] for i in range(0, len(texts), 2000)]
    default = TokenizerConfig()
    t0 = time.process_time()
    table = learn_phrases((tokenize(t) for t in texts), min_count=5, threshold=10.0)
    learn_s = time.process_time() - t0
    configs = {
        "default": default,
        "stopwords": TokenizerConfig(stopwords=load_stopwords("gensim")),
        "token_pattern": TokenizerConfig(token_pattern=r"[a-z0-9][a-z0-9+#-]*"),
        "phrases": TokenizerConfig(phrases=table),
    }
    try:
        import jieba  # noqa: F401
        configs["jieba"] = TokenizerConfig(segmenter="jieba")
        count_batch(texts[:10], configs["jieba"])          # its dictionary loads once
    except ImportError:
        pass
    rows = {}
    for name, cfg in configs.items():
        s = cpu_seconds(lambda: [count_batch(b, cfg) for b in batches], args.repeats)
        rows[name] = {"cpu_s": round(s, 4), "docs_per_cpu_s": round(len(texts) / s, 1),
                      "mb_per_cpu_s": round(mb / s, 2)}
    base = rows["default"]["cpu_s"]
    for name, r in rows.items():
        r["cost_vs_default"] = round(r["cpu_s"] / base, 2)
        print("%-14s %8.1f docs/CPU-s  %6.2f MB/CPU-s  %5.2fx the default's CPU time"
              % (name, r["docs_per_cpu_s"], r["mb_per_cpu_s"], r["cost_vs_default"]))
    learn = {"cpu_s": round(learn_s, 4), "phrases": len(table),
             "cost_vs_default_pass": round(learn_s / base, 2)}
    print("learning %d phrases (tokenize + gensim Phrases, one pass): %.2fx a default "
          "tokenizing pass" % (len(table), learn["cost_vs_default_pass"]))
    result = {"posts": len(texts), "mb": round(mb, 2), "repeats": args.repeats,
              "configs": rows, "learn_phrases": learn,
              "note": "CPU seconds, best of repeats, one process; ratios to 'default' in the "
                      "same process"}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
            f.write("\n")
    return result


if __name__ == "__main__":
    main()
