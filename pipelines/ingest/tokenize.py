"""Tokenizer for the vectorize pipeline: gensim-compatible, configurable, cheap.

The default :class:`TokenizerConfig` reproduces gensim's conventions:

* ``lowercase=True``  -- ``text.lower()`` on the whole text (gensim ``utils.tokenize(lower=True)``);
* ``deaccent=True``   -- gensim ``utils.deaccent``: Unicode NFD, drop every character of
  category ``Mn`` (non-spacing marks), NFC again; applied to the whole text *before*
  tokenizing, as gensim does, so ``"naïve"`` gives the one token ``"naive"``;
* tokens are maximal runs of word characters that are not digits (gensim
  ``PAT_ALPHABETIC = (((?![\\d])\\w)+)``; so ``_`` is a word character), kept when
  ``min_len <= len(token) <= max_len`` (Unicode code points; gensim ``TOKEN_MIN_LEN = 2``,
  ``TOKEN_MAX_LEN = 15``) and the token does not start with ``_`` (gensim
  ``wikicorpus.tokenize``);
* ``stopwords`` -- tokens in this set are dropped after lower-casing (default: none; see
  :func:`load_stopwords` for gensim's list or a file).

Note: gensim's ``WikiCorpus`` does *not* de-accent (it calls ``utils.tokenize`` with
``lower=True`` only); ``TokenizerConfig(deaccent=False)`` gives exactly its tokens.

Speed: the length and ``_`` filters are folded into one compiled regular expression, so a
document is tokenized by a single ``re.findall`` over the lower-cased text with no per-token
Python work (except the optional stop-word filter, a set lookup per token). De-accenting is
skipped for pure-ASCII text (nothing to remove) and otherwise done by one ``str.translate``;
pure-ASCII text (most of English Wikipedia's articles) is matched with an equivalent ASCII
character-set regex, which is faster. The pipeline tokenizes and counts whole batches of
documents with :func:`count_batch` (same tokens, no Python object per token for ASCII text).
"""
from __future__ import annotations

import functools
import logging
import re
import unicodedata
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from lda_core.errors import UsageError

logger = logging.getLogger(__name__)

TOKEN_MIN_LEN = 2    # gensim.corpora.wikicorpus.TOKEN_MIN_LEN
TOKEN_MAX_LEN = 15   # gensim.corpora.wikicorpus.TOKEN_MAX_LEN
MAX_TOKEN_LEN_LIMIT = 1000   # a sanity cap for max_len (the regex repeats {min,max})


