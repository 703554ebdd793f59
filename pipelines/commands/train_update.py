"""``ldabeam train --update``: continue a model on new documents.

    ldabeam train --update --output MODEL_DIR (--shards NEW | --input RAW... [--format F])
                  [--passes N] [--grow-vocab]

The model of MODEL_DIR (its latest checkpoint) is continued in this process by the Python
API's update (:meth:`ldabeam.model.LdaModel.update`: the global step and the step-size
schedule carry on, the corpus size grows by the new documents, ``--grow-vocab`` adds the new
documents' words that pass the model's pruning rules as rows at the prior) and published as a
new checkpoint of MODEL_DIR, with its ``vocab.tsv`` rewritten atomically when words were
added (the checkpoint records the new vocabulary hash).

New documents come as

* ``--input``: raw text in any text format of ``ldabeam vectorize``, read with the record
  fields of the model's training data and tokenized by the model's recorded preprocessing
  (the same as ``ldabeam infer --input``); words outside the vocabulary are dropped (counted)
  unless ``--grow-vocab`` adds them;
* ``--shards``: a dataset written by ``ldabeam vectorize``. Shards vectorised with the
  model's vocabulary (``--vocab MODEL_DIR/vocab.tsv``) are used as they are; shards of
  another vocabulary are refused unless ``--grow-vocab`` is given, which reads them as words
  (through their own vocab.tsv).

Only the in-process runner: the update applies its steps on the driver, where the model's
state and vocabulary can grow between steps; the Beam trainers read a fixed vocabulary and
corpus size from the run they continue (docs/training.md "Updating a model with new
documents").
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from lda_core.errors import InputError, UsageError

logger = logging.getLogger(__name__)

#: options of a fresh or resumed run that an update does not take (the model decides them)
_NOT_WITH_UPDATE = (("resume", "--resume"), ("overwrite", "--overwrite"),
                    ("topics", "--topics"), ("detach", "--detach"), ("max_steps", "--max-steps"),
                    ("minibatch", "--minibatch"))


def check_update_args(args, beam_argv) -> int:
    """The options of an update, before anything is read; returns the number of passes."""
    if not args.output:
        raise UsageError("--update needs --output MODEL_DIR (the model to continue)")
    if bool(args.shards) == bool(getattr(args, "input", None)):
        raise UsageError("--update needs the new documents as either --shards NEW_DATASET or "
                         "--input RAW_FILES (one of the two)")
    for dest, opt in _NOT_WITH_UPDATE:
        v = getattr(args, dest, None)
        if v not in (None, False):
            raise UsageError("%s does not apply with --update (the update continues the "
                             "model's own run: its K, minibatch size and schedule)" % opt)
    if args.runner.lower() not in ("inprocess", "in-process", "local"):
        raise UsageError("--update runs in this process (--runner inprocess): the model's "
                         "state and vocabulary grow between steps on the driver, which the "
                         "Beam trainers, reading a fixed vocabulary and corpus size, do not "
                         "do")
    if beam_argv:
        raise UsageError("unrecognized arguments: %s (Beam pipeline options apply only to a "
                         "Beam --runner)" % " ".join(beam_argv))
    if getattr(args, "input_format", "auto") != "auto" and not getattr(args, "input", None):
        raise UsageError("--format applies to --input (raw text); shards need no format")
    passes = 1 if args.passes is None else args.passes
    if passes == "auto":
        raise UsageError("--passes auto does not apply with --update (there is no held-out "
                         "rule for new documents); give --passes N")
    if passes < 1:
        raise UsageError("--passes must be >= 1, got %d" % passes)
    return int(passes)


def read_input_documents(patterns: List[str], fmt: str, settings: Optional[Dict[str, Any]]
                         ) -> Tuple[List[str], List[str], int]:
    """``(ids, texts, dead letters)`` of the raw-text inputs, read with the record fields and
    encoding of the model's training data (its recorded settings; the vectorize defaults
    when unknown)."""
    from pipelines.ingest import text_sources as ts
    from pipelines.ingest.vectorize import VectorizeOptions
    defaults = VectorizeOptions(inputs=list(patterns), output="").reader_options()
    s = settings or {}
    opts = {k: (s[k] if s.get(k) is not None else v) for k, v in defaults.items()}
    inputs = ts.expand_inputs(list(patterns), fmt)
    bow = [p for p, f in inputs if f in ts.BOW_FORMATS]
    if bow:
        raise UsageError("--input takes raw text (%s), but %s is a bag-of-words corpus; "
                         "vectorise it with `ldabeam vectorize --vocab MODEL_DIR/vocab.tsv` "
                         "and pass --shards" % (", ".join(ts.TEXT_FORMATS), bow[0]))
    ids, texts, dead = [], [], 0
    for path, f in inputs:
        for rec in ts.read_documents(path, f, **opts):
            if isinstance(rec, ts.DeadLetter):
                dead += 1
                continue
            ids.append(rec.doc_id)
            texts.append(rec.text)
    if dead:
        logger.warning("--input: %d records could not be read (dead letters) and are not "
                       "trained on", dead)
    if not texts:
        raise InputError("--input %s holds no readable document" % " ".join(patterns))
    return ids, texts, dead


def read_shard_documents(shards: str, vocab_opt: Optional[str], model, grow: bool):
    """``(ids, documents)`` of a dataset: count rows when it was vectorised with the model's
    vocabulary, word lists (through the dataset's own vocab.tsv) with ``--grow-vocab``;
    otherwise InputError saying how to get a usable dataset."""
    import numpy as np
    from pipelines.ingest import dataset
    from pipelines.training.shard_stream import read_docs
    dataset.verify(shards)
    files = dataset.resolve_shards(shards)
    shard_hash = dataset.check_vocab_hash(files, None)
    model_hash = getattr(model._algo, "vocab_hash", None) or model._vocab.hash
    batch = read_docs(files, shard_hash, columns=("doc_id", "word_ids", "counts"))
    ids = [str(i) for i in batch.doc_ids]
    if shard_hash == model._vocab.hash:
        return ids, [{"word_ids": batch.word_ids[batch.indptr[d]:batch.indptr[d + 1]],
                      "counts": batch.counts[batch.indptr[d]:batch.indptr[d + 1]]}
                     for d in range(batch.n_docs)]
    if not grow:
        raise InputError("--shards %s was vectorised with another vocabulary (hash %s) than "
                         "the model's (%s); pass --grow-vocab to add its new words, or "
                         "vectorize it with --vocab %s" % (
                             shards, shard_hash, model_hash,
                             dataset.join(model.model_dir, dataset.VOCAB_FILE)))
    vocab_path = dataset.find_vocab(shards, vocab_opt)
    vocab = dataset.Vocabulary.read(vocab_path)
    if vocab.hash != shard_hash:
        raise InputError("vocabulary %s has hash %s but the shards were vectorised with %s"
                         % (vocab_path, vocab.hash, shard_hash))
    toks = np.asarray(vocab.tokens, dtype=object)
    docs = []
    for d in range(batch.n_docs):
        lo, hi = batch.indptr[d], batch.indptr[d + 1]
        docs.append(list(np.repeat(toks[batch.word_ids[lo:hi]], batch.counts[lo:hi])))
    return ids, docs


def run_update(args, beam_argv) -> int:
    """``ldabeam train --update``: checks, the model, the new documents, the update, the new
    checkpoint, a summary on stdout."""
    import ldabeam
    from lda_core.storage.checkpoint import CheckpointStore
    from pipelines.ingest import dataset
    passes = check_update_args(args, beam_argv)
    model = ldabeam.load(args.output)
    if args.algorithm and args.algorithm != model.algorithm:
        raise UsageError("--algorithm %s differs from the model's %s: an update continues the "
                         "model's algorithm" % (args.algorithm, model.algorithm))
    if model._vocab is None:
        raise InputError("%s has no %s: an update needs the model's vocabulary"
                         % (args.output, dataset.VOCAB_FILE))
    grow = bool(getattr(args, "grow_vocab", False))
    if getattr(args, "input", None):
        ids, docs, dead = read_input_documents(args.input, args.input_format,
                                               model.preprocessing)
        source = " ".join(args.input)
    else:
        ids, docs = read_shard_documents(args.shards, args.vocab, model, grow)
        dead, source = 0, args.shards
    v0, step0 = model.n_words, model.step
    summary = model.update(docs, passes=passes, grow_vocab=grow, ids=ids)
    keep = args.keep_checkpoints or None
    store = CheckpointStore(dataset.absolute(args.output), keep_last=keep, check_algorithm=True)
    path = model.publish_leased(dataset.absolute(args.output), store)
    print("updated %s (%s) on %s: %d documents, %d tokens, %d passes, steps %d -> %d"
          % (args.output, model.algorithm, source, summary["documents"], summary["tokens"],
             passes, step0, model.step))
    if grow:
        added = model.vocabulary[v0:]
        print("vocabulary: %d -> %d words (%d added%s)"
              % (v0, model.n_words, len(added),
                 (": " + ", ".join(added[:10]) + (", ..." if len(added) > 10 else ""))
                 if added else ""))
    if summary.get("unknown_tokens_dropped"):
        print("%d tokens outside the vocabulary were dropped%s"
              % (summary["unknown_tokens_dropped"],
                 "" if grow else " (--grow-vocab adds the words that pass the pruning rules)"))
    if summary.get("empty_documents") or dead:
        print("%d documents had no word of the vocabulary, %d records could not be read"
              % (summary.get("empty_documents", 0), dead))
    print("checkpoint: %s" % path)
    return 0
