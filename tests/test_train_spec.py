"""The TrainSpec (lda_core/training/spec.py) and the one place that chooses a runner
(pipelines.commands.train.choose_runner)."""
import dataclasses
from types import SimpleNamespace

import pytest

from lda_core.errors import UsageError
from lda_core.training.pass_stop import PassStop
from lda_core.training.spec import (AlgorithmSpec, Evaluation, Output, Schedule, TrainSpec,
                                    split_keywords)
from lda_core.training.trainer import InProcessRunner, WholeCorpusRunner
from pipelines.commands.train import Route, choose_runner


class _Algo:
    name = "online-vb"


def test_keywords_land_in_their_groups():
    rule = PassStop(patience=2)
    spec = TrainSpec.from_keywords(_Algo(), dict(
        passes=3, seed=7, minibatch=40, max_steps=9, start_step=2, resume=True,
        pass_stop=rule, rel_tol=1e-3, total_steps=12, heldout="H", eval_every=4,
        model_dir="/m", checkpoint_store="S", run_log="L", checkpoint_every=5, progress=False,
        run_info={"k": 1}))
    assert spec.algorithm == AlgorithmSpec("online-vb")
    assert spec.schedule == Schedule(passes=3, seed=7, minibatch=40, max_steps=9, start=2,
                                     resume=True, pass_stop=rule, rel_tol=1e-3,
                                     total_steps=12)
    assert spec.evaluation == Evaluation("H", 4)
    assert spec.output == Output("/m", "S", "L", 5, False)
    assert spec.info() == {"k": 1}


def test_an_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="fanout"):
        TrainSpec.from_keywords(_Algo(), {"fanout": 2})


def test_the_spec_is_frozen_and_its_run_info_copied():
    info = {"a": 1}
    spec = TrainSpec(AlgorithmSpec("scvb0", {"alpha": 0.1}), run_info=info)
    info["a"] = 2
    assert spec.run_info["a"] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.schedule = Schedule()
    with pytest.raises(TypeError):
        spec.algorithm.settings["alpha"] = 0.2
    mine = spec.info()
    mine["b"] = 3
    assert "b" not in spec.run_info


def test_split_keywords():
    spec_kw, own = split_keywords({"passes": 2, "unroll": False}, ("unroll",))
    assert spec_kw == {"passes": 2} and own == {"unroll": False}


def _args(**kw):
    base = dict(unroll=None, minibatches_per_window=None, runner="inprocess", threads=None)
    base.update(kw)
    return SimpleNamespace(**base)


def test_choose_runner_picks_by_route():
    assert isinstance(choose_runner(_args(), [], "online-vb",
                                    Route(True, False, False, False, False)), InProcessRunner)
    assert isinstance(choose_runner(_args(), [], "gibbs",
                                    Route(True, True, True, False, False)), WholeCorpusRunner)
    from pipelines.training.beam_sequential import SequentialRunner
    from pipelines.training.beam_train import BeamRunner
    seq = choose_runner(_args(runner="DirectRunner", minibatches_per_window=3), ["--x=1"],
                        "o-lda", Route(False, True, False, False, False))
    assert isinstance(seq, SequentialRunner)
    assert seq.settings.minibatches_per_window == 3 and seq.settings.beam_argv == ("--x=1",)
    beam = choose_runner(_args(runner="DirectRunner", unroll=False, threads=2), [],
                         "online-vb", Route(False, False, False, False, False))
    assert isinstance(beam, BeamRunner)
    assert beam.settings.unroll is False and beam.settings.n_threads == 2
    assert not beam.settings.detach


@pytest.mark.parametrize("route, args, argv, message", [
    (Route(True, False, False, True, False), _args(), [], "--detach needs a Beam"),
    (Route(False, False, False, True, True), _args(runner="DirectRunner"), [],
     "--passes auto does not apply with --detach"),
    (Route(True, False, False, False, False), _args(), ["--foo=1"], "unrecognized"),
    (Route(False, True, False, False, False), _args(runner="DirectRunner", unroll=True), [],
     "--unroll does not apply"),
])
def test_choose_runner_refuses_what_does_not_fit(route, args, argv, message):
    with pytest.raises(UsageError, match=message):
        choose_runner(args, argv, "online-vb", route)
