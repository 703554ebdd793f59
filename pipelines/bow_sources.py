"""Readers for existing bag-of-words corpora: UCI docword, LDA-C (Blei), Matrix Market.

Pure Python + numpy, no pipeline. Each reader streams its file line by line (bounded memory:
one document at a time) and yields ``(doc_id, word_ids, counts)`` with ``word_ids`` sorted,
unique, 0-based ``int32`` and ``counts`` ``int32 > 0`` (repeated word ids within a document are
summed), or a :class:`~pipelines.text_sources.DeadLetter` for a document that cannot be parsed.
Sizes read from a header are validated before anything is allocated from them. The vocabulary
ORDER of the corpus is kept (word id i of the file is vocabulary entry i), so a model trained on
it lines up column for column with the corpus' own vocabulary.

Formats:

* ``uci`` -- UCI "Bag of Words" ``docword.*.txt[.gz]``: three header lines D, W, NNZ, then
  ``docID wordID count`` lines (1-based ids), grouped by docID. Vocabulary
  ``vocab.*.txt``: one word per line, line i = word id i (1-based in the file, 0-based here).
  ``doc_id`` = the docID as written (``"1"`` .. ``"D"``). A docID in 1..D with no lines in the
  file has no tokens and is NOT yielded (empty documents carry nothing for training; their
  absence is logged) -- ids stay those of the file, so nothing is renumbered.
* ``ldac`` -- LDA-C (Blei): one document per line, ``N id:count id:count ...`` (0-based ids);
  vocabulary one word per line (gensim ``BleiCorpus`` writes it as ``<file>.vocab``).
  ``doc_id`` = the line number from 1. An empty line or ``0`` is an empty document (skipped).
* ``mm`` -- Matrix Market coordinate (gensim ``MmCorpus``): ``%%MatrixMarket matrix
  coordinate real|integer general``, ``%`` comments, ``num_docs num_terms nnz``, then
  ``docno termno value`` lines (1-based; rows are documents), grouped by docno. Values must be
  positive integers (counts; a tf-idf matrix is refused per document). Vocabulary: gensim
  ``Dictionary.save_as_text`` (``num_docs`` line, then ``id<TAB>word<TAB>docfreq``, any
  order) or one word per line. ``doc_id`` = docno as written.

A document with a bad line (not three integers, a word id outside the vocabulary, a zero or
negative count, a document id out of range, a document that reappears after another one) is
one DeadLetter naming the line; the other documents still come out.
"""
from __future__ import annotations

import logging
import os
import re
from typing import Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from pipelines.text_sources import (DECOMPRESS_ERRORS, ChunkReader, DeadLetter, InputError,
                                    _snippet, compression_of, iter_lines, open_decompressed)

logger = logging.getLogger(__name__)

MAX_VOCAB = (1 << 31) - 1   # word ids must fit int32
MAX_DOCS = (1 << 31) - 1
MAX_LINE_BYTES = 64 << 20
BLOCK_BYTES = 1 << 20            # body bytes parsed at a time by numpy

BowItem = Union[Tuple[str, np.ndarray, np.ndarray], DeadLetter]


# ----------------------------------------------------------------------------- helpers

def _pack(ids: List[int], counts: List[int]) -> Tuple[np.ndarray, np.ndarray]:
    """Sorted unique int32 ids with summed int32 counts."""
    if any(x > np.iinfo(np.int32).max for x in counts):
        raise ValueError("a count exceeds int32")    # before int64 conversion can overflow
    w = np.asarray(ids, dtype=np.int64)
    c = np.asarray(counts, dtype=np.int64)
    if len(w) > 1 and np.any(w[1:] <= w[:-1]):
        order = np.argsort(w, kind="stable")
        w, c = w[order], c[order]
        uniq, start = np.unique(w, return_index=True)
        c = np.add.reduceat(c, start)
        w = uniq
    if len(c) and c.max() > np.iinfo(np.int32).max:
        raise ValueError("a count exceeds int32")
    return w.astype(np.int32), c.astype(np.int32)


class _Broken:
    def __init__(self, error: str):
        self.error = error


def _parse_int(tok: bytes, what: str) -> int:
    try:
        return int(tok)
    except ValueError:
        raise ValueError("%s %r is not an integer" % (what, tok.decode("latin-1")))


