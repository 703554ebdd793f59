"""The on-disk dataset the vectorize pipeline writes and every trainer reads: its layout and
its shards.

Layout of a dataset directory (``ldabeam vectorize --output DIR``)::

    DIR/manifest.json              inputs, settings, counts, vocabulary size and hash
    DIR/vocab.tsv                  token, id, df, cf (header line; ids 0..V-1 in order)
    DIR/train/part-00000-of-00004.parquet    shard rows, one document each
    DIR/heldout/part-00000-of-00001.parquet  the held-out split (hash of doc_id)
    DIR/deadletter/*.jsonl         records that could not be decoded or parsed

A shard row is one document: ``doc_id`` (string), ``title`` (string, nullable), ``label``
(string, nullable), ``word_ids`` (list<int32>, sorted, unique), ``counts`` (list<int32>, > 0),
``n_tokens`` (int32). Every shard carries the vocabulary's content hash in its Parquet file
metadata under ``ldabeam.vocab_hash`` so a trainer can refuse shards vectorised against another
vocabulary (gensim's ``filter_extremes`` renumbers ids silently; we detect it).

The rest of a dataset has a module each: the manifest and the verification of every shard
read against it (:mod:`pipelines.ingest.manifest`), the vocabulary file
(:class:`lda_core.storage.vocab_file.Vocabulary`), the held-out split
(:mod:`pipelines.ingest.splits`); paths, local or URL, go through :mod:`pipelines.runtime.paths`.
No pipeline here.
"""
from __future__ import annotations

import hashlib
import io
from typing import Iterator, List, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, InputError
from lda_core.storage.vocab_file import VOCAB_FILE
from pipelines.runtime import paths

MANIFEST_FILE = "manifest.json"
TRAIN_SPLIT = "train"
HELDOUT_SPLIT = "heldout"
DEADLETTER_DIR = "deadletter"
VOCAB_HASH_KEY = b"ldabeam.vocab_hash"
FORMAT_KEY = b"ldabeam.format"
FORMAT_VERSION = "1"

