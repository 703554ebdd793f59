"""The dump page scan (``wiki_page.scan_page``) against ElementTree, and the markup stripper
against gensim's ``filter_wiki`` + tokenizer, on every page of the real dumps at hand: the
bundled sample, gensim's own test dumps (English table markup, Bulgarian in UTF-16), and the
vectorize benchmark's dump (20 Newsgroups posts as pages)."""
import bz2
import os
import random
import re
import sys

import pytest

from pipelines.ingest import wiki_source as ws
from pipelines.ingest.input_files import DeadLetter, RawDocument
from pipelines.ingest.tokenize import TokenizerConfig, tokenize
from pipelines.ingest.wiki_page import scan_page, unescape

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENSIM_DUMPS = ("enwiki-table-markup.xml.bz2", "bgwiki-latest-pages-articles-shortened.xml.bz2")


def _pages_of(xml: str):
    return re.findall(r"<page>.*?</page>", xml, re.S)


def _gensim_dump(name):
    from gensim.test.utils import datapath
    path = datapath(name)
    if not os.path.exists(path):
        pytest.skip("gensim's test dump %s is absent from this gensim install" % path)
    raw = bz2.open(path).read()
    # the Bulgarian dump is UTF-16 (with a BOM); the others UTF-8
    return raw.decode("utf-16" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8")


@pytest.fixture(scope="module")
def real_pages(wiki_sample):
    out = {"sample": [page for _, page in ws.iter_wiki_page_chunks(wiki_sample)]}
    for name in GENSIM_DUMPS:
        out[name] = _pages_of(_gensim_dump(name))
    assert len(out["sample"]) == 206 and all(out.values())
    return out


def _scanned(page):
    f = scan_page(page)
    return None if f is None else f[:4] + (unescape(f[4]),)


def test_scan_equals_elementtree_on_every_real_page(real_pages):
    for name, pages in real_pages.items():
        for page in pages:
            fields = _scanned(page)
            assert fields is not None, (name, page[:200])   # real exports are the plain form
            assert fields == ws._parse_page_xml(page), (name, page[:200])
    # the Bulgarian dump has Windows line ends: read as "\n", as the XML parser does
    assert any("\r\n" in p for p in real_pages[GENSIM_DUMPS[1]])


def test_scan_declines_what_it_cannot_vouch_for():
    base = ('<page>\n <title>A &amp; B</title>\n <ns>0</ns>\n <id>7</id>\n <revision>\n'
            '  <id>9</id>\n  <text bytes="3" xml:space="preserve">%s</text>\n </revision>\n'
            '</page>')
    assert _scanned(base % "x &lt;y&gt; &amp;lt;") == ("7", "0", "A & B", False, "x <y> &lt;")
    for text in ("&#65;", "&nbsp;", "<![CDATA[x]]>", "a<!-- c -->b", "a]]>b", "\x0c",
                 "a<b>c</b>", "&", "a<b"):
        assert scan_page(base % text) is None, text
    for page in ('<page xmlns="u"><id>1</id></page>', '<page a="1" a="2"><id>1</id></page>',
                 '<page><id>1</id></page><page>', '<page><id>1</id>', '<x><id>1</id></x>',
                 '<page><x:id>1</x:id></page>', ' <page><id>1</id></page>'):
        assert scan_page(page) is None, page
    # first revision's text, empty elements, redirects, a ">" inside an attribute value
    page = ('<page><title/><id>5</id><redirect title="a&gt;b" /><revision><text /></revision>'
            '<revision><text>second</text></revision></page>')
    assert _scanned(page) == ws._parse_page_xml(page) == ("5", None, "", True, "")
    page = '<page><id>5</id><redirect title="a>b" /></page>'
    assert scan_page(page) is None
    assert ws._parse_page_xml(page) == ("5", None, None, True, "")


def test_mutated_pages_scan_as_elementtree_parses_or_are_left_to_it(real_pages):
    """Damaged pages (bytes inserted or cut): the scan either declines (ElementTree decides,
    dead letter or fields) or gives exactly ElementTree's fields."""
    rng = random.Random(7)
    pool = [p for pages in real_pages.values() for p in pages[:40]]
    bits = ["<", ">", "&", "&amp;", "&#65;", "&lt;", "]]>", "\r", "\r\n", "\x01", "</page>",
            "<page>", "<id>", "</id>", "<text>", "</text>", "<text/>", "<!-- c -->",
            "<![CDATA[x]]>", '"', "'", ' a="b"', "/", "<redirect/>", "<x:y>", ' xmlns="u"',
            "<ns>1</ns>", "<revision>", "</revision>", "\n", "é", "\ufffe"]
    scanned = 0
    for _ in range(1500):
        page = rng.choice(pool)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(page) + 1)
            if rng.random() < 0.5:
                page = page[:i] + rng.choice(bits) + page[i:]
            else:
                page = page[:i] + page[i + rng.randint(1, 8):]
        fields = _scanned(page)
        if fields is not None:
            scanned += 1
            assert fields == ws._parse_page_xml(page), repr(page[:300])
    assert scanned > 300


