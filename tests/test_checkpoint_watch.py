"""RunInference switching to each checkpoint a training run publishes, on the DirectRunner
(issue 30, item 5): ``LdaModelHandler(MODEL_DIR, watch=0)`` looks at ``LATEST`` before each
batch and loads a checkpoint it has not seen.

End to end: a model trained for 2 steps; a Beam pipeline (DirectRunner, batch) whose documents
each wait, before they reach RunInference, for ``ldabeam train --resume --max-steps N`` to
publish the next checkpoint in another process (the pacing makes the interleaving certain);
each document's θ is the θ of the checkpoint its result names, which is the one published
for it or a later one (Beam's batching may hold a document until the next arrives), and the
pipeline switches at least len(docs) - 1 times.

Model: online VB on the bundled Wikipedia sample; documents: 20 Newsgroups test posts."""
import subprocess
import sys

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.ml.inference.base import RunInference
from apache_beam.testing.util import assert_that

import ldabeam
from helpers.news20 import news20_posts
from lda_core.errors import UsageError
from lda_core.storage.checkpoint import CheckpointStore
from ldabeam.beam import LdaModelHandler
from pipelines.cli import main as cli
from pipelines.ingest.vectorize import VectorizeOptions, vectorize
from pipelines.runtime.beam_options import pipeline_options

FIRST = 2        # steps before the pipeline starts
KEEP = ["--checkpoint-every", "1", "--keep-checkpoints", "0", "--no-progress"]
TRAIN = ["--topics", "4", "--algorithm", "online-vb", "--passes", "3", "--minibatch", "32",
         "--seed", "2"] + KEEP


@pytest.fixture(scope="module")
def trained(wiki_sample, tmp_path_factory):
    work = tmp_path_factory.mktemp("watch")
    ds = str(work / "wiki")
    vectorize(VectorizeOptions(inputs=[wiki_sample], output=ds, holdout_fraction=0.0))
    return {"ds": ds, "work": work}


def publish_step(element, ds, model_dir):
    """Before the document ``(i, record)`` goes on: the training run continues to step
    FIRST + i + 1 in its own process, publishing that step's checkpoint."""
    i, record = element
    subprocess.run([sys.executable, "-m", "pipelines.cli", "train", "--shards", ds, "--output",
                    model_dir, "--resume", "--max-steps", str(FIRST + i + 1)] + KEEP,
                   check=True, capture_output=True)
    return record


@pytest.mark.serial      # a training command runs beside the pipeline
def test_run_inference_switches_to_each_published_checkpoint(trained, news20_tar, tmp_path):
    model_dir = str(tmp_path / "model")
    assert cli(["train", "--shards", trained["ds"], "--output", model_dir, "--max-steps",
                str(FIRST)] + TRAIN) == 0
    first = ldabeam.load(model_dir).checkpoint
    posts = news20_posts(news20_tar, "test", every=50, limit=4)
    docs = [(i, {"id": "post-%d" % i, "text": p.body}) for i, p in enumerate(posts)]

    def check(results):
        assert len(results) == len(docs)
        used = {}
        for r in results:
            used.setdefault(r.model_id, []).append(r)
            # document i went on once step FIRST + i + 1 was published: its batch (Beam may
            # hold it until the next document) used that checkpoint or a later one
            i = int(r.example["id"].split("-")[1])
            assert int(r.model_id.rstrip("/").rsplit("-", 1)[-1]) >= FIRST + i + 1, (
                i, r.model_id)
        assert first not in used and len(used) >= len(docs) - 1, sorted(used)
        for ckpt, rs in used.items():
            m = ldabeam.load(ckpt)
            theta = m.transform([r.example for r in rs])
            np.testing.assert_allclose(np.stack([r.inference for r in rs]), theta, atol=1e-6)

    handler = LdaModelHandler(model_dir, watch=0, max_batch_size=1)
    with beam.Pipeline(options=pipeline_options()) as p:
        res = (p | beam.Create(docs, reshuffle=False)
               | "Train a step" >> beam.Map(publish_step, trained["ds"], model_dir)
               | RunInference(handler))
        assert_that(res, check)
    steps = [c.step for c in CheckpointStore(model_dir).list_checkpoints()]
    assert set(range(FIRST, FIRST + len(docs) + 1)) <= set(steps)


def test_watch_is_checked():
    with pytest.raises(UsageError, match="watch"):
        LdaModelHandler("model/", watch=-1)
