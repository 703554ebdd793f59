"""``ldabeam stream``: online training on an unbounded stream of JSON documents.

    ldabeam stream --model MODEL_DIR (--subscription projects/P/subscriptions/S |
                                      --topic projects/P/topics/T | --input-glob 'DIR/*.jsonl')
                   [--window-seconds 60] [--allowed-lateness 86400] [--deadletter DIR]
                   [--topics K --vocab VOCAB_TSV]      # a fresh model; else MODEL_DIR's latest
                   [BEAM OPTIONS: --runner DataflowRunner --streaming ...]

Each fixed window of arriving documents is one minibatch; one checkpoint is published per
window into MODEL_DIR/checkpoints (``ldabeam topics --model MODEL_DIR`` shows the newest).
See :mod:`pipelines.streaming.stream` for the graph and docs/cluster.md for running it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional

from lda_core.errors import UsageError
from pipelines.ingest.tokenize import Preprocessor
from pipelines.runtime.beam_options import pipeline_options

logger = logging.getLogger(__name__)

# the model directory this command writes, held under a lease while it runs (pipelines.cli)
MODEL_DIR = ("model", ("vocab", "input_glob"))   # never over its inputs


def add_arguments(p) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", metavar="MODEL_DIR", default=None,
                   help="model directory: continue from its latest checkpoint, or start a "
                        "fresh model there with --topics and --vocab (required)")
    g.add_argument("--topics", "-k", type=int, default=None, metavar="K",
                   help="fresh model: number of topics")
    g.add_argument("--vocab", default=None, metavar="VOCAB_TSV",
                   help="fresh model: the fixed vocabulary (vocab.tsv of a dataset); "
                        "arriving text is vectorised with it")
    g.add_argument("--algorithm", default="online-vb",
                   help="fresh model: online-vb (default), scvb0 or sparse-gibbs-vb. A stream "
                        "sees each document once; after one pass the two were within 0.05 "
                        "nats/token on KOS and NIPS, online VB ahead in 3 of 4 cases, while "
                        "SCVB0, `ldabeam train`'s default, pulls ahead from the second pass "
                        "(docs/training.md)")
    g.add_argument("--corpus-size", type=int, default=None, metavar="D",
                   help="D of the D/S scaling; 0: the stream setting (D = documents seen so "
                        "far, growing without bound). Default: a fresh model 0, a continued "
                        "model its checkpoint's")
    g.add_argument("--seed", type=int, default=0, help="fresh model: seed")
    g.add_argument("--minibatch", type=int, default=256,
                   help="fresh model: nominal minibatch size recorded in the state (the "
                        "actual minibatch is each window's documents)")
    g.add_argument("--kappa", type=float, default=None, help="fresh model: kappa")
    g.add_argument("--tau0", type=float, default=None, help="fresh model: tau0")
    g.add_argument("--alpha", type=float, default=None, help="fresh model: alpha")
    g.add_argument("--eta", type=float, default=None, help="fresh model: eta")
    g.add_argument("--keep-checkpoints", type=int, default=3,
                   help="keep the N newest checkpoints (0: keep all)")
    g.add_argument("--threads", type=int, default=None, help="E-step threads (numba)")
    g = p.add_argument_group("input (one of)")
    g.add_argument("--subscription", default=None,
                   help="Pub/Sub subscription projects/P/subscriptions/S (needs "
                        "apache-beam[gcp] and a streaming runner)")
    g.add_argument("--topic", default=None,
                   help="Pub/Sub topic projects/P/topics/T (a subscription is created)")
    g.add_argument("--input-glob", default=None, metavar="GLOB",
                   help="files arriving in a directory (JSON lines): polled with "
                        "fileio.MatchContinuously on a streaming runner, by the command "
                        "itself on the local runner")
    g.add_argument("--poll-seconds", type=float, default=10.0,
                   help="--input-glob: seconds between directory listings")
    g.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                   help="--input-glob: stop watching after this many seconds and apply the "
                        "open window (a bounded run; default: run until interrupted)")
    g = p.add_argument_group("windows and documents")
    g.add_argument("--window-seconds", type=float, default=60.0,
                   help="minibatch = the documents arriving in each fixed window")
    g.add_argument("--allowed-lateness", type=float, default=86400.0,
                   help="documents up to this many seconds late go to the dead letters "
                        "(later ones are dropped by the runner)")
    g.add_argument("--deadletter", default=None, metavar="DIR",
                   help="write malformed and late documents here as JSON lines "
                        "(default MODEL_DIR/deadletter)")
    g.add_argument("--order", choices=["auto", "watermark", "arrival"], default="auto",
                   help="when a window's step is applied: watermark (in window order, once "
                        "the watermark passes its end) or arrival (as its E-step finishes; "
                        "for runners whose watermark does not advance past the source). "
                        "auto: watermark. (--input-glob on the local runner polls the "
                        "directory itself and applies each closed window in order.)")
    g.add_argument("--id-field", default="id",
                   help="JSON field of the document id, as in vectorize (default id; a "
                        "message without it may name its id doc_id)")
    g.add_argument("--text-field", default="text", help="JSON field of the text")


@dataclass
class Setup:
    """What every route needs, from the options: the model to continue (published as step 0
    if fresh), how to parse documents, where dead letters go."""
    algo: Any
    parse: Any                  # pipelines.streaming.stream_parse.ParseConfig
    dead_dir: str
    keep: Optional[int]         # checkpoints kept (None: all)
    corpus_size: Optional[int]  # -1: the model's own D; None: the stream setting; else D


def model_tokenizer(model: str):
    """The model's recorded preprocessing for text messages (UsageError when it cannot be
    reproduced here); None, with a warning, when it was never recorded (the defaults)."""
    pre = Preprocessor.from_model_dir(model)
    if not pre.known:
        logging.getLogger(__name__).warning(
            "stream: the model's tokenizer settings are unknown (%s); text messages are "
            "tokenized with the defaults", pre.note)
        return None
    return pre.config


def prepare(args) -> Setup:
    """Check the options and load (or create) the model; raises ValueError on bad options."""
    from pipelines.streaming import stream, stream_parse  # imports Beam: only when the command runs
    if not args.model:
        raise UsageError("--model MODEL_DIR is required")
    sources = [s for s in (args.subscription, args.topic, args.input_glob) if s]
    if len(sources) != 1:
        raise UsageError("give exactly one input: --subscription, --topic or --input-glob "
                         "(got %d)" % len(sources))
    for name in ("window_seconds", "poll_seconds"):
        if not getattr(args, name) > 0:
            raise UsageError("--%s must be > 0, got %r" % (name.replace("_", "-"),
                                                          getattr(args, name)))
    if args.allowed_lateness < 0:
        raise UsageError("--allowed-lateness must be >= 0, got %r" % args.allowed_lateness)
    if args.corpus_size is not None and args.corpus_size < 0:
        raise UsageError("--corpus-size must be >= 0 (0: the stream setting), got %d"
                         % args.corpus_size)
    settings = {k: getattr(args, k) for k in ("kappa", "tau0", "alpha", "eta")}
    keep = args.keep_checkpoints or None
    algo, vocab_path = stream.initial_checkpoint(
        args.model, topics=args.topics, vocab_path=args.vocab, algorithm=args.algorithm,
        minibatch=args.minibatch, corpus_size=args.corpus_size or None, seed=args.seed,
        settings=settings, keep_last=keep)
    corpus_size = -1 if args.corpus_size is None else (args.corpus_size or None)
    parse = stream_parse.ParseConfig(vocab_path=vocab_path, n_words=algo.n_words,
                               id_field=args.id_field, text_field=args.text_field,
                               tokenizer=model_tokenizer(args.model))
    dead_dir = args.deadletter or (args.model.rstrip("/") + "/deadletter")
    return Setup(algo, parse, dead_dir, keep, corpus_size)


def build_pipeline(p, args, setup: Setup):
    """The streaming graph on pipeline ``p``: the source of ``args`` (Pub/Sub, or files
    arriving under ``--input-glob`` through ``fileio.MatchContinuously``) -> StreamTrain ->
    dead letters written under ``setup.dead_dir``. Returns StreamTrain's outputs. (The local
    runner's ``--input-glob`` route does not use it: see ``run``.)"""
    from pipelines.streaming import stream  # imports Beam: only when the command runs
    if args.input_glob:
        raw = p | "Files" >> stream.ReadJsonFilesContinuously(args.input_glob,
                                                              args.poll_seconds,
                                                              args.stop_after,
                                                              model_dir=args.model)
    else:
        from apache_beam.io.gcp import pubsub
        raw = p | "PubSub" >> pubsub.ReadFromPubSub(topic=args.topic,
                                                    subscription=args.subscription)
    order = "watermark" if args.order == "auto" else args.order
    out = raw | "Train" >> stream.StreamTrain(
        args.model, setup.parse, args.window_seconds, args.allowed_lateness,
        keep_last=setup.keep, n_threads=args.threads, corpus_size=setup.corpus_size,
        order=order)
    stream.write_dead_letters(out[stream.DEAD], setup.dead_dir)
    return out


