"""The scikit-learn-compatible estimators: check_estimator, a CountVectorizer pipeline on real
20 Newsgroups posts, scikit-learn's parameter names and schedule, clear errors on bad input,
and import / get_params / fit without scikit-learn."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from lda_core.sklearn_api import OnlineLDA, SCVB0LDA

from helpers.news20 import train_texts as news20_texts

sklearn = pytest.importorskip("sklearn", reason="scikit-learn (optional extra) not installed")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def texts(news20_tar):
    return news20_texts(news20_tar)


@pytest.mark.parametrize("cls", [OnlineLDA, SCVB0LDA])
def test_check_estimator_passes(cls):
    from sklearn.utils.estimator_checks import check_estimator
    res = check_estimator(cls(n_components=3, max_iter=2, batch_size=16), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in res
              if r["status"] == "failed"]
    assert len(res) > 30 and not failed, failed


def test_parameter_names_mirror_scikit_learn():
    from sklearn.decomposition import LatentDirichletAllocation
    ours = set(OnlineLDA().get_params())
    theirs = set(LatentDirichletAllocation().get_params())
    shared = {"n_components", "doc_topic_prior", "topic_word_prior", "learning_decay",
              "learning_offset", "batch_size", "total_samples", "max_iter", "evaluate_every",
              "mean_change_tol", "max_doc_update_iter", "random_state", "learning_method"}
    assert shared <= ours and shared <= theirs
    assert theirs <= ours            # every scikit-learn parameter is accepted
    est = OnlineLDA().set_params(n_components=7, learning_decay=0.9)
    assert est.n_components == 7 and est.get_params()["learning_decay"] == 0.9
    with pytest.raises(ValueError, match="Invalid parameter"):
        est.set_params(no_such=1)


def test_countvectorizer_pipeline_drop_in(texts):
    from sklearn.decomposition import LatentDirichletAllocation
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.pipeline import Pipeline
    kw = dict(n_components=6, learning_method="online", max_iter=2, batch_size=64,
              random_state=0)
    for est in (OnlineLDA(**kw), LatentDirichletAllocation(**kw)):  # same code for both
        pipe = Pipeline([("counts", CountVectorizer(min_df=3, max_df=0.5,
                                                    stop_words="english")),
                         ("lda", est)])
        theta = pipe.fit_transform(texts)
        assert theta.shape == (len(texts), 6)
        np.testing.assert_allclose(theta.sum(axis=1), 1.0, atol=1e-6)
        lda = pipe.named_steps["lda"]
        V = len(pipe.named_steps["counts"].vocabulary_)
        assert lda.components_.shape == (6, V) and lda.n_features_in_ == V
        assert lda.exp_dirichlet_component_.shape == (6, V)
        assert np.isfinite(lda.perplexity(pipe.named_steps["counts"].transform(texts[:20])))
        np.testing.assert_allclose(pipe.transform(texts[:10]), theta[:10], atol=1e-4)
    ours = OnlineLDA(**kw).fit(pipe.named_steps["counts"].transform(texts))
    # scikit-learn's schedule: n_batch_iter_ = steps + 1, one step per batch_size rows per pass
    steps = 2 * int(np.ceil(len(texts) / 64))
    assert ours.n_batch_iter_ == steps + 1 and ours.n_iter_ == 2
    assert ours.algorithm_.tau0 == 11.0 and ours.algorithm_.kappa == 0.7


def test_sparse_and_dense_agree_and_partial_fit(texts):
    from sklearn.feature_extraction.text import CountVectorizer
    X = CountVectorizer(min_df=3, max_df=0.5).fit_transform(texts)
    a = OnlineLDA(n_components=5, max_iter=1, random_state=3).fit(X)
    b = OnlineLDA(n_components=5, max_iter=1, random_state=3).fit(X.toarray())
    np.testing.assert_array_equal(a.components_, b.components_)
    np.testing.assert_array_equal(a.transform(X[:7]), b.transform(X[:7].toarray()))
    # θ of a row does not depend on the other rows transformed with it
    np.testing.assert_array_equal(a.transform(X[3:4]), a.transform(X[:7])[3:4])
    p = OnlineLDA(n_components=5, batch_size=50, total_samples=X.shape[0], random_state=3)
    p.partial_fit(X[:100])
    assert p.n_batch_iter_ == 3
    p.partial_fit(X[100:])
    assert p.n_batch_iter_ == 1 + int(np.ceil(100 / 50)) + int(np.ceil((X.shape[0] - 100) / 50))
    assert p.score(X) < 0 and p.perplexity(X) > 1
    s = SCVB0LDA(n_components=5, max_iter=1, random_state=0).fit(X)
    assert s.transform(X[:4]).shape == (4, 5) and np.isfinite(s.score(X[:20]))


def test_bad_input_is_a_clear_error(texts):
    X = np.abs(np.random.RandomState(0).poisson(1.0, (30, 12))).astype(float)
    est = OnlineLDA(n_components=3, max_iter=1).fit(X)
    bad = X.copy()
    bad[2, 3] = -1
    with pytest.raises(ValueError, match="Negative values"):
        OnlineLDA(n_components=3).fit(bad)
    with pytest.raises(ValueError, match="Negative values"):
        est.transform(bad)
    with pytest.raises(ValueError, match="12 features"):
        est.transform(X[:, :10])
    with pytest.raises(ValueError, match="n_components"):
        OnlineLDA(n_components=0).fit(X)
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError):
        OnlineLDA().transform(X)
    # a components_ of another K than the fitted model
    est.components_ = est.components_[:2]
    with pytest.raises(ValueError, match="components_ has shape"):
        est.transform(X)


def test_works_without_scikit_learn():
    code = textwrap.dedent("""
        import sys
        sys.modules["sklearn"] = None            # import sklearn -> ImportError
        import numpy as np, scipy.sparse as sp
        from lda_core import sklearn_api as m
        assert not m.HAVE_SKLEARN
        X = sp.random(40, 25, density=0.3, random_state=0, format="csr") * 5
        X.data = np.ceil(X.data)
        est = m.OnlineLDA(n_components=4, max_iter=2, random_state=0)
        assert est.get_params()["n_components"] == 4
        est.set_params(batch_size=10)
        t = est.fit_transform(X)
        assert t.shape == (40, 4) and abs(t.sum() - 40) < 1e-6
        assert est.n_features_in_ == 25 and est.n_batch_iter_ == 9
        try:
            est.transform(X[:, :5])
        except ValueError as e:
            assert "25 features" in str(e)
        else:
            raise AssertionError("no error")
        try:
            est.fit(-X.toarray())
        except ValueError as e:
            assert "Negative values" in str(e)
        else:
            raise AssertionError("no error")
        print("OK", repr(est)[:40])
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("OK OnlineLDA(")


