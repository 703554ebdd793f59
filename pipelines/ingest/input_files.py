"""Input files for the readers: the records every reader yields (:class:`RawDocument`,
:class:`DeadLetter`), the one error for an unusable input (:class:`InputError`), and the file
layer under them: opening local paths, ``http(s)://`` URLs (smart-open) and Beam
``FileSystems`` URLs (``gs://``, ``s3://``, ...), decompressing ``.gz`` / ``.bz2`` / ``.xz``
(told by the name, else by the magic bytes; smart-open's decompressors), reading in bounded
chunks, recognising a file's format by its name's known suffixes, else by its content
(:func:`format_of_head`), and expanding globs and folders (:func:`expand_inputs`).
Re-exported by :mod:`pipelines.ingest.text_sources`."""
from __future__ import annotations

import codecs
import fnmatch
import glob
import io
import json
import logging
import lzma
import os
import posixpath
import re
import threading
import zlib
from dataclasses import asdict, dataclass
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from lda_core.errors import InputError
from lda_core.storage.files import open_regular

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
_ZIP_SUFFIXES = (".zip",)
# names of kinds of files vectorize does not read: refused, not sniffed as text
_UNSUPPORTED_SUFFIXES = (".xlsx", ".xls", ".ods", ".docx", ".doc", ".odt", ".pptx", ".ppt",
                         ".pdf", ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff",
                         ".webp", ".mp3", ".mp4", ".wav", ".avi", ".mov", ".exe", ".so",
                         ".dll", ".pyc", ".npy", ".npz", ".pkl", ".pickle", ".h5", ".7z",
                         ".rar")
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
    replaced_chars: int = 0     # undecodable sequences replaced by U+FFFD or dropped (ignore)


@dataclass
class DeadLetter:
    """A record that could not be decoded or parsed: where it was, why, and its first chars."""

    source: str
    position: str
    error: str
    snippet: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def snippet_of(data) -> str:
    if isinstance(data, bytes):
        data = data[:SNIPPET_CHARS * 4].decode("utf-8", "replace")
    return (data or "")[:SNIPPET_CHARS]


# ----------------------------------------------------------------------------- paths

def _local(path: str) -> str:
    """``file:///x`` -> ``/x``; other paths unchanged."""
    if path.startswith("file://"):
        return path[len("file://"):]
    return path


from pipelines.runtime.paths import is_remote  # noqa: E402 (the one URL test)

#: URL schemes opened with smart-open's transports (Beam has no file system for them); an
#: ``http(s)://`` input is one file: it is never listed or globbed
WEB_SCHEMES = ("http", "https")


def input_file_exists(path: str) -> bool:
    """Whether an input file exists: a local path or ``file://`` URL, or an object-store URL."""
    if is_remote(path):
        return _filesystems().exists(path)
    return os.path.isfile(_local(path))


def is_web(path: str) -> bool:
    """True for an ``http://`` or ``https://`` URL."""
    return path.split("://", 1)[0].lower() in WEB_SCHEMES if "://" in path else False


def _filesystems():
    from apache_beam.io.filesystems import FileSystems
    return FileSystems


def open_binary(path: str):
    """A raw (not decompressed) binary file object for a local path, ``file://``, an
    ``http(s)://`` URL (smart-open) or a Beam ``FileSystems`` URL (``gs://``, ``s3://``, ...:
    the file layer the shards and checkpoints use, with the runner's credentials and options).

    Raises InputError if the file does not exist or its URL scheme is not supported.
    """
    if is_web(path):
        import smart_open
        try:
            return smart_open.open(path, "rb", compression="disable")
        except Exception as e:   # requests' HTTPError / ConnectionError, ...
            raise InputError("cannot open %s: %s" % (path, e)) from e
    if is_remote(path):
        fs = _filesystems()
        try:
            return fs.open(path, compression_type="uncompressed")
        except ValueError as e:   # Beam: no filesystem for this scheme (missing extra)
            raise InputError("cannot open %s: %s (for gs:// install apache-beam[gcp], for "
                             "s3:// apache-beam[aws])" % (path, e)) from e
        except Exception as e:   # BeamIOError, FileNotFoundError, ...
            raise InputError("cannot open %s: %s" % (path, e)) from e
    # local files: the built-in open, not smart_open.open: its local transport is this same
    # open() behind a URL parse that costs more than the open itself (benchmarks/ingest_bench)
    local = _local(path)
    try:
        return open_regular(local)          # never a FIFO or device: it could block forever
    except OSError as e:
        raise InputError("input %s cannot be opened: %s" % (path, e.strerror or e)) from e


