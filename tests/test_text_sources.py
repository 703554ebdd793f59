"""Text input readers on real data: the gensim Wikipedia sample, 20 Newsgroups, bad inputs."""
import bz2
import collections
import gzip
import json
import os
import pathlib
import random
import re

import pytest

from pipelines.ingest import text_sources as ts
from pipelines.ingest import wiki_source
from pipelines.ingest.text_sources import read_documents
from pipelines.ingest.wiki_source import iter_wiki_page_chunks, parse_wiki_page
from pipelines.ingest.input_files import (FORMATS, DeadLetter, InputError, RawDocument,
                                          detect_format, expand_inputs)
from pipelines.ingest.tokenize import TokenizerConfig, tokenize

# gensim WikiCorpus tokenizes with lower=True and no de-accenting, drops articles under 50 tokens
GENSIM_WIKI_CFG = TokenizerConfig(deaccent=False)


def split(items):
    docs = [i for i in items if isinstance(i, RawDocument)]
    dead = [i for i in items if isinstance(i, DeadLetter)]
    assert len(docs) + len(dead) == len(items)
    return docs, dead


@pytest.fixture(scope="module")
def wiki_xml(wiki_sample):
    with bz2.open(wiki_sample) as f:
        return f.read()


@pytest.fixture(scope="module")
def wiki_docs(wiki_sample):
    docs, dead = split(list(read_documents(wiki_sample, "wiki")))
    assert dead == []
    return docs


# ----------------------------------------------------------------------------- wiki

def test_wiki_sample_matches_gensim_wikicorpus(wiki_sample, wiki_docs):
    from gensim.corpora import Dictionary
    from gensim.corpora.wikicorpus import ARTICLE_MIN_WORDS, WikiCorpus
    assert wiki_source.ARTICLE_MIN_TOKENS == ARTICLE_MIN_WORDS
    wc = WikiCorpus(wiki_sample, dictionary=Dictionary(), processes=1, metadata=True)
    ref = {pageid: (title, tokens) for tokens, (pageid, title) in wc.get_texts()}
    ours = {}
    for d in wiki_docs:
        toks = tokenize(d.text, GENSIM_WIKI_CFG)
        if len(toks) >= wiki_source.ARTICLE_MIN_TOKENS:
            ours[d.doc_id] = (d.title, toks)
    assert len(ref) == 106
    assert ours.keys() == ref.keys()
    for pid in ref:
        assert ours[pid][0] == ref[pid][0]
        assert ours[pid][1] == ref[pid][1]      # same tokens in the same order
    # the sample has 206 pages: 100 redirects are skipped, no short articles besides them
    assert len(wiki_docs) == 106


def test_fast_markup_stripping_is_gensims(wiki_xml):
    from gensim.corpora.wikicorpus import filter_wiki
    texts = re.findall(rb"<text[^>]*>(.*?)</text>", wiki_xml, re.S)
    assert len(texts) > 200
    import html
    for raw in texts:
        text = html.unescape(raw.decode("utf-8"))   # what ElementTree gives for the element
        assert wiki_source.strip_wiki_markup(text) == filter_wiki(text)
    # random strings of markup fragments (nesting, tables, links, unclosed templates)
    frags = ["{", "}", "{{", "}}", "|", "!", "!!", "||", "|-", "|}", "{|", "\n", " ", "  ", "\t",
             "[[", "]]", "[", "]", ":", "en:", "de-x:", "ab", "bgcolor", "colspan", "1 colspan",
             "style=", "scope=", "x", "é", "9", "<ref>", "</ref>", "<!--", "-->",
             "[http://x.y z]", "\n[[fr:Bar]]", "\n[[File:a|b|c]]", "&amp;"]
    rng = random.Random(0)
    for _ in range(3000):
        s = "".join(rng.choice(frags) for _ in range(rng.randint(0, 40)))
        assert wiki_source.strip_wiki_markup(s) == filter_wiki(s), repr(s)


