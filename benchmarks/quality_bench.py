#!/usr/bin/env python3
"""Topic quality (dead topics, effective topics, NPMI, held-out LL) of ours vs gensim.

Every topic-word matrix is judged by the shared harness's own evaluator
(``../shared/bench/bench_peers.py``: ``heldout_completion`` and ``quality_extras``, imported,
never a private variant): document-completion held-out LL/token, dead topics (share of a fixed
sample of training tokens below 0.1/K), effective topics (exp entropy of the shares), NPMI of
the top 10 words, topic diversity.

Two parts (``--corpora``):

* ``20news`` — the protocol of ../shared/bench/README.md (benchmarks/prepare_20news.py):
  K = 100, α = 0.1, η = 0.01, S = 256, κ = 0.7, τ0 = 64, one pass. Ours is ``ldabeam train``
  (online VB, in-process runner, child process, training seconds from its run log), gensim
  LdaModel and LdaMulticore(workers=2) are trained by the harness's own ``_child`` (exact
  harness arguments); one record per seed, the means over ``--seeds`` are compared:
  dead ≤ 5, LL ≥ gensim LdaModel's, NPMI ≥ gensim's, LdaMulticore / ours wall ≥ 5.
* ``kos``, ``nips``, ``reuters`` (``../shared/data``; Reuters-21578 converted from its SGML
  by :func:`reuters_to_uci` with the harness's ``text2uci.py``; split by ``bench_peers.py
  prepare``, seed 0) at each
  ``--K``: every VB-family algorithm and SCVB0 trained in this process (lda_core directly, the
  same minibatch order every pass, S = 256, the protocol's α, η, κ, τ0) for passes until the
  held-out score improves by less than ``--min-gain`` nats/token (at most ``--max-passes``);
  gensim LdaModel with the same settings and the passes online VB used. Targets: dead ≤ 5 % of
  K for every algorithm, online VB's LL ≥ gensim's.

Ratios and counts are printed (the machine is shared: times are noisy); the records go to
``benchmarks/results/quality_bench.json`` via ``common.save_results``.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402

SMALL = {"kos": ("uci-bow-kos", "docword.kos.txt.gz", "vocab.kos.txt"),
         "nips": ("uci-bow-nips", "docword.nips.txt.gz", "vocab.nips.txt"),
         # converted from the SGML by reuters_to_uci (title + body of every <REUTERS> element)
         "reuters": ("reuters21578", None, None)}
IN_PROCESS = ("online-vb", "batch-vb", "sparse-gibbs-vb", "scvb0")


def judge(bench, data, phi) -> dict:
    """The harness's evaluator on one topic-word matrix (``data`` = load_corpus's dict)."""
    phi = np.asarray(phi, np.float64)
    ll, _ = bench.heldout_completion(phi, data["Xa"], data["Xb"])
    rec = {"heldout_ll_per_token": float(ll)}
    rec.update(bench.quality_extras(phi, data["Xtr"]))
    return rec


def load_corpus(bench, path: str) -> dict:
    import scipy.sparse as sp
    Xtr, Xte, vocab = bench.load_data(path)
    return {"Xtr": Xtr, "vocab": vocab, "path": path,
            "Xa": sp.load_npz(os.path.join(path, "test_a.npz")).tocsr(),
            "Xb": sp.load_npz(os.path.join(path, "test_b.npz")).tocsr()}


def run_20news(a, bench) -> dict:
    from benchmarks.prepare_20news import prepare
    from benchmarks.train_bench import train_ours, train_peer
    prepare(a.cache)
    data = load_corpus(bench, os.path.join(a.cache, "bench"))
    rows = []
    for seed in range(a.seeds):
        runs = [train_ours(a.cache, seed)]
        if not a.skip_peers:
            runs.append(train_peer(a.cache, "gensim_lda", common.PYTHON, 1, seed))
            runs.append(train_peer(a.cache, "gensim_multicore", common.PYTHON, 2, seed))
        for r, name in zip(runs, ("ours online-vb", "gensim LdaModel", "gensim LdaMulticore")):
            rec = {"corpus": "20news", "K": common.K, "seed": seed, "system": name,
                   "passes": 1, "train_s": r["train_s"]}
            rec.update(judge(bench, data, r["phi"]))
            rows.append(rec)
            print(json.dumps(rec), flush=True)
    return summarise(rows, "20news", common.K, ratio_ref="gensim LdaMulticore")


def summarise(rows, corpus, K, ratio_ref=None) -> dict:
    out = {"corpus": corpus, "K": K, "systems": {}}
    for name in sorted({r["system"] for r in rows if r["corpus"] == corpus and r["K"] == K}):
        rs = [r for r in rows if r["corpus"] == corpus and r["K"] == K and r["system"] == name]
        m = {k: float(np.mean([r[k] for r in rs])) for k in
             ("heldout_ll_per_token", "dead_topics", "effective_topics", "npmi",
              "topic_diversity", "train_s", "passes")}
        m["ll_std"] = float(np.std([r["heldout_ll_per_token"] for r in rs]))
        m["seeds"] = len(rs)
        out["systems"][name] = m
    s = out["systems"]
    if ratio_ref and ratio_ref in s and "ours online-vb" in s:
        # paired by seed (the two ran back to back, under about the same machine load)
        t = {(r["system"], r["seed"]): r["train_s"] for r in rows
             if r["corpus"] == corpus and r["K"] == K}
        ratios = [t[(ratio_ref, sd)] / t[("ours online-vb", sd)] for (name, sd) in t
                  if name == ratio_ref and ("ours online-vb", sd) in t]
        key = "speedup_vs_" + ratio_ref.replace(" ", "_")
        out[key] = float(np.mean(ratios))
        out[key + "_per_seed"] = [float(x) for x in ratios]
    return out


def reuters_to_uci(src: str, out: str) -> None:
    """Reuters-21578 (``src``: the reut2-*.sgm files) as UCI docword.txt + vocab.txt: every
    ``<REUTERS>`` element with a non-empty title or body is one document (title + body text,
    SGML character references removed), written one file per document and converted by the
    harness's own ``text2uci.py`` (its tokeniser, stop words, --min-df 5 --max-df-frac 0.5,
    as for 20 Newsgroups)."""
    import glob
    import re
    import tempfile
    if os.path.exists(os.path.join(out, "vocab.txt")):
        return
    files = sorted(glob.glob(os.path.join(src, "reut2-*.sgm")))
    if not files:
        raise SystemExit("%s holds no reut2-*.sgm (see ../shared/data/MANIFEST.md)" % src)
    field = lambda tag, text: " ".join(re.findall(r"<%s>(.*?)</%s>" % (tag, tag), text, re.S))
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for f in files:
            with open(f, encoding="latin-1") as fh:
                for el in re.findall(r"<REUTERS.*?</REUTERS>", fh.read(), re.S):
                    text = re.sub(r"&#\d+;|&lt;|&gt;|&amp;", " ",
                                  field("TITLE", el) + "\n" + field("BODY", el))
                    if text.strip():
                        with open(os.path.join(tmp, "%05d.txt" % n), "w") as o:
                            o.write(text)
                        n += 1
        common.run([common.PYTHON, common.TEXT2UCI, "--root", tmp, "--out", out,
                    "--min-df", 5, "--max-df-frac", 0.5])


def prepare_small(bench, name: str, cache: str) -> str:
    sub, docword, vocab = SMALL[name]
    src = os.path.join(common.SHARED, "data", sub)
    out = os.path.join(cache, name)
    if docword is None:       # reuters: converted to UCI first
        src = os.path.join(cache, name + "-uci")
        reuters_to_uci(os.path.join(common.SHARED, "data", sub), src)
        docword, vocab = "docword.txt", "vocab.txt"
    if not os.path.exists(os.path.join(out, "test_b.npz")):
        if not os.path.exists(os.path.join(src, docword)):
            raise SystemExit("%s is absent (see ../shared/data/MANIFEST.md)" % src)
        common.run([common.PYTHON, common.BENCH_PEERS, "prepare", "--docword",
                    os.path.join(src, docword), "--vocab", os.path.join(src, vocab),
                    "--out", out, "--seed", "0"], quiet=True)
    return out


def make_algorithm(name: str, K: int, X, seed: int):
    """``name`` with the protocol's α, η (and κ, τ0, S for the online VB family); SCVB0 keeps
    its own step-size schedules (lda_core.algorithms.scvb0) and is given the corpus size in tokens."""
    from lda_core.algorithms.algorithm import algorithm_class
    D, V = X.shape
    kw = dict(alpha=common.ALPHA, eta=common.ETA, seed=seed)
    if name == "scvb0":
        kw.update(corpus_tokens=int(X.sum()))
    else:
        kw.update(kappa=common.KAPPA, tau0=common.TAU0, corpus_size=D)
    return algorithm_class(name)(K, V, **kw)


def train_in_process(name, data, K, seed, max_passes, min_gain, bench, passes=None):
    """Train ``name`` pass by pass on the training split (fixed seeded order, S = 256) until
    the held-out score gains less than ``min_gain`` (or exactly ``passes`` passes)."""
    from lda_core.docbatch import DocBatch
    X = data["Xtr"].tocsr()
    D, V = X.shape
    order = np.random.RandomState(seed).permutation(D)
    Xs = X[order]
    Xs.data = np.round(Xs.data)
    batches = [DocBatch.from_csr(Xs[s:s + common.BATCH],
                                 doc_ids=[str(i) for i in order[s:s + common.BATCH]])
               for s in range(0, D, common.BATCH)]
    from lda_core.training.pass_stop import PassStop
    from lda_core.training.in_memory import fit_batch_vb
    alg = make_algorithm(name, K, X, seed)
    rule = PassStop(min_gain, max_passes)     # the rule of `ldabeam train --passes auto`
    best, best_phi, used, elapsed, hist = -np.inf, None, 0, 0.0, []
    for p in range(passes or max_passes):
        t0 = time.perf_counter()
        if name == "batch-vb":
            fit_batch_vb(alg, batches, max_passes=1)
        else:
            for b in batches:
                alg.global_step(alg.local_step(b))
        elapsed += time.perf_counter() - t0
        phi = alg.topic_word()
        ll, _ = bench.heldout_completion(phi, data["Xa"], data["Xb"])
        hist.append(float(ll))
        if ll > best or passes is not None:   # fixed passes: the last pass's topics
            best, best_phi, used = ll, phi, p + 1
        if passes is None and rule.add(ll):
            break
    return best_phi, used, elapsed, hist


def train_gensim(data, K, seed, passes):
    """gensim LdaModel with the harness's settings (bench_peers.train_system) and ``passes``."""
    from gensim.models import LdaModel
    bench = common.bench_module()
    corpus = bench.csr_to_bow(data["Xtr"])
    t0 = time.perf_counter()
    m = LdaModel(corpus=corpus, id2word={i: w for i, w in enumerate(data["vocab"])},
                 num_topics=K, chunksize=common.BATCH, passes=passes, alpha=common.ALPHA,
                 eta=common.ETA, decay=common.KAPPA, offset=common.TAU0, eval_every=None,
                 random_state=seed, update_every=1)
    return m.get_topics(), time.perf_counter() - t0


