"""The first documents of a UCI bag-of-words corpus (docword.*.txt.gz + vocab.*.txt, as in
../shared/data) in the shapes the tests use: triples, a DocBatch, a CSR matrix."""
import gzip

import numpy as np


def uci_triples(docword, max_docs):
    """(rows, cols, counts, D, W) of the documents 1..``max_docs`` (ids made 0-based)."""
    rows, cols, vals = [], [], []
    with gzip.open(docword, "rt") as f:
        D, W, _ = int(f.readline()), int(f.readline()), int(f.readline())
        for line in f:
            d, w, c = map(int, line.split())
            if d > max_docs:
                break
            rows.append(d - 1)
            cols.append(w - 1)
            vals.append(c)
    return np.array(rows), np.array(cols), np.array(vals), D, W


def uci_vocab(vocab_path, W):
    """The first ``W`` words of a UCI vocabulary file."""
    with open(vocab_path) as f:
        return [l.strip() for l in f][:W]


def uci_docbatch(docword, max_docs, prefix="kos"):
    """(DocBatch of the documents 1..``max_docs``, word ids sorted within each; W). Ids are
    ``prefix`` + the 0-based document number; a document with no words is an empty row."""
    from lda_core.docbatch import DocBatch
    rows, cols, vals, D, W = uci_triples(docword, max_docs)
    n = min(D, max_docs)
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    bounds = np.searchsorted(rows, np.arange(n + 1))
    out = [(cols[a:b], vals[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    return DocBatch.from_rows(out, doc_ids=["%s%d" % (prefix, d) for d in range(n)]), W


def uci_csr(docword, max_docs):
    """The documents 1..``max_docs`` as a float64 CSR matrix (documents × W), sorted indices."""
    import scipy.sparse as sp
    rows, cols, vals, D, W = uci_triples(docword, max_docs)
    X = sp.csr_matrix((vals.astype(np.float64), (rows, cols)), shape=(min(D, max_docs), W))
    X.sum_duplicates()
    X.sort_indices()
    return X, W
