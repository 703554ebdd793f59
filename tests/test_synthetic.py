"""The synthetic corpus generator (pipelines.ingest.synthetic): seeded, independent of sharding, the
LDA generative model's statistics, planted topics recoverable, a dataset the trainer reads."""
import argparse
import os

import numpy as np
import pytest

from lda_core.docbatch import DocBatch
from pipelines.ingest import dataset, synthetic
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest.synthetic import SyntheticSpec


def _small(**kw):
    base = dict(n_docs=2500, n_words=300, n_topics=5, doc_length=60.0, alpha=0.1, eta=0.05,
                seed=7)
    base.update(kw)
    return SyntheticSpec(**base)


def _same(a: DocBatch, b: DocBatch):
    assert a.doc_ids == b.doc_ids
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.word_ids, b.word_ids)
    np.testing.assert_array_equal(a.counts, b.counts)


def test_seeded_and_chunk_independent():
    spec = _small()
    whole = synthetic.generate(spec)
    _same(whole, synthetic.generate(spec))
    assert whole.n_docs == 2500 and spec.n_chunks == 3
    # chunk 2 generated alone equals the tail of the whole corpus
    alone = synthetic.generate_chunk(spec, 2)
    tail = whole.take(np.arange(2000, 2500))
    _same(alone, tail)
    other = synthetic.generate(_small(seed=8))
    assert not np.array_equal(other.word_ids[:100], whole.word_ids[:100])


def test_documents_are_valid_bags_with_the_model_statistics():
    spec = _small(n_docs=3000, doc_length=80.0)
    b = synthetic.generate(spec)
    assert b.word_ids.min() >= 0 and b.word_ids.max() < spec.n_words
    for i in range(0, b.n_docs, 97):
        w, c = b.doc(i)
        assert np.all(np.diff(w) > 0) and np.all(c > 0)
    lens = b.doc_lengths
    assert lens.min() >= 1
    # N_d ~ Poisson(80): mean within 3 standard errors, variance close to the mean
    assert abs(lens.mean() - 80.0) < 3 * np.sqrt(80.0 / b.n_docs)
    assert 0.8 < lens.var() / 80.0 < 1.2
    # corpus word frequencies ~ the mixture of planted topics weighted by E[θ] = 1/K
    beta = synthetic.planted_topics(spec)
    freq = np.bincount(b.word_ids, weights=b.counts, minlength=spec.n_words)
    freq /= freq.sum()
    expected = beta.mean(axis=0)
    top = np.argsort(-expected)[:20]
    assert np.corrcoef(freq[top], expected[top])[0, 1] > 0.9
    # labels are the argmax planted topic of each document
    assert set(b.labels) <= {str(k) for k in range(spec.n_topics)}


def test_write_dataset_does_not_depend_on_sharding(tmp_path):
    spec = _small(n_docs=2300)
    m1 = synthetic.write_dataset(spec, str(tmp_path / "a"), docs_per_shard=700,
                                 heldout_docs=300)
    m2 = synthetic.write_dataset(spec, str(tmp_path / "b"), docs_per_shard=5000,
                                 heldout_docs=300)
    fa = dataset.resolve_shards(str(tmp_path / "a"))
    fb = dataset.resolve_shards(str(tmp_path / "b"))
    assert len(fa) == 3 and len(fb) == 1
    _same(dataset.read_docbatch(fa), dataset.read_docbatch(fb))
    ha = dataset.read_docbatch(dataset.resolve_shards(str(tmp_path / "a"), split="heldout"))
    assert ha.n_docs == 300 and ha.doc_ids[0] == synthetic.doc_id(2000)
    vh = dataset.check_vocab_hash(fa + fb, None)
    assert vh == m1["vocabulary"]["hash"] == m2["vocabulary"]["hash"]
    assert Vocabulary.read(str(tmp_path / "a")).hash == vh
    beta = np.load(str(tmp_path / "a" / synthetic.PLANTED_TOPICS_FILE), allow_pickle=False)
    np.testing.assert_array_equal(beta, synthetic.planted_topics(spec))
    assert m1["counts"]["train_documents"] == 2000
    assert m1["tokens"]["total"] == m1["tokens"]["train"] + m1["tokens"]["heldout"]
    with pytest.raises(ValueError, match="already holds a dataset"):
        synthetic.write_dataset(spec, str(tmp_path / "a"))


@pytest.mark.parametrize("kw,match", [
    (dict(n_docs=0), "n_docs=0"), (dict(n_words=1), "n_words=1"),
    (dict(n_topics=0), "n_topics=0"), (dict(doc_length=0.5), "doc_length=0.5"),
    (dict(alpha=-1.0), "alpha=-1.0"), (dict(eta=float("nan")), "eta=nan"),
    (dict(seed=-1), "seed=-1"), (dict(n_docs=True), "n_docs=True"),
])
def test_bad_parameters_name_themselves(kw, match):
    with pytest.raises(ValueError, match=match):
        synthetic.planted_topics(_small(**kw))


def test_online_vb_recovers_planted_topics(tmp_path):
    """Planted topics are recovered by the in-process trainer reading the written dataset."""
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.training.trainer import train
    from pipelines.training.shard_stream import ShardStream
    spec = _small(n_docs=3000, doc_length=100.0)
    synthetic.write_dataset(spec, str(tmp_path / "ds"), docs_per_shard=1000)
    files = dataset.resolve_shards(str(tmp_path / "ds"))
    stream = ShardStream(files, minibatch=100, seed=0, passes=3)
    algo = OnlineVB(5, spec.n_words, alpha=0.1, eta=0.05, corpus_size=stream.n_docs, seed=0)
    train(algo, stream, progress=False)
    phi = algo.topic_word()
    beta = synthetic.planted_topics(spec)
    # Hellinger distance of each planted topic to its nearest learned topic
    h = np.sqrt(0.5 * ((np.sqrt(beta)[:, None, :] - np.sqrt(phi)[None, :, :]) ** 2).sum(-1))
    assert h.min(axis=1).max() < 0.2, h.min(axis=1)
    assert sorted(h.argmin(axis=1).tolist()) == list(range(5))   # one learned topic each


def test_synth_command_writes_a_dataset_the_trainer_reads(tmp_path, capsys):
    from pipelines.cli import main
    from pipelines.commands import synth
    p = argparse.ArgumentParser()
    synth.add_arguments(p)
    out = str(tmp_path / "ds")
    args, rest = p.parse_known_args(["--output", out, "--docs", "600", "--words", "120",
                                     "--topics", "4", "--doc-length", "40",
                                     "--heldout-docs", "100"])
    assert synth.run(args, rest) == 0
    assert "D=600 (train 500, heldout 100)" in capsys.readouterr().out
    assert main(["train", "--shards", out, "--output", str(tmp_path / "m"), "--topics", "4",
                 "--algorithm", "online-vb", "--minibatch", "100", "--no-progress"]) == 0
    assert os.path.isdir(str(tmp_path / "m" / "checkpoints"))
    args, rest = p.parse_known_args(["--output", out])
    with pytest.raises(ValueError, match="--docs D is required"):
        synth.run(args, rest)
