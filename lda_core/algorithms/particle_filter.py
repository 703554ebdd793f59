"""Rao-Blackwellised particle filter for LDA (Canini, Shi & Griffiths 2009, Algorithm 4).

P particles, each a full assignment z^(p) of the tokens seen (θ and φ integrated out). For each
token i (word w in document d), for each particle (kernel ``gibbs_kernel.pf_advance``)::

    ω_p ← ω_p · P(w_i | z_<i^(p), w_<i) = ω_p · Σ_k (n_kw+β)/(n_k+Vβ) · (n_dk+α)/(n_d+Kα)
    z_i^(p) ~ P(z_i | z_<i^(p), w_≤i)   (the optimal proposal, so the weight does not depend on it)

then the weights are normalised. When the effective sample size 1/Σ_p ω_p² drops to
``ess_threshold`` or below: residual resampling (Liu & Chen 1998), weights reset to 1/P, and
rejuvenation — for every particle, ``n_rejuv`` positions R(i) ⊂ [0, i] (uniform or decayed)
resampled from their full conditionals.

Assignments live in a :mod:`lda_core.algorithms.particle_tree` store: the tree of hash tables (default)
or the naive copy-on-resample arrays (``store="naive"``, for the comparison benchmark); both
give the same assignments for the same random stream. Each particle also keeps dense counts
n_kw (V x K), n_k and n_dk (documents seen x K), copied for the particles that are duplicated
when resampling (O(P·(KV + DK)) per resampling, independent of the stream length i; the
assignment history, which grows with i, is what the tree shares).

Estimates: ``topic_word`` is the weighted average over particles of φ^(p) (all particles descend
from one initial sample, so topic labels agree); per-document clusterings use the particle of
highest weight (``best_particle``), as the paper's "sample with maximum posterior probability".
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Dict, Optional

import numpy as np

from lda_core.algorithms import gibbs_kernel as gk
from lda_core.algorithms.algorithm import SequentialSampler
from lda_core.algorithms.gibbs import (check_counts, grow_rows, infer_theta, rng_from_json,
                                       rng_to_json, TokenCorpus)
from lda_core.algorithms.online_samplers import (add_initial_sample, prefix_from_arrays,
                                                 prefix_to_arrays, resolve_init_docs, STREAM_SPEC)
from lda_core.algorithms.params import check_int, Param
from lda_core.algorithms.particle_tree import slot_mapping, STORES
from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, UsageError
from lda_core.storage.state import TopicState

logger = logging.getLogger(__name__)

MAX_ADVANCE_CALLS = 10 ** 9


class ParticleFilter(SequentialSampler):
    """See module docstring. Settings (:attr:`SPEC`): ``n_particles`` P, ``ess_threshold``
    in (0, P] (paper: 20 for 3 categories, 10 for 20), ``n_rejuv`` |R(i)| (paper: 30 / 10),
    ``schedule`` "uniform" | "decay" (``decay_scale`` tokens), ``init_docs`` /
    ``init_fraction`` + ``n_docs_total`` for a batch-Gibbs prefix (default none), ``store``
    "tree" | "naive"."""

    name = "particle-filter"
    # every copy of the state a run holds (lda_core.resources.check_algorithm_memory): per
    # particle n_kw (int32, 4 bytes a topic-word cell; resampling copies it in place) and n_dk
    # (int32 over the documents seen, grown by doubling: up to three rows a document while it
    # grows, 12 bytes a document-topic cell); beside them the topic-word matrix a checkpoint or
    # an evaluation sums over the particles (float64 and its temporaries). A run that evaluates
    # at its end grows by 90 bytes per added topic-word cell with 8 particles between K = 100
    # and 400 on V = 3000 and 1,350 documents (benchmarks/run_memory_bench.py); 56 for the
    # matrices (an evaluation's add about 40) and 4 + 12 x D / V per particle count 131 there
    RUN_BYTES_PER_CELL = 56.0
    RUN_BYTES_PER_CELL_EACH = {"n_particles": 4.0}
    RUN_BYTES_PER_DOC_CELL_EACH = {"n_particles": 12.0}

    # every setting, in params() order: the stream samplers' (lda_core.algorithms.
    # online_samplers.STREAM_SPEC) with the particles' own (a new setting is one line here)
    SPEC = (STREAM_SPEC
            .replace("n_rejuv", default=30,
                     help="earlier positions resampled per particle after each resampling")
            .insert_before("n_rejuv",
                           Param("n_particles", int, 100, lo=1, hi=100000, symbol="P",
                                 option="particles", attr="P", help="number of particles"),
                           Param("ess_threshold", float, 20.0, lo=0, lo_open=True,
                                 option="ess_threshold",
                                 help="resample when the effective sample size 1/sum(w^2) "
                                      "falls to this or below, in (0, P]"))
            .insert_before("seed",
                           Param("store", str, "tree", choices=tuple(sorted(STORES)),
                                 attr="store_kind",
                                 help="assignment store: the tree of hash tables, or naive "
                                      "copy-on-resample arrays (for the comparison "
                                      "benchmark)")))

    def __init__(self, n_topics: int, n_words: int, **settings):
        """``settings``: any of :attr:`SPEC` (the rest take their defaults)."""
        self.n_topics = check_int("n_topics", n_topics, 1, 32767)
        self.n_words = check_int("n_words", n_words, 1)
        self.SPEC.apply(self, settings, self.name)
        if self.ess_threshold > self.P:
            raise UsageError("ess_threshold must be in (0, n_particles=%d], got %r"
                             % (self.P, self.ess_threshold))
        self.init_docs = resolve_init_docs(self.init_docs, self.init_fraction,
                                           self.n_docs_total, False)
        self.corpus = TokenCorpus(self.n_words, self.seed)
        K, V, P = self.n_topics, self.n_words, self.P
        self.nwk = np.zeros((P, V, K), np.int32)
        self.nk = np.zeros((P, K), np.int64)
        self.ndk = np.zeros((P, 16, K), np.int32)
        self.ndoc = np.zeros(16, np.int64)          # tokens seen per document
        self.logw = np.full(P, -math.log(P))
        self.rng = np.array([gk.seed_state(self.seed, 11, 0)], np.uint64)
        self.store = None
        self.initialised = self.init_docs == 0
        if self.initialised:
            self.store = STORES[self.store_kind](P, np.zeros(0, np.int16))
        self._pending, self._pending_n = [], 0
        self.n_resamples = 0
        self.seconds = 0.0
        self.resample_seconds = 0.0
        self.max_depth = 0
        self.step = 0               # process() calls applied (batches consumed)

    @property
    def docs_seen(self) -> int:
        return self.corpus.n_docs + self._pending_n

    # -- initial sample ---------------------------------------------------------------------
    def initialise(self, batch: DocBatch, z: Optional[np.ndarray] = None) -> None:
        """All particles start from ``batch`` with assignments ``z`` (token order of a
        :class:`~lda_core.algorithms.gibbs.CollapsedGibbs` with the same seed; None: ``init_sweeps``
        sweeps of batch Gibbs). The shared start is the root of the particle tree."""
        _, z = add_initial_sample(self, batch, z)
        nwk, nk, ndk = gk.counts_from_z(self.corpus.tok_w, self.corpus.tok_d, z, self.n_words,
                                        self.corpus.n_docs, self.n_topics)
        self.nwk[:] = nwk[None]
        self.nk[:] = nk[None]
        self.ndk = np.zeros((self.P, max(16, self.corpus.n_docs), self.n_topics), np.int32)
        self.ndk[:, :self.corpus.n_docs] = ndk[None]
        self.ndoc = grow_rows(self.ndoc, self.corpus.n_docs)
        self.ndoc[:self.corpus.n_docs] = np.diff(self.corpus.doc_ptr)
        self.store = STORES[self.store_kind](self.P, np.asarray(z, np.int16))
        self.initialised = True

    # -- stream -------------------------------------------------------------------------------
    def ess(self) -> float:
        w = np.exp(self.logw - self.logw.max())
        w /= w.sum()
        return float(1.0 / np.sum(w * w))

    def process(self, batch: DocBatch) -> Dict[str, Any]:
        """Consume the next documents. Returns {'docs', 'tokens', 'resamples', 'ess',
        'depth', 'seconds'}."""
        t = time.perf_counter()
        res0 = self.n_resamples
        self.step += 1
        if not self.initialised:
            need = self.init_docs - self._pending_n
            head = batch.take(np.arange(min(need, len(batch.doc_ids))))
            self._pending.append(head)
            self._pending_n += len(head.doc_ids)
            if self._pending_n >= self.init_docs:
                prefix = DocBatch.concat(self._pending)
                self._pending, self._pending_n = [], 0
                self.initialise(prefix)
            if len(head.doc_ids) == len(batch.doc_ids):
                self.seconds += time.perf_counter() - t
                return {"docs": len(batch.doc_ids), "tokens": 0, "resamples": 0,
                        "ess": self.ess(), "depth": 0, "seconds": time.perf_counter() - t}
            batch = batch.take(np.arange(len(head.doc_ids), len(batch.doc_ids)))
        t0, t1, d0 = self.corpus.add(batch)
        D = self.corpus.n_docs
        if D > self.ndk.shape[1]:
            self.ndk = grow_rows(self.ndk, D, axis=1)
        self.ndoc = grow_rows(self.ndoc, D)
        vbeta = self.n_words * self.eta
        decay = self.decay_scale if self.schedule == "decay" else 0.0
        zbuf = np.empty((self.P, max(1, min(t1 - t0, 1 << 16))), np.int16)
        i = t0
        for _ in range(MAX_ADVANCE_CALLS):
            if i >= t1:
                break
            stop = min(t1, i + zbuf.shape[1])
            j = gk.pf_advance(self.corpus.tok_w, self.corpus.tok_d, i, stop, self.nwk, self.nk,
                              self.ndk, self.ndoc, self.logw, self.alpha, self.eta, vbeta,
                              self.ess_threshold, zbuf, self.rng)
            self.store.append(i, zbuf[:, :j - i])
            i = j
            if self.ess() <= self.ess_threshold:
                self._resample_and_rejuvenate(i, vbeta, decay)
        secs = time.perf_counter() - t
        self.seconds += secs
        return {"docs": len(batch.doc_ids), "tokens": t1 - t0,
                "resamples": self.n_resamples - res0, "ess": self.ess(),
                "depth": self.max_depth, "seconds": secs}

    def _resample_and_rejuvenate(self, n_pos, vbeta, decay):
        t = time.perf_counter()
        copies = gk.residual_resample(self.logw, self.rng)
        src = slot_mapping(copies)
        gk.pf_copy_counts(src, self.nwk, self.nk, self.ndk, self.corpus.n_docs)
        self.store.resample(src)
        self.logw[:] = -math.log(self.P)
        if self.n_rejuv:
            pos = gk.pf_pick_positions(n_pos, self.n_rejuv, decay, self.P, self.rng)
            cur = self.store.get(pos)
            new = gk.pf_rejuvenate(pos, cur, self.corpus.tok_w, self.corpus.tok_d, self.nwk,
                                   self.nk, self.ndk, self.alpha, self.eta, vbeta, self.rng)
            self.store.set(pos, new)
        self.n_resamples += 1
        self.max_depth = max(self.max_depth, self.store.depth())
        self.resample_seconds += time.perf_counter() - t

    # -- estimates ------------------------------------------------------------------------
    def weights(self) -> np.ndarray:
        w = np.exp(self.logw - self.logw.max())
        return w / w.sum()

    def best_particle(self) -> int:
        return int(np.argmax(self.logw))

    def topic_word(self) -> np.ndarray:
        """Σ_p ω_p φ^(p), φ^(p)_kw = (n_kw^(p) + β)/(n_k^(p) + Vβ) (K x V)."""
        w = self.weights()
        out = np.zeros((self.n_topics, self.n_words))
        for p in np.nonzero(w > 1e-12)[0]:
            out += w[p] * ((self.nwk[p].T + self.eta)
                           / (self.nk[p][:, None] + self.n_words * self.eta))
        return out / out.sum(1, keepdims=True)

    def doc_topic_counts(self) -> np.ndarray:
        """n_dk of the documents seen, in the particle of highest weight."""
        return self.ndk[self.best_particle(), :self.corpus.n_docs]

    def assignments(self, p: Optional[int] = None) -> np.ndarray:
        return self.store.full(self.best_particle() if p is None else p)

    def infer(self, batch: DocBatch) -> np.ndarray:
        return infer_theta(batch, self.topic_word(), self.alpha)

    def check_invariants(self):
        for p in range(self.P):
            check_counts(self.corpus.tok_w, self.corpus.tok_d, self.store.full(p), self.nwk[p],
                         self.nk[p], self.ndk[p, :self.corpus.n_docs])

    # -- checkpoints ----------------------------------------------------------------------
    def to_state(self, copy: bool = True):
        """The complete state; during the batch prefix (no particle store yet) it holds the
        buffered prefix documents instead, so a resumed run starts from the same prefix
        (``copy`` is accepted for the interface; the arrays are always copied)."""
        arrays = {"tok_w": self.corpus.tok_w.copy(), "doc_ptr": self.corpus.doc_ptr.copy(),
                  "logw": self.logw.copy()}
        if self.store is not None:
            arrays.update(self.store.to_arrays())
        arrays.update(prefix_to_arrays(self._pending))
        return TopicState(algorithm=self.name, n_topics=self.n_topics, n_words=self.n_words,
                          vocab_hash=None, arrays=arrays, params=self.params(),
                          step=self.step, docs_seen=self.docs_seen,
                          rng=rng_to_json(self.rng[0]),
                          info={"initialised": bool(self.initialised),
                                "n_tokens": int(self.corpus.n_tokens),
                                "n_resamples": self.n_resamples, "max_depth": self.max_depth,
                                "seconds": self.seconds})

    @classmethod
    def from_state(cls, state, *, n_threads: Optional[int] = None,
                   take: bool = False) -> "ParticleFilter":
        """The filter of ``state`` (``n_threads`` is ignored: one stream of draws)."""
        self = cls(state.n_topics, state.n_words, **cls.SPEC.recorded(state.params))
        a = state.arrays
        tok_w, doc_ptr = a["tok_w"], a["doc_ptr"]
        if len(doc_ptr) < 1 or doc_ptr[0] != 0 or doc_ptr[-1] != len(tok_w) \
                or np.any(np.diff(doc_ptr) < 0):
            raise DataIntegrityError("checkpoint token arrays are inconsistent (doc_ptr/tok_w)")
        if len(tok_w) and (tok_w.min() < 0 or tok_w.max() >= self.n_words):
            raise DataIntegrityError("checkpoint word ids out of range [0, %d)" % self.n_words)
        if a["logw"].shape != (self.P,):
            raise DataIntegrityError("checkpoint has %d particle weights, expected %d"
                                     % (len(a["logw"]), self.P))
        self.corpus.set_arrays(tok_w, doc_ptr)
        self.logw = np.array(a["logw"], np.float64)
        self.rng[0] = np.uint64(rng_from_json(state.rng))
        self.initialised = bool(state.info.get("initialised", True))
        self.n_resamples = int(state.info.get("n_resamples", 0))
        self.max_depth = int(state.info.get("max_depth", 0))
        self.seconds = float(state.info.get("seconds", 0.0))
        self.step = state.step
        self._pending, self._pending_n = prefix_from_arrays(a, self.n_words, self.init_docs)
        if not self.initialised:
            # still in the batch prefix: nothing sampled yet, no particle store
            if self.corpus.n_docs or self.corpus.n_tokens:
                raise DataIntegrityError(
                    "checkpoint is marked as inside the batch prefix but holds "
                    "%d sampled documents" % self.corpus.n_docs)
            return self
        if self._pending_n:
            raise DataIntegrityError(
                "checkpoint holds a buffered prefix and a particle store; it is "
                "inconsistent")
        D = self.corpus.n_docs
        self.ndk = np.zeros((self.P, max(16, D), self.n_topics), np.int32)
        self.ndoc = np.zeros(max(16, D), np.int64)
        self.ndoc[:D] = np.diff(self.corpus.doc_ptr)
        self.store = STORES[self.store_kind].from_arrays(self.P, a)
        if self.store.n_pos != self.corpus.n_tokens:
            raise DataIntegrityError("checkpoint particle store holds %d positions for %d tokens"
                                     % (self.store.n_pos, self.corpus.n_tokens))
        for q in range(self.P):
            z = self.store.full(q)
            if len(z) and (z.min() < 0 or z.max() >= self.n_topics):
                raise DataIntegrityError("checkpoint particle %d has assignments out of range" % q)
            nwk, nk, ndk = gk.counts_from_z(self.corpus.tok_w, self.corpus.tok_d, z,
                                            self.n_words, D, self.n_topics)
            self.nwk[q], self.nk[q], self.ndk[q, :D] = nwk, nk, ndk
        return self
