"""RunInference switching to each checkpoint a training run publishes, on the DirectRunner
(issue 30, item 5): ``LdaModelHandler(MODEL_DIR, watch=0)`` looks at ``LATEST`` before each
batch and loads a checkpoint it has not seen.

End to end: a model trained for 2 steps; a Beam pipeline (DirectRunner, batch) whose documents
each wait, before they reach RunInference, for ``ldabeam train --resume --max-steps N`` to
publish the next checkpoint in another process (the pacing makes the interleaving certain);
each document's θ is the θ of the checkpoint its result names, which is the one published
for it or a later one (Beam's batching may hold a document until the next arrives), and the
pipeline switches at least len(docs) - 1 times.

Beam's side-input way, ``WatchCheckpoints`` as RunInference's ``model_metadata_pcoll``: a
streaming pipeline on the DirectRunner whose documents arrive over a few seconds while
``ldabeam train --resume`` publishes the next checkpoints in other processes; each fixed
window of documents gets the checkpoint that was the latest when the window's look ran, so
the θ come from the first checkpoint, then the later ones, in publishing order (before the
fix, every run failed: "PCollection of size 2 ... accessed as a singleton view").

Model: online VB on the bundled Wikipedia sample; documents: 20 Newsgroups test posts."""
import logging
import subprocess
import sys
import threading
import time

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.ml.inference.base import RunInference
from apache_beam.testing.util import assert_that
from apache_beam.transforms import window
from apache_beam.transforms.periodicsequence import PeriodicImpulse

import ldabeam
from helpers import warm
from helpers.news20 import news20_posts
from helpers.paths import REPO, repo_env
from lda_core.errors import UsageError
from lda_core.storage.checkpoint import CheckpointStore
from ldabeam.beam import InferTopics, LdaModelHandler, WatchCheckpoints
from pipelines.cli import main as cli
from pipelines.ingest.vectorize import VectorizeOptions, vectorize
from pipelines.runtime.beam_options import pipeline_options

FIRST = 2        # steps before the pipeline starts
KEEP = ["--checkpoint-every", "1", "--keep-checkpoints", "0", "--no-progress"]
TRAIN = ["--topics", "4", "--algorithm", "online-vb", "--passes", "3", "--minibatch", "32",
         "--seed", "2"] + KEEP


@pytest.fixture(scope="module")
def trained(wiki_sample, tmp_path_factory):
    warm.start()     # the warm interpreter the training commands fork from, importing meanwhile
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


LOOK = 0.5       # seconds between WatchCheckpoints' looks at LATEST (and its window size)
SPAN = 8.0       # seconds over which the documents arrive


