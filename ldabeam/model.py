"""A trained model as a Python object: :func:`load` and :class:`LdaModel`.

``load`` opens what ``ldabeam train`` / ``ldabeam stream`` wrote (a model directory, one of
its checkpoint directories, or a checkpoint's ``state.json`` -- local, ``gs://`` or ``s3://``)
through the same routine as every command (:func:`pipelines.runtime.model_dir.open_model`), so
the vocabulary is checked against the state. ``transform`` runs exactly the E-step of
``ldabeam infer`` (:func:`pipelines.infer.infer_gamma`) on documents prepared by
:mod:`ldabeam.preprocess`; ``save`` publishes a checkpoint in the CLI's directory format, so
every command reads the result.

``update`` continues training in this process on new documents, from the model's state:

* the global step t is not reset, so the step size keeps decaying, ρ_t = (τ0 + t)^(−κ) for
  online VB (Hoffman et al. 2010) and ρ_t = s (τ + t)^(−κ) for SCVB0 (Foulds et al. 2013);
* **the new documents weigh by their share**: the corpus the model stands for grows by them
  (online VB scales a minibatch's statistics by D/S with D = the documents it was trained on
  plus the new ones, SCVB0 by C/|M| with C = the tokens likewise; ``corpus_size`` sets D in
  documents), the state is rescaled to that corpus, and the update's steps are the running
  average :func:`lda_core.training.schedules.history_rho` in which the state before the
  update counts as the documents it was trained on and each new document as one, every pass
  1/passes of it. So after the update the old documents weigh D_old/D of the topics and the
  new ones n/D, however many passes it makes: an update on one new subject adds it without
  erasing the topics its documents do not use. Topics are not re-seeded during an update (a
  topic the new documents do not use is not dead: it holds the model's history);
* ``grow_vocab=True`` first adds the new documents' words that pass the model's pruning rules
  (the ``no_below`` / ``no_above`` / ``keep_n`` of the vectorize run its training data came
  from; ``no_above`` of the documents the vocabulary's counts cover -- the training corpus and
  earlier grown updates -- plus the new ones, the document frequencies of ``vocab.tsv``; how
  many words ``keep_n`` kept out is reported, ``keep_n=`` raises it) as new rows at the prior:
  Ñ_w = 0, i.e. λ_w = η for online VB and N^Φ_w = 0, φ ∝ η for SCVB0. Existing rows are not
  changed by the growth; new word ids follow the old ones, so the ids of known words stay
  valid (the vocabulary hash changes and is recorded, with the vocabularies it grew from:
  every earlier checkpoint and shard stays readable, :mod:`lda_core.storage.vocab_file`);
* **Replay** (``replay=F``, ``train --update --replay F``; off by default): a sample of F of
  the documents of the model's training shards (the shards its run record names, or
  ``replay_shards``) is drawn without replacement with the seed :func:`replay_seed` of (the
  model's seed, the step the update starts from) and mixed with the new documents into the
  update's minibatches (one seeded order over both). Without it the old subjects count only
  through the topics they left, so a new subject gets a topic only by taking one from old
  documents that are not there to keep it; the revisited documents keep theirs. They are part
  of the history, not new: the corpus is still the documents the model stood for plus the new
  ones (D' = H + n, or ``corpus_size``), and the state counts as the H − R documents not
  revisited, so every document of the corpus weighs 1/D' -- the new ones n/D' as without
  replay, the R revisited ones re-fitted to the topics. Earlier updates' documents are not in
  the training shards and are not revisited. Training shards that are unknown or cannot be
  read (moved, deleted, another vocabulary) raise InputError naming the path and the fixes;
* statistics in flight of a pipelined run (``--staleness``) belong to that run's minibatch
  order: an update drops them (a later ``--resume`` recomputes them).

The update's minibatches are the trainers' seeded order (:mod:`lda_core.training.ordering`)
over the new documents cut into shards of :data:`UPDATE_SHARD_DOCS`, with the seed
:func:`update_seed` of (the model's seed, the step the update starts from), and each
minibatch's statistics are summed in the model's recorded pieces
(:mod:`lda_core.training.pieces`). ``ldabeam train --update`` on a Beam runner writes the new
documents as exactly those shards and hands the same seed and pieces to the Beam trainer
(:class:`UpdateJob`), so both give the same state bit for bit.
"""
from __future__ import annotations

import copy
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.docbatch import DocBatch
from lda_core.errors import InputError, OutputError, TrainingError, UsageError
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.files import files_for
from lda_core.storage import output_paths
from lda_core.storage.lease import ModelLease
from lda_core.storage.vocab_file import DOCS_KEY, grown_vocab_name, LINEAGE_KEY, Vocabulary
from lda_core.training.in_memory import MemoryMinibatches, train_in_memory
from lda_core.training.kernel_warmup import compile_notice
from lda_core.training.ordering import n_batches, plan_pass
from lda_core.training.pieces import recorded_pieces
from lda_core.training.run_params import recorded_minibatch, run_info_of
from lda_core.training.session import Session
from lda_core.training.spec import Output
from lda_core.training.update_weight import UpdateWeight
from ldabeam import preprocess
from pipelines.ingest import dataset, manifest
from pipelines.ingest.tokenize import vocabulary_index
from pipelines.runtime import paths
from pipelines.runtime.model_dir import open_model, training_shards

