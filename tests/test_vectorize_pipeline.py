"""The vectorize pipeline: helpers, each transform with TestPipeline, and end-to-end runs on
real data (the bundled Wikipedia sample, 20 Newsgroups, UCI KOS) into temporary folders."""
import bz2
import collections
import gzip
import json
import os
import tarfile

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from lda_core.errors import InputError
from pipelines.ingest import dataset
from pipelines.ingest import manifest
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest import vectorize as vz
from pipelines.ingest import vectorize_output as vzo
from pipelines.ingest import splits
from pipelines.ingest import vectorize_steps as vzs
from pipelines.cli import main as cli_main
from pipelines.ingest.tokenize import BatchCounts, TokenizerConfig
from pipelines.ingest.vocabulary import merge_token_stats, unpack_stats

IN_PROCESS = ["--runner=FnApiRunner"]


def _opts(inputs, output, **kw):
    return vz.VectorizeOptions(inputs=list(inputs), output=str(output), **kw)


def _rows(out, split="train"):
    """All shard rows of a split as {doc_id: (title, label, word_ids, counts, n_tokens)}."""
    files = dataset.resolve_shards(str(out), split)
    res = {}
    for f in files:
        t = pq.read_table(f).to_pylist()
        for r in t:
            assert r["doc_id"] not in res
            res[r["doc_id"]] = (r["title"], r["label"], r["word_ids"], r["counts"],
                                r["n_tokens"])
    return res


def _all_rows(out):
    rows = _rows(out, "train")
    if os.path.isdir(os.path.join(str(out), "heldout")):
        rows.update(_rows(out, "heldout"))
    return rows


# ----------------------------------------------------------------------------- helpers

def test_doc_hash_is_stable_and_split_is_near_fraction():
    assert splits.doc_hash("12", 0) == splits.doc_hash("12", 0)
    assert splits.doc_hash("12", 0) != splits.doc_hash("12", 1)
    # a fixed value: the split must never change between versions/platforms
    u, order = splits.doc_hash("Anarchism", 0)
    assert (round(u, 12), order) == (0.831694856558, 9524379588825707308)
    n = sum(splits.split_of(str(i), 0.2) == "heldout" for i in range(20000))
    assert 3700 < n < 4300


def _batch(docs):
    """BatchCounts of documents given as [(token, count), ...] lists."""
    tokens = sorted({t for d in docs for t, _ in d})
    local = {t: i for i, t in enumerate(tokens)}
    ptr, ids, counts = [0], [], []
    for d in docs:
        for t, c in sorted(d, key=lambda tc: local[tc[0]]):
            ids.append(local[t])
            counts.append(c)
        ptr.append(len(ids))
    return BatchCounts(pa.array(tokens, pa.large_string()), np.array(ptr, np.int64),
                          np.array(ids, np.int64), np.array(counts, np.int64))


def test_counts_to_rows_sorts_ids_and_counts_dropped():
    metas = [(0, 0, "d", "t", None), (0, 1, "e", None, None)]
    rows, dropped, empty = vzs.counts_to_rows(
        metas, _batch([[("b", 2), ("zz", 5), ("a", 1)], [("q", 1)]]),
        vzs.vocabulary_lookup(["b", "x", "y", "a"]))
    assert dropped == 5 + 1 and empty == 1 and len(rows) == 1
    row = rows[0]
    assert row[:3] == ("d", "t", None)
    assert np.frombuffer(row[3], np.int32).tolist() == [0, 3]
    assert np.frombuffer(row[4], np.int32).tolist() == [2, 1]
    assert row[5] == 3


def test_rows_to_table_round_trip():
    rows = [vzo.arrays_to_row("a", "T", "L", np.array([1, 4]), np.array([2, 1])),
            vzo.arrays_to_row("b", None, None, np.array([0]), np.array([7]))]
    b = dataset.table_to_docbatch(vzo.rows_to_table(rows))
    assert b.doc_ids == ("a", "b") and b.titles == ("T", None) and b.labels == ("L", None)
    assert b.word_ids.tolist() == [1, 4, 0] and b.counts.tolist() == [2, 1, 7]
    assert vzo.rows_to_table([]).num_rows == 0


