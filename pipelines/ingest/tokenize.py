"""Tokenizer for the vectorize pipeline: gensim-compatible, configurable, cheap; and the
record of it that travels with a dataset and a model (:func:`tokenizer_record`) with the one
public way to preprocess raw text as a model's training did (:class:`Preprocessor`, used by
``ldabeam infer --input``, ``ldabeam stream`` and the Python API).

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

Beyond gensim (see :class:`TokenizerConfig`): a token pattern, a Chinese/Japanese segmenter,
learned phrases (:mod:`pipelines.ingest.phrases`), a custom tokenizer callable; these take the
per-document path of :func:`tokenize_batch` instead of the byte-class fast path.

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
from typing import Callable, List, Optional, Sequence, Tuple

from lda_core.docbatch import DocBatch
from lda_core.errors import InputError, UsageError
from lda_core.storage.run_log import read_run_log, RUN_LOG_FILE
from pipelines.ingest import dataset, manifest
from pipelines.ingest.input_files import open_binary
from pipelines.ingest.phrases import PhraseTable
from pipelines.ingest.safe_regex import check_safe
from pipelines.runtime import paths
from pipelines.runtime.paths import exists

logger = logging.getLogger(__name__)

TOKEN_MIN_LEN = 2    # gensim.corpora.wikicorpus.TOKEN_MIN_LEN
TOKEN_MAX_LEN = 15   # gensim.corpora.wikicorpus.TOKEN_MAX_LEN
MAX_TOKEN_LEN_LIMIT = 1000   # a sanity cap for max_len (the regex repeats {min,max})


@dataclass(frozen=True)
class TokenizerConfig:
    """How raw text becomes tokens (see the module docstring for the exact rules).

    Beyond gensim's rules: ``token_pattern`` (a Python regular expression whose whole
    matches are the tokens, in place of the default rule; ``min_len``/``max_len`` still
    apply), ``segmenter`` (``"jieba"``/``"janome"``: Chinese/Japanese text is cut into words
    first), ``phrases`` (a :class:`~pipelines.ingest.phrases.PhraseTable` applied to each
    document's tokens before the stop words are removed) and ``tokenizer`` (a callable
    ``text -> list of str`` replacing lower-casing, de-accenting, segmentation, the pattern
    and the length filters; phrases and stop words still apply).

    Two more reproduce scikit-learn's ``CountVectorizer`` (a model its estimators saved with
    ``vectorizer=`` records them): ``strip_accents`` (``"unicode"`` or ``"ascii"``: its
    accent removal, after lower-casing, in place of ``deaccent``) and ``ngram_range``
    (``(min_n, max_n)``: after the stop words are removed, a document's tokens become its
    n-grams for every n in the range, each joined by one space)."""

    lowercase: bool = True
    deaccent: bool = True
    min_len: int = TOKEN_MIN_LEN
    max_len: int = TOKEN_MAX_LEN
    stopwords: frozenset = field(default_factory=frozenset)
    token_pattern: Optional[str] = None
    segmenter: str = "none"
    phrases: Optional["PhraseTable"] = None
    tokenizer: Optional[Callable[[str], Sequence[str]]] = field(default=None, compare=False)
    strip_accents: Optional[str] = None
    ngram_range: Tuple[int, int] = (1, 1)

    def __post_init__(self):
        # accept any iterable of words for stopwords, store a frozenset (hashable, picklable)
        if not isinstance(self.stopwords, frozenset):
            object.__setattr__(self, "stopwords", frozenset(self.stopwords))

    @property
    def plain(self) -> bool:
        """True when only gensim's rule applies (the fast batch path is exact)."""
        return (self.token_pattern is None and self.segmenter == "none"
                and self.tokenizer is None and not self.phrases
                and self.strip_accents is None and not self.ngrams)

    @property
    def ngrams(self) -> bool:
        """True when tokens become n-grams other than the tokens themselves."""
        return tuple(self.ngram_range) != (1, 1)

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
        if self.token_pattern is not None:
            compiled_pattern(self.token_pattern)
        if self.segmenter not in SEGMENTERS:
            raise UsageError("--segmenter %r is not one of %s"
                             % (self.segmenter, ", ".join(SEGMENTERS)))
        if self.segmenter != "none":
            segmenter_function(self.segmenter)
        if self.strip_accents not in STRIP_ACCENTS:
            raise UsageError("TokenizerConfig.strip_accents must be one of %s, got %r"
                             % (", ".join(map(repr, STRIP_ACCENTS)), self.strip_accents))
        n = tuple(self.ngram_range)
        if not (len(n) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in n)
                and 1 <= n[0] <= n[1] <= MAX_NGRAM):
            raise UsageError("TokenizerConfig.ngram_range must be (min_n, max_n) with 1 <= "
                             "min_n <= max_n <= %d, got %r" % (MAX_NGRAM, self.ngram_range))
        if self.tokenizer is not None and not callable(self.tokenizer):
            raise UsageError("tokenizer must be a callable text -> list of tokens, got %r"
                             % (self.tokenizer,))


