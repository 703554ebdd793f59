"""`import ldabeam`: a CLI-trained model loaded as a Python object gives the θ `ldabeam infer
--input` writes, lists the topics `ldabeam topics` lists, saves in the CLI's directory format,
and is updated with new documents (online VB and SCVB0) and new words; the scikit-learn
estimators save to and load from the same format.

Models are trained by the command line on the bundled Wikipedia sample; the new documents are
20 Newsgroups posts (../shared/data)."""
import json
import math
import os

import numpy as np
import pytest

import ldabeam
from helpers.models import copy_model
from helpers.news20 import completion, halves, news20_posts
from ldabeam.model import _grown
from lda_core.errors import InputError, OutputError, UsageError
from pipelines.cli import main as cli_main
from pipelines.infer import read_theta
from pipelines.ingest import dataset
from pipelines.ingest import manifest
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest.tokenize import tokenize
from pipelines.ingest.vectorize import VectorizeOptions, vectorize

K = 8


def cli_model(ds, out, algorithm, *extra):
    assert cli_main(["train", "--shards", ds, "--output", out, "--topics", str(K),
                     "--algorithm", algorithm, "--no-progress"] + list(extra)) == 0
    return out


@pytest.fixture(scope="module")
def wiki_ds(wiki_sample, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("lib") / "wiki")
    vectorize(VectorizeOptions(inputs=[wiki_sample], output=out, holdout_fraction=0.1))
    return out


@pytest.fixture(scope="module")
def vb_model(wiki_ds, tmp_path_factory):
    return cli_model(wiki_ds, str(tmp_path_factory.mktemp("lib") / "vb"), "online-vb",
                     "--passes", "2", "--minibatch", "32")


@pytest.fixture(scope="module")
def scvb0_model(wiki_ds, tmp_path_factory):
    return cli_model(wiki_ds, str(tmp_path_factory.mktemp("lib") / "scvb0"), "scvb0",
                     "--passes", "1", "--minibatch", "30")


@pytest.fixture(scope="module")
def records(news20_tar):
    return [{"id": "news-%d" % i, "text": t} for i, t in enumerate(p.text for p in news20_posts(news20_tar, "test", limit=30))]


def infer_cli(model, records, tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = str(tmp_path / "theta")
    assert cli_main(["infer", "--model", model, "--input", str(src), "--format", "jsonl",
                     "--output", out]) == 0
    t = read_theta(out)
    return dict(zip(t.column("doc_id").to_pylist(), np.array(t.column("theta").to_pylist())))


def log_lik(model, docs):
    """Σ n_dw log Σ_k θ_dk φ_kw / Σ n_dw over the known words of ``docs`` (token lists)."""
    theta = model.transform(docs)
    phi = model.topic_word()
    index = {t: i for i, t in enumerate(model.vocabulary)}
    total = n = 0.0
    for d, toks in enumerate(docs):
        ids = [index[t] for t in toks if t in index]
        if ids:
            total += float(np.log(theta[d] @ phi[:, ids]).sum())
            n += len(ids)
    return total / n


@pytest.mark.slow
@pytest.mark.parametrize("which", ["vb_model", "scvb0_model"])
def test_transform_equals_infer_input(which, records, tmp_path, request):
    model = request.getfixturevalue(which)
    m = ldabeam.load(model)
    assert m.n_topics == K and len(m.vocabulary) == m.n_words
    theta = m.transform(records)
    assert theta.shape == (len(records), K)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, atol=1e-9)
    cli = infer_cli(model, records, tmp_path)
    assert len(cli) == len(records)            # every post has known words
    diff = max(np.abs(cli[r["id"]] - theta[i]).max() for i, r in enumerate(records))
    assert diff <= 1e-5


