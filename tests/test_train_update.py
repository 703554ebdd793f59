"""`ldabeam train --update`: a model continued on new documents from the command line (raw
text or shards, with and without new words), and `--resume` that would run no step refused.

Data: 20 Newsgroups (../shared/data), its training posts in tar order, so the first half holds
the first ten newsgroups and the second half the other ten."""
import json
import os

import numpy as np
import pytest

import ldabeam
from pipelines.cli import main as cli
from lda_core.storage.vocab_file import Vocabulary
from helpers import warm
from helpers.news20 import completion, halves

PRUNE = ["--no-below", "3", "--no-above", "0.5", "--stopwords", "gensim"]


def jsonl(path, recs):
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    return str(path)


def vectorize(inp, out, *extra):
    assert cli(["vectorize", "--input", inp, "--output", out] + PRUNE + list(extra)) == 0
    return out


def train(ds, out, algorithm, topics, passes, minibatch):
    assert cli(["train", "--shards", ds, "--output", out, "--topics", str(topics),
                "--algorithm", algorithm, "--passes", str(passes), "--minibatch",
                str(minibatch), "--seed", "1", "--no-progress", "--heldout", "none"]) == 0
    return out


def checkpoint_state(model_dir):
    from lda_core.storage.checkpoint import CheckpointStore
    return CheckpointStore(model_dir).latest()


@pytest.fixture(scope="module")
def small(news20_tar, tmp_path_factory):
    """A small model (every 20th post, first half) and both halves as JSON lines."""
    work = tmp_path_factory.mktemp("upd")
    tr, _ = halves(news20_tar, 20)
    half = len(tr) // 2
    a = jsonl(work / "a.jsonl", tr[:half])
    b = jsonl(work / "b.jsonl", tr[half:])
    ds_a = vectorize(a, str(work / "ds-a"))
    return {"work": work, "a": a, "b": b, "ds_a": ds_a, "n_b": len(tr) - half}


def fresh_model(small, name):
    return train(small["ds_a"], str(small["work"] / name), "scvb0", 5, 1, 50)


