"""Readers for existing bag-of-words corpora: UCI docword, LDA-C (Blei), Matrix Market.

Pure Python + numpy, no pipeline. Each reader streams its file line by line (bounded memory:
one document at a time) and yields ``(doc_id, word_ids, counts)`` with ``word_ids`` sorted,
unique, 0-based ``int32`` and ``counts`` ``int32 > 0`` (repeated word ids within a document are
summed), or a :class:`~pipelines.ingest.input_files.DeadLetter` for a document that cannot be parsed.
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
from typing import Dict, Iterator, List, Optional

from pipelines.ingest.bow_triples import (BowItem, BrokenStream, iter_grouped_triples, MAX_DOCS,
                                          MAX_LINE_BYTES, MAX_VOCAB, pack_bow, parse_int,
                                          TriplesSource)
from pipelines.ingest.input_files import (compression_of, DeadLetter, input_file_exists, InputError,
                                          iter_lines, open_decompressed, snippet_of)
from pipelines.ingest.text_sources import primed

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- helpers

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
        cands = default_vocab_paths(path, fmt)
        found = [c for c in cands if input_file_exists(c)]
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
    return primed(gen)


def _read_header_ints(lines, path: str, n: int, what: str, skip_comments: bool = False):
    vals: List[int] = []
    lineno = 0
    for lineno, line in lines:
        if isinstance(line, BrokenStream):
            raise InputError("input %s cannot be read (%s)" % (path, line.error))
        if skip_comments and (line.startswith(b"%") or not line):
            continue
        for tok in line.split():
            try:
                vals.append(int(tok))
            except ValueError:
                raise InputError("input %s line %d: expected the %s header (%d integers), got %r"
                                 % (path, lineno, what, n, snippet_of(line))) from None
        if len(vals) >= n:
            break
    if len(vals) != n:
        raise InputError("input %s: expected the %s header (%d integers), found %d"
                         % (path, what, n, len(vals)))
    return vals, lineno


def _iter_uci(path: str, vocab_size: Optional[int]) -> Iterator[BowItem]:
    src = TriplesSource(path)
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
    yield from iter_grouped_triples(path, src, n_docs, n_words, nnz, allow_float=False)


def _iter_mm(path: str, vocab_size: Optional[int]) -> Iterator[BowItem]:
    src = TriplesSource(path)
    try:
        lines = src.lines()
        first = next(lines, None)
        if first is None or isinstance(first[1], BrokenStream) or not first[1].lower().startswith(
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
    yield from iter_grouped_triples(path, src, n_docs, n_words, nnz, allow_float=True)


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
            n = parse_int(parts[0], "term count")
            if n != len(parts) - 1:
                raise ValueError("line says %d terms but has %d id:count pairs"
                                 % (n, len(parts) - 1))
            ids, cnts = [], []
            for p in parts[1:]:
                a, sep, b = p.partition(b":")
                if not sep:
                    raise ValueError("pair %r is not id:count" % p.decode("latin-1"))
                w = parse_int(a, "word id")
                c = parse_int(b, "count")
                if not 0 <= w < limit:
                    raise ValueError("word id %d is out of range [0, %d)" % (w, limit))
                if c < 0:
                    raise ValueError("count %d is negative" % c)
                if c:
                    ids.append(w)
                    cnts.append(c)
            if not ids:
                continue
            w_arr, c_arr = pack_bow(ids, cnts)
        except ValueError as e:
            yield DeadLetter(path, "line %d" % lineno, str(e), snippet_of(line))
            continue
        yield str(lineno), w_arr, c_arr