def test_wiki_pages_titles_ids_positions(wiki_sample, wiki_docs):
    chunks = list(iter_wiki_page_chunks(wiki_sample))
    assert len(chunks) == 206
    offsets = [int(p.split("byte ")[1]) for p, _ in chunks]
    assert offsets == sorted(offsets) and len(set(offsets)) == 206
    assert all(c.startswith("<page>") and c.endswith("</page>") for _, c in chunks)
    d = wiki_docs[0]
    assert (d.doc_id, d.title) == ("12", "Anarchism")
    assert "[[" not in d.text and "{{" not in d.text
    assert len({d.doc_id for d in wiki_docs}) == len(wiki_docs)
    skipped = [parse_wiki_page(c, wiki_sample, p) for p, c in chunks]
    assert sum(s is None for s in skipped) == 100
    # other namespaces: nothing of ns 0 is lost, the one non-article page is kept when asked
    every = [parse_wiki_page(c, wiki_sample, p, namespaces=(), strip_markup=False)
             for p, c in chunks]
    assert sum(e is not None for e in every) >= 106


@pytest.mark.parametrize("suffix", [".xml", ".xml.gz", "-multistream.xml.bz2"])
def test_wiki_plain_gzip_and_multistream(tmp_path, wiki_xml, wiki_docs, suffix):
    path = str(tmp_path / ("dump" + suffix))
    if suffix == ".xml":
        pathlib.Path(path).write_bytes(wiki_xml)
    elif suffix == ".xml.gz":
        pathlib.Path(path).write_bytes(gzip.compress(wiki_xml))
    else:   # Wikipedia's multistream layout: many bz2 streams concatenated (100 pages each)
        cuts = [m.start() for m in re.finditer(rb"  <page>", wiki_xml)][::7] + [len(wiki_xml)]
        parts = [wiki_xml[:cuts[0]]] + [wiki_xml[a:b] for a, b in zip(cuts, cuts[1:])]
        pathlib.Path(path).write_bytes(b"".join(bz2.compress(p) for p in parts))
    assert expand_inputs([path]) == [(path, "wiki")]
    docs, dead = split(list(read_documents(path, "wiki")))
    assert dead == []
    assert [(d.doc_id, d.text) for d in docs] == [(d.doc_id, d.text) for d in wiki_docs]


