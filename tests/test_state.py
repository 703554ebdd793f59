"""TopicState: bit-for-bit round trip, atomic publication, precise errors for damaged states."""
import json
import os

import numpy as np
import pytest

from lda_core.storage.state import (STATE_FORMAT_VERSION, StateFormatError, TopicState,
                                    read_state_json)
from lda_core.storage.vocab_file import vocab_hash
from helpers.uci import uci_triples, uci_vocab


@pytest.fixture(scope="module")
def kos_state(kos_paths):
    """A realistic online-VB-like state from 300 KOS documents: lambda = eta + counts
    assigned to K topics by document, plus the schedule and an RNG state."""
    rows, cols, vals, _, V = uci_triples(kos_paths[0], 300)
    vocab = uci_vocab(kos_paths[1], V)
    K = 20
    rng = np.random.default_rng(7)
    topic_of_doc = rng.integers(0, K, rows.max() + 1)
    lam = np.full((K, V), 0.01)
    np.add.at(lam, (topic_of_doc[rows], cols), vals * rng.random(len(vals)))
    gen = np.random.default_rng(123)
    gen.random(17)
    return TopicState(
        algorithm="online-vb", n_topics=K, n_words=V, vocab_hash=vocab_hash(vocab),
        arrays={"lambda": lam, "lambda_f32": lam.astype(np.float32),
                "word_last_step": rng.integers(0, 50, V).astype(np.int32),
                "empty": np.zeros((0, K)), "flags": rng.random(K) > 0.5},
        params={"alpha": 0.1, "eta": 0.01, "kappa": 0.7, "tau0": 64.0, "S": 256, "D": 3430,
                "seed": 1, "nested": {"a": [1, 2.5, None, "x"]}, "third": 1.0 / 3.0},
        step=12, docs_seen=3072, rng=gen.bit_generator.state,
        info={"run": {"cmd": "ldabeam train", "unicode": "λ — é"}})


def test_round_trip_bit_for_bit(kos_state, tmp_path):
    d = str(tmp_path / "state")
    kos_state.save(d)
    assert sorted(os.listdir(d)) == ["empty.npy", "flags.npy", "lambda.npy", "lambda_f32.npy",
                                     "state.json", "word_last_step.npy"]
    back = TopicState.load(d)
    assert back == kos_state
    for k, a in kos_state.arrays.items():
        b = back.arrays[k]
        assert b.dtype == a.dtype and b.shape == a.shape
        assert b.tobytes() == a.tobytes()
        assert b.flags.c_contiguous and b.flags.writeable
    assert back.params["third"] == 1.0 / 3.0            # floats survive JSON exactly
    assert (back.step, back.docs_seen, back.vocab_hash) == (12, 3072, kos_state.vocab_hash)
    # the RNG state restores the exact stream
    g1 = np.random.default_rng()
    g1.bit_generator.state = kos_state.rng
    g2 = np.random.default_rng()
    g2.bit_generator.state = back.rng
    assert np.array_equal(g1.random(5), g2.random(5))
    meta = json.load(open(os.path.join(d, "state.json")))
    assert meta["version"] == STATE_FORMAT_VERSION
    assert meta["arrays"]["lambda"]["shape"] == [kos_state.n_topics, kos_state.n_words]
    assert meta["arrays"]["lambda_f32"]["dtype"] == "<f4"
    assert len(meta["arrays"]["lambda"]["sha256"]) == 64


def test_equality_detects_a_single_bit(kos_state, tmp_path):
    d = str(tmp_path / "s")
    kos_state.save(d)
    back = TopicState.load(d)
    back.arrays["lambda"] = back.arrays["lambda"].copy()
    back.arrays["lambda"][3, 5] = np.nextafter(back.arrays["lambda"][3, 5], 1.0)
    assert back != kos_state


def test_save_replaces_atomically_and_leaves_no_temporaries(kos_state, tmp_path):
    d = str(tmp_path / "s")
    kos_state.save(d)
    other = TopicState("online-vb", 2, 3, None, {"lambda": np.ones((2, 3))}, {}, step=1)
    other.save(d)
    assert TopicState.load(d) == other
    assert os.listdir(str(tmp_path)) == ["s"]


def test_failed_save_keeps_the_old_state_and_removes_the_temporary(kos_state, tmp_path,
                                                                   monkeypatch):
    d = str(tmp_path / "s")
    kos_state.save(d)
    import lda_core.storage.state as st
    real = st._write_npy
    calls = []

    def failing(files, path, arr):
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full (simulated)")
        return real(files, path, arr)

    monkeypatch.setattr(st, "_write_npy", failing)
    with pytest.raises(OSError, match="disk full"):
        kos_state.save(d)
    assert os.listdir(str(tmp_path)) == ["s"]
    assert TopicState.load(d) == kos_state


def test_non_json_params_fail_before_anything_is_written(tmp_path):
    s = TopicState("online-vb", 2, 3, None, {"lambda": np.ones((2, 3))},
                   {"callback": object()})
    with pytest.raises(TypeError, match="not JSON-able"):
        s.save(str(tmp_path / "s"))
    assert os.listdir(str(tmp_path)) == []


