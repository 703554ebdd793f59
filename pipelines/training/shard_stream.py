"""Shards -> the seeded minibatch order of :mod:`lda_core.training.ordering`, as DocBatch, streamed.

:class:`ShardStream` reads the row count of every shard from the Parquet metadata (no data
read), checks that every shard carries the same vocabulary hash (and the model's, when
resuming), and yields the minibatches of ``plan_pass`` for any number of passes. It holds one
shard and one minibatch in memory at a time: a shard is read whole with pyarrow when the pass
order first reaches it, its rows are gathered into minibatch pieces, and the shard is dropped
before the next one is read. ``iter_from(step)`` starts at global step ``step`` without
reading the shards that lie wholly before it (resume).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, InputError, UsageError
from lda_core.training.heldout import HeldOut
from lda_core.training.ordering import PassPlan, locate_step, n_batches, plan_pass
from lda_core.training.trainer import Minibatch
from pipelines.ingest import dataset
from pipelines.ingest.doc_sample import sample_documents
from pipelines.ingest.shards import gather, read_shard, shard_row_counts, TRAIN_COLUMNS

logger = logging.getLogger(__name__)


def check_words(batch: DocBatch, n_words: Optional[int], path: str) -> None:
    """InputError naming the shard and the document when a word id of ``batch`` (read from
    shard ``path``) is >= ``n_words`` (None: not checked)."""
    if n_words is None:
        return
    try:
        batch.check_vocab(int(n_words))
    except ValueError as e:
        raise InputError("shard %s: %s; vectorise it with the model's vocabulary (`ldabeam "
                         "vectorize --vocab`)" % (path, e)) from None


class ShardStream:
    """The minibatches of ``passes`` passes over ``files`` in the seeded order.

    Attributes: ``shard_sizes``, ``n_docs`` (D), ``minibatch`` (S), ``batches_per_pass``
    (ceil(D/S)), ``total_steps`` (passes × batches_per_pass), ``vocab_hash``.
    """

    def __init__(self, files: Sequence[str], *, minibatch: int, seed: int = 0,
                 passes: int = 1, expected_vocab_hash: Optional[str] = None,
                 columns: Sequence[str] = TRAIN_COLUMNS, n_words: Optional[int] = None):
        self.files = list(files)
        self.n_words = n_words      # word ids of every shard read are checked against it
        if not self.files:
            raise FileNotFoundError("no shard files to train on")
        if int(minibatch) < 1:
            raise UsageError("minibatch size must be >= 1, got %r" % (minibatch,))
        if int(passes) < 1:
            raise UsageError("passes must be >= 1, got %r" % (passes,))
        self.vocab_hash = dataset.check_vocab_hash(self.files, expected_vocab_hash)
        self.shard_sizes = shard_row_counts(self.files)
        self.n_docs = int(sum(self.shard_sizes))
        if self.n_docs == 0:
            raise InputError("the shards %s hold no documents" % ", ".join(self.files[:3]))
        self.minibatch = int(minibatch)
        self.seed = int(seed)
        self.passes = int(passes)
        self.columns = tuple(columns)
        self.batches_per_pass = n_batches(self.n_docs, self.minibatch)
        self.total_steps = self.passes * self.batches_per_pass
        self._plans: Dict[int, PassPlan] = {}

    def count_tokens(self) -> int:
        """Tokens in the corpus (C), from the ``n_tokens`` column only."""
        total = 0
        for f in self.files:
            pf = dataset.parquet_file(f)
            if "n_tokens" in pf.schema_arrow.names:
                col = pf.read(columns=["n_tokens"]).column("n_tokens")
                total += int(np.asarray(col.to_numpy(), dtype=np.int64).sum())
            else:
                total += read_shard(f).n_tokens
        return total

    def plan(self, pass_index: int) -> PassPlan:
        if pass_index not in self._plans:
            self._plans = {pass_index: plan_pass(self.shard_sizes, self.seed, pass_index,
                                                 self.minibatch)}
        return self._plans[pass_index]

    def __iter__(self) -> Iterator[Minibatch]:
        return self.iter_from(0)

    # the order goes on past the last pass: iter_from(step, extra_steps) reads ahead
    extends = True

    def iter_from(self, step: int, extra_steps: int = 0) -> Iterator[Minibatch]:
        """Minibatches from global step ``step`` (0-based) to the end of the last pass, then
        ``extra_steps`` more of the seeded order (marked ``beyond``: a pipelined run E-steps
        them ahead, never applies them)."""
        end = self.total_steps + int(extra_steps)
        if step >= end:
            return
        p0, b0 = locate_step(step, self.n_docs, self.minibatch)
        p = p0
        while p * self.batches_per_pass < end:
            for mb in self._iter_pass(p, b0 if p == p0 else 0):
                if mb.step >= end:
                    return
                yield mb
            p += 1

    def _iter_pass(self, p: int, start_batch: int) -> Iterator[Minibatch]:
        plan = self.plan(p)
        shard_idx, shard = None, None
        cur, pieces = None, []
        for seg in plan.iter_segments(start_batch):
            if seg.batch != cur:
                if pieces:
                    yield self._emit(p, cur, pieces)
                cur, pieces = seg.batch, []
            if seg.shard != shard_idx:
                shard = None  # drop the previous shard before reading the next
                shard = read_shard(self.files[seg.shard], self.columns)
                check_words(shard, self.n_words, self.files[seg.shard])
                shard_idx = seg.shard
                if shard.n_docs != self.shard_sizes[seg.shard]:
                    raise DataIntegrityError(
                        "shard %s has %d rows but its metadata said %d (was it "
                        "rewritten during training?)"
                        % (self.files[seg.shard], shard.n_docs,
                           self.shard_sizes[seg.shard]))
            pieces.append(gather(shard, seg.rows))
        if pieces:
            yield self._emit(p, cur, pieces)

    def _emit(self, p: int, b: int, pieces: List[DocBatch]) -> Minibatch:
        batch = pieces[0] if len(pieces) == 1 else DocBatch.concat(pieces)
        step = p * self.batches_per_pass + b
        return Minibatch(step, p, b, batch, step >= self.total_steps)


def read_docs(files: Sequence[str], expected_vocab_hash: Optional[str] = None,
              max_docs: Optional[int] = None,
              columns: Sequence[str] = ("doc_id", "label", "word_ids", "counts"),
              n_words: Optional[int] = None) -> DocBatch:
    """Documents of ``files`` in file order (at most ``max_docs``), after checking the
    vocabulary hash — for held-out sets and coherence reference corpora (``n_words``: every
    word id is checked below it, :func:`check_words`)."""
    files = list(files)
    dataset.check_vocab_hash(files, expected_vocab_hash)
    out, n = [], 0
    for f in files:
        b = read_shard(f, columns)
        check_words(b, n_words, f)
        if max_docs is not None and n + b.n_docs > max_docs:
            b = gather(b, np.arange(max_docs - n))
        out.append(b)
        n += b.n_docs
        if max_docs is not None and n >= max_docs:
            break
    return DocBatch.concat(out)


@dataclass(frozen=True)
class HeldOutShards:
    """Held-out documents named by their shards (``max_docs`` first ones, vocabulary hash
    checked), read where they are evaluated -- a detached window's last DoFn reads them in
    the worker instead of carrying the documents in the graph; in-process and waiting Beam
    runs load them at once. ``health_files``: the training shards whose seeded sample topic
    health is measured on (``pipelines.ingest.doc_sample``). ``load()`` gives the
    :class:`lda_core.training.heldout.HeldOut` to evaluate on (None when it is empty)."""
    files: Tuple[str, ...]
    vocab_hash: Optional[str]
    max_docs: Optional[int]
    seed: int = 0
    health_files: Tuple[str, ...] = ()

    def load(self):
        held = HeldOut.from_batch(read_docs(list(self.files), self.vocab_hash,
                                            max_docs=self.max_docs), seed=self.seed)
        if self.health_files:
            held.health = sample_documents(list(self.health_files), self.vocab_hash,
                                           seed=self.seed,
                                           columns=("doc_id", "word_ids", "counts"))
        return held if held.docs.n_docs else None
