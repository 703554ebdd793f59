"""The examples of README.md ("Python", "Beam") and the walk-through of docs/library.md run as
written: the `ldabeam` shell lines through the command line, the python cells in order in one
namespace, in a scratch folder holding the bundled Wikipedia sample (a cell whose first line
says "not run here" needs a service this machine does not have)."""
import os
import re
import shlex
import shutil

import pytest

from pipelines.cli import main as cli_main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def section(text, title):
    """The text of the ``## title`` section of a Markdown file."""
    m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(title), text, re.S | re.M)
    assert m, "no section %r" % title
    return m.group(1)


def cells(text):
    """``(language, code)`` of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def run_cells(blocks, ns):
    ran = 0
    for lang, code in blocks:
        if lang == "python":
            if code.lstrip().startswith("# not run here"):
                continue
            exec(compile(code, "<docs>", "exec"), ns)
            ran += 1
        elif lang == "":
            for line in code.splitlines():
                if line.startswith("ldabeam "):
                    args = shlex.split(line)[1:]
                    if args[0] == "train":
                        args.append("--no-progress")
                    assert cli_main(args) == 0, line
                    ran += 1
    return ran


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    os.makedirs(tmp_path / "data")
    shutil.copy(os.path.join(REPO, "data", "enwiki-sample-206pages.xml.bz2"), tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def train_sample_model():
    assert cli_main(["vectorize", "--input", "data/enwiki-sample-206pages.xml.bz2", "--output",
                     "wiki/", "--holdout-fraction", "0.1"]) == 0
    assert cli_main(["train", "--shards", "wiki/", "--output", "model/", "--topics", "8",
                     "--algorithm", "online-vb", "--passes", "2", "--minibatch", "32",
                     "--no-progress"]) == 0


@pytest.mark.slow
def test_library_walkthrough_runs(scratch, capsys):
    text = open(os.path.join(REPO, "docs", "library.md"), encoding="utf-8").read()
    blocks = cells(text)
    shell = [c for lang, c in blocks if lang == "" and "ldabeam vectorize" in c]
    assert shell, "the walk-through starts with the commands that make its model"
    ns = {}
    assert run_cells(blocks, ns) >= 10
    out = capsys.readouterr().out
    assert "LdaModel(online-vb, n_topics=8" in out
    assert os.path.exists("model-copy/vocab.tsv") and os.path.exists("sk-model/vocab.tsv")
    assert cli_main(["topics", "--model", "model/", "--top", "5"]) == 0
    assert cli_main(["topics", "--model", "sk-model/", "--top", "5"]) == 0


@pytest.mark.slow
def test_readme_python_and_beam_examples_run(scratch, capsys):
    train_sample_model()
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    ns = {}
    assert run_cells(cells(section(readme, "Python")), ns) == 2
    assert run_cells(cells(section(readme, "Beam")), ns) == 1
    out = capsys.readouterr().out
    assert "'doc_id': 'a'" in out and "'word_ids'" in out
    assert cli_main(["topics", "--model", "model/", "--top", "5"]) == 0
