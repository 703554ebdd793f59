"""``ldabeam train --update``: continue a model on new documents.

    ldabeam train --update --output MODEL_DIR (--shards NEW | --input RAW... [--format F])
                  [--passes N] [--grow-vocab] [--replay FRACTION [--replay-shards DIR]]

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

``--replay FRACTION`` revisits that share of the model's training documents beside the new
ones (a seeded sample of the shards its run log names, or of ``--replay-shards DIR``; the
Python update's ``replay=``, :mod:`ldabeam.model`, "Replay"), so the old subjects keep their
topics while the new ones take some; the summary says how many were revisited. When the
training shards cannot be read the update is refused in one line naming them, before anything
is written (``--replay 0`` updates without them).

On a Beam ``--runner`` (DirectRunner, Dataflow, Flink, ...) the same update runs through the
Beam trainer: the new documents, read and (with ``--grow-vocab``) added to the vocabulary on
the driver as above, are written as a dataset under ``MODEL_DIR/updating/data`` in the order
the in-process update uses (:class:`ldabeam.model.UpdateJob`), the grown state is published as
the first checkpoint of a scratch model ``MODEL_DIR/updating/model`` (its run: that dataset,
the update's seed, the model's minibatch size and pieces, position 0), and ``ldabeam train
--resume`` continues it there (:func:`pipelines.commands.train.run`). Only when that run has
ended is its last state published as a checkpoint of MODEL_DIR (as the in-process update
publishes) and ``updating/`` removed. An update killed on the way leaves MODEL_DIR's
checkpoints as they were (``updating/`` is not a model any reader opens). Running the same
update again (same model checkpoint, documents and passes: ``updating/update.json``) continues
the scratch run from its latest checkpoint, as ``train --resume`` does; any other update clears
``updating/`` and starts over. The result is the in-process update's, bit for bit.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.errors import InputError, Terminated, TrainingError, UsageError
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.files import files_for
from lda_core.storage.vocab_file import Vocabulary
from lda_core.training.pieces import RUN_KEY
from lda_core.training.session import Session, TrainingInterrupted
from lda_core.training.spec import Output
import ldabeam
from pipelines.ingest import dataset, input_files, manifest as dataset_manifest, text_sources as ts
from pipelines.runtime import paths
from pipelines.training.shard_stream import read_docs

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
    if getattr(args, "pieces", None) is not None:
        raise UsageError("--pieces does not apply with --update (the update sums its "
                         "statistics in the pieces the model was trained with)")
    if is_inprocess(args.runner) and beam_argv:
        raise UsageError("unrecognized arguments: %s (Beam pipeline options apply only to a "
                         "Beam --runner)" % " ".join(beam_argv))
    if getattr(args, "keep_n", None) is not None and not getattr(args, "grow_vocab", False):
        raise UsageError("--keep-n caps the vocabulary --grow-vocab grows; give --grow-vocab too")
    for opt, v in (("--keep-n", getattr(args, "keep_n", None)),
                   ("--corpus-size", getattr(args, "corpus_size", None))):
        if v is not None and v < 1:
            raise UsageError("%s must be >= 1, got %d" % (opt, v))
    replay = getattr(args, "replay", None)
    if replay is not None and not 0.0 <= replay <= 1.0:
        raise UsageError("--replay is the share of the training documents to revisit, from 0 "
                         "to 1; got %g" % replay)
    if getattr(args, "replay_shards", None) and not replay:
        raise UsageError("--replay-shards names where the training documents --replay "
                         "revisits are; give --replay FRACTION too")
    if getattr(args, "exclude", None) and not getattr(args, "input", None):
        raise UsageError("--exclude applies to --input (files); shards need no exclusion")
    if getattr(args, "input_format", "auto") != "auto" and not getattr(args, "input", None):
        raise UsageError("--format applies to --input (raw text); shards need no format")
    passes = 1 if args.passes is None else args.passes
    if passes == "auto":
        raise UsageError("--passes auto does not apply with --update (there is no held-out "
                         "rule for new documents); give --passes N")
    if passes < 1:
        raise UsageError("--passes must be >= 1, got %d" % passes)
    return int(passes)


def read_input_documents(patterns: List[str], fmt: str, settings: Optional[Dict[str, Any]],
                         exclude: Tuple[str, ...] = ()) -> Tuple[List[str], List[str], int]:
    """``(ids, texts, dead letters)`` of the raw-text inputs, read with the record fields and
    encoding of the model's training data (its recorded settings; the vectorize defaults
    when unknown)."""
    # imports Beam: only when the command runs
    from pipelines.ingest.vectorize import VectorizeOptions
    defaults = VectorizeOptions(inputs=list(patterns), output="").reader_options()
    s = settings or {}
    opts = {k: (s[k] if s.get(k) is not None else v) for k, v in defaults.items()}
    inputs = input_files.expand_inputs(list(patterns), fmt, exclude)
    bow = [p for p, f in inputs if f in input_files.BOW_FORMATS]
    if bow:
        raise UsageError("--input takes raw text (%s), but %s is a bag-of-words corpus; "
                         "vectorise it with `ldabeam vectorize --vocab MODEL_DIR/vocab.tsv` "
                         "and pass --shards" % (", ".join(input_files.TEXT_FORMATS), bow[0]))
    ids, texts, dead = [], [], 0
    for path, f in inputs:
        for rec in ts.read_documents(path, f, **opts):
            if isinstance(rec, input_files.DeadLetter):
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
    dataset_manifest.verify(shards)
    files = dataset.resolve_shards(shards)
    shard_hash = dataset.check_vocab_hash(files, None)
    model_hash = getattr(model._algo, "vocab_hash", None) or model._vocab.hash
    batch = read_docs(files, shard_hash, columns=("doc_id", "word_ids", "counts"))
    ids = [str(i) for i in batch.doc_ids]
    if model._vocab.accepts(shard_hash):     # the model's vocabulary or one it grew from
        return ids, [{"word_ids": batch.word_ids[batch.indptr[d]:batch.indptr[d + 1]],
                      "counts": batch.counts[batch.indptr[d]:batch.indptr[d + 1]]}
                     for d in range(batch.n_docs)]
    if not grow:
        raise InputError("--shards %s was vectorised with another vocabulary (hash %s) than "
                         "the model's (%s); pass --grow-vocab to add its new words, or "
                         "vectorize it with --vocab %s" % (
                             shards, shard_hash, model_hash,
                             paths.join(model.model_dir, dataset.VOCAB_FILE)))
    vocab_path = dataset.find_vocab(shards, vocab_opt)
    vocab = Vocabulary.read(vocab_path)
    if vocab.hash != shard_hash:
        raise InputError("vocabulary %s has hash %s but the shards were vectorised with %s"
                         % (vocab_path, vocab.hash, shard_hash))
    toks = np.asarray(vocab.tokens, dtype=object)
    docs = []
    for d in range(batch.n_docs):
        lo, hi = batch.indptr[d], batch.indptr[d + 1]
        docs.append(list(np.repeat(toks[batch.word_ids[lo:hi]], batch.counts[lo:hi])))
    return ids, docs


def is_inprocess(runner: str) -> bool:
    return str(runner).lower() in ("inprocess", "in-process", "local")


#: MODEL_DIR/UPDATING holds a Beam update's dataset and scratch model while it runs
UPDATING = "updating"


def clear_updating(model_dir: str) -> None:
    """Remove what a Beam update left in ``MODEL_DIR/updating`` (a finished one removes it
    itself; a killed one leaves it for the next update to clear)."""
    scratch = paths.join(model_dir, UPDATING)
    files = files_for(scratch)
    if files.isdir(scratch):
        files.remove_tree(scratch)


def write_update_dataset(job, out: str, settings: Optional[Dict[str, Any]]) -> str:
    """The update's documents as a dataset at ``out`` (``vocab.tsv``, ``train/`` shards of
    ``job.shard_sizes`` rows in the job's order, then ``manifest.json``, written last so the
    dataset verifies only once complete)."""
    import numpy as np
    docs, vocab = job.documents, job.vocabulary
    paths.make_dirs(paths.join(out, dataset.TRAIN_SPLIT))
    vocab.write(paths.join(out, dataset.VOCAB_FILE))
    n, lo = len(job.shard_sizes), 0
    for j, size in enumerate(job.shard_sizes):
        part = docs.take(np.arange(lo, lo + size))
        dataset.write_shard(paths.join(out, dataset.TRAIN_SPLIT, dataset.shard_name(j, n)),
                            dataset.docbatch_to_table(part), vocab.hash)
        lo += size
    manifest = {"n_docs": int(docs.n_docs), "vocab_size": len(vocab), "vocab_hash": vocab.hash,
                "source": "ldabeam train --update", "splits": dataset_manifest.shard_listing(out)}
    if settings:
        manifest["settings"] = dict(settings)
    dataset_manifest.write_manifest(out, manifest)
    return out


BASE_FILE = "update.json"   # in MODEL_DIR/updating: which update the scratch run trains


def update_base(job, checkpoint: Optional[str]) -> Dict[str, Any]:
    """What identifies an update's scratch run: the state it starts from (the model's
    checkpoint, step, vocabulary and a digest of the grown state's arrays and parameters), the
    new documents (a digest of their ids and counts) and the order (seed, S, pieces, passes,
    steps)."""
    import hashlib
    import numpy as np
    docs = job.documents
    h = hashlib.sha256()
    h.update("\n".join(str(i) for i in docs.doc_ids).encode("utf-8"))
    for a in (docs.indptr, docs.word_ids, docs.counts):
        h.update(np.ascontiguousarray(a, np.int64).tobytes())
    state = job.algorithm.to_state(copy=False) if job.algorithm.name == "online-vb" \
        else job.algorithm.to_state()
    hs = hashlib.sha256(json.dumps(state.params, sort_keys=True, default=str).encode("utf-8"))
    for name in sorted(state.arrays):
        hs.update(name.encode("utf-8"))
        hs.update(np.ascontiguousarray(state.arrays[name]).tobytes())
    return {"checkpoint": checkpoint, "from_step": int(job.algorithm.step),
            "state_sha256": hs.hexdigest(),
            "algorithm": job.algorithm.name, "vocab_hash": job.vocabulary.hash,
            "documents": int(docs.n_docs), "documents_sha256": h.hexdigest(),
            "seed": int(job.seed), "batch_size": int(job.minibatch), "pieces": int(job.pieces),
            "passes": int(job.passes),
            "steps": int(job.passes) * -(-int(docs.n_docs) // int(job.minibatch))}


def resumable(scratch: str, base: Dict[str, Any]):
    """The latest checkpoint of the scratch run in ``scratch`` when it is this update's (same
    base record, its dataset verified against its manifest and the one the checkpoint was
    trained on), else None (the update starts over)."""
    path = paths.join(scratch, BASE_FILE)
    try:
        if not paths.exists(path):
            return None
        with paths.open_read(path) as f:
            if json.loads(f.read().decode("utf-8")) != base:
                return None
        record = dataset_manifest.open_shards(paths.join(scratch, "data")).record()
        latest = CheckpointStore(paths.join(scratch, "model")).latest()
    except (OSError, ValueError) as e:     # DataIntegrityError, a damaged file: start over
        logger.info("--update: %s is not resumable (%s); starting over", scratch, e)
        return None
    if latest is None or latest.vocab_hash != base["vocab_hash"] or \
            ((latest.info or {}).get("run") or {}).get("dataset", {}).get("digest") != \
            record["digest"]:
        return None
    return latest


def beam_runner(args, beam_argv, train_run: Callable[..., int],
                settings: Optional[Dict[str, Any]] = None,
                base_checkpoint: Optional[str] = None):
    """The :class:`ldabeam.model.UpdateJob` runner of a Beam update (module docstring):
    dataset, starting checkpoint, ``train --resume`` on the Beam runner, the trained
    algorithm back. ``settings``: the model's recorded preprocessing (the dataset's
    manifest records it, so the scratch model's tokenizer.json is the model's)."""

    def run(job):
        scratch = paths.join(paths.absolute(args.output), UPDATING)
        data, model = paths.join(scratch, "data"), paths.join(scratch, "model")
        base = update_base(job, base_checkpoint)
        start_step = int(job.algorithm.step)
        latest = resumable(scratch, base)
        if latest is not None:
            logger.info("--update: resuming the update stopped at step %d in %s (steps %d..%d)",
                        latest.step, scratch, start_step, start_step + base["steps"])
        else:
            clear_updating(paths.absolute(args.output))
            write_update_dataset(job, data, settings)
            record = dataset_manifest.open_shards(data).record()
            run_info = dict(shards=data, minibatch=job.minibatch, seed=job.seed,
                            passes=job.passes, n_docs=int(job.documents.n_docs),
                            n_shards=len(job.shard_sizes), runner=args.runner,
                            algorithm=job.algorithm.name, vocab_hash=job.vocabulary.hash,
                            dataset=record)
            run_info[RUN_KEY] = job.pieces
            # the scratch run's first checkpoint, at position 0 of its order
            start = Session(output=Output(checkpoint_store=CheckpointStore(model),
                                          progress=False),
                            runner=args.runner, run_info=run_info).publish(job.algorithm)
            # written once the starting checkpoint is: its presence says the scratch run is
            # this update's (resumable() compares it)
            paths.write_atomic(paths.join(scratch, BASE_FILE),
                                       (json.dumps(base, sort_keys=True) + "\n").encode())
            logger.info("--update on %s: %d documents in %s, starting checkpoint %s",
                        args.runner, job.documents.n_docs, data, start)
            latest = CheckpointStore(model).latest()
        if latest.step < start_step + base["steps"]:
            train_scratch(data, model, job)
        final = CheckpointStore(model).latest()
        if final is None or final.step != start_step + base["steps"]:
            raise TrainingError("--update: the training run on %s ended at step %s, not %d; "
                                "%s is unchanged" % (args.runner, getattr(final, "step", None),
                                                     start_step + base["steps"], args.output))
        return algorithm_class(final.algorithm).from_state(final)

    def train_scratch(data, model, job):
        sub = argparse.Namespace(**vars(args))
        for dest, value in (("update", False), ("input", []), ("grow_vocab", False),
                            ("corpus_size", None), ("keep_n", None), ("exclude", []),
                            ("replay", None), ("replay_shards", None),
                            ("shards", data), ("output", model), ("resume", True),
                            ("overwrite", False), ("topics", None), ("algorithm", None),
                            ("minibatch", None), ("seed", None), ("max_steps", None),
                            ("passes", job.passes), ("passes_patience", None),
                            ("heldout", "none"), ("vocab", None), ("unverified", False),
                            ("pieces", None), ("detach", False), ("keep_checkpoints", 1),
                            ("input_format", "auto")):
            setattr(sub, dest, value)
        out = io.StringIO()
        try:
            # the scratch run's own summary names the scratch model: logged, not printed
            with contextlib.redirect_stdout(out):
                rc = train_run(sub, list(beam_argv))
        except TrainingInterrupted as e:
            rc = 128 + e.signum
        finally:
            for line in out.getvalue().splitlines():
                logger.info("update's training run: %s", line)
        if rc in (130, 143):
            logger.warning("--update interrupted: %s is unchanged; run the same `ldabeam train "
                           "--update` again to continue the update from its last checkpoint "
                           "in %s", args.output, paths.join(args.output, UPDATING))
            raise (Terminated if rc == 143 else KeyboardInterrupt)(
                "the update's training run stopped (exit %d)" % rc)
        if rc != 0:
            raise TrainingError("--update: the training run on %s ended with exit code %d; %s "
                                "is unchanged" % (args.runner, rc, args.output))

    return run


def run_update(args, beam_argv, train_run: Optional[Callable[..., int]] = None) -> int:
    """``ldabeam train --update``: checks, the model, the new documents, the update (in this
    process, or on a Beam runner through ``train_run`` -- :func:`pipelines.commands.train.run`,
    handed in by it), the new checkpoint, a summary on stdout."""
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
                                               model.preprocessing,
                                               tuple(getattr(args, "exclude", None) or ()))
        source = " ".join(args.input)
    else:
        ids, docs = read_shard_documents(args.shards, args.vocab, model, grow)
        dead, source = 0, args.shards
    v0, step0 = model.n_words, model.step
    runner = None
    if not is_inprocess(args.runner):
        if train_run is None:
            raise UsageError("--update --runner %s needs the training command's runner "
                             "(run it as `ldabeam train --update`)" % args.runner)
        runner = beam_runner(args, beam_argv, train_run, model.preprocessing, model.checkpoint)
    summary = model.update(docs, passes=passes, grow_vocab=grow, ids=ids, runner=runner,
                           corpus_size=getattr(args, "corpus_size", None),
                           keep_n=getattr(args, "keep_n", None),
                           replay=getattr(args, "replay", None) or 0.0,
                           replay_shards=getattr(args, "replay_shards", None))
    keep = args.keep_checkpoints or None
    store = CheckpointStore(paths.absolute(args.output), keep_last=keep, check_algorithm=True)
    path = model.publish_leased(paths.absolute(args.output), store)
    clear_updating(paths.absolute(args.output))
    print("updated %s (%s) on %s: %d documents, %d tokens, %d passes, steps %d -> %d%s"
          % (args.output, model.algorithm, source, summary["documents"], summary["tokens"],
             passes, step0, model.step,
             "" if runner is None else " (trained on %s)" % args.runner))
    print("the new documents weigh %.1f%% of the topics: %d of the %d documents the model "
          "stands for%s" % (100.0 * summary["weight"], summary["documents"],
                            summary["corpus_documents"],
                            "" if getattr(args, "corpus_size", None) is None
                            else " (--corpus-size)"))
    if summary.get("replayed_documents"):
        print("revisited %d of the model's training documents (--replay %g) beside the new ones"
              % (summary["replayed_documents"], args.replay))
    if grow:
        added = model.vocabulary[v0:]
        print("vocabulary: %d -> %d words (%d added%s)"
              % (v0, model.n_words, len(added),
                 (": " + ", ".join(added[:10]) + (", ..." if len(added) > 10 else ""))
                 if added else ""))
    if summary.get("words_kept_out"):
        print("%d more words passed the pruning rules but the vocabulary's keep_n kept them "
              "out; raise it with --keep-n N" % summary["words_kept_out"])
    if summary.get("unknown_tokens_dropped"):
        print("%d tokens outside the vocabulary were dropped%s"
              % (summary["unknown_tokens_dropped"],
                 "" if grow else " (--grow-vocab adds the words that pass the pruning rules)"))
    if summary.get("empty_documents") or dead:
        print("%d documents had no word of the vocabulary, %d records could not be read"
              % (summary.get("empty_documents", 0), dead))
    print("checkpoint: %s" % path)
    return 0