def _check_size(name: str, value: int, limit: int, path: str) -> int:
    if not 0 <= value <= limit:
        raise InputError("input %s: header %s=%d is out of range [0, %d]"
                         % (path, name, value, limit))
    return value


# ----------------------------------------------------------------------------- vocabulary

def _read_text_lines(path: str) -> List[str]:
    try:
        f = open_decompressed(path)
    except InputError as e:
        raise InputError("vocabulary %s cannot be opened: %s" % (path, e)) from e
    try:
        data = f.read()
    finally:
        f.close()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
        logger.warning("vocabulary %s is not UTF-8; read as latin-1", path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.rstrip("\r") for ln in lines]


_DICT_LINE = re.compile(r"^(\d+)\t([^\t]*)\t(\d+)$")


def parse_vocab_lines(lines: List[str], path: str) -> List[str]:
    """Words in id order from a one-word-per-line vocabulary or a gensim
    ``Dictionary.save_as_text`` file (first line num_docs, then ``id\\tword\\tdocfreq``)."""
    if len(lines) >= 1 and lines[0].strip().isdigit() and len(lines) >= 2 and all(
            _DICT_LINE.match(ln) for ln in lines[1:3]):
        entries: Dict[int, str] = {}
        for i, ln in enumerate(lines[1:], start=2):
            m = _DICT_LINE.match(ln)
            if not m:
                raise InputError("vocabulary %s line %d is not 'id<TAB>word<TAB>docfreq' "
                                 "(gensim Dictionary.save_as_text format): %r" % (path, i, ln[:80]))
            wid = int(m.group(1))
            if wid in entries:
                raise InputError("vocabulary %s line %d repeats id %d" % (path, i, wid))
            entries[wid] = m.group(2)
        n = len(entries)
        if n and (min(entries) != 0 or max(entries) != n - 1):
            raise InputError("vocabulary %s has ids that are not 0..%d" % (path, n - 1))
        words = [entries[i] for i in range(n)]
    else:
        words = [ln.strip() for ln in lines]
        while words and words[-1] == "":
            words.pop()
    for i, w in enumerate(words):
        if w == "" or "\t" in w:
            raise InputError("vocabulary %s entry %d (line %d) is empty or has a tab"
                             % (path, i, i + 1))
    if len(set(words)) != len(words):
        seen, dup = set(), None
        for w in words:
            if w in seen:
                dup = w
                break
            seen.add(w)
        raise InputError("vocabulary %s has duplicate word %r" % (path, dup))
    return words


def default_vocab_paths(path: str, fmt: str) -> List[str]:
    """Candidate vocabulary files next to a bag-of-words corpus."""
    d, base = os.path.split(path)
    stem = base
    comp = compression_of(base)
    if comp:
        stem = base.rsplit(".", 1)[0]
    out = []
    if fmt == "uci" and stem.startswith("docword."):
        out.append(os.path.join(d, "vocab." + stem[len("docword."):]))
    root = os.path.splitext(stem)[0]
    for name in (stem, root):
        out += [os.path.join(d, name + ".vocab"), os.path.join(d, name + ".dict")]
    out.append(os.path.join(d, "vocab.txt"))
    return out


def read_bow_vocab(path: str, fmt: str, vocab_path: Optional[str]) -> List[str]:
    """The vocabulary of a bag-of-words corpus, in the corpus' id order.

    ``vocab_path`` None: look next to the corpus (uci: ``docword.X.txt`` -> ``vocab.X.txt``;
    ldac/mm: ``<file>.vocab``, ``<file>.dict``, the same without the file's extension,
    ``vocab.txt``). Raises InputError if none is
    found or the file is malformed (duplicate or empty words, bad Dictionary lines).
    """
    if fmt not in ("uci", "ldac", "mm"):
        raise InputError("read_bow_vocab: format %r is not a bag-of-words format (uci, ldac, mm)"
                         % fmt)
    if vocab_path is None:
        from pipelines.text_sources import is_remote
        cands = default_vocab_paths(path, fmt)
        if is_remote(path):
            from apache_beam.io.filesystems import FileSystems
            found = [c for c in cands if FileSystems.exists(c)]
        else:
            found = [c for c in cands if os.path.isfile(c[7:] if c.startswith("file://") else c)]
        if not found:
            raise InputError("no vocabulary given for %s corpus %s and none found (looked for %s);"
                             " give --vocab" % (fmt, path, ", ".join(cands)))
        vocab_path = found[0]
    words = parse_vocab_lines(_read_text_lines(vocab_path), vocab_path)
    if not words:
        raise InputError("vocabulary %s is empty" % vocab_path)
    logger.info("read %d words from %s", len(words), vocab_path)
    return words