logger = logging.getLogger(__name__)

#: algorithms ``LdaModel.update`` continues (the stochastic ones whose scaling it grows)
UPDATABLE = ("online-vb", "scvb0")
#: what a state's word-major topic-word array is called, per algorithm (grow_vocab extends it)
_WORD_ROWS = {"online-vb": "ntilde", "scvb0": "ntilde"}
STATE_FILE = "state.json"
#: the files save() writes beside checkpoints/ (a folder holding one is not saved into unless
#: it is a model)
MODEL_FILES = (dataset.VOCAB_FILE, manifest.TOKENIZER_FILE)
#: documents per shard of an update's order (and of the dataset a Beam update writes)
UPDATE_SHARD_DOCS = 50_000
_UPDATE_TAG = 0x55504454     # "UPDT": keeps the update order's seed apart from other uses
_REPLAY_TAG = 0x52504c59     # "RPLY": the sample of training documents an update revisits


#: an update whose new documents are less than this share of the corpus the model stands for
#: after it, run for several passes, gets a warning (:func:`small_update_warning`)
SMALL_UPDATE_SHARE = 0.25


def small_update_warning(new_docs: int, seen_docs: int, passes: int,
                         corpus_size: Optional[int] = None) -> Optional[str]:
    """The one-line warning of an update of ``passes`` > 1 passes on ``new_docs`` documents
    that are a small part (below :data:`SMALL_UPDATE_SHARE`) of the ``seen_docs`` the model
    stands for plus themselves, or None. With the default weighting they weigh their share of
    the topics whatever the passes: passes refine their fit but do not weigh them more, so a
    subject only they hold may not get a topic of its own; ``corpus_size`` weighs them more.
    With a ``corpus_size`` that weighs them at least twice their share, the passes pull the
    topics they do not use towards their subjects instead."""
    n, seen, P = int(new_docs), int(seen_docs), int(passes)
    if P < 2 or seen <= 0 or n <= 0:
        return None
    share = n / float(seen + n)
    if share >= SMALL_UPDATE_SHARE:
        return None
    if corpus_size is None:
        return ("update: the %d new documents are %.1f%% of the %d documents the model "
                "stands for after it, and weigh that share of the topics however many passes "
                "run (%d): if they hold a subject the model lacks, it may get no topic of its "
                "own and their new words may stay out of the top words; more passes do not "
                "weigh them more, replay=F (`train --update --replay F`) revisits F of the "
                "training documents so the old subjects keep their topics and a new one can "
                "take one, corpus_size=N (`--corpus-size N`) weighs them n/N (N = n: the "
                "whole corpus, at the cost of the topics they do not use)"
                % (n, 100.0 * share, seen + n, P))
    weight = n / float(corpus_size)
    if weight < 2.0 * share:
        return None
    return ("update: corpus_size=%d weighs the %d new documents %.1f%% of the topics, though "
            "by their share of the %d documents seen with them they weigh %.1f%%: over %d "
            "passes, if they hold fewer subjects than the model, the topics they do not use "
            "drift towards theirs and old subjects can be lost; leave out corpus_size "
            "(`--corpus-size`) to weigh them by their share"
            % (int(corpus_size), n, 100.0 * weight, seen + n, 100.0 * share, P))


def update_seed(seed: int, start_step: int) -> int:
    """The seed of the minibatch order of an update of a model with seed ``seed`` that starts
    at global step ``start_step`` (a new order for every update, reproducible)."""
    ss = np.random.SeedSequence([_UPDATE_TAG, int(seed) & 0xFFFFFFFFFFFFFFFF, int(start_step)])
    return int(ss.generate_state(1, np.uint32)[0])


def replay_seed(seed: int, start_step: int) -> int:
    """The seed of the sample of training documents an update of a model with seed ``seed``
    that starts at global step ``start_step`` revisits (``replay=``)."""
    ss = np.random.SeedSequence([_REPLAY_TAG, int(seed) & 0xFFFFFFFFFFFFFFFF, int(start_step)])
    return int(ss.generate_state(1, np.uint32)[0])


def update_shard_sizes(n_docs: int) -> List[int]:
    """Row counts of the shards an update's ``n_docs`` documents are cut into, in order."""
    n, size = int(n_docs), UPDATE_SHARD_DOCS
    return [min(size, n - lo) for lo in range(0, n, size)] or [0]


