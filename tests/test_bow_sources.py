"""Bag-of-words readers: UCI KOS exactly, LDA-C and Matrix Market round trips, bad input."""
import gzip
import os
import pathlib

import numpy as np
import pytest

from pipelines.ingest.bow_sources import iter_bow_documents, read_bow_vocab
from pipelines.ingest.input_files import DeadLetter, InputError, expand_inputs


def split(items):
    docs = [i for i in items if not isinstance(i, DeadLetter)]
    dead = [i for i in items if isinstance(i, DeadLetter)]
    return docs, dead


def check_doc(doc, vocab_size):
    doc_id, w, c = doc
    assert isinstance(doc_id, str)
    assert w.dtype == np.int32 and c.dtype == np.int32 and len(w) == len(c)
    assert np.all(np.diff(w) > 0) and np.all(c > 0)
    assert len(w) == 0 or (w[0] >= 0 and w[-1] < vocab_size)


@pytest.fixture(scope="module")
def kos(kos_paths):
    docword, vocab_path = kos_paths
    vocab = read_bow_vocab(docword, "uci", None)      # found next to docword as vocab.kos.txt
    docs, dead = split(list(iter_bow_documents(docword, "uci", len(vocab))))
    assert dead == []
    return vocab, docs


def test_uci_kos_exact(kos_paths, kos):
    docword, vocab_path = kos_paths
    vocab, docs = kos
    assert len(vocab) == 6906
    assert vocab[:3] == ["aarp", "abandon", "abandoned"]
    assert vocab == pathlib.Path(vocab_path).read_text().split()       # file order kept
    assert read_bow_vocab(docword, "uci", vocab_path) == vocab
    assert len(docs) == 3430
    assert [d[0] for d in docs] == [str(i) for i in range(1, 3431)]
    assert sum(int(c.sum()) for _, _, c in docs) == 467714
    assert sum(len(w) for _, w, _ in docs) == 353160
    for d in docs[:50]:
        check_doc(d, 6906)
    # first lines of the file: "1 61 2", "1 76 1", "1 89 1" (1-based word ids)
    assert list(docs[0][1][:3]) == [60, 75, 88] and list(docs[0][2][:3]) == [2, 1, 1]
    assert expand_inputs([docword]) == [(docword, "uci")]


def write_lines(path, lines, gz=False):
    data = ("\n".join(lines) + "\n").encode()
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
        f.write(data)
    return str(path)


def gensim_corpus(docs, n):
    """First n KOS documents as a gensim corpus (lists of (id, count)), with 2 empty ones."""
    corpus = [list(zip(w.tolist(), c.tolist())) for _, w, c in docs[:n]]
    corpus[3] = []
    corpus[7] = []
    return corpus


def test_ldac_round_trip_with_gensim(tmp_path, kos):
    from gensim.corpora import BleiCorpus, Dictionary
    vocab, docs = kos
    corpus = gensim_corpus(docs, 60)
    id2word = Dictionary.from_corpus(corpus, id2word=dict(enumerate(vocab)))
    path = str(tmp_path / "kos.lda-c")
    BleiCorpus.serialize(path, corpus, id2word=id2word)
    assert os.path.exists(path + ".vocab")
    got_vocab = read_bow_vocab(path, "ldac", None)            # <file>.vocab found
    assert got_vocab == vocab
    got, dead = split(list(iter_bow_documents(path, "ldac", len(got_vocab))))
    assert dead == []
    expected = [(str(i + 1), doc) for i, doc in enumerate(corpus) if doc]
    assert [g[0] for g in got] == [e[0] for e in expected]     # line numbers, empties skipped
    for (doc_id, w, c), (_, doc) in zip(got, expected):
        check_doc((doc_id, w, c), len(vocab))
        assert list(zip(w.tolist(), c.tolist())) == sorted(doc)
    # and gensim reads back what we read
    back = list(BleiCorpus(path))
    assert [sorted(d) for d in back if d] == [list(zip(w.tolist(), c.tolist())) for _, w, c in got]


