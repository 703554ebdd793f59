"""The remote exchange's defaults (pipelines/training/remote_defaults.py): machine types and
worker counts read from Beam arguments, the model's terms, and that the defaults are the
model's optimum with the measured constants (which must agree with the cluster model's last
run, benchmarks/results/cluster_model.json)."""
import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, replace

import pytest

from pipelines.ingest import dataset

from pipelines.training import remote_defaults as rd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a small table of constants: everything the model needs, round numbers
# fewer steps a pass need more passes (as measured): large S is not free
CURVE = rd.PassesCurve(((1.0, 1.0), (0.1, 2.0), (0.01, 6.0)))
COSTS = rd.Costs(cpu_s_per_nnz={100: 1e-6, 1000: 1e-5}, global_s={100: (1e-7, 1e-6),
                                                                  1000: (1e-6, 1e-5)},
                 thread_efficiency={100: 0.8}, row_bytes=8.0, stats_bytes=8.0,
                 small_bytes=(100.0, 16.0), partial_bytes=(50.0, 8.0),
                 read_cpu_s_per_nnz=2e-8, file_bytes_per_nnz=2.0,
                 union_ratio=((1.0, 1.0), (256.0, 2.0), (4096.0, 1.2)),
                 requests_per_reader=3.0, passes={0: CURVE, 1: CURVE},
                 graph_bytes={0: 8400.0, 1: 4400.0})
SHAPE = rd.Shape(D=1_000_000, K=100, V=10_000, nnz_per_doc=100.0)
CLOUD = rd.Cloud()


@pytest.mark.parametrize("name,vcpus", [
    ("n1-standard-4", 4), ("n2-highmem-8", 8), ("n1-highcpu-96", 96), ("e2-standard-2", 2),
    ("c3-standard-4-lssd", 4), ("custom-8-30720", 8), ("n2-custom-6-12288", 6),
    ("e2-medium", 2), ("f1-micro", 1), ("N1-Standard-16", 16),
    ("projects/p/zones/us-central1-a/machineTypes/n2-standard-32", 32)])
def test_vcpus_of_a_machine_type(name, vcpus):
    assert rd.vcpus_of(name) == vcpus


def test_vcpus_without_a_machine_type_and_a_bad_one():
    assert rd.vcpus_of(None) == rd.vcpus_of(rd.DEFAULT_MACHINE_TYPE) == 1
    assert rd.vcpus_of("", default=4) == 4
    with pytest.raises(ValueError, match="'quantum-box'.*n1-standard-4"):
        rd.vcpus_of("quantum-box")


def test_workers_and_machine_from_beam_arguments():
    argv = ["--runner=DataflowRunner", "--num_workers=8", "--max_num_workers", "32",
            "--machine_type=n2-highmem-8"]
    assert rd.workers_of(argv) == 32
    assert rd.workers_of(["--num_workers=16"]) == 16
    assert rd.workers_of([], default=3) == 3
    assert rd.machine_of(argv) == "n2-highmem-8"
    assert rd.machine_of(["--worker_machine_type", "n1-standard-4"]) == "n1-standard-4"
    assert rd.machine_of([]) is None
    with pytest.raises(ValueError, match="--num_workers=many"):
        rd.workers_of(["--num_workers=many"])
    with pytest.raises(ValueError, match="--max_num_workers=0"):
        rd.workers_of(["--max_num_workers=0"])


def test_defaults_from_beam_arguments():
    argv = ["--runner=DataflowRunner", "--max_num_workers=64", "--machine_type=n2-standard-4"]
    got = rd.remote_defaults_for(argv, "scvb0", 1000, 100_000, 100_000_000)
    assert got == rd.remote_defaults(64, 4, "scvb0", 1000, 100_000, 100_000_000)
    assert (got.workers, got.vcpus) == (64, 4)
    alone = rd.remote_defaults_for([], "online-vb", 100, 7995, 3_300_000, 745.0,
                                   default_workers=2)
    assert (alone.workers, alone.vcpus) == (2, 1)                 # n1-standard-1
    with pytest.raises(ValueError, match="quantum-box"):
        rd.remote_defaults_for(["--machine_type=quantum-box"], "scvb0", 100, 1000, 10_000)


