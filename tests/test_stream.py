"""The streaming job (pipelines.streaming.stream) on the DirectRunner with TestStream: fed the same
minibatches, its checkpoints equal the in-process trainer's bit for bit; malformed and late
documents go to the dead letters; parsing against the model's fixed vocabulary."""
import json
import os

import numpy as np
import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream as _TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.algorithms.online_vb import OnlineVB
from lda_core.storage.state import TopicState
from pipelines.ingest import dataset, synthetic
from pipelines.streaming import stream, stream_parse
from pipelines.streaming import stream_step

from helpers.streams import (K, V, W, Cell, messages as _messages, run_file_route,
                             stream_args as _cmd_args, stream_model as _model,
                             streaming_options as _streaming_options)



@pytest.fixture(scope="module")
def corpus():
    spec = synthetic.SyntheticSpec(n_docs=320, n_words=V, n_topics=K, doc_length=50.0,
                                   alpha=0.1, eta=0.05, seed=3)
    return synthetic.generate(spec), synthetic.vocabulary(spec)


def _run(p_build):
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=opts) as p:
        p_build(p)


def test_stream_checkpoints_equal_the_in_process_trainer(tmp_path, corpus):
    batch, vocab = corpus
    model, vpath, algo0 = _model(tmp_path, vocab)
    bounds = [0, 80, 150, 240, 320]        # four windows of different sizes
    ts = _TestStream().advance_watermark_to(0)
    for w in range(4):
        msgs = _messages(batch, vocab, bounds[w], bounds[w + 1])
        # arrival order inside a window is scrambled: the minibatch is in doc_id order
        rng = np.random.default_rng(w)
        msgs = [msgs[i] for i in rng.permutation(len(msgs))]
        t0 = w * W
        ts = ts.add_elements([window.TimestampedValue(m, t0 + 1 + (j % 50))
                              for j, m in enumerate(msgs)])
        if w == 1:
            ts = ts.add_elements([window.TimestampedValue("{not json", t0 + 2),
                                  window.TimestampedValue(json.dumps(
                                      {"doc_id": "bad-id", "word_ids": [V + 5],
                                       "counts": [1]}), t0 + 3),
                                  window.TimestampedValue(json.dumps(
                                      {"doc_id": "oov", "text": "zzzz qqqq"}), t0 + 4)])
        ts = ts.advance_watermark_to(t0 + W)
        if w == 2:   # a document of window 0 arriving now is late
            ts = ts.add_elements([window.TimestampedValue(json.dumps(
                {"doc_id": "late-doc", "word_ids": [1, 2], "counts": [1, 1]}), 5)])
    ts = ts.advance_watermark_to_infinity()
    parse = stream_parse.ParseConfig(vocab_path=vpath, n_words=V)

    def build(p):
        out = p | ts | stream.StreamTrain(model, parse, W, allowed_lateness=3600)
        assert_that(out["steps"] | beam.Map(lambda r: (r["step"], r["docs"])),
                    equal_to([(1, 80), (2, 70), (3, 90), (4, 80)]), label="steps")
        assert_that(out[stream.DEAD] | beam.Map(lambda d: (d["source"], d["error"][:12])),
                    equal_to([("stream", "not JSON: Ex"), ("doc bad-id", "word id outs"),
                              ("doc oov", "no word of t"), ("doc late-doc", "late: arrive")]),
                    label="dead")

    _run(build)

    # the reference: the in-process trainer's two halves on the same minibatches
    ref = OnlineVB.from_state(algo0.to_state())
    store = CheckpointStore(model)
    cks = store.list_checkpoints()
    assert [c.step for c in cks][-3:] == [2, 3, 4]
    for w in range(4):
        idx = np.arange(bounds[w], bounds[w + 1])
        mb = batch.take(idx[np.argsort([batch.doc_ids[i] for i in idx])])
        ref.global_step(ref.local_step(mb))
        if w + 1 >= 2:   # the store keeps the 3 newest
            st = TopicState.load(store.path(w + 1))
            got = OnlineVB.from_state(st)
            assert got.step == ref.step and got.docs_seen == ref.docs_seen
            np.testing.assert_array_equal(got.lambda_(), ref.lambda_())
            assert st.info["stream"]["docs"] == len(idx)
    last = TopicState.load(cks[-1].path)
    assert last.docs_seen == 320 and last.params["corpus_size"] is None


