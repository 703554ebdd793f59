"""o-LDA and the incremental Gibbs sampler (Canini, Shi & Griffiths 2009, Algorithms 2-3).

Both consume the token stream in order (documents in stream order; inside a document the
bag-of-words tokens in an order shuffled by (seed, position of the document in the stream),
since shards keep no word order). Token i (word w in document d) is sampled once from

    P(z_i = k | z_<i, w_≤i) ∝ (n_kw + β)/(n_k + Vβ) · (n_dk + α)       (counts of tokens < i)

* :class:`OLDA` first runs batch collapsed Gibbs (``init_sweeps`` sweeps) on an initial prefix
  of ``init_docs`` documents (default: ``init_fraction`` = 10% of ``n_docs_total``), then samples
  every later token once and never revisits it.
* :class:`IncrementalGibbs` has no batch phase by default (``init_docs = 0``; a prefix can be
  given, as in the paper's evaluation), and after each token i resamples the rejuvenation set
  R(i) of ``n_rejuv`` earlier positions j ≤ i from their full conditionals
  P(z_j | z_¬j, w). R(i) is uniform over 0..i (``schedule="uniform"``) or decayed towards
  recent words (``schedule="decay"``: j = i − G, G geometric with mean ``decay_scale`` tokens).

Either can instead start from a given batch sample (``initialise(batch, z)``), which is how all
online samplers of the evaluation share one batch Gibbs sample on the first 10%.

The state (tokens, z, and the random stream) is checkpointed; counts are recomputed from z on
resume, which then continues exactly as an uninterrupted run. A checkpoint taken while the batch
prefix is still being buffered (fewer than ``init_docs`` documents seen) holds those buffered
documents (arrays ``prefix_indptr``, ``prefix_word_ids``, ``prefix_counts``), so a resumed run
runs the batch phase on exactly the same prefix.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Dict, Optional

import numpy as np

from lda_core.algorithms import gibbs_kernel as gk
from lda_core.algorithms.gibbs import (CollapsedGibbs, CountsSampler, grow_rows, phi_from_counts,
                                       restore_tokens, rng_from_json, rng_to_json)
from lda_core.algorithms.params import Param, ParamSpec
from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, UsageError
from lda_core.storage.state import TopicState

logger = logging.getLogger(__name__)


PREFIX_ARRAYS = ("prefix_indptr", "prefix_word_ids", "prefix_counts")


def prefix_to_arrays(pending) -> Dict[str, np.ndarray]:
    """The buffered prefix documents (a list of DocBatch) as checkpoint arrays ({} if none).

    Document ids are not kept: the samplers never use them (a document's random streams are
    keyed by its position in the stream), so the restored prefix gives the same run."""
    if not pending:
        return {}
    b = DocBatch.concat(pending) if len(pending) > 1 else pending[0]
    return {"prefix_indptr": b.indptr.copy(), "prefix_word_ids": b.word_ids.copy(),
            "prefix_counts": b.counts.copy()}


def prefix_from_arrays(arrays, n_words: int, init_docs: int):
    """Inverse of :func:`prefix_to_arrays`: ``([DocBatch], n_docs)``, or ``([], 0)`` when the
    checkpoint holds no buffered prefix. ValueError if the arrays are inconsistent."""
    have = [k for k in PREFIX_ARRAYS if k in arrays]
    if not have:
        return [], 0
    if len(have) != len(PREFIX_ARRAYS):
        raise DataIntegrityError("checkpoint holds only part of the buffered prefix (%s)"
                                 % ", ".join(have))
    indptr = np.asarray(arrays["prefix_indptr"])
    if indptr.ndim != 1 or len(indptr) < 2:
        raise DataIntegrityError("checkpoint prefix_indptr must hold at least 2 offsets")
    n = len(indptr) - 1
    if n > init_docs:
        raise DataIntegrityError("checkpoint buffers %d prefix documents but init_docs is %d"
                                 % (n, init_docs))
    b = DocBatch(tuple("prefix-%d" % i for i in range(n)), indptr, arrays["prefix_word_ids"],
                 arrays["prefix_counts"])      # checks indptr / word ids / counts agree
    if b.nnz and (int(b.word_ids.min()) < 0 or b.max_word_id() >= n_words):
        raise DataIntegrityError("checkpoint prefix word ids out of range [0, %d)" % n_words)
    return [b], n


def add_initial_sample(sampler, batch: DocBatch, z: Optional[np.ndarray]):
    """Add the batch prefix ``batch`` to the (still empty) ``sampler.corpus`` and return
    ``(t1, z)``: its number of tokens and its topic assignments -- ``z`` as given, checked, or
    if None those of ``sampler.init_sweeps`` sweeps of batch Gibbs with the sampler's seed."""
    if sampler.corpus.n_docs:
        raise ValueError("initialise() must come before any document is processed")
    if z is None:
        g = CollapsedGibbs(sampler.n_topics, sampler.n_words, alpha=sampler.alpha,
                           eta=sampler.eta, seed=sampler.seed)
        g.fit(batch, sweeps=sampler.init_sweeps)
        z = g.assignments
    _, t1, _ = sampler.corpus.add(batch)
    z = np.asarray(z)
    if len(z) != t1 or (len(z) and (z.min() < 0 or z.max() >= sampler.n_topics)):
        raise ValueError("initial assignments must be %d topics in [0, %d)"
                         % (t1, sampler.n_topics))
    return t1, z


