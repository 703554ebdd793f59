"""The options of ``ldabeam train`` (argparse declarations and their help texts); the
command itself is :mod:`pipelines.commands.train`."""
from __future__ import annotations

import argparse

from lda_core.algorithms.algorithm import algorithm_class, ALGORITHMS
from lda_core.training.pass_stop import (AUTO_MAX_PASSES, AUTO_MIN_GAIN, AUTO_PATIENCE,
                                         EVAL_EVERY)
from lda_core.training.staleness import DEFAULT_WARMUP

from pipelines.training.algorithm_options import (BATCH_MAX_PASSES, BEAM_WORKERS_MINIBATCH,
                                                  AUTO_PASSES_BY_DEFAULT, DEFAULT_ALGORITHM,
                                                  DEFAULT_MINIBATCH, GIBBS_SWEEPS, PAPERS, HIDDEN,
                                                  keyword_default, default_minibatch, spec_of,
                                                  spec_option_kwargs, spec_options)


def passes_arg(text: str):
    """``--passes``: a positive number of passes, or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number of passes or 'auto', got %r"
                                         % text) from None


def _minibatch_defaults_help() -> str:
    own = ["%s %d" % (n, default_minibatch(n)) for n in ALGORITHMS
           if algorithm_class(n).DEFAULT_MINIBATCH is not None]
    return ", ".join(own + ["otherwise %d" % DEFAULT_MINIBATCH])


def _algorithm_help() -> str:
    """Each algorithm, its paper and its declared defaults."""
    parts = []
    for name in ALGORITHMS:
        kv = ["%s=%s" % (p.name, p.default) for p in spec_of(name)
              if p.name not in HIDDEN and p.default is not None]
        defaults = "; defaults " + ", ".join(kv) if kv else ""
        parts.append("%s [%s%s]" % (name, PAPERS[name], defaults))
    return "; ".join(parts)


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
    g.add_argument("--unverified", action="store_true",
                   help="also read shards that no dataset manifest lists (written by another "
                        "tool, or by a killed `ldabeam vectorize`); shards a manifest lists "
                        "are always verified against it")
    g.add_argument("--topics", "-k", type=int, metavar="K", default=None,
                   help="number of topics (required unless --resume)")
    g.add_argument("--algorithm", default=None,
                   help="training algorithm (default %s, docs/training.md explains the "
                        "choice; with --resume: the checkpoint's). "
                        "Installed: %s" % (DEFAULT_ALGORITHM, _algorithm_help()))
    g.add_argument("--overwrite", action="store_true",
                   help="replace a model already in MODEL_DIR (its checkpoints/, run_log.jsonl "
                        "and vocab.tsv are removed once every check has passed)")
    g.add_argument("--resume", action="store_true",
                   help="continue from the latest checkpoint in MODEL_DIR (same order, same "
                        "result as an uninterrupted run)")
    g = p.add_argument_group("updating a model with new documents (docs/training.md)")
    g.add_argument("--update", action="store_true",
                   help="continue the model in --output from its latest checkpoint on new "
                        "documents (--shards NEW or --input RAW) for --passes (default 1), "
                        "in this process or on a Beam --runner (same result)")
    g.add_argument("--grow-vocab", action="store_true",
                   help="with --update: add the new documents' words that pass the model's "
                        "pruning rules as new topic-word rows (at the prior)")
    g.add_argument("--corpus-size", type=int, default=None, metavar="N",
                   help="with --update: the documents the model stands for after the update "
                        "(default: those it was trained on plus the new ones); the new "
                        "documents weigh n/N of the topics, N = n makes them the whole corpus")
    g.add_argument("--replay", type=float, default=None, metavar="FRACTION",
                   help="with --update: revisit this share (0 to 1) of the model's training "
                        "documents beside the new ones, a seeded sample mixed into the "
                        "update's minibatches, so the old subjects keep their topics while the "
                        "new ones take some (default 0: none; docs/library.md, section 5)")
    g.add_argument("--replay-shards", default=None, metavar="DIR",
                   help="with --update --replay: where the model's training shards are now "
                        "(default: the --shards its run log names)")
    g.add_argument("--keep-n", type=int, default=None, metavar="N",
                   help="with --update --grow-vocab: the vocabulary's cap (default: the "
                        "training data's --keep-n)")
    g.add_argument("--input", nargs="+", action="extend", metavar="PATH_OR_GLOB", default=[],
                   help="with --update: raw text instead of --shards, in any text format of "
                        "`ldabeam vectorize`, tokenized as the model's training data was")
    g.add_argument("--format", dest="input_format", default="auto",
                   help="with --update: format of --input (default: from the file names)")
    g.add_argument("--exclude", nargs="+", action="extend", metavar="GLOB", default=[],
                   help="with --update --input: files not to read, globs matched against a "
                        "file's name and its path (e.g. --exclude README.TXT)")
    g = p.add_argument_group("schedule")
    g.add_argument("--minibatch", "-S", type=int, default=None, metavar="S",
                   help="documents per minibatch (unset: the algorithm's own default -- %s; "
                        "online-vb on a Beam runner with worker processes: %d; "
                        "batch-vb: documents read at a time, the step still uses all D; the "
                        "stream samplers: documents per process() call; with --resume: the "
                        "checkpoint's)" % (_minibatch_defaults_help(), BEAM_WORKERS_MINIBATCH))
    g.add_argument("--passes", type=passes_arg, default=None, metavar="N|auto",
                   help="passes over the corpus (default: 'auto' for %s when there is a "
                        "held-out set, else 1; batch-vb: maximum iterations, default %d; "
                        "gibbs: sweeps over the corpus held in memory, default %d; with "
                        "--resume: the checkpoint's). 'auto' (online-vb, scvb0, "
                        "sparse-gibbs-vb; not with --detach): evaluate on the held-out "
                        "documents at the end of every pass and stop after --passes-patience "
                        "passes in a row that raised the best score by less than %g "
                        "nats/token, at most %d passes; --resume continues the same rule"
                        % (", ".join(AUTO_PASSES_BY_DEFAULT), BATCH_MAX_PASSES, GIBBS_SWEEPS,
                           AUTO_MIN_GAIN, AUTO_MAX_PASSES))
    g.add_argument("--passes-patience", type=int, default=None, metavar="N",
                   help="--passes auto: stop after N passes in a row without a gain (default "
                        "%d; recorded in the checkpoints, so --resume keeps it)"
                        % AUTO_PATIENCE)
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
                        "(default %s)" % (keyword_default("scvb0", "burn_in", "?"),
                                          keyword_default("sparse-gibbs-vb", "burn_in", "?"),
                                          keyword_default("gibbs", "burn_in", "?")))
    g.add_argument("--samples", type=int, default=None, metavar="S",
                   help="sparse-gibbs-vb: kept Gibbs sweeps per document S, in [1, 1000] "
                        "(default %s)" % keyword_default("sparse-gibbs-vb", "samples", "?"))
    g.add_argument("--gibbs-parts", type=int, default=None, metavar="N",
                   help="gibbs: document blocks per sweep, in [1, 4096]; 1 = the exact "
                        "sequential sampler, N > 1 = AD-LDA on N threads (the result depends "
                        "on N; default %s)" % keyword_default("gibbs", "n_parts", "?"))
    # the options an algorithm's parameter spec declares (lda_core.algorithms.params)
    for dest, users in spec_options().items():
        g.add_argument("--" + dest.replace("_", "-"), dest=dest, **spec_option_kwargs(users))
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
                        % keyword_default("o-lda", "init_sweeps", "?"))
    g.add_argument("--rejuvenation", type=int, default=None, metavar="R",
                   help="|R(i)| in [0, 100000], earlier positions resampled "
                        "(incremental-gibbs: after every token, default 4; particle-filter: "
                        "per particle after each resampling, default %s)"
                        % keyword_default("particle-filter", "n_rejuv", "?"))
    g.add_argument("--rejuvenation-schedule", choices=["uniform", "decay"], default=None,
                   help="how R(i) is drawn: uniform over all earlier positions, or decayed "
                        "towards recent ones (default uniform)")
    g.add_argument("--rejuvenation-decay", type=float, default=None, metavar="TOKENS",
                   help="with --rejuvenation-schedule decay: mean distance back, in tokens "
                        "(default 1000)")
    g.add_argument("--particles", type=int, default=None, metavar="P",
                   help="particle-filter: number of particles, in [1, 100000] (default %s)"
                        % keyword_default("particle-filter", "n_particles", "?"))
    g.add_argument("--ess-threshold", type=float, default=None, metavar="X",
                   help="particle-filter: resample when the effective sample size 1/sum(w^2) "
                        "falls to X or below, X in (0, P] (default %s)"
                        % keyword_default("particle-filter", "ess_threshold", "?"))
    g = p.add_argument_group("evaluation, checkpoints, logging")
    g.add_argument("--heldout", default="auto", metavar="SHARD_DIR_OR_SPLIT",
                   help="held-out documents for evaluation: 'auto' (the dataset's heldout split "
                        "if it has one), 'none', a split name of the dataset, or a shard path")
    g.add_argument("--heldout-max-docs", type=int, default=2000,
                   help="evaluate on at most this many held-out documents")
    g.add_argument("--eval-every", type=int, default=None,
                   help="evaluate every N global steps (0: only at the end); when not given: "
                        "%d, or with --passes auto at the pass ends only" % EVAL_EVERY)
    g.add_argument("--checkpoint-every", type=int, default=100,
                   help="publish a checkpoint every N global steps (0: only at the end)")
    g.add_argument("--keep-checkpoints", type=int, default=3,
                   help="keep the N newest checkpoints (0: keep all)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("runner")
    g.add_argument("--runner", default="inprocess",
                   help="inprocess (this process, numba threads), or a Beam runner "
                        "(DirectRunner, PortableRunner, DataflowRunner, FlinkRunner, ...): "
                        "pipelines.training.beam_train for the local/global-step algorithms, "
                        "pipelines.training.beam_sequential (one single-worker DoFn per window) for "
                        "gibbs, o-lda, incremental-gibbs and particle-filter")
    g.add_argument("--minibatches-per-window", type=int, default=None,
                   help="Beam runners: minibatches per pipeline run (stream samplers: "
                        "default --checkpoint-every, one checkpoint per window)")
    g.add_argument("--pieces", type=int, default=None, metavar="P",
                   help="E-step pieces per minibatch, summed in piece order: the result "
                        "depends on (--seed, --minibatch, P) only, not on the runner or the "
                        "worker count; recorded in the checkpoints, so --resume keeps it "
                        "(default 2 on local runners; remote runners: at least 4, and "
                        "--num_workers / --max_num_workers of the first run)")
    g.add_argument("--staleness", type=int, default=None, metavar="S",
                   help="pipelined steps: the E-step of minibatch m reads the state after "
                        "step m - 1 - S, so on a cluster it overlaps the previous step's "
                        "update (one barrier per step with S = 1). Part of the result, like "
                        "--pieces: recorded in the checkpoints, --resume keeps it "
                        "(default 0; 1 on the remote exchange, after --staleness-warmup)")
    g.add_argument("--plan", action="store_true",
                   help="print what the run would do and exit 0: the exchange, S, P, B and "
                        "staleness as resolved (remote defaults included), windows and jobs, "
                        "each job's graph against Dataflow's limit and, on a remote runner, "
                        "the cluster model's bytes per worker, time and list price; writes, "
                        "submits and looks up nothing in the cloud")
    g.add_argument("--staleness-warmup", type=int, default=None, metavar="W",
                   help="with --staleness S > 0: the first W minibatches run with staleness "
                        "0 and the pipeline fills from minibatch W on (the first steps move "
                        "the topics most; a step-old state there costs held-out score: "
                        "docs/training.md). Recorded in the checkpoints like --staleness "
                        "(default %d)" % DEFAULT_WARMUP)
    g.add_argument("--exchange", choices=("remote", "word-blocks", "local", "state"),
                   default=None,
                   help="Beam runners: how a step's state and statistics move between "
                        "workers. remote (word-blocks is its earlier name; online-vb and "
                        "scvb0): the state cut into --word-blocks blocks of words, each held "
                        "by an owner, and every row, statistic and document moving through "
                        "Beam's shuffle inside a window (files only at its ends); local: "
                        "worker processes of this machine, each with its own copy of the "
                        "state; state: every worker reads the whole state and one worker "
                        "sums the statistics. Default: remote on remote runners (state for "
                        "sparse-gibbs-vb), local with worker processes; same bits at the "
                        "same --pieces, --word-blocks and --staleness")
    g.add_argument("--unroll", action=argparse.BooleanOptionalAction, default=None,
                   help="Beam runners: chain the window's minibatches inside one pipeline "
                        "(default); --no-unroll runs one pipeline per minibatch "
                        "(--minibatches-per-window 1)")
    g.add_argument("--detach", action="store_true",
                   help="Beam runners, local/global-step algorithms: submit ONE window "
                        "(--minibatches-per-window minibatches from the start, or with "
                        "--resume from the latest checkpoint) and return without waiting "
                        "(Dataflow Flex Templates); the job itself publishes the checkpoint, "
                        "evaluates and appends the window's run-log records. Chain windows "
                        "by launching again with --resume. Runners that run the job in this "
                        "process (DirectRunner) are still waited for")


# ------------------------------------------------------------------------------------ helpers
