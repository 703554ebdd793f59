"""One stage per window for local worker processes (pipelines.training.beam_chain): the
participants share each step's pieces through claim files in the scratch folder, every one
applies the global steps to its own copy, and the window ends on the bits of the in-process
trainer with the same pieces. Real KOS documents; the sharing test runs two participants in
two real processes."""
import gc
import json
import os
import pickle
import subprocess
import sys
import time
import weakref

import numpy as np
import pytest

from helpers.trainers import minibatch_of, new_scvb0, new_vb
from helpers.uci import kos_train_dataset

P = 3
STEPS = 4


@pytest.fixture(scope="module")
def kos_chain(kos_paths, tmp_path_factory):
    """300 KOS documents in 3 shards."""
    return kos_train_dataset(kos_paths, str(tmp_path_factory.mktemp("kosc") / "ds"), 300)


def _window(algo, files, scratch, steps=STEPS, pieces=P):
    """(steps of the window, its read plan, start reference) with the start state written to
    the scratch folder as the driver writes it."""
    from pipelines.ingest import dataset
    from pipelines.training import beam_chain, beam_state
    from pipelines.training.beam_plan import plan_steps
    os.makedirs(scratch, exist_ok=True)
    sizes = [dataset.count_documents([f]) for f in files]
    plans = plan_steps(files, sizes, seed=algo.seed, minibatch=minibatch_of(algo), start=0,
                       stop=steps, pieces_per_minibatch=pieces)
    start = beam_state.StateRef("r/0", beam_chain.state_path(scratch, 0), 0)
    beam_state.save_scratch(algo, start.path)
    return plans, plans[0].read_plan, start


def _participant(plans, plan, start, scratch):
    from pipelines.training.beam_chain import WindowRun
    from pipelines.training.beam_steps import StepMetrics
    return WindowRun([sp.bare() for sp in plans], plan, start, "r", scratch, None,
                     StepMetrics())


def _reference(make, files, steps=STEPS, pieces=P):
    from lda_core.training.trainer import train
    from pipelines.training.shard_stream import ShardStream
    algo, _ = make()
    train(algo, ShardStream(files, minibatch=minibatch_of(algo), seed=algo.seed, passes=1),
          progress=False, pieces=pieces, max_steps=steps)
    return algo


def _same_bits(a, b):
    sa, sb = a.to_state(), b.to_state()
    assert sa.step == sb.step
    assert sorted(sa.arrays) == sorted(sb.arrays)
    for name in sa.arrays:
        assert sa.arrays[name].tobytes() == sb.arrays[name].tobytes(), name


@pytest.mark.parametrize("kind", ["online-vb", "scvb0"])
def test_a_lone_participant_runs_the_window_bit_for_bit(kos_chain, tmp_path, kind):
    """Alone, a participant claims every piece; it publishes each step's info, the state of
    each step and the final one, frees every step but the last, and ends on the bits of
    the in-process trainer with the same pieces. One that starts after the window ended
    stops at once and writes nothing."""
    from pipelines.training import beam_chain, beam_state
    make = (lambda: new_vb(kos_chain, K=5, S=40, seed=3)) if kind == "online-vb" \
        else (lambda: new_scvb0(kos_chain))
    algo, files = make()
    scratch = str(tmp_path / "s")
    plans, plan, start = _window(algo, files, scratch)
    ref = beam_chain.state_path(scratch, STEPS)
    got = _participant(plans, plan, start, scratch).run(0)
    assert got.path == ref and got.position == STEPS and got.key == "r/%d" % STEPS
    _same_bits(beam_state.load_algorithm(ref), _reference(make, files))
    names = set(os.listdir(scratch))
    assert {"info-%09d.json" % t for t in range(1, STEPS + 1)} <= names
    for t in range(1, STEPS + 1):
        info = beam_state.read_json(os.path.join(scratch, "info-%09d.json" % t))
        assert info["position"] == t and "error" not in info
    # the start, the last step's state (the driver's if the final step had failed), the end
    assert sorted(n for n in names if n.startswith("state-")) == [
        "state-%09d.npz" % t for t in (0, STEPS - 1, STEPS)]
    # the pieces of the last step only; the earlier ones marked gone
    kept = sorted({int(n.split("-")[1]) for n in names if n.startswith("stats-")})
    assert kept == [STEPS - 1]
    assert {"chain-gone-%09d" % t for t in range(STEPS - 1)} <= names
    assert _participant(plans, plan, start, scratch).run(1) is None
    assert set(os.listdir(scratch)) == names


