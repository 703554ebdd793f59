"""``ldabeam report``: one self-contained static HTML page about a trained model.

Gathered from MODEL_DIR alone (plus a seeded sample of documents from shards for the parts
that need them: ``pipelines.ingest.doc_sample``, the training documents by default, so topic health
is shown on the documents ``ldabeam evaluate`` and the trainer measure it on):

* held-out score vs documents seen, from the run log's evaluated steps (Hoffman, Blei & Bach
  2010, Fig. 1 top: document-completion log likelihood per token and, when logged, the per-word
  bound of eq. 16);
* the evolution of a topic's top words across the kept checkpoints (Fig. 1 bottom; topics keep
  their index between checkpoints of one run — train with ``--keep-checkpoints`` large enough
  to keep several);
* per topic: top words with weights, its optional label (MODEL_DIR/topic_labels.json, written
  by ``ldabeam topics --label``), its size — the share of the sample's tokens,
  size_k = Σ_d N_d θ_dk / Σ_d N_d, θ by the model's ``infer`` — and its UMass coherence
  (Mimno et al. 2011; ``lda_core.evaluation.topic_quality.umass_coherence`` over the sample, top 10 words);
* example documents per topic (largest θ_dk in the sample, at least 1%) with their titles;
* topic health (``lda_core.evaluation.topic_quality.topic_health`` over the sample): each topic's share of
  the tokens and its NPMI, dead topics (share below 0.1/K) and junk topics (NPMI below 0)
  flagged, the effective number of topics and the topic diversity; when the sample's
  documents carry labels, a label × topic table (documents by most probable topic) and the
  NMI between the two.

Plots are matplotlib PNGs embedded as base64 ``data:`` URIs; the numbers behind them are also
embedded as JSON (``<script type="application/json" id="report-data">``), so the page needs no
network and tests can compare what it shows with the run log. The page layout is
``templates/report.html`` (``string.Template``; every value inserted is HTML-escaped).
"""
from __future__ import annotations

import base64
import datetime
import html
import io
import json
import logging
import math
import os
import string
from typing import Any, Dict, List, Optional

import numpy as np

from lda_core.errors import InputError, UsageError
from lda_core.evaluation.topic_quality import (normalized_mutual_information, top_words,
                                               topic_health, umass_coherence)
from lda_core.storage.blocks import algorithm_from_state
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.output_paths import LABELS_FILE, REPORT_MARK
from lda_core.storage.run_log import read_run_log, RUN_LOG_FILE
from pipelines.ingest import dataset, manifest
from pipelines.ingest.doc_sample import sample_documents
from pipelines.runtime import paths
from pipelines.runtime.model_dir import accepted_vocab, load_model, training_shards

logger = logging.getLogger(__name__)

MIN_EXAMPLE_SHARE = 0.01     # an example document has at least this share of the topic
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # pipelines/
# templates/ of the source tree (editable install), else the copy setup.py ships inside the
# installed package (pipelines/templates/, for a wheel or `pip install .`)
TEMPLATE = next((p for p in (os.path.join(os.path.dirname(_HERE), "templates", "report.html"),
                             os.path.join(_HERE, "templates", "report.html"))
                 if os.path.exists(p)),
                os.path.join(os.path.dirname(_HERE), "templates", "report.html"))
METRIC_NAMES = {"completion_ll_per_token": "held-out document completion (log likelihood "
                                           "per token)",
                "per_word_bound": "held-out per-word bound (eq. 16)"}


# ----------------------------------------------------------------------------- labels

def labels_path(model_dir: str) -> str:
    return paths.join(model_dir, LABELS_FILE)


