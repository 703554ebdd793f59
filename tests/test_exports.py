"""Exports from a real run on a 20 Newsgroups slice (vectorize -> train, K=8, one pass):
a gensim LdaModel (loadable, same top words, CoherenceModel runs on it) and pyLDAvis's prepared
data (checked for content); phi-npy keeps working."""
import json
import os

import numpy as np
import pytest

from pipelines.ingest import dataset
from pipelines.ingest import manifest as dataset_manifest
from pipelines.cli import main as cli_main

from helpers.models import NEWS20_K as K, news20_run



@pytest.fixture(scope="module")
def run20(tmp_path_factory, news20_tar):
    return news20_run(tmp_path_factory, news20_tar)


def _ours(model):
    from pipelines.runtime.model_dir import load_model
    return load_model(model)


def test_gensim_export_loads_with_same_top_words_and_coherence(run20, tmp_path):
    from gensim.models import CoherenceModel, LdaModel
    from lda_core.evaluation.topic_quality import top_words
    ds, model = run20
    path = str(tmp_path / "g" / "lda.gensim")
    assert cli_main(["export", "--model", model, "--format", "gensim", "--output", path]) == 0
    lda = LdaModel.load(path)
    algo, state, vocab = _ours(model)
    assert lda.num_topics == K and lda.num_terms == len(vocab) == state.n_words
    ours = top_words(algo.topic_word(), vocab.tokens, n=10)
    for k in range(K):
        theirs = lda.show_topic(k, topn=10)
        assert [w for w, _ in theirs] == [str(w) for w, _ in ours[k]]
        np.testing.assert_allclose([p for _, p in theirs], [p for _, p in ours[k]], rtol=1e-5)
    np.testing.assert_allclose(lda.get_topics(), algo.topic_word(), atol=1e-6)
    np.testing.assert_allclose(lda.alpha, algo.alpha)
    # gensim's own machinery runs on it: inference and coherence
    docs = dataset.read_docbatch(dataset.resolve_shards(ds))
    bow = [list(zip(*(x.tolist() for x in docs.doc(i)))) for i in range(200)]
    gamma, _ = lda.inference(bow[:20])
    ours_theta = algo.infer(docs.take(np.arange(20)))
    agree = np.mean(gamma.argmax(axis=1) == ours_theta.argmax(axis=1))
    assert agree >= 0.8, agree
    cm = CoherenceModel(model=lda, corpus=bow, dictionary=lda.id2word, coherence="u_mass",
                        topn=10)
    per_topic = cm.get_coherence_per_topic()
    assert len(per_topic) == K and all(np.isfinite(per_topic)) and max(per_topic) < 0


def test_gensim_dictionary_filter_extremes(run20, tmp_path, capsys):
    """The exported dictionary carries the document count its df refer to, so gensim's own
    ``filter_extremes`` keeps what it should: every word at the vectorize pruning's own
    threshold (no_above=0.5), exactly the words with df <= 0.2 * num_docs at 0.2 (with
    num_docs = 0 both deleted every word)."""
    from gensim.models import LdaModel
    ds, model = run20
    path = str(tmp_path / "g" / "lda.gensim")
    assert cli_main(["export", "--model", model, "--format", "gensim", "--output", path]) == 0
    manifest = dataset_manifest.read_manifest(ds)
    n_docs = manifest["counts"]["train_documents"] + manifest["counts"]["heldout_documents"]
    assert "over %d documents" % n_docs in capsys.readouterr().out
    d = LdaModel.load(path).id2word
    _, _, vocab = _ours(model)
    assert d.num_docs == n_docs == manifest["vocabulary"]["num_docs"]
    assert d.num_pos == int(vocab.cf.sum()) and d.num_nnz == int(vocab.df.sum())
    d.filter_extremes(no_below=1, no_above=0.5, keep_n=None)
    assert len(d) == len(vocab)
    d = LdaModel.load(path).id2word
    d.filter_extremes(no_below=1, no_above=0.2, keep_n=None)
    expect = {t for t, f in zip(vocab.tokens, vocab.df) if f <= int(0.2 * n_docs)}
    assert 0 < len(expect) < len(vocab) and set(d.token2id) == expect