@dataclass
class UpdateJob:
    """What an update's steps need, for a runner other than this process (``ldabeam train
    --update`` on Beam): the algorithm to continue (grown, corpus size grown), the new
    documents with a word (in order: shard ``j`` is rows ``[sum(shard_sizes[:j]), ...)``),
    their vocabulary, the passes, and the order's seed, minibatch size and pieces. The runner
    returns the algorithm after ``passes`` passes of the order."""
    algorithm: Any
    documents: Any              # lda_core.docbatch.DocBatch
    vocabulary: Any             # lda_core.storage.vocab_file.Vocabulary
    passes: int
    seed: int
    minibatch: int
    pieces: int
    shard_sizes: List[int]


def load(path: str, tokenizer: Optional[Callable] = None) -> "LdaModel":
    """The model at ``path``: a model directory (its latest valid checkpoint), one checkpoint
    directory, or a checkpoint's ``state.json`` (what ``WatchFilePattern`` reports); local or
    an object-store URL. ``tokenizer``: the callable the model's training data was tokenized
    with, when it was (the model records its name; raw text is refused without it). Raises
    InputError naming the path when there is no model there."""
    if not isinstance(path, str) or not path:
        raise UsageError("ldabeam.load needs the path of a model directory or checkpoint, "
                         "got %r" % (path,))
    if path.rstrip("/").endswith("/" + STATE_FILE) or path == STATE_FILE:
        path = paths.parent(path.rstrip("/"))
    try:
        m = open_model(path)
    except FileNotFoundError as e:
        raise InputError("%s (give the --output directory of `ldabeam train`)" % e) from e
    info = dict(m.state.info or {})
    run = run_info_of(m.state)          # S where the checkpoint recorded it, in one place
    if run:
        info["run"] = run
    return LdaModel(m.algorithm(), m.vocab,
                    preprocess.Preprocessing.of_model_dir(m.model_dir, tokenizer),
                    checkpoint=m.path, model_dir=m.model_dir, info=info)


