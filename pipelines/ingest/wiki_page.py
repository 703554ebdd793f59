"""The fields of one dump ``<page>`` read by a string scan instead of an XML parser.

:func:`scan_page` cuts a page into its tags and the text between them with one regex split,
checks the tags' nesting once per page layout (a dump has a few dozen: with or without a
redirect, a comment, an IP contributor...), takes ``<title>``, ``<ns>``, ``<id>``,
``<redirect>`` and the first ``revision/text`` from the pieces, and leaves the unescaping of the
text to the caller, for kept pages only. It vouches for its result only on the plain form every
MediaWiki export writes: ASCII tag and attribute names without namespace prefixes (but
``xml:space``), quoted attribute values, the five predefined XML entities, no comments / CDATA
/ processing instructions / character references, tags properly nested under one ``<page>``
root. Anything else -- including every page that is not well-formed XML -- returns None, and
the caller parses that page with ElementTree. On the pages it accepts, the fields are those
ElementTree gives (``findtext`` semantics: first matching child, ``""`` for an empty element,
entities replaced, line ends normalised), which the tests check on every page of real dumps
and on mutated pages.
"""
from __future__ import annotations

import re
from typing import Optional, Tuple
from xml.sax import saxutils

# An XML 1.0 name without a prefix (and not starting with "xml", which is reserved and would
# include xmlns declarations), or the one prefixed attribute the dumps use.
_NAME = r"(?![Xx][Mm][Ll])[A-Za-z_][A-Za-z0-9_.-]*"
_ATTR = r"[ \t\n]+(%s|xml:space)[ \t\n]*=[ \t\n]*(?:\"[^\"<]*\"|'[^'<]*')" % _NAME
#: one start, end or empty-element tag: (slash, name, attributes, self-closing slash)
_TAG = re.compile(r"<(/?)(%s)((?:%s)*)[ \t\n]*(/?)>" % (_NAME, _ATTR.replace("(", "(?:", 1)))
_ATTR_NAME = re.compile(_ATTR)
#: what this scanner leaves to the XML parser: characters XML 1.0 forbids (in the UTF-8
#: bytes: controls, U+FFFE, U+FFFF), "]]>" (not allowed in character data), an "&" that is not
#: one of the five predefined entities (character references, undefined or malformed entities)
_BAD_BYTES = bytes(c for c in range(32) if c not in (9, 10, 13))
_BAD_AMP = re.compile(r"&(?!(?:lt|gt|amp|quot|apos);)")
#: splits a page into text, tag, text, tag, ..., text (a tag is ``<`` up to the next ``>``;
#: a ``>`` inside an attribute value gives a piece that fails the tag check: left to the parser)
_SPLIT = re.compile(r"(<[^<>]*>)")
#: tag string -> (is an end tag, name, is empty-element), or () when not of the plain form;
#: page layout (the tuple of its tags' infos) -> where its fields are (see _plan), or None.
#: Both are cleared when large (attribute values such as ``bytes="..."`` make many distinct
#: tags).
_TAG_INFO: dict = {}
_PLANS: dict = {}
_CACHE_LIMIT = 4096

PageFields = Tuple[Optional[str], Optional[str], Optional[str], bool, str]


def _tag_info(tag: str) -> tuple:
    info = _TAG_INFO.get(tag)
    if info is not None:
        return info
    m = _TAG.fullmatch(tag)
    info = ()
    if m is not None:
        close, name, attrs, empty = m.groups()
        names = _ATTR_NAME.findall(attrs)
        if not (close and (attrs or empty)) and len(set(names)) == len(names):
            info = (bool(close), name, bool(empty))
    if len(_TAG_INFO) > _CACHE_LIMIT:
        _TAG_INFO.clear()
    _TAG_INFO[tag] = info
    return info