def test_gensim_dictionary_counts_without_manifest(run20, tmp_path, capsys):
    """Shards with no manifest (a folder of shards, read with --unverified): the dictionary's
    df, cf and num_docs are counted over them, consistently; without --unverified they are
    refused like every reader refuses them."""
    import shutil
    from gensim.models import LdaModel
    ds, model = run20
    bare = tmp_path / "bare"
    bare.mkdir()
    files = dataset.resolve_shards(ds)
    for f in files:
        shutil.copy(f, str(bare))
    path = str(tmp_path / "g" / "lda.gensim")
    assert cli_main(["export", "--model", model, "--format", "gensim", "--output", path,
                     "--shards", str(bare)]) == 2
    assert "--unverified" in capsys.readouterr().err
    assert cli_main(["export", "--model", model, "--format", "gensim", "--output", path,
                     "--shards", str(bare), "--unverified"]) == 0
    assert "counted over the %d shard files" % len(files) in capsys.readouterr().out
    docs = dataset.read_docbatch(files)
    d = LdaModel.load(path).id2word
    assert d.num_docs == docs.n_docs
    df = np.bincount(docs.word_ids, minlength=len(d))
    assert [d.dfs.get(i, 0) for i in range(len(d))] == df.tolist()
    assert d.num_pos == docs.n_tokens


def test_pyldavis_prepared_data_content(run20, tmp_path, capsys):
    from pipelines.reports.exports import load_pyldavis
    ds, model = run20
    out = str(tmp_path / "vis")
    assert cli_main(["export", "--model", model, "--format", "pyldavis", "--output", out,
                     "--max-docs", "150"]) == 0       # shards: the run log's
    assert "150 documents" in capsys.readouterr().out
    d = load_pyldavis(out)
    algo, state, vocab = _ours(model)
    docs = dataset.read_docbatch(dataset.resolve_shards(ds)).take(np.arange(150))
    assert set(d) == {"topic_term_dists", "doc_topic_dists", "doc_lengths", "vocab",
                      "term_frequency"}
    np.testing.assert_allclose(d["topic_term_dists"], algo.topic_word())
    np.testing.assert_allclose(d["topic_term_dists"].sum(axis=1), 1.0)
    assert d["doc_topic_dists"].shape == (150, K)
    np.testing.assert_allclose(d["doc_topic_dists"].sum(axis=1), 1.0)
    np.testing.assert_allclose(d["doc_topic_dists"], algo.infer(docs), atol=1e-12)
    np.testing.assert_array_equal(d["doc_lengths"], docs.doc_lengths)
    assert d["vocab"] == vocab.tokens
    tf = np.asarray(docs.to_csr(len(vocab)).sum(axis=0)).ravel()
    np.testing.assert_array_equal(d["term_frequency"], tf)
    # what the optional HTML page gets: only terms that occur, rows renormalised
    from pipelines.reports.exports import _seen_terms
    seen = _seen_terms(d)
    assert 0 < len(seen["vocab"]) == np.count_nonzero(tf) < len(vocab)
    assert seen["term_frequency"].min() > 0
    np.testing.assert_allclose(seen["topic_term_dists"].sum(axis=1), 1.0)
    with open(os.path.join(out, "pyldavis.json")) as f:
        meta = json.load(f)
    assert meta["doc_ids"] == list(docs.doc_ids) and meta["info"]["step"] == state.step
    try:
        import pyLDAvis  # noqa: F401
    except ImportError:       # without the optional extra: the data only, no page
        assert not os.path.exists(os.path.join(out, "pyldavis.html"))
    else:                     # the page's content: test_pyldavis_html_page
        assert os.path.exists(os.path.join(out, "pyldavis.html"))


def _ldavis_data(page):
    """The JSON object pyLDAvis.save_html embeds in its page (``var ldavis_el..._data =``)."""
    import re
    m = re.search(r"var (ldavis_el\w+)_data = (\{.*?\});\n", page, re.S)
    assert m, "no LDAvis data in the page"
    return json.loads(m.group(2))


