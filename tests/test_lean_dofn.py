"""LeanDoFn hides every method but Beam's lifecycle ones from ``dir()``, because Beam walks
``dir(dofn)`` to find user state and timer parameters (``userstate.get_dofn_specs``). These
tests hold the two facts that make that safe and useful, so a Beam upgrade that changes either
fails here rather than silently: Beam still finds specs through ``dir()``, and no LeanDoFn of
the project declares state or timers (which a hidden method would hide from Beam)."""
import inspect

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.transforms import userstate

from pipelines.training import beam_chain, beam_detached, beam_steps  # noqa: F401 (subclasses)
from pipelines.training.beam_steps import LeanDoFn


def _subclasses(cls):
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out


def test_beam_finds_state_specs_through_dir():
    calls = []

    class Probe(LeanDoFn):
        def __dir__(self):
            calls.append(1)
            return super().__dir__()

        def process(self, kv, count=beam.DoFn.StateParam(
                userstate.ReadModifyWriteStateSpec("n", VarIntCoder()))):
            yield kv

    state, timers = userstate.get_dofn_specs(Probe())
    assert calls, "Beam no longer reads dir(dofn): LeanDoFn.__dir__ is not needed any more"
    assert [s.name for s in state] == ["n"] and not timers   # process is listed: found


def test_no_lean_dofn_of_the_project_declares_state_or_timers():
    subclasses = {c for c in _subclasses(LeanDoFn) if c.__module__.startswith("pipelines.")}
    assert len(subclasses) >= 5
    for cls in subclasses:
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            for p in inspect.signature(fn).parameters.values():
                assert not isinstance(p.default, (beam.DoFn.StateParam, beam.DoFn.TimerParam)), \
                    "%s.%s declares %s: a LeanDoFn must not hold state or timers" % (
                        cls.__name__, name, p.name)
        # what Beam sees equals what it would find walking the whole class
        assert userstate.get_dofn_specs(cls.__new__(cls)) == (set(), set())
