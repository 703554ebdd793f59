"""The on-disk dataset the vectorize pipeline writes and every trainer reads.

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

This module uses pyarrow and Beam's ``FileSystems`` for paths that are not local (``gs://``,
``s3://``); it contains no pipeline. Importing it also registers the Beam-backed file layer of
``lda_core`` (:mod:`pipelines.runtime.object_store_files`), so topic states, checkpoints and run logs
under a URL go through ``FileSystems`` too.
"""
from __future__ import annotations

import glob
import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, InputError
from pipelines.runtime import object_store_files

object_store_files.register()

MANIFEST_FILE = "manifest.json"
VOCAB_FILE = "vocab.tsv"
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


# ----------------------------------------------------------------------------- paths

is_remote = object_store_files.is_remote


def files_for(path: str):
    """The ``lda_core`` file layer of ``path``: local files, or Beam ``FileSystems`` for a URL
    (what ``CheckpointStore``, ``TopicState`` and ``RunLog`` use when given none)."""
    return object_store_files.files_for(path)


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts])
    return os.path.join(base, *parts)


def exists(path: str) -> bool:
    if is_remote(path):
        from apache_beam.io.filesystems import FileSystems
        return FileSystems.exists(path)
    return os.path.exists(path)


def isdir(path: str) -> bool:
    """A local directory, or a URL prefix holding at least one object."""
    if is_remote(path):
        return files_for(path).isdir(path)
    return os.path.isdir(path)


def absolute(path: str) -> str:
    """``os.path.abspath`` for a local path; a URL as it is (without a trailing ``/``)."""
    return path.rstrip("/") if is_remote(path) else os.path.abspath(path)


def parent(path: str) -> str:
    """The folder holding ``path`` (absolute locally; a URL stays a URL)."""
    if is_remote(path):
        return path.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(path))


def model_dir_of(model: str) -> str:
    """MODEL_DIR of ``--model``: the model directory itself, or the one a checkpoint
    directory (``MODEL_DIR/checkpoints/step-...``, recognised by its state.json) belongs to."""
    if exists(join(model, "state.json")):
        return parent(parent(model))
    return absolute(model)


def open_read(path: str):
    """A binary file object for a local path or any Beam FileSystems URL."""
    if is_remote(path):
        from apache_beam.io.filesystems import FileSystems
        return FileSystems.open(path, compression_type="uncompressed")
    return open(path, "rb")


