"""Input readers for the vectorize pipeline: MediaWiki dumps, text files, lines, JSON Lines.

Pure Python, no pipeline: the vectorize pipeline calls these functions inside its DoFns.
Every reader streams (bounded memory), and turns a record it cannot decode or parse into a
:class:`DeadLetter` (source, position, error, snippet) instead of crashing, so good
documents are never lost. An input that is wholly unusable (missing path, a file that is not
a MediaWiki dump given as ``wiki``, an unknown format) raises :class:`InputError` at once,
naming the input and saying what was expected.

Paths are local paths, ``file://`` URLs, or any Beam ``FileSystems`` URL (``gs://``,
``s3://``, ...); globs and directories are expanded by :func:`expand_inputs`. Compressed
files (``.gz``, ``.bz2``, ``.xz``) are decompressed by the Python standard library from the
raw byte stream (so bz2 multistream dumps and multi-member gzip work everywhere).

Formats (see docs/input-formats.md for the user documentation):

* ``wiki``  -- MediaWiki XML dump (``pages-articles``), plain / ``.bz2`` (multistream too) /
  ``.gz``. Pages are split from the byte stream (``<page>`` ... ``</page>``) and each page is
  parsed on its own with ElementTree; article namespace (``0``) only; redirects skipped;
  markup stripped exactly as gensim's ``WikiCorpus`` does (``gensim.corpora.wikicorpus
  .filter_wiki``); ``doc_id`` = page id, ``title`` kept.
* ``text``  -- one document per file; a tar archive (``.tar``, ``.tar.gz``, ``.tgz``,
  ``.tar.bz2``) is one input whose members are the documents. ``label`` = the parent folder
  name (20 Newsgroups' group). ``doc_id`` = the path as given (for a file) or
  ``<archive basename>/<member name>`` (for an archive member).
* ``lines`` -- one document per non-blank line; ``doc_id`` = ``<file basename>:<line number>``.
* ``jsonl`` -- one JSON object per line; configurable id / text / label / title fields.
* ``csv``, ``tsv``, ``parquet``, ``arrow`` -- tables, one document per row: see
  :mod:`pipelines.table_sources`.
* ``uci``, ``ldac``, ``mm`` -- bag-of-words corpora: see :mod:`pipelines.bow_sources`.

``encoding_errors="replace"`` puts U+FFFD for each undecodable byte sequence and counts them
(:attr:`RawDocument.replaced_chars`); ``"strict"`` makes such a record a DeadLetter.
"""
from __future__ import annotations

import bz2
import codecs
import glob
import gzip
import json
import logging
import lzma
import os
import re
import tarfile
import threading
import zlib
from dataclasses import asdict, dataclass
from typing import Iterator, List, Optional, Sequence, Tuple, Union
from xml.etree import ElementTree as ET

logger = logging.getLogger(__name__)

FORMATS = ("auto", "wiki", "text", "lines", "jsonl", "csv", "tsv", "parquet", "arrow", "uci",
           "ldac", "mm")
TABLE_FORMATS = ("csv", "tsv", "parquet", "arrow")
TEXT_FORMATS = ("wiki", "text", "lines", "jsonl") + TABLE_FORMATS
BOW_FORMATS = ("uci", "ldac", "mm")

#: MediaWiki namespaces whose titles gensim's WikiCorpus drops (gensim IGNORED_NAMESPACES).
IGNORED_NAMESPACES = ("Wikipedia", "Category", "File", "Portal", "Template", "MediaWiki",
                      "User", "Help", "Book", "Draft", "WikiProject", "Special", "Talk")
_IGNORED_PREFIXES = tuple(p + ":" for p in IGNORED_NAMESPACES)
#: gensim WikiCorpus.ARTICLE_MIN_WORDS: articles with fewer tokens are dropped by WikiCorpus.
ARTICLE_MIN_TOKENS = 50

DEFAULT_MAX_DOC_BYTES = 64 << 20     # a page / file / line larger than this is a dead letter
READ_BLOCK = 1 << 20                 # bytes read from a stream at a time
SNIPPET_CHARS = 200
MEDIAWIKI_NS_PREFIX = b"http://www.mediawiki.org/xml/export-"
_COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".lzma")
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz")
_TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst")
TABLE_SUFFIXES = {"csv": (".csv",), "tsv": (".tsv", ".tab"), "parquet": (".parquet", ".pq"),
                  "arrow": (".arrow", ".feather", ".ipc")}
