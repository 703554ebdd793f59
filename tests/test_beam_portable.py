"""The Beam trainer through Beam's portable job API: the Python SDK's own job service stands in
for a cluster (it exercises job submission, artifact staging and the worker protocol that
Flink and Dataflow use). The job service (and the worker pool) are started here on free
ports and always killed at the end.

With ``--environment_type=LOOPBACK`` the SDK workers run in the submitting process; with
``EXTERNAL`` they run in a separately started ``worker_pool_main`` (which works only when the
venv's ``python`` is first on PATH: the pool starts workers with the ``python`` it finds).
The states travel between steps as files (a worker is not assumed to share the driver's
memory), which is the transport used on clusters.
"""
import os

import pytest

from helpers.bits import max_rel
from helpers.procs import PY, Service as _Service, job_service as _job_service
from helpers.trainers import beam_run, inprocess_reference
from helpers.uci import kos_train_dataset as make_kos_dataset

pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def kos_tiny(kos_paths, tmp_path_factory):
    return make_kos_dataset(kos_paths, str(tmp_path_factory.mktemp("kos") / "ds"), 240, 2)


@pytest.mark.slow
def test_portable_runner_loopback_equals_inprocess(kos_tiny, tmp_path):
    ref = inprocess_reference(kos_tiny, S=60)
    with _job_service(tmp_path) as js:
        res = beam_run(kos_tiny, str(tmp_path / "m"), S=60, minibatches_per_window=2,
                       beam_argv=["--runner=PortableRunner",
                                  "--job_endpoint=localhost:%d" % js.port,
                                  "--environment_type=LOOPBACK"])
    assert res.algorithm.step == ref.step == 4 and res.windows == 2
    assert res.beam_metrics.get("documents") == 240
    assert max_rel(ref.lambda_(), res.algorithm.lambda_()) <= 1e-5


@pytest.mark.slow
def test_portable_runner_external_worker_pool(kos_tiny, tmp_path):
    """EXTERNAL environment: workers from a worker pool process (venv python first on PATH)."""
    ref = inprocess_reference(kos_tiny, S=120)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(PY) + os.pathsep + env.get("PATH", "")
    with _job_service(tmp_path) as js, \
            _Service([PY, "-m", "apache_beam.runners.worker.worker_pool_main",
                      "--service_port={port}"], str(tmp_path / "pool.log"), env=env) as pool:
        res = beam_run(kos_tiny, str(tmp_path / "m"), S=120,
                       beam_argv=["--runner=PortableRunner",
                                  "--job_endpoint=localhost:%d" % js.port,
                                  "--environment_type=EXTERNAL",
                                  "--environment_config=localhost:%d" % pool.port])
    assert res.algorithm.step == ref.step == 2
    assert max_rel(ref.lambda_(), res.algorithm.lambda_()) <= 1e-5
