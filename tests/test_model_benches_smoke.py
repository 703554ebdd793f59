"""Smoke runs of the cluster model's two measurement scripts on the 20 Newsgroups subset of
tests/test_benchmarks_smoke.py (its fixtures: a copy of benchmarks/ in a temporary tree, the
real corpus, a temporary cache): benchmarks/passes_to_score_bench.py and
benchmarks/inprocess_speed_bench.py write what benchmarks/cluster_model.py reads."""
import json
import math

from tests.test_benchmarks_smoke import bench_env, news20, run  # noqa: F401 (fixtures)


def test_passes_to_score_bench(news20, tmp_path):  # noqa: F811
    out_json = tmp_path / "passes.json"
    out, _ = run(news20, "passes_to_score_bench.py", "--algorithms", "online-vb", "--sizes",
                 512, "--staleness", "0,1", "--seeds", 1, "--max-passes", 2, "--json", out_json)
    res = json.loads(out_json.read_text())
    recs = res["records"]
    assert {(r["S"], r["staleness"]) for r in recs} == {(256, 0), (256, 1), (512, 0), (512, 1)}
    ref = next(r for r in recs if r["S"] == 256 and r["staleness"] == 0)
    assert ref["passes_to_target"] == 1.0 and len(ref["ll_by_pass"]) == 1
    for r in recs:
        assert r["target_ll"] == ref["ll_by_pass"][0]
        assert all(math.isfinite(x) and x < 0 for x in r["ll_by_pass"])
        assert 1 <= len(r["ll_by_pass"]) <= 2
        reached = [i for i, x in enumerate(r["ll_by_pass"]) if x >= r["target_ll"]]
        if r["passes_to_target"] is None:
            assert not reached and len(r["ll_by_pass"]) == 2
        else:
            assert reached and reached[0] < r["passes_to_target"] <= reached[0] + 1
    assert r["steps_per_pass"] == math.ceil(r["n_docs"] / r["S"])
    assert "passes to the target" in out


def test_inprocess_speed_bench(news20, tmp_path):  # noqa: F811
    out_json = tmp_path / "speed.json"
    run(news20, "inprocess_speed_bench.py", "--quick", "--json", out_json)
    res = json.loads(out_json.read_text())
    assert set(res["read"]) == {"wiki", "20news"}
    for r in res["read"].values():
        assert r["file_bytes_per_doc"] > 0 and r["read_cpu_s_per_doc"] > 0 and r["V"] > 1000
    assert {(r["algorithm"], r["shape"]) for r in res["trainer"]} == {
        (a, s) for a in ("online-vb", "scvb0") for s in ("wiki", "20news")}
    for r in res["trainer"]:
        assert r["steps"] >= 1 and r["docs"] > 0 and r["nnz"] > r["docs"]
        assert 0 < r["global_step_cpu_s"] < r["cpu_s"]
        assert r["cpu_s_per_doc"] > 0 and r["rows_per_step"] > 0
    assert {(r["algorithm"], r["K"], r["V"]) for r in res["global_step"]} == {
        (a, 100, 7995) for a in ("online-vb", "scvb0")}
    # only the trainer's rows again: the rest is kept from the file
    run(news20, "inprocess_speed_bench.py", "--quick", "--parts", "global", "--algorithms",
        "scvb0", "--json", out_json)
    again = json.loads(out_json.read_text())
    assert again["trainer"] == res["trainer"] and again["read"] == res["read"]
    assert {r["algorithm"] for r in again["global_step"]} == {"online-vb", "scvb0"}
