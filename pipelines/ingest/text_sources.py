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
* ``text``  -- one document per file; a tar or zip archive (``.tar``, ``.tar.gz``, ``.tgz``,
  ``.tar.bz2``, ``.zip``, or such content under any name) is one input whose members are the
  documents. ``label`` = the parent folder
  name (20 Newsgroups' group). ``doc_id`` = the path as given (for a file) or
  ``<archive basename>/<member name>`` (for an archive member).
* ``lines`` -- one document per non-blank line; ``doc_id`` = ``<file basename>:<line number>``.
* ``jsonl`` -- one JSON object per line; configurable id / text / label / title fields.
* ``csv``, ``tsv``, ``parquet``, ``arrow`` -- tables, one document per row: see
  :mod:`pipelines.ingest.table_sources`.
* ``uci``, ``ldac``, ``mm`` -- bag-of-words corpora: see :mod:`pipelines.ingest.bow_sources`.

``encoding_errors="replace"`` puts U+FFFD for each undecodable byte sequence and counts them
(:attr:`RawDocument.replaced_chars`); ``"strict"`` makes such a record a DeadLetter.
"""
from __future__ import annotations

import io
import json
import logging
import os
import re
import tarfile
from typing import Iterator, Optional, Tuple, Union

from pipelines.ingest import table_sources
from pipelines.ingest.input_files import (BOW_FORMATS, DeadLetter, decode_counted,
                                          DECOMPRESS_ERRORS, DEFAULT_MAX_DOC_BYTES, detect_format,
                                          FORMATS, InputError, is_archive_name, is_hidden,
                                          is_tar_name, iter_lines, open_decompressed, peek_head,
                                          RawDocument, sniff_format, snippet_of, TABLE_FORMATS)
from pipelines.ingest.wiki_source import read_wiki

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- text files

def _decode(data: bytes, encoding: str, errors: str, source: str, position: str
            ) -> Union[Tuple[str, int], DeadLetter]:
    try:
        return decode_counted(data, encoding, errors)
    except UnicodeDecodeError as e:
        return DeadLetter(source, position, "cannot decode as %s: %s" % (encoding, e),
                          snippet_of(data))


def strip_email_headers(text: str) -> str:
    """Drop e-mail / Usenet headers: everything up to the first blank line (as scikit-learn's
    ``strip_newsgroup_header``; a text with no blank line becomes empty)."""
    text = text.replace("\r\n", "\n")
    _, _, after = text.partition("\n\n")
    return after


# a quoted line (``> ...``, ``|> ...``, ``: ...`` is not one: it starts definitions) and the
# attribution that introduces a quote ("In article <id@host> name writes:", wrapped or not)
_QUOTED_LINE = re.compile(r"^[ \t]*[>|]")
_ATTRIBUTION = re.compile(r"^[ \t]*(In article\b|In message\b|Quoted from\b|On .{0,80}\b"
                          r"wrote:\s*$)|\b(writes|wrote|says|said)( in [^\n]{0,80})?(:|\.\.\.)"
                          r"\s*$|\bwrites in\b", re.I)
SIGNATURE_MAX_LINES = 30     # a "-- " line followed by more lines than this is not a signature


def strip_quoted_replies(text: str) -> str:
    """Drop quoted reply lines (starting with ``>`` or ``|``, after spaces) and the
    attribution lines that introduce them ("In article <...>", "... writes:", "... wrote:"):
    what scikit-learn's ``strip_newsgroup_quoting`` drops, with the attribution words only at
    a line's start or end. The rest of the text is kept line for line."""
    text = text.replace("\r\n", "\n")
    return "\n".join(line for line in text.split("\n")
                     if not (_QUOTED_LINE.match(line) or _ATTRIBUTION.search(line)))


def strip_signature(text: str) -> str:
    """Drop the signature: the last line that is ``-- `` (the e-mail / Usenet signature
    separator; also ``--`` whose trailing space was lost) and every line after it, when at
    most ``SIGNATURE_MAX_LINES`` lines follow."""
    text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    for i in range(len(lines) - 1, max(-1, len(lines) - SIGNATURE_MAX_LINES - 2), -1):
        if lines[i].rstrip(" ") == "--":
            return "\n".join(lines[:i])
    return text


def _text_doc(data: bytes, doc_id: str, label: Optional[str], source: str, position: str,
              encoding: str, encoding_errors: str, strip_headers: bool, strip_quotes: bool,
              strip_signatures: bool):
    decoded = _decode(data, encoding, encoding_errors, source, position)
    if isinstance(decoded, DeadLetter):
        return decoded
    text, replaced = decoded
    if strip_headers:
        text = strip_email_headers(text)
    if strip_signatures:
        text = strip_signature(text)
    if strip_quotes:
        text = strip_quoted_replies(text)
    # an empty document is a document (the vectorize counts it as empty), not a dead letter
    return RawDocument(doc_id=doc_id, text=text, title=None, label=label, source=source,
                       position=position, replaced_chars=replaced)


def _parent_name(name: str) -> Optional[str]:
    parent = os.path.basename(os.path.dirname(name.replace("\\", "/").rstrip("/")))
    return parent or None


def _is_tar_head(head: bytes) -> bool:
    return len(head) >= 262 and head[257:262] == b"ustar"


def _is_zip_head(head: bytes) -> bool:
    return head.startswith((b"PK\x03\x04", b"PK\x05\x06"))


def _read_text(path: str, encoding="utf-8", encoding_errors="strict", strip_headers=False,
               strip_quotes=False, strip_signatures=False, max_doc_bytes=DEFAULT_MAX_DOC_BYTES,
               **_):
    """One document per file, or one per member of a tar or zip archive (told by the name
    or by the content: ``ustar`` at byte 257 of the decompressed stream, ``PK`` magic)."""
    clean = (strip_headers, strip_quotes, strip_signatures)
    f = open_decompressed(path)
    try:
        try:
            f, head = peek_head(f, 512)
        except DECOMPRESS_ERRORS as e:
            if is_archive_name(path):
                raise InputError("input %s is not a readable archive (%s); expected a .tar, "
                                 ".tar.gz, .tar.bz2 or .zip of text files" % (path, e)) from e
            yield DeadLetter(path, "file", "cannot read / decompress: %s" % e)
            return
        if _is_zip_head(head) or path.lower().endswith(".zip"):
            yield from _read_zip(path, f, encoding, encoding_errors, clean, max_doc_bytes)
            return
        if _is_tar_head(head) or is_tar_name(path):
            yield from _read_tar(path, f, encoding, encoding_errors, clean, max_doc_bytes)
            return
        try:
            data = f.read(max_doc_bytes + 1)
        except DECOMPRESS_ERRORS as e:
            yield DeadLetter(path, "file", "cannot read / decompress: %s" % e)
            return
    finally:
        f.close()
    if len(data) > max_doc_bytes:
        yield DeadLetter(path, "file", "document larger than max_doc_bytes=%d" % max_doc_bytes,
                         snippet_of(data))
        return
    yield _text_doc(data, path, _parent_name(path), path, "file", encoding, encoding_errors,
                    *clean)


def _read_tar(path, f, encoding, encoding_errors, clean, max_doc_bytes):
    """The members of a tar archive read from its decompressed stream ``f``."""
    archive = os.path.basename(path.rstrip("/"))
    try:
        tar = tarfile.open(fileobj=f, mode="r|")
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
        if not member.isfile() or is_hidden(member.name):
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
                        path, position, encoding, encoding_errors, *clean)
    tar.close()


