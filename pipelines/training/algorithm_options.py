"""The algorithms' settings as the command line names them, and building an algorithm from
them. Every algorithm declares its settings in its parameter spec (``SPEC``,
lda_core.algorithms.params): which ``ldabeam train`` option (dest) sets which setting, its
default and range. From the specs come :func:`options_of` (option -> setting of one
algorithm; an option the algorithm's spec does not name is an error naming the option), the
defaults the help texts show, the options and template parameters of settings that are not
among :data:`SHARED_OPTIONS`, and :func:`build_algorithm`. Library code (the streaming job,
templates) and the ``train`` command build algorithms through this one routine."""
from __future__ import annotations

import argparse
import re
from typing import Any, Dict, List, Tuple

from lda_core.algorithms.algorithm import ALGORITHMS, algorithm_class
from lda_core.algorithms.params import Param, ParamSpec

from lda_core.errors import UsageError
from lda_core.resources import check_algorithm_memory

# The default of `ldabeam train` (docs/training.md, "Choosing the default algorithm and
# passes", gives the measurements behind the choice).
DEFAULT_ALGORITHM = "scvb0"
# algorithms whose --passes, when not given, is 'auto' (stop when the held-out score stops
# improving) if there is a held-out set and the run is not --detach; 1 otherwise
AUTO_PASSES_BY_DEFAULT = ("scvb0",)
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

DEFAULT_MINIBATCH = 256  # --minibatch for algorithms that declare no DEFAULT_MINIBATCH
# online-vb's --minibatch when a Beam runner has worker processes (multi_processing, portable,
# Dataflow, Flink): each step costs those runners a fixed stage-scheduling and state
# hand-over overhead whatever S is (docs/beam-training.md), so S = 4096 (Hoffman et al.'s
# best size) keeps it small next to the E-step. In-process runners keep the algorithm's own
# default.
BEAM_WORKERS_MINIBATCH = 4096

# The algorithm options shared by several algorithms, declared by hand in
# pipelines.commands.train_options (one help text covering every algorithm that takes them,
# with the defaults read from the specs). The specs' other options are declared from the specs
# themselves (:func:`spec_options`). Which algorithm takes which option is always its spec's.
SHARED_OPTIONS = ("kappa", "tau0", "alpha", "eta", "max_iter", "tol", "dtype", "threads",
                  "optimize_alpha", "optimize_eta", "burn_in", "samples", "gibbs_parts",
                  "particles", "ess_threshold", "rejuvenation", "rejuvenation_schedule",
                  "rejuvenation_decay", "init_docs", "init_fraction", "init_sweeps")
# the option of the keyword n_threads, which every local/global-step algorithm takes beside
# its spec (lda_core.algorithms.algorithm.StochasticAlgorithm)
THREADS_OPTION = "threads"
# a pointer to the right option when a familiar one does not apply
HINTS = {
    ("scvb0", "kappa"): "SCVB0 has two step-size schedules rho = s/(tau + t)^kappa: "
                        "--topic-step-kappa/--topic-step-tau/--topic-step-scale and "
                        "--doc-step-kappa/--doc-step-tau/--doc-step-scale",
    ("scvb0", "tau0"): "SCVB0 has two step-size schedules rho = s/(tau + t)^kappa: "
                       "--topic-step-tau/--topic-step-kappa/--topic-step-scale and "
                       "--doc-step-tau/--doc-step-kappa/--doc-step-scale",
    ("batch-vb", "kappa"): "batch VB takes full steps (rho = 1)",
    ("batch-vb", "tau0"): "batch VB takes full steps (rho = 1)",
    ("gibbs", "threads"): "batch Gibbs runs AD-LDA on --gibbs-parts threads",
}
for _dest in ("rejuvenation", "rejuvenation_schedule", "rejuvenation_decay"):
    HINTS[("o-lda", _dest)] = ("o-LDA samples every token once and never revisits it "
                               "(rejuvenation is incremental-gibbs / particle-filter)")
