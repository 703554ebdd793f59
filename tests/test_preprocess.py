"""Preprocessing that travels with the model: token pattern, combined stop lists, learned
phrases, segmenters, custom tokenizers; recorded by vectorize, copied into the model by train,
and reproduced exactly (or refused) by ``infer --input`` and
:class:`pipelines.ingest.tokenize.Preprocessor`; unknown settings and unknown tokens reported.
"""
import json
import os
import re
import shutil

import numpy as np
import pytest
from apache_beam.pvalue import TaggedOutput

from helpers.news20 import news20_posts

from lda_core.errors import InputError, UsageError
from pipelines.cli import main as cli_main
from pipelines.ingest import dataset
from pipelines.ingest import manifest
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest import vectorize_steps as vzs
from pipelines.ingest.phrases import PhraseTable, learn_phrases
from pipelines.infer import read_summary
from pipelines.ingest.tokenize import (DEFAULT, Preprocessor, TokenizerConfig, count_batch,
                                       load_stopwords, tokenize, tokenizer_record)


def news_bodies(tar_path, n, skip=0):
    """``(id, body)`` of ``n`` 20 Newsgroups posts (tar order, after ``skip``), headers cut."""
    return [(p.name.replace("/", "-"), p.body)
            for p in news20_posts(tar_path, skip=skip, limit=n)]


def write_jsonl(path, posts):
    with open(path, "w", encoding="utf-8") as f:
        for doc_id, text in posts:
            f.write(json.dumps({"id": doc_id, "text": text}) + "\n")
    return str(path)


def split_words(text):
    """A custom tokenizer (importable by name): lower-cased whitespace words of letters."""
    return [w for w in text.lower().split() if w.isalpha()]


# ----------------------------------------------------------------------------- units

def test_token_pattern_gives_whole_matches_on_real_text(news20_tar):
    posts = [t for _, t in news_bodies(news20_tar, 60)]
    pattern = r"[a-z0-9][a-z0-9+#.-]*[a-z0-9+#]"
    cfg = TokenizerConfig(token_pattern=pattern, max_len=20)
    n = 0
    for text in posts:
        want = [m.group(0) for m in re.finditer(pattern, text.lower()) if 2 <= len(m.group(0)) <= 20]
        assert tokenize(text, cfg) == want
        n += len(want)
    assert n > 5000
    assert any(re.search(r"\d", t) for t in tokenize(posts[0] + " c++ 3.14", cfg))
    bc = count_batch(posts, cfg)           # the batch path agrees with tokenize
    for d, text in enumerate(posts):
        from collections import Counter
        assert dict(bc.doc_counts(d)) == dict(Counter(tokenize(text, cfg)))


@pytest.mark.parametrize("pattern,why", [("[a-z", "not a valid"), ("[a-z]*", "empty string")])
def test_bad_token_pattern_is_one_usage_error(pattern, why):
    with pytest.raises(UsageError, match=why):
        TokenizerConfig(token_pattern=pattern).validate()


def test_stop_lists_combine(tmp_path):
    from gensim.parsing.preprocessing import STOPWORDS
    f = tmp_path / "extra.txt"
    f.write_text("# mine\nSubject\nwrites\n\n", encoding="utf-8")
    both = load_stopwords("gensim,%s" % f)
    assert both == frozenset(STOPWORDS) | {"subject", "writes"}
    assert load_stopwords("%s, gensim" % f) == both
    comma = tmp_path / "a,b.txt"                      # a file whose name holds a comma
    comma.write_text("alpha\n", encoding="utf-8")
    assert load_stopwords(str(comma)) == {"alpha"}
    with pytest.raises(ValueError, match="missing.txt"):
        load_stopwords("gensim,%s" % (tmp_path / "missing.txt"))


def test_phrase_table_applies_as_gensim_frozen_phrases(news20_tar):
    """The data-only table gives the tokens gensim's own frozen model gives, on real text."""
    from gensim.models.phrases import ENGLISH_CONNECTOR_WORDS, Phrases
    docs = [tokenize(t) for _, t in news_bodies(news20_tar, 400)]
    table = learn_phrases(docs, min_count=3, threshold=5.0)
    ref = Phrases(docs, min_count=3, threshold=5.0,
                  connector_words=ENGLISH_CONNECTOR_WORDS).freeze()
    assert len(table) == len(ref.phrasegrams) > 50
    restored = PhraseTable.from_record(json.loads(json.dumps(table.to_record())))
    joined = 0
    for toks in docs:
        out = restored.apply(toks)
        assert out == ref[toks]
        joined += sum("_" in t for t in out)
    assert joined > 100