STRIP_ACCENTS = (None, "unicode", "ascii")    # scikit-learn's CountVectorizer(strip_accents=)
MAX_NGRAM = 32       # a sanity cap for ngram_range's max_n

DEFAULT = TokenizerConfig()


@functools.lru_cache(maxsize=64)
def token_pattern(min_len: int, max_len: int, ascii_only: bool = False) -> "re.Pattern":
    """One regex matching exactly the kept tokens.

    A token is a maximal run of ``[^\\W\\d]`` (word characters except digits -- gensim's
    ``((?!\\d)\\w)+``) whose first character is not ``_`` and whose length is in
    ``[min_len, max_len]``. Maximality is enforced by the look-behind / look-ahead, so a run
    longer than ``max_len`` yields nothing (not its prefix), as in gensim.

    ``ascii_only=True`` gives the same matches on pure-ASCII text, where ``[^\\W\\d]`` is
    exactly ``[A-Za-z_]``: a plain character set, which the regex engine tests faster than the
    Unicode classes.
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
    tokens = doc_tokens(text, cfg)
    if cfg.stopwords and not cfg.ngrams:        # n-grams are made without the stop words
        sw = cfg.stopwords
        tokens = [t for t in tokens if t not in sw]
    return tokens


def doc_tokens(text: str, cfg: TokenizerConfig) -> List[str]:
    """Tokens of one text with phrases joined, stop words not removed (with ``ngram_range``:
    the n-grams of its tokens without the stop words)."""
    if not text:
        return []
    if cfg.tokenizer is not None:
        tokens = _checked_tokens(cfg.tokenizer(text), cfg.tokenizer)
    else:
        if cfg.segmenter != "none":
            text = segment(text, cfg.segmenter)
        if cfg.lowercase:
            text = text.lower()
        tokens = _tokens_of_cased(text, cfg)
    if cfg.phrases:
        tokens = cfg.phrases.apply(tokens)
    if cfg.ngrams:
        tokens = word_ngrams([t for t in tokens if t not in cfg.stopwords], cfg.ngram_range)
    return tokens


def word_ngrams(tokens: List[str], ngram_range: Tuple[int, int]) -> List[str]:
    """The n-grams of ``tokens`` for n in ``ngram_range`` (inclusive), each joined by one
    space, as scikit-learn's ``CountVectorizer._word_ngrams``: the tokens themselves when
    min_n is 1, then every longer n-gram."""
    lo, hi = int(ngram_range[0]), int(ngram_range[1])
    out = list(tokens) if lo == 1 else []
    for n in range(max(lo, 2), min(hi, len(tokens)) + 1):
        out.extend(" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    return out


def strip_accents(text: str, how: str) -> str:
    """scikit-learn's ``strip_accents_unicode`` (``"unicode"``: NFKD, combining characters
    removed) or ``strip_accents_ascii`` (``"ascii"``: NFKD, then only ASCII kept)."""
    if how == "ascii":
        return unicodedata.normalize("NFKD", text).encode("ASCII", "ignore").decode("ASCII")
    norm = unicodedata.normalize("NFKD", text)
    if norm == text:
        return text
    return "".join(c for c in norm if not unicodedata.combining(c))


def _checked_tokens(tokens, fn) -> List[str]:
    out = list(tokens)
    for t in out:
        if not isinstance(t, str):
            raise UsageError("the tokenizer %s returned %r, not a string; it must return a "
                             "list of str" % (callable_name(fn), t))
    return [t for t in out if t]


def _tokens_of_cased(text: str, cfg: TokenizerConfig) -> List[str]:
    """Tokens of text already lower-cased (if ``cfg.lowercase``); stop words not removed."""
    is_ascii = text.isascii()
    if cfg.strip_accents is not None and not is_ascii:
        text = strip_accents(text, cfg.strip_accents)
        is_ascii = text.isascii()
    elif cfg.deaccent and not is_ascii:
        text = deaccent(text)
        is_ascii = text.isascii()
    if cfg.token_pattern is not None:
        lo, hi = cfg.min_len, cfg.max_len
        return [t for t in (m.group(0) for m in
                            compiled_pattern(cfg.token_pattern).finditer(text))
                if lo <= len(t) <= hi]
    return token_pattern(cfg.min_len, cfg.max_len, is_ascii).findall(text)


@functools.lru_cache(maxsize=16)
def compiled_pattern(pattern: str) -> "re.Pattern":
    """``--token-pattern``, compiled; UsageError naming it when it is not a valid regex, can
    match the empty string (every position would be a token) or lies outside the safe subset
    of :mod:`pipelines.ingest.safe_regex` (it could backtrack without bound: a model's
    ``tokenizer.json`` must not be able to hang ``infer --input``)."""
    check_safe(pattern)
    try:
        rx = re.compile(pattern)
    except (re.error, TypeError) as e:
        raise UsageError("--token-pattern %r is not a valid Python regular expression (%s)"
                         % (pattern, e)) from e
    if rx.fullmatch(""):
        raise UsageError("--token-pattern %r matches the empty string; a token needs at "
                         "least one character (e.g. use + rather than *)" % (pattern,))
    return rx


# ----------------------------------------------------------------------------- segmenters

SEGMENTERS = ("none", "jieba", "janome")
_SEGMENTER_PACKAGES = {"jieba": "jieba (Chinese)", "janome": "janome (Japanese)"}


@functools.lru_cache(maxsize=4)
def segmenter_function(name: str) -> Callable[[str], List[str]]:
    """The word segmenter ``name``: text -> words. UsageError when its package is missing."""
    try:
        if name == "jieba":
            import jieba
            jieba.setLogLevel(logging.WARNING)
            return jieba.lcut
        if name == "janome":
            from janome.tokenizer import Tokenizer
            tok = Tokenizer(wakati=True)
            return lambda text: list(tok.tokenize(text))
    except ImportError as e:
        raise UsageError("--segmenter %s needs the package %s: pip install 'ldabeam[cjk]'"
                         % (name, _SEGMENTER_PACKAGES[name])) from e
    raise UsageError("--segmenter %r is not one of %s" % (name, ", ".join(SEGMENTERS)))


def segment(text: str, name: str) -> str:
    """``text`` with the words of segmenter ``name`` separated by spaces (the token rule then
    applies to each word; punctuation and spaces between words are dropped by it)."""
    return " ".join(segmenter_function(name)(text))


_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def has_cjk(text: str) -> bool:
    """True when ``text`` holds Chinese, Japanese or Korean characters."""
    return bool(text) and not text.isascii() and _CJK.search(text) is not None


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
    if not cfg.plain:       # pattern, segmenter, phrases or a callable: document by document
        per_doc = [doc_tokens(t, cfg) for t in texts]
        lens = np.fromiter((len(t) for t in per_doc), np.int64, len(per_doc))
        return (pa.array([w for toks in per_doc for w in toks], pa.large_string()),
                np.repeat(np.arange(len(per_doc), dtype=np.int64), lens))
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
    tokens, doc = tokenize_batch(texts, cfg)
    # with n-grams the stop words were dropped before the n-grams were made (doc_tokens)
    return count_tokens(tokens, doc, len(texts), frozenset() if cfg.ngrams else cfg.stopwords)


def count_tokens(tokens, doc, n: int, stopwords: frozenset = frozenset()) -> BatchCounts:
    """The bags of words of ``n`` documents from their tokens (an Arrow string array, in
    document order) and each token's document index (int64 numpy); ``stopwords`` dropped."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
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
    if stopwords:
        stop = pc.is_in(dictionary, value_set=pa.array(sorted(stopwords),
                                                        dictionary.type)).to_numpy(False)
        keep = ~stop[ids]
        ids, pair_doc, counts = ids[keep], pair_doc[keep], counts[keep]
    ptr = np.searchsorted(pair_doc, np.arange(n + 1))
    return BatchCounts(dictionary, ptr.astype(np.int64), ids, counts.astype(np.int64))