def test_parse_document_cases(corpus):
    _, vocab = corpus
    cfg = stream_parse.ParseConfig(vocab_path="unused", n_words=V)
    idx = vocab.index
    t = vocab.tokens
    doc, dead, oov = stream_parse.parse_document(json.dumps(
        {"doc_id": 7, "text": "%s %s Zzz %s" % (t[5], t[2], t[5].upper())}), idx, cfg)
    assert dead is None and oov == 1 and doc[0] == "7"
    assert np.frombuffer(doc[1], np.int32).tolist() == [2, 5]
    assert np.frombuffer(doc[2], np.int32).tolist() == [1, 2]
    doc, dead, _ = stream_parse.parse_document(b'{"id": "a", "word_ids": [9, 3, 9], "counts": [1, 2, 4]}',
                                         idx, cfg)
    assert np.frombuffer(doc[1], np.int32).tolist() == [3, 9]
    assert np.frombuffer(doc[2], np.int32).tolist() == [2, 5]
    for raw, err in [("[1, 2]", "not a JSON object"), ('{"text": "x"}', "no document id"),
                     ('{"doc_id": "a", "word_ids": [1], "counts": [0]}', "counts must be"),
                     ('{"doc_id": "a", "word_ids": [1, 2], "counts": [1]}', "equal length"),
                     ('{"doc_id": "a", "word_ids": [1.5], "counts": [1]}', "integers"),
                     ('{"doc_id": "a", "word_ids": [], "counts": []}', "no words"),
                     ('{"doc_id": "a"}', "neither"), (b"\xff\xfe", "not UTF-8")]:
        doc, dead, _ = stream_parse.parse_document(raw, idx, cfg)
        assert doc is None and err in dead["error"], (raw, dead)


def test_docs_to_batch_orders_and_deduplicates():
    a = ("b", np.array([1], np.int32).tobytes(), np.array([2], np.int32).tobytes())
    b = ("a", np.array([0, 4], np.int32).tobytes(), np.array([1, 1], np.int32).tobytes())
    batch = stream_parse.docs_to_batch([a, b, a])
    assert batch.doc_ids == ("a", "b") and batch.indptr.tolist() == [0, 2, 3]


def test_stale_estep_is_recomputed(tmp_path, corpus):
    """A window whose E-step read an older checkpoint is recomputed against the current state
    (so the result never depends on how fast the checkpoints were published)."""
    batch, vocab = corpus
    model, vpath, algo0 = _model(tmp_path, vocab, corpus_size=1000)
    fn = stream_step.ApplyGlobalStepFn(model)
    fn.setup()
    mb1 = batch.take(np.arange(0, 40))
    mb2 = batch.take(np.arange(40, 80))
    stale = algo0.local_step(mb2)                     # computed against step 0, used at step 1
    buf, applied = Cell([]), Cell(None)
    buf.add((1, mb1, algo0.local_step(mb1), 0))
    buf.add((2, mb2, stale, 0))
    out = list(fn.on_flush(buffer=buf, applied=applied, ts=window.Timestamp(micros=5)))
    assert [r["estep_recomputed"] for r in out] == [False, True] and applied.v == 2
    ref = OnlineVB.from_state(algo0.to_state())
    ref.global_step(ref.local_step(mb1))
    ref.global_step(ref.local_step(mb2))
    got = OnlineVB.from_state(CheckpointStore(model).latest())
    np.testing.assert_array_equal(got.lambda_(), ref.lambda_())
    assert got.corpus_size == 1000


