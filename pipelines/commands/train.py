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

logger = logging.getLogger(__name__)

# the model directory this command writes, held under a lease while it runs, and the inputs
# it must neither contain nor lie inside (pipelines.cli, lda_core.lease)
MODEL_DIR = ("output", ("shards", "vocab"))
DEFAULT_ALGORITHM = "online-vb"
BATCH_MAX_PASSES = 100   # batch-vb: cap on iterations (it stops at a relative ELBO change < tol)
GIBBS_SWEEPS = 100       # gibbs: --passes is the number of sweeps over the corpus in memory

# where each algorithm comes from (shown in --help)
PAPERS = {
    "online-vb": "Hoffman, Blei & Bach 2010, Online learning for LDA",
    "batch-vb": "Hoffman, Blei & Bach 2010 (batch case: S = D, rho = 1; Blei, Ng & Jordan 2003)",
    "scvb0": "Foulds, Boyles, DuBois, Smyth & Welling 2013, Stochastic collapsed VB",
    "sparse-gibbs-vb": "Mimno, Hoffman & Blei 2012, Sparse stochastic inference",
    "gibbs": "Griffiths & Steyvers 2004, Finding scientific topics (collapsed Gibbs)",
    "o-lda": "Canini, Shi & Griffiths 2009, Online inference of topics",
    "incremental-gibbs": "Canini, Shi & Griffiths 2009, Online inference of topics",
    "particle-filter": "Canini, Shi & Griffiths 2009, Online inference of topics",
}

DEFAULT_MINIBATCH = 256  # --minibatch for algorithms whose class has no batch_size default
# online-vb's --minibatch when a Beam runner has worker processes (multi_processing, portable,
# Dataflow, Flink): each step costs those runners ~0.2-0.5 s of stage scheduling and state
# hand-over whatever S is (docs/beam-training.md), so S = 4096 (Hoffman et al.'s best size)
# keeps that small next to the E-step. In-process runners keep the algorithm's own default.
BEAM_WORKERS_MINIBATCH = 4096

# command-line option (dest) -> constructor keyword of the algorithm classes. An option given
# for an algorithm whose class does not take the keyword (or that NOT_APPLICABLE lists) is an
# error naming the option and the algorithm.
ALGO_OPTIONS = {
    "kappa": "kappa", "tau0": "tau0", "alpha": "alpha", "eta": "eta", "max_iter": "max_iter",
    "tol": "tol", "dtype": "dtype", "threads": "n_threads", "optimize_alpha": "optimize_alpha",
    "optimize_eta": "optimize_eta",
    # scvb0 / sparse-gibbs-vb / gibbs
    "burn_in": "burn_in", "samples": "samples",
    "topic_step_scale": "s_phi", "topic_step_tau": "tau_phi", "topic_step_kappa": "kappa_phi",
    "doc_step_scale": "s_theta", "doc_step_tau": "tau_theta", "doc_step_kappa": "kappa_theta",
    "gibbs_parts": "n_parts",
    # stream-order samplers
    "particles": "n_particles", "ess_threshold": "ess_threshold", "rejuvenation": "n_rejuv",
    "rejuvenation_schedule": "schedule", "rejuvenation_decay": "decay_scale",
    "init_docs": "init_docs", "init_fraction": "init_fraction", "init_sweeps": "init_sweeps",
}
# keywords a class accepts (through a shared base) that mean nothing for that algorithm
NOT_APPLICABLE = {
    "batch-vb": {"kappa": "batch VB takes full steps (rho = 1)",
                 "tau0": "batch VB takes full steps (rho = 1)"},
    "o-lda": {k: "o-LDA samples every token once and never revisits it (rejuvenation is "
                 "incremental-gibbs / particle-filter)"
              for k in ("n_rejuv", "schedule", "decay_scale")},
}
# a pointer to the right option when a familiar one does not apply
HINTS = {
    ("scvb0", "kappa"): "SCVB0 has two step-size schedules rho = s/(tau + t)^kappa: "
                        "--topic-step-kappa/--topic-step-tau/--topic-step-scale and "
                        "--doc-step-kappa/--doc-step-tau/--doc-step-scale",
    ("scvb0", "tau0"): "SCVB0 has two step-size schedules rho = s/(tau + t)^kappa: "
                       "--topic-step-tau/--topic-step-kappa/--topic-step-scale and "
                       "--doc-step-tau/--doc-step-kappa/--doc-step-scale",
    ("gibbs", "threads"): "batch Gibbs runs AD-LDA on --gibbs-parts threads",
}
_HIDDEN = {"self", "n_topics", "n_words", "vocab_hash", "corpus_size", "batch_size", "seed",
           "n_threads", "n_docs_total", "corpus_tokens"}


def _default(name: str, kw: str, fallback=None):
    """The default of constructor keyword ``kw`` of algorithm ``name`` (``fallback`` if the
    class is not importable or has none)."""
    try:
        from lda_core.algorithm import algorithm_class
        p = _accepted(algorithm_class(name)).get(kw)
    except Exception:
        return fallback
    if p is None or p.default is inspect.Parameter.empty:
        return fallback
    return p.default