@dataclass(frozen=True)
class TokenizerConfig:
    """How raw text becomes tokens (see the module docstring for the exact rules)."""

    lowercase: bool = True
    deaccent: bool = True
    min_len: int = TOKEN_MIN_LEN
    max_len: int = TOKEN_MAX_LEN
    stopwords: frozenset = field(default_factory=frozenset)

    def __post_init__(self):
        # accept any iterable of words for stopwords, store a frozenset (hashable, picklable)
        if not isinstance(self.stopwords, frozenset):
            object.__setattr__(self, "stopwords", frozenset(self.stopwords))

    def validate(self) -> None:
        """Raise ValueError naming the field, its value and the allowed range."""
        for name in ("lowercase", "deaccent"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise UsageError("TokenizerConfig.%s must be True or False, got %r" % (name, v))
        for name in ("min_len", "max_len"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise UsageError("TokenizerConfig.%s must be an integer, got %r" % (name, v))
        if not 1 <= self.min_len <= MAX_TOKEN_LEN_LIMIT:
            raise UsageError("TokenizerConfig.min_len must be in [1, %d], got %d"
                             % (MAX_TOKEN_LEN_LIMIT, self.min_len))
        if not self.min_len <= self.max_len <= MAX_TOKEN_LEN_LIMIT:
            raise UsageError("TokenizerConfig.max_len must be in [min_len=%d, %d], got %d"
                             % (self.min_len, MAX_TOKEN_LEN_LIMIT, self.max_len))
        for w in self.stopwords:
            if not isinstance(w, str):
                raise UsageError("TokenizerConfig.stopwords must hold strings, got %r" % (w,))


DEFAULT = TokenizerConfig()


@functools.lru_cache(maxsize=64)
def token_pattern(min_len: int, max_len: int, ascii_only: bool = False) -> "re.Pattern":
    """One regex matching exactly the kept tokens.

    A token is a maximal run of ``[^\\W\\d]`` (word characters except digits -- gensim's
    ``((?!\\d)\\w)+``) whose first character is not ``_`` and whose length is in
    ``[min_len, max_len]``. Maximality is enforced by the look-behind / look-ahead, so a run
    longer than ``max_len`` yields nothing (not its prefix), as in gensim.

    ``ascii_only=True`` gives the same matches on pure-ASCII text, where ``[^\\W\\d]`` is
    exactly ``[A-Za-z_]``: a plain character set that the regex engine tests ~1.8x faster than
    the Unicode classes.
    """
    if min_len < 1 or max_len < min_len:
        raise UsageError("token lengths must satisfy 1 <= min_len <= max_len, got %d, %d"
                         % (min_len, max_len))
    rest = "{%d,%d}" % (min_len - 1, max_len - 1)
    if ascii_only:
        return re.compile(r"(?<![A-Za-z_])[A-Za-z][A-Za-z_]%s(?![A-Za-z_])" % rest)
    return re.compile(r"(?<![^\W\d])[^\W\d_][^\W\d]%s(?![^\W\d])" % rest)


class _MarkTable(dict):
    """str.translate table deleting Unicode category-Mn characters, filled lazily: only the
    code points actually met are looked up (once each) in the Unicode database."""

    def __missing__(self, cp):
        value = None if unicodedata.category(chr(cp)) == "Mn" else cp
        self[cp] = value
        return value


_MARKS = _MarkTable()


_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")


def _strip_marks(match) -> str:
    return match.group().translate(_MARKS)


def deaccent(text: str) -> str:
    """gensim ``utils.deaccent``: NFD, remove category-Mn characters, NFC (ASCII unchanged).

    Mostly-ASCII text (English) is translated run by run of non-ASCII characters only; text
    with many non-ASCII characters is translated whole.
    """
    if text.isascii():
        return text
    norm = unicodedata.normalize("NFD", text)
    # UTF-8 length - length = extra bytes of non-ASCII characters: a cheap density estimate
    if len(norm.encode("utf-8", "surrogatepass")) - len(norm) < len(norm) // 16:
        norm = _NON_ASCII_RUN.sub(_strip_marks, norm)
    else:
        norm = norm.translate(_MARKS)
    return unicodedata.normalize("NFC", norm)


def tokenize(text: str, cfg: TokenizerConfig = DEFAULT) -> List[str]:
    """Tokens of ``text`` under ``cfg`` (a list; order and repeats kept)."""
    if not text:
        return []
    if cfg.lowercase:
        text = text.lower()
    tokens = _tokens_of_cased(text, cfg)
    if cfg.stopwords:
        sw = cfg.stopwords
        tokens = [t for t in tokens if t not in sw]
    return tokens


def _tokens_of_cased(text: str, cfg: TokenizerConfig) -> List[str]:
    """Tokens of text already lower-cased (if ``cfg.lowercase``); stop words not removed."""
    is_ascii = text.isascii()
    if cfg.deaccent and not is_ascii:
        text = deaccent(text)
        is_ascii = text.isascii()
    return token_pattern(cfg.min_len, cfg.max_len, is_ascii).findall(text)


# ----------------------------------------------------------------------------- batches
#
# A batch of documents is tokenized into one Arrow string array of tokens (in document order)
# plus the document index of every token, then counted with numpy: no Python object per token
# for ASCII documents. ASCII text (after lower-casing) is tokenized by byte-class arithmetic
# on the concatenated bytes: in ASCII, ``[^\W\d]`` is exactly ``[A-Za-z_]``, so a token is a
# maximal run of bytes of that class, kept when its length is in ``[min_len, max_len]`` and
# its first byte is not ``_`` -- the same rule as :func:`token_pattern`. Other documents go
# through :func:`tokenize` itself (de-accenting, Unicode classes), so every document gets the
# tokens :func:`tokenize` gives it.

_SEP = "\n"    # joins ASCII documents; not a word character, so no token spans two documents


@functools.lru_cache(maxsize=4)
def _word_bytes(lowercase: bool):
    """256-entry table: True for the ASCII word bytes a token may hold."""
    import numpy as np
    table = np.zeros(256, np.bool_)
    letters = "abcdefghijklmnopqrstuvwxyz"
    chars = letters + "_" + ("" if lowercase else letters.upper())
    table[np.frombuffer(chars.encode("ascii"), np.uint8)] = True
    return table


def _ascii_tokens(texts: Sequence[str], cfg: TokenizerConfig):
    """Tokens of pure-ASCII (already cased) texts: ``(Arrow large_string array, int64 array of
    the index in ``texts`` of each token's document)``, tokens in document order."""
    import numpy as np
    import pyarrow as pa
    if not texts:
        return pa.array([], pa.large_string()), np.zeros(0, np.int64)
    data = np.frombuffer(_SEP.join(texts).encode("ascii"), np.uint8)
    inside = np.zeros(len(data) + 2, np.int8)
    inside[1:-1] = _word_bytes(cfg.lowercase)[data]
    edges = np.flatnonzero(np.diff(inside))        # alternately run starts and run ends
    starts = edges[0::2]
    lengths = edges[1::2] - starts
    keep = (lengths >= cfg.min_len) & (lengths <= cfg.max_len)
    keep &= data[np.minimum(starts, len(data) - 1)] != ord("_")
    starts = starts[keep]
    lengths = lengths[keep]
    # the bytes of the kept tokens, in order: mark [start, start + length) and compress
    delta = np.zeros(len(data) + 1, np.int8)
    delta[starts] = 1
    delta[starts + lengths] = -1
    chars = data[np.cumsum(delta[:-1], dtype=np.int8).view(np.bool_)]
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets),
                                              pa.py_buffer(chars))
    doc_starts = np.zeros(len(texts), np.int64)
    np.cumsum(np.fromiter((len(t) + 1 for t in texts), np.int64, len(texts))[:-1],
              out=doc_starts[1:])
    return tokens, np.searchsorted(doc_starts, starts, "right") - 1


