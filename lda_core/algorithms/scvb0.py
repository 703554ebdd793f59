"""Stochastic collapsed variational Bayes, zero-order (SCVB0; Foulds et al., KDD 2013).

Global state: the expected word-topic counts N^Φ (V x K, word-major) and topic counts N^Z (K).
Local (per document, never stored): N^Θ_j (K). See ``lda_core.algorithms.scvb0_kernel`` for the E-step.

Global step after a minibatch M of |M| tokens (paper eqs. 7-8), C = corpus token count:

    N̂^Φ = (C/|M|) Σ_{(j,w) in M} m_jw γ_jw ,   N̂^Z = (C/|M|) Σ m_jw γ_jw   (summed over words)
    ρ^Φ_t = min(1, s_φ (τ_φ + t)^-κ_φ),  t = minibatches applied before this one (from 0)
    N^Φ ← (1-ρ^Φ_t) N^Φ + ρ^Φ_t N̂^Φ ,   N^Z ← (1-ρ^Φ_t) N^Z + ρ^Φ_t N̂^Z

Topics: φ_kw = (N^Φ_wk + η) / (N^Z_k + Vη).

The decay of N^Φ is lazy: N^Φ = π·Ñ. A step multiplies the scalar π by (1-ρ) and adds
ρ N̂^Φ / π to the minibatch's rows of Ñ only, so it costs O(U·K) for the U distinct words of
the minibatch instead of a dense V x K pass; when π falls below ``renorm_below`` Ñ is
multiplied by π once and π reset to 1. N^Z is dense (K) and decayed eagerly.

Defaults are the paper's (§5): α=0.1, η=0.01, minibatches of 100 documents, one burn-in pass,
topic schedule s=10, τ=1000, κ=0.9, document schedule s=1, τ=10, κ=0.9. N^Φ is initialised
uniformly at random in [0, init_scale) (Algorithm 2: "randomly initialize N^Φ"; the paper
gives no scale), N^Z = Σ_w N^Φ_w. ``init_scale`` = 0.1 is ours: with the paper's slow topic
schedule (ρ^Φ_0 ≈ 0.02) an initial mass comparable to C (scale 1 gives V·K/2) takes many
minibatches to forget (docs/algorithms.md, "SCVB0", compares the held-out scores).
If ``corpus_tokens`` (C) is not given, the number of tokens seen so far (including the
current minibatch) is used, which is the natural choice for an open-ended stream.

Collapsed topics are re-seeded after each step as in online VB
(``lda_core.algorithms.word_blocks.dead_topic_splits``; ``reseed`` = 0.02, 0 turns it off): a topic with
less than ``reseed``/K of the minibatch's N̂^Z takes a Beta(½, ½) share of each word of the
busiest topic's Ñ column, drawn from (seed, step, topic); N^Z_j is shared between the two in
the proportion of their columns (docs/algorithms.md gives its effect on dead topics).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional

import numba
import numpy as np

from lda_core.algorithms.algorithm import nonfinite, read_arrays, StochasticAlgorithm
from lda_core.algorithms.estep_vb import local_ids
from lda_core.algorithms.params import check_number, Param, ParamSpec
from lda_core.algorithms.scvb0_kernel import (chunk_bounds, doc_seeds, lazy_add_rows, lazy_tile,
                                             scvb0_estep)
from lda_core.algorithms.sparse_stats import RowBlock, TopicStats
from lda_core.algorithms.word_blocks import (block_bounds, BlockHeader, BlockPartial, blocks_of,
                                             check_rows, combine_partials, dead_topic_splits,
                                             in_row_order, in_word_order, joined_rows, MAX_BLOCKS,
                                             rows_of_words, split_rows, Splits, StepPlan,
                                             WORD_BLOCKS_PARAM)
from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, InputError, StepRefused
from lda_core.storage.state import TopicState
from lda_core.training import schedules

logger = logging.getLogger(__name__)

_INIT_TAG = 0x53435642  # "SCVB": keeps the initialisation stream apart from other seed uses
#: settings added after states were first written, with the value those states meant (states
#: written before re-seeding did not re-seed; an update's running average is never in effect
#: outside the update that set it)
OLDER_SETTINGS = {"reseed": 0.0, "word_blocks": 1, "history": None, "history_from": None}
# Document chunks of a piece in the E-step kernel (its parallel loop; one float64 block of
# the rows each chunk touches): fixed, so the statistics are the same bits with any number of
# threads.
ESTEP_CHUNKS = 4


def check_batch_words(batch: DocBatch, n_words: int) -> None:
    if batch.nnz and (batch.max_word_id() >= n_words or int(batch.word_ids.min()) < 0):
        raise InputError("word ids must lie in [0, %d) (the vocabulary size); found %d..%d"
                         % (n_words, int(batch.word_ids.min()), batch.max_word_id()))


@dataclass
class SCVB0Stats(TopicStats):
    """Minibatch statistics: Σ m·γ per word (RowBlock), its topic totals, and counters.

    Unscaled sums; the global step multiplies by C/|M| with |M| = ``n_tokens``."""

    MAGIC: ClassVar[bytes] = b"LDASCVB2"
    LABEL: ClassVar[str] = "SCVB0"
    SAME: ClassVar[tuple] = ("n_words",)

    block: Optional[RowBlock] = None
    nz: Optional[np.ndarray] = None
    n_words: int = 0

    def __post_init__(self):
        if self.block is None:
            self.block = RowBlock(self.n_topics)
        if self.nz is None:
            self.nz = np.zeros(self.n_topics, np.float64)

    def split_by_block(self, n_blocks: int) -> "list[SCVB0Stats]":
        """One :class:`SCVB0Stats` per word block (``lda_core.algorithms.word_blocks``): that
        block's rows and, in every one, the whole statistics' N^Z sums and counters. Merging
        the pieces' block statistics in piece order gives each row the bits of the whole
        minibatch's merge."""
        rows, vals = self.block.rows, self.block.values
        return [SCVB0Stats(n_topics=self.n_topics, n_words=self.n_words,
                           block=RowBlock(self.n_topics, rows[sl].copy(), vals[sl].copy()),
                           nz=self.nz.copy(), **self.counters())
                for sl in blocks_of(rows, self.n_words, n_blocks)]

    @classmethod
    def join_blocks(cls, parts) -> "SCVB0Stats":
        """The inverse of :meth:`split_by_block`: the parts of blocks 0..B-1 (block order)
        as one :class:`SCVB0Stats`. Every part carries the same N^Z sums and counters;
        ValueError when they differ."""
        parts = list(parts)
        first = parts[0]
        for p in parts[1:]:
            if (p.n_topics, p.n_words, p.counters()) != (first.n_topics, first.n_words,
                                                         first.counters()) \
                    or not np.array_equal(p.nz, first.nz):
                raise ValueError("word-block statistics of different minibatches cannot be "
                                 "joined")
        if len(parts) == 1:
            return first
        rows = np.concatenate([p.block.rows for p in parts])
        if len(rows) > 1 and np.any(np.diff(rows) <= 0):
            raise ValueError("word-block statistics are not in block order")
        return SCVB0Stats(n_topics=first.n_topics, n_words=first.n_words,
                          block=RowBlock(first.n_topics, rows,
                                         np.concatenate([p.block.values for p in parts])),
                          nz=first.nz.copy(), **first.counters())

    def merge(self, other: "SCVB0Stats") -> "SCVB0Stats":
        self.check_mergeable(other)
        self.block.merge(other.block)
        self.nz = self.nz + other.nz
        self.merge_counters(other)
        return self

    def _arrays(self):
        return [("rows", "<i4", self.block.rows), ("values", "<f8", self.block.values),
                ("nz", "<f8", self.nz)]

    def to_bytes(self) -> bytes:
        return self.pack(self._arrays())

    def write_to(self, f, checksum: bool = True) -> int:
        """:meth:`to_bytes`'s bytes written straight from the arrays (no byte copy)."""
        return self.write_packed(f, self._arrays(), checksum)

    @staticmethod
    def _build(K, a):
        if a["values"].shape != (len(a["rows"]), K) or a["nz"].shape != (K,):
            raise ValueError("array shapes do not match K=%d" % K)
        return {"block": RowBlock(K, a["rows"], a["values"]), "nz": a["nz"]}

    @classmethod
    def from_bytes(cls, data: bytes) -> "SCVB0Stats":
        return cls.unpack(data, cls._build)

    @classmethod
    def read_from(cls, f, size: int, verify: bool = True) -> "SCVB0Stats":
        return cls.read_packed(f, size, cls._build, verify)

    # row-structured: a merge of many pieces sizes its sum once (SuffStats.reserve_rows) and
    # adds each piece's rows as they are read, with the sums and layout of ``merge``
    def row_ids(self) -> np.ndarray:
        return self.block.rows

    @classmethod
    def read_row_ids(cls, f, size: int) -> np.ndarray:
        return read_arrays(f, cls.MAGIC, size, stop_after="rows")[1]["rows"]

    def reserve_rows(self, ids: np.ndarray) -> None:
        self.block.reserve(ids)

    @classmethod
    def read_reserved(cls, f, size: int, ids: np.ndarray, verify: bool = True) -> "SCVB0Stats":
        start = f.tell()
        header, arrays = read_arrays(f, cls.MAGIC, size, stop_after="rows")
        f.seek(start)
        try:
            out = cls(n_topics=int(header["n_topics"]), n_words=int(header["n_words"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError("damaged %s statistics: %s" % (cls.LABEL, e)) from None
        out.reserve_rows(np.union1d(arrays["rows"], ids).astype(np.int32))
        return out.merge_from(f, size, verify)

    def merge_from(self, f, size: int, verify: bool = True) -> "SCVB0Stats":
        """:meth:`merge` of the statistics :meth:`write_to` wrote to the next ``size`` bytes
        of ``f``, their rows added into ``self`` as they are read (~32 MB at a time)."""
        at = {}

        def add(rows, r0, header, arrays):
            if not at:
                if (int(header.get("n_topics", -1)) != self.n_topics
                        or int(header.get("n_words", -1)) != self.n_words):
                    raise ValueError("cannot merge %s statistics of K=%s, V=%s into K=%d, V=%d"
                                     % (self.LABEL, header.get("n_topics"),
                                        header.get("n_words"), self.n_topics, self.n_words))
                self.block.reserve(arrays["rows"])
                at["ids"] = arrays["rows"]
            self.block.add_rows(at["ids"][r0:r0 + len(rows)], rows)

        header, arrays = read_arrays(f, self.MAGIC, size, sinks={"values": add}, verify=verify)
        K = int(header["n_topics"])
        arrays["values"] = np.zeros((0, K), np.float64)   # the rows are added already
        arrays["rows"] = np.zeros(0, np.int32)
        return self.merge(type(self)._unpacked(header, arrays, self._build))


class SCVB0(StochasticAlgorithm):
    """SCVB0 on the local/global-step interface (see module docstring for the equations)."""

    name = "scvb0"
    # every copy of the state a run holds (lda_core.resources.check_algorithm_memory): a run
    # that evaluates at its end grows by 52 bytes per added topic-word cell between K = 500 and
    # 2000 on V = 3000 (benchmarks/run_memory_bench.py), six and a half float64 copies of
    # K x V; counted with about a third more
    RUN_BYTES_PER_CELL = 72.0
    DEFAULT_MINIBATCH = 100        # the paper's minibatch M
    stats_type = SCVB0Stats
    word_sharded = True            # the global step by word blocks (lda_core.algorithms.word_blocks)
    NONNEGATIVE_ARRAYS = ("ntilde", "nz")
    _touched_rows: Optional[np.ndarray] = None   # rows of N^Φ the last global step changed
    _row_ids: Optional[np.ndarray] = None        # an E-step view's word ids (estep_view)

    # every setting, in params() order (a new setting is one line here; the constructor,
    # params(), `ldabeam train`, the Flex Template metadata and SCVB0LDA's mapping of its
    # scikit-learn parameters take it from this spec)
    SPEC = ParamSpec(
        Param("alpha", float, 0.1, lo=0, lo_open=True, symbol="alpha", option="alpha",
              sklearn="doc_topic_prior", help="document-topic prior"),
        Param("eta", float, 0.01, lo=0, lo_open=True, symbol="eta", option="eta",
              sklearn="topic_word_prior", help="topic-word prior"),
        Param("corpus_tokens", int, None, lo=1, symbol="C",
              help="tokens in the corpus (unset: estimated from the documents seen)"),
        Param("seed", int, 0, lo=0, hi=2 ** 63 - 1, help="seed of every random draw"),
        Param("burn_in", int, 1, lo=0, hi=1000, option="burn_in",
              help="burn-in passes over each document before the pass that accumulates "
                   "statistics"),
        Param("s_phi", float, 10.0, lo=0, lo_open=True, symbol="s", option="topic_step_scale",
              help="s of the step size rho = s/(tau + t)^kappa for the topic statistics N^Phi, "
                   "N^Z (t = minibatch index)"),
        Param("tau_phi", float, 1000.0, lo=0, symbol="tau", option="topic_step_tau",
              sklearn="learning_offset",
              help="tau of the topic-statistics step size"),
        Param("kappa_phi", float, 0.9, lo=0.5, hi=1.0, lo_open=True, symbol="kappa",
              option="topic_step_kappa", sklearn="learning_decay",
              help="kappa of the topic-statistics step size"),
        Param("s_theta", float, 1.0, lo=0, lo_open=True, symbol="s", option="doc_step_scale",
              help="s of the step size rho = s/(tau + t)^kappa for the per-document "
                   "statistics N^Theta (t = updates within the document)"),
        Param("tau_theta", float, 10.0, lo=0, symbol="tau", option="doc_step_tau",
              help="tau of the per-document step size"),
        Param("kappa_theta", float, 0.9, lo=0.5, hi=1.0, lo_open=True, symbol="kappa",
              option="doc_step_kappa", help="kappa of the per-document step size"),
        Param("dtype", np.dtype, "float64", choices=("float32", "float64"), option="dtype",
              help="floating point type of N^Phi (sums are always float64)"),
        Param("infer_passes", int, 5, lo=1, hi=10000,
              sklearn="max_doc_update_iter",
              help="passes over a document when inferring its topic mixture"),
        Param("shuffle_tokens", bool, True, help="visit a document's tokens in random order"),
        Param("renorm_below", float, 1e-8, lo=0, hi=1, lo_open=True, hi_open=True,
              help="fold the scale pi into N^Phi when it falls below this"),
        Param("init_scale", float, 0.1, lo=0, lo_open=True,
              help="N^Phi starts uniform in [0, init_scale)"),
        Param("reseed", float, 0.02, lo=0, hi=1, hi_open=True,
              help="a topic with less than reseed/K of a minibatch's N^Z is re-seeded "
                   "(0: never)"),
        Param("history", float, None, lo=0,
              help="during an update (LdaModel.update, train --update): what the state "
                   "before it counts as, in tokens; the step is then the running average "
                   "n / (history + n since the update began + n) instead of the schedule's "
                   "(unset: the schedule)"),
        Param("history_from", int, None, lo=0,
              help="during an update: tokens seen when it began"),
        WORD_BLOCKS_PARAM,
    )

    def __init__(self, n_topics: int, n_words: int, *, vocab_hash: Optional[str] = None,
                 n_threads: Optional[int] = None, **settings):
        """``settings``: any of :attr:`SPEC` (the rest take their defaults)."""
        self._configure(n_topics, n_words, vocab_hash=vocab_hash, n_threads=n_threads,
                        **settings)
        # Algorithm 2: "randomly initialize N^Φ" (uniform in [0, init_scale)); N^Z = Σ_w N^Φ_w
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([_INIT_TAG,
                                                                          self.seed])))
        ntilde = (rng.random((self.n_words, self.n_topics)) * self.init_scale).astype(self.dtype)
        self.nz = ntilde.sum(0, dtype=np.float64)
        # drawn in word order, held in row order (word_blocks.rows_of_words)
        self._ntilde = np.ascontiguousarray(in_row_order(ntilde, self.word_blocks))

    def _configure(self, n_topics, n_words, *, vocab_hash, n_threads=None, **settings):
        self.n_topics = check_number("n_topics", n_topics, 1, 1 << 20, integer=True)
        self.n_words = check_number("n_words", n_words, 1, 1 << 31, integer=True)
        self.SPEC.apply(self, settings, self.name)
        if n_threads is not None:
            n_threads = check_number("n_threads", n_threads, 1, numba.config.NUMBA_NUM_THREADS,
                                     integer=True)
        self.n_threads = n_threads
        self.vocab_hash = vocab_hash
        self.step = 0
        self.docs_seen = 0
        self.tokens_seen = 0
        self._pi = 1.0

    # -- helpers --------------------------------------------------------------------------
    def _threads(self):
        n = self.n_threads or numba.get_num_threads()
        return n

    def set_word_blocks(self, n_blocks: int) -> None:
        """Hold the state in ``n_blocks`` word blocks from now on (its rows re-laid out; the
        model is unchanged). Only a run's first step may change B: it fixes the sums."""
        n_blocks = check_number("word_blocks", n_blocks, 1, MAX_BLOCKS, integer=True)
        self._ntilde = np.ascontiguousarray(
            in_row_order(in_word_order(self._ntilde, self.word_blocks), n_blocks))
        self.word_blocks = n_blocks

    def n_phi(self) -> np.ndarray:
        """N^Φ (V x K float64) = π·Ñ (a dense copy; for tests and export)."""
        return self._pi * in_word_order(self._ntilde, self.word_blocks).astype(np.float64)

    def rescale_counts(self, r: float) -> None:
        """Multiply N^Φ and N^Z by ``r``: the expected counts of a corpus ``r`` times as
        large with the same topics -- an update's starting state when its corpus grows
        (:mod:`ldabeam.model`). O(K): N^Φ = π Ñ, so π changes."""
        r = float(r)
        if not (r > 0 and np.isfinite(r)):
            raise ValueError("rescale_counts needs a finite r > 0, got %r" % (r,))
        self._pi *= r
        self.nz = self.nz * r

    def rho_phi(self, t: int) -> float:
        return float(min(1.0, self.s_phi * (self.tau_phi + t) ** (-self.kappa_phi)))

    def _run(self, batch: DocBatch, passes: int, accumulate: bool, tag: str, pieces=None):
        """The kernel over ``batch`` cut into ``pieces`` (document ranges; default one):
        (distinct words, N^Θ, the pieces' Σ m·γ summed in piece order, its N^Z, updates)."""
        check_batch_words(batch, self.n_words)
        uniq, inv = local_ids(batch.word_ids, self.n_words)
        uniq = uniq.astype(np.int32)
        rows = rows_of_words(uniq, self.n_words, self.word_blocks).astype(np.int32)
        if self._row_ids is not None:            # an E-step view: it holds rows _row_ids
            want = rows
            rows = np.searchsorted(self._row_ids, want).astype(np.int32)
            if len(want) and (rows.max() >= len(self._row_ids)
                              or not np.array_equal(self._row_ids[rows], want)):
                raise ValueError("the batch has words whose rows this E-step view does not hold")
        tile = lazy_tile(rows, self._ntilde, float(self._pi), self.nz, self.eta,
                         float(self.n_words))
        seeds = doc_seeds(self.seed, self.step, batch.doc_ids, tag)
        # a fixed document split (not the thread count): the chunks' sums are added in chunk
        # order, so the bits of a piece's statistics do not depend on the threads
        chunks, piece_chunks = chunk_bounds(pieces or [(0, batch.n_docs)], ESTEP_CHUNKS)
        old = numba.get_num_threads()
        try:
            if self.n_threads:
                numba.set_num_threads(self.n_threads)
            ntheta, acc, nz, updates = scvb0_estep(
                batch.indptr, inv.astype(np.int32).ravel(), batch.counts, tile, self.alpha,
                passes, self.s_theta, self.tau_theta, self.kappa_theta, seeds,
                self.shuffle_tokens, chunks, piece_chunks, accumulate)
        finally:
            if self.n_threads:
                numba.set_num_threads(old)
        return uniq, ntheta, acc, nz, updates

    # -- StochasticAlgorithm --------------------------------------------------------------
    def empty_stats(self) -> SCVB0Stats:
        return SCVB0Stats(n_topics=self.n_topics, n_words=self.n_words)

    def local_step(self, batch: DocBatch, **kw) -> SCVB0Stats:
        """Burn-in + 1 passes per document with N^Φ, N^Z frozen; returns Σ m·γ per word."""
        return self.local_step_pieces(batch, None)

    def local_step_pieces(self, batch: DocBatch, pieces) -> SCVB0Stats:
        """The statistics of ``batch`` cut into ``pieces`` (document ranges, in order; None:
        one) merged in piece order -- the bits of each piece's :meth:`local_step` merged with
        ``SCVB0Stats.merge`` -- from one kernel run over the whole batch (one tile, one
        parallel region)."""
        uniq, _, acc, nz, updates = self._run(batch, self.burn_in + 1, True, "scvb0", pieces)
        lens = batch.doc_lengths
        rows = uniq
        if self.word_blocks > 1:                 # statistics are kept by state row
            rows = rows_of_words(uniq, self.n_words, self.word_blocks)
            order = np.argsort(rows, kind="stable")
            rows, acc = rows[order].astype(np.int32), acc[order]
        return SCVB0Stats(n_topics=self.n_topics, n_words=self.n_words,
                          block=RowBlock(self.n_topics, rows, acc),
                          nz=nz, n_docs=batch.n_docs, n_tokens=int(lens.sum()),
                          n_empty=int((lens == 0).sum()), n_iterations=int(updates.sum()),
                          n_capped=0)

    def global_step(self, stats: SCVB0Stats) -> Dict[str, Any]:
        """Paper eqs. 7-8 on the lazily scaled N^Φ (module docstring), as the word-block
        sequence of ``lda_core.algorithms.word_blocks`` over ``word_blocks`` blocks: the
        statistics are checked first (non-finite values, word ids outside [0, V): StepRefused,
        the state untouched), then every block is written and re-seeded."""
        if self._row_ids is not None:
            raise TypeError("an E-step view (estep_view) holds only some rows of N^Phi: it has "
                            "no global step")
        plan = self._plan(stats)
        rows = stats.block.rows
        if not np.all(np.isfinite(stats.block.values)):
            raise self._refuse_nonfinite()
        if len(rows) and (rows.max() >= self.n_words or rows.min() < 0):
            raise self._refuse_range()
        B = self.word_blocks
        bounds = block_bounds(self.n_words, B)
        parts = []
        for b, sl in enumerate(blocks_of(rows, self.n_words, B)):
            lo, hi = bounds[b]
            block = self._ntilde[lo:hi]
            self._apply_block(plan, lo, block, rows[sl], stats.block.values[sl])
            parts.append(self._block_partial(plan, b, block, self._block_flags()))
        info = self._finish(plan, combine_partials(parts, B))
        if plan.values["active"]:
            self._touched_rows = rows
        return info

    # -- the global step by word blocks (lda_core.algorithms.word_blocks) -------------------
    def block_rows(self, b: int) -> np.ndarray:
        """Rows [lo, hi) of Ñ (N^Φ = π Ñ) of word block ``b``: a view."""
        lo, hi = block_bounds(self.n_words, self.word_blocks)[b]
        return self._ntilde[lo:hi]

    def shard_header(self) -> BlockHeader:
        """Everything but Ñ's rows: settings, N^Z, π, step counters."""
        return BlockHeader(algorithm=self.name, n_topics=self.n_topics, n_words=self.n_words,
                           n_blocks=self.word_blocks, vocab_hash=self.vocab_hash,
                           params=self.params(),
                           counters={"step": self.step, "docs_seen": self.docs_seen,
                                     "tokens_seen": self.tokens_seen},
                           arrays={"nz": self.nz.copy(), "pi": np.array([self._pi])})

    @classmethod
    def _from_header(cls, header: BlockHeader, ntilde: Optional[np.ndarray],
                     n_threads: Optional[int] = None) -> "SCVB0":
        if header.algorithm != cls.name:
            raise DataIntegrityError("word-block header is for algorithm %r, not %r"
                                     % (header.algorithm, cls.name))
        p = cls.SPEC.recorded(header.params, older=OLDER_SETTINGS)
        obj = cls.__new__(cls)
        obj._configure(header.n_topics, header.n_words, vocab_hash=header.vocab_hash,
                       n_threads=n_threads, **p)
        if obj.word_blocks != header.n_blocks:
            raise DataIntegrityError("word-block header has %d blocks but its settings %d"
                                     % (header.n_blocks, obj.word_blocks))
        obj._ntilde = ntilde
        obj.nz = np.array(header.arrays["nz"], np.float64)
        obj._pi = float(header.arrays["pi"][0])
        obj.step = header.counters["step"]
        obj.docs_seen = header.counters["docs_seen"]
        obj.tokens_seen = header.counters["tokens_seen"]
        return obj

    @classmethod
    def from_shards(cls, header: BlockHeader, rows) -> "SCVB0":
        """The algorithm whose Ñ is the blocks' rows ``rows`` (block order) and the rest
        ``header`` (the inverse of :meth:`shard_header` and :meth:`block_rows`)."""
        obj = cls._from_header(header, None)
        obj._ntilde = joined_rows(header, rows, obj.dtype)
        return obj

    @classmethod
    def estep_view(cls, header: BlockHeader, row_ids: np.ndarray, rows: np.ndarray,
                   n_threads: Optional[int] = None) -> "SCVB0":
        """An algorithm holding only the rows ``rows`` of Ñ, the state rows ``row_ids``
        (sorted unique; :func:`~lda_core.algorithms.word_blocks.rows_of_words` of the words):
        its ``local_step`` of a batch whose words are among them gives the statistics of the
        full algorithm's, bit for bit."""
        word_ids = np.asarray(row_ids, np.int64)
        check_rows(rows, len(word_ids), header.n_topics, "an E-step view")
        obj = cls._from_header(header, None, n_threads=n_threads)
        obj._ntilde = np.ascontiguousarray(rows, dtype=obj.dtype)
        obj._row_ids = word_ids
        return obj

    @classmethod
    def plan_step(cls, header: BlockHeader, stats: SCVB0Stats) -> StepPlan:
        """ρ, C/|M|, the new π and N^Z, and the re-seeding splits, from the statistics' small
        part (any block's: every owner computes the same plan)."""
        return cls._from_header(header, None)._plan(stats)

    @classmethod
    def update_block(cls, header: BlockHeader, plan: StepPlan, b: int, rows: np.ndarray,
                     stats: SCVB0Stats) -> BlockPartial:
        """Check block ``b``'s statistics and, if they pass, apply the step and then the
        plan's re-seeding splits to its rows ``rows`` in place; the partial carries the
        checks' flags and the split columns' sums over the block."""
        algo = cls._from_header(header, None)
        lo, hi = header.bounds(b)
        check_rows(rows, hi - lo, header.n_topics, "block %d" % b)
        ids, vals = stats.block.rows, stats.block.values
        flags = {"finite": bool(np.all(np.isfinite(vals))),
                 "in_range": not len(ids) or bool(ids[0] >= lo and ids[-1] < hi)}
        if not all(flags.values()):
            return BlockPartial(block=b, flags=flags)
        algo._apply_block(plan, lo, rows, ids, vals)
        return algo._block_partial(plan, b, rows, flags)

    @classmethod
    def finish_step(cls, header: BlockHeader, plan: StepPlan, parts):
        """(header after the step, log info) from the blocks' partials in block order;
        StepRefused if any block refused."""
        algo = cls._from_header(header, None)
        info = algo._finish(plan, combine_partials(list(parts), header.n_blocks))
        return algo.shard_header(), info

    def _refuse_nonfinite(self):
        return StepRefused("SCVB0 statistics contain non-finite values; state left unchanged "
                           "(step %d)" % self.step)

    def _refuse_range(self):
        return StepRefused("statistics name word ids outside [0, %d)" % self.n_words)

    @staticmethod
    def _block_flags():
        return {"finite": True, "in_range": True}

    def _plan(self, stats: SCVB0Stats) -> StepPlan:
        if not isinstance(stats, SCVB0Stats) or stats.n_topics != self.n_topics:
            raise ValueError("global_step needs SCVB0 statistics of %d topics, got %r"
                             % (self.n_topics, stats))
        if not np.all(np.isfinite(stats.nz)):
            raise self._refuse_nonfinite()
        t = self.step
        # the schedule's step, or during an update the running average over its tokens
        rho = (self.rho_phi(t) if self.history is None else
               schedules.history_rho(stats.n_tokens, self.history,
                                     self.tokens_seen - int(self.history_from or 0)))
        info = dict(t=t, rho=rho, docs=stats.n_docs, tokens=stats.n_tokens,
                    empty=stats.n_empty, updates=stats.n_iterations)
        values = {"active": stats.n_tokens > 0, "splits": Splits(step=t, seed=self.seed, pairs=[])}
        if stats.n_tokens > 0:
            # collapsed topics, decided from the minibatch's tokens per topic, so every owner
            # applies the splits right after its block's update
            values["splits"] = dead_topic_splits(stats.nz, self.reseed, self.seed, t)
            C = self.corpus_tokens or (self.tokens_seen + stats.n_tokens)
            scale = float(C) / float(stats.n_tokens)
            zero = rho >= 1.0
            pi = 1.0 if zero else self._pi * (1.0 - rho)
            nz = np.zeros(self.n_topics, np.float64) if zero else (1.0 - rho) * self.nz
            # N^Φ_rows += ρ N̂^Φ  <=>  Ñ_rows += ρ (C/|M|) Σmγ / π
            values.update(zero=zero, pi=pi, coef=rho * scale / pi, C=int(C),
                          nz=nz + rho * scale * stats.nz, renorm=pi < self.renorm_below)
        return StepPlan(skip=False, info=info, values=values)

    def _apply_block(self, plan: StepPlan, lo: int, rows: np.ndarray, ids: np.ndarray,
                     values: np.ndarray) -> None:
        """The step on one block's rows (``ids``: the statistics' global word ids in it)."""
        v = plan.values
        if not v["active"]:
            return
        if v["zero"]:
            rows[:] = 0
        lazy_add_rows(rows, ids - lo if lo else ids, values, v["coef"])
        if v["renorm"]:
            rows *= rows.dtype.type(v["pi"])

    def _block_partial(self, plan: StepPlan, b: int, rows: np.ndarray,
                       flags: Dict[str, bool]) -> BlockPartial:
        """Block ``b``'s partial after its update: its rows re-seeded (the plan's splits) and
        the split columns' sums over them."""
        lo, hi = block_bounds(self.n_words, self.word_blocks)[b]
        check_rows(rows, hi - lo, self.n_topics, "block %d" % b)
        split = split_rows(rows, lo, plan.values["splits"], self.n_words, self.word_blocks)
        return BlockPartial(block=b, flags=flags, sums={"split": split})

    def _finish(self, plan: StepPlan, combined: BlockPartial) -> Dict[str, Any]:
        if not combined.flags["finite"]:
            raise self._refuse_nonfinite()
        if not combined.flags["in_range"]:
            raise self._refuse_range()
        v, info = plan.values, dict(plan.info)
        t = self.step
        splits = v["splits"]
        if v["active"]:
            self._pi, self.nz = v["pi"], v["nz"]
            if v["renorm"]:
                logger.info("scvb0: renormalising the lazy scale factor (pi=%.3g) at t=%d",
                            self._pi, t)
                self._pi = 1.0
            info["C"] = v["C"]
        self.step += 1
        self.docs_seen += int(info["docs"])
        self.tokens_seen += int(info["tokens"])
        # N^Z is shared between the two halves in the proportion of their N^Φ
        for (k, j), (sk, sj) in zip(splits.pairs, combined.sums["split"]):
            before = self.nz[j]
            self.nz[k] = before * (sk / (sk + sj) if sk + sj > 0 else 0.5)
            self.nz[j] = before - self.nz[k]
        if "C" in info:
            info["reseeded"] = len(splits.pairs)
        info["pi"] = self._pi
        logger.debug("scvb0 step t=%d rho=%.4g docs=%d tokens=%d", info["t"], info["rho"],
                     info["docs"], info["tokens"])
        return info

    def nonfinite_state(self) -> Optional[str]:
        """N^Z, the lazy scale π and the rows of N^Φ the last step touched (no other entry
        changed; re-seeding only splits finite values)."""
        rows = self._touched_rows
        return nonfinite(**{"N^Z": self.nz, "pi": self._pi,
                            "N^Φ": self._ntilde[rows] if rows is not None else 0.0})

    def topic_word(self) -> np.ndarray:
        """φ_kw = (N^Φ_wk + η)/(N^Z_k + Vη), K x V float64 (rows renormalised to sum to 1)."""
        phi = (self._pi * in_word_order(self._ntilde, self.word_blocks).T.astype(np.float64)
               + self.eta)
        phi /= phi.sum(1, keepdims=True)
        return phi

    def infer(self, batch: DocBatch, passes: Optional[int] = None) -> np.ndarray:
        """θ_j = (N^Θ_j + α)/(C_j + Kα) after ``passes`` (default ``infer_passes``) passes;
        each document's draws are seeded by its content (:meth:`DocBatch.content_keys`), so
        the same words give the same θ whatever the document is called."""
        passes = self.infer_passes if passes is None else check_number("passes", passes, 1, 10000,
                                                               integer=True)
        _, ntheta, _, _, _ = self._run(batch.keyed_by_content(), passes, False, "scvb0-infer")
        theta = ntheta + self.alpha
        theta /= theta.sum(1, keepdims=True)
        return theta

    def to_state(self, copy: bool = True):
        return TopicState(algorithm=self.name, n_topics=self.n_topics, n_words=self.n_words,
                          vocab_hash=self.vocab_hash,
                          # in word order whatever the word blocks
                          arrays={"ntilde": self._ntilde.copy() if copy and self.word_blocks == 1
                                  else in_word_order(self._ntilde, self.word_blocks),
                                  "nz": self.nz.copy(),
                                  "pi": np.array([self._pi], np.float64)},
                          params=self.params(), step=int(self.step),
                          docs_seen=int(self.docs_seen), rng=None,
                          info={"tokens_seen": int(self.tokens_seen),
                                "paper": "Foulds et al. 2013 (SCVB0)"})

    @classmethod
    def from_state(cls, state, *, n_threads: Optional[int] = None,
                   take: bool = False) -> "SCVB0":
        state.validate(algorithm=cls.name)
        # states written before re-seeding existed did not re-seed
        p = cls.SPEC.recorded(state.params, older=OLDER_SETTINGS)
        obj = cls.__new__(cls)
        obj._configure(state.n_topics, state.n_words, vocab_hash=state.vocab_hash,
                       n_threads=n_threads, **p)
        nt = np.asarray(state.arrays["ntilde"])
        nz = np.asarray(state.arrays["nz"], np.float64)
        pi = np.asarray(state.arrays["pi"], np.float64)
        if nt.shape != (state.n_words, state.n_topics):
            raise DataIntegrityError("array ntilde has shape %s, expected %s"
                                     % (nt.shape, (state.n_words, state.n_topics)))
        if nz.shape != (state.n_topics,) or pi.shape != (1,):
            raise DataIntegrityError("arrays nz/pi have shapes %s/%s, expected (%d,)/(1,)"
                                     % (nz.shape, pi.shape, state.n_topics))
        obj._ntilde = np.ascontiguousarray(in_row_order(np.array(nt, dtype=obj.dtype),
                                                        obj.word_blocks))
        obj.nz = nz.copy()
        obj._pi = float(pi[0])
        obj.step = int(state.step)
        obj.docs_seen = int(state.docs_seen)
        obj.tokens_seen = int(state.info.get("tokens_seen", 0))
        return obj

    # -- checkpoints by word blocks (lda_core.storage.blocks) -------------------------------
    @classmethod
    def state_without_rows(cls, header: BlockHeader):
        """The :meth:`to_state` of the algorithm of ``header`` without its word-major array
        ``ntilde`` (O(K): what a checkpoint holds beside the row blocks)."""
        obj = cls._from_header(header, None)
        obj._ntilde = np.zeros((0, header.n_topics), obj.dtype)
        state = obj.to_state(copy=False)
        del state.arrays["ntilde"]
        return state

    @classmethod
    def header_of_state(cls, state) -> BlockHeader:
        """The word-block header of the algorithm of ``state``, read from all its arrays but
        ``ntilde`` (not touched: it may be absent or held in blocks)."""
        state.validate(algorithm=cls.name)
        p = cls.SPEC.recorded(state.params, older=OLDER_SETTINGS)
        obj = cls.__new__(cls)
        obj._configure(state.n_topics, state.n_words, vocab_hash=state.vocab_hash, **p)
        nz = np.asarray(state.arrays.get("nz"), np.float64)
        pi = np.asarray(state.arrays.get("pi"), np.float64)
        if nz.shape != (state.n_topics,) or pi.shape != (1,):
            raise DataIntegrityError("arrays nz/pi have shapes %s/%s, expected (%d,)/(1,)"
                                     % (nz.shape, pi.shape, state.n_topics))
        obj.nz = nz.copy()
        obj._pi = float(pi[0])
        obj.step = int(state.step)
        obj.docs_seen = int(state.docs_seen)
        obj.tokens_seen = int(state.info.get("tokens_seen", 0))
        return obj.shard_header()

    @classmethod
    def row_dtype(cls, header: BlockHeader) -> np.dtype:
        """The dtype of Ñ's rows (the ``dtype`` setting: what a block file holds)."""
        return np.dtype(cls._from_header(header, None).dtype)

    @classmethod
    def from_header_rows(cls, header: BlockHeader, rows: np.ndarray,
                         n_threads: Optional[int] = None) -> "SCVB0":
        """The algorithm whose Ñ in row order is ``rows`` itself (V x K of the row dtype,
        C order: not copied) and the rest ``header`` (:meth:`from_shards` of one array)."""
        check_rows(rows, header.n_words, header.n_topics, "the word-major rows")
        obj = cls._from_header(header, None, n_threads=n_threads)
        obj._ntilde = np.ascontiguousarray(rows, dtype=obj.dtype)
        return obj
