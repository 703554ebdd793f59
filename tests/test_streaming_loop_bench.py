"""benchmarks/streaming_loop_bench.py: the streaming-loop prototype (one pipeline; each word
block's rows in a stateful DoFn; the statistics fed back through the channel) and the chained
windows both end on the in-process trainer's bits at the same (seed, S, P, B), on a slice of
KOS; the loop runs every step in order, each step's E-steps after the previous step's owners."""
import numpy as np
import pytest

from helpers.uci import uci_docbatch

K, S, P, B, STEPS = 8, 50, 3, 3, 4


@pytest.fixture(scope="module")
def problem(kos_paths):
    batch, V = uci_docbatch(kos_paths[0], S * STEPS)
    return V, [batch.take(np.arange(i, i + S)) for i in range(0, S * STEPS, S)]


@pytest.mark.slow
def test_streaming_loop_ends_on_the_inprocess_bits(problem, tmp_path):
    from benchmarks import streaming_loop_bench as bench
    V, mbs = problem
    ref = bench.inprocess(K, V, B, P, mbs)
    assert ref.step == STEPS
    got, rec = bench.run_loop(str(tmp_path / "loop"), K, V, B, P, mbs)
    assert bench.same_state(got, ref)
    assert rec["steps"] == STEPS
    ev = bench.EVENTS
    for t in range(2, STEPS + 1):
        # step t's tasks were released only when every owner of step t-1 had published
        assert ev[("claim", t)] >= ev[("owner_done", t - 1)]
        assert ev[("estep", t)] >= ev[("claim", t)]


@pytest.mark.slow
def test_chained_windows_end_on_the_inprocess_bits(problem, tmp_path):
    from benchmarks import streaming_loop_bench as bench
    V, mbs = problem
    ref = bench.inprocess(K, V, B, P, mbs)
    got, windows = bench.run_chained(str(tmp_path / "chained"), K, V, B, P, mbs, 2)
    assert bench.same_state(got, ref)
    assert [w["steps"] for w in windows] == [2, 2]


def test_a_state_that_is_not_the_inprocess_one_is_told_apart(problem):
    """same_state is what the benchmark's bit-identity verdict rests on: one step more, or a
    different P (another summation order), is not the same state."""
    from benchmarks import streaming_loop_bench as bench
    V, mbs = problem
    ref = bench.inprocess(K, V, B, P, mbs[:2])
    assert bench.same_state(bench.inprocess(K, V, B, P, mbs[:2]), ref)
    assert not bench.same_state(bench.inprocess(K, V, B, P, mbs[:3]), ref)
    assert not bench.same_state(bench.inprocess(K, V, B, 1, mbs[:2]), ref)