_CHILD = r"""
import json, os, pickle, sys, time
from pipelines.training import beam_chain
from pipelines.training.beam_steps import StepMetrics
args = pickle.load(open(sys.argv[1], "rb"))
done = []
real = beam_chain.WindowRun._compute
def compute(self, algo, position, piece):
    real(self, algo, position, piece)
    done.append([position, piece])
beam_chain.WindowRun._compute = compute
while not os.path.exists(args["go"]):
    time.sleep(0.001)
run = beam_chain.WindowRun(args["steps"], args["plan"], args["start"], "r", args["scratch"],
                           1, StepMetrics())
ref = run.run(args["first"])
json.dump({"pieces": done, "final": ref is not None}, open(sys.argv[2], "w"))
"""


@pytest.mark.serial
def test_two_participants_in_two_processes_share_the_pieces(kos_chain, tmp_path):
    """Two participants in two processes, started together: every piece of every step is
    computed exactly once by one of them, exactly one publishes the final state, and the
    state is the in-process trainer's with the same pieces, bit for bit."""
    from pipelines.training import beam_chain, beam_state
    steps, pieces = 7, 4
    make = lambda: new_scvb0(kos_chain)          # noqa: E731
    algo, files = make()
    scratch = str(tmp_path / "s")
    plans, plan, start = _window(algo, files, scratch, steps, pieces)
    go = str(tmp_path / "go")
    children = []
    for first in (0, 1):
        arg = str(tmp_path / ("args%d.pkl" % first))
        with open(arg, "wb") as f:
            pickle.dump(dict(steps=[sp.bare() for sp in plans], plan=plan, start=start,
                             scratch=scratch, first=first, go=go), f)
        out = str(tmp_path / ("out%d.json" % first))
        children.append((subprocess.Popen([sys.executable, "-c", _CHILD, arg, out],
                                          stderr=subprocess.PIPE), out))
    time.sleep(0.5)
    open(go, "w").close()
    results = []
    for child, out in children:
        _, err = child.communicate(timeout=600)
        assert child.returncode == 0, err.decode()[-3000:]
        with open(out) as f:
            results.append(json.load(f))
    computed = sorted(tuple(x) for r in results for x in r["pieces"])
    assert computed == sorted((t, k) for t in range(steps) for k in range(plan.n_pieces(t)))
    assert sorted(r["final"] for r in results) == [False, True]
    _same_bits(beam_state.load_algorithm(beam_chain.state_path(scratch, steps)),
               _reference(make, files, steps, pieces))


def test_a_piece_claimed_by_a_participant_that_never_writes_it_is_computed_here(
        kos_chain, tmp_path, monkeypatch):
    """A claim whose piece does not appear (its participant died) is not waited for
    forever: past the steal delay the piece is computed here, with the same bits."""
    from pipelines.training import beam_chain, beam_state
    monkeypatch.setattr(beam_chain, "STEAL_AFTER_S", 0.2)
    monkeypatch.setattr(beam_chain, "STEAL_AFTER_PIECES", 0.0)
    make = lambda: new_vb(kos_chain, K=5, S=40, seed=3)      # noqa: E731
    algo, files = make()
    scratch = str(tmp_path / "s")
    plans, plan, start = _window(algo, files, scratch)
    assert beam_chain.claim(scratch, "piece-%09d-%04d" % (1, 2))      # the dead one's
    got = _participant(plans, plan, start, scratch).run(0)
    _same_bits(beam_state.load_algorithm(got.path), _reference(make, files))


