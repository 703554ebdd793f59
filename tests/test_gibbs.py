"""Collapsed Gibbs: the conditional against the formula, the count invariant after every sweep,
planted-topic recovery, AD-LDA determinism, exact resume."""
import numpy as np
import pytest

from lda_core.algorithms import gibbs_kernel as gk
from lda_core.docbatch import DocBatch
from lda_core.algorithms.gibbs import CollapsedGibbs, infer_theta

from helpers.planted import planted_counts as planted_corpus, recovered


def test_conditional_hand_computed():
    # K=2, V=3, eta=0.5, alpha=1: word w has n_wk = (2, 0), n_k = (3, 1), document n_dk = (1, 2)
    # p_k ∝ (n_wk+η)/(n_k+Vη)·(n_dk+α) = (2.5/4.5)·2, (0.5/2.5)·3 = 1.1111, 0.6
    p = gk.conditional(np.array([2, 0], np.int32), np.array([3, 1], np.int64),
                       np.array([1, 2], np.int32), 1.0, 0.5, 1.5)
    want = np.array([2.5 / 4.5 * 2, 0.5 / 2.5 * 3])
    np.testing.assert_allclose(p, want / want.sum(), rtol=1e-12)


def test_bucket_sampler_matches_conditional():
    """The SparseLDA bucket draw (β·c_k + n_wk·c_k) has the conditional as its distribution."""
    from numba import njit

    @njit
    def draws(row, c, beta, n):
        s = np.uint64(5)
        h = np.zeros(len(c))
        for _ in range(n):
            s, u = gk.rng_uniform(s)
            h[gk._draw_bucket(row, c, c.sum(), beta, u, len(c))] += 1
        return h / n

    row = np.array([3, 0, 1, 5, 0], np.int32)
    nk = np.array([10, 4, 6, 9, 2], np.int64)
    ndk = np.array([1, 0, 2, 0, 3], np.int32)
    alpha, beta, vbeta = 0.1, 0.01, 0.3
    c = (ndk + alpha) / (nk + vbeta)
    want = gk.conditional(row, nk, ndk, alpha, beta, vbeta)
    got = draws(row, c, beta, 400000)
    np.testing.assert_allclose(got, want, atol=4e-3)


@pytest.mark.parametrize("n_parts", [1, 2])
def test_counts_consistent_after_every_sweep_and_topics_recovered(n_parts):
    batch, phi = planted_corpus()
    g = CollapsedGibbs(4, phi.shape[1], alpha=0.1, eta=0.01, burn_in=20, n_parts=n_parts,
                       seed=1)
    g.process(batch)
    g.check_invariants()
    for _ in range(60):
        g.sweep(1)
        g.check_invariants()          # n_kw, n_k, n_dk are the counts of z after every sweep
    assert g.n_kept == 40
    assert recovered(g.topic_word(), phi) > 0.95
    np.testing.assert_allclose(g.topic_word().sum(1), 1.0)
    np.testing.assert_allclose(g.doc_topic().sum(1), 1.0)
    theta = g.infer(batch.take(np.arange(10)))
    assert theta.shape == (10, 4)
    np.testing.assert_allclose(theta.sum(1), 1.0)


def test_invariant_check_detects_corruption():
    batch, phi = planted_corpus(n_docs=20)
    g = CollapsedGibbs(4, phi.shape[1], seed=0)
    g.process(batch)
    g.nwk[0, 0] += 1
    with pytest.raises(RuntimeError, match="n_kw"):
        g.check_invariants()


def test_adlda_deterministic_and_single_part_is_sequential():
    batch, phi = planted_corpus(n_docs=120, seed=3)
    runs = []
    for _ in range(2):
        g = CollapsedGibbs(4, phi.shape[1], n_parts=2, seed=9)
        g.fit(batch, sweeps=5)
        runs.append(g.assignments.copy())
    np.testing.assert_array_equal(runs[0], runs[1])
    g1 = CollapsedGibbs(4, phi.shape[1], n_parts=1, seed=9).fit(batch, sweeps=5)
    g1b = CollapsedGibbs(4, phi.shape[1], n_parts=1, seed=9).fit(batch, sweeps=5)
    np.testing.assert_array_equal(g1.assignments, g1b.assignments)


def test_resume_exact(tmp_path):
    from lda_core.storage.state import TopicState
    batch, phi = planted_corpus(n_docs=100, seed=4)
    a = CollapsedGibbs(4, phi.shape[1], burn_in=3, n_parts=2, seed=5).fit(batch, sweeps=6)
    a.to_state().save(str(tmp_path / "s"))
    a.sweep(4)
    b = CollapsedGibbs.from_state(TopicState.load(str(tmp_path / "s")))
    b.sweep(4)
    np.testing.assert_array_equal(a.assignments, b.assignments)
    np.testing.assert_array_equal(a.topic_word(), b.topic_word())
    b.check_invariants()


def test_default_burn_in_discards_the_early_sweeps():
    """The chain starts from random assignments: by default the first 50 sweeps are not
    averaged into φ (before that φ is the current sample's); afterwards φ is the mean of the
    kept sweeps' estimates."""
    from lda_core.algorithms.gibbs import DEFAULT_BURN_IN, phi_from_counts
    batch, phi = planted_corpus(n_docs=60, seed=14)
    g = CollapsedGibbs(4, phi.shape[1], alpha=0.1, eta=0.01, seed=2)
    assert g.burn_in == DEFAULT_BURN_IN == 50
    g.fit(batch, sweeps=DEFAULT_BURN_IN)
    assert g.n_kept == 0 and g.phi_sum is None
    np.testing.assert_array_equal(g.topic_word(), phi_from_counts(g.nwk, g.nk, g.eta))
    kept = []
    for _ in range(3):
        g.sweep(1)
        kept.append(phi_from_counts(g.nwk, g.nk, g.eta))
    assert g.n_kept == 3
    np.testing.assert_allclose(g.topic_word(), sum(kept) / 3, rtol=1e-12)
    assert CollapsedGibbs(4, 10, burn_in=0).burn_in == 0      # still configurable
    with pytest.raises(ValueError, match=r"burn_in must be an integer in \[0, "):
        CollapsedGibbs(4, 10, burn_in=-1)


def test_parameter_errors():
    with pytest.raises(ValueError, match="alpha"):
        CollapsedGibbs(3, 10, alpha=0)
    with pytest.raises(ValueError, match="n_topics"):
        CollapsedGibbs(0, 10)
    with pytest.raises(ValueError, match="init"):
        CollapsedGibbs(3, 10, init="kmeans")
    g = CollapsedGibbs(3, 10)
    with pytest.raises(ValueError, match="word ids"):
        g.process(DocBatch.from_rows([([12], [1])]))


def test_infer_theta_fixed_point_on_pure_topic_document():
    phi = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]]) + 1e-9
    phi /= phi.sum(1, keepdims=True)
    b = DocBatch.from_rows([([0, 1], [5, 5]), ([2, 3], [3, 3])])
    th = infer_theta(b, phi, alpha=0.01)
    assert th[0, 0] > 0.99 and th[1, 1] > 0.99