def test_object_arrays_are_refused(tmp_path):
    s = TopicState("online-vb", 2, 3, None, {"bad": np.array([{"a": 1}], dtype=object)}, {})
    with pytest.raises(ValueError, match="dtype object is not allowed"):
        s.save(str(tmp_path / "s"))


@pytest.fixture()
def saved(kos_state, tmp_path):
    d = str(tmp_path / "state")
    kos_state.save(d)
    return d


def _edit_json(d, fn):
    p = os.path.join(d, "state.json")
    meta = json.load(open(p))
    fn(meta)
    with open(p, "w") as f:
        json.dump(meta, f)


def test_truncated_npy(saved):
    p = os.path.join(saved, "lambda.npy")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size - 100)
    with pytest.raises(StateFormatError, match=r"lambda\.npy is truncated: expected \d+ bytes "
                                               r"of data for shape \(20, 6906\) <f8"):
        TopicState.load(saved)


def test_truncated_inside_the_npy_header(saved):
    p = os.path.join(saved, "flags.npy")
    with open(p, "r+b") as f:
        f.truncate(20)
    with pytest.raises(StateFormatError, match=r"flags\.npy is not a valid \.npy file"):
        TopicState.load(saved)


def test_flipped_bit_fails_the_checksum(saved):
    p = os.path.join(saved, "lambda_f32.npy")
    with open(p, "r+b") as f:
        f.seek(-7, os.SEEK_END)
        b = f.read(1)
        f.seek(-7, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x10]))
    with pytest.raises(StateFormatError, match=r"lambda_f32\.npy is corrupt: sha256 [0-9a-f]{64}"
                                               r", state\.json records [0-9a-f]{64}"):
        TopicState.load(saved)


def test_edited_sha_in_state_json(saved):
    _edit_json(saved, lambda m: m["arrays"]["flags"].update(sha256="0" * 64))
    with pytest.raises(StateFormatError, match=r"flags\.npy is corrupt.*records 0{64}"):
        TopicState.load(saved)


def test_edited_dtype_in_state_json(saved):
    _edit_json(saved, lambda m: m["arrays"]["lambda"].update(dtype="<f4"))
    with pytest.raises(StateFormatError, match=r"lambda\.npy has dtype <f8 in its header but "
                                               r"state\.json says <f4"):
        TopicState.load(saved)


def test_shape_mismatch(saved):
    _edit_json(saved, lambda m: m["arrays"]["lambda"].update(shape=[20, 6907]))
    with pytest.raises(StateFormatError, match=r"lambda\.npy has shape \(20, 6906\) in its "
                                               r"header but state\.json says \(20, 6907\)"):
        TopicState.load(saved)


def test_huge_declared_shape_is_refused_before_allocating(saved):
    # header and JSON both claim an absurd shape: the file size check refuses it before
    # np.empty is ever called with that shape
    p = os.path.join(saved, "flags.npy")
    with open(p, "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        off = f.tell()
    with open(p, "r+b") as f:
        hdr = {"descr": "<f8", "fortran_order": False, "shape": (10 ** 6, 10 ** 7)}
        import io
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, hdr)
        assert len(buf.getvalue()) == off
        f.write(buf.getvalue())
    _edit_json(saved, lambda m: m["arrays"]["flags"].update(dtype="<f8", shape=[10 ** 6, 10 ** 7]))
    with pytest.raises(StateFormatError, match=r"flags\.npy is truncated: expected "
                                               r"80000000000000 bytes"):
        TopicState.load(saved)


def test_invalid_shape_and_dtype_entries(saved):
    _edit_json(saved, lambda m: m["arrays"]["lambda"].update(shape=[20, -1]))
    with pytest.raises(StateFormatError, match=r"array 'lambda' has an invalid shape \[20, -1\]"):
        TopicState.load(saved)
    _edit_json(saved, lambda m: m["arrays"]["lambda"].update(shape=[20, 6906], dtype="|O"))
    with pytest.raises(StateFormatError, match=r"dtype object is not allowed"):
        TopicState.load(saved)


def test_pickled_npy_is_refused(saved):
    # an attacker replaces a data file by an object array (a pickle) and fixes up the JSON
    p = os.path.join(saved, "flags.npy")
    np.save(p, np.array([None, {"x": 1}], dtype=object), allow_pickle=True)
    import hashlib
    sha = hashlib.sha256(open(p, "rb").read()).hexdigest()
    _edit_json(saved, lambda m: m["arrays"]["flags"].update(sha256=sha))
    with pytest.raises(StateFormatError, match=r"flags\.npy holds Python objects"):
        TopicState.load(saved)


def test_file_name_outside_the_directory_is_refused(saved):
    _edit_json(saved, lambda m: m["arrays"]["lambda"].update(file="../lambda.npy"))
    with pytest.raises(StateFormatError, match=r"invalid file name '\.\./lambda\.npy'"):
        TopicState.load(saved)


