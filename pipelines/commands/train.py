"""``ldabeam train``: train a topic model on shards, with checkpoints, resume and a run log.

    ldabeam train --shards SHARD_DIR --output MODEL_DIR --topics K [--algorithm online-vb]
                  [--minibatch S] [--passes N|auto] [--seed N] [--resume] [--runner inprocess]
                  [--runner BEAM_RUNNER [--detach]]

The model directory receives ``vocab.tsv`` (copied from the dataset, so topics print as
words), ``checkpoints/`` (one complete topic state per published step, ``LATEST`` pointer) and
``run_log.jsonl`` (one JSON record per global step). Everything the command can check is
checked before any training work: the output option, the shard set, the vocabulary hash of
every shard (against the model's when resuming), and a resumed checkpoint's algorithm, K and V.

``--detach`` (Beam runners; Dataflow Flex Templates): one window is submitted and the command
returns; the job publishes the checkpoint and appends the run log itself
(:mod:`pipelines.training.beam_train`, docs/beam-training.md "Detached windows").

Algorithm settings (the algorithm's parameter spec: option -> setting) default to the algorithm's
own, ``--minibatch`` included (SCVB0 and sparse Gibbs-VB: 100, their papers'; online VB 256).
An option the chosen algorithm does not use is an error naming the option and the algorithm
(never silently ignored): e.g. ``--kappa``/``--tau0`` with scvb0, whose two schedules are
``--topic-step-{scale,tau,kappa}`` and ``--doc-step-{scale,tau,kappa}``. An out-of-range value
is the algorithm's ValueError (parameter and allowed range), prefixed with the option.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Any, Dict, List, NamedTuple, Optional

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.algorithms.word_blocks import check_resumed_blocks
from lda_core.errors import InputError, OutputError, UsageError
from lda_core.faults import fault_point
from lda_core.storage.blocks import algorithm_from_state
from lda_core.storage.checkpoint import CHECKPOINTS, CheckpointStore
from lda_core.storage.files import files_for
from lda_core.storage.output_paths import LABELS_FILE
from lda_core.storage.run_log import iter_run_log, RUN_LOG_FILE, RunLog
from lda_core.storage.vocab_file import GROWN_PREFIX, Vocabulary
from lda_core.training import pieces as pieces_mod
from lda_core.training import staleness as staleness_mod
from lda_core.training.kernel_warmup import warm_kernels
from lda_core.training.pass_stop import AUTO_KEY, AUTO_PATIENCE, default_eval_every, PassStop
from lda_core.training.run_params import recorded_minibatch
from lda_core.training.runner import TrainData
from lda_core.training.session import resume_position, Session, TrainingInterrupted
from lda_core.training.spec import AlgorithmSpec, Evaluation, Output, Schedule, TrainSpec
from lda_core.training.trainer import check_pass_stop, InProcessRunner, WholeCorpusRunner
from pipelines.commands import train_options
from pipelines.commands.train_plan import print_plan
from pipelines.commands.train_summary import print_detached, print_summary
from pipelines.commands.train_update import run_update, UPDATING
from pipelines.ingest import dataset, manifest
from pipelines.ingest.manifest import TOKENIZER_FILE
from pipelines.runtime import paths
from pipelines.runtime.beam_options import runner_config
from pipelines.runtime.remote_checks import check_command
from pipelines.training.algorithm_options import (algorithm_option_dests, BATCH_MAX_PASSES,
                                                  BEAM_WORKERS_MINIBATCH, build_algorithm,
                                                  DEFAULT_ALGORITHM, default_minibatch,
                                                  default_passes, GIBBS_SWEEPS)
from pipelines.training.remote_defaults import ALGORITHMS as REMOTE_ALGORITHMS
from pipelines.training.remote_defaults import remote_defaults_for
from pipelines.training.shard_stream import HeldOutShards, read_docs, ShardStream

logger = logging.getLogger(__name__)

# the model directory this command writes, held under a lease while it runs, and the inputs
# it must neither contain nor lie inside (pipelines.cli, lda_core.storage.lease)
MODEL_DIR = ("output", ("shards", "vocab", "input"))


def check_launch(args, beam_argv) -> None:
    """The runner's up-front checks (:mod:`pipelines.runtime.remote_checks`) on the paths this
    run opens, before any of them is read (pipelines.cli calls it before the lease)."""
    heldout = args.heldout if args.heldout and "/" in args.heldout else None   # a path
    check_command(args.runner, beam_argv, {"--shards": getattr(args, "shards", None),
                                           "--input": getattr(args, "input", None),
                                           "--output": args.output, "--heldout": heldout},
                  offline=bool(getattr(args, "plan", False)))


# the options the remote defaults fill in when the user left them out
REMOTE_DEFAULT_OPTIONS = (("minibatch", "minibatch", "--minibatch"),
                          ("pieces", "pieces", "--pieces"),
                          ("word_blocks", "word_blocks", "--word-blocks"),
                          ("staleness", "staleness", "--staleness"),
                          ("threads", "threads", "--threads"))


def apply_remote_defaults(args, beam_argv, files, n_words: int):
    """A fresh run on a remote runner's remote exchange: the options the user left out among
    S, P, B, staleness and E-step threads set from the cluster model's least time to a
    held-out score (:mod:`pipelines.training.remote_defaults`), and one line saying what was
    chosen and why. Returns the :class:`RemoteDefaults` or None (another runner, exchange or
    algorithm: nothing changes)."""
    algorithm = args.algorithm or DEFAULT_ALGORITHM
    if algorithm not in REMOTE_ALGORITHMS or getattr(args, "exchange", None) not in (
            None, "remote", "word-blocks"):
        return None
    if args.runner.lower() in ("inprocess", "in-process", "local"):
        return None
    try:
        cfg = runner_config(args.runner, list(beam_argv or ()))
    except ValueError:
        return None       # an unknown runner is reported later, with its own message
    if cfg.local or cfg.in_process:
        return None
    try:
        n_docs = dataset.count_documents(files)
        rd = remote_defaults_for(list(beam_argv or ()), algorithm, int(args.topics), n_words,
                                 n_docs, dataset.count_word_entries(files) / max(1, n_docs))
    except ValueError as e:
        raise UsageError("%s (the remote defaults need the workers' machine type)" % e)
    values = {"minibatch": rd.minibatch, "pieces": rd.pieces, "word_blocks": rd.word_blocks,
              "staleness": rd.staleness, "threads": rd.threads}
    kept = []
    for dest, key, option in REMOTE_DEFAULT_OPTIONS:
        if getattr(args, dest, None) is None:
            setattr(args, dest, values[key])
        else:
            kept.append("%s %s" % (option, getattr(args, dest)))
    logger.info("%s%s", rd.reason, "; given: %s" % ", ".join(kept) if kept else "")
    return rd


def _beam_workers(args, beam_argv) -> bool:
    """True when --runner is a Beam runner whose workers are other processes."""
    if args.runner.lower() in ("inprocess", "in-process", "local"):
        return False
    try:
        return not runner_config(args.runner, list(beam_argv or ())).in_process
    except ValueError:
        return False      # an unknown runner is reported later, with its own message


def add_arguments(p) -> None:
    """The command's options (declared in :mod:`pipelines.commands.train_options`)."""
    train_options.add_arguments(p)