_GLOB_CHARS = re.compile(r"[*?\[]")


class InputError(ValueError):
    """An input that is wholly unusable: missing, not of the expected format, unsupported."""


@dataclass
class RawDocument:
    """One document as read from an input, before tokenizing."""

    doc_id: str
    text: str
    title: Optional[str]
    label: Optional[str]
    source: str
    position: str
    replaced_chars: int = 0     # U+FFFD put for undecodable bytes (encoding_errors="replace")


@dataclass
class DeadLetter:
    """A record that could not be decoded or parsed: where it was, why, and its first chars."""

    source: str
    position: str
    error: str
    snippet: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def _snippet(data) -> str:
    if isinstance(data, bytes):
        data = data[:SNIPPET_CHARS * 4].decode("utf-8", "replace")
    return (data or "")[:SNIPPET_CHARS]


# ----------------------------------------------------------------------------- paths

def _local(path: str) -> str:
    """``file:///x`` -> ``/x``; other paths unchanged."""
    if path.startswith("file://"):
        return path[len("file://"):]
    return path


from pipelines.object_store_files import is_remote  # noqa: E402 (the one URL test)


def _filesystems():
    from apache_beam.io.filesystems import FileSystems
    return FileSystems


def open_binary(path: str):
    """A raw (not decompressed) binary file object for a local path, file:// or Beam URL.

    Raises InputError if the file does not exist or its URL scheme is not supported.
    """
    if is_remote(path):
        fs = _filesystems()
        try:
            return fs.open(path, compression_type="uncompressed")
        except ValueError as e:   # Beam: no filesystem for this scheme (missing extra)
            raise InputError("cannot open %s: %s (for gs:// install apache-beam[gcp], for "
                             "s3:// apache-beam[aws])" % (path, e)) from e
        except Exception as e:   # BeamIOError, FileNotFoundError, ...
            raise InputError("cannot open %s: %s" % (path, e)) from e
    local = _local(path)
    try:
        return open(local, "rb")
    except OSError as e:
        raise InputError("input %s cannot be opened: %s" % (path, e.strerror or e)) from e


def compression_of(path: str) -> Optional[str]:
    """'gzip' | 'bz2' | 'xz' from the file name, or None (tar archives are handled apart)."""
    p = path.lower()
    if p.endswith(".gz"):
        return "gzip"
    if p.endswith(".bz2"):
        return "bz2"
    if p.endswith(".xz") or p.endswith(".lzma"):
        return "xz"
    return None


class _Decompressed:
    """A decompressing reader that also closes the raw file it reads from (GzipFile, BZ2File
    and LZMAFile given a file object leave it open)."""

    def __init__(self, stream, raw):
        self._stream = stream
        self._raw = raw

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_decompressed(path: str):
    """A binary stream of the decompressed content (by file-name suffix); closing it closes
    the file."""
    raw = open_binary(path)
    comp = compression_of(path)
    if comp == "gzip":
        return _Decompressed(gzip.GzipFile(fileobj=raw, mode="rb"), raw)
    if comp == "bz2":
        return _Decompressed(bz2.BZ2File(raw, mode="rb"), raw)
    if comp == "xz":
        return _Decompressed(lzma.LZMAFile(raw, mode="rb"), raw)
    return raw


# gzip.BadGzipFile is an OSError; bz2 raises OSError("Invalid data stream"); truncated
# streams raise EOFError; lzma raises LZMAError.
DECOMPRESS_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError)


class ChunkReader:
    """``read(size)`` over a (decompressing) stream that keeps the data decompressed before an
    error: ``GzipFile.read(n)`` on a truncated file raises and drops the bytes it had already
    produced in that call, so we read with ``read1`` and report the error on the next call."""

    def __init__(self, f):
        self.f = f
        self._read1 = getattr(f, "read1", None)
        self._error = None

    def read(self, size: int) -> bytes:
        if self._error is not None:
            e, self._error = self._error, None
            raise e
        if self._read1 is None:
            return self.f.read(size)
        parts, n = [], 0
        for _ in range(size + 1):      # each pass returns >= 1 byte or ends
            if n >= size:
                break
            try:
                piece = self._read1(size - n)
            except DECOMPRESS_ERRORS as e:
                if not parts:
                    raise
                self._error = e
                break
            if not piece:
                break
            parts.append(piece)
            n += len(piece)
        return b"".join(parts)


