"""Synthetic corpora drawn from the LDA generative model, for load tests and scale benchmarks.

The generative model (Blei, Ng & Jordan 2003; the model of every algorithm in ``lda_core``)::

    β_k ~ Dirichlet(η · 1_V)                  k = 1..K      (the planted topics)
    for each document d:
        θ_d ~ Dirichlet(α · 1_K)
        N_d ~ Poisson(L)  (at least 1)        L = mean document length
        n_dk ~ Multinomial(N_d, θ_d)          tokens of document d from topic k
        words of those n_dk tokens ~ Categorical(β_k)
    document d is the bag of its words (unique word ids, sorted, with counts)

Seeding: the topics come from ``default_rng([seed, 0])``; the documents are generated in
fixed chunks of ``CHUNK_DOCS`` documents, chunk ``c`` from ``default_rng([seed, 1, c])``. So a
document depends only on (seed, its index, the spec), never on how many shards are written or
which worker generates which chunk, and any chunk can be generated alone.

Cost: one ``searchsorted`` per topic over the chunk's tokens plus one sort of the chunk's
(document, word) keys (``benchmarks/scale_bench.py`` measures it); memory is bounded by one chunk
(a few MB) plus one shard's table while it is written.

Output (:func:`write_dataset`) is an ordinary dataset directory (``pipelines.ingest.dataset``):
``vocab.tsv`` (tokens ``waaa``, ``waab``, ..), ``train/part-*.parquet`` with the vocabulary hash,
optionally ``heldout/``, ``manifest.json`` (with the spec), and ``planted_topics.npy``
(β, K x V float64) so a test can check that training recovers the planted topics.
"""
from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict, dataclass
from typing import Iterator, Optional

import numpy as np

from lda_core.docbatch import DocBatch
from lda_core.errors import UsageError
from lda_core.storage import output_paths
from lda_core.storage.npy import write_npy_atomic
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest import dataset, manifest as dataset_manifest
from pipelines.runtime import paths

logger = logging.getLogger(__name__)