LOCAL_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner", "")


def run(args, beam_argv) -> int:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import StandardOptions
    from pipelines.streaming import stream  # imports Beam: only when the command runs
    setup = prepare(args)
    algo = setup.algo
    opts = pipeline_options(beam_argv, in_memory=False, streaming=True)
    logger.info("stream: %s K=%d V=%d from step %d, windows of %g s, dead letters -> %s",
                algo.name, algo.n_topics, algo.n_words, algo.step, args.window_seconds,
                setup.dead_dir)
    runner = opts.view_as(StandardOptions).runner or ""
    local = runner in LOCAL_RUNNERS
    if local and args.input_glob:
        n = stream.run_local_directory(
            args.input_glob, args.model, setup.parse, window_seconds=args.window_seconds,
            poll_seconds=args.poll_seconds, stop_after=args.stop_after,
            deadletter_dir=setup.dead_dir, keep_last=setup.keep, n_threads=args.threads,
            corpus_size=setup.corpus_size)
        print("published %d checkpoint(s) in %s/checkpoints" % (n, args.model))
        return 0
    if local:
        # Pub/Sub on this machine: the bundle-based DirectRunner is the local runner that
        # executes unbounded sources (its Pub/Sub reader needs apache-beam[gcp] and access to
        # Pub/Sub or its emulator). The FnApiRunner would report a Pub/Sub pipeline DONE
        # at once without reading a message; 2.77's DirectRunner first tries to download
        # Prism.
        from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
        p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=opts)
    else:
        p = beam.Pipeline(options=opts)
    build_pipeline(p, args, setup)
    result = p.run()
    # a streaming job runs until cancelled; on a remote runner return after submission
    # (Flex Templates must return after run()), locally wait (Ctrl-C stops it)
    if local:
        result.wait_until_finish()
    else:
        print("submitted streaming job (%s); checkpoints appear in %s/checkpoints"
              % (runner, args.model))
    return 0