def is_tar_name(path: str) -> bool:
    return path.lower().endswith(_TAR_SUFFIXES)


def detect_format(path: str) -> Optional[str]:
    """The format implied by a file name, or None if it cannot be told."""
    base = os.path.basename(path.rstrip("/")).lower()
    if is_tar_name(base):
        return "text"
    stem = base
    for suf in _COMPRESSED_SUFFIXES:
        if stem.endswith(suf):
            stem = stem[: -len(suf)]
            break
    if stem.endswith(".xml") or ".xml-p" in stem or "-pages-articles" in stem \
            or "-pages-meta-" in stem:
        return "wiki"   # also Wikimedia's split dumps: enwiki-...-pages-articles1.xml-p1p41242.bz2
    if stem.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    for fmt, suffixes in TABLE_SUFFIXES.items():
        if stem.endswith(suffixes):
            return fmt
    if stem.startswith("docword."):
        return "uci"
    if stem.endswith((".mm", ".mtx")):
        return "mm"
    if stem.endswith((".lda-c", ".ldac", ".blei")):
        return "ldac"
    if stem.endswith(_TEXT_SUFFIXES) or "." not in stem:
        return "text"
    return None


def sniff_format(path: str) -> Optional[str]:
    """The format told by the first bytes of a file whose name says nothing: ``wiki`` for a
    ``<mediawiki`` root, ``mm`` for a ``%%MatrixMarket`` header, ``jsonl`` when the first
    line is a JSON object; None otherwise (or if the file cannot be read)."""
    try:
        f = open_decompressed(path)
    except InputError:
        return None
    try:
        head = ChunkReader(f).read(1 << 14)
    except DECOMPRESS_ERRORS:
        return None
    finally:
        f.close()
    start = head.lstrip()
    if start.startswith(b"<mediawiki") or (start.startswith(b"<?xml") and b"<mediawiki" in head):
        return "wiki"
    if start.startswith(b"%%MatrixMarket"):
        return "mm"
    if start.startswith(b"{"):
        first = start.split(b"\n", 1)[0]
        try:
            if isinstance(json.loads(first.decode("utf-8")), dict):
                return "jsonl"
        except ValueError:
            pass
    return None


def _hidden(name: str) -> bool:
    return any(part.startswith(".") and part not in (".", "..")
               for part in name.replace("\\", "/").split("/"))


def _expand_local(pattern: str) -> List[str]:
    local = _local(pattern)
    if os.path.isdir(local):
        found = []
        for root, dirs, files in os.walk(local):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for f in sorted(files):
                if not f.startswith("."):
                    found.append(os.path.join(root, f))
        return found
    if _GLOB_CHARS.search(local):
        found = []
        for p in sorted(glob.glob(local, recursive=True)):
            if os.path.isdir(p):
                found.extend(_expand_local(p))
            else:              # glob's * does not match names starting with "."
                found.append(p)
        return found
    return [local] if os.path.isfile(local) else []


def _match_remote(pattern: str) -> List[str]:
    fs = _filesystems()
    try:
        res = fs.match([pattern])[0]
    except ValueError as e:   # no filesystem registered for the scheme
        raise InputError("cannot list %s: %s (for gs:// install apache-beam[gcp], for s3:// "
                         "apache-beam[aws])" % (pattern, e)) from e
    except Exception as e:    # BeamIOError: some filesystems raise when nothing matches
        logger.info("matching %s failed: %s", pattern, e)
        return []
    return sorted(m.path for m in res.metadata_list)


def _expand_remote(pattern: str) -> List[str]:
    """Files matching a URL or URL glob; a URL without glob characters that matches no file
    is taken as a folder (``URL/**``)."""
    paths = _match_remote(pattern)
    if not paths and not _GLOB_CHARS.search(pattern):
        paths = _match_remote(pattern.rstrip("/") + "/**")
    return [p for p in paths if not _hidden(p.split("://", 1)[-1])]