def match(pattern: str) -> List[str]:
    """Sorted paths matching a local or remote glob."""
    if is_remote(pattern):
        from apache_beam.io.filesystems import FileSystems
        res = FileSystems.match([pattern])[0]
        return sorted(m.path for m in res.metadata_list)
    return sorted(glob.glob(pattern))


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` so that a reader sees either nothing or the whole file: the file layer's
    ``write_atomic`` (locally a temporary sibling, fsync, ``os.replace`` and an fsync of the
    folder; on object stores one upload, which appears only when it completes)."""
    files_for(path).write_atomic(path, data)


# ----------------------------------------------------------------------------- vocabulary

from lda_core.storage.vocab_file import vocab_hash, vocab_tsv  # noqa: E402,F401 (the file format)


@dataclass
class Vocabulary:
    """Tokens in id order with their document frequency (df) and corpus frequency (cf)."""

    tokens: List[str]
    df: np.ndarray = None
    cf: np.ndarray = None
    _index: Dict[str, int] = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.tokens = list(self.tokens)
        n = len(self.tokens)
        self.df = np.zeros(n, np.int64) if self.df is None else np.asarray(self.df, np.int64)
        self.cf = np.zeros(n, np.int64) if self.cf is None else np.asarray(self.cf, np.int64)
        if len(self.df) != n or len(self.cf) != n:
            raise ValueError("vocabulary has %d tokens but %d df and %d cf values"
                             % (n, len(self.df), len(self.cf)))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def index(self) -> Dict[str, int]:
        if self._index is None:
            self._index = {t: i for i, t in enumerate(self.tokens)}
            if len(self._index) != len(self.tokens):
                raise ValueError("vocabulary has duplicate tokens")
        return self._index

    @property
    def hash(self) -> str:
        return vocab_hash(self.tokens)

    def to_tsv(self) -> str:
        return vocab_tsv(self.tokens, self.df, self.cf)

    def write(self, path: str) -> None:
        write_bytes_atomic(path, self.to_tsv().encode("utf-8"))

    @classmethod
    def read(cls, path: str) -> "Vocabulary":
        """Read ``vocab.tsv`` (or a dataset directory containing it).

        Also accepts a plain one-token-per-line file (UCI ``vocab.*.txt``), ids in line order.
        """
        if os.path.isdir(path) or (is_remote(path) and not path.endswith((".tsv", ".txt"))):
            path = join(path, VOCAB_FILE)
        if not exists(path):
            raise FileNotFoundError("vocabulary file %s does not exist (expected a vocab.tsv "
                                    "written by `ldabeam vectorize`, or a one-token-per-line "
                                    "file)" % path)
        with open_read(path) as f:
            data = f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataIntegrityError("%s is not UTF-8 text (byte %d); a vocabulary is written "
                                     "by `ldabeam vectorize` in UTF-8" % (path, e.start)) from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if lines and lines[0] == "token\tid\tdf\tcf":
            tokens, df, cf = [], [], []
            for n, line in enumerate(lines[1:], start=2):
                parts = line.split("\t")
                if len(parts) != 4:
                    raise DataIntegrityError("%s line %d: expected 4 tab-separated fields "
                                             "(token, id, df, cf), got %d" % (path, n, len(parts)))
                if int(parts[1]) != len(tokens):
                    raise DataIntegrityError("%s line %d: id %s out of order (expected %d)"
                                             % (path, n, parts[1], len(tokens)))
                tokens.append(parts[0])
                df.append(int(parts[2]))
                cf.append(int(parts[3]))
            return cls(tokens, np.array(df, np.int64), np.array(cf, np.int64))
        return cls([l.strip() for l in lines])


# ----------------------------------------------------------------------------- manifest

def read_manifest(dataset_dir: str) -> dict:
    path = join(dataset_dir, MANIFEST_FILE)
    with open_read(path) as f:
        return json.loads(f.read().decode("utf-8"))


def write_manifest(dataset_dir: str, manifest: dict) -> None:
    write_bytes_atomic(join(dataset_dir, MANIFEST_FILE),
                       (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8"))


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
    write_bytes_atomic(path, data)
    return hashlib.sha256(data).hexdigest()


def _parquet_file(path: str) -> pq.ParquetFile:
    if is_remote(path):
        return pq.ParquetFile(open_read(path))
    return pq.ParquetFile(path)


def shard_vocab_hash(path: str) -> Optional[str]:
    meta = _parquet_file(path).schema_arrow.metadata or {}
    v = meta.get(VOCAB_HASH_KEY)
    return v.decode() if v is not None else None


def resolve_shards(path: str, split: str = TRAIN_SPLIT) -> List[str]:
    """The shard files for ``path``: a dataset directory (its ``split`` sub-directory), a
    directory of ``*.parquet`` files, a single file, or a glob. Raises ``FileNotFoundError``
    naming the path when there is nothing to read."""
    candidates: List[str] = []
    if exists(join(path, MANIFEST_FILE)) or exists(join(path, split)):
        candidates = match(join(path, split, "*.parquet"))
    elif path.endswith(".parquet") and exists(path):
        candidates = [path]
    elif any(ch in path for ch in "*?["):
        candidates = match(path)
    elif exists(path):
        candidates = match(join(path, "*.parquet"))
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
        names = _parquet_file(path).schema_arrow.names
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


def check_vocab_hash(files: Sequence[str], expected: Optional[str]) -> str:
    """Check every shard carries the same vocabulary hash (and ``expected`` if given).

    Returns the hash. Raises ``ValueError`` naming the shard and both hashes otherwise."""
    found = None
    for f in files:
        h = shard_vocab_hash(f)
        if h is None:
            raise InputError("shard %s has no vocabulary hash in its metadata; re-run "
                             "`ldabeam vectorize` to write it" % f)
        if expected is not None and h != expected:
            raise InputError("shard %s was vectorised with vocabulary %s but the model/state "
                             "expects vocabulary %s; vectorise it with `--vocab` of the "
                             "model's vocabulary" % (f, h, expected))
        if found is not None and h != found:
            raise InputError("shards disagree on their vocabulary: %s has %s, earlier shards "
                             "have %s" % (f, h, found))
        found = h
    return found


def count_documents(files: Sequence[str]) -> int:
    return sum(_parquet_file(f).metadata.num_rows for f in files)


def iter_shard_batches(files: Sequence[str], batch_size: int = 4096,
                       columns: Optional[Sequence[str]] = None) -> Iterator[DocBatch]:
    """Stream the shards as :class:`DocBatch` chunks of at most ``batch_size`` documents,
    in file order (bounded memory: one record batch at a time)."""
    cols = list(columns) if columns else ["doc_id", "title", "label", "word_ids", "counts"]
    for f in files:
        pf = _parquet_file(f)
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


# ----------------------------------------------------------------------------- verification

def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open_read(path) as f:
        for _ in range(1 << 62):
            block = f.read(1 << 22)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def is_dataset_dir(path: str) -> bool:
    """True for a directory laid out as a dataset (``manifest.json`` or a ``train/``)."""
    return exists(join(path, MANIFEST_FILE)) or exists(join(path, TRAIN_SPLIT))


def verify(path: str, check_hashes: bool = True) -> Optional[dict]:
    """Check a dataset directory against its ``manifest.json`` before any work: every shard
    it lists is there with its row count (Parquet footer) and, when recorded, its sha256; no
    shard sits in a split folder without being listed. Returns ``{"shards": n, "documents":
    d}`` (``None`` for a path that is not a dataset directory -- a folder of shards or a glob
    -- or whose manifest lists no shards: nothing to check against).

    Raises ``ValueError`` naming the dataset and the first problem: no manifest (a dataset
    still being written, or whose job failed), a missing / extra / truncated / changed shard.
    """
    if not is_dataset_dir(path):
        return None
    mpath = join(path, MANIFEST_FILE)
    if not exists(mpath):
        raise DataIntegrityError(
            "dataset %s has no %s: it is still being written (or the job writing "
            "it failed before the end); wait for `ldabeam vectorize` to finish, "
            "or re-run it" % (path, MANIFEST_FILE))
    try:
        manifest = read_manifest(path)
    except ValueError as e:
        raise DataIntegrityError("dataset %s: %s is not valid JSON (%s); re-run `ldabeam vectorize`"
                                 % (path, MANIFEST_FILE, e)) from e
    splits = manifest.get("splits") if isinstance(manifest, dict) else None
    if not isinstance(splits, dict):
        return None        # a manifest without a shard listing: nothing to check against
    return check_shard_listing(path, splits, check_hashes)


def check_shard_listing(path: str, splits: dict, check_hashes: bool = True,
                        listing: str = MANIFEST_FILE) -> dict:
    """Check the shards under dataset ``path`` against a manifest's ``splits`` listing:
    each listed shard exists with the listed row count (Parquet footer) and, when
    ``check_hashes`` and recorded, the listed sha256; no other shard sits in a split
    folder. Returns ``{"shards": n, "documents": d}``; raises ``ValueError`` naming the
    first problem (``listing`` names the listing in it). Used by :func:`verify` and by
    ``vectorize`` before it publishes the manifest."""
    n_shards = n_docs = 0
    for split in (TRAIN_SPLIT, HELDOUT_SPLIT):
        listed = (splits.get(split) or {}).get("shards") or []
        names = set()
        for entry in listed:
            f = join(path, entry["file"])
            name = entry["file"].rsplit("/", 1)[-1]
            if name in names:
                raise DataIntegrityError(
                    "dataset %s: shard %s is listed twice in %s; re-run `ldabeam "
                    "vectorize`" % (path, entry["file"], listing))
            names.add(name)
            if not exists(f):
                raise DataIntegrityError(
                    "dataset %s is incomplete: shard %s listed in %s is missing; "
                    "re-run `ldabeam vectorize`" % (path, entry["file"],
                                                      listing))
            try:
                rows = _parquet_file(f).metadata.num_rows
            except Exception as e:   # truncated / not Parquet
                raise DataIntegrityError(
                    "dataset %s: shard %s cannot be read (%s); re-run `ldabeam "
                    "vectorize`" % (path, entry["file"], e)) from e
            if rows != entry.get("documents", rows):
                raise DataIntegrityError("dataset %s: shard %s holds %d documents but %s says %d; "
                                         "re-run `ldabeam vectorize`" % (path, entry["file"], rows,
                                                                         listing,
                                                                         entry["documents"]))
            if check_hashes and entry.get("sha256") and _file_sha256(f) != entry["sha256"]:
                raise DataIntegrityError(
                    "dataset %s: shard %s differs from the one %s lists (sha256 "
                    "mismatch); re-run `ldabeam vectorize`"
                    % (path, entry["file"], listing))
            n_shards += 1
            n_docs += rows
        extra = sorted(p.replace("\\", "/").rsplit("/", 1)[-1]
                       for p in match(join(path, split, "*.parquet")))
        extra = [e for e in extra if e not in names]
        if extra:
            raise DataIntegrityError(
                "dataset %s: %s/%s is not listed in %s (left from another run?); "
                "remove it or re-run `ldabeam vectorize --overwrite`"
                % (path, split, extra[0], listing))
    return {"shards": n_shards, "documents": n_docs}


