"""ldabeam.beam on the DirectRunner: RunInference(LdaModelHandler) gives the θ of
`ldabeam.load(...).transform` and of `ldabeam infer --input` (the acceptance test of the
library), InferTopics and Vectorize work on plain PCollections of records (Vectorize builds the
vocabulary `ldabeam vectorize` builds from the same records), and in a streaming pipeline
(TestStream) the handler switches to a newly published checkpoint."""
import json
import os

import numpy as np
import pytest

import apache_beam as beam
from apache_beam.ml.inference.base import ModelMetadata, RunInference
from apache_beam.testing.test_stream import TestStream as Stream  # not a pytest class
from apache_beam.testing.util import assert_that
from apache_beam.transforms import window

import ldabeam
from ldabeam.beam import (InferTopics, LdaModelHandler, Vectorize, checkpoint_pattern)
from pipelines.cli import main as cli_main
from pipelines.infer import read_theta
from pipelines.ingest import dataset
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest.vectorize import VectorizeOptions, vectorize
from pipelines.runtime.beam_options import pipeline_options
from helpers.models import copy_model
from helpers.news20 import news20_posts

K = 6


@pytest.fixture(scope="module")
def wiki_ds(wiki_sample, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("libbeam") / "wiki")
    vectorize(VectorizeOptions(inputs=[wiki_sample], output=out, holdout_fraction=0.1))
    return out