_COMPRESSION_BY_SUFFIX = ((".gz", "gzip"), (".tgz", "gzip"), (".bz2", "bz2"), (".tbz2", "bz2"),
                          (".tbz", "bz2"), (".xz", "xz"), (".txz", "xz"), (".lzma", "xz"))
_COMPRESSION_SUFFIXES = tuple(s for s, _ in _COMPRESSION_BY_SUFFIX)
_COMPRESSION_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"),
                      (b"\x5d\x00\x00", "xz"))          # the last: a legacy .lzma stream
# the smart-open decompressor of each compression (its registry is keyed by file suffix;
# lzma.open reads both .xz and legacy .lzma streams)
_SMART_OPEN_SUFFIX = {"gzip": ".gz", "bz2": ".bz2", "xz": ".xz"}


def compression_of(path: str) -> Optional[str]:
    """'gzip' | 'bz2' | 'xz' from the file name, or None."""
    p = path.lower()
    if not p.endswith(_COMPRESSION_SUFFIXES):
        return None
    for suffix, comp in _COMPRESSION_BY_SUFFIX:
        if p.endswith(suffix):
            return comp
    return None


def compression_of_head(head: bytes) -> Optional[str]:
    """'gzip' | 'bz2' | 'xz' from a stream's first bytes (magic numbers), or None."""
    for magic, comp in _COMPRESSION_MAGIC:
        if head.startswith(magic):
            if magic == b"BZh" and not (len(head) > 3 and head[3:4] in b"123456789"):
                continue     # "BZh" + the block size digit; plain text may start with "BZh"
            return comp
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


class _Replayed(io.RawIOBase):
    """A stream that gives ``head`` first, then the rest of ``f``: how the first bytes of a
    stream that can neither ``peek`` nor ``seek`` are looked at and still read."""

    def __init__(self, head: bytes, f):
        super().__init__()
        self._head = head
        self._f = f

    def readable(self):
        return True

    def readinto(self, b):
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._f.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self):
        try:
            self._f.close()
        finally:
            super().close()


def peek_head(f, n: int):
    """``(stream, its first n bytes)`` without consuming them: ``peek`` when it gives n
    bytes, else a read and a seek back, else the stream replayed (:class:`_Replayed`)."""
    peek = getattr(f, "peek", None)
    if peek is not None:
        head = peek(n)
        if len(head) >= n:
            return f, head[:n]
    seekable = getattr(f, "seekable", None)
    if seekable is not None and seekable():
        pos = f.tell()
        head = f.read(n)
        f.seek(pos)
        return f, head
    head = f.read(n)
    return io.BufferedReader(_Replayed(head, f)), head