def test_record_round_trip_and_refusals(tmp_path, news20_tar):
    docs = [tokenize(t) for _, t in news_bodies(news20_tar, 200)]
    cfg = TokenizerConfig(min_len=3, stopwords=load_stopwords("gensim"),
                          token_pattern=r"[a-z]+", phrases=learn_phrases(docs, 3, 5.0))
    rec = tokenizer_record(cfg, "gensim")
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"source": "x", "settings": rec}), encoding="utf-8")
    pre = Preprocessor.from_json(str(path))
    assert pre.known and pre.config == cfg
    assert Preprocessor.from_settings(rec).record() == rec
    # a custom tokenizer is recorded by name and never run from the record
    custom = tokenizer_record(TokenizerConfig(tokenizer=split_words))
    assert custom["custom_tokenizer"].endswith(":split_words")
    with pytest.raises(UsageError, match="custom tokenizer .*split_words.*tokenizer="):
        Preprocessor.from_settings(custom)
    assert Preprocessor.from_settings(custom, tokenizer=split_words).tokens("A b c1 Dd") == \
        ["a", "b", "dd"]
    with pytest.raises(UsageError, match="would not reproduce"):
        Preprocessor.from_settings(rec, tokenizer=split_words)
    # a record of before the stop-word list was kept, naming a file that is gone
    old = {k: v for k, v in rec.items() if k != "stopword_list"}
    old["stopwords"] = str(tmp_path / "gone.txt")
    with pytest.raises(UsageError, match="gone.txt"):
        Preprocessor.from_settings(old)
    bad = dict(rec, phrases={"version": 1, "phrasegrams": "x"})
    with pytest.raises(InputError, match="phrase table is malformed"):
        Preprocessor.from_settings(bad)
    path.write_bytes(b"\xff{")
    with pytest.raises(InputError, match="tokenizer.json"):
        Preprocessor.from_json(str(path))
    for unknown in (None, "unknown", {"tokens_from": "bag-of-words", "lowercase": True}):
        pre = Preprocessor.from_settings(unknown)
        assert not pre.known and pre.config == DEFAULT and pre.note


def test_count_rows_of_texts_and_of_token_lists(news20_tar):
    texts = [t for _, t in news_bodies(news20_tar, 50)]
    pre = Preprocessor(TokenizerConfig(stopwords=load_stopwords("gensim")))
    vocab = sorted({w for t in texts[:25] for w in pre.tokens(t)})
    from_texts = pre.count_rows(texts, vocab)
    from_lists = pre.count_rows([pre.tokens(t) for t in texts], vocab)
    assert len(from_texts.rows) == len(texts) and from_texts.unknown_tokens > 0
    for (a, b), (c, d) in zip(from_texts.rows, from_lists.rows):
        assert a.tolist() == c.tolist() and b.tolist() == d.tolist()
    assert (from_texts.n_tokens, from_texts.unknown_tokens) == \
        (from_lists.n_tokens, from_lists.unknown_tokens)
    assert 0 < from_texts.unknown_share < 1
    assert from_texts.to_docbatch().n_docs == len(texts)
    with pytest.raises(UsageError, match="not a mix"):
        pre.count_rows(["a text", ["tokens"]], vocab)


CJK_DOCS = ["我们今天在北京大学的图书馆里读了很多关于自然语言处理的书",
            "東京都に住んでいる友達と一緒に新しいレストランへ行きました"]


def test_unsegmented_cjk_documents_are_counted():
    fn = vzs._TokenizeFn(TokenizerConfig(), {0: 1})
    fn.start_bundle()
    items = [("doc", 0, i, "d%d" % i, None, None, t)
             for i, t in enumerate(CJK_DOCS + ["plain english words"])]
    list(fn.process(("batch", items)))
    stats = {o.value.value[0]: o.value.value[1] for o in fn.finish_bundle()
             if isinstance(o, TaggedOutput) and o.tag == vzs.STATS}
    assert stats["empty_documents"] == 2 and stats["empty_cjk_documents"] == 2