SHARD_SCHEMA = pa.schema([
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("title", pa.string(), nullable=True),
    pa.field("label", pa.string(), nullable=True),
    pa.field("word_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("counts", pa.list_(pa.int32()), nullable=False),
    pa.field("n_tokens", pa.int32(), nullable=False),
])


def is_dataset_dir(path: str) -> bool:
    """True for a directory laid out as a dataset (``manifest.json`` or a ``train/``)."""
    return (paths.exists(paths.join(path, MANIFEST_FILE))
            or paths.exists(paths.join(path, TRAIN_SPLIT)))


# ----------------------------------------------------------------------------- shards

def shard_name(index: int, n_shards: int) -> str:
    return "part-%05d-of-%05d.parquet" % (index, n_shards)


def rows_to_table(rows: Sequence[dict]) -> pa.Table:
    """Rows (dicts with the schema's keys; ``title``/``label`` optional) to an Arrow table."""
    cols = {name: [] for name in SHARD_SCHEMA.names}
    for r in rows:
        w = r["word_ids"]
        c = r["counts"]
        cols["doc_id"].append(str(r["doc_id"]))
        cols["title"].append(r.get("title"))
        cols["label"].append(r.get("label"))
        cols["word_ids"].append(np.asarray(w, np.int32))
        cols["counts"].append(np.asarray(c, np.int32))
        cols["n_tokens"].append(int(r.get("n_tokens", int(np.sum(c)))))
    return pa.Table.from_pydict(cols, schema=SHARD_SCHEMA)


def docbatch_to_table(batch: DocBatch) -> pa.Table:
    offsets = pa.array(batch.indptr.astype(np.int32))
    word_ids = pa.ListArray.from_arrays(offsets, pa.array(batch.word_ids, pa.int32()))
    counts = pa.ListArray.from_arrays(offsets, pa.array(batch.counts, pa.int32()))
    n = batch.n_docs
    return pa.Table.from_arrays([
        pa.array(list(batch.doc_ids), pa.string()),
        pa.array(list(batch.titles) if batch.titles is not None else [None] * n, pa.string()),
        pa.array(list(batch.labels) if batch.labels is not None else [None] * n, pa.string()),
        word_ids, counts, pa.array(batch.doc_lengths.astype(np.int32), pa.int32()),
    ], schema=SHARD_SCHEMA)


def table_to_docbatch(table) -> DocBatch:
    """An Arrow table or record batch with the shard schema to a :class:`DocBatch`."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])

    def flat(name):
        col = table.column(name).combine_chunks()
        if isinstance(col, pa.ChunkedArray):  # pragma: no cover - pyarrow version differences
            col = col.chunk(0) if col.num_chunks else pa.array([], col.type)
        offsets = np.asarray(col.offsets, dtype=np.int64)
        values = np.asarray(col.values.to_numpy(zero_copy_only=False))
        return offsets - offsets[0], values[offsets[0]:offsets[-1]]

    indptr, word_ids = flat("word_ids")
    indptr_c, counts = flat("counts")
    if not np.array_equal(indptr, indptr_c):
        raise DataIntegrityError("shard rows have word_ids and counts of different lengths")
    names = table.schema.names
    opt = lambda n: tuple(table.column(n).to_pylist()) if n in names else None
    return DocBatch(tuple(table.column("doc_id").to_pylist()), indptr, word_ids, counts,
                    titles=opt("title"), labels=opt("label"))


def table_bytes(table: pa.Table, vocab_hash_value: str, compression: str = "zstd") -> bytes:
    """Serialise a shard table to Parquet bytes with the vocabulary hash in its metadata."""
    meta = dict(table.schema.metadata or {})
    meta[VOCAB_HASH_KEY] = vocab_hash_value.encode()
    meta[FORMAT_KEY] = FORMAT_VERSION.encode()
    table = table.replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=compression)
    return buf.getvalue()


def write_shard(path: str, table: pa.Table, vocab_hash_value: str) -> str:
    """Write one shard atomically (a reader never sees a half-written shard); returns the
    sha256 of the file (recorded in the manifest, checked by :func:`verify`)."""
    data = table_bytes(table, vocab_hash_value)
    paths.write_atomic(path, data)
    return hashlib.sha256(data).hexdigest()


def parquet_file(path: str) -> pq.ParquetFile:
    return pq.ParquetFile(paths.parquet_source(path))


def shard_vocab_hash(path: str) -> Optional[str]:
    meta = parquet_file(path).schema_arrow.metadata or {}
    v = meta.get(VOCAB_HASH_KEY)
    return v.decode() if v is not None else None


def resolve_shards(path: str, split: str = TRAIN_SPLIT) -> List[str]:
    """The shard files for ``path``: a dataset directory (its ``split`` sub-directory), a
    directory of ``*.parquet`` files, a single file, or a glob. Raises ``FileNotFoundError``
    naming the path when there is nothing to read."""
    candidates: List[str] = []
    if paths.exists(paths.join(path, MANIFEST_FILE)) or paths.exists(paths.join(path, split)):
        candidates = paths.match(paths.join(path, split, "*.parquet"))
    elif path.endswith(".parquet") and paths.exists(path):
        candidates = [path]
    elif any(ch in path for ch in "*?["):
        candidates = paths.match(path)
    elif paths.exists(path):
        candidates = paths.match(paths.join(path, "*.parquet"))
    if not candidates:
        raise FileNotFoundError(
            "no shards found at %s (split %r): expected a dataset directory written by "
            "`ldabeam vectorize --output DIR`, a directory of .parquet shards, or a glob"
            % (path, split))
    check_shard_columns(candidates[0])
    return candidates


def check_shard_columns(path: str) -> None:
    """InputError unless the Parquet file ``path`` has the columns of a shard (an output of
    ``ldabeam infer`` given as shards, say); read from the footer only."""
    try:
        names = parquet_file(path).schema_arrow.names
    except (OSError, ValueError) as e:       # truncated, not Parquet
        raise DataIntegrityError("%s cannot be read as Parquet (%s); re-run `ldabeam "
                                 "vectorize`" % (path, e)) from None
    missing = [c for c in ("doc_id", "word_ids", "counts") if c not in names]
    if missing:
        what = ("an output of `ldabeam infer` (topic proportions per document)"
                if "theta" in names else "a Parquet file of other columns (%s)"
                % ", ".join(names[:8]))
        raise InputError("%s is %s, not a dataset shard (no %s column); give a dataset "
                         "directory written by `ldabeam vectorize --output DIR`"
                         % (path, what, missing[0]))


def check_vocab_hash(files: Sequence[str], expected) -> str:
    """Check every shard carries the same vocabulary hash, and that it fits ``expected``:
    a hash (the same), or a model's :class:`~lda_core.storage.vocab_file.Vocabulary`
    (its own or one it grew from -- a prefix, whose word ids keep their meaning:
    :func:`pipelines.runtime.model_dir.accepted_vocab`); None checks only that the shards
    agree.

    Returns the hash. Raises ``InputError`` naming the shard and both hashes otherwise."""
    found = None
    for f in files:
        h = shard_vocab_hash(f)
        if h is None:
            raise InputError("shard %s has no vocabulary hash in its metadata; re-run "
                             "`ldabeam vectorize` to write it" % f)
        if found is not None and h != found:
            raise InputError("shards disagree on their vocabulary: %s has %s, earlier shards "
                             "have %s" % (f, h, found))
        if found is None and expected is not None:
            _check_expected(f, h, expected)
        found = h
    return found


def _check_expected(shard: str, h: str, expected) -> None:
    if isinstance(expected, str):
        if h != expected:
            raise InputError("shard %s was vectorised with vocabulary %s but the model/state "
                             "expects vocabulary %s; vectorise it with `--vocab` of the "
                             "model's vocabulary" % (shard, h, expected))
        return
    if not expected.accepts(h):
        raise InputError("shard %s was vectorised with vocabulary %s, which is neither the "
                         "model's (%s, %d words) nor one it grew from; vectorise it with "
                         "`--vocab` of the model's vocabulary (shards of a vocabulary grown "
                         "later are read with a later checkpoint)" % (shard, h, expected.hash,
                                                                      len(expected)))


def count_documents(files: Sequence[str]) -> int:
    return sum(parquet_file(f).metadata.num_rows for f in files)


def count_word_entries(files: Sequence[str]) -> int:
    """The (word id, count) entries of the shards' documents -- the non-zeros of the
    document-word matrix -- from the Parquet footers alone (the ``word_ids`` list column's
    value count per row group), without reading the data."""
    n = 0
    for f in files:
        md = parquet_file(f).metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                if rg.column(c).path_in_schema.split(".")[0] == "word_ids":
                    n += rg.column(c).num_values
    return n


def iter_shard_batches(files: Sequence[str], batch_size: int = 4096,
                       columns: Optional[Sequence[str]] = None) -> Iterator[DocBatch]:
    """Stream the shards as :class:`DocBatch` chunks of at most ``batch_size`` documents,
    in file order (bounded memory: one record batch at a time)."""
    cols = list(columns) if columns else ["doc_id", "title", "label", "word_ids", "counts"]
    for f in files:
        pf = parquet_file(f)
        present = [c for c in cols if c in pf.schema_arrow.names]
        for rb in pf.iter_batches(batch_size=batch_size, columns=present):
            try:
                batch = table_to_docbatch(rb)
            except ValueError as e:          # e.g. a negative or repeated word id
                raise DataIntegrityError("shard %s: %s" % (f, e)) from None
            yield batch


def read_docbatch(files: Sequence[str]) -> DocBatch:
    """All documents of ``files`` as one batch (for held-out sets and small corpora)."""
    return DocBatch.concat(list(iter_shard_batches(files, batch_size=65536)))


def find_vocab(shards: str, explicit: Optional[str]) -> str:
    """The vocab.tsv that belongs to SHARD_DIR."""
    if explicit:
        return explicit
    cands = []
    if not any(ch in shards for ch in "*?[") and not shards.endswith(".parquet"):
        cands.append(paths.join(shards, VOCAB_FILE))
    base = shards.rstrip("/")
    for _ in range(2):
        base = paths.folder(base)
        if base:
            cands.append(paths.join(base, VOCAB_FILE))
    for c in cands:
        if paths.exists(c):
            return c
    raise FileNotFoundError("no vocabulary found for %s (looked for %s); pass --vocab"
                            % (shards, ", ".join(cands)))
