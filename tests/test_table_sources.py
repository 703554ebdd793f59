"""Table inputs (CSV, TSV, Parquet, Arrow / Hugging Face save_to_disk, BigQuery), the encoding
default, the manifest's input listing, dataset verification before training, and raw text
straight into ``ldabeam infer`` -- on real text: 20 Newsgroups posts written as tables by the
tests themselves."""
import csv
import gzip
import json
import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers.news20 import news20_posts

from pipelines.ingest import bigquery_source, dataset
from pipelines.ingest import manifest
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest import text_sources as ts
from pipelines.ingest import input_files
from pipelines.ingest import vectorize as vz
from pipelines.cli import main as cli_main
from pipelines.infer import InferOptions, infer, read_theta

IN_PROCESS = ["--runner=FnApiRunner"]
N_POSTS = 240


@pytest.fixture(scope="module")
def posts(news20_tar):
    """N_POSTS posts of 20 Newsgroups (train split, the first 12 of each group): (id, group,
    subject, body)."""
    out = []
    for p in news20_posts(news20_tar, "train", per_group=N_POSTS // 20, limit=N_POSTS):
        head, _, body = p.text.replace("\r\n", "\n").partition("\n\n")
        subject = next((l[len("Subject:"):].strip() for l in head.split("\n")
                        if l.startswith("Subject:")), "")
        out.append(("%s/%s" % (p.group, p.name.split("/")[-1]), p.group, subject, body))
    return out


def _write_jsonl(path, posts):
    with open(path, "w", encoding="utf-8") as f:
        for pid, group, subject, body in posts:
            f.write(json.dumps({"id": pid, "label": group, "title": subject,
                                "text": subject + "\n" + body}) + "\n")


def _write_csv(path, posts, delimiter=",", encoding="utf-8"):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding=encoding, newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(["id", "label", "title", "body"])
        for row in posts:
            w.writerow([row[0], row[1], row[2], row[3]])


def _table(posts):
    return pa.table({"id": [p[0] for p in posts], "label": [p[1] for p in posts],
                     "title": [p[2] for p in posts], "body": [p[3] for p in posts]})


def _write_hf_save_to_disk(folder, table):
    """The layout of ``datasets.Dataset.save_to_disk`` (one shard), written by pyarrow alone:
    an Arrow IPC *stream* file, dataset_info.json and state.json."""
    os.makedirs(folder)
    with pa.OSFile(os.path.join(folder, "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as w:
            for b in table.to_batches(max_chunksize=100):
                w.write_batch(b)
    features = {c: {"dtype": "string", "_type": "Value"} for c in table.column_names}
    with open(os.path.join(folder, "dataset_info.json"), "w") as f:
        json.dump({"citation": "", "description": "", "features": features}, f)
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({"_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                   "_fingerprint": "0123456789abcdef", "_format_columns": None,
                   "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
                   "_split": None}, f)


def _rows(out):
    res = {}
    for f in dataset.resolve_shards(str(out)):
        for r in pq.read_table(f).to_pylist():
            res[r["doc_id"]] = (r["title"], r["label"], r["word_ids"], r["counts"])
    return res


def _word_rows(out):
    """{doc_id: (title, label, {word: count})}: the rows independent of the vocabulary's id
    order."""
    tokens = Vocabulary.read(str(out)).tokens
    return {d: (t, l, {tokens[w]: c for w, c in zip(ws, cs)})
            for d, (t, l, ws, cs) in _rows(out).items()}


def _vectorize(inputs, out, **kw):
    kw.setdefault("no_below", 2)
    return vz.vectorize(vz.VectorizeOptions(inputs=[str(i) for i in inputs], output=str(out),
                                            **kw), IN_PROCESS)


@pytest.fixture(scope="module")
def reference(posts, tmp_path_factory):
    """The posts as JSON lines (an existing reader): the dataset every table must reproduce."""
    d = tmp_path_factory.mktemp("ref")
    _write_jsonl(d / "posts.jsonl", posts)
    m = _vectorize([d / "posts.jsonl"], d / "ds")
    m["_dir"] = d / "ds"
    return m, _rows(d / "ds")


def test_csv_tsv_parquet_arrow_give_the_dataset_of_the_same_posts(posts, reference, tmp_path):
    ref_manifest, ref_rows = reference
    assert len(ref_rows) == N_POSTS
    # title + body joined (the JSON lines hold "subject\nbody" as their text)
    cols = dict(text_field="title,body")
    _write_csv(tmp_path / "posts.csv.gz", posts)
    _write_csv(tmp_path / "posts.tsv", posts, delimiter="\t")
    table = _table(posts)
    pq.write_table(table.slice(0, 100), tmp_path / "part-a.parquet", row_group_size=30)
    pq.write_table(table.slice(100), tmp_path / "part-b.parquet", row_group_size=30)
    _write_hf_save_to_disk(str(tmp_path / "hf"), table)
    assert any("\n" in p[3] for p in posts)          # CSV fields with embedded newlines
    runs = {"csv": [tmp_path / "posts.csv.gz"], "tsv": [tmp_path / "posts.tsv"],
            "parquet": [tmp_path / "part-*.parquet"], "arrow": [tmp_path / "hf"]}
    for fmt, inputs in runs.items():
        m = _vectorize(inputs, tmp_path / ("ds-" + fmt), **cols)
        assert {i["format"] for i in m["inputs"]} == {fmt}, fmt
        assert m["vocabulary"]["hash"] == ref_manifest["vocabulary"]["hash"], fmt
        assert _rows(tmp_path / ("ds-" + fmt)) == ref_rows, fmt
        assert m["counts"]["dead_letters"] == 0 and m["counts"]["documents_read"] == N_POSTS
    # the Hugging Face folder is read through its .arrow file only
    assert [os.path.basename(p) for p, _ in input_files.expand_inputs([str(tmp_path / "hf")])] == \
        ["data-00000-of-00001.arrow"]


def test_partitioned_parquet_folder_gives_the_partition_as_a_column(posts, tmp_path):
    table = _table(posts).drop(["label"])
    groups = sorted({p[1] for p in posts})[:3]
    for g in groups:
        keep = [i for i, p in enumerate(posts) if p[1] == g]
        d = tmp_path / "by_group" / ("group=%s" % g)
        d.mkdir(parents=True)
        pq.write_table(table.take(keep), d / "part-00000.snappy.parquet")
    (tmp_path / "by_group" / "_SUCCESS").write_text("")
    m = _vectorize([tmp_path / "by_group"], tmp_path / "ds", text_field="body",
                   label_field="group", no_below=1)
    assert len(m["inputs"]) == 3
    labels = {r[1] for r in _rows(tmp_path / "ds").values()}
    assert labels == set(groups)


def test_bad_rows_are_dead_letters_and_a_missing_column_fails_at_once(posts, tmp_path):
    p = tmp_path / "bad.csv"
    good = posts[:3]
    with open(p, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "body"])
        w.writerow([good[0][0], good[0][3]])
        f.write("short-row\n")                                # no body field
        w.writerow([good[1][0], good[1][3]])
        w.writerow(["blank", "   "])
        w.writerow([good[2][0], good[2][3]])
    docs = list(ts.read_documents(str(p), "csv", text_field="body"))
    dead = [d for d in docs if isinstance(d, input_files.DeadLetter)]
    # the blank row is an empty document (counted as empty by the vectorize), not an error
    assert [d.doc_id for d in docs if isinstance(d, input_files.RawDocument)] == \
        [good[0][0], good[1][0], "blank", good[2][0]]
    assert [(d.source, d.position.split(" (")[0]) for d in dead] == [(str(p), "row 2")]
    assert "column 'body' missing" in dead[0].error
    # Parquet: a null text is a dead letter naming file and row; good rows around it kept
    t = pa.table({"id": ["a", "b", "c"], "text": [posts[0][3], None, posts[1][3]]})
    pq.write_table(t, tmp_path / "t.parquet")
    docs = list(ts.read_documents(str(tmp_path / "t.parquet"), "parquet"))
    assert [type(d).__name__ for d in docs] == ["RawDocument", "DeadLetter", "RawDocument"]
    assert docs[1].position == "row 2" and docs[1].source.endswith("t.parquet")
    # a column that is not there: the run fails before any work, naming the columns it has
    out = tmp_path / "ds"
    with pytest.raises(input_files.InputError, match=r"no column 'content'; its columns are: id, text"):
        _vectorize([tmp_path / "t.parquet"], out, text_field="content")
    assert not out.exists()
    # a non-text text column is refused at once too
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "n.parquet")
    with pytest.raises(input_files.InputError, match="type int64, expected a string"):
        list(ts.read_documents(str(tmp_path / "n.parquet"), "parquet"))
    # CLI: one line, exit 2
    assert cli_main(["vectorize", "--input", str(tmp_path / "t.parquet"), "--text-field",
                     "content", "--output", str(out)]) == 2


def test_one_latin1_byte_keeps_the_document_and_is_counted(posts, tmp_path):
    body = posts[0][3] + "\nPrice: 5 \xa3 per copy\n"
    (tmp_path / "post.txt").write_bytes(body.encode("latin-1"))
    (tmp_path / "other.txt").write_bytes(posts[1][3].encode("latin-1"))
    n_bad = sum(1 for ch in body if ord(ch) > 127)          # latin-1 bytes not valid UTF-8
    assert n_bad >= 1
    m = _vectorize([tmp_path / "*.txt"], tmp_path / "ds", no_below=1)
    assert m["counts"]["documents_kept"] == 2 and m["counts"]["dead_letters"] == 0
    assert m["counts"]["replaced_characters"] == n_bad
    assert m["settings"]["encoding_errors"] == "replace"
    # no_above=1.0: the one document read keeps its words (a run that keeps no document
    # publishes no dataset)
    m = _vectorize([tmp_path / "*.txt"], tmp_path / "strict", no_below=1, no_above=1.0,
                   encoding_errors="strict")
    assert m["counts"]["documents_read"] == 1 and m["counts"]["dead_letters"] == 1
    assert m["counts"]["replaced_characters"] == 0
    # the same in a CSV: only the row is affected, and it is kept
    _write_csv(tmp_path / "l1.csv", [("x", "g", "t", body), posts[1]], encoding="latin-1")
    docs = list(ts.read_documents(str(tmp_path / "l1.csv"), "csv", text_field="body",
                                  encoding_errors="replace"))
    assert [d.replaced_chars for d in docs] == [n_bad, 0]
    docs = list(ts.read_documents(str(tmp_path / "l1.csv"), "csv", text_field="body",
                                  encoding="latin-1", encoding_errors="strict"))
    assert "\xa3" in docs[0].text and docs[0].replaced_chars == 0


def test_manifest_lists_inputs_up_to_a_threshold_then_summarises(posts, tmp_path,
                                                                 monkeypatch):
    for i, p in enumerate(posts[:6]):
        (tmp_path / ("p%d.txt" % i)).write_text(p[3], encoding="utf-8")
    m = _vectorize([tmp_path / "*.txt"], tmp_path / "listed", no_below=1)
    assert len(m["inputs"]) == 6 and m["input_summary"]["listed"]
    listing = sorted((i["path"], i["format"]) for i in m["inputs"])
    import hashlib
    sha = hashlib.sha256("".join("%s\t%s\n" % x for x in listing).encode()).hexdigest()
    assert m["input_summary"]["listing_sha256"] == sha
    monkeypatch.setattr(vz, "MAX_LISTED_INPUTS", 5)
    m2 = _vectorize([tmp_path / "*.txt"], tmp_path / "summarised", no_below=1)
    assert m2["inputs"] is None
    assert m2["input_summary"] == {"count": 6, "patterns": [str(tmp_path / "*.txt")],
                                   "formats": {"text": 6}, "listing_sha256": sha,
                                   "listed": False}


# ----------------------------------------------------------------------------- BigQuery

class _FakeReadFromBigQuery(beam.PTransform):
    """Stands in for Beam's ``ReadFromBigQuery``: records its arguments, emits ``rows``."""
    calls = []
    rows = []

    def __init__(self, **kw):
        super().__init__()
        _FakeReadFromBigQuery.calls.append(kw)

    def expand(self, pbegin):
        return pbegin | beam.Create(_FakeReadFromBigQuery.rows)


def test_bigquery_table_and_query_through_beams_source(posts, reference, tmp_path,
                                                       monkeypatch):
    """The graph of a BigQuery input, offline: Beam's ReadFromBigQuery is replaced by a
    stand-in at the point the pipeline takes it from, so everything after it runs."""
    ref_manifest, ref_rows = reference
    reference_dir = ref_manifest["_dir"]
    monkeypatch.setattr(bigquery_source, "require_bigquery", lambda: None)
    monkeypatch.setattr(bigquery_source, "_bigquery_transform", lambda: _FakeReadFromBigQuery)
    _FakeReadFromBigQuery.calls = []
    _FakeReadFromBigQuery.rows = [{"id": p[0], "label": p[1], "title": p[2],
                                   "text": p[2] + "\n" + p[3]} for p in posts]
    _FakeReadFromBigQuery.rows.append({"id": "null-text", "label": None, "title": None,
                                       "text": None})
    m = _vectorize(["bq://my-project.news.posts"], tmp_path / "bq")
    assert _FakeReadFromBigQuery.calls == [dict(table="my-project:news.posts",
                                                selected_fields=["text", "id", "title",
                                                                 "label"])]
    # BigQuery rows have no order, so the vocabulary's id order (first seen) differs: the
    # same words, and every document the same words with the same counts
    assert _word_rows(tmp_path / "bq") == _word_rows(reference_dir)
    assert m["vocabulary"]["size"] == ref_manifest["vocabulary"]["size"]
    assert m["counts"]["dead_letters"] == 1
    dl = [json.loads(l) for l in open(tmp_path / "bq" / "deadletter" / "deadletter.jsonl")]
    assert dl[0]["source"] == "bq://my-project.news.posts" and "null-text" in dl[0]["position"]
    _FakeReadFromBigQuery.calls = []
    _vectorize([], tmp_path / "q", query="SELECT id, text FROM news.posts")
    assert _FakeReadFromBigQuery.calls == [dict(query="SELECT id, text FROM news.posts",
                                                use_standard_sql=True)]


def test_bigquery_without_the_gcp_extra_names_it(tmp_path):
    try:
        from google.cloud import bigquery  # noqa: F401
        pytest.skip("google-cloud-bigquery is installed here")
    except ImportError:
        pass
    with pytest.raises(ValueError, match=r"pip install 'ldabeam\[gcp\]'"):
        _vectorize(["bq://p.d.t"], tmp_path / "ds")
    with pytest.raises(ValueError, match="expected bq://PROJECT.DATASET.TABLE"):
        _vectorize(["bq://p.only"], tmp_path / "ds")


# ----------------------------------------------------------------------------- verify

def test_training_refuses_an_incomplete_dataset(posts, tmp_path, capsys):
    src = tmp_path / "posts.jsonl"
    _write_jsonl(src, posts)
    ds = tmp_path / "ds"
    _vectorize([src], ds, num_shards=4)
    assert manifest.verify(str(ds)) == {"shards": 4, "documents": N_POSTS}
    train = ["train", "--shards", str(ds), "--output", str(tmp_path / "m"), "--topics", "3",
             "--algorithm", "online-vb", "--minibatch", "60", "--passes", "1", "--no-progress"]
    shard = ds / "train" / "part-00001-of-00004.parquet"
    data = shard.read_bytes()
    shard.unlink()
    assert cli_main(train) == 2
    assert "part-00001-of-00004.parquet listed in manifest.json is missing" in \
        capsys.readouterr().err
    assert not (tmp_path / "m").exists()                    # refused before any work
    shard.write_bytes(data[:-20] + b"\0" * 20)              # same size, other bytes
    with pytest.raises(ValueError, match="cannot be read|sha256 mismatch"):
        manifest.verify(str(ds))
    # a shard from another run beside the listed ones
    shard.write_bytes(data)
    (ds / "train" / "part-00009-of-00010.parquet").write_bytes(data)
    with pytest.raises(ValueError, match="part-00009-of-00010.parquet is not listed"):
        manifest.verify(str(ds))
    (ds / "train" / "part-00009-of-00010.parquet").unlink()
    # still being written: no manifest yet
    os.rename(ds / "manifest.json", tmp_path / "manifest.json")
    with pytest.raises(ValueError, match="no manifest.json: it is still being written"):
        manifest.verify(str(ds))
    os.rename(tmp_path / "manifest.json", ds / "manifest.json")
    assert cli_main(train) == 0
    # a split folder is verified against the manifest of the dataset around it
    assert manifest.verify(str(ds / "train")) == {"shards": 4, "documents": N_POSTS}


# ----------------------------------------------------------------------------- infer raw text

def test_model_trained_from_csv_infers_raw_csv_like_vectorize_then_infer(posts, tmp_path):
    """Round trip: CSV -> dataset -> model (self-describing: tokenizer.json); new raw CSV rows
    -> θ equal bit for bit to vectorising them with the model's vocabulary and inferring."""
    train_posts, new_posts = posts[:200], posts[200:]
    _write_csv(tmp_path / "train.csv", train_posts)
    ds, model = tmp_path / "ds", tmp_path / "model"
    assert cli_main(["vectorize", "--input", str(tmp_path / "train.csv"), "--text-field",
                     "title,body", "--no-below", "2", "--no-lowercase", "--output",
                     str(ds)]) == 0
    assert cli_main(["train", "--shards", str(ds), "--output", str(model), "--topics", "4",
                     "--algorithm", "online-vb", "--minibatch", "50", "--passes", "1", "--seed", "2",
                     "--no-progress"]) == 0
    tok = manifest.read_tokenizer(str(model))
    assert tok["text_field"] == "title,body" and tok["lowercase"] is False
    new_csv = tmp_path / "new.csv"
    _write_csv(new_csv, new_posts + [("nothing-known", "g", "", "qqzzxx wwvvyy")])
    raw = tmp_path / "raw"
    assert cli_main(["infer", "--model", str(model), "--input", str(new_csv), "--output",
                     str(raw), "--csv"]) == 0
    s = json.load(open(raw / "_summary.json"))
    assert s["documents_read"] == len(new_posts) + 1 and s["empty_after_vocabulary"] == 1
    assert s["oov_tokens_dropped"] > 0
    # the same rows vectorised with the model's vocabulary and settings, then inferred
    vds = tmp_path / "vds"
    assert cli_main(["vectorize", "--input", str(new_csv), "--text-field", "title,body",
                     "--no-lowercase", "--vocab", str(model / "vocab.tsv"), "--output",
                     str(vds)]) == 0
    via = tmp_path / "via"
    infer(InferOptions(model=str(model), shards=str(vds), output=str(via)))
    a, b = read_theta(str(raw)), read_theta(str(via))
    assert a.column("doc_id").to_pylist() == b.column("doc_id").to_pylist()
    assert len(a.column("doc_id")) == len(new_posts)
    assert a.column("theta").to_pylist() == b.column("theta").to_pylist()     # bit for bit
    assert a.column("top_topics").to_pylist() == b.column("top_topics").to_pylist()
    # CSV output on request: same rows, θ as float32 text that reads back to the same bits
    rows = []
    for f in sorted(os.listdir(raw)):
        if f.endswith(".csv"):
            rows += list(csv.DictReader(open(raw / f, encoding="utf-8")))
    rows.sort(key=lambda r: r["doc_id"])
    assert [r["doc_id"] for r in rows] == a.column("doc_id").to_pylist()
    theta = np.array([[r["theta_%d" % k] for k in range(4)] for r in rows], np.float32)
    np.testing.assert_array_equal(theta, np.array(a.column("theta").to_pylist(), np.float32))
    assert [int(r["top_topic"]) for r in rows] == a.column("top_topic").to_pylist()


def test_infer_raw_parquet_arrow_and_bigquery_use_the_models_settings(posts, tmp_path,
                                                                     monkeypatch):
    train_posts = posts[:200]
    src = tmp_path / "train.jsonl"
    _write_jsonl(src, train_posts)
    ds, model = tmp_path / "ds", tmp_path / "model"
    _vectorize([src], ds)
    assert cli_main(["train", "--shards", str(ds), "--output", str(model), "--topics", "3",
                     "--algorithm", "online-vb", "--minibatch", "50", "--passes", "1",
                     "--no-progress"]) == 0
    table = _table(posts[200:]).rename_columns(["id", "label", "title", "text"])
    pq.write_table(table, tmp_path / "new.parquet")
    _write_hf_save_to_disk(str(tmp_path / "hf"), table)
    outs = {}
    for name, inp in (("pq", tmp_path / "new.parquet"), ("hf", tmp_path / "hf")):
        outs[name] = tmp_path / ("theta-" + name)     # never into the input folder (hf/)
        s = infer(InferOptions(model=str(model), inputs=[str(inp)], output=str(outs[name])))
        assert s["documents_read"] == table.num_rows and s["dead_letters"] == 0
    # a BigQuery query (its source replaced by a stand-in, as in the vectorize test)
    monkeypatch.setattr(bigquery_source, "require_bigquery", lambda: None)
    monkeypatch.setattr(bigquery_source, "_bigquery_transform", lambda: _FakeReadFromBigQuery)
    _FakeReadFromBigQuery.calls, _FakeReadFromBigQuery.rows = [], table.to_pylist()
    outs["bq"] = tmp_path / "bq"
    s = infer(InferOptions(model=str(model), query="SELECT * FROM news.new",
                           output=str(outs["bq"])))
    assert _FakeReadFromBigQuery.calls == [dict(query="SELECT * FROM news.new",
                                                use_standard_sql=True)]
    assert s["documents"] == table.num_rows
    a, b, c = (read_theta(str(outs[k])) for k in ("pq", "hf", "bq"))
    assert a.column("theta").to_pylist() == b.column("theta").to_pylist()
    assert a.column("doc_id").to_pylist() == c.column("doc_id").to_pylist()
    assert a.column("theta").to_pylist() == c.column("theta").to_pylist()


def test_tables_on_an_object_store(posts, reference, store_root, tmp_path):
    """gs:// / s3:// paths go through Beam's FileSystems: the same tables on the fake object
    store (tests/fake_object_store.py) give the same rows as local files."""
    from apache_beam.io.filesystems import FileSystems
    _, ref_rows = reference
    local = tmp_path / "local"
    local.mkdir()
    _write_csv(local / "posts.csv.gz", posts[:120])
    table = _table(posts[120:])
    pq.write_table(table.slice(0, 60), local / "a.parquet")
    pq.write_table(table.slice(60), local / "b.parquet")
    _write_hf_save_to_disk(str(local / "hf"), table)
    for rel in ["posts.csv.gz", "a.parquet", "b.parquet", "hf/data-00000-of-00001.arrow",
                "hf/state.json", "hf/dataset_info.json"]:
        with FileSystems.create("%s/in/%s" % (store_root, rel),
                                compression_type="uncompressed") as f:
            f.write((local / rel).read_bytes())
    expanded = input_files.expand_inputs([store_root + "/in/*.csv.gz", store_root + "/in/*.parquet",
                                 store_root + "/in/hf"])
    assert [(p.rsplit("/", 1)[-1], f) for p, f in expanded] == [
        ("posts.csv.gz", "csv"), ("a.parquet", "parquet"), ("b.parquet", "parquet"),
        ("data-00000-of-00001.arrow", "arrow")]
    docs = [d for p, f in expanded for d in ts.read_documents(p, f, text_field="title,body")]
    assert all(isinstance(d, input_files.RawDocument) for d in docs)
    by_id = {d.doc_id: d for d in docs}
    assert len(docs) == len(posts) + 120 and set(by_id) == set(ref_rows)
    assert by_id[posts[0][0]].text == posts[0][2] + "\n" + posts[0][3]
