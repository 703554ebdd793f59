"""Where things are: the repository, the real corpora of ../shared/data, the bundled sample."""
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DATA = os.environ.get("LDABEAM_SHARED_DATA",
                             os.path.join(os.path.dirname(REPO), "shared", "data"))
SHARED = os.path.dirname(SHARED_DATA)
HARNESS = os.path.join(SHARED, "bench", "bench_peers.py")
WIKI_SAMPLE = os.path.join(REPO, "data", "enwiki-sample-206pages.xml.bz2")


def shared_path(*parts):
    """Path under ../shared/data, or skip the test with the reason if it is absent."""
    p = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(p):
        pytest.skip("shared corpus %s is absent (set LDABEAM_SHARED_DATA to the folder that "
                    "holds the corpora of ../shared/data/MANIFEST.md)" % p)
    return p


def repo_env(**extra) -> dict:
    """This process's environment with the repository first on PYTHONPATH (for a child
    ``python -m pipelines.cli``), plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra)
    return env