@pytest.mark.parametrize("name,doc,words", [("jieba", 0, ["北京大学", "图书馆"]),
                                            ("janome", 1, ["東京", "レストラン"])])
def test_segmenters(name, doc, words):
    pytest.importorskip(name, reason="pip install 'ldabeam[cjk]' for --segmenter %s" % name)
    cfg = TokenizerConfig(segmenter=name, min_len=1)
    toks = tokenize(CJK_DOCS[doc], cfg)
    assert all(w in toks for w in words) and len(toks) > 5
    assert Preprocessor.from_settings(tokenizer_record(cfg)).tokens(CJK_DOCS[doc]) == toks


# ----------------------------------------------------------------------------- end to end

def _theta_by_id(out):
    from pipelines.infer import read_theta
    t = read_theta(out)
    return {d: (np.asarray(th), n) for d, th, n in zip(t.column("doc_id").to_pylist(),
                                                      t.column("theta").to_pylist(),
                                                      t.column("n_tokens").to_pylist())}


def _api_theta(model, pre, posts):
    """θ of raw posts through the Preprocessor and the model's own E-step (as infer does)."""
    from pipelines.infer import infer_gamma, resolve_model
    from pipelines.training.beam_state import load_algorithm
    ref = resolve_model(model)
    vocab = Vocabulary.read(ref.vocab_path)
    cr = pre.count_rows([t for _, t in posts], vocab)
    keep = [i for i, (ids, _) in enumerate(cr.rows) if len(ids)]
    from lda_core.docbatch import DocBatch
    batch = DocBatch.from_rows([cr.rows[i] for i in keep], doc_ids=[posts[i][0] for i in keep])
    gamma = infer_gamma(load_algorithm(ref.state_path), batch, "infer")
    theta = gamma / gamma.sum(axis=1, keepdims=True)
    return {posts[i][0]: (theta[j], int(cr.rows[i][1].sum())) for j, i in enumerate(keep)}, cr


@pytest.fixture(scope="module")
def phrase_model(news20_tar, tmp_path_factory):
    """20 Newsgroups posts vectorised with learned phrases and gensim's + a file's stop
    words, and an online-VB model trained on them."""
    tmp = tmp_path_factory.mktemp("phrases")
    posts = news_bodies(news20_tar, 560)
    train_jsonl = write_jsonl(tmp / "train.jsonl", posts[:480])
    extra = tmp / "extra.txt"
    extra.write_text("writes\narticle\n", encoding="utf-8")
    ds, model = str(tmp / "ds"), str(tmp / "model")
    assert cli_main(["vectorize", "--input", train_jsonl, "--output", ds, "--phrases",
                     "--phrases-min-count", "3", "--stopwords", "gensim,%s" % extra,
                     "--no-below", "2", "--holdout-fraction", "0.1"]) == 0
    assert cli_main(["train", "--shards", ds, "--output", model, "--topics", "6",
                     "--algorithm", "online-vb", "--minibatch", "60", "--passes", "1",
                     "--seed", "1", "--no-progress"]) == 0
    return tmp, posts, ds, model


@pytest.mark.slow
def test_phrases_are_recorded_and_reproduce_the_training_rows(phrase_model):
    tmp, posts, ds, model = phrase_model
    settings = manifest.read_manifest(ds)["settings"]
    table = settings["phrases"]
    assert len(table["phrasegrams"]) > 50 and "writes" in settings["stopword_list"]
    vocab = Vocabulary.read(ds)
    phrase_words = [t for t in vocab.tokens if "_" in t and t in dict(table["phrasegrams"])]
    assert len(phrase_words) > 20
    assert manifest.read_tokenizer(model)["phrases"] == table
    # the Preprocessor of the model gives every training and held-out row exactly
    pre = Preprocessor.from_model_dir(model)
    assert pre.known and len(pre.config.phrases) == len(table["phrasegrams"])
    from pipelines.infer import resolve_model          # one checkpoint directory works too
    assert Preprocessor.from_model_dir(resolve_model(model).state_path).config == pre.config
    text = dict(posts)
    for split in (dataset.TRAIN_SPLIT, dataset.HELDOUT_SPLIT):
        batch = dataset.read_docbatch(dataset.resolve_shards(ds, split))
        cr = pre.count_rows([text[d] for d in batch.doc_ids], vocab)
        for d, (ids, counts) in enumerate(cr.rows):
            a, b = batch.indptr[d], batch.indptr[d + 1]
            assert ids.tolist() == batch.word_ids[a:b].tolist()
            assert counts.tolist() == batch.counts[a:b].tolist()