def run_small(a, bench, name, K) -> dict:
    data = load_corpus(bench, prepare_small(bench, name, os.path.join(common.CACHE, "quality")))
    rows = []
    for seed in range(a.seeds):
        vb_passes = None
        for alg in a.algorithms:
            phi, used, secs, hist = train_in_process(alg, data, K, seed, a.max_passes,
                                                     a.min_gain, bench)
            if alg == "online-vb":
                vb_passes = used
            rec = {"corpus": name, "K": K, "seed": seed, "system": "ours " + alg,
                   "passes": used, "train_s": secs, "ll_by_pass": hist}
            rec.update(judge(bench, data, phi))
            rows.append(rec)
            print(json.dumps(rec), flush=True)
        if not a.skip_peers and vb_passes:
            phi, secs = train_gensim(data, K, seed, vb_passes)
            rec = {"corpus": name, "K": K, "seed": seed, "system": "gensim LdaModel",
                   "passes": vb_passes, "train_s": secs}
            rec.update(judge(bench, data, phi))
            rows.append(rec)
            print(json.dumps(rec), flush=True)
    return summarise(rows, name, K)


def print_summary(s: dict) -> None:
    print("\n%s, K = %d" % (s["corpus"], s["K"]))
    print("| system | seeds | passes | held-out LL/token (sd) | dead | effective | NPMI | "
          "diversity |")
    print("|---|---|---|---|---|---|---|---|")
    for name, m in s["systems"].items():
        print("| %s | %d | %.1f | %.4f (%.4f) | %.1f | %.1f | %.3f | %.3f |" % (
            name, m["seeds"], m["passes"], m["heldout_ll_per_token"], m["ll_std"],
            m["dead_topics"],
            m["effective_topics"], m["npmi"], m["topic_diversity"]))
    for k, v in s.items():
        if k.startswith("speedup") and not k.endswith("per_seed"):
            print("%s = %.2fx (wall, mean of the per-seed ratios %s)"
                  % (k, v, ", ".join("%.2f" % x for x in s[k + "_per_seed"])))


