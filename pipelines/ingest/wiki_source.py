"""MediaWiki XML dumps (``pages-articles``, plain / ``.bz2`` multistream / ``.gz``): pages are
split from the decompressed byte stream and each is read on its own (a string scan,
:mod:`pipelines.ingest.wiki_page`, or ElementTree for a page not in the plain export form;
article namespace only, redirects skipped), and the markup is stripped exactly as gensim's
``WikiCorpus`` does. Re-exported by :mod:`pipelines.ingest.text_sources`, which dispatches on
the format."""
from __future__ import annotations

import logging
import re
from typing import Iterator, Sequence, Tuple, Union
from xml.etree import ElementTree as ET

from pipelines.ingest.input_files import (snippet_of, ChunkReader, compression_of, DeadLetter,
                                          DECOMPRESS_ERRORS, DEFAULT_MAX_DOC_BYTES, InputError,
                                          open_decompressed, RawDocument, READ_BLOCK)
from pipelines.ingest.wiki_page import PageFields, scan_page, unescape

logger = logging.getLogger(__name__)

#: MediaWiki namespaces whose titles gensim's WikiCorpus drops (gensim IGNORED_NAMESPACES).
IGNORED_NAMESPACES = ("Wikipedia", "Category", "File", "Portal", "Template", "MediaWiki",
                      "User", "Help", "Book", "Draft", "WikiProject", "Special", "Talk")
_IGNORED_PREFIXES = tuple(p + ":" for p in IGNORED_NAMESPACES)
#: gensim WikiCorpus.ARTICLE_MIN_WORDS: articles with fewer tokens are dropped by WikiCorpus.
ARTICLE_MIN_TOKENS = 50
MEDIAWIKI_NS_PREFIX = b"http://www.mediawiki.org/xml/export-"


def _check_dump_header(head: bytes, path: str) -> None:
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") and "<mediawiki".encode(
            "utf-16-le" if head[0] == 0xFF else "utf-16-be") in head:
        raise InputError("input %s is a MediaWiki XML dump in UTF-16, which is not read; "
                         "convert it to UTF-8 first (e.g. iconv -f UTF-16 -t UTF-8)" % path)
    i = head.find(b"<mediawiki")
    if i < 0 or head.find(MEDIAWIKI_NS_PREFIX, i) < 0:
        raise InputError("input %s is not a MediaWiki XML dump (no <mediawiki xmlns=\"%s...\"> "
                         "root element in its first %d bytes); expected a pages-articles dump "
                         "(.xml, .xml.bz2, .xml.gz)"
                         % (path, MEDIAWIKI_NS_PREFIX.decode(), len(head)))


