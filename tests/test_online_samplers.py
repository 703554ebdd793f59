"""o-LDA and incremental Gibbs: planted-topic recovery, the batch prefix, rejuvenation keeps the
counts consistent, exact checkpoint/resume, parameter checks."""
import numpy as np
import pytest

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.algorithms.gibbs import CollapsedGibbs
from lda_core.algorithms.online_samplers import OLDA, IncrementalGibbs

from helpers.planted import planted_counts as planted_corpus, recovered


def test_registry_names():
    assert algorithm_class("o-lda") is OLDA
    assert algorithm_class("incremental-gibbs") is IncrementalGibbs
    assert algorithm_class("gibbs") is CollapsedGibbs
    from lda_core.algorithms.particle_filter import ParticleFilter
    assert algorithm_class("particle-filter") is ParticleFilter


@pytest.mark.parametrize("cls", [OLDA, IncrementalGibbs])
def test_recovers_planted_topics_from_a_prefix(cls):
    batch, phi = planted_corpus(n_docs=400, seed=21)
    K, V = phi.shape
    s = cls(K, V, alpha=0.1, eta=0.1, init_docs=40, init_sweeps=50, seed=1)
    for a in range(0, 400, 64):                 # the prefix spans several batches
        s.process(batch.take(np.arange(a, min(a + 64, 400))))
    assert s.docs_seen == 400
    s.check_invariants()
    assert recovered(s.topic_word(), phi) > 0.95
    assert s.doc_topic_counts().shape == (400, K)


def test_incremental_without_prefix_and_decayed_schedule():
    batch, phi = planted_corpus(n_docs=300, seed=2)
    K, V = phi.shape
    for schedule in ("uniform", "decay"):
        s = IncrementalGibbs(K, V, alpha=0.1, eta=0.1, n_rejuv=10, schedule=schedule,
                             decay_scale=200, seed=4)
        assert s.init_docs == 0
        s.process(batch)
        s.check_invariants()
        assert recovered(s.topic_word(), phi) > 0.9


def test_rejuvenation_changes_earlier_assignments():
    batch, phi = planted_corpus(n_docs=100, seed=6)
    K, V = phi.shape
    a = OLDA(K, V, init_docs=10, init_sweeps=5, seed=0)
    b = IncrementalGibbs(K, V, init_docs=10, init_sweeps=5, n_rejuv=4, seed=0)
    a.process(batch.take(np.arange(50)))
    b.process(batch.take(np.arange(50)))
    z_a, z_b_before = a.assignments.copy(), b.assignments.copy()
    a.process(batch.take(np.arange(50, 100)))
    b.process(batch.take(np.arange(50, 100)))
    n = len(z_a)
    np.testing.assert_array_equal(a.assignments[:n], z_a)        # o-LDA never revisits
    assert np.any(b.assignments[:n] != z_b_before)                # incremental Gibbs does


def test_shared_initial_sample():
    batch, phi = planted_corpus(n_docs=120, seed=9)
    K, V = phi.shape
    init = batch.take(np.arange(12))
    g = CollapsedGibbs(K, V, alpha=0.1, eta=0.1, seed=3).fit(init, sweeps=10)
    o = OLDA(K, V, init_docs=12, seed=3)
    o.initialise(init, g.assignments)
    np.testing.assert_array_equal(o.nwk, g.nwk)
    o.process(batch.take(np.arange(12, 120)))
    o.check_invariants()
    with pytest.raises(ValueError, match="before"):
        o.initialise(init, g.assignments)


@pytest.mark.parametrize("cls", [OLDA, IncrementalGibbs])
def test_checkpoint_resume_exact(tmp_path, cls):
    from lda_core.storage.state import TopicState
    batch, phi = planted_corpus(n_docs=160, seed=13)
    K, V = phi.shape
    a = cls(K, V, init_docs=16, init_sweeps=5, seed=7)
    a.process(batch.take(np.arange(0, 70)))
    a.to_state().save(str(tmp_path / "ck"))
    a.process(batch.take(np.arange(70, 160)))
    b = cls.from_state(TopicState.load(str(tmp_path / "ck")))
    assert b.docs_seen == 70
    b.process(batch.take(np.arange(70, 160)))
    np.testing.assert_array_equal(a.assignments, b.assignments)
    np.testing.assert_array_equal(a.topic_word(), b.topic_word())
    assert a.rng[0] == b.rng[0]


def test_parameter_errors():
    with pytest.raises(ValueError, match="init_docs"):
        OLDA(3, 10)                                   # o-LDA needs its prefix size
    assert OLDA(3, 10, n_docs_total=95).init_docs == 10   # default 10% of the stream
    with pytest.raises(ValueError, match="n_rejuv"):
        OLDA(3, 10, init_docs=5, n_rejuv=3)
    with pytest.raises(ValueError, match="schedule"):
        IncrementalGibbs(3, 10, schedule="linear")
    with pytest.raises(ValueError, match="eta"):
        IncrementalGibbs(3, 10, eta=-1.0)


@pytest.mark.parametrize("cls", [OLDA, IncrementalGibbs])
def test_checkpoint_inside_the_batch_prefix(tmp_path, cls):
    """A checkpoint taken while the prefix is buffered holds the buffered documents; the
    resumed sampler runs the batch phase on the same prefix and ends identical."""
    from lda_core.storage.state import TopicState
    batch, phi = planted_corpus(n_docs=120, seed=17)
    K, V = phi.shape
    a = cls(K, V, init_docs=30, init_sweeps=5, seed=2)
    a.process(batch.take(np.arange(0, 12)))
    a.process(batch.take(np.arange(12, 20)))
    st = a.to_state()
    assert st.info["initialised"] is False and st.docs_seen == 20
    assert st.arrays["prefix_indptr"].shape == (21,) and len(st.arrays["z"]) == 0
    st.save(str(tmp_path / "ck"))
    b = cls.from_state(TopicState.load(str(tmp_path / "ck")))
    assert b.docs_seen == 20 and not b.initialised
    for x in (a, b):
        x.process(batch.take(np.arange(20, 50)))      # completes the prefix, then streams
        x.process(batch.take(np.arange(50, 120)))
    np.testing.assert_array_equal(a.assignments, b.assignments)
    sa, sb = a.to_state(), b.to_state()
    sa.info.pop("seconds"), sb.info.pop("seconds")
    assert sa == sb and "prefix_indptr" not in sa.arrays
    # a damaged prefix is refused, naming what is wrong
    bad = TopicState.load(str(tmp_path / "ck"))
    del bad.arrays["prefix_counts"]
    with pytest.raises(ValueError, match="part of the buffered prefix"):
        cls.from_state(bad)
    bad = TopicState.load(str(tmp_path / "ck"))
    bad.arrays["prefix_word_ids"] = bad.arrays["prefix_word_ids"] + V
    with pytest.raises(ValueError, match="out of range"):
        cls.from_state(bad)
