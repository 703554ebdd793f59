"""Table inputs for the vectorize and infer pipelines: CSV, TSV, Parquet, Arrow, BigQuery.

One row is one document. Columns are chosen by name with the reader options of every text
format (``id_field``, ``text_field``, ``title_field``, ``label_field``); ``text_field`` may
name several columns separated by commas (``"title,body"``), whose values are joined with a
newline. Pure Python readers (streams of :class:`~pipelines.ingest.input_files.RawDocument` /
:class:`~pipelines.ingest.input_files.DeadLetter`, as the other readers in
:mod:`pipelines.ingest.text_sources`), plus :class:`ReadBigQueryDocuments`, the Beam transform of
the BigQuery input.

* ``csv`` / ``tsv`` -- a header row, then one record per row, read with Python's ``csv``
  module (quoted fields, embedded newlines and doubled quotes as RFC 4180; ``tsv`` is the same
  with a tab delimiter); a UTF-8 byte-order mark is dropped. Under ``encoding_errors="strict"``
  the file is decoded line by line, so only the record holding an undecodable line is a dead
  letter; otherwise it is decoded as one stream in blocks (replacements counted; a count goes
  with the row being read when its block was decoded). Compressed
  files (``.csv.gz`` ...) as every text input.
* ``parquet`` -- read one record batch at a time (``pyarrow.parquet.ParquetFile
  .iter_batches``, only the named columns): memory is bounded by the batch, never the table.
* ``arrow`` -- Arrow IPC, stream or file format (``.arrow``, ``.feather``), one record batch
  at a time; this is the layout of a Hugging Face dataset written with ``save_to_disk``
  (``data-00000-of-00001.arrow`` stream files beside ``dataset_info.json`` and ``state.json``,
  which :func:`drop_table_metadata` leaves out of the inputs).
* Partitioned directories (``.../lang=en/part-0.parquet``): a ``key=value`` folder name gives
  a column ``key`` to the rows of the files below it, when the file has no such column.

Only the text columns are required: a table without one of them (or without an id / title /
label column named with a non-default name) raises :class:`~pipelines.ingest.input_files.InputError`
at once, naming the columns it has. A row whose text columns are all missing (null, or a CSV
row with too few fields) is a dead letter naming the file and the row; a row whose text is
empty is an empty document (counted by the vectorize as ``empty_documents``); a missing id
becomes ``<file basename>:<row>``.
"""
from __future__ import annotations

import collections
import csv
import io
import logging
import os
from typing import Dict, Iterator, List, Optional, Sequence

from pipelines.ingest import input_files as inputs

logger = logging.getLogger(__name__)

DEFAULT_FIELDS = {"id_field": "id", "text_field": "text", "title_field": "title",
                  "label_field": "label"}
BATCH_ROWS = 1024                       # rows per Parquet / Arrow record batch read
TEXT_JOIN = "\n"                        # between the values of several text columns


# ----------------------------------------------------------------------------- columns

def text_columns(text_field: str) -> List[str]:
    """``"title,body"`` -> ``["title", "body"]`` (the text columns, joined in this order)."""
    cols = [c.strip() for c in (text_field or "").split(",") if c.strip()]
    if not cols:
        raise inputs.InputError("--text-field names no column")
    return cols


class Columns:
    """Which columns make a document, and which of them a table must have."""

    def __init__(self, id_field="id", text_field="text", title_field="title",
                 label_field="label"):
        self.text = text_columns(text_field)
        self.id = id_field or None
        self.title = title_field or None
        self.label = label_field or None
        named = {"id_field": id_field, "title_field": title_field, "label_field": label_field}
        # optional columns are required only when the user named them (not the defaults)
        self.required = list(self.text) + [v for k, v in named.items()
                                           if v and v != DEFAULT_FIELDS[k]]

    @property
    def wanted(self) -> List[str]:
        out = []
        for c in self.text + [self.id, self.title, self.label]:
            if c and c not in out:
                out.append(c)
        return out

    def check(self, present: Sequence[str], path: str) -> None:
        missing = [c for c in self.required if c not in present]
        if missing:
            raise inputs.InputError(
                "input %s has no column %s; its columns are: %s (choose them with --text-field"
                " / --id-field / --title-field / --label-field)"
                % (path, ", ".join(repr(c) for c in missing),
                   ", ".join(present) if present else "(none)"))


def partition_values(path: str) -> Dict[str, str]:
    """``key=value`` folder names of a partitioned table path (Hive / Spark layout)."""
    parts = path.split("://", 1)[-1].replace("\\", "/").split("/")[:-1]
    out = {}
    for part in parts:
        k, sep, v = part.partition("=")
        if sep and k:
            out[k] = v
    return out


