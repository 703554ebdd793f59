"""ldabeam topics (weights, CSV/JSON, labels) and ldabeam report (one self-contained HTML page)
from a real small run on 20 Newsgroups: the plots are real PNGs, the numbers shown are the run
log's, the evolution table follows the kept checkpoints, and headless Chromium renders it."""
import base64
import csv
import html
import io
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import read_run_log
from pipelines.cli import main as cli_main
from helpers.models import NEWS20_K as K, news20_run

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def run20(tmp_path_factory, news20_tar):
    ds, model = news20_run(tmp_path_factory, news20_tar)
    return ds, model


@pytest.fixture(scope="module")
def labelled(run20, tmp_path_factory):
    """A copy of the run's model with two labelled topics (the shared run stays unlabelled)."""
    ds, model = run20
    m = str(tmp_path_factory.mktemp("report") / "model")
    shutil.copytree(model, m)
    assert cli_main(["topics", "--model", m, "--label", "0", "Topic <zero> & co",
                     "--label", "3", "sport?"]) == 0
    return ds, m


def _model(m):
    from pipelines.runtime.model_dir import load_model
    return load_model(m)


def test_topics_formats_and_labels(labelled, tmp_path, capsys):
    ds, m = labelled
    algo, state, vocab = _model(m)
    phi = algo.topic_word()
    with open(os.path.join(m, "topic_labels.json")) as f:
        assert json.load(f) == {"0": "Topic <zero> & co", "3": "sport?"}
    capsys.readouterr()
    assert cli_main(["topics", "--model", m, "--top", "4", "--format", "json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert [t["label"] for t in js][:4] == ["Topic <zero> & co", "", "", "sport?"]
    for t in js:
        order = np.argsort(-phi[t["topic"]], kind="stable")[:4]
        assert t["words"] == [vocab.tokens[i] for i in order]
        np.testing.assert_allclose(t["weights"], phi[t["topic"], order])
    out = str(tmp_path / "t.csv")
    assert cli_main(["topics", "--model", m, "--top", "3", "--format", "csv",
                     "--output", out]) == 0
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 3 * K and rows[0]["label"] == "Topic <zero> & co"
    assert float(rows[0]["weight"]) == pytest.approx(phi[0].max(), rel=1e-5)
    capsys.readouterr()
    assert cli_main(["topics", "--model", m, "--top", "2"]) == 0
    table = capsys.readouterr().out.strip().split("\n")
    assert len(table) == 1 + K and "Topic <zero> & co" in table[1] and "(0." in table[1]
    # bad label: one clear line, nothing changed
    assert cli_main(["topics", "--model", m, "--label", str(K), "x"]) == 2
    assert "outside the model's topics" in capsys.readouterr().err
    with open(os.path.join(m, "topic_labels.json")) as f:
        assert len(json.load(f)) == 2


def _data_uris(page):
    return re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)


@pytest.fixture(scope="module")
def report(labelled, tmp_path_factory):
    ds, m = labelled
    out = str(tmp_path_factory.mktemp("report") / "report.html")
    assert cli_main(["report", "--model", m, "--output", out, "--max-docs", "400"]) == 0
    with open(out, encoding="utf-8") as f:
        page = f.read()
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)'
                                r'</script>', page, re.S).group(1))
    return ds, m, out, page, data