def resolve_heldout(shards: str, heldout: str, unverified: bool = False
                    ) -> Optional[List[str]]:
    """Shard files of the held-out set named by ``--heldout`` (None for no evaluation),
    verified against their dataset's manifest (:func:`pipelines.ingest.manifest.open_shards`)."""
    if heldout in (None, "", "none"):
        return None
    is_dataset = paths.exists(paths.join(shards, dataset.MANIFEST_FILE)) or \
        paths.exists(paths.join(shards, dataset.TRAIN_SPLIT))
    opened = lambda path, split, option: manifest.open_shards(
        path, split, unverified=unverified, option=option).files
    if heldout == "auto":
        if not is_dataset:
            return None
        try:
            return opened(shards, dataset.HELDOUT_SPLIT, "--shards")
        except FileNotFoundError:
            return None
    if is_dataset and "/" not in heldout and not paths.exists(heldout):
        return opened(shards, heldout, "--shards")
    return opened(heldout, dataset.HELDOUT_SPLIT, "--heldout")


def _capability(name: str, what: str) -> bool:
    """Whether algorithm ``name`` declares capability ``what`` (lda_core.algorithms.algorithm)."""
    try:
        return bool(getattr(algorithm_class(name), what, False))
    except ValueError:
        return False


def _remove_model(model_dir: str) -> None:
    """Remove what ``ldabeam train`` wrote in ``model_dir`` (and nothing else)."""
    files = files_for(model_dir)      # local, or Beam FileSystems for a URL
    if not files.isdir(model_dir):
        return
    files.remove_tree(files.join(model_dir, CHECKPOINTS))
    grown = [n for n in files.listdir(model_dir)
             if n.startswith(GROWN_PREFIX) and n.endswith(".tsv")]   # a stopped --grow-vocab's
    # the labels name the old model's topics: a new model's topic k is another topic
    for name in [RUN_LOG_FILE, dataset.VOCAB_FILE, TOKENIZER_FILE, LABELS_FILE] + grown:
        files.remove_file(files.join(model_dir, name))
    files.remove_tree(files.join(model_dir, UPDATING))      # a stopped Beam update's scratch
    logger.info("--overwrite: removed the previous model in %s", model_dir)


