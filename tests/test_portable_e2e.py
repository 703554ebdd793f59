"""The portable-runner CI job: ``ldabeam vectorize`` -> ``train`` -> ``infer`` through Beam's
portable job API, against the Python SDK's own job service started here
(``local_job_service_main`` on a free port) with the SDK workers in a separately started
worker pool (``worker_pool_main``, ``--environment_type=EXTERNAL``; the venv's python first
on PATH, or the pool's workers cannot import Beam). Every result equals the DirectRunner's.
This is how a Flink or Dataflow submission is tested offline here: the same job submission,
artifact staging and worker protocol, without the cluster (whose job-server jar is downloaded
from Maven Central at run time). Services are always killed at the end.
"""
import os
import sys

import numpy as np
import pytest

from helpers.procs import PY, Service as _Service

pytestmark = [pytest.mark.slow, pytest.mark.serial]


def _max_rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
    """(job endpoint options) with a job service and a worker pool running."""
    tmp = tmp_path_factory.mktemp("services")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(PY) + os.pathsep + env.get("PATH", "")
    js = _Service([PY, "-m", "apache_beam.runners.portability.local_job_service_main",
                   "--port", "{port}"], str(tmp / "job_service.log"))
    pool = _Service([PY, "-m", "apache_beam.runners.worker.worker_pool_main",
                     "--service_port={port}"], str(tmp / "pool.log"), env=env)
    with js, pool:
        yield ["--runner=PortableRunner", "--job_endpoint=localhost:%d" % js.port,
               "--environment_type=EXTERNAL", "--environment_config=localhost:%d" % pool.port]


@pytest.fixture(scope="module")
def runs(portable, wiki_sample, tmp_path_factory):
    """vectorize and train with both runners; returns {runner: (dataset, model)}."""
    from pipelines.cli import main
    root = tmp_path_factory.mktemp("e2e")
    out = {}
    for name, beam in (("direct", ["--runner=DirectRunner"]), ("portable", portable)):
        ds, model = str(root / name / "ds"), str(root / name / "model")
        assert main(["vectorize", "--input", wiki_sample, "--output", ds,
                     "--holdout-fraction", "0.1", "--no-below", "2", "--no-above", "0.5",
                     "--num-shards", "2"] + beam) == 0
        train_beam = [a for a in beam if not a.startswith("--runner")]
        runner = "DirectRunner" if name == "direct" else "PortableRunner"
        assert main(["train", "--shards", ds, "--output", model, "--topics", "8",
                     "--algorithm", "online-vb", "--minibatch", "40", "--passes", "2", "--seed", "3",
                     "--heldout", "none", "--minibatches-per-window", "4", "--no-progress",
                     "--runner", runner] + train_beam) == 0
        out[name] = (ds, model)
    return out


def test_vectorize_through_the_portable_runner_equals_direct(runs):
    from pipelines.ingest import dataset
    (d1, _), (d2, _) = runs["direct"], runs["portable"]
    assert open(os.path.join(d1, "vocab.tsv"), "rb").read() == \
        open(os.path.join(d2, "vocab.tsv"), "rb").read()
    for split in ("train", "heldout"):
        a = dataset.read_docbatch(dataset.resolve_shards(d1, split=split))
        b = dataset.read_docbatch(dataset.resolve_shards(d2, split=split))
        assert a.n_docs > 0 and a.doc_ids == b.doc_ids
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.word_ids, b.word_ids)
        np.testing.assert_array_equal(a.counts, b.counts)


def test_train_through_the_portable_runner_equals_direct(runs):
    from pipelines.runtime.model_dir import load_model
    (_, m1), (_, m2) = runs["direct"], runs["portable"]
    a1, s1, _ = load_model(m1)
    a2, s2, _ = load_model(m2)
    assert s1.step == s2.step > 4 and s1.docs_seen == s2.docs_seen
    assert s2.info["trainer"]["runner"].startswith("PortableRunner")
    assert _max_rel(a2.topic_word(), a1.topic_word()) <= 1e-5


def test_infer_through_the_portable_runner_equals_direct(runs, portable, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pipelines.cli import main
    ds, model = runs["direct"]
    outs = {}
    for name, beam in (("direct", ["--runner=DirectRunner"]), ("portable", portable)):
        out = str(tmp_path / name)
        assert main(["infer", "--model", model, "--shards", ds, "--output", out] + beam) == 0
        files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs
                       if f.endswith(".parquet"))
        assert files, "no Parquet output in %s" % out
        t = pa.concat_tables([pq.read_table(f) for f in files])
        outs[name] = t.sort_by("doc_id").to_pydict()
    a, b = outs["direct"], outs["portable"]
    assert set(a) == set(b) and len(a["doc_id"]) == len(b["doc_id"]) > 0
    assert a["doc_id"] == b["doc_id"] and a["n_tokens"] == b["n_tokens"]
    assert _max_rel(np.array(b["theta"]), np.array(a["theta"])) <= 1e-5
    assert a["top_topic"] == b["top_topic"]