def load_stopwords(spec: Optional[str]) -> frozenset:
    """Stop words from a spec: one source, or several separated by commas, combined.

    A source is

    * ``""`` or ``"none"``: no stop words;
    * ``"gensim"``: gensim's ``gensim.parsing.preprocessing.STOPWORDS`` (337 English words);
    * anything else: a path (local or Beam FileSystems URL) of a UTF-8 file with one word per
      line; blank lines and lines starting with ``#`` are ignored; words are lower-cased and
      stripped (so they match lower-cased tokens).

    ``"gensim,extra.txt"`` is the union of gensim's list and the file's words. A spec that is
    itself an existing file is read as one path (so a file name holding a comma works).
    Raises InputError (with the path) if a file is missing or unreadable.
    """
    if spec is None:
        return frozenset()
    parts = [spec] if "," in spec and exists(spec.strip()) else spec.split(",")
    words = set()
    for part in parts:
        words |= _stopwords_of(part.strip())
    return frozenset(words)


def _stopwords_of(spec: str) -> frozenset:
    if spec == "" or spec.lower() == "none":
        return frozenset()
    if spec.lower() == "gensim":
        from gensim.parsing.preprocessing import STOPWORDS
        return frozenset(STOPWORDS)
    try:
        with open_binary(spec) as f:
            data = f.read()
    except (OSError, IOError, ValueError) as e:
        raise InputError("stop-word file %s cannot be read (%s); expected 'none', 'gensim', "
                         "a file with one word per line, or several of them separated by "
                         "commas" % (spec, e)) from e
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


