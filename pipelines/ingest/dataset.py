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
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, InputError, UsageError
from pipelines.runtime import object_store_files

object_store_files.register()

logger = logging.getLogger(__name__)

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


def file_identity(path: str) -> Tuple[str, float, int]:
    """``(path, modification time, size)`` of a local file, to key a cache of what was read
    from it (a rewritten file gets a new key); an object-store path is ``(path, 0.0, 0)``:
    objects the trainer reads are written once."""
    if is_remote(path):
        return (path, 0.0, 0)
    st = os.stat(path)
    return (path, st.st_mtime, st.st_size)


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


def match_sizes(pattern: str) -> List[Tuple[str, int]]:
    """``(path, size in bytes)`` of the files matching a local or remote glob, sorted by path
    (a local file removed between the listing and its ``stat`` is left out)."""
    if is_remote(pattern):
        from apache_beam.io.filesystems import FileSystems
        res = FileSystems.match([pattern])[0]
        return sorted((m.path, int(m.size_in_bytes)) for m in res.metadata_list)
    out = []
    for path in match(pattern):
        try:
            out.append((path, os.path.getsize(path)))
        except OSError:
            pass
    return out


def make_dirs(path: str) -> None:
    """Create the local folder ``path`` and its parents (an object store has no folders)."""
    files_for(path).makedirs(path)


def require_local(path: str, what: str) -> None:
    """UsageError unless ``path`` is a local path; ``what`` says what needs it and what to do
    instead (``"write_dataset writes local directories; copy ..."``)."""
    if is_remote(path):
        raise UsageError("%s (got %s)" % (what, path))


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
            text = decode_text(f.read(), path, "vocabulary")
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


def parquet_file(path: str) -> pq.ParquetFile:
    if is_remote(path):
        return pq.ParquetFile(open_read(path))
    return pq.ParquetFile(path)


def shard_vocab_hash(path: str) -> Optional[str]:
    meta = parquet_file(path).schema_arrow.metadata or {}
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
    return sum(parquet_file(f).metadata.num_rows for f in files)


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


# ----------------------------------------------------------------------------- verification
#
# A shard is verified against the manifest of its dataset whenever one lies at its folder or
# the folder above it (DATASET/manifest.json for DATASET/train/part-*.parquet), however the
# shards were named: the dataset directory, a split folder, one file or a glob. Shards no
# manifest covers are read only when the caller passes ``unverified=True`` (the commands'
# ``--unverified``). See docs/reliability.md "Verification wherever data is read".

UNVERIFIED_HINT = ("pass --unverified to read shards that no manifest lists (written by "
                   "another tool, or a dataset whose `ldabeam vectorize` was killed)")

# sha256 of the local files hashed by this process, keyed by the file's identity and version
# (device, inode, size, mtime): a command hashes each shard once however many of its readers
# (train split, held-out split, coherence reference, the infer driver's checks) verify it
_HASHED: Dict[tuple, str] = {}


def _version_key(path: str) -> Optional[tuple]:
    if is_remote(path):
        return None             # an object has no cheap version stamp: hashed when verified
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _file_sha256(path: str) -> str:
    key = _version_key(path)
    if key is not None and key in _HASHED:
        return _HASHED[key]
    h = hashlib.sha256()
    with open_read(path) as f:
        for _ in range(1 << 62):
            block = f.read(1 << 22)
            if not block:
                break
            h.update(block)
    digest = h.hexdigest()
    if key is not None:
        _HASHED[key] = digest
    return digest


def is_dataset_dir(path: str) -> bool:
    """True for a directory laid out as a dataset (``manifest.json`` or a ``train/``)."""
    return exists(join(path, MANIFEST_FILE)) or exists(join(path, TRAIN_SPLIT))


_SHA256 = frozenset("0123456789abcdef")