def iter_wiki_page_chunks(path: str, max_page_bytes: int = DEFAULT_MAX_DOC_BYTES
                          ) -> Iterator[Union[Tuple[str, str], DeadLetter]]:
    """Stream ``(position, page_xml_text)`` for each ``<page>...</page>`` of a dump.

    ``position`` is ``"page N @ byte B"`` (N counts pages from 1, B is the offset of
    ``<page>`` in the decompressed stream). A page that is not valid UTF-8 or larger than
    ``max_page_bytes`` is a DeadLetter; a truncated or corrupt compressed stream yields one
    DeadLetter at the point of failure and stops (pages before it are kept). Raises
    InputError if the file is missing, cannot be decompressed at all, or is not a dump.

    A damaged page is one DeadLetter and the reader resynchronises at the next ``<page>``:
    a page whose ``</page>`` is missing or garbled (or whose XML is cut short) ends where
    the next ``<page>`` starts, and a ``</page>`` met outside any page (the page's start tag
    was destroyed) marks the text before it as a page without a start.

    Pages are found with ``bytes.find`` on the decompressed stream (``<page>`` cannot occur
    inside page text, which is XML-escaped), so splitting costs almost nothing; each page is
    then parsed on its own by :func:`parse_wiki_page`.
    """
    # one streaming loop over the decompressed bytes: each dead-letter case is a branch of it
    stream = open_decompressed(path)
    f = ChunkReader(stream)
    try:
        try:
            buf = f.read(1 << 16)
        except DECOMPRESS_ERRORS as e:
            raise InputError("input %s cannot be read as %s (%s); expected a MediaWiki XML "
                             "dump" % (path, compression_of(path) or "plain XML", e)) from e
        _check_dump_header(buf, path)
        base = 0          # decompressed offset of buf[0]
        pos = 0           # scan position within buf
        end_from = -1     # where to resume looking for </page> of the page starting at pos
        n_pages = 0
        skipping = False  # inside an oversized page: drop bytes until the next <page>
        for _ in range(1 << 62):   # capped: every pass consumes input or ends
            start = -1
            if skipping:
                nxt = buf.find(b"<page>", pos)
                if nxt >= 0:
                    skipping, pos, end_from = False, nxt, -1
                    continue
            else:
                start = buf.find(b"<page>", pos)
                orphan = buf.find(b"</page>", pos, start if start >= 0 else len(buf))
                if orphan >= 0:
                    n_pages += 1
                    yield DeadLetter(path, "page %d @ byte %d" % (n_pages, base + orphan),
                                     "</page> without a <page> start tag (damaged page start); "
                                     "the text before it is skipped",
                                     snippet_of(buf[max(pos, orphan - 400):orphan + 7]))
                    pos, end_from = orphan + 7, -1
                    continue
                if start >= 0:
                    end = buf.find(b"</page>", max(start + 6, end_from))
                    nxt = buf.find(b"<page>", max(start + 6, end_from), end if end >= 0 else len(buf))
                    if nxt >= 0:
                        n_pages += 1
                        yield DeadLetter(path, "page %d @ byte %d" % (n_pages, base + start),
                                         "<page> without a </page> end tag before the next "
                                         "<page> (damaged or truncated page); skipped",
                                         snippet_of(buf[start:min(nxt, start + 400)]))
                        pos, end_from = nxt, -1
                        continue
                    if end >= 0:
                        end += 7
                        n_pages += 1
                        position = "page %d @ byte %d" % (n_pages, base + start)
                        chunk = buf[start:end]
                        pos, end_from = end, -1
                        if len(chunk) > max_page_bytes:
                            yield DeadLetter(path, position, "page larger than max_page_bytes="
                                             "%d; skipped" % max_page_bytes,
                                             snippet_of(chunk[:400]))
                            continue
                        try:
                            text = chunk.decode("utf-8")
                        except UnicodeDecodeError as e:
                            yield DeadLetter(path, position, "page is not valid UTF-8: %s" % e,
                                             snippet_of(chunk))
                            continue
                        yield position, text
                        continue
                    if len(buf) - start > max_page_bytes:
                        n_pages += 1
                        yield DeadLetter(path, "page %d @ byte %d" % (n_pages, base + start),
                                         "page larger than max_page_bytes=%d; skipped"
                                         % max_page_bytes, snippet_of(buf[start:start + 400]))
                        skipping, pos, start = True, start + 6, -1
                        continue
            # need more input: keep only the unfinished page (or the last 6 bytes)
            keep_from = start if start >= 0 else max(pos, len(buf) - 6)
            base += keep_from
            buf = buf[keep_from:]
            pos = 0
            if start >= 0:
                end_from = max(6, len(buf) - 7)
            try:
                more = f.read(READ_BLOCK)
            except DECOMPRESS_ERRORS as e:
                lost = ("; the unfinished page %d @ byte %d and all after it are lost"
                        % (n_pages + 1, base)) if start >= 0 else "; pages after it are lost"
                yield DeadLetter(path, "byte %d (decompressed)" % (base + len(buf)),
                                 "compressed stream is corrupt or truncated: %s%s" % (e, lost),
                                 snippet_of(buf[:400]) if start >= 0 else "")
                return
            if not more:
                if start >= 0:
                    yield DeadLetter(path, "page %d @ byte %d" % (n_pages + 1, base),
                                     "dump ends inside a <page> (truncated file)",
                                     snippet_of(buf[:400]))
                return
            buf += more
    finally:
        stream.close()


def parse_wiki_page(page_xml: str, source: str, position: str,
                    namespaces: Sequence[str] = ("0",), strip_markup: bool = True
                    ) -> Union[RawDocument, DeadLetter, None]:
    """One ``<page>`` element to a RawDocument (markup stripped as gensim does).

    Returns None for pages skipped on purpose: namespace not in ``namespaces``, a redirect
    (``<redirect>`` element or text starting with ``#REDIRECT``), or a title in one of
    gensim's IGNORED_NAMESPACES. A page that is not well-formed XML or has no id is a
    DeadLetter.

    The fields are read by :func:`pipelines.ingest.wiki_page.scan_page` (a string scan, the
    text unescaped only for kept pages); a page it does not vouch for is parsed with
    ElementTree, with the same result.
    """
    fields = scan_page(page_xml)
    escaped = fields is not None
    if not escaped:
        fields = _parse_page_xml(page_xml)
        if isinstance(fields, str):
            return DeadLetter(source, position, fields, snippet_of(page_xml))
    page_id, ns, title, redirect, text = fields
    page_id = (page_id or "").strip()
    if not page_id:
        return DeadLetter(source, position, "<page> has no <id>", snippet_of(page_xml))
    ns = (ns or "0").strip()
    if namespaces and ns not in namespaces:
        return None
    if redirect:
        return None
    if title and title.startswith(_IGNORED_PREFIXES):
        return None
    if escaped:
        text = unescape(text)
    if text[:9].upper() == "#REDIRECT":
        return None
    if strip_markup:
        try:
            text = strip_wiki_markup(text)
        except Exception as e:   # defensive: the regex cascade should not fail
            return DeadLetter(source, position, "markup stripping failed: %r" % e,
                              snippet_of(page_xml))
    return RawDocument(doc_id=page_id, text=text, title=title, label=None, source=source,
                       position=position)