CHUNK_DOCS = 1000            # documents per generation chunk (fixed: part of the seeding)
MAX_DOCS = 10 ** 9           # caps on sizes given by a user (checked before allocating)
MAX_WORDS = 10 ** 7
MAX_TOPICS = 10 ** 5
MAX_DOC_LENGTH = 10 ** 6
PLANTED_TOPICS_FILE = "planted_topics.npy"
DOCS_PER_SHARD = 20000       # as the vectorize pipeline's automatic sharding


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate (see the module docstring for the model)."""

    n_docs: int                 # D
    n_words: int = 8000         # V (Hoffman et al.'s Wikipedia vocabulary had 7,995 words)
    n_topics: int = 100         # K
    doc_length: float = 150.0   # L, mean tokens per document (Poisson)
    alpha: float = 0.1          # document-topic Dirichlet
    eta: float = 0.01           # topic-word Dirichlet
    seed: int = 0

    def validate(self) -> None:
        def _int(name, lo, hi):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
                raise UsageError("%s=%r is outside the allowed range [%d, %d] (an integer)"
                                 % (name, v, lo, hi))
        _int("n_docs", 1, MAX_DOCS)
        _int("n_words", 2, MAX_WORDS)
        _int("n_topics", 1, MAX_TOPICS)
        _int("seed", 0, 2 ** 63 - 1)
        if not (isinstance(self.doc_length, (int, float)) and math.isfinite(self.doc_length)
                and 1 <= self.doc_length <= MAX_DOC_LENGTH):
            raise UsageError("doc_length=%r is outside the allowed range [1, %d]"
                             % (self.doc_length, MAX_DOC_LENGTH))
        for name in ("alpha", "eta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise UsageError("%s=%r is outside the allowed range (0, inf)" % (name, v))

    @property
    def n_chunks(self) -> int:
        return -(-self.n_docs // CHUNK_DOCS)


def planted_topics(spec: SyntheticSpec) -> np.ndarray:
    """β, K x V float64 (rows sum to 1): β_k ~ Dirichlet(η), from ``default_rng([seed, 0])``."""
    spec.validate()
    rng = np.random.default_rng([spec.seed, 0])
    beta = rng.dirichlet(np.full(spec.n_words, spec.eta), size=spec.n_topics)
    # Dirichlet draws with tiny η can underflow to an all-zero row; keep rows proper
    beta = np.maximum(beta, 1e-300)
    beta /= beta.sum(axis=1, keepdims=True)
    return beta


def doc_id(index: int) -> str:
    return "syn-%09d" % index


def generate_chunk(spec: SyntheticSpec, chunk: int, beta: Optional[np.ndarray] = None,
                   cdf: Optional[np.ndarray] = None) -> DocBatch:
    """Documents ``[chunk * CHUNK_DOCS, min(D, (chunk + 1) * CHUNK_DOCS))`` as a DocBatch
    (ids ``syn-<index>``; labels = the document's most probable planted topic)."""
    if not 0 <= chunk < spec.n_chunks:
        raise ValueError("chunk=%r is outside the allowed range [0, %d)" % (chunk, spec.n_chunks))
    if cdf is None:
        cdf = topic_cdfs(beta if beta is not None else planted_topics(spec))
    K, V = spec.n_topics, spec.n_words
    lo = chunk * CHUNK_DOCS
    hi = min(spec.n_docs, lo + CHUNK_DOCS)
    n = hi - lo
    rng = np.random.default_rng([spec.seed, 1, chunk])
    theta = rng.dirichlet(np.full(K, spec.alpha), size=n)                 # n x K
    lengths = np.maximum(1, rng.poisson(spec.doc_length, size=n)).astype(np.int64)
    # n_dk ~ Multinomial(N_d, θ_d): numpy's multinomial takes a vector of trials per row
    theta = np.maximum(theta, 0.0)
    theta /= theta.sum(axis=1, keepdims=True)
    n_dk = rng.multinomial(lengths, theta)                                  # n x K
    # tokens sorted by topic: doc index of each token, topic k's tokens drawn from β_k
    docs_of = np.repeat(np.tile(np.arange(n, dtype=np.int64), K), n_dk.T.reshape(-1))
    per_topic = n_dk.sum(axis=0)
    words = np.empty(int(per_topic.sum()), np.int64)
    u = rng.random(len(words))
    pos = 0
    for k in range(K):
        m = int(per_topic[k])
        if m:
            words[pos:pos + m] = np.searchsorted(cdf[k], u[pos:pos + m], side="right")
            pos += m
    np.minimum(words, V - 1, out=words)   # guard against cdf[-1] rounding below 1
    keys, counts = np.unique(docs_of * V + words, return_counts=True)      # sorted by doc, word
    d = keys // V
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(d, minlength=n), out=indptr[1:])
    labels = tuple(str(int(k)) for k in np.argmax(theta, axis=1))
    return DocBatch(tuple(doc_id(i) for i in range(lo, hi)), indptr,
                    (keys % V).astype(np.int32), counts.astype(np.int32), labels=labels)


def topic_cdfs(beta: np.ndarray) -> np.ndarray:
    """Cumulative sums of each topic's word distribution (for inverse-CDF sampling)."""
    cdf = np.cumsum(beta, axis=1)
    cdf /= cdf[:, -1:]
    return cdf


def iter_chunks(spec: SyntheticSpec, start: int = 0, stop: Optional[int] = None
                ) -> Iterator[DocBatch]:
    """Chunks ``start..stop-1`` (all by default), in order."""
    spec.validate()
    cdf = topic_cdfs(planted_topics(spec))
    stop = spec.n_chunks if stop is None else min(stop, spec.n_chunks)
    for c in range(start, stop):
        yield generate_chunk(spec, c, cdf=cdf)


