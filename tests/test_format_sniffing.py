"""Input formats told by content, not by dots in names: real 20 Newsgroups posts under their
own names (``sci.space/60804``) and flattened (``comp.graphics-38758``), and every format
under a name that says nothing, compressed or not."""
import bz2
import gzip
import io
import json
import lzma
import os
import pathlib
import tarfile
import zipfile

import pytest

from helpers.news20 import news20_posts

from pipelines.ingest import input_files
from pipelines.ingest.text_sources import read_documents
from pipelines.ingest.input_files import (DeadLetter, InputError, RawDocument, expand_inputs,
                                          format_of_head)


def news20_members(tar_path, every=1, limit=None):
    """``(member name, bytes)`` of the 20 Newsgroups posts, every ``every``-th."""
    return [(p.name, p.data) for p in news20_posts(tar_path, every=every, limit=limit)]


@pytest.fixture(scope="module")
def posts(news20_tar):
    return news20_members(news20_tar, every=40)        # ~470 posts of all 20 groups


def test_every_20_newsgroups_post_is_text_by_content(news20_tar):
    """All 18,846 posts (headers, quotes, signatures, uuencoded binaries, tables of numbers)
    read as ``text``: no post looks like JSON, CSV, a dump or a binary file."""
    members = news20_members(news20_tar)
    assert len(members) == 18846
    wrong = [(name, format_of_head(data[:input_files.SNIFF_BYTES])) for name, data in members
             if format_of_head(data[:input_files.SNIFF_BYTES]) != "text"]
    assert wrong == []


def test_dotted_names_and_folders_are_read_as_text(tmp_path, posts):
    flat = tmp_path / "flat"                       # comp.graphics-38758
    tree = tmp_path / "tree"                       # 20news-bydate-train/comp.graphics/38758
    flat.mkdir()
    for name, data in posts:
        group, num = name.split("/")[-2:]
        (flat / ("%s-%s" % (group, num))).write_bytes(data)
        d = tree / os.path.dirname(name)
        d.mkdir(parents=True, exist_ok=True)
        (d / num).write_bytes(data)
    for root in (flat, tree):
        inputs = expand_inputs([str(root)])
        assert len(inputs) == len(posts) and {f for _, f in inputs} == {"text"}
    docs = [d for p, f in expand_inputs([str(tree)]) for d in read_documents(p, f,
                                                                            encoding="latin-1")]
    assert all(isinstance(d, RawDocument) for d in docs)
    assert sorted((d.label, d.text.encode("latin-1")) for d in docs) == \
        sorted((n.split("/")[-2], data) for n, data in posts)
    assert len({d.label for d in docs}) == 20
    # read_documents' own "auto" tells the format of a dotted name the same way
    one = next(iter(sorted(flat.iterdir())))
    assert next(iter(read_documents(str(one), "auto", encoding="latin-1"))).text


def _table_bytes(rows, fmt):
    import pyarrow as pa
    t = pa.Table.from_pylist(rows)
    buf = io.BytesIO()
    if fmt == "parquet":
        import pyarrow.parquet as pq
        pq.write_table(t, buf)
    elif fmt == "arrow":
        import pyarrow.feather as feather
        feather.write_feather(t, buf)
    else:
        import pyarrow.csv as pacsv
        pacsv.write_csv(t, buf, pacsv.WriteOptions(delimiter="," if fmt == "csv" else "\t"))
    return buf.getvalue()