# ----------------------------------------------------------------------------- transforms

def test_tokenize_transform_counts_and_vocab_stats():
    items = [("doc", 0, 0, "d0", None, "x", "Hello hello world"),
             ("doc", 0, 1, "d1", None, "y", "world peace"),
             ("doc", 0, 2, "d2", None, None, "1234 ;;"),          # no tokens
             ("doc", 1, 0, "e0", "T", None, "tiny")]               # below min tokens
    with TestPipeline(runner="FnApiRunner") as p:
        docs, vstats, dead, stats = (p | beam.Create(items)
                                     | vzs.TokenizeDocuments(TokenizerConfig(), {0: 1, 1: 2}))
        assert_that(docs | beam.FlatMap(vzs.tokenized_docs)
                    | beam.Map(lambda d: (d[2], sorted(d[5]))), equal_to([
            ("d0", [("hello", 2), ("world", 1)]), ("d1", [("peace", 1), ("world", 1)])]),
            label="docs")
        assert_that(vstats | beam.FlatMap(lambda kv: unpack_stats(kv[1]))
                    | beam.CombinePerKey(merge_token_stats),
                    equal_to([("hello", (1, 2, (0, 0))), ("world", (2, 2, (0, 0))),
                              ("peace", (1, 1, (0, 1)))]), label="vocab")
        assert_that(stats | beam.CombinePerKey(sum), equal_to([
            ("documents_read", 4), ("empty_documents", 1), ("too_short", 1),
            ("vocab_documents", 2)]), label="stats")


def test_apply_vocabulary_transform():
    b = _batch([[("x", 2), ("y", 1)], [("q", 3)]])
    docs = [vzs.packed_batch([(0, 0, "a", None, None), (0, 1, "b", None, None)], b)]
    with TestPipeline(runner="FnApiRunner") as p:
        vocab = p | "V" >> beam.Create([{"tokens": ["y", "x"], "df": [1, 1], "cf": [1, 2]}])
        rows, stats = p | beam.Create(docs) | vzs.ApplyVocabulary(vocab)
        assert_that(rows | beam.FlatMap(vzo.as_rows)
                    | beam.Map(lambda r: (r[0], np.frombuffer(r[3], np.int32).tolist(),
                                               np.frombuffer(r[4], np.int32).tolist())),
                    equal_to([("a", [0, 1], [1, 2])]), label="rows")
        assert_that(stats | beam.CombinePerKey(sum), equal_to([
            ("oov_tokens_dropped", 3), ("empty_after_pruning", 1),
            ("vocab_applied_documents", 2)]), label="stats")


def test_packed_batch_round_trip():
    """A tokenized batch crosses stages as bytes of the narrowest integer type and back."""
    b = _batch([[("x", 2), ("y", 300)], [("q", 70000)], []])
    metas, back = vzs.unpacked_batch(vzs.packed_batch(["m0", "m1", "m2"], b))
    assert metas == ["m0", "m1", "m2"]
    assert back.tokens.to_pylist() == b.tokens.to_pylist()
    for name in ("ptr", "ids", "counts"):
        assert getattr(back, name).dtype == np.int64
        assert getattr(back, name).tolist() == getattr(b, name).tolist()
    sliced = b.tokens.slice(1)
    assert vzs.unpacked_strings(vzs.packed_strings(sliced)).to_pylist() == sliced.to_pylist()


def test_write_shards_transform_is_sorted_and_split(tmp_path):
    rows = [vzo.arrays_to_row("doc%d" % i, None, None, np.array([i % 5]), np.array([1 + i % 3]))
            for i in range(200)]
    with TestPipeline(runner="FnApiRunner") as p:
        h = p | "H" >> beam.Create(["abc"])
        shards = p | beam.Create(rows) | vzo.WriteShards(str(tmp_path), h, 0.25, 0,
                                                        num_shards=3, heldout_shards=2)
        assert_that(shards | beam.Map(lambda s: (s["split"], s["n_shards"])),
                    equal_to([("train", 3)] * 3 + [("heldout", 2)] * 2))
    got = {}
    for split in ("train", "heldout"):
        for f in dataset.resolve_shards(str(tmp_path), split):
            assert dataset.shard_vocab_hash(f) == "abc"
            ids = pq.read_table(f).column("doc_id").to_pylist()
            keys = [splits.doc_hash(d, 0)[1] for d in ids]
            assert keys == sorted(keys)
            for d in ids:
                got[d] = split
    assert len(got) == 200
    assert all(s == splits.split_of(d, 0.25, 0) for d, s in got.items())


