"""The documents topic health is measured on: a seeded sample of training documents.

Topic usage (dead and effective topics), NPMI and topic diversity have one definition
(:func:`lda_core.evaluation.topic_quality.topic_health`) and one document set: :func:`sample_documents` of
the training shards, with the seed of the evaluation (0 unless given). The trainer logs them at
its evaluation steps, ``ldabeam evaluate`` prints them and ``ldabeam report`` plots them, so a
model's numbers agree wherever they are shown.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from lda_core.docbatch import DocBatch
from lda_core.errors import InputError, UsageError
from lda_core.evaluation.topic_quality import USAGE_DOCS
from pipelines.ingest import dataset
from pipelines.ingest.shards import gather, read_shard

COLUMNS = ("doc_id", "title", "label", "word_ids", "counts")


def sample_documents(files: Sequence[str], expected_vocab_hash: Optional[str] = None,
                     max_docs: int = USAGE_DOCS, seed: int = 0,
                     columns: Sequence[str] = COLUMNS) -> DocBatch:
    """The non-empty ones of ``max_docs`` documents of ``files`` drawn without replacement
    (``RandomState(seed).permutation`` of the row numbers, as
    :func:`lda_core.evaluation.topic_quality.topic_usage` draws), in file order; every document when there
    are no more. The row counts come from the Parquet footers and one shard is read at a time
    (memory: one shard plus the sample)."""
    if max_docs < 1:
        raise UsageError("max_docs=%r is outside the allowed range [1, inf)" % (max_docs,))
    files = list(files)
    dataset.check_vocab_hash(files, expected_vocab_hash)
    sizes = [dataset.count_documents([f]) for f in files]
    total = int(sum(sizes))
    if total == 0:
        raise InputError("no documents in %s" % ", ".join(files))
    rows = (np.arange(total) if total <= max_docs else
            np.sort(np.random.RandomState(seed).permutation(total)[:max_docs]))
    parts, start = [], 0
    for f, n in zip(files, sizes):
        lo, hi = np.searchsorted(rows, [start, start + n])
        if hi > lo:
            b = read_shard(f, columns)
            parts.append(b if hi - lo == n else gather(b, rows[lo:hi] - start))
        start += n
    return DocBatch.concat(parts).non_empty()