def _inside(file) -> Optional[str]:
    """A manifest ``file`` entry as a relative path inside the dataset (``train/part-...``),
    or None when it is not one: absolute, a URL or drive, empty, or with ``.``/``..`` parts."""
    if not isinstance(file, str) or not file or file[0] in "/\\" or "\\" in file \
            or ":" in file or "\x00" in file:
        return None
    parts = file.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return file


@dataclass
class Listing:
    """The shards a dataset's manifest lists: ``entries`` maps each shard's path relative to
    ``root`` (``train/part-00000-of-00004.parquet``) to its entry (``documents``, and
    ``sha256`` when recorded); ``vocab_hash`` is the manifest's vocabulary hash (or None)."""
    root: str
    entries: Dict[str, dict]
    vocab_hash: Optional[str] = None
    source: str = MANIFEST_FILE

    @classmethod
    def parse(cls, root: str, manifest, source: str = MANIFEST_FILE,
              require_shards: bool = True) -> "Listing":
        """The listing of ``manifest`` (a parsed manifest.json). DataIntegrityError naming the
        dataset when it lists no shard (unless not ``require_shards``), or lists one outside
        the dataset or twice."""
        def bad(why):
            return DataIntegrityError("dataset %s: %s %s; it was edited or damaged: re-run "
                                      "`ldabeam vectorize`" % (root, source, why))
        if not isinstance(manifest, dict):
            raise bad("is not a JSON object")
        splits = manifest.get("splits")
        entries: Dict[str, dict] = {}
        for split, info in sorted((splits or {}).items()) if isinstance(splits, dict) else ():
            if not isinstance(info, dict) or "shards" not in info:
                continue       # the split method, fraction and seed sit beside the splits
            if not isinstance(info["shards"], list):
                raise bad("has splits.%s.shards that is not a list" % split)
            for e in info["shards"]:
                rel = _inside(e.get("file")) if isinstance(e, dict) else None
                if rel is None:
                    raise bad("lists shard %r, which is not a path inside the dataset "
                              "(absolute, a URL, empty, or with '..')"
                              % (e.get("file") if isinstance(e, dict) else e,))
                docs = e.get("documents")
                if isinstance(docs, bool) or not isinstance(docs, int) or docs < 0:
                    raise bad("gives shard %s no valid document count (%r)" % (rel, docs))
                sha = e.get("sha256")
                if sha is not None and not (isinstance(sha, str) and len(sha) == 64
                                            and set(sha) <= _SHA256):
                    raise bad("gives shard %s an invalid sha256 %r" % (rel, sha))
                if rel in entries:
                    raise bad("lists shard %s twice" % rel)
                entries[rel] = e
        if not entries and require_shards:
            raise bad("lists no shards (no splits with their shards), so nothing read from "
                      "the dataset could be verified")
        voc = manifest.get("vocabulary")
        vh = voc.get("hash") if isinstance(voc, dict) else None
        return cls(root, entries, vh if isinstance(vh, str) else None, source)

    @classmethod
    def read(cls, root: str) -> "Listing":
        """The listing of ``root/manifest.json``."""
        path = join(root, MANIFEST_FILE)
        with open_read(path) as f:
            raw = f.read()
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise DataIntegrityError("dataset %s: %s is not valid JSON (%s); re-run `ldabeam "
                                     "vectorize`" % (root, MANIFEST_FILE, e)) from None
        return cls.parse(root, manifest)

    def folders(self) -> List[str]:
        """The folders (relative to the root) the listed shards lie in."""
        return sorted({rel.rpartition("/")[0] for rel in self.entries})

    def relative(self, f: str) -> Optional[str]:
        """``f``'s path relative to the dataset root, or None when it lies outside it."""
        if is_remote(self.root):
            prefix = self.root.rstrip("/") + "/"
            return f[len(prefix):] if f.startswith(prefix) else None
        rel = os.path.relpath(os.path.abspath(f), os.path.abspath(self.root))
        rel = rel.replace(os.sep, "/")
        return None if rel == ".." or rel.startswith("../") else rel

    def check(self, files: Sequence[str], check_hashes: bool = True,
              folders: Optional[Sequence[str]] = None) -> int:
        """Check ``files`` (shards of this dataset) against the listing: each is listed, has
        the listed row count (Parquet footer), the manifest's vocabulary hash and, with
        ``check_hashes`` and when recorded, the listed sha256; every listed shard of
        ``folders`` (default: the folders ``files`` lie in) exists. Returns the documents of
        ``files``; raises DataIntegrityError naming the dataset, the shard and the fix."""
        def bad(why):
            return DataIntegrityError("dataset %s: %s; re-run `ldabeam vectorize`"
                                      % (self.root, why))
        rels = []
        for f in files:
            rel = self.relative(f)
            if rel is None or rel not in self.entries:
                raise DataIntegrityError(
                    "dataset %s: %s is not listed in %s (left from another run, or copied "
                    "in?); remove it, or re-run `ldabeam vectorize --overwrite`"
                    % (self.root, rel or f, self.source))
            rels.append(rel)
        folders = set(folders if folders is not None
                      else (rel.rpartition("/")[0] for rel in rels))
        for rel in sorted(self.entries):
            if rel.rpartition("/")[0] in folders and not exists(join(self.root, rel)):
                raise bad("it is incomplete: shard %s listed in %s is missing"
                          % (rel, self.source))
        n_docs = 0
        for f, rel in zip(files, rels):
            entry = self.entries[rel]
            try:
                pf = parquet_file(f)
                rows = pf.metadata.num_rows
                meta = pf.schema_arrow.metadata or {}
            except Exception as e:   # truncated / not Parquet
                raise bad("shard %s cannot be read (%s)" % (rel, e)) from None
            if rows != entry["documents"]:
                raise bad("shard %s holds %d documents but %s says %d"
                          % (rel, rows, self.source, entry["documents"]))
            vh = meta.get(VOCAB_HASH_KEY)
            if self.vocab_hash and vh is not None and vh.decode() != self.vocab_hash:
                raise bad("shard %s was vectorised with vocabulary %s but %s names %s"
                          % (rel, vh.decode(), self.source, self.vocab_hash))
            if check_hashes and entry.get("sha256") and _file_sha256(f) != entry["sha256"]:
                raise bad("shard %s differs from the one %s lists (sha256 mismatch: it was "
                          "changed after vectorize)" % (rel, self.source))
            n_docs += rows
        return n_docs