def read_labels(model_dir: str) -> Dict[int, str]:
    """{topic: label} from MODEL_DIR/topic_labels.json ({} when absent)."""
    path = labels_path(model_dir)
    if not paths.exists(path):       # local, or an object-store URL
        return {}
    with paths.open_read(path) as f:
        try:
            raw = json.loads(f.read().decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError("%s is not JSON: %s" % (path, e))
    if not isinstance(raw, dict):
        raise InputError("%s must be a JSON object {\"topic\": \"label\"}" % path)
    out = {}
    for k, v in raw.items():
        try:
            out[int(k)] = str(v)
        except ValueError:
            raise InputError("%s: topic %r is not an integer" % (path, k))
    return out


def write_labels(model_dir: str, labels: Dict[int, str], n_topics: int) -> str:
    for k in labels:
        if not 0 <= k < n_topics:
            raise UsageError("topic %d is outside the model's topics [0, %d)" % (k, n_topics))
    path = labels_path(model_dir)
    data = {str(k): labels[k] for k in sorted(labels)}
    paths.write_atomic(path, (json.dumps(data, indent=1, ensure_ascii=False)
                                      + "\n").encode("utf-8"))
    return path


# ----------------------------------------------------------------------------- data

def model_dir_of(model: str) -> str:
    return paths.model_dir_of(model)


def heldout_curve(records: List[Dict[str, Any]]) -> Dict[str, List]:
    """Evaluated steps of the run log: step, docs_seen and each metric (None when absent)."""
    pts = [r for r in records if r.get("event") == "step" and r.get("metrics")]
    out = {"step": [int(r["step"]) for r in pts],
           "docs_seen": [int(r.get("docs_seen", 0)) for r in pts]}
    for m in METRIC_NAMES:
        out[m] = [r["metrics"].get(m) for r in pts]
    out["npmi"] = [r["metrics"].get("npmi") for r in pts]
    return out


def heldout_note(curve: Dict[str, List], run: Optional[Dict[str, Any]],
                 npmi: Optional[List] = None) -> List[str]:
    """Sentences that say how to read the held-out curve, from the run's own numbers: where
    its first point is, a fall and what in the run's settings makes one, and held-out
    likelihood and NPMI moving apart."""
    ys = curve.get("completion_ll_per_token") or []
    pts = [(s, d, y) for s, d, y in zip(curve["step"], curve["docs_seen"], ys) if y is not None]
    if not pts:
        return []
    out = ["The first point is measured after step %d (%d documents seen), not at the random "
           "start." % (pts[0][0], pts[0][1])]
    falls = [(a, b) for a, b in zip(pts, pts[1:]) if b[2] < a[2]]
    if falls:
        a, b = max(falls, key=lambda ab: ab[0][2] - ab[1][2])
        text = ("The score falls between steps %d and %d (%.4f to %.4f per token)."
                % (a[0], b[0], a[2], b[2]))
        run = run or {}
        S, D = run.get("minibatch"), run.get("n_docs")
        if S and D and S / float(D) >= 0.1:
            text += (" Each step's minibatch of %d documents is %.0f%% of the %d training "
                     "documents, so every step pulls the topics toward its own few documents "
                     "and the held-out score moves with them from step to step; minibatches "
                     "that are a small share of the corpus (a larger corpus, or a smaller "
                     "--minibatch with more documents) give a smoother curve."
                     % (S, 100.0 * S / D, D))
        else:
            text += (" A held-out score estimated from a few documents varies from point to "
                     "point; a fall within that variation is noise, a lasting one means the "
                     "model fits the training documents at the expense of new ones.")
        out.append(text)
    if npmi and len(npmi) == len(ys):
        pairs = [(y, n) for y, n in zip(ys, npmi) if y is not None and n is not None]
        if len(pairs) >= 2 and pairs[-1][0] > pairs[0][0] and pairs[-1][1] < pairs[0][1]:
            out.append("Between the first and the last point the held-out score rose (%.4f "
                       "to %.4f) while the top words' NPMI fell (%.3f to %.3f): likelihood "
                       "and the readability of the top words are different targets (Chang "
                       "et al. 2009, \u201cReading tea leaves\u201d), compare the topic "
                       "health below." % (pairs[0][0], pairs[-1][0], pairs[0][1],
                                          pairs[-1][1]))
    return out


def topic_evolution(model_dir: str, vocab, topics: List[int], n_words: int = 8,
                    max_checkpoints: int = 8, until_step: Optional[int] = None
                    ) -> Dict[str, Any]:
    """Top words of ``topics`` at each kept checkpoint up to ``until_step`` (at most
    ``max_checkpoints``, spread evenly, always the last). ``vocab``: the model's
    :class:`~lda_core.storage.vocab_file.Vocabulary` (or None); a checkpoint of a vocabulary it
    grew from reads its first words, one of another vocabulary is skipped with a warning."""
    store = CheckpointStore(model_dir, check_algorithm=True)
    ckpts = [c for c in store.list_checkpoints() if until_step is None or c.step <= until_step]
    if len(ckpts) > max_checkpoints:
        idx = np.unique(np.linspace(0, len(ckpts) - 1, max_checkpoints).round().astype(int))
        ckpts = [ckpts[i] for i in idx]
    cols = []
    for c in ckpts:
        try:
            state = store.load(c.step, row_order=True)
        except Exception as e:   # a corrupt old checkpoint must not stop the report
            logger.warning("report: skipping checkpoint %s: %s", c.path, e)
            continue
        own = vocab.for_state(state.vocab_hash, state.n_words) if vocab is not None else None
        if vocab is not None and own is None:
            logger.warning("report: skipping checkpoint %s in the topic evolution: its "
                           "vocabulary (%s, %d words) is not the model's nor one it grew "
                           "from", c.path, state.vocab_hash, state.n_words)
            continue
        phi = algorithm_from_state(state, take=True).topic_word()
        tw = top_words(phi[topics], own.tokens if own is not None else None, n=n_words)
        cols.append({"step": int(state.step), "docs_seen": int(state.docs_seen),
                     "words": {int(k): [str(w) for w, _ in t] for k, t in zip(topics, tw)}})
    return {"topics": [int(k) for k in topics], "checkpoints": cols}


def gather(model: str, shards: Optional[str] = None, max_docs: int = 2000, top_n: int = 10,
           examples: int = 3, evolution_topics: Optional[List[int]] = None,
           n_evolution: int = 3, unverified: bool = False) -> Dict[str, Any]:
    """Everything the page shows, as JSON-able data (see module docstring); the shards are
    verified against their dataset's manifest (``unverified``: also accept shards none
    lists; :func:`pipelines.ingest.manifest.open_shards`)."""
    algo, state, vocab = load_model(model)
    mdir = model_dir_of(model)
    tokens = vocab.tokens if vocab is not None else None
    K = state.n_topics
    log_path = paths.join(mdir, RUN_LOG_FILE)
    records = read_run_log(log_path) if paths.exists(log_path) else []
    starts = [r for r in records if r.get("event") == "start"]
    ends = [r for r in records if r.get("event") == "end"]
    curve = heldout_curve(records)
    phi = np.asarray(algo.topic_word(), np.float64)
    tops = top_words(phi, tokens, n=top_n)
    labels = read_labels(mdir)
    data: Dict[str, Any] = {
        "model": mdir, "algorithm": state.algorithm, "n_topics": K, "n_words": state.n_words,
        "step": int(state.step), "docs_seen": int(state.docs_seen),
        "vocab_hash": state.vocab_hash, "run": (starts[0].get("run") if starts else None),
        "final_metrics": (ends[-1].get("metrics") if ends else None),
        "elapsed": (ends[-1].get("elapsed") if ends else None),
        "heldout": curve,
        "heldout_note": heldout_note(curve, (starts[-1].get("run") if starts else None),
                                     curve.get("npmi")),
        "topics": [{"topic": k, "label": labels.get(k, ""),
                    "words": [str(w) for w, _ in tops[k]],
                    "weights": [float(x) for _, x in tops[k]]} for k in range(K)],
    }
    shards = shards or training_shards(mdir, state.info)
    size = None
    if shards:
        files = manifest.open_shards(shards, unverified=unverified).files
        dataset.check_vocab_hash(files, accepted_vocab(state, vocab))
        docs = sample_documents(files, max_docs=max_docs)
        theta = np.asarray(algo.infer(docs), np.float64)
        lens = docs.doc_lengths.astype(np.float64)
        size = (lens[:, None] * theta).sum(axis=0) / lens.sum()
        coh = umass_coherence(phi, docs, topn=min(10, state.n_words))["per_topic"]
        titles = docs.titles or (None,) * docs.n_docs
        short = short_ids(docs.doc_ids)
        for k, t in enumerate(data["topics"]):
            t["size"] = float(size[k])
            c = float(coh[k])
            t["coherence"] = c if math.isfinite(c) else None
            best = np.argsort(-theta[:, k], kind="stable")[:examples]
            t["examples"] = [{"doc_id": docs.doc_ids[i], "short_id": short[i],
                              "title": titles[i] or "", "weight": float(theta[i, k]),
                              "words": doc_topic_words(docs, i, phi[k], tokens)}
                             for i in best if theta[i, k] >= MIN_EXAMPLE_SHARE]
        data["sample"] = {"shards": shards, "documents": int(docs.n_docs),
                          "tokens": int(docs.n_tokens)}
        data["health"] = health_data(phi, docs, theta)
    else:
        data["sample"] = None
        data["health"] = None
    if evolution_topics is None:
        order = np.argsort(-size) if size is not None else np.arange(K)
        evolution_topics = [int(k) for k in order[:n_evolution]]
    for k in evolution_topics:
        if not 0 <= k < K:
            raise UsageError("--topic %d is outside the model's topics [0, %d)" % (k, K))
    data["evolution"] = topic_evolution(mdir, vocab, list(evolution_topics),
                                        until_step=int(state.step))
    return data


def short_ids(doc_ids) -> List[str]:
    """Document ids without the directory part they all share (a folder or archive of files
    gives ids that are paths: ``/data/news/sci.space/60804`` -> ``sci.space/60804``)."""
    ids = [str(x) for x in doc_ids]
    if len(ids) < 2:
        return [i.replace("\\", "/").rsplit("/", 1)[-1] for i in ids]
    prefix = os.path.commonprefix([i.replace("\\", "/") for i in ids])
    cut = prefix.rfind("/") + 1
    return [i[cut:] for i in ids]


def doc_topic_words(docs, i: int, phi_k: np.ndarray, tokens, n: int = 8) -> List[str]:
    """A snippet of document ``i`` for topic k: its words with the largest n_dw · φ_kw (the
    words through which the topic claims the document), most first."""
    if tokens is None:
        return []
    w, c = docs.doc(i)
    if len(w) == 0:
        return []
    score = c.astype(np.float64) * phi_k[w]
    top = np.argsort(-score, kind="stable")[:n]
    return [str(tokens[int(w[j])]) for j in top]


def health_data(phi, docs, theta) -> Dict[str, Any]:
    """Topic health of the sample (module docstring); ``theta`` is the model's inference of
    ``docs`` (for the label × topic table)."""
    h = topic_health(phi, docs)
    K = phi.shape[0]
    h["dead"] = [k for k in range(K) if h["topic_shares"][k] < 0.1 / K]
    h["junk"] = [k for k in range(K) if h["npmi_per_topic"][k] < 0]
    labels = docs.labels
    if labels is not None and any(l is not None for l in labels):
        keep = [i for i, l in enumerate(labels) if l is not None]
        pred = np.asarray(theta).argmax(axis=1)[keep]
        names = sorted({labels[i] for i in keep})
        table = np.zeros((len(names), K), np.int64)
        for i, k in zip(keep, pred):
            table[names.index(labels[i]), k] += 1
        h["labels"] = {"names": names, "counts": table.tolist(),
                       "nmi": float(normalized_mutual_information(
                           [labels[i] for i in keep], pred.tolist()))}
    return h


# ----------------------------------------------------------------------------- plots

def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def plot_heldout(curve: Dict[str, List]) -> Optional[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = [(m, [(x, y) for x, y in zip(curve["docs_seen"], curve[m]) if y is not None])
              for m in METRIC_NAMES]
    series = [(m, pts) for m, pts in series if pts]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for m, pts in series:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                label=METRIC_NAMES[m])
    ax.set_xscale("log")
    ax.set_xlabel("documents seen (log scale)")
    ax.set_ylabel("per token")
    ax.set_title("Held-out score vs documents seen")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def plot_topics(topics: List[Dict[str, Any]]) -> Optional[str]:
    if not topics or "size" not in topics[0]:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    K = len(topics)
    ks = np.arange(K)
    fig, axes = plt.subplots(1, 2, figsize=(9, max(2.5, 0.22 * K + 1)), sharey=True)
    names = ["%d %s" % (t["topic"], (t["label"] or " ".join(t["words"][:2])))[:28]
             for t in topics]
    axes[0].barh(ks, [100 * t["size"] for t in topics], color="#4c72b0")
    axes[0].set_xlabel("size (% of tokens)")
    axes[0].set_yticks(ks)
    axes[0].set_yticklabels(names, fontsize=7)
    axes[0].invert_yaxis()
    coh = [t["coherence"] if t.get("coherence") is not None else np.nan for t in topics]
    axes[1].barh(ks, coh, color="#dd8452")
    axes[1].set_xlabel("UMass coherence (top 10 words)")
    for ax in axes:
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle("Topic size and coherence")
    return _png(fig)


def plot_health(h: Optional[Dict[str, Any]]) -> Optional[str]:
    if not h:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    K = len(h["topic_shares"])
    ks = np.arange(K)
    share = 100 * np.asarray(h["topic_shares"])
    npmi = np.asarray(h["npmi_per_topic"])
    fig, axes = plt.subplots(2, 1, figsize=(max(6, 0.09 * K + 3), 5), sharex=True)
    axes[0].bar(ks, share, color=["#c44e52" if k in h["dead"] else "#4c72b0" for k in ks])
    axes[0].axhline(100 * 0.1 / K, color="#c44e52", lw=0.8, ls="--", label="dead below 0.1/K")
    axes[0].set_ylabel("share of tokens (%)")
    axes[0].legend(fontsize=8)
    axes[1].bar(ks, npmi, color=["#c44e52" if k in h["junk"] else "#55a868" for k in ks])
    axes[1].axhline(0, color="#333", lw=0.6)
    axes[1].set_ylabel("NPMI (top 10)")
    axes[1].set_xlabel("topic")
    for ax in axes:
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Topic health: %d dead, %.1f effective of %d, mean NPMI %.3f"
                 % (h["dead_topics"], h["effective_topics"], K, h["npmi"]))
    return _png(fig)