def test_mm_round_trip_with_gensim(tmp_path, kos):
    from gensim.corpora import Dictionary, MmCorpus
    vocab, docs = kos
    corpus = gensim_corpus(docs, 60)
    path = str(tmp_path / "kos.mm")
    MmCorpus.serialize(path, corpus)
    d = Dictionary()
    d.token2id = {t: i for i, t in enumerate(vocab)}
    d.id2token = {}
    d.dfs = {i: 1 for i in range(len(vocab))}
    d.save_as_text(str(tmp_path / "kos.dict"))                  # sorted by word, ids kept
    for vp in (None, str(tmp_path / "kos.dict")):
        assert read_bow_vocab(path, "mm", vp) == vocab
    plain = write_lines(tmp_path / "plain.txt", vocab)
    assert read_bow_vocab(path, "mm", plain) == vocab
    got, dead = split(list(iter_bow_documents(path, "mm", len(vocab))))
    assert dead == []
    expected = [(str(i + 1), doc) for i, doc in enumerate(corpus) if doc]
    assert [g[0] for g in got] == [e[0] for e in expected]
    for (doc_id, w, c), (_, doc) in zip(got, expected):
        check_doc((doc_id, w, c), len(vocab))
        assert list(zip(w.tolist(), c.tolist())) == sorted(doc)
    assert expand_inputs([path]) == [(path, "mm")]


def test_mm_weighted_matrix_is_refused_per_document(tmp_path):
    path = write_lines(tmp_path / "w.mm", [
        "%%MatrixMarket matrix coordinate real general", "% comment", "3 5 5",
        "1 1 2", "1 3 1.0", "2 2 0.5", "2 4 1", "3 5 7"])
    got, dead = split(list(iter_bow_documents(path, "mm", 5)))
    assert [g[0] for g in got] == ["1", "3"]
    assert list(got[0][2]) == [2, 1]
    assert len(dead) == 1 and dead[0].position == "line 6"
    assert "not an integer count" in dead[0].error


def test_uci_bad_lines_are_dead_letters_and_good_documents_survive(tmp_path):
    path = write_lines(tmp_path / "docword.bad.txt.gz", [
        "5", "4", "10",
        "1 1 2", "1 4 1", "1 1 3",        # doc 1: repeated word id 1 -> counts summed
        "2 9 1",                          # doc 2: word id out of range -> dead letter
        "3 2 x",                          # doc 3: not an integer
        "4 2 1",
        "1 3 1",                          # doc 1 again after others: not grouped
        "9 1 1",                          # doc 9 > D
        "5 3 0", "5 2 4",                 # explicit zero dropped
    ], gz=True)
    write_lines(tmp_path / "vocab.bad.txt", ["w1", "w2", "w3", "w4"])
    assert read_bow_vocab(path, "uci", None) == ["w1", "w2", "w3", "w4"]
    got, dead = split(list(iter_bow_documents(path, "uci", 4)))
    assert [(d, w.tolist(), c.tolist()) for d, w, c in got] == [
        ("1", [0, 3], [5, 1]), ("4", [1], [1]), ("5", [1], [4])]
    errors = sorted(d.error for d in dead)
    assert len(dead) == 4
    assert any("word id 9 is out of range" in e for e in errors)
    assert any("is not an integer" in e for e in errors)
    assert any("reappears" in e for e in errors)
    assert any("document id 9 is out of range" in e for e in errors)