def test_initial_checkpoint_errors(tmp_path, corpus):
    _, vocab = corpus
    with pytest.raises(ValueError, match="holds no checkpoint"):
        stream.initial_checkpoint(str(tmp_path / "m"), topics=None, vocab_path=None)
    model, vpath, _ = _model(tmp_path, vocab)
    with pytest.raises(ValueError, match="--topics 7 differs"):
        stream.initial_checkpoint(model, topics=7, vocab_path=None)
    algo, _ = stream.initial_checkpoint(model, topics=None, vocab_path=None)
    assert algo.n_topics == K and algo.step == 0


def test_stream_command_checks_its_options(tmp_path):
    from pipelines.cli import main
    assert main(["stream", "--model", str(tmp_path / "m")]) == 2           # no input
    assert main(["stream", "--model", str(tmp_path / "m"), "--input-glob", "x/*",
                 "--window-seconds", "0"]) == 2


def test_local_directory_driver_applies_each_window_in_order(tmp_path, corpus):
    """``--input-glob`` on this machine: files appearing between polls become windows by
    arrival time, one checkpoint per closed window, dead letters written as JSON lines."""
    batch, vocab = corpus
    model, vpath, algo0 = _model(tmp_path, vocab)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    clock = {"t": 1000.0}
    drops = {0: (0, 60), 1: (60, 100), 4: (100, 180)}     # poll index -> documents arriving
    polls = {"n": 0}

    def drop():
        if polls["n"] in drops:
            lo, hi = drops[polls["n"]]
            msgs = _messages(batch, vocab, lo, hi) + (["garbage"] if lo == 0 else [])
            (inbox / ("f%d.jsonl" % lo)).write_text("\n".join(msgs) + "\n")

    def sleep(dt):
        clock["t"] += dt
        polls["n"] += 1
        drop()

    drop()
    parse = stream_parse.ParseConfig(vocab_path=vpath, n_words=V)
    n = stream.run_local_directory(str(inbox / "*.jsonl"), model, parse, window_seconds=10.0,
                                   poll_seconds=4.0, stop_after=30.0,
                                   deadletter_dir=str(tmp_path / "dead"),
                                   clock=lambda: clock["t"], sleep=sleep)
    # arrivals at t=1000, 1004 (window [1000, 1010)) and 1016 (window [1010, 1020))
    assert n == 2
    ref = OnlineVB.from_state(algo0.to_state())
    for lo, hi in ((0, 100), (100, 180)):
        idx = np.arange(lo, hi)
        ref.global_step(ref.local_step(batch.take(idx[np.argsort([batch.doc_ids[i]
                                                                   for i in idx])])))
    got = OnlineVB.from_state(CheckpointStore(model).latest())
    assert got.step == 2
    np.testing.assert_array_equal(got.lambda_(), ref.lambda_())
    dead = [json.loads(l) for f in (tmp_path / "dead").iterdir()
            for l in f.read_text().splitlines()]
    assert [d["snippet"] for d in dead] == ["garbage"]


# ----------------------------------------------------------------------------- the routes
# of `ldabeam stream` other than the local directory poller: Pub/Sub, and files arriving
# under a glob through fileio.MatchContinuously (the route of streaming runners). No network:
# the graphs are built (and translated to the portable pipeline proto a runner receives)
# without running; what runs here runs with a stand-in for the Pub/Sub source, and the
# MatchContinuously route on files present before the run.

SUBSCRIPTION = "projects/my-project/subscriptions/ldabeam-docs"
TOPIC = "projects/my-project/topics/ldabeam-docs"


def _proto_transforms(p):
    """unique name -> (urn, payload bytes) of every transform of the runner API proto."""
    proto = p.to_runner_api()
    return {t.unique_name: (t.spec.urn, t.spec.payload)
            for t in proto.components.transforms.values()}


