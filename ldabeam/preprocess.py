"""Documents -> bags of words over a model's vocabulary, with the model's recorded preprocessing.

The one place the library turns user documents into count rows. A document is

* a ``str`` -- raw text, made into words by the model's recorded preprocessing
  (:class:`pipelines.ingest.tokenize.Preprocessor` of the model directory: token rule, stop
  words, segmenter, learned phrases, a custom tokenizer passed to ``ldabeam.load``), the one
  implementation ``ldabeam infer --input`` uses too, so the words are the same; a model whose
  preprocessing cannot be reproduced is refused (UsageError), one whose settings were never
  recorded gets the defaults with a warning;
* a list or tuple of ``str`` -- tokens already made by the caller: only the vocabulary is
  applied (no lower-casing, no stop words);
* a ``dict`` -- a record: its ``text`` field (the model's ``text_field`` setting) is the
  document and its ``id`` field (``id_field``) its id, as ``--format jsonl`` reads it; or a
  count row ``{"word_ids": [...], "counts": [...]}`` (``doc_id`` optional), the rows of a
  shard and of :class:`ldabeam.beam.Vectorize`, taken as they are.

Words outside the vocabulary are dropped and counted. No document is dropped: one with no
known word is an empty row (``ldabeam infer --input`` writes no row for it).
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from lda_core.docbatch import DocBatch
from lda_core.errors import InputError, UsageError
from pipelines.ingest.tokenize import model_settings, Preprocessor

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CountRow:
    """A document given as word ids of the model's vocabulary and their counts."""

    word_ids: tuple
    counts: tuple


COUNT_FIELDS = ("word_ids", "counts")


@dataclass
class Preprocessing:
    """A model's preprocessing: its :class:`~pipelines.ingest.tokenize.Preprocessor` and the
    recorded settings (None: never recorded) the reader fields come from."""

    settings: Optional[Dict[str, Any]]
    preprocessor: Any = None     # pipelines.ingest.tokenize.Preprocessor; None: the defaults
    refusal: Optional[Exception] = None   # why raw text cannot be prepared (raised on use)

    @classmethod
    def of_model_dir(cls, model_dir: str, tokenizer=None) -> "Preprocessing":
        """The preprocessing ``model_dir`` records. One that cannot be reproduced here (a
        custom tokenizer not given, a segmenter not installed) is kept as a refusal, raised
        when raw text is prepared: the model's topics stay usable."""
        settings, _ = model_settings(model_dir)
        settings = settings if isinstance(settings, dict) else None
        try:
            return cls(settings, Preprocessor.from_model_dir(model_dir, tokenizer=tokenizer))
        except UsageError as e:
            return cls(settings, None, e)

    @property
    def pre(self):
        if self.refusal is not None:
            raise self.refusal
        if self.preprocessor is None:
            self.preprocessor = Preprocessor()
        return self.preprocessor

    @property
    def known(self) -> bool:
        return self.pre.known

    def _get(self, key, default):
        s = self.settings or {}
        return default if s.get(key) is None else s[key]

    @property
    def id_field(self) -> str:
        return self._get("id_field", "id")

    @property
    def text_field(self) -> str:
        return self._get("text_field", "text")

    def tokenizer_config(self):
        """The :class:`~pipelines.ingest.tokenize.TokenizerConfig` raw text is tokenized with."""
        return self.pre.config


def content_id(doc) -> str:
    """The id of a document given without one: a hash of its content, so that the seeded
    E-step start of a document (keyed by its id) does not depend on its position or on the
    other documents transformed with it."""
    h = hashlib.blake2b(digest_size=12)
    if isinstance(doc, str):
        h.update(b"s\0" + doc.encode("utf-8", "surrogatepass"))
    elif isinstance(doc, CountRow):
        h.update(b"c\0" + np.asarray(doc.word_ids, np.int64).tobytes() + b"\0"
                 + np.asarray(doc.counts, np.int64).tobytes())
    else:
        h.update(b"t\0")
        for t in doc:
            h.update(str(t).encode("utf-8", "surrogatepass") + b"\0")
    return "doc-" + h.hexdigest()


