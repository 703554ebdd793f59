"""The UCI bag-of-words corpora of ../shared/data (KOS, NIPS: docword.*.txt.gz + vocab.*.txt).

One reader (:func:`read_docword`, cached per file: each test process parses a corpus once)
and the shapes the tests use, each of the first N documents (the file is sorted by document,
then by word):

* :func:`uci_triples`, :func:`uci_vocab`, :func:`uci_docbatch`, :func:`uci_csr`,
  :func:`uci_rows` -- arrays, a DocBatch (empty documents kept), a CSR matrix, row lists;
* :func:`kos_dataset` -- a dataset folder with a held-out split and labels (the CLI tests);
  :func:`kos_train_dataset` -- a dataset folder of training shards only (the Beam tests);
  :func:`kos_shards` -- shard files of given sizes (the ordering tests);
  :func:`uci_file_slice` -- a docword/vocab file pair of the first N documents (vectorize's
  ``--format uci`` input).
"""
import functools
import gzip
import os

import numpy as np


@functools.lru_cache(maxsize=None)
def read_docword(docword):
    """(D, W, triples) of a UCI docword file: ``triples`` an (nnz, 3) int64 array of 1-based
    (document, word, count) in file order, read-only."""
    with gzip.open(docword, "rb") as f:
        raw = f.read()
    head, body = raw.split(b"\n", 3)[:3], raw.split(b"\n", 3)[3]
    D, W = int(head[0]), int(head[1])
    t = np.array(body.split(), dtype=np.int64).reshape(-1, 3)
    t.setflags(write=False)
    return D, W, t


def _first(docword, max_docs):
    """The triples of documents 1..max_docs (those before the first line of a later one)."""
    D, W, t = read_docword(docword)
    later = np.flatnonzero(t[:, 0] > max_docs)
    return D, W, t[:later[0]] if len(later) else t


def uci_triples(docword, max_docs):
    """(rows, cols, counts, D, W) of the documents 1..``max_docs`` (ids made 0-based)."""
    D, W, t = _first(docword, max_docs)
    return t[:, 0] - 1, t[:, 1] - 1, t[:, 2].copy(), D, W


def uci_vocab(vocab_path, W=None):
    """The first ``W`` words of a UCI vocabulary file (all when None)."""
    with open(vocab_path) as f:
        words = [l.strip() for l in f]
    return words if W is None else words[:W]


