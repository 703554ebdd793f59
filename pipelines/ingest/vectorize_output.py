"""The vectorize pipeline's output: the held-out split and shard assignment of rows (a keyed
hash of ``doc_id``), the Parquet shards (:class:`WriteShards`), the dead letters
(:class:`WriteDeadLetters`), the vocabulary file and the manifest, the job's last write.
"""
from __future__ import annotations

import collections
import json
import logging
import math
from typing import Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsDict, AsList, AsSingleton

from lda_core.errors import InputError, LdaBeamError
from lda_core.storage.files import files_for
from pipelines.ingest import dataset, manifest as dataset_manifest
from pipelines.ingest.splits import doc_hash
from pipelines.ingest.vectorize_steps import NAMESPACE
from pipelines.ingest.vocabulary import record_to_vocabulary
from pipelines.runtime import paths

logger = logging.getLogger(__name__)

DOCS_PER_SHARD = 20000           # automatic shard count: ceil(documents / DOCS_PER_SHARD)
MAX_SHARDS = 100000
DEADLETTER_FILE = "deadletter.jsonl"

# A vectorised row travelling between transforms: numpy arrays as raw bytes (cheap to encode)
# (doc_id, title, label, word_ids int32 bytes, counts int32 bytes, n_tokens)
Row = Tuple[str, Optional[str], Optional[str], bytes, bytes, int]


def auto_num_shards(n_docs: int, requested: int = 0) -> int:
    if requested:
        return int(requested)
    return max(1, min(MAX_SHARDS, int(math.ceil(n_docs / float(DOCS_PER_SHARD)))))


def arrays_to_row(doc_id, title, label, word_ids: np.ndarray, counts: np.ndarray) -> Row:
    w = np.ascontiguousarray(word_ids, np.int32)
    c = np.ascontiguousarray(counts, np.int32)
    return (doc_id, title, label, w.tobytes(), c.tobytes(), int(c.sum()))