def generate(spec: SyntheticSpec) -> DocBatch:
    """The whole corpus as one DocBatch (small corpora; use :func:`write_dataset` otherwise)."""
    return DocBatch.concat(list(iter_chunks(spec)))


def token(i: int, width: int) -> str:
    """Word ``i`` as letters only (``"w" + base-26``, e.g. ``wabc``), so that text built from
    the tokens survives the tokenizer (gensim's pattern drops digits)."""
    out = []
    for _ in range(width):
        i, r = divmod(i, 26)
        out.append(chr(ord("a") + r))
    return "w" + "".join(reversed(out))


def vocabulary(spec: SyntheticSpec) -> Vocabulary:
    """Tokens ``w`` + fixed-width base-26 letters, in id order (sorted like the ids)."""
    width = max(3, int(math.ceil(math.log(spec.n_words, 26))))
    return Vocabulary([token(i, width) for i in range(spec.n_words)])


def write_dataset(spec: SyntheticSpec, output: str, *, docs_per_shard: int = DOCS_PER_SHARD,
                  heldout_docs: int = 0, overwrite: bool = False) -> dict:
    """Write the corpus as a dataset directory (module docstring); returns the manifest.

    The last ``heldout_docs`` documents go to ``heldout/`` (one shard). Shards hold
    ``docs_per_shard`` documents (a multiple of ``CHUNK_DOCS`` is cheapest)."""
    _prepare_output(spec, output, docs_per_shard, heldout_docs, overwrite)
    vocab = vocabulary(spec)
    vh = vocab.hash
    beta = planted_topics(spec)
    cdf = topic_cdfs(beta)
    n_train = spec.n_docs - int(heldout_docs)
    n_train_shards = max(1, -(-n_train // int(docs_per_shard)))

    splits = {dataset.TRAIN_SPLIT: [], dataset.HELDOUT_SPLIT: []}
    tokens = {dataset.TRAIN_SPLIT: 0, dataset.HELDOUT_SPLIT: 0}
    pending = []          # DocBatch pieces of the shard being filled
    pending_n = 0
    shard_index = 0

    def flush(split: str, n_shards: int):
        nonlocal pending, pending_n, shard_index
        batch = DocBatch.concat(pending) if len(pending) > 1 else pending[0]
        idx = shard_index if split == dataset.TRAIN_SPLIT else 0
        name = dataset.shard_name(idx, n_shards)
        sha = dataset.write_shard(os.path.join(output, split, name),
                                  dataset.docbatch_to_table(batch), vh)
        nt = int(batch.n_tokens)
        splits[split].append({"file": "%s/%s" % (split, name), "documents": batch.n_docs,
                              "tokens": nt, "sha256": sha})
        tokens[split] += nt
        logger.info("wrote %s/%s: %d documents, %d tokens", split, name, batch.n_docs, nt)
        pending, pending_n = [], 0
        if split == dataset.TRAIN_SPLIT:
            shard_index += 1

    done = 0
    for c in range(spec.n_chunks):
        chunk = generate_chunk(spec, c, cdf=cdf)
        i = 0
        while i < chunk.n_docs:
            if done < n_train:
                room = min(int(docs_per_shard) - pending_n, n_train - done)
                take = min(room, chunk.n_docs - i)
                pending.append(_slice(chunk, i, i + take))
                pending_n += take
                done += take
                i += take
                if pending_n == int(docs_per_shard) or done == n_train:
                    flush(dataset.TRAIN_SPLIT, n_train_shards)
            else:
                pending.append(_slice(chunk, i, chunk.n_docs))
                pending_n += chunk.n_docs - i
                done += chunk.n_docs - i
                i = chunk.n_docs
    if pending:
        flush(dataset.HELDOUT_SPLIT, 1)

    vocab.write(os.path.join(output, dataset.VOCAB_FILE))
    write_npy_atomic(os.path.join(output, PLANTED_TOPICS_FILE), beta)
    manifest = _manifest(spec, n_train, int(heldout_docs), tokens, splits, vh)
    dataset_manifest.write_manifest(output, manifest)
    return manifest


def _prepare_output(spec: SyntheticSpec, output: str, docs_per_shard, heldout_docs,
                    overwrite: bool) -> None:
    """Check the arguments of :func:`write_dataset` and clear (with ``overwrite``) or create
    the local output directory."""
    spec.validate()
    if isinstance(docs_per_shard, bool) or not 1 <= int(docs_per_shard) <= MAX_DOCS:
        raise UsageError("docs_per_shard=%r is outside the allowed range [1, %d]"
                         % (docs_per_shard, MAX_DOCS))
    if not 0 <= int(heldout_docs) < spec.n_docs:
        raise UsageError("heldout_docs=%r is outside the allowed range [0, %d)"
                         % (heldout_docs, spec.n_docs))
    paths.require_local(output, "write_dataset writes local directories; write one here "
                                  "and copy it to the object store afterwards (gsutil -m cp -r)")
    # the rules of every dataset writer (lda_core.storage.output_paths), as vectorize
    output_paths.prepare_output(output, "dataset", "ldabeam synth", overwrite=overwrite)


def _manifest(spec: SyntheticSpec, n_train: int, heldout_docs: int, tokens: dict,
              splits: dict, vh: str) -> dict:
    """The manifest of a written synthetic dataset (counts, tokens, vocabulary, shards)."""
    return {
        "tool": "ldabeam synth (pipelines.ingest.synthetic)",
        "format_version": dataset.FORMAT_VERSION,
        "synthetic": dict(asdict(spec), chunk_docs=CHUNK_DOCS,
                          model="LDA generative model; planted topics in %s"
                                % PLANTED_TOPICS_FILE),
        "counts": {"documents_read": spec.n_docs, "documents_kept": spec.n_docs,
                   "train_documents": n_train, "heldout_documents": int(heldout_docs)},
        "tokens": {"total": tokens[dataset.TRAIN_SPLIT] + tokens[dataset.HELDOUT_SPLIT],
                   dataset.TRAIN_SPLIT: tokens[dataset.TRAIN_SPLIT],
                   dataset.HELDOUT_SPLIT: tokens[dataset.HELDOUT_SPLIT]},
        "vocabulary": {"size": spec.n_words, "hash": vh, "file": dataset.VOCAB_FILE},
        "extra_files": [PLANTED_TOPICS_FILE],
        "splits": {s: {"documents": sum(x["documents"] for x in v),
                       "tokens": tokens[s], "shards": v} for s, v in splits.items()},
    }


def _slice(batch: DocBatch, lo: int, hi: int) -> DocBatch:
    if lo == 0 and hi == batch.n_docs:
        return batch
    a, b = batch.indptr[lo], batch.indptr[hi]
    return DocBatch(batch.doc_ids[lo:hi], batch.indptr[lo:hi + 1] - a, batch.word_ids[a:b],
                    batch.counts[a:b],
                    labels=None if batch.labels is None else batch.labels[lo:hi])


def summary(manifest: dict, output: str) -> str:
    s = manifest["synthetic"]
    return ("synthetic LDA corpus: D=%d (train %d, heldout %d), V=%d, K=%d, mean length %.0f "
            "(%d tokens), alpha=%g, eta=%g, seed=%d\noutput: %s (%d train shard(s)); planted "
            "topics: %s" % (s["n_docs"], manifest["counts"]["train_documents"],
                           manifest["counts"]["heldout_documents"], s["n_words"], s["n_topics"],
                           s["doc_length"], manifest["tokens"]["total"], s["alpha"], s["eta"],
                           s["seed"], output,
                           len(manifest["splits"][dataset.TRAIN_SPLIT]["shards"]),
                           os.path.join(output, PLANTED_TOPICS_FILE)))


def spec_json(spec: SyntheticSpec) -> str:
    return json.dumps(asdict(spec), sort_keys=True)
