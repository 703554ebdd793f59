"""Reading vectorised shards (the Parquet files of ``ldabeam vectorize``) as DocBatch: what the
training stream, the Beam window planner and the health sample of
:mod:`pipelines.ingest.doc_sample` read documents with."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

from lda_core.docbatch import DocBatch
from pipelines.ingest import dataset

TRAIN_COLUMNS = ("doc_id", "word_ids", "counts")


def shard_row_counts(files: Sequence[str]) -> List[int]:
    """Rows of each shard, from the Parquet footer only."""
    return [int(dataset.parquet_file(f).metadata.num_rows) for f in files]


def read_shard(path: str, columns: Sequence[str] = TRAIN_COLUMNS) -> DocBatch:
    """One whole shard as a DocBatch (only ``columns`` that the file has)."""
    return read_shard_counted(path, columns)[0]


def read_shard_counted(path: str, columns: Sequence[str] = TRAIN_COLUMNS
                       ) -> Tuple[DocBatch, int]:
    """:func:`read_shard` and the Parquet bytes it decoded (the compressed column chunks of
    ``columns``, from the footer)."""
    pf = dataset.parquet_file(path)
    present = [c for c in columns if c in pf.schema_arrow.names]
    md = pf.metadata
    top = lambda i: md.schema.column(i).path.split(".", 1)[0]
    cols = [i for i in range(md.num_columns) if top(i) in present]
    nbytes = sum(md.row_group(g).column(i).total_compressed_size
                 for g in range(md.num_row_groups) for i in cols)
    return dataset.table_to_docbatch(pf.read(columns=present)), int(nbytes)


def gather(batch: DocBatch, rows: np.ndarray) -> DocBatch:
    """The rows ``rows`` of a shard read by :func:`read_shard`, in that order."""
    return batch.take(rows)