def _clear_leftovers(model_dir: str, vocab) -> None:
    """A fresh run in a directory without checkpoints: a ``vocab.tsv`` of another vocabulary
    and the run log of an earlier run that never checkpointed are leftovers that would make
    ``topics`` / ``infer`` read the wrong words or runs; both are replaced (a warning names
    them)."""
    files = files_for(model_dir)
    old_vocab = files.join(model_dir, dataset.VOCAB_FILE)
    if files.exists(old_vocab):
        try:
            same = Vocabulary.read(old_vocab).hash == vocab.hash
        except (ValueError, OSError, UnicodeDecodeError):
            same = False
        if not same:
            logger.warning("%s is a leftover of another vocabulary; replacing it with the "
                           "dataset's", old_vocab)
            files.remove_file(old_vocab)
    log = files.join(model_dir, RUN_LOG_FILE)
    if files.exists(log):
        logger.warning("%s is the log of an earlier run that left no checkpoint; starting a "
                       "new one", log)
        files.remove_file(log)


def _run_params(state) -> Dict[str, Any]:
    return dict((state.info or {}).get("run") or {})


# ------------------------------------------------------------------------------------ command

def _check_args(args) -> None:
    """The options' own ranges, before anything is read."""
    if not args.output:
        raise UsageError("--output MODEL_DIR is required (the model directory to write)")
    if not args.shards:
        raise UsageError("--shards SHARD_DIR is required (a dataset written by "
                         "`ldabeam vectorize`)")
    for name in ("topics", "minibatch", "passes", "passes_patience", "max_iter", "threads",
                 "heldout_max_docs", "minibatches_per_window"):
        v = getattr(args, name, None)
        if v is not None and v != "auto" and v < 1:
            raise UsageError("--%s must be >= 1, got %d" % (name.replace("_", "-"), v))
    if not args.rel_tol > 0:
        raise UsageError("--rel-tol must be > 0, got %r" % args.rel_tol)
    for name in ("eval_every", "checkpoint_every", "keep_checkpoints", "seed", "max_steps"):
        v = getattr(args, name, None)
        if v is not None and v < 0:
            raise UsageError("--%s must be >= 0, got %d" % (name.replace("_", "-"), v))


class Route(NamedTuple):
    """What decides the runner: an in-process --runner, the algorithm's capabilities (a
    stream-order sampler, a whole-corpus one) and the launch mode (--detach, --passes auto)."""
    inprocess: bool
    sequential: bool
    whole_corpus: bool
    detach: bool
    auto: bool


