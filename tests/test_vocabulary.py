"""Vocabulary statistics and pruning: gensim ``filter_extremes`` equivalence on real documents,
the Beam transform, and the bag-of-words prune."""
import pickle
import random
import tarfile

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from gensim.corpora import Dictionary

from pipelines.ingest.tokenize import tokenize
from pipelines.ingest.vocabulary import (BuildVocabulary, PruneSettings, TokenStatsAccumulator,
                                         bow_prune, filter_extremes, merge_token_stats,
                                         unpack_stats)

SETTINGS = [
    PruneSettings(no_below=2, no_above=0.5, keep_n=None),
    PruneSettings(no_below=5, no_above=0.3, keep_n=1000),
    PruneSettings(no_below=1, no_above=1.0, keep_n=50),        # keep_n cut with many ties
    PruneSettings(no_below=3, no_above=0.05, keep_n=200, keep_tokens=("the", "space", "zzz")),
    PruneSettings(),                                             # gensim defaults
]


@pytest.fixture(scope="module")
def news_docs(news20_tar):
    """Tokens of 400 real 20 Newsgroups posts (first members of the archive, in order)."""
    docs = []
    with tarfile.open(news20_tar, "r:gz") as tar:
        for m in tar:
            if not m.isfile():
                continue
            text = tar.extractfile(m).read().decode("latin-1")
            docs.append(tokenize(text))
            if len(docs) == 400:
                break
    return docs


def _stats(docs, chunks=1, seed=0):
    """Per-token (df, cf, first) as the pipeline computes them, accumulated over random
    chunks (bundles) and merged in a random order."""
    idx = list(range(len(docs)))
    rng = random.Random(seed)
    rng.shuffle(idx)
    parts = [idx[i::chunks] for i in range(chunks)]
    partials = {}
    for part in parts:
        acc = TokenStatsAccumulator()
        for i in part:
            c = {}
            for t in docs[i]:
                c[t] = c.get(t, 0) + 1
            acc.add(c.items(), (0, i))
        for tok, st in acc.items():
            partials.setdefault(tok, []).append(st)
    out = []
    for tok, lst in partials.items():
        rng.shuffle(lst)
        df, cf, first = merge_token_stats(lst)
        out.append((tok, df, cf, first))
    return out


def _gensim(docs, s: PruneSettings):
    d = Dictionary(docs)
    d.filter_extremes(no_below=s.no_below, no_above=s.no_above, keep_n=s.keep_n,
                      keep_tokens=list(s.keep_tokens) or None)
    return d


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "%s-%s-%s-%d" % (
    s.no_below, s.no_above, s.keep_n, len(s.keep_tokens)))
@pytest.mark.parametrize("chunks", [1, 7])
def test_filter_extremes_matches_gensim_on_real_posts(news_docs, settings, chunks):
    d = _gensim(news_docs, settings)
    kept = filter_extremes(_stats(news_docs, chunks), len(news_docs), settings)
    tokens = [t for t, _, _ in kept]
    # same set AND the same ids (gensim's compactify order)
    assert tokens == [d[i] for i in range(len(d))]
    assert len(tokens) > 10
    for i, (t, df, cf) in enumerate(kept):
        assert d.dfs[i] == df and d.cfs[i] == cf, t


def test_keep_n_tie_break_is_gensim_first_occurrence():
    docs = [["b", "a"], ["c", "d"], ["a", "c"], ["e"]]
    s = PruneSettings(no_below=1, no_above=1.0, keep_n=2)
    kept = filter_extremes(_stats(docs), len(docs), s)
    assert [t for t, _, _ in kept] == [d for d in _gensim(docs, s).token2id]
    # a and c have df 2; the cut at 2 keeps both, in first-occurrence order
    assert [t for t, _, _ in kept] == ["a", "c"]
    s1 = PruneSettings(no_below=1, no_above=1.0, keep_n=3)
    d = _gensim(docs, s1)
    assert [t for t, _, _ in filter_extremes(_stats(docs), 4, s1)] == \
        [d[i] for i in range(len(d))]


def test_no_above_uses_int_of_fraction_times_docs():
    docs = [["a", "b"], ["a"], ["a", "c"]]   # df a=3 b=1 c=1; int(0.7*3)=2 -> a dropped
    s = PruneSettings(no_below=1, no_above=0.7, keep_n=None)
    assert [t for t, _, _ in filter_extremes(_stats(docs), 3, s)] == ["b", "c"]


def test_settings_validation_names_parameter():
    with pytest.raises(ValueError, match="no_above"):
        PruneSettings(no_above=1.5).validate()
    with pytest.raises(ValueError, match="no_below"):
        PruneSettings(no_below=-1).validate()
    with pytest.raises(ValueError, match="keep_n"):
        PruneSettings(keep_n=-3).validate()


def test_accumulator_pickles_and_merges_in_any_split(news_docs):
    docs = news_docs[:60]
    one = sorted(_stats(docs, chunks=1))
    for chunks, seed in [(3, 1), (13, 2), (60, 3)]:
        assert sorted(_stats(docs, chunks, seed)) == one
    acc = TokenStatsAccumulator()
    acc.add([("x", 2)], (0, 5))
    acc2 = pickle.loads(pickle.dumps(acc))
    assert list(acc2.items()) == [("x", (1, 2, (0, 5)))]


