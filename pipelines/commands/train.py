"""``ldabeam train``: train a topic model on shards, with checkpoints, resume and a run log.

    ldabeam train --shards SHARD_DIR --output MODEL_DIR --topics K [--algorithm online-vb]
                  [--minibatch S] [--passes N] [--seed N] [--resume] [--runner inprocess]
                  [--runner BEAM_RUNNER [--detach]]

The model directory receives ``vocab.tsv`` (copied from the dataset, so topics print as
words), ``checkpoints/`` (one complete topic state per published step, ``LATEST`` pointer) and
``run_log.jsonl`` (one JSON record per global step). Everything the command can check is
checked before any training work: the output option, the shard set, the vocabulary hash of
every shard (against the model's when resuming), and a resumed checkpoint's algorithm, K and V.

``--detach`` (Beam runners; Dataflow Flex Templates): one window is submitted and the command
returns; the job publishes the checkpoint and appends the run log itself
(:mod:`pipelines.beam_train`, docs/beam-training.md "Detached windows").

Algorithm settings (``ALGO_OPTIONS``: option -> constructor keyword) default to the algorithm's
own, ``--minibatch`` included (SCVB0 and sparse Gibbs-VB: 100, their papers'; online VB 256).
An option the chosen algorithm does not use is an error naming the option and the algorithm
(never silently ignored): e.g. ``--kappa``/``--tau0`` with scvb0, whose two schedules are
``--topic-step-{scale,tau,kappa}`` and ``--doc-step-{scale,tau,kappa}``. An out-of-range value
is the algorithm's ValueError (parameter and allowed range), prefixed with the option.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import os
import shutil
import sys
import time
from typing import Any, Dict, List, Optional

from pipelines import dataset
from pipelines.algorithm_options import (  # noqa: F401 (the command's API)
    ALGO_OPTIONS, BATCH_MAX_PASSES, BEAM_WORKERS_MINIBATCH, DEFAULT_ALGORITHM, DEFAULT_MINIBATCH,
    GIBBS_SWEEPS, HINTS, NOT_APPLICABLE, PAPERS, _HIDDEN, _accepted, _default, _opt,
    build_algorithm, default_minibatch)

logger = logging.getLogger(__name__)

def _beam_workers(args, beam_argv) -> bool:
    """True when --runner is a Beam runner whose workers are other processes."""
    if args.runner.lower() in ("inprocess", "in-process", "local"):
        return False
    try:
        from pipelines.beam_options import runner_config
        return not runner_config(args.runner, list(beam_argv or ())).in_process
    except ValueError:
        return False      # an unknown runner is reported later, with its own message


def _minibatch_defaults_help() -> str:
    from lda_core.algorithm import available_algorithms
    try:
        names = available_algorithms()
    except Exception:  # pragma: no cover
        names = []
    own = ["%s %d" % (n, default_minibatch(n)) for n in names
           if _default(n, "batch_size") is not None]
    return ", ".join(own + ["otherwise %d" % DEFAULT_MINIBATCH])


def _algorithm_help() -> str:
    from lda_core.algorithm import available_algorithms, algorithm_class
    parts = []
    for name in available_algorithms():
        defaults = ""
        try:
            cls = algorithm_class(name)
            kv = ["%s=%s" % (p.name, p.default) for p in _accepted(cls).values()
                  if p.name not in _HIDDEN and not p.name.startswith("_")
                  and p.default is not inspect.Parameter.empty]
            defaults = "; defaults " + ", ".join(kv) if kv else ""
        except Exception as e:  # a half-installed algorithm must not break --help
            defaults = " (not importable: %s)" % str(e).split("\n")[0][:80]
        parts.append("%s [%s%s]" % (name, PAPERS.get(name, "?"), defaults))
    return "; ".join(parts) or "none installed"


def add_arguments(p) -> None:
    # long because it declares every option of `ldabeam train`, one argparse call each
    g = p.add_argument_group("data and model")
    g.add_argument("--shards", metavar="SHARD_DIR",
                   help="dataset directory written by `ldabeam vectorize` (its train split), a "
                        "directory of .parquet shards, or a glob (required)")
    g.add_argument("--output", metavar="MODEL_DIR",
                   help="model directory: vocab.tsv, checkpoints/, run_log.jsonl (required)")
    g.add_argument("--vocab", metavar="VOCAB_TSV", default=None,
                   help="vocabulary file when SHARD_DIR is not a dataset directory "
                        "(default: SHARD_DIR/vocab.tsv or its parent's)")
    g.add_argument("--topics", "-k", type=int, metavar="K", default=None,
                   help="number of topics (required unless --resume)")
    g.add_argument("--algorithm", default=None,
                   help="training algorithm (default %s; with --resume: the checkpoint's). "
                        "Installed: %s" % (DEFAULT_ALGORITHM, _algorithm_help()))
    g.add_argument("--overwrite", action="store_true",
                   help="replace a model already in MODEL_DIR (its checkpoints/, run_log.jsonl "
                        "and vocab.tsv are removed once every check has passed)")
    g.add_argument("--resume", action="store_true",
                   help="continue from the latest checkpoint in MODEL_DIR (same order, same "
                        "result as an uninterrupted run)")
    g = p.add_argument_group("schedule")
    g.add_argument("--minibatch", "-S", type=int, default=None, metavar="S",
                   help="documents per minibatch (unset: the algorithm's own default -- %s; "
                        "online-vb on a Beam runner with worker processes: %d; "
                        "batch-vb: documents read at a time, the step still uses all D; the "
                        "stream samplers: documents per process() call; with --resume: the "
                        "checkpoint's)" % (_minibatch_defaults_help(), BEAM_WORKERS_MINIBATCH))
    g.add_argument("--passes", type=int, default=None,
                   help="passes over the corpus (default 1; batch-vb: maximum iterations, "
                        "default %d; gibbs: sweeps over the corpus held in memory, default %d)"
                        % (BATCH_MAX_PASSES, GIBBS_SWEEPS))
    g.add_argument("--seed", type=int, default=None,
                   help="seed of the minibatch order and of every random draw (default 0)")
    g.add_argument("--rel-tol", type=float, default=1e-5,
                   help="batch-vb: stop when the relative ELBO change falls below this")
    g.add_argument("--max-steps", type=int, default=None,
                   help="stop when the global step reaches this number (absolute, so a "
                        "resumed run stops where an uninterrupted one would)")
    g = p.add_argument_group(
        "algorithm settings (unset: the algorithm's own default; an option the chosen "
        "algorithm does not use is an error)")
    g.add_argument("--kappa", type=float, default=None,
                   help="learning-rate decay, rho_t = (tau0 + t)^-kappa, kappa in (0.5, 1] "
                        "(online-vb, sparse-gibbs-vb; scvb0: --topic-step-kappa)")
    g.add_argument("--tau0", type=float, default=None,
                   help="learning-rate delay tau0 >= 0 (online-vb, sparse-gibbs-vb; scvb0: "
                        "--topic-step-tau)")
    g.add_argument("--alpha", type=float, default=None, help="document-topic prior (> 0)")
    g.add_argument("--eta", type=float, default=None, help="topic-word prior (> 0)")
    g.add_argument("--max-iter", type=int, default=None,
                   help="cap on E-step iterations per document")
    g.add_argument("--tol", type=float, default=None,
                   help="E-step convergence threshold (mean absolute change of gamma)")
    g.add_argument("--dtype", choices=["float32", "float64"], default=None,
                   help="E-step floating point type (sums are always float64)")
    g.add_argument("--threads", type=int, default=None, help="E-step threads (numba)")
    g.add_argument("--optimize-alpha", action="store_true", default=None,
                   help="online Newton updates of alpha")
    g.add_argument("--optimize-eta", action="store_true", default=None,
                   help="online Newton updates of eta")
    g.add_argument("--burn-in", type=int, default=None, metavar="N",
                   help="scvb0: burn-in passes over each document before the pass that "
                        "accumulates statistics, in [0, 1000] (default %s); sparse-gibbs-vb: "
                        "burn-in Gibbs sweeps per document B, in [0, 1000] (default %s); "
                        "gibbs: sweeps before phi is averaged, in [0, --passes - 1] "
                        "(default %s)" % (_default("scvb0", "burn_in", "?"),
                                          _default("sparse-gibbs-vb", "burn_in", "?"),
                                          _default("gibbs", "burn_in", "?")))
    g.add_argument("--samples", type=int, default=None, metavar="S",
                   help="sparse-gibbs-vb: kept Gibbs sweeps per document S, in [1, 1000] "
                        "(default %s)" % _default("sparse-gibbs-vb", "samples", "?"))
    for which, sfx, what in (
            ("topic", "phi", "the topic statistics N^Phi, N^Z (t = minibatch index)"),
            ("doc", "theta", "the per-document statistics N^Theta (t = updates within the "
                             "document)")):
        g.add_argument("--%s-step-scale" % which, type=float, default=None, metavar="S",
                       help="scvb0: s > 0 of the step size rho = s/(tau + t)^kappa for %s "
                            "(default %s)" % (what, _default("scvb0", "s_" + sfx, "?")))
        g.add_argument("--%s-step-tau" % which, type=float, default=None, metavar="TAU",
                       help="scvb0: tau >= 0 of that schedule (default %s)"
                            % _default("scvb0", "tau_" + sfx, "?"))
        g.add_argument("--%s-step-kappa" % which, type=float, default=None, metavar="KAPPA",
                       help="scvb0: kappa in (0.5, 1] of that schedule (default %s)"
                            % _default("scvb0", "kappa_" + sfx, "?"))
    g.add_argument("--gibbs-parts", type=int, default=None, metavar="N",
                   help="gibbs: document blocks per sweep, in [1, 4096]; 1 = the exact "
                        "sequential sampler, N > 1 = AD-LDA on N threads (the result depends "
                        "on N; default %s)" % _default("gibbs", "n_parts", "?"))
    g = p.add_argument_group("stream-order samplers (o-lda, incremental-gibbs, particle-filter)")
    g.add_argument("--init-fraction", type=float, default=None, metavar="F",
                   help="fraction in [0, 1] of the training documents in the batch-Gibbs "
                        "prefix (o-lda default 0.1; incremental-gibbs and particle-filter: "
                        "no prefix unless given)")
    g.add_argument("--init-docs", type=int, default=None, metavar="N",
                   help="the batch-Gibbs prefix as a number of documents (instead of "
                        "--init-fraction)")
    g.add_argument("--init-sweeps", type=int, default=None, metavar="N",
                   help="batch-Gibbs sweeps over the prefix (default %s)"
                        % _default("o-lda", "init_sweeps", "?"))
    g.add_argument("--rejuvenation", type=int, default=None, metavar="R",
                   help="|R(i)| in [0, 100000], earlier positions resampled "
                        "(incremental-gibbs: after every token, default 4; particle-filter: "
                        "per particle after each resampling, default %s)"
                        % _default("particle-filter", "n_rejuv", "?"))
    g.add_argument("--rejuvenation-schedule", choices=["uniform", "decay"], default=None,
                   help="how R(i) is drawn: uniform over all earlier positions, or decayed "
                        "towards recent ones (default uniform)")
    g.add_argument("--rejuvenation-decay", type=float, default=None, metavar="TOKENS",
                   help="with --rejuvenation-schedule decay: mean distance back, in tokens "
                        "(default 1000)")
    g.add_argument("--particles", type=int, default=None, metavar="P",
                   help="particle-filter: number of particles, in [1, 100000] (default %s)"
                        % _default("particle-filter", "n_particles", "?"))
    g.add_argument("--ess-threshold", type=float, default=None, metavar="X",
                   help="particle-filter: resample when the effective sample size 1/sum(w^2) "
                        "falls to X or below, X in (0, P] (default %s)"
                        % _default("particle-filter", "ess_threshold", "?"))
    g = p.add_argument_group("evaluation, checkpoints, logging")
    g.add_argument("--heldout", default="auto", metavar="SHARD_DIR_OR_SPLIT",
                   help="held-out documents for evaluation: 'auto' (the dataset's heldout split "
                        "if it has one), 'none', a split name of the dataset, or a shard path")
    g.add_argument("--heldout-max-docs", type=int, default=2000,
                   help="evaluate on at most this many held-out documents")
    g.add_argument("--eval-every", type=int, default=50,
                   help="evaluate every N global steps (0: only at the end)")
    g.add_argument("--checkpoint-every", type=int, default=100,
                   help="publish a checkpoint every N global steps (0: only at the end)")
    g.add_argument("--keep-checkpoints", type=int, default=3,
                   help="keep the N newest checkpoints (0: keep all)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("runner")
    g.add_argument("--runner", default="inprocess",
                   help="inprocess (this process, numba threads), or a Beam runner "
                        "(DirectRunner, PortableRunner, DataflowRunner, FlinkRunner, ...): "
                        "pipelines.beam_train for the local/global-step algorithms, "
                        "pipelines.beam_sequential (one single-worker DoFn per window) for "
                        "gibbs, o-lda, incremental-gibbs and particle-filter")
    g.add_argument("--minibatches-per-window", type=int, default=None,
                   help="Beam runners: minibatches per pipeline run (stream samplers: "
                        "default --checkpoint-every, one checkpoint per window)")
    g.add_argument("--unroll", action=argparse.BooleanOptionalAction, default=None,
                   help="Beam runners: chain the window's minibatches inside one pipeline "
                        "(default: the Beam trainer's choice)")
    g.add_argument("--detach", action="store_true",
                   help="Beam runners, local/global-step algorithms: submit ONE window "
                        "(--minibatches-per-window minibatches from the start, or with "
                        "--resume from the latest checkpoint) and return without waiting "
                        "(Dataflow Flex Templates); the job itself publishes the checkpoint, "
                        "evaluates and appends the window's run-log records. Chain windows "
                        "by launching again with --resume. Runners that run the job in this "
                        "process (DirectRunner) are still waited for")


# ------------------------------------------------------------------------------------ helpers

def find_vocab(shards: str, explicit: Optional[str]) -> str:
    """The vocab.tsv that belongs to SHARD_DIR."""
    if explicit:
        return explicit
    cands = []
    if not any(ch in shards for ch in "*?[") and not shards.endswith(".parquet"):
        cands.append(dataset.join(shards, dataset.VOCAB_FILE))
    base = shards.rstrip("/")
    for _ in range(2):
        base = os.path.dirname(base) if not dataset.is_remote(base) else base.rsplit("/", 1)[0]
        if base:
            cands.append(dataset.join(base, dataset.VOCAB_FILE))
    for c in cands:
        if dataset.exists(c):
            return c
    raise FileNotFoundError("no vocabulary found for %s (looked for %s); pass --vocab"
                            % (shards, ", ".join(cands)))


def resolve_heldout(shards: str, heldout: str) -> Optional[List[str]]:
    """Shard files of the held-out set named by ``--heldout`` (None for no evaluation)."""
    if heldout in (None, "", "none"):
        return None
    is_dataset = dataset.exists(dataset.join(shards, dataset.MANIFEST_FILE)) or \
        dataset.exists(dataset.join(shards, dataset.TRAIN_SPLIT))
    if heldout == "auto":
        if not is_dataset:
            return None
        try:
            return dataset.resolve_shards(shards, split=dataset.HELDOUT_SPLIT)
        except FileNotFoundError:
            return None
    if is_dataset and "/" not in heldout and not dataset.exists(heldout):
        return dataset.resolve_shards(shards, split=heldout)
    return dataset.resolve_shards(heldout, split=dataset.HELDOUT_SPLIT)


def _train_gibbs(algo, files, shard_hash, sweeps, heldout, store, run_log, run_info):
    """Collapsed Gibbs is a batch sampler: all training documents in memory, ``sweeps``
    sweeps (``--passes``) of which the first ``algo.burn_in`` (the sampler's default unless
    given) are not averaged into φ, one checkpoint at the end
    (:func:`lda_core.trainer.fit_whole_corpus`, as on Beam)."""
    from lda_core.session import Session
    from lda_core.trainer import TrainResult, fit_whole_corpus
    from pipelines.shard_stream import read_docs
    ses = Session(run_log=run_log, checkpoint_store=store, run_info=run_info, heldout=heldout,
                  vocab_hash=shard_hash)
    ses.start(algo, sweeps=sweeps, burn_in=algo.burn_in, run=run_info)
    docs = read_docs(files, shard_hash, columns=("doc_id", "word_ids", "counts"))
    ckpt = fit_whole_corpus(algo, docs, sweeps, ses)
    ses.evaluate(algo)
    end = ses.end(algo.docs_seen)
    return TrainResult(algo, sweeps, algo.docs_seen, sweeps, end["elapsed"], dict(ses.metrics),
                       ckpt)


def _capability(name: str, what: str) -> bool:
    """Whether algorithm ``name`` declares capability ``what`` (lda_core.algorithm)."""
    from lda_core.algorithm import algorithm_class
    try:
        return bool(getattr(algorithm_class(name), what, False))
    except ValueError:
        return False


def _remove_model(model_dir: str) -> None:
    """Remove what ``ldabeam train`` wrote in ``model_dir`` (and nothing else)."""
    from lda_core.checkpoint import CHECKPOINTS
    from lda_core.run_log import RUN_LOG_FILE
    files = dataset.files_for(model_dir)      # local, or Beam FileSystems for a URL
    if not files.isdir(model_dir):
        return
    files.remove_tree(files.join(model_dir, CHECKPOINTS))
    for name in (RUN_LOG_FILE, dataset.VOCAB_FILE):
        files.remove_file(files.join(model_dir, name))
    logger.info("--overwrite: removed the previous model in %s", model_dir)


def _run_params(state) -> Dict[str, Any]:
    return dict((state.info or {}).get("run") or {})


# ------------------------------------------------------------------------------------ command

def _check_args(args) -> None:
    """The options' own ranges, before anything is read."""
    if not args.output:
        raise ValueError("--output MODEL_DIR is required (the model directory to write)")
    if not args.shards:
        raise ValueError("--shards SHARD_DIR is required (a dataset written by "
                         "`ldabeam vectorize`)")
    for name in ("topics", "minibatch", "passes", "max_iter", "threads",
                 "heldout_max_docs", "minibatches_per_window"):
        v = getattr(args, name, None)
        if v is not None and v < 1:
            raise ValueError("--%s must be >= 1, got %d" % (name.replace("_", "-"), v))
    if not args.rel_tol > 0:
        raise ValueError("--rel-tol must be > 0, got %r" % args.rel_tol)
    for name in ("eval_every", "checkpoint_every", "keep_checkpoints", "seed", "max_steps"):
        v = getattr(args, name, None)
        if v is not None and v < 0:
            raise ValueError("--%s must be >= 0, got %d" % (name.replace("_", "-"), v))


