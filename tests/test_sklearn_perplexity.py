"""``perplexity`` and ``score`` mean the same thing for both estimators, and what they mean in
scikit-learn: exp(−(variational log-likelihood bound) / tokens), the bound taken with
q(β) = Dirichlet(components_). Checked against scikit-learn's own
``LatentDirichletAllocation.perplexity`` holding the same components_ and priors, on real
20 Newsgroups posts."""
import numpy as np
import pytest

from lda_core.sklearn_api import OnlineLDA, SCVB0LDA

sklearn = pytest.importorskip("sklearn", reason="scikit-learn (optional extra) not installed")


@pytest.fixture(scope="module")
def counts(news20_tar):
    from sklearn.feature_extraction.text import CountVectorizer
    from helpers.news20 import train_texts as news20_texts
    texts = news20_texts(news20_tar, per_group=10)
    return CountVectorizer(min_df=3, max_df=0.5).fit_transform(texts)


def _sklearn_with(est, X):
    """scikit-learn's LDA holding ``est``'s fitted topics and priors."""
    from scipy.special import psi
    from sklearn.decomposition import LatentDirichletAllocation
    sk = LatentDirichletAllocation(n_components=est.components_.shape[0],
                                   doc_topic_prior=est.doc_topic_prior_,
                                   topic_word_prior=est.topic_word_prior_,
                                   max_doc_update_iter=100, mean_change_tol=1e-3,
                                   random_state=0)
    comp = np.asarray(est.components_, np.float64)
    sk.components_ = comp
    sk.exp_dirichlet_component_ = np.exp(psi(comp) - psi(comp.sum(axis=1))[:, None])
    sk.doc_topic_prior_ = est.doc_topic_prior_
    sk.topic_word_prior_ = est.topic_word_prior_
    sk.n_features_in_ = X.shape[1]
    sk.n_batch_iter_ = 1
    sk.random_state_ = np.random.RandomState(0)
    return sk


@pytest.mark.slow           # the float64 E-step kernels compile on first use
@pytest.mark.parametrize("cls", [OnlineLDA, SCVB0LDA])
def test_perplexity_is_scikit_learns_for_both_estimators(cls, counts):
    X = counts
    est = cls(n_components=6, max_iter=2, random_state=0).fit(X)
    held = X[:40]
    ours = est.perplexity(held)
    theirs = _sklearn_with(est, X).perplexity(held)
    assert ours > 1 and theirs > 1
    np.testing.assert_allclose(ours, theirs, rtol=2e-3)
    np.testing.assert_allclose(est.score(held), -np.log(ours) * held.sum(), rtol=1e-9)