def split_records(docs: Sequence, prep: Preprocessing,
                  ids: Optional[Sequence[str]] = None) -> Tuple[List[str], List[Any]]:
    """``(ids, documents)``: records unpacked to their text and id; missing ids made by
    :func:`content_id`. Raises InputError naming the position of an unusable document."""
    if isinstance(docs, (str, bytes, dict)):
        raise InputError("give a list of documents (got a single %s; wrap it in a list)"
                         % type(docs).__name__)
    docs = list(docs)
    if ids is not None:
        ids = [str(i) for i in ids]
        if len(ids) != len(docs):
            raise InputError("ids has %d entries for %d documents" % (len(ids), len(docs)))
    out_ids, out_docs = [], []
    for i, d in enumerate(docs):
        rid = None
        if isinstance(d, dict) and all(k in d for k in COUNT_FIELDS):
            rid = d.get("doc_id", d.get(prep.id_field))
            d = CountRow(tuple(int(x) for x in d["word_ids"]), tuple(int(x) for x in d["counts"]))
            if len(d.word_ids) != len(d.counts):
                raise InputError("document %d: a count row needs as many counts as word_ids "
                                 "(%d and %d)" % (i, len(d.counts), len(d.word_ids)))
        elif isinstance(d, dict):
            if prep.text_field not in d:
                raise InputError("document %d is a record without the text field %r (the "
                                 "model's text_field); give {%r: TEXT, %r: ID}"
                                 % (i, prep.text_field, prep.text_field, prep.id_field))
            rid = d.get(prep.id_field)
            d = d[prep.text_field]
        if d is None:
            d = ""
        if isinstance(d, CountRow):
            pass
        elif not isinstance(d, (str, list, tuple)) or (
                not isinstance(d, str) and not all(isinstance(t, str) for t in d)):
            raise InputError("document %d is a %s; give str (raw text), a list of str "
                             "(tokens) or a dict record" % (i, type(d).__name__))
        if ids is not None:
            rid = ids[i]
        out_ids.append(content_id(d) if rid is None or rid == "" else str(rid))
        out_docs.append(d)
    return out_ids, out_docs


def count_rows(docs: Sequence, prep: Preprocessing, index, n_words: int
               ) -> Tuple[List[Tuple[np.ndarray, np.ndarray]], int]:
    """``(rows, oov)``: per document the sorted unique word ids and their counts (int32) over
    the vocabulary ``index`` (an Arrow string array of the tokens in id order; None when only
    count rows are given), and the number of tokens dropped as unknown. Count rows are
    checked against ``n_words``."""
    empty = (np.zeros(0, np.int32), np.zeros(0, np.int32))
    rows: List[Tuple[np.ndarray, np.ndarray]] = [empty] * len(docs)
    text_pos = [i for i, d in enumerate(docs) if isinstance(d, str)]
    oov = 0
    if text_pos:
        got = prep.pre.count_rows([docs[i] for i in text_pos], index)
        oov += got.unknown_tokens
        for i, row in zip(text_pos, got.rows):
            rows[i] = row
    lookup = None
    for i, d in enumerate(docs):
        if isinstance(d, CountRow):
            ids = np.asarray(d.word_ids, np.int64)
            cnt = np.asarray(d.counts, np.int64)
            if len(ids) and (ids.min() < 0 or ids.max() >= n_words):
                raise InputError("document %d: word id %d is outside the model's vocabulary "
                                 "of %d words" % (i, int(ids.max() if ids.max() >= n_words
                                                         else ids.min()), n_words))
            if len(cnt) and cnt.min() < 0:
                raise InputError("document %d: negative count %d" % (i, int(cnt.min())))
            merged = np.bincount(ids, weights=cnt, minlength=0) if len(ids) else np.zeros(0)
            u = np.flatnonzero(merged > 0)
            rows[i] = (u.astype(np.int32), merged[u].astype(np.int32))
            continue
        if isinstance(d, str) or not d:
            continue
        if lookup is None:
            lookup = {t: j for j, t in enumerate(index.to_pylist())}
        ids = np.fromiter((lookup.get(t, -1) for t in d), np.int64, len(d))
        oov += int((ids < 0).sum())
        u, c = np.unique(ids[ids >= 0], return_counts=True)
        rows[i] = (u.astype(np.int32), c.astype(np.int32))
    return rows, oov


def to_batch(doc_ids: Sequence[str], rows) -> DocBatch:
    return DocBatch.from_rows(rows, doc_ids=list(doc_ids))


def token_counts(docs: Sequence, prep: Preprocessing):
    """Per document a ``{token: count}`` of every token (known or not) -- what a vocabulary
    grown from new documents is counted from."""
    from collections import Counter
    out = []
    for d in docs:
        if isinstance(d, CountRow):
            out.append(Counter())
        elif isinstance(d, str):
            out.append(Counter(prep.pre.tokens(d)))
        else:
            out.append(Counter(d))
    return out