def _beam_workers(args, beam_argv) -> bool:
    """True when --runner is a Beam runner whose workers are other processes."""
    if args.runner.lower() in ("inprocess", "in-process", "local"):
        return False
    try:
        from pipelines.beam_options import runner_config
        return not runner_config(args.runner, list(beam_argv or ())).in_process
    except ValueError:
        return False      # an unknown runner is reported later, with its own message


def default_minibatch(name: str) -> int:
    """``--minibatch`` when not given: the class's own ``batch_size`` default (SCVB0 and
    sparse Gibbs-VB: 100, the papers'), else ``DEFAULT_MINIBATCH`` (256)."""
    v = _default(name, "batch_size")
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 1 \
        else DEFAULT_MINIBATCH


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


def build_algorithm(name: str, n_topics: int, n_words: int, *, settings: Dict[str, Any],
                    batch_size: int, corpus_size: int, seed: int, vocab_hash: str,
                    corpus_tokens=None):
    """Construct algorithm ``name``; ``settings`` (option dest -> value, None = not given)
    are passed when the class accepts them, and an explicitly given one it does not accept is
    an error naming the option."""
    from lda_core.algorithm import algorithm_class
    cls = algorithm_class(name)
    params = _accepted(cls)
    var_kw = False
    kw: Dict[str, Any] = {}
    base = dict(batch_size=batch_size, corpus_size=corpus_size, seed=seed,
                vocab_hash=vocab_hash)
    if "n_docs_total" in params:          # the stream-order samplers' name for D
        base["n_docs_total"] = corpus_size
    if "corpus_tokens" in params and corpus_tokens is not None:
        base["corpus_tokens"] = corpus_tokens() if callable(corpus_tokens) else corpus_tokens
    for k, v in base.items():
        if k in params or var_kw:
            kw[k] = v
    given = {dest: v for dest, v in settings.items() if v is not None}
    for dest, v in given.items():
        kwname = ALGO_OPTIONS[dest]
        why = NOT_APPLICABLE.get(name, {}).get(kwname)
        if (kwname not in params and not var_kw) or why:
            hint = why or HINTS.get((name, dest))
            raise ValueError("--%s does not apply to algorithm %s%s"
                             % (_opt(dest), name, " (%s)" % hint if hint else ""))
        kw[kwname] = v
    _check_combinations(name, given, kw)
    try:
        return cls(n_topics, n_words, **kw)
    except ValueError as e:
        raise _name_option(e, given) from None


def _opt(dest: str) -> str:
    return dest.replace("_", "-")


def _check_combinations(name: str, given: Dict[str, Any], kw: Dict[str, Any]) -> None:
    """Options that only mean something together (errors name them)."""
    if "init_docs" in given and "init_fraction" in given:
        raise ValueError("--init-docs and --init-fraction both size the batch prefix of %s: "
                         "give one of them" % name)
    if "rejuvenation_decay" in given and given.get("rejuvenation_schedule") != "decay":
        raise ValueError("--rejuvenation-decay applies only with --rejuvenation-schedule decay "
                         "(algorithm %s)" % name)
    if "init_sweeps" in given and name != "o-lda" and not (
            given.get("init_docs") or given.get("init_fraction")):
        raise ValueError("--init-sweeps does not apply to algorithm %s without a batch prefix "
                         "(give --init-docs or --init-fraction)" % name)


def _name_option(err: ValueError, given: Dict[str, Any]) -> ValueError:
    """The algorithm's ValueError (naming its keyword and the allowed range), prefixed with the
    command-line option that set that keyword."""
    import re
    msg = str(err)
    best = None
    for dest, v in given.items():
        m = re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(ALGO_OPTIONS[dest]),
                      msg)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), dest, v)
    if best is None:
        return err
    return ValueError("--%s %s: %s" % (_opt(best[1]), best[2], msg))


def _accepted(cls) -> Dict[str, Any]:
    """Keyword parameters of ``cls.__init__``, following ``**kw`` into the bases' __init__."""
    out: Dict[str, Any] = {}
    for c in cls.__mro__:
        init = c.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        for name, p in params.items():
            if name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
                out.setdefault(name, p)
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return out


def _train_gibbs(algo, files, shard_hash, sweeps, heldout, store, run_log, run_info):
    """Collapsed Gibbs is a batch sampler: all training documents in memory, ``sweeps``
    sweeps (``--passes``) of which the first ``algo.burn_in`` (the sampler's default unless
    given) are not averaged into φ, one checkpoint at the end."""
    from lda_core.trainer import TrainResult, evaluate
    from pipelines.shard_stream import read_docs
    t0 = time.time()
    run_log.write(dict(event="start", wall_time=t0, algorithm=algo.name, sweeps=sweeps,
                       burn_in=algo.burn_in, run=run_info))
    _log_gibbs_plan(algo, sweeps)
    docs = read_docs(files, shard_hash, columns=("doc_id", "word_ids", "counts"))
    logger.info("collapsed Gibbs: %d documents in memory, %d sweeps", docs.n_docs, sweeps)
    algo.fit(docs, sweeps=sweeps)
    metrics = evaluate(algo, heldout) if heldout is not None else {}
    state = algo.to_state()
    if not state.vocab_hash:
        state.vocab_hash = shard_hash
    state.info = dict(state.info or {}, run=run_info,
                      trainer=dict(minibatches_done=sweeps, docs_seen=algo.docs_seen))
    ckpt = store.publish(state)
    elapsed = time.time() - t0
    run_log.write(dict(event="end", step=sweeps, docs_seen=algo.docs_seen, elapsed=elapsed,
                       metrics=metrics, checkpoint=ckpt, wall_time=time.time()))
    return TrainResult(algo, sweeps, algo.docs_seen, sweeps, elapsed, metrics, ckpt)


