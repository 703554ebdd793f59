"""scikit-learn-compatible estimators: ``OnlineLDA`` (online / batch VB) and ``SCVB0LDA``.

Drop-in for ``sklearn.decomposition.LatentDirichletAllocation``: the same parameter names where
they mean the same thing (``n_components, doc_topic_prior, topic_word_prior, learning_method,
learning_decay, learning_offset, max_iter, batch_size, evaluate_every, total_samples,
perp_tol, mean_change_tol, max_doc_update_iter, n_jobs, verbose, random_state``), the same
methods (``fit``, ``partial_fit``, ``transform``, ``fit_transform``, ``score``,
``perplexity``, ``get_params`` / ``set_params``) and fitted attributes (``components_``,
``exp_dirichlet_component_``, ``n_batch_iter_``, ``n_iter_``, ``n_features_in_``,
``bound_``, ``doc_topic_prior_``, ``topic_word_prior_``, ``random_state_``), on scipy sparse
matrices or dense arrays of counts (documents x words). The maths is :mod:`lda_core.algorithms.online_vb`
(``algorithm_`` holds the fitted :class:`OnlineVB`).

Mapping to the paper's notation (Hoffman et al. 2010), identical to scikit-learn's schedule:
    ρ_j = (learning_offset + j)^(−learning_decay),  j = 1, 2, ... (``n_batch_iter_``)
so ``tau0 = learning_offset + 1`` and ``kappa = learning_decay`` in ``OnlineVB``
(whose t starts at 0); D = n_samples in ``fit`` and ``total_samples`` in ``partial_fit``
(as scikit-learn); ``doc_topic_prior`` α and ``topic_word_prior`` η default to
1/n_components; ``max_doc_update_iter`` / ``mean_change_tol`` are the E-step cap and the
mean-|Δγ| stopping threshold. ``learning_method="batch"``: λ ← η + sstats over all
documents, ``max_iter`` passes (``BatchVB``).

Counts: the E-step works on integer counts; non-integer values are rounded to the nearest
integer (entries that round to 0 are dropped). Negative values raise ValueError.

Seeding: γ⁰ of a document is drawn from (seed, step, document key)
(``lda_core.algorithms.vb_gamma_init``). In ``fit``/``partial_fit`` the key is the row's position in the call; in ``transform``/``score``
it is the row's content key (``DocBatch.content_keys``, as ``ldabeam``'s ``transform`` and
``ldabeam infer`` key a document), so the θ of a document does not depend on which other rows
are transformed with it, and a saved model gives raw text the θ ``transform`` gives its counts. ``random_state`` (None, int or RandomState) gives the seed.

Model directories: ``est.save(MODEL_DIR, vocabulary=words)`` publishes the fitted state as a
checkpoint in ``ldabeam train``'s format (with ``vocab.tsv`` when the words are given), so the
command line (``ldabeam topics/infer/report --model``) and ``ldabeam.load`` read it;
``est.save(MODEL_DIR, vectorizer=cv)`` with the fitted ``CountVectorizer`` that made X records
its vocabulary and its analyzer (as data: ``tokenizer.json``), so raw text given to the saved
model becomes the counts ``cv.transform`` gives;
``OnlineLDA.load(MODEL_DIR)`` / ``SCVB0LDA.load(MODEL_DIR)`` give back a fitted estimator, also
of a model ``ldabeam train`` trained (online/batch VB, SCVB0): its parameters are then mapped
from the state (``learning_offset = tau0 - 1``, ``learning_decay = kappa``, ...).

scikit-learn is optional: with it installed the classes derive from its ``BaseEstimator`` and
``TransformerMixin`` (``check_estimator`` passes); without it a small duck-typed base provides
``get_params`` / ``set_params`` and the validation below.
"""
from __future__ import annotations

import inspect
import json
import logging
import math
import numbers
import re

import numba
import numpy as np
import scipy.sparse as sp
from scipy.special import psi

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.algorithms.online_vb import BatchVB, OnlineVB
from lda_core.algorithms.scvb0 import SCVB0
from lda_core.docbatch import DocBatch
from lda_core.resources import check_run_memory
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.files import files_for
from lda_core.storage.state import TopicState
from lda_core.storage.vocab_file import TOKENIZER_FILE, VOCAB_FILE, vocab_hash, vocab_tsv
from lda_core.training.in_memory import MemoryMinibatches, fit_batch_vb, train_in_memory
from lda_core.training.run_params import MINIBATCH_KEY, recorded_minibatch
from lda_core.training.session import Session
from lda_core.training.spec import Output