@pytest.mark.parametrize("source", ["subscription", "topic"])
def test_pubsub_route_graph(tmp_path, corpus, source):
    """--subscription / --topic: Beam's Pub/Sub read (the portable pubsub_read transform a
    streaming runner executes, naming ours) feeding the StreamTrain graph and the dead-letter
    writer."""
    from apache_beam.portability.api import beam_runner_api_pb2
    from pipelines.commands import stream as cmd
    _, vocab = corpus
    model, _, _ = _model(tmp_path, vocab)
    name = SUBSCRIPTION if source == "subscription" else TOPIC
    args = _cmd_args(["--model", model, "--" + source, name, "--window-seconds", "30"])
    setup = cmd.prepare(args)
    p = beam.Pipeline(options=_streaming_options())
    out = cmd.build_pipeline(p, args, setup)
    assert set(out) == {"steps", stream.DEAD}
    ts = _proto_transforms(p)
    reads = [(n, payload) for n, (urn, payload) in ts.items()
             if urn == "beam:transform:pubsub_read:v1"]
    assert len(reads) == 1 and reads[0][0].startswith("PubSub")
    payload = beam_runner_api_pb2.PubSubReadPayload.FromString(reads[0][1])
    assert (payload.subscription if source == "subscription" else payload.topic) == name
    for part in ("Train/Parse", "Train/Window", "Train/Minibatch", "Train/EStep",
                 "Train/GlobalStep", "DeadWrite"):
        assert any(n == part or n.startswith(part + "/") for n in ts), part
    assert setup.dead_dir == model + "/deadletter"


class _FakePubSub(beam.PTransform):
    """Stands in for ``ReadFromPubSub``: the messages (bytes) of a TestStream."""
    calls = []
    messages = None

    def __init__(self, topic=None, subscription=None, **kw):
        super().__init__()
        _FakePubSub.calls.append(dict(topic=topic, subscription=subscription, **kw))

    def expand(self, pbegin):
        return pbegin | _FakePubSub.messages


def test_pubsub_route_runs_locally_on_the_bundle_based_direct_runner(tmp_path, corpus,
                                                                     monkeypatch, capsys):
    """`ldabeam stream --subscription` on this machine runs on the bundle-based DirectRunner
    (the FnApiRunner would report a Pub/Sub pipeline done without reading a message): with
    Pub/Sub messages (bytes) from a stand-in source, one checkpoint per window equal to the
    in-process trainer's, malformed messages written to --deadletter as JSON lines."""
    from apache_beam.io.gcp import pubsub
    from apache_beam.runners.direct import direct_runner
    from apache_beam.testing.test_stream import TestStream
    from pipelines.cli import main
    batch, vocab = corpus
    model, _, algo0 = _model(tmp_path, vocab)
    bounds = [0, 60, 130]
    ts = TestStream(coder=beam.coders.BytesCoder()).advance_watermark_to(0)
    for w in range(2):
        msgs = [m.encode("utf-8") for m in _messages(batch, vocab, bounds[w], bounds[w + 1])]
        if w == 0:
            msgs += [b"\xff not utf-8", b'{"doc_id": "x", "word_ids": [1]}']
        ts = ts.add_elements([window.TimestampedValue(m, w * W + 1 + j % 40)
                              for j, m in enumerate(msgs)])
        ts = ts.advance_watermark_to((w + 1) * W)
    _FakePubSub.calls, _FakePubSub.messages = [], ts.advance_watermark_to_infinity()
    monkeypatch.setattr(pubsub, "ReadFromPubSub", _FakePubSub)
    used = []
    real_run = direct_runner.BundleBasedDirectRunner.run_pipeline

    def spy(self, pipeline, options):
        used.append(type(self).__name__)
        return real_run(self, pipeline, options)

    monkeypatch.setattr(direct_runner.BundleBasedDirectRunner, "run_pipeline", spy)
    dead = str(tmp_path / "dead")
    assert main(["stream", "--model", model, "--subscription", SUBSCRIPTION,
                 "--window-seconds", str(W), "--deadletter", dead]) == 0
    assert used == ["BundleBasedDirectRunner"]
    assert _FakePubSub.calls == [dict(topic=None, subscription=SUBSCRIPTION)]
    ref = OnlineVB.from_state(algo0.to_state())
    for w in range(2):
        idx = np.arange(bounds[w], bounds[w + 1])
        ref.global_step(ref.local_step(batch.take(idx[np.argsort([batch.doc_ids[i]
                                                                   for i in idx])])))
    got = OnlineVB.from_state(CheckpointStore(model).latest())
    assert got.step == 2 and got.docs_seen == 130
    np.testing.assert_array_equal(got.lambda_(), ref.lambda_())
    letters = [json.loads(l) for root, _, files in os.walk(dead) for f in files
               if not f.startswith(".") for l in open(os.path.join(root, f))]
    assert sorted(d["error"][:12] for d in letters) == ["not UTF-8: '", "word_ids and"]


