"""Exactly once across restarts of ``ldabeam stream``: what a window applied is recorded in its
checkpoint (``info["stream"]``), so a restarted directory driver continues after the files and
offsets applied, a retried window is skipped (also with ``--keep-checkpoints 1``) and a
redelivered document is not trained twice. Real data: the first KOS documents."""
import json

import numpy as np
import pytest

from lda_core.storage.checkpoint import CheckpointStore
from lda_core.algorithms.online_vb import OnlineVB
from pipelines.ingest import dataset
from lda_core.storage.vocab_file import Vocabulary
from pipelines.streaming import stream, stream_parse
from pipelines.streaming.stream_step import MAX_DOC_IDS, ApplyGlobalStepFn, next_record
from helpers.streams import Cell, run_file_route
from helpers.uci import read_kos

K = 6


@pytest.fixture(scope="module")
def kos(kos_paths):
    batch, tokens = read_kos(kos_paths[0], kos_paths[1], 240)
    return batch, Vocabulary(tokens)


def _model(tmp_path, vocab, keep_last=None):
    model = str(tmp_path / "model")
    vpath = str(tmp_path / "vocab.tsv")
    vocab.write(vpath)
    algo, mv = stream.initial_checkpoint(model, topics=K, vocab_path=vpath, minibatch=50,
                                         seed=2, settings=dict(alpha=0.1, eta=0.05),
                                         keep_last=keep_last)
    return model, mv, algo


def _lines(batch, lo, hi):
    out = []
    for i in range(lo, hi):
        w, c = batch.doc(i)
        out.append(json.dumps({"doc_id": batch.doc_ids[i], "word_ids": w.tolist(),
                               "counts": c.tolist()}))
    return out


def _drive(model, mv, inbox, dead, t0, stop_after, drops):
    """run_local_directory on a fake clock from ``t0``, polling every 4 s; ``drops[poll]`` is
    called before that poll (it writes to the inbox)."""
    clock = {"t": float(t0), "n": 0}

    def sleep(dt):
        clock["t"] += dt
        clock["n"] += 1
        if clock["n"] in drops:
            drops[clock["n"]]()

    if 0 in drops:
        drops[0]()
    return stream.run_local_directory(
        str(inbox / "*.jsonl"), model, stream_parse.ParseConfig(vocab_path=mv, n_words=len(
            Vocabulary.read(mv))),
        window_seconds=10.0, poll_seconds=4.0, stop_after=stop_after, deadletter_dir=dead,
        clock=lambda: clock["t"], sleep=sleep)


def _window(batch, ids):
    """Documents ``ids`` as the stream's minibatch: in doc_id order."""
    idx = np.asarray(ids)
    return batch.take(idx[np.argsort([batch.doc_ids[i] for i in idx])])


def _reference(algo0, batch, windows):
    ref = OnlineVB.from_state(algo0.to_state())
    for ids in windows:
        ref.global_step(ref.local_step(_window(batch, ids)))
    return ref


def test_restarted_directory_driver_applies_every_document_once(tmp_path, kos):
    """Stop the driver after two files, restart it on the same inbox with one file grown and
    two new ones: every document is applied exactly once and the final state equals one
    uninterrupted run over the same windows (the in-process trainer on them, which the
    uninterrupted driver equals: test_stream). Before the position was recorded, the
    restart trained f0 and f1 again (docs_seen 340, not 240)."""
    batch, vocab = kos
    model, mv, algo0 = _model(tmp_path, vocab)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    dead = str(tmp_path / "dead")

    def write(name, lo, hi, mode="w", newline=True, extra=()):
        with open(inbox / name, mode) as f:
            f.write("\n".join(_lines(batch, lo, hi) + list(extra)) + ("\n" if newline else ""))

    # run 1: f0 at t=1000, f1 at t=1004; stopped at t=1008 (the open window is applied)
    n1 = _drive(model, mv, inbox, dead, 1000.0, 8.0,
                {0: lambda: write("f0.jsonl", 0, 60, extra=["garbage"]),
                 1: lambda: write("f1.jsonl", 60, 100)})
    assert n1 == 1
    st = CheckpointStore(model).latest()
    assert st.docs_seen == 100
    rec = st.info["stream"]
    assert rec["files"] == {str(inbox / "f0.jsonl"): (inbox / "f0.jsonl").stat().st_size,
                            str(inbox / "f1.jsonl"): (inbox / "f1.jsonl").stat().st_size}
    assert len(rec["doc_ids"]) == 100 and len(rec["windows"]) == 1
    # run 2, same inbox: f1 grows by 30 documents, f2 arrives, f3 (no final newline) later
    write("f1.jsonl", 100, 130, mode="a")
    n2 = _drive(model, mv, inbox, dead, 1020.0, 12.0,
                {0: lambda: write("f2.jsonl", 130, 200),
                 3: lambda: write("f3.jsonl", 200, 240, newline=False)})
    assert n2 == 2
    # run 3: nothing new -- nothing applied
    assert _drive(model, mv, inbox, dead, 1050.0, 8.0, {}) == 0
    got = OnlineVB.from_state(CheckpointStore(model).latest())
    ref = _reference(algo0, batch, [range(0, 100), range(100, 200), range(200, 240)])
    assert got.step == ref.step == 3 and got.docs_seen == ref.docs_seen == 240
    np.testing.assert_array_equal(got.lambda_(), ref.lambda_())
    # the garbage line of f0 was a dead letter once
    letters = [json.loads(l) for f in (tmp_path / "dead").iterdir()
               for l in f.read_text().splitlines()]
    assert [d["snippet"] for d in letters] == ["garbage"]