# ----------------------------------------------------------------------------- records
#
# A tokenizer record is the part of a dataset manifest's ``settings`` (and of a model's
# ``tokenizer.json``, copied from it by ``ldabeam train``) that says how raw text became the
# vocabulary's tokens. It is data only: the stop words and the phrase table are stored as
# lists, a custom tokenizer only by its name (never imported from a record).

#: the keys of a tokenizer record
RECORD_KEYS = ("lowercase", "deaccent", "min_token_len", "max_token_len", "token_pattern",
               "segmenter", "stopwords", "stopword_list", "phrases", "custom_tokenizer",
               "tokens_from", "strip_accents", "ngram_range")
TOKENS_FROM_TEXT = "text"
TOKENS_FROM_BOW = "bag-of-words"
UNKNOWN = "unknown"
_BOW_FORMATS = ("uci", "ldac", "mm")


def callable_name(fn) -> str:
    """``module:qualname`` of an importable function, else ``"unknown"`` (a lambda, a local
    function, a callable object, something defined in ``__main__``)."""
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None)
    if not mod or not qual or "<" in qual or mod == "__main__":
        return UNKNOWN
    return "%s:%s" % (mod, qual)


def tokenizer_record(cfg: TokenizerConfig, stopwords_spec: Optional[str] = None) -> dict:
    """The record of ``cfg`` (``stopwords_spec``: the option the stop words came from);
    ``strip_accents`` and ``ngram_range`` only when set (a vectorize run sets neither)."""
    extra = {}
    if cfg.strip_accents is not None:
        extra["strip_accents"] = cfg.strip_accents
    if cfg.ngrams:
        extra["ngram_range"] = list(cfg.ngram_range)
    return {**extra, "lowercase": cfg.lowercase, "deaccent": cfg.deaccent,
            "min_token_len": cfg.min_len, "max_token_len": cfg.max_len,
            "token_pattern": cfg.token_pattern, "segmenter": cfg.segmenter,
            "stopwords": stopwords_spec, "stopword_list": sorted(cfg.stopwords),
            "phrases": cfg.phrases.to_record() if cfg.phrases else None,
            "custom_tokenizer": callable_name(cfg.tokenizer) if cfg.tokenizer else None,
            "tokens_from": TOKENS_FROM_TEXT}


