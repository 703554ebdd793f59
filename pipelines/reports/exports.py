"""Model exports other tools read: a gensim ``LdaModel`` and pyLDAvis's prepared data.

gensim: ``LdaModel`` keeps λ as ``state.sstats`` (K x V) with λ = η + sstats and
``expElogbeta = exp(E[log β])``, E[log β_kw] = ψ(λ_kw) − ψ(Σ_v λ_kv). For the VB algorithms
λ is the model's own (``lambda_()``), so gensim's ``show_topic`` (λ_k / Σ_v λ_kv) gives the same
top words and weights as ``ldabeam topics``, and its ``inference`` runs the same E-step
equations. Algorithms with no λ (SCVB0, the samplers) export pseudo-counts
λ = η + φ · N_k, N_k = ``PSEUDO_TOKENS`` / K (top words equal; gensim's E-step sees a
moderately concentrated posterior). α is the model's (K values), η its scalar.

pyLDAvis: ``pyLDAvis.prepare`` takes ``topic_term_dists`` (K x V, rows sum to 1),
``doc_topic_dists`` (D x K, rows sum to 1), ``doc_lengths`` (D), ``vocab`` (V strings) and
``term_frequency`` (V, the corpus counts of each word). They are written as
``DIR/pyldavis.npz`` (the arrays) and ``DIR/pyldavis.json`` (vocab, doc ids, model info), and,
only when the optional ``pyLDAvis`` package is importable, ``DIR/pyldavis.html``: pyLDAvis's
page with d3, LDAvis's script and stylesheet inside it (from the files the package ships), so
it opens with no network (``pyLDAvis.save_html`` would link them from CDNs). The
page uses only the terms that occur in the documents (pyLDAvis divides by term frequency),
topic-term rows renormalised over them; the prepared data keeps the whole vocabulary.
"""
from __future__ import annotations

import errno
import html
import io
import json
import logging
import os
import re
import shutil
import uuid
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from lda_core.docbatch import DocBatch
from lda_core.errors import DataIntegrityError, InputError, OutputError, UsageError
from lda_core.storage.output_paths import PYLDAVIS_NAMES
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest import dataset, manifest
from pipelines.runtime import paths

logger = logging.getLogger(__name__)

PSEUDO_TOKENS = 1.0e6
PYLDAVIS_NPZ, PYLDAVIS_JSON, PYLDAVIS_HTML = PYLDAVIS_NAMES


def model_lambda(algo) -> np.ndarray:
    """λ (K x V float64) of a VB model, or pseudo-counts η + φ·N_k for the others."""
    if hasattr(algo, "lambda_"):
        return np.asarray(algo.lambda_(), np.float64)
    phi = np.asarray(algo.topic_word(), np.float64)
    return model_eta(algo) + phi * (PSEUDO_TOKENS / phi.shape[0])


def model_alpha(algo) -> np.ndarray:
    K = algo.n_topics
    a = getattr(algo, "alpha", None)
    if a is None:
        return np.full(K, 1.0 / K)
    a = np.asarray(a, np.float64)
    return np.full(K, float(a)) if a.ndim == 0 else a


def model_eta(algo) -> float:
    e = getattr(algo, "eta", None)
    return float(1.0 / algo.n_topics) if e is None or np.ndim(e) else float(e)


def gensim_dictionary(vocab: Vocabulary, num_docs: int):
    """A gensim ``Dictionary`` with our ids (token i -> id i), the vocabulary's df and cf, and
    the corpus counts gensim relates them to: ``num_docs`` (the documents the df were counted
    over: ``filter_extremes(no_above=f)`` keeps df <= f * num_docs), ``num_pos`` (tokens) and
    ``num_nnz`` (document-word pairs)."""
    from gensim.corpora import Dictionary
    num_docs = int(num_docs)
    if vocab.df.size and num_docs < int(vocab.df.max()):
        raise DataIntegrityError(
            "the vocabulary's document frequencies go up to %d but the dataset has %d "
            "documents: the vocabulary and the dataset do not belong together"
            % (int(vocab.df.max()), num_docs))
    d = Dictionary()
    d.token2id = {t: i for i, t in enumerate(vocab.tokens)}
    d.id2token = {i: t for i, t in enumerate(vocab.tokens)}
    d.dfs = {i: int(x) for i, x in enumerate(vocab.df)}
    d.cfs = {i: int(x) for i, x in enumerate(vocab.cf)}
    d.num_docs = num_docs
    d.num_pos = int(vocab.cf.sum())
    d.num_nnz = int(vocab.df.sum())
    return d