def _check_runner_options(args, beam_argv, algorithm: str, inprocess: bool, sequential: bool,
                          whole_corpus: bool) -> None:
    """The runner options that do not fit the runner or the algorithm, before any work."""
    if inprocess and beam_argv:
        raise ValueError("unrecognized arguments: %s (Beam pipeline options apply only to a "
                         "Beam --runner)" % " ".join(beam_argv))
    if not inprocess:
        # the stream-order samplers run as one DoFn per window (pipelines/beam_sequential.py);
        # the local/global-step algorithms through the Beam trainer (pipelines/beam_train.py)
        module = "pipelines.beam_sequential" if sequential else "pipelines.beam_train"
        if importlib.util.find_spec(module) is None:
            raise ValueError("--runner %s needs %s, which is not in this installation; use "
                             "--runner inprocess" % (args.runner, module))
        if sequential and args.unroll is not None:
            raise ValueError("--%sunroll does not apply to algorithm %s (a stream-order "
                             "sampler runs each window as one DoFn)"
                             % ("" if args.unroll else "no-", algorithm))
        if whole_corpus and args.minibatches_per_window is not None:
            raise ValueError("--minibatches-per-window does not apply to algorithm gibbs (its "
                             "sweeps run in one window)")
    if getattr(args, "detach", False):
        if inprocess:
            raise ValueError("--detach needs a Beam --runner (DataflowRunner, FlinkRunner, "
                             "PortableRunner, DirectRunner): the in-process trainer has no "
                             "job to submit")
        if sequential:
            raise ValueError("--detach is not available for algorithm %s: the stream-order "
                             "samplers' Beam path (pipelines/beam_sequential.py) publishes "
                             "and logs from the driver; run it without --detach" % algorithm)
        if args.unroll is False:
            raise ValueError("--detach runs each window as one unrolled pipeline that "
                             "publishes its own checkpoint; --no-unroll applies the global "
                             "steps on the driver")