def choose_runner(args, beam_argv, algorithm: str, route: Route):
    """The runner of this run (:mod:`lda_core.training.runner`), after every check of the
    runner options against the runner and the algorithm, before any work: the stream-order
    samplers' Beam chain, the whole-corpus sampler, the in-process loop, or the Beam windowed
    trainer (waiting, or one detached window). A new runner plugs in here."""
    inprocess, sequential, whole_corpus, detach = route[:4]
    if inprocess and beam_argv:
        raise UsageError("unrecognized arguments: %s (Beam pipeline options apply only to a "
                         "Beam --runner)" % " ".join(beam_argv))
    if not inprocess:
        if sequential and args.unroll is not None:
            raise UsageError("--%sunroll does not apply to algorithm %s (a stream-order "
                             "sampler runs each window as one DoFn)"
                             % ("" if args.unroll else "no-", algorithm))
        if whole_corpus and args.minibatches_per_window is not None:
            raise UsageError("--minibatches-per-window does not apply to algorithm gibbs (its "
                             "sweeps run in one window)")
    if detach:
        if inprocess:
            raise UsageError("--detach needs a Beam --runner (DataflowRunner, FlinkRunner, "
                             "PortableRunner, DirectRunner): the in-process trainer has no "
                             "job to submit")
        if sequential:
            raise UsageError(
                "--detach is not available for algorithm %s: the stream-order "
                "samplers' Beam path (pipelines/training/beam_sequential.py) publishes "
                "and logs from the driver; run it without --detach" % algorithm)
    if route.auto and detach:
        raise UsageError("--passes auto does not apply with --detach (each window is a "
                         "separate launch that cannot stop the chain); give --passes N")
    if whole_corpus and (inprocess or not sequential):
        return WholeCorpusRunner()
    if inprocess:
        return InProcessRunner()
    # the Beam runners import Beam, which an in-process run never loads
    if sequential:
        from pipelines.training.beam_sequential import SequentialRunner, SequentialSettings
        return SequentialRunner(SequentialSettings(
            beam_argv=tuple(beam_argv), runner=args.runner,
            minibatches_per_window=args.minibatches_per_window))
    from pipelines.training.beam_train import BeamRunner, BeamSettings  # imports Beam (above)
    return BeamRunner(BeamSettings(
        beam_argv=tuple(beam_argv), runner=args.runner,
        minibatches_per_window=args.minibatches_per_window, unroll=args.unroll,
        n_threads=args.threads, detach=detach, exchange=getattr(args, "exchange", None)))


def build_spec(args, algorithm: str, settings, schedule: Schedule, heldout, output: Output,
               run_info) -> TrainSpec:
    """The :class:`lda_core.training.spec.TrainSpec` of this run from the options and what
    the command resolved (schedule, held-out set, output, run information)."""
    return TrainSpec(AlgorithmSpec(algorithm, {k: v for k, v in settings.items()
                                               if v is not None}),
                     schedule, Evaluation(heldout, args.eval_every), output, run_info)


def _heldout(files, shard_hash, max_docs, seed: int, detach: bool, train_files):
    """The held-out set to evaluate on, with the sample of ``train_files`` topic health is
    measured on (pipelines.ingest.doc_sample): named by its shards for a detached window (read
    in the job, where the window is evaluated), else read now; None when there is none."""
    if files is None:
        return None
    shards = HeldOutShards(tuple(files), shard_hash, max_docs, seed, tuple(train_files))
    return shards if detach else shards.load()


def _prepare_output(args, vocab_path: str, vocab) -> None:
    """The model directory (emptied with --overwrite) with the dataset's vocab.tsv in it."""
    if args.overwrite and not args.resume:
        _remove_model(args.output)
    elif not args.resume:
        _clear_leftovers(args.output, vocab)
    paths.make_dirs(args.output)
    dst_vocab = paths.join(args.output, dataset.VOCAB_FILE)
    if not paths.exists(dst_vocab):
        files_for(dst_vocab).write_atomic(
            dst_vocab, files_for(vocab_path).read_bytes(vocab_path))