def test_every_format_is_told_by_content_under_a_name_that_says_nothing(tmp_path, posts,
                                                                       wiki_sample, kos_paths):
    rows = [{"id": n, "text": d.decode("latin-1"), "label": n.split("/")[-2]}
            for n, d in posts[:30]]
    d = tmp_path / "in"
    d.mkdir()
    files = {
        "export.2024.01": (_table_bytes(rows, "csv"), "csv"),
        "export.2024.02": (_table_bytes(rows, "tsv"), "tsv"),
        "part.0001": (_table_bytes(rows, "parquet"), "parquet"),
        "part.0002": (_table_bytes(rows, "arrow"), "arrow"),
        "records.v2": ("".join(json.dumps(r) + "\n" for r in rows).encode(), "jsonl"),
        "enwiki.dump": (pathlib.Path(wiki_sample).read_bytes(), "wiki"),      # bz2, by magic
        "kos.counts": (gzip.decompress(pathlib.Path(kos_paths[0]).read_bytes())[:4000]
                       .rsplit(b"\n", 1)[0] + b"\n", "uci"),
        "post.v1": (gzip.compress(posts[0][1]), "text"),                     # gzip, by magic
        "post.v2": (lzma.compress(posts[1][1]), "text"),                     # xz, by magic
        "post.v3": (bz2.compress(posts[2][1]), "text"),
    }
    tar_buf = io.BytesIO()
    with tarfile.open(fileobj=tar_buf, mode="w:gz") as tar:
        for name, data in posts[:5]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    files["bundle.2024"] = (tar_buf.getvalue(), "text")                     # a tar.gz
    zip_buf = io.BytesIO()
    with zipfile.ZipFile(zip_buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in posts[5:9]:
            z.writestr(name, data)
    files["bundle.2025"] = (zip_buf.getvalue(), "text")                     # a zip
    for name, (data, _) in files.items():
        (d / name).write_bytes(data)
    got = dict((os.path.basename(p), f) for p, f in expand_inputs([str(d)]))
    assert got == {name: fmt for name, (_, fmt) in files.items()}

    # and each reads as what it is
    def texts(name, **kw):
        out = list(read_documents(str(d / name), got[name], encoding="latin-1", **kw))
        assert all(isinstance(x, RawDocument) for x in out), out
        return out
    for name in ("export.2024.01", "export.2024.02", "part.0001", "part.0002", "records.v2"):
        assert [(x.doc_id, x.label) for x in texts(name)] == [(r["id"], r["label"])
                                                              for r in rows]
    assert [x.text.encode("latin-1") for x in texts("post.v1") + texts("post.v2")
            + texts("post.v3")] == [posts[0][1], posts[1][1], posts[2][1]]
    tar_docs = texts("bundle.2024")
    assert [(x.doc_id, x.label) for x in tar_docs] == [
        ("bundle.2024/" + n, n.split("/")[-2]) for n, _ in posts[:5]]
    zip_docs = texts("bundle.2025")
    assert [(x.doc_id, x.text.encode("latin-1")) for x in zip_docs] == [
        ("bundle.2025/" + n, data) for n, data in posts[5:9]]


def test_binary_content_and_unreadable_kinds_are_refused_by_name(tmp_path):
    png = tmp_path / "a" / "figure.2"
    png.parent.mkdir()
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(InputError, match=r"figure\.2.*binary.*give --format"):
        expand_inputs([str(png.parent)])
    nul = tmp_path / "b" / "blob"
    nul.parent.mkdir()
    nul.write_bytes(b"abc\x00\x01\x02" * 100)
    with pytest.raises(InputError, match=r"blob.*give --format"):
        expand_inputs([str(nul)])
    xlsx = tmp_path / "c" / "sheet.xlsx"
    xlsx.parent.mkdir()
    xlsx.write_text("id,text\n1,hello\n")
    with pytest.raises(InputError, match=r"sheet\.xlsx.*does not read \.xlsx"):
        expand_inputs([str(xlsx)])
    assert expand_inputs([str(xlsx)], "csv") == [(str(xlsx), "csv")]


@pytest.mark.parametrize("head,fmt", [
    (b"", "text"),
    (b"From: a@b.edu (A, B)\nSubject: x, y\n\nHello, world, again\nbye\n", "text"),
    (b"id,text\n1,hello\n", "csv"),
    (b"id, text\n1, hello\n", "text"),              # an outer space: not a header of names
    (b"1,2\n3,4\n", "text"),                        # numbers: no header
    (b"Smith,John\nDoe,Jane\n", "csv"),
    (b"a\tb\tc\n1\t2\t3\n", "tsv"),
    (b'{"id": 1, "text": "x"}\n{"id": 2}\n', "jsonl"),
    (b'{"text": "' + b"x" * 70000, "jsonl"),       # one line longer than the head
    (b"{not json}\nmore\n", "text"),
    (b"3\n10\n4\n1 2 3\n", "uci"),
    (b"2 0:1 5:2\n1 3:4\n", "ldac"),
    (b"\xef\xbb\xbf<mediawiki xmlns=\"http://www.mediawiki.org/xml/export-0.10/\">", "wiki"),
    (b"%PDF-1.4\n", None),
    (b"BZh is not always bzip2\n", "text"),
])
def test_format_of_head(head, fmt):
    assert format_of_head(head[:input_files.SNIFF_BYTES]) == fmt


def test_inputs_on_an_object_store_are_told_and_read_the_same(store_root, posts):
    """``fakegs://`` (tests/fake_object_store.py, a Beam file system): dotted names, a gzip
    post without a suffix, listed, sniffed in threads and read as local files are."""
    from helpers import fake_object_store as fos
    root = pathlib.Path(os.environ[fos.ROOT_ENV]) / "bucket" / "posts"
    root.mkdir(parents=True)
    chosen = posts[:12]
    for name, data in chosen[:-1]:
        group, num = name.split("/")[-2:]
        (root / ("%s-%s" % (group, num))).write_bytes(data)
    name, data = chosen[-1]
    (root / "last.post").write_bytes(gzip.compress(data))
    inputs = expand_inputs([store_root + "/posts"])
    assert len(inputs) == len(chosen) and {f for _, f in inputs} == {"text"}
    texts = sorted(d.text for p, f in inputs for d in read_documents(p, f, encoding="latin-1"))
    assert texts == sorted(data.decode("latin-1") for _, data in chosen)


@pytest.fixture
def http_root(tmp_path):
    """A local HTTP server (the standard library's) serving tmp_path/www."""
    import functools
    import http.server
    import threading
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))

    class Quiet(handler.func):
        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(www)))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield www, "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_http_inputs_through_smart_open(http_root, posts, wiki_sample):
    www, url = http_root
    name, data = posts[0]
    (www / "comp.graphics-38758").write_bytes(gzip.compress(data))      # gzip, by magic
    (www / "enwiki.xml.bz2").write_bytes(pathlib.Path(wiki_sample).read_bytes())
    post_url, dump_url = url + "/comp.graphics-38758", url + "/enwiki.xml.bz2"
    assert expand_inputs([post_url, dump_url]) == [(post_url, "text"), (dump_url, "wiki")]
    doc = next(iter(read_documents(post_url, "text", encoding="latin-1")))
    assert doc.text.encode("latin-1") == data
    local = [d.doc_id for d in read_documents(wiki_sample, "wiki")]
    assert [d.doc_id for d in read_documents(dump_url, "wiki")] == local and len(local) == 106
    with pytest.raises(InputError, match=r"cannot open http://[^ ]*/missing: .*404"):
        expand_inputs([url + "/missing"])