def _read_zip(path, f, encoding, encoding_errors, clean, max_doc_bytes):
    """The members of a zip archive (its central directory is at the end: the file is read
    with seeks, or whole into memory when its stream cannot seek)."""
    import zipfile
    archive = os.path.basename(path.rstrip("/"))
    if not (getattr(f, "seekable", None) and f.seekable()):
        f = io.BytesIO(f.read())
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, zipfile.LargeZipFile) + DECOMPRESS_ERRORS as e:
        raise InputError("input %s is not a readable zip archive (%s); expected a .zip of "
                         "text files" % (path, e)) from e
    with zf:
        for info in zf.infolist():
            if info.is_dir() or is_hidden(info.filename):
                continue
            position = "member %s" % info.filename
            if info.file_size > max_doc_bytes:
                yield DeadLetter(path, position, "document larger than max_doc_bytes=%d"
                                 % max_doc_bytes)
                continue
            try:
                data = zf.read(info)
            except (zipfile.BadZipFile, NotImplementedError, RuntimeError) \
                    + DECOMPRESS_ERRORS as e:     # CRC, unknown method, encrypted, ...
                yield DeadLetter(path, position, "archive member cannot be read: %s" % e)
                continue
            yield _text_doc(data, "%s/%s" % (archive, info.filename),
                            _parent_name(info.filename), path, position, encoding,
                            encoding_errors, *clean)


