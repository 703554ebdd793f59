"""What ``vectorize`` checks before it publishes a manifest, and the per-bundle state of its
DoFns: shards built from real 20 Newsgroups posts by calling the shard step's functions and
DoFns directly (so a runner's misbehaviour -- a shard key grouped twice, a group's rows cut
short, an entry that never arrives, a bundle retried on the same DoFn instance -- can be
staged exactly), then :func:`vectorize_output.finish_manifest`."""
import os
import tarfile

import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.pvalue import TaggedOutput

from pipelines.ingest import dataset
from pipelines.ingest import manifest
from pipelines.runtime import paths
from pipelines.ingest import vectorize_output as vzo
from pipelines.ingest import vectorize_steps as vzs
from pipelines.ingest.tokenize import TokenizerConfig, count_batch

N_POSTS = 120
N_SHARDS = 3
VOCAB_HASH = "h" * 64


def _posts(news20_tar, n=N_POSTS):
    out = []
    with tarfile.open(news20_tar, "r:gz") as tar:
        for m in tar:
            if m.isfile():
                out.append((m.name, m.name.split("/")[-2],
                            tar.extractfile(m).read().decode("latin-1")))
                if len(out) == n:
                    break
    return out


@pytest.fixture(scope="module")
def rows(news20_tar):
    """Shard rows of the first posts, ids in the batch's own vocabulary."""
    posts = _posts(news20_tar)
    bc = count_batch([t for _, _, t in posts], TokenizerConfig())
    metas = [(0, i, doc_id, None, label) for i, (doc_id, label, _) in enumerate(posts)]
    index = vzs.vocabulary_lookup(bc.tokens.to_pylist())
    out, dropped, empty = vzs.counts_to_rows(metas, bc, index)
    assert dropped == 0 and len(out) + empty == len(posts)
    return out


def _groups(rows):
    """The shard step up to the grouping: ``{key: [(order, row), ...]}``."""
    keyed = vzo._key_by_split(rows, 0.0, 0)
    counts = {split: len(items) for split, items in keyed}
    groups = {}
    for kv in keyed:
        for key, lst in vzo._assign_shard(kv, counts, N_SHARDS, 0):
            groups.setdefault(key, []).extend(lst)
    return groups


def _write(out, key, items):
    return list(vzo._WriteShardFn(str(out)).process((key, [items]), VOCAB_HASH))[0]


def _finish(out, entries, documents_read):
    settings = {"_inputs": [], "_input_summary": {}, "holdout_fraction": 0.0, "seed": 0}
    return vzo.finish_manifest(None, {"documents_read": documents_read}, entries,
                               {"size": 1, "hash": VOCAB_HASH, "num_docs": documents_read},
                               {"count": 0, "files": []}, settings, str(out))


def _has_manifest(out):
    return os.path.exists(os.path.join(str(out), dataset.MANIFEST_FILE))


def test_consistent_shards_are_published_and_verify(rows, tmp_path):
    entries = [_write(tmp_path, k, v) for k, v in sorted(_groups(rows).items())]
    m = _finish(tmp_path, entries, len(rows))
    assert m["counts"]["documents_kept"] == len(rows)
    assert len(m["splits"]["train"]["shards"]) == N_SHARDS
    assert manifest.verify(str(tmp_path)) == {"shards": N_SHARDS, "documents": len(rows)}


def test_a_key_grouped_twice_is_refused_not_published_short(rows, tmp_path):
    """Two groups for one shard key (each with part of its rows) write the same file, the
    second replacing the first: the entries still add up to every document, the file does
    not. No manifest may be published."""
    groups = _groups(rows)
    key = sorted(groups)[0]
    items = groups.pop(key)
    half = len(items) // 2
    entries = [_write(tmp_path, k, v) for k, v in sorted(groups.items())]
    entries += [_write(tmp_path, key, items[:half]), _write(tmp_path, key, items[half:])]
    assert sum(e["documents"] for e in entries) == len(rows)
    with pytest.raises(vzo.LostDocumentsError, match="indices written twice"):
        _finish(tmp_path, entries, len(rows))
    assert not _has_manifest(tmp_path)


def test_a_shard_file_that_disagrees_with_its_entry_is_refused(rows, tmp_path):
    """The file on disk is what a reader gets: a shard holding fewer rows than its entry
    (replaced after it was written) stops the manifest."""
    groups = _groups(rows)
    entries = [_write(tmp_path, k, v) for k, v in sorted(groups.items())]
    key = sorted(groups)[1]
    path = os.path.join(str(tmp_path), entries[1]["file"])
    short = [r for _, r in sorted(groups[key], key=lambda it: (it[0], it[1][0]))][:-3]
    dataset.write_shard(path, vzo.rows_to_table(short), VOCAB_HASH)
    with pytest.raises(vzo.LostDocumentsError, match="holds %d documents but the manifest "
                       "being written says %d" % (len(short), len(short) + 3)):
        _finish(tmp_path, entries, len(rows))
    assert not _has_manifest(tmp_path)


