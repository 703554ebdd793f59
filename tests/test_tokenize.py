"""Tokenizer: gensim-compatible output, options, validation, stop words."""
import pickle
import random

import pytest
from gensim.parsing.preprocessing import STOPWORDS
from gensim.utils import deaccent as gensim_deaccent
from gensim.utils import tokenize as gensim_tokenize

from pipelines.ingest.input_files import InputError
from pipelines.ingest.tokenize import (DEFAULT, TokenizerConfig, config_from_options, deaccent,
                                       load_stopwords, tokenize)


def gensim_reference(text, cfg):
    """gensim's rule (utils.tokenize + wikicorpus.tokenize's length and '_' filters)."""
    return [t for t in gensim_tokenize(text, lower=cfg.lowercase, deacc=cfg.deaccent)
            if cfg.min_len <= len(t) <= cfg.max_len and not t.startswith("_")
            and t not in cfg.stopwords]


def random_texts(n, seed=0):
    rng = random.Random(seed)
    ranges = [(32, 0x24F), (0x300, 0x36F), (0x370, 0x3000), (0x10000, 0x1F000)]
    for _ in range(n):
        yield "".join(chr(rng.randint(*rng.choice(ranges)))
                      for _ in range(rng.randint(0, 40)))


def test_defaults_are_gensims():
    assert DEFAULT == TokenizerConfig(lowercase=True, deaccent=True, min_len=2, max_len=15,
                                      stopwords=frozenset())
    text = ("Šéf chomutovských komunistů dostal poštou bílý prášek, "
            "300 tisíc_ x _under naïve")
    assert tokenize(text) == ["sef", "chomutovskych", "komunistu", "dostal", "postou", "bily",
                              "prasek", "tisic_", "naive"]


def test_long_runs_are_dropped_not_truncated():
    # a 16-letter run yields nothing (gensim filters whole tokens, it does not cut them)
    assert tokenize("abcdefghijklmnop abcdefghijklmno") == ["abcdefghijklmno"]
    assert tokenize("a1b2cc") == ["cc"]         # digits split tokens, 1-letter runs dropped


@pytest.mark.parametrize("cfg", [DEFAULT, TokenizerConfig(deaccent=False),
                                 TokenizerConfig(lowercase=False, min_len=1, max_len=3),
                                 TokenizerConfig(stopwords=frozenset(["the", "and"]))])
def test_matches_gensim_on_random_unicode(cfg):
    for text in random_texts(1500):
        assert tokenize(text, cfg) == gensim_reference(text, cfg), repr(text)
        assert deaccent(text) == gensim_deaccent(text)


def test_matches_gensim_on_real_text(news20_tar):
    import tarfile
    texts = []
    with tarfile.open(news20_tar, "r|gz") as tar:       # streamed: stop after 300 posts
        for m in tar:
            if m.isfile():
                texts.append(tar.extractfile(m).read().decode("latin-1"))
            if len(texts) == 300:
                break
    n = 0
    for cfg in (DEFAULT, TokenizerConfig(deaccent=False)):
        for text in texts:
            got = tokenize(text, cfg)
            assert got == gensim_reference(text, cfg)
            n += len(got)
    assert n > 10000


def test_mostly_ascii_text_with_accents():
    # English text with a few accented words takes the run-by-run de-accent path
    rng = random.Random(3)
    words = ["café", "naïve", "résumé", "Zürich", "déjà", "the", "cat", "señor",
             "Ångström",
             "e\u0301te\u0301", "x\u0308", "über", "plain", "words", "ﬁnance", "Æsir"]
    for _ in range(300):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 200)))
        assert deaccent(text) == gensim_deaccent(text)
        assert tokenize(text) == gensim_reference(text, DEFAULT)


def test_stopwords_option(tmp_path):
    assert load_stopwords(None) == frozenset()
    assert load_stopwords("none") == frozenset()
    assert load_stopwords("gensim") == frozenset(STOPWORDS)
    p = tmp_path / "stop.txt"
    p.write_text("# my list\nThe\n\n  and \n", encoding="utf-8")
    sw = load_stopwords(str(p))
    assert sw == frozenset(["the", "and"])
    cfg = TokenizerConfig(stopwords=sw)
    assert tokenize("The cat and the hat", cfg) == ["cat", "hat"]
    with pytest.raises(InputError, match="nope.txt"):
        load_stopwords(str(tmp_path / "nope.txt"))
    cfg = config_from_options(stopwords="gensim", min_len=3)
    assert "the" in cfg.stopwords and cfg.min_len == 3