def test_headers_are_validated_before_use(tmp_path):
    huge = write_lines(tmp_path / "docword.huge.txt", ["3", "99999999999", "3", "1 1 1"])
    with pytest.raises(InputError, match="W=99999999999 is out of range"):
        iter_bow_documents(huge, "uci")
    neg = write_lines(tmp_path / "docword.neg.txt", ["-3", "4", "3", "1 1 1"])
    with pytest.raises(InputError, match="D=-3 is out of range"):
        iter_bow_documents(neg, "uci")
    short = write_lines(tmp_path / "docword.short.txt", ["3", "four"])
    with pytest.raises(InputError, match="header"):
        iter_bow_documents(short, "uci")
    ok = write_lines(tmp_path / "docword.ok.txt", ["1", "4", "1", "1 1 1"])
    with pytest.raises(InputError, match="W=4 but the vocabulary has 5 words"):
        iter_bow_documents(ok, "uci", vocab_size=5)
    notmm = write_lines(tmp_path / "x.mm", ["1 2 3"])
    with pytest.raises(InputError, match="not a Matrix Market coordinate file"):
        iter_bow_documents(notmm, "mm")
    with pytest.raises(InputError, match="missing"):
        iter_bow_documents(str(tmp_path / "missing.mm"), "mm")


def test_ldac_bad_lines(tmp_path):
    path = write_lines(tmp_path / "c.ldac", [
        "2 0:1 3:2", "3 0:1 1:1", "1 7:1", "2 1:1 1:2", "1 2-1", "0", "1 2:1"])
    got, dead = split(list(iter_bow_documents(path, "ldac", 4)))
    assert [(d, w.tolist(), c.tolist()) for d, w, c in got] == [
        ("1", [0, 3], [1, 2]), ("4", [1], [3]), ("7", [2], [1])]
    assert [d.position for d in dead] == ["line 2", "line 3", "line 5"]
    assert "says 3 terms but has 2" in dead[0].error
    assert "out of range" in dead[1].error


def test_vocabulary_errors(tmp_path):
    dup = write_lines(tmp_path / "v.txt", ["a", "b", "a"])
    with pytest.raises(InputError, match="duplicate word 'a'"):
        read_bow_vocab("x.mm", "mm", dup)
    with pytest.raises(InputError, match="none found"):
        read_bow_vocab(str(tmp_path / "docword.zzz.txt"), "uci", None)
    with pytest.raises(InputError, match="not a bag-of-words format"):
        read_bow_vocab("x.txt", "text", dup)


def test_truncated_gzip_keeps_documents_before_the_cut(tmp_path, kos_paths):
    docword, _ = kos_paths
    data = pathlib.Path(docword).read_bytes()
    path = str(tmp_path / "docword.cut.txt.gz")
    pathlib.Path(path).write_bytes(data[: len(data) // 4])
    got, dead = split(list(iter_bow_documents(path, "uci", 6906)))
    assert len(dead) == 1 and "lost" in dead[0].error
    assert 500 < len(got) < 3430


def test_block_parser_equals_line_parser(tmp_path, monkeypatch, kos_paths):
    """numpy block parsing and line-by-line parsing give the same documents and dead letters,
    also when blocks are small and some of them hold bad lines (mixed paths, documents
    spanning blocks)."""
    from pipelines.ingest import bow_triples
    docword, _ = kos_paths
    lines = gzip.decompress(pathlib.Path(docword).read_bytes()).decode().split("\n")
    lines[500] = lines[500].split()[0] + " 1 x"   # a bad count -> its document is a dead letter
    lines[9000] = lines[9000] + " 5"  # four fields
    lines.insert(20000, "")         # blank line
    lines.insert(30000, "5 1 1")    # document 5 again, inside another -> both dead letters
    path = write_lines(tmp_path / "docword.mixed.txt.gz", lines, gz=True)
    monkeypatch.setattr(bow_triples, "BLOCK_BYTES", 4096)
    fast = list(iter_bow_documents(path, "uci", 6906))
    monkeypatch.setattr(bow_triples, "_parse_triples_block", lambda block, allow_float: None)
    slow = list(iter_bow_documents(path, "uci", 6906))
    assert len(fast) == len(slow) > 3000
    for a, b in zip(fast, slow):
        if isinstance(a, DeadLetter):
            assert a == b
        else:
            assert a[0] == b[0] and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
    dead = [d for d in fast if isinstance(d, DeadLetter)]
    assert [d.position for d in dead] == ["line 501", "line 9001", "line 30001", "line 30002"]
    assert "reappears" in dead[2].error and "reappears" in dead[3].error
