"""The VB E-step: fast digamma, seeded γ initialisation, numba kernel vs numpy reference vs
gensim ``LdaModel.inference`` on real KOS documents."""

import numpy as np
import pytest
from scipy.special import psi

from lda_core.algorithms import estep_vb as E
from lda_core.algorithms import vb_digamma as DK
from lda_core.algorithms import vb_gamma_init as GI
from lda_core.algorithms.online_vb import OnlineVB
from helpers.uci import uci_docbatch


@pytest.fixture(scope="module")
def kos(kos_paths):
    return uci_docbatch(kos_paths[0], 300)


@pytest.fixture(scope="module")
def kos_model(kos):
    """A λ with real structure: a few online VB steps on the KOS slice (K=20)."""
    batch, V = kos
    # the paper's update alone (no re-seeding): the λ these kernel comparisons were set on
    m = OnlineVB(20, V, alpha=0.1, eta=0.05, corpus_size=300, dtype="float64", seed=3,
                 reseed=0.0)
    for i in range(0, 300, 100):
        m.global_step(m.local_step(batch.take(range(i, i + 100))))
    return m


def _inputs(m, batch, seed=0):
    uniq = np.unique(batch.word_ids)
    lids = np.searchsorted(uniq, batch.word_ids)
    g0 = GI.init_gamma(GI.doc_keys(batch.doc_ids, seed, 0), m.n_topics)
    return uniq, lids, g0


def test_digamma_matches_scipy():
    x = np.concatenate([np.logspace(-10, 12, 3000), np.linspace(0.001, 40, 4000),
                        [1.4616321449683622, 1.0, 2.0, 5.999999, 6.0, 6.000001]])
    ours, ref = DK.digamma_array(x), psi(x)
    assert np.max(np.abs(ours - ref) / np.maximum(1.0, np.abs(ref))) < 1e-12
    assert np.isnan(DK.digamma_array(np.array([0.0, -1.0, np.nan]))).all()
    # exp(ψ(x)) without a log: relative 1e-12 wherever it is a normal double
    ed, ref = DK.exp_digamma_array(x), np.exp(psi(x))
    ok = ref > 1e-290
    assert ok.sum() > 5000
    assert np.max(np.abs(ed[ok] - ref[ok]) / ref[ok]) < 1e-12
    assert np.all(ed[~ok] < 1e-280)
    out = DK.exp_digamma_array(np.array([0.0, -1.0, np.nan]))
    assert out[0] == 0 and out[1] == 0 and np.isnan(out[2])
    # the float32 E-step's versions: relative 1e-5 where float32 has normal numbers (the
    # libm one); the vectorised one in float32 arithmetic is as accurate as exp of ψ rounded
    # to float32: relative error within 5e-7 (1 + |ψ(x)|)
    ok = ref > 1e-30
    ed32 = DK.exp_digamma_array(x, 1)
    assert np.max(np.abs(ed32[ok] - ref[ok]) / ref[ok]) < 1e-5
    # (values below ~5e-30 come back as exactly 0: the E-step flushes far larger ones anyway)
    ok = ref > 1e-28
    ed32 = DK.exp_digamma_array(x, 2)
    rel = np.abs(ed32[ok] - ref[ok]) / ref[ok]
    assert np.max(rel / (1.0 + np.abs(psi(x[ok])))) < 5e-7
    assert np.max(rel[np.abs(psi(x[ok])) < 5]) < 2e-6
    assert np.all(ed32[~ok] < 1e-27)


def test_gamma_init_is_seeded_per_document():
    ids = ["a", "b", "c", "d"]
    g = GI.init_gamma(GI.doc_keys(ids, 7, 3), 10)
    # the same document gets the same draw whatever batch it is in and in whatever order
    g2 = GI.init_gamma(GI.doc_keys(["d", "b"], 7, 3), 10)
    assert np.array_equal(g2, g[[3, 1]])
    assert not np.array_equal(GI.init_gamma(GI.doc_keys(ids, 8, 3), 10), g)   # seed matters
    assert not np.array_equal(GI.init_gamma(GI.doc_keys(ids, 7, 4), 10), g)   # step matters
    big = GI.init_gamma(GI.doc_keys(["d%d" % i for i in range(3000)], 0, 0), 20)
    assert abs(big.mean() - 1.0) < 0.005 and abs(big.var() - 0.01) < 0.001   # Gamma(100, 1/100)
    assert big.min() > 0