def open_decompressed(path: str):
    """A binary stream of the decompressed content; closing it closes the file. The
    compression is told by the file name (``.gz``, ``.bz2``, ``.xz``, ``.tgz``, ...), else
    by the stream's magic bytes, so a gzip file named ``posts`` reads as its text; the
    decompressors are smart-open's (:mod:`smart_open.compression`)."""
    raw = open_binary(path)
    comp = compression_of(path)
    if comp is None:
        try:
            raw, head = peek_head(raw, 6)
        except Exception:
            raw.close()
            raise
        comp = compression_of_head(head)
        if comp is None:
            return raw
    from smart_open.compression import compression_wrapper
    return _Decompressed(compression_wrapper(raw, "rb", _SMART_OPEN_SUFFIX[comp]), raw)


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
                                         snippet_of(line))
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
    produced in that call, so we read with ``read1`` and report the error on the next call.
    Each ``read1`` asks for at most ``PIECE`` bytes: smart-open's decompressors are buffered
    readers whose ``read1(n)`` is one ``read(n)`` of the decompressor, so the piece bounds
    what a corrupt stream loses before the error."""

    PIECE = 1 << 16

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
                piece = self._read1(min(size - n, self.PIECE))
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


def is_archive_name(path: str) -> bool:
    """A tar or zip archive by its name (its members are the documents)."""
    return path.lower().endswith(_TAR_SUFFIXES + _ZIP_SUFFIXES)


def detect_format(path: str) -> Optional[str]:
    """The format implied by a known suffix of the file name, or None if the name does not
    tell (no suffix, or dots that are part of the name: ``comp.graphics-38758``); then the
    content does (:func:`sniff_format`)."""
    base = os.path.basename(path.rstrip("/")).lower()
    if is_archive_name(base):
        return "text"
    stem = base
    if stem.endswith(_COMPRESSED_SUFFIXES):
        stem = stem[: -len(next(s for s in _COMPRESSED_SUFFIXES if stem.endswith(s)))]
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
    if stem.endswith(_TEXT_SUFFIXES):
        return "text"
    return None


def unsupported_suffix(path: str) -> Optional[str]:
    """The suffix of a file name that says the file is of a kind vectorize cannot read
    (spreadsheets, office documents, PDF, images, ...), or None."""
    base = os.path.basename(path.rstrip("/")).lower()
    if not base.endswith(_UNSUPPORTED_SUFFIXES):
        return None
    return next(suf for suf in _UNSUPPORTED_SUFFIXES if base.endswith(suf))


SNIFF_BYTES = 1 << 16              # decompressed bytes looked at to tell a format
_BINARY_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"%PDF-", b"\xd0\xcf\x11\xe0",
                 b"\x7fELF", b"OggS", b"RIFF", b"ID3", b"\x00\x00\x01\x00")
_UCI_HEADER = re.compile(rb"\A\s*\d+\s*\n\s*\d+\s*\n\s*\d+\s*\n(\s*\d+\s+\d+\s+\d+\s*\n)")
_LDAC_LINE = re.compile(rb"\A\d+(?:[ \t]+\d+:\d+)+[ \t]*\Z")
_HEADER_CELL = re.compile(r"\A[^\s,\t\"'][^\t\"]{0,63}\Z")
_NUMBER = re.compile(r"\A[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\Z")


def _is_table(text: str, delimiter: str) -> bool:
    """A CSV / TSV header and rows: at least a header and one complete row, every row with
    the header's number (>= 2) of fields, header cells unique names (no number, no outer
    space, at most 64 characters). Prose fails at once: its lines have varying numbers of
    commas, and an e-mail's first line (``From: ...``) has one field."""
    import csv
    cut = text.rfind("\n")
    if cut < 0:
        return False
    truncated = bool(text[cut + 1:])
    reader = csv.reader(io.StringIO(text[:cut + 1]), delimiter=delimiter, strict=True)
    try:
        header = next(reader, None)
    except csv.Error:                # e.g. '"id","text"' read with a tab delimiter
        return False
    if header is None or len(header) < 2 or len(set(header)) != len(header):
        return False
    if not all(_HEADER_CELL.match(c) and c == c.strip() and not _NUMBER.match(c)
               for c in header):
        return False
    rows = []
    try:
        for row in reader:
            rows.append(row)
            if len(rows) > 50:
                break
    except csv.Error:
        if not truncated or not rows:
            return False     # else: the head ends inside a quoted field (a long text cell)
    else:
        if truncated and len(rows) > 1:
            rows.pop()       # the last row may be cut by the head
    return bool(rows) and all(len(r) == len(header) for r in rows)