logger = logging.getLogger(__name__)

try:  # optional
    from sklearn.base import BaseEstimator as _Base, TransformerMixin as _TMixin
    from sklearn.base import ClassNamePrefixFeaturesOutMixin as _FOMixin
    from sklearn.utils.validation import check_is_fitted as _check_is_fitted
    try:
        from sklearn.utils.validation import validate_data as _validate_data
    except ImportError:  # pragma: no cover - scikit-learn < 1.6
        _validate_data = None
    HAVE_SKLEARN = True
except ImportError:  # pragma: no cover - exercised without scikit-learn
    HAVE_SKLEARN = False
    _validate_data = None

    class _Base:
        """get_params / set_params like scikit-learn's BaseEstimator (no dependency)."""

        @classmethod
        def _get_param_names(cls):
            sig = inspect.signature(cls.__init__)
            return sorted(p.name for p in sig.parameters.values()
                          if p.name != "self" and p.kind != p.VAR_KEYWORD)

        def get_params(self, deep=True):
            return {k: getattr(self, k) for k in self._get_param_names()}

        def set_params(self, **params):
            valid = self._get_param_names()
            for k, v in params.items():
                if k not in valid:
                    raise ValueError("Invalid parameter %r for estimator %s. Valid parameters "
                                     "are: %s." % (k, type(self).__name__, valid))
                setattr(self, k, v)
            return self

        def __repr__(self):
            return "%s(%s)" % (type(self).__name__, ", ".join(
                "%s=%r" % kv for kv in self.get_params().items()))

    class _TMixin:
        def fit_transform(self, X, y=None, **fit_params):
            return self.fit(X, y, **fit_params).transform(X)

    class _FOMixin:
        pass

    class NotFittedError(ValueError, AttributeError):
        pass

    def _check_is_fitted(est, attributes=None):
        if not hasattr(est, "components_"):
            raise NotFittedError("This %s instance is not fitted yet. Call 'fit' with "
                                 "appropriate arguments before using this estimator."
                                 % type(est).__name__)


def _seed_of(random_state) -> int:
    if random_state is None:
        return int(np.random.randint(0, 2 ** 31 - 1))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if not 0 <= int(random_state) < 2 ** 32:
            raise ValueError("random_state=%r is outside the allowed range [0, 2**32)"
                             % (random_state,))
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2 ** 31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2 ** 31 - 1))
    raise ValueError("random_state=%r must be None, an int or a numpy RandomState"
                     % (random_state,))


def _json_params(params: dict) -> dict:
    """``get_params()`` as JSON values: a RandomState (not data) is saved as None."""
    out = {}
    for k, v in params.items():
        if isinstance(v, (np.integer, np.floating)):
            v = v.item()
        out[k] = v if v is None or isinstance(v, (bool, int, float, str)) else None
    return out