# ----------------------------------------------------------------------------- documents

def iter_bow_documents(path: str, fmt: str, vocab_size: Optional[int] = None
                       ) -> Iterator[BowItem]:
    """Stream ``(doc_id, word_ids, counts)`` or DeadLetter for a uci / ldac / mm corpus.

    ``vocab_size``: if given, word ids must be below it and a header's W / num_terms must equal
    it (InputError otherwise). Raises InputError at once for a missing file, an unknown format
    or a bad header.
    """
    readers = {"uci": _iter_uci, "ldac": _iter_ldac, "mm": _iter_mm}
    if fmt not in readers:
        raise InputError("iter_bow_documents: format %r is not one of uci, ldac, mm" % fmt)
    if vocab_size is not None and not 0 < vocab_size <= MAX_VOCAB:
        raise InputError("vocab_size=%r is out of range [1, %d]" % (vocab_size, MAX_VOCAB))
    gen = readers[fmt](path, vocab_size)
    from pipelines.text_sources import _primed
    return _primed(gen)


def _read_header_ints(lines, path: str, n: int, what: str, skip_comments: bool = False):
    vals: List[int] = []
    lineno = 0
    for lineno, line in lines:
        if isinstance(line, _Broken):
            raise InputError("input %s cannot be read (%s)" % (path, line.error))
        if skip_comments and (line.startswith(b"%") or not line):
            continue
        for tok in line.split():
            try:
                vals.append(int(tok))
            except ValueError:
                raise InputError("input %s line %d: expected the %s header (%d integers), got %r"
                                 % (path, lineno, what, n, _snippet(line))) from None
        if len(vals) >= n:
            break
    if len(vals) != n:
        raise InputError("input %s: expected the %s header (%d integers), found %d"
                         % (path, what, n, len(vals)))
    return vals, lineno


class _Bitmap:
    """A growable set of non-negative ints as bits: memory = (largest member) / 8 bytes, so
    it follows the document ids actually present, not a size claimed by a header."""

    def __init__(self):
        self.bits = bytearray()
        self.count = 0

    def __contains__(self, i: int) -> bool:
        return (i >> 3) < len(self.bits) and bool(self.bits[i >> 3] & (1 << (i & 7)))

    def add(self, i: int) -> None:
        if (i >> 3) >= len(self.bits):
            self.bits.extend(bytes(max((i >> 3) + 1 - len(self.bits), len(self.bits))))
        if not self.bits[i >> 3] & (1 << (i & 7)):
            self.bits[i >> 3] |= 1 << (i & 7)
            self.count += 1


class _Source:
    """The decompressed stream of a corpus: header lines one by one, then the body in blocks
    of whole lines (so the body can be parsed by numpy a block at a time)."""

    def __init__(self, path: str):
        self.path = path
        self.f = open_decompressed(path)
        self.lineno = 0

    def lines(self):
        """(line number from 1, stripped line) or (line number, _Broken) -- then stops."""
        for _ in range(1 << 62):
            try:
                line = self.f.readline(MAX_LINE_BYTES + 1)
            except DECOMPRESS_ERRORS as e:
                yield self.lineno + 1, _Broken(str(e))
                return
            if not line:
                return
            self.lineno += 1
            if len(line) > MAX_LINE_BYTES:
                yield self.lineno, _Broken("line longer than %d bytes" % MAX_LINE_BYTES)
                return
            yield self.lineno, line.strip()

    def blocks(self, size: Optional[int] = None):
        """(number of the block's first line, bytes of whole lines) or (line, _Broken)."""
        size = size or BLOCK_BYTES
        rest = b""
        reader = ChunkReader(self.f)
        for _ in range(1 << 62):
            try:
                data = reader.read(size)
            except DECOMPRESS_ERRORS as e:
                # an unfinished last line is not trusted (its last number may be cut short)
                yield self.lineno + 1, _Broken("%s (unfinished line %r dropped)"
                                               % (e, rest[:80].decode("latin-1")) if rest
                                               else str(e))
                return
            if not data:
                if rest:
                    yield self.lineno + 1, rest
                return
            cut = data.rfind(b"\n")
            if cut < 0:
                rest += data
                if len(rest) > MAX_LINE_BYTES:
                    yield self.lineno + 1, _Broken("line longer than %d bytes" % MAX_LINE_BYTES)
                    return
                continue
            block = rest + data[:cut + 1]
            rest = data[cut + 1:]
            first = self.lineno + 1
            self.lineno += block.count(b"\n")
            yield first, block

    def close(self):
        self.f.close()


