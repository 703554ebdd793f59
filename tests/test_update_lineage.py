"""Issue 30: updates a user can trust.

* item 1: after ``train --update --grow-vocab`` in place, ``report``, ``export --format
  gensim``, ``evaluate`` and ``topics`` run on the model and on its earlier checkpoint, and
  shards of the old (ancestor) vocabulary and of the grown one are read;
* item 2: words common in the new documents (in every one of them) are added, ``no_above``
  counting over what the model has seen plus the new documents; ``keep_n`` says what it kept
  out;
* item 3: an update weighs the new documents by their share of what the model has seen, and
  the old newsgroups' held-out score drops less than when they are the whole corpus.

Data: 20 Newsgroups (../shared/data), every 20th training post in tar order; its first half
holds the first ten newsgroups, the second half the other ten."""
import json
import os

import pytest

import ldabeam
from helpers.news20 import completion, halves
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.vocab_file import Vocabulary
from pipelines.cli import main as cli

PRUNE = ["--no-below", "3", "--no-above", "0.5", "--stopwords", "gensim"]


def jsonl(path, recs):
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def halves20(news20_tar, tmp_path_factory):
    """Both halves of every 20th training post (JSON lines and records), the first half's
    dataset, and the test posts of the same slice."""
    work = tmp_path_factory.mktemp("lineage")
    tr, te = halves(news20_tar, 20)
    half = len(tr) // 2
    ds_a = str(work / "ds-a")
    assert cli(["vectorize", "--input", jsonl(work / "a.jsonl", tr[:half]), "--output",
                ds_a] + PRUNE) == 0
    return {"work": work, "a": tr[:half], "b": tr[half:], "ds_a": ds_a,
            "b_path": jsonl(work / "b.jsonl", tr[half:]), "test": te}


def fresh_model(h, name, algorithm="scvb0", topics=5, passes=1):
    out = str(h["work"] / name)
    assert cli(["train", "--shards", h["ds_a"], "--output", out, "--topics", str(topics),
                "--algorithm", algorithm, "--passes", str(passes), "--minibatch", "50",
                "--seed", "1", "--no-progress", "--heldout", "none"]) == 0
    return out