# settings the algorithm help does not list among an algorithm's defaults (set by the
# schedule options or the data)
HIDDEN = {"seed", "corpus_size", "n_docs_total", "corpus_tokens"}


def spec_of(name: str) -> ParamSpec:
    """The parameter spec of algorithm ``name``."""
    return algorithm_class(name).SPEC


def options_of(name: str) -> Dict[str, str]:
    """Command-line option (dest) -> setting (constructor keyword) of algorithm ``name``, from
    its spec (plus ``--threads`` -> ``n_threads`` for a local/global-step algorithm)."""
    out = {} if algorithm_class(name).sequential else {THREADS_OPTION: "n_threads"}
    out.update((p.option, p.name) for p in spec_of(name) if p.option)
    return out


def algorithm_option_dests() -> List[str]:
    """Every algorithm option of ``ldabeam train`` (dests): :data:`SHARED_OPTIONS` and those of
    every algorithm's spec, in declaration order."""
    out = dict.fromkeys(SHARED_OPTIONS)
    for name in ALGORITHMS:
        out.update(dict.fromkeys(options_of(name)))
    return list(out)


def keyword_default(name: str, kw: str, fallback=None):
    """The declared default of setting ``kw`` of algorithm ``name`` (``fallback`` if its spec
    has no such setting or no default)."""
    p = spec_of(name).get(kw)
    return fallback if p is None or p.default is None else p.default


def default_minibatch(name: str) -> int:
    """``--minibatch`` when not given: the class's own ``DEFAULT_MINIBATCH`` (SCVB0 and
    sparse Gibbs-VB: 100, the papers'), else ``DEFAULT_MINIBATCH`` (256)."""
    v = algorithm_class(name).DEFAULT_MINIBATCH
    return int(v) if v is not None else DEFAULT_MINIBATCH


def default_passes(name: str, has_heldout: bool, detach: bool):
    """``--passes`` when not given (a fresh run of a minibatch algorithm): ``"auto"`` for
    :data:`AUTO_PASSES_BY_DEFAULT` when the held-out score can be evaluated at every pass end,
    else 1."""
    return "auto" if name in AUTO_PASSES_BY_DEFAULT and has_heldout and not detach else 1


def build_algorithm(name: str, n_topics: int, n_words: int, *, settings: Dict[str, Any],
                    corpus_size: int, seed: int, vocab_hash: str, corpus_tokens=None):
    """Construct algorithm ``name``; ``settings`` (option dest -> value, None = not given)
    are passed as the settings their options set, and an explicitly given option the
    algorithm's spec does not name is an error naming the option."""
    cls = algorithm_class(name)
    names = {p.name for p in cls.SPEC}
    options = options_of(name)
    kw: Dict[str, Any] = {}
    # what the data and the schedule options set (D: corpus_size, or the stream samplers'
    # n_docs_total), where the spec declares it; the minibatch size is the schedule's alone
    base = dict(corpus_size=corpus_size, n_docs_total=corpus_size, seed=seed)
    if corpus_tokens is not None and "corpus_tokens" in names:
        base["corpus_tokens"] = corpus_tokens() if callable(corpus_tokens) else corpus_tokens
    kw.update((k, v) for k, v in base.items() if k in names)
    if not cls.sequential:             # StochasticAlgorithm: records the vocabulary's hash
        kw["vocab_hash"] = vocab_hash
    given = {dest: v for dest, v in settings.items() if v is not None}
    for dest, v in given.items():
        kwname = options.get(dest)
        if kwname is None:
            hint = HINTS.get((name, dest))
            raise UsageError("--%s does not apply to algorithm %s%s"
                             % (option_flag(dest), name, " (%s)" % hint if hint else ""))
        kw[kwname] = v
    _check_combinations(name, given, kw)
    # before the constructor allocates K x V: every copy of the state the run will hold, with
    # the settings that multiply it (particles, Gibbs parts) and the documents' topic counts
    check_algorithm_memory(cls, n_topics, n_words, "training %s" % name,
                           n_docs=corpus_size or 0, settings=kw)
    try:
        return cls(n_topics, n_words, **kw)
    except UsageError as e:
        raise _name_option(e, given, options) from None