_NOT_FAST = (b"\t", b"\r", b"\x0b", b"\x0c", b"  ", b"\n ", b" \n", b"%")


def _parse_triples_block(block: bytes, allow_float: bool) -> Optional[np.ndarray]:
    """A block of ``a b c`` lines as an (n, 3) int64 array, or None if any line is not exactly
    three numbers separated by single spaces (the caller then parses line by line)."""
    if not block.endswith(b"\n"):
        block += b"\n"
    if block.startswith(b" ") or any(x in block for x in _NOT_FAST):
        return None
    raw = np.frombuffer(block, np.uint8)
    newlines = np.flatnonzero(raw == 10)
    n = len(newlines)
    spaces = np.flatnonzero(raw == 32)
    if len(spaces) != 2 * n:
        return None
    if n and np.any(np.bincount(np.searchsorted(newlines, spaces), minlength=n) != 2):
        return None
    try:
        vals = np.fromstring(block, dtype=np.int64, sep=" ")
    except ValueError:
        if not allow_float:
            return None
        try:
            fv = np.fromstring(block, dtype=np.float64, sep=" ")
        except ValueError:
            return None
        if len(fv) != 3 * n or not np.all(np.isfinite(fv)) or np.any(fv != np.floor(fv)) \
                or np.any(np.abs(fv) > 2.0 ** 53):
            return None
        vals = fv.astype(np.int64)
    if len(vals) != 3 * n:
        return None
    return vals.reshape(n, 3)