def test_build_vocabulary_transform(news_docs):
    docs = news_docs[:150]
    s = PruneSettings(no_below=3, no_above=0.4, keep_n=300)
    partials = []
    for k in range(5):   # five "bundles"
        acc = TokenStatsAccumulator()
        for i in range(k, len(docs), 5):
            c = {}
            for t in docs[i]:
                c[t] = c.get(t, 0) + 1
            acc.add(c.items(), (0, i))
        partials.extend(acc.packed())
    d = _gensim(docs, s)
    expected = {"tokens": [d[i] for i in range(len(d))],
                "df": [d.dfs[i] for i in range(len(d))],
                "cf": [d.cfs[i] for i in range(len(d))], "num_docs": len(docs)}
    with TestPipeline(runner="FnApiRunner") as p:
        n = p | "N" >> beam.Create([len(docs)])
        out = p | beam.Create(partials) | BuildVocabulary(n, s)
        assert_that(out, equal_to([expected]))
    # the document count arrives as per-bundle counts, summed
    with TestPipeline(runner="FnApiRunner") as p:
        n = p | "N" >> beam.Create([30] * 5)
        out = p | beam.Create(partials) | BuildVocabulary(n, s)
        assert_that(out, equal_to([expected]))


def test_build_vocabulary_of_nothing():
    """No documents at all: an empty vocabulary record, not a missing one."""
    with TestPipeline(runner="FnApiRunner") as p:
        n = p | "N" >> beam.Create([])
        out = p | beam.Create([]) | BuildVocabulary(n, PruneSettings())
        assert_that(out, equal_to([{"tokens": [], "df": [], "cf": [], "num_docs": 0}]))


def test_bow_prune_keeps_file_order():
    tokens = ["w%d" % i for i in range(6)]
    df = np.array([5, 1, 3, 3, 10, 2])
    cf = df * 2
    vocab, remap = bow_prune(tokens, df, cf, 10, PruneSettings(no_below=2, no_above=0.5,
                                                               keep_n=2))
    # candidates (2 <= df <= 5): w0(5) w2(3) w3(3) w5(2); keep 2 most frequent: w0, w2 (tie
    # w2/w3 broken by the file id); ids keep file order
    assert vocab.tokens == ["w0", "w2"]
    assert remap.tolist() == [0, -1, 1, -1, -1, -1]
    assert vocab.df.tolist() == [5, 3]


def _batch_stats(texts, batch_size, seed=0, n_parts=16):
    """(token, df, cf, first) from count_batch + add_batch over batches, packed in parts and
    merged part by part in a random order (as the pipeline does)."""
    from pipelines.ingest.tokenize import count_batch
    from pipelines.ingest.vocabulary import merge_packed_stats
    rng = random.Random(seed)
    packed = {}
    for lo in range(0, len(texts), batch_size):
        bc = count_batch(texts[lo:lo + batch_size])
        doc = np.repeat(np.arange(bc.n_docs), np.diff(bc.ptr))
        acc = TokenStatsAccumulator()
        acc.add_batch(bc.tokens, bc.ids, bc.counts, doc, [(0, lo + d) for d in range(bc.n_docs)])
        for k, p in acc.packed(n_parts):
            packed.setdefault(k, []).append(p)
    out = []
    for k, parts in packed.items():
        rng.shuffle(parts)
        merged = merge_packed_stats(parts[:1])
        for p in parts[1:]:                        # merge in steps, as a combiner may
            merged = merge_packed_stats([merged, p])
        out.extend((t, df, cf, first) for t, (df, cf, first) in unpack_stats(merged))
    return out


def test_batched_and_packed_statistics_equal_per_document_ones(news20_tar):
    texts = []
    with tarfile.open(news20_tar, "r:gz") as tar:
        for m in tar:
            if m.isfile():
                texts.append(tar.extractfile(m).read().decode("latin-1"))
            if len(texts) == 300:
                break
    expected = sorted(_stats([tokenize(t) for t in texts], chunks=1))
    for batch_size, n_parts in [(300, 1), (37, 16), (1, 5)]:
        got = _batch_stats(texts, batch_size, seed=batch_size, n_parts=n_parts)
        assert len({t for t, *_ in got}) == len(got)       # each token merged in one part
        assert sorted(got) == expected


def test_token_part_depends_only_on_the_token():
    import pyarrow as pa
    from pipelines.ingest.vocabulary import _part_of
    words = ["alpha", "beta", "", "ünï", "x" * 300, "beta", "alpha"]
    a = pa.array(words, pa.large_string())
    parts = _part_of(a, 16).tolist()
    assert parts[0] == parts[6] and parts[1] == parts[5]
    assert _part_of(a.slice(4), 16).tolist() == parts[4:]          # offsets of a slice
    assert _part_of(pa.array(words[::-1], pa.string()), 16).tolist() == parts[::-1]
    assert all(0 <= p < 16 for p in parts)
