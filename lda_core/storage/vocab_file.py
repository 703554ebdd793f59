"""The vocabulary file of a dataset or model directory (``vocab.tsv``) and its content hash.

``vocab.tsv`` is UTF-8 text: the header ``token<TAB>id<TAB>df<TAB>cf``, then one line per word
in id order (``df``: documents containing it, ``cf``: its occurrences in the corpus). The hash
a topic state records (``vocab_hash``) is the sha256 of the tokens in id order, one per line;
shards and states whose hashes differ have word ids that mean different words.
:class:`Vocabulary` reads and writes the file through the file layer (local, or an object
store once its layer is registered); the scikit-learn estimators save it beside their state.
Pure Python (no Beam).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

from lda_core.errors import DataIntegrityError
from lda_core.storage.files import decode_text, files_for

HEADER = "token\tid\tdf\tcf"
VOCAB_FILE = "vocab.tsv"
GROWN_PREFIX = "vocab-"


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
