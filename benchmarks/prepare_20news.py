#!/usr/bin/env python3
"""Prepare 20 Newsgroups as in ../shared/bench/README.md, for the benchmarks and slow tests.

Into CACHE (default benchmarks/.cache/20news, gitignored), idempotently (each stage is skipped
when its output is present):

1. ``uci/``     untar ../shared/data/20news-bydate/20news-bydate.tar.gz to a temporary
                directory and run ``text2uci.py --strip-headers --min-df 5 --max-df-frac 0.5``
                (gensim simple_preprocess, stop words removed) -> docword.txt, vocab.txt;
2. ``bench/``   ``bench_peers.py prepare`` (seed 0, 1,000 held-out documents): train.npz,
                test.npz, test_a.npz / test_b.npz (the document-completion halves), vocab.txt;
3. ``export/``  ``bench_peers.py export``: docword.train.txt, docword.test.txt, vocab.txt;
4. ``ds_train/`` and ``ds_test/``: ``ldabeam vectorize --format uci`` of those (the vocabulary
                order of vocab.txt is kept, so our topic-word matrix lines up with the
                harness's columns).

The README says: 17,784 training documents, 2.21 M tokens, V = 29,403; this script prints what
it got.

``--limit N`` prepares a subset instead: N posts spread evenly over the tar (every group, train
and test), the same stages and protocol otherwise (the harness holds out a tenth of the
documents when there are fewer than 10,000). For smoke tests only, so it must go to another
``--cache`` (or ``LDABEAM_BENCH_CACHE``): the default cache always holds the full corpus. The
subset is recorded in CACHE/subset.json, and a cache is never silently switched between a
subset and the full corpus (``--force`` rebuilds).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402


SUBSET_FILE = "subset.json"
DEFAULT_CACHE = os.path.join(common.REPO, "benchmarks", ".cache", "20news")


def prepared_limit(cache: str):
    """The --limit the cache was prepared with (0: the full corpus; None: not prepared)."""
    if os.path.exists(os.path.join(cache, SUBSET_FILE)):
        with open(os.path.join(cache, SUBSET_FILE)) as f:
            return int(json.load(f)["limit"])
    return 0 if os.path.exists(os.path.join(cache, "uci", "vocab.txt")) else None


def _members(tar, limit: int):
    """The tar's files, or ``limit`` of them evenly spaced (all groups, train and test)."""
    files = [m for m in tar.getmembers() if m.isfile()]
    if limit and limit < len(files):
        step = len(files) / float(limit)
        files = [files[int(i * step)] for i in range(limit)]
    return files


