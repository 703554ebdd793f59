"""Tokenizer: gensim-compatible output, options, validation, stop words."""
import pickle
import random

import pytest
from gensim.parsing.preprocessing import STOPWORDS
from gensim.utils import deaccent as gensim_deaccent
from gensim.utils import tokenize as gensim_tokenize

from pipelines.text_sources import InputError
from pipelines.tokenize import (DEFAULT, TokenizerConfig, config_from_options, deaccent,
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
