"""Seeded fuzzing of every reader: real files mutated (truncated, bytes flipped, huge numbers,
deep nesting, invalid UTF-8, NUL bytes inserted). The invariant, per case: no traceback (only
the reader's documented error types, naming the file), no hang (each case time-boxed), every
good record before and after a mutated one kept, every bad one a dead letter naming its
file and position. ``FUZZ_CASES`` (module constant) is the per-reader count; the total is
printed by ``test_fuzz_case_count``."""
import bz2
import gzip
import io
import json
import os
import random
import signal
import tarfile
from contextlib import contextmanager

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.docbatch import DocBatch
from lda_core.storage.run_log import iter_run_log
from lda_core.storage.state import StateFormatError, TopicState
from pipelines.ingest import dataset
from pipelines.ingest.bow_sources import iter_bow_documents
from pipelines.ingest.text_sources import read_documents
from pipelines.ingest.input_files import DeadLetter, InputError, RawDocument

from helpers.paths import WIKI_SAMPLE, shared_path

SEED = 14
CASE_SECONDS = 10          # a case that takes longer is a hang
INSERTS = [b"9" * 40, b"-" + b"9" * 25, b"1e999", b"[" * 100000, b"{\"a\":" * 30000,
           b"\xff\xfe\xc3\x28", b"\x00" * 7, b"\xed\xa0\x80", b"\r", b"\t\t"]
# per reader (13 readers): the suite fuzzes at least 1,000 cases
CASES = {"jsonl": 160, "lines": 80, "text": 40, "tar": 40, "wiki": 60, "uci": 90, "ldac": 90,
         "mm": 90, "shards": 80, "state": 100, "latest": 40, "runlog": 100, "stream": 160}
RUN = {}