def expand_inputs(patterns: Sequence[str], fmt: str = "auto") -> List[Tuple[str, str]]:
    """(path, resolved format) for every file matched by the patterns.

    With ``fmt="auto"`` the format comes from the file name (:func:`detect_format`), else
    from its first bytes (:func:`sniff_format`).

    A pattern is a file, a directory (walked recursively, hidden files skipped), a glob
    (``**`` allowed) or a URL / URL glob. A tar archive of text files is one input of format
    ``text``. Raises InputError naming a pattern that matches nothing, or a file whose format
    cannot be told from its name under ``fmt="auto"``.
    """
    if fmt not in FORMATS:
        raise InputError("unknown input format %r; expected one of %s" % (fmt, ", ".join(FORMATS)))
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise InputError("no input given; expected at least one path, directory or glob")
    out: List[Tuple[str, str]] = []
    seen = set()
    for pattern in patterns:
        paths = _expand_remote(pattern) if is_remote(pattern) else _expand_local(pattern)
        if fmt in ("auto",) + TABLE_FORMATS:
            from pipelines import table_sources
            paths = table_sources.drop_table_metadata(paths)
        if not paths:
            raise InputError("input %s matches no file (expected an existing file, directory "
                             "or glob)" % pattern)
        for p in paths:
            if p in seen:
                continue
            seen.add(p)
            f = fmt
            if fmt == "auto":
                f = detect_format(p) or sniff_format(p)
                if f is None:
                    raise InputError(
                        "cannot determine the format of input %s from its name; expected "
                        ".xml[.bz2|.gz] (wiki), .txt / no extension / .tar.gz (text), .jsonl "
                        "(jsonl), .csv / .tsv / .parquet / .arrow (tables), docword.*.txt "
                        "(uci), .mm (mm), .lda-c (ldac), or give --format" % p)
            out.append((p, f))
    return out


# ----------------------------------------------------------------------------- wiki