def test_report_is_self_contained_with_real_plots(report):
    import matplotlib.image as mpimg
    _, _, _, page, _ = report
    # nothing to fetch: every src is a data URI, no external stylesheet/script
    srcs = re.findall(r'\bsrc="([^"]*)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "<link" not in page and not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r'(href|src)="(https?:)?//', page)
    pngs = _data_uris(page)
    assert len(pngs) == 3          # held-out curve, topic size/coherence, topic health
    for b in pngs:
        raw = base64.b64decode(b)
        assert raw[:8] == b"\x89PNG\r\n\x1a\n"
        img = mpimg.imread(io.BytesIO(raw), format="png")
        assert img.shape[0] > 150 and img.shape[1] > 300
        assert img[..., :3].std() > 0.05           # not a blank canvas


def test_report_topic_health_and_labels(report):
    from lda_core.evaluation.topic_quality import topic_health
    from pipelines.ingest.doc_sample import sample_documents
    from pipelines.ingest import dataset
    ds, m, _, page, data = report
    h, K = data["health"], len(data["topics"])
    algo, state, _ = _model(m)
    docs = sample_documents(dataset.resolve_shards(data["sample"]["shards"]), max_docs=400)
    assert docs.n_docs == data["sample"]["documents"]        # the report's sample
    ref = topic_health(algo.topic_word(), docs)
    assert h["topic_shares"] == ref["topic_shares"] and h["npmi"] == ref["npmi"]
    assert h["dead"] == [k for k in range(K) if h["topic_shares"][k] < 0.1 / K]
    assert h["junk"] == [k for k in range(K) if h["npmi_per_topic"][k] < 0]
    assert 'id="health"' in page and 'id="plot-health"' in page
    # the posts carry their newsgroup as label: a label x topic table with NMI
    lab = h["labels"]
    assert len(lab["names"]) > 1 and sum(map(sum, lab["counts"])) == docs.n_docs
    assert 0 <= lab["nmi"] <= 1 and 'id="labels"' in page


def test_report_numbers_are_the_run_logs(report):
    ds, m, _, page, data = report
    recs = read_run_log(os.path.join(m, "run_log.jsonl"))
    evald = [r for r in recs if r["event"] == "step" and r.get("metrics")]
    assert len(evald) >= 3
    assert data["heldout"]["docs_seen"] == [r["docs_seen"] for r in evald]
    assert data["heldout"]["completion_ll_per_token"] == \
        [r["metrics"]["completion_ll_per_token"] for r in evald]
    # the table shows every evaluated point, rounded to 4 decimals
    rows = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td><td>([-\d.]+)</td>", page)
    assert [(int(s), int(d)) for s, d, _ in rows] == [(r["step"], r["docs_seen"])
                                                      for r in evald]
    assert [float(v) for _, _, v in rows] == [
        round(r["metrics"]["completion_ll_per_token"], 4) for r in evald]
    end = [r for r in recs if r["event"] == "end"][-1]
    shown = re.search(r'id="sum-6">([^<]*)<', page).group(1)
    assert shown == "%.4f" % end["metrics"]["completion_ll_per_token"]
    assert re.search(r'id="sum-4">(\d+)<', page).group(1) == str(end["docs_seen"])


def test_report_topics_evolution_and_examples(report):
    from lda_core.evaluation.topic_quality import umass_coherence
    from pipelines.ingest import dataset
    ds, m, _, page, data = report
    algo, state, vocab = _model(m)
    phi = algo.topic_word()
    topics = data["topics"]
    assert len(topics) == K
    assert sum(t["size"] for t in topics) == pytest.approx(1.0, abs=1e-6)
    from pipelines.ingest.doc_sample import sample_documents
    docs = sample_documents(dataset.resolve_shards(ds), max_docs=400)    # the report's sample
    coh = umass_coherence(phi, docs, topn=10)["per_topic"]
    np.testing.assert_allclose([t["coherence"] for t in topics], coh)
    assert html.escape("Topic <zero> & co") in page and "Topic <zero>" not in page
    for t in topics:
        assert t["words"][0] == vocab.tokens[int(np.argmax(phi[t["topic"]]))]
        ex = t["examples"]
        assert len(ex) <= 3 and all(x["title"] and x["weight"] >= 0.01 for x in ex)
        assert [x["weight"] for x in ex] == sorted((x["weight"] for x in ex), reverse=True)
        for x in ex:
            assert html.escape(x["title"]) in page
    ev = data["evolution"]
    kept = [c.step for c in CheckpointStore(m).list_checkpoints()]
    assert len(kept) >= 3 and [c["step"] for c in ev["checkpoints"]] == kept
    largest = int(np.argmax([t["size"] for t in topics]))
    assert len(topics[largest]["examples"]) == 3
    assert ev["topics"][0] == largest
    last = ev["checkpoints"][-1]["words"][str(largest)]      # JSON keys are strings
    assert last == topics[largest]["words"][:len(last)]
    assert page.count('<table class="evo"') == 3


@pytest.mark.skipif(not os.path.exists(CHROMIUM),
                    reason="headless Chromium (Debian package chromium) is not installed at "
                           "/usr/bin/chromium; the screenshot test needs it")
def test_report_renders_in_headless_chromium(report, tmp_path):
    import matplotlib.image as mpimg
    _, _, out, _, _ = report
    shot = str(tmp_path / "report.png")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--user-data-dir=%s" % (tmp_path / "profile"),
           "--window-size=1200,2400", "--screenshot=%s" % shot, "file://" + out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert os.path.exists(shot), r.stderr[-2000:]
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2400, 1200)
    # the page drew something: dark text and the plots' colours on a white background
    rgb = img[..., :3]
    assert (rgb.mean(axis=2) < 0.3).mean() > 0.005
    assert rgb.std() > 0.05
    keep = os.environ.get("LDABEAM_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_report_custom_template_and_errors(labelled, tmp_path, capsys):
    ds, m = labelled
    tpl = tmp_path / "t.html"
    tpl.write_text("<html><h1>$title</h1><table>$summary_rows</table>$heldout_plot</html>")
    out = str(tmp_path / "r.html")
    assert cli_main(["report", "--model", m, "--output", out, "--template", str(tpl),
                     "--max-docs", "50"]) == 0
    page = open(out).read()
    assert page.startswith("<html><h1>ldabeam report: model</h1>") and len(_data_uris(page)) == 1
    tpl.write_text("<html>$no_such_field</html>")
    capsys.readouterr()
    # the page of the first run is replaced only with --overwrite (the file output rules)
    assert cli_main(["report", "--model", m, "--output", out, "--template", str(tpl),
                     "--overwrite"]) == 2
    assert "unknown placeholder 'no_such_field'" in capsys.readouterr().err
    assert cli_main(["report", "--model", m, "--output", out, "--topic", "99",
                     "--overwrite"]) == 2
    assert "outside the model's topics" in capsys.readouterr().err


def _install_requires():
    """setup.py's install_requires, read by running setup.py with setuptools.setup captured."""
    import runpy
    import setuptools
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    seen = {}
    real, cwd = setuptools.setup, os.getcwd()
    setuptools.setup = lambda **kw: seen.update(kw)
    try:
        os.chdir(repo)
        runpy.run_path(os.path.join(repo, "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = real
        os.chdir(cwd)
    return {re.split(r"[<>=!\[ ;]", r, 1)[0].lower().replace("_", "-")
            for r in seen["install_requires"]}


def test_report_needs_only_the_base_install():
    """`ldabeam report` works after a plain `pip install`: every third-party module the report
    code imports (at any depth of its functions) comes from a package in install_requires."""
    import ast
    import sys
    from importlib.metadata import packages_distributions
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dists = packages_distributions()
    base = _install_requires()
    files = [os.path.join(repo, "pipelines", "reports", "report.py"),
             os.path.join(repo, "pipelines", "commands", "report.py")]
    needed = set()
    for path in files:
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     and not node.level else [])
            for n in names:
                top = n.split(".")[0]
                if top in sys.stdlib_module_names or top in ("lda_core", "pipelines",
                                                             "__future__"):
                    continue
                needed.add(top)
    assert "matplotlib" in needed
    for top in sorted(needed):
        names = {d.lower().replace("_", "-") for d in dists.get(top, [top])}
        assert names & base, "the report imports %s (%s), which install_requires lacks" % (
            top, ", ".join(sorted(names)))


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory, news20_tar):
    """A model trained on 20 Newsgroups posts read as a folder of files: documents with no
    title whose ids are absolute paths (as a user's folder gives them), and K = 40 topics
    (wide tables)."""
    import tarfile
    base = tmp_path_factory.mktemp("folder_run")
    posts = base / "posts"
    n = {}
    with tarfile.open(news20_tar, "r:gz") as t:
        for m in t:
            parts = m.name.split("/")
            if not m.isfile() or len(parts) != 3 or not parts[0].endswith("train"):
                continue
            if n.get(parts[1], 0) >= 15:
                continue
            n[parts[1]] = n.get(parts[1], 0) + 1
            d = posts / parts[1]
            d.mkdir(parents=True, exist_ok=True)
            (d / parts[2]).write_bytes(t.extractfile(m).read())
    ds, model = str(base / "ds"), str(base / "model")
    assert cli_main(["vectorize", "--input", str(posts), "--output", ds, "--strip-headers",
                     "--holdout-fraction", "0.1", "--no-below", "2"]) == 0
    assert cli_main(["train", "--shards", ds, "--output", model, "--topics", "40",
                     "--algorithm", "online-vb", "--minibatch", "50", "--passes", "2",
                     "--eval-every", "3", "--no-progress"]) == 0
    out = str(base / "report.html")
    assert cli_main(["report", "--model", model, "--output", out, "--max-docs", "300"]) == 0
    page = open(out, encoding="utf-8").read()
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)'
                                r'</script>', page, re.S).group(1))
    return str(posts), ds, model, out, page, data