def test_pyldavis_html_page(run20, tmp_path):
    """With the optional extra (pip install 'ldabeam[vis]'): the interactive page pyLDAvis
    makes from the exported data shows our model -- K topics in our order, each topic's
    share of the tokens from θ and the document lengths, each topic's term probabilities
    (pyLDAvis's logprob, rounded to 4 decimals) those of our φ restricted to the terms that
    occur, and only such terms."""
    pytest.importorskip("pyLDAvis", reason="pyLDAvis is not installed (optional extra: pip "
                                           "install 'ldabeam[vis]'); the HTML branch of "
                                           "export --format pyldavis is not exercised")
    from pipelines.reports.exports import _seen_terms, load_pyldavis
    ds, model = run20
    out = str(tmp_path / "vis")
    assert cli_main(["export", "--model", model, "--format", "pyldavis", "--output", out,
                     "--max-docs", "150"]) == 0
    page = open(os.path.join(out, "pyldavis.html"), encoding="utf-8").read()
    assert "<script" in page
    data = _ldavis_data(page)
    seen = _seen_terms(load_pyldavis(out))
    phi, vocab = seen["topic_term_dists"], seen["vocab"]
    col = {w: i for i, w in enumerate(vocab)}
    assert data["topic.order"] == list(range(1, K + 1))           # sort_topics=False
    assert data["mdsDat"]["topics"] == list(range(1, K + 1))
    tokens = (seen["doc_topic_dists"] * seen["doc_lengths"][:, None]).sum(axis=0)
    np.testing.assert_allclose(data["mdsDat"]["Freq"], 100 * tokens / tokens.sum(), rtol=1e-6)
    tinfo = data["tinfo"]
    assert set(tinfo["Term"]) <= set(vocab) and set(data["token.table"]["Term"]) <= set(vocab)
    checked = 0
    for k in range(K):
        rows = [i for i, c in enumerate(tinfo["Category"]) if c == "Topic%d" % (k + 1)]
        assert rows, k
        for i in rows:
            w = tinfo["Term"][i]
            np.testing.assert_allclose(np.exp(tinfo["logprob"][i]), phi[k, col[w]],
                                       rtol=2e-4, atol=1e-12)
            checked += 1
        # the topic's most probable term is listed (ranked by relevance at lambda = 1 too)
        best = vocab[int(np.argmax(phi[k]))]
        assert best in [tinfo["Term"][i] for i in rows], (k, best)
    assert checked >= K * 10


CHROMIUM = "/usr/bin/chromium"


def test_pyldavis_page_works_offline(run20, tmp_path):
    """The interactive page carries d3, LDAvis's script and its stylesheet itself: nothing is
    fetched, and headless Chromium with every network request refused draws the
    visualisation (its intertopic distance map)."""
    pytest.importorskip("pyLDAvis", reason="pyLDAvis is not installed (optional extra: pip "
                                           "install 'ldabeam[vis]'); no page is written")
    import re
    import subprocess
    ds, model = run20
    out = str(tmp_path / "vis")
    assert cli_main(["export", "--model", model, "--format", "pyldavis", "--output", out,
                     "--max-docs", "150"]) == 0
    path = os.path.join(out, "pyldavis.html")
    page = open(path, encoding="utf-8").read()
    assert not re.search(r"<script[^>]*\bsrc=", page) and "<link" not in page
    assert "cdn.jsdelivr.net" not in page and "d3js.org/d3" not in page
    if not os.path.exists(CHROMIUM):
        pytest.skip("headless Chromium (Debian package chromium) is not installed at "
                    "/usr/bin/chromium; the page's content was checked, its drawing is not")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
           "--user-data-dir=%s" % (tmp_path / "profile"), "--window-size=1300,900",
           "--virtual-time-budget=5000", "--dump-dom", "file://" + path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    dom = r.stdout
    assert "<svg" in dom, r.stderr[-2000:]
    assert "Intertopic Distance Map" in dom
    assert len(re.findall(r"<circle", dom)) >= K


def test_phi_npy_still_works_and_bad_inputs(run20, tmp_path, capsys):
    ds, model = run20
    p = str(tmp_path / "phi.npy")
    assert cli_main(["export", "--model", model, "--format", "phi-npy", "--output", p]) == 0
    algo, _, _ = _ours(model)
    np.testing.assert_allclose(np.load(p), algo.topic_word())
    # pyldavis on shards of another vocabulary: one clear line, exit 2
    bad = tmp_path / "bad"
    bad.mkdir()
    docs = dataset.read_docbatch(dataset.resolve_shards(ds)).take(np.arange(5))
    dataset.write_shard(str(bad / "part-00000-of-00001.parquet"),
                        dataset.docbatch_to_table(docs), "f" * 64)
    capsys.readouterr()
    assert cli_main(["export", "--model", model, "--format", "pyldavis", "--output",
                     str(tmp_path / "vis"), "--shards", str(bad),
                     "--unverified"]) == 2
    assert "nor one it grew from" in capsys.readouterr().err
    # pyldavis writes a directory: an existing file as --output is a clear error
    assert cli_main(["export", "--model", model, "--format", "pyldavis", "--output", p]) == 2
    assert "is not a directory" in capsys.readouterr().err