def manifest_root(path: str, _seen: Optional[Dict[str, bool]] = None) -> Optional[str]:
    """The dataset directory whose manifest covers shard ``path``: its folder or the folder
    above it, when a ``manifest.json`` lies there; None otherwise."""
    seen = {} if _seen is None else _seen
    d = parent(path)
    for cand in (d, parent(d)):
        if cand not in seen:
            seen[cand] = exists(join(cand, MANIFEST_FILE))
        if seen[cand]:
            return cand
    return None


@dataclass
class ShardSet:
    """Shards to read, verified by :func:`open_shards`: ``files`` in order, ``roots`` (the
    dataset directory of each, None for one no manifest covers), ``listings`` (the manifest
    listing of each dataset, by root) and ``unverified`` (the files no manifest covers,
    accepted with ``unverified=True``)."""
    path: str
    files: List[str]
    roots: List[Optional[str]]        # per file: its dataset directory, or None
    listings: Dict[str, Listing]
    unverified: List[str]

    @property
    def root(self) -> Optional[str]:
        """The dataset directory, when every file belongs to one verified dataset."""
        if self.unverified or len(self.listings) != 1:
            return None
        return next(iter(self.listings))

    def record(self) -> dict:
        """What a checkpoint records of the shards it was trained on (compared by ``train
        --resume``): the documents, the shard count and a digest of every shard's name
        (relative to its dataset; the file name for unverified shards), row count and sha256
        (the manifest's for verified shards; hashed for unverified ones)."""
        rows = []
        for f, root in zip(self.files, self.roots):
            listing = self.listings.get(root) if root is not None else None
            if listing is not None:
                rel = listing.relative(f)
                entry = listing.entries[rel]
                rows.append((rel, int(entry["documents"]), entry.get("sha256") or
                             _file_sha256(f)))
            else:
                rows.append((f.replace("\\", "/").rsplit("/", 1)[-1],
                             int(parquet_file(f).metadata.num_rows), _file_sha256(f)))
        h = hashlib.sha256()
        for r in rows:
            h.update(("%s\t%d\t%s\n" % r).encode("utf-8"))
        rec = {"digest": h.hexdigest(), "shards": len(rows),
               "documents": sum(r[1] for r in rows), "verified": not self.unverified}
        if len(rows) <= MAX_RECORDED_SHARDS:
            rec["files"] = [list(r) for r in rows]
        return rec