def vocab_num_docs(vocab: Vocabulary, shards: Optional[str]) -> Optional[int]:
    """The number of documents ``vocab``'s df were counted over: the ``vocabulary.num_docs``
    of the manifest of dataset ``shards`` (the dataset directory or one of its split folders)
    when that manifest describes this vocabulary (same hash); None when unknown (no manifest,
    or a dataset vectorized with a fixed ``--vocab``, whose df come from another corpus)."""
    if not shards:
        return None
    for d in (shards, paths.parent(shards.rstrip("/"))):
        if d and paths.exists(paths.join(d, dataset.MANIFEST_FILE)):
            try:
                info = manifest.read_manifest(d).get("vocabulary") or {}
            except (OSError, ValueError):
                return None
            n = info.get("num_docs")
            if isinstance(n, int) and info.get("hash") in (None, vocab.hash):
                return n
            return None
    return None


def shard_vocab_counts(files: Sequence[str], n_words: int):
    """(num_docs, df, cf) counted over the shard ``files``: the counts a dictionary needs when
    the dataset's manifest does not give the vocabulary's document count."""
    df = np.zeros(n_words, np.int64)
    cf = np.zeros(n_words, np.int64)
    n = 0
    for b in dataset.iter_shard_batches(files, batch_size=4096):
        if b.n_docs and b.max_word_id() >= n_words:
            raise DataIntegrityError("word id %d in %s is outside the vocabulary of %d words"
                                     % (b.max_word_id(), ", ".join(files), n_words))
        df += np.bincount(b.word_ids, minlength=n_words)
        cf += np.bincount(b.word_ids, weights=b.counts, minlength=n_words).astype(np.int64)
        n += b.n_docs
    return n, df, cf


def to_gensim(algo, vocab: Vocabulary, num_docs: int):
    """A ``gensim.models.LdaModel`` holding this model's λ, α and η (module docstring), its
    dictionary's df relative to ``num_docs`` documents (:func:`gensim_dictionary`)."""
    from gensim.models import LdaModel
    if len(vocab) != algo.n_words:
        raise InputError("vocabulary has %d words but the model has V=%d"
                         % (len(vocab), algo.n_words))
    K = algo.n_topics
    lam = model_lambda(algo)
    eta = model_eta(algo)
    lda = LdaModel(num_topics=K, id2word=gensim_dictionary(vocab, num_docs), alpha=model_alpha(algo),
                   eta=eta, random_state=0, dtype=np.float64)
    lda.state.sstats = lam - eta
    lda.state.numdocs = int(getattr(algo, "docs_seen", 0))
    lda.sync_state()
    return lda


#: the files gensim's ``LdaModel.save(PATH)`` writes beside PATH: its state and dictionary,
#: and the arrays above gensim's size limit as ``PATH.<attribute>.npy``
GENSIM_SIDES = (".state", ".id2word", ".expElogbeta.npy", ".state.sstats.npy", ".eta.npy",
                ".alpha.npy")


def gensim_side_files(path: str) -> List[str]:
    """The side files an export to ``path`` may write (:data:`GENSIM_SIDES`)."""
    return [path + suffix for suffix in GENSIM_SIDES]