def test_restart_inside_the_last_applied_window_opens_the_next_one(tmp_path, kos):
    """A run stopped inside a window applies it; a restart before that window's end puts new
    documents in the next window (their window would otherwise repeat an applied window's
    end) and loses none."""
    batch, vocab = kos
    model, mv, algo0 = _model(tmp_path, vocab)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    dead = str(tmp_path / "dead")
    (inbox / "a.jsonl").write_text("\n".join(_lines(batch, 0, 50)) + "\n")
    assert _drive(model, mv, inbox, dead, 1000.0, 4.0, {}) == 1     # window [1000, 1010)
    (inbox / "b.jsonl").write_text("\n".join(_lines(batch, 50, 90)) + "\n")
    assert _drive(model, mv, inbox, dead, 1005.0, 4.0, {}) == 1     # still before 1010
    st = CheckpointStore(model).latest()
    assert st.docs_seen == 90
    assert st.info["stream"]["window_end_micros"] == 1020 * 10 ** 6 - 1
    ref = _reference(algo0, batch, [range(0, 50), range(50, 90)])
    np.testing.assert_array_equal(OnlineVB.from_state(st).lambda_(), ref.lambda_())


def test_retried_window_is_not_applied_twice_with_keep_checkpoints_1(tmp_path, kos):
    """A bundle that published step 1 and failed before its Beam state was committed is
    retried with the state still saying step 0 -- pruned by --keep-checkpoints 1. The retry
    (here on a new worker: the record is read from the checkpoint) continues from step 1 and
    skips the window; a later window holding redelivered documents applies only the new ones.
    Before, the retry needed the pruned step 0 (FileNotFoundError) or, with it kept, published
    the window twice."""
    batch, vocab = kos
    model, mv, algo0 = _model(tmp_path, vocab, keep_last=1)
    mb1, mb2 = _window(batch, range(0, 60)), _window(batch, range(40, 120))
    fn = ApplyGlobalStepFn(model, keep_last=1)
    fn.setup()
    out = list(fn.on_flush(buffer=Cell([(10, mb1, algo0.local_step(mb1), 0)]),
                           applied=Cell(None), ts=_ts(10)))
    assert [r["step"] for r in out] == [1]
    assert [c.step for c in CheckpointStore(model).list_checkpoints()] == [1]
    retry = ApplyGlobalStepFn(model, keep_last=1)
    retry.setup()
    applied = Cell(0)                            # the failed bundle's state was not committed
    out = list(retry.on_flush(buffer=Cell([(10, mb1, algo0.local_step(mb1), 0)]),
                              applied=applied, ts=_ts(10)))
    assert out == [] and CheckpointStore(model).pointer() == 1
    # documents 40..59 redelivered into the next window: only 60..119 are new
    out = list(retry.on_flush(buffer=Cell([(20, mb2, None, None)]), applied=applied,
                              ts=_ts(20)))
    assert [(r["step"], r["docs"]) for r in out] == [(2, 60)] and applied.v == 2
    ref = _reference(algo0, batch, [range(0, 60), range(60, 120)])
    st = CheckpointStore(model).latest()
    got = OnlineVB.from_state(st)
    assert got.docs_seen == ref.docs_seen == 120
    np.testing.assert_array_equal(got.lambda_(), ref.lambda_())
    assert [w[1] for w in st.info["stream"]["windows"]] == [60, 80]


def _ts(micros):
    from apache_beam.utils.timestamp import Timestamp
    return Timestamp(micros=micros)