def unknown_reason(settings) -> Optional[str]:
    """Why a record does not say how its tokens were made (None: it does)."""
    if settings is None or settings == UNKNOWN:
        return "no tokenizer settings were recorded for it"
    if not isinstance(settings, dict) or "lowercase" not in settings:
        return "its tokenizer record is not a vectorize record"
    if settings.get("tokens_from") == TOKENS_FROM_BOW or settings.get("format") in _BOW_FORMATS:
        return ("its words come from a bag-of-words corpus (--format %s), tokenized "
                "elsewhere" % settings.get("format", "uci/ldac/mm"))
    return None


def config_from_record(settings: dict, tokenizer: Optional[Callable] = None,
                       where: str = "the tokenizer record") -> TokenizerConfig:
    """The TokenizerConfig a known record describes, exactly; UsageError when it cannot be
    reproduced here (a custom tokenizer not given, a segmenter not installed, a stop-word
    file gone), InputError when it is malformed."""
    custom = settings.get("custom_tokenizer")
    if custom and tokenizer is None:
        raise UsageError("%s: the model's tokens were made by the custom tokenizer %s, which "
                         "cannot be run from a record; pass the same callable (Python: "
                         "Preprocessor.from_model_dir(MODEL, tokenizer=FUNCTION))"
                         % (where, custom))
    if tokenizer is not None and not custom:
        raise UsageError("%s records how the model's tokens were made; a tokenizer callable "
                         "would not reproduce it: leave tokenizer out" % where)
    if tokenizer is not None and custom not in (UNKNOWN, callable_name(tokenizer)):
        logger.warning("%s: the model was trained with the tokenizer %s; using %s",
                       where, custom, callable_name(tokenizer))
    try:
        if settings.get("stopword_list") is not None:
            stop = frozenset(str(w) for w in settings["stopword_list"])
        else:       # written before the list was recorded: the spec, read again
            try:
                stop = load_stopwords(settings.get("stopwords"))
            except ValueError as e:
                raise UsageError("%s names the stop words %r, which cannot be read here (%s); "
                                 "restore that file or re-run `ldabeam vectorize` and train "
                                 "again" % (where, settings.get("stopwords"), e)) from e
        phrases = settings.get("phrases")
        cfg = TokenizerConfig(
            lowercase=settings["lowercase"], deaccent=settings.get("deaccent", True),
            min_len=settings.get("min_token_len", TOKEN_MIN_LEN),
            max_len=settings.get("max_token_len", TOKEN_MAX_LEN), stopwords=stop,
            token_pattern=settings.get("token_pattern"),
            segmenter=settings.get("segmenter") or "none",
            phrases=PhraseTable.from_record(phrases, where) if phrases else None,
            tokenizer=tokenizer, strip_accents=settings.get("strip_accents"),
            ngram_range=tuple(settings.get("ngram_range") or (1, 1)))
    except (KeyError, TypeError) as e:
        raise InputError("%s is malformed (%s: %s); re-run `ldabeam train` (or `ldabeam "
                         "vectorize`) to record it again" % (where, type(e).__name__, e)) from e
    if cfg.segmenter in SEGMENTERS and cfg.segmenter != "none":
        segmenter_function(cfg.segmenter)    # UsageError: the package to install
    try:
        cfg.validate()
    except ValueError as e:     # a record no vectorize run writes
        raise InputError("%s is malformed (%s)" % (where, e)) from e
    return cfg


def model_settings(model_dir: str):
    """``(settings, where)`` of a model: ``MODEL_DIR/tokenizer.json`` (written by ``ldabeam
    train``), else the manifest of the dataset its run log names; ``(None, ...)`` when
    neither says."""
    where = paths.join(model_dir, manifest.TOKENIZER_FILE)
    settings = manifest.read_tokenizer(model_dir)
    if settings is None:
        log = paths.join(model_dir, RUN_LOG_FILE)
        if paths.exists(log):
            for rec in read_run_log(log, "start")[::-1]:
                shards = (rec.get("run") or {}).get("shards")
                if shards:
                    settings = manifest.tokenizer_settings(shards)
                    if settings is not None:
                        where = "the manifest of %s" % shards
                    break
    return settings, where


