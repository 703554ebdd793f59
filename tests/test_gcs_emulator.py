"""The object-store file layer (pipelines.runtime.object_store_files) on Beam's own GCS file
system against a GCS API emulator (tools/gcs_emulator.py: fake-gcs-server from the [test]
extra, on loopback), with the requests counted by the server:

* the emulator: Beam's gcsio finds credentials at once and talks only to it, requests are
  counted by kind, and no server process outlives its owner (not even a SIGKILLed one);
* deletes: a tree is one listing and one batch request; the emulator refuses the batch ("not
  multi-part") and the layer falls back to single deletes, so nothing is left; one object is
  one request; what cannot be deleted is counted and reported in one warning, once;
* a whole object is written with one request and read with one; a size is one metadata
  request; a missing object reads as FileNotFoundError; the client's background bucket
  lookups are off;
* a lease on a gs:// directory is gone after its holder releases it.
"""
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines.runtime import object_store_files
from pipelines.runtime.object_store_files import ObjectStoreFiles

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import gcs_emulator  # noqa: E402  (tools/ is not a package)

BUCKET = "ldabeam-layer"


@pytest.fixture(scope="module")
def emulator():
    """A GCS emulator with the bucket gs://ldabeam-layer, its environment exported (and the
    layer registered for gs://, as the CLI does)."""
    object_store_files.register()
    with gcs_emulator.GcsEmulator([BUCKET]) as emu, emu.exported():
        yield emu


def put(url, data=b"x"):
    ObjectStoreFiles().write_atomic(url, data)


def test_beam_gcsio_finds_credentials_without_asking_google(emulator):
    """Under the emulator's environment google.auth.default() returns at once (from the
    credentials file, whose token is valid: no refresh, no metadata server)."""
    import google.auth
    creds, project = google.auth.default()
    assert creds.valid and not creds.expired
    assert project == gcs_emulator.PROJECT
    assert os.environ["STORAGE_EMULATOR_HOST"] == emulator.url


def test_requests_are_counted_by_kind(emulator):
    from apache_beam.io.filesystems import FileSystems
    url = "gs://%s/kinds/a.bin" % BUCKET
    log = emulator.log
    m = log.mark()
    with FileSystems.create(url) as f:
        f.write(b"abc" * 10)
    up = log.counts(m)
    assert up["upload"] == up["total"] >= 1 and up["by_method"].get("POST", 0) >= 1
    m = log.mark()
    with FileSystems.open(url) as f:
        assert f.read() == b"abc" * 10
    down = log.counts(m)
    assert down["download"] >= 1 and down["object_metadata"] >= 1 and down["upload"] == 0
    m = log.mark()
    assert [x.path for x in FileSystems.match(["gs://%s/kinds/**" % BUCKET])[0].metadata_list] \
        == [url]
    assert log.counts(m)["listing"] == 1
    # the helper's own requests are not counted
    m = log.mark()
    assert emulator.objects("gs://%s/kinds" % BUCKET) == [url]
    assert log.counts(m)["total"] == 0
    assert gcs_emulator.request_kind("GET", "/storage/v1/b/b1?projection=noAcl") == \
        "bucket_lookup"
    assert gcs_emulator.request_kind("DELETE", "/storage/v1/b/b1/o/a%2Fb") == "delete"
    assert gcs_emulator.request_kind("POST", "/batch/storage/v1") == "batch"


def test_a_tree_is_deleted_whole_when_the_batch_is_refused(emulator, caplog):
    fs = ObjectStoreFiles()
    root = "gs://%s/tree" % BUCKET
    names = ["a.npy", "b/c.json", "b/d/e.bin", "f.bin", "g.bin"]
    for n in names:
        put(root + "/" + n)
    put("gs://%s/tree-sibling/keep.bin" % BUCKET)
    m = emulator.log.mark()
    with caplog.at_level(logging.WARNING):
        assert fs.remove_tree(root) == 0
    assert emulator.objects(root) == []
    assert emulator.objects("gs://%s/tree-sibling" % BUCKET) == \
        ["gs://%s/tree-sibling/keep.bin" % BUCKET]
    got = emulator.log.counts(m)
    # one listing, the batch (refused by the emulator), one single delete per object
    assert (got["listing"], got["batch"], got["delete"]) == (1, 1, len(names)), got
    assert got["bucket_lookup"] == 0
    assert "could not delete" not in caplog.text
    # nothing there: one listing, nothing more
    m = emulator.log.mark()
    assert fs.remove_tree(root) == 0
    assert emulator.log.counts(m)["total"] == 1


def test_one_object_is_one_delete_request(emulator):
    fs = ObjectStoreFiles()
    url = "gs://%s/one/lease.json" % BUCKET
    put(url)
    m = emulator.log.mark()
    assert fs.remove_file(url) == 0
    got = emulator.log.counts(m)
    assert (got["delete"], got["total"]) == (1, 1), got
    assert emulator.objects("gs://%s/one" % BUCKET) == []
    assert fs.remove_file(url) == 0          # missing: not an error