# ----------------------------------------------------------------------------- end to end

def _gensim_wiki(path, min_tokens=50):
    from gensim.corpora.wikicorpus import WikiCorpus
    wc = WikiCorpus(path, processes=1, dictionary={}, article_min_tokens=min_tokens)
    wc.metadata = True
    return [(pid, title, tokens) for tokens, (pid, title) in wc.get_texts()]


@pytest.fixture(scope="module")
def gensim_sample(wiki_sample):
    return _gensim_wiki(wiki_sample)


def test_wiki_sample_matches_gensim_wikicorpus(wiki_sample, gensim_sample, tmp_path):
    """Same articles, titles and per-article token counts as gensim WikiCorpus (which does not
    de-accent) and the vocabulary gensim's Dictionary + filter_extremes builds from them."""
    from gensim.corpora import Dictionary
    out = tmp_path / "ds"
    m = vz.vectorize(_opts([wiki_sample], out, deaccent=False, no_below=2, no_above=0.5),
                     IN_PROCESS)
    rows = _rows(out)
    assert set(rows) == {pid for pid, _, _ in gensim_sample}
    assert m["counts"]["documents_kept"] == len(gensim_sample) == 106
    d = Dictionary(t for _, _, t in gensim_sample)
    d.filter_extremes(no_below=2, no_above=0.5)
    vocab = Vocabulary.read(str(out))
    assert vocab.tokens == [d[i] for i in range(len(d))]
    assert vocab.df.tolist() == [d.dfs[i] for i in range(len(d))]
    for pid, title, tokens in gensim_sample:
        bow = dict(d.doc2bow(tokens))
        r = rows[pid]
        assert r[0] == title
        assert dict(zip(r[2], r[3])) == bow, pid
    for f in dataset.resolve_shards(str(out)):
        assert dataset.shard_vocab_hash(f) == vocab.hash == m["vocabulary"]["hash"]
    assert m["counts"]["skipped_pages"] + m["counts"]["documents_read"] == 206


