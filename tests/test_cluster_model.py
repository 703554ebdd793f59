"""The cluster cost model's arithmetic (benchmarks/cluster_model.py) on a small fixed set of
constants, and its reading of results files in the older and the newer layouts."""
import json
import math
import os
import re
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks import cluster_model as cm  # noqa: E402
from pipelines.training import remote_defaults as rd  # noqa: E402

C = {"estep_s_per_nnz_iter": {10: 1e-6}, "global_step_points": [[10 * 50, 0.01], [10 ** 8, 50.0]],
     "per_step_overhead_s": 0.05, "state_bytes_per_value": 8.0, "stats_bytes_per_value": 8.0,
     "state_reloaded_per_step": True, "docs_per_window": 1000, "max_window": 100}
CLOUD = {"machine_type": "test", "vcpus_per_worker": 2, "memory_gb_per_worker": 4.0,
         "price_per_vcpu_hour": 0.1, "price_per_gb_hour": 0.01, "job_start_s": 10.0,
         "network_bytes_per_s": 1e6}
RUN = {"name": "test", "D": 10_000, "K": 10, "V": 100, "nnz_per_doc": 5, "iterations": 10,
       "vectorize_cpu_s_per_doc": 1e-3}
S = 100


def test_one_worker_is_the_serial_sum_of_the_parts():
    r = cm.project(C, CLOUD, RUN, 1, S)
    t_doc = 5 * 10 * 1e-6
    estep = 50 * t_doc                       # 100 documents on 2 cores
    delivery = 2 * 10 * 100 * 8 / 1e6        # the whole state written and read, every step
    combine = min(100, 100 * 5) * 10 * 8 / 1e6
    global_step = 0.01 * (10 * 100) / (10 * 50)       # from the nearest point in K x V
    step = estep + delivery + combine + global_step + 0.05
    assert r["parts_s"] == pytest.approx({"estep": estep, "delivery": delivery,
                                          "combine": combine, "global_step": global_step,
                                          "overhead": 0.05})
    assert r["step_s"] == pytest.approx(step)
    assert r["steps"] == 100 and r["windows"] == 10          # 10 minibatches per window
    assert r["train_s"] == pytest.approx(10 * 10.0 + 100 * step)
    assert r["vectorize_s"] == pytest.approx(10.0 + 10_000 * 1e-3 / 2)
    assert r["total_s"] == pytest.approx(r["train_s"] + r["vectorize_s"])
    assert r["cost_usd"] == pytest.approx((2 * 0.1 + 4 * 0.01) * r["total_s"] / 3600)


def test_estep_work_is_conserved_and_spread_by_documents():
    t_doc = 5 * 10 * 1e-6
    for W in cm.WORKERS:
        e = cm.step_parts(C, CLOUD, RUN, W, S)["estep"]
        cores = 2 * W
        assert e * cores >= S * t_doc * (1 - 1e-12)          # no work disappears
        assert e == pytest.approx(math.ceil(S / cores) * t_doc)
    # past one document per core, more workers no longer shorten the E-step
    assert cm.step_parts(C, CLOUD, RUN, 64, S)["estep"] == pytest.approx(t_doc)
    assert cm.step_parts(C, CLOUD, RUN, 256, S)["estep"] == pytest.approx(t_doc)


@pytest.mark.parametrize("latency", [None, 0.2, 3.0])
@pytest.mark.parametrize("combine", ["lifted", "tree", "state"])
def test_speedup_is_bounded_by_the_amdahl_limit(combine, latency):
    rows = cm.sweep(C, CLOUD, RUN, S, combine=combine, stage_latency=latency)
    assert rows[0]["workers"] == 1 and rows[0]["speedup"] == pytest.approx(1.0)
    limit = rows[0]["amdahl_limit"]
    assert limit > 1
    for r in rows:
        assert r["speedup"] <= limit * (1 + 1e-12)
        assert r["amdahl_limit"] == limit


def test_speedup_is_monotone_when_the_combine_does_not_grow():
    cheap = dict(C, stats_bytes_per_value=0.0)                # nothing to combine
    for series in (cm.sweep(cheap, CLOUD, RUN, S, combine="tree"),
                   cm.sweep(cheap, CLOUD, RUN, S, combine="lifted")):
        ups = [r["speedup"] for r in series]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(ups, ups[1:]))


