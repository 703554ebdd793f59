"""Parsing of the streaming job's documents: JSON messages -> bags of words of the model's
fixed vocabulary, or dead letters naming the problem; a window's documents -> a DocBatch.

Pure functions, no Beam: ``pipelines.streaming.stream`` calls them from its DoFns and the local
directory driver, ``pipelines.streaming.stream_step`` when it applies a window.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Tuple

import numpy as np

from lda_core.docbatch import DocBatch
from pipelines.ingest.tokenize import tokenize, TokenizerConfig

MAX_JSON_BYTES = 10 * 1024 * 1024       # a larger message is dead-lettered, not parsed
MAX_DOC_WORDS = 1_000_000               # unique words per document (checked before arrays)
MAX_SNIPPET = 200

# A parsed document travelling between transforms: (doc_id, word ids int32 bytes, counts
# int32 bytes) -- raw bytes cost Beam's coders less than lists or arrays -- and, for a document read
# from a file, (file, byte offset of its line's end): the window's applied input position.
Doc = Tuple[Any, ...]


@dataclass(frozen=True)
class ParseConfig:
    """How a JSON document becomes a bag of words of the model's vocabulary."""
    vocab_path: str                    # vocab.tsv of the model (fixed vocabulary)
    n_words: int
    id_field: str = "id"
    text_field: str = "text"
    lowercase: bool = True
    deaccent: bool = True
    min_token_len: int = 2
    max_token_len: int = 15
    # the model's recorded preprocessing (Preprocessor.from_model_dir(...).config); None: the
    # fields above
    tokenizer: Optional[Any] = None


def dead_letter(source: str, error: str, snippet: Any = None) -> Dict[str, Any]:
    if snippet is not None and not isinstance(snippet, str):
        snippet = repr(snippet)
    return {"source": source, "error": error,
            "snippet": None if snippet is None else snippet[:MAX_SNIPPET]}


def parse_document(raw, index: Optional[Dict[str, int]], cfg: ParseConfig,
                   tokenizer=None) -> Tuple[Optional[Doc], Optional[Dict[str, Any]], int]:
    """One JSON document -> ``(doc or None, dead letter or None, OOV tokens dropped)``.

    Accepted: ``{"doc_id": ..., "text": "..."}`` (tokenized with the vectorize pipeline's
    tokenizer, words outside the model's vocabulary dropped and counted) or
    ``{"doc_id": ..., "word_ids": [...], "counts": [...]}`` (ids of the model's vocabulary;
    repeated ids are summed). ``id`` is accepted for ``doc_id``. Everything else -- not JSON,
    not an object, no id, ids outside [0, V), counts that are not positive integers, lengths
    that differ, no in-vocabulary word -- is a dead letter naming the problem."""
    obj, raw, bad = _json_object(raw)
    if bad is not None:
        return None, bad, 0
    did = next((obj[k] for k in (cfg.id_field, "id", "doc_id") if obj.get(k) is not None), None)
    if did is None or (isinstance(did, str) and not did.strip()) or isinstance(did, (dict, list)):
        return None, dead_letter("stream", "no document id (field %r)" % cfg.id_field, raw), 0
    try:
        did = str(did)
    except ValueError as e:        # an integer id of more digits than str() converts
        return None, dead_letter("stream", "document id cannot be read: %s" % e, raw), 0
    if "word_ids" in obj or "counts" in obj:
        return _parse_word_ids(obj, did, cfg.n_words, raw)
    text = obj.get(cfg.text_field)
    if not isinstance(text, str):
        return None, dead_letter("doc %s" % did, "neither %r (a string) nor word_ids/counts"
                                 % cfg.text_field, raw), 0
    return _parse_text(text, did, index, cfg, tokenizer)


def _json_object(raw) -> Tuple[Optional[Dict[str, Any]], Any, Optional[Dict[str, Any]]]:
    """A message (bytes or str) -> ``(the JSON object, the message as text, None)``, or
    ``(None, raw, dead letter)`` for one too large, not UTF-8, not JSON or not an object."""
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_JSON_BYTES:
            return None, raw, dead_letter("stream", "message of %d bytes exceeds %d"
                                          % (len(raw), MAX_JSON_BYTES))
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return None, raw, dead_letter("stream", "not UTF-8: %s" % e, raw[:MAX_SNIPPET])
    if len(raw) > MAX_JSON_BYTES:
        return None, raw, dead_letter("stream", "message of %d characters exceeds %d"
                                      % (len(raw), MAX_JSON_BYTES))
    try:
        obj = json.loads(raw)
    except ValueError as e:
        return None, raw, dead_letter("stream", "not JSON: %s" % e, raw)
    except RecursionError:
        return None, raw, dead_letter("stream", "not JSON: nested too deeply", raw)
    if not isinstance(obj, dict):
        return None, raw, dead_letter("stream", "not a JSON object", raw)
    return obj, raw, None