def test_constants_agree_with_the_code_they_mirror():
    from lda_core.algorithms.word_blocks import MAX_BLOCKS
    from lda_core.training.pieces import MAX_PIECES
    from pipelines.training.algorithm_options import default_minibatch
    from pipelines.training.beam_train import REMOTE_WINDOW_STEPS
    from pipelines.training.beam_window import GRAPH_LIMIT_BYTES
    assert rd.REMOTE_WINDOW_STEPS == REMOTE_WINDOW_STEPS
    assert rd.GRAPH_LIMIT_BYTES == GRAPH_LIMIT_BYTES
    assert (rd.MAX_PIECES, rd.MAX_BLOCKS) == (MAX_PIECES, MAX_BLOCKS)
    assert rd.DEFAULT_MINIBATCH == {a: default_minibatch(a) for a in rd.ALGORITHMS}


def test_the_module_imports_no_beam():
    code = ("import sys; import pipelines.training.remote_defaults; "
            "assert 'apache_beam' not in sys.modules, 'beam imported'")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_step_terms_as_in_the_docstring():
    lay = rd.Layout(W=4, c=2, S=1024, P=8, B=4, T=1, s=1)
    p = rd.step_parts(COSTS, CLOUD, SHAPE, lay)
    assert p["barriers"] == pytest.approx(1.0)                       # s = 1: one barrier
    assert rd.step_parts(COSTS, CLOUD, SHAPE, replace(lay, s=0))["barriers"] == \
        pytest.approx(2.0)
    assert p["requests"] == pytest.approx(3 * CLOUD.request_latency_s)
    t_doc = 100 * 1e-6
    # 8 processes, 128 documents each, 2 busy vCPUs a worker at the measured efficiency
    assert p["estep"] == pytest.approx(128 * t_doc / 0.8)
    # c threads in one process: the same work a second
    two = rd.step_parts(COSTS, CLOUD, SHAPE, replace(lay, P=4, T=2))
    assert two["estep"] == pytest.approx(256 * t_doc / (2 * 0.8)) == p["estep"]
    assert rd.thread_efficiency(COSTS, 100, 4) == pytest.approx(0.8 ** 2)
    assert rd.thread_efficiency(COSTS, 100, 1) == 1.0
    # every process gets a piece of a shard of 20,000 rows, so each decodes the whole shard
    assert p["read_fraction"] == pytest.approx(1 - (1 - 1 / 8) ** (8 * 20_000 / 1024))
    assert p["read"] == pytest.approx(p["read_fraction"] * 1024 * 100 * 2e-8)
    u = rd.words_of(COSTS, 1024, 100, 10_000)
    assert p["owners"] == pytest.approx(rd.global_step_s(COSTS, 100, 2500, u / 4))
    assert p["bytes"] == pytest.approx((p["bytes_in_per_worker"] + p["bytes_out_per_worker"])
                                       / CLOUD.bandwidth_bytes_per_s)
    # the rows of the pieces' words come in, their statistics go out: K x 8 bytes a word
    u_p = rd.words_of(COSTS, 128, 100, 10_000)
    assert p["bytes_in_per_worker"] >= 2 * u_p * 100 * 8
    assert p["bytes_out_per_worker"] >= 2 * u_p * 100 * 8


def test_words_of_n_documents_use_the_measured_ratio_at_the_same_load():
    # COSTS.union_ratio: (load n nnz / V, bound / words) = (1, 1), (256, 2), (4096, 1.2)
    assert rd.words_of(COSTS, 100, 100, 10_000) == pytest.approx(10_000)          # load 1
    assert rd.words_of(COSTS, 25_600, 100, 10_000) == pytest.approx(10_000 / 2)   # load 256
    assert rd.words_of(COSTS, 10 ** 6, 100, 10_000) == pytest.approx(10_000 / 1.2)
    assert rd.words_of(COSTS, 10, 100, 10_000) == pytest.approx(1000)      # below: ratio 1
    # the same load on a larger vocabulary: the same ratio
    assert rd.words_of(COSTS, 256_000, 100, 100_000) == pytest.approx(100_000 / 2)
    assert rd.words_of(replace(COSTS, union_ratio=()), 256, 100, 10_000) == 10_000


def test_passes_curve():
    curve = rd.PassesCurve(((1.0, 1.0), (0.25, 2.0), (0.0625, 5.0)))
    n = rd.ENOUGH_STEPS_PER_PASS
    assert curve.passes(10 * n) == 1.0 and curve.passes(n) == 1.0
    assert curve.passes(0.25 * n) == pytest.approx(2.0)
    assert curve.passes(0.5 * n) == pytest.approx(1.5)              # log-linear between
    assert curve.passes(0.01 * n) is None                           # never extrapolated
    stale = rd.PassesCurve(((1.0, 1.1), (0.25, 2.0)))
    assert stale.passes(3 * n) == pytest.approx(1.1)


