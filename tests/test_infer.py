"""ldabeam infer: the Beam inference pipeline reproduces the trainer's γ (same kernel, state and
γ seeding), writes the documented Parquet columns, ignores and counts unknown words of raw
text, and refuses shards of another vocabulary before any work."""
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.algorithms.online_vb import OnlineVB
from lda_core.training.trainer import train
from pipelines.ingest import dataset
from lda_core.storage.vocab_file import Vocabulary
from pipelines.cli import main as cli_main
from pipelines.infer import InferOptions, infer, read_theta
from pipelines.ingest.tokenize import tokenize
from pipelines.ingest.vectorize import VectorizeOptions, vectorize

K = 6
S = 25


class RecordingVB(OnlineVB):
    """OnlineVB that keeps the γ its training E-steps computed (doc_id -> (step, γ_d))."""
    recorded = None

    def local_step(self, batch, **kw):
        if kw.get("salt", "gamma") != "gamma" or kw.get("return_gamma"):
            return super().local_step(batch, **kw)
        st = super().local_step(batch, return_gamma=True, **kw)
        for d, g in zip(st.gamma_doc_ids, st.gamma):
            self.recorded[d] = (self.step, np.array(g))
        st.gamma = None
        st.gamma_doc_ids = None
        return st


@pytest.fixture(scope="module")
def wiki_ds(wiki_sample, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("infer") / "wiki")
    vectorize(VectorizeOptions(inputs=[wiki_sample], output=out, holdout_fraction=0.1))
    return out


@pytest.fixture(scope="module")
def trained(wiki_ds, tmp_path_factory):
    """A model trained in process with a checkpoint after every step (all kept)."""
    model = str(tmp_path_factory.mktemp("infer") / "model")
    os.makedirs(model)
    shutil.copy(os.path.join(wiki_ds, dataset.VOCAB_FILE), model)
    vocab = Vocabulary.read(wiki_ds)
    docs = dataset.read_docbatch(dataset.resolve_shards(wiki_ds))
    batches = [docs.take(np.arange(i, min(i + S, docs.n_docs)))
               for i in range(0, docs.n_docs, S)]
    algo = RecordingVB(K, len(vocab), corpus_size=docs.n_docs, seed=3,
                       vocab_hash=vocab.hash)
    algo.recorded = {}
    train(algo, batches, checkpoint_store=CheckpointStore(model), checkpoint_every=1,
          progress=False)
    return model, docs, batches, algo.recorded


def test_infer_reproduces_trainer_gamma(trained, wiki_ds, tmp_path):
    model, docs, batches, recorded = trained
    t = 2                               # minibatch t (0-based) ran against the state of step t
    ckpt = CheckpointStore(model).path(t)
    out = str(tmp_path / "theta")
    s = infer(InferOptions(model=ckpt, shards=wiki_ds, output=out, gamma_seed="training",
                           write_gamma=True, batch_size=17),
              ["--direct_num_workers=2", "--direct_running_mode=multi_threading"])
    assert s["documents"] == docs.n_docs and s["step"] == t
    table = read_theta(out)
    gamma = dict(zip(table.column("doc_id").to_pylist(), table.column("gamma").to_pylist()))
    ids = batches[t].doc_ids
    assert len(ids) == S
    for d in ids:
        step, g = recorded[d]
        assert step == t
        # the same kernel, state and seeded γ⁰ -> the same bits, whatever the split
        np.testing.assert_array_equal(np.asarray(gamma[d]), g)
    # documents of other minibatches were trained at other steps: their γ differs
    other = batches[t + 1].doc_ids[0]
    assert not np.array_equal(np.asarray(gamma[other]), recorded[other][1])


def test_infer_columns_and_default_seed(trained, wiki_ds, tmp_path):
    model, docs, _, _ = trained
    out = str(tmp_path / "theta")
    rc = cli_main(["infer", "--model", model, "--shards", wiki_ds, "--output", out,
                   "--top-n", "2"])
    assert rc == 0
    files = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))
    assert files and pq.read_schema(os.path.join(out, files[0])).names == \
        ["doc_id", "title", "label", "theta", "top_topic", "top_topics", "n_tokens"]
    table = read_theta(out)
    assert table.num_rows == docs.n_docs
    assert str(table.schema.field("theta").type) == "list<element: float>"
    theta = np.array(table.column("theta").to_pylist(), np.float64)
    assert theta.shape == (docs.n_docs, K)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(table.column("top_topic").to_numpy(), theta.argmax(axis=1))
    tops = table.column("top_topics").to_pylist()
    assert all(len(t) == 2 and t[0]["weight"] >= t[1]["weight"] for t in tops)
    # same numbers as the algorithm's own infer() in this process (salt "infer")
    from lda_core.storage.checkpoint import CheckpointStore as CS
    algo = OnlineVB.from_state(CS(model).latest())
    order = np.argsort(np.asarray(docs.doc_ids, dtype=object), kind="stable")
    ref = algo.infer(docs)[order]
    np.testing.assert_allclose(theta, ref, atol=1e-6)
    titles = dict(zip(docs.doc_ids, docs.titles))
    assert table.column("title").to_pylist() == [titles[d] for d in
                                                 table.column("doc_id").to_pylist()]
    # a second run refuses to mix with the first one's files
    assert cli_main(["infer", "--model", model, "--shards", wiki_ds, "--output", out]) == 2