def export_gensim(algo, vocab: Vocabulary, path: str, num_docs: int):
    """Save the gensim model at ``path`` (gensim's ``save``: PATH plus PATH.state, PATH.id2word
    and .npy side files); load it with ``LdaModel.load(path)``. gensim writes into a
    temporary folder beside ``path``; the files then replace the old export's as one set
    (:func:`pipelines.runtime.paths.write_files_atomic`: the old PATH removed first, the side
    files, PATH last, side files the new export lacks removed), so a kill or Ctrl-C never
    leaves a partial file under a final name, and a full disk leaves no file at all."""
    folder, base = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    lda = to_gensim(algo, vocab, num_docs)
    tmp = os.path.join(folder, ".%s.tmp-%s" % (base, uuid.uuid4().hex))
    items = []
    try:
        os.makedirs(tmp)
        try:
            lda.save(os.path.join(tmp, base))
        except OSError as e:      # a full disk: name the output asked for, not the folder
            if e.errno is None:   # numpy's tofile on a full disk: "N requested and M written"
                raise OSError(errno.ENOSPC, "%s (a short write: %s)"
                              % (os.strerror(errno.ENOSPC), e), path) from e
            raise OSError(e.errno, e.strerror, path) from e
        names = sorted(os.listdir(tmp), key=lambda n: (n == base, n))    # PATH last
        for name in names:
            final = os.path.join(folder, name)
            if name != base and name[len(base):] not in GENSIM_SIDES and os.path.lexists(final):
                raise OutputError("--output %s: gensim also writes %s, which exists; remove it "
                                  "or choose another path" % (path, final))
            with open(os.path.join(tmp, name), "rb") as f:
                items.append((final, f.read()))
            os.unlink(os.path.join(tmp, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    new = {p for p, _ in items}
    old = [p for p in gensim_side_files(os.path.join(folder, base))
           if os.path.lexists(p) and p not in new]
    paths.write_files_atomic(items, unpublish=[path] if os.path.lexists(path) else [],
                             remove=old)
    return lda


def pyldavis_data(algo, vocab: Vocabulary, docs: DocBatch,
                  doc_topic: Optional[np.ndarray] = None) -> Dict[str, Any]:
    """The keyword arguments of ``pyLDAvis.prepare`` for ``docs`` (θ by ``algo.infer`` unless
    given); documents with no token are left out (pyLDAvis weighs topics by doc length)."""
    docs = docs.non_empty()
    if docs.n_docs == 0:
        raise InputError("pyLDAvis data needs at least one non-empty document")
    if docs.max_word_id() >= algo.n_words:
        raise InputError("word id %d is outside the model's vocabulary of %d words"
                         % (docs.max_word_id(), algo.n_words))
    phi = np.asarray(algo.topic_word(), np.float64)
    theta = np.asarray(algo.infer(docs) if doc_topic is None else doc_topic, np.float64)
    theta = theta / theta.sum(axis=1, keepdims=True)
    tf = np.bincount(docs.word_ids, weights=docs.counts, minlength=algo.n_words)
    return {"topic_term_dists": phi, "doc_topic_dists": theta,
            "doc_lengths": docs.doc_lengths.astype(np.int64),
            "vocab": list(vocab.tokens), "term_frequency": tf.astype(np.int64),
            "doc_ids": list(docs.doc_ids)}


def export_pyldavis(algo, vocab: Vocabulary, docs: DocBatch, out_dir: str,
                    info: Optional[Dict[str, Any]] = None, html: bool = True) -> Dict[str, Any]:
    """Write DIR/pyldavis.npz + DIR/pyldavis.json (+ DIR/pyldavis.html when pyLDAvis is
    installed and ``html``). Returns ``{"files": [...], "html": path or None, ...}``."""
    data = pyldavis_data(algo, vocab, docs)
    os.makedirs(out_dir, exist_ok=True)
    arrays = {k: data[k] for k in ("topic_term_dists", "doc_topic_dists", "doc_lengths",
                                   "term_frequency")}
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    meta = {"vocab": data["vocab"], "doc_ids": data["doc_ids"],
            "n_topics": int(algo.n_topics), "n_words": int(algo.n_words),
            "n_docs": len(data["doc_ids"]), "info": info or {},
            "usage": "d = pipelines.reports.exports.load_pyldavis(DIR); pyLDAvis.prepare(**d)"}
    # the .json last: load_pyldavis reads it, and it names the documents of this .npz
    items = [(os.path.join(out_dir, PYLDAVIS_NPZ), buf.getvalue())]
    files = [PYLDAVIS_NPZ, PYLDAVIS_JSON]
    html_path = None
    if html:
        try:
            import pyLDAvis  # optional extra
        except ImportError:
            logger.info("pyLDAvis is not installed: wrote the prepared data only "
                        "(pip install pyLDAvis for the interactive page)")
        else:
            vis = pyLDAvis.prepare(**_seen_terms(dict(arrays, vocab=data["vocab"])),
                                   sort_topics=False)
            html_path = os.path.join(out_dir, PYLDAVIS_HTML)
            items.append((html_path, offline_html(vis).encode("utf-8")))
            files.append(PYLDAVIS_HTML)
    items.append((os.path.join(out_dir, PYLDAVIS_JSON),
                  json.dumps(meta, ensure_ascii=False).encode("utf-8")))
    paths.write_files_atomic(items)
    return {"files": files, "html": html_path, "n_docs": meta["n_docs"]}


_INLINE = "ldabeam-inline:"      # stands for a script or stylesheet put inside the page


def offline_html(vis, title: str = "pyLDAvis") -> str:
    """pyLDAvis's page for ``vis`` with d3, LDAvis's script and its stylesheet inside the page,
    taken from the files the pyLDAvis package ships (``pyLDAvis.urls.*_LOCAL``), so the page
    works with no network (``pyLDAvis.save_html`` links them from CDNs)."""
    import pyLDAvis
    from pyLDAvis import urls

    def read(path):
        with open(path, encoding="utf-8") as f:
            return f.read()

    body = pyLDAvis.prepared_data_to_html(vis, d3_url=_INLINE + "d3.js",
                                          ldavis_url=_INLINE + "ldavis.js",
                                          ldavis_css_url=_INLINE + "ldavis.css")
    link = '<link rel="stylesheet" type="text/css" href="%sldavis.css">' % _INLINE
    if link not in body:
        raise UsageError("pyLDAvis %s writes its page differently from the 3.4 series, whose "
                         "scripts the offline page inlines; install pyLDAvis 3.4 (pip install "
                         "'ldabeam[vis]')" % pyLDAvis.__version__)
    body = body.replace(link, "<style>\n%s\n</style>" % read(urls.LDAVIS_CSS_LOCAL))
    # with d3 and LDAvis defined before it, the page's own script draws at once and never
    # loads the (placeholder) URLs
    scripts = "".join("<script>\n%s\n</script>\n" % re.sub(r"(?i)</script", r"<\/script",
                                                            read(p))
                      for p in (urls.D3_LOCAL, urls.LDAVIS_LOCAL))
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<title>%s</title>\n%s</head>\n<body>\n%s\n</body>\n</html>\n"
            % (html.escape(title), scripts, body))


def _seen_terms(d: Dict[str, Any]) -> Dict[str, Any]:
    """Only the terms that occur in the documents (pyLDAvis divides by their frequency), with
    the topic-term rows renormalised over them."""
    keep = np.nonzero(d["term_frequency"] > 0)[0]
    ttd = d["topic_term_dists"][:, keep]
    return dict(d, topic_term_dists=ttd / ttd.sum(axis=1, keepdims=True),
                vocab=[d["vocab"][i] for i in keep], term_frequency=d["term_frequency"][keep])


def load_pyldavis(out_dir: str) -> Dict[str, Any]:
    """The ``pyLDAvis.prepare`` keyword arguments written by :func:`export_pyldavis`."""
    with np.load(os.path.join(out_dir, PYLDAVIS_NPZ), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    with open(os.path.join(out_dir, PYLDAVIS_JSON), encoding="utf-8") as f:
        meta = json.load(f)
    arrays["vocab"] = meta["vocab"]
    return arrays


def sample_docs(files: Sequence[str], max_docs: int) -> DocBatch:
    """The first ``max_docs`` documents of the shards (file order)."""
    if max_docs < 1:
        raise UsageError("max_docs=%r is outside the allowed range [1, inf)" % max_docs)
    parts, n = [], 0
    for b in dataset.iter_shard_batches(files, batch_size=min(4096, max_docs)):
        take = min(b.n_docs, max_docs - n)
        parts.append(b if take == b.n_docs else b.take(np.arange(take)))
        n += take
        if n >= max_docs:
            break
    if not parts:
        raise InputError("no documents in %s" % ", ".join(files))
    return DocBatch.concat(parts)