class _LDABase(_FOMixin, _TMixin, _Base):
    """Validation, batching and the scikit-learn surface shared by the estimators."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        return tags

    def _more_tags(self):  # scikit-learn < 1.6
        return {"requires_positive_X": True, "preserves_dtype": [np.float64]}

    # -- input --------------------------------------------------------------------------------
    def _check_X(self, X, reset: bool, where: str) -> sp.csr_matrix:
        """Documents x words counts -> CSR float64 with integer, non-negative values."""
        if HAVE_SKLEARN and _validate_data is not None:
            X = _validate_data(self, X, reset=reset, accept_sparse="csr",
                               dtype=[np.float64, np.float32])
        else:
            X = self._check_X_plain(X, reset)
        X = sp.csr_matrix(X, dtype=np.float64, copy=True)
        if X.nnz and (not np.all(np.isfinite(X.data))):
            raise ValueError("Input X contains NaN or infinity (%s)" % where)
        if X.nnz and X.data.min() < 0:
            raise ValueError("Negative values in data passed to %s.%s: LDA needs word counts "
                             "(>= 0); found %g" % (type(self).__name__, where, X.data.min()))
        X.data = np.rint(X.data)
        X.eliminate_zeros()
        X.sum_duplicates()
        X.sort_indices()
        if X.nnz and X.data.max() > np.iinfo(np.int32).max:
            raise ValueError("a count of %g is too large (int32)" % X.data.max())
        return X

    def _check_X_plain(self, X, reset):
        if sp.issparse(X):
            X = sp.csr_matrix(X)
        else:
            X = np.asarray(X, dtype=np.float64)
            if X.ndim != 2:
                raise ValueError("Expected 2D array, got %dD array instead" % X.ndim)
        if X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError("Found array with shape %s; at least 1 sample and 1 feature are "
                             "required" % (X.shape,))
        if reset:
            self.n_features_in_ = X.shape[1]
        elif X.shape[1] != self.n_features_in_:
            raise ValueError("X has %d features, but %s is expecting %d features as input"
                             % (X.shape[1], type(self).__name__, self.n_features_in_))
        return X

    @staticmethod
    def _to_batch(X: sp.csr_matrix, keys=None) -> DocBatch:
        ids = keys if keys is not None else tuple(str(i) for i in range(X.shape[0]))
        return DocBatch(ids, X.indptr.astype(np.int64), X.indices.astype(np.int32),
                        X.data.astype(np.int32))

    def _check_fitted_shape(self, X, where):
        _check_is_fitted(self)
        X = self._check_X(X, reset=False, where=where)
        K, V = self.components_.shape
        if K != self.algorithm_.n_topics or V != self.algorithm_.n_words:
            raise ValueError("components_ has shape %s but the fitted model has K=%d, V=%d "
                             "(was components_ replaced?)" % ((K, V), self.algorithm_.n_topics,
                                                              self.algorithm_.n_words))
        if X.shape[1] != V:
            raise ValueError("X has %d features, but %s is expecting %d features as input "
                             "(the model's vocabulary size)" % (X.shape[1], type(self).__name__,
                                                                V))
        return X

    def _check_params(self):
        if not (isinstance(self.n_components, numbers.Integral)
                and not isinstance(self.n_components, bool) and self.n_components >= 1):
            raise ValueError("n_components=%r is outside the allowed range [1, inf) (an "
                             "integer)" % (self.n_components,))
        for name in ("batch_size", "max_iter", "max_doc_update_iter"):
            v = getattr(self, name)
            if not (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1):
                raise ValueError("%s=%r is outside the allowed range [1, inf) (an integer)"
                                 % (name, v))
        for name in ("doc_topic_prior", "topic_word_prior"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, numbers.Real) and math.isfinite(v)
                                      and v > 0):
                raise ValueError("%s=%r is outside the allowed range (0, inf)" % (name, v))

    # -- outputs --------------------------------------------------------------------------------
    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    def transform(self, X, *, normalize=True):
        """Document-topic distribution (n x K; rows sum to 1 unless ``normalize=False``)."""
        X = self._check_fitted_shape(X, "transform")
        g = self._gamma(X)
        return g / g.sum(axis=1, keepdims=True) if normalize else g

    def perplexity(self, X, sub_sampling=False):
        """exp(−score(X) / number of tokens), as scikit-learn's: the exponential of minus the
        variational log-likelihood bound per token (an upper bound on the perplexity of X;
        lower is better). ``sub_sampling`` is accepted for scikit-learn's signature and
        ignored (the bound is always over X as a whole)."""
        X = self._check_fitted_shape(X, "perplexity")
        n = X.sum()
        if n <= 0:
            raise ValueError("perplexity needs at least one token")
        return float(math.exp(-self._bound(X) / n))

    def score(self, X, y=None):
        """The approximate log likelihood (variational bound) of X: Σ_d ELBO_d + topic term,
        as scikit-learn's ``score``."""
        X = self._check_fitted_shape(X, "score")
        return float(self._bound(X))

    def _partial_steps(self, X, first: bool):
        """The rest of ``partial_fit`` after the model exists: one local + global step per
        ``batch_size`` rows of ``X`` (document keys continue the count of documents seen)."""
        if not first and X.shape[1] != self.components_.shape[1]:
            raise ValueError("X has %d features, but %s is expecting %d features as input"
                             % (X.shape[1], type(self).__name__, self.components_.shape[1]))
        base = self.algorithm_.docs_seen
        self._train(self._minibatches(X, lambda i: "p%d" % (base + i)))
        self._sync()
        return self

    def _minibatches(self, X, key=str) -> list:
        """``X`` in minibatches of ``batch_size`` rows in row order; document keys
        ``key(row)`` (the row's position in the call by default)."""
        n, S = X.shape[0], int(self.batch_size)
        return [self._to_batch(X[s:min(n, s + S)], tuple(key(i) for i in range(s, min(n, s + S))))
                for s in range(0, n, S)]

    def _train(self, batches, passes: int = 1):
        """One global step per minibatch of ``batches``, ``passes`` times, through the
        in-process runner (the session validates every step; a refused one raises
        TrainingError)."""
        train_in_memory(self.algorithm_, MemoryMinibatches.repeat(batches, passes))

    def _sync(self):
        """Copy the fitted algorithm's state to the public attributes (``components_``,
        ``n_batch_iter_`` ...). Abstract: :class:`OnlineLDA` and :class:`SCVB0LDA` define it."""
        raise NotImplementedError("%s must define _sync" % type(self).__name__)

    # -- the model directory format ------------------------------------------------------------
    #: the algorithms (registry names) whose states this estimator loads
    _ALGORITHMS: tuple = ()

    def save(self, model_dir: str, vocabulary=None, vectorizer=None) -> str:
        """Publish the fitted model as a checkpoint of ``model_dir`` in ``ldabeam train``'s
        format (lda_core.storage.checkpoint), so ``ldabeam topics/infer/report --model`` and
        ``ldabeam.load`` read it; the estimator's parameters go into the state's
        ``info["sklearn"]``. ``vocabulary``: the words of the columns of X in order (e.g.
        ``CountVectorizer().get_feature_names_out()``), written as ``MODEL_DIR/vocab.tsv`` and
        its hash recorded in the fitted model and the state. ``vectorizer``: instead, the
        fitted scikit-learn ``CountVectorizer`` that made X (or a fitted ``Pipeline`` of it
        and this estimator): its vocabulary, and its analyzer's settings as data in
        ``MODEL_DIR/tokenizer.json`` (:func:`vectorizer_record`), so raw text given to
        ``ldabeam.load(MODEL_DIR)`` or ``ldabeam infer --input`` becomes the counts
        ``vectorizer.transform`` gives. Returns the checkpoint's path. Object-store URLs need
        their file layer registered (``import ldabeam`` or ``pipelines`` does it)."""
        _check_is_fitted(self)
        algo = self.algorithm_
        files = files_for(model_dir)
        tokens = record = None
        if vectorizer is not None:
            if vocabulary is not None:
                raise ValueError("give vocabulary= or vectorizer= (which holds the "
                                 "vocabulary), not both")
            vocabulary, record = vectorizer_record(_vectorizer_of(vectorizer, self),
                                                   algo.n_words)
        if vocabulary is not None:
            tokens = [str(t) for t in vocabulary]
            if len(tokens) != algo.n_words:
                raise ValueError("vocabulary has %d words but the model has %d features"
                                 % (len(tokens), algo.n_words))
            algo.vocab_hash = vocab_hash(tokens)     # the fitted model's columns are these words
        session = Session(position=int(algo.step),
                          output=Output(checkpoint_store=CheckpointStore(model_dir, files=files),
                                        progress=False))
        # batch_size is the run's minibatch size S: recorded once, in the run information
        params = _json_params(self.get_params(deep=False))
        params.pop("batch_size", None)
        sklearn = {"class": type(self).__name__, "params": params,
                   "n_iter": int(getattr(self, "n_iter_", 0))}
        path = session.publish(algo, info={"sklearn": sklearn,
                                           "run": {MINIBATCH_KEY: int(self.batch_size)}})
        if vocabulary is not None:
            files.write_atomic(files.join(model_dir, VOCAB_FILE),
                               vocab_tsv(tokens).encode("utf-8"))
            # how raw text becomes these columns: the vectorizer's record, else not known
            # (replacing the record of an earlier save into the same directory)
            tok = {"source": "scikit-learn %s" % type(vectorizer).__name__, "settings": record} \
                if record is not None else {"source": "vocabulary=", "settings": "unknown"}
            files.write_atomic(files.join(model_dir, TOKENIZER_FILE),
                               (json.dumps(tok, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        return path

    @classmethod
    def load(cls, path: str):
        """The fitted estimator of a model directory (its latest valid checkpoint) or one
        checkpoint directory -- saved by :meth:`save` or trained by ``ldabeam train`` with a
        matching algorithm. Parameters saved by :meth:`save` are restored; for a model the
        command line trained they are mapped from the state (module docstring)."""
        files = files_for(path)
        if files.exists(files.join(path, "state.json")):
            state = TopicState.load(path, files=files)
        else:
            state = CheckpointStore(path, files=files, check_algorithm=True).latest()
            if state is None:
                raise FileNotFoundError("no checkpoint in %s" % path)
        if state.algorithm not in cls._ALGORITHMS:
            raise ValueError("%s holds a %s model; %s loads %s models"
                             % (path, state.algorithm, cls.__name__,
                                " or ".join(cls._ALGORITHMS)))
        saved = (state.info or {}).get("sklearn") or {}
        params = dict(saved.get("params") if saved.get("class") == cls.__name__
                      else cls._params_of_state(state))
        if "batch_size" not in params:      # the run's S, where the checkpoint records it
            S = recorded_minibatch((state.info or {}).get("run"), state.params)
            if S is not None:
                params["batch_size"] = S
        est = cls(**params)
        est.algorithm_ = algorithm_class(state.algorithm).from_state(state)
        est.n_features_in_ = int(state.n_words)
        est.n_iter_ = int(saved.get("n_iter", 0))
        est.doc_topic_prior_ = float(np.mean(est.algorithm_.alpha))
        est.topic_word_prior_ = float(est.algorithm_.eta)
        est._sync()
        return est


class OnlineLDA(_LDABase):
    """Online (or batch) variational Bayes LDA with scikit-learn's interface (module
    docstring). ``dtype`` is the E-step precision ("float32" default, as the trainer)."""

    def __init__(self, n_components=10, *, doc_topic_prior=None, topic_word_prior=None,
                 learning_method="online", learning_decay=0.7, learning_offset=10.0,
                 max_iter=10, batch_size=128, evaluate_every=-1, total_samples=1e6,
                 perp_tol=1e-1, mean_change_tol=1e-3, max_doc_update_iter=100, n_jobs=None,
                 verbose=0, random_state=None, dtype="float32"):
        self.n_components = n_components
        self.doc_topic_prior = doc_topic_prior
        self.topic_word_prior = topic_word_prior
        self.learning_method = learning_method
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.evaluate_every = evaluate_every
        self.total_samples = total_samples
        self.perp_tol = perp_tol
        self.mean_change_tol = mean_change_tol
        self.max_doc_update_iter = max_doc_update_iter
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.random_state = random_state
        self.dtype = dtype

    def _check_params(self):
        super()._check_params()
        if self.learning_method not in ("online", "batch"):
            raise ValueError("learning_method=%r is not allowed; choose 'online' or 'batch'"
                             % (self.learning_method,))
        if not (isinstance(self.learning_offset, numbers.Real) and self.learning_offset > -1):
            raise ValueError("learning_offset=%r is outside the allowed range (-1, inf)"
                             % (self.learning_offset,))
        if not (isinstance(self.total_samples, numbers.Real) and self.total_samples >= 1):
            raise ValueError("total_samples=%r is outside the allowed range [1, inf)"
                             % (self.total_samples,))

    def _new_algorithm(self, n_features, corpus_size):
        self._check_params()
        K = int(self.n_components)
        cls = BatchVB if self.learning_method == "batch" else OnlineVB
        threads = None
        if self.n_jobs is not None and self.n_jobs > 0:
            threads = min(int(self.n_jobs), numba.config.NUMBA_NUM_THREADS)
        self.random_state_ = np.random.RandomState(self.random_state) \
            if isinstance(self.random_state, numbers.Integral) else self.random_state
        # the estimator parameters the algorithm's spec maps (Param.sklearn), checked by the
        # spec; scikit-learn counts j from 1 where OnlineVB's t starts at 0: tau0 = offset + 1
        settings = {p.name: getattr(self, p.sklearn) for p in cls.SPEC if p.sklearn}
        settings.update(tau0=float(self.learning_offset) + 1.0, corpus_size=int(corpus_size),
                        seed=_seed_of(self.random_state))
        # every copy of the state the fit will hold, before the constructor allocates K x V
        check_run_memory(K, int(n_features), cls.RUN_BYTES_PER_CELL, "fitting %s" % cls.name,
                         option="n_components=")
        algo = cls(K, int(n_features), n_threads=threads, **settings)
        self.algorithm_ = algo
        self.n_batch_iter_ = 1
        self.n_iter_ = 0
        self.doc_topic_prior_ = float(algo.alpha[0])
        self.topic_word_prior_ = float(algo.eta)
        return algo

    def _sync(self):
        """Fitted attributes from the algorithm's λ."""
        a = self.algorithm_
        lam = a.lambda_()
        self.components_ = lam
        self.exp_dirichlet_component_ = np.exp(psi(lam) - psi(lam.sum(axis=1))[:, None])
        self.n_batch_iter_ = int(a.step) + 1

    def fit(self, X, y=None):
        """``max_iter`` passes over X (online: minibatches of ``batch_size`` in row order, D =
        n_samples; batch: one global step per pass). Refits from scratch."""
        self._check_params()
        X = self._check_X(X, reset=True, where="fit")
        algo = self._new_algorithm(X.shape[1], X.shape[0])
        last_bound = None
        self.bound_ = None
        batches = self._minibatches(X)
        if self.learning_method == "batch":
            res = fit_batch_vb(algo, batches, max_passes=int(self.max_iter))
            self.n_iter_ = res["passes"]
        else:
            for it in range(int(self.max_iter)):
                self._train(batches)
                self.n_iter_ = it + 1
                if self.evaluate_every > 0 and (it + 1) % self.evaluate_every == 0:
                    self._sync()
                    bound = self.perplexity(X)
                    if self.verbose:
                        logger.info("iteration %d: perplexity %.4f", it + 1, bound)
                    if last_bound is not None and abs(last_bound - bound) < self.perp_tol:
                        break
                    last_bound = bound
        self._sync()
        if self.evaluate_every > 0 or self.learning_method == "batch":
            self.bound_ = self.perplexity(X)
        return self

    def partial_fit(self, X, y=None):
        """One online step per ``batch_size`` rows of X (D = ``total_samples``), continuing
        from the current state (a new model on the first call)."""
        first = not hasattr(self, "components_")
        X = self._check_X(X, reset=first, where="partial_fit")
        if first:
            self._check_params()
            if self.learning_method != "online":
                raise ValueError("partial_fit needs learning_method='online'")
            self._new_algorithm(X.shape[1], int(self.total_samples))
        return self._partial_steps(X, first)

    _ALGORITHMS = ("online-vb", "batch-vb")

    @classmethod
    def _params_of_state(cls, state) -> dict:
        p = state.params
        # the spec's mapping (a per-topic α as its mean), then the estimator's own
        out = {q.sklearn: float(np.mean(p[q.name])) if q.vector else q.type(p[q.name])
               for q in OnlineVB.SPEC if q.sklearn}
        return dict(out, n_components=int(state.n_topics),
                    learning_method="batch" if state.algorithm == "batch-vb" else "online",
                    learning_offset=float(p["tau0"]) - 1.0,
                    total_samples=float(p.get("corpus_size") or 1e6),
                    random_state=int(p["seed"]) % (2 ** 32))

    def _gamma(self, X):
        st = self.algorithm_.local_step(self._to_batch(X).keyed_by_content(), return_gamma=True,
                                        salt="infer")
        return np.asarray(st.gamma, np.float64)

    def _bound(self, X):
        a = self.algorithm_
        st = a.local_step(self._to_batch(X).keyed_by_content(), salt="eval")
        # topic term scaled as scikit-learn's _approx_bound(sub_sampling=False): added once
        return st.score + a.topic_term()


class SCVB0LDA(_LDABase):
    """SCVB0 (Foulds et al. 2013) with the same scikit-learn surface. ``components_`` are the
    expected topic-word counts N^Φ + η (λ-like). ``score`` and ``perplexity`` mean what they
    mean in scikit-learn and :class:`OnlineLDA`: the variational bound of X (taking
    ``components_`` as the Dirichlet parameters of q(β)) and exp(−bound / tokens)."""

    def __init__(self, n_components=10, *, doc_topic_prior=None, topic_word_prior=None,
                 max_iter=10, batch_size=128, total_samples=1e6, learning_decay=0.9,
                 learning_offset=1000.0, max_doc_update_iter=5, evaluate_every=-1,
                 mean_change_tol=1e-3, random_state=None, n_jobs=None, verbose=0):
        self.n_components = n_components
        self.doc_topic_prior = doc_topic_prior
        self.topic_word_prior = topic_word_prior
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.total_samples = total_samples
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.max_doc_update_iter = max_doc_update_iter
        self.evaluate_every = evaluate_every
        self.mean_change_tol = mean_change_tol
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _new_algorithm(self, X_or_V, corpus_tokens):
        self._check_params()
        K = int(self.n_components)
        # the estimator parameters SCVB0's spec maps (Param.sklearn), checked by the spec
        settings = {p.name: getattr(self, p.sklearn) for p in SCVB0.SPEC if p.sklearn}
        settings.update(alpha=self.doc_topic_prior or 1.0 / K,
                        eta=self.topic_word_prior or 1.0 / K, corpus_tokens=int(corpus_tokens),
                        seed=_seed_of(self.random_state))
        check_run_memory(K, int(X_or_V), SCVB0.RUN_BYTES_PER_CELL, "fitting scvb0",
                         option="n_components=")
        algo = SCVB0(K, int(X_or_V), **settings)
        self.algorithm_ = algo
        self.doc_topic_prior_ = float(algo.alpha)
        self.topic_word_prior_ = float(algo.eta)
        self.n_iter_ = 0
        return algo

    def _sync(self):
        a = self.algorithm_
        self.components_ = a.n_phi().T + a.eta          # N^Φ + η, K x V
        self.exp_dirichlet_component_ = a.topic_word()
        self.n_batch_iter_ = int(a.step) + 1

    def fit(self, X, y=None):
        X = self._check_X(X, reset=True, where="fit")
        self._new_algorithm(X.shape[1], max(1, int(X.sum())))
        self._train(self._minibatches(X), passes=int(self.max_iter))
        self.n_iter_ = int(self.max_iter)
        self._sync()
        return self

    def partial_fit(self, X, y=None):
        first = not hasattr(self, "components_")
        X = self._check_X(X, reset=first, where="partial_fit")
        if first:
            mean_len = max(1.0, float(X.sum()) / X.shape[0])
            self._new_algorithm(X.shape[1], int(self.total_samples * mean_len))
        return self._partial_steps(X, first)

    _ALGORITHMS = ("scvb0",)

    @classmethod
    def _params_of_state(cls, state) -> dict:
        p = state.params
        out = {q.sklearn: q.type(p[q.name]) for q in SCVB0.SPEC if q.sklearn}
        return dict(out, n_components=int(state.n_topics),
                    random_state=int(p["seed"]) % (2 ** 32))

    def _gamma(self, X):
        # SCVB0.infer seeds each document by its content itself
        return np.asarray(self.algorithm_.infer(self._to_batch(X)), np.float64)

    def _bound(self, X):
        """The variational bound of X with q(β) = Dirichlet(``components_``) (scikit-learn's
        ``_approx_bound`` over the λ-like N^Φ + η): γ fit by the VB E-step against these
        topics, plus the topic term, so ``perplexity`` means what ``OnlineLDA``'s (and
        scikit-learn's) does."""
        return _vb_bound(self.components_, float(self.algorithm_.alpha),
                         float(self.algorithm_.eta), self._to_batch(X).keyed_by_content(),
                         seed=_seed_of(self.random_state), tol=float(self.mean_change_tol))


# -- a scikit-learn CountVectorizer as data ------------------------------------------------------

#: the longest token the recorded tokenizer keeps (pipelines.ingest.tokenize's cap on
#: max_token_len); scikit-learn's analyzer has no length limit
_MAX_TOKEN_LEN = 1000


def _vectorizer_of(obj, estimator):
    """The CountVectorizer ``obj`` is, or the one a fitted ``Pipeline`` feeds ``estimator``
    with (its steps: the vectorizer, then the estimator); ValueError otherwise."""
    steps = getattr(obj, "steps", None)
    if steps is None:
        return obj
    used = [s for _, s in steps if s is not None and s != "passthrough"]
    if len(used) != 2 or used[1] is not estimator:
        raise ValueError("vectorizer=Pipeline: its steps must be a CountVectorizer and then "
                         "this estimator, got %s" % [type(s).__name__ for s in used])
    return used[0]


def vectorizer_record(vectorizer, n_features: int):
    """``(tokens, record)`` of a fitted scikit-learn ``CountVectorizer``: its vocabulary in
    column order, and its analyzer as a tokenizer record (data only, as
    ``pipelines.ingest.tokenize.tokenizer_record`` writes them: lower-casing, the accent
    rule, the token pattern, the stop words, the n-gram range) that reproduces its counts.
    A setting a record cannot carry is a ValueError saying why: a callable analyzer,
    preprocessor or tokenizer is code, and a model directory holds data, never code (no
    pickle); a character analyzer, file inputs, binary counts or tf-idf weights are not the
    word counts the model's tokenizer makes."""
    name = type(vectorizer).__name__
    if not hasattr(vectorizer, "vocabulary_") or not hasattr(vectorizer, "build_analyzer"):
        raise ValueError("vectorizer=%s: give the fitted CountVectorizer that made X" % name)
    for attr in ("analyzer", "preprocessor", "tokenizer", "strip_accents"):
        if callable(getattr(vectorizer, attr, None)):
            raise ValueError("vectorizer=%s(%s=<callable>): a model directory records data, "
                             "never code (no pickle), so raw text could not be tokenized "
                             "the same way; use token_pattern, stop_words and ngram_range, "
                             "or save with vocabulary= and tokenize texts yourself"
                             % (name, attr))
    if any(c.__name__ == "TfidfVectorizer" for c in type(vectorizer).__mro__):
        raise ValueError("vectorizer=%s: its values are tf-idf weights, not the word counts "
                         "LDA models; use a CountVectorizer" % name)
    why = {"analyzer": (vectorizer.analyzer != "word", "only analyzer='word' makes the "
                        "words the model's tokenizer makes"),
           "input": (vectorizer.input != "content", "raw text reaches the model as text"),
           "binary": (bool(vectorizer.binary), "the model counts every occurrence"),
           "strip_accents": (vectorizer.strip_accents not in (None, "ascii", "unicode"),
                             "scikit-learn knows 'ascii' and 'unicode'")}
    for attr, (bad, reason) in why.items():
        if bad:
            raise ValueError("vectorizer=%s(%s=%r) cannot be recorded: %s"
                             % (name, attr, getattr(vectorizer, attr), reason))
    pattern = vectorizer.token_pattern
    if re.compile(pattern).groups:
        raise ValueError("vectorizer=%s(token_pattern=%r) has a capturing group, whose text "
                         "scikit-learn keeps where the model's tokenizer keeps the whole "
                         "match; make the group non-capturing: (?:...)" % (name, pattern))
    vocab = vectorizer.vocabulary_
    if len(vocab) != int(n_features):
        raise ValueError("vectorizer=%s has %d words but the model has %d features: give "
                         "the vectorizer that made X" % (name, len(vocab), n_features))
    tokens = [None] * len(vocab)
    for token, column in vocab.items():
        tokens[int(column)] = str(token)
    stop = sorted(vectorizer.get_stop_words() or ())
    lo, hi = (int(n) for n in vectorizer.ngram_range)
    record = {"lowercase": bool(vectorizer.lowercase), "deaccent": False,
              "min_token_len": 1, "max_token_len": _MAX_TOKEN_LEN, "token_pattern": pattern,
              "segmenter": "none",
              "stopwords": None if not stop else "scikit-learn stop_words=%s" % (
                  vectorizer.stop_words if isinstance(vectorizer.stop_words, str)
                  else "[%d words]" % len(stop)),
              "stopword_list": stop, "phrases": None, "custom_tokenizer": None,
              "tokens_from": "text"}
    if vectorizer.strip_accents is not None:
        record["strip_accents"] = str(vectorizer.strip_accents)
    if (lo, hi) != (1, 1):
        record["ngram_range"] = [lo, hi]
    return tokens, record


def _vb_bound(components, alpha, eta, batch, *, seed, tol, max_iter=100):
    """Σ_d ELBO_d + topic term of ``batch`` for an LDA whose q(β_k) is Dirichlet(components_k)
    (K x V, every entry above 0): the online-VB E-step (at most ``max_iter`` iterations per
    document, scikit-learn's default ``max_doc_update_iter``) and topic term on that λ."""
    lam = np.asarray(components, np.float64)
    vb = OnlineVB.from_lambda(lam, alpha=alpha, eta=eta, seed=seed, max_iter=max_iter,
                              tol=tol, dtype="float64")
    return float(vb.local_step(batch, salt="eval").score + vb.topic_term())


__all__ = ["OnlineLDA", "SCVB0LDA", "HAVE_SKLEARN", "vectorizer_record"]