def test_grown_model_and_its_earlier_checkpoint_stay_readable(halves20, tmp_path, capsys):
    """Item 1 (main: report/export/evaluate refused the grown model's own shards, the
    pre-update checkpoint could not be opened)."""
    h = halves20
    model = fresh_model(h, "grown")
    before = [c.path for c in CheckpointStore(model).list_checkpoints()]
    v0 = Vocabulary.read(os.path.join(model, "vocab.tsv"))
    assert cli(["train", "--update", "--grow-vocab", "--input", h["b_path"], "--output", model,
                "--no-progress"]) == 0
    grown = Vocabulary.read(os.path.join(model, "vocab.tsv"))
    assert len(grown) > len(v0) and grown.tokens[:len(v0)] == v0.tokens
    ds_b = str(tmp_path / "ds-b")          # shards of the grown vocabulary
    assert cli(["vectorize", "--input", h["b_path"], "--output", ds_b, "--vocab",
                os.path.join(model, "vocab.tsv")]) == 0
    capsys.readouterr()
    for target in [model] + before:
        tag = os.path.basename(target)
        for argv in (["topics", "--model", target, "--top", "5"],
                     ["report", "--model", target, "--output", str(tmp_path / (tag + ".html"))],
                     ["export", "--model", target, "--format", "gensim", "--output",
                      str(tmp_path / (tag + ".gensim"))],
                     ["evaluate", "--model", target, "--shards",
                      os.path.join(h["ds_a"], "train")]):
            rc = cli(argv)
            err = capsys.readouterr().err
            assert rc == 0, "%s: %s" % (" ".join(argv), err[-2000:])
    # the grown model reads the new vocabulary's shards too, its evolution table included
    for argv in (["report", "--model", model, "--shards", ds_b, "--output",
                  str(tmp_path / "new.html")],
                 ["evaluate", "--model", model, "--shards", os.path.join(ds_b, "train")]):
        rc = cli(argv)
        err = capsys.readouterr().err
        assert rc == 0, "%s: %s" % (" ".join(argv), err[-2000:])
    # a model loaded from the earlier checkpoint still opens in Python
    old = ldabeam.load(before[-1])
    assert old.n_words == len(v0)
    # a damaged newest (grown) checkpoint falls back to the pre-update one, whose vocabulary
    # is the prefix of vocab.tsv (main: "vocab.tsv has vocabulary hash ... but the model was
    # trained with ...")
    newest = CheckpointStore(model).list_checkpoints()[-1].path
    assert newest not in before
    arrays = [os.path.join(d, f) for d, _, fs in os.walk(newest) for f in fs
              if f.endswith(".npy")]
    big = max(arrays, key=os.path.getsize)
    with open(big, "r+b") as f:
        f.truncate(os.path.getsize(big) // 2)
    capsys.readouterr()
    assert cli(["topics", "--model", model, "--top", "5"]) == 0, capsys.readouterr().err[-2000:]
    fell_back = ldabeam.load(model)
    assert fell_back.n_words == len(v0) and fell_back.checkpoint == before[-1]


def test_words_common_in_the_new_documents_are_added(halves20, caplog):
    """Item 2 (main: no_above applied to the new batch alone dropped a word every new document
    holds: "0 added")."""
    h = halves20
    m = ldabeam.load(fresh_model(h, "common"))
    news = [{"id": "n%d" % i, "text": r["text"] + " zorblaxq zorblaxq zorblaxq quuxifyr "
             "quuxifyr"} for i, r in enumerate(h["b"][:30])]
    summary = m.update(news, passes=1, grow_vocab=True)
    assert {"zorblaxq", "quuxifyr"} <= set(m.vocabulary)
    assert summary["words_added"] >= 2 and summary["words_kept_out"] == 0
    # a cap reached says how many words it kept out, and how to raise it
    m2 = ldabeam.load(fresh_model(h, "capped"))
    caplog.clear()
    summary = m2.update(news, passes=1, grow_vocab=True, keep_n=m2.n_words + 1)
    assert summary["words_added"] == 1 and summary["words_kept_out"] >= 1
    assert "keep_n" in caplog.text and "kept them out" in caplog.text


@pytest.mark.slow
def test_update_weighs_new_documents_by_their_share(halves20):
    """Item 3 (main: the new documents were the whole corpus; no corpus_size): the default
    weighs them by their share of what the model has seen, and the old newsgroups' held-out
    score drops less than with ``corpus_size`` = the new documents."""
    h = halves20
    base = fresh_model(h, "weigh", algorithm="online-vb", topics=10, passes=2)
    old_groups = {r["id"].split("/")[-2] for r in h["a"]}
    old_test = [r for r in h["test"] if r["id"].split("/")[-2] in old_groups]
    ref = ldabeam.load(base)
    pre = ref._prep.pre
    vocab = set(ref.vocabulary)
    toks = [[t for t in pre.tokens(r["text"]) if t in vocab] for r in old_test]
    ids = [r["id"] for r in old_test]
    score0 = completion(ref, toks, ids)
    new = [{"id": r["id"], "text": r["text"]} for r in h["b"]
           if r["id"].split("/")[-2] not in old_groups]
    scores, weights = {}, {}
    for name, kw in (("default", {}), ("whole", {"corpus_size": len(new)})):
        m = ldabeam.load(base)
        s = m.update(new, passes=2, **kw)
        weights[name] = s["weight"]
        scores[name] = completion(m, toks, ids)
    n_seen = len(h["a"])
    assert weights["whole"] == pytest.approx(1.0, abs=0.01)
    assert weights["default"] == pytest.approx(len(new) / (n_seen + len(new)), abs=0.05)
    drop_default, drop_whole = score0 - scores["default"], score0 - scores["whole"]
    assert drop_default < drop_whole, (score0, scores)
    assert drop_default < 0.1, (score0, scores)