def test_make_demo_cli_and_fixed_vocabulary(wiki_sample, tmp_path, capsys):
    out = tmp_path / "demo"
    assert cli_main(["vectorize", "--output", str(out), "--holdout-fraction", "0.1",
                     "--no-below", "2", "--no-above", "0.5", "--runner=FnApiRunner"]) == 0
    printed = capsys.readouterr().out
    assert "106 read" in printed and "V = " in printed and str(out) in printed
    m = manifest.read_manifest(str(out))
    assert m["counts"]["train_documents"] + m["counts"]["heldout_documents"] == 106
    assert m["counts"]["heldout_documents"] == sum(
        splits.split_of(d, 0.1) == "heldout" for d in _all_rows(out))
    assert 0 < m["counts"]["heldout_documents"] < 25
    # the same text against the fixed vocabulary gives the same rows, no corpus-wide pass
    out2 = tmp_path / "fixed"
    m2 = vz.vectorize(_opts([wiki_sample], out2, vocab=str(out), holdout_fraction=0.1),
                      IN_PROCESS)
    assert m2["vocabulary"]["hash"] == m["vocabulary"]["hash"]
    assert m2["settings"]["vocabulary_source"].startswith("fixed")
    assert _all_rows(out2) == _all_rows(out)
    assert m2["counts"]["oov_tokens_dropped"] == m["counts"]["oov_tokens_dropped"]
    # existing output is refused without --overwrite, with a clear message
    assert cli_main(["vectorize", "--output", str(out), "--runner=FnApiRunner"]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_cli_fails_at_once_on_unusable_input(tmp_path, capsys):
    assert cli_main(["vectorize", "--input", str(tmp_path / "nope*.xml"), "--output",
                     str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "nope*.xml" in err
    assert cli_main(["vectorize", "--input", str(tmp_path)]) == 2
    assert "--output" in capsys.readouterr().err
    notdump = tmp_path / "notadump.xml"
    notdump.write_text("<html><body>hello</body></html>")
    assert cli_main(["vectorize", "--input", str(notdump), "--output",
                     str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "notadump.xml" in err and "MediaWiki" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_news20_tar_all_documents_and_labels(news20_tar, tmp_path):
    out = tmp_path / "news"
    m = vz.vectorize(_opts([news20_tar], out, holdout_fraction=0.1, num_shards=3),
                     IN_PROCESS)
    rows = _all_rows(out)
    assert len(rows) == 18846 == m["counts"]["documents_kept"]
    labels = collections.Counter(r[1] for r in rows.values())
    assert len(labels) == 20 and None not in labels
    assert labels["sci.space"] == 593 + 394
    for doc_id, r in list(rows.items())[:50]:
        assert doc_id.split("/")[-2] == r[1]     # label = the parent folder
    assert len(m["splits"]["train"]["shards"]) == 3
    assert m["tokens"]["total"] == sum(r[4] for r in rows.values())
    assert m["counts"]["dead_letters"] == 0


def test_uci_kos_exact(kos_paths, tmp_path):
    docword, vocab_file = kos_paths
    out = tmp_path / "kos"
    m = vz.vectorize(_opts([docword], out, format="uci"), IN_PROCESS)
    assert m["counts"]["documents_kept"] == 3430
    assert m["tokens"]["total"] == 467714
    vocab = Vocabulary.read(str(out))
    with open(vocab_file) as f:
        assert vocab.tokens == [l.strip() for l in f if l.strip()]
    assert len(vocab) == 6906 and m["vocabulary"]["size"] == 6906
    assert int(vocab.cf.sum()) == 467714
    rows = _rows(out)
    expected = collections.defaultdict(dict)
    with gzip.open(docword, "rt") as f:
        for i, line in enumerate(f):
            if i >= 3:
                d, w, c = map(int, line.split())
                if d <= 5:
                    expected[str(d)][w - 1] = c
    for d, bow in expected.items():
        assert dict(zip(rows[d][2], rows[d][3])) == bow
    assert vocab.df.tolist()[:3] == [int(x) for x in np.bincount(
        [w for r in rows.values() for w in r[2]], minlength=6906)[:3]]


def test_uci_kos_pruning_on_request_keeps_file_order(kos_paths, tmp_path):
    docword, vocab_file = kos_paths
    out = tmp_path / "kos"
    m = vz.vectorize(_opts([docword], out, format="uci", no_below=50, no_above=0.3,
                           keep_n=0), IN_PROCESS)
    vocab = Vocabulary.read(str(out))
    with open(vocab_file) as f:
        orig = [l.strip() for l in f if l.strip()]
    pos = [orig.index(t) for t in vocab.tokens]
    assert pos == sorted(pos) and 100 < len(vocab) < 6906
    assert all(50 <= d <= int(0.3 * 3430) for d in vocab.df)
    rows = _all_rows(out)
    assert m["tokens"]["total"] == int(vocab.cf.sum()) == sum(r[4] for r in rows.values())
    assert m["counts"]["documents_kept"] + m["counts"]["empty_after_pruning"] == 3430


def test_ldac_and_mm_round_trip(tmp_path):
    from gensim.corpora import BleiCorpus, MmCorpus
    corpus = [[(0, 2), (3, 1)], [(1, 5)], [(0, 1), (2, 2), (4, 3)]]
    words = ["alpha", "beta", "gamma", "delta", "eps"]
    id2word = dict(enumerate(words))
    for fmt, path in [("ldac", tmp_path / "c.lda-c"), ("mm", tmp_path / "c.mm")]:
        vocab_path = tmp_path / ("%s.vocab.txt" % fmt)
        vocab_path.write_text("\n".join(words) + "\n")
        if fmt == "ldac":
            BleiCorpus.serialize(str(path), corpus, id2word=id2word)
        else:
            MmCorpus.serialize(str(path), corpus)
        out = tmp_path / ("out-" + fmt)
        m = vz.vectorize(_opts([str(path)], out, format=fmt, vocab=str(vocab_path)),
                         IN_PROCESS)
        rows = _rows(out)
        assert m["counts"]["documents_kept"] == 3
        assert Vocabulary.read(str(out)).tokens == words
        got = sorted((list(zip(r[2], r[3])) for r in rows.values()), key=str)
        assert got == sorted(([tuple(x) for x in d] for d in corpus), key=str)


def _sample_pages(wiki_sample):
    xml = bz2.decompress(open(wiki_sample, "rb").read()).decode("utf-8")
    head = xml[:xml.index("<page>")]
    pages = []
    pos = xml.index("<page>")
    while True:
        end = xml.find("</page>", pos)
        if end < 0:
            break
        pages.append(xml[pos:end + 7])
        pos = xml.find("<page>", end)
        if pos < 0:
            break
    return head, pages


def test_bad_inputs_go_to_dead_letters_and_good_documents_survive(wiki_sample, tmp_path):
    head, pages = _sample_pages(wiki_sample)
    articles = [p for p in pages if "<ns>0</ns>" in p and "<redirect" not in p][:40]
    d = tmp_path / "in"
    d.mkdir()
    # 1. a dump with a malformed <page> between good ones
    bad_page = articles[3].replace("</title>", "", 1)
    (d / "malformed.xml").write_text(head + "".join(articles[:3]) + bad_page +
                                     "".join(articles[4:6]) + "</mediawiki>\n")
    # 2. a truncated .bz2 dump: the pages before the cut survive
    # (small bz2 blocks, so that complete blocks precede the cut)
    full = bz2.compress((head + "".join(articles[6:40]) + "</mediawiki>\n").encode(), 1)
    (d / "truncated.xml.bz2").write_bytes(full[:len(full) * 2 // 3])
    # 3. text files: invalid UTF-8, empty, and a good one
    t = tmp_path / "texts"
    t.mkdir()
    (t / "bad-utf8.txt").write_bytes(b"caf\xe9 \xff\xfe broken bytes here")
    (t / "empty.txt").write_text("   \n")
    (t / "good.txt").write_text(articles[0][:3000])
    out = tmp_path / "ds"
    m = vz.vectorize(_opts([str(d / "*.xml*"), str(t)], out, no_below=1, no_above=1.0,
                           min_article_tokens=0, encoding_errors="strict"), IN_PROCESS)
    dead = [json.loads(l) for l in open(out / "deadletter" / "deadletter.jsonl")]
    errors = {os.path.basename(x["source"]): x["error"] for x in dead}
    assert "malformed <page>" in errors["malformed.xml"]
    assert "truncated" in errors["truncated.xml.bz2"] or "corrupt" in errors["truncated.xml.bz2"]
    # the empty file is counted as an empty document, not dead-lettered
    assert "bad-utf8.txt" in errors and "empty.txt" not in errors
    assert m["counts"]["empty_documents"] == 1
    assert m["counts"]["dead_letters"] == len(dead) >= 3
    rows = _all_rows(out)
    ids = {a[a.index("<id>") + 4:a.index("</id>")] for a in articles[:3] + articles[4:6]}
    assert ids <= set(rows)                       # every good page of the malformed dump
    trunc_ids = {a[a.index("<id>") + 4:a.index("</id>")] for a in articles[6:40]}
    assert 0 < len(trunc_ids & set(rows)) < 34    # pages before the cut survive
    assert any(k.endswith("good.txt") for k in rows)
    # the out-of-vocabulary document against a fixed vocabulary: counted, not written
    (tmp_path / "oov.txt").write_text("qwxzzy plorbnik zzyzzx")
    out2 = tmp_path / "fixed"
    m2 = vz.vectorize(_opts([str(tmp_path / "oov.txt"), str(t / "good.txt")], out2,
                            vocab=str(out)), IN_PROCESS)
    assert m2["counts"]["empty_after_pruning"] == 1 and m2["counts"]["documents_kept"] == 1
    assert m2["counts"]["oov_tokens_dropped"] >= 3


@pytest.mark.serial
@pytest.mark.slow
def test_same_shards_in_process_and_multi_processing(wiki_sample, tmp_path):
    kw = dict(holdout_fraction=0.2, num_shards=3, no_below=2)
    a, b = tmp_path / "a", tmp_path / "b"
    vz.vectorize(_opts([wiki_sample], a, **kw), ["--runner=DirectRunner"])
    vz.vectorize(_opts([wiki_sample], b, **kw),
                 ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                  "--direct_num_workers=2"])
    for rel in ["vocab.tsv", "manifest.json"] + [
            "%s/%s" % (s, n) for s in ("train", "heldout") for n in sorted(
                os.listdir(a / s))]:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    assert len(os.listdir(b / "train")) == 3


def test_jsonl_and_lines_inputs_with_fields_and_stopwords(tmp_path):
    posts = ["The rocket launch was delayed by weather",
             "A rocket engine test at the launch site",
             "Weather delayed the engine test again"]
    (tmp_path / "a.jsonl").write_text("".join(
        json.dumps({"meta": {"key": "k%d" % i}, "body": t, "topic": "space"}) + "\n"
        for i, t in enumerate(posts)) + "not json\n")
    (tmp_path / "b.txt").write_text("\n".join(posts) + "\n\n")
    out = tmp_path / "ds"
    m = vz.vectorize(_opts([str(tmp_path / "a.jsonl")], out, id_field="meta.key",
                           text_field="body", label_field="topic", no_below=2, no_above=1.0,
                           stopwords="gensim"), IN_PROCESS)
    rows = _rows(out)
    assert sorted(rows) == ["k0", "k1", "k2"] and {r[1] for r in rows.values()} == {"space"}
    vocab = Vocabulary.read(str(out)).tokens
    assert "the" not in vocab and "rocket" in vocab and "weather" in vocab
    assert m["counts"]["dead_letters"] == 1          # the "not json" line
    out2 = tmp_path / "lines"
    m2 = vz.vectorize(_opts([str(tmp_path / "b.txt")], out2, format="lines", vocab=str(out)),
                      IN_PROCESS)
    rows2 = _rows(out2)
    assert sorted(rows2) == ["b.txt:1", "b.txt:2", "b.txt:3"]
    assert [(r[2], r[3]) for _, r in sorted(rows2.items())] == \
        [(r[2], r[3]) for _, r in sorted(rows.items())]
    assert m2["counts"]["oov_tokens_dropped"] > 0


def test_nothing_usable_publishes_no_dataset_and_says_why(tmp_path):
    """Inputs with no usable document: one line with the counts (the empty file is an empty
    document like the one with no word, not a dead letter), and no dataset published -- no
    manifest, shards or vocabulary for `train` to be handed."""
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "digits.txt").write_text("1234 5678")
    out = tmp_path / "ds"
    with pytest.raises(InputError, match=r"no document was kept from .*\(2 read: 2 empty, 0 too "
                                         r"short, 0 empty after pruning, 0 dead letters\)"):
        vz.vectorize(_opts([str(tmp_path / "*.txt")], out), IN_PROCESS)
    left = sorted(os.listdir(out)) if out.exists() else []
    assert "manifest.json" not in left and "vocab.tsv" not in left and "train" not in left


@pytest.mark.parametrize("batched", [False, True])
def test_an_unexpected_failure_on_one_document_is_a_dead_letter(monkeypatch, batched):
    import pipelines.ingest.vectorize_steps as mod
    real = mod.count_batch

    def flaky(texts, cfg):
        if any("boom" in text for text in texts):
            raise RuntimeError("tokenizer exploded")
        return real(texts, cfg)

    monkeypatch.setattr(mod, "count_batch", flaky)
    items = [("doc", 0, 0, "ok", None, None, "fine words here"),
             ("doc", 0, 1, "bad", None, None, "boom goes the text")]
    if batched:   # as ReadWorkItems sends them: the good document of the batch is kept
        items = [("batch", items)]
    with TestPipeline(runner="FnApiRunner") as p:
        docs, _, dead, _ = (p | beam.Create(items)
                            | vzs.TokenizeDocuments(TokenizerConfig(), {0: 1},
                                                   paths={0: "in.txt"}))
        assert_that(docs | beam.FlatMap(vzs.tokenized_docs) | beam.Map(lambda d: d[2]),
                    equal_to(["ok"]), label="docs")
        assert_that(dead | beam.Map(lambda d: (d["source"], d["position"], d["error"])),
                    equal_to([("in.txt", "doc bad", "RuntimeError: tokenizer exploded")]),
                    label="dead")


def test_sample_dataset_is_unchanged(wiki_sample, tmp_path):
    """The bundled sample vectorised with fixed settings gives exactly the dataset it gave
    before the batch / side-input / module changes of the ingest path: the vocabulary hash,
    the counts and a digest of every shard's rows (their content, not the Parquet bytes)."""
    import glob
    import hashlib
    import json
    out = tmp_path / "ds"
    m = vz.vectorize(_opts([wiki_sample], out, holdout_fraction=0.1, no_below=2, no_above=0.5,
                           num_shards=2), IN_PROCESS)
    h = hashlib.sha256()
    for split in ("train", "heldout"):
        for f in sorted(glob.glob(str(out / split / "*.parquet"))):
            t = pq.read_table(f)
            h.update(("%s/%s\n" % (split, os.path.basename(f))).encode())
            for c in ("doc_id", "title", "label", "word_ids", "counts", "n_tokens"):
                h.update(json.dumps(t.column(c).to_pylist()).encode())
    assert m["vocabulary"]["hash"] == \
        "5743178d6fddbccbbfb46e58d03b68a9ef1128ef8d6d5d94de30a971f36081a5"
    assert m["vocabulary"]["size"] == 13864
    assert m["counts"] == {"dead_letters": 0, "documents_kept": 106, "documents_read": 106,
                           "empty_after_pruning": 0, "empty_documents": 0,
                           "empty_cjk_documents": 0,
                           "heldout_documents": 7, "oov_tokens_dropped": 238174,
                           "replaced_characters": 0, "skipped_pages": 100, "too_short": 0,
                           "train_documents": 99}
    assert h.hexdigest() == "15e69c8c74bb2542100ced2e37c40c33a5c302e1b2f554fe282f45f8b2935fc7"


def test_rows_lost_before_the_shards_fail_the_run_without_a_manifest(wiki_sample, tmp_path,
                                                                   monkeypatch):
    """Every document read is kept, counted as dropped or dead-lettered; a run that loses rows
    between reading and writing publishes no manifest (so the dataset is refused as incomplete)
    instead of a short dataset that looks whole."""
    out = tmp_path / "ok"
    m = vz.vectorize(_opts([wiki_sample], out, holdout_fraction=0.1), IN_PROCESS)
    c = m["counts"]
    vzo.check_accounted(c, str(out))   # a normal run balances
    assert c["documents_read"] == (c["documents_kept"] + c["empty_documents"] + c["too_short"]
                                   + c["empty_after_pruning"])
    with pytest.raises(vzo.LostDocumentsError, match="rows were lost"):
        vzo.check_accounted(dict(c, documents_kept=c["documents_kept"] - 1), str(out))

    real_key_by_split = vzo._key_by_split

    def lose_every_tenth(element, fraction, seed):
        rows = [r for r in vzo.as_rows(element) if int(splits.doc_hash(r[0], 0)[1]) % 10]
        return real_key_by_split(rows, fraction, seed)

    monkeypatch.setattr(vzo, "_key_by_split", lose_every_tenth)
    lossy = tmp_path / "lossy"
    with pytest.raises(Exception, match="rows were lost"):
        vz.vectorize(_opts([wiki_sample], lossy, holdout_fraction=0.1), IN_PROCESS)
    assert not os.path.exists(os.path.join(str(lossy), dataset.MANIFEST_FILE))
    with pytest.raises(Exception):
        manifest.verify(str(lossy))
