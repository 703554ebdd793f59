"""The vectorize pipeline's steps for bag-of-words inputs (``uci``, ``ldac``, ``mm``): read a
corpus into rows with its own vocabulary, then renumber the ids when pruning was asked for.
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np
from apache_beam.pvalue import TaggedOutput

from pipelines.ingest import bow_sources, input_files
from pipelines.ingest.vectorize_output import arrays_to_row
from pipelines.ingest.vectorize_steps import (CountingDoFn, DEAD, deadletter_dict, VOCAB_STATS,
                                              windowed)
from pipelines.ingest.vocabulary import bow_prune, PruneSettings

logger = logging.getLogger(__name__)


class ReadBowFn(CountingDoFn):
    """A bag-of-words file -> rows, plus dense df/cf partials per bundle."""

    def __init__(self, vocab_size: int):
        self._V = vocab_size

    def start_bundle(self):
        super().start_bundle()
        self._df = np.zeros(self._V, np.int64)
        self._cf = np.zeros(self._V, np.int64)
        self._n = 0

    def process(self, element):
        _, path, fmt = element
        try:
            for item in bow_sources.iter_bow_documents(path, fmt, self._V):
                if isinstance(item, input_files.DeadLetter):
                    self._count("dead_letters")
                    yield TaggedOutput(DEAD, deadletter_dict(item))
                    continue
                doc_id, w, c = item
                self._count("documents_read")
                self._n += 1
                w = np.asarray(w, np.int64)
                c = np.asarray(c, np.int64)
                self._df[w] += 1
                self._cf[w] += c
                if len(w) == 0:
                    self._count("empty_documents")
                    continue
                yield arrays_to_row(str(doc_id), None, None, w, c)
        except Exception as e:
            logger.warning("bag-of-words input %s failed: %s", path, e)
            self._count("dead_letters")
            yield TaggedOutput(DEAD, {"source": path, "position": "",
                                      "error": "%s: %s" % (type(e).__name__, e),
                                      "snippet": ""})

    def finish_bundle(self):
        for out in super().finish_bundle():
            yield out
        if self._n:
            yield TaggedOutput(VOCAB_STATS, windowed((self._n, self._df, self._cf)))


def _sum_bow_stats(parts):
    n, df, cf = 0, None, None
    for pn, pdf, pcf in parts:
        n += pn
        df = pdf.copy() if df is None else df + pdf
        cf = pcf.copy() if cf is None else cf + pcf
    return n, df, cf


def bow_vocab_record(parts, tokens, settings: Optional[PruneSettings]):
    n, df, cf = _sum_bow_stats(parts)
    V = len(tokens)
    if df is None:
        df = np.zeros(V, np.int64)
        cf = np.zeros(V, np.int64)
    if settings is None:
        return {"tokens": list(tokens), "df": df.tolist(), "cf": cf.tolist(), "num_docs": n,
                "remap": None}
    vocab, remap = bow_prune(tokens, df, cf, n, settings)
    return {"tokens": vocab.tokens, "df": vocab.df.tolist(), "cf": vocab.cf.tolist(),
            "num_docs": n, "remap": remap.tolist()}


class RemapBowFn(CountingDoFn):
    def __init__(self):
        self._remap = None
        self._record_id = None

    def process(self, row, vocab_record):
        if vocab_record.get("remap") is None:
            yield row
            return
        if self._remap is None or self._record_id != id(vocab_record):
            self._remap = np.asarray(vocab_record["remap"], np.int64)
            self._record_id = id(vocab_record)
        doc_id, title, label, wb, cb, n = row
        w = np.frombuffer(wb, np.int32)
        c = np.frombuffer(cb, np.int32)
        nw = self._remap[w]
        keep = nw >= 0
        self._count("oov_tokens_dropped", int(c[~keep].sum()))
        if not keep.any():
            self._count("empty_after_pruning")
            return
        yield arrays_to_row(doc_id, title, label, nw[keep], c[keep])  # remap keeps order