def _heldout(files, shard_hash, max_docs, seed: int, detach: bool):
    """The held-out set to evaluate on: named by its shards for a detached window (read in
    the job, where the window is evaluated), else read now; None when there is none."""
    if files is None:
        return None
    if detach:
        from pipelines.beam_train import HeldOutShards
        return HeldOutShards(tuple(files), shard_hash, max_docs, seed)
    from lda_core.trainer import HeldOut
    from pipelines.shard_stream import read_docs
    heldout = HeldOut.from_batch(read_docs(files, shard_hash, max_docs=max_docs), seed=seed)
    return heldout if heldout.docs.n_docs else None


def _prepare_output(args, vocab_path: str, vocab) -> None:
    """The model directory (emptied with --overwrite) with the dataset's vocab.tsv in it."""
    if args.overwrite and not args.resume:
        _remove_model(args.output)
    if not dataset.is_remote(args.output):    # an object store has no folders to create
        os.makedirs(args.output, exist_ok=True)
    dst_vocab = dataset.join(args.output, dataset.VOCAB_FILE)
    if not dataset.exists(dst_vocab):
        if dataset.is_remote(vocab_path) or dataset.is_remote(dst_vocab):
            vocab.write(dst_vocab)
        else:
            shutil.copyfile(vocab_path, dst_vocab + ".tmp")
            os.replace(dst_vocab + ".tmp", dst_vocab)