def cell_text(v) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def row_document(values: Dict[str, object], cols: Columns, path: str, base: str, row: int,
              position: str, replaced: int = 0):
    """One row (column -> value; absent = missing) to a RawDocument or a DeadLetter."""
    parts = []
    for c in cols.text:
        v = values.get(c)
        if v is None:
            continue
        if not isinstance(v, str):
            return inputs.DeadLetter(path, position, "text column %r holds a %s, expected text"
                                     % (c, type(v).__name__), inputs.snippet_of(repr(v)))
        parts.append(v)
    if not parts:
        return inputs.DeadLetter(path, position, "text column%s %s missing in this row"
                                 % ("s" if len(cols.text) > 1 else "",
                                    ", ".join(repr(c) for c in cols.text)
                                    + (" are" if len(cols.text) > 1 else " is")), "")
    text = TEXT_JOIN.join(parts)
    doc_id = cell_text(values.get(cols.id)) if cols.id else None
    if doc_id is None or doc_id == "":
        doc_id = "%s:%d" % (base, row)
    return inputs.RawDocument(doc_id, text,
                              cell_text(values.get(cols.title)) if cols.title else None,
                              cell_text(values.get(cols.label)) if cols.label else None, path,
                              position, replaced)


# ----------------------------------------------------------------------------- CSV / TSV

def _ascii_compatible(encoding: str) -> bool:
    try:
        return "\n\r,\t\"".encode(encoding) == b"\n\r,\t\""
    except (LookupError, UnicodeError):
        return False


class _LineFeed:
    """Decoded physical lines for ``csv.reader``: remembers the line number and whether a
    line of the current record failed to decode (strict), so only that record is lost."""

    def __init__(self, stream, encoding: str, errors: str, max_line_bytes: int, path: str):
        self._f = stream
        self._enc = encoding
        self._handler = inputs.error_handler(errors)
        self._max = max_line_bytes
        self._path = path
        self.lineno = 0
        self.problem: Optional[str] = None
        self._bom = encoding.replace("_", "-").lower() in ("utf-8", "utf8")

    def __iter__(self):
        return self

    def __next__(self) -> str:
        try:
            raw = self._f.readline(self._max + 1)
        except inputs.DECOMPRESS_ERRORS as e:
            raise _Truncated(str(e)) from e
        if not raw:
            raise StopIteration
        self.lineno += 1
        if len(raw) > self._max and not raw.endswith(b"\n"):
            self.problem = "line %d longer than max_doc_bytes=%d" % (self.lineno, self._max)
            for _ in range(1 << 62):       # skip the rest of the line
                rest = self._f.readline(inputs.READ_BLOCK)
                if not rest or rest.endswith(b"\n"):
                    break
            return "\n"
        try:
            line = raw.decode(self._enc, self._handler)
        except UnicodeDecodeError as e:
            self.problem = "cannot decode line %d as %s: %s" % (self.lineno, self._enc, e)
            line = raw.decode(self._enc, "replace")
        if self._bom and self.lineno == 1 and line.startswith("\ufeff"):
            line = line[1:]
        return line


class _Truncated(Exception):
    pass


class _RecordLines:
    """The physical lines ``csv.reader`` reads, each with its line number and the decoding
    problem found on it, with the lines of the record being read kept: a record the parser
    proves malformed after running over several lines (a quote opened and never properly
    closed) is cut at its first line, and the lines after it are read again as records."""

    def __init__(self, source):
        self._src = source                      # iterator of (line, problem or None)
        self._back = collections.deque()
        self._next = 1
        self.record: List[tuple] = []          # (line number, line, problem) of this record

    def __iter__(self):
        return self

    def __next__(self) -> str:
        if self._back:
            item = self._back.popleft()
        else:
            line, problem = next(self._src)
            item = (self._next, line, problem)
            self._next += 1
        self.record.append(item)
        return item[1]

    def start_record(self) -> None:
        self.record = []

    @property
    def next_line(self) -> int:
        return self._back[0][0] if self._back else self._next

    def replay_after_first(self) -> None:
        """Read the lines of the current record after its first one again."""
        self._back.extendleft(reversed(self.record[1:]))
        self.record = []


def _feed_lines(feed: "_LineFeed"):
    """(line, problem) of each physical line of a :class:`_LineFeed`."""
    while True:
        try:
            line = next(feed)
        except StopIteration:
            return
        problem, feed.problem = feed.problem, None
        yield line, problem


