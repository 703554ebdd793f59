"""The vocabulary file of a dataset or model directory (``vocab.tsv``) and its content hash.

``vocab.tsv`` is UTF-8 text: the header ``token<TAB>id<TAB>df<TAB>cf``, then one line per word
in id order (``df``: documents containing it, ``cf``: its occurrences in the corpus). The hash
a topic state records (``vocab_hash``) is the sha256 of the tokens in id order, one per line;
shards and states whose hashes differ have word ids that mean different words.
Pure Python (no Beam): ``pipelines.ingest.dataset.Vocabulary`` reads and writes the file
through these functions, and the scikit-learn estimators save it beside their state.
"""
from __future__ import annotations

import hashlib
from typing import Optional, Sequence

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
