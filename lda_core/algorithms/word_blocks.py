"""The word-block decomposition of a global step (online VB, SCVB0).

The word-major state (V x K rows) is cut into B contiguous blocks of words,
``[V*b//B, V*(b+1)//B)``, so that a cluster can give each block to an owner: the owner holds
only its block's rows and a small *header* (everything else: settings, K-vectors, scalars,
step counters), receives its block's statistics, applies the step to its rows and returns a
*partial*: flags and K-vector sums over its rows. The partials are added in block order
(the first taken as it is), so the result depends on B but not on who computed what; with
B = 1 the sums are those of one pass over all rows. The sequence, for an algorithm class
``cls`` with ``word_sharded = True``::

    header = algo.shard_header()                            # O(K) bytes (to_bytes/from_bytes)
    plan = cls.plan_step(header, stats_b)                   # the same on every owner
    part_b = cls.update_block(header, plan, b, rows_b, stats_b)     # rows_b changed in place
    header2, info = cls.finish_step(header, plan, [part_0, ..., part_B-1])

The plan holds everything decided before any row changes, the re-seeding of collapsed
topics included (it reads only the statistics' small part: the minibatch's tokens per
topic), so an owner applies the update and then the splits to its rows in one visit, and
one round of partials finishes the step: a cluster needs one exchange of statistics and one
of partials per step.

``algo.global_step(stats)`` in one process is this very sequence over its own blocks, with
every block checked before any is written. This module holds what the algorithms share:
the block bounds, the header and partial containers (data only: :func:`pack_arrays`), the
in-order sum, and the re-seeding of collapsed topics (decided from the summed topic mass,
applied block by block).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from numba import njit

from lda_core.algorithms.algorithm import pack_arrays, unpack_arrays
from lda_core.algorithms.params import Param
from lda_core.errors import DataIntegrityError, UsageError
from lda_core.storage.state import block_bounds

MAX_BLOCKS = 4096

# the setting of every word-sharded algorithm (its SPEC): B, recorded like any setting
WORD_BLOCKS_PARAM = Param(
    "word_blocks", int, 1, lo=1, hi=MAX_BLOCKS, option="word_blocks",
    help="word blocks of the global step (word ids dealt round-robin, each updatable by its "
         "own worker); its sums are added in block order, so the result depends on this "
         "number, not on the workers (--resume keeps it)")
_MAGIC_HEADER = b"LDAWBH01"
_MAGIC_PARTIAL = b"LDAWBP01"


def rows_of_words(word_ids: np.ndarray, n_words: int, n_blocks: int) -> np.ndarray:
    """The state row of each word id: word w is row ``w // B`` of block ``w mod B``.

    Words are dealt to the blocks round-robin rather than cut into ranges because word ids
    follow frequency (first occurrence): contiguous ranges would give the first block most of
    every minibatch's statistics, and its owner most of the step's traffic. With B = 1 the
    rows are the word ids."""
    ids = np.asarray(word_ids, np.int64)
    B = int(n_blocks)
    if B == 1:
        return ids
    q, r = divmod(int(n_words), B)
    b = ids % B
    return b * q + np.minimum(b, r) + ids // B


def check_rows(rows: np.ndarray, n_rows: int, n_topics: int, what: str) -> None:
    """ValueError unless ``rows`` is ``n_rows`` x ``n_topics`` (``what`` names them)."""
    if np.shape(rows) != (int(n_rows), int(n_topics)):
        raise ValueError("%s has rows of shape %s, expected (%d, %d)"
                         % (what, np.shape(rows), n_rows, n_topics))


def joined_rows(header: "BlockHeader", rows, dtype) -> np.ndarray:
    """The blocks' rows ``rows`` (block order) as one word-major array in row order, after
    checking each block's shape against ``header`` (DataIntegrityError otherwise)."""
    rows = list(rows)
    bounds = block_bounds(header.n_words, header.n_blocks)
    if len(rows) != len(bounds) or any(np.shape(r) != (hi - lo, header.n_topics)
                                       for r, (lo, hi) in zip(rows, bounds)):
        raise DataIntegrityError("word-block rows have shapes %s, expected %s"
                                 % ([np.shape(r) for r in rows],
                                    [(hi - lo, header.n_topics) for lo, hi in bounds]))
    return np.ascontiguousarray(np.concatenate(rows), dtype=dtype)


def in_word_order(by_row: np.ndarray, n_blocks: int) -> np.ndarray:
    """A word-major array held in row order (V rows), in word order (itself when B = 1)."""
    if int(n_blocks) == 1:
        return by_row
    V = by_row.shape[0]
    return by_row[rows_of_words(np.arange(V), V, n_blocks)]


def in_row_order(by_word: np.ndarray, n_blocks: int) -> np.ndarray:
    """A word-major array in word order (V rows), in row order (itself when B = 1)."""
    if int(n_blocks) == 1:
        return by_word
    return by_word[words_of_rows(by_word.shape[0], n_blocks)]