def _read_delimited(path: str, delimiter: str, cols: Columns, encoding: str,
                    encoding_errors: str, max_doc_bytes: int
                    ) -> Iterator:
    """The rows of a CSV / TSV file (module docstring). The parser is strict about quotes
    (``csv`` ``strict=True``): a record whose quoted field does not close properly before a
    later line (an unterminated quote would otherwise swallow every record after it) is a
    dead letter at its first line, and reading resumes at the next line; a record on one
    line that only the strict parser refuses (``"a" b``) is read as the lenient parser
    reads it."""
    base = os.path.basename(path.rstrip("/"))
    consts = partition_values(path)
    stream = inputs.open_decompressed(path)
    kind = "CSV" if delimiter == "," else "TSV"
    try:
        if encoding_errors == "strict" and _ascii_compatible(encoding):
            source = _feed_lines(_LineFeed(stream, encoding, encoding_errors, max_doc_bytes,
                                           path))
        else:   # decoded as one stream (faster; UTF-16 / UTF-32 lines cannot be cut in bytes)
            utf8 = encoding.replace("_", "-").lower() in ("utf-8", "utf8")
            text = io.TextIOWrapper(stream, encoding="utf-8-sig" if utf8 else encoding,
                                    errors=inputs.error_handler(encoding_errors), newline="")
            source = ((line, None) for line in text)
        lines = _RecordLines(source)
        limit = max(csv.field_size_limit(), max_doc_bytes)
        csv.field_size_limit(limit)
        reader = csv.reader(lines, delimiter=delimiter, strict=True)
        try:
            header = next(reader, None)
        except (csv.Error, UnicodeDecodeError, _Truncated) as e:
            raise inputs.InputError("input %s: cannot read the header row (%s); expected a %s "
                                    "file with a header" % (path, e, kind)) from e
        if header is None:
            raise inputs.InputError("input %s is empty; expected a header row naming the columns"
                                    % path)
        header = [h.strip() for h in header]
        cols.check(header + [k for k in consts if k not in header], path)
        index = {name: i for i, name in enumerate(header)}
        problems = [p for _, _, p in lines.record if p]
        if problems:
            raise inputs.InputError("input %s: the header row %s" % (path, problems[0]))
        row = 0
        for _ in range(1 << 62):
            lines.start_record()
            first = lines.next_line
            before = inputs.replaced_so_far()
            try:
                rec = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                row += 1
                span = lines.record
                if len(span) > 1:
                    yield inputs.DeadLetter(
                        path, "row %d (line %d)" % (row, span[0][0]),
                        "malformed %s record: %s on line %d, in a quoted field opened on line "
                        "%d; the record ends at its first line and reading resumes at line %d"
                        % (kind, e, span[-1][0], span[0][0], span[0][0] + 1),
                        inputs.snippet_of(span[0][1]))
                    lines.replay_after_first()
                    reader = csv.reader(lines, delimiter=delimiter, strict=True)
                    continue
                try:
                    rec = next(csv.reader([span[0][1] if span else ""], delimiter=delimiter))
                except (csv.Error, StopIteration) as e2:
                    yield inputs.DeadLetter(path, "row %d (line %d)" % (row, first),
                                            "malformed %s record: %s" % (kind, e2))
                    continue
                row -= 1
            except UnicodeDecodeError as e:         # strict, UTF-16 stream: rest lost
                row += 1
                yield inputs.DeadLetter(path, "row %d (line %d)" % (row, first),
                                        "cannot decode as %s: %s; rows after it are lost"
                                        % (encoding, e))
                return
            except _Truncated as e:
                yield inputs.DeadLetter(path, "line %d" % first, "compressed stream is corrupt "
                                        "or truncated: %s; rows after this point are lost" % e)
                return
            if not rec or (len(rec) == 1 and not rec[0].strip()):
                continue                       # blank line
            row += 1
            position = "row %d (line %d)" % (row, first)
            problems = [p for _, _, p in lines.record if p]
            if problems:
                yield inputs.DeadLetter(path, position, problems[0],
                                        inputs.snippet_of(",".join(rec)))
                continue
            values = dict(consts)
            values.update({name: rec[i] for name, i in index.items() if i < len(rec)})
            if len(rec) < len(header):
                gone = [c for c in cols.wanted if c in index and index[c] >= len(rec)]
                if any(c in cols.text for c in gone):
                    yield inputs.DeadLetter(path, position, "row has %d fields, the header %d: "
                                            "column %s missing" % (len(rec), len(header),
                                                                   ", ".join(map(repr, gone))),
                                            inputs.snippet_of(delimiter.join(rec)))
                    continue
            yield row_document(values, cols, path, base, row, position,
                            inputs.replaced_so_far() - before)
    finally:
        stream.close()