MAX_RECORDED_SHARDS = 256   # a dataset record lists its shards up to this many (else: digest)


def open_shards(path: str, split: str = TRAIN_SPLIT, *, unverified: bool = False,
                check_hashes: bool = True, option: str = "--shards") -> ShardSet:
    """The shards ``path`` names (:func:`resolve_shards`), each verified against the manifest
    of its dataset (:func:`manifest_root`, :meth:`Listing.check`) before anything is read.

    Shards no manifest covers raise DataIntegrityError naming ``option`` and ``--unverified``
    unless ``unverified`` is true (then a warning names them)."""
    files = resolve_shards(path, split)
    seen: Dict[str, bool] = {}
    roots = [manifest_root(f, seen) for f in files]
    loose = [f for f, r in zip(files, roots) if r is None]
    if loose and not unverified:
        raise DataIntegrityError(
            "%s %s: no %s in %s or the folder above it, so %s cannot be verified (a dataset "
            "whose `ldabeam vectorize` was killed or is still running has none): re-run "
            "`ldabeam vectorize`, or %s" % (option, path, MANIFEST_FILE, parent(loose[0]),
                                            "shard %s" % loose[0] if len(loose) == 1
                                            else "its %d shards" % len(loose),
                                            UNVERIFIED_HINT))
    if loose:
        logger.warning("--unverified: reading %d shard(s) of %s that no manifest lists, "
                       "unchecked", len(loose), path)
    listings: Dict[str, Listing] = {}
    for root in dict.fromkeys(r for r in roots if r is not None):
        listing = Listing.read(root)
        listing.check([f for f, r in zip(files, roots) if r == root], check_hashes)
        listings[root] = listing
    return ShardSet(path, files, roots, listings, loose)


def verify(path: str, check_hashes: bool = True) -> dict:
    """Check the dataset at or above ``path`` against its manifest before any work: for a
    dataset directory every shard of every split, else the shards ``path`` names (a split
    folder, a file or a glob; :func:`open_shards`). Returns ``{"shards": n, "documents":
    d}``; raises DataIntegrityError naming the dataset and the first problem: no manifest
    (a dataset still being written, or whose job failed), a missing / extra / truncated /
    changed shard."""
    if is_dataset_dir(path):
        if not exists(join(path, MANIFEST_FILE)):
            raise DataIntegrityError(
                "dataset %s has no %s: it is still being written (or the job writing it "
                "failed before the end); wait for `ldabeam vectorize` to finish, or re-run "
                "it" % (path, MANIFEST_FILE))
        listing = Listing.read(path)
        files = _listed_folders(listing)
        return {"shards": len(files),
                "documents": listing.check(files, check_hashes, listing.folders())}
    shards = open_shards(path, check_hashes=check_hashes)
    return {"shards": len(shards.files),
            "documents": count_documents(shards.files)}


def _listed_folders(listing: Listing) -> List[str]:
    """Every ``*.parquet`` of the folders the listing's shards lie in."""
    return [f for d in listing.folders() for f in match(join(listing.root, d, "*.parquet") if d
                                             else join(listing.root, "*.parquet"))]


