"""A folder of many small files is read in bulk: its one-document files are grouped into few
pipeline elements and batches (not one element, one batch and one vocabulary lookup per
file), with the same output as file by file. Real 20 Newsgroups posts."""
import os
import tarfile

import pytest

from pipelines.ingest import input_files
from pipelines.ingest import vectorize as vz
from pipelines.ingest import vectorize_steps as vzs

IN_PROCESS = ["--runner=FnApiRunner"]


@pytest.fixture(scope="module")
def folder(news20_tar, tmp_path_factory):
    """Every 25th training post as ``<group>/<id>``, plus a tar of 20 other posts (an input
    that stays an element of its own)."""
    root = tmp_path_factory.mktemp("posts")
    n = 0
    with tarfile.open(news20_tar, "r:gz") as tar:
        members = [m for m in tar if m.isfile() and m.name.startswith("20news-bydate-train/")]
        with tarfile.open(root / "extra.tar.gz", "w:gz") as extra:
            for i, m in enumerate(members):
                if i % 25 == 0:
                    p = root / "posts" / m.name.split("/", 1)[1]
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(tar.extractfile(m).read())
                    n += 1
                elif i % 25 == 1 and i < 500:
                    extra.addfile(m, tar.extractfile(m))
    return root, n


def test_small_files_are_grouped_into_few_elements_and_batches(folder):
    root, n = folder
    inputs = input_files.expand_inputs([str(root)])
    assert len(inputs) == n + 1
    files = [(i, p, f) for i, (p, f) in enumerate(inputs)]
    groups = vzs.group_inputs(files)
    assert sorted(x for g in groups for x in g) == sorted(files)
    assert [len(g) for g in groups if g[0][1].endswith(".tar.gz")] == [1]
    assert len(groups) == 1 + -(-n // vzs.FILES_PER_GROUP)
    # the reading step: one batch for many posts, not one batch per post
    fn = vzs._ReadWorkItemsFn({"encoding": "latin-1", "strip_headers": True})
    fn.start_bundle()
    batches = [out for g in groups for out in fn.process(g) if isinstance(out, tuple)]
    docs = [item for b in batches for item in b[1]]
    assert len(docs) == n + 20
    assert len(batches) < n / 10


def test_grouped_and_file_by_file_give_the_same_dataset(folder, tmp_path, monkeypatch):
    root, n = folder
    out = {}
    for per_group in (vzs.FILES_PER_GROUP, 1):
        monkeypatch.setattr(vzs, "FILES_PER_GROUP", per_group)
        d = tmp_path / ("g%d" % per_group)
        m = vz.vectorize(vz.VectorizeOptions(inputs=[str(root)], output=str(d),
                                             encoding="latin-1", strip_headers=True,
                                             holdout_fraction=0.1), IN_PROCESS)
        shards = {s["file"]: s["sha256"] for split in ("train", "heldout")
                  for s in m["splits"][split]["shards"]}
        out[per_group] = (m["vocabulary"]["hash"], shards, m["counts"],
                          open(os.path.join(d, "vocab.tsv"), "rb").read())
    assert out[vzs.FILES_PER_GROUP] == out[1]
    assert out[1][2]["documents_read"] == n + 20
