"""The 3.3 M-document plan is one Dataflow job: the DataflowRunner's own translation of the
training window, without submitting it.

With the ``[gcp]`` extra, ``--dry_run=True --no_auth`` and valid-looking ``--project``,
``--region`` and ``gs://`` temp/staging locations, the DataflowRunner translates a pipeline
and returns before any request is sent: ``result.job.proto`` is the job request (its JSON is
what is posted) and ``result.job.proto_pipeline`` the pipeline it stages. Dataflow accepts
requests of at most 20 MB and job graphs of at most 10 MB (its "Request quotas" page).

The window is the one a remote runner runs (two stages per step: E-step of the pieces, the
combine and the global step; state references as side inputs), built for one pass of
3,300,000 documents at S = 4,096 (806 steps) over 165 shards of 20,000 rows (the vectorize
pipeline's automatic sharding; synthetic row counts, nothing is read). The whole 806-step
window is translated. The graph carries no row indices (workers derive their read tasks from
the plan), so a step costs only its transforms; with pickled row indices (~5 bytes per
document) the same window was over 10 MB.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the plan and the window are the benchmark's (benchmarks/graph_bytes_bench.py), so the test
# and the results file measure the same graph
from benchmarks.graph_bytes_bench import (D, GRAPH_LIMIT, REQUEST_LIMIT,  # noqa: E402
                                          dataflow_config, runner_api_per_step,
                                          wikipedia_window)

S = 4096


def _dataflow():
    try:
        from apache_beam.runners.dataflow import dataflow_runner  # noqa: F401
        from apache_beam.runners.dataflow.internal import apiclient  # noqa: F401
    except ImportError as e:
        pytest.skip("the DataflowRunner cannot import (install ldabeam[gcp]): %s" % e)


def _translate(n_steps: int, exchange: str = "remote"):
    """The Dataflow dry-run translation of a window of ``n_steps`` steps: (request bytes,
    pipeline bytes)."""
    import apache_beam as beam
    cfg = dataflow_config(True)
    p = beam.Pipeline(runner=cfg.make_runner(), options=cfg.pipeline_options())
    wikipedia_window(p, cfg, n_steps, S, exchange)
    result = p.run()
    return len(result.job.json().encode("utf-8")), result.job.proto_pipeline.ByteSize()


@pytest.mark.slow
@pytest.mark.parametrize("exchange", ["remote", "remote-s0"])
def test_the_wikipedia_pass_is_one_dataflow_job(exchange):
    """The remote exchange (pipelines.training.beam_remote) with staleness 1 (one stage per
    step, the remote default) and 0 (two): each stage's DoFn carries only its own part of the
    schedule, so the graph grows by a step's transforms only."""
    _dataflow()
    from lda_core.training.ordering import n_batches
    n_steps = n_batches(D, S)
    assert n_steps == 806
    small_request, small_pipeline = _translate(2, exchange)
    request, pipeline = _translate(n_steps, exchange)
    per_step = (pipeline - small_pipeline) / (n_steps - 2)
    print("Dataflow dry run, %s, %d steps: request %d bytes, pipeline %d bytes, %.0f bytes "
          "per step" % (exchange, n_steps, request, pipeline, per_step))
    assert request <= REQUEST_LIMIT
    assert pipeline <= GRAPH_LIMIT
    # the graph grows by a step's transforms only (no per-document data)
    assert per_step <= 12_000


@pytest.mark.parametrize("exchange", ["remote", "remote-s0"])
def test_graph_bytes_per_step_do_not_grow_with_the_minibatch(exchange):
    """The runner API graph (what ``graph_bytes_per_step`` in the timing record measures) of
    the remote window grows by a step's transforms only: the same at S = 256 and
    S = 4,096, under the 12 kB per step that fit 806 steps in one job (with pickled row
    indices a step at S = 4,096 was ~31 kB). Needs no Dataflow SDK: the graph is built, not
    run."""
    small, large = runner_api_per_step(256, exchange), runner_api_per_step(S, exchange)
    print("graph bytes per step (%s): S=256 %.0f, S=4096 %.0f" % (exchange, small, large))
    assert large <= 12_000
    assert abs(large - small) <= 0.02 * small


def test_the_driver_says_how_many_jobs_a_remote_run_takes():
    """The first window of a remote run logs one line: jobs, and the graph bytes per step
    against the 10 MB limit that bound them (with the window that makes the run fewer jobs,
    or, when the window is over the limit, the largest one that is not)."""
    from pipelines.training.beam_window import GRAPH_LIMIT_BYTES, jobs_line
    per_step = 10_000
    line = jobs_line("DataflowRunner", 806, 64, 64 * per_step)
    assert line.startswith("DataflowRunner: this run is 13 jobs (806 steps, windows of 64")
    fits = GRAPH_LIMIT_BYTES // per_step
    assert "10.0 kB per step" in line and "at most %d steps" % fits in line
    assert line.endswith("(--minibatches-per-window 806 makes it one job)")
    one = jobs_line("DataflowRunner", 806, 806, 806 * per_step)
    assert "this run is 1 job (" in one and "--minibatches-per-window" not in one
    over = jobs_line("FlinkRunner", 3000, 2000, 2000 * per_step)
    # the default window of a remote runner holds the Wikipedia pass (806 steps at S = 4,096)
    # in one job, whatever the minibatch size; local runners keep windows sized in documents
    from pipelines.runtime.beam_options import runner_config
    from pipelines.training.beam_train import REMOTE_WINDOW_STEPS, default_window
    remote = runner_config("DataflowRunner", ["--project=p", "--region=us-central1",
                                              "--temp_location=gs://ldabeam-test/tmp"])
    assert not remote.local
    assert default_window(remote, 4096) == default_window(remote, 64) == REMOTE_WINDOW_STEPS
    # 11 kB per step: the measured 9.8 kB (graph_bytes test) with a margin
    assert REMOTE_WINDOW_STEPS >= 806 and REMOTE_WINDOW_STEPS * 11_000 < GRAPH_LIMIT_BYTES
    local = runner_config("DirectRunner", ["--direct_running_mode=multi_processing",
                                           "--direct_num_workers=2"])
    assert default_window(local, 256) == 1024
    assert over.endswith("this window is over it, give --minibatches-per-window %d or fewer"
                         % fits)