# ----------------------------------------------------------------------------- public API

@dataclass
class CountRows:
    """Bags of words of texts through a vocabulary: ``rows[i]`` is ``(ids, counts)`` (int32,
    ids ascending; empty when no token of text ``i`` is in the vocabulary)."""

    rows: list
    n_tokens: int          # tokens found in the vocabulary
    unknown_tokens: int    # tokens not in it (dropped)

    @property
    def unknown_share(self) -> float:
        total = self.n_tokens + self.unknown_tokens
        return self.unknown_tokens / total if total else 0.0

    def to_docbatch(self, doc_ids: Optional[Sequence[str]] = None):
        """The rows as a :class:`lda_core.docbatch.DocBatch` (one document per text)."""
        return DocBatch.from_rows(self.rows, doc_ids=doc_ids)


def vocabulary_index(vocab):
    """A vocabulary (tokens in id order, a :class:`~lda_core.storage.vocab_file.Vocabulary` or an
    Arrow string array) as the Arrow array :func:`vocab_pairs` looks tokens up in; build it
    once and pass it to :meth:`Preprocessor.count_rows` for many calls."""
    import pyarrow as pa
    if isinstance(vocab, pa.Array):
        return vocab.cast(pa.large_string())
    return pa.array(list(getattr(vocab, "tokens", vocab)), pa.large_string())


def vocab_pairs(bc: BatchCounts, index):
    """A batch's bags of words through a vocabulary ``index`` (:func:`vocabulary_index`):
    ``(ptr, ids, counts, dropped)`` -- document ``d``'s known words are ``ids[ptr[d]:ptr[d +
    1]]`` (int32, ascending) with ``counts`` (int32); ``dropped`` counts the unknown
    tokens."""
    import numpy as np
    import pyarrow.compute as pc
    n = bc.n_docs
    gmap = pc.index_in(bc.tokens, value_set=index).fill_null(-1).to_numpy().astype(np.int64)
    g = gmap[bc.ids]
    doc = np.repeat(np.arange(n), np.diff(bc.ptr))
    known = g >= 0
    dropped = int(bc.counts[~known].sum())
    g, c, doc = g[known], bc.counts[known], doc[known]
    order = np.argsort((doc << 31) | g)       # by document, then id (ids < 2**31)
    ptr = np.searchsorted(doc[order], np.arange(n + 1))
    return ptr, g[order].astype(np.int32), c[order].astype(np.int32), dropped


