"""The algorithms' settings as the command line names them, and building an algorithm from
them: ``ALGO_OPTIONS`` (option dest -> constructor keyword), the options that do not apply to
an algorithm (an error naming the option and why), per-algorithm defaults, and
:func:`build_algorithm`. Library code (the streaming job, templates) and the ``train`` command
build algorithms through this one routine."""
from __future__ import annotations

import argparse
import inspect
from typing import Any, Dict, List, Optional, Tuple

from lda_core.algorithms.params import Param, ParamSpec

from lda_core.errors import UsageError
from lda_core.resources import check_state_memory

# The default of `ldabeam train` (docs/training.md, "Choosing the default algorithm and
# passes"): on the real corpora measured (the bundled sample, KOS, NIPS, 20 Newsgroups x16)
# SCVB0 reached online VB's best held-out score sooner and went on to a better one, with no
# more dead topics; on a 320k-document synthetic corpus online VB was ahead within the time
# measured.
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

DEFAULT_MINIBATCH = 256  # --minibatch for algorithms whose class has no batch_size default
# online-vb's --minibatch when a Beam runner has worker processes (multi_processing, portable,
# Dataflow, Flink): each step costs those runners ~0.2-0.5 s of stage scheduling and state
# hand-over whatever S is (docs/beam-training.md), so S = 4096 (Hoffman et al.'s best size)
# keeps that small next to the E-step. In-process runners keep the algorithm's own default.
BEAM_WORKERS_MINIBATCH = 4096

# command-line option (dest) -> constructor keyword, for the algorithm classes without a
# parameter spec (``SPEC``, lda_core.algorithms.params); an algorithm with a spec takes its
# options from it (:func:`options_of`). An option given for an algorithm that does not take
# it (or that NOT_APPLICABLE lists) is an error naming the option and the algorithm.
ALGO_OPTIONS = {
    "kappa": "kappa", "tau0": "tau0", "alpha": "alpha", "eta": "eta", "max_iter": "max_iter",
    "tol": "tol", "dtype": "dtype", "threads": "n_threads", "optimize_alpha": "optimize_alpha",
    "optimize_eta": "optimize_eta",
    # sparse-gibbs-vb / gibbs
    "burn_in": "burn_in", "samples": "samples", "gibbs_parts": "n_parts",
    # stream-order samplers
    "particles": "n_particles", "ess_threshold": "ess_threshold", "rejuvenation": "n_rejuv",
    "rejuvenation_schedule": "schedule", "rejuvenation_decay": "decay_scale",
    "init_docs": "init_docs", "init_fraction": "init_fraction", "init_sweeps": "init_sweeps",
}
# options every algorithm with a spec takes besides its spec's (keyword n_threads)
SPEC_COMMON_OPTIONS = {"threads": "n_threads"}
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
HIDDEN = {"self", "n_topics", "n_words", "vocab_hash", "corpus_size", "batch_size", "seed",
           "n_threads", "n_docs_total", "corpus_tokens"}


def spec_of(name: str) -> Optional[ParamSpec]:
    """The parameter spec of algorithm ``name`` (None: the class declares none)."""
    from lda_core.algorithms.algorithm import algorithm_class
    return getattr(algorithm_class(name), "SPEC", None)


def options_of(name: str) -> Dict[str, str]:
    """Command-line option (dest) -> constructor keyword for algorithm ``name``: from its spec,
    else :data:`ALGO_OPTIONS`."""
    spec = spec_of(name)
    if spec is None:
        return dict(ALGO_OPTIONS)
    out = dict(SPEC_COMMON_OPTIONS)
    out.update((p.option, p.name) for p in spec if p.option)
    return out


def algorithm_option_dests() -> List[str]:
    """Every algorithm option of ``ldabeam train`` (dests): :data:`ALGO_OPTIONS` and those of
    every installed algorithm's spec, in declaration order."""
    from lda_core.algorithms.algorithm import available_algorithms
    out = dict.fromkeys(ALGO_OPTIONS)
    for name in available_algorithms():
        out.update(dict.fromkeys(options_of(name)))
    return list(out)