def _parse_word_ids(obj: Dict[str, Any], did: str, V: int, raw):
    """``word_ids``/``counts`` of the model's vocabulary -> the document (repeated ids summed),
    or a dead letter naming what is wrong."""
    src = "doc %s" % did
    w, c = obj.get("word_ids"), obj.get("counts")
    if not isinstance(w, list) or not isinstance(c, list) or len(w) != len(c):
        return None, dead_letter(src, "word_ids and counts must be lists of equal length",
                                 raw), 0
    if len(w) > MAX_DOC_WORDS:
        return None, dead_letter(src, "%d words exceed %d" % (len(w), MAX_DOC_WORDS)), 0
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in w + c):
        return None, dead_letter(src, "word_ids and counts must be integers", raw), 0
    try:
        w = np.asarray(w, np.int64)
        c = np.asarray(c, np.int64)
    except OverflowError:
        return None, dead_letter(src, "word id or count outside int64", raw), 0
    if len(w) and (w.min() < 0 or w.max() >= V):
        return None, dead_letter(src, "word id outside the vocabulary [0, %d)" % V, raw), 0
    if len(c) and (c.min() <= 0 or c.max() > 2 ** 31 - 1):
        return None, dead_letter(src, "counts must be positive int32", raw), 0
    if not len(w):
        return None, dead_letter(src, "no words", raw), 0
    uw, inv = np.unique(w, return_inverse=True)
    uc = np.bincount(inv, weights=c).astype(np.int64)
    if uc.max() > 2 ** 31 - 1:
        return None, dead_letter(src, "counts must be positive int32", raw), 0
    return (did, uw.astype(np.int32).tobytes(), uc.astype(np.int32).tobytes()), None, 0


def _parse_text(text: str, did: str, index: Dict[str, int], cfg: ParseConfig, tokenizer):
    """Text tokenized like the vectorize pipeline -> the document of its in-vocabulary words
    (the others dropped and counted), or a dead letter when no word is in the vocabulary."""
    if tokenizer is None:
        tokenizer = cfg.tokenizer or TokenizerConfig(lowercase=cfg.lowercase, deaccent=cfg.deaccent,
                                    min_len=cfg.min_token_len, max_len=cfg.max_token_len)
    ids: Dict[int, int] = {}
    oov = 0
    for tok in tokenize(text, tokenizer):
        i = index.get(tok)
        if i is None:
            oov += 1
        else:
            ids[i] = ids.get(i, 0) + 1
    if not ids:
        return None, dead_letter("doc %s" % did, "no word of the model's vocabulary "
                                 "(%d tokens dropped)" % oov, text), oov
    uw = np.fromiter(sorted(ids), np.int32, count=len(ids))
    uc = np.fromiter((ids[int(i)] for i in uw), np.int32, count=len(ids))
    return (did, uw.tobytes(), uc.tobytes()), None, oov


def docs_to_batch(docs: Iterable[Doc]) -> DocBatch:
    """Documents of one window as a DocBatch, in doc_id order (a duplicated id keeps its
    first occurrence: a redelivered message is not counted twice)."""
    seen = {}
    for d in docs:
        seen.setdefault(d[0], d)
    ordered = [seen[k] for k in sorted(seen)]
    rows = [(np.frombuffer(d[1], np.int32), np.frombuffer(d[2], np.int32)) for d in ordered]
    return DocBatch.from_rows(rows, doc_ids=[d[0] for d in ordered])


def files_read(docs: Iterable[Doc]) -> Dict[str, int]:
    """file -> byte offset after the last of ``docs`` read from it (documents of a file
    source carry their position; others carry none)."""
    out: Dict[str, int] = {}
    for d in docs:
        if len(d) > 3:
            out[d[3]] = max(out.get(d[3], 0), int(d[4]))
    return out