def _check_dump_header(head: bytes, path: str) -> None:
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
                                     _snippet(buf[max(pos, orphan - 400):orphan + 7]))
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
                                         _snippet(buf[start:min(nxt, start + 400)]))
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
                                             "%d; skipped" % max_page_bytes, _snippet(chunk[:400]))
                            continue
                        try:
                            text = chunk.decode("utf-8")
                        except UnicodeDecodeError as e:
                            yield DeadLetter(path, position, "page is not valid UTF-8: %s" % e,
                                             _snippet(chunk))
                            continue
                        yield position, text
                        continue
                    if len(buf) - start > max_page_bytes:
                        n_pages += 1
                        yield DeadLetter(path, "page %d @ byte %d" % (n_pages, base + start),
                                         "page larger than max_page_bytes=%d; skipped"
                                         % max_page_bytes, _snippet(buf[start:start + 400]))
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
                                 _snippet(buf[:400]) if start >= 0 else "")
                return
            if not more:
                if start >= 0:
                    yield DeadLetter(path, "page %d @ byte %d" % (n_pages + 1, base),
                                     "dump ends inside a <page> (truncated file)",
                                     _snippet(buf[:400]))
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
    """
    try:
        elem = ET.fromstring(page_xml)
    except ET.ParseError as e:
        return DeadLetter(source, position, "malformed <page> XML: %s" % e, _snippet(page_xml))
    if elem.tag != "page":
        return DeadLetter(source, position, "expected a <page> element, got <%s>" % elem.tag,
                          _snippet(page_xml))
    page_id = (elem.findtext("id") or "").strip()
    if not page_id:
        return DeadLetter(source, position, "<page> has no <id>", _snippet(page_xml))
    ns = (elem.findtext("ns") or "0").strip()
    if namespaces and ns not in namespaces:
        return None
    if elem.find("redirect") is not None:
        return None
    title = elem.findtext("title")
    if title and title.startswith(_IGNORED_PREFIXES):
        return None
    text = elem.findtext("revision/text") or ""
    if text[:9].upper() == "#REDIRECT":
        return None
    if strip_markup:
        try:
            text = strip_wiki_markup(text)
        except Exception as e:   # defensive: the regex cascade should not fail
            return DeadLetter(source, position, "markup stripping failed: %r" % e,
                              _snippet(page_xml))
    return RawDocument(doc_id=page_id, text=text, title=title, label=None, source=source,
                       position=position)


# --- markup stripping: gensim's filter_wiki, made ~3.5x faster with identical output --------
#
# gensim.corpora.wikicorpus.filter_wiki is the bulk of the cost of reading a dump. Its output
# is reproduced exactly (tested on every page of the bundled sample, gensim's other test dumps,
# and 30,000 random strings of markup fragments) with four changes that only alter how the
# regular-expression engine searches, not what matches:
#
# * RE_P2 ``(X)+$`` is written ``X(?:X)*$``: the same language, but it starts with the literal
#   ``\n[[`` so the engine jumps between candidate positions instead of trying every one;
# * RE_P12 ``(({\|)|(\|-(?!\d))|(\|}))(.*?)(?=\n)`` loses its capture groups (the replacement
#   is a constant);
# * RE_P13 ``(?<=A|B|..)(\||\!)R`` becomes ``[|!](?<=A[|!]|B[|!]|..)R``: the first character is
#   matched before the (fixed-width) look-behind, so the look-behind runs only at ``|``/``!``;
# * RE_P17 ``(\n...)|(^...)``: the ``^`` branch can only match at position 0, so it is tried
#   once there with gensim's own pattern, and the rest of the text is searched with the ``\n``
#   branch alone (a literal prefix again);
# * remove_template walks only the ``{``/``}`` characters (found by one regex) instead of every
#   character in Python, with the same counting rule: a template opens at ``{{`` and closes
#   when the ``{`` and ``}`` counted since its start balance;
# * a substitution is skipped when the text lacks a string every match must contain (``<``
#   for the tag patterns, ``[`` for links, ``|``/``!`` for tables, a keyword for RE_P17).

_RE_P2_FAST = re.compile(r"\n\[\[[a-z][a-z][\w-]*:[^:\]]+\]\]"
                         r"(?:\n\[\[[a-z][a-z][\w-]*:[^:\]]+\]\])*$", re.UNICODE)
_RE_P12_FAST = re.compile(r"(?:\{\||\|-(?!\d)|\|\})(.*?)(?=\n)", re.UNICODE)
_RE_P13_FAST = re.compile(r"[|!](?<=\n[ ][|!]|\n\n[|!]|[ ]{2}[|!]|.\n[|!]|.\t[|!])"
                          r"([^[\]\n]*?\|)*", re.UNICODE)
_RE_P17_NL = re.compile(r"\n.{0,4}(?:bgcolor|\d{0,1}[ ]?colspan|rowspan|style=|class=|align=|"
                        r"scope=)(?:.*)", re.UNICODE)
_RE_BRACES = re.compile(r"[{}]")
_P17_WORDS = ("bgcolor", "colspan", "rowspan", "style=", "class=", "align=", "scope=")


def remove_template(s: str) -> str:
    """gensim ``wikicorpus.remove_template`` (nested ``{{...}}`` removed), same output."""
    if "{{" not in s:
        return s
    starts, ends = [], [-1]
    in_template = False
    n_open = n_close = 0
    for m in _RE_BRACES.finditer(s):
        i = m.start()
        c = s[i]
        if not in_template and c == "{" and i > 0 and s[i - 1] == "{":
            starts.append(i - 1)
            in_template = True
            n_open = 1
        if in_template:
            if c == "{":
                n_open += 1
            else:
                n_close += 1
            if n_open == n_close:
                ends.append(i)
                in_template = False
                n_open = n_close = 0
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
            text = wc.RE_P1.sub("", text)     # footnotes
            text = wc.RE_P9.sub("", text)     # <nowiki>
            text = wc.RE_P10.sub("", text)    # <math>
            text = wc.RE_P11.sub("", text)    # remaining tags
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
        if any(k in text for k in _P17_WORDS):
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


def _read_wiki(path: str, namespaces=("0",), max_doc_bytes=DEFAULT_MAX_DOC_BYTES, **_):
    for item in iter_wiki_page_chunks(path, max_page_bytes=max_doc_bytes):
        if isinstance(item, DeadLetter):
            yield item
            continue
        position, page = item
        doc = parse_wiki_page(page, path, position, namespaces=namespaces)
        if doc is not None:
            yield doc


# ----------------------------------------------------------------------------- text files

_REPLACED = threading.local()
COUNTING_REPLACE = "ldabeam.replace"


def _counting_replace(err):
    """The ``replace`` error handler (one U+FFFD per undecodable sequence) that also counts
    the replacements of this thread (:func:`replaced_so_far`)."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    _REPLACED.n = getattr(_REPLACED, "n", 0) + 1
    return "\ufffd", err.end