def _visible_text(page):
    """The page's text as a reader sees it (no tags, attributes, scripts or styles)."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_report_examples_without_titles_show_short_ids_and_words(folder_run):
    """Documents with no title (files of a folder): each example shows its id once, without
    the folder every id shares, and its words through which the topic claims it."""
    from pipelines.ingest import dataset
    posts, ds, model, _, page, data = folder_run
    text = _visible_text(page)
    assert posts not in text       # no document id shown with the folder all ids share
    docs = dataset.read_docbatch(dataset.resolve_shards(ds))
    words_of = {docs.doc_ids[i]: docs.doc(i)[0] for i in range(docs.n_docs)}
    _, _, vocab = _model(model)
    shown = 0
    for t in data["topics"]:
        for x in t["examples"]:
            assert not x["title"]
            assert x["doc_id"].startswith(posts) and x["doc_id"].endswith(x["short_id"])
            assert x["short_id"].count("/") == 1            # group/post
            assert text.count(x["short_id"]) >= 1
            ids = set(words_of[x["doc_id"]].tolist())
            assert x["words"] and all(vocab.index[w] in ids for w in x["words"])
            assert " ".join(x["words"]) in text
            shown += 1
    assert shown >= 20


def test_report_heldout_note_reads_the_run(report):
    """The sentence under the held-out curve is made from the run's own numbers."""
    _, m, _, page, data = report
    recs = read_run_log(os.path.join(m, "run_log.jsonl"))
    evald = [r for r in recs if r["event"] == "step" and r.get("metrics")]
    note = data["heldout_note"]
    assert note[0].startswith("The first point is measured after step %d (%d documents"
                              % (evald[0]["step"], evald[0]["docs_seen"]))
    ys = [r["metrics"]["completion_ll_per_token"] for r in evald]
    falls = any(b < a for a, b in zip(ys, ys[1:]))
    assert falls == any(s.startswith("The score falls between") for s in note)
    for s in note:
        assert html.escape(s, quote=True) in page