def test_lifted_combine_grows_with_workers_and_tree_does_not_exceed_it():
    for W in cm.WORKERS:
        lifted = cm.step_parts(C, CLOUD, RUN, W, S, "lifted")["combine"]
        tree = cm.step_parts(C, CLOUD, RUN, W, S, "tree")["combine"]
        assert tree <= lifted * (1 + 1e-12)
    with pytest.raises(ValueError, match="combine must be"):
        cm.step_parts(C, CLOUD, RUN, 2, S, "ring")


def test_state_shipped_once_delivers_the_combined_statistics():
    once = dict(C, state_reloaded_per_step=False)
    parts = cm.step_parts(once, CLOUD, RUN, 4, S)
    assert parts["delivery"] == pytest.approx(2 * min(100, S * 5) * 10 * 8 / 1e6)


def test_the_word_block_names_are_the_remote_exchange():
    """The word-block exchange over files is gone; its names (``--combine sharded``,
    ``--exchange word-blocks``) are the remote exchange's, whose step is the model of
    pipelines/training/remote_defaults.py (tests/test_remote_defaults.py)."""
    for name in ("sharded", "word-blocks", "remote"):
        assert cm.exchange_of(name) == "remote"
        with pytest.raises(ValueError, match="remote_defaults"):
            cm.step_parts(C, CLOUD, RUN, 10, S, name, stage_latency=1.0)
        with pytest.raises(ValueError, match="remote_defaults"):
            cm.step_bytes(C, RUN, 10, S, name)
    state = cm.step_parts(C, CLOUD, RUN, 10, S, "state", stage_latency=1.0)
    assert state == cm.step_parts(C, CLOUD, RUN, 10, S, "lifted", stage_latency=1.0)
    assert state["overhead"] == pytest.approx(2 * 1.0)
    # without a latency the runner's measured per-step overhead is charged
    assert cm.step_parts(C, CLOUD, RUN, 10, S, "state")["overhead"] == 0.05


# a run whose pieces' words cover the vocabulary at few workers and not at many
BIG = {"name": "big", "D": 10 ** 6, "K": 50, "V": 2000, "nnz_per_doc": 20, "iterations": 10,
       "vectorize_cpu_s_per_doc": 1e-3}
S_BIG = 1024


REMOTE_COSTS = rd.Costs(
    cpu_s_per_nnz={50: 1e-6}, global_s={50: (1e-7, 1e-6)}, thread_efficiency={50: 1.0},
    row_bytes=8.0, stats_bytes=8.0, small_bytes=(100.0, 10.0), partial_bytes=(50.0, 8.0),
    read_cpu_s_per_nnz=0.0, file_bytes_per_nnz=0.0, union_ratio=(), requests_per_reader=1.0,
    passes={0: rd.PassesCurve(((1.0, 1.0), (0.01, 3.0))),
            1: rd.PassesCurve(((1.0, 1.0), (0.01, 3.0)))}, graph_bytes={1: 4400.0})