def _parse_page_xml(page_xml: str) -> Union[PageFields, str]:
    """The fields of :func:`~pipelines.ingest.wiki_page.scan_page` (text unescaped) by
    ElementTree, for any page; an error message when the page is not a well-formed
    ``<page>`` element."""
    try:
        elem = ET.fromstring(page_xml)
    except ET.ParseError as e:
        return "malformed <page> XML: %s" % e
    if elem.tag != "page":
        return "expected a <page> element, got <%s>" % elem.tag
    return (elem.findtext("id"), elem.findtext("ns"), elem.findtext("title"),
            elem.find("redirect") is not None, elem.findtext("revision/text") or "")


# --- markup stripping: gensim's filter_wiki, several times faster with identical output ------
#
# gensim.corpora.wikicorpus.filter_wiki is the bulk of the cost of reading a dump. Its output
# is reproduced exactly (tested on every page of the bundled sample, of gensim's other test
# dumps and of the benchmark dump, and on random strings of markup fragments) with changes that
# only alter how the regular-expression engine searches, not what matches:
#
# * RE_P2 ``(X)+$`` is written ``X(?:X)*$``: the same language, but it starts with the literal
#   ``\n[[`` so the engine jumps between candidate positions instead of trying every one;
# * RE_P1 ``<ref([> ].*?)(</ref>|/>)`` (dot matches all) scans to the first ``</ref>`` or ``/>``
#   with the unrolled loop ``[^/<]*(?:(?:<(?!/ref>)|/(?!>))[^/<]*)*`` instead of trying both
#   ends at every character; RE_P11 ``<(.*?)>`` is ``<[^>]*>`` (the same first ``>``);
# * RE_P12 ``(({\|)|(\|-(?!\d))|(\|}))(.*?)(?=\n)`` loses its capture groups (the replacement
#   is a constant);
# * RE_P13 ``(?<=A|B|..)(\||\!)R`` becomes ``[|!](?<=A[|!]|B[|!]|..)R``: the first character is
#   matched before the (fixed-width) look-behind, so the look-behind runs only at ``|``/``!``;
# * RE_P17 ``(\n...)|(^...)``: the ``^`` branch can only match at position 0, so it is tried
#   once there with gensim's own pattern, and the rest of the text is searched with the ``\n``
#   branch alone (a literal prefix again);
# * remove_template walks the runs of ``{`` / ``}`` (found by one regex) instead of every
#   character in Python, with the same counting rule: a template opens at ``{{`` and closes
#   at the ``}`` where the ``{`` and ``}`` counted since its start balance;
# * a substitution is skipped when the text lacks a string every match must contain (``<``
#   for the tag patterns, ``[`` for links, ``|``/``!`` for tables; for RE_P17 ``=``, ``span``
#   or ``bgcolor``, which its keywords contain: three searches, the first of which finds a
#   heading's ``=`` early in almost every article, where one search per keyword cost more than
#   the substitution itself).

_RE_P2_FAST = re.compile(r"\n\[\[[a-z][a-z][\w-]*:[^:\]]+\]\]"
                         r"(?:\n\[\[[a-z][a-z][\w-]*:[^:\]]+\]\])*$", re.UNICODE)
_RE_P12_FAST = re.compile(r"(?:\{\||\|-(?!\d)|\|\})(.*?)(?=\n)", re.UNICODE)
_RE_P13_FAST = re.compile(r"[|!](?<=\n[ ][|!]|\n\n[|!]|[ ]{2}[|!]|.\n[|!]|.\t[|!])"
                          r"([^[\]\n]*?\|)*", re.UNICODE)
_RE_P1_FAST = re.compile(r"<ref[> ][^/<]*(?:(?:<(?!/ref>)|/(?!>))[^/<]*)*(?:</ref>|/>)",
                         re.DOTALL | re.UNICODE)
