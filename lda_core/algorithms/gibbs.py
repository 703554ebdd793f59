"""Collapsed Gibbs sampling for LDA (Griffiths & Steyvers 2004): the batch reference.

The state is the topic assignment z_i of every token; the counts n_kw, n_k, n_dk are functions
of z. One sweep resamples every token from

    P(z_i = k | z_¬i, w) ∝ (n_kw^¬i + η)/(n_k^¬i + Vη) · (n_dk^¬i + α)

(kernel: :mod:`lda_core.algorithms.gibbs_kernel`, SparseLDA bucket split). Estimates (Griffiths &
Steyvers 2004, eqs. 6-7)::

    φ_kw = (n_kw + η)/(n_k + Vη)            θ_dk = (n_dk + α)/(N_d + Kα)

averaged over the sweeps after the first ``burn_in`` (default ``DEFAULT_BURN_IN`` = 50: the
chain starts from uniformly random assignments, and averaging those early sweeps into φ would
blur the topics), or from the current sample while no sweep has been kept yet (fewer sweeps than
``burn_in`` so far).

Multi-core: with ``n_parts > 1`` each sweep is the approximate distributed sweep of AD-LDA
(Newman, Asuncion, Smyth & Welling 2009): the documents are cut into ``n_parts`` contiguous
blocks of about equal token counts, each block is swept against its own copy of (n_kw, n_k)
taken at the start of the sweep (so word-topic counts are up to one sweep stale across blocks),
and the count changes are summed after the sweep — after which the counts are again exactly
those of z. Random draws come from streams derived from (seed, sweep, document), so the result
depends on (seed, n_parts) only, never on the number of threads; ``n_parts = 1`` is the exact
sequential sampler.

As a :class:`~lda_core.algorithms.algorithm.SequentialSampler`, ``process(batch)`` appends documents and
gives their tokens an initial assignment: uniformly random (``init="random"``, the default) or
sampled sequentially from the conditional given all earlier tokens (``init="sequential"``, the
o-LDA step); ``sweep(n)`` / ``fit(batch, sweeps, burn_in)`` do the batch work.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, Optional

import numpy as np

from lda_core.algorithms import gibbs_kernel as gk
from lda_core.algorithms.algorithm import SequentialSampler
from lda_core.algorithms.params import check_int, Param, ParamSpec
from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, InputError
from lda_core.storage.state import TopicState

logger = logging.getLogger(__name__)

MAX_SWEEPS = 1_000_000
DEFAULT_BURN_IN = 50      # sweeps discarded before φ is averaged (half the CLI's 100 sweeps)
_RNG_KIND = "SplitMix64"


def rng_to_json(state: int) -> dict:
    return {"bit_generator": _RNG_KIND, "state": str(int(state))}


def rng_from_json(d: Optional[dict]) -> int:
    if not d or d.get("bit_generator") != _RNG_KIND:
        raise DataIntegrityError("checkpoint rng must be a %s state, got %r" % (_RNG_KIND, d))
    v = int(d["state"])
    if not 0 <= v < 2 ** 64:
        raise DataIntegrityError("checkpoint rng state %r is out of range" % (d["state"],))
    return v


class TokenCorpus:
    """The tokens seen so far, in stream order, in growable arrays (amortised doubling):
    ``tok_w`` (word id), ``tok_d`` (document index), ``doc_ptr`` (token offsets)."""

    def __init__(self, n_words: int, seed: int):
        self.n_words = n_words
        self.seed = seed
        self._w = np.zeros(1024, np.int32)
        self._d = np.zeros(1024, np.int32)
        self._ptr = np.zeros(1025, np.int64)
        self.n_tokens = 0
        self.n_docs = 0

    @property
    def tok_w(self):
        return self._w[:self.n_tokens]

    @property
    def tok_d(self):
        return self._d[:self.n_tokens]

    @property
    def doc_ptr(self):
        return self._ptr[:self.n_docs + 1]

    def add(self, batch: DocBatch):
        """Append the batch's documents (tokens shuffled per document by (seed, position in the
        stream)); returns (first token, end token, first doc index)."""
        if len(batch.word_ids) and (batch.word_ids.min() < 0
                                    or batch.word_ids.max() >= self.n_words):
            raise InputError("word ids must be in [0, %d) (the model's vocabulary), got [%d, %d]"
                             % (self.n_words, batch.word_ids.min(), batch.word_ids.max()))
        tw, dp = gk.expand_tokens(batch.indptr, batch.word_ids, batch.counts,
                                  np.uint64(self.seed), np.int64(self.n_docs))
        n_new, d_new = len(tw), len(dp) - 1
        t0, d0 = self.n_tokens, self.n_docs
        if t0 + n_new > len(self._w):
            cap = max(2 * len(self._w), t0 + n_new)
            self._w = np.resize(self._w, cap)
            self._d = np.resize(self._d, cap)
        if d0 + d_new + 1 > len(self._ptr):
            self._ptr = np.resize(self._ptr, max(2 * len(self._ptr), d0 + d_new + 1))
        self._w[t0:t0 + n_new] = tw
        self._d[t0:t0 + n_new] = np.repeat(np.arange(d0, d0 + d_new, dtype=np.int32),
                                           np.diff(dp))
        self._ptr[d0 + 1:d0 + d_new + 1] = dp[1:] + t0
        self.n_tokens += n_new
        self.n_docs += d_new
        return t0, t0 + n_new, d0

    def set_arrays(self, tok_w, doc_ptr):
        self._w = np.array(tok_w, np.int32)
        self._ptr = np.array(doc_ptr, np.int64)
        self.n_tokens = len(self._w)
        self.n_docs = len(self._ptr) - 1
        self._d = np.repeat(np.arange(self.n_docs, dtype=np.int32), np.diff(self._ptr))
        if len(self._w) == 0:
            self._w = np.zeros(1024, np.int32)
            self._d = np.zeros(1024, np.int32)


def grow_rows(a: np.ndarray, n: int, axis: int = 0) -> np.ndarray:
    """``a`` with at least ``n`` entries along ``axis`` (new ones zero, doubling capacity)."""
    if a.shape[axis] >= n:
        return a
    shape = list(a.shape)
    shape[axis] = max(n, 2 * a.shape[axis])
    out = np.zeros(shape, a.dtype)
    idx = [slice(None)] * a.ndim
    idx[axis] = slice(0, a.shape[axis])
    out[tuple(idx)] = a
    return out


def infer_theta(batch: DocBatch, phi: np.ndarray, alpha: float, n_iter: int = 100) -> np.ndarray:
    """θ (n x K, rows sum to 1) of new documents with the topics φ (K x V) held fixed:
    θ_k ← α + θ_k Σ_w n_w φ_kw / Σ_j θ_j φ_jw, normalised (``n_iter`` iterations)."""
    return gk.fold_in_theta(batch.indptr, batch.word_ids, batch.counts.astype(np.float64),
                            np.ascontiguousarray(phi, np.float64), float(alpha), int(n_iter))


def phi_from_counts(nwk: np.ndarray, nk: np.ndarray, eta: float) -> np.ndarray:
    """φ_kw = (n_kw + η)/(n_k + Vη) from word-major counts nwk (V x K): K x V float64."""
    V = nwk.shape[0]
    return (nwk.T.astype(np.float64) + eta) / (nk.astype(np.float64)[:, None] + V * eta)


class CountsSampler(SequentialSampler):
    """A collapsed sampler keeping the counts n_kw, n_k, n_dk of its assignments z over a
    :class:`TokenCorpus` (batch Gibbs, o-LDA, incremental Gibbs)."""

    def __init__(self, n_topics: int, n_words: int, **settings):
        """K (at most 32767: z is int16), V, every setting of :attr:`SPEC` (the rest take their
        defaults), and empty counts over an empty corpus."""
        self.n_topics = check_int("n_topics", n_topics, 1, 32767)
        self.n_words = check_int("n_words", n_words, 1)
        self.SPEC.apply(self, settings, self.name)
        self.corpus = TokenCorpus(self.n_words, self.seed)
        self.z = np.zeros(1024, np.int16)
        self.nwk = np.zeros((self.n_words, self.n_topics), np.int32)
        self.nk = np.zeros(self.n_topics, np.int64)
        self.ndk = np.zeros((16, self.n_topics), np.int32)

    def infer(self, batch: DocBatch) -> np.ndarray:
        return infer_theta(batch, self.topic_word(), self.alpha)

    def check_invariants(self):
        """Raise RuntimeError unless n_kw, n_k, n_dk are exactly the counts of z."""
        check_counts(self.corpus.tok_w, self.corpus.tok_d, self.assignments, self.nwk, self.nk,
                     self.ndk[:self.corpus.n_docs])


class CollapsedGibbs(CountsSampler):
    """Batch collapsed Gibbs sampler (see module docstring).

    Parameters: ``n_topics`` K ≥ 1, ``n_words`` V ≥ 1, ``alpha`` > 0, ``eta`` > 0,
    ``burn_in`` sweeps before φ samples are averaged (default 50; φ is the current sample's
    until more sweeps than that have run), ``n_parts`` ≥ 1 document blocks per sweep
    (1 = exact sequential; > 1 = AD-LDA on that many threads), ``seed``, ``init`` the start
    of new documents' assignments ("random" or "sequential"; random mixes better: a sequential
    start can merge planted topics that later sweeps do not split).
    """

    name = "gibbs"
    whole_corpus = True            # trained by fit(all documents, sweeps), not process()
    # every copy of the state a run holds (lda_core.resources.check_algorithm_memory): n_kw
    # (int32), a sweep's buffer, the averaged and the current phi (float64), an evaluation's
    # topic-word matrix, and n_dk (int32) over every document. A burn-in sweep and two averaged
    # sweeps that evaluate at the end grow by 28 bytes per added topic-word cell, n_dk's share
    # included, between K = 500 and 2000 on V = 3000 (benchmarks/run_memory_bench.py); counted
    # with a third more, and 6 bytes a cell more per document block of AD-LDA (each block's
    # counts and buffer)
    RUN_BYTES_PER_CELL = 30.0
    RUN_BYTES_PER_CELL_EACH = {"n_parts": 6.0}
    RUN_BYTES_PER_DOC_CELL = 4.0

    # every setting, in params() order (a new setting is one line here; the constructor,
    # params(), `ldabeam train` and the Flex Template metadata take it from this spec)
    SPEC = ParamSpec(
        Param("alpha", float, 0.1, lo=0, lo_open=True, symbol="alpha", option="alpha",
              help="document-topic prior"),
        Param("eta", float, 0.01, lo=0, lo_open=True, symbol="eta", option="eta",
              help="topic-word prior"),
        Param("burn_in", int, DEFAULT_BURN_IN, lo=0, hi=MAX_SWEEPS, option="burn_in",
              help="sweeps before phi is averaged"),
        Param("n_parts", int, 1, lo=1, hi=4096, option="gibbs_parts",
              help="document blocks per sweep: 1 = the exact sequential sampler, N > 1 = "
                   "AD-LDA on N threads (the result depends on N)"),
        Param("seed", int, 0, lo=0, hi=2 ** 63 - 1, help="seed of every random draw"),
        Param("init", str, "random", choices=("random", "sequential"),
              help="initial assignments of new documents: uniformly random, or sampled from "
                   "the conditional given all earlier tokens"),
    )

    def __init__(self, n_topics: int, n_words: int, **settings):
        """``settings``: any of :attr:`SPEC` (the rest take their defaults)."""
        super().__init__(n_topics, n_words, **settings)
        self.sweeps_done = 0
        self.step = 0             # process() calls applied (batches consumed, for the trainer)
        self.phi_sum = None       # Σ over kept sweeps of φ (K x V float64)
        self.n_kept = 0

    # -- documents ------------------------------------------------------------------------
    @property
    def docs_seen(self) -> int:
        return self.corpus.n_docs

    def _add(self, batch: DocBatch):
        t0, t1, d0 = self.corpus.add(batch)
        self.z = grow_rows(self.z, t1)
        self.ndk = grow_rows(self.ndk, self.corpus.n_docs)
        return t0, t1, d0

    def process(self, batch: DocBatch) -> Dict[str, Any]:
        """Append documents and give their tokens initial assignments (no sweep): uniform at
        random (``init="random"``, the usual batch start, stream (seed, document)) or sampled
        from the conditional given all earlier tokens (``init="sequential"``, the o-LDA step).
        Returns {'docs', 'tokens'}."""
        t0, t1, d0 = self._add(batch)
        self.step += 1
        if self.init == "random":
            gk.random_init(self.corpus.tok_w, self.corpus.tok_d, self.z, t0, t1, self.nwk,
                           self.nk, self.ndk, np.uint64(self.seed))
        else:
            rng = np.array([gk.stream_seed(np.uint64(self.seed), np.uint64(2 ** 32 + 1),
                                           np.uint64(d0))], np.uint64)
            gk.online_add(self.corpus.tok_w, self.corpus.tok_d, self.z, t0, t1, self.nwk,
                          self.nk, self.ndk, self.alpha, self.eta, self.n_words * self.eta, 0,
                          0.0, rng)
        return {"docs": len(batch.doc_ids), "tokens": t1 - t0}

    def _partitions(self):
        """Contiguous document blocks of about equal token counts."""
        ptr = self.corpus.doc_ptr
        D = self.corpus.n_docs
        P = min(self.n_parts, max(D, 1))
        cuts = np.searchsorted(ptr, np.linspace(0, ptr[-1], P + 1)[1:-1])
        bounds = np.concatenate([[0], np.clip(cuts, 0, D), [D]]).astype(np.int64)
        return bounds, np.arange(D, dtype=np.int64)

    def sweep(self, n: int = 1, check: bool = False) -> Dict[str, Any]:
        """Run ``n`` sweeps over all documents; after ``burn_in`` sweeps, each sweep's φ is
        added to the average. ``check`` verifies the count invariants after every sweep."""
        n = check_int("sweeps", n, 0, MAX_SWEEPS)
        tw, dp = self.corpus.tok_w, self.corpus.doc_ptr
        z = self.z[:self.corpus.n_tokens]
        ndk = self.ndk[:self.corpus.n_docs]
        vbeta = self.n_words * self.eta
        t = time.perf_counter()
        loc = None
        nz = None
        for _ in range(n):
            if self.n_parts == 1:
                if nz is None:
                    nz = (np.empty(self.nwk.shape, np.int16), np.empty(self.n_words, np.int32))
                gk.gibbs_sweep_serial(dp, tw, z, self.nwk, self.nk, ndk, self.alpha, self.eta,
                                      vbeta, np.uint64(self.seed), np.int64(self.sweeps_done),
                                      nz[0], nz[1])
            else:
                bounds, docs = self._partitions()
                P = len(bounds) - 1
                if loc is None or loc[0].shape[0] != P:
                    loc = (np.empty((P,) + self.nwk.shape, np.int32),
                           np.empty((P, self.n_topics), np.int64),
                           np.empty((P,) + self.nwk.shape, np.int16),
                           np.empty((P, self.n_words), np.int32))
                gk.gibbs_sweep_adlda(bounds, docs, dp, tw, z, self.nwk, self.nk, ndk,
                                     self.alpha, self.eta, vbeta, np.uint64(self.seed),
                                     np.int64(self.sweeps_done), *loc)
            self.sweeps_done += 1
            if check:
                self.check_invariants()
            if self.sweeps_done > self.burn_in:
                phi = phi_from_counts(self.nwk, self.nk, self.eta)
                self.phi_sum = phi if self.phi_sum is None else self.phi_sum + phi
                self.n_kept += 1
        secs = time.perf_counter() - t
        info = {"sweeps": self.sweeps_done, "tokens": int(self.corpus.n_tokens),
                "seconds": secs,
                "tokens_per_s": self.corpus.n_tokens * n / secs if secs > 0 else float("nan")}
        logger.info("gibbs: %d sweeps done, %d tokens, %.3g tokens/s", self.sweeps_done,
                    self.corpus.n_tokens, info["tokens_per_s"])
        return info

    def fit(self, batch: DocBatch, sweeps: int = 100, burn_in: Optional[int] = None,
            check: bool = False) -> "CollapsedGibbs":
        """Batch reference: add ``batch`` (initial assignments as ``init`` says: uniformly
        random by default), then ``sweeps`` sweeps; φ averages the sweeps after the first
        ``burn_in`` (given here, or the sampler's own, default 50)."""
        if burn_in is not None:
            self.burn_in = check_int("burn_in", burn_in, 0, MAX_SWEEPS)
        self.process(batch)
        self.sweep(sweeps, check=check)
        return self

    # -- estimates ------------------------------------------------------------------------
    def topic_word(self) -> np.ndarray:
        """φ (K x V): the average over kept sweeps, else the current sample's estimate."""
        if self.n_kept:
            return self.phi_sum / self.n_kept
        return phi_from_counts(self.nwk, self.nk, self.eta)

    def doc_topic(self) -> np.ndarray:
        """θ_dk = (n_dk + α)/(N_d + Kα) of the documents held (current sample)."""
        ndk = self.ndk[:self.corpus.n_docs].astype(np.float64)
        return (ndk + self.alpha) / (ndk.sum(1, keepdims=True) + self.n_topics * self.alpha)

    def doc_topic_counts(self) -> np.ndarray:
        return self.ndk[:self.corpus.n_docs]

    @property
    def assignments(self) -> np.ndarray:
        return self.z[:self.corpus.n_tokens]

    # -- checkpoints ----------------------------------------------------------------------
    def state_params(self) -> Dict[str, Any]:
        return {"n_kept": self.n_kept, "sweeps_done": self.sweeps_done}

    def to_state(self, copy: bool = True):
        """The state (``copy`` is accepted for the interface; the arrays are always
        copied)."""
        arrays = {"tok_w": self.corpus.tok_w.copy(), "doc_ptr": self.corpus.doc_ptr.copy(),
                  "z": self.assignments.copy()}
        if self.phi_sum is not None:
            arrays["phi_sum"] = self.phi_sum.copy()
        return TopicState(algorithm=self.name, n_topics=self.n_topics, n_words=self.n_words,
                          vocab_hash=None, arrays=arrays, params=self.params(),
                          step=self.step, docs_seen=self.docs_seen, rng=None,
                          info={"n_tokens": int(self.corpus.n_tokens)})

    @classmethod
    def from_state(cls, state, *, n_threads: Optional[int] = None,
                   take: bool = False) -> "CollapsedGibbs":
        """The sampler of ``state`` (its threads are the ``n_parts`` setting: ``n_threads``
        is ignored)."""
        p = state.params
        self = cls(state.n_topics, state.n_words, **cls.SPEC.recorded(p))
        restore_tokens(self, state)
        self.sweeps_done = int(p["sweeps_done"])
        self.step = state.step
        self.n_kept = int(p.get("n_kept", 0))
        if "phi_sum" in state.arrays:
            self.phi_sum = np.array(state.arrays["phi_sum"], np.float64)
        return self


def restore_tokens(self, state):
    """Shared by the single-chain samplers: tokens, z and the counts recomputed from z."""
    a = state.arrays
    tok_w, doc_ptr, z = a["tok_w"], a["doc_ptr"], a["z"]
    if doc_ptr.ndim != 1 or len(doc_ptr) < 1 or doc_ptr[0] != 0 or doc_ptr[-1] != len(tok_w) \
            or len(z) != len(tok_w) or np.any(np.diff(doc_ptr) < 0):
        raise DataIntegrityError("checkpoint token arrays are inconsistent (doc_ptr/tok_w/z)")
    if len(tok_w) and (tok_w.min() < 0 or tok_w.max() >= self.n_words):
        raise DataIntegrityError("checkpoint word ids out of range [0, %d)" % self.n_words)
    if len(z) and (z.min() < 0 or z.max() >= self.n_topics):
        raise DataIntegrityError(
            "checkpoint topic assignments out of range [0, %d)" % self.n_topics)
    self.corpus.set_arrays(tok_w, doc_ptr)
    self.z = grow_rows(np.array(z, np.int16), max(len(z), 1))
    nwk, nk, ndk = gk.counts_from_z(self.corpus.tok_w, self.corpus.tok_d, self.assignments,
                                    self.n_words, self.corpus.n_docs, self.n_topics)
    self.nwk, self.nk = nwk, nk
    self.ndk = grow_rows(ndk, max(self.corpus.n_docs, 1))


def check_counts(tok_w, tok_d, z, nwk, nk, ndk):
    """The count invariant: n_kw, n_k, n_dk equal the counts recomputed from z (RuntimeError
    naming the first difference otherwise)."""
    K = nwk.shape[1]
    rw, rk, rd = gk.counts_from_z(tok_w, tok_d, z, nwk.shape[0], ndk.shape[0], K)
    for name, got, want in (("n_kw", nwk, rw), ("n_k", nk, rk), ("n_dk", ndk, rd)):
        if not np.array_equal(got, want):
            idx = np.argwhere(np.asarray(got) != np.asarray(want))[0]
            raise RuntimeError("count invariant broken: %s%s = %d, z gives %d"
                               % (name, list(idx), got[tuple(idx)], want[tuple(idx)]))