def test_refused_statistics_stop_the_window_with_the_error_for_the_driver(kos_chain,
                                                                          tmp_path):
    """Non-finite statistics in a piece of step 1: the global step is refused, its error is
    stored under position 2 for the driver, nothing further is published, and state 1 --
    the last good one -- is in the scratch folder."""
    from pipelines.training import beam_chain, beam_state
    from pipelines.training.beam_stats import spill_stats
    from pipelines.training.scratch_names import stats_path as _spill_path
    from pipelines.training.beam_plan import read_task
    make = lambda: new_scvb0(kos_chain)          # noqa: E731
    algo, files = make()
    scratch = str(tmp_path / "s")
    plans, plan, start = _window(algo, files, scratch)
    bad = algo.local_step(read_task(plans[1].tasks[0]))
    bad.block.values[:] = np.nan
    assert beam_chain.claim(scratch, "piece-%09d-%04d" % (1, 0))
    spill_stats(bad, _spill_path(scratch, 1, 0))
    assert _participant(plans, plan, start, scratch).run(1) is None
    err = beam_state.read_json(os.path.join(scratch, "info-%09d.json" % 2))
    assert "non-finite" in err["error"]
    assert not os.path.exists(beam_chain.state_path(scratch, 2))
    assert not os.path.exists(os.path.join(scratch, "info-%09d.json" % 3))
    _same_bits(beam_state.load_algorithm(beam_chain.state_path(scratch, 1)),
               _reference(make, files, steps=1))


def test_a_participant_behind_or_beside_another_leaves_the_window_to_it(kos_chain, tmp_path,
                                                                         monkeypatch):
    """A participant that starts after the others freed the window's first step stops
    without loading anything; so does a second element of the same run in a process where
    one runs (another window's marks do not stop it); a participant's copy of the state is
    released when it returns."""
    from pipelines.training import beam_chain
    from pipelines.training.beam_plan import ReadTask
    algo, files = new_vb(kos_chain, K=5, S=40, seed=3)
    scratch = str(tmp_path / "s")
    plans, plan, start = _window(algo, files, scratch)
    loaded = []
    real_load = beam_chain._load

    def load(path, n_threads):
        a = real_load(path, n_threads)
        loaded.append(weakref.ref(a))
        return a

    monkeypatch.setattr(beam_chain, "_load", load)
    open(os.path.join(scratch, "chain-gone-%09d" % 0), "w").close()
    before = set(os.listdir(scratch))
    assert _participant(plans, plan, start, scratch).run(0) is None
    assert loaded == [] and set(os.listdir(scratch)) == before
    os.unlink(os.path.join(scratch, "chain-gone-%09d" % 0))
    before = set(os.listdir(scratch))
    fn = beam_chain.ChainedWindowFn(plans, "r", scratch)
    beam_chain._ACTIVE.add("r")
    try:
        assert list(fn.process((0, ReadTask(0, 0, plan)), start)) == []
    finally:
        beam_chain._ACTIVE.discard("r")
    assert loaded == [] and set(os.listdir(scratch)) == before
    # another window's end in the same folder does not end this one
    open(os.path.join(scratch, "chain-done-%09d" % 99), "w").close()
    (ref,) = list(fn.process((0, ReadTask(0, 0, plan)), start))
    assert ref.position == STEPS and not beam_chain._ACTIVE
    gc.collect()
    assert len(loaded) == 1 and loaded[0]() is None


@pytest.mark.parametrize("kind", ["online-vb", "scvb0"])
def test_spilled_pieces_are_scratch_frames_without_a_checksum(kos_chain, tmp_path, kind):
    """A piece spilled to the scratch folder is written without its CRC-32 (a scratch file,
    as the states) and read back the same; a reader that verifies refuses such a frame."""
    from pipelines.training.beam_stats import decode_stats, encode_stats, spill_stats
    from pipelines.training.beam_plan import read_task
    algo, files = (new_vb(kos_chain, K=5, S=40, seed=3) if kind == "online-vb"
                   else new_scvb0(kos_chain))
    plans, plan, start = _window(algo, files, str(tmp_path / "s"))
    st = algo.local_step(read_task(plans[0].tasks[1]))
    spilled = spill_stats(st, str(tmp_path / "p.bin"))
    raw = open(spilled.path, "rb").read()
    assert b'"crc32":null' in raw and len(raw) == spilled.nbytes
    assert encode_stats(spilled.load()) == encode_stats(st)
    head = len(encode_stats(st)) - len(st.to_bytes())
    with open(spilled.path, "rb") as f:
        f.seek(head)
        with pytest.raises(ValueError, match="no CRC-32"):
            type(st).read_from(f, len(raw) - head)
    with pytest.raises(ValueError, match="no CRC-32"):
        decode_stats(raw)
