"""Input files for the readers: the records every reader yields (:class:`RawDocument`,
:class:`DeadLetter`), the one error for an unusable input (:class:`InputError`), and the file
layer under them: opening local or Beam ``FileSystems`` paths, decompressing ``.gz`` /
``.bz2`` / ``.xz`` from the raw byte stream, reading in bounded chunks, recognising a file's
format and expanding globs and folders (:func:`expand_inputs`). Re-exported by
:mod:`pipelines.ingest.text_sources`."""
from __future__ import annotations

import bz2
import glob
import gzip
import json
import logging
import lzma
import os
import re
import zlib
from dataclasses import asdict, dataclass
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from lda_core.errors import InputError

logger = logging.getLogger(__name__)

FORMATS = ("auto", "wiki", "text", "lines", "jsonl", "csv", "tsv", "parquet", "arrow", "uci",
           "ldac", "mm")
TABLE_FORMATS = ("csv", "tsv", "parquet", "arrow")
TEXT_FORMATS = ("wiki", "text", "lines", "jsonl") + TABLE_FORMATS
BOW_FORMATS = ("uci", "ldac", "mm")


DEFAULT_MAX_DOC_BYTES = 64 << 20     # a page / file / line larger than this is a dead letter
READ_BLOCK = 1 << 20                 # bytes read from a stream at a time
SNIPPET_CHARS = 200
_COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".lzma")
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz")
_TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst")
TABLE_SUFFIXES = {"csv": (".csv",), "tsv": (".tsv", ".tab"), "parquet": (".parquet", ".pq"),
                  "arrow": (".arrow", ".feather", ".ipc")}
_GLOB_CHARS = re.compile(r"[*?\[]")

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


from pipelines.runtime.object_store_files import is_remote  # noqa: E402 (the one URL test)


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


def iter_lines(path: str, max_line_bytes: int, skip_long: bool = True
               ) -> Iterator[Tuple[int, Union[bytes, DeadLetter]]]:
    """``(line number from 1, line bytes without its newline)`` of a (compressed) file, never
    holding more than ``max_line_bytes`` of one line.

    A line longer than that yields ``(its number, DeadLetter)``; with ``skip_long`` the rest of
    the line is skipped and reading goes on (one record per line: the other records are
    good), without it the iteration ends there (a format whose lines are never that long: the
    file is broken). A stream that fails to decompress yields a DeadLetter and ends the
    iteration (the lines before it were yielded)."""
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
                yield lineno, DeadLetter(path, "line %d" % lineno, "line longer than %d bytes%s"
                                         % (max_line_bytes, "" if skip_long else
                                            "; lines after this point are lost"),
                                         _snippet(line))
                if not skip_long:
                    return
                for _ in range(1 << 62):   # skip the rest of the line
                    rest = f.readline(READ_BLOCK)
                    if not rest or rest.endswith(b"\n"):
                        break
                continue
            yield lineno, line.rstrip(b"\r\n")
    finally:
        f.close()


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
            from pipelines.ingest import table_sources
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