def prepare(cache: str, force: bool = False, limit=None) -> dict:
    """Prepare (or reuse) the cache. ``limit``: None takes what the cache holds (the full
    corpus when it is empty); 0 the full corpus, N a subset of N posts (an error when the
    cache holds something else, unless ``force``)."""
    if limit and os.path.abspath(cache) == os.path.abspath(DEFAULT_CACHE):
        raise SystemExit("a subset (--limit) is never written to the default cache %s: pass "
                         "--cache or set LDABEAM_BENCH_CACHE" % cache)
    uci, bench, export = (os.path.join(cache, d) for d in ("uci", "bench", "export"))
    ds_train, ds_test = os.path.join(cache, "ds_train"), os.path.join(cache, "ds_test")
    have = prepared_limit(cache)
    if limit is not None and have is not None and have != limit and not force:
        raise SystemExit("%s holds %s, not %s: pass --force to rebuild it, or use another "
                         "--cache" % (cache, "a subset of %d posts" % have if have else
                                      "the full corpus",
                                      "a subset of %d posts" % limit if limit else
                                      "the full corpus"))
    if limit is None:
        limit = have or 0
    os.makedirs(cache, exist_ok=True)
    if force:
        # the repeated corpora of memory_bench / scale_bench (ds_train_xN) are copies of
        # ds_train: stale once it is rebuilt
        for d in [uci, bench, export, ds_train, ds_test] + glob.glob(
                os.path.join(cache, "ds_train_x*")):
            shutil.rmtree(d, ignore_errors=True)
        if os.path.exists(os.path.join(cache, SUBSET_FILE)):
            os.unlink(os.path.join(cache, SUBSET_FILE))
    if limit:
        with open(os.path.join(cache, SUBSET_FILE), "w") as f:
            json.dump({"limit": limit}, f)
        print("NOTE: %s is a subset of %d 20 Newsgroups posts (prepare_20news.py --limit), "
              "not the benchmark corpus" % (cache, limit), file=sys.stderr, flush=True)
    if not os.path.exists(os.path.join(uci, "vocab.txt")):
        if not os.path.exists(common.NEWS20_TAR):
            raise SystemExit("20 Newsgroups tarball %s is absent" % common.NEWS20_TAR)
        tmp = tempfile.mkdtemp(prefix="20news-")
        try:
            with tarfile.open(common.NEWS20_TAR) as t:
                t.extractall(tmp, members=_members(t, limit), filter="data")
            part = uci + ".partial"
            shutil.rmtree(part, ignore_errors=True)
            common.run([common.PYTHON, common.TEXT2UCI, "--root", tmp, "--out", part,
                        "--strip-headers", "--min-df", "5", "--max-df-frac", "0.5"])
            os.replace(part, uci)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not os.path.exists(os.path.join(bench, "meta.json")):
        part = bench + ".partial"
        shutil.rmtree(part, ignore_errors=True)
        common.run([common.PYTHON, common.BENCH_PEERS, "prepare", "--docword",
                    os.path.join(uci, "docword.txt"), "--vocab", os.path.join(uci, "vocab.txt"),
                    "--out", part, "--test-docs", "1000", "--seed", "0"])
        os.replace(part, bench)
    if not os.path.exists(os.path.join(export, "vocab.txt")):
        part = export + ".partial"
        shutil.rmtree(part, ignore_errors=True)
        common.run([common.PYTHON, common.BENCH_PEERS, "export", "--data", bench, "--out", part])
        os.replace(part, export)
    for name, out in (("train", ds_train), ("test", ds_test)):
        if not os.path.exists(os.path.join(out, "manifest.json")):
            shutil.rmtree(out, ignore_errors=True)
            common.run(common.LDABEAM + [
                "--log-level", "WARNING", "vectorize", "--format", "uci",
                "--input", os.path.join(export, "docword.%s.txt" % name),
                "--vocab", os.path.join(export, "vocab.txt"), "--output", out])
    with open(os.path.join(bench, "meta.json")) as f:
        meta = json.load(f)
    check_vocab_order(cache)
    return meta


def check_vocab_order(cache: str) -> None:
    """The datasets' vocabulary must be the harness's vocab.txt in the same order."""
    from pipelines.ingest import dataset
    from lda_core.storage.vocab_file import Vocabulary
    with open(os.path.join(cache, "bench", "vocab.txt")) as f:
        harness = [l.rstrip("\n") for l in f]
    if harness and harness[-1] == "":
        harness.pop()
    for d in ("ds_train", "ds_test"):
        ours = Vocabulary.read(os.path.join(cache, d)).tokens
        if ours != harness:
            raise SystemExit("%s/%s/vocab.tsv is not the harness's vocab.txt in order (%d vs %d "
                             "words); phi columns would not line up" % (cache, d, len(ours),
                                                                      len(harness)))


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--force", action="store_true", help="rebuild every stage")
    p.add_argument("--limit", type=int, default=0,
                   help="a subset of N posts spread over the tar, for smoke tests (never in "
                        "the default cache; default: all 18,846)")
    a = p.parse_args(argv)
    meta = prepare(a.cache, a.force, a.limit)
    print("20 Newsgroups prepared in %s: %d training documents, %.2f M tokens, V = %d, %d "
          "held-out documents (README: 17,784 / 2.21 M / 29,403 / 1,000)"
          % (a.cache, meta["n_train"], meta["train_tokens"] / 1e6, meta["V"], meta["n_test"]))


if __name__ == "__main__":
    main()