@contextmanager
def time_box(what):
    def alarm(*_):
        raise TimeoutError("%s took more than %d s (a hang)" % (what, CASE_SECONDS))
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(CASE_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def mutate(data: bytes, rng: random.Random, lo: int = 0, hi: int = None,
           newline_ok: bool = True) -> bytes:
    """One random mutation inside ``data[lo:hi]``."""
    hi = len(data) if hi is None else hi
    kind = rng.randrange(4)
    pos = rng.randrange(lo, max(hi, lo + 1))
    if kind == 0 and newline_ok:                                    # truncate
        return data[:pos]
    if kind in (0, 1):                                              # flip bytes
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(lo, max(hi, lo + 1))
            if i < len(b):
                v = b[i] ^ (1 << rng.randrange(8))
                b[i] = v if newline_ok or v != 10 else v ^ 1
        return bytes(b)
    ins = rng.choice(INSERTS)
    if kind == 3:
        return data[:pos] + ins + data[hi:] if not newline_ok else data[:pos] + ins
    return data[:pos] + ins + data[pos:]


def count(name):
    RUN[name] = RUN.get(name, 0) + 1


def check_dead(item, path):
    assert item.source == path or os.path.basename(path) in item.source, item
    assert item.position and item.error, item


# ----------------------------------------------------------------------------- text readers
def _docs(path, fmt, **kw):
    with time_box("%s reader on %s" % (fmt, path)):
        try:
            items = list(read_documents(path, fmt, **kw))
        except InputError as e:
            assert os.path.basename(path) in str(e), e
            return None
    for it in items:
        assert isinstance(it, (RawDocument, DeadLetter)), it
        if isinstance(it, DeadLetter):
            check_dead(it, path)
    return items


def _line_records(tmp_path, name, lines, fmt, make_id, n_cases, rng):
    """Mutate one line at a time: every other line's record must come out unchanged."""
    for case in range(n_cases):
        j = rng.randrange(len(lines))
        bad = mutate(lines[j], rng, newline_ok=False).replace(b"\n", b" ")
        data = b"\n".join(lines[:j] + [bad] + lines[j + 1:]) + b"\n"
        p = str(tmp_path / ("%s-%d.%s" % (name, case, fmt)))
        open(p, "wb").write(data)
        items = _docs(p, fmt)
        assert items is not None
        got = {it.doc_id: it.text for it in items if isinstance(it, RawDocument)}
        for i, line in enumerate(lines):
            if i != j:
                want_id, want_text = make_id(i, line)
                assert got.get(want_id) == want_text, (case, i, j, bad[:80])
        n_dead = sum(isinstance(it, DeadLetter) for it in items)
        assert len(items) - n_dead >= len(lines) - 1 and n_dead <= 1, (case, bad[:80])
        count(name)


def _wiki_xml():
    with bz2.open(WIKI_SAMPLE) as f:
        head = f.read(1500000)
    end = head.rfind(b"</page>") + len(b"</page>")
    return head[:end] + b"\n</mediawiki>\n"


def _real_texts(n):
    """Real article texts of the bundled Wikipedia sample."""
    docs = [d for d in read_documents(WIKI_SAMPLE, "wiki") if isinstance(d, RawDocument)]
    return [d.text[:400].replace("\n", " ") for d in docs[:n]]


def test_fuzz_jsonl_records(tmp_path):
    rng = random.Random(SEED)
    texts = _real_texts(12)
    lines = [json.dumps({"id": "doc-%d" % i, "text": t, "label": "l%d" % (i % 3)}).encode()
             for i, t in enumerate(texts)]
    _line_records(tmp_path, "jsonl", lines, "jsonl",
                  lambda i, line: ("doc-%d" % i, texts[i]), CASES["jsonl"], rng)


def test_the_reported_jsonl_case_keeps_the_valid_line(tmp_path):
    p = str(tmp_path / "x.jsonl")
    open(p, "w").write("[" * 100000 + "\n" + json.dumps({"id": 2 ** 70, "text": "a b"}) + "\n"
                       + json.dumps({"id": "ok", "text": "kept"}) + "\n")
    items = list(read_documents(p, "jsonl"))
    assert [type(i).__name__ for i in items] == ["DeadLetter", "RawDocument", "RawDocument"]
    assert items[0].position == "line 1" and items[2].doc_id == "ok"


def test_fuzz_lines_records(tmp_path):
    rng = random.Random(SEED + 1)
    texts = _real_texts(12)
    lines = [t.encode() for t in texts]
    base = "lines-%d.lines"
    # doc ids of the lines format are <basename>:<line>; the basename differs per case
    for case in range(CASES["lines"]):
        j = rng.randrange(len(lines))
        bad = mutate(lines[j], rng, newline_ok=False).replace(b"\n", b" ")
        p = str(tmp_path / (base % case))
        open(p, "wb").write(b"\n".join(lines[:j] + [bad] + lines[j + 1:]) + b"\n")
        items = _docs(p, "lines")
        good = [it.text for it in items if isinstance(it, RawDocument)]
        for i, t in enumerate(texts):
            if i != j:
                assert t.strip() in [g.strip() for g in good], (case, i, j)
        count("lines")


def test_fuzz_text_and_tar(tmp_path):
    rng = random.Random(SEED + 2)
    texts = _real_texts(8)
    for case in range(CASES["text"]):
        data = mutate(texts[case % len(texts)].encode(), rng)
        p = str(tmp_path / ("t%d.txt" % case))
        open(p, "wb").write(data)
        items = _docs(p, "text")
        assert items is not None and len(items) == 1
        count("text")
    for case in range(CASES["tar"]):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for i, t in enumerate(texts):
                b = t.encode()
                info = tarfile.TarInfo("news/g%d/%d" % (i % 2, i))
                info.size = len(b)
                tf.addfile(info, io.BytesIO(b))
        raw = buf.getvalue()
        data = mutate(raw, rng)
        p = str(tmp_path / ("a%d.tar" % case))
        open(p, "wb").write(data)
        items = _docs(p, "text")
        if items is not None:
            assert len([i for i in items if isinstance(i, RawDocument)]) <= len(texts)
        count("tar")


def _damage_tags(xml, rng, lo, hi):
    """Destroy the ``</page>`` end tag (or the ``<page>`` start tag) of the page xml[lo:hi]."""
    tag = b"<page>" if rng.random() < 0.5 else b"</page>"
    at = xml.find(tag, lo, hi) if tag == b"<page>" else xml.rfind(tag, lo, hi)
    how = rng.randrange(3)
    if how == 0:                                                # delete the tag
        return xml[:at] + xml[at + len(tag):]
    if how == 1 or tag == b"<page>":                            # garble one byte of it
        b = bytearray(xml)
        i = at + rng.randrange(1, len(tag) - 1)
        b[i] ^= 1 << rng.randrange(5)
        return bytes(b)
    return xml[:rng.randrange(lo + 7, at)] + xml[at + 7:]       # the page's XML cut short


def test_fuzz_wiki_dump(tmp_path):
    rng = random.Random(SEED + 3)
    xml = _wiki_xml()
    clean = [d for d in _docs(_write(tmp_path / "clean.xml", xml), "wiki")
             if isinstance(d, RawDocument)]
    assert len(clean) > 5
    page_titles = [d.title for d in clean]
    starts = [m for m in range(len(xml)) if xml.startswith(b"<page>", m)]
    for case in range(CASES["wiki"]):
        # damage one page (its text, its end tag or its start tag): every other page's
        # article still comes out, and a damaged article is a dead letter
        k = rng.randrange(1, len(starts) - 1)
        lo, hi = starts[k], starts[k + 1]
        kind = case % 3
        if kind == 0:
            data = mutate(xml, rng, lo, xml.rfind(b"</page>", lo, hi), newline_ok=False)
        elif kind == 1:
            data = mutate(xml, rng, lo, hi, newline_ok=False)
        else:
            data = _damage_tags(xml, rng, lo, hi)
        items = _docs(_write(tmp_path / ("w%d.xml" % case), data), "wiki")
        if items is None:
            count("wiki")
            continue
        got = {d.title for d in items if isinstance(d, RawDocument)}
        inside = xml[lo:hi]
        lost = [t for t in page_titles if t not in got
                and ("<title>%s</title>" % t).encode() not in inside]
        assert not lost, (case, kind, lost[:3])
        dead = [d for d in items if isinstance(d, DeadLetter)]
        assert len(dead) <= 1, (case, kind, dead)
        if kind == 2:
            damaged = [t for t in page_titles if ("<title>%s</title>" % t).encode() in inside]
            assert not damaged or (damaged[0] not in got and len(dead) == 1), (case, damaged)
        count("wiki")


def test_wiki_reader_resyncs_after_a_destroyed_end_or_start_tag(tmp_path):
    xml = _wiki_xml()
    clean = [d for d in _docs(_write(tmp_path / "clean.xml", xml), "wiki")
             if isinstance(d, RawDocument)]
    victim = clean[1]
    t = xml.find(("<title>%s</title>" % victim.title).encode())
    lo, hi = xml.rfind(b"<page>", 0, t), xml.find(b"</page>", t)
    for name, data in [("end", xml[:hi] + xml[hi + 7:]),
                       ("start", xml[:lo] + b"<pgae>" + xml[lo + 6:]),
                       ("cut", xml[:(t + hi) // 2] + xml[hi + 7:])]:
        path = _write(tmp_path / ("%s.xml" % name), data)
        items = list(read_documents(path, "wiki"))
        dead = [d for d in items if isinstance(d, DeadLetter)]
        docs = [d for d in items if isinstance(d, RawDocument)]
        assert [d.title for d in docs] == [d.title for d in clean if d is not victim], name
        assert len(dead) == 1 and dead[0].source == path, (name, dead)
        assert dead[0].position.startswith("page %s @ byte " % victim.position.split()[1]), \
            (name, dead[0].position, victim.position)


def _write(p, data):
    open(str(p), "wb").write(data)
    return str(p)


# ----------------------------------------------------------------------------- bag of words
def _bow_files(tmp_path):
    docword, vocab = shared_path("uci-bow-kos", "docword.kos.txt.gz"), None
    rows = []
    with gzip.open(docword, "rt") as f:
        header = [f.readline() for _ in range(3)]
        for line in f:
            d, w, c = map(int, line.split())
            if d > 40:
                break
            rows.append((d, w, c))
    V = int(header[1])
    docs = {}
    for d, w, c in rows:
        docs.setdefault(d, []).append((w, c))
    uci = "%d\n%d\n%d\n" % (len(docs), V, len(rows)) + "".join(
        "%d %d %d\n" % r for r in rows)
    ldac = "".join("%d %s\n" % (len(p), " ".join("%d:%d" % (w - 1, c) for w, c in p))
                   for d, p in sorted(docs.items()))
    mm = ("%%%%MatrixMarket matrix coordinate integer general\n%d %d %d\n"
          % (len(docs), V, len(rows)) + "".join("%d %d %d\n" % r for r in rows))
    return V, {"uci": uci.encode(), "ldac": ldac.encode(), "mm": mm.encode()}, len(docs)


@pytest.mark.parametrize("fmt", ["uci", "ldac", "mm"])
def test_fuzz_bag_of_words(tmp_path, fmt):
    rng = random.Random("%d-%s" % (SEED, fmt))         # str seeds are hashed stably
    V, files, n_docs = _bow_files(tmp_path)
    raw = files[fmt]
    header_end = {"uci": 3, "ldac": 0, "mm": 2}[fmt]
    lines = raw.split(b"\n")
    for case in range(CASES[fmt]):
        j = rng.randrange(header_end, len(lines) - 1) if rng.random() < 0.8 else \
            rng.randrange(0, len(lines) - 1)
        bad = mutate(lines[j], rng, newline_ok=False).replace(b"\n", b" ")
        data = b"\n".join(lines[:j] + [bad] + lines[j + 1:])
        p = _write(tmp_path / ("c%d.%s" % (case, fmt)), data)
        with time_box("%s reader" % fmt):
            try:
                items = list(iter_bow_documents(p, fmt, V))
            except InputError as e:
                assert os.path.basename(p) in str(e), e
                assert j < header_end or fmt == "mm" and bad.startswith(b"%"), (case, j, e)
                count(fmt)
                continue
        good = [it for it in items if not isinstance(it, DeadLetter)]
        for it in items:
            if isinstance(it, DeadLetter):
                check_dead(it, p)
            else:
                doc_id, w, c = it
                assert len(w) == len(c) and (not len(w) or (w.min() >= 0 and w.max() < V))
                assert not len(c) or c.min() > 0
        if j >= header_end and fmt == "ldac":
            # one document per line: all the others are kept
            assert len(good) >= n_docs - 1, (case, j, bad[:60])
        elif j >= header_end:
            # a triple line belongs to one document (two if it moved it): the rest is kept
            assert len(good) >= n_docs - 2, (case, j, bad[:60], len(good))
        count(fmt)


# ----------------------------------------------------------------------------- shards
def test_fuzz_shards(tmp_path):
    rng = random.Random(SEED + 4)
    b = DocBatch.from_rows([([1, 5, 9], [1, 2, 3]), ([0, 2], [4, 1])] * 20,
                           doc_ids=["d%d" % i for i in range(40)])
    good = str(tmp_path / "good.parquet")
    dataset.write_shard(good, dataset.docbatch_to_table(b), "a" * 64)
    raw = open(good, "rb").read()
    for case in range(CASES["shards"]):
        p = _write(tmp_path / ("part-%05d.parquet" % case), mutate(raw, rng))
        with time_box("shard reader"):
            try:
                out = DocBatch.concat(list(dataset.iter_shard_batches([p])))
            except (ValueError, OSError) as e:       # pyarrow's errors are ValueError/OSError
                assert str(e), e
                count("shards")
                continue
        assert out.n_docs <= 40
        count("shards")


# ----------------------------------------------------------------------------- model files
@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from lda_core.algorithms.online_vb import OnlineVB
    d = str(tmp_path_factory.mktemp("fuzzmodel") / "m")
    store = CheckpointStore(d)
    m = OnlineVB(3, 20, seed=1, corpus_size=8)
    batch = DocBatch.from_rows([([1, 4, 7], [1, 1, 2]), ([0, 19], [3, 1])] * 2)
    for _ in range(3):
        m.global_step(m.local_step(batch))
        store.publish(m.to_state())
    return d


def _copy_model(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


def test_fuzz_state_json(tmp_path, model):
    rng = random.Random(SEED + 5)
    newest = CheckpointStore(model).list_checkpoints()[-1]
    raw = open(os.path.join(newest.path, "state.json"), "rb").read()
    for case in range(CASES["state"]):
        d = _copy_model(model, str(tmp_path / ("m%d" % case)))
        ck = CheckpointStore(d, check_algorithm=True)
        path = ck.list_checkpoints()[-1].path
        _write(os.path.join(path, "state.json"), mutate(raw, rng))
        with time_box("state.json"):
            try:
                TopicState.load(path)
            except StateFormatError as e:
                assert path in str(e) or "state.json" in str(e), e
            st = ck.latest()           # newest if still valid, else the previous one
        assert st is not None and st.step in (2, 3)
        count("state")


def test_fuzz_latest_pointer(tmp_path, model):
    rng = random.Random(SEED + 6)
    for case in range(CASES["latest"]):
        d = _copy_model(model, str(tmp_path / ("m%d" % case)))
        p = os.path.join(d, "checkpoints", "LATEST")
        _write(p, mutate(open(p, "rb").read(), rng))
        with time_box("LATEST"):
            try:
                st = CheckpointStore(d).latest()
            except StateFormatError as e:
                assert d in str(e), e
                count("latest")
                continue
        assert st is not None and st.step <= 3
        count("latest")


def test_fuzz_run_log(tmp_path):
    rng = random.Random(SEED + 7)
    recs = [{"event": "start", "algorithm": "online-vb"}] + [
        {"event": "step", "step": i, "rho": 0.5 / i, "metrics": {"x": [1, 2]}}
        for i in range(1, 20)] + [{"event": "end", "step": 19}]
    lines = [json.dumps(r, sort_keys=True).encode() for r in recs]
    for case in range(CASES["runlog"]):
        j = rng.randrange(len(lines))
        bad = mutate(lines[j], rng, newline_ok=False).replace(b"\n", b" ")
        p = _write(tmp_path / ("log%d.jsonl" % case), b"\n".join(lines[:j] + [bad]
                                                                 + lines[j + 1:]) + b"\n")
        damaged = []
        with time_box("run log"):
            got = list(iter_run_log(p, damaged=damaged))
        others = [r for i, r in enumerate(recs) if i != j]
        assert [r for r in got if r in others] == others, case
        assert len(got) + len(damaged) == len(recs), case
        count("runlog")


# ----------------------------------------------------------------------------- stream messages
def test_fuzz_stream_messages():
    from pipelines.streaming.stream_parse import ParseConfig, parse_document
    rng = random.Random(SEED + 8)
    texts = _real_texts(10)
    words = sorted({w for t in texts for w in t.lower().split() if w.isalpha()})[:500]
    index = {w: i for i, w in enumerate(words)}
    cfg = ParseConfig(vocab_path=None, n_words=len(words))
    msgs = [json.dumps({"doc_id": "t%d" % i, "text": t}).encode() for i, t in enumerate(texts)]
    msgs += [json.dumps({"doc_id": "b%d" % i, "word_ids": [1, 5, 9 + i], "counts": [1, 2, 3]})
             .encode() for i in range(10)]
    for case in range(CASES["stream"]):
        raw = mutate(msgs[case % len(msgs)], rng)
        with time_box("parse_document"):
            doc, dead, oov = parse_document(raw, index, cfg)
        assert (doc is None) != (dead is None), (case, raw[:80])
        if dead is not None:
            assert dead["error"] and dead["source"], dead
        else:
            w = np.frombuffer(doc[1], np.int32)
            assert len(w) and w.min() >= 0 and w.max() < len(words)
            assert np.all(np.diff(w) > 0)
        count("stream")


def test_fuzz_case_count():
    """Runs last in this module: the cases fuzzed (at least 1,000 in a full run)."""
    total = sum(RUN.values())
    print("fuzzed %d cases: %s" % (total, json.dumps(RUN, sort_keys=True)))
    if len(RUN) == len(CASES):
        assert total >= 1000, RUN