def test_truncated_bz2_keeps_pages_before_the_cut(tmp_path, wiki_sample, wiki_docs):
    data = pathlib.Path(wiki_sample).read_bytes()
    path = str(tmp_path / "cut.xml.bz2")
    pathlib.Path(path).write_bytes(data[: len(data) // 2])
    items = list(read_documents(path, "wiki"))
    docs, dead = split(items)
    assert len(dead) == 1 and items[-1] is dead[0]
    assert "truncated" in dead[0].error or "corrupt" in dead[0].error
    assert dead[0].source == path
    assert 20 < len(docs) < 106
    assert [(d.doc_id, d.text) for d in docs] == [(d.doc_id, d.text) for d in wiki_docs[:len(docs)]]
    json.dumps(dead[0].to_json())


def test_truncated_plain_xml(tmp_path, wiki_xml, wiki_docs):
    path = str(tmp_path / "cut.xml")
    pathlib.Path(path).write_bytes(wiki_xml[: len(wiki_xml) // 3])
    docs, dead = split(list(read_documents(path, "wiki")))
    assert len(dead) == 1 and "ends inside a <page>" in dead[0].error
    assert [d.doc_id for d in docs] == [d.doc_id for d in wiki_docs[:len(docs)]]


def test_malformed_and_undecodable_pages_are_dead_letters(tmp_path, wiki_xml, wiki_docs):
    pages = [m.start() for m in re.finditer(rb"<page>", wiki_xml)]
    # break the XML of the first article (Anarchism, page 2); put invalid UTF-8 in the second
    a1, a2 = wiki_docs[0], wiki_docs[1]
    n1, n2 = (int(d.position.split()[1]) for d in (a1, a2))
    bad = bytearray(wiki_xml)
    p2 = bad.find(b">", bad.find(b"<text", pages[n2 - 1])) + 1
    bad[p2:p2] = b"\xff\xfe"
    t1 = bad.find(b"</title>", pages[n1 - 1])
    bad[t1:t1 + len(b"</title>")] = b"</titel>"
    path = str(tmp_path / "bad.xml.bz2")
    pathlib.Path(path).write_bytes(bz2.compress(bytes(bad)))
    docs, dead = split(list(read_documents(path, "wiki")))
    assert len(dead) == 2
    assert "malformed <page>" in dead[0].error and dead[0].position == a1.position
    assert "<title>Anarchism</titel>" in dead[0].snippet
    assert "UTF-8" in dead[1].error and dead[1].position == a2.position
    assert [d.doc_id for d in docs] == [d.doc_id for d in wiki_docs[2:]]


@pytest.mark.parametrize("block", [97, 4099])
def test_damaged_pages_resync_at_the_next_page_across_read_blocks(
        tmp_path, monkeypatch, wiki_xml, wiki_docs, block):
    # small read blocks put tags across block boundaries; every 5th article loses its end
    # tag, start tag or the end of its XML: each is one dead letter, the others all stay
    path = str(tmp_path / "dump.xml")
    pathlib.Path(path).write_bytes(wiki_xml)
    intact = list(iter_wiki_page_chunks(path))
    from pipelines.ingest import wiki_source
    monkeypatch.setattr(wiki_source, "READ_BLOCK", block)    # where the page splitter reads it
    assert list(iter_wiki_page_chunks(path)) == intact
    victims = wiki_docs[1::5]
    bad = wiki_xml
    for i, v in enumerate(reversed(victims)):
        t = bad.find(("<title>%s</title>" % v.title).encode())
        lo, hi = bad.rfind(b"<page>", 0, t), bad.find(b"</page>", t)
        bad = [bad[:hi] + bad[hi + 7:], bad[:lo] + b"<Page>" + bad[lo + 6:],
               bad[:(t + hi) // 2] + bad[hi + 7:]][i % 3]
    path = str(tmp_path / "damaged.xml.bz2")
    pathlib.Path(path).write_bytes(bz2.compress(bad))
    docs, dead = split(list(read_documents(path, "wiki")))
    assert [d.doc_id for d in docs] == [d.doc_id for d in wiki_docs if d not in victims]
    assert [d.position.split()[:2] for d in dead] == [v.position.split()[:2] for v in victims]
    assert all(d.source == path for d in dead)


def test_oversized_page_is_skipped(tmp_path, wiki_xml, wiki_docs):
    path = str(tmp_path / "dump.xml")
    pathlib.Path(path).write_bytes(wiki_xml)
    biggest = max(len(t) for t in re.findall(rb"<page>.*?</page>", wiki_xml, re.S))
    limit = biggest - 1
    items = list(iter_wiki_page_chunks(path, max_page_bytes=limit))
    dead = [i for i in items if isinstance(i, DeadLetter)]
    assert len(dead) >= 1 and all("max_page_bytes" in d.error for d in dead)
    assert len(items) == 206          # every page accounted for, in order
    docs, dead2 = split(list(read_documents(path, "wiki", max_doc_bytes=limit)))
    assert len(docs) == len(wiki_docs) - len(dead)


def test_non_dump_and_missing_inputs_raise_at_once(tmp_path):
    p = tmp_path / "notes.xml"
    p.write_text("<html><body>hello</body></html>")
    with pytest.raises(InputError, match=r"notes\.xml is not a MediaWiki XML dump"):
        read_documents(str(p), "wiki")
    q = tmp_path / "fake.xml.bz2"
    q.write_bytes(b"this is not bzip2 data at all" * 10)
    with pytest.raises(InputError, match=r"fake\.xml\.bz2 cannot be read as bz2"):
        read_documents(str(q), "wiki")
    with pytest.raises(InputError, match="missing.xml"):
        read_documents(str(tmp_path / "missing.xml"), "wiki")
    with pytest.raises(InputError, match=r"missing\*\.txt matches no file"):
        expand_inputs([str(tmp_path / "missing*.txt")])
    with pytest.raises(InputError, match="unknown input format 'xlsx'"):
        expand_inputs([str(p)], "xlsx")
    with pytest.raises(InputError, match="bag-of-words"):
        read_documents(str(p), "uci")


# ----------------------------------------------------------------------------- 20 Newsgroups

@pytest.fixture(scope="module")
def news20_docs(news20_tar):
    return list(read_documents(news20_tar, "text", encoding="latin-1"))


def test_news20_all_documents_and_labels(news20_tar, news20_docs):
    assert expand_inputs([news20_tar]) == [(news20_tar, "text")]
    docs, dead = split(news20_docs)
    assert dead == []
    assert len(docs) == 18846
    labels = collections.Counter(d.label for d in docs)
    assert len(labels) == 20
    assert labels["alt.atheism"] == 480 + 319 and labels["talk.religion.misc"] == 377 + 251
    splits = collections.Counter(d.doc_id.split("/")[1] for d in docs)
    assert splits == {"20news-bydate-train": 11314, "20news-bydate-test": 7532}
    assert len({d.doc_id for d in docs}) == 18846
    d = next(d for d in docs if d.doc_id.endswith("20news-bydate-train/sci.space/60804"))
    assert d.label == "sci.space" and d.text.startswith("From: pbd@runyon.cim.cdc.com")
    # the non-ASCII posts are all kept (this copy holds 37 such files, see the docs)
    assert sum(not d.text.isascii() for d in docs) == 37


def test_strip_headers(news20_docs):
    d = next(d for d in news20_docs if d.doc_id.endswith("sci.space/60804"))
    body = ts.strip_email_headers(d.text)
    assert "From:" not in body.split("\n", 1)[0] and len(body) < len(d.text)
    assert ts.strip_email_headers("Subject: x\nFrom: y\n\nbody\n\nmore") == "body\n\nmore"
    assert ts.strip_email_headers("no blank line") == ""


def test_truncated_tar_keeps_members_before_the_cut(tmp_path, news20_tar):
    data = pathlib.Path(news20_tar).read_bytes()[:400_000]
    path = str(tmp_path / "cut.tar.gz")
    pathlib.Path(path).write_bytes(data)
    docs, dead = split(list(read_documents(path, "text", encoding="latin-1")))
    assert len(dead) == 1 and "truncated" in dead[0].error
    assert len(docs) > 50 and all(d.label for d in docs)


# ----------------------------------------------------------------------------- text files

def make_tree(root):
    (root / "sport").mkdir(parents=True)
    (root / "tech").mkdir()
    (root / "sport" / "a.txt").write_text("Football is great\n", encoding="utf-8")
    (root / "sport" / "b").write_bytes("Caf\xe9 au lait".encode("latin-1"))     # not UTF-8
    (root / "tech" / "c.txt.gz").write_bytes(gzip.compress("Computers café".encode("utf-8")))
    (root / "tech" / "empty.txt").write_text("  \n\n")
    (root / ".hidden").write_text("secret")
    (root / "tech" / ".DS_Store").write_bytes(b"\x00\x01")


def test_text_directory_glob_file_url_and_bad_records(tmp_path):
    root = tmp_path / "corpus"
    make_tree(root)
    inputs = expand_inputs([str(root)])
    names = [os.path.relpath(p, root) for p, _ in inputs]
    assert names == ["sport/a.txt", "sport/b", "tech/c.txt.gz", "tech/empty.txt"]
    assert {f for _, f in inputs} == {"text"}
    assert expand_inputs(["file://" + str(root / "*" / "*.txt")]) == [
        (str(root / "sport" / "a.txt"), "text"), (str(root / "tech" / "empty.txt"), "text")]
    assert expand_inputs([str(root / "**" / "c.*")]) == [(str(root / "tech" / "c.txt.gz"), "text")]
    out = {}
    for path, fmt in inputs:
        out[os.path.relpath(path, root)] = list(read_documents(path, fmt))
    a = out["sport/a.txt"][0]
    assert (a.doc_id, a.label, a.text) == (str(root / "sport" / "a.txt"), "sport",
                                          "Football is great\n")
    b = out["sport/b"][0]
    assert isinstance(b, DeadLetter) and "cannot decode as utf-8" in b.error and "Caf" in b.snippet
    assert out["tech/c.txt.gz"][0].text == "Computers café"
    e = out["tech/empty.txt"]
    # an empty document is a document (counted as empty by the vectorize), not a dead letter
    assert len(e) == 1 and isinstance(e[0], RawDocument) and e[0].text.strip() == ""
    # encoding_errors="replace" keeps the latin-1 file
    b2 = list(read_documents(str(root / "sport" / "b"), "text", encoding_errors="replace"))[0]
    assert isinstance(b2, RawDocument) and b2.text.startswith("Caf")
    b3 = list(read_documents(str(root / "sport" / "b"), "text", encoding="latin-1"))[0]
    assert b3.text == "Café au lait"
    f = list(read_documents("file://" + str(root / "sport" / "a.txt"), "text"))[0]
    assert f.text == a.text


def test_unknown_extension_needs_a_format(tmp_path, wiki_sample):
    p = tmp_path / "table.xlsx"
    p.write_text("a,b\n")
    sniffed = tmp_path / "sniff"
    sniffed.mkdir()
    (sniffed / "dump.bin.bz2").write_bytes(pathlib.Path(wiki_sample).read_bytes())
    (sniffed / "corpus.dat").write_text("%%MatrixMarket matrix coordinate real general\n1 1 1\n")
    (sniffed / "docs.log").write_text('{"text": "a"}\n')
    assert [f for _, f in expand_inputs([str(sniffed)])] == ["mm", "jsonl", "wiki"]
    with pytest.raises(InputError, match=r"table\.xlsx.*give --format"):
        expand_inputs([str(tmp_path)])
    assert expand_inputs([str(p)], "lines") == [(str(p), "lines")]
    assert [detect_format(n) for n in ["x.xml.bz2", "enwiki-multistream.xml.bz2", "a.jsonl.gz",
                                       "docword.kos.txt.gz", "c.mm", "c.lda-c", "c.tgz", "c.zip",
                                       "notes.txt", "x.xlsx",
                                       "enwiki-20240601-pages-articles1.xml-p1p41242.bz2"]] == [
        "wiki", "wiki", "jsonl", "uci", "mm", "ldac", "text", "text", "text", None, "wiki"]
    # a name without a known suffix says nothing: the content tells (tests/test_format_sniffing)
    assert [detect_format(n) for n in ["60804", "comp.graphics-38758", "sci.space/60804"]] == \
        [None, None, None]
    assert set(FORMATS) == {"auto", "wiki", "text", "lines", "jsonl", "uci", "ldac", "mm",
                            "csv", "tsv", "parquet", "arrow"}
    assert [detect_format(n) for n in ["a.csv", "a.csv.gz", "a.tsv", "part-0.snappy.parquet",
                                       "data-00000-of-00001.arrow", "x.feather"]] == [
        "csv", "csv", "tsv", "parquet", "arrow", "arrow"]


def test_lines(tmp_path):
    p = tmp_path / "docs.txt.bz2"
    raw = b"first document here\n\n  \nsecond \xff\xfe bad bytes\nthird one\r\nlast no newline"
    p.write_bytes(bz2.compress(raw))
    docs, dead = split(list(read_documents(str(p), "lines")))
    assert [(d.doc_id, d.text) for d in docs] == [
        ("docs.txt.bz2:1", "first document here"), ("docs.txt.bz2:5", "third one"),
        ("docs.txt.bz2:6", "last no newline")]
    assert len(dead) == 1 and dead[0].position == "line 4" and "utf-8" in dead[0].error
    docs, dead = split(list(read_documents(str(p), "lines", encoding_errors="replace")))
    assert len(docs) == 4 and dead == []
    # a line over max_doc_bytes is one dead letter; the next line still comes out
    q = tmp_path / "long.txt"
    q.write_bytes(b"x" * 5000 + b"\nshort line\n")
    docs, dead = split(list(read_documents(str(q), "lines", max_doc_bytes=1000)))
    assert [d.text for d in docs] == ["short line"] and "longer than" in dead[0].error


def test_jsonl_fields_and_bad_records(tmp_path):
    p = tmp_path / "docs.jsonl"
    lines = [
        json.dumps({"id": 7, "body": "Hello world", "meta": {"cat": "greet", "t": "Hi"}}),
        json.dumps({"body": "no id here", "meta": {"cat": "x"}}),
        '{"id": 9, "body": "broken json',
        json.dumps({"id": 10, "other": "no body"}),
        json.dumps({"id": 11, "body": "   "}),
        json.dumps([1, 2]),
        "",
    ]
    data = "\n".join(lines).encode("utf-8") + b'\n{"id": 12, "body": "caf\xe9"}\n'
    data += json.dumps({"id": "z", "body": "Ünïcode ok"}, ensure_ascii=False).encode("utf-8")
    p.write_bytes(data)
    opts = dict(text_field="body", label_field="meta.cat", title_field="meta.t")
    docs, dead = split(list(read_documents(str(p), "jsonl", **opts)))
    assert [(d.doc_id, d.text, d.label, d.title) for d in docs] == [
        ("7", "Hello world", "greet", "Hi"), ("docs.jsonl:2", "no id here", "x", None),
        ("11", "   ", None, None), ("z", "Ünïcode ok", None, None)]
    errors = {d.position: d.error for d in dead}
    assert errors["line 3"].startswith("invalid JSON")
    assert "text field 'body' is missing" in errors["line 4"]
    assert "expected an object" in errors["line 6"]
    assert "cannot decode as utf-8" in errors["line 8"]
    assert len(dead) == 4
    assert expand_inputs([str(p)]) == [(str(p), "jsonl")]


# ----------------------------------------------------------------------------- remote paths

class FakeMetadata:
    def __init__(self, path):
        self.path = path


class FakeMatch:
    def __init__(self, paths):
        self.metadata_list = [FakeMetadata(p) for p in paths]


def test_gs_urls_go_through_beam_filesystems(tmp_path, monkeypatch, wiki_sample):
    """No network here: stand in for GCS with a fake FileSystems that serves local files, and
    check that listing and reading a gs:// URL use it (and nothing else)."""
    from apache_beam.io.filesystems import FileSystems
    (tmp_path / "a.jsonl").write_text('{"id": 1, "text": "remote document"}\n')
    files = {"gs://bucket/data/a.jsonl": str(tmp_path / "a.jsonl"),
             "gs://bucket/data/wiki.xml.bz2": wiki_sample}
    calls = []

    def fake_match(patterns, limits=None):
        calls.append(("match", patterns[0]))
        rx = re.compile(re.escape(patterns[0]).replace(r"\*\*", ".*").replace(r"\*", "[^/]*"))
        return [FakeMatch(sorted(u for u in files if rx.fullmatch(u)))]

    def fake_open(path, mime_type=None, compression_type=None):
        calls.append(("open", path, compression_type))
        return open(files[path], "rb")

    monkeypatch.setattr(FileSystems, "match", staticmethod(fake_match))
    monkeypatch.setattr(FileSystems, "open", staticmethod(fake_open))
    assert expand_inputs(["gs://bucket/data/*"]) == [
        ("gs://bucket/data/a.jsonl", "jsonl"), ("gs://bucket/data/wiki.xml.bz2", "wiki")]
    assert expand_inputs(["gs://bucket/data"]) == expand_inputs(["gs://bucket/data/*"])
    d = list(read_documents("gs://bucket/data/a.jsonl", "jsonl"))
    assert d[0].text == "remote document" and d[0].source == "gs://bucket/data/a.jsonl"
    w = list(read_documents("gs://bucket/data/wiki.xml.bz2", "wiki"))
    assert len(w) == 106
    # the raw bytes are fetched uncompressed and decompressed by us (bz2 multistream-safe)
    assert ("open", "gs://bucket/data/wiki.xml.bz2", "uncompressed") in calls
    with pytest.raises(InputError, match="matches no file"):
        expand_inputs(["gs://bucket/nothing/*.txt"])


def test_unsupported_scheme_is_an_input_error():
    with pytest.raises(InputError, match="nosuchscheme://b/x.txt"):
        list(read_documents("nosuchscheme://b/x.txt", "text"))


def test_files_are_closed(tmp_path, wiki_sample):
    """Every reader closes what it opens, also the raw file under a decompressor."""
    import gc
    import warnings
    p = tmp_path / "a.txt.gz"
    p.write_bytes(gzip.compress(b"one line\nanother line\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        assert len(list(read_documents(str(p), "lines"))) == 2
        assert len(list(read_documents(str(p), "text"))) == 1
        assert sum(1 for _ in iter_wiki_page_chunks(wiki_sample)) == 206
        gc.collect()