def option_flag(dest: str) -> str:
    return dest.replace("_", "-")


def _check_combinations(name: str, given: Dict[str, Any], kw: Dict[str, Any]) -> None:
    """Options that only mean something together (errors name them)."""
    if "init_docs" in given and "init_fraction" in given:
        raise UsageError("--init-docs and --init-fraction both size the batch prefix of %s: "
                         "give one of them" % name)
    if "rejuvenation_decay" in given and given.get("rejuvenation_schedule") != "decay":
        raise UsageError("--rejuvenation-decay applies only with --rejuvenation-schedule decay "
                         "(algorithm %s)" % name)
    if "init_sweeps" in given and name != "o-lda" and not (
            given.get("init_docs") or given.get("init_fraction")):
        raise UsageError("--init-sweeps does not apply to algorithm %s without a batch prefix "
                         "(give --init-docs or --init-fraction)" % name)


def _name_option(err: UsageError, given: Dict[str, Any],
                 options: Dict[str, str]) -> UsageError:
    """The algorithm's ValueError (naming its keyword and the allowed range), prefixed with the
    command-line option that set that keyword."""
    msg = str(err)
    best = None
    for dest, v in given.items():
        m = re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(options[dest]),
                      msg)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), dest, v)
    if best is None:
        return err
    return UsageError("--%s %s: %s" % (option_flag(best[1]), best[2], msg))


def spec_options() -> Dict[str, List[Tuple[str, Param]]]:
    """The options the algorithms' specs add to ``ldabeam train`` (the shared ones,
    :data:`SHARED_OPTIONS`, are declared by hand): dest -> [(algorithm, setting), ...]."""
    out: Dict[str, List[Tuple[str, Param]]] = {}
    for name in ALGORITHMS:
        for p in spec_of(name):
            if p.option and p.option not in SHARED_OPTIONS:
                out.setdefault(p.option, []).append((name, p))
    return out


def spec_option_help(users: List[Tuple[str, Param]]) -> str:
    """The help text of a spec option: each algorithm's description, range and default."""
    return "; ".join("%s: %s%s%s" % (name, p.help, ", " + p.range_text() if p.range_text()
                                     else "", "" if p.default is None
                                     else " (default %s)" % (p.default,))
                     for name, p in users)


def spec_option_kwargs(users: List[Tuple[str, Param]]) -> Dict[str, Any]:
    """argparse keywords of a spec option (unset: None, the algorithm's default)."""
    p = users[0][1]
    kw: Dict[str, Any] = dict(default=None, help=spec_option_help(users))
    if p.type is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif p.choices:
        kw["choices"] = list(p.choices)
    else:
        kw["type"] = p.type
        if p.symbol:
            kw["metavar"] = p.symbol.upper()
    return kw


_FLOAT_RE = r"^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$"


def spec_template_parameters() -> List[Dict[str, Any]]:
    """The Flex Template metadata entries of the spec options (templates/dataflow/
    metadata_train.json holds them; ``templates/dataflow/update_metadata.py`` writes them)."""
    out = []
    for dest, users in spec_options().items():
        p = users[0][1]
        if p.type is bool:
            regex = "^(true|false)$"
        elif p.choices:
            regex = "^(%s)$" % "|".join(p.choices)
        elif p.type is int:
            regex = "^[0-9]+$"
        else:
            regex = _FLOAT_RE
        label = "%s %s" % (", ".join(n for n, _ in users), dest.replace("_", " "))
        out.append({"name": option_flag(dest), "label": label,
                    "helpText": spec_option_help(users) + ".", "isOptional": True,
                    "regexes": [regex]})
    return out