def tokenize_batch(texts: Sequence[str], cfg: TokenizerConfig = DEFAULT):
    """Tokens of many documents at once, stop words *not* removed.

    Returns ``(tokens, doc)``: an Arrow ``large_string`` array holding, document after
    document, exactly the tokens :func:`tokenize` gives each text under ``cfg`` without its
    stop-word filter, and ``doc`` (int64 numpy) the index in ``texts`` of each token's
    document. Tokens of one document keep their order.
    """
    import numpy as np
    import pyarrow as pa
    ascii_idx, ascii_texts, other_idx, other_tokens = [], [], [], []
    for i, text in enumerate(texts):
        if not text:
            continue
        if cfg.lowercase:
            text = text.lower()
        if text.isascii():
            ascii_idx.append(i)
            ascii_texts.append(text)
        else:
            toks = _tokens_of_cased(text, cfg)
            if toks:
                other_idx.append(i)
                other_tokens.append(toks)
    tokens, doc = _ascii_tokens(ascii_texts, cfg)
    doc = np.asarray(ascii_idx, np.int64)[doc] if len(doc) else doc
    if other_tokens:
        flat = [t for toks in other_tokens for t in toks]
        tokens = pa.concat_arrays([tokens, pa.array(flat, pa.large_string())])
        lens = np.fromiter((len(t) for t in other_tokens), np.int64, len(other_tokens))
        doc = np.concatenate([doc, np.repeat(np.asarray(other_idx, np.int64), lens)])
        order = np.argsort(doc, kind="stable")       # document order, token order kept
        tokens = tokens.take(pa.array(order))
        doc = doc[order]
    return tokens, doc