def run(args, beam_argv) -> int:
    """The command's steps in order: checks, data, model directory, run settings, algorithm,
    output, runner hand-over, summary; each step is a helper or a check with its own message."""
    global LAST_SUBMITTED
    t_setup = time.time()
    if getattr(args, "update", False):
        return run_update(args, beam_argv, run)     # run: the Beam update trains through it
    if getattr(args, "input", None) or getattr(args, "grow_vocab", False) or \
            getattr(args, "exclude", None) or \
            getattr(args, "corpus_size", None) is not None or \
            getattr(args, "keep_n", None) is not None or \
            getattr(args, "replay", None) is not None or \
            getattr(args, "replay_shards", None) is not None:
        raise UsageError("--input, --exclude, --grow-vocab, --corpus-size, --keep-n, --replay "
                         "and --replay-shards apply with --update (training on new "
                         "documents); a fresh run reads --shards written by `ldabeam "
                         "vectorize`")
    _check_args(args)
    shard_set, shard_hash, vocab_path, vocab = _resolve_data(args)
    files = shard_set.files
    if getattr(args, "plan", False) and not args.resume:
        store, state = None, None        # --plan opens no model folder (nor a cloud's)
    else:
        store, state = _open_model_dir(args, vocab, shard_hash)
    prev = _run_params(state) if state is not None else {}
    data_record = shard_set.record()
    if state is not None:
        check_resume_dataset(prev, data_record, args)
    if state is None:
        apply_remote_defaults(args, beam_argv, files, len(vocab))
    algorithm, minibatch, seed = _resolve_order(args, beam_argv, state, prev)
    whole_corpus = _capability(algorithm, "whole_corpus")
    accumulates = _capability(algorithm, "accumulates_passes")
    if whole_corpus and state is not None:
        raise UsageError("--resume is not available for the batch Gibbs sampler (gibbs); "
                         "train again with more --passes (sweeps)")
    sequential = _capability(algorithm, "sequential")
    detach = bool(getattr(args, "detach", False))
    heldout_files = resolve_heldout(args.shards, args.heldout,
                                    getattr(args, "unverified", False))
    if heldout_files is not None:
        dataset.check_vocab_hash(heldout_files, shard_hash)
    pass_stop, passes = _resolve_passes(args, algorithm, state, prev, heldout_files, detach,
                                        whole_corpus, accumulates, sequential)
    args.eval_every = default_eval_every(args.eval_every, pass_stop is not None)

    stream = ShardStream(files, minibatch=minibatch, seed=seed, passes=passes,
                         expected_vocab_hash=shard_hash, n_words=len(vocab))

    settings = {dest: getattr(args, dest, None) for dest in algorithm_option_dests()}
    run_info = dict(shards=paths.absolute(args.shards), minibatch=minibatch, seed=seed,
                    passes=passes, n_docs=stream.n_docs, n_shards=len(files), runner=args.runner,
                    algorithm=algorithm, vocab_hash=shard_hash, dataset=data_record)
    if not whole_corpus and not sequential:
        # the reduction shape: the checkpoint's on --resume, else --pieces, else the
        # trainer's default (lda_core.training.pieces)
        explicit = getattr(args, "pieces", None)
        recorded = pieces_mod.recorded_pieces(prev, state is not None)
        if explicit is not None or recorded is not None:
            run_info[pieces_mod.RUN_KEY] = pieces_mod.resolve_pieces(explicit, recorded)
        explicit = getattr(args, "staleness", None)
        recorded = staleness_mod.recorded_staleness(prev, state is not None)
        if explicit is not None or recorded is not None:
            run_info[staleness_mod.RUN_KEY] = staleness_mod.resolve_staleness(explicit,
                                                                              recorded)
        explicit_w = getattr(args, "staleness_warmup", None)
        if run_info.get(staleness_mod.RUN_KEY):
            resumed_s = state is not None and staleness_mod.RUN_KEY in (prev or {})
            run_info[staleness_mod.WARMUP_KEY] = staleness_mod.resolve_warmup(
                explicit_w, staleness_mod.recorded_warmup(prev, resumed_s))
        elif explicit_w is not None:
            raise UsageError("--staleness-warmup %d: it applies to --staleness 1 or more; "
                             "this run has staleness 0" % explicit_w)
    elif getattr(args, "staleness", None):
        raise UsageError("--staleness needs an algorithm with minibatch steps (online-vb, "
                         "scvb0, sparse-gibbs-vb); %s has none" % algorithm)

    # --- runner dispatch ---------------------------------------------------------------------
    inprocess = args.runner.lower() in ("inprocess", "in-process", "local")
    runner = choose_runner(args, beam_argv, algorithm,
                           Route(inprocess, sequential, whole_corpus, detach,
                                 pass_stop is not None))
    algo = _load_algorithm(args, state, settings, algorithm, len(vocab), minibatch, seed,
                           stream, shard_hash)
    if getattr(args, "plan", False):
        print_plan(args, beam_argv, algorithm, algo, stream, run_info)
        return 0

    start = resume_position(state) if state is not None else 0
    if accumulates:
        start = None   # one step per pass: the algorithm's step is its position
    if state is not None and start is not None and pass_stop is None and not detach:
        # a --detach launch is one turn of a scheduler's loop: at the end it reports
        # "training is complete ... no job submitted" and exits 0, which ends the loop
        _check_resume_has_steps(args, state, start, stream.total_steps)
    if sequential and not whole_corpus and passes > 1:
        raise UsageError("%s consumes the documents as a stream, each once: --passes must be "
                         "1 (got %d)" % (algorithm, passes))
    heldout = _heldout(heldout_files, shard_hash, args.heldout_max_docs, seed, detach, files)
    if pass_stop is not None:
        check_pass_stop(algo, heldout, stream.batches_per_pass, accumulates)
    _prepare_output(args, vocab_path, vocab)
    manifest.record_tokenizer(shard_set, args.output)   # MODEL_DIR/tokenizer.json

    run_log = _open_run_log(args.output, detach)
    if inprocess and not sequential and not whole_corpus:
        # the first run in a fresh environment compiles the kernels: one line, then the
        # compile, then its seconds
        warm_kernels(lambda v, d: build_algorithm(
            algorithm, algo.n_topics, v,
            settings=settings if state is None else {}, corpus_size=d,
            seed=0, vocab_hash=None, corpus_tokens=None), heldout is not None)
    logger.info("training %s: K=%d V=%d D=%d S=%d passes=%d (%d steps) seed=%d, %d shards; "
                "set-up %.1f s", algorithm, algo.n_topics, len(vocab), stream.n_docs, minibatch,
                passes, stream.total_steps, seed, len(files), time.time() - t_setup)
    try:
        spec = build_spec(args, algorithm, settings, Schedule(
            passes=passes, seed=seed, minibatch=minibatch, max_steps=args.max_steps,
            start=start, resume=bool(args.resume), pass_stop=pass_stop, rel_tol=args.rel_tol,
            total_steps=stream.total_steps), heldout, Output(
            model_dir=args.output, checkpoint_store=store, run_log=run_log,
            checkpoint_every=args.checkpoint_every, progress=not args.no_progress), run_info)
        data = TrainData(files=tuple(files), vocab_hash=shard_hash, minibatches=stream,
                         documents=lambda: read_docs(files, shard_hash,
                                                     columns=("doc_id", "word_ids", "counts"),
                                                     n_words=algo.n_words))
        res = runner.run(spec, algo, data, Session.for_spec(spec))
    except TrainingInterrupted as e:
        # Ctrl-C / SIGTERM: the steps done are published (lda_core.training.trainer); one
        # line, 130 / 143 as the command line gives for a signal
        print("ldabeam train: %s" % e, file=sys.stderr)
        return 128 + e.signum
    finally:
        run_log.close()
    if detach:
        LAST_SUBMITTED = res
        print_detached(args, algorithm, algo, stream, res)
        return 0
    print_summary(args, algorithm, algo, stream, res, pass_stop)
    fault_point("ended")     # a test's kill point: the run log has its end, the lease is held
    return 0


