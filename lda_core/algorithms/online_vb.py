"""Online and batch variational Bayes for LDA (Hoffman, Blei & Bach 2010).

The two halves every runner drives (see ``lda_core.algorithms.algorithm``):

* ``local_step(batch)`` — the E-step (``lda_core.algorithms.estep_vb``) over a batch of documents with λ
  frozen; returns :class:`lda_core.algorithms.vb_stats.VBStats` (word-major sufficient statistics of the
  words touched, counters, Σ_d ELBO_d, optionally γ). Statistics of any split of a minibatch
  merge to the statistics of the whole minibatch (up to float64 rounding).
* ``global_step(stats)`` — with S = the minibatch's (non-empty) documents and D the corpus size,
      ρ_t = min(1, (τ0 + t)^−κ),  t = global steps already applied (0 for the first)
      λ ← (1 − ρ_t) λ + ρ_t (η + (D/S) sstats)                      (paper eq. 6–7)

Lazily scaled λ (no dense K×V work per step): λ_wk = a + π · Ñ_wk, word-major (Ñ: V×K
float64; a, π scalars; Σ_v Ñ_vk maintained incrementally); a global step rescales a and π and
adds to the minibatch's rows of Ñ only (``lda_core.algorithms.vb_lazy_lambda``: the update and when π is
folded into Ñ). exp(E[log β_kw]) = exp(ψ(λ_wk) − ψ(c_k)), c_k = Σ_v λ_vk, is computed only for
the next batch's words.

Defaults: α = η = 1/K (symmetric) unless given — the same default as gensim's ``'symmetric'``
α and ``eta=None``; κ = 0.7, τ0 = 64 (the benchmark protocol's settings; the paper's best were
κ = 0.5 and τ0 = 64: κ = 0.5 is accepted with a warning, as the convergence condition needs
κ ∈ (0.5, 1]; smaller κ is refused); E-step cap
``max_iter`` = 100 and ``tol`` = 1e-3 (mean absolute change of γ_d, gensim's
``gamma_threshold``). ``corpus_size`` D: when not given, the number of documents seen so far
including the current minibatch is used (a stream of unknown length), which makes early steps
weigh the minibatch less than a known D would.

Initial λ = η + Gamma(100, 1/100) noise (as gensim), drawn from ``seed``.

Re-seeding collapsed topics (``reseed`` = r, default 0.02; 0 turns it off). Started from
near-identical noisy topics, the first E-steps give every document almost the same γ, every
topic drifts towards the corpus unigram, and the few topics that break the symmetry first take
the documents: the rest keep a near-uniform β that never wins a document again (about half of
K = 100 on 20 Newsgroups after one pass, in gensim too). After each global step, with
m_k = Σ_w sstats_wk the minibatch's tokens assigned to topic k, every topic with
m_k / Σ_j m_j < r/K is re-seeded by splitting the topic j with the largest remaining m_j:

      u_w ~ Beta(½, ½) = sin²(π U_w / 2), U_w uniform (w = 1..V, drawn from (seed, step, k)),
      Ñ_·k ← u ⊙ Ñ_·j,   Ñ_·j ← (1 − u) ⊙ Ñ_·j,   m_j ← m_j / 2,  m_k ← m_j

(λ_·j's data part is shared between j and k; the dead topic's old column is dropped). The
U-shaped Beta puts most of each word in one of the two halves, so the next E-steps sort j's
documents between the two by the words they use. The decision reads only the merged statistics
and the state, and the draws only (seed, step, topic): runners agree, and a resumed run
repeats it exactly.

Optional hyper-parameter steps (paper eq. 9; ``lda_core.algorithms.hyperparams``): α by a damped Newton
step on the minibatch's Σ_d E[log θ_d] before the λ update (gensim's order), η (scalar,
symmetric) after it; the η step needs Σ_kw E[log β_kw], i.e. one dense pass over λ.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
from numba import njit
from scipy.special import gammaln, psi

from lda_core.algorithms import estep_vb, hyperparams
from lda_core.algorithms.algorithm import nonfinite, StochasticAlgorithm
from lda_core.algorithms.params import check_choice, check_int, check_positive, Param, ParamSpec
from lda_core.algorithms.vb_exp_elog_beta import exp_elog_beta_rows
from lda_core.algorithms.vb_gamma_init import doc_keys, init_gamma
from lda_core.algorithms.vb_lazy_lambda import (LazyLambdaStep, LazyLambdaUpdate, new_colsum,
                                                refuse_update)
from lda_core.algorithms.vb_stats import VBStats, VBStatsSum
from lda_core.algorithms.word_blocks import (block_bounds, BlockHeader, BlockPartial, blocks_of,
                                             check_rows, combine_partials, dead_topic_splits,
                                             in_row_order, in_word_order, joined_rows, MAX_BLOCKS,
                                             rows_of_words, split_rows, StepPlan,
                                             WORD_BLOCKS_PARAM)
from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, InputError, StepRefused, UsageError
from lda_core.storage.state import TopicState
from lda_core.training import schedules

logger = logging.getLogger(__name__)

_DTYPES = ("float32", "float64")
#: settings added after states were first written, with the value those states meant (states
#: written before re-seeding did not re-seed; an update's running average is never in effect
#: outside the update that set it)
OLDER_SETTINGS = {"reseed": 0.0, "word_blocks": 1, "history": None, "history_from": None}
_KERNELS = ("numba", "numpy")


@njit(cache=True, error_model="numpy")
def _finite_nonnegative(s):
    """(every entry of ``s`` finite, some entry negative) in one pass."""
    finite, negative = True, False
    for i in range(s.shape[0]):
        for k in range(s.shape[1]):
            x = s[i, k]
            if not np.isfinite(x):
                finite = False
            elif x < 0:
                negative = True
    return finite, negative


class OnlineVB(StochasticAlgorithm):
    """Online variational Bayes for LDA (see module docstring for the equations and defaults).

    Attributes after construction: ``alpha`` (K float64), ``eta`` (float), ``step`` (t),
    ``docs_seen``; the lazily scaled λ (``_ntilde``, ``_ntilde_colsum``, ``_a``, ``_pi``)."""

    name = "online-vb"
    # every copy of the state a run holds (lda_core.resources.check_algorithm_memory): a run
    # that evaluates at its end grows by 27 bytes per added topic-word cell between K = 500 and
    # 2000 on V = 3000 (benchmarks/run_memory_bench.py), about three and a half float64 copies
    # of K x V; counted with a third more
    RUN_BYTES_PER_CELL = 36.0
    DEFAULT_MINIBATCH = 256
    variational_gamma = True       # local_step(return_gamma=True, salt=...) gives γ
    word_sharded = True            # the global step by word blocks (lda_core.algorithms.word_blocks)
    stats_type = VBStats
    NONNEGATIVE_ARRAYS = ("ntilde", "ntilde_colsum", "alpha")
    _row_ids: Optional[np.ndarray] = None    # an E-step view's word ids (estep_view)

    # every setting, in params() order (a new setting is one line here; the constructor,
    # params(), `ldabeam train`, the Flex Template metadata and OnlineLDA's mapping of its
    # scikit-learn parameters take it from this spec). alpha and eta hold the current
    # values (the optional Newton steps change them).
    SPEC = ParamSpec(
        Param("alpha", float, None, lo=0, lo_open=True, vector=True, symbol="alpha",
              option="alpha", sklearn="doc_topic_prior",
              help="document-topic prior, one number or one per topic (unset: 1/K)"),
        Param("eta", float, None, lo=0, lo_open=True, symbol="eta", option="eta",
              sklearn="topic_word_prior", help="topic-word prior (unset: 1/K)"),
        Param("kappa", float, 0.7, lo=0.5, hi=1.0, symbol="kappa", option="kappa",
              sklearn="learning_decay",
              help="learning-rate decay, rho_t = (tau0 + t)^-kappa (0.5 is accepted with a "
                   "warning: convergence needs kappa > 0.5)"),
        Param("tau0", float, 64.0, lo=0, symbol="tau0", option="tau0",
              help="learning-rate delay"),
        Param("corpus_size", int, None, lo=1, symbol="D",
              help="documents in the corpus (unset: the documents seen)"),
        Param("seed", int, 0, lo=0, help="seed of every random draw"),
        Param("max_iter", int, 100, lo=1, hi=100000, option="max_iter",
              sklearn="max_doc_update_iter", help="cap on E-step iterations per document"),
        Param("tol", float, 1e-3, lo=0, lo_open=True, option="tol", sklearn="mean_change_tol",
              help="E-step convergence threshold (mean absolute change of gamma)"),
        Param("dtype", str, "float32", choices=_DTYPES, option="dtype", sklearn="dtype",
              help="E-step floating point type (sums are always float64)"),
        Param("optimize_alpha", bool, False, option="optimize_alpha",
              help="online Newton updates of alpha"),
        Param("optimize_eta", bool, False, option="optimize_eta",
              help="online Newton updates of eta"),
        Param("reseed", float, 0.02, lo=0, hi=1, hi_open=True,
              help="a topic with less than reseed/K of a minibatch's tokens is re-seeded "
                   "(0: never)"),
        Param("history", float, None, lo=0,
              help="during an update (LdaModel.update, train --update): what the state "
                   "before it counts as, in documents; the step is then the running average "
                   "n / (history + n since the update began + n) instead of the schedule's "
                   "(unset: the schedule)"),
        Param("history_from", int, None, lo=0,
              help="during an update: documents seen when it began"),
        WORD_BLOCKS_PARAM,
    )

    def __init__(self, n_topics: int, n_words: int, *, vocab_hash: Optional[str] = None,
                 n_threads: Optional[int] = None, kernel: str = "numba", **settings):
        """``settings``: any of :attr:`SPEC` (the rest take their defaults). ``kernel``: the
        E-step implementation ("numba", or the "numpy" reference)."""
        self._configure(n_topics, n_words, vocab_hash, n_threads, kernel, settings)
        rng = np.random.default_rng(self.seed)
        # drawn in word order, held in row order (word_blocks.rows_of_words)
        self._ntilde = self._in_row_order(
            rng.gamma(100.0, 1.0 / 100.0, (self.n_words, self.n_topics)))
        self._ntilde_colsum = self._ntilde.sum(axis=0)        # word-major Ñ, its column sums
        self._a = self.eta
        self._pi = 1.0

    def _configure(self, n_topics, n_words, vocab_hash, n_threads, kernel, settings) -> None:
        """Every setting checked and set; no λ yet."""
        self.n_topics = K = check_int("n_topics", n_topics, 1)
        self.n_words = check_int("n_words", n_words, 1)
        self.SPEC.apply(self, settings, self.name)
        if self.alpha is None:
            self.alpha = 1.0 / K
        if isinstance(self.alpha, np.ndarray):
            if self.alpha.shape != (K,):
                raise UsageError("alpha must be a positive number or %d positive numbers, got "
                                 "shape %s" % (K, self.alpha.shape))
        else:
            self.alpha = np.full(K, check_positive("alpha", self.alpha), np.float64)
        self.eta = check_positive("eta", 1.0 / K if self.eta is None else self.eta)
        if self.kappa == 0.5:
            # Hoffman et al.'s best runs (and gensim's decay=0.5) use it; the convergence
            # proof (Robbins-Monro: Σρ² < ∞) needs κ > 0.5
            logger.warning("kappa=0.5: accepted, but the convergence guarantee of online VB "
                           "needs kappa in (0.5, 1]")
        self.vocab_hash = vocab_hash
        if n_threads is not None:
            import numba
            n_threads = check_int("n_threads", n_threads, 1, numba.config.NUMBA_NUM_THREADS)
        self.n_threads = n_threads
        self.kernel = check_choice("kernel", kernel, _KERNELS)
        self.step = 0
        self.docs_seen = 0

    @classmethod
    def from_lambda(cls, lam: np.ndarray, **settings) -> "OnlineVB":
        """The algorithm whose λ is ``lam`` (K x V, every entry above 0), at step 0: λ = a + π·Ñ
        with a = 0, π = 1 (no random initial λ is drawn). ``settings``: as the constructor."""
        lam = np.asarray(lam, np.float64)
        K, V = lam.shape
        obj = cls.__new__(cls)
        obj._configure(K, V, None, None, "numba", settings)
        obj._ntilde = np.ascontiguousarray(obj._in_row_order(lam.T))
        obj._ntilde_colsum = obj._ntilde.sum(axis=0)
        obj._a, obj._pi = 0.0, 1.0
        return obj

    # -- word ids and state rows (lda_core.algorithms.word_blocks.rows_of_words) ------------
    def _word_rows(self, word_ids: np.ndarray) -> np.ndarray:
        """The state rows of ``word_ids`` (the ids themselves with one word block)."""
        return rows_of_words(word_ids, self.n_words, self.word_blocks)

    def set_word_blocks(self, n_blocks: int) -> None:
        """Hold the state in ``n_blocks`` word blocks from now on (its rows re-laid out; the
        model is unchanged). Only a run's first step may change B: it fixes the sums."""
        n_blocks = check_int("word_blocks", n_blocks, 1, MAX_BLOCKS)
        self._ntilde = np.ascontiguousarray(in_row_order(self._in_word_order(self._ntilde),
                                                         n_blocks))
        self.word_blocks = n_blocks

    def _in_word_order(self, by_row: np.ndarray) -> np.ndarray:
        return in_word_order(by_row, self.word_blocks)

    def _in_row_order(self, by_word: np.ndarray) -> np.ndarray:
        return in_row_order(by_word, self.word_blocks)

    # -- λ views ----------------------------------------------------------------------------
    def nonfinite_state(self) -> Optional[str]:
        """λ's column sums (``V a + π Σ_w Ñ_w``; the Ñ column sums are kept through every
        update, so they are non-finite iff a touched entry is), α and η."""
        return nonfinite(**{"λ": self._colsum(), "alpha": self.alpha, "eta": self.eta})

    def _colsum(self) -> np.ndarray:
        """c_k = Σ_v λ_vk = V a + π Σ_v Ñ_vk."""
        return self.n_words * self._a + self._pi * self._ntilde_colsum

    def lambda_(self) -> np.ndarray:
        """λ, K x V float64 (materialised)."""
        return self._in_word_order(self._a + self._pi * self._ntilde).T.copy()

    def topic_word(self) -> np.ndarray:
        """E[β] = λ_k / Σ_v λ_kv, K x V float64 (rows sum to 1)."""
        lam = self.lambda_()
        lam /= lam.sum(axis=1, keepdims=True)
        return lam

    def exp_elog_beta(self, word_ids: np.ndarray) -> np.ndarray:
        """exp(E[log β]) for the words ``word_ids`` (sorted unique), U x K in ``self.dtype``
        (row i: word ``word_ids[i]``)."""
        rows = self._word_rows(word_ids)
        if self._row_ids is not None:            # an E-step view: it holds rows _row_ids
            want = rows
            rows = np.searchsorted(self._row_ids, want)
            if len(want) and (rows.max() >= len(self._row_ids)
                              or not np.array_equal(self._row_ids[rows], want)):
                raise ValueError("the batch has words whose rows this E-step view does not hold")
        return exp_elog_beta_rows(self._ntilde, rows, self._a, self._pi,
                                  self._colsum(), dtype=self.dtype)

    def elog_beta_dense(self) -> np.ndarray:
        """E[log β] word-major V x K float64 (dense; for the η step and the exact ELBO)."""
        lam = self._in_word_order(self._a + self._pi * self._ntilde)
        return psi(lam) - psi(lam.sum(axis=0))[None, :]

    # -- local step -------------------------------------------------------------------------
    def empty_stats(self) -> VBStats:
        return VBStats.empty(self.n_topics, self.n_words, step=self.step)

    def _apply_threads(self):
        if self.n_threads is not None:
            import numba
            numba.set_num_threads(self.n_threads)

    def _estep(self, batch: DocBatch, gamma0, max_iter, salt):
        """Run the E-step on the non-empty documents; (EStepResult, their positions, them,
        their unique word ids)."""
        K = self.n_topics
        lens = np.diff(batch.indptr)
        keep = np.nonzero(lens > 0)[0]
        ne = batch if len(keep) == batch.n_docs else batch.take(keep)
        cap = self.max_iter if max_iter is None else int(max_iter)
        if gamma0 is not None:
            gamma0 = np.asarray(gamma0, dtype=np.float64)
            if gamma0.shape != (batch.n_docs, K):
                raise ValueError("gamma0 has shape %s, expected (%d, %d)"
                                 % (gamma0.shape, batch.n_docs, K))
            if not np.all(np.isfinite(gamma0)) or np.any(gamma0 <= 0):
                raise ValueError("gamma0 must be finite and positive")
            g0 = gamma0[keep]
        else:
            g0 = init_gamma(doc_keys(ne.doc_ids, self.seed, self.step, salt), K)
        uniq, lids = estep_vb.local_ids(ne.word_ids, self.n_words)
        eb = self.exp_elog_beta(uniq)
        if self.kernel == "numba":
            self._apply_threads()
            res = estep_vb.estep(ne.indptr, lids, ne.counts, eb, self.alpha, g0, cap, self.tol)
        else:
            res = estep_vb.estep_reference(ne.indptr, lids, ne.counts, eb, self.alpha, g0, cap,
                                           self.tol)
        return res, keep, ne, uniq

    def local_step(self, batch: DocBatch, *, return_gamma: bool = False,
                   gamma0: Optional[np.ndarray] = None, max_iter: Optional[int] = None,
                   salt: str = "gamma") -> VBStats:
        """E-step over ``batch`` with λ frozen (``self`` is not modified).

        Empty documents are skipped and counted (``n_empty``; their γ is α). ``gamma0``
        (n x K, one row per document of ``batch``) replaces the seeded Gamma(100, 1/100)
        initialisation. ``max_iter`` overrides the cap (0 evaluates the bound at ``gamma0``)."""
        if not isinstance(batch, DocBatch):
            raise TypeError("local_step needs a DocBatch, got %s" % type(batch).__name__)
        K, V = self.n_topics, self.n_words
        batch.check_vocab(V)
        res, keep, ne, uniq = self._estep(batch, gamma0, max_iter, salt)
        n_empty = batch.n_docs - ne.n_docs
        sstats, rows = res.sstats, uniq
        if self.word_blocks > 1:                 # statistics are kept by state row
            rows = self._word_rows(uniq)
            order = np.argsort(rows, kind="stable")
            rows, sstats = rows[order], sstats[order]
        stats = VBStats(n_topics=K, n_words=V, word_ids=rows.astype(np.int32),
                        sstats=sstats, n_docs=ne.n_docs, n_tokens=ne.n_tokens,
                        n_empty=n_empty, n_iterations=int(res.iterations.sum()),
                        n_capped=int(np.count_nonzero(~res.converged)),
                        score=float(res.scores.sum()), sum_elogtheta=res.sum_elogtheta,
                        step=self.step)
        if return_gamma:
            g = np.tile(self.alpha, (batch.n_docs, 1))
            g[keep] = res.gamma
            stats.gamma = g
            stats.gamma_doc_ids = batch.doc_ids
        return stats

    # -- global step ------------------------------------------------------------------------
    def _rho_and_scale(self, stats: VBStats):
        """(ρ_t, D/S) for this step: the schedule's ρ_t, or during an update the running
        average over its documents (:func:`lda_core.training.schedules.history_rho`)."""
        if self.history is None:
            rho = schedules.rho(self.step, self.tau0, self.kappa)
        else:
            rho = schedules.history_rho(stats.n_docs, self.history,
                                        self.docs_seen - int(self.history_from or 0))
        D = self.corpus_size if self.corpus_size is not None else self.docs_seen + stats.n_docs
        return rho, float(D) / float(stats.n_docs)

    def _check_stats(self, stats) -> None:
        """The cheap checks (type, shape, the summed counters); the rows are checked block by
        block in :meth:`global_step`'s first pass."""
        if not isinstance(stats, (VBStats, VBStatsSum)):
            raise TypeError("global_step needs VBStats, got %s" % type(stats).__name__)
        if stats.n_topics != self.n_topics or stats.n_words != self.n_words:
            raise ValueError("statistics of K=%d, V=%d do not fit a state of K=%d, V=%d"
                             % (stats.n_topics, stats.n_words, self.n_topics, self.n_words))

    def _refuse_nonfinite(self, stats):
        return StepRefused("refusing a minibatch with non-finite statistics (%d documents, "
                           "computed at step %d); the state is left unchanged at step %d"
                           % (stats.n_docs, stats.step, self.step))

    def global_step(self, stats: Union[VBStats, VBStatsSum]) -> Dict[str, Any]:
        """λ ← (1−ρ_t)λ + ρ_t(η + (D/S)·sstats) on the lazily scaled λ (module docstring).

        ``stats``: the minibatch's :class:`VBStats`, or a :class:`VBStatsSum` of its pieces
        (the summed rows are then never whole: they are formed chunk by chunk, twice). The
        step is the word-block sequence of ``lda_core.algorithms.word_blocks`` over this
        algorithm's ``word_blocks`` blocks: every block is checked first (non-finite or
        negative statistics, a non-finite new λ: StepRefused, the state untouched), then every
        block written and re-seeded, and their sums added in block order. A minibatch with no
        (non-empty) documents is not a step: the state is unchanged and ``skipped`` is set.
        Returns log info: t, rho, docs, tokens, empty, capped, iterations (mean per document),
        mean_change (mean |Δλ| over the rows of the statistics), bound (training per-word bound
        of the minibatch, λ before the step), alpha (mean), eta, pi, reseeded."""
        if self._row_ids is not None:
            raise TypeError("an E-step view (estep_view) holds only some rows of λ: it has no "
                            "global step")
        plan = self._plan(stats)
        B = self.word_blocks
        bounds = self._bounds()
        ups = [self._block_update(plan, lo, self._ntilde[lo:hi]) for lo, hi in bounds]
        flags = [self._block_flags() for _ in range(B)]
        for ids, s in stats.row_blocks():            # pass 1: reads only
            for b, sl in enumerate(blocks_of(ids, self.n_words, B)):
                if sl.stop > sl.start:
                    self._check_chunk(ups[b], flags[b], ids[sl], s[sl])
        checked = [self._block_partial(b, plan, ups[b], flags[b], None) for b in range(B)]
        self._refusal(plan, combine_partials(checked, B))
        if plan.skip:
            return self._finish(plan, None)
        for u in ups:
            u.start()
        for ids, s in stats.row_blocks():            # pass 2: the same chunks, written
            for b, sl in enumerate(blocks_of(ids, self.n_words, B)):
                if sl.stop > sl.start:
                    ups[b].apply(ids[sl], s[sl])
        parts = [self._block_partial(b, plan, ups[b], flags[b], self._ntilde[lo:hi])
                 for b, (lo, hi) in enumerate(bounds)]
        return self._finish(plan, combine_partials(parts, B))

    # -- the global step by word blocks (lda_core.algorithms.word_blocks) -------------------
    def _bounds(self):
        """[(lo, hi)]: the words of each block."""
        return block_bounds(self.n_words, self.word_blocks)

    def block_rows(self, b: int) -> np.ndarray:
        """Rows [lo, hi) of Ñ (λ = a + π Ñ) of word block ``b``: a view."""
        lo, hi = self._bounds()[b]
        return self._ntilde[lo:hi]

    def shard_header(self) -> BlockHeader:
        """Everything but Ñ's rows: settings, Σ_w Ñ_w, α, a, π, η, step counters."""
        return BlockHeader(algorithm=self.name, n_topics=self.n_topics, n_words=self.n_words,
                           n_blocks=self.word_blocks, vocab_hash=self.vocab_hash,
                           params=self.params(),
                           counters={"step": self.step, "docs_seen": self.docs_seen},
                           arrays={"ntilde_colsum": self._ntilde_colsum.copy(),
                                   "alpha": self.alpha.copy(),
                                   "scalars": np.array([self._a, self._pi, self.eta])})

    @classmethod
    def _from_header(cls, header: BlockHeader, ntilde: Optional[np.ndarray],
                     n_threads: Optional[int] = None, kernel: str = "numba") -> "OnlineVB":
        if header.algorithm != cls.name:
            raise DataIntegrityError("word-block header is for algorithm %r, not %r"
                                     % (header.algorithm, cls.name))
        K = header.n_topics
        settings = cls.SPEC.recorded(header.params, older=OLDER_SETTINGS)
        scal = header.arrays["scalars"]
        settings.update(alpha=np.asarray(header.arrays["alpha"], np.float64), eta=float(scal[2]))
        obj = cls.__new__(cls)
        obj._configure(K, header.n_words, header.vocab_hash, n_threads, kernel, settings)
        if obj.word_blocks != header.n_blocks:
            raise DataIntegrityError("word-block header has %d blocks but its settings %d"
                                     % (header.n_blocks, obj.word_blocks))
        obj._ntilde = ntilde
        obj._ntilde_colsum = np.array(header.arrays["ntilde_colsum"], np.float64)
        obj._a, obj._pi = float(scal[0]), float(scal[1])
        obj.step, obj.docs_seen = header.counters["step"], header.counters["docs_seen"]
        return obj

    @classmethod
    def from_shards(cls, header: BlockHeader, rows) -> "OnlineVB":
        """The algorithm whose Ñ is the blocks' rows ``rows`` (block order) and the rest
        ``header`` (the inverse of :meth:`shard_header` and :meth:`block_rows`)."""
        return cls._from_header(header, joined_rows(header, rows, np.float64))

    @classmethod
    def estep_view(cls, header: BlockHeader, row_ids: np.ndarray, rows: np.ndarray,
                   n_threads: Optional[int] = None, kernel: str = "numba") -> "OnlineVB":
        """An algorithm holding only the rows ``rows`` of Ñ, the state rows ``row_ids``
        (sorted unique; :func:`~lda_core.algorithms.word_blocks.rows_of_words` of the words):
        its ``local_step`` of a batch whose words are among them gives the statistics of the
        full algorithm's, bit for bit."""
        word_ids = np.asarray(row_ids, np.int64)
        check_rows(rows, len(word_ids), header.n_topics, "an E-step view")
        obj = cls._from_header(header, np.ascontiguousarray(rows, dtype=np.float64),
                               n_threads=n_threads, kernel=kernel)
        obj._row_ids = word_ids
        return obj

    @classmethod
    def plan_step(cls, header: BlockHeader, stats: VBStats) -> StepPlan:
        """ρ, D/S, the new a, π and α, and the re-seeding splits, from the statistics' small
        part (any block's: every owner computes the same plan)."""
        return cls._from_header(header, None)._plan(stats)

    @classmethod
    def update_block(cls, header: BlockHeader, plan: StepPlan, b: int, rows: np.ndarray,
                     stats: VBStats) -> BlockPartial:
        """Check block ``b``'s statistics ``stats`` and, if they pass, apply the step and
        then the plan's re-seeding splits to its rows ``rows`` in place; the partial carries
        the checks' flags and the block's sums."""
        algo = cls._from_header(header, None)
        lo, hi = header.bounds(b)
        check_rows(rows, hi - lo, header.n_topics, "block %d" % b)
        upd, flags = algo._block_update(plan, lo, rows), algo._block_flags()
        for ids, s in stats.row_blocks():
            if len(ids) and (ids[0] < lo or ids[-1] >= hi):
                raise ValueError("statistics rows outside block %d's words [%d, %d)"
                                 % (b, lo, hi))
            algo._check_chunk(upd, flags, ids, s)
        done = not plan.skip and flags["finite"] and flags["nonnegative"] and upd.ok()
        if done:
            upd.start()
            for ids, s in stats.row_blocks():
                upd.apply(ids, s)
        return algo._block_partial(b, plan, upd, flags, rows if done else None)

    @classmethod
    def finish_step(cls, header: BlockHeader, plan: StepPlan, parts):
        """(header after the step, log info) from the blocks' partials in block order;
        StepRefused if any block refused."""
        algo = cls._from_header(header, None)
        parts = list(parts)
        combined = combine_partials(parts, header.n_blocks)
        algo._refusal(plan, combined)
        info = algo._finish(plan, None if plan.skip else combined)
        return algo.shard_header(), info

    def _plan(self, stats) -> StepPlan:
        self._check_stats(stats)
        if not (np.all(np.isfinite(stats.sum_elogtheta)) and math.isfinite(stats.score)):
            raise self._refuse_nonfinite(stats)
        info = {"docs": stats.n_docs, "tokens": stats.n_tokens, "empty": stats.n_empty,
                "capped": stats.n_capped, "n_iterations": stats.n_iterations,
                "score": stats.score, "stats_step": stats.step}
        if stats.n_docs <= 0:
            return StepPlan(skip=True, info=info, values={})
        rho, scale = self._rho_and_scale(stats)
        new_alpha = self.alpha
        if self.optimize_alpha:
            new_alpha = hyperparams.newton_dirichlet_step(self.alpha, stats.n_docs,
                                                          stats.sum_elogtheta, rho)
        # collapsed topics, decided from the minibatch's tokens per topic (the statistics'
        # small part), so every owner applies the splits right after its block's update
        splits = dead_topic_splits(stats.topic_mass, self.reseed, self.seed, self.step)
        return StepPlan(skip=False, info=info, values={
            "lambda": LazyLambdaStep(self._a, self._pi, rho, scale, self.eta),
            "alpha": new_alpha, "splits": splits})

    def _block_update(self, plan: StepPlan, lo: int, rows: np.ndarray):
        return None if plan.skip else LazyLambdaUpdate(rows, lo, plan.values["lambda"])

    @staticmethod
    def _block_flags() -> Dict[str, bool]:
        return {"finite": True, "nonnegative": True}

    @staticmethod
    def _check_chunk(upd, flags, ids, s) -> None:
        f, n = _finite_nonnegative(s)
        flags["finite"] = flags["finite"] and f
        flags["nonnegative"] = flags["nonnegative"] and not n
        if upd is not None and flags["finite"]:
            upd.check(ids, s)

    def _block_partial(self, b: int, plan: StepPlan, upd, flags,
                       rows: Optional[np.ndarray]) -> BlockPartial:
        """The block's flags and sums. ``rows``: the block's rows after its update, then
        re-seeded here (the plan's splits) and summed for the η step when due; None: only
        what the refusal reads (nothing was written)."""
        if upd is None:
            return BlockPartial(block=b, flags=dict(flags, lambda_finite=True))
        out = {"change": np.array([upd.total])}
        if rows is not None:
            out["colsum"] = upd.colsum_part()
            lo = self._bounds()[b][0]
            splits = plan.values["splits"]
            out["split"] = split_rows(rows, lo, splits, self.n_words, self.word_blocks)
            if self.optimize_eta:      # Σ_w Σ_k ψ(λ_wk) over the block, λ after the step
                lam = plan.values["lambda"]
                out["psi"] = np.array([float(np.sum(psi(lam.new_a + lam.pi_after * rows)))])
        return BlockPartial(block=b, flags=dict(flags, lambda_finite=upd.ok()), sums=out,
                            counts={"size": upd.size})

    def _refusal(self, plan: StepPlan, combined: BlockPartial) -> None:
        """Raise StepRefused when the combined checks of every block refuse the step."""
        if not combined.flags["finite"]:
            raise StepRefused("refusing a minibatch with non-finite statistics (%d documents, "
                              "computed at step %d); the state is left unchanged at step %d"
                              % (plan.info["docs"], plan.info["stats_step"], self.step))
        if not combined.flags["nonnegative"]:
            raise StepRefused("refusing negative statistics; the state is left unchanged at "
                              "step %d" % self.step)
        if plan.skip:
            return
        lam = plan.values["lambda"]
        if not (math.isfinite(lam.new_a) and combined.flags["lambda_finite"]
                and math.isfinite(float(combined.sums["change"][0]))):
            raise refuse_update(self.step, lam.rho, lam.scale)

    def _finish(self, plan: StepPlan, combined: Optional[BlockPartial]) -> Dict[str, Any]:
        """The header's part of the step from the blocks' combined sums; the log info."""
        pi = plan.info
        if plan.skip:
            logger.warning("global step %d: minibatch has no non-empty documents (%d empty); "
                           "skipped", self.step, pi["empty"])
            return {"t": self.step, "rho": 0.0, "docs": 0, "tokens": 0, "empty": pi["empty"],
                    "skipped": True}
        lam = plan.values["lambda"]
        splits = plan.values["splits"]
        self._ntilde_colsum = new_colsum(lam, self._ntilde_colsum, combined.sums["colsum"])
        self._a, self._pi = lam.new_a, lam.pi_after
        for (k, j), (sk, sj) in zip(splits.pairs, combined.sums["split"]):
            self._ntilde_colsum[k], self._ntilde_colsum[j] = sk, sj
        size = combined.counts["size"]
        mean_change = float(combined.sums["change"][0]) / size if size else 0.0
        self.alpha = plan.values["alpha"]
        self.step += 1
        self.docs_seen += pi["docs"]
        if self.optimize_eta:
            # Σ_kw E[log β_kw] = Σ_wk ψ(λ_wk) − V Σ_k ψ(c_k), c the kept column sums
            sum_elog = (float(combined.sums["psi"][0])
                        - self.n_words * float(np.sum(psi(self._colsum()))))
            self.eta = hyperparams.newton_symmetric_eta_step(
                self.eta, self.n_topics, self.n_words, sum_elog, lam.rho)
        info = {"t": self.step, "rho": lam.rho, "docs": pi["docs"], "tokens": pi["tokens"],
                "empty": pi["empty"], "capped": pi["capped"],
                "iterations": pi["n_iterations"] / max(1, pi["docs"]),
                "mean_change": mean_change,
                "bound": pi["score"] / pi["tokens"] if pi["tokens"] else float("nan"),
                "skipped": False, "alpha": float(self.alpha.mean()), "eta": self.eta,
                "pi": self._pi, "reseeded": len(splits.pairs)}
        logger.debug("global step %(t)d: rho=%(rho).4g docs=%(docs)d mean_change=%(mean_change)"
                     ".4g bound=%(bound).4f", info)
        return info

    def rescale_counts(self, r: float) -> None:
        """Multiply λ's data part by ``r`` (λ − η ← r (λ − η)): the expected counts of a
        corpus ``r`` times as large with the same topics -- an update's starting state when
        its corpus grows (:mod:`ldabeam.model`). O(1): λ = a + π Ñ, so a and π change."""
        r = float(r)
        if not (r > 0 and math.isfinite(r)):
            raise ValueError("rescale_counts needs a finite r > 0, got %r" % (r,))
        self._a = self.eta + r * (self._a - self.eta)
        self._pi *= r

    # -- inference & evaluation -------------------------------------------------------------
    def infer(self, batch: DocBatch) -> np.ndarray:
        """n x K normalised γ (E[θ_d]) with λ frozen; empty documents get α / Σα. Each
        document's start is seeded by its content (:meth:`DocBatch.content_keys`), so the
        same words give the same θ whatever the document is called."""
        g = self.local_step(batch.keyed_by_content(), return_gamma=True, salt="infer").gamma
        return g / g.sum(axis=1, keepdims=True)

    def per_word_bound(self, batch: DocBatch) -> float:
        """Paper eq. 16: Σ_d ELBO_d / Σ_d N_d with λ fixed and γ fit by the E-step.

        ELBO_d = E_q[log p(w_d, θ_d, z_d | α, β)] − E_q[log q(θ_d, z_d)] with E[log β] under
        q(β|λ); no topic (β) term. This is a lower bound on the per-word log likelihood, not a
        log likelihood estimate. (gensim's ``log_perplexity`` also adds the topic term scaled
        by S/D, so its number differs slightly.)"""
        stats = self.local_step(batch, salt="eval")
        if stats.n_tokens == 0:
            raise InputError("per_word_bound needs at least one token (%d documents, all empty)"
                             % batch.n_docs)
        return stats.score / stats.n_tokens

    def perplexity_bound(self, batch: DocBatch) -> float:
        """exp(−per_word_bound): an upper bound on the per-word perplexity (paper eq. 16)."""
        return float(math.exp(-self.per_word_bound(batch)))

    def topic_term(self) -> float:
        """E_q[log p(β|η)] − E_q[log q(β|λ)] = Σ_k Σ_w [(η − λ_kw) E[log β_kw] + log Γ(λ_kw)
        − log Γ(η)] + Σ_k [log Γ(Vη) − log Γ(Σ_w λ_kw)] (dense)."""
        lam = self._a + self._pi * self._ntilde
        colsum = lam.sum(axis=0)
        elog = psi(lam) - psi(colsum)[None, :]
        eta = self.eta
        return float(np.sum((eta - lam) * elog) + np.sum(gammaln(lam))
                     - lam.size * gammaln(eta)
                     + self.n_topics * gammaln(self.n_words * eta) - np.sum(gammaln(colsum)))

    # -- state ------------------------------------------------------------------------------
    def state_params(self) -> Dict[str, Any]:
        """λ's scalars beside the settings (the arrays hold them too: ``scalars``)."""
        return {"lambda_a": self._a, "lambda_pi": self._pi,
                "lambda_form": "lambda[w,k] = a + pi * ntilde[w,k] (word-major)"}

    def to_state(self, copy: bool = True):
        """A :class:`lda_core.storage.state.TopicState` with every array needed to resume bit for bit:
        ``ntilde`` (V x K), ``ntilde_colsum`` (K), ``alpha`` (K), ``scalars`` = [a, π, η].
        ``copy=False``: ``ntilde`` is the algorithm's own array, not a copy (for a caller that
        writes the state out at once: no second V x K array of a big model)."""
        # in word order whatever the word blocks (only this class knows its row order)
        ntilde = self._in_word_order(self._ntilde)
        arrays = {"ntilde": ntilde.copy() if copy and ntilde is self._ntilde else ntilde,
                  "ntilde_colsum": self._ntilde_colsum.copy(),
                  "alpha": self.alpha.copy(),
                  "scalars": np.array([self._a, self._pi, self.eta], np.float64)}
        return TopicState(algorithm=self.name, n_topics=self.n_topics, n_words=self.n_words,
                          vocab_hash=self.vocab_hash, arrays=arrays, params=self.params(),
                          step=self.step, docs_seen=self.docs_seen)

    @classmethod
    def from_state(cls, state, *, n_threads: Optional[int] = None, take: bool = False,
                   kernel: str = "numba"):
        """The algorithm of ``state``. ``take``: use the state's float64 C-ordered λ array
        itself instead of a copy (the caller gives the state up: no second V x K array while
        a big model loads)."""
        if state.algorithm != cls.name:
            raise DataIntegrityError(
                "state is for algorithm %r, not %r" % (state.algorithm, cls.name))
        p = state.params
        K, V = state.n_topics, state.n_words
        need = {"ntilde": (V, K), "ntilde_colsum": (K,), "alpha": (K,), "scalars": (3,)}
        for name, shape in need.items():
            if name not in state.arrays:
                raise DataIntegrityError(
                    "state has no array %r (has %s)" % (name, sorted(state.arrays)))
            if tuple(state.arrays[name].shape) != shape:
                raise DataIntegrityError("state array %r has shape %s, expected %s"
                                         % (name, tuple(state.arrays[name].shape), shape))
        scal = np.asarray(state.arrays["scalars"], np.float64)
        # states written before re-seeding existed did not re-seed
        settings = cls.SPEC.recorded(p, older=OLDER_SETTINGS)
        # α and η as the state holds them (the optional Newton steps change them)
        settings.update(alpha=np.asarray(state.arrays["alpha"], np.float64),
                        eta=float(scal[2]))
        obj = cls.__new__(cls)
        obj._configure(K, V, state.vocab_hash, n_threads, kernel, settings)
        obj._ntilde = (np.ascontiguousarray(state.arrays["ntilde"], dtype=np.float64) if take
                       else np.array(state.arrays["ntilde"], dtype=np.float64, order="C",
                                     copy=True))
        obj._ntilde = np.ascontiguousarray(obj._in_row_order(obj._ntilde))
        obj._ntilde_colsum = np.array(state.arrays["ntilde_colsum"], np.float64, copy=True)
        obj._a, obj._pi = float(scal[0]), float(scal[1])
        obj.step, obj.docs_seen = int(state.step), int(state.docs_seen)
        return obj


    # -- checkpoints by word blocks (lda_core.storage.blocks) -------------------------------
    @classmethod
    def state_without_rows(cls, header: BlockHeader):
        """The :meth:`to_state` of the algorithm of ``header`` without its word-major array
        ``ntilde`` (O(K): what a checkpoint holds beside the row blocks)."""
        state = cls._from_header(header, np.zeros((0, header.n_topics))).to_state(copy=False)
        del state.arrays["ntilde"]
        return state

    @classmethod
    def header_of_state(cls, state) -> BlockHeader:
        """The word-block header of the algorithm of ``state``, read from all its arrays but
        ``ntilde`` (not touched: it may be absent or held in blocks)."""
        if state.algorithm != cls.name:
            raise DataIntegrityError(
                "state is for algorithm %r, not %r" % (state.algorithm, cls.name))
        K = state.n_topics
        for name, shape in {"ntilde_colsum": (K,), "alpha": (K,), "scalars": (3,)}.items():
            if name not in state.arrays or np.shape(state.arrays[name]) != shape:
                raise DataIntegrityError("state array %r is %s, expected shape %s"
                                         % (name, np.shape(state.arrays[name]) if name in
                                            state.arrays else "missing", shape))
        scal = np.asarray(state.arrays["scalars"], np.float64)
        settings = cls.SPEC.recorded(state.params, older=OLDER_SETTINGS)
        settings.update(alpha=np.asarray(state.arrays["alpha"], np.float64),
                        eta=float(scal[2]))
        obj = cls.__new__(cls)
        obj._configure(K, state.n_words, state.vocab_hash, None, "numba", settings)
        obj._ntilde_colsum = np.array(state.arrays["ntilde_colsum"], np.float64, copy=True)
        obj._a, obj._pi = float(scal[0]), float(scal[1])
        obj.step, obj.docs_seen = int(state.step), int(state.docs_seen)
        return obj.shard_header()

    @classmethod
    def row_dtype(cls, header: BlockHeader) -> np.dtype:
        """The dtype of Ñ's rows (what a block file of this algorithm holds)."""
        return np.dtype(np.float64)

    @classmethod
    def from_header_rows(cls, header: BlockHeader, rows: np.ndarray,
                         n_threads: Optional[int] = None) -> "OnlineVB":
        """The algorithm whose Ñ in row order is ``rows`` itself (V x K float64, C order:
        not copied) and the rest ``header`` (:meth:`from_shards` of one contiguous array)."""
        check_rows(rows, header.n_words, header.n_topics, "the word-major rows")
        return cls._from_header(header, np.ascontiguousarray(rows, dtype=np.float64),
                                n_threads=n_threads)


