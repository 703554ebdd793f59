#!/usr/bin/env python3
"""An update with new subjects: does it keep the old topics and take in the new words?

20 Newsgroups (../shared/data): a model trained on the training posts of the first 15
newsgroups (alphabetical) is updated with ``grow_vocab=True`` on the training posts of the other
5 (``LdaModel.update``, the code of ``ldabeam train --update --grow-vocab``), for ``--passes``
passes. Measured, one run each (no timing):

* the held-out score (document completion, LL per token, the tests' ``helpers.news20.completion``) on
  the test posts of the 15 old newsgroups, before and after the update, on the words the old
  vocabulary and the joint model's both hold (the same tokens for every model);
* the same on the test posts of the 5 new newsgroups (words the old vocabulary holds), and on
  every word of the grown vocabulary after the update;
* the new words: how many of the added words are among the topics' top 10s, and in how many
  topics; the old newsgroups' test posts whose most probable topic changed; NMI between the old
  newsgroups' labels and the most probable topic, before and after;
* references in the same process: the model trained jointly on all 20 newsgroups with the same
  settings (its score on the old groups, and how many words its vocabulary holds but the old
  model's does not are in its topics' top 10s), and (with this code) the update with ``corpus_size`` = the new documents, which
  weighs them as the whole corpus (how updates weighed them before: the topics the new
  documents do not use drift towards theirs);
* the weights between the two (``--weights``, e.g. 0.35,0.5,0.75): the update with
  ``corpus_size`` = round(new documents / weight), so the new documents weigh that share of
  the topics (variants ``weight_0.50``, ...): where the old groups' score and the new words
  in the top 10s trade against each other.

``--base`` runs only what the base commit's code can (the default update, which there treated
the new documents as the whole corpus and re-seeded unused topics): run it with ``PYTHONPATH``
set to a checkout of that commit. Results: ``benchmarks/results/update_bench.json`` (with
``--base``: ``update_bench_base.json``, not stored: the ``new_documents_as_the_corpus`` variant
is the base's weighting, though not its re-seeding of unused topics), with the load average
before and after.

    python benchmarks/update_bench.py [--algorithms scvb0,online-vb] [--passes 3]
                                      [--weights 0.35,0.5,0.75]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np
from sklearn.metrics import normalized_mutual_info_score

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402
sys.path.insert(0, os.path.join(common.REPO, "tests"))
from helpers.news20 import completion, news20_posts  # noqa: E402  (the tests' reader and score)
import ldabeam  # noqa: E402  (with --base: the base checkout's, through PYTHONPATH)
from pipelines.cli import main as cli  # noqa: E402

OLD_GROUPS = 15


def split_groups(tar: str, every: int):
    """``(old train, new train, old test, new test)`` records with their labels: the first
    :data:`OLD_GROUPS` newsgroups (alphabetical) are old, the rest new."""
    train = news20_posts(tar, "train", every=every)
    test = news20_posts(tar, "test", every=every)
    groups = sorted({p.group for p in train})
    old = set(groups[:OLD_GROUPS])

    def recs(posts, keep):
        return [dict(p.record(), label=p.group) for p in posts if (p.group in old) == keep]
    return recs(train, True), recs(train, False), recs(test, True), recs(test, False), groups


def nmi(labels, pred) -> float:
    return float(normalized_mutual_info_score(labels, pred))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tar", default=common.NEWS20_TAR)
    p.add_argument("--every", type=int, default=1, help="every n-th post of each split")
    p.add_argument("--topics", type=int, default=20)
    p.add_argument("--train-passes", type=int, default=5)
    p.add_argument("--passes", type=int, default=3, help="passes of the update")
    p.add_argument("--algorithms", default="scvb0")
    p.add_argument("--weights", default="",
                   help="comma-separated shares of the topics to give the new documents "
                        "(corpus_size = new documents / weight), besides the default")
    p.add_argument("--base", action="store_true",
                   help="the base commit's code (PYTHONPATH): the default update only")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    out = args.out or os.path.join(common.REPO, "benchmarks", "results", "update_bench%s.json"
                                   % ("_base" if args.base else ""))
    load0 = os.getloadavg()
    old_tr, new_tr, old_te, new_te, groups = split_groups(args.tar, args.every)
    work = tempfile.mkdtemp(prefix="ldabeam-update-bench-")

    def jsonl(name, recs):
        path = os.path.join(work, name)
        with open(path, "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        return path

    prune = ["--no-below", "5", "--no-above", "0.5", "--stopwords", "gensim"]
    for name, recs in (("old", old_tr), ("all", old_tr + new_tr)):
        assert cli(["vectorize", "--input", jsonl(name + ".jsonl", recs), "--output",
                    os.path.join(work, "ds-" + name)] + prune) == 0
    results = {"documents": {"old_train": len(old_tr), "new_train": len(new_tr),
                             "old_test": len(old_te), "new_test": len(new_te)},
               "groups": {"old": groups[:OLD_GROUPS], "new": groups[OLD_GROUPS:]},
               "settings": dict(vars(args), out=out), "code": "base" if args.base else "this",
               "algorithms": {}}
    for alg in args.algorithms.split(","):
        fit = ["--topics", str(args.topics), "--algorithm", alg, "--passes",
               str(args.train_passes), "--seed", "1", "--no-progress", "--heldout", "none"]
        for name in ("old", "all"):
            assert cli(["train", "--shards", os.path.join(work, "ds-" + name), "--output",
                        os.path.join(work, "%s-%s" % (alg, name))] + fit) == 0
        before = ldabeam.load(os.path.join(work, alg + "-old"))
        joint = ldabeam.load(os.path.join(work, alg + "-all"))
        known = set(before.vocabulary) & set(joint.vocabulary)
        pre = before._prep.pre

        def tokens(recs, vocab):
            return [[t for t in pre.tokens(r["text"]) if t in vocab] for r in recs]
        old_toks, new_toks = tokens(old_te, known), tokens(new_te, set(before.vocabulary))
        old_ids, new_ids = [r["id"] for r in old_te], [r["id"] for r in new_te]
        labels = [r["label"] for r in old_te]
        texts = [{"id": r["id"], "text": r["text"]} for r in old_te]
        top_before = before.transform(texts).argmax(axis=1)
        rec = {"before": {"old_groups": completion(before, old_toks, old_ids),
                          "new_groups": completion(before, new_toks, new_ids),
                          "nmi_old_groups": nmi(labels, top_before)},
               "joint": {"old_groups": completion(joint, old_toks, old_ids),
                         "nmi_old_groups": nmi(labels, joint.transform(texts).argmax(axis=1))}}
        # the joint model's top 10s against the same standard: words its vocabulary holds
        # and the old model's does not (the words an update's growth would add)
        unseen = set(joint.vocabulary) - set(before.vocabulary)
        joint_top = [sorted({w for w, _ in t} & unseen) for t in joint.top_words(10)]
        rec["joint"].update(
            new_words_in_top10s=int(sum(len(t) for t in joint_top)),
            topics_with_a_new_word_in_top10=int(sum(1 for t in joint_top if t)),
            new_words_in_top10s_examples=sorted({w for t in joint_top for w in t})[:30])
        variants = [("updated", {})]
        if not args.base:
            for w in [float(x) for x in args.weights.split(",") if x.strip()]:
                variants.append(("weight_%.2f" % w,
                                 {"corpus_size": int(round(len(new_tr) / w))}))
            variants.append(("new_documents_as_the_corpus", {"corpus_size": len(new_tr)}))
        for variant, kw in variants:
            m = ldabeam.load(os.path.join(work, alg + "-old"))
            v0 = m.n_words
            summary = m.update([{"id": r["id"], "text": r["text"]} for r in new_tr],
                               passes=args.passes, grow_vocab=True, **kw)
            added = set(m.vocabulary[v0:])
            tops = m.top_words(10)
            in_top = [sorted({w for w, _ in t} & added) for t in tops]
            top_after = m.transform(texts).argmax(axis=1)
            grown = set(m.vocabulary)
            r = {"old_groups": completion(m, old_toks, old_ids),
                 "new_groups": completion(m, new_toks, new_ids),
                 "new_groups_grown_vocabulary": completion(
                     m, [[t for t in pre.tokens(x["text"]) if t in grown] for x in new_te],
                     new_ids),
                 "nmi_old_groups": nmi(labels, top_after),
                 "old_posts_whose_top_topic_moved": int(np.sum(top_after != top_before)),
                 "words_added": int(summary["words_added"]),
                 "added_words_in_top10s": int(sum(len(t) for t in in_top)),
                 "topics_with_an_added_word_in_top10": int(sum(1 for t in in_top if t)),
                 "added_words_in_top10s_examples": sorted({w for t in in_top for w in t})[:30],
                 "weight": summary.get("weight"), "steps": int(summary["steps"])}
            r["old_groups_change"] = r["old_groups"] - rec["before"]["old_groups"]
            r["new_groups_change"] = r["new_groups"] - rec["before"]["new_groups"]
            rec[variant] = r
            common.print_json({alg: {variant: r}})
        results["algorithms"][alg] = rec
    results["load_average"] = {"before": list(load0), "after": list(os.getloadavg())}
    common.save_results(results, out)


if __name__ == "__main__":
    main()