@pytest.mark.skipif(not os.path.exists(CHROMIUM),
                    reason="headless Chromium (Debian package chromium) is not installed at "
                           "/usr/bin/chromium; the layout test needs it")
def test_report_wide_tables_scroll_inside_the_page(folder_run, tmp_path):
    """With K = 40 the labels x topics table is wider than a 1000-pixel window: the page itself
    stays as wide as the window (the table scrolls in its own box)."""
    _, _, _, out, page, data = folder_run
    assert len(data["health"]["labels"]["names"]) > 1
    probe = str(tmp_path / "probe.html")
    with open(probe, "w", encoding="utf-8") as f:     # a copy that reports its own width
        f.write(page.replace("</body>", "<script>document.title = 'W=' + "
                             "document.documentElement.scrollWidth + ' T=' + "
                             "document.getElementById('labels').scrollWidth;</script></body>"))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--user-data-dir=%s" % (tmp_path / "profile"), "--window-size=1000,800",
           "--dump-dom", "file://" + probe]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    m = re.search(r"<title>W=(\d+) T=(\d+)</title>", r.stdout)
    assert m, r.stderr[-2000:]
    page_w, table_w = int(m.group(1)), int(m.group(2))
    assert table_w > 1000          # the table is wider than the window ...
    assert page_w <= 1000          # ... and the page is not