def rows_to_table(rows: Sequence[Row]):
    """Shard rows (already in output order) to an Arrow table with the shard schema."""
    import pyarrow as pa
    n = len(rows)
    lens = np.fromiter((len(r[3]) // 4 for r in rows), np.int64, count=n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    wid = np.frombuffer(b"".join(r[3] for r in rows), np.int32)
    cnt = np.frombuffer(b"".join(r[4] for r in rows), np.int32)
    off = pa.array(offsets, pa.int32())
    return pa.Table.from_arrays([
        pa.array([r[0] for r in rows], pa.string()),
        pa.array([r[1] for r in rows], pa.string()),
        pa.array([r[2] for r in rows], pa.string()),
        pa.ListArray.from_arrays(off, pa.array(wid, pa.int32())),
        pa.ListArray.from_arrays(off, pa.array(cnt, pa.int32())),
        pa.array([r[5] for r in rows], pa.int32()),
    ], schema=dataset.SHARD_SCHEMA)


def as_rows(element) -> List[Row]:
    """The rows of an element of a rows PCollection: a list of rows, or one row."""
    return element if isinstance(element, list) else [element]


def _key_by_split(element, holdout_fraction: float, seed: int):
    """Rows (a list, or one row) -> ``(split, [(order, row), ...])`` per split present."""
    by_split: Dict[str, list] = {}
    for row in as_rows(element):
        u, order = doc_hash(row[0], seed)
        split = dataset.HELDOUT_SPLIT if u < holdout_fraction else dataset.TRAIN_SPLIT
        by_split.setdefault(split, []).append((order, row))
    return sorted(by_split.items())


def _assign_shard(kv, split_counts, num_shards: int, heldout_shards: int):
    """``(split, [(order, row), ...])`` -> ``((split, index, n, total), [(order, row), ...])``
    per shard present; ``total`` is the number of rows of the split that reached the shard
    step, carried to every shard's manifest entry so that rows lost between here and the
    writer are found (:func:`check_shard_entries`)."""
    split, items = kv
    requested = num_shards if split == dataset.TRAIN_SPLIT else heldout_shards
    total = split_counts.get(split, 0)
    n = auto_num_shards(total, requested)
    by_shard: Dict[int, list] = {}
    for item in items:
        by_shard.setdefault(item[0] % n, []).append(item)
    return [((split, index, n, total), lst) for index, lst in sorted(by_shard.items())]


class _WriteShardFn(beam.DoFn):
    """``((split, index, n_shards, split_rows), [[(order, row), ...], ...])`` -> one Parquet
    shard, rows sorted by ``(order, doc_id)``; emits the shard's entry for the manifest.

    The shard's name depends only on its key and its content only on its rows, and it is
    written atomically: a retried or duplicated bundle rewrites the same file, never a part."""

    def __init__(self, output: str):
        self._output = output

    def process(self, kv, vocab_hash_value):
        (split, index, n, split_rows), pieces = kv
        items = sorted((it for piece in pieces for it in piece),
                       key=lambda it: (it[0], it[1][0]))
        rows = [r for _, r in items]
        table = rows_to_table(rows)
        name = dataset.shard_name(index, n)
        sha = dataset.write_shard(paths.join(self._output, split, name), table,
                                  vocab_hash_value)
        Metrics.counter(NAMESPACE, "shards_written").inc()
        yield {"split": split, "file": "%s/%s" % (split, name), "index": index, "n_shards": n,
               "split_rows": split_rows, "documents": len(rows),
               "tokens": int(sum(r[5] for r in rows)), "sha256": sha}


def write_vocabulary(record: dict, output: str) -> dict:
    vocab = record_to_vocabulary(record)
    vocab.write(paths.join(output, dataset.VOCAB_FILE))
    return {"size": len(vocab), "hash": vocab.hash, "num_docs": record.get("num_docs")}


def _write_deadletters(records: list, output: str) -> dict:
    records = sorted(records, key=lambda d: (str(d.get("source")), str(d.get("position")),
                                             str(d.get("error"))))
    files = []
    if records:
        path = paths.join(output, dataset.DEADLETTER_DIR, DEADLETTER_FILE)
        data = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n"
                       for r in records)
        paths.write_atomic(path, data.encode("utf-8"))
        files.append("%s/%s" % (dataset.DEADLETTER_DIR, DEADLETTER_FILE))
    return {"count": len(records), "files": files}


class LostDocumentsError(LdaBeamError, RuntimeError):
    """Documents were read but neither written nor counted as dropped: an internal error (the
    pipeline or its runner lost rows; nothing the user's input can cause or fix)."""


def check_accounted(counts, output: str, stats: Optional[dict] = None) -> None:
    """Refuse to publish a manifest when documents went missing between reading and writing.

    Every document read is kept, counted as dropped (empty, too short, empty after pruning) or
    dead-lettered; dead letters also count records that failed before they were read as
    documents, so they bound the identity from above. A shortfall means rows were lost on the
    way to the shards: the dataset is left without its manifest (so ``dataset_manifest.verify`` refuses
    it as incomplete) instead of being published short. ``stats`` (the summed per-bundle
    counts), when given, also locates a loss between the tokenizer and the vocabulary step
    (documents the tokenizer kept for the vocabulary vs documents that step received).
    """
    stats = stats or {}
    if "vocab_documents" in stats and "vocab_applied_documents" in stats and \
            stats["vocab_documents"] != stats["vocab_applied_documents"]:
        raise LostDocumentsError(
            "vectorize: %s: the tokenizer kept %d documents but %d reached the vocabulary step; "
            "rows were lost between them, so no manifest was published -- rerun the vectorize "
            "(into an empty --output)"
            % (output, stats["vocab_documents"], stats["vocab_applied_documents"]))
    accounted = (counts["documents_kept"] + counts["empty_documents"] + counts["too_short"]
                 + counts["empty_after_pruning"])
    read = counts["documents_read"]
    if accounted > read or read > accounted + counts["dead_letters"]:
        raise LostDocumentsError(
            "vectorize: %s: %d documents read but %d kept + %d dropped + at most %d dead letters; "
            "rows were lost before the shards were written, so no manifest was published -- "
            "rerun the vectorize (into an empty --output)"
            % (output, read, counts["documents_kept"], accounted - counts["documents_kept"],
               counts["dead_letters"]))


def check_shard_entries(splits: Dict[str, list], output: str) -> None:
    """Refuse shard entries that do not describe one complete set of shards per split: one
    shard count, each index once, and as many rows written as reached the shard step (a
    shortfall means rows were lost between the shard assignment and the writer)."""
    for split, lst in sorted(splits.items()):
        counts = {s["n_shards"] for s in lst}
        totals = {s["split_rows"] for s in lst if "split_rows" in s}
        seen = collections.Counter(s["index"] for s in lst)
        twice = sorted(i for i, c in seen.items() if c > 1)
        if len(counts) > 1 or len(totals) > 1 or twice:
            raise LostDocumentsError(
                "vectorize: %s: the %s shards disagree (shard counts %s, rows %s, indices "
                "written twice %s); no manifest was published -- rerun the vectorize (into an "
                "empty --output)" % (output, split, sorted(counts), sorted(totals), twice))
        written = sum(s["documents"] for s in lst)
        if totals and written != next(iter(totals)):
            raise LostDocumentsError(
                "vectorize: %s: %d %s rows reached the shard step but %d were written; rows "
                "were lost between the shard assignment and the writer, so no manifest was "
                "published -- rerun the vectorize (into an empty --output)"
                % (output, next(iter(totals)), split, written))


def nothing_kept_message(counts: dict, inputs: Sequence, output: str, dead: int) -> str:
    """The one line of a vectorize that kept no document (no manifest is published)."""
    return ("no document was kept from %s (%d read: %d empty, %d too short, %d empty after "
            "pruning, %d dead letters%s): there is nothing to train on and no dataset was "
            "published; check --input, --format and the pruning options, then run again%s"
            % (", ".join(str(i.get("path", i)) if isinstance(i, dict) else str(i)
                         for i in inputs), counts.get("documents_read", 0),
               counts.get("empty_documents", 0), counts.get("too_short", 0),
               counts.get("empty_after_pruning", 0), dead,
               " in %s/deadletter" % output if dead else "",
               " with --overwrite (the dead letters are kept until then)" if dead else ""))


def unpublish_empty(output: str, splits: Dict[str, list]) -> None:
    """Remove the empty shards and the vocabulary of a run that kept no document, so that
    nothing but its dead letters remains and a rerun needs no --overwrite when there are
    none."""
    files = files_for(output)
    for split in list(splits) + [dataset.TRAIN_SPLIT, dataset.HELDOUT_SPLIT]:
        folder = paths.join(output, split)
        if files.isdir(folder):
            files.remove_tree(folder)
    files.remove_file(paths.join(output, dataset.VOCAB_FILE))


def finish_manifest(_, stats, shards, vocab_info, dead_info, settings, output):
    """Write empty shards for indices that got no documents, check every shard against its
    entry (Parquet footer row count; sha256 on local disk) and that the documents add up,
    then write the manifest."""
    splits = {}
    for s in sorted(shards, key=lambda s: (s["split"], s["index"])):
        splits.setdefault(s["split"], []).append(s)
    check_shard_entries(splits, output)      # before an empty shard can replace a written one
    empty_table = rows_to_table([])
    for split, lst in splits.items():
        n = lst[0]["n_shards"]
        present = {s["index"] for s in lst}
        for i in range(n):
            if i not in present:
                name = dataset.shard_name(i, n)
                sha = dataset.write_shard(paths.join(output, split, name), empty_table,
                                          vocab_info["hash"])
                lst.append({"split": split, "file": "%s/%s" % (split, name), "index": i,
                            "n_shards": n, "documents": 0, "tokens": 0, "sha256": sha})
        lst.sort(key=lambda s: s["index"])
    split_info = {}
    for split in (dataset.TRAIN_SPLIT, dataset.HELDOUT_SPLIT):
        lst = splits.get(split, [])
        split_info[split] = {"documents": sum(s["documents"] for s in lst),
                             "tokens": sum(s["tokens"] for s in lst),
                             "shards": [{"file": s["file"], "documents": s["documents"],
                                         "tokens": s["tokens"], "sha256": s["sha256"]}
                                        for s in lst]}
    stats = dict(stats)
    settings = dict(settings)
    kept = sum(v["documents"] for v in split_info.values())
    counts = {
        "documents_read": stats.get("documents_read", 0),
        "documents_kept": kept,
        "train_documents": split_info[dataset.TRAIN_SPLIT]["documents"],
        "heldout_documents": split_info[dataset.HELDOUT_SPLIT]["documents"],
        "empty_documents": stats.get("empty_documents", 0),
        "too_short": stats.get("too_short", 0),
        "empty_after_pruning": stats.get("empty_after_pruning", 0),
        "skipped_pages": stats.get("skipped_pages", 0),
        "dead_letters": dead_info["count"],
        "oov_tokens_dropped": stats.get("oov_tokens_dropped", 0),
        "replaced_characters": stats.get("replaced_characters", 0),
        "empty_cjk_documents": stats.get("empty_cjk_documents", 0),
    }
    check_accounted(counts, output, stats)
    if not kept:
        unpublish_empty(output, splits)
        raise InputError(nothing_kept_message(counts, settings.get("_inputs") or [], output,
                                              dead_info["count"]))
    try:
        dataset_manifest.check_shard_listing(output, split_info,
                                    check_hashes=None,
                                    listing="the manifest being written")
    except ValueError as e:
        raise LostDocumentsError("vectorize: %s; no manifest was published" % e) from e
    manifest = {
        "tool": "ldabeam vectorize",
        "format_version": dataset.FORMAT_VERSION,
        "inputs": settings.pop("_inputs"),
        "input_summary": settings.pop("_input_summary"),
        "settings": settings,
        "counts": counts,
        "tokens": {"total": sum(v["tokens"] for v in split_info.values()),
                   dataset.TRAIN_SPLIT: split_info[dataset.TRAIN_SPLIT]["tokens"],
                   dataset.HELDOUT_SPLIT: split_info[dataset.HELDOUT_SPLIT]["tokens"]},
        "vocabulary": dict(vocab_info, file=dataset.VOCAB_FILE),
        "splits": dict(split_info, method="blake2b('<seed>:<doc_id>') < holdout_fraction",
                       holdout_fraction=settings["holdout_fraction"], seed=settings["seed"]),
        "deadletter": dead_info,
    }
    dataset_manifest.write_manifest(output, manifest)
    return manifest


class WriteShards(beam.PTransform):
    """Rows (elements: a row or a list of rows) -> Parquet shards under
    ``output/{train,heldout}``; emits one dict per shard."""

    def __init__(self, output: str, vocab_hash_value, holdout_fraction: float, seed: int,
                 num_shards: int = 0, heldout_shards: int = 0):
        super().__init__()
        self._output = output
        self._hash = vocab_hash_value
        self._fraction = holdout_fraction
        self._seed = seed
        self._num_shards = num_shards
        self._heldout_shards = heldout_shards

    def expand(self, rows):
        keyed = rows | "Split" >> beam.FlatMap(_key_by_split, self._fraction, self._seed)
        split_counts = (keyed | "SplitOnly" >> beam.Map(lambda kv: (kv[0], len(kv[1])))
                        | "CountSplits" >> beam.CombinePerKey(sum))
        return (keyed
                | "AssignShard" >> beam.FlatMap(_assign_shard, AsDict(split_counts),
                                                self._num_shards, self._heldout_shards)
                | "GroupShards" >> beam.GroupByKey()
                | "Write" >> beam.ParDo(_WriteShardFn(self._output), AsSingleton(self._hash)))


class WriteDeadLetters(beam.PTransform):
    def __init__(self, output: str):
        super().__init__()
        self._output = output

    def expand(self, dead):
        # the dead letters as a list side input of one impulse: a global ToList adds six steps
        return (dead.pipeline | "Once" >> beam.Impulse()
                | "Write" >> beam.Map(_write_gathered_deadletters, AsList(dead), self._output))


def _write_gathered_deadletters(_, records, output: str) -> dict:
    return _write_deadletters(records, output)