def test_raw_text_unknown_words_ignored_and_counted(trained, tmp_path):
    model, _, _, _ = trained
    vocab = Vocabulary.read(os.path.join(model, dataset.VOCAB_FILE))
    known = vocab.tokens[:40]
    lines = [" ".join(known[:10] + ["qwzxunknownone", "plokmijnunknown"]),
             " ".join(known[10:30] + ["qwzxunknownone"] * 3),
             "qwzxunknownone plokmijnunknown zzyzxunknown"]         # nothing known
    src = tmp_path / "docs.txt"
    src.write_text("\n".join(lines) + "\n")
    expected_oov = sum(1 for line in lines for tok in tokenize(line)
                       if tok not in vocab.index)
    assert expected_oov == 8
    out = str(tmp_path / "theta")
    s = infer(InferOptions(model=model, inputs=[str(src)], input_format="lines", output=out))
    assert s["documents_read"] == 3
    assert s["oov_tokens_dropped"] == expected_oov
    assert s["empty_after_vocabulary"] == 1
    assert s["documents"] == 2 and s["tokens"] == 30
    table = read_theta(out)
    assert table.num_rows == 2
    assert sorted(table.column("n_tokens").to_pylist()) == [10, 20]
    # the same documents given as shards of known words get the same θ
    algo = OnlineVB.from_state(CheckpointStore(model).latest())
    idx = vocab.index
    from lda_core.docbatch import DocBatch
    rows = []
    for line in lines[:2]:
        ids = sorted({idx[t] for t in tokenize(line) if t in idx})
        rows.append((ids, [1] * len(ids)))
    ids = table.column("doc_id").to_pylist()
    ref = algo.infer(DocBatch.from_rows(rows, doc_ids=ids))
    np.testing.assert_allclose(np.array(table.column("theta").to_pylist()), ref, atol=1e-6)


def test_vocabulary_mismatch_is_refused(trained, wiki_ds, tmp_path, capsys):
    model, docs, _, _ = trained
    bad = tmp_path / "bad"
    bad.mkdir()
    dataset.write_shard(str(bad / "part-00000-of-00001.parquet"),
                        dataset.docbatch_to_table(docs.take(np.arange(3))), "0" * 64)
    out = tmp_path / "theta"
    with pytest.raises(ValueError, match="vocabulary"):
        infer(InferOptions(model=model, shards=str(bad), output=str(out), unverified=True))
    assert not out.exists()          # nothing written before the check
    assert cli_main(["infer", "--model", model, "--shards", str(bad), "--output",
                     str(out), "--unverified"]) == 2
    err = capsys.readouterr().err
    assert "vocabulary 0000" in err and "nor one it grew from" in err
    with pytest.raises(ValueError, match="exactly one of --shards"):
        infer(InferOptions(model=model, output=str(out)))


def test_infer_scvb0_model_uses_its_own_infer(wiki_ds, tmp_path):
    """Algorithms without a VB E-step go through their ``infer`` (split-independent)."""
    from lda_core.algorithms.scvb0 import SCVB0
    m = str(tmp_path / "scvb0")
    assert cli_main(["train", "--shards", wiki_ds, "--output", m, "--topics", "5",
                     "--algorithm", "scvb0", "--minibatch", "30", "--passes", "1",
                     "--no-progress"]) == 0
    out = str(tmp_path / "theta")
    s = infer(InferOptions(model=m, shards=wiki_ds, output=out, batch_size=13))
    assert s["algorithm"] == "scvb0" and len(s["files"]) > 1
    table = read_theta(out)
    docs = dataset.read_docbatch(dataset.resolve_shards(wiki_ds))
    order = np.argsort(np.asarray(docs.doc_ids, dtype=object), kind="stable")
    ref = SCVB0.from_state(CheckpointStore(m).latest()).infer(docs)[order]
    np.testing.assert_allclose(np.array(table.column("theta").to_pylist()), ref, atol=1e-6)
