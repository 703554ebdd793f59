"""``ldabeam export``: write a trained model in another format.

    ldabeam export --model MODEL_DIR --format phi-npy --output PATH

``phi-npy`` writes the K x V topic-word matrix (float64, rows sum to 1) in vocabulary order as
a ``.npy`` file, so ``../shared/bench/bench_peers.py evaluate --phi PATH`` can judge it when the
model was trained on ``ldabeam vectorize --format uci`` shards of the harness's export (which
keep the vocabulary order). ``gensim`` and ``pyldavis`` come in a later release.
"""
from __future__ import annotations

import io
import logging
import os
from typing import Optional, Tuple

import numpy as np

from pipelines import dataset

logger = logging.getLogger(__name__)

FORMATS = ("phi-npy", "gensim", "pyldavis")


def add_arguments(p) -> None:
    p.add_argument("--model", metavar="MODEL_DIR", default=None,
                   help="model directory written by `ldabeam train` (its latest checkpoint), "
                        "or one checkpoint directory (required)")
    p.add_argument("--format", choices=FORMATS, default="phi-npy",
                   help="phi-npy: K x V topic-word matrix in vocabulary order (.npy)")
    p.add_argument("--output", metavar="PATH", default=None, help="file to write (required)")


def load_model(model: str):
    """``(algorithm, state, vocabulary or None)`` of MODEL_DIR's latest checkpoint (or of a
    checkpoint directory). The vocabulary is MODEL_DIR/vocab.tsv when present; its hash must
    equal the state's."""
    from lda_core.algorithm import algorithm_class
    from lda_core.checkpoint import CheckpointStore
    from lda_core.state import TopicState
    if not model:
        raise ValueError("--model MODEL_DIR is required")
    if not os.path.isdir(model):
        raise FileNotFoundError("model directory %s does not exist" % model)
    if os.path.exists(os.path.join(model, "state.json")):
        state = TopicState.load(model)
        vdir = os.path.dirname(os.path.dirname(os.path.abspath(model)))
    else:
        state = CheckpointStore(model).latest()
        if state is None:
            raise FileNotFoundError("no checkpoint in %s (train one with `ldabeam train "
                                    "--output %s`)" % (model, model))
        vdir = model
    vocab = None
    vpath = os.path.join(vdir, dataset.VOCAB_FILE)
    if os.path.exists(vpath):
        vocab = dataset.Vocabulary.read(vpath)
        if state.vocab_hash and vocab.hash != state.vocab_hash:
            raise ValueError("%s has vocabulary hash %s but the model was trained with %s"
                             % (vpath, vocab.hash, state.vocab_hash))
        if len(vocab) != state.n_words:
            raise ValueError("%s has %d words but the model has V=%d"
                             % (vpath, len(vocab), state.n_words))
    algo = algorithm_class(state.algorithm).from_state(state)
    return algo, state, vocab


def write_npy_atomic(path: str, arr: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    dataset.write_bytes_atomic(path, buf.getvalue())


def run(args, beam_argv) -> int:
    if not args.output:
        raise ValueError("--output PATH is required")
    if args.format != "phi-npy":
        raise ValueError("--format %s is not available yet (a later release adds gensim and "
                         "pyldavis exports); use --format phi-npy" % args.format)
    algo, state, _ = load_model(args.model)
    phi = np.asarray(algo.topic_word(), dtype=np.float64)
    if phi.shape != (state.n_topics, state.n_words):
        raise ValueError("topic_word() has shape %s, expected (%d, %d)"
                         % (phi.shape, state.n_topics, state.n_words))
    write_npy_atomic(args.output, phi)
    print("wrote %s: %d x %d topic-word matrix (%s, step %d) in vocabulary order"
          % (args.output, phi.shape[0], phi.shape[1], state.algorithm, state.step))
    return 0