def test_applied_record_is_bounded():
    rec = {}
    for w in range(3):
        rec = next_record(rec, w, ["d%d-%d" % (w, i) for i in range(MAX_DOC_IDS // 2 + 7)],
                          ["d%d-%d" % (w, i) for i in range(MAX_DOC_IDS // 2 + 7)],
                          files={"f": w})
    assert len(rec["doc_ids"]) == MAX_DOC_IDS and rec["doc_ids"][-1] == "d2-%d" % (
        MAX_DOC_IDS // 2 + 6)
    assert [w[0] for w in rec["windows"]] == [0, 1, 2] and rec["files"] == {"f": 2}
    assert next_record(rec, 3, [], [])["files"] == {"f": 2}         # carried forward
    json.dumps(rec)                                                 # state.json-able


def test_restarted_match_continuously_job_reads_each_file_after_its_applied_offset(
        tmp_path, kos, monkeypatch):
    """A new job of the MatchContinuously route lists the whole inbox again. Each document
    carries (file, end of its line) and the checkpoint records the bytes of each file
    applied; the new job reads every file from there, so nothing is applied twice however
    many documents the inbox holds -- here more than the doc ids the checkpoint keeps
    (MAX_DOC_IDS scaled down to 20). Before, the restart trained the 80 documents of a and b
    beyond the last 20 ids again (docs_seen 280, not 200) and dead-lettered "nope" again."""
    import os
    from pipelines.streaming import stream_step
    monkeypatch.setattr(stream_step, "MAX_DOC_IDS", 20)
    batch, vocab = kos
    model, mv, algo0 = _model(tmp_path, vocab)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    dead = str(tmp_path / "dead")
    (inbox / "a.jsonl").write_text("\n".join(_lines(batch, 0, 30) + ["nope"]
                                             + _lines(batch, 30, 60)) + "\n")
    (inbox / "b.jsonl").write_text("\n".join(_lines(batch, 60, 100)) + "\n")
    run_file_route(model, inbox, dead)
    st = CheckpointStore(model).latest()
    assert st.step == 1 and st.docs_seen == 100
    assert st.info["stream"]["files"] == {str(inbox / f): (inbox / f).stat().st_size
                                          for f in ("a.jsonl", "b.jsonl")}
    # the second job: b grew, c arrived
    with open(inbox / "b.jsonl", "a") as f:
        f.write("\n".join(_lines(batch, 100, 130)) + "\n")
    (inbox / "c.jsonl").write_text("\n".join(_lines(batch, 130, 200)) + "\n")
    run_file_route(model, inbox, dead)
    # a third job: nothing new, nothing applied
    run_file_route(model, inbox, dead)
    st = CheckpointStore(model).latest()
    got = OnlineVB.from_state(st)
    ref = _reference(algo0, batch, [range(0, 100), range(100, 200)])
    assert got.step == ref.step == 2 and got.docs_seen == ref.docs_seen == 200
    np.testing.assert_array_equal(got.lambda_(), ref.lambda_())
    assert st.info["stream"]["files"] == {str(inbox / f): (inbox / f).stat().st_size
                                          for f in ("a.jsonl", "b.jsonl", "c.jsonl")}
    letters = [json.loads(l) for root, _, files in os.walk(dead) for f in files
               if not f.startswith(".") for l in open(os.path.join(root, f))]
    assert [d["snippet"] for d in letters] == ["nope"]


def test_window_result_carries_the_files_read(kos):
    """The buffered window result keeps the positions its documents were read to (data-only
    coder), and the record advances each file to the furthest position applied."""
    from pipelines.streaming.stream_step import WindowResultCoder
    batch, _ = kos
    mb = _window(batch, range(0, 5))
    c = WindowResultCoder()
    got = c.decode(c.encode((7, mb, None, None, {"/in/a.jsonl": 120})))
    assert got[0] == 7 and got[4] == {"/in/a.jsonl": 120}
    assert got[1].doc_ids == mb.doc_ids
    rec = next_record({"files": {"/in/a.jsonl": 200, "/in/b.jsonl": 5}}, 7, [], [],
                      read={"/in/a.jsonl": 120, "/in/c.jsonl": 9})
    assert rec["files"] == {"/in/a.jsonl": 200, "/in/b.jsonl": 5, "/in/c.jsonl": 9}
    assert stream_parse.files_read([("d1", b"", b"", "/f", 10), ("d2", b"", b"", "/f", 30),
                              ("d3", b"", b"")]) == {"/f": 30}