# ----------------------------------------------------------------------------- HTML

def _e(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _fmt(x, f="%.4f") -> str:
    return "n/a" if x is None else f % x


def _summary_html(d: Dict[str, Any]) -> str:
    fm = d.get("final_metrics") or {}
    rows = [("algorithm", d["algorithm"]), ("topics (K)", d["n_topics"]),
            ("vocabulary (V)", d["n_words"]), ("global steps", d["step"]),
            ("documents seen", d["docs_seen"]),
            ("training time (s)", _fmt(d.get("elapsed"), "%.1f")),
            ("held-out completion log likelihood / token",
             _fmt(fm.get("completion_ll_per_token"))),
            ("held-out completion perplexity", _fmt(fm.get("completion_perplexity"), "%.1f")),
            ("held-out per-word bound", _fmt(fm.get("per_word_bound")))]
    run = d.get("run") or {}
    if run.get("shards"):
        rows.append(("training shards", run["shards"]))
    return "\n".join('<tr><th>%s</th><td class="num" id="sum-%d">%s</td></tr>'
                     % (_e(k), i, _e(v)) for i, (k, v) in enumerate(rows))


def _heldout_table(curve) -> str:
    out = []
    for i, s in enumerate(curve["step"]):
        cells = "".join("<td>%s</td>" % _fmt(curve[m][i]) for m in METRIC_NAMES)
        out.append("<tr><td>%d</td><td>%d</td>%s</tr>" % (s, curve["docs_seen"][i], cells))
    return "\n".join(out)


def _evolution_html(ev) -> str:
    if not ev["checkpoints"]:
        return "<p>No checkpoints kept.</p>"
    parts = []
    for k in ev["topics"]:
        head = "".join("<th>step %d<br><small>%d docs</small></th>" % (c["step"], c["docs_seen"])
                       for c in ev["checkpoints"])
        n = max(len(c["words"][k]) for c in ev["checkpoints"])
        body = []
        for r in range(n):
            body.append("<tr>%s</tr>" % "".join(
                "<td>%s</td>" % _e(c["words"][k][r] if r < len(c["words"][k]) else "")
                for c in ev["checkpoints"]))
        parts.append('<h3>Topic %d</h3><div class="scroll"><table class="evo" data-topic="%d">'
                     '<tr>%s</tr>%s</table></div>' % (k, k, head, "\n".join(body)))
    return "\n".join(parts)


def _topics_html(topics) -> str:
    out = []
    for t in topics:
        words = " ".join('<span class="w" title="%.4f">%s</span>' % (p, _e(w))
                         for w, p in zip(t["words"], t["weights"]))
        ex = "".join('<div class="doc"><span class="dt" title="%s">%s</span> '
                     '<small>%.0f%%</small><br><span class="snip">%s</span></div>'
                     % (_e(x["doc_id"]), _e(x["title"] or x.get("short_id") or x["doc_id"]),
                        100 * x["weight"], _e(" ".join(x.get("words", []))))
                     for x in t.get("examples", []))
        out.append('<tr id="topic-%d"><td>%d</td><td>%s</td><td class="num">%s</td>'
                   '<td class="num">%s</td><td>%s</td><td class="ex">%s</td></tr>'
                   % (t["topic"], t["topic"], _e(t["label"]),
                      _fmt(100 * t["size"], "%.1f%%") if "size" in t else "n/a",
                      _fmt(t.get("coherence"), "%.1f"), words, ex))
    return "\n".join(out)


def _health_html(h: Optional[Dict[str, Any]]) -> str:
    if not h:
        return "<p>No documents given (--shards): topic health omitted.</p>"
    rows = [("dead topics (share < 0.1/K)", "%d %s" % (h["dead_topics"], h["dead"] or "")),
            ("junk topics (NPMI < 0)", "%d %s" % (len(h["junk"]), h["junk"] or "")),
            ("effective topics", "%.1f" % h["effective_topics"]),
            ("mean NPMI (top 10)", "%.3f" % h["npmi"]),
            ("topic diversity (top 25)", "%.3f" % h["topic_diversity"])]
    out = ['<table class="summary" id="health">' + "".join(
        '<tr><th>%s</th><td class="num">%s</td></tr>' % (_e(k), _e(v)) for k, v in rows)
        + "</table>", _img(plot_health(h), "topic share and NPMI per topic", "plot-health")]
    lab = h.get("labels")
    if lab:
        K = len(h["topic_shares"])
        used = [k for k in range(K) if any(r[k] for r in lab["counts"])]
        head = "".join("<th>%d</th>" % k for k in used)
        body = "".join("<tr><th>%s</th>%s</tr>" % (_e(n), "".join(
            '<td class="num">%d</td>' % r[k] for k in used))
            for n, r in zip(lab["names"], lab["counts"]))
        out.append('<h3>Labels × topics (documents by most probable topic), NMI %.3f</h3>'
                   '<div class="scroll"><table id="labels"><tr><th>label</th>%s</tr>%s'
                   '</table></div>' % (lab["nmi"], head, body))
    return "\n".join(out)


def _img(uri: Optional[str], alt: str, ident: str) -> str:
    if uri is None:
        return "<p>(no data for this plot)</p>"
    return '<img id="%s" alt="%s" src="%s">' % (ident, _e(alt), uri)


def render(data: Dict[str, Any], template: str = TEMPLATE) -> str:
    with open(template, encoding="utf-8") as f:
        tpl = string.Template(f.read())
    # JSON in a <script> block: no "<", ">" or "&" left literal (no "</script>" breakout)
    payload = (json.dumps(data, allow_nan=False, default=float).replace("<", "\\u003c")
               .replace(">", "\\u003e").replace("&", "\\u0026"))
    sample = data.get("sample")
    try:
        return _substitute(tpl, data, payload, sample)
    except (KeyError, ValueError) as e:
        raise InputError("report template %s: bad or unknown placeholder %s (known: title, "
                         "model, generated, summary_rows, heldout_note, heldout_plot, "
                         "heldout_rows, evolution, topics_plot, topic_rows, health, sample, "
                         "data_json)"
                         % (template, e))


def _substitute(tpl, data, payload, sample) -> str:
    return tpl.substitute(
        title=_e("ldabeam report: %s" % os.path.basename(data["model"].rstrip("/"))),
        model=_e(data["model"]),
        generated=_e(datetime.datetime.now(datetime.timezone.utc)
                     .strftime("%Y-%m-%d %H:%M UTC")),
        summary_rows=_summary_html(data),
        heldout_plot=_img(plot_heldout(data["heldout"]), "held-out score vs documents seen",
                          "plot-heldout"),
        heldout_rows=_heldout_table(data["heldout"]),
        heldout_note="".join('<p class="note">%s</p>' % _e(t)
                             for t in data.get("heldout_note") or []),
        evolution=_evolution_html(data["evolution"]),
        topics_plot=_img(plot_topics(data["topics"]), "topic size and coherence",
                         "plot-topics"),
        topic_rows=_topics_html(data["topics"]),
        health=_health_html(data.get("health")),
        sample=_e("%d documents (%d tokens) of %s" % (sample["documents"], sample["tokens"],
                                                      sample["shards"]) if sample else
                  "no documents given (--shards): sizes, coherence and examples omitted"),
        data_json=payload)


def write_report(model: str, output: str, template: Optional[str] = None,
                 **kw) -> Dict[str, Any]:
    """Gather, render and write the page atomically; returns the data shown."""
    template = template or TEMPLATE
    if not os.path.exists(template):
        raise FileNotFoundError("report template %s does not exist (pass --template)"
                                % template)
    data = gather(model, **kw)
    page = render(data, template)
    # what tells a later `report --overwrite` that the file is a page it may replace
    page = page.rstrip("\n") + "\n" + REPORT_MARK + "\n"
    paths.make_dirs(paths.parent(output))
    paths.write_atomic(output, page.encode("utf-8"))
    return data
