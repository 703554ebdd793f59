"""The seeded minibatch order (lda_core.training.ordering) and its shard stream (pipelines.training.shard_stream)."""
import numpy as np
import pytest

from lda_core.training.ordering import locate_step, n_batches, plan_pass
from pipelines.ingest import dataset
from pipelines.training.shard_stream import ShardStream, gather, read_shard

from helpers.uci import kos_shards

SIZES = [7, 0, 13, 5, 31, 1]


def _members(plan):
    """(shard, row) pairs of every minibatch, in order."""
    return {b: [(s, int(r)) for s, rows in m for r in rows] for b, m in plan.describe().items()}


@pytest.mark.parametrize("S", [1, 4, 10, 57, 100])
def test_every_document_exactly_once_per_pass(S):
    D = sum(SIZES)
    for p in range(3):
        plan = plan_pass(SIZES, seed=5, pass_index=p, minibatch=S)
        mem = _members(plan)
        assert sorted(mem) == list(range(n_batches(D, S)))
        allpairs = [x for b in sorted(mem) for x in mem[b]]
        assert sorted(allpairs) == sorted((s, r) for s, n in enumerate(SIZES) for r in range(n))
        sizes = [len(mem[b]) for b in sorted(mem)]
        assert sizes == list(plan.batch_sizes())
        assert all(n == S for n in sizes[:-1]) and 1 <= sizes[-1] <= S  # only the last is short


def test_order_is_deterministic_and_seeded():
    a = _members(plan_pass(SIZES, 3, 0, 8))
    b = _members(plan_pass(SIZES, 3, 0, 8))
    assert a == b
    assert _members(plan_pass(SIZES, 4, 0, 8)) != a   # other seed
    assert _members(plan_pass(SIZES, 3, 1, 8)) != a   # other pass


def test_assign_agrees_with_membership_whatever_the_bundling():
    plan = plan_pass(SIZES, 11, 2, 6)
    mem = _members(plan)
    where = {pair: (b, i) for b, m in mem.items() for i, pair in enumerate(m)}
    rng = np.random.default_rng(0)
    for shard, n in enumerate(SIZES):
        rows = rng.permutation(n)
        # a "bundle" of arbitrary rows, in arbitrary order, split in two calls
        half = len(rows) // 2
        for part in (rows[:half], rows[half:]):
            b, pos = plan.assign(shard, part)
            for r, bb, pp in zip(part, b, pos):
                assert where[(shard, int(r))] == (bb, pp)
    for b in mem:
        assert plan.batch_members(b) and [(s, int(r)) for s, rows in plan.batch_members(b)
                                          for r in rows] == mem[b]


def test_locate_step_and_bad_input():
    assert n_batches(57, 10) == 6
    assert locate_step(0, 57, 10) == (0, 0)
    assert locate_step(5, 57, 10) == (0, 5)
    assert locate_step(6, 57, 10) == (1, 0)
    with pytest.raises(ValueError, match="minibatch"):
        plan_pass(SIZES, 0, 0, 0)
    with pytest.raises(ValueError, match="shard_sizes"):
        plan_pass([3, -1], 0, 0, 2)
    with pytest.raises(ValueError, match="seed"):
        plan_pass(SIZES, -1, 0, 2)


# ------------------------------------------------------------------ shard stream on real text

def test_stream_equals_plan_over_the_whole_corpus_in_memory(tmp_path, kos_paths):
    files, corpus, _ = kos_shards(tmp_path, kos_paths)
    # reading one shard at a time gives what the plan says over all shards held at once
    offsets = np.cumsum([0] + [len(read_shard(f)) for f in files])
    st = ShardStream(files, minibatch=64, seed=9, passes=2)
    got = list(st)
    assert len(got) == st.total_steps == 2 * 5
    for mb in got:
        plan = st.plan(mb.pass_index)
        rows = np.concatenate([offsets[s] + r for s, r in plan.batch_members(mb.batch_index)])
        ref = gather(corpus, rows)
        assert mb.batch.doc_ids == ref.doc_ids
        assert np.array_equal(mb.batch.indptr, ref.indptr)
        assert np.array_equal(mb.batch.word_ids, ref.word_ids)
        assert np.array_equal(mb.batch.counts, ref.counts)
        assert mb.step == mb.pass_index * st.batches_per_pass + mb.batch_index
    # each pass covers every document once
    for p in range(2):
        ids = [i for mb in got if mb.pass_index == p for i in mb.batch.doc_ids]
        assert sorted(ids) == sorted(corpus.doc_ids)
    # resuming at any step yields exactly the tail of the stream
    for k in (0, 3, 5, 7, 10):
        tail = list(st.iter_from(k))
        assert [m.step for m in tail] == [m.step for m in got[k:]]
        assert all(a.batch.doc_ids == b.batch.doc_ids for a, b in zip(tail, got[k:]))


def test_stream_order_does_not_depend_on_how_shards_are_cut(tmp_path, kos_paths):
    """The order depends on the shard row counts only: same sizes -> same minibatch (shard,
    row) membership; and a different shard layout still covers each document once."""
    files, corpus, _ = kos_shards(tmp_path, kos_paths)
    a = [m.batch.doc_ids for m in ShardStream(files, minibatch=50, seed=1)]
    b = [m.batch.doc_ids for m in ShardStream(list(files), minibatch=50, seed=1)]
    assert a == b
    assert sorted(x for ids in a for x in ids) == sorted(corpus.doc_ids)


def test_stream_checks_the_vocabulary_hash(tmp_path, kos_paths):
    files, _, _ = kos_shards(tmp_path, kos_paths)
    with pytest.raises(ValueError, match="other-hash"):
        ShardStream(files, minibatch=10, expected_vocab_hash="other-hash")
    odd = str(tmp_path / "shards" / "odd.parquet")
    dataset.write_shard(odd, dataset.docbatch_to_table(read_shard(files[0])), "kos-v2")
    with pytest.raises(ValueError, match="disagree"):
        ShardStream(files + [odd], minibatch=10)
    with pytest.raises(FileNotFoundError):
        ShardStream([], minibatch=10)
