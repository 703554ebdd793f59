"""The algorithms' declarative parameter specs (lda_core.algorithms.params): one declaration
per setting gives the constructor's validation, ``params()``, the ``ldabeam train`` option
and the Flex Template metadata entry."""
import argparse
import importlib.util
import json
import os

import numpy as np
import pytest

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


def test_a_setting_added_to_the_spec_reaches_help_template_and_params(monkeypatch):
    """One line in SCVB0's spec, no other edit: ``ldabeam train --help`` lists its option with
    help, range and default, the generated template metadata has its parameter, the
    constructor validates it, ``params()`` (and so every checkpoint) records it, and the
    command line's value reaches the algorithm."""
    monkeypatch.setattr(SCVB0, "SPEC", SCVB0.SPEC.with_param(MADE_UP))

    text = _train_help(monkeypatch)
    assert ("--made-up-weight MU scvb0: a made-up weight of the topic statistics, in [0, 1) "
            "(default 0.25)") in text

    meta = _update_metadata()
    with open(meta.TRAIN, encoding="utf-8") as f:
        entries = {p["name"]: p for p in meta.merged(json.load(f))["parameters"]}
    assert entries["made-up-weight"]["helpText"] == (
        "scvb0: a made-up weight of the topic statistics, in [0, 1) (default 0.25).")
    assert entries["made-up-weight"]["isOptional"] is True

    assert SCVB0(3, 10).params()["made_up"] == 0.25
    assert SCVB0(3, 10, made_up=0.5).params()["made_up"] == 0.5
    with pytest.raises(UsageError, match=r"made_up must be a finite number in \[0, 1\), got 2"):
        SCVB0(3, 10, made_up=2)

    build = dict(batch_size=8, corpus_size=100, seed=0, vocab_hash="h")
    algo = algorithm_options.build_algorithm("scvb0", 3, 10, settings={"made_up_weight": 0.75},
                                             **build)
    assert algo.made_up == 0.75 and algo.to_state().params["made_up"] == 0.75
    with pytest.raises(UsageError, match=r"^--made-up-weight 1\.5: made_up must be"):
        algorithm_options.build_algorithm("scvb0", 3, 10, settings={"made_up_weight": 1.5},
                                          **build)
    with pytest.raises(UsageError, match="--made-up-weight does not apply to algorithm online-vb"):
        algorithm_options.build_algorithm("online-vb", 3, 10,
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
    assert algorithm_options.default_minibatch("scvb0") == SCVB0.SPEC.get("batch_size").default
    assert algorithm_options.keyword_default("scvb0", "tau_phi") == 1000.0
    opts = algorithm_options.options_of("scvb0")
    assert opts["topic_step_kappa"] == "kappa_phi" and opts["threads"] == "n_threads"
    assert "kappa" not in opts


@pytest.mark.parametrize("name", ["scvb0", "sparse-gibbs-vb"])
def test_every_declared_setting_is_recorded_and_every_option_offered(name, monkeypatch):
    """For each algorithm with a spec: ``params()`` is exactly the spec (names and order), a
    checkpoint rebuilds the same settings, and every declared option is an option of
    ``ldabeam train`` that reaches its setting."""
    from lda_core.algorithms.algorithm import algorithm_class
    cls = algorithm_class(name)
    algo = cls(3, 12, seed=5)
    assert list(algo.params()) == [p.name for p in cls.SPEC]
    assert cls.from_state(algo.to_state()).params() == algo.params()
    text = _train_help(monkeypatch)
    opts = algorithm_options.options_of(name)
    for p in cls.SPEC:
        if p.option:
            assert "--" + p.option.replace("_", "-") in text, p.option
            assert opts[p.option] == p.name