def run(args, beam_argv) -> int:
    # long because it is the command's steps in order (checks, data, algorithm, output,
    # runner hand-over, summary); each step is a helper or a check with its own message
    global LAST_SUBMITTED
    from lda_core.checkpoint import CheckpointStore
    t_setup = time.time()
    _check_args(args)

    # --- data: shards, vocabulary and its hash (cheap: Parquet footers only) ---------------
    files = dataset.resolve_shards(args.shards)
    shard_hash = dataset.check_vocab_hash(files, None)
    vocab_path = find_vocab(args.shards, args.vocab)
    vocab = dataset.Vocabulary.read(vocab_path)
    if vocab.hash != shard_hash:
        raise ValueError("vocabulary %s has hash %s but the shards were vectorised with %s"
                         % (vocab_path, vocab.hash, shard_hash))

    # --- model directory: fresh or resumed ---------------------------------------------------
    keep = args.keep_checkpoints or None
    store = CheckpointStore(args.output, keep_last=keep)
    state = None
    if args.resume:
        state = store.latest()
        if state is None:
            raise ValueError("--resume: no checkpoint in %s to resume from" % args.output)
        state.validate(algorithm=args.algorithm, n_topics=args.topics, n_words=len(vocab),
                       vocab_hash=shard_hash)
    elif store.files.isdir(args.output) and store.list_checkpoints() and not args.overwrite:
        raise ValueError("%s already holds checkpoints; pass --resume to continue that run, "
                         "--overwrite to replace it, or choose another --output" % args.output)
    elif args.topics is None:
        raise ValueError("--topics K is required")
    prev = _run_params(state) if state is not None else {}
    algorithm = args.algorithm or (state.algorithm if state is not None else DEFAULT_ALGORITHM)
    minibatch, seed = args.minibatch, args.seed
    if state is not None:
        for opt, val, key in (("--minibatch", minibatch, "minibatch"), ("--seed", seed, "seed")):
            before = prev.get(key, state.params.get("batch_size" if key == "minibatch"
                                                    else "seed"))
            if val is not None and before is not None and int(val) != int(before):
                raise ValueError("%s %d differs from the checkpoint's %d: a resumed run must "
                                 "keep the minibatch order" % (opt, val, before))
        minibatch = minibatch if minibatch is not None else prev.get(
            "minibatch", state.params.get("batch_size"))
        seed = seed if seed is not None else prev.get("seed", state.params.get("seed"))
    if minibatch is None and algorithm == "online-vb" and _beam_workers(args, beam_argv):
        minibatch = BEAM_WORKERS_MINIBATCH
        logger.info("--minibatch not given: %d for online-vb on a Beam runner with worker "
                    "processes (per-step overhead; docs/beam-training.md)", minibatch)
    minibatch = int(minibatch if minibatch is not None else default_minibatch(algorithm))
    seed = int(seed if seed is not None else 0)
    whole_corpus = _capability(algorithm, "whole_corpus")
    accumulates = _capability(algorithm, "accumulates_passes")
    if whole_corpus and state is not None:
        raise ValueError("--resume is not available for the batch Gibbs sampler (gibbs); "
                         "train again with more --passes (sweeps)")
    passes = int(args.passes if args.passes is not None else prev.get(
        "passes", BATCH_MAX_PASSES if accumulates else GIBBS_SWEEPS if whole_corpus else 1))
    if whole_corpus and args.burn_in is not None and args.burn_in >= passes:
        raise ValueError("--burn-in %d: gibbs burn-in must be in [0, --passes - 1] = [0, %d] "
                         "(no sweep would be averaged into phi)" % (args.burn_in, passes - 1))

    from pipelines.shard_stream import ShardStream, read_docs
    stream = ShardStream(files, batch_size=minibatch, seed=seed, passes=passes,
                         expected_vocab_hash=shard_hash)
    heldout_files = resolve_heldout(args.shards, args.heldout)
    if heldout_files is not None:
        dataset.check_vocab_hash(heldout_files, shard_hash)

    settings = {dest: getattr(args, dest, None) for dest in ALGO_OPTIONS}
    run_info = dict(shards=os.path.abspath(args.shards) if not dataset.is_remote(args.shards)
                    else args.shards, minibatch=minibatch, seed=seed, passes=passes,
                    n_docs=stream.n_docs, n_shards=len(files), runner=args.runner,
                    algorithm=algorithm, vocab_hash=shard_hash)

    # --- runner dispatch ---------------------------------------------------------------------
    inprocess = args.runner.lower() in ("inprocess", "in-process", "local")
    sequential = _capability(algorithm, "sequential")
    _check_runner_options(args, beam_argv, algorithm, inprocess, sequential, whole_corpus)
    # --- the algorithm: fresh or from the checkpoint ----------------------------------------
    if state is not None:
        from lda_core.algorithm import algorithm_class
        given = [k for k, v in settings.items() if v is not None and k != "threads"]
        if given:
            logger.warning("--resume: %s ignored, the checkpoint's settings are used",
                           ", ".join("--" + g.replace("_", "-") for g in given))
        cls = algorithm_class(state.algorithm)
        kw = {}
        if args.threads and "n_threads" in inspect.signature(cls.from_state).parameters:
            kw["n_threads"] = args.threads
        algo = cls.from_state(state, **kw)
        logger.info("resuming %s from step %d (%d documents seen)", state.algorithm,
                    state.step, state.docs_seen)
    else:
        algo = build_algorithm(algorithm, args.topics, len(vocab), settings=settings,
                               batch_size=minibatch, corpus_size=stream.n_docs, seed=seed,
                               vocab_hash=shard_hash, corpus_tokens=stream.count_tokens)

    from lda_core.trainer import resume_position
    start = resume_position(state) if state is not None else 0
    if accumulates:
        start = None   # one step per pass: the algorithm's step is its position
    if sequential and not whole_corpus and passes > 1:
        raise ValueError("%s consumes the documents as a stream, each once: --passes must be "
                         "1 (got %d)" % (algorithm, passes))
    detach = bool(getattr(args, "detach", False))
    heldout = _heldout(heldout_files, shard_hash, args.heldout_max_docs, seed, detach)
    _prepare_output(args, vocab_path, vocab)

    from lda_core.run_log import RUN_LOG_FILE, RunLog
    if detach:
        # the window's job appends the records; the launcher neither opens nor reads the log
        run_log = _RunLogPath(dataset.join(args.output, RUN_LOG_FILE))
    else:
        run_log = RunLog(dataset.join(args.output, RUN_LOG_FILE))
    logger.info("training %s: K=%d V=%d D=%d S=%d passes=%d (%d steps) seed=%d, %d shards; "
                "set-up %.1f s", algorithm, algo.n_topics, len(vocab), stream.n_docs, minibatch,
                passes, stream.total_steps, seed, len(files), time.time() - t_setup)
    try:
        if sequential and not inprocess:
            beam_sequential = importlib.import_module("pipelines.beam_sequential")
            res = beam_sequential.train(
                algo, files, args.output, passes=passes, seed=seed, batch_size=minibatch,
                minibatches_per_window=args.minibatches_per_window, heldout=heldout,
                eval_every=args.eval_every, checkpoint_store=store,
                checkpoint_every=args.checkpoint_every, run_log=run_log,
                resume=bool(args.resume), max_steps=args.max_steps, run_info=run_info,
                beam_argv=list(beam_argv), runner=args.runner, progress=not args.no_progress)
        elif whole_corpus:
            res = _train_gibbs(algo, files, shard_hash, passes, heldout, store, run_log,
                               run_info)
        elif inprocess:
            from lda_core.trainer import train
            res = train(algo, stream, heldout=heldout, eval_every=args.eval_every,
                        checkpoint_store=store, checkpoint_every=args.checkpoint_every,
                        run_log=run_log, progress=not args.no_progress,
                        max_steps=args.max_steps, total_steps=stream.total_steps,
                        start_step=start, rel_tol=args.rel_tol, run_info=run_info)
        else:
            beam_train = importlib.import_module("pipelines.beam_train")
            res = beam_train.train(
                algo, files, args.output, passes=passes, seed=seed, batch_size=minibatch,
                minibatches_per_window=args.minibatches_per_window, unroll=args.unroll,
                heldout=heldout, eval_every=args.eval_every, checkpoint_store=store,
                checkpoint_every=args.checkpoint_every, run_log=run_log,
                resume=bool(args.resume), max_steps=args.max_steps, run_info=run_info,
                beam_argv=list(beam_argv), runner=args.runner, n_threads=args.threads,
                progress=not args.no_progress, detach=detach)
    finally:
        run_log.close()
    if detach:
        LAST_SUBMITTED = res
        _print_detached(args, algorithm, algo, stream, res)
        return 0
    _print_summary(args, algorithm, algo, stream, res)
    return 0