def test_config_accepts_any_iterable_and_pickles():
    cfg = TokenizerConfig(stopwords=["a", "b"])
    assert isinstance(cfg.stopwords, frozenset)
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    hash(cfg)


@pytest.mark.parametrize("kwargs, field", [
    (dict(min_len=0), "min_len"), (dict(min_len=5, max_len=4), "max_len"),
    (dict(max_len=10 ** 6), "max_len"), (dict(min_len=2.5), "min_len"),
    (dict(lowercase="yes"), "lowercase"), (dict(stopwords=frozenset([1])), "stopwords"),
])
def test_validate_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TokenizerConfig(**kwargs).validate()
    if "stopwords" not in kwargs:   # config_from_options takes a stop-word spec, not a set
        with pytest.raises(ValueError, match=field):
            config_from_options(**kwargs)


def test_empty_and_whitespace():
    assert tokenize("") == []
    assert tokenize("  \n\t 12 34 ") == []


# ----------------------------------------------------------------------------- batches

BATCH_CONFIGS = [DEFAULT, TokenizerConfig(deaccent=False),
                 TokenizerConfig(lowercase=False, min_len=1, max_len=4),
                 TokenizerConfig(min_len=3, max_len=8, stopwords=frozenset(["the", "and", "cafe"]))]

EDGE_TEXTS = [
    "", "   ", "\n", "x", "ab", "_ab ab_ a_b __ _", "a1b2cc 300 tisíc_ x2y", "don't can't o'neil",
    "Café naïve ÉCOLE Zürich straße señor déjà", "\u212a\u212b Kelvin \u0130stanbul",
    "ΣΑΣ σας Ǆemal ǅemal", "abcdefghijklmnop abcdefghijklmno " + "z" * 40,
    "Привет мир, это тест", "日本語のテキスト and english", "tab\tsep\x00nul\x7fdel",
    "mixed ascii words then ünïcödé then ascii again", "\u00a0nbsp\u2009thin space",
]


def _reference_batch(texts, cfg):
    from collections import Counter
    per_doc = [tokenize(t, cfg) for t in texts]
    return per_doc, [Counter(toks) for toks in per_doc]


def _check_batch(texts, cfg):
    from pipelines.ingest.tokenize import count_batch, tokenize_batch
    per_doc, counters = _reference_batch(texts, cfg)
    bc = count_batch(texts, cfg)
    assert bc.n_docs == len(texts)
    for d, c in enumerate(counters):
        assert dict(bc.doc_counts(d)) == dict(c), repr(texts[d][:80])
    assert bc.doc_lengths().tolist() == [len(t) for t in per_doc]
    if not cfg.stopwords:      # tokenize_batch keeps stop words; with none it is tokenize
        tokens, doc = tokenize_batch(texts, cfg)
        assert tokens.to_pylist() == [w for toks in per_doc for w in toks]
        assert doc.tolist() == [i for i, toks in enumerate(per_doc) for _ in toks]
    return sum(len(t) for t in per_doc)


@pytest.mark.parametrize("cfg", BATCH_CONFIGS)
def test_batch_tokenizer_equals_tokenize_on_edge_cases_and_random_unicode(cfg):
    _check_batch(EDGE_TEXTS, cfg)
    _check_batch(list(random_texts(400, seed=7)) + EDGE_TEXTS, cfg)
    for text in EDGE_TEXTS:                      # one document alone, ASCII or not
        _check_batch([text], cfg)
    _check_batch([], cfg)


@pytest.mark.parametrize("cfg", BATCH_CONFIGS)
def test_batch_tokenizer_equals_tokenize_on_real_text(news20_tar, wiki_sample, cfg):
    """Token for token on 20 Newsgroups posts (raw, headers included: e-mail addresses,
    numbers, underscores, apostrophes, a few Latin-1 accented letters) and on the bundled
    sample's articles after markup stripping."""
    import tarfile
    from pipelines.ingest import text_sources as ts
    from pipelines.ingest import input_files
    texts = []
    with tarfile.open(news20_tar, "r|gz") as tar:
        for m in tar:
            if m.isfile():
                texts.append(tar.extractfile(m).read().decode("latin-1"))
            if len(texts) == 800:
                break
    assert any(not t.isascii() for t in texts)
    pages = [d.text for d in ts.read_documents(wiki_sample, "wiki")
             if isinstance(d, input_files.RawDocument)]
    assert len(pages) > 100 and any(not t.isascii() for t in pages)
    n = _check_batch(texts + pages, cfg)
    assert n > 60000