class _Grouper:
    """Rows ``doc word count`` (1-based, grouped by doc) -> documents or DeadLetters.

    Fed either line by line (:meth:`line`) or with whole parsed blocks (:meth:`block`), which
    vectorises the common case; both keep the same state and give the same results.
    """

    def __init__(self, path: str, n_docs: int, n_words: int, allow_float: bool):
        self.path, self.n_docs, self.n_words = path, n_docs, n_words
        self.allow_float = allow_float
        self.cur = None                 # current document id
        self.ids: List[int] = []        # its entries read line by line (0-based word ids)
        self.cnts: List[int] = []
        self.wparts: List[np.ndarray] = []   # its entries read in blocks
        self.cparts: List[np.ndarray] = []
        self.bad: Optional[DeadLetter] = None
        self.done = _Bitmap()
        self.n_nnz = 0

    def _close(self) -> List[BowItem]:
        out: List[BowItem] = []
        if self.cur is not None:
            if self.bad is not None:
                out.append(self.bad)
            elif self.ids or self.wparts:
                w = np.concatenate(self.wparts + [np.asarray(self.ids, np.int64)])
                c = np.concatenate(self.cparts + [np.asarray(self.cnts, np.int64)])
                out.append(_emit(self.cur, w, c, self.path))
            if 1 <= self.cur <= self.n_docs:     # an out-of-range id is dead, not remembered
                self.done.add(self.cur)
        self.cur, self.ids, self.cnts, self.wparts, self.cparts, self.bad = \
            None, [], [], [], [], None
        return out

    def _start(self, d: int, lineno: int, line: bytes) -> List[BowItem]:
        out = self._close()
        self.cur = d
        if not 1 <= d <= self.n_docs:
            self.bad = DeadLetter(self.path, "line %d" % lineno, "document id %d is out of "
                                  "range [1, %d] of the header" % (d, self.n_docs), _snippet(line))
        elif d in self.done:
            self.bad = DeadLetter(self.path, "line %d" % lineno, "document %d reappears after "
                                  "other documents (the file must be grouped by document id)"
                                  % d, _snippet(line))
        return out

    def line(self, lineno: int, line: bytes) -> List[BowItem]:
        line = line.strip()
        if not line or line.startswith(b"%"):
            return []
        out: List[BowItem] = []
        parts = line.split()
        try:
            d = int(parts[0])
        except (ValueError, IndexError):
            d = None          # no document id: the line cannot be attributed to a document
        if d is not None and d != self.cur:
            out += self._start(d, lineno, line)
        try:
            if len(parts) != 3:
                raise ValueError("expected 3 fields 'doc word count', got %d" % len(parts))
            if d is None:
                raise ValueError("document id %r is not an integer" % parts[0].decode("latin-1"))
            w = _parse_int(parts[1], "word id")
            try:
                c = int(parts[2])
            except ValueError:
                if not self.allow_float:
                    raise ValueError("count %r is not an integer" % parts[2].decode("latin-1"))
                cf = float(parts[2])
                if cf != cf or cf in (float("inf"), float("-inf")) or cf != int(cf):
                    raise ValueError("value %r is not an integer count (weighted matrix?)"
                                     % parts[2].decode("latin-1"))
                c = int(cf)
        except ValueError as e:
            dl = DeadLetter(self.path, "line %d" % lineno, str(e), _snippet(line))
            if d is None:
                out.append(dl)
            else:
                self.bad = self.bad or dl
            return out
        if self.bad is not None:
            return out
        if not 1 <= w <= self.n_words:
            self.bad = DeadLetter(self.path, "line %d" % lineno, "word id %d is out of range "
                                  "[1, %d]" % (w, self.n_words), _snippet(line))
        elif c < 0:
            self.bad = DeadLetter(self.path, "line %d" % lineno, "count %d is negative" % c,
                                  _snippet(line))
        elif c > 0:                    # explicit zeros carry nothing
            self.ids.append(w - 1)
            self.cnts.append(c)
            self.n_nnz += 1
        return out

    def block(self, first_lineno: int, rows: np.ndarray) -> Optional[List[BowItem]]:
        """A parsed block; None (nothing changed) if it needs the line-by-line checks."""
        if len(rows) == 0:
            return []
        d, w, c = rows[:, 0], rows[:, 1], rows[:, 2]
        if (d.min() < 1 or d.max() > self.n_docs or w.min() < 1 or w.max() > self.n_words
                or c.min() < 0 or np.any(d[1:] < d[:-1])
                or (self.cur is not None and d[0] < self.cur)):
            return None
        if self.bad is not None and d[0] == self.cur:
            return None               # the current document is already bad: keep it simple
        keep = np.flatnonzero(c > 0)
        starts = np.flatnonzero(np.diff(d)) + 1
        bounds = np.concatenate(([0], starts, [len(d)]))
        out: List[BowItem] = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            doc = int(d[a])
            if doc != self.cur:
                out += self._start(doc, first_lineno + int(a), b"")
            if self.bad is not None:
                continue
            lo, hi = np.searchsorted(keep, (a, b))
            sel = keep[lo:hi]
            if len(sel):
                self.wparts.append(w[sel] - 1)
                self.cparts.append(c[sel])
                self.n_nnz += len(sel)
        return out

    def finish(self) -> List[BowItem]:
        return self._close()


def _iter_grouped_triples(path: str, src: "_Source", n_docs: int, n_words: int, nnz: int,
                          allow_float: bool) -> Iterator[BowItem]:
    """Shared by uci and mm: the body lines ``doc word value`` (1-based), grouped by doc.

    Blocks of well-formed lines are parsed with numpy (``np.fromstring``, ~25x faster than
    Python line splitting); a block with anything unusual is parsed line by line, which
    gives the precise dead letters.
    """
    g = _Grouper(path, n_docs, n_words, allow_float)
    try:
        for first, block in src.blocks():
            if isinstance(block, _Broken):
                yield from g.finish()
                yield DeadLetter(path, "line %d" % first, "cannot read further: %s; documents "
                                 "after this point are lost" % block.error)
                return
            rows = _parse_triples_block(block, allow_float)
            items = g.block(first, rows) if rows is not None else None
            if items is None:
                items = []
                for k, line in enumerate(block.split(b"\n")):
                    items += g.line(first + k, line)
            yield from items
        yield from g.finish()
    finally:
        src.close()
    missing = n_docs - g.done.count
    if missing > 0:
        logger.info("%s: %d of the header's %d documents have no entries (not yielded)",
                    path, missing, n_docs)
    if g.n_nnz != nnz:
        logger.warning("%s: the header announces %d entries, %d valid non-zero entries were "
                       "read", path, nnz, g.n_nnz)


