"""What a step moves (lda_core.storage.traffic): the byte counter, the bandwidth throttle, the
per-step charging, and the `timing` record's byte fields of a real Beam run with two worker
processes (real KOS documents)."""
import os

import numpy as np
import pytest

from lda_core.errors import UsageError
from lda_core.storage import traffic


@pytest.fixture(autouse=True)
def clean_counts():
    traffic.reset()
    traffic.set_bandwidth(None)
    yield
    traffic.reset()
    traffic.set_bandwidth(None)


class FakeClock:
    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_throttle_sleeps_bytes_over_bandwidth_after_each_transfer():
    clock = FakeClock()
    traffic.set_bandwidth(12.5e6, sleep=clock.sleep)
    traffic.record_in(25_000_000, traffic.STATE)
    traffic.record_out(1_250_000, traffic.STATISTICS)
    traffic.record_in(0, traffic.READ)            # nothing moved: no wait
    assert clock.sleeps == [2.0, 0.1]
    assert clock.now == pytest.approx(25_000_000 / 12.5e6 + 1_250_000 / 12.5e6)
    assert traffic.totals() == ({"state": 25_000_000}, {"statistics": 1_250_000})


def test_no_bandwidth_no_sleep():
    clock = FakeClock()
    traffic.set_bandwidth(None, sleep=clock.sleep)
    traffic.record_out(10 ** 9, traffic.STATE)
    assert clock.sleeps == []
    assert traffic.totals().n_out == 10 ** 9


@pytest.mark.parametrize("value", ["fast", "0", "-5e6", "inf", "nan"])
def test_bad_bandwidth_is_a_usage_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(traffic.ENV, value)
    monkeypatch.setattr(traffic, "_BANDWIDTH", [traffic._UNSET])
    with pytest.raises(UsageError) as e:
        traffic.record_in(1, traffic.STATE)
    msg = str(e.value)
    assert traffic.ENV in msg and "\n" not in msg


def test_bandwidth_is_read_from_the_environment_once(monkeypatch):
    monkeypatch.setenv(traffic.ENV, "50e6")
    monkeypatch.setattr(traffic, "_BANDWIDTH", [traffic._UNSET])
    assert traffic.bandwidth() == 50e6
    monkeypatch.setenv(traffic.ENV, "1e6")
    assert traffic.bandwidth() == 50e6


def test_bytes_are_charged_to_the_step_that_moved_them():
    """Inside a block: that step. Read before a block: the next step (a worker decodes a step's
    inputs before its code runs). Written after a block: the previous step (outputs are
    encoded when the bundle ends)."""
    seen = []
    traffic.set_listener(lambda key, moved: seen.append((key, moved.n_in, moved.n_out)))
    try:
        traffic.record_in(7, traffic.STATISTICS)           # decoded input of step 1
        with traffic.step(("run", 1)):
            traffic.record_in(100, traffic.STATE)
            traffic.record_out(5, traffic.INFO)
        traffic.record_out(40, traffic.STATISTICS)          # step 1's output, encoded later
        with traffic.step(("run", 2)):
            traffic.record_in(3, traffic.READ)
    finally:
        traffic.set_listener(None)
    one, two = traffic.step_bytes(("run", 1)), traffic.step_bytes(("run", 2))
    assert one.inbound == {"statistics": 7, "state": 100}
    assert one.outbound == {"info": 5, "statistics": 40}
    assert two == ({"read": 3}, {})
    # the listener hears each step's running totals: its last report of a step is the total
    last = {}
    for key, n_in, n_out in seen:
        last[key] = (n_in, n_out)
    assert last == {("run", 1): (107, 45), ("run", 2): (3, 0)}
    # take: what was charged since the previous take
    assert traffic.take(("run", 1)).n_in == 107
    with traffic.step(("run", 1)):
        traffic.record_in(11, traffic.STATE)
    assert traffic.take(("run", 1)) == ({"state": 11}, {})


def test_timing_record_step_bytes_are_means_of_per_step_maxima():
    from lda_core.training.phase_times import PhaseTimes, sum_timing
    t = PhaseTimes()
    t.add_step_traffic(0, 10, 4, 2)
    t.add_step_traffic(0, 30, 1, 0)     # another worker in step 0
    t.add_step_traffic(1, 20, 6, 8)
    rec = t.record(2, 1.0)
    assert rec["bytes"]["in_per_worker_step"] == (30 + 20) / 2
    assert rec["bytes"]["out_per_worker_step"] == (4 + 6) / 2
    assert rec["bytes"]["reducer_in_step"] == (2 + 8) / 2
    t2 = PhaseTimes()
    t2.add_step_traffic(2, 100, 0, 0)
    total = sum_timing([rec, t2.record(1, 1.0)])
    assert total["bytes_per_step"]["in_per_worker_step"] == (30 + 20 + 100) / 3