def format_of_head(head: bytes) -> Optional[str]:
    """The format told by a (decompressed) file's first bytes, or None for binary content
    of no format vectorize reads:

    ``PAR1`` -> parquet, ``ARROW1`` / an IPC stream's continuation marker -> arrow, a tar
    (``ustar`` at byte 257) or zip (``PK``) archive -> text (its members are the
    documents), ``<mediawiki`` -> wiki, ``%%MatrixMarket`` -> mm, a first line that is a
    JSON object -> jsonl, a UCI ``docword`` header (D, W, NNZ, a triple) -> uci, LDA-C
    lines (``N id:count ...``) -> ldac, a CSV / TSV header and rows (:func:`_is_table`) ->
    csv / tsv, anything else that is not binary (no NUL byte, no image / PDF / office
    magic) -> text. An empty file is text (an empty document)."""
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1") or head.startswith(b"\xff\xff\xff\xff"):
        return "arrow"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "text"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "text"
    if head.startswith(_BINARY_MAGIC):
        return None
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "text"           # UTF-16 with its byte-order mark (give --encoding utf-16)
    if b"\x00" in head:
        return None
    start = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    start = start.lstrip()
    if start.startswith(b"<mediawiki") or (start.startswith(b"<?xml")
                                           and b"<mediawiki" in head):
        return "wiki"
    if start.startswith(b"%%MatrixMarket"):
        return "mm"
    if start.startswith(b"{"):
        first, nl, _ = start.partition(b"\n")
        if not nl:           # one line longer than the head: an object's start is enough
            if re.match(rb'\{\s*"', first):
                return "jsonl"
        else:
            try:
                if isinstance(json.loads(first.decode("utf-8")), dict):
                    return "jsonl"
            except (ValueError, RecursionError):
                pass
    if _UCI_HEADER.match(head):
        return "uci"
    lines = head.split(b"\n", 5)[:-1][:5]
    if lines and all(_LDAC_LINE.match(l.rstrip(b"\r")) for l in lines):
        return "ldac"
    text = head.decode("utf-8", "replace")
    if "\t" in text and _is_table(text, "\t"):
        return "tsv"
    if "," in text and _is_table(text, ","):
        return "csv"
    return "text"


def sniff_format(path: str) -> Optional[str]:
    """The format told by the first bytes of a file (decompressed when compressed:
    :func:`format_of_head`); None for binary content of no known format, or a stream that
    does not decompress. Raises InputError (naming the file and why) if it cannot be
    opened."""
    f = open_decompressed(path)
    try:
        head = ChunkReader(f).read(SNIFF_BYTES)
    except DECOMPRESS_ERRORS:
        return None
    finally:
        f.close()
    return format_of_head(head)


def is_hidden(name: str) -> bool:
    return any(part.startswith(".") and part not in (".", "..")
               for part in name.replace("\\", "/").split("/"))


def _regular_files(paths: List[str]) -> List[str]:
    """The regular files (or links to one) among ``paths``; a FIFO, socket or device found by
    a folder walk or a glob is left out with a warning: reading it could block forever."""
    out = []
    for p in paths:
        if os.path.isfile(p):
            out.append(p)
        elif os.path.exists(p):
            logger.warning("input %s is not a regular file (a FIFO, socket or device); it is "
                           "skipped", p)
    return out


def _walk_folder(folder: str) -> List[str]:
    """Every non-hidden file under ``folder``, sorted; links to folders are not followed (a
    link loop cannot repeat files)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if not f.startswith("."):
                found.append(os.path.join(root, f))
    return found


def _parts_match(pattern: List[str], parts: List[str]) -> bool:
    """``parts`` (path components) matched by ``pattern`` (glob components; ``**`` is any
    number of components, none hidden)."""
    if not pattern:
        return not parts
    head = pattern[0]
    if head == "**":
        return any(_parts_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1)
                   if not any(is_hidden(x) for x in parts[:i]))
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], head) and _parts_match(pattern[1:], parts[1:])


def _glob_recursive(pattern: str) -> List[str]:
    """The files a glob with ``**`` names, as :func:`glob.glob` with ``recursive=True`` and
    the folders it matches walked, except that a folder reached twice (a symbolic link loop,
    two links to one folder) is listed once: each real file is found once, under the path
    that reaches it through the fewest links."""
    cut = _GLOB_CHARS.search(pattern).start()
    prefix = pattern[:pattern.rfind("/", 0, cut) + 1]
    root = prefix or "."
    comps = [c for c in pattern[len(prefix):].split("/") if c]
    seen = set()
    found = []
    within: List[str] = []          # matched folders: every non-hidden file below them counts
    for top, dirs, files in os.walk(root, followlinks=True):
        st = os.stat(top)
        if (st.st_dev, st.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        # real folders before links to folders: the link to a folder walked already is cut
        dirs.sort(key=lambda d: (os.path.islink(os.path.join(top, d)), d))
        rel = os.path.relpath(top, root)
        base = [] if rel == "." else rel.split(os.sep)
        below = any(top == w or top.startswith(w + os.sep) for w in within)
        for name in dirs:
            if not below and _parts_match(comps, base + [name]):
                within.append(os.path.join(top, name))
        if below:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if (below and not name.startswith(".")) or _parts_match(comps, base + [name]):
                p = os.path.join(top, name)
                found.append(p[2:] if root == "." and p.startswith("./") else p)
    return sorted(found)


def _expand_local(pattern: str) -> List[str]:
    local = _local(pattern)
    if os.path.isdir(local):
        return _regular_files(_walk_folder(local))
    if _GLOB_CHARS.search(local):
        found = []
        matched = (_glob_recursive(local) if "**" in local
                   else sorted(glob.glob(local)))
        for p in matched:
            if os.path.isdir(p):
                found.extend(_walk_folder(p))
            else:              # glob's * does not match names starting with "."
                found.append(p)
        return _regular_files(found)
    if os.path.exists(local) and not os.path.isfile(local) and not os.path.isdir(local):
        raise InputError("input %s is not a regular file (a FIFO, socket or device): reading "
                         "it could block forever; give a file, a folder or a glob" % pattern)
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
    is taken as a folder (``URL/**``). An ``http(s)://`` URL is one file."""
    if is_web(pattern):
        return [pattern]
    paths = _match_remote(pattern)
    if not paths and not _GLOB_CHARS.search(pattern):
        paths = _match_remote(pattern.rstrip("/") + "/**")
    return [p for p in paths if not is_hidden(p.split("://", 1)[-1])]