@pytest.mark.slow
def test_infer_and_preprocessor_reapply_phrases_and_they_change_theta(phrase_model, capsys):
    tmp, posts, ds, model = phrase_model
    new = posts[480:]
    new_jsonl = write_jsonl(tmp / "new.jsonl", new)
    out = str(tmp / "theta")
    assert cli_main(["infer", "--model", model, "--input", new_jsonl, "--output", out]) == 0
    printed = capsys.readouterr()
    assert re.search(r"unknown tokens: \d+ of \d+ \(\d+\.\d%\)", printed.out)
    assert "not in the model's vocabulary" not in printed.err
    summary = read_summary(out)
    assert summary["tokenizer"] == "recorded" and summary["phrases"] > 50
    cli = _theta_by_id(out)
    api, cr = _api_theta(model, Preprocessor.from_model_dir(model), new)
    assert set(cli) == set(api) and len(cli) > 60
    for d, (theta, n) in cli.items():
        assert n == api[d][1]
        assert np.max(np.abs(theta - api[d][0])) <= 1e-5
    assert cr.unknown_tokens == summary["oov_tokens_dropped"]
    # the same model without its phrase table: other tokens, other θ
    bare = str(tmp / "bare")
    shutil.copytree(model, bare)
    tok_path = os.path.join(bare, manifest.TOKENIZER_FILE)
    tok = json.load(open(tok_path))
    tok["settings"]["phrases"] = None
    json.dump(tok, open(tok_path, "w"))
    out2 = str(tmp / "theta-bare")
    assert cli_main(["infer", "--model", bare, "--input", new_jsonl, "--output", out2]) == 0
    without = _theta_by_id(out2)
    changed = [d for d in cli if d in without and cli[d][1] != without[d][1]]
    assert len(changed) > 10
    assert max(np.max(np.abs(cli[d][0] - without[d][0])) for d in changed) > 0.02


@pytest.mark.slow
def test_custom_tokenizer_model_refuses_raw_text_without_it(news20_tar, tmp_path, capsys):
    from pipelines.ingest.vectorize import VectorizeOptions, vectorize
    posts = news_bodies(news20_tar, 200, skip=700)
    src = write_jsonl(tmp_path / "posts.jsonl", posts)
    ds, model = str(tmp_path / "ds"), str(tmp_path / "model")
    vectorize(VectorizeOptions(inputs=[src], output=ds, no_below=2, tokenizer=split_words))
    assert manifest.read_manifest(ds)["settings"]["custom_tokenizer"].endswith(":split_words")
    assert cli_main(["train", "--shards", ds, "--output", model, "--topics", "4",
                     "--algorithm", "online-vb", "--passes", "1", "--no-progress"]) == 0
    capsys.readouterr()
    out = str(tmp_path / "theta")
    assert cli_main(["infer", "--model", model, "--input", src, "--output", out]) == 2
    err = capsys.readouterr().err
    assert "custom tokenizer" in err and "split_words" in err and len(err.splitlines()) == 1
    assert not os.path.exists(out)
    with pytest.raises(UsageError, match="split_words"):
        Preprocessor.from_model_dir(model)
    pre = Preprocessor.from_model_dir(model, tokenizer=split_words)
    batch = dataset.read_docbatch(dataset.resolve_shards(ds))
    cr = pre.count_rows([dict(posts)[d] for d in batch.doc_ids], Vocabulary.read(ds))
    assert np.concatenate([i for i, _ in cr.rows]).tolist() == batch.word_ids.tolist()
    from pipelines.infer import InferOptions, infer
    s = infer(InferOptions(model=model, inputs=[src], output=out, tokenizer=split_words))
    assert s["tokenizer"] == "recorded" and s["documents"] == len(posts)


