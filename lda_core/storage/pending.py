"""The statistics in flight of a pipelined run, as a checkpoint holds them.

With staleness s > 0 (:mod:`lda_core.training.staleness`) a run at position p has already
E-stepped minibatches p, ..., p + s − 1. A checkpoint keeps those statistics so that a resumed
run applies the very same ones: one uint8 array per minibatch (``pending.<m>``: the
statistics' own data-only bytes, ``SuffStats.to_bytes``, under the checkpoint's sha256 like
every array), or one per minibatch and word block (``pending.<m>.<b>``) when the exchange that
wrote the checkpoint held them block by block; ``info["pending"]`` says which. Readers decode
them with the algorithm's statistics class (``stats_type``), never with pickle.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, List, Optional

import numpy as np

from lda_core.errors import DataIntegrityError

INFO_KEY = "pending"          # state.info[INFO_KEY]: {"first": m, "n": s, "blocks": B}
ARRAY_PREFIX = "pending."


@dataclass
class Pending:
    """The statistics in flight after ``first`` minibatches: ``stats[i]`` is the E-step of
    minibatch ``first + i`` (module docstring)."""
    first: int
    stats: List[Any] = field(default_factory=list)

    def covers(self, position: int, staleness: int) -> bool:
        """Whether these are the statistics a run at ``position`` with ``staleness`` needs."""
        return int(self.first) == int(position) and len(self.stats) == int(staleness)


def array_name(m: int, block: Optional[int] = None) -> str:
    """The state array holding the pending statistics of minibatch ``m`` (whole, or of word
    block ``block``)."""
    return ("%s%d" % (ARRAY_PREFIX, int(m)) if block is None
            else "%s%d.%d" % (ARRAY_PREFIX, int(m), int(block)))


def as_bytes_array(data: bytes) -> np.ndarray:
    return np.frombuffer(bytes(data), dtype=np.uint8)


def add_to_state(state, pending: Optional[Pending]) -> None:
    """Put ``pending`` into ``state`` (a TopicState about to be published): one uint8 array
    per minibatch, the statistics' own data-only bytes (``SuffStats.to_bytes``)."""
    if pending is None or not pending.stats:
        return
    for i, st in enumerate(pending.stats):
        state.arrays[array_name(pending.first + i)] = as_bytes_array(st.to_bytes())
    state.info = dict(state.info or {})
    state.info[INFO_KEY] = {"first": int(pending.first), "n": len(pending.stats), "blocks": 1}


def add_block_files(state, first: int, n: int, n_blocks: int) -> None:
    """Record in ``state.info`` that it holds pending statistics of minibatches ``first`` ..
    ``first + n - 1`` split into ``n_blocks`` word blocks (arrays named by
    :func:`array_name` ``(m, b)``; the exchange that wrote them put them in place)."""
    state.info = dict(state.info or {})
    state.info[INFO_KEY] = {"first": int(first), "n": int(n), "blocks": int(n_blocks)}


def pending_of_state(state, stats_type) -> Optional[Pending]:
    """The pending statistics a state holds (None when it holds none), decoded with the
    algorithm's statistics class; statistics stored per word block are joined
    (``stats_type.join_blocks``). DataIntegrityError naming the array when one is missing or
    damaged."""
    meta = (state.info or {}).get(INFO_KEY)
    if not meta:
        return None
    try:
        first, n, blocks = int(meta["first"]), int(meta["n"]), int(meta["blocks"])
    except (KeyError, TypeError, ValueError):
        raise DataIntegrityError("state of %s: info[%r] is damaged (%r)"
                                 % (state.algorithm, INFO_KEY, meta))
    if stats_type is None:
        raise DataIntegrityError("state of %s holds pending statistics, which this algorithm "
                                 "does not make" % state.algorithm)
    out = []
    for m in range(first, first + n):
        names = ([array_name(m)] if blocks == 1 and array_name(m) in state.arrays
                 else [array_name(m, b) for b in range(blocks)])
        parts = []
        for name in names:
            if name not in state.arrays:
                raise DataIntegrityError("state of %s lists pending statistics of minibatch %d "
                                         "but has no array %r" % (state.algorithm, m, name))
            try:
                parts.append(stats_type.from_bytes(np.asarray(state.arrays[name],
                                                              np.uint8).tobytes()))
            except ValueError as e:
                raise DataIntegrityError("state of %s: pending statistics %r are damaged (%s)"
                                         % (state.algorithm, name, e)) from None
        out.append(parts[0] if len(parts) == 1 else stats_type.join_blocks(parts))
    return Pending(first, out)


def without_pending(state):
    """``state`` without its pending statistics (a new TopicState sharing every other array:
    ``state`` itself is left as it is, so that a later reader of it still finds them)."""
    if not any(k.startswith(ARRAY_PREFIX) for k in state.arrays) and \
            INFO_KEY not in (state.info or {}):
        return state
    return dataclasses.replace(
        state, arrays={k: v for k, v in state.arrays.items() if not k.startswith(ARRAY_PREFIX)},
        info={k: v for k, v in (state.info or {}).items() if k != INFO_KEY})