def _plan(infos: tuple):
    """Where a page with these tags keeps its fields: ``(id, ns, title, redirect, text)``,
    each field the index in the tag list of its start tag (its content is the text piece
    after it) or -1 for an empty element, None when absent; None when the tags are not
    well nested under one ``<page>`` root or a field has child elements."""
    found = {}
    redirect = False
    stack = []
    last = len(infos) - 1
    for i, info in enumerate(infos):
        if not info:
            return None
        close, name, empty = info
        if close:
            if not stack or stack.pop() != name:
                return None
            if not stack and i != last:  # something after the root
                return None
            continue
        depth = len(stack)
        if depth == 0:
            if name != "page" or i != 0:
                return None
        elif depth == 1 and name == "redirect":
            redirect = True
        elif (depth == 1 and name in ("title", "ns", "id")) or (
                depth == 2 and name == "text" and stack[1] == "revision"):
            key = name if depth == 1 else "revision/text"
            if key not in found:
                if empty:
                    found[key] = -1
                elif i < last and infos[i + 1] == (True, name, False):
                    found[key] = i
                else:                    # a child element inside a field: not the plain form
                    return None
        if not empty:
            stack.append(name)
    if stack or not infos:
        return None                      # the root never closed
    return (found.get("id"), found.get("ns"), found.get("title"), redirect,
            found.get("revision/text"))


_QUOTES = {"&quot;": '"', "&apos;": "'"}


def unescape(s: str) -> str:
    """Replace the five predefined XML entities (the only ``&`` that :func:`scan_page`
    accepts) with the standard library's ``saxutils.unescape``, which replaces ``&amp;``
    last, so that ``&amp;lt;`` stays ``&lt;``."""
    if "&" not in s:
        return s
    return saxutils.unescape(s, _QUOTES)


def scan_page(page: str) -> Optional[PageFields]:
    """``(id, ns, title, has_redirect, escaped_text)`` of a ``<page>`` element, or None when
    the page is not in the plain form described in the module docstring.

    ``id``, ``ns`` and ``title`` are ``findtext`` of the page's first ``id`` / ``ns`` /
    ``title`` child (None when absent, entities replaced); ``has_redirect`` tells whether the
    page has a ``redirect`` child; ``escaped_text`` is the content of the first
    ``revision/text`` (``""`` when absent or empty) with its entities still escaped: pass it
    to :func:`unescape` when the page is kept. Line ends are normalised as an XML parser
    does (``\\r\\n`` and a lone ``\\r`` read as ``\\n``).
    """
    if not page.startswith("<page") or "]]>" in page or _BAD_AMP.search(page) is not None:
        return None
    raw = page.encode("utf-8")
    if (len(raw.translate(None, _BAD_BYTES)) != len(raw) or b"\xef\xbf\xbe" in raw
            or b"\xef\xbf\xbf" in raw):
        return None
    if "\r" in page:
        page = page.replace("\r\n", "\n").replace("\r", "\n")
    # the article text is most of the page and holds no "<": split only what is around it
    t = page.find("<text")
    t = page.find(">", t) + 1 if t > 0 else 0
    u = page.find("<", t) if t > 0 else -1
    if u > 0:
        parts = _SPLIT.split(page[:t])
        parts[-1] = page[t:u]
        parts += _SPLIT.split(page[u:])[1:]
    else:
        parts = _SPLIT.split(page)
    tags = parts[1::2]
    if len(tags) != page.count("<") or parts[0] or parts[-1].strip(" \t\n"):
        return None                      # a "<" that starts no tag, text outside the root
    infos = tuple(map(_TAG_INFO.get, tags))
    if None in infos:
        infos = tuple(map(_tag_info, tags))
    plan = _PLANS.get(infos, False)
    if plan is False:
        plan = _plan(infos)
        if len(_PLANS) > _CACHE_LIMIT:
            _PLANS.clear()
        _PLANS[infos] = plan
    if plan is None:
        return None
    i_id, i_ns, i_title, redirect, i_text = plan
    fields = [None if i is None else "" if i < 0 else parts[2 * i + 2]
              for i in (i_id, i_ns, i_title, i_text)]
    return (None if fields[0] is None else unescape(fields[0]),
            None if fields[1] is None else unescape(fields[1]),
            None if fields[2] is None else unescape(fields[2]),
            redirect, fields[3] or "")
