"""Shared fixtures: the real corpora in ../shared/data, the bundled Wikipedia sample and the fake
object store (fakegs://) of the object-store tests."""
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.environ.get("LDABEAM_SHARED_DATA",
                             os.path.join(os.path.dirname(REPO), "shared", "data"))
WIKI_SAMPLE = os.path.join(REPO, "data", "enwiki-sample-206pages.xml.bz2")


def shared_path(*parts):
    """Path under ../shared/data, or skip the test with the reason if it is absent."""
    p = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(p):
        pytest.skip("shared corpus %s is absent (set LDABEAM_SHARED_DATA to the folder that "
                    "holds the corpora of ../shared/data/MANIFEST.md)" % p)
    return p


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


@pytest.fixture
def store_root(tmp_path, monkeypatch):
    """The fake object store ``fakegs://bucket`` (tests/fake_object_store.py) backed by
    tmp_path/objects. Renames are refused (nothing may rely on them on an object store) and the
    working directory is an empty folder that must stay empty, so a URL mistaken for a local
    path (a folder named 'fakegs:') shows."""
    import fake_object_store as fos
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