def test_missing_npy(saved):
    os.remove(os.path.join(saved, "word_last_step.npy"))
    with pytest.raises(StateFormatError, match=r"array file word_last_step\.npy listed in "
                                               r"state\.json is missing"):
        TopicState.load(saved)


def test_missing_state_json(saved):
    os.remove(os.path.join(saved, "state.json"))
    with pytest.raises(StateFormatError, match=r"has no state\.json"):
        TopicState.load(saved)


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no topic state at"):
        TopicState.load(str(tmp_path / "nope"))


def test_wrong_version(saved):
    _edit_json(saved, lambda m: m.update(version=3))
    with pytest.raises(StateFormatError, match=r"written by format version 3, this ldabeam "
                                               r"reads versions 1 and 2"):
        TopicState.load(saved)


def test_version_is_checked_before_other_fields(saved):
    _edit_json(saved, lambda m: (m.update(version=99), m.pop("arrays")))
    with pytest.raises(StateFormatError, match="format version 99"):
        TopicState.load(saved)


def test_invalid_json_and_missing_field(saved):
    p = os.path.join(saved, "state.json")
    good = open(p).read()
    with open(p, "w") as f:
        f.write(good[: len(good) // 2])
    with pytest.raises(StateFormatError, match="is not valid JSON"):
        TopicState.load(saved)
    with open(p, "w") as f:
        f.write(good)
    _edit_json(saved, lambda m: m.pop("step"))
    with pytest.raises(StateFormatError, match="field 'step' is missing"):
        read_state_json(saved)
    _edit_json(saved, lambda m: m.update(step="12"))
    with pytest.raises(StateFormatError, match="field 'step' should be a int, got '12'"):
        read_state_json(saved)
    _edit_json(saved, lambda m: m.update(step=12, n_topics=0))
    with pytest.raises(StateFormatError, match="n_topics must be an integer >= 1, got 0"):
        TopicState.load(saved)


def test_not_a_state(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "state.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    with pytest.raises(StateFormatError, match="not an ldabeam topic state"):
        TopicState.load(str(d))


def test_validate_names_each_mismatch_with_both_values(kos_state):
    kos_state.validate("online-vb", 20, 6906, kos_state.vocab_hash)   # all match: no error
    kos_state.validate()                                              # nothing asked
    with pytest.raises(ValueError) as e:
        kos_state.validate(n_topics=100)
    assert "checkpoint has K=20, the run asks for K=100" in str(e.value)
    other = "3c4d" + "0" * 60
    with pytest.raises(ValueError) as e:
        kos_state.validate(algorithm="scvb0", n_topics=20, n_words=7000, vocab_hash=other)
    msg = str(e.value)
    assert "'online-vb'" in msg and "'scvb0'" in msg
    assert "V=6906" in msg and "V=7000" in msg
    assert ("vocabulary hash of the shards %s differs from the model's %s"
            % (other, kos_state.vocab_hash)) in msg
    assert "K=" not in msg                                            # K matched


def test_validate_without_a_recorded_hash_warns(caplog):
    s = TopicState("online-vb", 2, 3, None, {}, {})
    with caplog.at_level("WARNING"):
        s.validate(vocab_hash="ab" * 32)
    assert "records no vocabulary hash" in caplog.text


@pytest.mark.parametrize("kw, match", [
    (dict(n_topics=0), "n_topics must be an integer >= 1, got 0"),
    (dict(n_words=-5), "n_words must be an integer >= 1, got -5"),
    (dict(step=-1), "step must be an integer >= 0, got -1"),
    (dict(algorithm=""), "algorithm must be a non-empty string"),
    (dict(arrays={"../x": np.ones(2)}), r"array name '\.\./x' is not allowed"),
    (dict(vocab_hash=5), "vocab_hash must be a string or None"),
])
def test_constructor_checks(kw, match):
    base = dict(algorithm="online-vb", n_topics=2, n_words=3, vocab_hash=None,
                arrays={"lambda": np.ones((2, 3))}, params={})
    base.update(kw)
    with pytest.raises(ValueError, match=match):
        TopicState(**base)


@pytest.mark.parametrize("exchange", [True, False])
def test_replace_with_and_without_an_atomic_exchange(kos_state, tmp_path, monkeypatch, exchange):
    import lda_core.storage.files as st
    used = []
    real = st._rename_exchange

    def spy(a, b):
        used.append((a, b))
        return real(a, b) if exchange else False

    monkeypatch.setattr(st, "_rename_exchange", spy)
    d = str(tmp_path / "s")
    kos_state.save(d)
    assert used == []                                    # nothing to replace yet
    other = TopicState("online-vb", 2, 3, None, {"lambda": np.ones((2, 3))}, {}, step=1)
    other.save(d)
    assert len(used) == 1 and used[0][1] == d
    assert TopicState.load(d) == other
    assert os.listdir(str(tmp_path)) == ["s"]