def test_parse_wiki_page_results_unchanged(real_pages):
    """parse_wiki_page through the scan gives what the ElementTree path gives (documents,
    skipped pages, dead letters), with and without the namespace filter."""
    from xml.etree import ElementTree as ET

    def by_elementtree(page, namespaces=("0",)):
        try:
            elem = ET.fromstring(page)
        except ET.ParseError as e:
            return DeadLetter("src", "pos", "malformed <page> XML: %s" % e, "")
        page_id = (elem.findtext("id") or "").strip()
        ns = (elem.findtext("ns") or "0").strip()
        title = elem.findtext("title")
        text = elem.findtext("revision/text") or ""
        if (namespaces and ns not in namespaces) or elem.find("redirect") is not None or (
                title and title.startswith(ws._IGNORED_PREFIXES)) or \
                text[:9].upper() == "#REDIRECT":
            return None
        return RawDocument(doc_id=page_id, text=text, title=title, label=None, source="src",
                           position="pos")
    for pages in real_pages.values():
        for page in pages:
            for namespaces in (("0",), ()):
                ours = ws.parse_wiki_page(page, "src", "pos", namespaces, strip_markup=False)
                assert ours == by_elementtree(page, namespaces)


GENSIM_WIKI_CFG = TokenizerConfig(deaccent=False)


def _article_texts(pages):
    for page in pages:
        fields = ws._parse_page_xml(page)
        if not isinstance(fields, str) and not fields[3]:
            yield fields[4]


def test_markup_stripping_is_gensims_token_for_token_on_every_real_page(real_pages):
    from gensim.corpora.wikicorpus import filter_wiki, tokenize as gensim_tokenize
    n = 0
    for pages in real_pages.values():
        for text in _article_texts(pages):
            ours = ws.strip_wiki_markup(text)
            ref = filter_wiki(text)
            assert ours == ref
            assert tokenize(ours, GENSIM_WIKI_CFG) == gensim_tokenize(ref)
            n += 1
    assert n >= 110


@pytest.mark.slow
def test_bench_dump_scans_and_strips_as_elementtree_and_gensim(tmp_path):
    """Every page of the vectorize benchmark's dump (20 Newsgroups posts as pages + the
    sample's pages)."""
    sys.path.insert(0, REPO)
    from benchmarks import vectorize_bench as vb
    from gensim.corpora.wikicorpus import filter_wiki
    if not os.path.exists(vb.NEWS20):
        pytest.skip("20 Newsgroups archive %s is absent" % vb.NEWS20)
    path = str(tmp_path / "bench.xml.bz2")
    n = vb.build_dump(path)
    pages = [page for _, page in ws.iter_wiki_page_chunks(path)]
    assert len(pages) == n
    for page in pages:
        fields = ws._parse_page_xml(page)
        assert _scanned(page) == fields
        assert ws.strip_wiki_markup(fields[4]) == filter_wiki(fields[4])


def test_markup_stripping_is_gensims_on_random_tag_and_brace_fragments():
    """The rewritten searches (footnotes, tags, template braces, the RE_P17 guard) on random
    strings of the fragments they look for."""
    from gensim.corpora.wikicorpus import filter_wiki
    frags = ["<ref>", "</ref>", "<ref ", "<ref/>", "</ref", "/>", "/", "<", ">", "<!--", "-->",
             "<math>", "</math>", "{", "}", "{{", "}}", "{{{", "}}}", "|", "\n", " ", "a",
             "=", "span", "colspan", "\n class=", "\n bgcolor", "[[a|b]]", "&amp;"]
    rng = random.Random(11)
    for _ in range(4000):
        s = "".join(rng.choice(frags) for _ in range(rng.randint(0, 30)))
        assert ws.strip_wiki_markup(s) == filter_wiki(s), repr(s)


def test_utf16_dump_is_refused_with_the_fix(tmp_path):
    from pipelines.ingest.input_files import InputError
    path = tmp_path / "bgwiki.xml.bz2"
    path.write_bytes(bz2.compress(_gensim_dump(GENSIM_DUMPS[1]).encode("utf-16")))
    with pytest.raises(InputError, match=r"bgwiki\.xml\.bz2 is a MediaWiki XML dump in UTF-16.*"
                                         r"iconv -f UTF-16 -t UTF-8"):
        next(ws.iter_wiki_page_chunks(str(path)))