def _mp(w):
    return ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
            "--direct_num_workers=%d" % w]


@pytest.fixture(scope="module")
def kos_small(kos_paths, tmp_path_factory):
    from helpers.uci import kos_train_dataset as make_kos_dataset
    return make_kos_dataset(kos_paths, str(tmp_path_factory.mktemp("kost") / "ds"), 300)


def _state_bytes(algo):
    """The arrays of ``algo``'s state: what a scratch state file holds (with a few JSON
    fields more)."""
    return int(sum(np.asarray(a).nbytes for a in algo.to_state().arrays.values()))


@pytest.mark.serial
@pytest.mark.slow
def test_cluster_like_two_workers_report_what_a_step_moves(kos_small, tmp_path, monkeypatch):
    """Two worker processes as a cluster runs them (two stages per step, statistics through
    the runner, state files on disk): every step one worker loads the whole state the other
    published, the publisher writes it, and the one combining worker receives every piece's
    statistics -- the relations the current design implies."""
    from lda_core.storage.run_log import RunLog, read_run_log
    from pipelines.training import beam_train, beam_window
    from helpers.trainers import new_vb
    monkeypatch.setattr(beam_window, "SPILL_STATS", False)
    algo, files = new_vb(kos_small, K=5, S=40, seed=3)
    md = str(tmp_path / "m")
    os.makedirs(md)
    log = os.path.join(md, "run_log.jsonl")
    with RunLog(log) as rl:
        res = beam_train.train(algo, files, md, seed=3, minibatch=40, beam_argv=_mp(2),
                               progress=False, pieces_per_minibatch=2, run_log=rl,
                               scratch_dir=str(tmp_path / "scratch"), exchange="state")
    (rec,) = read_run_log(log, "timing")
    nb, steps = rec["bytes"], rec["steps"]
    assert steps == 8
    state = _state_bytes(res.algorithm)
    # each step: the worker that did not publish state t-1 loads all of it
    assert nb["in_per_worker_step"] >= state
    # each step: the combining worker writes state t whole
    assert nb["out_per_worker_step"] >= state
    # the combining worker receives every piece: what the E-step workers encoded (the
    # accumulators' framing aside: at most 20 bytes per piece)
    encoded = nb["stats_encode"]
    assert encoded - 20 * 2 * steps <= nb["reducer_in_step"] * steps <= encoded
    assert nb["reducer_in_step"] > 0
    assert nb["in_per_worker_step"] >= nb["reducer_in_step"]
    assert rec["graph_bytes_per_step"] == nb["pipeline_build"] / steps > 0


@pytest.mark.serial
@pytest.mark.slow
def test_local_chained_workers_report_step_bytes(kos_small, tmp_path):
    """The default local shape (one stage per step, pieces spilled to scratch files): every
    worker applies the global step itself from the pieces' files, so it reads all of them."""
    from lda_core.storage.run_log import RunLog, read_run_log
    from pipelines.training import beam_train
    from helpers.trainers import new_vb
    algo, files = new_vb(kos_small, K=5, S=40, seed=3)
    md = str(tmp_path / "m")
    os.makedirs(md)
    log = os.path.join(md, "run_log.jsonl")
    with RunLog(log) as rl:
        beam_train.train(algo, files, md, seed=3, minibatch=40, beam_argv=_mp(2),
                         progress=False, pieces_per_minibatch=2, run_log=rl)
    (rec,) = read_run_log(log, "timing")
    nb, steps = rec["bytes"], rec["steps"]
    # each worker spills its piece: the busier one at least half the step's statistics
    assert nb["out_per_worker_step"] * 2 * steps >= nb["stats_encode"] > 0
    # every worker sums the previous step's pieces from their files (step t's stage reads
    # the pieces of t-1, the window's last stage those of the last step too): every spilled
    # byte is read by the busiest reader of some step
    assert nb["reducer_in_step"] * steps >= nb["stats_encode"]
    assert nb["in_per_worker_step"] >= nb["reducer_in_step"]