def test_what_cannot_be_deleted_is_counted_and_reported_once(emulator, caplog, monkeypatch):
    """A store that refuses the batch and the single delete of one object (a fault injected
    into the client's single delete): the others go, the one is counted, and the warning
    names the prefix and the count once, not again when a parent prefix is removed."""
    from apache_beam.io.gcp import gcsio
    fs = ObjectStoreFiles()
    root = "gs://%s/stuck/run" % BUCKET
    stuck = root + "/rows-000000001-0000.npy"
    for n in ("header-000000001.bin", "rows-000000001-0000.npy", "info-000000001.json"):
        put(root + "/" + n)
    real_delete = gcsio.GcsIO.delete

    def delete(self, path, recursive=False):
        if path == stuck:
            raise OSError("403 Forbidden: injected")
        return real_delete(self, path, recursive)

    monkeypatch.setattr(gcsio.GcsIO, "delete", delete)
    with caplog.at_level(logging.WARNING, logger=object_store_files.__name__):
        assert fs.remove_tree(root) == 1
        assert fs.remove_tree("gs://%s/stuck" % BUCKET) == 1
    assert emulator.objects("gs://%s/stuck" % BUCKET) == [stuck]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "1 of 3 object(s) under %s" % root in warnings[0] and stuck in warnings[0]
    monkeypatch.setattr(gcsio.GcsIO, "delete", real_delete)
    assert fs.remove_tree("gs://%s/stuck" % BUCKET) == 0


def test_whole_objects_are_one_request_each_way(emulator):
    """write_atomic is one upload request (up to 8 MiB) and read_bytes one download; the
    read channels (open_read / open_write) keep Beam's own requests."""
    fs = ObjectStoreFiles()
    url = "gs://%s/whole/state.npz" % BUCKET
    data = os.urandom(5 << 20)
    m = emulator.log.mark()
    fs.write_atomic(url, data)
    got = emulator.log.counts(m)
    assert (got["upload"], got["total"]) == (1, 1), got
    m = emulator.log.mark()
    assert fs.read_bytes(url) == data
    got = emulator.log.counts(m)
    assert (got["download"], got["total"]) == (1, 1), got
    fs.write_atomic(url, b"new")                    # replaced whole
    assert fs.read_bytes(url) == b"new"
    with pytest.raises(FileNotFoundError):
        fs.read_bytes(url + ".missing")


def test_size_and_a_missing_object(emulator):
    fs = ObjectStoreFiles()
    url = "gs://%s/size/blob.bin" % BUCKET
    put(url, b"0123456789")
    m = emulator.log.mark()
    assert fs.size(url) == 10
    got = emulator.log.counts(m)
    assert (got["object_metadata"], got["total"]) == (1, 1), got
    with pytest.raises(FileNotFoundError):
        fs.size(url + ".missing")
    with pytest.raises(FileNotFoundError):
        fs.open_read(url + ".missing")
    assert os.environ.get(object_store_files.BUCKET_METADATA_ENV) == "true"


def test_a_lease_on_the_store_is_gone_after_release(emulator):
    from lda_core.storage.lease import LEASE_FILE, hold_model_dir
    md = "gs://%s/leased" % BUCKET
    with hold_model_dir(md, "ldabeam train", settle_seconds=0, heartbeat_seconds=0) as lease:
        assert emulator.objects(md) == [md + "/" + LEASE_FILE]
        assert json.loads(ObjectStoreFiles().read_bytes(lease.path))["token"] == \
            lease.record["token"]
    assert emulator.objects(md) == []


def _state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None                          # gone


def test_no_server_outlives_its_owner(tmp_path):
    """stop() ends the server; and when the process that started it is SIGKILLed the kernel
    ends the server too (no stray fake-gcs-server)."""
    emu = gcs_emulator.GcsEmulator(["owned"]).start()
    pid = emu._proc.pid
    assert emu.running and _state(pid) not in (None, "Z")
    emu.stop()
    assert not emu.running and _state(pid) in (None, "Z")
    code = ("import sys; sys.path.insert(0, %r); import gcs_emulator, time\n"
            "e = gcs_emulator.GcsEmulator(['owned'], root=%r).start()\n"
            "print(e._proc.pid, flush=True); time.sleep(600)\n"
            % (os.path.join(REPO, "tools"), str(tmp_path / "root")))
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        server = int(owner.stdout.readline())
        assert _state(server) not in (None, "Z")
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        deadline = time.monotonic() + 30
        while _state(server) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _state(server) in (None, "Z"), "fake-gcs-server %d outlived its owner" % server
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        owner.stdout.close()


def test_the_latency_proxy_delays_each_request_once():
    """Every request Beam's gcsio sends through the proxy (uploads with a body, reads,
    listings, deletes) is one request start for the proxy, so each costs one delay; the
    downloads go through it too (the server names the proxy in its media links)."""
    import latency_proxy
    port = gcs_emulator.free_port()
    with gcs_emulator.GcsEmulator([BUCKET], external_url="http://127.0.0.1:%d" % port) as emu, \
            latency_proxy.LatencyProxy(("127.0.0.1", emu.port), 0.005, port=port) as proxy, \
            emu.exported(endpoint="http://127.0.0.1:%d" % proxy.port):
        fs = ObjectStoreFiles()
        url = "gs://%s/proxied/x.bin" % BUCKET
        fs.write_atomic(url, os.urandom(3 << 20))                 # one request, 3 MiB body
        with fs.open_write(url + ".2") as f:                       # resumable: two requests
            f.write(os.urandom(1 << 20))
        assert len(fs.read_bytes(url)) == fs.size(url) == 3 << 20
        with fs.open_read(url + ".2") as f:
            assert len(f.read()) == 1 << 20
        assert fs.listdir("gs://%s/proxied" % BUCKET) == ["x.bin", "x.bin.2"]
        assert fs.remove_tree("gs://%s/proxied" % BUCKET) == 0
        served = emu.log.counts()
        assert served["download"] >= 2 and served["upload"] == 3 and served["delete"] == 2
        assert proxy.requests == served["total"]