def check_shard_listing(path: str, splits: dict, check_hashes: Optional[bool] = True,
                        listing: str = MANIFEST_FILE) -> dict:
    """Check the shards under dataset ``path`` against a manifest's ``splits`` listing (the
    one :func:`verify` reads; ``vectorize`` calls this before it publishes the manifest):
    each listed shard exists with its row count and, with ``check_hashes``, its sha256; no
    other shard sits in a split folder. Returns ``{"shards": n, "documents": d}``; raises
    DataIntegrityError naming the first problem (``listing`` names the listing in it).
    ``check_hashes`` None: hash local shards only (shards just uploaded to an object store are
    not downloaded again to be hashed)."""
    if check_hashes is None:
        check_hashes = not is_remote(path)
    lst = Listing.parse(path, {"splits": splits}, source=listing, require_shards=False)
    files = _listed_folders(lst)
    return {"shards": len(files), "documents": lst.check(files, check_hashes, lst.folders())}


def shard_listing(root: str) -> dict:
    """The ``splits`` listing of a manifest for the shards now under ``root``'s split
    folders (file, documents, sha256): for a dataset assembled from shards written by
    :func:`write_shard` rather than by ``ldabeam vectorize`` (benchmarks, tests), so that
    its manifest verifies them like vectorize's."""
    splits = {}
    for split in (TRAIN_SPLIT, HELDOUT_SPLIT):
        files = match(join(root, split, "*.parquet"))
        if files:
            shards = [{"file": "%s/%s" % (split, f.replace("\\", "/").rsplit("/", 1)[-1]),
                       "documents": int(parquet_file(f).metadata.num_rows),
                       "sha256": _file_sha256(f)} for f in files]
            splits[split] = {"documents": sum(e["documents"] for e in shards),
                             "shards": shards}
    return splits


# ----------------------------------------------------------------------------- tokenizer settings

#: settings of a dataset's manifest that decide how raw text becomes tokens and documents
TOKENIZER_KEYS = ("lowercase", "deaccent", "min_token_len", "max_token_len", "stopwords",
                  "min_article_tokens", "encoding", "encoding_errors", "id_field", "text_field",
                  "label_field", "title_field", "strip_headers", "strip_quotes",
                  "strip_signatures", "format",
                  # pipelines.ingest.tokenize.RECORD_KEYS beyond the first five
                  "token_pattern", "segmenter", "stopword_list", "phrases", "custom_tokenizer",
                  "tokens_from")
TOKENIZER_FILE = "tokenizer.json"   # in a model directory: the settings of its training data
#: ``settings`` of a model's tokenizer.json when the training data's tokenization is not
#: known (shards no vectorize manifest describes, or datasets that disagree)
TOKENIZER_UNKNOWN = "unknown"


def _manifest_settings(root: str) -> Optional[dict]:
    try:
        settings = read_manifest(root).get("settings")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(settings, dict) or "lowercase" not in settings:
        return None      # not written by vectorize (e.g. a synthetic corpus)
    return {k: settings[k] for k in TOKENIZER_KEYS if k in settings}


def tokenizer_settings(shards) -> Optional[dict]:
    """The tokenizer and reader settings of the data ``shards`` names (a :class:`ShardSet`,
    or a dataset directory, one of its split folders, a shard or a glob) from the manifest of
    its dataset (:func:`manifest_root`); None when no vectorize manifest describes every
    shard alike."""
    if isinstance(shards, ShardSet):
        roots = set(shards.roots)
    else:
        if exists(join(shards, MANIFEST_FILE)):
            return _manifest_settings(shards)
        try:
            files = resolve_shards(shards)
        except (OSError, ValueError):
            return None
        seen: Dict[str, bool] = {}
        roots = {manifest_root(f, seen) for f in files}
    if None in roots or not roots:
        return None
    found = [_manifest_settings(r) for r in sorted(roots)]
    if found[0] is None or any(s != found[0] for s in found[1:]):
        return None
    return found[0]


