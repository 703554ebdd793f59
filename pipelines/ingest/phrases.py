"""Learned phrases (collocations such as ``new_york``) that travel with a dataset and a model.

Phrases are learned by gensim's :class:`gensim.models.phrases.Phrases` on the token lists of
the training documents and applied by gensim's :class:`~gensim.models.phrases.FrozenPhrases`
(adjacent tokens whose bigram scores above the threshold become one token joined by the
delimiter; connector words such as ``of`` may sit inside a phrase: ``bank_of_america``).

What is stored is data only: the table of phrases with their scores and the few settings
that decide how they are applied (:meth:`PhraseTable.to_record`, a JSON object kept in the
dataset's manifest settings and the model's ``tokenizer.json``) -- never a pickled model.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

from lda_core.errors import InputError, UsageError

#: gensim's Phrases defaults (min_count, threshold, scoring)
DEFAULT_MIN_COUNT = 5
DEFAULT_THRESHOLD = 10.0
SCORINGS = ("default", "npmi")
RECORD_VERSION = 1


def default_connector_words() -> Tuple[str, ...]:
    """gensim's ``ENGLISH_CONNECTOR_WORDS`` (``of``, ``the``, ``and`` ...), sorted."""
    from gensim.models.phrases import ENGLISH_CONNECTOR_WORDS
    return tuple(sorted(ENGLISH_CONNECTOR_WORDS))


@dataclass(frozen=True)
class PhraseTable:
    """Phrases and how to apply them. ``phrasegrams``: ``(phrase, score)`` pairs, the phrase
    being its tokens joined by ``delimiter`` (gensim's ``export_phrases()`` keys)."""

    phrasegrams: Tuple[Tuple[str, float], ...]
    threshold: float = DEFAULT_THRESHOLD
    min_count: int = DEFAULT_MIN_COUNT
    scoring: str = "default"
    delimiter: str = "_"
    connector_words: Tuple[str, ...] = ()
    learned_on: str = ""        # what the phrases were learned from (informative)

    def __len__(self) -> int:
        return len(self.phrasegrams)

    @functools.cached_property
    def _frozen(self):
        # gensim's FrozenPhrases applies a table through these attributes alone (its
        # constructor only copies them from a trained Phrases); set from the stored data
        from gensim.models.phrases import FrozenPhrases
        frozen = FrozenPhrases.__new__(FrozenPhrases)
        frozen.threshold = self.threshold
        frozen.min_count = self.min_count
        frozen.delimiter = self.delimiter
        frozen.scoring = self.scoring
        frozen.connector_words = frozenset(self.connector_words)
        frozen.phrasegrams = dict(self.phrasegrams)
        return frozen

    def apply(self, tokens: Sequence[str]) -> List[str]:
        """``tokens`` with every detected phrase joined into one token (gensim's rule)."""
        if not self.phrasegrams or len(tokens) < 2:
            return list(tokens)
        return [w for w, _ in self._frozen.analyze_sentence(tokens)]

    def to_record(self) -> dict:
        return {"version": RECORD_VERSION, "threshold": self.threshold,
                "min_count": self.min_count, "scoring": self.scoring,
                "delimiter": self.delimiter, "connector_words": list(self.connector_words),
                "learned_on": self.learned_on,
                "phrasegrams": [[p, s] for p, s in self.phrasegrams]}

    @classmethod
    def from_record(cls, rec, where: str = "the tokenizer record") -> "PhraseTable":
        """The table of :meth:`to_record`; InputError naming ``where`` when malformed."""
        try:
            if not isinstance(rec, dict) or rec.get("version") != RECORD_VERSION:
                raise ValueError("not a version-%d phrase table" % RECORD_VERSION)
            grams = tuple((str(p), float(s)) for p, s in rec["phrasegrams"])
            return cls(grams, threshold=float(rec["threshold"]),
                       min_count=int(rec["min_count"]), scoring=str(rec["scoring"]),
                       delimiter=str(rec["delimiter"]),
                       connector_words=tuple(str(w) for w in rec["connector_words"]),
                       learned_on=str(rec.get("learned_on", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError("%s: the phrase table is malformed (%s); re-run `ldabeam "
                             "vectorize` to record it again" % (where, e)) from e


def learn_phrases(token_lists: Iterable[Sequence[str]], min_count: int = DEFAULT_MIN_COUNT,
                  threshold: float = DEFAULT_THRESHOLD, scoring: str = "default",
                  connector_words: Optional[Sequence[str]] = None,
                  learned_on: str = "", stopwords: frozenset = frozenset()) -> PhraseTable:
    """gensim ``Phrases`` trained on ``token_lists`` (one pass), exported as a table.

    ``connector_words`` None: gensim's English connector words. Phrases made only of
    ``stopwords`` (``would_like``) are left out: they would bring back words the stop list
    removes. Raises UsageError for a setting gensim would reject."""
    from gensim.models.phrases import Phrases
    check_settings(min_count, threshold, scoring)
    connectors = default_connector_words() if connector_words is None \
        else tuple(sorted(set(connector_words)))
    model = Phrases(min_count=min_count, threshold=threshold, scoring=scoring,
                    connector_words=frozenset(connectors))
    model.add_vocab(list(t) for t in token_lists)
    grams = {p: s for p, s in model.export_phrases().items()
             if not stopwords or not all(w in stopwords for w in p.split(model.delimiter))}
    return PhraseTable(tuple(sorted((p, float(s)) for p, s in grams.items())),
                       threshold=float(threshold), min_count=int(min_count), scoring=scoring,
                       delimiter=model.delimiter, connector_words=connectors,
                       learned_on=learned_on)


def check_settings(min_count: int, threshold: float, scoring: str) -> None:
    """UsageError naming the option for a setting gensim ``Phrases`` would reject."""
    if scoring not in SCORINGS:
        raise UsageError("--phrases-scoring %r is not one of %s" % (scoring, ", ".join(SCORINGS)))
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise UsageError("--phrases-min-count must be an integer >= 1, got %r" % (min_count,))
    if scoring == "npmi" and not -1.0 <= threshold <= 1.0:
        raise UsageError("--phrases-threshold must be in [-1, 1] with npmi scoring, got %r"
                         % (threshold,))
    if scoring == "default" and threshold <= 0:
        raise UsageError("--phrases-threshold must be > 0 with default scoring, got %r"
                         % (threshold,))