@pytest.mark.slow
def test_documents_in_every_form_give_the_same_theta(vb_model, records):
    m = ldabeam.load(vb_model)
    ids = [r["id"] for r in records]
    texts = [r["text"] for r in records]
    ref = m.transform(records)
    np.testing.assert_array_equal(m.transform(texts, ids=ids), ref)
    tokens = [tokenize(t) for t in texts]          # the model's settings are the defaults
    np.testing.assert_array_equal(m.transform(tokens, ids=ids), ref)
    index = {t: i for i, t in enumerate(m.vocabulary)}
    rows = []
    for i, toks in zip(ids, tokens):
        u, c = np.unique([index[t] for t in toks if t in index], return_counts=True)
        rows.append({"doc_id": i, "word_ids": u.tolist(), "counts": c.tolist()})
    np.testing.assert_array_equal(m.transform(rows), ref)
    # a document's θ does not depend on the others transformed with it
    np.testing.assert_array_equal(m.transform(texts[3:5]), m.transform(texts)[3:5])


@pytest.mark.slow
def test_load_forms_and_errors(vb_model, records, tmp_path):
    m = ldabeam.load(vb_model)
    ckpt = m.checkpoint
    assert os.path.basename(ckpt).startswith("step-")
    ref = m.transform(records[:5])
    for path in (ckpt, os.path.join(ckpt, "state.json")):
        np.testing.assert_array_equal(ldabeam.load(path).transform(records[:5]), ref)
    with pytest.raises(InputError, match="does not exist"):
        ldabeam.load(str(tmp_path / "nothing"))
    with pytest.raises(InputError, match="list of documents"):
        m.transform("one string")
    with pytest.raises(InputError, match="document 1"):
        m.transform(["fine", 42])


