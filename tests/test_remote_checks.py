"""Up-front checks of a remote launch (pipelines/runtime/remote_checks.py): a Dataflow run
without project, region or a gs:// temp location, with paths its workers cannot open, or
without credentials is one line and exit 2 before any file is read -- never a hang. Nothing
leaves the machine: every Google endpoint points at a closed loopback port."""
import os
import time

import pytest

from helpers.procs import free_port
from helpers.uci import kos_dataset
from lda_core.errors import UsageError
from pipelines import cli
from pipelines.runtime import remote_checks
from pipelines.runtime.beam_options import runner_config

DF = ["--project=ldabeam-test", "--region=us-central1", "--temp_location=gs://ldabeam-test/tmp"]


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No credentials anywhere google.auth looks; the metadata server a closed local port."""
    port = free_port()
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "NO_GCE_CHECK",
              "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:%d" % port)
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:%d" % port)


def _train(*extra):
    return ["train", "--shards", "gs://b/ds", "--output", "gs://b/m", "--topics", "5"] + list(
        extra)


@pytest.mark.parametrize("drop,named", [("--project=ldabeam-test", "--project"),
                                        ("--region=us-central1", "--region"),
                                        ("--temp_location=gs://ldabeam-test/tmp", "--temp_location")])
def test_dataflow_without_project_region_or_temp_is_one_line(capsys, drop, named):
    argv = _train("--runner", "DataflowRunner", *[a for a in DF if a != drop])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and "needs" in err[0], err


def test_paths_the_workers_cannot_open_are_refused(capsys, tmp_path):
    assert cli.main(["train", "--shards", "gs://b/ds", "--output", str(tmp_path / "m"),
                     "--topics", "5", "--runner", "DataflowRunner"] + DF) == 2
    err = capsys.readouterr().err
    assert "--output %s is on this machine" % (tmp_path / "m") in err
    assert cli.main(_train("--runner", "DataflowRunner", "--project=ldabeam-test", "--region=r",
                           "--temp_location=/tmp/t")) == 2
    assert "give a gs:// location" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_no_credentials_is_exit_2_within_seconds_not_a_hang(no_credentials, capsys):
    t0 = time.monotonic()
    assert cli.main(_train("--runner", "DataflowRunner", *DF)) == 2
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Google Cloud credentials for DataflowRunner" in err[0], err
    assert "gcloud auth application-default login" in err[0]
    assert elapsed < 30        # the bound on the hang


def test_a_dry_run_without_auth_needs_no_credentials(no_credentials):
    cfg = runner_config("DataflowRunner", DF + ["--dry_run=True", "--no_auth"])
    remote_checks.check_remote_launch(cfg, {"--output": "gs://b/m"})
    with pytest.raises(UsageError, match="no Google Cloud credentials"):
        remote_checks.check_remote_launch(runner_config("DataflowRunner", DF),
                                          {"--output": "gs://b/m"})


def test_local_runners_need_credentials_only_for_gs_paths_without_an_emulator(
        no_credentials, monkeypatch, tmp_path):
    local = runner_config("DirectRunner", ["--direct_running_mode=multi_processing",
                                           "--direct_num_workers=2"])
    remote_checks.check_remote_launch(local, {"--output": str(tmp_path)})
    with pytest.raises(UsageError, match="no Google Cloud credentials for gs://b/m"):
        remote_checks.check_remote_launch(local, {"--output": "gs://b/m"})
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:%d" % free_port())
    remote_checks.check_remote_launch(local, {"--output": "gs://b/m"})


def test_a_look_up_that_never_returns_is_bounded(monkeypatch):
    import google.auth
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: time.sleep(60))
    t0 = time.monotonic()
    why = remote_checks.find_credentials(timeout_s=0.5)
    assert "did not finish within 0.5 s" in why and time.monotonic() - t0 < 5


def test_vectorize_and_infer_check_their_launch_too(no_credentials, capsys, tmp_path):
    assert cli.main(["vectorize", "--input", "gs://b/in/*.txt", "--output", "gs://b/ds"]) == 2
    assert "no Google Cloud credentials for gs://b/in/*.txt" in capsys.readouterr().err
    assert cli.main(["infer", "--model", str(tmp_path / "m"), "--shards", "gs://b/ds",
                     "--output", "gs://b/out", "--runner=DataflowRunner"] + DF) == 2
    assert "--model %s is on this machine" % (tmp_path / "m") in capsys.readouterr().err


def _dataset(tmp_path, kos_paths):
    return kos_dataset(str(tmp_path / "ds"), kos_paths, n_train=300, n_held=60)


def test_plan_of_a_dataflow_run_needs_no_cloud_and_writes_nothing(no_credentials, capsys,
                                                                tmp_path, kos_paths):
    """`ldabeam train --plan` for 16 n1-standard-4 workers: the remote defaults, the remote
    exchange at staleness 1 after its warm-up, one job whose graph is within the limit, the
    cluster model's time and price; exit 0, nothing written (no model folder, no scratch)."""
    ds = _dataset(tmp_path, kos_paths)
    out = str(tmp_path / "m")
    argv = ["train", "--shards", ds, "--output", out, "--topics", "20", "--passes", "2",
            "--plan", "--runner", "DataflowRunner", "--num_workers=16",
            "--machine_type=n1-standard-4"] + DF
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "plan: scvb0, K=20" in text
    assert "remote exchange" in text and "staleness 1 after 32 minibatches at 0" in text
    assert "job graph:" in text and "within Dataflow's 10 MB limit" in text
    assert "cluster model (16 workers x 4 vCPUs" in text and "$" in text
    assert "note: --shards and --output on this machine" in text
    assert not os.path.exists(out)
    # a window over the graph limit is named with the window that fits
    assert cli.main(argv + ["--minibatches-per-window", "5000", "--minibatch", "1",
                            "--passes", "10", "--algorithm", "online-vb"]) == 0
    assert "OVER Dataflow's 10 MB limit: give --minibatches-per-window" in \
        capsys.readouterr().out


def test_plan_in_process_and_on_local_workers(capsys, tmp_path, kos_paths):
    ds = _dataset(tmp_path, kos_paths)
    out = str(tmp_path / "m")
    assert cli.main(["train", "--shards", ds, "--output", out, "--topics", "5", "--plan"]) == 0
    assert "runner: the in-process trainer" in capsys.readouterr().out
    assert cli.main(["train", "--shards", ds, "--output", out, "--topics", "5", "--plan",
                     "--runner", "DirectRunner", "--direct_running_mode=multi_processing",
                     "--direct_num_workers=2"]) == 0
    text = capsys.readouterr().out
    assert "local exchange" in text and "cluster model" not in text
    assert not os.path.exists(out)
