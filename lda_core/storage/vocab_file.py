"""The vocabulary file of a dataset or model directory (``vocab.tsv``) and its content hash.

``vocab.tsv`` is UTF-8 text: the header ``token<TAB>id<TAB>df<TAB>cf``, then one line per word
in id order (``df``: documents containing it, ``cf``: its occurrences in the corpus). The hash
a topic state records (``vocab_hash``) is the sha256 of the tokens in id order, one per line;
shards and states whose hashes differ have word ids that mean different words -- unless one
vocabulary is a prefix of the other.

**Lineage.** A vocabulary grows only by appending words (``ldabeam train --update
--grow-vocab``, ``LdaModel.update(grow_vocab=True)``): the ids of the words it had keep their
meaning, so shards and checkpoints of any *ancestor* vocabulary (a prefix of it) are read with
it, the ancestor's n words being its first n. A state records the ancestors it grew from in
``info["vocab_lineage"]`` (``[[n_words, hash], ...]``, oldest first; its own vocabulary is its
``vocab_hash`` and ``n_words``), :attr:`Vocabulary.ancestors` holds them, and
:meth:`Vocabulary.prefix_length` finds the n whose first n tokens hash to a given hash --
through the recorded ancestors first, then (vocabularies grown before the record existed) by
hashing every prefix once. A model directory keeps one ``vocab.tsv``, the newest vocabulary;
every reader takes the prefix its checkpoint or its shards need
(:func:`pipelines.runtime.model_dir.open_model`, :func:`pipelines.ingest.dataset.check_vocab_hash`).

:class:`Vocabulary` reads and writes the file through the file layer (local, or an object
store once its layer is registered); the scikit-learn estimators save it beside their state.
Pure Python (no Beam).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from lda_core.errors import DataIntegrityError
from lda_core.storage.files import decode_text, files_for

HEADER = "token\tid\tdf\tcf"
VOCAB_FILE = "vocab.tsv"
# beside it in a model directory: how raw text became the vocabulary's tokens (a record of
# pipelines.ingest.tokenize, data only)
TOKENIZER_FILE = "tokenizer.json"
GROWN_PREFIX = "vocab-"
#: state.info key: the vocabularies a state's vocabulary grew from, [[n_words, hash], ...]
LINEAGE_KEY = "vocab_lineage"
#: state.info key: the documents the df column of a grown vocabulary counts (the training
#: corpus and the updates that grew it)
DOCS_KEY = "vocab_documents"


def grown_vocab_name(hash_: str) -> str:
    """The file a grown vocabulary (``--grow-vocab``) is written to before the checkpoint that
    uses it is published: ``vocab.tsv`` is replaced only after that publish, so a writer killed
    between the two leaves a latest checkpoint whose vocabulary is still found by its hash."""
    return "%s%s.tsv" % (GROWN_PREFIX, hash_[:16])


def vocab_hash(tokens: Sequence[str]) -> str:
    """Content hash of a vocabulary: sha256 of the tokens in id order, one per line."""
    h = hashlib.sha256()
    for t in tokens:
        h.update(t.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def vocab_tsv(tokens: Sequence[str], df: Optional[Sequence[int]] = None,
              cf: Optional[Sequence[int]] = None) -> str:
    """The text of ``vocab.tsv`` (counts 0 where not given). A token holding a tab or a
    newline cannot be stored: ValueError naming it."""
    lines = [HEADER]
    for i, t in enumerate(tokens):
        if "\t" in t or "\n" in t:
            raise ValueError("token %r contains a tab or newline" % t)
        lines.append("%s\t%d\t%d\t%d" % (t, i, 0 if df is None else df[i],
                                         0 if cf is None else cf[i]))
    return "\n".join(lines) + "\n"


@dataclass
class Vocabulary:
    """Tokens in id order with their document frequency (df) and corpus frequency (cf)."""

    tokens: List[str]
    df: np.ndarray = None
    cf: np.ndarray = None
    _index: Dict[str, int] = field(default=None, repr=False, compare=False)
    #: the vocabularies this one grew from, ``(n_words, hash)`` oldest first (module docstring)
    ancestors: List[Tuple[int, str]] = field(default_factory=list, repr=False, compare=False)
    #: a prefix of a longer (grown) vocabulary: its df/cf count that vocabulary's corpus,
    #: later documents included, not the corpus this one was built on
    later_counts: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self):
        self.tokens = list(self.tokens)
        n = len(self.tokens)
        self.df = np.zeros(n, np.int64) if self.df is None else np.asarray(self.df, np.int64)
        self.cf = np.zeros(n, np.int64) if self.cf is None else np.asarray(self.cf, np.int64)
        if len(self.df) != n or len(self.cf) != n:
            raise ValueError("vocabulary has %d tokens but %d df and %d cf values"
                             % (n, len(self.df), len(self.cf)))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def index(self) -> Dict[str, int]:
        if self._index is None:
            self._index = {t: i for i, t in enumerate(self.tokens)}
            if len(self._index) != len(self.tokens):
                raise ValueError("vocabulary has duplicate tokens")
        return self._index

    @property
    def hash(self) -> str:
        return vocab_hash(self.tokens)

    def prefix(self, n: int) -> "Vocabulary":
        """The first ``n`` words (an ancestor's vocabulary), with their counts and the
        ancestors before them."""
        n = int(n)
        if n == len(self.tokens):
            return self
        return Vocabulary(self.tokens[:n], self.df[:n], self.cf[:n],
                          ancestors=[(k, h) for k, h in self.ancestors if k < n],
                          later_counts=True)

    def prefix_length(self, hash_: Optional[str]) -> Optional[int]:
        """The n whose first n tokens hash to ``hash_`` (``len(self)`` for its own hash), or
        None when no prefix does: the recorded ancestors are checked first, then every
        prefix is hashed once (module docstring)."""
        if not hash_:
            return None
        if hash_ == self.hash:
            return len(self.tokens)
        for n, h in self.ancestors:
            if h == hash_ and 0 < n < len(self.tokens) and vocab_hash(self.tokens[:n]) == h:
                return int(n)
        h = hashlib.sha256()
        for i, t in enumerate(self.tokens[:-1], start=1):
            h.update(t.encode("utf-8"))
            h.update(b"\n")
            if h.copy().hexdigest() == hash_:
                return i
        return None

    def for_state(self, hash_: Optional[str], n_words: int) -> Optional["Vocabulary"]:
        """This vocabulary, or the prefix of it, that a state (or shards) of vocabulary
        ``hash_`` with ``n_words`` words uses; None when neither fits. A state without a
        recorded hash takes the vocabulary only when the sizes agree."""
        if not hash_:
            return self if len(self.tokens) == int(n_words) else None
        n = self.prefix_length(hash_) if len(self.tokens) >= int(n_words) else None
        return self.prefix(n) if n == int(n_words) else None

    def accepts(self, hash_: Optional[str]) -> bool:
        """Whether word ids of vocabulary ``hash_`` are valid here with their meaning: it is
        this vocabulary or one it grew from (a prefix)."""
        return self.prefix_length(hash_) is not None

    def extended(self, tokens: Sequence[str], df: Sequence[int], cf: Sequence[int],
                 known_df: Optional[np.ndarray] = None,
                 known_cf: Optional[np.ndarray] = None) -> "Vocabulary":
        """The grown vocabulary: these words appended (ids after the existing ones, which
        keep theirs), this one recorded as its latest ancestor. ``known_df`` / ``known_cf``:
        the existing words' counts to carry (default: as they are)."""
        kd = self.df if known_df is None else np.asarray(known_df, np.int64)
        kc = self.cf if known_cf is None else np.asarray(known_cf, np.int64)
        return Vocabulary(list(self.tokens) + list(tokens),
                          np.concatenate([kd, np.asarray(df, np.int64)]).astype(np.int64),
                          np.concatenate([kc, np.asarray(cf, np.int64)]).astype(np.int64),
                          ancestors=self.lineage())

    def lineage(self) -> List[Tuple[int, str]]:
        """The ancestors and this vocabulary, ``(n_words, hash)`` oldest first."""
        return list(self.ancestors) + [(len(self.tokens), self.hash)]

    def lineage_record(self) -> List[List[Any]]:
        """The ancestors as a state records them (``info[LINEAGE_KEY]``)."""
        return [[int(n), str(h)] for n, h in self.ancestors]

    def with_lineage(self, record: Any) -> "Vocabulary":
        """This vocabulary with the ancestors a state recorded (``info[LINEAGE_KEY]``;
        malformed entries are ignored: :meth:`prefix_length` verifies each by its hash)."""
        out = []
        for e in record if isinstance(record, (list, tuple)) else ():
            if isinstance(e, (list, tuple)) and len(e) == 2 and isinstance(e[1], str):
                try:
                    n = int(e[0])
                except (TypeError, ValueError):
                    continue
                if 0 < n < len(self.tokens):
                    out.append((n, e[1]))
        self.ancestors = out
        return self

    def to_tsv(self) -> str:
        return vocab_tsv(self.tokens, self.df, self.cf)

    def write(self, path: str) -> None:
        files_for(path).write_atomic(path, self.to_tsv().encode("utf-8"))

    @classmethod
    def read(cls, path: str) -> "Vocabulary":
        """Read ``vocab.tsv`` (or a dataset directory containing it).

        Also accepts a plain one-token-per-line file (UCI ``vocab.*.txt``), ids in line order.
        """
        files = files_for(path)
        if files.isdir(path):
            path = files.join(path, VOCAB_FILE)
        if not files.exists(path):
            raise FileNotFoundError("vocabulary file %s does not exist (expected a vocab.tsv "
                                    "written by `ldabeam vectorize`, or a one-token-per-line "
                                    "file)" % path)
        with files.open_read(path) as f:
            text = decode_text(f.read(), path, "vocabulary")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if lines and lines[0] == HEADER:
            tokens, df, cf = [], [], []
            for n, line in enumerate(lines[1:], start=2):
                parts = line.split("\t")
                if len(parts) != 4:
                    raise DataIntegrityError("%s line %d: expected 4 tab-separated fields "
                                             "(token, id, df, cf), got %d" % (path, n, len(parts)))
                if int(parts[1]) != len(tokens):
                    raise DataIntegrityError("%s line %d: id %s out of order (expected %d)"
                                             % (path, n, parts[1], len(tokens)))
                tokens.append(parts[0])
                df.append(int(parts[2]))
                cf.append(int(parts[3]))
            return cls(tokens, np.array(df, np.int64), np.array(cf, np.int64))
        return cls([l.strip() for l in lines])
