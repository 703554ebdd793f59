"""20 Newsgroups (../shared/data) for the tests and benchmarks, and the held-out score the
update tests and benchmark compare models by.

``news20_posts`` is the one reader of the 20 Newsgroups tar (read once per process): every
test picks its slice (split, every n-th, a skip, a limit, a cap per newsgroup) and the part of
a post it needs (:class:`Post`); :func:`train_texts` and :func:`write_train_jsonl` are the
slices of the estimator and export tests. Benchmarks import it with ``tests/`` on
``sys.path`` (``from helpers.news20 import ...``).
"""
import functools
import json
import tarfile
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

SPLITS = ("train", "test")


@dataclass(frozen=True)
class Post:
    """One file of the tar: ``name`` (``20news-bydate-train/alt.atheism/49960``) and its
    bytes as stored."""
    name: str
    data: bytes

    @property
    def split(self) -> str:
        return self.name.split("/")[0].rsplit("-", 1)[-1]

    @property
    def group(self) -> str:
        return self.name.split("/")[-2]

    @property
    def text(self) -> str:
        """The whole post, headers included (Latin-1, as the corpus is encoded)."""
        return self.data.decode("latin-1")

    @property
    def body(self) -> str:
        """The post after its header block (everything after the first blank line)."""
        return self.text.split("\n\n", 1)[-1]

    def record(self) -> dict:
        """``{"id": name, "text": body}``, a JSON-lines record of ``ldabeam vectorize``."""
        return {"id": self.name, "text": self.body}


def news20_posts(tar_path: str, split: Optional[str] = None, every: int = 1, skip: int = 0,
                 limit: Optional[int] = None, per_group: Optional[int] = None) -> List[Post]:
    """The posts of the 20 Newsgroups tar in tar order: those of ``split`` ("train", "test";
    None: both), at most ``per_group`` of each newsgroup, then the ones after the first
    ``skip``, every ``every``-th of those (the first, the ``every+1``-th, ...), at most
    ``limit``."""
    if split is not None and split not in SPLITS:
        raise ValueError("split must be one of %s or None, got %r" % (SPLITS, split))
    prefix = "20news-bydate-%s/" % split if split else None
    out: List[Post] = []
    seen: dict = {}
    i = 0
    for p in _all_posts(tar_path):
        if prefix and not p.name.startswith(prefix):
            continue
        if per_group is not None:
            seen[p.group] = seen.get(p.group, 0) + 1
            if seen[p.group] > per_group:
                continue
        i += 1
        if i <= skip or (i - skip - 1) % every:
            continue
        out.append(p)
        if limit is not None and len(out) >= limit:
            break
    return out


@functools.lru_cache(maxsize=2)
def _all_posts(tar_path: str):
    """Every file of the tar, in tar order (read once per process)."""
    with tarfile.open(tar_path, "r|gz") as tar:
        return tuple(Post(m.name, tar.extractfile(m).read()) for m in tar if m.isfile())


def train_texts(tar_path: str, per_group: int = 15) -> List[str]:
    """The first ``per_group`` training posts of each newsgroup: the text after the header
    block ("" for a post without one)."""
    return [p.text.partition("\n\n")[2] for p in news20_posts(tar_path, "train",
                                                               per_group=per_group)]


def write_train_jsonl(tar_path: str, path: str, per_group: int) -> int:
    """The first ``per_group`` training posts of each newsgroup as JSON lines (headers
    dropped, the Subject as title, the group as label); the number written."""
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for p in news20_posts(tar_path, "train", per_group=per_group):
            head, _, body = p.text.partition("\n\n")
            subject = next((line[8:].strip() for line in head.split("\n")
                            if line.startswith("Subject:")), "")
            out.write(json.dumps({"id": "%s/%s" % (p.group, p.name.split("/")[2]),
                                  "title": subject or None, "label": p.group,
                                  "text": body}) + "\n")
            n += 1
    return n


def halves(tar_path: str, every: int):
    """Every ``every``-th training post and every ``2*every``-th test post, as records (the
    slices the update tests and ``benchmarks/library_update_bench.py`` use)."""
    return ([p.record() for p in news20_posts(tar_path, "train", every=every)],
            [p.record() for p in news20_posts(tar_path, "test", every=2 * every)])


def completion(model, token_lists: Sequence[Sequence[str]], ids: Sequence[str]) -> float:
    """Document completion (held-out log likelihood per token of each document's second half
    given its first) of ``model`` (an ``ldabeam.LdaModel``) on token lists of words it knows,
    by the project's evaluator (:func:`lda_core.evaluation.metrics.evaluate_model`: documents
    with at least 2 tokens, halves split with seed 0)."""
    from lda_core.docbatch import DocBatch
    from lda_core.evaluation import metrics
    idx = {t: i for i, t in enumerate(model.vocabulary)}
    rows = [np.unique(np.array([idx[t] for t in toks], np.int64), return_counts=True)
            for toks in token_lists]
    batch = DocBatch.from_rows(rows, doc_ids=list(ids))
    return float(metrics.evaluate_model(model.topic_word(), batch)["completion_ll_per_token"])
