"""``ldabeam export``: write a trained model in another format.

    ldabeam export --model MODEL_DIR --format phi-npy --output PATH
    ldabeam export --model MODEL_DIR --format gensim --output PATH
    ldabeam export --model MODEL_DIR --format pyldavis --output DIR [--shards SHARD_DIR]

``phi-npy`` writes the K x V topic-word matrix (float64, rows sum to 1) in vocabulary order as
a ``.npy`` file, which an external evaluator taking a topic-word matrix can judge when the
model was trained on ``ldabeam vectorize --format uci`` shards (which keep the vocabulary
order of the UCI files). ``gensim`` saves a ``gensim.models.LdaModel`` with the model's λ,
α and η (``LdaModel.load(PATH)``; its dictionary carries the dataset's document count, so
``filter_extremes`` works on it); ``pyldavis`` writes pyLDAvis's prepared data for the first
``--max-docs`` documents of ``--shards`` (default: the training shards named in the run log),
and the interactive page when the optional pyLDAvis package is installed. The export logic is
in :mod:`pipelines.reports.exports`.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from lda_core.errors import OutputError, UsageError
from lda_core.storage.npy import write_npy_atomic
from lda_core.storage.output_paths import (check_disjoint, check_file_output,
                                             check_not_inside_output, PYLDAVIS_NAMES)
from lda_core.storage.vocab_file import DOCS_KEY, Vocabulary
from pipelines.ingest import dataset, manifest
from pipelines.reports import exports
from pipelines.runtime import paths
from pipelines.runtime.model_dir import accepted_vocab, load_model, training_shards

logger = logging.getLogger(__name__)

FORMATS = ("phi-npy", "gensim", "pyldavis")


def add_arguments(p) -> None:
    p.add_argument("--model", metavar="MODEL_DIR", default=None,
                   help="model directory written by `ldabeam train` (its latest checkpoint), "
                        "or one checkpoint directory (required)")
    p.add_argument("--format", choices=FORMATS, default="phi-npy",
                   help="phi-npy: K x V topic-word matrix in vocabulary order (.npy); "
                        "gensim: gensim LdaModel (PATH + side files); pyldavis: pyLDAvis "
                        "prepared data (+ HTML when pyLDAvis is installed) in directory PATH")
    p.add_argument("--output", metavar="PATH", default=None,
                   help="file to write (directory for pyldavis) (required)")
    p.add_argument("--shards", metavar="SHARD_DIR", default=None,
                   help="pyldavis: documents for the document-topic part; gensim: the "
                        "dataset whose document count the dictionary's document frequencies "
                        "refer to (default: the training shards named in the model's run "
                        "log)")
    p.add_argument("--unverified", action="store_true",
                   help="also read shards that no dataset manifest lists (written by another "
                        "tool, or by a killed `ldabeam vectorize`); shards a manifest lists "
                        "are always verified against it")
    p.add_argument("--max-docs", type=int, default=5000,
                   help="pyldavis: documents used (the first ones of --shards)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier export of the same format at --output (a file "
                        "of any other kind is never replaced)")


def _inputs(args) -> list:
    """What an export reads: it never replaces nor lands inside them."""
    return ([args.model, paths.model_dir_of(args.model)] if args.model else []) + [args.shards]


def run(args, beam_argv) -> int:
    if not args.output:
        raise UsageError("--output PATH is required")
    if not args.model:
        raise UsageError("--model MODEL_DIR is required")
    if args.format == "pyldavis":
        return _run_other(args)
    # the output rules of a file output (lda_core.storage.output_paths), before any work
    check_file_output(args.output, args.format, _inputs(args), args.overwrite,
                      side_files=exports.gensim_side_files(args.output)
                      if args.format == "gensim" else ())
    if args.format == "gensim":
        return _run_other(args)
    algo, state, _ = load_model(args.model)
    phi = np.asarray(algo.topic_word(), dtype=np.float64)
    if phi.shape != (state.n_topics, state.n_words):
        raise ValueError("topic_word() has shape %s, expected (%d, %d)"
                         % (phi.shape, state.n_topics, state.n_words))
    write_npy_atomic(args.output, phi)
    print("wrote %s: %d x %d topic-word matrix (%s, step %d) in vocabulary order"
          % (args.output, phi.shape[0], phi.shape[1], state.algorithm, state.step))
    return 0


def _run_other(args) -> int:
    algo, state, vocab = load_model(args.model)
    if vocab is None:
        raise FileNotFoundError("--format %s needs the model's vocabulary (MODEL_DIR/%s)"
                                % (args.format, dataset.VOCAB_FILE))
    if args.format == "gensim":
        vocab, num_docs, source = _dictionary_counts(args, vocab, state)
        exports.export_gensim(algo, vocab, args.output, num_docs)
        print("wrote %s: gensim LdaModel, K=%d, V=%d (%s, step %d), its dictionary's document "
              "frequencies over %d documents (%s); load it with "
              "gensim.models.LdaModel.load(%r)" % (args.output, state.n_topics, state.n_words,
                                                   state.algorithm, state.step, num_docs,
                                                   source, args.output))
        return 0
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise OutputError("--output %s exists and is not a directory (--format pyldavis writes "
                          "a directory: pyldavis.npz, pyldavis.json and, with pyLDAvis "
                          "installed, pyldavis.html)" % args.output)
    check_disjoint(args.output, _inputs(args))
    check_not_inside_output(args.output)
    for name in PYLDAVIS_NAMES:
        check_file_output(os.path.join(args.output, name), "pyldavis", _inputs(args),
                          args.overwrite)
    model_dir = paths.model_dir_of(args.model)
    shards = args.shards or training_shards(model_dir, state.info)
    if not shards:
        raise UsageError("--format pyldavis needs --shards SHARD_DIR (the run log names no "
                         "training shards)")
    files = manifest.open_shards(shards, unverified=args.unverified).files
    dataset.check_vocab_hash(files, accepted_vocab(state, vocab))
    docs = exports.sample_docs(files, args.max_docs)
    res = exports.export_pyldavis(algo, vocab, docs, args.output,
                                  info={"model": paths.absolute(args.model),
                                        "algorithm": state.algorithm, "step": state.step,
                                        "shards": shards})
    print("wrote %s: pyLDAvis prepared data for %d documents (%s)%s"
          % (args.output, res["n_docs"], ", ".join(res["files"]),
             "" if res["html"] else "; install pyLDAvis for the interactive page"))
    return 0


def _dictionary_counts(args, vocab, state):
    """(vocabulary, num_docs, where they come from) for the gensim dictionary: the vocabulary
    file's df/cf with the document count the model records for a vocabulary its updates grew
    (unless --shards is given) or of its dataset's manifest, or, when neither gives it,
    df/cf/num_docs counted over the dataset's shards (train and held-out). A checkpoint
    older than the vocabulary file (a prefix of a vocabulary grown since) always counts over
    the shards: the file's df count the later documents too."""
    grown_docs = (state.info or {}).get(DOCS_KEY)
    later = vocab.later_counts
    if isinstance(grown_docs, int) and grown_docs > 0 and not args.shards and not later:
        # a vocabulary grown by updates: its df count the training corpus and the updates
        return vocab, grown_docs, "the model's vocabulary, grown by updates"
    shards = args.shards or training_shards(paths.model_dir_of(args.model), state.info)
    if not shards:
        raise UsageError("--format gensim needs --shards SHARD_DIR (the dataset the model was "
                         "trained on): the model's run log names no training shards, and the "
                         "dictionary's document frequencies need the dataset's document count")
    n = None if later else exports.vocab_num_docs(vocab, shards)
    if n is not None:
        return vocab, n, "manifest of %s" % shards
    files = manifest.open_shards(shards, unverified=args.unverified).files
    if paths.exists(paths.join(shards, dataset.HELDOUT_SPLIT)):
        files = files + manifest.open_shards(shards, dataset.HELDOUT_SPLIT,
                                            unverified=args.unverified).files
    dataset.check_vocab_hash(files, accepted_vocab(state, vocab))
    n, df, cf = exports.shard_vocab_counts(files, len(vocab))
    return (Vocabulary(vocab.tokens, df=df, cf=cf), n,
            "counted over the %d shard files of %s" % (len(files), shards))
