"""Shared fixtures: the real corpora in ../shared/data, the bundled Wikipedia sample, the fake
object store (fakegs://) of the object-store tests, the benchmark harness and the KOS datasets
several modules train on. Helpers every test may import live in ``tests/helpers`` (no test
module imports another)."""
import os

import pytest

from helpers.paths import WIKI_SAMPLE, shared_path


SWEEP_ENV = "LDABEAM_SWEEP"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tests marked ``sweep`` are skipped unless asked for (LDABEAM_SWEEP=1, ``make
    test-sweep``): every run already kills each named point at its first, middle and last
    arrival."""
    if os.environ.get(SWEEP_ENV) == "1":
        return
    skip = pytest.mark.skip(reason="opt-in sweep: set %s=1 (make test-sweep)" % SWEEP_ENV)
    for item in items:
        if "sweep" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    """Each test phase's duration, for the slowest-tests list of make test's two runs
    (helpers/durations.py); recorded by the run's controller only (with xdist: not in the
    workers, whose reports reach the controller)."""
    from helpers import durations
    path = os.environ.get(durations.ENV)
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        durations.record(path, report)


@pytest.fixture(scope="session")
def wiki_sample():
    return WIKI_SAMPLE


@pytest.fixture(scope="session")
def kos_paths():
    return (shared_path("uci-bow-kos", "docword.kos.txt.gz"),
            shared_path("uci-bow-kos", "vocab.kos.txt"))


@pytest.fixture(scope="session")
def nips_paths():
    return (shared_path("uci-bow-nips", "docword.nips.txt.gz"),
            shared_path("uci-bow-nips", "vocab.nips.txt"))


@pytest.fixture(scope="session")
def news20_tar():
    return shared_path("20news-bydate", "20news-bydate.tar.gz")


@pytest.fixture(scope="session")
def bp():
    """../shared/bench/bench_peers.py imported as a module (skip if absent)."""
    from helpers.evaluation import bench_peers
    return bench_peers()


@pytest.fixture(scope="session")
def cold_numba_cache(tmp_path_factory):
    """The suite's one cold numba compile: ``templates/dataflow/warmup.py`` (every
    local/global-step algorithm, as the image build and the docs run it) followed by every
    algorithm trained a few steps on KOS, in one new process on an empty ``NUMBA_CACHE_DIR``
    with ``NUMBA_CPU_NAME=generic`` (``helpers/kernels.py``). {"dir": the filled cache,
    "stdout": what it printed, "fingerprints": of the freshly compiled kernels' results ({}
    without KOS)}."""
    from helpers import kernels
    from helpers.paths import SHARED_DATA
    docword = os.path.join(SHARED_DATA, "uci-bow-kos", "docword.kos.txt.gz")
    cache = str(tmp_path_factory.mktemp("numba") / "cache")
    out, fingerprints = kernels.run(cache, docword if os.path.exists(docword) else "",
                                    warmup=True)
    return {"dir": cache, "stdout": out, "fingerprints": fingerprints}


@pytest.fixture(scope="module")
def kos_pieces(kos_paths, tmp_path_factory):
    """300 KOS documents in 3 training shards (the reduction-shape tests)."""
    from helpers.uci import kos_train_dataset
    return kos_train_dataset(kos_paths, str(tmp_path_factory.mktemp("kosp") / "ds"), 300)


@pytest.fixture
def store_root(tmp_path, monkeypatch):
    """The fake object store ``fakegs://bucket`` (tests/helpers/fake_object_store.py) backed by
    tmp_path/objects. Renames are refused (nothing may rely on them on an object store) and the
    working directory is an empty folder that must stay empty, so a URL mistaken for a local
    path (a folder named 'fakegs:') shows."""
    from helpers import fake_object_store as fos
    root = tmp_path / "objects"
    root.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv(fos.ROOT_ENV, str(root))
    monkeypatch.setenv(fos.LOG_ENV, str(tmp_path / "ops.log"))
    monkeypatch.chdir(cwd)

    def no_rename(self, src, dst):
        raise AssertionError("rename on an object store: %s -> %s" % (src, dst))
    monkeypatch.setattr(fos.FakeObjectStore, "rename", no_rename)
    yield "fakegs://bucket"
    assert os.listdir(str(cwd)) == [], "something was written locally: %s" % os.listdir(str(cwd))