def _gensim_phrases_mm(posts, folder):
    """A corpus as a gensim user makes it: simple_preprocess, stop words out, Phrases,
    Dictionary.filter_extremes, MmCorpus + the dictionary as text beside it."""
    from gensim.corpora import Dictionary, MmCorpus
    from gensim.models.phrases import Phrases
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.utils import simple_preprocess
    docs = [[w for w in simple_preprocess(t) if w not in STOPWORDS] for _, t in posts]
    bigram = Phrases(docs, min_count=3, threshold=5.0).freeze()
    docs = [bigram[d] for d in docs]
    dictionary = Dictionary(docs)
    dictionary.filter_extremes(no_below=2, no_above=0.5)
    path = os.path.join(folder, "corpus.mm")
    MmCorpus.serialize(path, [dictionary.doc2bow(d) for d in docs])
    dictionary.save_as_text(path + ".dict")
    return path


@pytest.mark.slow
def test_bag_of_words_model_warns_and_reports_unknown_tokens(news20_tar, tmp_path, capsys,
                                                             caplog):
    """The mm/Phrases repro: a model trained from a gensim Phrases corpus brought in with
    --format mm; raw text tokenized without its phrases or stop words loses many tokens as
    unknown -- infer says how many and warns that the settings are unknown."""
    posts = news_bodies(news20_tar, 400)
    mm = _gensim_phrases_mm(posts[:300], str(tmp_path))
    ds, model = str(tmp_path / "ds"), str(tmp_path / "model")
    assert cli_main(["vectorize", "--input", mm, "--format", "mm", "--output", ds]) == 0
    assert manifest.read_manifest(ds)["settings"]["tokens_from"] == "bag-of-words"
    assert cli_main(["train", "--shards", ds, "--output", model, "--topics", "4",
                     "--algorithm", "online-vb", "--passes", "1", "--no-progress"]) == 0
    capsys.readouterr()
    src = write_jsonl(tmp_path / "new.jsonl", posts[300:])
    out = str(tmp_path / "theta")
    assert cli_main(["infer", "--model", model, "--input", src, "--output", out]) == 0
    printed = capsys.readouterr()
    s = read_summary(out)
    assert s["tokenizer"].startswith("unknown") and "bag-of-words" in s["tokenizer"]
    assert s["oov_tokens_dropped"] > 1000
    assert "unknown tokens: %d of %d" % (s["oov_tokens_dropped"],
                                         s["oov_tokens_dropped"] + s["tokens"]) in printed.out
    assert "tokenizer settings are unknown" in caplog.text
    assert "not in the model's vocabulary" in printed.err      # the share is large


@pytest.mark.slow
def test_model_from_loose_shards_warns_that_its_tokenizer_is_unknown(news20_tar, tmp_path,
                                                                     caplog):
    """Issue 22 defect 6: a model trained from shards with no dataset around them records no
    tokenizer settings; raw-text infer used the defaults silently."""
    posts = news_bodies(news20_tar, 200, skip=1200)
    src = write_jsonl(tmp_path / "posts.jsonl", posts)
    ds = str(tmp_path / "ds")
    assert cli_main(["vectorize", "--input", src, "--output", ds, "--no-below", "2",
                     "--no-lowercase"]) == 0
    loose = tmp_path / "loose"
    loose.mkdir()
    for f in os.listdir(os.path.join(ds, "train")):
        shutil.copy(os.path.join(ds, "train", f), loose / f)
    model = str(tmp_path / "model")
    shutil.copy(os.path.join(ds, dataset.VOCAB_FILE), tmp_path / "vocab.tsv")
    assert cli_main(["train", "--shards", str(loose / "*.parquet"), "--output", model,
                     "--topics", "4", "--algorithm", "online-vb", "--passes", "1",
                     "--no-progress", "--unverified"]) == 0
    caplog.clear()
    out = str(tmp_path / "theta")
    assert cli_main(["infer", "--model", model, "--input", src, "--output", out]) == 0
    assert "tokenizer settings are unknown" in caplog.text
    assert read_summary(out)["tokenizer"].startswith("unknown")