@pytest.mark.parametrize("threads", [1, 2])
def test_remote_bytes_per_worker_do_not_grow_with_workers(threads):
    """P = one piece a process, B = W: a worker's pieces' rows and statistics, its block's
    rows and its block's cut of every piece shrink or stay; only what is per block (the
    partials, the small part of every cut) grows."""
    shape = rd.Shape(BIG["D"], BIG["K"], BIG["V"], BIG["nnz_per_doc"])
    rows = []
    for W in cm.WORKERS:
        lay = rd.Layout(W, 2, S_BIG, W * 2 // threads, W, threads, 1)
        p = rd.step_parts(REMOTE_COSTS, rd.Cloud(), shape, lay)
        per_block = (lay.processes / W) * W * (50 + 8 * 50)            # the partials
        per_block += lay.P / W * W * (100 + 10 * 50)                   # small parts out
        per_block += math.ceil(W / W) * lay.P * (100 + 10 * 50)        # small parts in
        rows.append(p["bytes_in_per_worker"] + p["bytes_out_per_worker"] - per_block)
    for a, b, W in zip(rows, rows[1:], cm.WORKERS):
        assert b <= a * (1 + 1e-9), W
    assert rows[-1] < rows[0] / 10


def test_state_exchange_bytes_per_worker_grow_with_workers():
    state = BIG["K"] * BIG["V"] * C["state_bytes_per_value"]
    rows = [cm.step_bytes(C, BIG, W, S_BIG, "state") for W in cm.WORKERS]
    for r, W in zip(rows, cm.WORKERS):
        assert r["in_per_worker"] >= state                 # every worker reads it whole
        assert r["total"] >= W * state
    # while a piece's words cover the vocabulary (here up to W = 8) the one reducer receives
    # a whole vocabulary's statistics per piece: its bytes grow with W
    busiest = [r["busiest"] for r in rows]
    assert all(b > a for a, b in zip(busiest[:4], busiest[1:5]))
    # and a worker of the remote exchange moves less from 2 workers on
    shape = rd.Shape(BIG["D"], BIG["K"], BIG["V"], BIG["nnz_per_doc"])
    remote = [rd.step_parts(REMOTE_COSTS, rd.Cloud(), shape, rd.Layout(W, 1, S_BIG, W, W, 1, 1))
              for W in cm.WORKERS]
    assert all(r["bytes_in_per_worker"] + r["bytes_out_per_worker"] < s
               for r, s in zip(remote[1:], busiest[1:]))


def test_measured_byte_factors_multiply_the_analytic_counts(tmp_path):
    c = dict(C)
    src = {}
    cm.workers_bytes(str(tmp_path / "beam_train_bench_workers.json"), c, src)
    assert "analytic" in src["bytes"] and "absent" in src["bytes"]
    assert "bytes_factor" not in c
    rows = []
    for W in (1, 2, 4, 8, 16):
        a = cm.step_bytes(c, BIG, W, S_BIG, "state")
        rows.append({"runner": "beam-workers-%d" % W, "workers": W, "K": 50, "V": 2000,
                     "S": S_BIG, "nnz_per_doc": 20,
                     "bytes": {"in_per_worker_step": 1.05 * a["in_per_worker"],
                               "out_per_worker_step": 0.9 * a["out_per_worker"],
                               "reducer_in_step": (1.2 if W == 8 else 1.0) * a["reducer_in"]}})
    path = tmp_path / "beam_train_bench_workers.json"
    path.write_text(json.dumps({"results": [dict(r, K=None) for r in rows], "run": {}}))
    src = {}
    cm.workers_bytes(str(path), c, src)
    assert "analytic" in src["bytes"] and "none with the run's shape" in src["bytes"]
    path.write_text(json.dumps({"results": rows, "run": {}}))
    src = {}
    cm.workers_bytes(str(path), c, src)
    assert c["bytes_factor"]["state"] == pytest.approx({"in": 1.05, "out": 0.9,
                                                        "reducer": 1.2})
    assert "measured bytes / analytic bytes" in src["bytes"]
    plain = cm.step_bytes(dict(c, bytes_factor={}), BIG, 64, S_BIG, "state")
    scaled = cm.step_bytes(c, BIG, 64, S_BIG, "state")
    assert scaled["in_per_worker"] == pytest.approx(1.05 * plain["in_per_worker"])
    assert scaled["reducer_in"] == pytest.approx(1.2 * plain["reducer_in"])
    # a row that does not say ran the state exchange; one with word blocks the word-block
    # exchange over files, whose name is the remote exchange's now: its bytes are left out
    assert cm._row_exchange(rows[-1], c) == "state"
    assert cm._row_exchange(dict(rows[-1], word_blocks=16), c) == "remote"
    assert cm._row_exchange(dict(rows[-1], exchange="sharded"), c) == "remote"
    assert cm._row_exchange(dict(rows[-1], exchange="state"), c) == "state"
    path.write_text(json.dumps({"results": [dict(r, word_blocks=r["workers"], bytes={
        k: 10 * v for k, v in r["bytes"].items()}) for r in rows] + rows, "run": {}}))
    src = {}
    cm.workers_bytes(str(path), c, src)
    assert set(c["bytes_factor"]) == {"state"}
    assert c["bytes_factor"]["state"]["in"] == pytest.approx(1.05)


def test_jobs_from_the_measured_graph_bytes(tmp_path):
    from pipelines.training.beam_train import REMOTE_WINDOW_STEPS
    from pipelines.training.beam_window import GRAPH_LIMIT_BYTES
    path = os.path.join(REPO, "benchmarks", "results", "graph_bytes.json")
    with open(path) as f:
        dry = json.load(f)["after"]["dataflow_dry_run"]
    c, src = {}, {}
    cm.job_settings(path, c, src)
    per_step = dry["pipeline_bytes"] / dry["steps"]
    assert c["graph_bytes_per_step"]["state"] == pytest.approx(per_step)
    assert c["steps_per_job"]["state"] == min(REMOTE_WINDOW_STEPS, GRAPH_LIMIT_BYTES // per_step)
    # the remote window's own dry run (graph_bytes_bench.py --label remote), s = 1 and 0
    doc = json.load(open(path))
    rm = doc["remote"]["dataflow_dry_run"]
    rm_per_step = rm["pipeline_bytes"] / rm["steps"]
    assert c["graph_bytes_per_step"]["remote"] == pytest.approx(rm_per_step)
    assert c["steps_per_job"]["remote"] == min(REMOTE_WINDOW_STEPS,
                                               GRAPH_LIMIT_BYTES // rm_per_step)
    assert "10 MB" in src["jobs"] and "20 MB" in src["jobs"]
    g = cm.graph_bytes_remote(path, src)
    assert g[1] == pytest.approx(rm_per_step, rel=1e-3) and g[0] > g[1]
    c_none, src_none = {}, {}
    bare = {k: v for k, v in doc.items() if not k.startswith("remote")}
    tmp = str(tmp_path / "graph_bytes_no_remote.json")
    with open(tmp, "w") as f:
        json.dump(bare, f)
    cm.job_settings(tmp, c_none, src_none)
    assert c_none["graph_bytes_per_step"]["remote"] is None
    assert c_none["steps_per_job"]["remote"] == REMOTE_WINDOW_STEPS
    assert "NOT MEASURED" in src_none["jobs"]
    assert cm.graph_bytes_remote(tmp, src_none) == {}
    cm.job_settings(path, c, src, word_blocks_graph=20_000)
    assert c["steps_per_job"]["remote"] == GRAPH_LIMIT_BYTES // 20_000 < REMOTE_WINDOW_STEPS
    run = dict(RUN, D=3_300_000)
    assert cm.project(c | C, CLOUD, run, 4, 4096, "lifted", 1.0)["windows"] == \
        math.ceil(806 / c["steps_per_job"]["state"])
    assert cm.jobs_line(c, run, 4096, "lifted").startswith("806 steps -> 1 job ")


def test_latency_rows_and_the_headline_are_printed(monkeypatch, capsys, tmp_path):
    def constants(args):
        return dict(C, pieces_per_worker=1, blocks_per_worker=1), [dict(RUN, t_doc_s=5e-5)], \
            {"test": "constants of the test"}

    def remote_costs(args, src):
        src["remote"] = "constants of the test"
        return {alg: REMOTE_COSTS for alg in rd.ALGORITHMS}, {alg: {} for alg in rd.ALGORITHMS}
    monkeypatch.setattr(cm, "load_constants", constants)
    monkeypatch.setattr(cm, "remote_costs", remote_costs)
    out_json, md = tmp_path / "m.json", tmp_path / "m.md"
    cm.main(["--json", str(out_json), "--plot", "", "--markdown", str(md)])
    out = capsys.readouterr().out
    assert "ASSUMPTION" in out
    for L in ("0.2", "1", "3"):
        assert "%s s per barrier:" % L in out
    for alg in rd.ALGORITHMS:
        for W in (16, 64):
            assert re.search(r"\(a\) %s +1 s/barrier W= *%d: S=\d+ P=\d+ B=\d+ s=[01] T=\d+, "
                             r".* speed-up \d" % (alg, W), out)
    assert "target >= 8" in out and "largest term" in out
    res = json.loads(out_json.read_text())
    assert res["stage_latencies_s"] == [0.2, 1.0, 3.0] and res["exchanges"] == ["remote"]
    head = res["remote"]["headline"]
    assert {(h["algorithm"], h["workers"], h["stage_latency_s"]) for h in head} == {
        (a, W, L) for a in rd.ALGORITHMS for W in (16, 64) for L in (0.2, 1.0, 3.0)}
    for h in head:
        assert h["speedup"] == pytest.approx(h["baseline_s"] / h["total_s"])
        assert h["cost_usd"] > 0 and h["baseline_cost_usd"] > 0
    missed = [h for h in head if h.get("target") and not h["meets_target"]]
    assert all(h["would_meet"] for h in missed)
    assert "| run | algorithm | s per barrier | workers | chosen |" in md.read_text()
    cm.main(["--json", "", "--plot", "", "--combine", "sharded", "--stage-latency", "0.5"])
    out = capsys.readouterr().out
    assert "0.5 s per barrier:" in out and "1 s per barrier:" not in out
    assert "state exchange," not in out
    cm.main(["--json", "", "--plot", "", "--exchange", "state", "--stage-latency", "1"])
    out = capsys.readouterr().out
    assert "state exchange, 2 stages per step" in out
    assert re.search(r"\(a\) state +1 s/stage W= *64: speed-up", out)


def test_flattening_point_and_busy_minibatch():
    rows = [{"workers": w, "speedup": s} for w, s in ((1, 1.0), (2, 1.9), (4, 2.0), (8, 2.01))]
    assert cm.flattening_point(rows) == 2
    assert cm.flattening_point(rows[:2]) is None
    big = dict(RUN, D=10 ** 7)
    S_busy = cm.busy_minibatch(C, CLOUD, big, 4, 0.5)
    parts = cm.step_parts(C, CLOUD, big, 4, S_busy)
    assert parts["estep"] >= 0.5 * sum(parts.values())
    smaller = cm.step_parts(C, CLOUD, big, 4, S_busy // 2)
    assert S_busy > 256 and smaller["estep"] < 0.5 * sum(smaller.values())
    assert cm.busy_minibatch(C, CLOUD, RUN, 4, 0.5) is None      # would need S > D
    assert cm.busy_minibatch(C, CLOUD, big, 4, 0.999999) is None


def test_reads_the_older_and_the_newer_result_layouts(tmp_path):
    est = {"results": [{"K": 10, "dtype": "float32", "nnz": 1000, "mean_iterations": 20.0,
                        "nnz_weighted_iterations": 25.0, "ours_cpu_s": 0.02, "docs": 50,
                        "tokens": 4000},
                       {"K": 10, "dtype": "float64", "nnz": 1000, "mean_iterations": 20.0,
                        "ours_cpu_s": 0.04}], "run": {}}
    path = tmp_path / "estep.json"
    path.write_text(json.dumps(est))
    c, src = {}, {}
    cm.estep_constants(str(path), c, src)
    assert c["estep_s_per_nnz_iter"] == {10: pytest.approx(0.02 / (1000 * 25.0))}
    assert c["estep_rows"][10]["iterations"] == 25.0
    assert c["estep_rows"][10]["nnz_per_doc"] == 20.0
    assert "older run" not in src["estep K=10"]

    rows = [{"runner": "beam-workers-2", "K": 100, "V": 8000, "S": 4096, "steps": 5,
             "global_step_s": 0.5, "breakdown": {"global_step": 0.08}},
            {"runner": "beam-in-process", "K": 10, "V": 80, "S": 4096, "steps": 5,
             "global_step_s": 0.5}]
    assert [p[:2] for p in cm._global_step_from_rows(rows)] == [(800, 0.5), (800000, 0.5)]
    rows[0]["runner"] = "beam-workers-2-two-stage"
    rows.insert(0, dict(rows[0], runner="in-process", global_step_s=0.1))
    assert [p[:2] for p in cm._global_step_from_rows(rows)] == [(800, 0.5), (800000, 0.5)]
    assert cm._global_step_from_rows([{"runner": "x"}]) == []

    old = {"throughput": {f: {"input_mb": 10.0, "in-process": {"mb_per_cpu_s": 5.0,
                                                               "docs": 100}}
                          for f in ("wiki", "jsonl")}, "run": {}}
    path = tmp_path / "vec.json"
    path.write_text(json.dumps(old))
    src = {}
    v = cm.vectorize_constants(str(path), src)
    assert v["wiki"] == pytest.approx(0.2) and v["jsonl_mb_per_doc"] == pytest.approx(0.1)
    assert "older run" in src["vectorize wiki"]
    new = {"rows": [{"format": "wiki", "runner": "in-process", "mb": 100.0,
                     "cpu_s": 20.0, "mb_per_cpu_s": 5.0, "steady_mb_per_cpu_s": 10.0,
                     "docs": 1000},
                    {"format": "jsonl", "runner": "in-process", "mb": 100.0,
                     "cpu_s": 5.0, "mb_per_cpu_s": 20.0, "docs": 500},
                    {"format": "jsonl", "runner": "multi_processing x2", "mb": 100.0,
                     "cpu_s": 50.0, "mb_per_cpu_s": 2.0, "docs": 500}], "run": {}}
    path.write_text(json.dumps(new))
    src = {}
    v = cm.vectorize_constants(str(path), src)
    assert v["wiki"] == pytest.approx(0.1) and v["jsonl"] == pytest.approx(0.05)
    assert v["jsonl_mb_per_doc"] == pytest.approx(0.2)
    assert "older run" not in src["vectorize jsonl"]


def test_a_missing_results_file_names_the_script(tmp_path):
    with pytest.raises(SystemExit, match="estep_bench.py"):
        cm.estep_constants(str(tmp_path / "estep_bench.json"), {}, {})


def test_beam_row_overhead_and_state_delivery():
    rows = [{"runner": "beam-workers-2", "K": 1000, "V": 100000, "S": 4096},
            {"runner": "beam-workers-2", "K": 100, "V": 8000, "S": 4096},
            {"runner": "beam-workers-2-two-stage", "K": 100, "V": 8000, "S": 4096,
             "per_step_overhead_s": 0.30, "state_bytes": 6_400_000,
             "state_delivery_bytes_per_step": 12_800_000,
             "breakdown": {"pipeline_start": 0.10, "checkpoint": 0.02, "estep": 1.0}},
            {"runner": "beam-in-process", "K": 100, "V": 8000, "S": 4096}]
    r = cm._beam_row(rows)
    assert r is rows[2]                       # the two-stage steps remote runners run, K = 100
    assert cm._beam_row(rows[:2] + rows[3:]) is rows[1]
    src = {}
    assert cm._overhead(r, "tag", src) == pytest.approx(0.30 - 0.10 - 0.02)
    assert "older run" not in src["per-step overhead"]
    assert cm._state_delivery(r, "tag")[0] is True             # 2 workers x the state
    once = dict(r, state_delivery_bytes_per_step=400_000)
    assert cm._state_delivery(once, "tag")[0] is False
    old = {"runner": "beam 2 workers", "S": 4096, "wall": 7.0, "inprocess_wall": 2.0,
           "docs_per_s": 17784 / 7.0}
    src = {}
    assert cm._overhead(old, "tag", src) == pytest.approx(5.0 / 5)   # 5 steps of 4,096
    assert "older run" in src["per-step overhead"]
    assert cm._state_delivery(old, "tag")[0] is True
    with pytest.raises(SystemExit, match="no worker-process row"):
        cm._beam_row(rows[3:])


def test_time_shares_add_up_to_the_total():
    for W in (1, 8, 256):
        r = cm.project(C, CLOUD, RUN, W, S)
        shares = cm.time_shares(r, CLOUD["job_start_s"])
        assert sum(shares.values()) == pytest.approx(1.0)
        assert all(v >= 0 for v in shares.values())


def test_best_is_the_fewest_workers_within_5_percent_of_the_fastest():
    rows = [{"workers": w, "speedup": s} for w, s in ((1, 1.0), (2, 1.9), (4, 3.0), (8, 3.1),
                                                      (16, 3.12), (32, 2.0))]
    assert cm._best(rows)["workers"] == 4
    flat = [{"workers": w, "speedup": 1.0 + 0.001 * w} for w in (1, 2, 4)]
    assert cm._best(flat)["workers"] == 1


@pytest.mark.slow
def test_the_script_end_to_end(tmp_path):
    """``python benchmarks/cluster_model.py`` on the committed results files: both runs for
    1-256 workers, the plot, the Markdown tables, every constant with its source."""
    import subprocess
    out_json, png, md = tmp_path / "m.json", tmp_path / "m.png", tmp_path / "m.md"
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MPLBACKEND="Agg")
    p = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "cluster_model.py"),
                        "--json", str(out_json), "--plot", str(png), "--markdown", str(md)],
                       cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(out_json.read_text())
    assert [r["run"]["D"] for r in res["runs"]] == [3_300_000, 100_000_000]
    remote = res["remote"]
    assert {(r["run"], r["algorithm"]) for r in remote["runs"]} == {
        (k, a) for k in "ab" for a in rd.ALGORITHMS}
    for run in remote["runs"]:
        assert set(run["by_latency"]) == {"0.2", "1", "3"}
        for rows in run["by_latency"].values():
            assert [r["workers"] for r in rows if r] == cm.WORKERS
            assert all(r["speedup"] > 0 and r["cost_usd"] > 0 for r in rows if r)
    heads = {(h["run"], h["algorithm"]) for h in remote["headline"] if "target" in h}
    assert heads == {(k, a) for k in "ab" for a in rd.ALGORITHMS}
    for key in ("in-process speed", "passes to the score", "passes curves",
                "thread efficiency", "remote graph", "requests", "remote bytes",
                "Wikipedia article shape", "jobs"):
        assert res["sources"][key]
    assert png.exists() or (tmp_path / "m.csv").exists()
    assert "| (b) | scvb0 | 1 | 64 |" in md.read_text()