class LdaModel:
    """A topic model: ``n_topics``, ``vocabulary``, ``transform``, ``top_words``,
    ``topic_word``, ``update`` and ``save`` (module docstring). Made by :func:`load`."""

    def __init__(self, algorithm, vocabulary, preprocessing: preprocess.Preprocessing, *,
                 checkpoint: Optional[str] = None, model_dir: Optional[str] = None,
                 info: Optional[Dict[str, Any]] = None):
        self._algo = algorithm
        self._vocab = vocabulary
        self._prep = preprocessing
        self._index = None
        self._info = dict(info or {})
        self.checkpoint = checkpoint
        self.model_dir = model_dir
        #: the checkpoint the model was at before :meth:`update` changed it (None: unchanged)
        self.updated_from: Optional[str] = None
        self._warned = False

    # -- what the model is -----------------------------------------------------------------
    @property
    def n_topics(self) -> int:
        return int(self._algo.n_topics)

    @property
    def n_words(self) -> int:
        return int(self._algo.n_words)

    @property
    def algorithm(self) -> str:
        """The algorithm's registry name (``online-vb``, ``scvb0``, ...)."""
        return self._algo.name

    @property
    def step(self) -> int:
        """Global steps applied (t)."""
        return int(self._algo.step)

    @property
    def vocabulary(self) -> List[str]:
        """The words in id order (column ``w`` of :meth:`topic_word` is ``vocabulary[w]``)."""
        self._need_vocab("vocabulary")
        return list(self._vocab.tokens)

    @property
    def preprocessing(self) -> Optional[Dict[str, Any]]:
        """The recorded tokenizer settings raw text is prepared with (None: unknown)."""
        return None if self._prep.settings is None else dict(self._prep.settings)

    def __repr__(self):
        where = "checkpoint=%r" % (self.checkpoint,)
        if self.checkpoint is None and self.updated_from is not None:
            where = "updated from %r, not saved" % (self.updated_from,)
        return ("LdaModel(%s, n_topics=%d, n_words=%d, step=%d, %s)"
                % (self.algorithm, self.n_topics, self.n_words, self.step, where))

    def topic_word(self) -> np.ndarray:
        """K x V float64, rows sum to 1: the topics as word distributions (the algorithm's
        ``topic_word()``, what ``ldabeam export --format phi-npy`` writes)."""
        return np.asarray(self._algo.topic_word(), np.float64)

    def top_words(self, n: int = 10) -> List[List[tuple]]:
        """Per topic, its ``n`` most probable words as ``(word, probability)``, most probable
        first (ties: lower word id), as ``ldabeam topics`` lists them."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise UsageError("top_words(n=%r): n must be an integer >= 1" % (n,))
        self._need_vocab("top_words")
        phi = self.topic_word()
        n = min(int(n), phi.shape[1])
        order = np.argsort(-phi, axis=1, kind="stable")[:, :n]
        toks = self._vocab.tokens
        return [[(toks[w], float(phi[k, w])) for w in order[k]] for k in range(phi.shape[0])]

    # -- θ of documents ----------------------------------------------------------------------
    def _need_vocab(self, what: str) -> None:
        if self._vocab is None:
            raise InputError("%s needs the model's vocabulary, but %s has no vocab.tsv (copy "
                             "the dataset's vocab.tsv there)" % (what, self.model_dir))

    def _lookup(self):
        if self._index is None:
            self._index = vocabulary_index(self._vocab.tokens)
        return self._index

    def _batch(self, docs, ids, what: str):
        """``(DocBatch, tokens dropped as unknown)`` of user documents."""
        doc_ids, items = preprocess.split_records(docs, self._prep, ids)
        if any(isinstance(d, str) for d in items):
            self._need_vocab(what)
            if not self._prep.known and not self._warned:
                logger.warning("the tokenizer settings of %s are unknown (%s): raw text is "
                               "tokenized with the defaults, which may not be how the model's "
                               "training data was tokenized", self.model_dir,
                               self._prep.pre.note)
                self._warned = True
        elif any(not isinstance(d, preprocess.CountRow) for d in items):
            self._need_vocab(what)
        rows, oov = preprocess.count_rows(items, self._prep,
                                          self._lookup() if self._vocab is not None else None,
                                          self.n_words)
        return preprocess.to_batch(doc_ids, rows), oov

    def transform(self, docs: Sequence, ids: Optional[Sequence[str]] = None) -> np.ndarray:
        """θ (n x K float64, rows sum to 1) of ``docs``: raw texts (``str``), token lists,
        records (``dict`` with the text and id fields of the model's training data) or count
        rows (``{"word_ids": [...], "counts": [...]}``, ids of this model's vocabulary).

        The E-step of ``ldabeam infer`` (same kernel and state; its start is seeded by the
        document's id): a record's id, ``ids[i]`` if given, else a hash of the document's
        content. So ``transform`` of the records of a JSON-lines file gives the θ ``ldabeam
        infer --input FILE.jsonl`` writes for them. A document with no known word gets
        α/Σα (``infer`` writes no row for it)."""
        batch, _ = self._batch(docs, ids, "transform")
        from pipelines.infer import infer_gamma     # imports Beam, which only transform needs
        with compile_notice():      # a first call compiles the E-step: never silently
            g = infer_gamma(self._algo, batch, "infer")
        return g / g.sum(axis=1, keepdims=True)

    # -- continuing training -----------------------------------------------------------------
    def update(self, docs: Sequence, passes: int = 1, grow_vocab: bool = False,
               ids: Optional[Sequence[str]] = None,
               runner: Optional[Callable[[UpdateJob], Any]] = None,
               corpus_size: Optional[int] = None, keep_n: Optional[int] = None,
               replay: float = 0.0, replay_shards: Optional[str] = None
               ) -> Dict[str, Any]:
        """Continue training on ``docs`` (as :meth:`transform` takes them) for ``passes``
        passes, in minibatches of the model's size S, in a seeded order (module docstring for
        the schedule, the weighting and the scaling). Returns a summary (documents, tokens,
        unknown tokens dropped, steps, words added, the new documents' weight). A refused
        minibatch raises TrainingError and leaves the model as it was before the call.

        ``corpus_size``: the documents the model stands for after the update (default: those
        it was trained on plus the new ones); the new documents weigh ``n / corpus_size`` of
        the topics -- ``corpus_size = n`` makes them the whole corpus. ``keep_n``: with
        ``grow_vocab``, the vocabulary's cap instead of the training data's ``keep_n``.

        ``replay``: the share (0 to 1) of the model's training documents to revisit beside
        the new ones (module docstring, "Replay"): a seeded sample of them is mixed into the
        update's minibatches, so the old subjects keep their topics while the new documents'
        subjects take some. They are read from the shards of the run that trained the model
        (its run record), or from ``replay_shards``; InputError naming the path when they
        cannot be read. 0 (the default) replays nothing.

        ``runner``: None runs the steps in this process; otherwise a callable given the
        :class:`UpdateJob` that returns the trained algorithm (``ldabeam train --update`` on a
        Beam runner passes the Beam trainer). Anything it raises leaves the model as it was."""
        if isinstance(passes, bool) or not isinstance(passes, (int, np.integer)) or passes < 1:
            raise UsageError("update(passes=%r): passes must be an integer >= 1" % (passes,))
        for name, v in (("corpus_size", corpus_size), ("keep_n", keep_n)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                  or v < 1):
                raise UsageError("update(%s=%r): %s must be an integer >= 1" % (name, v, name))
        if (isinstance(replay, bool) or not isinstance(replay, (int, float, np.integer,
                                                                np.floating))
                or not 0.0 <= float(replay) <= 1.0):
            raise UsageError("update(replay=%r): replay is the share of the training documents "
                             "to revisit, a number from 0 to 1" % (replay,))
        if replay_shards is not None and not float(replay):
            raise UsageError("update(replay_shards=%r) names where the training documents a "
                             "replay revisits are; give replay= > 0 too" % (replay_shards,))
        if keep_n is not None and not grow_vocab:
            raise UsageError("update(keep_n=%r) caps the vocabulary grow_vocab=True grows; "
                             "give grow_vocab=True too" % (keep_n,))
        if self.algorithm not in UPDATABLE:
            raise UsageError("update continues %s models; this model is %s (train it again "
                             "with `ldabeam train --algorithm online-vb|scvb0`)"
                             % (" and ".join(UPDATABLE), self.algorithm))
        before = self._algo.to_state()
        before_vocab, before_info = self._vocab, copy.deepcopy(self._info)
        added: List[str] = []
        kept_out = 0
        try:
            if grow_vocab:
                added, kept_out = self._grow(docs, ids, keep_n)
            batch, oov = self._batch(docs, ids, "update")
            old = (self._replay_sample(float(replay), replay_shards) if float(replay)
                   else None)
            summary = self._train_on(batch, int(passes), precise=bool(added),
                                     runner=runner, corpus_size=corpus_size, replay=old)
        except BaseException:
            self._restore(before, before_vocab, before_info)
            raise
        summary.update(words_added=len(added), unknown_tokens_dropped=oov)
        if grow_vocab:
            summary["words_kept_out"] = kept_out
        if added:
            summary["new_words"] = added[:20]
        if self.checkpoint is not None:
            self.updated_from = self.checkpoint
        self.checkpoint = None          # what it holds now is not any checkpoint's (save())
        return summary

    def _restore(self, state, vocab, info) -> None:
        self._algo = algorithm_class(state.algorithm).from_state(state)
        self._vocab = vocab
        self._info = info
        self._index = None

    def _train_on(self, batch, passes: int, precise: bool = False,
                  runner: Optional[Callable] = None,
                  corpus_size: Optional[int] = None, replay=None) -> Dict[str, Any]:
        """The update's steps. ``precise``: rows were just added at the prior, where online
        VB's exp(E[log β]) is about 1e-13 of a trained row's -- below the float32 epsilon that
        guards the E-step's normaliser (lda_core.algorithms.estep_vb), which would give the new
        words no share of their tokens; the E-step then runs in float64 for these steps (the
        model's own precision is kept for everything after)."""
        dtype = getattr(self._algo, "dtype", None)
        if precise and self._algo.name == "online-vb" and dtype != "float64":
            self._algo.dtype = "float64"
            try:
                return self._steps(batch, passes, runner, corpus_size, replay)
            finally:
                self._algo.dtype = dtype      # the runner's algorithm, when it returned one
        return self._steps(batch, passes, runner, corpus_size, replay)

    def pieces(self) -> int:
        """E-step pieces per minibatch of the run that trained the model (its checkpoint's
        record; 1 for a model that records none): an update sums its statistics the same
        way (lda_core.training.pieces)."""
        return int(recorded_pieces(self._info.get("run") or {}, True))

    def _replay_sample(self, share: float, shards: Optional[str]):
        """The training documents an update with ``replay=share`` revisits: ``share`` of the
        rows of the training shards (at least one), drawn without replacement with the seed
        :func:`replay_seed`, in file order, empty ones left out; word ids of the model's
        vocabulary or one it grew from (valid here). InputError naming the path and the fix
        when they are unknown or cannot be read."""
        from pipelines.ingest.doc_sample import sample_documents
        where = shards or training_shards(self.model_dir, self._info)
        fix = ("pass replay=0 (`--replay 0`) to update without revisiting them, or "
               "replay_shards=DIR (`--replay-shards DIR`) where they are now")
        if not where:
            raise InputError("update(replay=%g): the model's run record names no training "
                             "shards to revisit; %s" % (share, fix))
        try:
            files = dataset.resolve_shards(where)
            total = dataset.count_documents(files)
            n = max(1, int(round(share * total)))
            expected = self._vocab if self._vocab is not None else self._algo.vocab_hash
            old = sample_documents(files, expected, max_docs=n,
                                   seed=replay_seed(int(self._algo.seed), int(self._algo.step)),
                                   columns=("doc_id", "word_ids", "counts"))
        except (OSError, ValueError) as e:      # missing, unreadable, another vocabulary
            raise InputError("update(replay=%g): the training shards %s cannot be read (%s); "
                             "%s" % (share, where, str(e).splitlines()[0] if str(e) else
                                     type(e).__name__, fix)) from None
        if old.n_docs == 0:
            raise InputError("update(replay=%g): the training shards %s hold no document to "
                             "revisit; %s" % (share, where, fix))
        if int(old.word_ids.max(initial=-1)) >= self.n_words:
            raise InputError("update(replay=%g): the training shards %s hold word ids beyond "
                             "the model's %d words; %s" % (share, where, self.n_words, fix))
        return old

    def _steps(self, batch, passes: int, runner: Optional[Callable] = None,
               corpus_size: Optional[int] = None, replay=None) -> Dict[str, Any]:
        algo = self._algo
        keep = np.flatnonzero(batch.doc_lengths > 0)
        docs = batch.take(keep) if len(keep) < batch.n_docs else batch
        if docs.n_docs == 0:
            raise InputError("update: none of the %d documents has a word of the model's "
                             "vocabulary (grow_vocab=True adds new words)" % batch.n_docs)
        n_tokens = int(docs.n_tokens)
        n_new = int(docs.n_docs)
        # the run that trained the model E-stepped its next minibatches ahead (--staleness):
        # those statistics are of its order, never of the update's
        algo.pending = None
        seen = UpdateWeight.documents_of(algo)
        n_old = 0 if replay is None else int(replay.n_docs)
        if n_old:
            # the revisited documents are part of the history, not new: the corpus is the
            # history plus the new documents, and the state stands for the history's part
            # that is not revisited (module docstring, "Replay")
            n_old = min(n_old, max(0, seen - 1))
            replay = replay.take(np.arange(n_old)) if n_old < replay.n_docs else replay
        if n_old:
            corpus = int(corpus_size) if corpus_size is not None else seen + n_new
            if corpus < n_new + n_old:
                raise UsageError("update: corpus_size %d is smaller than the %d new documents "
                                 "plus the %d revisited ones" % (corpus, n_new, n_old))
            docs = DocBatch.concat([docs, replay])
            weigh = UpdateWeight.of(algo, n_new + n_old, int(docs.n_tokens), passes, corpus)
            # the revisited documents keep the old subjects' topics: what the first line
            # warns of does not apply; a corpus_size far above the share still drifts them
            warning = (small_update_warning(n_new, seen, passes, corpus_size)
                       if corpus_size is not None else None)
        else:
            weigh = UpdateWeight.of(algo, n_new, n_tokens, passes, corpus_size)
            warning = small_update_warning(n_new, seen, passes, corpus_size)
        if warning:
            logger.warning(warning)
        weigh.start(algo)
        S = int(recorded_minibatch(self._info.get("run")) or type(algo).DEFAULT_MINIBATCH)
        start = int(algo.step)
        seed = update_seed(int(algo.seed), start)
        sizes = update_shard_sizes(docs.n_docs)
        pieces = self.pieces()
        if runner is not None:
            job = UpdateJob(algo, docs, self._vocab, passes, seed, S, pieces, sizes)
            try:
                algo = self._algo = runner(job)
            finally:
                weigh.end(self._algo)
            self._index = None
        else:
            offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

            def minibatches(p: int):
                """Pass ``p``'s minibatches: the seeded order's rows of each, gathered."""
                rows: List[np.ndarray] = []
                cur = None
                for seg in list(plan_pass(sizes, seed, p, S).iter_segments()) + [None]:
                    if seg is None or (cur is not None and seg.batch != cur):
                        yield docs.take(np.concatenate(rows))
                        rows = []
                    if seg is not None:
                        cur = seg.batch
                        rows.append(offsets[seg.shard] + seg.rows)

            try:
                train_in_memory(algo, MemoryMinibatches(minibatches, passes,
                                                        n_batches(docs.n_docs, S)),
                                pieces=pieces)
            except TrainingError as e:
                raise TrainingError("update: %s; the model is left as it was before update()"
                                    % e) from None
            finally:
                weigh.end(algo)
        steps = int(algo.step) - start
        share = n_new / float(weigh.corpus_docs) if weigh.corpus_docs else 1.0
        self._info.setdefault("updates", []).append(
            {"documents": n_new, "tokens": n_tokens, "passes": passes,
             "steps": steps, "from_step": start, "wall_time": time.time(),
             "weight": share, "corpus_documents": weigh.corpus_docs,
             "replayed_documents": n_old})
        return {"documents": n_new, "empty_documents": int(batch.n_docs - n_new),
                "tokens": n_tokens, "passes": passes, "steps": steps, "step": int(algo.step),
                "weight": share, "corpus_documents": weigh.corpus_docs,
                "history_documents": weigh.history_docs, "replayed_documents": n_old,
                "replayed_tokens": 0 if not n_old else int(replay.n_tokens),
                "warnings": [warning] if warning else []}

    def _grow(self, docs, ids, keep_n: Optional[int] = None):
        """Add the new documents' words that pass the model's pruning rules (module
        docstring); returns them in their new id order and how many ``keep_n`` kept out."""
        self._need_vocab("update(grow_vocab=True)")
        _, items = preprocess.split_records(docs, self._prep, ids)
        counts = preprocess.token_counts(items, self._prep)
        rules, corpus_docs = self._prune_rules()
        known = self._vocab.index
        df: Dict[str, int] = {}
        cf: Dict[str, int] = {}
        for c in counts:
            for t, n in c.items():
                df[t] = df.get(t, 0) + 1
                cf[t] = cf.get(t, 0) + n
        n_docs = sum(1 for c in counts if c)
        seen_docs = self._vocab_documents(corpus_docs)
        # no_above over the documents the vocabulary's counts cover plus the new ones: a word
        # common in the new documents only is what an update is for
        no_above_abs = int(rules.no_above * ((seen_docs or 0) + n_docs))
        keep = set(rules.keep_tokens)
        cand = [t for t in df if t not in known and self._storable(t)
                and ((rules.no_below <= df[t] <= no_above_abs) or t in keep)]
        cand.sort(key=lambda t: (-df[t], -cf[t], t))
        cap = keep_n if keep_n is not None else rules.keep_n
        kept_out = 0
        if cap is not None:
            room = max(0, int(cap) - len(self._vocab))
            kept_out = max(0, len(cand) - room)
            cand = cand[:room]
            if kept_out:
                logger.warning("grow_vocab: %d new words passed the pruning rules but the "
                               "vocabulary's cap keep_n=%d kept them out (it holds %d words); "
                               "raise it with keep_n= (`train --update --keep-n N`)",
                               kept_out, int(cap), len(self._vocab))
        # known words' statistics grow with the new documents too (vocab.tsv describes the
        # corpus the model was trained on)
        vdf = self._vocab.df.copy()
        vcf = self._vocab.cf.copy()
        for t, n in df.items():
            j = known.get(t)
            if j is not None:
                vdf[j] += n
                vcf[j] += cf[t]
        vocab = self._vocab.extended(cand, [df[t] for t in cand], [cf[t] for t in cand],
                                     known_df=vdf, known_cf=vcf)
        if cand:
            self._algo = _grown(self._algo, len(cand), vocab.hash)
            self._info[LINEAGE_KEY] = vocab.lineage_record()
        if seen_docs is not None:
            self._info[DOCS_KEY] = int(seen_docs) + int(n_docs)
        self._vocab = vocab
        self._index = None
        return cand, kept_out

    def _vocab_documents(self, manifest_docs: Optional[int]) -> Optional[int]:
        """The documents the vocabulary's document frequencies count: recorded by the last
        growth, else the training dataset's (its manifest), else estimated from the corpus
        the model stands for (a warning)."""
        rec = self._info.get(DOCS_KEY)
        if isinstance(rec, int) and rec >= 0:
            return rec
        if manifest_docs is not None:
            return int(manifest_docs)
        est = UpdateWeight.documents_of(self._algo)
        logger.warning("grow_vocab: how many documents the vocabulary's document frequencies "
                       "count is not recorded; using the corpus the model stands for (%d "
                       "documents) for no_above", est)
        return est

    @staticmethod
    def _storable(token: str) -> bool:
        return "\t" not in token and "\n" not in token and token != ""

    def _prune_rules(self):
        """``(rules, documents)``: the pruning rules of the vectorize run the model's
        training data came from and the documents its vocabulary was counted over (its
        manifest, found through the run log; None when the manifest does not describe the
        model's first vocabulary), else the vectorize defaults and None."""
        from pipelines.ingest.vocabulary import PruneSettings   # imports Beam (the vocabulary
        # pipeline); only grow_vocab needs the pruning rules
        shards = training_shards(self.model_dir, self._info)
        first = (self._vocab.ancestors[0][1] if self._vocab.ancestors else self._vocab.hash)
        for d in ([shards, paths.parent(shards.rstrip("/"))] if shards else []):
            if d and paths.exists(paths.join(d, dataset.MANIFEST_FILE)):
                try:
                    m = manifest.read_manifest(d)
                except (OSError, ValueError):
                    m = {}
                pr = (m.get("settings") or {}).get("pruning")
                vinfo = m.get("vocabulary") or {}
                n = vinfo.get("num_docs")
                n = int(n) if isinstance(n, int) and vinfo.get("hash") in (None, first) else None
                if isinstance(pr, dict):
                    return PruneSettings(no_below=int(pr.get("no_below", 0)),
                                         no_above=float(pr.get("no_above", 1.0)),
                                         keep_n=pr.get("keep_n"),
                                         keep_tokens=tuple(pr.get("keep_tokens") or ())), n
                if pr is None:
                    break
        logger.warning("grow_vocab: the pruning rules of the model's training data are not "
                       "recorded; using the vectorize defaults %s", PruneSettings())
        return PruneSettings(), None

    # -- saving ------------------------------------------------------------------------------
    def save(self, model_dir: str) -> str:
        """Publish the model as a checkpoint of ``model_dir`` in the CLI's format (with
        ``vocab.tsv`` and ``tokenizer.json``) and return the checkpoint's path. ``model_dir``
        is new, empty, or the directory the model was loaded from (a new checkpoint there, as
        a resumed ``ldabeam train`` would publish); a directory holding another model's
        checkpoints is refused. Holds the directory's writer lease while it writes."""
        if not isinstance(model_dir, str) or not model_dir:
            raise UsageError("save needs a model directory path, got %r" % (model_dir,))
        target = paths.absolute(model_dir)
        # the output rules of the command line (lda_core.storage.output_paths): never into a
        # dataset, inference results or a folder inside any output; no file of another
        # writer replaced
        output_paths.check_place(target, "model", option="LdaModel.save")
        if output_paths.kind_of(target) is None and paths.isdir(target):
            theirs = [n for n in MODEL_FILES if paths.exists(paths.join(target, n))]
            if theirs:
                raise OutputError("LdaModel.save %s holds %s, which is not a model's: a model "
                                  "would replace it; save to a new or empty directory"
                                  % (model_dir, theirs[0]))
        store = CheckpointStore(target)
        if store.list_checkpoints() and (self.model_dir is None or
                                         paths.absolute(self.model_dir) != target):
            raise OutputError("%s already holds another model's checkpoints; save to a new or "
                              "empty directory" % model_dir)
        with ModelLease(target, "ldabeam.LdaModel.save"):
            return self.publish_leased(target, store)

    def publish_leased(self, target: str, store) -> str:
        """What :meth:`save` does once it holds the lease of ``target`` (``ldabeam train
        --update`` holds it for the whole command): the checkpoint, then ``vocab.tsv`` and
        ``tokenizer.json``, each written atomically.

        ``vocab.tsv`` only grows (:mod:`lda_core.storage.vocab_file`, "Lineage"): a model
        whose vocabulary extends the directory's replaces it (the grown one written first as
        ``vocab-HASH.tsv``), one whose vocabulary the directory's extends (loaded from an
        earlier checkpoint) leaves it, and one whose vocabulary grew other words than the
        directory's is refused before anything is written (its checkpoints would make the
        directory's newer ones unreadable, or the other way round)."""
        on_disk = _vocab_at(target) if self._vocab is not None else None
        # the same vocabulary is rewritten too: a growth that added no word still counted the
        # new documents into its known words' df and cf
        replace = self._vocab is not None and (on_disk is None
                                               or self._vocab.accepts(on_disk.hash))
        if (self._vocab is not None and on_disk is not None and not replace
                and on_disk.for_state(self._vocab.hash, len(self._vocab)) is None
                and store.list_checkpoints()):
            raise OutputError(
                "%s holds a model whose vocabulary (%d words) is not this model's (%d words) "
                "nor one of them grew from the other (the model was loaded from an earlier "
                "checkpoint and grew other words); save it to a new directory"
                % (target, len(on_disk), len(self._vocab)))
        # the run's records (trainer, run, updates) stay as they were: an update applies
        # steps outside the order of the run that trained the model, which --resume continues
        session = Session(position=int(self._algo.step),
                          output=Output(checkpoint_store=store, progress=False))
        grown = None
        if replace and on_disk is not None and on_disk.hash != self._vocab.hash:
            # written first under its hash's name: the checkpoint published next finds it
            # even if this process dies before vocab.tsv is replaced (model_dir.open_model)
            grown = paths.join(target, grown_vocab_name(self._vocab.hash))
            self._vocab.write(grown)
        path = session.publish(self._algo, info=self._info)
        if replace:
            self._vocab.write(paths.join(target, dataset.VOCAB_FILE))
        if grown is not None:
            files_for(grown).remove_file(grown)
        if self._prep.settings is not None:
            paths.write_atomic(
                paths.join(target, manifest.TOKENIZER_FILE),
                (json.dumps({"source": self.model_dir, "settings": self._prep.settings},
                            indent=2, sort_keys=True) + "\n").encode("utf-8"))
        self.model_dir, self.checkpoint = target, paths.absolute(path)
        self.updated_from = None
        return self.checkpoint


def _vocab_at(model_dir: str) -> Optional[Vocabulary]:
    """``model_dir/vocab.tsv``, or None when there is none or it cannot be read."""
    path = paths.join(model_dir, dataset.VOCAB_FILE)
    try:
        return Vocabulary.read(path) if paths.exists(path) else None
    except (ValueError, OSError):
        return None


def _grown(algo, n_new: int, vocab_hash: str):
    """The algorithm with ``n_new`` word rows appended at the prior (module docstring), built
    through its state format: the word-major array gets zero rows, V and the hash change."""
    state = algo.to_state()
    name = _WORD_ROWS[state.algorithm]
    rows = state.arrays[name]
    state.arrays[name] = np.concatenate(
        [rows, np.zeros((n_new, rows.shape[1]), rows.dtype)], axis=0)
    state.n_words = int(state.n_words) + int(n_new)
    state.vocab_hash = vocab_hash
    return algorithm_class(state.algorithm).from_state(state)
