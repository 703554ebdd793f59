"""The evaluation's θ fixed point (lda_core.evaluation.kernels.fit_theta: words eight at a time,
then one at a time) against the harness's vectorised formulation, on real NIPS documents with
K = 100 (long documents: many blocks of eight words and every tail length), and the one-draw
topic health of a DocBatch against the matrix path and the harness."""
import numpy as np
import pytest
import scipy.sparse as sp

from lda_core.docbatch import DocBatch
from lda_core.evaluation import metrics as ev
from lda_core.evaluation import topic_quality as tq
from helpers.evaluation import fit_phi
from helpers.uci import uci_csr


@pytest.fixture(scope="module")
def nips(nips_paths):
    X, _ = uci_csr(nips_paths[0], 160)
    X = X[np.asarray(X.sum(1)).ravel() > 1]
    return X, fit_phi(X[40:], K=100, seed=3)


@pytest.fixture(scope="module")
def kos_big(kos_paths):
    X, _ = uci_csr(kos_paths[0], 2600)            # more documents than the health sample
    return X, fit_phi(X, K=40, seed=1)


def test_completion_equals_the_harness_on_long_documents(bp, nips):
    X, phi = nips
    test = X[:40]
    Xa, Xb = bp.split_halves(test, np.random.RandomState(4))
    ref_ll, ref_n = bp.heldout_completion(phi, Xa, Xb)
    a, b = ev.split_halves(DocBatch.from_csr(test), 4)
    assert np.diff(a.indptr).max() > 100            # long documents: many blocks of eight
    got = ev.document_completion(phi, a, b, backend="numba")
    assert got["n_tokens"] == ref_n
    assert abs(got["ll_per_token"] - ref_ll) <= 1e-12 * abs(ref_ll)
    # per document, against the numpy formulation (the kernel's reference)
    from lda_core.evaluation import kernels
    phiT = tq.normalized_phi_T(phi)
    per_doc = np.zeros(a.n_docs)
    kernels.completion(phiT, a.indptr, a.word_ids, a.counts.astype(np.float64), b.indptr,
                       b.word_ids, b.counts.astype(np.float64), 0.1, 100, per_doc)
    ref = ev._completion_docs_numpy(phiT, a, b, 0.1, 100)
    assert np.allclose(per_doc, ref, rtol=1e-12, atol=0)


def test_fixed_point_for_every_tail_length(nips):
    """Documents of 0..20 distinct words (a NIPS document's first n words): no block, one
    block, one block and a tail of 1..7 words, two blocks, ... all equal the numpy
    formulation."""
    X, phi = nips
    w, c = X[0].indices, X[0].data
    order = np.argsort(w)
    w, c = w[order], c[order]
    rows = [(w[:n].astype(np.int32), c[:n].astype(np.int32)) for n in range(1, 21)]
    batch = DocBatch.from_rows(rows)
    phiT = tq.normalized_phi_T(phi)
    from lda_core.evaluation import kernels
    got = np.zeros((batch.n_docs, phi.shape[0]))
    kernels.usage(phiT, batch.indptr, batch.word_ids, batch.counts.astype(np.float64), 0.1,
                  50, got)
    for d in range(batch.n_docs):                   # each document alone, the numpy way
        one = batch.take([d])
        ref = tq._usage_numpy(phiT, one, 0.1, 50)
        assert np.allclose(got[d], ref, rtol=1e-11, atol=1e-15), d


@pytest.mark.slow
def test_usage_and_health_equal_the_harness_on_nips(bp, nips):
    X, phi = nips
    shares, dead, eff = bp.topic_usage(phi, X)
    b = DocBatch.from_csr(X)
    u = tq.topic_usage(phi, b)
    assert np.max(np.abs(u["shares"] - shares)) < 1e-12 and u["dead"] == dead
    assert abs(u["effective"] - eff) < 1e-9
    ref = bp.quality_extras(phi, X)
    for docs in (b, X):                             # the DocBatch and the matrix paths
        h = tq.topic_health(phi, docs)
        assert h["dead_topics"] == ref["dead_topics"] and h["health_docs"] == X.shape[0]
        assert abs(h["effective_topics"] - ref["effective_topics"]) < 1e-9
        assert abs(h["npmi"] - ref["npmi"]) < 1e-9
        assert h["topic_diversity"] == ref["topic_diversity"]


def test_health_of_a_docbatch_equals_the_matrix_path_beyond_the_sample(kos_big):
    """More documents than the sample: the DocBatch path draws the sample once for usage
    and NPMI; the numbers are those of the matrix path (two draws of the same rows)."""
    X, phi = kos_big
    assert X.shape[0] > tq.USAGE_DOCS
    a = tq.topic_health(phi, DocBatch.from_csr(X), seed=7)
    m = tq.topic_health(phi, X, seed=7)
    assert a["health_docs"] == m["health_docs"] == tq.USAGE_DOCS
    assert a["dead_topics"] == m["dead_topics"]
    assert abs(a["effective_topics"] - m["effective_topics"]) < 1e-9
    assert a["npmi"] == m["npmi"] and a["npmi_per_topic"] == m["npmi_per_topic"]
    assert a["topic_diversity"] == m["topic_diversity"]
    assert np.allclose(a["topic_shares"], m["topic_shares"], rtol=1e-12, atol=1e-15)
    # the one sort serves NPMI's top 10 and diversity's top 25 as two sorts would
    assert a["npmi"] == tq.npmi_coherence(phi, tq.usage_sample(X, tq.USAGE_DOCS, 7))["mean"]
    assert a["topic_diversity"] == tq.topic_diversity(phi)
    # NPMI on the sample rows of the matrix, as sp.csr slicing gives them
    rows = np.sort(np.random.RandomState(7).permutation(X.shape[0])[:tq.USAGE_DOCS])
    assert a["npmi"] == tq.npmi_coherence(phi, sp.csr_matrix(X[rows]))["mean"]
