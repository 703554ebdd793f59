"""``ldabeam evaluate``: held-out metrics of a trained model, printed as one JSON object.

    ldabeam evaluate --model MODEL_DIR --shards HELDOUT_DIR [--labels] [--train-shards DIR]

* document completion (``completion_ll_per_token``, ``completion_perplexity``): each held-out
  document's tokens are shuffled (seeded) and halved; θ is fit on the first half, the score is
  the log-likelihood per token of the second half — the protocol of ``../shared/bench``;
* ``per_word_bound`` / ``perplexity_bound`` (VB algorithms): paper eq. 16, a bound, not a
  perplexity estimate;
* UMass coherence of the top words (``umass_mean_sum`` per topic, ``umass_mean_pair`` per
  pair) on the training shards (``--train-shards``, or the dataset's train split);
* topic health on a seeded sample of 2,000 of those training documents
  (``pipelines.ingest.doc_sample``, ``--seed``: the documents the trainer logs it on and ``ldabeam
  report`` plots it on; ``lda_core.evaluation.topic_quality.topic_health``): ``dead_topics`` (share of
  the tokens below 0.1/K),
  ``effective_topics`` (exp entropy of the shares), ``npmi`` (document co-occurrence NPMI of
  the top 10 words), ``topic_diversity`` (``ldabeam report`` shows them per topic);
* ``left_to_right_ll_per_token`` with ``--left-to-right-docs N``: the left-to-right estimate
  of log p(w_d) per token (Wallach et al. 2009) on a seeded sample of N held-out documents;
* ``nmi`` with ``--labels``: normalised mutual information between the documents' labels and
  their most probable topic.

HELDOUT_DIR may be a dataset directory (its ``heldout`` split is used), a directory of shards
or a glob. The shards' vocabulary hash must equal the model's; every shard is verified against
its dataset's manifest (``--unverified`` also accepts shards no manifest lists).
"""
from __future__ import annotations

import json
import logging
import sys
import time

import numpy as np

from lda_core.errors import InputError, UsageError
from lda_core.evaluation import metrics as evaluation, topic_quality
from lda_core.training.heldout import evaluate, HeldOut
from pipelines.ingest import dataset, manifest
from pipelines.ingest.doc_sample import sample_documents
from pipelines.runtime import paths
from pipelines.runtime.model_dir import accepted_vocab, load_model
from pipelines.training.shard_stream import read_docs

logger = logging.getLogger(__name__)


def add_arguments(p) -> None:
    p.add_argument("--model", metavar="MODEL_DIR", default=None,
                   help="model directory written by `ldabeam train` (required)")
    p.add_argument("--shards", metavar="HELDOUT_DIR", default=None,
                   help="held-out documents: a dataset directory (its heldout split), a "
                        "directory of shards, or a glob (required)")
    p.add_argument("--split", default=None,
                   help="split of a dataset directory to evaluate on (default heldout)")
    p.add_argument("--unverified", action="store_true",
                   help="also read shards that no dataset manifest lists (written by another "
                        "tool, or by a killed `ldabeam vectorize`); shards a manifest lists "
                        "are always verified against it")
    p.add_argument("--labels", action="store_true",
                   help="also report NMI between the shards' labels and the argmax topic")
    p.add_argument("--train-shards", default=None, metavar="DIR",
                   help="documents for UMass coherence (default: the dataset's train split "
                        "when --shards is a dataset directory; 'none' to skip)")
    p.add_argument("--max-docs", type=int, default=None,
                   help="evaluate on at most this many held-out documents")
    p.add_argument("--coherence-max-docs", type=int, default=50000,
                   help="UMass co-occurrence counts from at most this many training documents")
    p.add_argument("--top", type=int, default=10, help="top words per topic for coherence")
    p.add_argument("--seed", type=int, default=0, help="seed of the document-completion split")
    p.add_argument("--left-to-right-docs", type=int, default=0, metavar="N",
                   help="also estimate log p(w_d) by the left-to-right algorithm (Wallach et "
                        "al. 2009) on a seeded sample of N held-out documents (cost grows "
                        "with the square of their length; 0 = skip)")
    p.add_argument("--particles", type=int, default=20,
                   help="particles of the left-to-right estimate")