def test_balanced_chunks_cover_all_documents():
    indptr = np.cumsum([0, 5, 1, 1, 100, 2, 2, 50, 0, 3])
    for n in (1, 2, 3, 4, 9, 20):
        b = E.balanced_chunks(indptr, n)
        assert b[0] == 0 and b[-1] == len(indptr) - 1 and np.all(np.diff(b) > 0)
        assert len(b) - 1 <= n
    assert list(E.balanced_chunks(np.zeros(1, np.int64), 4)) == [0]


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-8), ("float32", 1e-4)])
def test_numba_kernel_matches_numpy_reference(kos, kos_model, dtype, tol):
    batch, _ = kos
    batch = batch.take(range(120))
    uniq, lids, g0 = _inputs(kos_model, batch)
    eb = kos_model.exp_elog_beta(uniq).astype(dtype)
    fast = E.estep(batch.indptr, lids, batch.counts, eb, kos_model.alpha, g0, 100, 1e-3)
    ref = E.estep_reference(batch.indptr, lids, batch.counts, eb, kos_model.alpha, g0, 100, 1e-3)
    rel = lambda a, b: np.max(np.abs(a - b)) / np.max(np.abs(b))
    assert rel(fast.sstats, ref.sstats) < tol
    assert rel(fast.gamma.astype(float), ref.gamma.astype(float)) < tol
    assert rel(fast.scores, ref.scores) < tol
    assert rel(fast.sum_elogtheta, ref.sum_elogtheta) < tol
    if dtype == "float64":
        assert np.array_equal(fast.iterations, ref.iterations)
    # token mass is conserved: Σ_wk sstats = number of tokens (φ sums to one per token)
    assert abs(fast.sstats.sum() - batch.n_tokens) < 1e-3 * batch.n_tokens


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernel_result_does_not_depend_on_chunking_or_threads(kos, kos_model, dtype):
    import numba
    batch, _ = kos
    uniq, lids, g0 = _inputs(kos_model, batch)
    eb = kos_model.exp_elog_beta(uniq).astype(dtype)
    runs = []
    before = numba.get_num_threads()
    try:
        for threads, chunks in ((1, 1), (1, 5), (numba.config.NUMBA_NUM_THREADS, None),
                                (numba.config.NUMBA_NUM_THREADS, 13)):
            numba.set_num_threads(threads)
            runs.append(E.estep(batch.indptr, lids, batch.counts, eb, kos_model.alpha, g0, 100,
                                1e-3, n_chunks=chunks))
    finally:
        numba.set_num_threads(before)
    for r in runs[1:]:                     # bit for bit: statistics are summed word by word
        for f in r._fields:
            assert np.array_equal(getattr(r, f), getattr(runs[0], f)), f


def test_iteration_cap_is_counted(kos, kos_model):
    batch, _ = kos
    uniq, lids, g0 = _inputs(kos_model, batch)
    eb = kos_model.exp_elog_beta(uniq).astype("float64")
    r = E.estep(batch.indptr, lids, batch.counts, eb, kos_model.alpha, g0, 2, 1e-3)
    assert np.all(r.iterations <= 2) and np.count_nonzero(~r.converged) > 0
    r0 = E.estep(batch.indptr, lids, batch.counts, eb, kos_model.alpha, g0, 0, 1e-3)
    assert np.all(r0.iterations == 0) and np.allclose(r0.gamma, g0)   # 0 = evaluate at gamma0


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-4), ("float32", 1e-3)])
def test_estep_matches_gensim_inference(kos, kos_model, dtype, tol):
    """Same λ, same initial γ, same threshold: γ and sstats agree with gensim's E-step."""
    gensim = pytest.importorskip("gensim")
    batch, V = kos
    m = kos_model
    K = m.n_topics
    lam = m.lambda_()
    g = gensim.models.LdaModel(num_topics=K, id2word={i: str(i) for i in range(V)},
                               alpha=m.alpha.copy(), eta=m.eta, iterations=100,
                               gamma_threshold=1e-3, dtype=np.dtype(dtype))
    g.state.sstats = (lam - m.eta).astype(dtype)
    g.sync_state()
    g0 = GI.init_gamma(GI.doc_keys(batch.doc_ids, 11, 0), K)

    class FixedDraw:                      # hand gensim our initial γ
        def gamma(self, shape, scale, size):
            assert size == g0.shape
            return g0.astype(dtype)
    g.random_state = FixedDraw()
    chunk = [list(zip(*map(list, batch.doc(i)))) for i in range(batch.n_docs)]
    ggamma, gsstats = g.inference(chunk, collect_sstats=True)
    m.dtype = dtype
    try:
        st = m.local_step(batch, return_gamma=True, gamma0=g0)
    finally:
        m.dtype = "float64"
    rel = lambda a, b: np.max(np.abs(a - b)) / np.max(np.abs(b))
    assert rel(st.gamma, ggamma.astype(float)) < tol
    ours = st.to_dense().T                # K x V like gensim
    assert rel(ours, gsstats.astype(float)) < tol


