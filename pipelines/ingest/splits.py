"""The held-out split of a dataset: a document's split and its place in the shards follow from
a keyed hash of its id alone (stable across runs, runners and platforms), so ``vectorize``,
``train --update`` and the phrase learner agree on which documents are held out."""
from __future__ import annotations

import hashlib
from typing import Tuple

from pipelines.ingest.dataset import HELDOUT_SPLIT, TRAIN_SPLIT


def doc_hash(doc_id: str, seed: int = 0) -> Tuple[float, int]:
    """``(u, order)`` for a document: ``u`` uniform in [0, 1) decides the held-out split,
    ``order`` (64-bit) the shard and the row order. Stable across runs, runners, platforms."""
    d = hashlib.blake2b(("%d:%s" % (seed, doc_id)).encode("utf-8"), digest_size=16).digest()
    u = int.from_bytes(d[:8], "big") / 2.0 ** 64
    return u, int.from_bytes(d[8:], "big")


def split_of(doc_id: str, holdout_fraction: float, seed: int = 0) -> str:
    u, _ = doc_hash(doc_id, seed)
    return HELDOUT_SPLIT if u < holdout_fraction else TRAIN_SPLIT