@pytest.mark.slow
def test_top_words_and_topic_word_match_cli_topics(vb_model, capsys):
    m = ldabeam.load(vb_model)
    phi = m.topic_word()
    assert phi.shape == (K, m.n_words)
    np.testing.assert_allclose(phi.sum(axis=1), 1.0)
    capsys.readouterr()
    assert cli_main(["topics", "--model", vb_model, "--top", "7", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    ours = m.top_words(7)
    assert [[w for w, _ in t] for t in ours] == [t["words"] for t in listed]
    np.testing.assert_allclose([[p for _, p in t] for t in ours],
                               [t["weights"] for t in listed], rtol=1e-12)
    with pytest.raises(UsageError):
        m.top_words(0)


@pytest.mark.slow
def test_save_is_read_by_the_commands(vb_model, records, tmp_path, capsys):
    m = ldabeam.load(vb_model)
    out = str(tmp_path / "saved")
    path = m.save(out)
    assert path.startswith(out) and os.path.exists(os.path.join(out, "vocab.tsv"))
    assert os.path.exists(os.path.join(out, "tokenizer.json"))
    assert cli_main(["topics", "--model", out, "--top", "5"]) == 0
    cli = infer_cli(out, records[:6], tmp_path)
    ref = m.transform(records[:6])
    assert max(np.abs(cli[r["id"]] - ref[i]).max() for i, r in enumerate(records[:6])) <= 1e-5
    other = ldabeam.load(out)
    with pytest.raises(OutputError, match="another model"):
        other.save(vb_model)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["vb_model", "scvb0_model"])
def test_update_continues_the_schedule_and_fits_the_new_documents(which, records, tmp_path,
                                                                   request):
    model = copy_model(request.getfixturevalue(which), tmp_path)
    m = ldabeam.load(model)
    algo = m._algo
    S = m._info["run"]["minibatch"]
    step0 = m.step
    size0 = algo.corpus_size if which == "vb_model" else algo.corpus_tokens
    tokens = [tokenize(r["text"]) for r in records]
    before = log_lik(m, tokens)
    summary = m.update(records, passes=3)
    n = summary["documents"]
    assert n == len(records) and summary["steps"] == 3 * math.ceil(n / S)
    assert m.step == step0 + summary["steps"]          # t continues: ρ_t keeps decaying
    if which == "vb_model":
        assert m._algo.corpus_size == size0 + n         # D grows by the new documents
    else:
        assert m._algo.corpus_tokens == size0 + summary["tokens"]   # C grows by their tokens
    after = log_lik(m, tokens)
    assert after > before + 0.01
    # saved into its own directory: a new checkpoint the commands and load read
    m.save(model)
    again = ldabeam.load(model)
    assert again.step == m.step
    assert again._algo.docs_seen == m._algo.docs_seen
    assert getattr(again._algo, "tokens_seen", None) == getattr(m._algo, "tokens_seen", None)
    np.testing.assert_array_equal(again.transform(records[:4]), m.transform(records[:4]))
    assert again._info["updates"][-1]["documents"] == n


@pytest.mark.slow
def test_update_refusals_leave_the_model_unchanged(vb_model, records):
    m = ldabeam.load(vb_model)
    ref = m.transform(records[:3])
    step = m.step
    with pytest.raises(UsageError, match="passes"):
        m.update(records, passes=0)
    with pytest.raises(InputError, match="none of the 2 documents"):
        m.update(["zzqx qqzv", "vvxq"])
    with pytest.raises(UsageError, match="replay"):
        m.update(records, replay=1.5)
    with pytest.raises(UsageError, match="replay= > 0"):
        m.update(records, replay_shards="/nowhere")
    # training shards that are not there: one message naming the path and both fixes
    with pytest.raises(InputError) as e:
        m.update(records, replay=0.5, replay_shards="/nowhere/ds")
    msg = str(e.value)
    assert "/nowhere/ds" in msg and "replay=0" in msg and "--replay 0" in msg and \
        "--replay-shards" in msg and "\n" not in msg
    assert m.step == step
    np.testing.assert_array_equal(m.transform(records[:3]), ref)


@pytest.mark.slow
def test_grow_vocab_adds_pruned_new_words_at_the_prior(vb_model, wiki_ds, records, tmp_path,
                                                        capsys):
    model = copy_model(vb_model, tmp_path)
    m = ldabeam.load(model)
    V0 = m.n_words
    old_vocab = m.vocabulary
    man = manifest.read_manifest(wiki_ds)
    rules = man["settings"]["pruning"]
    # no_above counts over the documents the vocabulary was counted on plus the new ones
    # (issue 30, item 2), not over the new batch alone
    n_docs = man["vocabulary"]["num_docs"] + len(records)
    # the growth alone leaves every existing row as it was and puts new rows at the prior
    st0 = m._algo.to_state()
    grown = _grown(m._algo, 3, "h").to_state()
    np.testing.assert_array_equal(grown.arrays["ntilde"][:V0], st0.arrays["ntilde"])
    np.testing.assert_array_equal(grown.arrays["ntilde"][V0:], 0.0)
    np.testing.assert_array_equal(grown.arrays["ntilde_colsum"], st0.arrays["ntilde_colsum"])

    summary = m.update(records, passes=3, grow_vocab=True)
    added = m.vocabulary[V0:]
    assert summary["words_added"] == len(added) > 0
    assert m.vocabulary[:V0] == old_vocab
    df = {}
    for r in records:
        for t in set(tokenize(r["text"])):
            df[t] = df.get(t, 0) + 1
    for w in added:
        assert w not in old_vocab
        assert rules["no_below"] <= df[w] <= rules["no_above"] * n_docs
    # the words only the new documents have reach the topics: above their prior share
    phi = m.topic_word()
    prior = _grown(ldabeam.load(vb_model)._algo, len(added), "h").topic_word()[:, V0:]
    top = max(added, key=lambda w: df[w])
    j = m.vocabulary.index(top)
    assert phi[:, j].max() > 5 * prior[:, 0].max()
    rank = min(int((phi[k] > phi[k, j]).sum()) for k in range(K))
    assert rank < 0.05 * m.n_words           # among the top 5% of words of some topic
    m.save(model)
    assert cli_main(["topics", "--model", model, "--top", "5"]) == 0
    back = ldabeam.load(model)
    assert back.vocabulary == m.vocabulary and back.n_words == V0 + len(added)


@pytest.mark.slow
def test_object_store_round_trip(vb_model, records, store_root):
    m = ldabeam.load(vb_model)
    url = store_root + "/models/vb"
    path = m.save(url)
    assert path.startswith(url)
    back = ldabeam.load(url)
    assert back.vocabulary == m.vocabulary
    np.testing.assert_array_equal(back.transform(records[:5]), m.transform(records[:5]))


@pytest.mark.slow
@pytest.mark.parametrize("cls_name", ["OnlineLDA", "SCVB0LDA"])
def test_sklearn_estimators_save_and_load_the_model_format(cls_name, wiki_ds, tmp_path,
                                                            capsys):
    import scipy.sparse as sp
    docs = dataset.read_docbatch(dataset.resolve_shards(wiki_ds))
    vocab = Vocabulary.read(wiki_ds)
    X = sp.csr_matrix((docs.counts.astype(np.float64), docs.word_ids, docs.indptr),
                      shape=(docs.n_docs, len(vocab)))
    cls = getattr(ldabeam, cls_name)
    est = cls(n_components=5, max_iter=2, batch_size=32, random_state=0).fit(X)
    out = str(tmp_path / "est")
    est.save(out, vocabulary=vocab.tokens)
    back = cls.load(out)
    assert back.get_params() == est.get_params()
    np.testing.assert_array_equal(back.transform(X[:20]), est.transform(X[:20]))
    np.testing.assert_array_equal(back.components_, est.components_)
    assert cli_main(["topics", "--model", out, "--top", "5"]) == 0
    m = ldabeam.load(out)
    assert m.vocabulary == vocab.tokens
    np.testing.assert_allclose(m.topic_word(), est.algorithm_.topic_word())
    with pytest.raises(ValueError, match="vocabulary has 3 words"):
        est.save(str(tmp_path / "bad"), vocabulary=["a", "b", "c"])


@pytest.mark.slow
def test_sklearn_loads_a_cli_trained_model(vb_model, scvb0_model):
    est = ldabeam.OnlineLDA.load(vb_model)
    st = ldabeam.load(vb_model)._algo
    assert est.n_components == K and est.learning_offset == st.tau0 - 1
    assert est.learning_decay == st.kappa
    assert est.batch_size == ldabeam.load(vb_model)._info["run"]["minibatch"]
    np.testing.assert_allclose(est.components_, st.lambda_())
    with pytest.raises(ValueError, match="scvb0 model"):
        ldabeam.OnlineLDA.load(scvb0_model)
    s = ldabeam.SCVB0LDA.load(scvb0_model)
    assert s.components_.shape == (K, ldabeam.load(scvb0_model).n_words)


@pytest.mark.slow
def test_update_with_new_newsgroups_and_words_approaches_joint_training(news20_tar, tmp_path):
    """A model trained on the posts of the first newsgroups (tar order), updated with
    grow_vocab on those of the others, against one trained on both with the same passes:
    held-out document completion on the words both vocabularies hold, and the new words in
    the topics."""
    train, test = halves(news20_tar, 6)
    half = len(train) // 2
    a, b = train[:half], train[half:]

    def jsonl(name, recs):
        p = tmp_path / name
        p.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return str(p)

    prune = ["--no-below", "5", "--no-above", "0.5", "--stopwords", "gensim"]
    fit = ["--topics", "20", "--algorithm", "online-vb", "--passes", "2", "--minibatch",
           "128", "--seed", "1", "--no-progress"]
    for name, recs in (("a", a), ("ab", a + b)):
        assert cli_main(["vectorize", "--input", jsonl(name + ".jsonl", recs), "--output",
                         str(tmp_path / ("ds-" + name))] + prune) == 0
        assert cli_main(["train", "--shards", str(tmp_path / ("ds-" + name)), "--output",
                         str(tmp_path / ("m-" + name))] + fit) == 0
    joint = ldabeam.load(str(tmp_path / "m-ab"))
    m = ldabeam.load(str(tmp_path / "m-a"))
    V0 = m.n_words
    summary = m.update(b, passes=2, grow_vocab=True)
    added = m.vocabulary[V0:]
    assert summary["words_added"] == len(added) > 500
    both = set(m.vocabulary) & set(joint.vocabulary)
    pre = joint._prep.pre
    toks = [[t for t in pre.tokens(r["text"]) if t in both] for r in test]
    ids = [r["id"] for r in test]
    gap = completion(joint, toks, ids) - completion(m, toks, ids)
    assert gap <= 0.06
    tops = {w for t in m.top_words(20) for w, _ in t}
    assert len(tops & set(added)) >= 10
