"""The command line on gs:// through Beam's own GCS file system (the code Dataflow workers
run) against a GCS API emulator on loopback (tools/gcs_emulator.py), the requests counted by
the server:

* ``ldabeam vectorize --output gs://...`` of the bundled Wikipedia sample: the dataset and
  nothing else (no lease, no temporary object);
* ``ldabeam train --output gs://...`` in-process, on the DirectRunner in this process (online
  VB, and o-LDA's sequential DoFn), and on the DirectRunner with 2 worker processes that
  exchange the step's state through the store (``--exchange`` is the one parameter of that
  test): the same bits as the in-process run, no scratch object and no lease left, and the
  window's scratch objects were downloaded from the store;
* ``topics`` / ``evaluate`` / ``infer`` reading the model and the shards from gs://, ``infer``
  writing its output there.

Each run's requests per step, by kind, are recorded (``record_property``, and printed).
"""
import json
import os
import sys

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import read_run_log
from pipelines import cli
from pipelines.runtime import object_store_files
from pipelines.runtime.object_store_files import ObjectStoreFiles

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import gcs_emulator  # noqa: E402  (tools/ is not a package)

BUCKET = "ldabeam-e2e"
SAMPLE = os.path.join(REPO, "data", "enwiki-sample-sections.jsonl.bz2")
P, B = 4, 2
# the exchanges of a step's state between worker processes (the remote runners' default is
# the word-block exchange)
EXCHANGES = ["remote", pytest.param("state", marks=pytest.mark.slow)]
TRAIN = ["--algorithm", "online-vb", "--topics", 5, "--minibatch", 200, "--seed", 2,
         "--passes", 1, "--pieces", P, "--word-blocks", B, "--eval-every", 0,
         "--checkpoint-every", 0, "--no-progress"]
WORKERS_2 = ["--runner", "DirectRunner", "--direct_running_mode=multi_processing",
             "--direct_num_workers=2"]


def gs(*parts):
    return "gs://%s/%s" % (BUCKET, "/".join(parts))


@pytest.fixture(scope="module")
def emulator():
    """A GCS emulator with the bucket gs://ldabeam-e2e, its environment exported (worker
    processes started meanwhile inherit it)."""
    object_store_files.register()
    with gcs_emulator.GcsEmulator([BUCKET]) as emu, emu.exported():
        yield emu