def words_of_rows(n_words: int, n_blocks: int) -> np.ndarray:
    """The word id held by each state row (the inverse of :func:`rows_of_words`)."""
    out = np.empty(int(n_words), np.int64)
    out[rows_of_words(np.arange(int(n_words)), n_words, n_blocks)] = np.arange(int(n_words))
    return out


def blocks_of(sorted_word_ids: np.ndarray, n_words: int, n_blocks: int) -> List[slice]:
    """Per block, the slice of the sorted word ids ``sorted_word_ids`` that lie in it."""
    ids = np.asarray(sorted_word_ids)
    cuts = np.searchsorted(ids, [lo for lo, _ in block_bounds(n_words, n_blocks)] + [n_words])
    return [slice(int(cuts[b]), int(cuts[b + 1])) for b in range(int(n_blocks))]


def check_block(n_blocks: int, b: int) -> int:
    b = int(b)
    if not 0 <= b < int(n_blocks):
        raise ValueError("block %d is not one of the %d word blocks" % (b, n_blocks))
    return b


def add_in_order(partials: Sequence[Any]) -> Any:
    """p_0 + p_1 + ... + p_{B-1}, left to right, the first taken as it is (B = 1: p_0's bits)."""
    out = partials[0]
    for p in partials[1:]:
        out = out + p
    return out


def check_resumed_blocks(cls, explicit: Optional[int], params: Dict[str, Any]) -> None:
    """A resumed run of a word-sharded algorithm ``cls`` keeps the checkpoint's B (recorded
    in its ``params``; 1 when older): it fixes the summation order, so a different explicit
    ``--word-blocks`` is a UsageError."""
    if explicit is None or not getattr(cls, "word_sharded", False):
        return
    recorded = int(params.get("word_blocks", 1))
    if int(explicit) != recorded:
        raise UsageError("--word-blocks %d: this run was trained with %d word blocks (recorded "
                         "in its checkpoint); resume without --word-blocks or with "
                         "--word-blocks %d" % (int(explicit), recorded, recorded))


def _float_arrays(arrays: Dict[str, np.ndarray]) -> List[Tuple[str, str, np.ndarray]]:
    return [(k, "<f8", np.asarray(v, np.float64)) for k, v in sorted(arrays.items())]


@dataclass
class BlockHeader:
    """Everything of a word-sharded algorithm but its word-major rows: ``params`` (the
    checkpoint's JSON settings), ``counters`` (integers: step, documents seen, ...),
    ``arrays`` (float64 K-vectors and scalars, exact). O(K) bytes as data."""

    algorithm: str
    n_topics: int
    n_words: int
    n_blocks: int
    vocab_hash: Optional[str]
    params: Dict[str, Any]
    counters: Dict[str, int]
    arrays: Dict[str, np.ndarray]

    def bounds(self, b: int) -> Tuple[int, int]:
        return block_bounds(self.n_words, self.n_blocks)[check_block(self.n_blocks, b)]

    def to_bytes(self) -> bytes:
        head = {"algorithm": self.algorithm, "n_topics": int(self.n_topics),
                "n_words": int(self.n_words), "n_blocks": int(self.n_blocks),
                "vocab_hash": self.vocab_hash, "params": self.params,
                "counters": {k: int(v) for k, v in self.counters.items()}}
        return pack_arrays(_MAGIC_HEADER, head, _float_arrays(self.arrays))

    @classmethod
    def from_bytes(cls, data: bytes) -> "BlockHeader":
        h, a = unpack_arrays(_MAGIC_HEADER, data)
        try:
            return cls(algorithm=str(h["algorithm"]), n_topics=int(h["n_topics"]),
                       n_words=int(h["n_words"]), n_blocks=int(h["n_blocks"]),
                       vocab_hash=h["vocab_hash"], params=dict(h["params"]),
                       counters={k: int(v) for k, v in h["counters"].items()}, arrays=a)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError("damaged word-block header: %s" % e) from None


