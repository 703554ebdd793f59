#!/usr/bin/env python3
"""``LdaModel.update(..., grow_vocab=True)`` against joint training, on 20 Newsgroups.

Every ``--every``-th post of the training half in tar order (so grouped by newsgroup: the first
half of the slice holds the first ten newsgroups, the second half the other ten); every
``2 * --every``-th test post held out. For each algorithm:

* ``joint``: ``ldabeam vectorize`` + ``ldabeam train`` on both halves;
* ``updated``: the same on the first half, then ``ldabeam.load(...).update(second half,
  passes=P, grow_vocab=True)`` (same passes, same minibatch size);
* ``updated_float32``: as ``updated`` with online VB's E-step kept in float32 on the grown
  rows (the precision the model was trained with; what ``update`` avoids, docs/library.md).

Score: document completion (held-out LL per token, ``lda_core.evaluation.metrics``) of the
held-out posts restricted to the words both vocabularies hold; also how many of the added
words are among some topic's 20 most probable words. One run each; results in
``benchmarks/results/library_update_bench.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402
sys.path.insert(0, os.path.join(common.REPO, "tests"))
from helpers.news20 import completion, halves  # noqa: E402  (the tests' corpus reader and score)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    data = os.environ.get("LDABEAM_SHARED_DATA",
                          os.path.join(common.REPO, "..", "shared", "data"))
    p.add_argument("--tar", default=os.path.join(data, "20news-bydate", "20news-bydate.tar.gz"))
    p.add_argument("--every", type=int, default=3)
    p.add_argument("--topics", type=int, default=20)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--minibatch", type=int, default=128)
    p.add_argument("--algorithms", default="online-vb,scvb0")
    p.add_argument("--out", default=os.path.join(common.REPO, "benchmarks", "results",
                                                 "library_update_bench.json"))
    args = p.parse_args(argv)
    import ldabeam
    from pipelines.cli import main as cli
    train, test = halves(args.tar, args.every)
    half = len(train) // 2
    a, b = train[:half], train[half:]
    work = tempfile.mkdtemp(prefix="ldabeam-update-bench-")

    def jsonl(name, recs):
        path = os.path.join(work, name)
        with open(path, "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        return path

    prune = ["--no-below", "5", "--no-above", "0.5", "--stopwords", "gensim"]
    results = {"documents": {"first_half": len(a), "second_half": len(b), "heldout": len(test)},
               "settings": vars(args), "algorithms": {}}
    for name, recs in (("a", a), ("ab", a + b)):
        assert cli(["vectorize", "--input", jsonl(name + ".jsonl", recs), "--output",
                    os.path.join(work, "ds-" + name)] + prune) == 0
    for alg in args.algorithms.split(","):
        fit = ["--topics", str(args.topics), "--algorithm", alg, "--passes", str(args.passes),
               "--minibatch", str(args.minibatch), "--seed", "1", "--no-progress"]
        for name in ("a", "ab"):
            assert cli(["train", "--shards", os.path.join(work, "ds-" + name), "--output",
                        os.path.join(work, "%s-%s" % (alg, name))] + fit) == 0
        joint = ldabeam.load(os.path.join(work, alg + "-ab"))
        rec = {}
        variants = ["updated"] + (["updated_float32"] if alg == "online-vb" else [])
        for variant in variants:
            m = ldabeam.load(os.path.join(work, alg + "-a"))
            v0 = m.n_words
            if variant == "updated_float32":
                m._train_on = lambda batch, passes, precise=False, runner=None, _m=m: \
                    _m._steps(batch, passes, runner)
            summary = m.update(b, passes=args.passes, grow_vocab=True)
            added = set(m.vocabulary[v0:])
            both = set(m.vocabulary) & set(joint.vocabulary)
            toks = [[t for t in joint._prep.pre.tokens(r["text"]) if t in both] for r in test]
            ids = [r["id"] for r in test]
            sj, su = completion(joint, toks, ids), completion(m, toks, ids)
            tops = {w for t in m.top_words(20) for w, _ in t}
            rec[variant] = {"joint": sj, "updated": su, "gap": sj - su,
                            "words_added": summary["words_added"],
                            "added_in_top20": len(tops & added), "shared_words": len(both)}
            common.print_json({alg: {variant: rec[variant]}})
        results["algorithms"][alg] = rec
    common.save_results(results, args.out)


if __name__ == "__main__":
    main()
