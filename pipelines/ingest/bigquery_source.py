"""BigQuery tables and queries as vectorize inputs (``--input bq://PROJECT.DATASET.TABLE``,
``--query SQL``), read through Beam's ``ReadFromBigQuery`` into the same work items and dead
letters as the file readers; the columns are named as for tables
(:class:`pipelines.ingest.table_sources.Columns`)."""
from __future__ import annotations

import importlib
from typing import Optional

from lda_core.errors import UsageError
from pipelines.ingest import input_files
from pipelines.ingest.table_sources import cell_text, Columns, row_document

BIGQUERY_SCHEME = "bq://"

def is_bigquery(spec: str) -> bool:
    return spec.startswith(BIGQUERY_SCHEME)


def bigquery_table(spec: str) -> str:
    """``bq://PROJECT.DATASET.TABLE`` (or ``PROJECT:DATASET.TABLE``) -> Beam's table spec
    ``PROJECT:DATASET.TABLE``; raises ValueError naming the spec otherwise."""
    name = spec[len(BIGQUERY_SCHEME):] if is_bigquery(spec) else spec
    project, sep, rest = name.partition(":")
    if not sep:
        project, _, rest = name.partition(".")
    parts = rest.split(".")
    if not project or len(parts) != 2 or not all(parts):
        raise UsageError("BigQuery input %r: expected bq://PROJECT.DATASET.TABLE" % spec)
    return "%s:%s.%s" % (project, parts[0], parts[1])


def require_bigquery() -> None:
    """Fail with the extra to install when Beam's BigQuery client libraries are missing."""
    try:
        importlib.import_module("apache_beam.io.gcp.bigquery")
        importlib.import_module("google.cloud.bigquery")
    except ImportError as e:
        raise UsageError("BigQuery input needs Beam's Google Cloud extra (%s): pip install "
                         "'ldabeam[gcp]'" % e) from e


def _bigquery_rows_to_items(row: dict, idx: int, cols_spec: dict, source: str):
    """A BigQuery row (dict) -> a vectorize work item ``("doc", idx, seq, ...)`` or a dead
    letter (tagged). ``seq`` is a 40-bit hash of the id (BigQuery rows have no order; the
    vocabulary's first-seen positions hold 40 bits per input)."""
    import hashlib
    from apache_beam.pvalue import TaggedOutput
    cols = Columns(**cols_spec)
    doc_id = cell_text(row.get(cols.id)) if cols.id else None
    position = "row %s" % doc_id if doc_id else "row (no id)"
    doc = row_document(row, cols, source, "bq", 0, position)
    if isinstance(doc, input_files.DeadLetter):
        return [TaggedOutput("dead", doc.to_json())]
    if not doc_id:
        doc_id = "bq:" + hashlib.blake2b(doc.text.encode("utf-8"), digest_size=8).hexdigest()
    seq = int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=5).digest(),
                         "big")
    return [("doc", idx, seq, doc_id, doc.title, doc.label, doc.text)]


def _bigquery_transform():
    import apache_beam as beam
    return beam.io.ReadFromBigQuery


class ReadBigQueryDocuments:
    """Factory of the Beam transform reading a BigQuery table or query as vectorize work
    items (main output) and dead letters (``dead``), through Beam's ``ReadFromBigQuery``.
    A ``table`` read selects only the named columns; a ``query`` (standard SQL) must return
    them."""

    def __init__(self, idx: int, table: Optional[str] = None, query: Optional[str] = None,
                 id_field="id", text_field="text", title_field="title", label_field="label"):
        if bool(table) == bool(query):
            raise UsageError("give a BigQuery table (bq://PROJECT.DATASET.TABLE) or --query, "
                             "not both")
        self.idx = idx
        self.table = bigquery_table(table) if table else None
        self.query = query
        self.cols_spec = dict(id_field=id_field, text_field=text_field,
                              title_field=title_field, label_field=label_field)
        self.source = "bq://" + self.table.replace(":", ".") if table else "bigquery query"

    def transform(self):
        import apache_beam as beam
        read_cls = _bigquery_transform()
        cols = Columns(**self.cols_spec)
        if self.table:
            read = read_cls(table=self.table, selected_fields=cols.wanted)
        else:
            read = read_cls(query=self.query, use_standard_sql=True)
        idx, spec, source = self.idx, self.cols_spec, self.source

        class _Read(beam.PTransform):
            def expand(self, pbegin):
                return (pbegin | "ReadFromBigQuery" >> read
                        | "ToWorkItems" >> beam.FlatMap(_bigquery_rows_to_items, idx, spec,
                                                        source)
                        .with_outputs("dead", main="items"))
        return _Read()