codecs.register_error(COUNTING_REPLACE, _counting_replace)


def replaced_so_far() -> int:
    """Characters replaced by :data:`COUNTING_REPLACE` in this thread so far."""
    return getattr(_REPLACED, "n", 0)


def error_handler(errors: str) -> str:
    """The codecs error handler for an ``encoding_errors`` option (``replace`` counts)."""
    return COUNTING_REPLACE if errors == "replace" else errors


def decode_counted(data: bytes, encoding: str, errors: str) -> Tuple[str, int]:
    """``(text, replaced characters)``; raises UnicodeDecodeError under ``strict``."""
    before = replaced_so_far()
    text = data.decode(encoding, error_handler(errors))
    return text, replaced_so_far() - before


def _decode(data: bytes, encoding: str, errors: str, source: str, position: str
            ) -> Union[Tuple[str, int], DeadLetter]:
    try:
        return decode_counted(data, encoding, errors)
    except UnicodeDecodeError as e:
        return DeadLetter(source, position, "cannot decode as %s: %s" % (encoding, e),
                          _snippet(data))


def strip_email_headers(text: str) -> str:
    """Drop e-mail / Usenet headers: everything up to the first blank line (as scikit-learn's
    ``strip_newsgroup_header``; a text with no blank line becomes empty)."""
    text = text.replace("\r\n", "\n")
    _, _, after = text.partition("\n\n")
    return after


def _text_doc(data: bytes, doc_id: str, label: Optional[str], source: str, position: str,
              encoding: str, encoding_errors: str, strip_headers: bool, keep_empty: bool):
    decoded = _decode(data, encoding, encoding_errors, source, position)
    if isinstance(decoded, DeadLetter):
        return decoded
    text, replaced = decoded
    if strip_headers:
        text = strip_email_headers(text)
    if not keep_empty and not text.strip():
        return DeadLetter(source, position, "empty document", "")
    return RawDocument(doc_id=doc_id, text=text, title=None, label=label, source=source,
                       position=position, replaced_chars=replaced)


def _parent_name(name: str) -> Optional[str]:
    parent = os.path.basename(os.path.dirname(name.replace("\\", "/").rstrip("/")))
    return parent or None


def _read_text(path: str, encoding="utf-8", encoding_errors="strict", strip_headers=False,
               keep_empty=False, max_doc_bytes=DEFAULT_MAX_DOC_BYTES, **_):
    if is_tar_name(path):
        yield from _read_tar(path, encoding, encoding_errors, strip_headers, keep_empty,
                             max_doc_bytes)
        return
    f = open_decompressed(path)
    try:
        try:
            data = f.read(max_doc_bytes + 1)
        except DECOMPRESS_ERRORS as e:
            yield DeadLetter(path, "file", "cannot read / decompress: %s" % e)
            return
    finally:
        f.close()
    if len(data) > max_doc_bytes:
        yield DeadLetter(path, "file", "document larger than max_doc_bytes=%d" % max_doc_bytes,
                         _snippet(data))
        return
    yield _text_doc(data, path, _parent_name(path), path, "file", encoding, encoding_errors,
                    strip_headers, keep_empty)