def _identity(path: str) -> str:
    """What makes two input paths one file: the resolved path locally, the URL otherwise."""
    return path if is_remote(path) or is_web(path) else os.path.realpath(_local(path))


SNIFF_THREADS = 8          # files of object stores / web servers sniffed at once


def _sniffed(paths: List[str]) -> List[Optional[str]]:
    """:func:`sniff_format` of each path, in order; remote files in parallel threads (each
    costs a request's latency)."""
    remote = [p for p in paths if is_remote(p)]
    if len(remote) < 2:
        return [sniff_format(p) for p in paths]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(min(SNIFF_THREADS, len(paths))) as pool:
        return list(pool.map(sniff_format, paths))


def expand_inputs(patterns: Sequence[str], fmt: str = "auto",
                  exclude: Sequence[str] = ()) -> List[Tuple[str, str]]:
    """(path, resolved format) for every file matched by the patterns, except those
    ``exclude`` names: a glob matched against the file's name and against its whole path
    (``README.TXT``, ``*.md``, ``*/drafts/*``; :func:`excluded`).

    With ``fmt="auto"`` the format comes from a known suffix of the file name
    (:func:`detect_format`), else from its content (:func:`sniff_format`): dots in a name
    that are not a known suffix (``comp.graphics-38758``) say nothing.

    A pattern is a file, a directory (walked recursively, hidden files skipped), a glob
    (``**`` allowed), a Beam file-system URL / URL glob, or an ``http(s)://`` URL (one
    file). A tar or zip archive of text files is one input of format ``text``. Raises
    InputError naming a pattern that matches nothing, or a file whose format cannot be told
    under ``fmt="auto"`` (binary content of no known format, or a suffix such as ``.xlsx``
    or ``.pdf`` that names a kind of file vectorize does not read).
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
            paths = drop_table_metadata(paths)
        if not paths:
            raise InputError("input %s matches no file (expected an existing file, directory "
                             "or glob)" % pattern)
        if exclude:
            kept = [p for p in paths if not excluded(p, exclude)]
            if not kept:
                raise InputError("input %s: every one of its %d files is excluded by --exclude "
                                 "%s" % (pattern, len(paths), " ".join(exclude)))
            paths = kept
        # each real file once: a file named twice, or reached through links, is read once
        paths = [p for p in paths if not (_identity(p) in seen or seen.add(_identity(p)))]
        if fmt != "auto":
            out.extend((p, fmt) for p in paths)
            continue
        named = [detect_format(p) for p in paths]
        for p, f in zip(paths, named):
            suffix = unsupported_suffix(p) if f is None else None
            if suffix:
                raise InputError(
                    "input %s: vectorize does not read %s files; convert it to text, CSV, "
                    "JSON lines or Parquet, or give --format if its content is one of them"
                    % (p, suffix))
        unnamed = [p for p, f in zip(paths, named) if f is None]
        sniffed = dict(zip(unnamed, _sniffed(unnamed)))
        for p, f in zip(paths, named):
            f = f or sniffed[p]
            if f is None:
                raise InputError(
                    "cannot determine the format of input %s: neither its name (expected "
                    ".xml[.bz2] (wiki), .txt / .tar.gz / .zip (text), .jsonl, .csv, .tsv, "
                    ".parquet, .arrow, docword.*.txt (uci), .mm, .lda-c) nor its content (it "
                    "is binary) tells; give --format" % p)
            out.append((p, f))
    return out


def excluded(path: str, exclude: Sequence[str]) -> bool:
    """Whether ``path`` matches one of the globs ``exclude`` (case-sensitive, ``fnmatch``
    rules): by its name (the part after the last ``/``) or by its whole path."""
    name = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(path, g) for g in exclude)


# ----------------------------------------------------------------------------- decoding

_REPLACED = threading.local()
COUNTING_REPLACE = "ldabeam.replace"


def _counting_replace(err):
    """The ``replace`` error handler (one U+FFFD per undecodable sequence) that also counts
    the replacements of this thread (:func:`replaced_so_far`)."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    _REPLACED.n = getattr(_REPLACED, "n", 0) + 1
    return "\ufffd", err.end