def test_recorded_segmenter_that_is_not_installed_is_refused(monkeypatch):
    import sys
    from pipelines.ingest import tokenize as tk
    rec = tokenizer_record(TokenizerConfig(min_len=1))
    rec["segmenter"] = "jieba"
    monkeypatch.setitem(sys.modules, "jieba", None)      # import jieba -> ImportError
    tk.segmenter_function.cache_clear()
    try:
        with pytest.raises(UsageError, match=r"pip install 'ldabeam\[cjk\]'"):
            Preprocessor.from_settings(rec, where="model/tokenizer.json")
    finally:
        tk.segmenter_function.cache_clear()


@pytest.mark.slow
def test_stream_tokenizes_text_messages_with_the_models_preprocessing(phrase_model):
    """`ldabeam stream` updating the model with text messages applies its phrases and stop
    words (it used fixed default settings)."""
    import argparse
    from pipelines.commands import stream as cmd
    from pipelines.streaming.stream_parse import parse_document
    tmp, posts, ds, model = phrase_model
    copy = str(tmp / "stream-model")
    shutil.copytree(model, copy)
    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    args, _ = p.parse_known_args(["--model", copy, "--input-glob", str(tmp / "in" / "*.jsonl")])
    setup = cmd.prepare(args)
    assert setup.parse.tokenizer == Preprocessor.from_model_dir(model).config
    vocab = Vocabulary.read(ds)
    phrase = next(t for t in vocab.tokens if t.count("_") == 1 and t.replace("_", "").isalpha())
    text = "%s %s" % (phrase.replace("_", " "), phrase.replace("_", " "))
    doc, dead, _ = parse_document(json.dumps({"doc_id": "x", "text": text}), vocab.index,
                                  setup.parse)
    assert dead is None
    assert np.frombuffer(doc[1], np.int32).tolist() == [vocab.index[phrase]]
    assert np.frombuffer(doc[2], np.int32).tolist() == [2]


@pytest.mark.parametrize("argv,why", [
    (["--phrases-threshold", "2", "--phrases-scoring", "npmi"], r"\[-1, 1\] with npmi"),
    (["--phrases-min-count", "0"], "phrases-min-count"),
    (["--phrases-sample", "0"], "phrases-sample"),
    (["--token-pattern", "(a|"], "token-pattern"),
])
def test_bad_preprocessing_options_fail_before_the_output_is_touched(tmp_path, capsys, argv,
                                                                    why, wiki_sample):
    out = tmp_path / "ds"
    assert cli_main(["vectorize", "--input", wiki_sample, "--output", str(out), "--phrases"]
                    + argv) == 2
    err = capsys.readouterr().err
    assert re.search(why, err) and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.slow
def test_vectorize_new_documents_with_a_models_preprocessing(phrase_model, capsys):
    """--tokenizer-from MODEL with the model's --vocab: new documents get the rows the model's
    Preprocessor gives (phrases, stop words), and the record travels on."""
    tmp, posts, ds, model = phrase_model
    new_jsonl = write_jsonl(tmp / "new-for-vocab.jsonl", posts[480:])
    out = str(tmp / "new-ds")
    vocab_path = os.path.join(model, dataset.VOCAB_FILE)
    assert cli_main(["vectorize", "--input", new_jsonl, "--output", str(tmp / "clash"),
                     "--tokenizer-from", model, "--stopwords", "gensim"]) == 2
    assert "leave out --stopwords" in capsys.readouterr().err
    assert cli_main(["vectorize", "--input", new_jsonl, "--output", out, "--vocab", vocab_path,
                     "--tokenizer-from", model]) == 0
    assert manifest.read_manifest(out)["settings"]["phrases"] == \
        manifest.read_manifest(ds)["settings"]["phrases"]
    pre = Preprocessor.from_model_dir(model)
    assert Preprocessor.from_dataset(out).config == pre.config
    batch = dataset.read_docbatch(dataset.resolve_shards(out))
    text = dict(posts)
    cr = pre.count_rows([text[d] for d in batch.doc_ids], Vocabulary.read(vocab_path))
    for d, (ids, counts) in enumerate(cr.rows):
        a, b = batch.indptr[d], batch.indptr[d + 1]
        assert ids.tolist() == batch.word_ids[a:b].tolist()
        assert counts.tolist() == batch.counts[a:b].tolist()
    assert sum("_" in t for t in Vocabulary.read(vocab_path).tokens) > 20