def _read_tar(path, encoding, encoding_errors, strip_headers, keep_empty, max_doc_bytes):
    raw = open_binary(path)
    archive = os.path.basename(path.rstrip("/"))
    try:
        try:
            tar = tarfile.open(fileobj=raw, mode="r|*")
        except (tarfile.TarError,) + DECOMPRESS_ERRORS as e:
            raise InputError("input %s is not a readable tar archive (%s); expected a .tar, "
                             ".tar.gz or .tar.bz2 of text files" % (path, e)) from e
        n = 0
        members = iter(tar)
        for _ in range(1 << 62):
            try:
                member = next(members)
            except StopIteration:
                break
            except (tarfile.TarError,) + DECOMPRESS_ERRORS as e:
                yield DeadLetter(path, "after member %d" % n, "archive is corrupt or "
                                 "truncated: %s; members after this point are lost" % e)
                break
            if not member.isfile() or _hidden(member.name):
                continue
            n += 1
            position = "member %s" % member.name
            if member.size > max_doc_bytes:
                yield DeadLetter(path, position, "document larger than max_doc_bytes=%d"
                                 % max_doc_bytes)
                continue
            try:
                data = tar.extractfile(member).read()
            except (tarfile.TarError,) + DECOMPRESS_ERRORS as e:
                yield DeadLetter(path, position, "archive is corrupt or truncated: %s; members "
                                 "after this point are lost" % e)
                break
            yield _text_doc(data, "%s/%s" % (archive, member.name), _parent_name(member.name),
                            path, position, encoding, encoding_errors, strip_headers,
                            keep_empty)
        tar.close()
    finally:
        raw.close()


def _iter_lines(path: str, max_line_bytes: int) -> Iterator[Tuple[int, Union[bytes, DeadLetter]]]:
    """(line number from 1, line bytes without the newline) -- or a DeadLetter for a line that
    is too long or a stream that fails to decompress (which ends the iteration)."""
    f = open_decompressed(path)
    try:
        lineno = 0
        for _ in range(1 << 62):
            try:
                line = f.readline(max_line_bytes + 1)
            except DECOMPRESS_ERRORS as e:
                yield lineno + 1, DeadLetter(path, "line %d" % (lineno + 1), "compressed stream"
                                             " is corrupt or truncated: %s; lines after this "
                                             "point are lost" % e)
                return
            if not line:
                return
            lineno += 1
            if len(line) > max_line_bytes and not line.endswith(b"\n"):
                yield lineno, DeadLetter(path, "line %d" % lineno, "line longer than "
                                         "max_doc_bytes=%d" % max_line_bytes, _snippet(line))
                for _ in range(1 << 62):   # skip the rest of the line
                    rest = f.readline(READ_BLOCK)
                    if not rest or rest.endswith(b"\n"):
                        break
                continue
            yield lineno, line.rstrip(b"\r\n")
    finally:
        f.close()


def _read_lines(path: str, encoding="utf-8", encoding_errors="strict",
                max_doc_bytes=DEFAULT_MAX_DOC_BYTES, **_):
    base = os.path.basename(path.rstrip("/"))
    for lineno, line in _iter_lines(path, max_doc_bytes):
        if isinstance(line, DeadLetter):
            yield line
            continue
        if not line.strip():
            continue   # blank lines separate nothing and are skipped
        position = "line %d" % lineno
        decoded = _decode(line, encoding, encoding_errors, path, position)
        if isinstance(decoded, DeadLetter):
            yield decoded
            continue
        yield RawDocument("%s:%d" % (base, lineno), decoded[0], None, None, path, position,
                          decoded[1])