def test_a_run_counts_jobs_by_the_window_and_the_graph():
    lay = rd.Layout(W=4, c=2, S=256, P=8, B=4, T=1, s=1)
    r = rd.run_time(COSTS, CLOUD, SHAPE, lay)
    steps = math.ceil(1_000_000 / 256)
    assert r["steps"] == steps and r["windows"] == math.ceil(steps / 900)
    assert r["total_s"] == pytest.approx(sum(r["terms"].values()))
    big = replace(COSTS, graph_bytes={1: 100_000.0})
    assert rd.steps_per_job(big, CLOUD, 1) == 10 * 1024 * 1024 // 100_000
    assert rd.run_time(big, CLOUD, SHAPE, lay)["windows"] == \
        math.ceil(steps / (10 * 1024 * 1024 // 100_000))


def test_the_choice_follows_the_model():
    """Slower barriers choose fewer, larger steps; a free staleness is taken; the chosen
    layout is the least time of every candidate."""
    tables = {"online-vb": COSTS, "scvb0": COSTS}
    fast = rd.remote_defaults(16, 4, "online-vb", 100, 10_000, 1_000_000, 100.0,
                              cloud=replace(CLOUD, stage_latency_s=0.01), costs=tables)
    slow = rd.remote_defaults(16, 4, "online-vb", 100, 10_000, 1_000_000, 100.0,
                              cloud=replace(CLOUD, stage_latency_s=10.0), costs=tables)
    assert slow.minibatch > fast.minibatch
    assert slow.staleness == 1                          # the same passes, half the barriers
    got = rd.remote_defaults(16, 4, "online-vb", 100, 10_000, 1_000_000, 100.0, costs=tables)
    every = [rd.run_time(COSTS, CLOUD, SHAPE, lay)
             for lay in rd.layouts(16, 4, rd.MINIBATCHES, (0, 1))]
    assert got.predicted_s == pytest.approx(min(r["total_s"] for r in every if r))
    assert got.reason.startswith("remote defaults: S=%d, P=%d, B=%d, staleness %d"
                                 % (got.minibatch, got.pieces, got.word_blocks,
                                    got.staleness))


def test_too_few_documents_fall_back_to_the_default_minibatch():
    short = replace(COSTS, passes={0: rd.PassesCurve(((1.0, 1.0), (0.5, 2.0)))})
    got = rd.remote_defaults(8, 2, "scvb0", 100, 1000, 500, costs={"scvb0": short})
    assert got.minibatch == 100 and "too few documents" in got.reason
    with pytest.raises(ValueError, match="remote exchange runs"):
        rd.remote_defaults(8, 2, "gibbs", 100, 1000, 500)


def test_measured_constants_are_the_cluster_models():
    """MEASURED is what benchmarks/cluster_model.py derived from the results files in its last
    run (its --defaults-constants prints the literal)."""
    path = os.path.join(REPO, "benchmarks", "results", "cluster_model.json")
    with open(path) as f:
        model = json.load(f)["remote"]["costs"]
    assert set(rd.MEASURED) == set(rd.ALGORITHMS) == set(model)
    for alg, costs in rd.MEASURED.items():
        mine = json.loads(json.dumps(asdict(costs)))
        mine["passes"] = {str(s): [list(p) for p in c.points] for s, c in costs.passes.items()}
        assert _close(mine, model[alg]), alg


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return set(map(str, a)) == set(map(str, b)) and all(
            _close(v, b[k] if k in b else b[str(k)]) for k, v in a.items())
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-15)
    return a == b


@pytest.mark.parametrize("workers,vcpus,algorithm,K,V,D", [
    (16, 4, "online-vb", 100, 7995, 3_300_000), (64, 4, "online-vb", 100, 7995, 3_300_000),
    (64, 4, "scvb0", 1000, 100_000, 100_000_000), (4, 8, "scvb0", 100, 50_000, 200_000)])
def test_defaults_are_the_optimum_of_the_measured_model(workers, vcpus, algorithm, K, V, D):
    got = rd.remote_defaults(workers, vcpus, algorithm, K, V, D)
    shape = rd.Shape(D, K, V, rd.DEFAULT_NNZ_PER_DOC)
    every = [r for r in (rd.run_time(rd.MEASURED[algorithm], rd.Cloud(), shape, lay)
                         for lay in rd.layouts(workers, vcpus, [S for S in rd.MINIBATCHES
                                                                if S <= D], (0, 1))) if r]
    best = min(every, key=lambda r: r["total_s"])
    assert got.predicted_s == pytest.approx(best["total_s"])
    lay = best["layout"]
    chosen = rd.Layout(workers, vcpus, got.minibatch, got.pieces, got.word_blocks,
                       got.threads, got.staleness)
    assert rd.run_time(rd.MEASURED[algorithm], rd.Cloud(), shape, chosen)["total_s"] == \
        pytest.approx(best["total_s"])
    assert got.pieces == lay.processes and 1 <= got.word_blocks <= rd.MAX_BLOCKS
    assert got.threads in (1, vcpus) and got.staleness in (0, 1)
    assert "%d workers x %d vCPUs" % (workers, vcpus) in got.reason


def test_the_train_command_fills_what_the_user_left_out_on_a_remote_runner(tmp_path, caplog,
                                                                        kos_paths, monkeypatch):
    """`ldabeam train --runner DataflowRunner` (options parsed, nothing submitted): S, P, B,
    staleness and threads come from the model when not given, one line says why; what the
    user gave is kept; a local runner or another exchange changes nothing."""
    import logging
    from pipelines import cli
    from pipelines.commands.train import apply_remote_defaults
    from helpers.uci import kos_shards as write_kos_shards
    files, _, V = write_kos_shards(tmp_path, kos_paths, n_docs=300)
    df = ["--project=p", "--region=r", "--temp_location=gs://b/t", "--num_workers=16",
          "--machine_type=n1-standard-4"]

    def parsed(*extra):
        args, beam_argv = cli.build_parser().parse_known_args(
            ["train", "--shards", "S", "--output", "O", "--topics", "100"] + list(extra))
        return args, beam_argv

    args, beam_argv = parsed("--runner", "DataflowRunner", "--minibatch", "512", *df)
    with caplog.at_level(logging.INFO):
        got = apply_remote_defaults(args, beam_argv, files, V)
    # the corpus's own non-zeros per document (KOS's, not the model's default 77), counted
    # here from the data and by the command from the Parquet footers
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    nnz = sum(pc.sum(pc.list_value_length(pq.read_table(f, columns=["word_ids"])["word_ids"]))
              .as_py() or 0 for f in files)
    assert dataset.count_word_entries(files) == nnz
    assert abs(nnz / 300 - rd.DEFAULT_NNZ_PER_DOC) > 10
    want = rd.remote_defaults_for(beam_argv, "scvb0", 100, V, 300, nnz / 300)
    assert (got.minibatch, got.reason) == (want.minibatch, want.reason)
    assert args.minibatch == 512                       # given: kept
    assert (args.pieces, args.word_blocks, args.staleness, args.threads) == (
        want.pieces, want.word_blocks, want.staleness, want.threads)
    assert "remote defaults:" in caplog.text and "given: --minibatch 512" in caplog.text
    # at a corpus size where the words per document change the choice (the same shards
    # counted 10,000 times over), the command's choice is the one at KOS's own words per
    # document, not at the model's default
    monkeypatch.setattr(dataset, "count_documents", lambda fs: 300 * 10 ** 4)
    monkeypatch.setattr(dataset, "count_word_entries", lambda fs: nnz * 10 ** 4)
    args, beam_argv = parsed("--runner", "DataflowRunner", *df)
    got = apply_remote_defaults(args, beam_argv, files, V)
    want = rd.remote_defaults_for(beam_argv, "scvb0", 100, V, 300 * 10 ** 4, nnz / 300)
    assumed = rd.remote_defaults_for(beam_argv, "scvb0", 100, V, 300 * 10 ** 4)
    assert got == want and got.predicted_s != assumed.predicted_s
    monkeypatch.undo()
    for extra in (["--runner", "DirectRunner", "--direct_running_mode=multi_processing",
                   "--direct_num_workers=2"],
                  ["--runner", "DataflowRunner", "--exchange", "state"] + df,
                  ["--runner", "DataflowRunner", "--algorithm", "sparse-gibbs-vb"] + df,
                  ["--runner", "inprocess"]):
        args, beam_argv = parsed(*extra)
        assert apply_remote_defaults(args, beam_argv, files, V) is None, extra
        assert args.pieces is None and args.staleness is None
