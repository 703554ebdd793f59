"""The held-out set a run is scored on and the scoring itself (document completion, topic
health, the per-word bound): what the trainer, the session and every runner evaluate with."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np

from lda_core.docbatch import DocBatch
# called through their modules, so a test can make an evaluation fail there
from lda_core.evaluation import metrics, topic_quality


@dataclass
class HeldOut:
    """A held-out set prepared once: the documents and their document-completion halves;
    ``health``: the training documents topic health is measured on (``pipelines.ingest.doc_sample``:
    one document set for the trainer, ``ldabeam evaluate`` and ``ldabeam report``), or None
    (no topic health is logged)."""
    docs: DocBatch
    first: DocBatch
    second: DocBatch
    seed: int = 0
    health: Optional[DocBatch] = None

    @classmethod
    def from_batch(cls, docs: DocBatch, seed: int = 0) -> "HeldOut":
        """Non-empty documents for the bound; those with >= 2 tokens split in halves for
        document completion (as the harness does)."""
        docs = docs.non_empty()
        keep = np.nonzero(docs.doc_lengths >= 2)[0]
        two = docs if len(keep) == docs.n_docs else docs.take(keep)
        a, b = metrics.split_halves(two, seed)
        return cls(docs, a, b, seed)



def evaluate(algorithm, heldout: HeldOut, alpha: Optional[float] = None,
             health: bool = True) -> Dict[str, float]:
    """Held-out metrics of the current state (does not modify it): document completion
    (log-likelihood per token of the second halves, θ fit on the first halves with the
    protocol's evaluation prior α = 0.1 unless ``alpha`` is given — the same for every model,
    as in ``../shared/bench``), topic health on ``heldout.health`` (a sample of training
    documents) when given and ``health`` (dead and effective topics, NPMI, topic diversity:
    ``lda_core.evaluation.topic_quality.health_scalars``) and, when the algorithm defines
    it, the per-word bound of paper eq. 16 (a bound, not a perplexity). Without ``health``
    this is the cheap score a run takes at its pass ends and evaluation cadence."""
    out: Dict[str, float] = {}
    alpha = topic_quality.PROTOCOL_ALPHA if alpha is None else float(alpha)
    phi = algorithm.topic_word()
    dc = metrics.document_completion(phi, heldout.first, heldout.second, alpha=alpha)
    out["completion_ll_per_token"] = float(dc["ll_per_token"])
    out["completion_perplexity"] = float(dc.get("perplexity", math.exp(-dc["ll_per_token"])))
    if health:
        out.update(evaluate_health(phi, heldout))
    if hasattr(algorithm, "per_word_bound"):
        b = float(algorithm.per_word_bound(heldout.docs))
        out["per_word_bound"] = b
        out["perplexity_bound"] = float(math.exp(-b)) if b > -700 else float("inf")
    return out


def evaluate_health(phi, heldout: HeldOut) -> Dict[str, float]:
    """Topic health of ``phi`` on ``heldout.health`` (nothing when the held-out set carries
    no sample of training documents): what a run adds to its last evaluation."""
    if heldout.health is None:
        return {}
    return topic_quality.health_scalars(phi, heldout.health, seed=heldout.seed)


def timed_evaluate(algorithm, heldout: HeldOut, health: bool = True) -> Dict[str, float]:
    """:func:`evaluate`, plus the seconds it took as ``eval_seconds`` (what every trainer logs
    with an evaluation)."""
    te = time.time()
    metrics = evaluate(algorithm, heldout, health=health)
    metrics["eval_seconds"] = time.time() - te
    return metrics