@dataclass
class BatchCounts:
    """Bags of words of a batch of documents, as flat arrays.

    ``tokens`` (an Arrow string array) holds the distinct tokens of the batch (local ids are
    positions in it);
    document ``d``'s words are ``ids[ptr[d]:ptr[d+1]]`` (ascending local ids) with
    ``counts[ptr[d]:ptr[d+1]]``. Stop words are already removed.
    """

    tokens: "object"   # pyarrow large_string array
    ptr: "object"      # int64 numpy, n_docs + 1
    ids: "object"      # int64 numpy
    counts: "object"   # int64 numpy

    @property
    def n_docs(self) -> int:
        return len(self.ptr) - 1

    def doc_lengths(self):
        """Tokens per document (int64 numpy)."""
        import numpy as np
        doc = np.repeat(np.arange(self.n_docs), np.diff(self.ptr))
        return np.bincount(doc, weights=self.counts, minlength=self.n_docs).astype(np.int64)

    def doc_counts(self, d: int):
        """``((token, count), ...)`` of document ``d``, in ascending local id order."""
        a, b = self.ptr[d], self.ptr[d + 1]
        toks = self.tokens.take(self.ids[a:b]).to_pylist()
        return tuple(zip(toks, self.counts[a:b].tolist()))


def count_batch(texts: Sequence[str], cfg: TokenizerConfig = DEFAULT) -> BatchCounts:
    """Token counts of every text (the bag of words of :func:`tokenize`), computed for the
    whole batch with Arrow's hash dictionary and numpy."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    n = len(texts)
    tokens, doc = tokenize_batch(texts, cfg)
    if len(tokens) == 0:
        z = np.zeros(0, np.int64)
        return BatchCounts(tokens, np.zeros(n + 1, np.int64), z, z)
    enc = tokens.dictionary_encode()
    dictionary = enc.dictionary
    local = enc.indices.to_numpy().astype(np.int64)
    u = len(dictionary)
    keys, counts = np.unique(doc * u + local, return_counts=True)
    ids = keys % u
    pair_doc = keys // u
    if cfg.stopwords:
        stop = pc.is_in(dictionary, value_set=pa.array(sorted(cfg.stopwords),
                                                        dictionary.type)).to_numpy(False)
        keep = ~stop[ids]
        ids, pair_doc, counts = ids[keep], pair_doc[keep], counts[keep]
    ptr = np.searchsorted(pair_doc, np.arange(n + 1))
    return BatchCounts(dictionary, ptr.astype(np.int64), ids, counts.astype(np.int64))


def load_stopwords(spec: Optional[str]) -> frozenset:
    """Stop words from a spec.

    * ``None``, ``""`` or ``"none"``: no stop words;
    * ``"gensim"``: gensim's ``gensim.parsing.preprocessing.STOPWORDS`` (337 English words);
    * anything else: a path (local or Beam FileSystems URL) of a UTF-8 file with one word per
      line; blank lines and lines starting with ``#`` are ignored; words are lower-cased and
      stripped (so they match lower-cased tokens).

    Raises ValueError (with the path) if the file is missing or unreadable.
    """
    if spec is None or spec.strip() == "" or spec.strip().lower() == "none":
        return frozenset()
    if spec.strip().lower() == "gensim":
        from gensim.parsing.preprocessing import STOPWORDS
        return frozenset(STOPWORDS)
    from pipelines.ingest.text_sources import InputError, open_binary
    try:
        with open_binary(spec) as f:
            data = f.read()
    except (OSError, IOError) as e:
        raise InputError("stop-word file %s cannot be read (%s); expected 'none', 'gensim' or "
                         "a file with one word per line" % (spec, e)) from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError("stop-word file %s is not UTF-8 text (%s)" % (spec, e)) from e
    words = set()
    for line in text.splitlines():
        w = line.strip().lower()
        if w and not w.startswith("#"):
            words.add(w)
    logger.info("loaded %d stop words from %s", len(words), spec)
    return frozenset(words)


def config_from_options(lowercase: bool = True, deaccent: bool = True,
                        min_len: int = TOKEN_MIN_LEN, max_len: int = TOKEN_MAX_LEN,
                        stopwords: Optional[str] = None) -> TokenizerConfig:
    """A validated TokenizerConfig from command-line style options (stopwords as a spec)."""
    cfg = TokenizerConfig(lowercase=lowercase, deaccent=deaccent, min_len=min_len,
                          max_len=max_len, stopwords=load_stopwords(stopwords))
    cfg.validate()
    return cfg