def test_resume_with_no_step_left_is_refused(small, capsys):
    model = fresh_model(small, "resume0")
    step = checkpoint_state(model).step
    capsys.readouterr()
    rc = cli(["train", "--shards", small["ds_a"], "--output", model, "--resume", "--passes", "1",
              "--no-progress", "--heldout", "none"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "no step would run" in err and "--update" in err and "--passes" in err
    assert checkpoint_state(model).step == step


def test_update_with_shards_of_the_models_vocabulary(small, capsys):
    model = fresh_model(small, "same")
    before = ldabeam.load(model)
    ds_b = str(small["work"] / "ds-b-same")
    assert cli(["vectorize", "--input", small["b"], "--output", ds_b, "--vocab",
                os.path.join(model, "vocab.tsv")]) == 0
    capsys.readouterr()
    assert cli(["train", "--update", "--shards", ds_b, "--output", model, "--no-progress"]) == 0
    after = ldabeam.load(model)
    S = 50
    assert Vocabulary.read(os.path.join(model, "vocab.tsv")).hash == before._vocab.hash
    assert after.vocabulary == before.vocabulary
    assert after.step > before.step and after.step - before.step <= -(-small["n_b"] // S)
    assert not np.allclose(after.topic_word(), before.topic_word())
    assert after._algo.corpus_tokens > before._algo.corpus_tokens


def test_update_refuses_shards_of_another_vocabulary_without_grow_vocab(small, capsys):
    model = fresh_model(small, "other")
    step = checkpoint_state(model).step
    ds_b = vectorize(small["b"], str(small["work"] / "ds-b-own"))
    capsys.readouterr()
    rc = cli(["train", "--update", "--shards", ds_b, "--output", model, "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0
    line = [ln for ln in err if "another vocabulary" in ln]
    assert line and "--grow-vocab" in line[0] and os.path.join(model, "vocab.tsv") in line[0]
    assert checkpoint_state(model).step == step

    # with --grow-vocab the same shards are read as words and the new ones added
    assert cli(["train", "--update", "--grow-vocab", "--shards", ds_b, "--output", model,
                "--no-progress"]) == 0
    vocab = Vocabulary.read(os.path.join(model, "vocab.tsv"))
    state = checkpoint_state(model)
    assert state.step > step
    assert state.n_words == len(vocab) and state.vocab_hash == vocab.hash
    first = Vocabulary.read(os.path.join(small["ds_a"], "vocab.tsv"))
    assert vocab.tokens[:len(first)] == first.tokens and len(vocab) > len(first)


def test_grow_vocab_update_stopped_before_replacing_vocab_tsv_still_opens(small, capsys,
                                                                          monkeypatch):
    """A --grow-vocab update killed after publishing its checkpoint but before replacing
    vocab.tsv: the grown vocabulary was written first under its hash's name, so the model opens
    with it (before, vocab.tsv and the latest checkpoint disagreed and every reader refused)."""
    from lda_core.storage.vocab_file import Vocabulary
    from pipelines.runtime.model_dir import open_model
    model = fresh_model(small, "stopped")
    old_hash = Vocabulary.read(os.path.join(model, "vocab.tsv")).hash
    ds_b = vectorize(small["b"], str(small["work"] / "ds-b-stopped"))
    real_write = Vocabulary.write

    def write_then_die_before_vocab_tsv(self, path):
        if os.path.basename(path) == "vocab.tsv":
            raise KeyboardInterrupt          # the kill, between the publish and vocab.tsv
        return real_write(self, path)

    monkeypatch.setattr(Vocabulary, "write", write_then_die_before_vocab_tsv)
    assert cli(["train", "--update", "--grow-vocab", "--shards", ds_b, "--output", model,
                "--no-progress"]) == 130
    monkeypatch.setattr(Vocabulary, "write", real_write)
    capsys.readouterr()
    state = checkpoint_state(model)
    assert Vocabulary.read(os.path.join(model, "vocab.tsv")).hash == old_hash
    assert state.vocab_hash != old_hash           # the grown checkpoint is the latest
    opened = open_model(model)
    assert opened.vocab.hash == state.vocab_hash and len(opened.vocab) == state.n_words
    assert cli(["topics", "--model", model, "--top", "5"]) == 0
    # the next update replaces vocab.tsv and removes the waiting file
    assert cli(["train", "--update", "--shards", ds_b, "--output", model, "--no-progress",
                "--grow-vocab"]) == 0
    assert Vocabulary.read(os.path.join(model, "vocab.tsv")).hash == \
        checkpoint_state(model).vocab_hash
    assert not [n for n in os.listdir(model) if n.startswith("vocab-")]


def test_update_options_that_do_not_apply_are_refused(small, capsys):
    model = fresh_model(small, "opts")
    for extra, word in ((["--pieces", "3"], "--pieces"),
                        (["--topics", "7"], "--topics"),
                        (["--passes", "auto"], "--passes auto")):
        capsys.readouterr()
        rc = cli(["train", "--update", "--input", small["b"], "--output", model,
                  "--no-progress"] + extra)
        assert rc != 0 and word in capsys.readouterr().err
    for extra in (["--grow-vocab"], ["--replay", "0.5"], ["--replay-shards", small["ds_a"]]):
        capsys.readouterr()
        assert cli(["train", "--shards", small["ds_a"], "--output", model + "-x", "--topics",
                    "3"] + extra) != 0
        assert "--update" in capsys.readouterr().err
        assert not os.path.exists(model + "-x")


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["scvb0", "online-vb"])
def test_update_grow_vocab_close_to_joint_training(news20_tar, tmp_path, algorithm):
    """Acceptance: first half trained, then `train --update --grow-vocab --input` on the
    second half, within 0.02 nats/token (held-out completion) of training on both halves with
    the same passes; words only in the second half reach some topic's top 20 words."""
    every, topics, passes, minibatch = 3, 20, 2, 128
    tr, test = halves(news20_tar, every)
    half = len(tr) // 2
    a = jsonl(tmp_path / "a.jsonl", tr[:half])
    b = jsonl(tmp_path / "b.jsonl", tr[half:])
    ab = jsonl(tmp_path / "ab.jsonl", tr)
    ds_a = vectorize(a, str(tmp_path / "ds-a"))
    ds_ab = vectorize(ab, str(tmp_path / "ds-ab"))
    joint = train(ds_ab, str(tmp_path / "joint"), algorithm, topics, passes, minibatch)
    model = train(ds_a, str(tmp_path / "upd"), algorithm, topics, passes, minibatch)
    v0 = len(Vocabulary.read(os.path.join(model, "vocab.tsv")))
    assert cli(["train", "--update", "--grow-vocab", "--input", b, "--output", model,
                "--passes", str(passes), "--no-progress"]) == 0
    upd, jm = ldabeam.load(model), ldabeam.load(joint)
    added = set(upd.vocabulary[v0:])
    assert added
    both = set(upd.vocabulary) & set(jm.vocabulary)
    toks = [[t for t in jm._prep.pre.tokens(r["text"]) if t in both] for r in test]
    ids = [r["id"] for r in test]
    gap = completion(jm, toks, ids) - completion(upd, toks, ids)
    tops = {w for t in upd.top_words(20) for w, _ in t}
    print("%s: joint - updated = %.4f nats/token, %d words added, %d of them in the top 20s"
          % (algorithm, gap, len(added), len(tops & added)))
    assert gap <= 0.02
    assert tops & added


def test_update_with_raw_text_keeps_the_vocabulary_without_grow_vocab(small, capsys):
    model = fresh_model(small, "raw")
    before = ldabeam.load(model)
    capsys.readouterr()
    assert cli(["train", "--update", "--input", small["b"], "--output", model, "--passes", "2",
                "--no-progress"]) == 0
    out = capsys.readouterr().out
    after = ldabeam.load(model)
    assert after.vocabulary == before.vocabulary
    assert after.step - before.step == 2 * -(-small["n_b"] // 50)
    assert "tokens outside the vocabulary were dropped" in out and "--grow-vocab" in out
    # the update is recorded in the checkpoint, and the model still reads the same raw text
    assert checkpoint_state(model).info["updates"][-1]["passes"] == 2
    assert np.isfinite(after.transform(["hockey game on ice", "encryption keys"])).all()


def test_update_warns_when_few_new_documents_get_several_passes(small, tmp_path, caplog):
    """Issue 30, item 3: an update whose new documents are a small part of what the model has
    seen, for several passes, says in one line what the passes do not do (weigh them more;
    a subject only they hold may get no topic) and the option that does (--corpus-size);
    one that weighs them far above their share with --corpus-size says what it risks (the
    topics they do not use drift towards them). One pass, or a large part, gets no warning;
    the Python update returns the same line in its summary."""
    model = fresh_model(small, "few")
    with open(small["b"]) as f:
        recs = [json.loads(line) for line in f]
    few = jsonl(tmp_path / "few.jsonl", recs[:30])

    def warnings(*extra):
        caplog.clear()
        with caplog.at_level("WARNING", logger="ldabeam.model"):
            assert cli(["train", "--update", "--input", few, "--output", model,
                        "--no-progress"] + list(extra)) == 0
        return [r.getMessage() for r in caplog.records if r.name == "ldabeam.model"]

    seen = ldabeam.load(model)._algo.docs_seen
    lines = warnings("--passes", "3")
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert lines[0].startswith("update: the 30 new documents are %.1f%% of the %d documents"
                               % (3000.0 / (seen + 30), seen + 30)), lines
    assert "more passes do not weigh them more" in lines[0] and "--corpus-size N" in lines[0]
    assert warnings("--passes", "1") == []

    m = ldabeam.load(model)        # in memory: the updates below are not saved
    caplog.clear()
    with caplog.at_level("WARNING", logger="ldabeam.model"):
        summary = m.update(recs[:30], passes=2)
    assert summary["warnings"] == [r.getMessage() for r in caplog.records
                                   if r.name == "ldabeam.model"] and len(summary["warnings"]) == 1
    # the whole second half is a large part of what the model stands for: no warning
    assert m.update(recs, passes=2)["warnings"] == []

    lines = warnings("--passes", "2", "--corpus-size", "30")
    assert len(lines) == 1 and "weighs the 30 new documents 100.0% of the topics" in lines[0]
    assert "drift towards theirs" in lines[0] and "--corpus-size" in lines[0]


# ------------------------------------------------------------------ on a Beam runner

def _same_state(a, b):
    assert a.step == b.step and a.n_words == b.n_words and a.vocab_hash == b.vocab_hash
    assert sorted(a.arrays) == sorted(b.arrays)
    for name in a.arrays:
        assert a.arrays[name].tobytes() == b.arrays[name].tobytes(), name


def _copy_model(src, dst):
    import shutil
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("lease.json*"))
    return str(dst)


@pytest.mark.parametrize("algorithm,grow,replay", [("scvb0", False, None), ("scvb0", True, None),
                                                   ("online-vb", True, None),
                                                   ("online-vb", True, "0.3")])
def test_update_on_direct_runner_equals_the_inprocess_update(small, capsys, algorithm, grow,
                                                             replay):
    """`train --update --runner DirectRunner` trains through the Beam trainer and ends with the
    in-process update's state bit for bit (same documents, vocabulary, steps), with and
    without --grow-vocab and --replay; nothing of the scratch run is left in the model
    directory."""
    name = "beam-%s-%s-%s" % (algorithm, grow, replay)
    base = train(small["ds_a"], str(small["work"] / name), algorithm, 5, 1, 50)
    ref = _copy_model(base, small["work"] / (name + "-ref"))
    extra = (["--grow-vocab"] if grow else []) + (["--replay", replay] if replay else [])
    capsys.readouterr()
    assert cli(["train", "--update", "--input", small["b"], "--output", ref, "--passes", "2",
                "--no-progress"] + extra) == 0
    assert cli(["train", "--update", "--input", small["b"], "--output", base, "--passes", "2",
                "--no-progress", "--runner", "DirectRunner"] + extra) == 0
    out = capsys.readouterr().out
    a, b = checkpoint_state(ref), checkpoint_state(base)
    _same_state(a, b)
    assert a.params == b.params       # online VB's float32 E-step is restored after the update
    assert ldabeam.load(base).vocabulary == ldabeam.load(ref).vocabulary
    if grow:
        assert len(ldabeam.load(base).vocabulary) > len(
            Vocabulary.read(os.path.join(small["ds_a"], "vocab.tsv")))
    ua, ub = a.info["updates"][-1], b.info["updates"][-1]
    keys = ("documents", "tokens", "passes", "steps", "from_step", "replayed_documents")
    assert {k: ua[k] for k in keys} == {k: ub[k] for k in keys}
    assert (ua["replayed_documents"] > 0) == bool(replay)
    # the run the model was trained by is kept (--resume continues its order)
    assert a.info["run"] == b.info["run"] and a.info["trainer"] == b.info["trainer"]
    assert "updated" in out
    assert not os.path.exists(os.path.join(base, "updating"))


@pytest.fixture(scope="module")
def inprocess_reference(small):
    """The model of ``fresh_model`` updated in this process on the second half, 2 passes,
    --grow-vocab (what every Beam update below must end with)."""
    base = fresh_model(small, "crash-base")
    ref = _copy_model(base, small["work"] / "crash-ref")
    assert cli(["train", "--update", "--grow-vocab", "--input", small["b"], "--output", ref,
                "--passes", "2", "--no-progress"]) == 0
    return base, checkpoint_state(ref)


@pytest.mark.parametrize("fault", ["publish-written:2", "ended"])
def test_beam_update_killed_leaves_the_model_and_a_rerun_finishes_it(small, inprocess_reference,
                                                                     fault, caplog):
    """A Beam update SIGKILLed while its scratch run publishes its last checkpoint
    (publish-written:2; the first publish is the starting checkpoint) or after that run has
    ended (ended: trained, not yet published into MODEL_DIR): the model directory still holds
    the model as it was (the half-done update is never read as the model), and running the
    update again resumes the scratch run and ends with the in-process update's state."""
    import signal
    import subprocess
    from lda_core.faults import ENV
    base, ref = inprocess_reference
    md = _copy_model(base, small["work"] / ("crash-" + fault.replace(":", "-")))
    before = checkpoint_state(md)
    argv = ["train", "--update", "--grow-vocab", "--input", small["b"], "--output", md,
            "--passes", "2", "--no-progress", "--runner", "DirectRunner"]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo)
    env[ENV] = fault
    p = warm.run(["-m", "pipelines.cli"] + argv, cwd=repo, env=env,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    assert p.returncode == -signal.SIGKILL
    assert os.path.isdir(os.path.join(md, "updating"))      # the scratch run was under way
    after_kill = checkpoint_state(md)
    _same_state(after_kill, before)
    assert ldabeam.load(md).vocabulary == ldabeam.load(base).vocabulary
    caplog.set_level("INFO", logger="pipelines.commands.train_update")
    assert cli(argv) == 0
    assert "resuming the update stopped at step" in caplog.text
    _same_state(checkpoint_state(md), ref)
    assert not os.path.exists(os.path.join(md, "updating"))


def test_beam_update_counts_a_bad_record_as_a_dead_letter(small, capsys, tmp_path):
    """A record of --input that cannot be read (malformed JSON) is a counted dead letter on a
    Beam runner too: reported, left out, and the other documents are trained on."""
    model = fresh_model(small, "dead")
    before = checkpoint_state(model)
    bad = str(tmp_path / "b-bad.jsonl")
    with open(small["b"], "rb") as f:
        lines = f.read().splitlines(keepends=True)
    with open(bad, "wb") as f:
        f.writelines(lines[:10] + [b'{"id": "broken", "text": "no closing quote}\n'] + lines[10:])
    capsys.readouterr()
    assert cli(["train", "--update", "--input", bad, "--output", model, "--no-progress",
                "--runner", "DirectRunner"]) == 0
    out = capsys.readouterr().out
    assert "1 records could not be read" in out
    state = checkpoint_state(model)
    assert state.info["updates"][-1]["documents"] <= small["n_b"]
    assert state.step == before.step + -(-state.info["updates"][-1]["documents"] // 50)


def test_beam_update_of_a_model_on_an_object_store(store_root, kos_paths, tmp_path, capsys):
    """The Beam update of a model on an object store (the fake ``fakegs://``, with no
    renames) writes its dataset and scratch model there, ends with the state the in-process
    update of the same model on a local disk ends with, and leaves no ``updating/`` object."""
    from helpers.fake_object_store import objects_under as _objects
    from helpers.uci import kos_dataset as make_dataset
    ds = make_dataset(str(tmp_path / "kos"), kos_paths, n_train=300, n_held=60)
    fit = ["--shards", ds, "--algorithm", "online-vb", "--topics", "5", "--minibatch", "50",
           "--seed", "2", "--no-progress", "--heldout", "none"]
    local, remote = str(tmp_path / "local"), store_root + "/model"
    for md in (local, remote):
        assert cli(["train", "--output", md] + fit) == 0
    upd = ["train", "--update", "--shards", ds, "--passes", "2", "--no-progress"]
    assert cli(upd + ["--output", local]) == 0
    assert cli(upd + ["--output", remote, "--runner", "DirectRunner"]) == 0, \
        capsys.readouterr().err
    _same_state(checkpoint_state(remote), checkpoint_state(local))
    assert not any("/updating/" in o for o in _objects(remote))


def test_another_update_after_a_killed_one_starts_over(small, caplog):
    """The scratch run of a killed Beam update (2 passes) is not continued by a different
    update (1 pass): that one clears updating/ and trains its own steps from the model."""
    import signal
    import subprocess
    from lda_core.faults import ENV
    md = fresh_model(small, "other-after-kill")
    before = checkpoint_state(md)
    argv = ["train", "--update", "--input", small["b"], "--output", md, "--no-progress",
            "--runner", "DirectRunner"]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo)
    env[ENV] = "ended"
    p = warm.run(["-m", "pipelines.cli"] + argv + ["--passes", "2"],
                 cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 timeout=900)
    assert p.returncode == -signal.SIGKILL
    assert os.path.exists(os.path.join(md, "updating", "update.json"))
    caplog.set_level("INFO", logger="pipelines.commands.train_update")
    assert cli(argv + ["--passes", "1"]) == 0
    assert "resuming the update" not in caplog.text
    state = checkpoint_state(md)
    upd = state.info["updates"][-1]
    assert upd["passes"] == 1 and upd["from_step"] == before.step
    assert state.step == before.step + -(-upd["documents"] // 50)


@pytest.mark.serial
def test_update_with_beam_worker_processes_equals_the_inprocess_update(small,
                                                                      inprocess_reference):
    """The Beam update with worker processes (the multi-process DirectRunner: the E-step runs
    in other processes, which read the update's dataset and exchange states as on a remote
    runner) ends with the in-process update's state bit for bit."""
    base, ref = inprocess_reference
    md = _copy_model(base, small["work"] / "workers")
    assert cli(["train", "--update", "--grow-vocab", "--input", small["b"], "--output", md,
                "--passes", "2", "--no-progress", "--runner", "DirectRunner",
                "--direct_running_mode=multi_processing", "--direct_num_workers=2"]) == 0
    _same_state(checkpoint_state(md), ref)


def test_beam_update_stopped_by_sigterm_exits_143_and_leaves_the_model(small, capsys,
                                                                       monkeypatch, caplog):
    """SIGTERM during the Beam update's training run (the trainer stops between steps with
    TrainingInterrupted): exit code 143 as for any command, the model unchanged, and a line
    saying that running the same update again continues it."""
    from lda_core.training.session import TrainingInterrupted
    from pipelines.training import beam_train
    md = fresh_model(small, "sigterm")
    before = checkpoint_state(md)

    def stopped(self, *a, **kw):
        raise TrainingInterrupted("interrupted by SIGTERM", before.step, None, signum=15)

    monkeypatch.setattr(beam_train.BeamRunner, "run", stopped)
    capsys.readouterr()
    rc = cli(["train", "--update", "--input", small["b"], "--output", md, "--no-progress",
              "--runner", "DirectRunner"])
    assert rc == 143
    assert "run the same `ldabeam train --update` again" in caplog.text
    _same_state(checkpoint_state(md), before)


def test_update_with_replay_revisits_training_documents_seeded_and_refuses_lost_shards(
        small, capsys, tmp_path):
    """`train --update --replay F` mixes a seeded sample of F of the model's training documents
    (read from the shards its run record names) into the update's minibatches: the summary
    says how many, the steps cover them, the same update twice gives the same bits and one
    without replay another state. When the training shards are gone the update is refused in
    one line naming their path and both fixes (`--replay 0`, `--replay-shards`), the model
    unchanged; `--replay-shards` then reads them from their new place."""
    import shutil
    from helpers.cli import one_error_line
    from pipelines.ingest import dataset
    ds = str(tmp_path / "ds-a")
    shutil.copytree(small["ds_a"], ds)
    base = train(ds, str(tmp_path / "base"), "scvb0", 5, 1, 50)
    n_train = dataset.count_documents(dataset.resolve_shards(ds))
    runs = {}
    for name, extra in (("r1", ["--replay", "0.5"]), ("r2", ["--replay", "0.5"]),
                        ("plain", [])):
        model = _copy_model(base, tmp_path / name)
        capsys.readouterr()
        assert cli(["train", "--update", "--input", small["b"], "--output", model,
                    "--no-progress"] + extra) == 0
        runs[name] = (checkpoint_state(model), capsys.readouterr().out)
    state, out = runs["r1"]
    line = [ln for ln in out.splitlines() if ln.startswith("revisited ")]
    assert line, out
    replayed = int(line[0].split()[1])
    assert 0 < replayed <= round(0.5 * n_train) and "--replay 0.5" in line[0]
    assert state.info["updates"][-1]["replayed_documents"] == replayed
    S = 50
    steps = state.step - checkpoint_state(base).step
    assert steps == -(-(state.info["updates"][-1]["documents"] + replayed) // S)
    _same_state(state, runs["r2"][0])
    # the Python update draws the same sample (seeded by the model's seed and step)
    with open(small["b"]) as f:
        texts = [json.loads(ln)["text"] for ln in f]
    assert ldabeam.load(base).update(texts, replay=0.5)["replayed_documents"] == replayed
    assert not [ln for ln in runs["plain"][1].splitlines() if ln.startswith("revisited ")]
    assert runs["plain"][0].step < state.step
    plain = runs["plain"][0]
    assert any(plain.arrays[k].tobytes() != state.arrays[k].tobytes() for k in plain.arrays)

    # the training shards moved away: refused in one line, the model as it was
    moved = str(tmp_path / "moved")
    shutil.move(ds, moved)
    model = _copy_model(base, tmp_path / "lost")
    one_error_line(capsys, ["train", "--update", "--input", small["b"], "--output", model,
                            "--no-progress", "--replay", "0.5"], ds, "--replay 0",
                   "--replay-shards")
    assert checkpoint_state(model).step == checkpoint_state(base).step
    capsys.readouterr()
    assert cli(["train", "--update", "--input", small["b"], "--output", model, "--no-progress",
                "--replay", "0.5", "--replay-shards", moved]) == 0
    _same_state(checkpoint_state(model), state)