@pytest.mark.parametrize("cls", [OnlineLDA, SCVB0LDA])
def test_saved_batch_size_is_the_runs_minibatch_stored_once(cls, tmp_path):
    """``save`` records batch_size once, as the checkpoint's run minibatch size (not among
    the algorithm's parameters nor again among the estimator's); ``load`` gives it back, and
    a checkpoint an older version saved (batch_size among both) loads with it too."""
    from lda_core.storage.checkpoint import CheckpointStore
    X = np.random.default_rng(0).integers(0, 3, (12, 9))
    est = cls(n_components=2, max_iter=1, batch_size=5, random_state=0).fit(X)
    md = str(tmp_path / "m")
    est.save(md)
    store = CheckpointStore(md)
    st = store.latest()
    assert st.info["run"]["minibatch"] == 5
    assert "batch_size" not in st.params and "batch_size" not in st.info["sklearn"]["params"]
    back = cls.load(md)
    assert back.get_params() == est.get_params()
    np.testing.assert_array_equal(back.transform(X), est.transform(X))
    del st.info["run"]                      # the older layout of the same checkpoint
    st.params["batch_size"] = 5
    st.info["sklearn"]["params"]["batch_size"] = 5
    store.publish(st)
    assert cls.load(md).get_params() == est.get_params()
    del st.info["sklearn"]                  # as if `ldabeam train` had written it
    store.publish(st)
    assert cls.load(md).batch_size == 5


