"""How an update weighs new documents against what the model has seen.

An update (``ldabeam.LdaModel.update``, ``ldabeam train --update``) continues a trained online
VB or SCVB0 model on ``n`` new documents for ``P`` passes. Left to its own schedule, each step
would replace a share ρ_t of the topics by the new minibatch's statistics scaled to the whole
corpus: after enough steps on one subject alone, the topics the new documents do not use are
overwritten, and every extra pass overwrites more. The update is instead the streaming
posterior update of Broderick et al. (2013), "Streaming variational Bayes", written in the
algorithms' own step form:

* the corpus grows: D' = H + n documents (online VB's D; SCVB0's C' = C_H + C_n tokens), where
  H is what the state before the update counts as -- the documents it was trained on
  (``corpus_size`` when the model has one, else the documents it has seen), or ``corpus_size``
  − n when the caller sets the corpus size;
* the state is rescaled to that corpus (``rescale_counts(D'/D)``: the same topics, the
  expected counts of the larger corpus);
* every step of the update is the running average ``history_rho`` of
  :mod:`lda_core.training.schedules`: the state counts as P·H document visits, every new
  document visited so far as one. After the update the old state weighs H/D' of the topics and
  the new documents n/D', each of their P visits equally -- whatever P is.

Topics are not re-seeded during the update (``reseed`` = 0): a topic the new documents do not
use is not collapsed, it holds the model's history. The settings go through the algorithm's
recorded parameters (``history``, ``history_from``, ``reseed``, the corpus size), so the Beam
update, which trains a scratch model published from this state, steps exactly alike; after the
update they are restored (:meth:`UpdateWeight.end`). SCVB0 counts tokens: its history is H
documents at the model's mean document length (tokens seen / documents seen).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from lda_core.errors import UsageError


@dataclass
class UpdateWeight:
    """The weighting of one update (module docstring). ``history_docs`` (H) and
    ``corpus_docs`` (D' = H + n) in documents; ``share`` = n / D', the new documents' weight;
    ``history`` and ``scale`` in the algorithm's unit (documents for online VB, tokens for
    SCVB0); ``r`` the rescaling of the state."""
    name: str
    new_docs: int
    passes: int
    history_docs: int
    corpus_docs: int
    history: float          # the algorithm's unit: what the state counts as (H, or C_H)
    scale: int              # the corpus size during the update: D' (or C')
    fixed: bool             # the model had a fixed corpus size (kept grown after the update)
    r: float
    reseed: float = 0.0

    @property
    def share(self) -> float:
        return float(self.new_docs) / float(self.corpus_docs) if self.corpus_docs else 1.0

    @staticmethod
    def documents_of(algorithm) -> int:
        """The documents the model stands for: online VB's D (else its documents seen),
        SCVB0's C at its mean document length."""
        if algorithm.name == "online-vb":
            return int(algorithm.corpus_size if algorithm.corpus_size is not None
                       else algorithm.docs_seen)
        tokens = _tokens_of(algorithm)
        per_doc = (float(algorithm.tokens_seen) / float(algorithm.docs_seen)
                   if algorithm.docs_seen and algorithm.tokens_seen else 0.0)
        return int(round(tokens / per_doc)) if per_doc else 0

    @classmethod
    def of(cls, algorithm, n_docs: int, n_tokens: int, passes: int,
           corpus_size: Optional[int] = None) -> "UpdateWeight":
        """The weighting of an update of ``algorithm`` on ``n_docs`` documents of
        ``n_tokens`` tokens for ``passes`` passes; ``corpus_size``: D' as the caller sets it
        (UsageError when smaller than the new documents)."""
        n, P = int(n_docs), int(passes)
        seen = cls.documents_of(algorithm)
        if corpus_size is not None and int(corpus_size) < n:
            raise UsageError("corpus_size %d is smaller than the %d new documents: the corpus "
                             "after the update holds at least them (corpus_size = %d makes "
                             "them the whole corpus)" % (corpus_size, n, n))
        hist_docs = seen if corpus_size is None else int(corpus_size) - n
        if algorithm.name == "online-vb":
            old = seen
            history, scale = float(hist_docs), int(hist_docs + n)
            fixed = algorithm.corpus_size is not None
        else:
            old = _tokens_of(algorithm)
            c_hist = float(old) * hist_docs / seen if seen else 0.0
            history, scale = c_hist, int(round(c_hist)) + int(n_tokens)
            fixed = algorithm.corpus_tokens is not None
        r = float(scale) / float(old) if old > 0 and history > 0 else 1.0
        return cls(algorithm.name, n, P, int(hist_docs), int(hist_docs + n), P * history,
                   max(1, scale), fixed, r)

    def start(self, algorithm) -> None:
        """Set the update's settings on ``algorithm`` (module docstring)."""
        self.reseed = float(algorithm.reseed)
        if self.r != 1.0:
            algorithm.rescale_counts(self.r)
        if self.name == "online-vb":
            algorithm.corpus_size = self.scale
            algorithm.history_from = int(algorithm.docs_seen)
        else:
            algorithm.corpus_tokens = self.scale
            algorithm.history_from = int(algorithm.tokens_seen)
        algorithm.history = float(self.history)
        algorithm.reseed = 0.0

    def end(self, algorithm: Any) -> None:
        """Restore the model's own settings on ``algorithm`` (the trained one): its
        schedule, its re-seeding, and its corpus size -- the grown one when it had a fixed
        one, else unset (documents seen, as before)."""
        algorithm.history = None
        algorithm.history_from = None
        algorithm.reseed = self.reseed
        if self.name == "online-vb":
            algorithm.corpus_size = self.scale if self.fixed else None
        else:
            algorithm.corpus_tokens = self.scale if self.fixed else None


def _tokens_of(algorithm) -> int:
    return int(algorithm.corpus_tokens if algorithm.corpus_tokens is not None
               else algorithm.tokens_seen)