class BatchVB(OnlineVB):
    """Batch variational Bayes: the special case S = D, ρ = 1 (λ ← η + sstats over the whole
    corpus), iterated by the in-process runner until the relative ELBO change is below
    ``rel_tol`` (one global step per pass; on documents held in memory, with warm starts:
    :func:`lda_core.training.in_memory.fit_batch_vb`).

    ``global_step`` expects the statistics of the *whole* corpus (merge the local steps of all
    its batches). κ, τ0 and corpus_size are validated but unused. With
    ``optimize_alpha``/``optimize_eta`` the ELBO is no longer guaranteed to increase."""

    name = "batch-vb"
    # every copy of the state a run holds: batch VB's run grows by 55 bytes per added topic-word
    # cell between K = 500 and 2000 on V = 3000 (benchmarks/run_memory_bench.py), above online
    # VB's; counted with a third more
    RUN_BYTES_PER_CELL = 72.0
    accumulates_passes = True      # the trainers apply one global step per pass
    # κ and τ0 are checked and recorded but not options: batch VB takes full steps (ρ = 1)
    SPEC = OnlineVB.SPEC.replace("kappa", option=None).replace("tau0", option=None)

    def _rho_and_scale(self, stats: VBStats):
        return 1.0, 1.0

    def elbo(self, batches: Union[DocBatch, Sequence[DocBatch]],
             gammas: Optional[Sequence[np.ndarray]] = None) -> float:
        """The exact ELBO of the corpus ``batches`` under the current λ: Σ_d ELBO_d (γ_d fit by
        the E-step, or the given ``gammas`` — one n x K array per batch — evaluated as they
        are, with φ at its optimum) plus the topic term (:meth:`topic_term`)."""
        batches = [batches] if isinstance(batches, DocBatch) else list(batches)
        total = 0.0
        for i, b in enumerate(batches):
            if gammas is None:
                total += self.local_step(b, salt="elbo").score
            else:
                total += self.local_step(b, gamma0=gammas[i], max_iter=0).score
        return total + self.topic_term()

    def best_start(self, batch: DocBatch, warm: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """Per document, the better (higher ELBO_d under the current λ) of the E-step fit from
        the warm start ``warm`` and from a fresh seeded Gamma(100, 1/100) draw.

        Warm starts alone make every pass coordinate ascent but lock in the first pass's
        near-symmetric assignments (merged topics on planted corpora); fresh draws escape them
        but can lower the ELBO. Taking the better per document keeps the guarantee — each
        ELBO_d is at least the warm-started one — and keeps the escape."""
        if warm is None:
            return None
        fresh, keep, _, _ = self._estep(batch, None, None, "restart")
        warmr, _, _, _ = self._estep(batch, warm, None, "restart")
        out = np.array(warm, dtype=np.float64, copy=True)
        better = fresh.scores > warmr.scores
        out[keep] = np.where(better[:, None], fresh.gamma, warmr.gamma)
        return out