def uci_docbatch(docword, max_docs, prefix="kos", start=0, labels=None):
    """(DocBatch of the documents 1..``max_docs``, W): word ids sorted within each, a document
    with no words an empty row. Ids are ``prefix`` + the document number counted from
    ``start`` (0: 0-based); ``labels(d)`` of the same number when given."""
    from lda_core.docbatch import DocBatch
    rows, cols, vals, D, W = uci_triples(docword, max_docs)
    n = min(D, max_docs)
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    bounds = np.searchsorted(rows, np.arange(n + 1))
    out = [(cols[a:b], vals[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    nums = range(start, start + n)
    return DocBatch.from_rows(out, doc_ids=["%s%d" % (prefix, d) for d in nums],
                              labels=[labels(d) for d in nums] if labels else None), W


def uci_csr(docword, max_docs):
    """The documents 1..``max_docs`` as a float64 CSR matrix (documents × W), sorted indices."""
    import scipy.sparse as sp
    rows, cols, vals, D, W = uci_triples(docword, max_docs)
    X = sp.csr_matrix((vals.astype(np.float64), (rows, cols)), shape=(min(D, max_docs), W))
    X.sum_duplicates()
    X.sort_indices()
    return X, W


def uci_rows(docword, n_docs):
    """The documents 1..``n_docs`` that have words, as ([word ids], [counts]) lists sorted by
    word id, and W."""
    rows, cols, vals, D, W = uci_triples(docword, n_docs)
    out = []
    for d in np.unique(rows):
        sel = rows == d
        pairs = sorted(zip(cols[sel].tolist(), vals[sel].tolist()))
        out.append(([w for w, _ in pairs], [c for _, c in pairs]))
    return out, W


def uci_file_slice(folder, docword, vocab, n_docs, name="kos"):
    """The first ``n_docs`` documents of a UCI corpus as a docword/vocab pair
    (``docword.NAME.txt``, ``vocab.NAME.txt``) in ``folder``; the docword path."""
    _, W, t = _first(docword, n_docs)
    os.makedirs(folder, exist_ok=True)
    out_path = os.path.join(folder, "docword.%s.txt" % name)
    with open(out_path, "w") as out:
        out.write("%d\n%d\n%d\n" % (n_docs, W, len(t)))
        out.writelines("%d %d %d\n" % tuple(r) for r in t.tolist())
    with open(vocab) as src, open(os.path.join(folder, "vocab.%s.txt" % name), "w") as out:
        out.write(src.read())
    return out_path


# ----------------------------------------------------------------------------- dataset folders
def kos_dataset(out, kos_paths, n_train=500, n_held=100, n_shards=3, vocab_edit=False):
    """A dataset folder (train/ heldout/ vocab.tsv manifest.json) of the first ``n_train`` +
    ``n_held`` KOS documents (ids ``kos-1``..., labels ``g<id mod 3>``): the training ones in
    ``n_shards`` shards, the rest held out. ``vocab_edit``: the first word renamed (another
    vocabulary)."""
    from lda_core.storage.vocab_file import Vocabulary
    from pipelines.ingest import dataset, manifest
    from pipelines.ingest.shards import gather
    docword, vocab_file = kos_paths
    N = n_train + n_held
    b, _ = uci_docbatch(docword, N, prefix="kos-", start=1, labels=lambda d: "g%d" % (d % 3))
    tokens = uci_vocab(vocab_file)
    if vocab_edit:
        tokens[0] = tokens[0] + "_other"
    vocab = Vocabulary(tokens)
    os.makedirs(os.path.join(out, "train"))
    os.makedirs(os.path.join(out, "heldout"))
    vocab.write(os.path.join(out, "vocab.tsv"))
    edges = np.linspace(0, n_train, n_shards + 1).astype(int)
    for i in range(n_shards):
        dataset.write_shard(os.path.join(out, "train", dataset.shard_name(i, n_shards)),
                            dataset.docbatch_to_table(gather(b, np.arange(edges[i], edges[i + 1]))),
                            vocab.hash)
    dataset.write_shard(os.path.join(out, "heldout", dataset.shard_name(0, 1)),
                        dataset.docbatch_to_table(gather(b, np.arange(n_train, N))), vocab.hash)
    manifest.write_manifest(out, {"vocab_hash": vocab.hash, "n_words": len(vocab),
                                  "splits": manifest.shard_listing(out)})
    return out


def read_kos(docword_gz, vocab_txt, max_docs):
    """(DocBatch of the first ``max_docs`` KOS documents, ids ``kos-0``..., the vocabulary's
    words)."""
    batch, _ = uci_docbatch(docword_gz, max_docs, prefix="kos-")
    with open(vocab_txt) as f:
        tokens = [l.strip() for l in f if l.strip()]
    return batch, tokens


def write_dataset(out, batch, tokens, n_shards=3):
    """A dataset folder (vocab.tsv, manifest.json, train/*.parquet) like vectorize's, of
    ``batch`` cut into ``n_shards`` near-equal shards; the vocabulary hash."""
    from lda_core.storage.vocab_file import Vocabulary
    from pipelines.ingest import dataset, manifest
    voc = Vocabulary(tokens)
    h = voc.hash
    os.makedirs(os.path.join(out, "train"), exist_ok=True)
    voc.write(os.path.join(out, dataset.VOCAB_FILE))
    for i, ix in enumerate(np.array_split(np.arange(batch.n_docs), n_shards)):
        dataset.write_shard(os.path.join(out, "train", dataset.shard_name(i, n_shards)),
                            dataset.docbatch_to_table(batch.take(ix)), h)
    manifest.write_manifest(out, {"n_docs": batch.n_docs, "vocab_size": len(tokens),
                                  "vocab_hash": h, "source": "KOS (UCI bag of words), test slice",
                                  "splits": manifest.shard_listing(out)})
    return h


def kos_train_dataset(kos_paths, out, n_docs, n_shards=3):
    """A dataset folder of the first ``n_docs`` KOS documents in ``n_shards`` training
    shards, no held-out split (:func:`write_dataset`)."""
    batch, tokens = read_kos(kos_paths[0], kos_paths[1], n_docs)
    write_dataset(out, batch, tokens, n_shards)
    return out


def kos_shards(folder, kos_paths, n_docs=300, sizes=(80, 0, 150, 70), vh="kos-v1"):
    """Shard files ``folder/shards/*`` of the first ``n_docs`` KOS documents (ids
    ``kos-1``...) with the given sizes and vocabulary hash: (files, the batch, W)."""
    from pipelines.ingest import dataset
    from pipelines.ingest.shards import gather
    batch, W = uci_docbatch(kos_paths[0], n_docs, prefix="kos-", start=1)
    assert sum(sizes) == n_docs
    files, s = [], 0
    d = os.path.join(str(folder), "shards")
    os.makedirs(d, exist_ok=True)
    for i, n in enumerate(sizes):
        p = os.path.join(d, dataset.shard_name(i, len(sizes)))
        dataset.write_shard(p, dataset.docbatch_to_table(gather(batch, np.arange(s, s + n))), vh)
        files.append(p)
        s += n
    return files, batch, W