def test_index_helpers_equal_numpy(kos):
    """The counting-pass index helpers give exactly np.unique/searchsorted and the stable
    argsort grouping of the non-zeros by word."""
    batch, _ = kos
    V = int(batch.max_word_id()) + 5
    uniq, lids = E.local_ids(batch.word_ids, V)
    assert np.array_equal(uniq, np.unique(batch.word_ids))
    assert np.array_equal(lids, np.searchsorted(uniq, batch.word_ids))
    wptr, wpos, wdoc = E.word_major_index(batch.indptr.astype(np.int64), lids, len(uniq))
    ref_pos = np.argsort(lids, kind="stable")
    assert np.array_equal(wpos, ref_pos)
    assert np.array_equal(wdoc, np.repeat(np.arange(batch.n_docs), np.diff(batch.indptr))[ref_pos])
    assert np.array_equal(wptr[1:], np.cumsum(np.bincount(lids, minlength=len(uniq))))
    # empty batch
    u0, l0 = E.local_ids(np.zeros(0, np.int32), V)
    assert len(u0) == 0 and len(l0) == 0


def test_estep_phase_timings_leave_the_result_unchanged(kos, kos_model):
    """``timings`` only records CPU seconds per phase (what estep_bench divides the FLOPs by)."""
    batch, _ = kos
    b = batch.take(range(40))
    uniq, lids, g0 = _inputs(kos_model, b)
    eb = kos_model.exp_elog_beta(uniq).astype("float32")
    plain = E.estep(b.indptr, lids, b.counts, eb, kos_model.alpha, g0)
    timings = {"fixed_point": 1.0}
    timed = E.estep(b.indptr, lids, b.counts, eb, kos_model.alpha, g0, timings=timings)
    assert sorted(timings) == ["bound", "fixed_point", "statistics"]
    assert timings["fixed_point"] >= 1.0 and min(timings.values()) >= 0.0   # added to
    for a, c in zip(plain, timed):
        assert np.array_equal(a, c)


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-8), ("float32", 1e-4)])
def test_kernel_matches_reference_when_documents_span_many_row_blocks(kos, dtype, tol):
    """At K = 600 a block of the fixed point's row passes holds only a few rows (L1-sized), so
    the KOS documents (tens to hundreds of distinct words) span many blocks and a partial last
    block; the kernel must still equal the plain one-pass reference."""
    batch, _ = kos
    batch = batch.take(range(40))
    K = 600
    uniq = np.unique(batch.word_ids)
    lids = np.searchsorted(uniq, batch.word_ids)
    rng = np.random.default_rng(5)
    lam = rng.gamma(0.5, 1.0, (K, len(uniq))) + 0.01
    eb = np.exp(psi(lam) - psi(lam.sum(axis=1, keepdims=True))).T.astype(dtype)   # U x K
    assert K * np.dtype(dtype).itemsize >= E._BLOCK_MIN_ROW_BYTES       # rows are blocked
    rows = E._BLOCK_BYTES // (K * np.dtype(dtype).itemsize)     # rows per block
    assert np.diff(batch.indptr).max() > 3 * max(4, rows, 2 * rows + 1)
    alpha = np.full(K, 1.0 / K)
    g0 = GI.init_gamma(GI.doc_keys(batch.doc_ids, 0, 0), K)
    fast = E.estep(batch.indptr, lids, batch.counts, eb, alpha, g0, 100, 1e-3)
    ref = E.estep_reference(batch.indptr, lids, batch.counts, eb, alpha, g0, 100, 1e-3)
    rel = lambda a, b: np.max(np.abs(a - b)) / np.max(np.abs(b))
    assert rel(fast.gamma.astype(float), ref.gamma.astype(float)) < tol
    assert rel(fast.sstats, ref.sstats) < tol
    assert rel(fast.scores, ref.scores) < tol
    if dtype == "float64":
        assert np.array_equal(fast.iterations, ref.iterations)
