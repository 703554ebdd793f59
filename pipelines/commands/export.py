"""``ldabeam export``: write a trained model in another format.

    ldabeam export --model MODEL_DIR --format phi-npy --output PATH
    ldabeam export --model MODEL_DIR --format gensim --output PATH
    ldabeam export --model MODEL_DIR --format pyldavis --output DIR [--shards SHARD_DIR]

``phi-npy`` writes the K x V topic-word matrix (float64, rows sum to 1) in vocabulary order as
a ``.npy`` file, so ``../shared/bench/bench_peers.py evaluate --phi PATH`` can judge it when the
model was trained on ``ldabeam vectorize --format uci`` shards of the harness's export (which
keep the vocabulary order). ``gensim`` saves a ``gensim.models.LdaModel`` with the model's λ,
α and η (``LdaModel.load(PATH)``); ``pyldavis`` writes pyLDAvis's prepared data for the first
``--max-docs`` documents of ``--shards`` (default: the training shards named in the run log),
and the interactive page when the optional pyLDAvis package is installed. The export logic is
in :mod:`pipelines.reports.exports`.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from lda_core.errors import OutputError, UsageError
from pipelines.ingest import dataset
from pipelines.reports.exports import write_npy_atomic  # noqa: F401 (used by the command)
from pipelines.runtime.model_dir import load_model  # noqa: F401 (the command API)

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
                   help="pyldavis: documents for the document-topic part (default: the "
                        "training shards named in the model's run log)")
    p.add_argument("--max-docs", type=int, default=5000,
                   help="pyldavis: documents used (the first ones of --shards)")


def run(args, beam_argv) -> int:
    if not args.output:
        raise UsageError("--output PATH is required")
    # an export never replaces nor lands inside the model or the documents it reads
    from lda_core.storage.output_paths import check_disjoint
    if args.model:
        check_disjoint(args.output, [args.model, dataset.model_dir_of(args.model),
                                     args.shards])
    if args.format in ("gensim", "pyldavis"):
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
    from pipelines.reports import exports
    algo, state, vocab = load_model(args.model)
    if vocab is None:
        raise FileNotFoundError("--format %s needs the model's vocabulary (MODEL_DIR/%s)"
                                % (args.format, dataset.VOCAB_FILE))
    if args.format == "gensim":
        exports.export_gensim(algo, vocab, args.output)
        print("wrote %s: gensim LdaModel, K=%d, V=%d (%s, step %d); load it with "
              "gensim.models.LdaModel.load(%r)" % (args.output, state.n_topics, state.n_words,
                                                   state.algorithm, state.step, args.output))
        return 0
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise OutputError("--output %s exists and is not a directory (--format pyldavis writes "
                          "a directory: pyldavis.npz, pyldavis.json and, with pyLDAvis "
                          "installed, pyldavis.html)" % args.output)
    from pipelines.infer import training_shards
    model_dir = dataset.model_dir_of(args.model)
    shards = args.shards or training_shards(model_dir)
    if not shards:
        raise UsageError("--format pyldavis needs --shards SHARD_DIR (the run log names no "
                         "training shards)")
    files = dataset.resolve_shards(shards)
    dataset.check_vocab_hash(files, state.vocab_hash)
    docs = exports.sample_docs(files, args.max_docs)
    res = exports.export_pyldavis(algo, vocab, docs, args.output,
                                  info={"model": dataset.absolute(args.model),
                                        "algorithm": state.algorithm, "step": state.step,
                                        "shards": shards})
    print("wrote %s: pyLDAvis prepared data for %d documents (%s)%s"
          % (args.output, res["n_docs"], ", ".join(res["files"]),
             "" if res["html"] else "; install pyLDAvis for the interactive page"))
    return 0