_RE_P11_FAST = re.compile(r"<[^>]*>", re.DOTALL | re.UNICODE)
_RE_P17_NL = re.compile(r"\n.{0,4}(?:bgcolor|\d{0,1}[ ]?colspan|rowspan|style=|class=|align=|"
                        r"scope=)(?:.*)", re.UNICODE)
_RE_BRACE_RUNS = re.compile(r"\{\{*|\}\}*")   # (faster in re than \{+|\}+)
#: every keyword of RE_P17 (bgcolor, colspan, rowspan, style=, class=, align=, scope=)
#: contains one of these
_P17_NEEDS = ("=", "span", "bgcolor")


def remove_template(s: str) -> str:
    """gensim ``wikicorpus.remove_template`` (nested ``{{...}}`` removed), same output."""
    if "{{" not in s:
        return s
    starts, ends = [], [-1]
    in_template = False
    n_open = n_close = 0
    for m in _RE_BRACE_RUNS.finditer(s):
        i, j = m.span()
        if s[i] == "{":
            if in_template:
                n_open += j - i
            elif j - i >= 2:             # the template opens at the run's first "{"
                starts.append(i)
                in_template = True
                n_open = j - i           # gensim counts the opening "{{" too
        elif in_template:
            if n_close + j - i >= n_open:    # balanced at a "}" of this run; the rest is text
                ends.append(i + n_open - n_close - 1)
                in_template = False
                n_open = n_close = 0
            else:
                n_close += j - i
    starts.append(None)
    return "".join(s[end + 1:start] for end, start in zip(ends, starts))


def _sub_p17(text: str) -> str:
    from gensim.corpora.wikicorpus import RE_P17
    m = RE_P17.match(text)
    if m is not None:
        return "\n" + _RE_P17_NL.sub("\n", text[m.end():])
    return _RE_P17_NL.sub("\n", text)


def remove_markup(text: str, promote_remaining: bool = True, simplify_links: bool = True) -> str:
    """gensim ``wikicorpus.remove_markup``, same output (see the notes above)."""
    from gensim.corpora import wikicorpus as wc
    text = _RE_P2_FAST.sub("", text)          # the last list (interlanguage links)
    text = remove_template(text)
    text = wc.remove_file(text)
    for iters in range(1, 1 << 30):           # gensim: stop when unchanged or after 3 passes
        old = text
        if "<" in text:                       # (each guard: the pattern needs that text)
            text = wc.RE_P0.sub("", text)     # comments
            text = _RE_P1_FAST.sub("", text)  # footnotes
            text = wc.RE_P9.sub("", text)     # <nowiki>
            text = wc.RE_P10.sub("", text)    # <math>
            text = _RE_P11_FAST.sub("", text)  # remaining tags
        if "[" in text:
            text = wc.RE_P14.sub("", text)    # categories
            text = wc.RE_P5.sub("\\3", text)  # urls, keep description
            if simplify_links:
                text = wc.RE_P6.sub("\\2", text)  # links, keep description
        if "|" in text or "!" in text:        # table markup, as gensim
            text = text.replace("!!", "\n|")
            text = text.replace("|-||", "\n|")
            text = _RE_P12_FAST.sub("\n", text)
            text = text.replace("|||", "|\n|")
            text = text.replace("||", "\n|")
            text = _RE_P13_FAST.sub("\n", text)
        if _P17_NEEDS[0] in text or _P17_NEEDS[1] in text or _P17_NEEDS[2] in text:
            text = _sub_p17(text)
        text = text.replace("[]", "")
        if old == text or iters > 2:
            break
    if promote_remaining:
        text = text.replace("[", "").replace("]", "")
    return text


def strip_wiki_markup(text: str, exact_gensim: bool = False) -> str:
    """gensim ``filter_wiki``: HTML entities decoded, wiki markup removed.

    ``exact_gensim=True`` calls gensim's own function (slower, same output).
    """
    from gensim.corpora.wikicorpus import filter_wiki
    from gensim.utils import decode_htmlentities
    if exact_gensim:
        return filter_wiki(text)
    return remove_markup(decode_htmlentities(text))


def read_wiki(path: str, namespaces=("0",), max_doc_bytes=DEFAULT_MAX_DOC_BYTES, **_):
    for item in iter_wiki_page_chunks(path, max_page_bytes=max_doc_bytes):
        if isinstance(item, DeadLetter):
            yield item
            continue
        position, page = item
        doc = parse_wiki_page(page, path, position, namespaces=namespaces)
        if doc is not None:
            yield doc
