"""Opening a model directory: the one routine every reader of a trained model uses
(``topics``, ``export``, ``report``, ``infer``, the streaming job).

``--model`` names a model directory (its latest valid checkpoint is used) or one checkpoint
directory (``MODEL_DIR/checkpoints/step-...``, recognised by its ``state.json``); local or an
object-store URL. The vocabulary is ``MODEL_DIR/vocab.tsv`` when present, and must then match
the state (content hash and size) -- a clear error naming the file otherwise -- unless an
update that grew the vocabulary was stopped between publishing its checkpoint and replacing
``vocab.tsv``: then the grown vocabulary it wrote first (``vocab-HASH.tsv``) is used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from lda_core.errors import DataIntegrityError, UsageError
from lda_core.algorithms.algorithm import algorithm_class
from lda_core.storage.blocks import algorithm_from_state, check_ranges
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import read_run_log, RUN_LOG_FILE
from lda_core.storage.state import StateFormatError, TopicState
from lda_core.storage.vocab_file import grown_vocab_name, VOCAB_FILE, Vocabulary
from pipelines.runtime import paths


@dataclass
class OpenedModel:
    path: str                       # the checkpoint directory (absolute / URL)
    state: Any                      # its lda_core.storage.state.TopicState (word blocks
                                    # in row order: build the algorithm with algorithm())
    model_dir: str                  # MODEL_DIR (absolute / URL)
    vocab: Optional[Vocabulary]
    vocab_path: Optional[str]

    def algorithm(self):
        """The trained algorithm, rebuilt from the state (its own copy of the arrays)."""
        return algorithm_from_state(self.state)


def open_model(model: str) -> OpenedModel:
    """The checkpoint ``model`` names (module docstring) with its checked vocabulary."""
    if not model:
        raise UsageError("--model MODEL_DIR is required")
    if not paths.isdir(model):        # local, or an object-store URL (gs://, s3://, ...)
        raise FileNotFoundError("model directory %s does not exist" % model)
    if paths.exists(paths.join(model, "state.json")):
        path = paths.absolute(model)
        # word blocks stay in row order: algorithm() copies them once, no permutation
        state = TopicState.load(path, row_order=True)
        model_dir = paths.model_dir_of(path)
        try:    # in range, as a checkpoint the store picks is (CheckpointStore.check_loadable)
            check_ranges(algorithm_class(state.algorithm), state)
        except DataIntegrityError as e:
            raise StateFormatError("%s: %s; name the model directory %s to read its newest "
                                   "undamaged checkpoint" % (path, e, model_dir)) from None
    else:
        found = CheckpointStore(model, check_algorithm=True).latest_checkpoint(row_order=True)
        if found is None:
            raise FileNotFoundError("no checkpoint in %s (train one with `ldabeam train "
                                    "--output %s`)" % (model, model))
        path, state = paths.absolute(found[0].path), found[1]
        model_dir = paths.absolute(model)
    vpath: Optional[str] = paths.join(model_dir, VOCAB_FILE)
    vocab = None
    if paths.exists(vpath):
        vocab = Vocabulary.read(vpath)
        grown = (paths.join(model_dir, grown_vocab_name(state.vocab_hash))
                 if state.vocab_hash and vocab.hash != state.vocab_hash else None)
        if grown is not None and paths.exists(grown):
            # an update that grew the vocabulary published this checkpoint and was stopped
            # before replacing vocab.tsv: the grown vocabulary waits under its hash's name
            vpath, vocab = grown, Vocabulary.read(grown)
        if state.vocab_hash and vocab.hash != state.vocab_hash:
            raise DataIntegrityError("%s has vocabulary hash %s but the model was trained with %s"
                                     % (vpath, vocab.hash, state.vocab_hash))
        if len(vocab) != state.n_words:
            raise DataIntegrityError("%s has %d words but the model has V=%d"
                                     % (vpath, len(vocab), state.n_words))
    else:
        vpath = None
    return OpenedModel(path, state, model_dir, vocab, vpath)


def load_model(model: str):
    """``(algorithm, state, vocabulary or None)`` of :func:`open_model`."""
    m = open_model(model)
    return m.algorithm(), m.state, m.vocab


def training_shards(model_dir: str) -> Optional[str]:
    """The ``--shards`` of the run that wrote ``model_dir`` (from its run log), if known."""
    path = paths.join(model_dir, RUN_LOG_FILE)
    if not paths.exists(path):
        return None
    for rec in read_run_log(path, "start")[::-1]:
        s = (rec.get("run") or {}).get("shards")
        if s:
            return s
    return None