def _is_sequential_algorithm(name: str) -> bool:
    """True for the stream-order samplers (gibbs, o-lda, incremental-gibbs, particle-filter)."""
    from lda_core.algorithm import SequentialSampler, algorithm_class
    try:
        return issubclass(algorithm_class(name), SequentialSampler)
    except ValueError:
        return False


def _log_gibbs_plan(algo, sweeps: int) -> None:
    if sweeps <= algo.burn_in:
        logger.warning("gibbs: %d sweeps <= burn-in %d: no sweep is averaged, the topics are "
                       "the last sample's (raise --passes or lower the burn-in)", sweeps,
                       algo.burn_in)
    else:
        logger.info("gibbs: %d sweeps, the first %d burn-in, phi averaged over the last %d",
                    sweeps, algo.burn_in, sweeps - algo.burn_in)


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


def _clear_leftovers(model_dir: str, vocab) -> None:
    """A fresh run in a directory without checkpoints: a ``vocab.tsv`` of another vocabulary
    and the run log of an earlier run that never checkpointed are leftovers that would make
    ``topics`` / ``infer`` read the wrong words or runs; both are replaced (a warning names
    them)."""
    from lda_core.run_log import RUN_LOG_FILE
    files = dataset.files_for(model_dir)
    old_vocab = files.join(model_dir, dataset.VOCAB_FILE)
    if files.exists(old_vocab):
        try:
            same = dataset.Vocabulary.read(old_vocab).hash == vocab.hash
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

def run(args, beam_argv) -> int:
    global LAST_SUBMITTED
    from lda_core.checkpoint import CheckpointStore
    t_setup = time.time()
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
    store = CheckpointStore(args.output, keep_last=keep, check_algorithm=True)
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
    if algorithm == "gibbs" and state is not None:
        raise ValueError("--resume is not available for the batch Gibbs sampler (gibbs); "
                         "train again with more --passes (sweeps)")
    passes = int(args.passes if args.passes is not None else prev.get(
        "passes", {"batch-vb": BATCH_MAX_PASSES, "gibbs": GIBBS_SWEEPS}.get(algorithm, 1)))
    if algorithm == "gibbs" and args.burn_in is not None and args.burn_in >= passes:
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
    if inprocess and beam_argv:
        raise ValueError("unrecognized arguments: %s (Beam pipeline options apply only to a "
                         "Beam --runner)" % " ".join(beam_argv))
    sequential = _is_sequential_algorithm(algorithm)
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
        if algorithm == "gibbs" and args.minibatches_per_window is not None:
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
    if algorithm == "batch-vb":
        start = None   # one step per pass: the algorithm's step is its position
    if (algorithm != "gibbs" and hasattr(algo, "process") and not hasattr(algo, "local_step")
            and passes > 1):
        raise ValueError("%s consumes the documents as a stream, each once: --passes must be "
                         "1 (got %d)" % (algorithm, passes))
    heldout = None
    detach = bool(getattr(args, "detach", False))
    if heldout_files is not None and detach:
        # read in the job, where the window is evaluated (hash checked above)
        from pipelines.beam_train import HeldOutShards
        heldout = HeldOutShards(tuple(heldout_files), shard_hash, args.heldout_max_docs, seed)
    elif heldout_files is not None:
        from lda_core.trainer import HeldOut
        heldout = HeldOut.from_batch(read_docs(heldout_files, shard_hash,
                                               max_docs=args.heldout_max_docs), seed=seed)
        if heldout.docs.n_docs == 0:
            heldout = None

    if args.overwrite and not args.resume:
        _remove_model(args.output)
    elif not args.resume:
        _clear_leftovers(args.output, vocab)
    if not dataset.is_remote(args.output):    # an object store has no folders to create
        os.makedirs(args.output, exist_ok=True)
    dst_vocab = dataset.join(args.output, dataset.VOCAB_FILE)
    if not dataset.exists(dst_vocab):
        if dataset.is_remote(vocab_path) or dataset.is_remote(dst_vocab):
            vocab.write(dst_vocab)
        else:
            shutil.copyfile(vocab_path, dst_vocab + ".tmp")
            os.replace(dst_vocab + ".tmp", dst_vocab)

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
        elif algorithm == "gibbs":
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