def test_file_route_graph_for_streaming_runners(tmp_path, corpus, monkeypatch, capsys):
    """--input-glob with a streaming runner (here FlinkRunner, not contacted: the submission
    is intercepted): fileio.MatchContinuously -> ReadMatches -> JSON lines -> StreamTrain ->
    dead letters; the command returns after submission."""
    from pipelines.cli import main
    _, vocab = corpus
    model, _, _ = _model(tmp_path, vocab)
    submitted = []

    class Result:
        state = "RUNNING"

    def fake_run(self, test_runner_api="AUTO"):
        submitted.append(self)
        return Result()

    monkeypatch.setattr(beam.Pipeline, "run", fake_run)
    inbox = str(tmp_path / "inbox" / "*.jsonl")
    assert main(["stream", "--model", model, "--input-glob", inbox, "--poll-seconds", "7",
                 "--runner=FlinkRunner", "--flink_master=flink-jm:8081"]) == 0
    assert "submitted streaming job (FlinkRunner)" in capsys.readouterr().out
    (p,) = submitted
    assert type(p.runner).__name__ == "FlinkRunner"
    assert p.options.view_as(StandardOptions).streaming
    ts = _proto_transforms(p)
    for part in ("Files/Match", "Files/Open", "Files/Lines", "Train/Parse", "Train/GlobalStep",
                 "DeadWrite"):
        assert any(n == part or n.startswith(part + "/") for n in ts), part
    # MatchContinuously polls with a PeriodicImpulse (a splittable DoFn) at --poll-seconds
    match = [t for t in p.transforms_stack[0].parts if t.full_label == "Files"][0]
    mc = [t for t in match.parts if t.full_label == "Files/Match"][0]
    from apache_beam.utils.timestamp import MAX_TIMESTAMP
    assert mc.transform.file_pattern == inbox and mc.transform.interval == 7.0
    assert mc.transform.stop_ts == MAX_TIMESTAMP          # no --stop-after: watch forever


def test_file_route_runs_on_the_fn_api_runner(tmp_path, corpus):
    """The MatchContinuously route itself, run on the FnApiRunner over files present before
    the run (the local runners cannot watch for later files: docs/cluster.md), with the step
    applied on arrival (--order arrival; a bounded local run never fires the last window's
    event-time timer): one window of every document, its checkpoint equal to the in-process
    trainer's, the malformed line a dead letter written by the pipeline's own writer."""
    batch, vocab = corpus
    model, _, algo0 = _model(tmp_path, vocab)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.jsonl").write_text("\n".join(_messages(batch, vocab, 0, 50)) + "\n")
    (inbox / "b.jsonl").write_text("\n".join(_messages(batch, vocab, 50, 90) + ["nope"]) + "\n")
    (inbox / "ignored.txt").write_text("not matched\n")
    dead = str(tmp_path / "dead")
    run_file_route(model, inbox, dead)
    got = OnlineVB.from_state(CheckpointStore(model).latest())
    ref = OnlineVB.from_state(algo0.to_state())
    idx = np.arange(0, 90)
    ref.global_step(ref.local_step(batch.take(idx[np.argsort([batch.doc_ids[i]
                                                               for i in idx])])))
    assert got.step == 1 and got.docs_seen == 90
    np.testing.assert_array_equal(got.lambda_(), ref.lambda_())
    letters = [json.loads(l) for root, _, files in os.walk(dead) for f in files
               if not f.startswith(".") for l in open(os.path.join(root, f))]
    assert [d["snippet"] for d in letters] == ["nope"]