def targets(summaries) -> list:
    """(target, value, met) for the issue's targets that this run measured."""
    out = []
    for s in summaries:
        sy = s["systems"]
        ours = sy.get("ours online-vb")
        g = sy.get("gensim LdaModel")
        if s["corpus"] == "20news" and ours:
            out.append(("20news dead topics <= 5", ours["dead_topics"],
                        ours["dead_topics"] <= 5))
            if g:
                out.append(("20news LL >= gensim LdaModel (%.4f)" % g["heldout_ll_per_token"],
                            ours["heldout_ll_per_token"],
                            ours["heldout_ll_per_token"] >= g["heldout_ll_per_token"]))
                out.append(("20news NPMI >= gensim LdaModel (%.3f)" % g["npmi"], ours["npmi"],
                            ours["npmi"] >= g["npmi"]))
            sp = s.get("speedup_vs_gensim_LdaMulticore")
            if sp is not None:
                out.append(("20news LdaMulticore / ours wall >= 5", sp, sp >= 5))
        elif s["corpus"] != "20news":
            for name, m in sy.items():
                if name.startswith("ours"):
                    out.append(("%s K=%d %s dead <= %.1f" % (s["corpus"], s["K"], name,
                                                             0.05 * s["K"]),
                                m["dead_topics"], m["dead_topics"] <= 0.05 * s["K"]))
            if ours and g:
                out.append(("%s K=%d online-vb LL >= gensim (%.4f)"
                            % (s["corpus"], s["K"], g["heldout_ll_per_token"]),
                            ours["heldout_ll_per_token"],
                            ours["heldout_ll_per_token"] >= g["heldout_ll_per_token"]))
    return out


