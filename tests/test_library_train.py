"""``ldabeam.train``: a model from texts, records, a table, a folder or a dataset in Python,
the same run as ``ldabeam vectorize`` + ``ldabeam train`` with the same options (issue 30,
item 7). Documents: 20 Newsgroups test posts (../shared/data)."""
import json
import tempfile

import numpy as np
import pyarrow as pa
import pytest

import ldabeam
from helpers.news20 import news20_posts
from lda_core.errors import UsageError
from pipelines.cli import main as cli

VEC = ["--no-below", "2", "--stopwords", "gensim", "--seed", "3"]
TRAIN = ["--topics", "4", "--algorithm", "online-vb", "--passes", "1", "--minibatch", "40",
         "--seed", "3", "--no-progress"]
OPTIONS = dict(no_below=2, stopwords="gensim", seed=3, topics=4, algorithm="online-vb",
               passes=1, minibatch=40, no_progress=True)


@pytest.fixture(autouse=True)
def temporary_directories_here(tmp_path, monkeypatch):
    """ldabeam.train's default model and dataset directories go under the test's tmp_path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture(scope="module")
def posts(news20_tar):
    return [p.record() for p in news20_posts(news20_tar, "test", every=40, limit=160)]


def test_train_from_texts_is_the_cli_run(posts, tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in posts))
    assert cli(["vectorize", "--input", str(src), "--output", str(tmp_path / "ds")] + VEC) == 0
    assert cli(["train", "--shards", str(tmp_path / "ds"), "--output", str(tmp_path / "cli")]
               + TRAIN) == 0
    ref = ldabeam.load(str(tmp_path / "cli"))
    m = ldabeam.train(posts, str(tmp_path / "py"), dataset=str(tmp_path / "py-ds"), **OPTIONS)
    assert isinstance(m, ldabeam.LdaModel) and m.n_topics == 4 and m.step == ref.step
    assert m.vocabulary == ref.vocabulary
    np.testing.assert_array_equal(m.topic_word(), ref.topic_word())
    # a table's rows are records too; plain texts get ids of their own
    t = ldabeam.train(pa.Table.from_pylist(posts), str(tmp_path / "table"), **OPTIONS)
    np.testing.assert_array_equal(t.topic_word(), ref.topic_word())
    texts = ldabeam.train([r["text"] for r in posts], **OPTIONS)
    assert texts.n_topics == 4 and texts.vocabulary == ref.vocabulary
    assert texts.model_dir.startswith(str(tmp_path / "ldabeam-model-"))
    # a dataset already vectorized: train only
    again = ldabeam.train(str(tmp_path / "ds"), str(tmp_path / "from-ds"),
                          **{k: v for k, v in OPTIONS.items()
                             if k not in ("no_below", "stopwords")})
    np.testing.assert_array_equal(again.topic_word(), ref.topic_word())


def test_train_from_a_folder_with_labels(posts, tmp_path):
    src = tmp_path / "folder"
    for i, r in enumerate(posts[:60]):
        d = src / ("a" if i % 2 else "b")
        d.mkdir(parents=True, exist_ok=True)
        (d / ("%d.txt" % i)).write_text(r["text"])
    m = ldabeam.train(str(src), str(tmp_path / "m"), topics=3, passes=1, no_below=2,
                      no_progress=True, exclude=["README*"])
    assert m.n_topics == 3 and m.n_words > 50


def test_options_are_checked_by_name(posts, tmp_path):
    with pytest.raises(UsageError, match="did you mean topics"):
        ldabeam.train(posts, str(tmp_path / "x"), topicz=4)
    with pytest.raises(UsageError, match="is a flag"):
        ldabeam.train(posts, str(tmp_path / "x"), no_progress="yes")
    with pytest.raises(UsageError, match="output="):
        ldabeam.train(posts, shards="x")
    # a command's own refusal is raised with its line
    with pytest.raises(UsageError, match="minibatch"):
        ldabeam.train(posts, str(tmp_path / "bad"), topics=4, minibatch=0, no_below=1)


def test_every_refusal_names_what_to_give(posts, tmp_path):
    """The other refusals of ``ldabeam.train``, each one line naming the fix, before anything
    is written: a value-taking option given True, ``update=``, data that is not documents, a
    document that is neither text nor a record, no documents, and options of `ldabeam
    vectorize` given with a dataset already vectorized."""
    from lda_core.errors import InputError
    from ldabeam.training import split_options
    out = str(tmp_path / "never")
    cases = [(dict(topics=True), UsageError, "takes a value"),
             (dict(update=True), UsageError, "ldabeam.load"),
             (dict(data=3), UsageError, "a list of texts or records"),
             (dict(data=[posts[0]["text"], 7]), UsageError, "document 1 is a int"),
             (dict(data=[]), InputError, "no documents")]
    for kw, error, words in cases:
        data = kw.pop("data", posts)
        with pytest.raises(error, match=words):
            ldabeam.train(data, out, **kw)
    assert not (tmp_path / "never").exists()
    # Beam's own arguments go to both commands as they are
    v_argv, t_argv = split_options({"beam_args": ["--runner=DirectRunner"], "topics": 3,
                                    "no_below": 2})
    assert v_argv == ["--runner=DirectRunner", "--no-below", "2"]
    assert t_argv == ["--runner=DirectRunner", "--topics", "3"]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in posts[:40]))
    assert cli(["vectorize", "--input", str(src), "--output", str(tmp_path / "ds"),
                "--no-below", "1"]) == 0
    with pytest.raises(UsageError, match="already vectorized.*no_below"):
        ldabeam.train(str(tmp_path / "ds"), out, topics=3, no_below=2)
    assert not (tmp_path / "never").exists()