class Looks(logging.Handler):
    """The checkpoint names WatchCheckpoints' looks report (its log lines), in order: the
    training run below publishes a checkpoint only once looks have seen the one before, so
    the pacing holds however late the runner starts the looks."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen, self.changed = [], threading.Condition()

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("WatchCheckpoints: the latest checkpoint"):
            with self.changed:
                self.seen.append(msg.rsplit(" ", 1)[-1])
                self.changed.notify_all()

    def wait(self, name: str, times: int, done: threading.Event) -> None:
        with self.changed:
            while self.seen.count(name) < times and not done.is_set():
                self.changed.wait(0.2)


def ordered_by_arrival(docs, model_dir, first, ckpt_of):
    """An assert_that matcher: every document has a result; by arrival, the checkpoints are
    in publishing order, starting with ``first``, at least two of them; each θ is the θ of
    the checkpoint the result names. ``ckpt_of(result)``: (document index, checkpoint, θ)."""
    def match(results):
        results = sorted(results, key=lambda r: ckpt_of(r)[0])
        assert [ckpt_of(r)[0] for r in results] == list(range(len(docs)))
        used = [ckpt_of(r)[1] for r in results]
        order = [c.path for c in CheckpointStore(model_dir).list_checkpoints()]
        assert set(used) <= set(order), (sorted(set(used)), order)
        ranks = [order.index(c) for c in used]
        assert ranks == sorted(ranks), used
        assert used[0] == first and len(set(used)) >= 2, used
        for ckpt in set(used):
            rs = [r for r in results if ckpt_of(r)[1] == ckpt]
            theta = ldabeam.load(ckpt).transform([docs[ckpt_of(r)[0]] for r in rs])
            got = np.stack([np.asarray(ckpt_of(r)[2]) for r in rs])
            np.testing.assert_allclose(got, theta, atol=1e-6)
    return match


def from_prediction(r):
    return int(r.example["id"].split("-")[1]), r.model_id, r.inference


def from_record(r):
    return int(r["doc_id"].split("-")[1]), r["model"], r["theta"]


@pytest.mark.serial      # training commands run beside the pipeline
def test_watch_checkpoints_side_input_switches_in_publishing_order(trained, news20_tar,
                                                                   tmp_path):
    model_dir = str(tmp_path / "model")
    assert cli(["train", "--shards", trained["ds"], "--output", model_dir, "--max-steps",
                str(FIRST)] + TRAIN) == 0
    first = ldabeam.load(model_dir).checkpoint
    posts = news20_posts(news20_tar, "test", every=40, limit=24)
    docs = [{"id": "post-%02d" % i, "text": p.body} for i, p in enumerate(posts)]
    published, failed = [], []     # steps the training run published, its error if any
    looks, done = Looks(), threading.Event()

    def publish():
        # the training run goes on for two more steps, each published as a checkpoint
        # (LATEST moves): the first once two looks saw the first checkpoint (so the first
        # documents' window has it whichever window they start in), the next once a look
        # saw the one before
        try:
            for step, times in ((FIRST + 1, 2), (FIRST + 2, 1)):
                looks.wait(CheckpointStore(model_dir).pointer_name(), times, done)
                if done.is_set():
                    return
                warm.run(["-m", "pipelines.cli", "train", "--shards", trained["ds"],
                          "--output", model_dir, "--resume", "--max-steps", str(step)] + KEEP,
                         cwd=REPO, env=repo_env(), capture_output=True, check=True,
                         timeout=60)
                published.append(step)
        except Exception as e:        # reported below, by the test's own thread
            failed.append(e)

    log = logging.getLogger("ldabeam.beam")
    level = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(looks)
    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        with beam.Pipeline(options=pipeline_options(streaming=True)) as p:
            models = p | WatchCheckpoints(model_dir, interval=LOOK,
                                          stop_timestamp=time.time() + SPAN + LOOK)
            # the documents arrive evenly over SPAN seconds, from after the first look's
            # window began to before the last look's ends
            start, gap = time.time(), SPAN / len(docs)
            # stopped half a gap after the last document: the impulse repeats its data when
            # its span holds room for one more
            arriving = p | "Arrive" >> PeriodicImpulse(start, start + (len(docs) - 0.5) * gap,
                                                       gap, data=docs)
            windowed = arriving | "Windows" >> beam.WindowInto(window.FixedWindows(LOOK))
            res = windowed | RunInference(LdaModelHandler(model_dir),
                                          model_metadata_pcoll=models)
            assert_that(res, ordered_by_arrival(docs, model_dir, first, from_prediction),
                        label="RunInference")
            # InferTopics puts documents of the global window into the looks' windows
            recs = arriving | InferTopics(model_dir, model_metadata=models)
            assert_that(recs, ordered_by_arrival(docs, model_dir, first, from_record),
                        label="InferTopics")
    finally:
        done.set()
        log.removeHandler(looks)
        log.setLevel(level)
    thread.join(timeout=60)
    # the second checkpoint may come after the documents' span on a loaded machine: the one
    # before it is what the documents' second checkpoint (checked above) needs
    assert not failed and published[:1] == [FIRST + 1], (failed, published, looks.seen)