def test_a_shard_with_the_same_row_count_but_other_rows_is_refused(rows, tmp_path):
    groups = _groups(rows)
    entries = [_write(tmp_path, k, v) for k, v in sorted(groups.items())]
    path = os.path.join(str(tmp_path), entries[0]["file"])
    t = pq.read_table(path)
    changed = t.set_column(5, "n_tokens", [np.asarray(t.column("n_tokens")) + 1])
    paths.write_atomic(path, dataset.table_bytes(changed, VOCAB_HASH))
    with pytest.raises(vzo.LostDocumentsError, match="sha256 mismatch"):
        _finish(tmp_path, entries, len(rows))


def test_rows_lost_between_the_shard_assignment_and_the_writer_are_named(rows, tmp_path):
    groups = _groups(rows)
    key = sorted(groups)[2]
    groups[key] = groups[key][:-5]
    entries = [_write(tmp_path, k, v) for k, v in sorted(groups.items())]
    with pytest.raises(vzo.LostDocumentsError,
                       match="%d train rows reached the shard step but %d were written"
                       % (len(rows), len(rows) - 5)):
        _finish(tmp_path, entries, len(rows))
    assert not _has_manifest(tmp_path)


def test_a_written_shard_whose_entry_is_missing_is_not_overwritten(rows, tmp_path):
    """finish_manifest writes empty shards for indices that got no rows; a shard that was
    written but whose entry never arrived must not be replaced by an empty one."""
    entries = [_write(tmp_path, k, v) for k, v in sorted(_groups(rows).items())]
    lost = entries.pop(1)
    path = os.path.join(str(tmp_path), lost["file"])
    with pytest.raises(vzo.LostDocumentsError, match="rows were lost between the shard "
                       "assignment and the writer"):
        _finish(tmp_path, entries, len(rows))
    assert pq.ParquetFile(path).metadata.num_rows == lost["documents"] > 0
    assert not _has_manifest(tmp_path)


def test_documents_lost_before_the_vocabulary_step_are_named(tmp_path):
    counts = {"documents_read": 10, "documents_kept": 9, "empty_documents": 0, "too_short": 0,
              "empty_after_pruning": 0, "dead_letters": 0}
    with pytest.raises(vzo.LostDocumentsError,
                       match="kept 10 documents but 9 reached the vocabulary step"):
        vzo.check_accounted(counts, str(tmp_path),
                            {"vocab_documents": 10, "vocab_applied_documents": 9})


def _tokenized_batch(posts):
    fn = vzs._TokenizeFn(TokenizerConfig(), {0: 1})
    fn.start_bundle()
    items = [("doc", 0, i, d, None, lab, text) for i, (d, lab, text) in enumerate(posts)]
    main = [o for o in fn.process(("batch", items)) if not isinstance(o, TaggedOutput)]
    return main[0]


def test_apply_vocabulary_uses_the_side_input_it_is_given(news20_tar, monkeypatch):
    """A new side-input value must be used even when it lands at the address of the value
    before: the runner keeps no reference to a side-input value between bundles, and ``id()``
    of a freed object is handed on (made certain here by giving every object one id)."""
    monkeypatch.setattr(vzs, "id", lambda obj: 0, raising=False)
    element = _tokenized_batch(_posts(news20_tar, 20))
    tokens = sorted(set(vzs.unpacked_batch(element)[1].tokens.to_pylist()))
    doc0 = [t for t, _ in next(vzs.tokenized_docs(element))[-1]]
    fn = vzs._ApplyVocabularyFn()
    fn.start_bundle()
    for shift in range(4):
        shifted = tokens[shift:] + tokens[:shift]
        index = {t: j for j, t in enumerate(shifted)}
        rows = [r for out in fn.process(element, vzs.packed_vocabulary({"tokens": shifted}))
                for r in out]
        assert np.frombuffer(rows[0][3], np.int32).tolist() == sorted(index[t] for t in doc0)


def _finished(fn):
    """``(stats dict, vocabulary statistics as plain values)`` of ``fn.finish_bundle()``."""
    stats, vocab = {}, []
    for o in fn.finish_bundle():
        if o.tag == vzs.STATS:
            k, v = o.value.value
            stats[k] = v
        else:
            part, (tokens, df, cf, first) = o.value.value
            vocab.append((part, tokens.to_pylist(), df, cf, first))
    return stats, sorted(vocab)


def test_a_retried_bundle_on_the_same_instance_counts_once(news20_tar):
    """A bundle that failed half way is retried on the same DoFn instance: its per-bundle
    counts and vocabulary statistics restart, so the retry emits what a clean bundle emits."""
    posts = _posts(news20_tar, 30)
    items = [("doc", 0, i, d, None, lab, text) for i, (d, lab, text) in enumerate(posts)]
    clean = vzs._TokenizeFn(TokenizerConfig(), {0: 1})
    clean.start_bundle()
    list(clean.process(("batch", items[:15])))
    list(clean.process(("batch", items[15:])))
    expected = _finished(clean)
    assert expected[0]["documents_read"] == len(posts)
    assert expected[0]["vocab_documents"] > 0 and expected[1]

    fn = vzs._TokenizeFn(TokenizerConfig(), {0: 1})
    fn.start_bundle()
    list(fn.process(("batch", items[:10])))          # the failed attempt: never finished
    fn.start_bundle()
    list(fn.process(("batch", items[:15])))
    list(fn.process(("batch", items[15:])))
    assert _finished(fn) == expected
    fn.start_bundle()
    assert _finished(fn) == ({}, [])                 # an empty bundle emits nothing