def resolve_init_docs(init_docs, init_fraction, n_docs_total, required):
    """Number of prefix documents for the batch phase (the settings already checked)."""
    if init_docs is not None:
        return init_docs
    if n_docs_total is not None and init_fraction is not None:
        return int(math.ceil(init_fraction * n_docs_total))
    if required:
        raise UsageError("o-LDA needs the size of its batch prefix: give init_docs, or "
                         "n_docs_total (the stream's document count) with init_fraction "
                         "(default 0.1)")
    return 0


# The settings of the stream-order samplers (o-LDA, incremental Gibbs, the particle filter
# adds its own), in params() order. init_fraction and n_docs_total are resolved into
# init_docs, which is what a checkpoint records.
STREAM_SPEC = ParamSpec(
    Param("alpha", float, 0.1, lo=0, lo_open=True, symbol="alpha", option="alpha",
          help="document-topic prior"),
    Param("eta", float, 0.1, lo=0, lo_open=True, symbol="beta", option="eta",
          help="topic-word prior"),
    Param("n_rejuv", int, 4, lo=0, hi=100000, symbol="|R(i)|", option="rejuvenation",
          help="earlier positions resampled after every token"),
    Param("schedule", str, "uniform", choices=("uniform", "decay"),
          option="rejuvenation_schedule",
          help="how R(i) is drawn: uniform over all earlier positions, or decayed towards "
               "recent ones"),
    Param("decay_scale", float, 1000.0, lo=0, lo_open=True, option="rejuvenation_decay",
          help="schedule decay: mean distance back, in tokens"),
    Param("init_docs", int, None, lo=0, option="init_docs",
          help="documents in the batch-Gibbs prefix (unset: from init_fraction)"),
    Param("init_fraction", float, None, lo=0, hi=1, option="init_fraction", record=False,
          help="fraction of the stream's documents in the batch-Gibbs prefix"),
    Param("n_docs_total", int, None, lo=1, record=False, symbol="D",
          help="documents in the stream (sizes the prefix from init_fraction)"),
    Param("init_sweeps", int, 100, lo=0, hi=10 ** 6, option="init_sweeps",
          help="batch-Gibbs sweeps over the prefix"),
    Param("seed", int, 0, lo=0, hi=2 ** 63 - 1, help="seed of every random draw"),
)