def _read_lines(path: str, encoding="utf-8", encoding_errors="strict",
                max_doc_bytes=DEFAULT_MAX_DOC_BYTES, **_):
    base = os.path.basename(path.rstrip("/"))
    for lineno, line in iter_lines(path, max_doc_bytes):
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
                max_doc_bytes=DEFAULT_MAX_DOC_BYTES, **_):
    base = os.path.basename(path.rstrip("/"))
    for lineno, line in iter_lines(path, max_doc_bytes):
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
            yield DeadLetter(path, position, "invalid JSON: %s" % e, snippet_of(text))
            continue
        except RecursionError:
            yield DeadLetter(path, position, "invalid JSON: nested too deeply", snippet_of(text))
            continue
        if not isinstance(obj, dict):
            yield DeadLetter(path, position, "JSON line is a %s, expected an object"
                             % type(obj).__name__, snippet_of(text))
            continue
        body = _get_field(obj, text_field)
        if not isinstance(body, str):
            yield DeadLetter(path, position, "text field %r is %s, expected a string"
                             % (text_field, "missing" if body is None else type(body).__name__),
                             snippet_of(text))
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
                             % (type(e).__name__, e), snippet_of(text))
            continue
        yield RawDocument(doc_id, body, title, label, path, position, replaced)


def _table_reader(fmt: str):
    """The reader of one table format (:func:`pipelines.ingest.table_sources.read_table`)."""
    def read(path: str, **options):
        return table_sources.read_table(path, fmt, **options)
    return read


_READERS = {"wiki": read_wiki, "text": _read_text, "lines": _read_lines, "jsonl": _read_jsonl}
_READERS.update({f: _table_reader(f) for f in TABLE_FORMATS})


def read_documents(path: str, fmt: str, **options) -> Iterator[Union[RawDocument, DeadLetter]]:
    """Stream the documents of one input file (as listed by :func:`expand_inputs`).

    Options (all formats): ``encoding="utf-8"``, ``encoding_errors="strict"`` (a record with
    invalid bytes is a DeadLetter; ``"replace"`` keeps it with U+FFFD), ``max_doc_bytes``
    (64 MiB; larger records are dead letters). An empty document (no text, or only
    whitespace) is yielded like any other (the vectorize counts it as ``empty_documents``);
    blank lines of ``lines``/``jsonl`` are not documents and are skipped. ``text``:
    ``strip_headers=False`` (drop e-mail headers up to the first blank line),
    ``strip_quotes=False`` (drop quoted reply lines and their attributions:
    :func:`strip_quoted_replies`), ``strip_signatures=False`` (drop the signature after a
    ``-- `` line: :func:`strip_signature`). ``jsonl``: ``id_field="id"``, ``text_field="text"``,
    ``label_field="label"``, ``title_field="title"`` (dots reach nested objects; a missing
    id becomes ``<basename>:<line>``). ``wiki``: ``namespaces=("0",)``. Tables (``csv``,
    ``tsv``, ``parquet``, ``arrow``): the same field options name columns
    (:mod:`pipelines.ingest.table_sources`).

    Raises InputError at once (before yielding) for an unknown format, a bag-of-words format
    (use :mod:`pipelines.ingest.bow_sources`), a missing file, or a non-dump given as ``wiki``.
    """
    if fmt == "auto":
        fmt = detect_format(path) or sniff_format(path)
        if fmt is None:
            raise InputError("cannot determine the format of input %s from its name or its "
                             "(binary) content; give the format" % path)
    if fmt in BOW_FORMATS:
        raise InputError("input %s has the bag-of-words format %r, which has no text; read it "
                         "with pipelines.ingest.bow_sources.iter_bow_documents" % (path, fmt))
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
    return primed(without_surrogates(gen))


# a UTF-16 surrogate code point: JSON escapes (``"\ud800"``) can put a lone one in a string,
# which no UTF-8 writer (shards, dead letters, the tokenizer's byte path) can encode
_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_field(doc: RawDocument) -> Optional[str]:
    """The first field of ``doc`` that holds a lone surrogate, or None."""
    for name in ("doc_id", "text", "title", "label"):
        v = getattr(doc, name)
        if isinstance(v, str) and not v.isascii() and _SURROGATE.search(v):
            return name
    return None


def without_surrogates(records):
    """The reader's records, a document holding a lone surrogate turned into a dead letter
    (one place for every format: the text is not Unicode a file can hold)."""
    for rec in records:
        if isinstance(rec, RawDocument):
            bad = surrogate_field(rec)
            if bad is not None:
                pos = _SURROGATE.search(getattr(rec, bad)).start()
                rec = DeadLetter(rec.source, rec.position,
                                 "field %s holds a lone UTF-16 surrogate (U+%04X at character "
                                 "%d), which is not text (an escape such as \\ud800 in JSON); "
                                 "fix the record" % (bad, ord(getattr(rec, bad)[pos]), pos),
                                 snippet_of(getattr(rec, bad).encode("utf-8", "replace")))
        yield rec


def primed(gen):
    first = next(gen, _END)

    def rest():
        if first is _END:
            return
        yield first
        yield from gen
    return rest()


_END = object()