def _resolve_data(args):
    """The shards (a verified :class:`pipelines.ingest.manifest.ShardSet`), their vocabulary
    hash, and the vocabulary that matches it; every shard is checked against its dataset's
    manifest first (names, rows, sha256), once per run."""
    shard_set = manifest.open_shards(args.shards,
                                    unverified=getattr(args, "unverified", False))
    files = shard_set.files
    shard_hash = dataset.check_vocab_hash(files, None)
    vocab_path = dataset.find_vocab(args.shards, args.vocab)
    vocab = Vocabulary.read(vocab_path)
    if vocab.hash != shard_hash:
        raise InputError("vocabulary %s has hash %s but the shards were vectorised with %s"
                         % (vocab_path, vocab.hash, shard_hash))
    return shard_set, shard_hash, vocab_path, vocab


def check_resume_dataset(prev: Dict[str, Any], record: Dict[str, Any], args) -> None:
    """``--resume`` continues the minibatch order of the same documents: the dataset the
    checkpoint records (``info.run.dataset``: shard names, rows, sha256 digest) must be the
    one ``--shards`` names. UsageError naming the difference and what to do otherwise."""
    before = prev.get("dataset")
    if not isinstance(before, dict) or "digest" not in before:
        logger.warning("--resume: the checkpoint in %s records no dataset (written by an older "
                       "ldabeam); cannot check that --shards %s is the data it was trained on",
                       args.output, args.shards)
        return
    if before["digest"] == record["digest"]:
        return
    what = None
    if before.get("documents") != record["documents"] or before.get("shards") != \
            record["shards"]:
        what = "%s documents in %s shards, --shards has %d in %d" % (
            before.get("documents"), before.get("shards"), record["documents"],
            record["shards"])
    elif isinstance(before.get("files"), list) and "files" in record:
        for old, new in zip(before["files"], record["files"]):
            if list(old) != list(new):
                what = "its shard %s (%s documents, sha256 %s...) is %s (%s documents, " \
                       "sha256 %s...) here" % (old[0], old[1], str(old[2])[:12], new[0],
                                               new[1], str(new[2])[:12])
                break
    raise UsageError(
        "--resume: --shards %s is not the dataset the checkpoint in %s was trained on (%s); "
        "a resumed run continues the same documents -- to train on new documents use a new "
        "--output, or the update mode" % (args.shards, args.output,
                                         what or "dataset digest %s..., here %s..." % (
                                             before["digest"][:12], record["digest"][:12])))