class Preprocessor:
    """Raw text -> tokens -> bags of words, exactly as a dataset's or a model's recorded
    preprocessing (token rule, stop words, segmenter, learned phrases, custom tokenizer).

    The one way raw text is preprocessed for a trained model: ``ldabeam infer --input`` and
    the Python API (``ldabeam.load(...).transform``) both build one with
    :meth:`from_model_dir`. Recorded settings that cannot be reproduced here raise
    UsageError; settings that were never recorded give the defaults with ``known`` False and
    the reason in ``note`` (callers warn)."""

    def __init__(self, config: TokenizerConfig = DEFAULT, known: bool = True, note: str = "",
                 stopwords_spec: Optional[str] = None):
        config.validate()
        self.config = config
        self.known = known
        self.note = note
        self._stopwords_spec = stopwords_spec

    def __repr__(self):
        return "Preprocessor(%r, known=%r)" % (self.config, self.known)

    @classmethod
    def from_settings(cls, settings, *, tokenizer: Optional[Callable] = None,
                      where: str = "the tokenizer settings") -> "Preprocessor":
        """From a tokenizer record (a manifest's ``settings``, ``tokenizer.json``'s
        ``settings``; None or ``"unknown"``: not recorded)."""
        reason = unknown_reason(settings)
        if reason is not None:
            cfg = TokenizerConfig(tokenizer=tokenizer) if tokenizer is not None else DEFAULT
            return cls(cfg, known=False, note="%s: %s" % (where, reason))
        return cls(config_from_record(settings, tokenizer, where), known=True,
                   note=where, stopwords_spec=settings.get("stopwords"))

    @classmethod
    def from_json(cls, source, *, tokenizer: Optional[Callable] = None) -> "Preprocessor":
        """From a ``tokenizer.json`` (its path, local or a URL, or its parsed object): either
        ``{"settings": RECORD, ...}`` as ``ldabeam train`` writes it, or a bare record."""
        import json
        where = "tokenizer settings"
        if isinstance(source, (str, bytes)) and not str(source).lstrip().startswith("{"):
            where = str(source)
            try:
                with paths.open_read(where) as f:
                    source = f.read()
            except OSError as e:
                raise InputError("%s cannot be read (%s)" % (where, e)) from e
        if isinstance(source, (str, bytes)):
            try:
                source = json.loads(source)
            except (ValueError, UnicodeDecodeError) as e:
                raise InputError("%s is not UTF-8 JSON (%s); re-run `ldabeam train` to write "
                                 "it again" % (where, e)) from e
        settings = source.get("settings") if isinstance(source, dict) and "settings" in source \
            else source
        return cls.from_settings(settings, tokenizer=tokenizer, where=where)

    @classmethod
    def from_model_dir(cls, model_dir: str, *,
                       tokenizer: Optional[Callable] = None) -> "Preprocessor":
        """The preprocessing a model directory (or one of its checkpoint directories)
        records (:func:`model_settings`)."""
        settings, where = model_settings(paths.model_dir_of(model_dir))
        return cls.from_settings(settings, tokenizer=tokenizer, where=where)

    @classmethod
    def from_dataset(cls, path: str, *,
                     tokenizer: Optional[Callable] = None) -> "Preprocessor":
        """The preprocessing a dataset's manifest records (``path``: the dataset directory
        or one of its split folders)."""
        return cls.from_settings(manifest.tokenizer_settings(path), tokenizer=tokenizer,
                                 where="the manifest of %s" % path)

    @classmethod
    def from_path(cls, path: str, *, tokenizer: Optional[Callable] = None) -> "Preprocessor":
        """A dataset (it has a manifest) or else a model directory / checkpoint."""
        if paths.exists(paths.join(path, dataset.MANIFEST_FILE)):
            return cls.from_dataset(path, tokenizer=tokenizer)
        return cls.from_model_dir(path, tokenizer=tokenizer)

    def record(self) -> dict:
        """The tokenizer record of this preprocessing (what a dataset stores)."""
        return tokenizer_record(self.config, self._stopwords_spec)

    def tokens(self, text: str) -> List[str]:
        """The tokens of one text (order kept; phrases joined; stop words removed)."""
        return tokenize(text, self.config)

    def count_batch(self, texts: Sequence[str]) -> BatchCounts:
        """The bags of words of many texts over their own token list."""
        return count_batch(list(texts), self.config)

    def count_rows(self, texts: Sequence, vocab) -> CountRows:
        """Bags of words of ``texts`` in a vocabulary's ids (tokens in id order, a
        :class:`~lda_core.storage.vocab_file.Vocabulary` or :func:`vocabulary_index`), one row
        per text; unknown tokens are dropped and counted. An element that is a list (or
        tuple) of strings is taken as tokens already made: counted as they are, with no
        phrases joined and no stop words removed."""
        import numpy as np
        import pyarrow as pa
        texts = list(texts)
        if texts and all(isinstance(t, (list, tuple)) for t in texts):
            lens = np.fromiter((len(t) for t in texts), np.int64, len(texts))
            flat = pa.array([str(w) for t in texts for w in t], pa.large_string())
            bc = count_tokens(flat, np.repeat(np.arange(len(texts), dtype=np.int64), lens),
                              len(texts))
        elif all(isinstance(t, str) for t in texts):
            bc = self.count_batch(texts)
        else:
            raise UsageError("count_rows takes texts (str) or token lists (lists of str), "
                             "not a mix; got %s" % sorted({type(t).__name__ for t in texts}))
        ptr, ids, counts, dropped = vocab_pairs(bc, vocabulary_index(vocab))
        rows = [(ids[ptr[d]:ptr[d + 1]], counts[ptr[d]:ptr[d + 1]]) for d in range(len(texts))]
        return CountRows(rows, int(np.sum(counts, dtype=np.int64)), dropped)