@pytest.fixture(scope="module")
def model(wiki_ds, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("libbeam") / "vb")
    assert cli_main(["train", "--shards", wiki_ds, "--output", out, "--topics", str(K),
                     "--algorithm", "online-vb", "--passes", "2", "--minibatch", "32",
                     "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def records(news20_tar):
    posts = news20_posts(news20_tar, "test", skip=100, limit=24)
    return [{"id": "post-%d" % i, "text": p.text} for i, p in enumerate(posts)]


def checked(fn):
    """An assert_that matcher that runs ``fn`` on the collected elements (a failure in
    ``fn`` fails the pipeline)."""
    def match(actual):
        fn(list(actual))
    return match


@pytest.mark.slow
def test_transform_infer_cli_and_run_inference_agree(model, records, tmp_path):
    ref = ldabeam.load(model).transform(records)
    src = tmp_path / "posts.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = str(tmp_path / "theta")
    assert cli_main(["infer", "--model", model, "--input", str(src), "--format", "jsonl",
                     "--output", out]) == 0
    t = read_theta(out)
    cli = dict(zip(t.column("doc_id").to_pylist(), np.array(t.column("theta").to_pylist())))
    ids = [r["id"] for r in records]
    assert sorted(cli) == sorted(ids)
    assert max(np.abs(cli[i] - ref[k]).max() for k, i in enumerate(ids)) <= 1e-5

    def check(results):
        assert len(results) == len(records)
        for r in results:
            k = ids.index(r.example["id"])
            assert r.inference.shape == (K,)
            assert np.abs(r.inference - ref[k]).max() <= 1e-5
            assert r.model_id.startswith(os.path.join(model, "checkpoints", "step-"))

    with beam.Pipeline(options=pipeline_options()) as p:
        res = (p | beam.Create(records)
               | RunInference(LdaModelHandler(model, max_batch_size=5)))
        assert_that(res, checked(check))


@pytest.mark.slow
def test_infer_topics_and_vectorize_on_plain_pcollections(model, records, tmp_path):
    m = ldabeam.load(model)
    ref = m.transform(records)
    ids = [r["id"] for r in records]
    texts = [r["text"] for r in records]
    ref_text = m.transform(texts)                 # no ids: keyed by content

    # `ldabeam vectorize` of the same records, with the same pruning
    src = tmp_path / "posts.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    ds = str(tmp_path / "ds")
    vectorize(VectorizeOptions(inputs=[str(src)], output=ds, format="jsonl", no_below=2,
                               no_above=0.8))
    cli_vocab = Vocabulary.read(ds)
    cli_docs = dataset.read_docbatch(dataset.resolve_shards(ds))
    cli_bags = {}
    for d in range(cli_docs.n_docs):
        a, b = cli_docs.indptr[d], cli_docs.indptr[d + 1]
        cli_bags[cli_docs.doc_ids[d]] = {cli_vocab.tokens[w]: int(c) for w, c in
                                         zip(cli_docs.word_ids[a:b], cli_docs.counts[a:b])}

    def check_records(rs):
        assert sorted(r["doc_id"] for r in rs) == sorted(ids)
        for r in rs:
            k = ids.index(r["doc_id"])
            assert np.abs(np.array(r["theta"]) - ref[k]).max() <= 1e-5
            assert r["top_topic"] == int(np.argmax(ref[k]))

    def check_texts(rs):
        got = np.array(sorted(r["theta"] for r in rs))
        np.testing.assert_allclose(got, np.array(sorted(ref_text.tolist())), atol=1e-5)

    def check_vocab(vs):
        assert len(vs) == 1
        assert sorted(vs[0]["tokens"]) == sorted(cli_vocab.tokens)
        assert vs[0]["num_docs"] == len(records)

    def check_rows(rows_and_vocab):
        rows = [r for r in rows_and_vocab if "word_ids" in r]
        vocab = [v for v in rows_and_vocab if "tokens" in v][0]["tokens"]
        assert {r["doc_id"]: {vocab[w]: c for w, c in zip(r["word_ids"], r["counts"])}
                for r in rows} == cli_bags

    with beam.Pipeline(options=pipeline_options()) as p:
        recs = p | "Records" >> beam.Create(records)
        assert_that(recs | "Infer" >> InferTopics(model), checked(check_records),
                    label="ThetaOfRecords")
        assert_that(p | "Texts" >> beam.Create(texts) | "InferTexts" >> InferTopics(model),
                    checked(check_texts), label="ThetaOfTexts")
        built = recs | "Build" >> Vectorize(no_below=2, no_above=0.8)
        assert_that(built.vocabulary, checked(check_vocab), label="Vocabulary")
        both = (built.rows, built.vocabulary) | beam.Flatten()
        assert_that(both, checked(check_rows), label="Rows")
        # the model's vocabulary and preprocessing: count rows InferTopics takes as they are
        with_model = recs | "WithModel" >> Vectorize(model)
        assert_that(with_model.rows | "InferRows" >> InferTopics(model),
                    checked(check_records), label="ThetaOfRows")


def test_vectorize_takes_vectorize_options_and_refuses_the_rest(model, records):
    """Vectorize's vocabulary options are ldabeam vectorize's (token_pattern, segmenter, ...
    included); an unknown one, or one given with a model (whose recorded preprocessing
    rules), is a UsageError naming it rather than silently ignored."""
    from lda_core.errors import UsageError
    with pytest.raises(UsageError, match="unknown option.*min_len"):
        Vectorize(min_len=3)
    with pytest.raises(UsageError, match="no_below apply only when the vocabulary is built"):
        Vectorize(model, no_below=2)

    def check_vocab(vs):
        tokens = vs[0]["tokens"]
        assert tokens and all(t.isalpha() and len(t) >= 7 for t in tokens), tokens[:20]

    with beam.Pipeline(options=pipeline_options()) as p:
        built = (p | beam.Create(records)
                 | Vectorize(no_below=1, no_above=1.0, token_pattern=r"[a-z]{7,}",
                             max_token_len=30))
        assert_that(built.vocabulary, checked(check_vocab), label="LongWords")


@pytest.mark.slow
def test_streaming_handler_switches_to_a_new_checkpoint(model, records, tmp_path):
    """The model metadata side input names a checkpoint published while the pipeline runs
    (its state.json, as WatchCheckpoints reports it): the documents after it get the new θ."""
    mdir = copy_model(model, tmp_path)
    m = ldabeam.load(mdir)
    first_ckpt = m.checkpoint
    before = m.transform(records)
    m.update(records, passes=2)
    new_ckpt = m.save(mdir)
    after = m.transform(records)
    assert np.abs(after - before).max() > 0.01
    new_state = os.path.join(new_ckpt, "state.json")
    import glob
    assert sorted(glob.glob(checkpoint_pattern(mdir))) == sorted(
        [os.path.join(first_ckpt, "state.json"), new_state])
    ids = [r["id"] for r in records]
    half = len(records) // 2
    stream = (Stream()
              .add_elements([window.TimestampedValue(
                  ModelMetadata(model_id="", model_name=""), 1)], tag="models")
              .add_elements([window.TimestampedValue(
                  ModelMetadata(model_id=new_state, model_name="new"), 21)], tag="models")
              .advance_watermark_to(50, tag="models")
              .add_elements([window.TimestampedValue(r, 10) for r in records[:half]],
                            tag="docs")
              .advance_watermark_to(20, tag="docs")
              .add_elements([window.TimestampedValue(r, 30) for r in records[half:]],
                            tag="docs")
              .advance_watermark_to_infinity(tag="docs")
              .advance_watermark_to_infinity(tag="models"))

    def check(results):
        assert len(results) == len(records)
        for r in results:
            k = ids.index(r.example["id"])
            if k < half:
                assert r.model_id == first_ckpt
                assert np.abs(r.inference - before[k]).max() <= 1e-5
            else:
                assert r.model_id == new_ckpt
                assert np.abs(r.inference - after[k]).max() <= 1e-5

    opts = pipeline_options(streaming=True)
    with beam.Pipeline(options=opts) as p:
        s = p | stream
        models = s["models"] | "ModelWindows" >> beam.WindowInto(window.FixedWindows(20))
        docs = s["docs"] | "DocWindows" >> beam.WindowInto(window.FixedWindows(20))
        res = docs | RunInference(LdaModelHandler(first_ckpt), model_metadata_pcoll=models)
        assert_that(res, checked(check))


def test_handler_refuses_a_missing_model_path():
    with pytest.raises(ldabeam.UsageError):
        LdaModelHandler("")


def test_infer_topics_carries_a_records_title_and_label(model, records):
    """Issue 30 item 6: InferTopics kept only ``doc_id`` of a record; the title and label of
    dict records (``title_field`` / ``label_field``) travel to its θ record."""
    recs = [dict(r, title="title %d" % i, label="group-%d" % (i % 3))
            for i, r in enumerate(records[:6])]
    want = {r["id"]: (r["title"], r["label"]) for r in recs}

    def check(rs):
        assert {r["doc_id"]: (r.get("title"), r.get("label")) for r in rs} == want

    with beam.Pipeline(options=pipeline_options()) as p:
        assert_that(p | beam.Create(recs) | InferTopics(model), checked(check))