# ----------------------------------------------------------------------------- tokenizer settings

#: settings of a dataset's manifest that decide how raw text becomes tokens and documents
TOKENIZER_KEYS = ("lowercase", "deaccent", "min_token_len", "max_token_len", "stopwords",
                  "min_article_tokens", "encoding", "encoding_errors", "id_field", "text_field",
                  "label_field", "title_field", "strip_headers", "format",
                  # pipelines.ingest.tokenize.RECORD_KEYS beyond the first five
                  "token_pattern", "segmenter", "stopword_list", "phrases", "custom_tokenizer",
                  "tokens_from")
TOKENIZER_FILE = "tokenizer.json"   # in a model directory: the settings of its training data


def tokenizer_settings(shards: str) -> Optional[dict]:
    """The tokenizer and reader settings of the dataset ``shards`` (a dataset directory or
    one of its split folders) from its manifest; None when there is no vectorize manifest."""
    for d in (shards, parent(shards.rstrip("/"))):
        if d and exists(join(d, MANIFEST_FILE)):
            try:
                settings = read_manifest(d).get("settings")
            except (OSError, ValueError):
                return None
            if not isinstance(settings, dict) or "lowercase" not in settings:
                return None      # not written by vectorize (e.g. a synthetic corpus)
            return {k: settings[k] for k in TOKENIZER_KEYS if k in settings}
    return None