@pytest.mark.parametrize("cls,vectorizer_kw,through_pipeline", [
    (SCVB0LDA, dict(stop_words="english", ngram_range=(1, 2), min_df=2,
                    strip_accents="unicode"), False),
    (OnlineLDA, dict(min_df=2, max_df=0.5), True)])
def test_saved_with_its_vectorizer_raw_text_gives_the_estimators_counts_and_theta(
        cls, vectorizer_kw, through_pipeline, texts, tmp_path):
    """Fitted through scikit-learn's CountVectorizer (alone or in a Pipeline) and saved with
    ``vectorizer=``: the model directory holds the vectorizer's vocabulary and its analyzer as
    data, so raw 20 Newsgroups text through ``ldabeam.load`` and ``ldabeam infer --input``
    becomes exactly ``vectorizer.transform``'s counts and θ is ``est.transform``'s within
    1e-6."""
    import json
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.pipeline import Pipeline
    import ldabeam
    from pipelines.cli import main as cli_main
    from pipelines.infer import read_theta
    from pipelines.ingest.tokenize import Preprocessor
    docs = texts[:150]
    cv = CountVectorizer(**vectorizer_kw)
    est = cls(n_components=4, max_iter=2, batch_size=50, random_state=0)
    if through_pipeline:
        pipe = Pipeline([("counts", cv), ("lda", est)]).fit(docs)
        X = cv.transform(docs)
        est.save(str(tmp_path / "m"), vectorizer=pipe)
    else:
        X = cv.fit_transform(docs)
        est.fit(X).save(str(tmp_path / "m"), vectorizer=cv)
    md = str(tmp_path / "m")
    X.sort_indices()                     # word ids ascending, as the model's rows
    m = ldabeam.load(md)
    assert m.vocabulary == list(cv.get_feature_names_out())
    got = Preprocessor.from_model_dir(md).count_rows(docs, m.vocabulary)
    for i, (ids, counts) in enumerate(got.rows):
        row = X[i]
        assert list(ids) == list(row.indices) and list(counts) == list(row.data), i
    want = est.transform(X)
    np.testing.assert_allclose(m.transform(docs), want, rtol=0, atol=1e-6)
    if through_pipeline:
        return
    src = tmp_path / "docs.jsonl"
    keys = ["post-%d" % i for i in range(len(docs))]
    src.write_text("".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in zip(keys, docs)))
    out = str(tmp_path / "theta")
    assert cli_main(["infer", "--model", md, "--input", str(src), "--format", "jsonl",
                     "--output", out]) == 0
    t = read_theta(out)
    theta = dict(zip(t.column("doc_id").to_pylist(), t.column("theta").to_pylist()))
    rows = [i for i, k in enumerate(keys) if k in theta]   # infer writes no empty document
    assert len(rows) >= X.shape[0] - int((X.sum(axis=1) == 0).sum())
    np.testing.assert_allclose([theta[keys[i]] for i in rows], want[rows], rtol=0, atol=1e-6)


def test_a_vectorizer_holding_code_is_refused_saying_why(tmp_path):
    """A callable analyzer / tokenizer / preprocessor cannot be recorded as data: one line
    saying why; so are settings whose values are not the model tokenizer's word counts."""
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    docs = ["the cat sat on the mat", "a dog ate the cat food", "mats and dogs"]
    for bad, why in [(CountVectorizer(tokenizer=str.split, token_pattern=None),
                      r"records data, never code \(no pickle\)"),
                     (CountVectorizer(analyzer=lambda d: d.split()), "never code"),
                     (CountVectorizer(analyzer="char"), "analyzer='word'"),
                     (CountVectorizer(binary=True), "counts every occurrence"),
                     (CountVectorizer(token_pattern=r"(\w+)"), "capturing group"),
                     (TfidfVectorizer(), "tf-idf")]:
        X = bad.fit_transform(docs)
        est = OnlineLDA(n_components=2, max_iter=1, random_state=0).fit(np.rint(X.toarray()))
        with pytest.raises(ValueError, match=why) as e:
            est.save(str(tmp_path / "m"), vectorizer=bad)
        assert "\n" not in str(e.value)