def keyword_default(name: str, kw: str, fallback=None):
    """The default of constructor keyword ``kw`` of algorithm ``name`` (``fallback`` if the
    class is not importable or has none)."""
    try:
        spec = spec_of(name)
        if spec is not None:
            p = spec.get(kw)
            return fallback if p is None or p.default is None else p.default
        from lda_core.algorithms.algorithm import algorithm_class
        p = accepted_keywords(algorithm_class(name)).get(kw)
    except Exception:
        return fallback
    if p is None or p.default is inspect.Parameter.empty:
        return fallback
    return p.default


def default_minibatch(name: str) -> int:
    """``--minibatch`` when not given: the class's own ``batch_size`` default (SCVB0 and
    sparse Gibbs-VB: 100, the papers'), else ``DEFAULT_MINIBATCH`` (256)."""
    v = keyword_default(name, "batch_size")
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 1 \
        else DEFAULT_MINIBATCH


def default_passes(name: str, has_heldout: bool, detach: bool):
    """``--passes`` when not given (a fresh run of a minibatch algorithm): ``"auto"`` for
    :data:`AUTO_PASSES_BY_DEFAULT` when the held-out score can be evaluated at every pass end,
    else 1."""
    return "auto" if name in AUTO_PASSES_BY_DEFAULT and has_heldout and not detach else 1


def build_algorithm(name: str, n_topics: int, n_words: int, *, settings: Dict[str, Any],
                    batch_size: int, corpus_size: int, seed: int, vocab_hash: str,
                    corpus_tokens=None):
    """Construct algorithm ``name``; ``settings`` (option dest -> value, None = not given)
    are passed when the class accepts them, and an explicitly given one it does not accept is
    an error naming the option."""
    from lda_core.algorithms.algorithm import algorithm_class
    cls = algorithm_class(name)
    spec = getattr(cls, "SPEC", None)
    # the keywords the constructor takes: a spec's settings plus the keywords every spec'd
    # class takes (vocab_hash, n_threads), else read from the signature
    params = (accepted_keywords(cls) if spec is None
              else {p.name for p in spec} | {"vocab_hash", "n_threads"})
    options = options_of(name)
    kw: Dict[str, Any] = {}
    base = dict(batch_size=batch_size, corpus_size=corpus_size, seed=seed,
                vocab_hash=vocab_hash)
    if "n_docs_total" in params:          # the stream-order samplers' name for D
        base["n_docs_total"] = corpus_size
    if "corpus_tokens" in params and corpus_tokens is not None:
        base["corpus_tokens"] = corpus_tokens() if callable(corpus_tokens) else corpus_tokens
    for k, v in base.items():
        if k in params:
            kw[k] = v
    given = {dest: v for dest, v in settings.items() if v is not None}
    for dest, v in given.items():
        kwname = options.get(dest)
        why = NOT_APPLICABLE.get(name, {}).get(kwname)
        if kwname not in params or why:
            hint = why or HINTS.get((name, dest))
            raise UsageError("--%s does not apply to algorithm %s%s"
                             % (option_flag(dest), name, " (%s)" % hint if hint else ""))
        kw[kwname] = v
    _check_combinations(name, given, kw)
    check_state_memory(n_topics, n_words)      # before the constructor allocates K x V
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
    import re
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


def accepted_keywords(cls) -> Dict[str, Any]:
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


def spec_options() -> Dict[str, List[Tuple[str, Param]]]:
    """The options the installed algorithms' specs add to ``ldabeam train`` (the shared ones,
    :data:`ALGO_OPTIONS`, are declared by hand): dest -> [(algorithm, setting), ...]."""
    from lda_core.algorithms.algorithm import available_algorithms
    out: Dict[str, List[Tuple[str, Param]]] = {}
    for name in available_algorithms():
        for p in spec_of(name) or ():
            if p.option and p.option not in ALGO_OPTIONS and p.option not in SPEC_COMMON_OPTIONS:
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