COUNTING_IGNORE = "ldabeam.ignore"


def _counting_ignore(err):
    """The ``ignore`` error handler (each undecodable sequence dropped) that counts what it
    drops, one per sequence as ``replace`` counts its U+FFFD (:func:`replaced_so_far`)."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    _REPLACED.n = getattr(_REPLACED, "n", 0) + 1
    return "", err.end


codecs.register_error(COUNTING_REPLACE, _counting_replace)
codecs.register_error(COUNTING_IGNORE, _counting_ignore)


def replaced_so_far() -> int:
    """Undecodable sequences replaced (:data:`COUNTING_REPLACE`) or dropped
    (:data:`COUNTING_IGNORE`) in this thread so far."""
    return getattr(_REPLACED, "n", 0)


def error_handler(errors: str) -> str:
    """The codecs error handler for an ``encoding_errors`` option: ``replace`` and ``ignore``
    count what they replace or drop; ``strict`` raises (the record is a dead letter)."""
    return {"replace": COUNTING_REPLACE, "ignore": COUNTING_IGNORE}.get(errors, errors)


def decode_counted(data: bytes, encoding: str, errors: str) -> Tuple[str, int]:
    """``(text, replaced characters)``; raises UnicodeDecodeError under ``strict``."""
    before = replaced_so_far()
    text = data.decode(encoding, error_handler(errors))
    return text, replaced_so_far() - before


# ----------------------------------------------------------------------------- table folders

#: files of a table folder that hold no rows (Spark / Hive markers, Parquet summary files)
TABLE_MARKERS = ("_SUCCESS", "_metadata", "_common_metadata")
#: Hugging Face ``save_to_disk`` metadata beside the ``.arrow`` files
HF_METADATA = ("state.json", "dataset_info.json", "dataset_dict.json")


def _hf_data_files(state_path: str) -> Optional[List[str]]:
    """The ``.arrow`` files a Hugging Face ``state.json`` lists, or None if it is not one."""
    try:
        with open_binary(state_path) as f:
            state = json.loads(f.read(1 << 20).decode("utf-8"))
    except (InputError, OSError, ValueError):
        return None
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list):
        return None
    return [d.get("filename") for d in files if isinstance(d, dict) and d.get("filename")]


def drop_table_metadata(paths: Sequence[str]) -> List[str]:
    """Leave out files of a table folder that hold no rows: Spark / Hive markers
    (``_SUCCESS``, ``_metadata``) and the JSON files of a Hugging Face ``save_to_disk``
    folder (recognised by its ``state.json`` listing ``_data_files``)."""
    split = lambda p: posixpath.split(p) if "://" in p else os.path.split(p)
    hf_dirs = set()
    for p in paths:
        d, name = split(p)
        if name == "state.json" and _hf_data_files(p) is not None:
            hf_dirs.add(d)
    out = []
    for p in paths:
        d, name = split(p)
        if name in TABLE_MARKERS or (d in hf_dirs and name in HF_METADATA):
            continue
        out.append(p)
    return out
