"""The minibatch read path (shard -> ``DocBatch.take`` / ``concat`` -> minibatch) gives, bit for
bit, the minibatches of a per-document reference built straight from the Parquet rows, on a
slice of a real corpus (KOS) and on the bundled Wikipedia sample; both trainers' readers
(``ShardStream`` in-process, ``beam_plan.read_task`` on Beam) agree."""
import numpy as np
import pyarrow.parquet as pq
import pytest

from lda_core.docbatch import DocBatch
from pipelines.ingest import dataset
from pipelines.training import beam_plan
from pipelines.training.shard_stream import ShardStream, read_shard
from helpers.uci import uci_docbatch


def _reference_rows(files):
    """{(shard, row): (doc_id, word_ids, counts)} read row by row from the Parquet files."""
    out = {}
    for s, f in enumerate(files):
        t = pq.read_table(f, columns=["doc_id", "word_ids", "counts"]).to_pylist()
        for r, rec in enumerate(t):
            out[(s, r)] = rec
    return out


def _reference_batch(ref, members):
    recs = [ref[(s, int(r))] for s, rows in members for r in rows]
    return DocBatch.from_rows([(x["word_ids"], x["counts"]) for x in recs],
                              doc_ids=[x["doc_id"] for x in recs])


def _same(a: DocBatch, b: DocBatch):
    assert a.doc_ids == b.doc_ids and type(a.doc_ids) is tuple
    for name in ("indptr", "word_ids", "counts"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.flags["C_CONTIGUOUS"], name
        assert np.array_equal(x, y), name
    # what take/concat built unchecked passes every check of the constructor
    DocBatch(a.doc_ids, a.indptr, a.word_ids, a.counts, titles=a.titles, labels=a.labels)


def _check_readers(files, minibatch, seed, passes=2, pieces=3):
    ref = _reference_rows(files)
    st = ShardStream(files, minibatch=minibatch, seed=seed, passes=passes)
    got = list(st)
    assert len(got) == st.total_steps
    plans = beam_plan.plan_steps(files, st.shard_sizes, seed=seed, minibatch=minibatch,
                                 start=0, stop=st.total_steps, pieces_per_minibatch=pieces)
    for mb, sp in zip(got, plans):
        members = st.plan(mb.pass_index).batch_members(mb.batch_index)
        want = _reference_batch(ref, members)
        _same(mb.batch, want)
        # the Beam reader: the pieces of the same minibatch, concatenated in piece order
        parts = [beam_plan.read_task(t) for t in sp.tasks]
        _same(DocBatch.concat(parts), want)
    return got


def test_minibatches_bit_identical_on_a_kos_slice(tmp_path, kos_paths):
    batch, _ = uci_docbatch(kos_paths[0], 600, prefix="kos-")
    files, s = [], 0
    for i, n in enumerate((250, 0, 120, 230)):       # an empty shard too
        p = str(tmp_path / dataset.shard_name(i, 4))
        dataset.write_shard(p, dataset.docbatch_to_table(batch.take(np.arange(s, s + n))),
                            "kos-v1")
        files.append(p)
        s += n
    got = _check_readers(files, minibatch=96, seed=4)
    ids = sorted(i for mb in got if mb.pass_index == 0 for i in mb.batch.doc_ids)
    assert ids == sorted(batch.doc_ids)


@pytest.fixture(scope="module")
def wiki_files(wiki_sample, tmp_path_factory):
    from pipelines.ingest.vectorize import VectorizeOptions, vectorize
    out = str(tmp_path_factory.mktemp("shard_read") / "wiki")
    vectorize(VectorizeOptions(inputs=[wiki_sample], output=out, num_shards=3))
    return dataset.resolve_shards(out)


def test_minibatches_bit_identical_on_the_wiki_sample(wiki_files):
    assert len(wiki_files) == 3
    _check_readers(wiki_files, minibatch=50, seed=1)


def test_take_is_the_per_document_take(wiki_files):
    shard = read_shard(wiki_files[0], ("doc_id", "title", "label", "word_ids", "counts"))
    n = shard.n_docs
    rng = np.random.default_rng(0)
    for idx in (rng.permutation(n), rng.integers(0, n, 17), [3], [], [-1, 0, -n],
                range(2, 9)):
        got = shard.take(idx)
        pos = [i % n for i in idx]
        want = DocBatch.from_rows([shard.doc(i) for i in pos],
                                  doc_ids=[shard.doc_ids[i] for i in pos],
                                  titles=[shard.titles[i] for i in pos],
                                  labels=[shard.labels[i] for i in pos])
        _same(got, want)
        assert got.titles == want.titles and got.labels == want.labels
    with pytest.raises(IndexError, match="out of range"):
        shard.take([n])
    with pytest.raises(IndexError, match="out of range"):
        shard.take([-n - 1])
