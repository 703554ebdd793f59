"""Opening a model directory: the one routine every reader of a trained model uses
(``topics``, ``export``, ``report``, ``infer``, the streaming job).

``--model`` names a model directory (its latest valid checkpoint is used) or one checkpoint
directory (``MODEL_DIR/checkpoints/step-...``, recognised by its ``state.json``); local or an
object-store URL. The vocabulary is ``MODEL_DIR/vocab.tsv`` when present: the state's own, or
one grown from it (``--grow-vocab`` appends words), of which the state takes the first
``n_words`` -- so every checkpoint of a model whose vocabulary grew stays readable, as do the
shards of any vocabulary it grew from (:mod:`lda_core.storage.vocab_file`, "Lineage"). A
vocabulary that is neither is refused in one line naming the file.

A checkpoint and its vocabulary are read as one snapshot without a lock. An update that grows
the vocabulary writes the grown one as ``vocab-HASH.tsv``, publishes its checkpoint, replaces
``vocab.tsv`` and removes ``vocab-HASH.tsv``, and vocabularies only grow; so when ``vocab.tsv``
is too short for the checkpoint just read, ``vocab-HASH.tsv`` has it, or -- when the writer
removed that meanwhile -- ``vocab.tsv`` read again does (:func:`vocabulary_for`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

from lda_core.errors import DataIntegrityError, UsageError
from lda_core.algorithms.algorithm import algorithm_class
from lda_core.storage.blocks import algorithm_from_state, check_ranges
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import read_run_log, RUN_LOG_FILE
from lda_core.storage.state import StateFormatError, TopicState
from lda_core.storage.vocab_file import grown_vocab_name, LINEAGE_KEY, VOCAB_FILE, Vocabulary
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
            if _is_dataset(model):
                raise FileNotFoundError(
                    "%s is a dataset written by `ldabeam vectorize`, not a model; train one "
                    "on it with `ldabeam train --shards %s --output MODEL_DIR` and open "
                    "MODEL_DIR" % (model, model))
            raise FileNotFoundError("no checkpoint in %s (train one with `ldabeam train "
                                    "--output %s`)" % (model, model))
        path, state = paths.absolute(found[0].path), found[1]
        model_dir = paths.absolute(model)
    vocab, vpath = vocabulary_for(model_dir, state)
    return OpenedModel(path, state, model_dir, vocab, vpath)


def _is_dataset(path: str) -> bool:
    """Whether ``path`` holds a dataset (``ldabeam vectorize``'s manifest or its train split;
    the names are pipelines.ingest.dataset's, which runtime does not import)."""
    return (paths.exists(paths.join(path, "manifest.json"))
            or paths.isdir(paths.join(path, "train")))


def vocabulary_for(model_dir: str, state) -> Tuple[Optional[Vocabulary], Optional[str]]:
    """``(vocabulary, its file)`` of ``state``, a checkpoint of ``model_dir``: ``vocab.tsv``
    or the prefix of it the state uses, read as one snapshot with the state (module
    docstring); ``(None, None)`` when the directory has no vocabulary. DataIntegrityError
    naming the file when it is not the state's nor grown from it."""
    main = paths.join(model_dir, VOCAB_FILE)
    grown = (paths.join(model_dir, grown_vocab_name(state.vocab_hash))
             if state.vocab_hash else None)
    seen = []
    for path in (main, grown, main):
        if path is None or not paths.exists(path):
            continue
        vocab = Vocabulary.read(path).with_lineage((state.info or {}).get(LINEAGE_KEY))
        fit = vocab.for_state(state.vocab_hash, state.n_words)
        if fit is not None:
            return fit, path
        seen.append((path, vocab))
    if not seen:
        return None, None
    path, vocab = seen[-1]
    if not state.vocab_hash:
        raise DataIntegrityError("%s has %d words but the model has V=%d"
                                 % (path, len(vocab), state.n_words))
    raise DataIntegrityError(
        "%s has vocabulary hash %s (%d words) but the model was trained with %s (%d words), "
        "and that is not a vocabulary it grew from: the file belongs to another model; put "
        "the model's own vocab.tsv back" % (path, vocab.hash, len(vocab), state.vocab_hash,
                                           state.n_words))


def accepted_vocab(state, vocab: Optional[Vocabulary]):
    """What shards read with a model must be vectorised with, for
    :func:`pipelines.ingest.dataset.check_vocab_hash`: the model's vocabulary, whose
    ancestors' shards are accepted too, else (no vocab.tsv) the state's hash."""
    return vocab if vocab is not None else state.vocab_hash


def load_model(model: str):
    """``(algorithm, state, vocabulary or None)`` of :func:`open_model`."""
    m = open_model(model)
    return m.algorithm(), m.state, m.vocab


def training_shards(model_dir: Optional[str], info: Optional[dict] = None) -> Optional[str]:
    """The ``--shards`` of the run that trained the model, if known: the checkpoint's run
    record (``info["run"]["shards"]``, which a model saved to another directory by
    ``LdaModel.save`` keeps), else the run log of ``model_dir``."""
    run = (info or {}).get("run") if isinstance(info, dict) else None
    if isinstance(run, dict) and isinstance(run.get("shards"), str) and run["shards"]:
        return run["shards"]
    path = paths.join(model_dir, RUN_LOG_FILE) if model_dir else None
    if path is None or not paths.exists(path):
        return None
    for rec in read_run_log(path, "start")[::-1]:
        s = (rec.get("run") or {}).get("shards")
        if s:
            return s
    return None
