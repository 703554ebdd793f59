"""Particle filter: tree store == naive copying store for the same random stream, depth <= P,
planted-topic recovery, exact checkpoint/resume, residual resampling."""
import numpy as np
import pytest

from lda_core.algorithms import gibbs_kernel as gk
from lda_core.algorithms.particle_filter import ParticleFilter
from lda_core.algorithms.particle_tree import NaiveStore, TreeStore, slot_mapping

from helpers.planted import planted_counts as planted_corpus, recovered


def _run(store, batch, K, V, P=12, ess=6.0, n_rejuv=5, seed=3, init_docs=20, cuts=(60, 120)):
    pf = ParticleFilter(K, V, alpha=0.1, eta=0.1, n_particles=P, ess_threshold=ess,
                        n_rejuv=n_rejuv, init_docs=init_docs, init_sweeps=20, store=store,
                        seed=seed)
    edges = [0, *cuts, len(batch.doc_ids)]
    depths = []
    for a, b in zip(edges[:-1], edges[1:]):
        pf.process(batch.take(np.arange(a, b)))
        depths.append(pf.store.depth())
    return pf, depths


def test_tree_equals_naive_copying_and_depth_bounded():
    batch, phi = planted_corpus(n_docs=200, seed=5)
    K, V = phi.shape
    P = 12
    tree, depths = _run("tree", batch, K, V, P=P)
    naive, _ = _run("naive", batch, K, V, P=P)
    assert tree.n_resamples > 20          # the comparison exercised resampling
    assert tree.n_resamples == naive.n_resamples
    for p in range(P):
        np.testing.assert_array_equal(tree.store.full(p), naive.store.full(p))
    np.testing.assert_array_equal(tree.logw, naive.logw)
    np.testing.assert_array_equal(tree.nwk, naive.nwk)
    assert max(depths) <= P and tree.max_depth <= P
    # history is shared: far fewer stored entries than P full copies
    assert tree.store.n_entries() < naive.store.n_entries() / 2
    tree.check_invariants()


def test_tree_store_surgery_random_resamplings():
    """Many random resamplings with writes in between: every particle's view equals the naive
    store's, the depth stays <= P, and inactive single-child chains are merged."""
    rng = np.random.default_rng(0)
    P, K = 7, 4
    root = rng.integers(0, K, 30)
    t, n = TreeStore(P, root), NaiveStore(P, root)
    pos_n = 30
    for step in range(300):
        m = int(rng.integers(1, 6))
        zb = rng.integers(0, K, (P, m)).astype(np.int16)
        t.append(pos_n, zb)
        n.append(pos_n, zb)
        pos_n += m
        pos = rng.integers(0, pos_n, (P, 3))
        val = rng.integers(0, K, (P, 3))
        t.set(pos, val)
        n.set(pos, val)
        copies = rng.multinomial(P, rng.dirichlet(np.full(P, 0.3)))
        src = slot_mapping(copies)
        t.resample(src)
        n.resample(src)
        assert t.depth() <= P
        np.testing.assert_array_equal(t.get(pos), n.get(pos))
        # every inactive node has >= 2 children after the merge step
        leaves = set(t.leaf.tolist())
        for node in np.nonzero(t.alive)[0]:
            if node not in leaves:
                assert t.nchild[node] >= 2
    for p in range(P):
        np.testing.assert_array_equal(t.full(p), n.full(p))
    # round trip of the store's checkpoint arrays
    t2 = TreeStore.from_arrays(P, t.to_arrays())
    for p in range(P):
        np.testing.assert_array_equal(t2.full(p), t.full(p))


def test_slot_mapping_and_residual_resampling():
    src = slot_mapping(np.array([0, 3, 0, 1, 1]))
    np.testing.assert_array_equal(src, [1, 1, 1, 3, 4])
    with pytest.raises(ValueError):
        slot_mapping(np.array([1, 1]) * 2)
    logw = np.log(np.array([0.5, 0.25, 0.125, 0.125]))
    copies = gk.residual_resample(logw, np.array([1], np.uint64))
    assert copies.sum() == 4
    assert copies[0] >= 2 and copies[1] >= 1       # the deterministic floor(P w) part


def test_pf_recovers_planted_topics():
    batch, phi = planted_corpus(n_docs=300, seed=11)
    K, V = phi.shape
    pf = ParticleFilter(K, V, alpha=0.1, eta=0.1, n_particles=20, ess_threshold=5,
                        n_rejuv=10, init_docs=30, init_sweeps=50, seed=2)
    pf.process(batch)
    assert pf.n_resamples > 0
    assert recovered(pf.topic_word(), phi) > 0.9
    theta = pf.infer(batch.take(np.arange(5)))
    np.testing.assert_allclose(theta.sum(1), 1.0)


@pytest.mark.parametrize("store", ["tree", "naive"])
def test_pf_checkpoint_resume_exact(tmp_path, store):
    from lda_core.storage.state import TopicState
    batch, phi = planted_corpus(n_docs=150, seed=8)
    K, V = phi.shape
    kw = dict(alpha=0.1, eta=0.1, n_particles=10, ess_threshold=5, n_rejuv=4, init_docs=20,
              init_sweeps=10, store=store, seed=4)
    a = ParticleFilter(K, V, **kw)
    a.process(batch.take(np.arange(0, 80)))
    a.to_state().save(str(tmp_path / "ck"))
    a.process(batch.take(np.arange(80, 150)))
    b = ParticleFilter.from_state(TopicState.load(str(tmp_path / "ck")))
    assert b.docs_seen == 80
    b.process(batch.take(np.arange(80, 150)))
    np.testing.assert_array_equal(a.logw, b.logw)
    for p in range(10):
        np.testing.assert_array_equal(a.store.full(p), b.store.full(p))
    np.testing.assert_array_equal(a.topic_word(), b.topic_word())
    sa, sb = a.to_state(), b.to_state()
    sa.info.pop("seconds"), sb.info.pop("seconds")     # wall time is the only difference
    assert sa == sb


def test_pf_checkpoint_inside_the_batch_prefix(tmp_path):
    from lda_core.storage.state import TopicState
    batch, phi = planted_corpus(n_docs=100, seed=12)
    K, V = phi.shape
    kw = dict(alpha=0.1, eta=0.1, n_particles=6, ess_threshold=3, n_rejuv=3, init_docs=25,
              init_sweeps=5, seed=6)
    a = ParticleFilter(K, V, **kw)
    a.process(batch.take(np.arange(0, 10)))
    st = a.to_state()
    assert st.info["initialised"] is False and st.docs_seen == 10
    assert "prefix_indptr" in st.arrays and a.store is None
    st.save(str(tmp_path / "ck"))
    b = ParticleFilter.from_state(TopicState.load(str(tmp_path / "ck")))
    assert b.docs_seen == 10 and b.store is None
    for x in (a, b):
        x.process(batch.take(np.arange(10, 60)))
        x.process(batch.take(np.arange(60, 100)))
    sa, sb = a.to_state(), b.to_state()
    sa.info.pop("seconds"), sb.info.pop("seconds")
    assert sa == sb and "prefix_indptr" not in sa.arrays


def test_pf_parameter_errors():
    with pytest.raises(ValueError, match="ess_threshold"):
        ParticleFilter(3, 10, n_particles=10, ess_threshold=20)
    with pytest.raises(ValueError, match="store"):
        ParticleFilter(3, 10, store="list")
    with pytest.raises(ValueError, match="n_particles"):
        ParticleFilter(3, 10, n_particles=0)