def main(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--corpora", default="20news,kos,nips",
                   help="comma-separated: 20news, kos, nips, reuters")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (means are reported)")
    p.add_argument("--K", default="50,100", help="topics for kos/nips (20news uses 100)")
    p.add_argument("--algorithms", default=",".join(IN_PROCESS),
                   help="in-process algorithms for kos/nips")
    p.add_argument("--max-passes", type=int, default=20)
    p.add_argument("--min-gain", type=float, default=0.005,
                   help="stop when a pass improves the held-out LL/token by less than this")
    p.add_argument("--skip-peers", action="store_true")
    p.add_argument("--summarise", metavar="LOG", nargs="+", default=None,
                   help="train nothing: summarise the JSON records printed by earlier runs "
                        "of this script (e.g. a run stopped before its last seed)")
    p.add_argument("--json", default=os.path.join(common.REPO, "benchmarks", "results",
                                                  "quality_bench.json"))
    a = p.parse_args(argv)
    a.algorithms = [x for x in a.algorithms.split(",") if x]
    if a.summarise:
        return summarise_logs(a)
    bench = common.bench_module()
    summaries = []
    for corpus in [c for c in a.corpora.split(",") if c]:
        if corpus == "20news":
            summaries.append(run_20news(a, bench))
        elif corpus in SMALL:
            for K in [int(k) for k in a.K.split(",")]:
                summaries.append(run_small(a, bench, corpus, K))
        else:
            raise SystemExit("unknown corpus %r (choose from 20news, %s)"
                             % (corpus, ", ".join(SMALL)))
        print_summary(summaries[-1])
    report_targets(summaries, a, argv)


def summarise_logs(a) -> None:
    rows = []
    for path in a.summarise:
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.startswith("{\"corpus\"")]
    summaries = []
    for corpus, K in sorted({(r["corpus"], r["K"]) for r in rows}):
        ref = "gensim LdaMulticore" if corpus == "20news" else None
        summaries.append(summarise(rows, corpus, K, ratio_ref=ref))
        print_summary(summaries[-1])
    report_targets(summaries, a, None, records=rows)


def report_targets(summaries, a, argv, records=None) -> None:
    tg = targets(summaries)
    print("\n| target | ours | met |\n|---|---|---|")
    for name, v, met in tg:
        print("| %s | %.4g | %s |" % (name, v, "yes" if met else "NO"))
    with open("/proc/loadavg") as f:
        print("load average at the end: %s (2 cores, shared)" % f.read().split()[0])
    if a.json:
        res = {"summaries": summaries,
               "targets": [{"target": n, "value": v, "met": bool(m)} for n, v, m in tg]}
        if records is not None:
            res["records"] = records
        common.save_results(res, a.json, argv)


if __name__ == "__main__":
    main()
