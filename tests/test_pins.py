"""One pinned set of versions: constraints.txt is what `make` installs, and the worker
requirements and the Dataflow image's Beam version agree with it (tools/pins.py)."""
import importlib.metadata
import os
import re
import shutil
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import pins  # noqa: E402  (tools/ is not a package)


def test_worker_requirements_and_dockerfile_agree_with_the_pins():
    assert pins.disagreements() == []
    lines = pins.worker_lines()
    assert lines and all(version is not None for _, _, version, _ in lines), \
        "every worker requirement is pinned with =="
    assert pins.read_pins()["apache-beam"] == pins.docker_beam_version()


@pytest.mark.parametrize("edit", ["worker", "dockerfile", "unpinned", "unknown"])
def test_a_disagreement_is_found(tmp_path, monkeypatch, edit):
    worker = tmp_path / "requirements-worker.txt"
    docker = tmp_path / "Dockerfile"
    shutil.copy(pins.WORKER, worker)
    shutil.copy(pins.DOCKERFILE, docker)
    beam = pins.read_pins()["apache-beam"]
    if edit == "worker":
        worker.write_text(worker.read_text().replace("numpy==", "numpy==0.0.0#"))
    elif edit == "dockerfile":
        docker.write_text(docker.read_text().replace("BEAM_VERSION=" + beam,
                                                     "BEAM_VERSION=2.0.0"))
    elif edit == "unpinned":
        worker.write_text(re.sub(r"scipy==\S+", "scipy", worker.read_text()))
    else:
        worker.write_text(worker.read_text() + "left-pad==1.0\n")
    monkeypatch.setattr(pins, "WORKER", str(worker))
    monkeypatch.setattr(pins, "DOCKERFILE", str(docker))
    bad = pins.disagreements()
    assert len(bad) == 1, bad
    assert {"worker": "numpy", "dockerfile": "BEAM_VERSION", "unpinned": "scipy",
            "unknown": "left-pad"}[edit] in bad[0]


def test_the_environment_was_installed_from_the_pins():
    """The packages the project is built on are the pinned versions: `make` installs with
    -c constraints.txt, so a new upstream release cannot change what a fresh clone tests."""
    assert re.search(r"pip install .*-c constraints\.txt .*-e '\.\[test\]'",
                     open(os.path.join(REPO, "Makefile")).read())
    wanted = pins.read_pins()
    for name in ("apache-beam", "numpy", "scipy", "pyarrow", "numba", "gensim", "smart-open",
                 "tqdm", "pytest", "pytest-xdist"):
        assert importlib.metadata.version(name) == wanted[name], name


def test_the_pins_satisfy_setup_py():
    """Every requirement setup.py declares (base and extras, as installed) admits its pinned
    version, and every base and [test] requirement is pinned."""
    from packaging.requirements import Requirement
    wanted = pins.read_pins()
    declared = [Requirement(r) for r in importlib.metadata.requires("ldabeam")]
    assert len(declared) >= 10, declared
    for req in declared:
        name = pins.canonical(req.name)
        extra = req.marker is not None and "extra" in str(req.marker)
        if not extra or 'extra == "test"' in str(req.marker):
            assert name in wanted, "%s is installed by make but not pinned" % req
        if name in wanted:
            assert req.specifier.contains(wanted[name], prereleases=True), (str(req),
                                                                            wanted[name])