def record_tokenizer(shards, model_dir: str) -> Optional[dict]:
    """Write ``MODEL_DIR/tokenizer.json``: the training data's tokenizer settings
    (:func:`tokenizer_settings` of ``shards``, a :class:`ShardSet` or a path), so that the
    model is self-describing (``ldabeam infer --input RAW`` tokenizes as training did), or
    ``"unknown"`` when no vectorize manifest describes the shards. Returns the settings."""
    settings = tokenizer_settings(shards)
    source = shards.path if isinstance(shards, ShardSet) else shards
    write_bytes_atomic(join(model_dir, TOKENIZER_FILE),
                       (json.dumps({"source": source,
                                    "settings": TOKENIZER_UNKNOWN if settings is None
                                    else settings}, indent=2, sort_keys=True)
                        + "\n").encode("utf-8"))
    return settings


def decode_text(raw: bytes, path: str, what: str) -> str:
    """``raw`` as UTF-8; InputError naming ``path`` (a ``what``), the offset and the line of
    the first byte that is not UTF-8 otherwise."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise InputError("%s is not UTF-8 text (byte %d) at line %d: a %s is written by "
                         "ldabeam in UTF-8; restore it or save it as UTF-8"
                         % (path, e.start, line, what)) from None


def read_tokenizer(model_dir: str):
    """The settings :func:`record_tokenizer` wrote: a dict or :data:`TOKENIZER_UNKNOWN`; None
    when the model has no tokenizer.json or it records null (written before "unknown"
    existed: callers then look at the manifest of the dataset the run log names).
    InputError naming the file when it is not UTF-8 JSON of that form."""
    path = join(model_dir, TOKENIZER_FILE)
    if not exists(path):
        return None
    with open_read(path) as f:
        raw = f.read()
    try:
        rec, why = json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError as e:
        rec, why = None, "not UTF-8 text: byte %d at line %d" % (
            e.start, raw[:e.start].count(b"\n") + 1)
    except (ValueError, RecursionError) as e:
        rec, why = None, "not JSON: %s" % e
    settings = rec.get("settings") if isinstance(rec, dict) else None
    if why is None and not (isinstance(rec, dict) and (
            settings is None or settings == TOKENIZER_UNKNOWN or isinstance(settings, dict))):
        why = "not an object whose settings are an object or \"%s\"" % TOKENIZER_UNKNOWN
    if why is not None:
        raise InputError("%s is not a tokenizer record written by `ldabeam train` (%s); restore "
                         "it from the training run, or delete it to use the settings of the "
                         "training dataset's manifest" % (path, why))
    return settings


def doc_hash(doc_id: str, seed: int = 0) -> Tuple[float, int]:
    """``(u, order)`` for a document: ``u`` uniform in [0, 1) decides the held-out split,
    ``order`` (64-bit) the shard and the row order. Stable across runs, runners, platforms."""
    d = hashlib.blake2b(("%d:%s" % (seed, doc_id)).encode("utf-8"), digest_size=16).digest()
    u = int.from_bytes(d[:8], "big") / 2.0 ** 64
    return u, int.from_bytes(d[8:], "big")


def split_of(doc_id: str, holdout_fraction: float, seed: int = 0) -> str:
    u, _ = doc_hash(doc_id, seed)
    return HELDOUT_SPLIT if u < holdout_fraction else TRAIN_SPLIT


def find_vocab(shards: str, explicit: Optional[str]) -> str:
    """The vocab.tsv that belongs to SHARD_DIR."""
    if explicit:
        return explicit
    cands = []
    if not any(ch in shards for ch in "*?[") and not shards.endswith(".parquet"):
        cands.append(join(shards, VOCAB_FILE))
    base = shards.rstrip("/")
    for _ in range(2):
        base = os.path.dirname(base) if not is_remote(base) else base.rsplit("/", 1)[0]
        if base:
            cands.append(join(base, VOCAB_FILE))
    for c in cands:
        if exists(c):
            return c
    raise FileNotFoundError("no vocabulary found for %s (looked for %s); pass --vocab"
                            % (shards, ", ".join(cands)))