# ----------------------------------------------------------------------------- Arrow

def _check_text_types(schema, cols: Columns, path: str) -> None:
    import pyarrow as pa
    for c in cols.text:
        if c not in schema.names:
            continue
        t = schema.field(c).type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t) or pa.types.is_null(t)):
            raise inputs.InputError("input %s: text column %r has type %s, expected a string "
                                    "column" % (path, c, t))


def _batch_documents(batches, schema, cols: Columns, path: str, encoding: str,
                     encoding_errors: str):
    """Record batches -> documents, one batch in memory at a time."""
    import pyarrow as pa
    base = os.path.basename(path.rstrip("/"))
    consts = {k: v for k, v in partition_values(path).items() if k not in schema.names}
    cols.check(list(schema.names) + list(consts), path)
    _check_text_types(schema, cols, path)
    present = [c for c in cols.wanted if c in schema.names]
    row = 0
    for batch in batches:
        columns = {}
        for c in present:
            arr = batch.column(batch.schema.get_field_index(c))
            if pa.types.is_dictionary(arr.type):
                arr = arr.dictionary_decode()
            columns[c] = arr.to_pylist()
        for i in range(batch.num_rows):
            row += 1
            position = "row %d" % row
            values = dict(consts)
            replaced = 0
            bad = None
            for c in present:
                v = columns[c][i]
                if isinstance(v, bytes) and c in cols.text:
                    try:
                        v, n = inputs.decode_counted(v, encoding, encoding_errors)
                        replaced += n
                    except UnicodeDecodeError as e:
                        bad = inputs.DeadLetter(path, position, "column %r cannot be decoded as "
                                                "%s: %s" % (c, encoding, e), inputs.snippet_of(v))
                        break
                values[c] = v
            yield bad if bad is not None else row_document(values, cols, path, base, row,
                                                        position, replaced)


def _read_parquet(path: str, cols: Columns, **kw):
    import pyarrow.parquet as pq
    f = inputs.open_binary(path)
    try:
        try:
            pf = pq.ParquetFile(f)
        except Exception as e:   # ArrowInvalid and friends: not a Parquet file
            raise inputs.InputError("input %s is not a readable Parquet file (%s)" % (path, e)) \
                from e
        schema = pf.schema_arrow
        present = [c for c in cols.wanted if c in schema.names]
        yield from _batch_documents(pf.iter_batches(batch_size=BATCH_ROWS, columns=present),
                                    schema, cols, path, **kw)
    finally:
        f.close()


def _arrow_reader(f, path: str):
    """``(schema, batches)`` of an Arrow IPC stream or file."""
    import pyarrow as pa
    try:
        r = pa.ipc.open_stream(f)
        return r.schema, iter(r)
    except pa.ArrowInvalid:
        pass
    try:
        f.seek(0)
        r = pa.ipc.open_file(f)
    except Exception as e:
        raise inputs.InputError("input %s is not an Arrow IPC stream or file (%s); expected "
                                ".arrow (e.g. a Hugging Face save_to_disk folder) or .feather"
                                % (path, e)) from e
    return r.schema, (r.get_batch(i) for i in range(r.num_record_batches))


def _read_arrow(path: str, cols: Columns, **kw):
    f = inputs.open_binary(path)
    try:
        schema, batches = _arrow_reader(f, path)
        yield from _batch_documents(batches, schema, cols, path, **kw)
    finally:
        f.close()


# ----------------------------------------------------------------------------- entry points

def read_table(path: str, fmt: str, encoding="utf-8", encoding_errors="strict", id_field="id",
               text_field="text", label_field="label", title_field="title",
               max_doc_bytes=inputs.DEFAULT_MAX_DOC_BYTES, **_) -> Iterator:
    """Stream the rows of one table file as RawDocument / DeadLetter (module docstring).
    Raises InputError (at the first ``next``) for a file that is not such a table or lacks
    a named column."""
    cols = Columns(id_field, text_field, title_field, label_field)
    if fmt in ("csv", "tsv"):
        return _read_delimited(path, "," if fmt == "csv" else "\t", cols, encoding,
                               encoding_errors, max_doc_bytes)
    kw = dict(encoding=encoding, encoding_errors=encoding_errors)
    if fmt == "parquet":
        return _read_parquet(path, cols, **kw)
    if fmt == "arrow":
        return _read_arrow(path, cols, **kw)
    raise inputs.InputError("unknown table format %r for %s; expected one of %s"
                            % (fmt, path, ", ".join(inputs.TABLE_FORMATS)))