def _emit(doc: int, ids, cnts, path) -> BowItem:
    try:
        w, c = _pack(ids, cnts)
    except ValueError as e:
        return DeadLetter(path, "document %d" % doc, str(e))
    return str(doc), w, c


def _iter_uci(path: str, vocab_size: Optional[int]) -> Iterator[BowItem]:
    src = _Source(path)
    try:
        (n_docs, n_words, nnz), _ = _read_header_ints(src.lines(), path, 3,
                                                      "UCI docword D/W/NNZ")
        _check_size("D", n_docs, MAX_DOCS, path)
        _check_size("W", n_words, MAX_VOCAB, path)
        _check_size("NNZ", nnz, MAX_DOCS * 1000, path)
        if vocab_size is not None and n_words != vocab_size:
            raise InputError("input %s: header W=%d but the vocabulary has %d words"
                             % (path, n_words, vocab_size))
    except BaseException:
        src.close()
        raise
    yield from _iter_grouped_triples(path, src, n_docs, n_words, nnz, allow_float=False)


def _iter_mm(path: str, vocab_size: Optional[int]) -> Iterator[BowItem]:
    src = _Source(path)
    try:
        lines = src.lines()
        first = next(lines, None)
        if first is None or isinstance(first[1], _Broken) or not first[1].lower().startswith(
                b"%%matrixmarket matrix coordinate"):
            raise InputError("input %s is not a Matrix Market coordinate file (first line "
                             "should be '%%%%MatrixMarket matrix coordinate real general')"
                             % path)
        head = first[1].lower().split()
        if len(head) >= 4 and head[3] not in (b"real", b"integer"):
            raise InputError("input %s: Matrix Market field %r is not supported (expected "
                             "real or integer)" % (path, head[3].decode("latin-1")))
        (n_docs, n_words, nnz), _ = _read_header_ints(lines, path, 3, "Matrix Market size",
                                                      skip_comments=True)
        _check_size("num_docs", n_docs, MAX_DOCS, path)
        _check_size("num_terms", n_words, MAX_VOCAB, path)
        _check_size("nnz", nnz, MAX_DOCS * 1000, path)
        if vocab_size is not None and n_words > vocab_size:
            raise InputError("input %s: header num_terms=%d but the vocabulary has %d words"
                             % (path, n_words, vocab_size))
    except BaseException:
        src.close()
        raise
    yield from _iter_grouped_triples(path, src, n_docs, n_words, nnz, allow_float=True)


def _iter_ldac(path: str, vocab_size: Optional[int]) -> Iterator[BowItem]:
    limit = vocab_size if vocab_size is not None else MAX_VOCAB
    for lineno, line in iter_lines(path, MAX_LINE_BYTES, skip_long=False):
        if isinstance(line, DeadLetter):
            yield line
            return
        line = line.strip()
        if not line:
            continue
        parts = line.split()
        try:
            n = _parse_int(parts[0], "term count")
            if n != len(parts) - 1:
                raise ValueError("line says %d terms but has %d id:count pairs"
                                 % (n, len(parts) - 1))
            ids, cnts = [], []
            for p in parts[1:]:
                a, sep, b = p.partition(b":")
                if not sep:
                    raise ValueError("pair %r is not id:count" % p.decode("latin-1"))
                w = _parse_int(a, "word id")
                c = _parse_int(b, "count")
                if not 0 <= w < limit:
                    raise ValueError("word id %d is out of range [0, %d)" % (w, limit))
                if c < 0:
                    raise ValueError("count %d is negative" % c)
                if c:
                    ids.append(w)
                    cnts.append(c)
            if not ids:
                continue
            w_arr, c_arr = _pack(ids, cnts)
        except ValueError as e:
            yield DeadLetter(path, "line %d" % lineno, str(e), _snippet(line))
            continue
        yield str(lineno), w_arr, c_arr
