"""Sparse stochastic inference: Gibbs sampling within online VB (Mimno, Hoffman & Blei 2012).

θ is collapsed; topics keep a variational Dirichlet λ_kw = η + λ^N_kw with λ^N sparse.
Per document (``lda_core.algorithms.sparse_gibbs_kernel``): initialise z, run B burn-in and S kept Gibbs
sweeps with z_i = k drawn ∝ (α + N_dk^¬i)·exp(E[log β_k,w_i]),
E[log β_kw] = ψ(λ_kw) − ψ(Σ_v λ_kv); N̂_dkw = (1/S) Σ_s #{i: z_i^s = k, w_i = w}.

Global step (paper eq. 11), ρ_t = (τ0 + t)^-κ, t = minibatches applied before (from 0), D the
corpus size in documents and |B| the minibatch size:

    λ^N_kw ← (1 − ρ_t) λ^N_kw + ρ_t (D/|B|) Σ_d N̂_dkw

Storage (paper Appendix A): λ^N = π_t·Ñ with π_t = Π_i (1 − ρ_i); Ñ is a word-major CSR
(sorted topics per word, only the non-zeros). A step multiplies π by (1−ρ) and adds
ρ (D/|B|) N̂/π to the minibatch's (word, topic) entries only (a linear merge of sorted keys);
when π falls below ``renorm_below`` the stored values are multiplied by π once and π reset
to 1. The topic totals Σ_v λ^N_kv (K) are kept dense and decayed eagerly.

Defaults and where they come from (Mimno et al. 2012): η = 0.5 (§4.4: 0.4–0.6 gave the most
coherent topics), κ = 0.6 (§4.4 "we fix κ = 0.6"), minibatches of 100 documents (§4.2),
B = 2 burn-in and S = 3 kept sweeps (§4.4: "3–5 sweeps is sufficient"; (2,3) is one of the
settings compared), α = 0.1. τ0 = 1000 is ours: the paper's offsets (3,000–300,000 for 350k
documents) made no significant difference. λ^N starts at zero (the topics are formed by the
first minibatches' samples). z is initialised by drawing each token from the conditional given
the tokens before it (``random_init=True`` gives the uniform initialisation instead).
If ``corpus_size`` (D) is not given, the number of documents seen so far is used.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Tuple

import numba
import numpy as np
from scipy.special import digamma

from lda_core.algorithms.algorithm import nonfinite, StochasticAlgorithm
from lda_core.algorithms.estep_vb import local_ids
from lda_core.algorithms.params import check_number, Param, ParamSpec
from lda_core.algorithms.scvb0 import check_batch_words
from lda_core.algorithms.scvb0_kernel import doc_seeds
from lda_core.algorithms.sparse_gibbs_kernel import gather_rows, merge_into_csr, sgvb_estep
from lda_core.algorithms.sparse_stats import SparseTriplets, TopicStats
from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, StepRefused, UsageError
from lda_core.storage.state import TopicState
from lda_core.training.schedules import rho as schedule_rho

logger = logging.getLogger(__name__)


@dataclass
class SparseGibbsStats(TopicStats):
    """Sampled statistics: Σ over documents and kept sweeps of #{z = k, w} (integer counts in
    float64, as SparseTriplets keyed by word·K + topic), ``samples`` S, and the counters."""

    MAGIC: ClassVar[bytes] = b"LDASGVB1"
    LABEL: ClassVar[str] = "sparse Gibbs"
    SAME: ClassVar[Tuple[str, ...]] = ("samples",)

    samples: int = 1
    triplets: Optional[SparseTriplets] = None

    def __post_init__(self):
        if self.triplets is None:
            self.triplets = SparseTriplets(self.n_topics)

    def merge(self, other: "SparseGibbsStats") -> "SparseGibbsStats":
        self.check_mergeable(other)
        self.triplets.merge(other.triplets)
        self.merge_counters(other)
        return self

    def to_bytes(self) -> bytes:
        return self.pack([("keys", "<i8", self.triplets.keys),
                          ("values", "<f8", self.triplets.values)])

    @classmethod
    def from_bytes(cls, data: bytes) -> "SparseGibbsStats":
        def build(K, a):
            keys = a["keys"]
            if len(keys) > 1 and np.any(np.diff(keys) <= 0):
                raise ValueError("triplet keys are not sorted and unique")
            return {"triplets": SparseTriplets(K, keys, a["values"])}
        return cls.unpack(data, build)


class SparseGibbsVB(StochasticAlgorithm):
    """Sparse Gibbs-within-VB on the local/global-step interface (module docstring)."""

    name = "sparse-gibbs-vb"
    # every copy of the state a run holds (lda_core.resources.check_algorithm_memory): its
    # counts are sparse and fill as tokens arrive; a whole pass that evaluates at its end grows
    # by 18 bytes per added topic-word cell between K = 500 and 2000 on V = 3000
    # (benchmarks/run_memory_bench.py), mostly the dense topic-word matrices of the checkpoint
    # and the evaluation; counted with a third more
    RUN_BYTES_PER_CELL = 24.0
    DEFAULT_MINIBATCH = 100        # the paper's minibatch |B|
    stats_type = SparseGibbsStats
    NONNEGATIVE_ARRAYS = ("values", "topic_totals")

    # every setting, in params() order (a new setting is one line here; the constructor,
    # params(), `ldabeam train` and the Flex Template metadata take it from this spec)
    SPEC = ParamSpec(
        Param("alpha", float, 0.1, lo=0, lo_open=True, symbol="alpha", option="alpha",
              help="document-topic prior"),
        Param("eta", float, 0.5, lo=0, lo_open=True, symbol="eta", option="eta",
              help="topic-word prior"),
        Param("kappa", float, 0.6, lo=0.5, hi=1.0, lo_open=True, symbol="kappa",
              option="kappa", help="learning-rate decay, rho_t = (tau0 + t)^-kappa"),
        Param("tau0", float, 1000.0, lo=0, symbol="tau0", option="tau0",
              help="learning-rate delay"),
        Param("corpus_size", int, None, lo=1, symbol="D",
              help="documents in the corpus (unset: the documents seen)"),
        Param("burn_in", int, 2, lo=0, hi=1000, symbol="B", option="burn_in",
              help="burn-in Gibbs sweeps per document"),
        Param("samples", int, 3, lo=1, hi=1000, symbol="S", option="samples",
              help="kept Gibbs sweeps per document"),
        Param("seed", int, 0, lo=0, hi=2 ** 63 - 1, help="seed of every random draw"),
        Param("random_init", bool, False,
              help="initialise z uniformly instead of from the conditional given the tokens "
                   "before it"),
        Param("renorm_below", float, 1e-8, lo=0, hi=1, lo_open=True, hi_open=True,
              help="fold the scale pi into the topic statistics when it falls below this"),
        Param("infer_burn_in", int, None, lo=0, hi=1000,
              help="burn-in sweeps when inferring a document's topics (unset: burn_in)"),
        Param("infer_samples", int, None, lo=1, hi=1000,
              help="kept sweeps when inferring a document's topics (unset: max(samples, 5))"),
    )

    def __init__(self, n_topics: int, n_words: int, *, vocab_hash: Optional[str] = None,
                 n_threads: Optional[int] = None, **settings):
        """``settings``: any of :attr:`SPEC` (the rest take their defaults)."""
        self.n_topics = check_number("n_topics", n_topics, 1, 1 << 20, integer=True)
        self.n_words = check_number("n_words", n_words, 1, 1 << 31, integer=True)
        if self.n_topics * self.n_words >= 2 ** 62:
            raise UsageError("n_topics*n_words=%d is too large" % (self.n_topics * self.n_words))
        self.SPEC.apply(self, settings, self.name)
        if self.infer_burn_in is None:
            self.infer_burn_in = self.burn_in
        if self.infer_samples is None:
            self.infer_samples = max(self.samples, 5)
        if n_threads is not None:
            n_threads = check_number("n_threads", n_threads, 1, numba.config.NUMBA_NUM_THREADS,
                             integer=True)
        self.n_threads = n_threads
        self.vocab_hash = vocab_hash
        self.step = 0
        self.docs_seen = 0
        self._pi = 1.0
        # Ñ as a word-major CSR: row w holds the topics k with λ^N_kw > 0 (sorted) and Ñ_kw
        self._indptr = np.zeros(self.n_words + 1, np.int64)
        self._topics = np.zeros(0, np.int32)
        self._vals = np.zeros(0, np.float64)
        self.topic_totals = np.zeros(self.n_topics, np.float64)   # Σ_v λ^N_kv

    # -- helpers --------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        return int(self._vals.shape[0])

    def lambda_n(self) -> np.ndarray:
        """λ^N as a dense K x V float64 array (for tests and small problems)."""
        out = np.zeros((self.n_topics, self.n_words), np.float64)
        rows = np.repeat(np.arange(self.n_words), np.diff(self._indptr))
        out[self._topics, rows] = self._pi * self._vals
        return out

    def rho(self, t: int) -> float:
        return schedule_rho(t, self.tau0, self.kappa)

    def _tile(self, batch: DocBatch):
        check_batch_words(batch, self.n_words)
        uniq, inv = local_ids(batch.word_ids, self.n_words)
        uniq = uniq.astype(np.int64)
        u_indptr, u_topics, u_vals = gather_rows(uniq, self._indptr, self._topics, self._vals)
        # c_k = exp(-ψ(Vη + Σ_v λ^N_kv)); coef_kw = (exp(ψ(η + λ^N_kw)) - exp(ψ(η)))·c_k
        ck = np.exp(-digamma(self.n_words * self.eta + self.topic_totals))
        e0 = float(np.exp(digamma(self.eta)))
        coef = (np.exp(digamma(self.eta + self._pi * u_vals)) - e0) * ck[u_topics]
        return uniq, inv.astype(np.int64).ravel(), u_indptr, u_topics, coef, ck, e0

    def _run(self, batch: DocBatch, burn_in: int, samples: int, accumulate: bool,
             want_theta: bool, tag: str):
        uniq, inv, u_indptr, u_topics, coef, ck, e0 = self._tile(batch)
        seeds = doc_seeds(self.seed, self.step, batch.doc_ids, tag)
        n_thr = self.n_threads or numba.get_num_threads()
        n_chunks = max(1, min(n_thr, batch.n_docs))
        old = numba.get_num_threads()
        try:
            if self.n_threads:
                numba.set_num_threads(self.n_threads)
            keys, vals, theta, sweeps = sgvb_estep(
                batch.indptr, inv, batch.counts, u_indptr, u_topics, coef, ck, e0,
                self.alpha, burn_in, samples, seeds, self.random_init, n_chunks, accumulate,
                want_theta)
        finally:
            if self.n_threads:
                numba.set_num_threads(old)
        return uniq, keys, vals, theta, sweeps

    # -- StochasticAlgorithm --------------------------------------------------------------
    def empty_stats(self) -> SparseGibbsStats:
        return SparseGibbsStats(n_topics=self.n_topics, samples=self.samples)

    def local_step(self, batch: DocBatch, **kw) -> SparseGibbsStats:
        """B + S sweeps per document with λ frozen; kept-sweep counts per (word, topic)."""
        uniq, keys, vals, _, sweeps = self._run(batch, self.burn_in, self.samples, True,
                                                False, "sgvb")
        K = self.n_topics
        gkeys = uniq[keys // K] * K + keys % K          # local word index -> word id (monotone)
        lens = batch.doc_lengths
        return SparseGibbsStats(n_topics=K, samples=self.samples,
                                triplets=SparseTriplets(K, gkeys, vals), n_docs=batch.n_docs, n_tokens=int(lens.sum()),
                                n_empty=int((lens == 0).sum()), n_iterations=int(sweeps.sum()),
                                n_capped=0)

    def global_step(self, stats: SparseGibbsStats) -> Dict[str, Any]:
        if not isinstance(stats, SparseGibbsStats) or stats.n_topics != self.n_topics:
            raise ValueError("global_step needs sparse Gibbs statistics of %d topics, got %r"
                             % (self.n_topics, stats))
        tr = stats.triplets
        if not np.all(np.isfinite(tr.values)):
            raise StepRefused("sparse Gibbs statistics contain non-finite values; state left "
                              "unchanged (step %d)" % self.step)
        if len(tr) and (tr.keys[0] < 0 or tr.keys[-1] >= self.n_words * self.n_topics):
            raise StepRefused("statistics name (word, topic) pairs outside %d x %d"
                              % (self.n_words, self.n_topics))
        t = self.step
        rho = self.rho(t)
        info = dict(t=t, rho=rho, docs=stats.n_docs, tokens=stats.n_tokens, empty=stats.n_empty,
                    sweeps=stats.n_iterations)
        if stats.n_docs > 0:
            D = self.corpus_size or (self.docs_seen + stats.n_docs)
            # ρ (D/|B|) N̂, N̂ = counts / S
            scale = rho * float(D) / float(stats.n_docs) / float(stats.samples)
            if rho >= 1.0:
                self._indptr = np.zeros(self.n_words + 1, np.int64)
                self._topics = np.zeros(0, np.int32)
                self._vals = np.zeros(0, np.float64)
                self.topic_totals = np.zeros(self.n_topics, np.float64)
                self._pi = 1.0
            else:
                self._pi *= (1.0 - rho)
                self.topic_totals = (1.0 - rho) * self.topic_totals
            words, topics = tr.words, tr.topics
            self._indptr, self._topics, self._vals = merge_into_csr(
                self._indptr, self._topics, self._vals, words, topics.astype(np.int32),
                tr.values, scale / self._pi)
            self.topic_totals = self.topic_totals + scale * np.bincount(
                topics, weights=tr.values, minlength=self.n_topics)
            if self._pi < self.renorm_below:
                logger.info("sparse-gibbs-vb: renormalising the lazy scale factor (pi=%.3g) "
                            "at t=%d", self._pi, t)
                self._vals = self._vals * self._pi
                self._pi = 1.0
            info["D"] = int(D)
        self.step += 1
        self.docs_seen += int(stats.n_docs)
        info.update(pi=self._pi, nnz=self.nnz)
        logger.debug("sparse-gibbs-vb step t=%d rho=%.4g docs=%d nnz=%d", t, rho, stats.n_docs,
                     self.nnz)
        return info

    def nonfinite_state(self) -> Optional[str]:
        """The topic totals, the lazy scale π and the stored λ^N values (every global step
        rewrites them all, so summing them costs no more than the step)."""
        return nonfinite(**{"topic totals": self.topic_totals, "pi": self._pi,
                            "λ^N": self._vals})

    def topic_word(self) -> np.ndarray:
        """E_q[β] = λ_k / Σ_v λ_kv with λ = η + λ^N, K x V float64 (rows sum to 1)."""
        lam = self.lambda_n()
        lam += self.eta
        lam /= lam.sum(1, keepdims=True)
        return lam

    def infer(self, batch: DocBatch) -> np.ndarray:
        """θ_d = (α + mean N_dk over ``infer_samples`` kept sweeps)/(N_d + Kα); each
        document's draws are seeded by its content (:meth:`DocBatch.content_keys`)."""
        _, _, _, theta, _ = self._run(batch.keyed_by_content(), self.infer_burn_in, self.infer_samples, False,
                                      True, "sgvb-infer")
        theta = theta + self.alpha
        theta /= theta.sum(1, keepdims=True)
        return theta

    def to_state(self, copy: bool = True):
        """The state (``copy`` is accepted for the interface; the arrays are always copied:
        they are small next to a dense model)."""
        return TopicState(algorithm=self.name, n_topics=self.n_topics, n_words=self.n_words,
                          vocab_hash=self.vocab_hash,
                          arrays={"indptr": self._indptr.copy(), "topics": self._topics.copy(),
                                  "values": self._vals.copy(),
                                  "topic_totals": self.topic_totals.copy(),
                                  "pi": np.array([self._pi], np.float64)},
                          params=self.params(), step=int(self.step),
                          docs_seen=int(self.docs_seen), rng=None,
                          info={"paper": "Mimno, Hoffman & Blei 2012"})

    @classmethod
    def from_state(cls, state, *, n_threads: Optional[int] = None,
                   take: bool = False) -> "SparseGibbsVB":
        state.validate(algorithm=cls.name)
        obj = cls(state.n_topics, state.n_words, vocab_hash=state.vocab_hash,
                  n_threads=n_threads, **cls.SPEC.recorded(state.params))
        a = state.arrays
        indptr = np.asarray(a["indptr"], np.int64)
        topics = np.asarray(a["topics"], np.int32)
        vals = np.asarray(a["values"], np.float64)
        tt = np.asarray(a["topic_totals"], np.float64)
        pi = np.asarray(a["pi"], np.float64)
        if (indptr.shape != (state.n_words + 1,) or indptr[0] != 0
                or np.any(np.diff(indptr) < 0) or indptr[-1] != len(topics)
                or topics.shape != vals.shape or tt.shape != (state.n_topics,)
                or pi.shape != (1,)):
            raise DataIntegrityError(
                "sparse-gibbs-vb state arrays are inconsistent (indptr %s, topics "
                "%s, values %s, topic_totals %s)" % (indptr.shape, topics.shape,
                                                     vals.shape, tt.shape))
        if len(topics) and (topics.min() < 0 or topics.max() >= state.n_topics):
            raise DataIntegrityError("sparse-gibbs-vb state names topics outside [0, %d)"
                                     % state.n_topics)
        obj._indptr, obj._topics, obj._vals = indptr.copy(), topics.copy(), vals.copy()
        obj.topic_totals = tt.copy()
        obj._pi = float(pi[0])
        obj.step = int(state.step)
        obj.docs_seen = int(state.docs_seen)
        return obj