def _open_model_dir(args, vocab, shard_hash):
    """The checkpoint store of --output and the state to resume (None for a fresh run)."""
    keep = args.keep_checkpoints or None
    store = CheckpointStore(args.output, keep_last=keep, check_algorithm=True)
    state = None
    if args.resume:
        # word blocks stay in row order: the resumed algorithm takes them as its state
        state = store.latest(row_order=True)
        if state is None:
            raise UsageError("--resume: no checkpoint in %s to resume from" % args.output)
        state.validate(algorithm=args.algorithm, n_topics=args.topics, n_words=len(vocab),
                       vocab_hash=shard_hash)
    elif store.files.isdir(args.output) and store.list_checkpoints() and not args.overwrite:
        raise OutputError("%s already holds checkpoints; pass --resume to continue that run, "
                          "--overwrite to replace it, or choose another --output" % args.output)
    elif args.topics is None:
        raise UsageError("--topics K is required")
    return store, state


def _resolve_order(args, beam_argv, state, prev: Dict[str, Any]):
    """The algorithm, minibatch size and seed: the options, else the checkpoint's (a resumed
    run must keep the minibatch order), else the defaults for the runner."""
    algorithm = args.algorithm or (state.algorithm if state is not None else DEFAULT_ALGORITHM)
    minibatch, seed = args.minibatch, args.seed
    if state is not None:
        # S is recorded once, in the run information (recorded_minibatch also reads where
        # older checkpoints kept it); the seed there, else the algorithm's
        recorded = (recorded_minibatch(prev, state.params),
                    prev.get("seed", state.params.get("seed")))
        for opt, val, before in (("--minibatch", minibatch, recorded[0]),
                                 ("--seed", seed, recorded[1])):
            if val is not None and before is not None and int(val) != int(before):
                raise UsageError("%s %d differs from the checkpoint's %d: a resumed run must "
                                 "keep the minibatch order" % (opt, val, before))
        minibatch = minibatch if minibatch is not None else recorded[0]
        seed = seed if seed is not None else recorded[1]
    if minibatch is None and algorithm == "online-vb" and _beam_workers(args, beam_argv):
        minibatch = BEAM_WORKERS_MINIBATCH
        logger.info("--minibatch not given: %d for online-vb on a Beam runner with worker "
                    "processes (per-step overhead; docs/beam-training.md)", minibatch)
    if minibatch is None and algorithm != "online-vb" and _beam_workers(args, beam_argv):
        logger.warning("--minibatch not given: %d, %s's own; on a Beam runner with worker "
                       "processes every step pays the runner's scheduling of a stage "
                       "(docs/beam-training.md): give a larger --minibatch, or --algorithm "
                       "online-vb (S = %d there)", default_minibatch(algorithm), algorithm,
                       BEAM_WORKERS_MINIBATCH)
    minibatch = int(minibatch if minibatch is not None else default_minibatch(algorithm))
    seed = int(seed if seed is not None else 0)
    return algorithm, minibatch, seed


def _resolve_passes(args, algorithm, state, prev, heldout_files, detach, whole_corpus,
                    accumulates, sequential):
    """The ``--passes auto`` rule (or None) and the number of passes of this run."""
    requested = args.passes
    if requested is None and state is None and not (whole_corpus or accumulates or sequential):
        requested = default_passes(algorithm, heldout_files is not None, detach)
        logger.info("--passes not given: %s for %s (%s)", requested, algorithm,
                    "stop when the held-out score stops improving" if requested == "auto"
                    else "no held-out set to stop on" if heldout_files is None
                    else "--detach" if detach else "its default")
    pass_stop = _pass_stop(requested, prev, args.passes_patience)
    passes = pass_stop.max_passes if pass_stop is not None else int(
        requested if requested is not None else prev.get(
            "passes", BATCH_MAX_PASSES if accumulates else GIBBS_SWEEPS if whole_corpus else 1))
    if whole_corpus and args.burn_in is not None and args.burn_in >= passes:
        raise UsageError("--burn-in %d: gibbs burn-in must be in [0, --passes - 1] = [0, %d] "
                         "(no sweep would be averaged into phi)" % (args.burn_in, passes - 1))
    return pass_stop, passes


