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
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402


def prepare(cache: str, force: bool = False) -> dict:
    os.makedirs(cache, exist_ok=True)
    uci, bench, export = (os.path.join(cache, d) for d in ("uci", "bench", "export"))
    ds_train, ds_test = os.path.join(cache, "ds_train"), os.path.join(cache, "ds_test")
    if force:
        for d in (uci, bench, export, ds_train, ds_test):
            shutil.rmtree(d, ignore_errors=True)
    if not os.path.exists(os.path.join(uci, "vocab.txt")):
        if not os.path.exists(common.NEWS20_TAR):
            raise SystemExit("20 Newsgroups tarball %s is absent" % common.NEWS20_TAR)
        tmp = tempfile.mkdtemp(prefix="20news-")
        try:
            with tarfile.open(common.NEWS20_TAR) as t:
                t.extractall(tmp, filter="data")
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
    from pipelines import dataset
    with open(os.path.join(cache, "bench", "vocab.txt")) as f:
        harness = [l.rstrip("\n") for l in f]
    if harness and harness[-1] == "":
        harness.pop()
    for d in ("ds_train", "ds_test"):
        ours = dataset.Vocabulary.read(os.path.join(cache, d)).tokens
        if ours != harness:
            raise SystemExit("%s/%s/vocab.tsv is not the harness's vocab.txt in order (%d vs %d "
                             "words); phi columns would not line up" % (cache, d, len(ours),
                                                                      len(harness)))


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--force", action="store_true", help="rebuild every stage")
    a = p.parse_args(argv)
    meta = prepare(a.cache, a.force)
    print("20 Newsgroups prepared in %s: %d training documents, %.2f M tokens, V = %d, %d "
          "held-out documents (README: 17,784 / 2.21 M / 29,403 / 1,000)"
          % (a.cache, meta["n_train"], meta["train_tokens"] / 1e6, meta["V"], meta["n_test"]))


if __name__ == "__main__":
    main()