LAST_SUBMITTED = None   # --detach: the SubmittedWindow of the last launch (for callers)


class _RunLogPath:
    """--detach: where the run log is (the job writes it; nothing to write or close here)."""

    def __init__(self, path: str):
        self.path = path

    def write(self, record) -> None:   # pragma: no cover - the detached driver logs nothing
        raise RuntimeError("a detached launch writes no run-log record itself")

    def close(self) -> None:
        pass


def _print_detached(args, algorithm, algo, stream, sub) -> None:
    """What a detached launch did: the window it submitted, where its results will be."""
    out = sys.stdout
    if sub.result is None:
        print("training is complete: position %d of %d (%s); no job submitted"
              % (sub.start, sub.total, "--max-steps reached" if args.max_steps is not None
                 and sub.total == args.max_steps else "every pass done"), file=out)
        print("  model: %s" % args.output, file=out)
        return
    from pipelines import detached
    print("%s %s: K=%d, V=%d, D=%d documents, minibatch %d; window of minibatches %d..%d "
          "(of %d), run %s" % ("trained" if sub.runs_here else "submitted", algorithm,
                               algo.n_topics, algo.n_words, stream.n_docs, stream.batch_size,
                               sub.start, sub.stop, sub.total, sub.run_key), file=out)
    if sub.runs_here:
        sub.wait()
        print("  --detach: the %s runs the job in this process, so it was waited for (%s)"
              % (args.runner, detached.describe(sub.result, sub.runner)), file=out)
    else:
        print("  job: %s" % detached.describe(sub.result, sub.runner), file=out)
        print("  when the job ends it has published the checkpoint of position %d "
              "(%s/checkpoints/LATEST) and appended the window to %s/run_log.jsonl; then "
              "launch again with --resume%s" % (sub.stop, args.output, args.output,
                                                "" if sub.stop < sub.total
                                                else " (this is the last window)"), file=out)
    print("  model: %s (vocab.tsv, checkpoints/, run_log.jsonl)" % args.output, file=out)


def _print_summary(args, algorithm, algo, stream, res) -> None:
    step = getattr(res, "step", getattr(algo, "step", None))
    out = sys.stdout
    print("trained %s: K=%d, V=%d, D=%d documents, minibatch %d, %d passes planned"
          % (algorithm, algo.n_topics, algo.n_words, stream.n_docs, stream.batch_size,
             stream.passes), file=out)
    if res is not None and hasattr(res, "elapsed"):
        print("  step %s (%d this run), %d documents seen, %.1f s"
              % (step, res.steps_run, res.docs_seen, res.elapsed), file=out)
        m = res.metrics or {}
        if "completion_ll_per_token" in m:
            print("  held-out document completion: %.4f log-likelihood/token (perplexity %.1f)"
                  % (m["completion_ll_per_token"], m["completion_perplexity"]), file=out)
        if "per_word_bound" in m:
            print("  held-out per-word bound (eq. 16): %.4f (perplexity bound %.1f)"
                  % (m["per_word_bound"], m["perplexity_bound"]), file=out)
        if res.checkpoint:
            print("  checkpoint: %s" % res.checkpoint, file=out)
    print("  model: %s (vocab.tsv, checkpoints/, run_log.jsonl)" % args.output, file=out)