def record_tokenizer(shards: str, model_dir: str) -> Optional[dict]:
    """Copy the training data's tokenizer settings to ``MODEL_DIR/tokenizer.json`` so that the
    model is self-describing (``ldabeam infer --input RAW`` tokenizes as training did)."""
    settings = tokenizer_settings(shards)   # None (null): not a vectorize dataset
    write_bytes_atomic(join(model_dir, TOKENIZER_FILE),
                       (json.dumps({"source": shards, "settings": settings}, indent=2,
                                   sort_keys=True) + "\n").encode("utf-8"))
    return settings


def read_tokenizer(model_dir: str) -> Optional[dict]:
    """The settings :func:`record_tokenizer` wrote, or None."""
    path = join(model_dir, TOKENIZER_FILE)
    if not exists(path):
        return None
    try:
        with open_read(path) as f:
            rec = json.loads(f.read().decode("utf-8"))
    except ValueError as e:              # not UTF-8, not JSON
        rec, why = None, str(e)
    else:
        why = "not an object with a settings object"
    if not isinstance(rec, dict) or not isinstance(rec.get("settings"), (dict, type(None))):
        raise InputError("%s is not a tokenizer record written by `ldabeam train` (%s); restore "
                         "it from the training run, or delete it to use the settings of the "
                         "training dataset's manifest" % (path, why))
    return rec.get("settings")