@dataclass
class BlockPartial:
    """What one block's owner returns: its block index, flags (all must hold for the step to
    stand: e.g. finite statistics), K-vector or scalar float64 sums over its rows, and
    integer counts."""

    block: int
    flags: Dict[str, bool] = field(default_factory=dict)
    sums: Dict[str, np.ndarray] = field(default_factory=dict)
    counts: Dict[str, int] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        head = {"block": int(self.block), "flags": {k: bool(v) for k, v in self.flags.items()},
                "counts": {k: int(v) for k, v in self.counts.items()}}
        return pack_arrays(_MAGIC_PARTIAL, head, _float_arrays(self.sums))

    @classmethod
    def from_bytes(cls, data: bytes) -> "BlockPartial":
        h, a = unpack_arrays(_MAGIC_PARTIAL, data)
        try:
            return cls(block=int(h["block"]), flags={k: bool(v) for k, v in h["flags"].items()},
                       sums=a, counts={k: int(v) for k, v in h["counts"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError("damaged word-block partial: %s" % e) from None


def combine_partials(parts: Sequence[BlockPartial], n_blocks: int) -> BlockPartial:
    """The partials of blocks 0..B-1 (in that order, each once) combined: flags and-ed, sums
    added in block order (:func:`add_in_order`), counts added."""
    if [p.block for p in parts] != list(range(int(n_blocks))):
        raise ValueError("need one partial per word block in block order (0..%d), got blocks %s"
                         % (int(n_blocks) - 1, [p.block for p in parts]))
    first = parts[0]
    # a block that refused its statistics returns flags only: the step is refused then, and
    # only the sums every block has are added
    return BlockPartial(
        block=-1,
        flags={k: all(p.flags[k] for p in parts) for k in first.flags},
        sums={k: add_in_order([p.sums[k] for p in parts]) for k in first.sums
              if all(k in p.sums for p in parts)},
        counts={k: sum(p.counts[k] for p in parts) for k in first.counts})


@dataclass
class StepPlan:
    """The scalars of one global step, computed from the header and the statistics' small
    part only (every owner computes the same plan): ``skip`` (no documents: not a step),
    ``info`` (log fields known before the rows), ``values`` (the algorithm's scalars)."""

    skip: bool
    info: Dict[str, Any]
    values: Dict[str, Any]


# -- re-seeding collapsed topics ---------------------------------------------------------------

@dataclass
class Splits:
    """Re-seeding decisions of one step: ``pairs`` [(dead topic k, split topic j)] in the
    order applied, the draws from (``seed``, ``step``, k). Part of a step's plan, which every
    owner computes itself: never stored."""

    step: int
    seed: int
    pairs: List[Tuple[int, int]]


def dead_topic_splits(mass: np.ndarray, reseed: float, seed: int, step: int) -> Splits:
    """Which topics to re-seed after step ``step`` (online VB's docstring, "Re-seeding"):
    every topic k whose share of ``mass`` (the minibatch's tokens per topic) is below
    ``reseed``/K takes part of the topic j with the largest remaining share; the decision
    reads only ``mass``."""
    K = len(mass)
    total = float(np.sum(mass))
    out = Splits(step=int(step), seed=int(seed), pairs=[])
    if reseed <= 0 or K < 2 or total <= 0:
        return out
    share = np.asarray(mass, np.float64) / total
    dead = np.nonzero(share < reseed / K)[0]
    if len(dead) == 0 or len(dead) == K:
        return out
    share = share.copy()
    for k in dead:
        j = int(np.argmax(share))
        out.pairs.append((int(k), j))
        share[k] = share[j] = share[j] / 2.0
    return out


@njit(cache=True, error_model="numpy")
def _split_column(ntilde, j, k, u):
    """Ñ_·k ← u ⊙ Ñ_·j, Ñ_·j ← (1 − u) ⊙ Ñ_·j in one pass over the rows; (Σ Ñ_·k, Σ Ñ_·j)."""
    sk = 0.0
    sj = 0.0
    for w in range(ntilde.shape[0]):
        c = ntilde[w, j]
        a = u[w] * c
        ntilde[w, k] = a
        ntilde[w, j] = c - a
        sk += a
        sj += c - a
    return sk, sj


def split_draw(seed: int, step: int, k: int, lo: int, hi: int) -> np.ndarray:
    """Words ``[lo, hi)`` of the draw u ~ Beta(1/2, 1/2) over all V words for topic ``k``
    at ``step``: the same values as slicing the whole draw (one 64-bit output per uniform,
    so the generator is advanced past the first ``lo``)."""
    rng = np.random.default_rng([int(seed), int(step), int(k), 0x5EED])
    if lo:
        rng.bit_generator.advance(int(lo))
    # Beta(1/2, 1/2) is the arcsine law: sin²(πU/2) with U uniform
    return np.sin(0.5 * np.pi * rng.random(int(hi) - int(lo))) ** 2


def split_rows(rows: np.ndarray, lo: int, splits: Splits, n_words: int,
               n_blocks: int) -> np.ndarray:
    """Apply ``splits`` to the state rows ``[lo, lo + len(rows))`` of a word-major count-like
    matrix in place; returns per pair (Σ column k, Σ column j) over these rows (P x 2). Each
    row takes the draw of its word (:func:`words_of_rows`), so the split is the same for
    any number of word blocks."""
    out = np.zeros((len(splits.pairs), 2), np.float64)
    hi = int(lo) + rows.shape[0]
    words = None if int(n_blocks) == 1 else words_of_rows(n_words, n_blocks)[lo:hi]
    for i, (k, j) in enumerate(splits.pairs):
        if words is None:
            u = split_draw(splits.seed, splits.step, k, lo, hi)
        else:
            u = split_draw(splits.seed, splits.step, k, 0, n_words)[words]
        out[i] = _split_column(rows, j, k, u)
    return out