def ldabeam(capsys, *argv):
    rc = cli.main(["--log-level", "WARNING"] + [str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 0, (argv, err[-3000:])
    return out


def left_behind(emu, url):
    """Objects under ``url`` a finished command must not leave: leases, scratch, temporary
    files (ours and Beam's)."""
    return [o for o in emu.objects(url)
            if o.endswith("/lease.json") or "/.beam-scratch/" in o or ".tmp-" in o
            or "beam-temp" in o or "/.temp" in o]


def per_step(counts, steps):
    out = {k: round(v / steps, 1) for k, v in counts.items() if isinstance(v, int) and v}
    out["steps"] = steps
    return out


def record(record_property, name, counts, steps):
    rec = per_step(counts, steps)
    record_property(name + "_requests_per_step", json.dumps(rec, sort_keys=True))
    print("%s: requests per step %s" % (name, rec))
    return rec


@pytest.fixture(scope="module")
def shards(emulator):
    """The bundled sample vectorized to gs://ldabeam-e2e/ds, and the requests it took."""
    out = gs("ds")
    m = emulator.log.mark()
    assert cli.main(["--log-level", "WARNING", "vectorize", "--input", SAMPLE, "--format",
                     "jsonl", "--title-field", "title", "--output", out, "--holdout-fraction",
                     "0.1", "--no-below", "3", "--no-above", "0.2", "--min-token-len", "3"]) == 0
    return out, emulator.log.counts(m)


@pytest.fixture(scope="module")
def reference(emulator, shards):
    """``ldabeam train`` in-process with the model on the store: (model URL, requests)."""
    md = gs("inprocess")
    m = emulator.log.mark()
    assert cli.main(["--log-level", "WARNING", "train", "--shards", shards[0], "--output", md]
                    + [str(a) for a in TRAIN]) == 0
    return md, emulator.log.counts(m)


def steps_of(md):
    return len(read_run_log(md + "/run_log.jsonl", "step"))


def test_vectorize_leaves_the_dataset_and_nothing_else(emulator, shards, record_property):
    out, counts = shards
    names = sorted(o[len(out) + 1:] for o in emulator.objects(out))
    assert names == [".ldabeam-output.json", "heldout/part-00000-of-00001.parquet",
                     "manifest.json", "train/part-00000-of-00001.parquet", "vocab.tsv"]
    assert counts["bucket_lookup"] == 0
    record_property("vectorize_requests", json.dumps(counts, sort_keys=True))


def test_train_in_process_on_the_store(emulator, reference, record_property):
    md, counts = reference
    assert left_behind(emulator, md) == []
    state = CheckpointStore(md).latest()
    steps = steps_of(md)
    assert state.step == steps == 7            # 1,350 training documents, S = 200
    assert counts["bucket_lookup"] == 0
    record(record_property, "train_in_process", counts, steps)


@pytest.mark.serial
@pytest.mark.parametrize("exchange", EXCHANGES)
def test_worker_processes_exchange_through_the_store(emulator, shards, reference, exchange,
                                                     record_property):
    md = gs("workers-" + exchange)
    m = emulator.log.mark()
    assert cli.main(["--log-level", "WARNING", "train", "--shards", shards[0], "--output", md]
                    + [str(a) for a in TRAIN] + WORKERS_2 + ["--exchange", exchange]) == 0
    counts = emulator.log.counts(m)
    reqs = emulator.log.requests(m)
    assert left_behind(emulator, md) == []
    # the step's state went through the store: scratch objects were read there and deleted
    # (a one-request upload names its object in the body, not in the logged path)
    assert any(r.kind == "download" and ".beam-scratch" in r.target for r in reqs)
    assert any(r.kind == "delete" and ".beam-scratch" in r.target for r in reqs)
    ref, got = CheckpointStore(reference[0]).latest(), CheckpointStore(md).latest()
    assert (got.step, got.docs_seen) == (ref.step, ref.docs_seen)
    assert sorted(got.arrays) == sorted(ref.arrays)
    for k in ref.arrays:
        assert got.arrays[k].dtype == ref.arrays[k].dtype
        assert got.arrays[k].tobytes() == ref.arrays[k].tobytes(), k
    assert counts["bucket_lookup"] == 0
    record(record_property, "train_workers_2_" + exchange, counts, steps_of(md))


@pytest.mark.parametrize("algorithm", ["online-vb", "o-lda"])
def test_the_beam_runner_in_process_leaves_nothing(emulator, shards, reference, algorithm,
                                                   record_property):
    """The DirectRunner in this process (the window trainer for online VB, one sequential
    DoFn per window for o-LDA) with the model on the store: no lease, no scratch object;
    online VB on the in-process run's bits."""
    md = gs("beam-in-process-" + algorithm)
    args = list(TRAIN) + ["--runner", "DirectRunner"]
    args[args.index("--algorithm") + 1] = algorithm
    if algorithm == "o-lda":          # a sequential sampler: no pieces, no word blocks
        for flag in ("--pieces", "--word-blocks"):
            i = args.index(flag)
            del args[i:i + 2]
    m = emulator.log.mark()
    assert cli.main(["--log-level", "WARNING", "train", "--shards", shards[0], "--output", md]
                    + [str(a) for a in args]) == 0
    counts = emulator.log.counts(m)
    assert left_behind(emulator, md) == []
    got = CheckpointStore(md).latest()
    if algorithm == "online-vb":
        ref = CheckpointStore(reference[0]).latest()
        for k in ref.arrays:
            assert got.arrays[k].tobytes() == ref.arrays[k].tobytes(), k
    assert counts["bucket_lookup"] == 0
    record(record_property, "train_beam_in_process_" + algorithm, counts, steps_of(md))


def test_readers_read_the_model_and_shards_from_the_store(emulator, shards, reference, capsys,
                                                          record_property):
    md = reference[0]
    state = CheckpointStore(md).latest()
    topics = json.loads(ldabeam(capsys, "topics", "--model", md, "--top", 5, "--format",
                                "json"))
    assert len(topics) == 5 and all(len(t["words"]) == 5 for t in topics)
    m = emulator.log.mark()
    res = json.loads(ldabeam(capsys, "evaluate", "--model", md, "--shards", shards[0],
                             "--train-shards", "none", "--seed", 2))
    record_property("evaluate_requests", json.dumps(emulator.log.counts(m), sort_keys=True))
    assert res["step"] == state.step and res["model"] == md
    assert np.isfinite(res["completion_ll_per_token"]) and res["completion_ll_per_token"] < 0
    out = gs("theta")
    m = emulator.log.mark()
    ldabeam(capsys, "infer", "--model", md, "--shards", shards[0], "--split", "heldout",
            "--output", out)
    record_property("infer_requests", json.dumps(emulator.log.counts(m), sort_keys=True))
    summary = json.loads(ObjectStoreFiles().read_bytes(out + "/_summary.json"))
    assert summary["documents"] == 138 and summary["checkpoint"].startswith(md)
    assert left_behind(emulator, out) == []
    listed = sorted(out + "/" + f for f in summary["files"])
    assert set(listed) <= set(emulator.objects(out))


def test_a_detached_dataflow_dry_run_says_so_and_leaves_nothing(emulator, shards, capsys):
    """`ldabeam train --detach --runner DataflowRunner --dry_run=True --no_auth` on the store:
    the job is translated (its graph checked against the limit), not submitted; the command
    says nothing ran and nothing will be published, exits 0, publishes no checkpoint and
    leaves no scratch or lease behind."""
    try:
        from apache_beam.runners.dataflow import dataflow_runner  # noqa: F401
    except ImportError as e:
        pytest.skip("the DataflowRunner cannot import (install ldabeam[gcp]): %s" % e)
    md = gs("dry-run")
    out = ldabeam(capsys, "train", "--shards", shards[0], "--output", md, *TRAIN, "--detach",
                  "--passes", 1, "--runner", "DataflowRunner", "--dry_run=True", "--no_auth",
                  "--project=ldabeam-test", "--region=us-central1",
                  "--temp_location=" + gs("tmp"))
    assert "--dry_run: the DataflowRunner translated the job and did not submit it" in out
    assert "state DONE" not in out and "has published" not in out
    assert CheckpointStore(md).latest() is None
    assert left_behind(emulator, md) == []
