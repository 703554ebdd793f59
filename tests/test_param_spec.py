"""The algorithms' declarative parameter specs (lda_core.algorithms.params): one declaration
per setting gives the constructor's validation, ``params()``, the ``ldabeam train`` option
and the Flex Template metadata entry."""
import argparse
import importlib.util
import json
import os

import numpy as np
import pytest

from lda_core.algorithms.algorithm import ALGORITHMS, algorithm_class
from lda_core.algorithms.params import Param, ParamSpec
from lda_core.algorithms.scvb0 import SCVB0
from lda_core.errors import UsageError
from pipelines.training import algorithm_options

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UPDATE = os.path.join(REPO, "templates", "dataflow", "update_metadata.py")


def _update_metadata():
    spec = importlib.util.spec_from_file_location("update_metadata", UPDATE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _train_help(monkeypatch):
    """``ldabeam train --help`` on one line per option."""
    monkeypatch.setenv("COLUMNS", "1000")
    from pipelines.cli import COMMANDS, build_parser
    parser = build_parser({"train": COMMANDS["train"]})
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(sub.choices["train"].format_help().split())


MADE_UP = Param("made_up", float, 0.25, lo=0, hi=1, hi_open=True, symbol="mu",
                option="made_up_weight", help="a made-up weight of the topic statistics")
# settings an algorithm cannot be built without (o-LDA: the size of its batch prefix)
REQUIRED = {"o-lda": {"init_docs": 2}}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_setting_added_to_the_spec_reaches_help_template_and_params(name, monkeypatch):
    """One line in an algorithm's spec, no other edit: ``ldabeam train --help`` lists its
    option with help, range and default, the generated template metadata has its parameter,
    the constructor validates it, ``params()`` (and so every checkpoint) records it, a
    checkpoint restores it, and the command line's value reaches the algorithm."""
    cls = algorithm_class(name)
    monkeypatch.setattr(cls, "SPEC", cls.SPEC.with_param(MADE_UP))
    need = REQUIRED.get(name, {})

    text = _train_help(monkeypatch)
    assert ("--made-up-weight MU %s: a made-up weight of the topic statistics, in [0, 1) "
            "(default 0.25)" % name) in text

    meta = _update_metadata()
    with open(meta.TRAIN, encoding="utf-8") as f:
        entries = {p["name"]: p for p in meta.merged(json.load(f))["parameters"]}
    assert entries["made-up-weight"]["helpText"] == (
        "%s: a made-up weight of the topic statistics, in [0, 1) (default 0.25)." % name)
    assert entries["made-up-weight"]["isOptional"] is True

    assert cls(3, 10, **need).params()["made_up"] == 0.25
    algo = cls(3, 10, made_up=0.5, **need)
    assert algo.params()["made_up"] == 0.5
    assert cls.from_state(algo.to_state()).params()["made_up"] == 0.5
    with pytest.raises(UsageError, match=r"made_up must be a finite number in \[0, 1\), got 2"):
        cls(3, 10, made_up=2, **need)

    build = dict(corpus_size=100, seed=0, vocab_hash="h")
    algo = algorithm_options.build_algorithm(name, 3, 10, settings={"made_up_weight": 0.75},
                                             **build)
    assert algo.made_up == 0.75 and algo.to_state().params["made_up"] == 0.75
    with pytest.raises(UsageError, match=r"^--made-up-weight 1\.5: made_up must be"):
        algorithm_options.build_algorithm(name, 3, 10, settings={"made_up_weight": 1.5},
                                          **build)
    other = "scvb0" if name != "scvb0" else "online-vb"
    with pytest.raises(UsageError, match="--made-up-weight does not apply to algorithm %s"
                       % other):
        algorithm_options.build_algorithm(other, 3, 10,
                                          settings={"made_up_weight": 0.5}, **build)


def test_the_committed_template_metadata_is_the_one_the_specs_generate():
    """metadata_train.json holds exactly the entries the specs generate (run
    templates/dataflow/update_metadata.py after changing a spec)."""
    assert _update_metadata().main(["--check"]) == 0


def test_scvb0_params_and_checkpoint_round_trip_come_from_the_spec():
    """``params()`` lists every declared setting in declaration order with JSON values, and a
    checkpoint's params rebuild the same algorithm."""
    algo = SCVB0(4, 30, alpha=0.2, dtype=np.float32, s_phi=3, burn_in=2.0, seed=7)
    p = algo.params()
    assert list(p) == [q.name for q in SCVB0.SPEC]
    assert p["dtype"] == "float32" and algo.dtype == np.dtype(np.float32)
    assert p["s_phi"] == 3.0 and isinstance(p["s_phi"], float)
    assert p["burn_in"] == 2 and isinstance(p["burn_in"], int)
    assert p["alpha"] == 0.2 and p["seed"] == 7 and p["corpus_tokens"] is None
    again = SCVB0.from_state(algo.to_state())
    assert again.params() == p
    np.testing.assert_array_equal(again.n_phi(), algo.n_phi())


def test_an_unknown_or_bad_setting_is_one_error_naming_it():
    with pytest.raises(UsageError, match="scvb0 has no setting bogus"):
        SCVB0(3, 10, bogus=1)
    with pytest.raises(UsageError, match=r"dtype='float16' is not allowed \(float32 or float64\)"):
        SCVB0(3, 10, dtype="float16")
    with pytest.raises(UsageError, match=r"kappa_theta must be a finite number in \(0.5, 1.0\]"):
        SCVB0(3, 10, kappa_theta=0.5)
    with pytest.raises(ValueError, match="declared twice: alpha"):
        ParamSpec(Param("alpha", float, 1.0), Param("alpha", float, 2.0))


def test_defaults_and_help_read_the_spec():
    """--minibatch's default and the option help texts read the declared defaults."""
    assert algorithm_options.default_minibatch("scvb0") == SCVB0.DEFAULT_MINIBATCH == 100
    assert algorithm_options.keyword_default("scvb0", "tau_phi") == 1000.0
    opts = algorithm_options.options_of("scvb0")
    assert opts["topic_step_kappa"] == "kappa_phi" and opts["threads"] == "n_threads"
    assert "kappa" not in opts


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_declared_setting_is_recorded_and_every_option_offered(name, monkeypatch):
    """For each algorithm: ``params()`` is exactly the spec's recorded settings (names and
    order) followed by the state's own parameters, a checkpoint rebuilds the same settings,
    and every declared option is an option of ``ldabeam train`` that reaches its setting."""
    cls = algorithm_class(name)
    algo = cls(3, 12, seed=5, **REQUIRED.get(name, {}))
    recorded = [p.name for p in cls.SPEC if p.record]
    assert list(algo.params()) == recorded + list(algo.state_params())
    assert cls.from_state(algo.to_state()).params() == algo.params()
    text = _train_help(monkeypatch)
    opts = algorithm_options.options_of(name)
    for p in cls.SPEC:
        if p.option:
            assert "--" + p.option.replace("_", "-") in text, p.option
            assert opts[p.option] == p.name


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_no_constructor_takes_its_settings_one_by_one(name):
    """The settings are the spec's, not the signature's: a constructor takes K, V and at
    most the keywords of its interface (vocab_hash, n_threads, kernel) besides them."""
    code = algorithm_class(name).__init__.__code__
    assert code.co_argcount + code.co_kwonlyargcount <= 6, code.co_varnames


def test_online_vb_per_topic_alpha_and_scikit_learn_mapping_come_from_the_spec():
    """A per-topic alpha is one declared setting (checked element-wise, recorded as a
    list), and OnlineLDA's scikit-learn parameters reach the settings the spec maps them to."""
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.sklearn_api import OnlineLDA
    algo = OnlineVB(3, 10, alpha=[0.1, 0.2, 0.3])
    assert algo.params()["alpha"] == [0.1, 0.2, 0.3]
    with pytest.raises(UsageError, match=r"alpha must be a number or a sequence of numbers "
                                         r"in \(0, inf\), got \[0.1, -1\]"):
        OnlineVB(2, 10, alpha=[0.1, -1])
    mapped = {p.sklearn: p.name for p in OnlineVB.SPEC if p.sklearn}
    assert mapped["learning_decay"] == "kappa" and mapped["max_doc_update_iter"] == "max_iter"
    est = OnlineLDA(n_components=3, learning_decay=0.8, max_doc_update_iter=7,
                    mean_change_tol=0.01, batch_size=4, random_state=0)
    X = np.random.default_rng(0).integers(0, 3, (8, 10))
    est.fit(X)
    p = est.algorithm_.params()
    # batch_size is the schedule's minibatch size, not a setting of the algorithm
    assert (p["kappa"], p["max_iter"], p["tol"]) == (0.8, 7, 0.01) and "batch_size" not in p
    back = OnlineLDA._params_of_state(est.algorithm_.to_state())
    assert (back["learning_decay"], back["max_doc_update_iter"],
            back["mean_change_tol"]) == (0.8, 7, 0.01)


def test_no_function_of_the_algorithms_takes_more_than_twelve_parameters():
    """Settings travel as a spec, not as long parameter lists: in lda_core/algorithms (numba
    kernels aside: they take arrays one by one) and the scikit-learn wrapper (its estimators'
    ``__init__`` aside: scikit-learn defines their parameters by signature), no function takes
    more than 12 parameters."""
    import ast
    import glob
    files = sorted(glob.glob(os.path.join(REPO, "lda_core", "algorithms", "*.py")))
    files.append(os.path.join(REPO, "lda_core", "sklearn_api.py"))
    long = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if any("jit" in ast.unparse(d) for d in node.decorator_list):
                continue
            if path.endswith("sklearn_api.py") and node.name == "__init__":
                continue
            a = node.args
            n = (len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg)
                 + bool(a.kwarg))
            if n > 12:
                long.append("%s:%d %s (%d)" % (os.path.relpath(path, REPO), node.lineno,
                                               node.name, n))
    assert not long, long


def test_the_old_batch_size_keyword_is_taken_with_a_warning_and_not_stored():
    """Issue 34: the minibatch size has one name (the schedule's ``minibatch``); code that
    still passes an algorithm ``batch_size`` or calls ``plan_pass(..., batch_size=S)`` keeps
    working, warned, and nothing stores the dropped value."""
    import numpy as np
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.training.ordering import plan_pass
    with pytest.warns(DeprecationWarning, match="minibatch size is the schedule's"):
        algo = OnlineVB(5, 10, batch_size=64)
    assert "batch_size" not in algo.params() and not hasattr(algo, "batch_size")
    old, new = plan_pass([10, 20, 7], 3, 1, batch_size=4), plan_pass([10, 20, 7], 3, 1, 4)
    a, b = old.describe(), new.describe()
    assert a.keys() == b.keys() and all(
        np.array_equal(x[1], y[1]) and x[0] == y[0] for k in a for x, y in zip(a[k], b[k]))