def _is_dataset(path: str) -> bool:
    return paths.exists(paths.join(path, dataset.MANIFEST_FILE)) or \
        paths.exists(paths.join(path, dataset.TRAIN_SPLIT))


def run(args, beam_argv) -> int:
    if not args.shards:
        raise UsageError("--shards HELDOUT_DIR is required")
    if args.left_to_right_docs < 0 or args.particles < 1:
        raise UsageError("--left-to-right-docs must be >= 0 and --particles >= 1")
    for name in ("max_docs", "coherence_max_docs", "top"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise UsageError("--%s must be >= 1, got %d" % (name.replace("_", "-"), v))
    algo, state, vocab = load_model(args.model)
    split = args.split or dataset.HELDOUT_SPLIT
    unverified = getattr(args, "unverified", False)
    files = manifest.open_shards(args.shards, split, unverified=unverified).files
    expected = accepted_vocab(state, vocab)
    dataset.check_vocab_hash(files, expected)
    train_files = None
    if args.train_shards not in (None, "none"):
        train_files = manifest.open_shards(args.train_shards, unverified=unverified,
                                          option="--train-shards").files
    elif args.train_shards is None and _is_dataset(args.shards):
        try:
            train_files = manifest.open_shards(args.shards, dataset.TRAIN_SPLIT,
                                              unverified=unverified).files
        except FileNotFoundError:
            train_files = None
    if train_files is not None:
        dataset.check_vocab_hash(train_files, expected)

    t0 = time.time()
    docs = read_docs(files, expected, max_docs=args.max_docs, n_words=state.n_words)
    n_all = docs.n_docs
    heldout = HeldOut.from_batch(docs, seed=args.seed)
    if heldout.docs.n_docs == 0:
        raise InputError("the held-out shards %s hold no non-empty documents" % args.shards)
    out = dict(model=args.model, algorithm=state.algorithm, n_topics=state.n_topics,
               n_words=state.n_words, step=state.step, docs_seen=state.docs_seen,
               heldout_shards=args.shards, heldout_docs=int(heldout.docs.n_docs),
               heldout_empty_docs=int(n_all - heldout.docs.n_docs),
               heldout_tokens=int(heldout.docs.n_tokens),
               completion_tokens=int(heldout.second.n_tokens), split_seed=args.seed)
    out.update(evaluate(algo, heldout))
    phi = algo.topic_word()
    if train_files is not None:
        ref = read_docs(train_files, expected, max_docs=args.coherence_max_docs,
                        n_words=state.n_words)
        coh = topic_quality.umass_coherence(phi, ref, topn=args.top)
        out["umass_mean_sum"] = float(coh["mean_sum"])
        out["umass_mean_pair"] = float(coh["mean_pair"])
        out["umass_docs"] = int(ref.n_docs)
        health = sample_documents(train_files, expected, seed=args.seed)
        out.update(topic_quality.health_scalars(phi, health, seed=args.seed))
        out["health_docs"] = int(health.n_docs)
    if args.left_to_right_docs:
        l2r = evaluation.left_to_right(phi, heldout.docs, particles=args.particles,
                                       max_docs=args.left_to_right_docs, seed=args.seed)
        out["left_to_right_ll_per_token"] = l2r["ll_per_token"]
        out["left_to_right_docs"] = l2r["n_docs"]
    if args.labels:
        labels = heldout.docs.labels
        if labels is None or all(l is None for l in labels):
            raise InputError("--labels: the shards at %s carry no labels" % args.shards)
        keep = [i for i, l in enumerate(labels) if l is not None]
        theta = algo.infer(heldout.docs)
        pred = np.asarray(theta).argmax(axis=1)[keep]
        out["nmi"] = float(topic_quality.normalized_mutual_information(
            [labels[i] for i in keep], pred.tolist()))
        out["nmi_docs"] = len(keep)
    if vocab is not None:
        tops = topic_quality.top_words(phi, vocab.tokens, n=min(args.top, 10))
        out["top_words_first5"] = [" ".join(str(w) for w, _ in t) for t in tops[:5]]
    out["eval_seconds"] = time.time() - t0
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0
