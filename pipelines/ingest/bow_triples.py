"""The bag-of-words readers' lower layer: the triples body of UCI ``docword`` and Matrix
Market files (``doc word count`` lines, parsed a block at a time with numpy and grouped into
documents, :func:`iter_grouped_triples` over a :class:`TriplesSource`), and the helpers every
bag-of-words reader shares (:func:`pack_bow`, :class:`BrokenStream`, the limits).
"""
from __future__ import annotations

import logging
from typing import Iterator, List, Optional, Tuple, Union

import numpy as np

from pipelines.ingest.input_files import (DECOMPRESS_ERRORS, ChunkReader, DeadLetter, snippet_of,
                                          open_decompressed)

logger = logging.getLogger(__name__)

MAX_VOCAB = (1 << 31) - 1   # word ids must fit int32
MAX_DOCS = (1 << 31) - 1
MAX_LINE_BYTES = 64 << 20
BLOCK_BYTES = 1 << 20            # body bytes parsed at a time by numpy

BowItem = Union[Tuple[str, np.ndarray, np.ndarray], DeadLetter]


def pack_bow(ids: List[int], counts: List[int]) -> Tuple[np.ndarray, np.ndarray]:
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


def parse_int(tok: bytes, what: str) -> int:
    try:
        return int(tok)
    except ValueError:
        raise ValueError("%s %r is not an integer" % (what, tok.decode("latin-1")))


class BrokenStream:
    def __init__(self, error: str):
        self.error = error



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


class TriplesSource:
    """The decompressed stream of a corpus: header lines one by one, then the body in blocks
    of whole lines (so the body can be parsed by numpy a block at a time)."""

    def __init__(self, path: str):
        self.path = path
        self.f = open_decompressed(path)
        self.lineno = 0

    def lines(self):
        """(line number from 1, stripped line) or (line number, BrokenStream) -- then stops."""
        for _ in range(1 << 62):
            try:
                line = self.f.readline(MAX_LINE_BYTES + 1)
            except DECOMPRESS_ERRORS as e:
                yield self.lineno + 1, BrokenStream(str(e))
                return
            if not line:
                return
            self.lineno += 1
            if len(line) > MAX_LINE_BYTES:
                yield self.lineno, BrokenStream("line longer than %d bytes" % MAX_LINE_BYTES)
                return
            yield self.lineno, line.strip()

    def blocks(self, size: Optional[int] = None):
        """(number of the block's first line, bytes of whole lines) or (line, BrokenStream)."""
        size = size or BLOCK_BYTES
        rest = b""
        reader = ChunkReader(self.f)
        for _ in range(1 << 62):
            try:
                data = reader.read(size)
            except DECOMPRESS_ERRORS as e:
                # an unfinished last line is not trusted (its last number may be cut short)
                yield self.lineno + 1, BrokenStream("%s (unfinished line %r dropped)"
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
                    yield self.lineno + 1, BrokenStream("line longer than %d bytes" % MAX_LINE_BYTES)
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
                                  "range [1, %d] of the header" % (d, self.n_docs),
                                  snippet_of(line))
        elif d in self.done:
            self.bad = DeadLetter(self.path, "line %d" % lineno, "document %d reappears after "
                                  "other documents (the file must be grouped by document id)"
                                  % d, snippet_of(line))
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
            w = parse_int(parts[1], "word id")
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
            dl = DeadLetter(self.path, "line %d" % lineno, str(e), snippet_of(line))
            if d is None:
                out.append(dl)
            else:
                self.bad = self.bad or dl
            return out
        if self.bad is not None:
            return out
        if not 1 <= w <= self.n_words:
            self.bad = DeadLetter(self.path, "line %d" % lineno, "word id %d is out of range "
                                  "[1, %d]" % (w, self.n_words), snippet_of(line))
        elif c < 0:
            self.bad = DeadLetter(self.path, "line %d" % lineno, "count %d is negative" % c,
                                  snippet_of(line))
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


def iter_grouped_triples(path: str, src: "TriplesSource", n_docs: int, n_words: int, nnz: int,
                          allow_float: bool) -> Iterator[BowItem]:
    """Shared by uci and mm: the body lines ``doc word value`` (1-based), grouped by doc.

    Blocks of well-formed lines are parsed with numpy (``np.fromstring``, much faster than
    Python line splitting: ``benchmarks/ingest_bench.py``); a block with anything unusual is parsed line by line, which
    gives the precise dead letters.
    """
    g = _Grouper(path, n_docs, n_words, allow_float)
    try:
        for first, block in src.blocks():
            if isinstance(block, BrokenStream):
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
        w, c = pack_bow(ids, cnts)
    except ValueError as e:
        return DeadLetter(path, "document %d" % doc, str(e))
    return str(doc), w, c
