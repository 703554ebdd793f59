"""The preprocessing a model records travels into `ldabeam.load(...).transform` and
`LdaModelHandler`: learned phrases are re-applied (and change θ), and a model trained with a
custom tokenizer keeps its topics usable but refuses raw text until the tokenizer is given.
Real data: 20 Newsgroups posts (../shared/data)."""
import json

import numpy as np
import pytest

import apache_beam as beam
from apache_beam.ml.inference.base import RunInference
from apache_beam.testing.util import assert_that

import ldabeam
from ldabeam.beam import LdaModelHandler
from lda_core.errors import UsageError
from pipelines.cli import main as cli_main
from pipelines.infer import read_theta
from pipelines.ingest.tokenize import tokenize
from pipelines.runtime.beam_options import pipeline_options
from helpers.news20 import news20_posts


def split_words(text):
    """A custom tokenizer (module level, so Beam can pickle it by name)."""
    return [w for w in text.lower().split() if w.isalpha()]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def infer_cli(model, src, out):
    assert cli_main(["infer", "--model", model, "--input", src, "--output", out]) == 0
    t = read_theta(out)
    return dict(zip(t.column("doc_id").to_pylist(), np.array(t.column("theta").to_pylist())))


@pytest.fixture(scope="module")
def posts(news20_tar):
    return [{"id": "p%d" % i, "text": t} for i, t in enumerate(p.text for p in news20_posts(news20_tar, "test", limit=400))]


@pytest.mark.slow
def test_transform_reapplies_learned_phrases(posts, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", posts[:340])
    ds, model = str(tmp_path / "ds"), str(tmp_path / "model")
    assert cli_main(["vectorize", "--input", train, "--output", ds, "--phrases",
                     "--phrases-min-count", "3", "--stopwords", "gensim", "--no-below", "2"]) == 0
    assert cli_main(["train", "--shards", ds, "--output", model, "--topics", "6",
                     "--algorithm", "online-vb", "--minibatch", "60", "--passes", "1",
                     "--no-progress"]) == 0
    new = posts[340:]
    m = ldabeam.load(model)
    assert any("_" in w for w in m.vocabulary)                 # phrase words were kept
    theta = m.transform(new)
    cli = infer_cli(model, write_jsonl(tmp_path / "new.jsonl", new), str(tmp_path / "th"))
    assert len(cli) > 40
    assert max(np.abs(cli[r["id"]] - theta[i]).max()
               for i, r in enumerate(new) if r["id"] in cli) <= 1e-5
    # the same texts without the phrases (the plain tokenizer, stop words out): other θ
    from gensim.parsing.preprocessing import STOPWORDS
    plain = [[t for t in tokenize(r["text"]) if t not in STOPWORDS] for r in new]
    bare = m.transform(plain, ids=[r["id"] for r in new])
    assert np.abs(bare - theta).max() > 0.02

    ids = [r["id"] for r in new]

    def check(results):
        for r in results:
            k = ids.index(r.example["id"])
            assert np.abs(r.inference - theta[k]).max() <= 1e-5

    with beam.Pipeline(options=pipeline_options()) as p:
        res = p | beam.Create(new) | RunInference(LdaModelHandler(model))
        assert_that(res, lambda rs: check(list(rs)))


@pytest.mark.slow
def test_custom_tokenizer_model_needs_its_tokenizer_for_raw_text(posts, tmp_path):
    from pipelines.ingest.vectorize import VectorizeOptions, vectorize
    src = write_jsonl(tmp_path / "posts.jsonl", posts[:200])
    ds, model = str(tmp_path / "ds"), str(tmp_path / "model")
    vectorize(VectorizeOptions(inputs=[src], output=ds, no_below=2, tokenizer=split_words))
    assert cli_main(["train", "--shards", ds, "--output", model, "--topics", "4",
                     "--algorithm", "online-vb", "--passes", "1", "--no-progress"]) == 0
    m = ldabeam.load(model)
    assert len(m.top_words(5)) == 4                             # the topics stay usable
    texts = [r["text"] for r in posts[200:230]]
    with pytest.raises(UsageError, match="split_words"):
        m.transform(texts)
    ok = ldabeam.load(model, tokenizer=split_words)
    theta = ok.transform(posts[200:230])
    np.testing.assert_array_equal(
        theta, ok.transform([split_words(t) for t in texts], ids=[r["id"] for r in posts[200:230]]))
    from pipelines.infer import InferOptions, infer
    src2 = write_jsonl(tmp_path / "new.jsonl", posts[200:230])
    out = str(tmp_path / "th")
    infer(InferOptions(model=model, inputs=[src2], output=out, tokenizer=split_words))
    t = read_theta(out)
    cli = dict(zip(t.column("doc_id").to_pylist(), np.array(t.column("theta").to_pylist())))
    assert max(np.abs(cli[r["id"]] - theta[i]).max()
               for i, r in enumerate(posts[200:230]) if r["id"] in cli) <= 1e-5