def _load_algorithm(args, state, settings, algorithm, n_words, minibatch, seed, stream,
                    shard_hash):
    """The algorithm: from the checkpoint (its settings win over the options, with a warning
    naming the ignored ones) or fresh from the options."""
    if state is not None:
        given = [k for k, v in settings.items() if v is not None and k != "threads"]
        if given:
            logger.warning("--resume: %s ignored, the checkpoint's settings are used",
                           ", ".join("--" + g.replace("_", "-") for g in given))
        cls = algorithm_class(state.algorithm)
        check_resumed_blocks(cls, settings.get("word_blocks"), state.params)
        algo = algorithm_from_state(state, n_threads=args.threads or None, take=True)
        logger.info("resuming %s from step %d (%d documents seen)", state.algorithm,
                    state.step, state.docs_seen)
        return algo
    return build_algorithm(algorithm, args.topics, n_words, settings=settings,
                           corpus_size=stream.n_docs, seed=seed,
                           vocab_hash=shard_hash, corpus_tokens=stream.count_tokens)


def _check_resume_has_steps(args, state, start: int, total_steps: int) -> None:
    """A resumed run that would apply no step is refused, saying why (it is never a no-op
    that exits 0) -- unless the run was killed after publishing its last checkpoint and before
    its run log's ``end`` record: then the resume only finishes the run (no step, the end)."""
    end = total_steps if args.max_steps is None else min(total_steps, args.max_steps)
    if start < end or not _run_log_ended(args.output):
        return
    why = ("--max-steps %d" % args.max_steps if args.max_steps is not None
           and args.max_steps <= start and args.max_steps < total_steps
           else "the %d steps of this run's passes over %s" % (total_steps, args.shards))
    raise UsageError("--resume: the checkpoint in %s is at step %d, at the end of %s, so no "
                     "step would run; give more --passes to train further on these shards, or "
                     "use --update to train on new documents" % (args.output, state.step, why))


def _run_log_ended(output: str) -> bool:
    """Whether the model's run log ends with a run's ``end`` record (a run killed after its
    last checkpoint has none; a model with no run log counts as ended)."""
    path = paths.join(output, RUN_LOG_FILE)
    if not paths.exists(path):
        return True
    last = None
    for last in iter_run_log(path, damaged=[]):
        pass
    return last is None or last.get("event") == "end"


def _open_run_log(output: str, detach: bool):
    """The run log of MODEL_DIR; with --detach the window's job appends the records, so the
    launcher neither opens nor reads the log (only its path)."""
    if detach:
        return _RunLogPath(paths.join(output, RUN_LOG_FILE))
    return RunLog(paths.join(output, RUN_LOG_FILE))


def _pass_stop(passes, prev: Dict[str, Any], patience: Optional[int]):
    """The ``--passes auto`` rule of this run, or None: a fresh one for ``--passes auto``
    (with ``--passes-patience``), the checkpoint's (its settings and its history of pass
    scores) when a resumed auto run is continued without ``--passes`` or with ``--passes
    auto``."""
    if not (passes == "auto" or (passes is None and AUTO_KEY in prev)):
        if patience is not None:
            raise UsageError("--passes-patience applies only with --passes auto")
        return None
    if AUTO_KEY not in prev:
        return PassStop(patience=AUTO_PATIENCE if patience is None else patience)
    rule = PassStop.from_info(prev[AUTO_KEY])
    if patience is not None and patience != rule.patience:
        raise UsageError("--passes-patience %d differs from the checkpoint's %d: a resumed "
                         "run continues the same rule" % (patience, rule.patience))
    return rule


LAST_SUBMITTED = None   # --detach: the SubmittedWindow of the last launch (for callers)


class _RunLogPath:
    """--detach: where the run log is (the job writes it; nothing to write or close here)."""

    def __init__(self, path: str):
        self.path = path

    def write(self, record) -> None:   # pragma: no cover - the detached driver logs nothing
        raise RuntimeError("a detached launch writes no run-log record itself")

    def close(self) -> None:
        pass