class _OnlineGibbs(CountsSampler):
    """Shared machinery: one chain, tokens in stream order, optional batch prefix."""

    name = "online"
    SPEC = STREAM_SPEC
    # every copy of the state a run holds (lda_core.resources.check_algorithm_memory): n_kw
    # (int32), the batch start's sweep buffer, the topic-word matrices of the checkpoint and of
    # an evaluation (float64), and n_dk (int32) over every document seen. A run that evaluates
    # at its end grows by 22 (o-LDA) and 19 (incremental Gibbs) bytes per added topic-word
    # cell, n_dk's share included, between K = 500 and 2000 on V = 3000
    # (benchmarks/run_memory_bench.py); counted with a third more than o-LDA's
    RUN_BYTES_PER_CELL = 28.0
    RUN_BYTES_PER_DOC_CELL = 4.0
    _requires_prefix = False

    def __init__(self, n_topics: int, n_words: int, **settings):
        """``settings``: any of :attr:`SPEC` (the rest take their defaults)."""
        super().__init__(n_topics, n_words, **settings)
        self.init_docs = resolve_init_docs(self.init_docs, self.init_fraction,
                                           self.n_docs_total, self._requires_prefix)
        self.rng = np.array([gk.seed_state(self.seed, 7, 0)], np.uint64)
        self.initialised = self.init_docs == 0
        self._pending = []          # prefix documents buffered until init_docs are seen
        self._pending_n = 0
        self.seconds = 0.0
        self.step = 0               # process() calls applied (batches consumed)

    @property
    def docs_seen(self) -> int:
        return self.corpus.n_docs + self._pending_n

    @property
    def assignments(self) -> np.ndarray:
        return self.z[:self.corpus.n_tokens]

    # -- initial sample -----------------------------------------------------------------------
    def initialise(self, batch: DocBatch, z: Optional[np.ndarray] = None) -> None:
        """Start from ``batch`` with assignments ``z`` (token order of
        :class:`~lda_core.algorithms.gibbs.CollapsedGibbs` with the same seed), or, if ``z`` is None, from
        ``init_sweeps`` sweeps of batch Gibbs on it."""
        t1, z = add_initial_sample(self, batch, z)
        self.z = grow_rows(self.z, t1)
        self.z[:t1] = z
        self.nwk, self.nk, ndk = gk.counts_from_z(self.corpus.tok_w, self.corpus.tok_d,
                                                  self.assignments, self.n_words,
                                                  self.corpus.n_docs, self.n_topics)
        self.ndk = grow_rows(ndk, max(self.corpus.n_docs, 16))
        self.initialised = True
        self._after_initialise()

    def _after_initialise(self):
        pass

    # -- stream -------------------------------------------------------------------------------
    def process(self, batch: DocBatch) -> Dict[str, Any]:
        """Consume the next documents of the stream. Returns {'docs', 'tokens', 'seconds'}."""
        t = time.perf_counter()
        n_tok = 0
        self.step += 1
        if not self.initialised:
            need = self.init_docs - self._pending_n
            head = batch.take(np.arange(min(need, len(batch.doc_ids))))
            self._pending.append(head)
            self._pending_n += len(head.doc_ids)
            if self._pending_n >= self.init_docs:
                prefix = DocBatch.concat(self._pending) if len(self._pending) > 1 \
                    else self._pending[0]
                self._pending, self._pending_n = [], 0
                self.initialise(prefix)
                n_tok += self.corpus.n_tokens
            if len(head.doc_ids) == len(batch.doc_ids):
                self.seconds += time.perf_counter() - t
                return {"docs": len(batch.doc_ids), "tokens": n_tok,
                        "seconds": time.perf_counter() - t}
            batch = batch.take(np.arange(len(head.doc_ids), len(batch.doc_ids)))
        t0, t1, d0 = self.corpus.add(batch)
        self.z = grow_rows(self.z, t1)
        self.ndk = grow_rows(self.ndk, self.corpus.n_docs)
        self._advance(t0, t1)
        secs = time.perf_counter() - t
        self.seconds += secs
        return {"docs": len(batch.doc_ids), "tokens": n_tok + t1 - t0, "seconds": secs}

    def _advance(self, t0, t1):
        gk.online_add(self.corpus.tok_w, self.corpus.tok_d, self.z, t0, t1, self.nwk, self.nk,
                      self.ndk, self.alpha, self.eta, self.n_words * self.eta, self.n_rejuv,
                      self.decay_scale if self.schedule == "decay" else 0.0, self.rng)

    # -- estimates ------------------------------------------------------------------------
    def topic_word(self) -> np.ndarray:
        """φ_kw = (n_kw + β)/(n_k + Vβ) of the current sample (K x V)."""
        return phi_from_counts(self.nwk, self.nk, self.eta)

    def doc_topic_counts(self) -> np.ndarray:
        """n_dk of the documents seen (in stream order)."""
        return self.ndk[:self.corpus.n_docs]

    # -- checkpoints ----------------------------------------------------------------------
    def to_state(self, copy: bool = True):
        """The complete state; during the batch prefix it holds the buffered documents
        (``copy`` is accepted for the interface; the arrays are always copied)."""
        arrays = {"tok_w": self.corpus.tok_w.copy(), "doc_ptr": self.corpus.doc_ptr.copy(),
                  "z": self.assignments.copy()}
        arrays.update(prefix_to_arrays(self._pending))
        return TopicState(algorithm=self.name, n_topics=self.n_topics, n_words=self.n_words,
                          vocab_hash=None, arrays=arrays, params=self.params(),
                          step=self.step, docs_seen=self.docs_seen,
                          rng=rng_to_json(self.rng[0]),
                          info={"initialised": bool(self.initialised),
                                "n_tokens": int(self.corpus.n_tokens),
                                "seconds": self.seconds})

    @classmethod
    def from_state(cls, state, *, n_threads: Optional[int] = None, take: bool = False):
        """The sampler of ``state`` (one chain: ``n_threads`` is ignored)."""
        self = cls(state.n_topics, state.n_words, **cls.SPEC.recorded(state.params))
        restore_tokens(self, state)
        self.rng[0] = np.uint64(rng_from_json(state.rng))
        self.initialised = bool(state.info.get("initialised", True))
        self._pending, self._pending_n = prefix_from_arrays(state.arrays, self.n_words,
                                                            self.init_docs)
        if self._pending_n and (self.initialised or self.corpus.n_docs):
            raise DataIntegrityError(
                "checkpoint holds a buffered prefix and sampled documents; it is "
                "inconsistent")
        self.seconds = float(state.info.get("seconds", 0.0))
        self.step = state.step
        return self


class OLDA(_OnlineGibbs):
    """o-LDA (see module docstring): batch prefix, then every token sampled once."""

    name = "o-lda"
    _requires_prefix = True
    # never revisits a token: no rejuvenation (its settings are recorded, not options)
    SPEC = (STREAM_SPEC.replace("n_rejuv", default=0, hi=0, option=None,
                                help="o-LDA samples every token once: always 0")
            .replace("schedule", option=None).replace("decay_scale", option=None)
            .replace("init_fraction", default=0.1))


class IncrementalGibbs(_OnlineGibbs):
    """Incremental Gibbs (see module docstring): |R(i)| = ``n_rejuv`` (default 4) earlier
    positions resampled after every token."""

    name = "incremental-gibbs"
    SPEC = STREAM_SPEC