def _get_field(obj: dict, name: Optional[str]):
    """obj[name], with dots for nested objects (``"meta.title"``); None if absent."""
    if not name:
        return None
    if name in obj:
        return obj[name]
    cur = obj
    for part in name.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _read_jsonl(path: str, encoding="utf-8", encoding_errors="strict", id_field="id",
                text_field="text", label_field="label", title_field="title",
                keep_empty=False, max_doc_bytes=DEFAULT_MAX_DOC_BYTES, **_):
    base = os.path.basename(path.rstrip("/"))
    for lineno, line in _iter_lines(path, max_doc_bytes):
        if isinstance(line, DeadLetter):
            yield line
            continue
        if not line.strip():
            continue
        position = "line %d" % lineno
        decoded = _decode(line, encoding, encoding_errors, path, position)
        if isinstance(decoded, DeadLetter):
            yield decoded
            continue
        text, replaced = decoded
        try:
            obj = json.loads(text)
        except ValueError as e:
            yield DeadLetter(path, position, "invalid JSON: %s" % e, _snippet(text))
            continue
        except RecursionError:
            yield DeadLetter(path, position, "invalid JSON: nested too deeply", _snippet(text))
            continue
        if not isinstance(obj, dict):
            yield DeadLetter(path, position, "JSON line is a %s, expected an object"
                             % type(obj).__name__, _snippet(text))
            continue
        body = _get_field(obj, text_field)
        if not isinstance(body, str):
            yield DeadLetter(path, position, "text field %r is %s, expected a string"
                             % (text_field, "missing" if body is None else type(body).__name__),
                             _snippet(text))
            continue
        if not keep_empty and not body.strip():
            yield DeadLetter(path, position, "empty document", _snippet(text))
            continue
        try:    # str() of a huge number or a deeply nested value can fail: one dead letter
            doc_id = _get_field(obj, id_field)
            doc_id = ("%s:%d" % (base, lineno) if doc_id is None or doc_id == ""
                      else str(doc_id))
            label = _get_field(obj, label_field)
            title = _get_field(obj, title_field)
            title = None if title is None else str(title)
            label = None if label is None else str(label)
        except (ValueError, OverflowError, TypeError, RecursionError) as e:
            yield DeadLetter(path, position, "id, title or label cannot be read: %s: %s"
                             % (type(e).__name__, e), _snippet(text))
            continue
        yield RawDocument(doc_id, body, title, label, path, position, replaced)


def _table_reader(fmt: str):
    """The reader of one table format (:func:`pipelines.table_sources.read_table`)."""
    def read(path: str, **options):
        from pipelines import table_sources
        return table_sources.read_table(path, fmt, **options)
    return read


_READERS = {"wiki": _read_wiki, "text": _read_text, "lines": _read_lines, "jsonl": _read_jsonl}
_READERS.update({f: _table_reader(f) for f in TABLE_FORMATS})


def read_documents(path: str, fmt: str, **options) -> Iterator[Union[RawDocument, DeadLetter]]:
    """Stream the documents of one input file (as listed by :func:`expand_inputs`).

    Options (all formats): ``encoding="utf-8"``, ``encoding_errors="strict"`` (a record with
    invalid bytes is a DeadLetter; ``"replace"`` keeps it with U+FFFD), ``max_doc_bytes``
    (64 MiB; larger records are dead letters), ``keep_empty=False`` (an empty document --
    only whitespace -- is a DeadLetter "empty document" unless True; blank lines of
    ``lines``/``jsonl`` are always skipped). ``text``: ``strip_headers=False`` (drop e-mail
    headers up to the first blank line). ``jsonl``: ``id_field="id"``, ``text_field="text"``,
    ``label_field="label"``, ``title_field="title"`` (dots reach nested objects; a missing
    id becomes ``<basename>:<line>``). ``wiki``: ``namespaces=("0",)``. Tables (``csv``,
    ``tsv``, ``parquet``, ``arrow``): the same field options name columns
    (:mod:`pipelines.table_sources`).

    Raises InputError at once (before yielding) for an unknown format, a bag-of-words format
    (use :mod:`pipelines.bow_sources`), a missing file, or a non-dump given as ``wiki``.
    """
    if fmt == "auto":
        fmt = detect_format(path)
        if fmt is None:
            raise InputError("cannot determine the format of input %s; give the format" % path)
    if fmt in BOW_FORMATS:
        raise InputError("input %s has the bag-of-words format %r, which has no text; read it "
                         "with pipelines.bow_sources.iter_bow_documents" % (path, fmt))
    if fmt not in _READERS:
        raise InputError("unknown input format %r for %s; expected one of %s"
                         % (fmt, path, ", ".join(FORMATS)))
    encoding = options.get("encoding", "utf-8")
    try:
        "".encode(encoding)
    except LookupError as e:
        raise InputError("unknown encoding %r for input %s" % (encoding, path)) from e
    gen = _READERS[fmt](path, **options)
    # run the generator up to its first item so that InputError (missing file, not a dump)
    # is raised here, at call time, not at the first next() somewhere in a pipeline
    return _primed(gen)


def _primed(gen):
    first = next(gen, _END)

    def rest():
        if first is _END:
            return
        yield first
        yield from gen
    return rest()


_END = object()
