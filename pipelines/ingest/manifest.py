"""A dataset's manifest (``manifest.json``) and the verification of every shard read against
it, and the tokenizer settings it records (``MODEL_DIR/tokenizer.json`` carries them to a
model).

A shard is verified against the manifest of its dataset whenever one lies at its folder or
the folder above it (DATASET/manifest.json for DATASET/train/part-*.parquet), however the
shards were named: the dataset directory, a split folder, one file or a glob. Shards no
manifest covers are read only when the caller passes ``unverified=True`` (the commands'
``--unverified``). See docs/reliability.md "Verification wherever data is read".
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from lda_core.errors import DataIntegrityError, InputError
from lda_core.storage.vocab_file import TOKENIZER_FILE
from pipelines.ingest.dataset import (count_documents, HELDOUT_SPLIT, is_dataset_dir, MANIFEST_FILE,
                                      parquet_file, resolve_shards, TRAIN_SPLIT, VOCAB_HASH_KEY)
from pipelines.runtime import paths

logger = logging.getLogger(__name__)


def read_manifest(dataset_dir: str) -> dict:
    path = paths.join(dataset_dir, MANIFEST_FILE)
    with paths.open_read(path) as f:
        return json.loads(f.read().decode("utf-8"))


def write_manifest(dataset_dir: str, manifest: dict) -> None:
    paths.write_atomic(paths.join(dataset_dir, MANIFEST_FILE),
                       (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8"))


# ----------------------------------------------------------------------------- verification

UNVERIFIED_HINT = ("pass --unverified to read shards that no manifest lists (written by "
                   "another tool, or a dataset whose `ldabeam vectorize` was killed)")

# sha256 of the local files hashed by this process, keyed by the file's identity and version
# (device, inode, size, mtime): a command hashes each shard once however many of its readers
# (train split, held-out split, coherence reference, the infer driver's checks) verify it
_HASHED: Dict[tuple, str] = {}


def _file_sha256(path: str) -> str:
    key = paths.version_stamp(path)
    if key is not None and key in _HASHED:
        return _HASHED[key]
    h = hashlib.sha256()
    with paths.open_read(path) as f:
        for _ in range(1 << 62):
            block = f.read(1 << 22)
            if not block:
                break
            h.update(block)
    digest = h.hexdigest()
    if key is not None:
        _HASHED[key] = digest
    return digest


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
        path = paths.join(root, MANIFEST_FILE)
        with paths.open_read(path) as f:
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
        return paths.relative(f, self.root)

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
            if rel.rpartition("/")[0] in folders and not paths.exists(paths.join(self.root, rel)):
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
    d = paths.parent(path)
    for cand in (d, paths.parent(d)):
        if cand not in seen:
            seen[cand] = paths.exists(paths.join(cand, MANIFEST_FILE))
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
            "`ldabeam vectorize`, or %s" % (option, path, MANIFEST_FILE, paths.parent(loose[0]),
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
        if not paths.exists(paths.join(path, MANIFEST_FILE)):
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
    return [f for d in listing.folders()
            for f in paths.match(paths.join(listing.root, d, "*.parquet") if d
                                 else paths.join(listing.root, "*.parquet"))]


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
        check_hashes = paths.cheap_to_read(path)
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
        files = paths.match(paths.join(root, split, "*.parquet"))
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
# TOKENIZER_FILE (lda_core.storage.vocab_file): in a model directory, the settings of its
# training data
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
        if paths.exists(paths.join(shards, MANIFEST_FILE)):
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
    paths.write_atomic(paths.join(model_dir, TOKENIZER_FILE),
                       (json.dumps({"source": source,
                                    "settings": TOKENIZER_UNKNOWN if settings is None
                                    else settings}, indent=2, sort_keys=True)
                        + "\n").encode("utf-8"))
    return settings


def read_tokenizer(model_dir: str):
    """The settings :func:`record_tokenizer` wrote: a dict or :data:`TOKENIZER_UNKNOWN`; None
    when the model has no tokenizer.json or it records null (written before "unknown"
    existed: callers then look at the manifest of the dataset the run log names).
    InputError naming the file when it is not UTF-8 JSON of that form."""
    path = paths.join(model_dir, TOKENIZER_FILE)
    if not paths.exists(path):
        return None
    with paths.open_read(path) as f:
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
