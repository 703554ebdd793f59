"""Canini, Shi & Griffiths (2009) evaluation on 20 Newsgroups subsets: o-LDA, incremental Gibbs and
the particle filter against batch Gibbs, NMI of argmax-topic clusters on seen and held-out documents.

Data: 20 Newsgroups from ../shared/data/20news-bydate/20news-bydate.tar.gz as DocBatch + labels.

Read with tarfile (no unpacking), headers stripped (everything before the first blank line),
tokenised like ../shared/bench/text2uci.py: gensim ``simple_preprocess`` (lower case,
alphabetic, 2..15 characters) minus gensim's STOPWORDS; vocabulary = words with document
frequency >= min_df and <= max_df_frac * D over the documents selected.

Protocol (paper §5.2): per dataset and seed, the documents are put in a random stream order
(seed), 10% are held out at random, the first 10% of the stream initialise every online
algorithm from ONE batch Gibbs sample (``--init-sweeps`` sweeps), then o-LDA, incremental Gibbs
(|R(i)| = 4, uniform) and the particle filter (100 particles; ESS threshold 20 and |R(i)| = 30
for the 3-category sets, 10 and 10 for subset-20) consume the rest of the stream. At
``--trace-points`` evenly spaced points the NMI of the argmax-topic clustering is measured on
the documents seen (counts n_dk of the sample; the PF's highest-weight particle) and on the
held-out documents (θ folded in with the current φ, argmax). Batch Gibbs on the whole training
stream (``--batch-sweeps``) is the reference line. T = number of groups, α = β = 0.1.
Times are the thread CPU seconds of ``process`` over the stream (excluding the shared batch
initialisation and the evaluations); reported as multiples of o-LDA's.
Differences from the paper: one chain per seed for o-LDA / incremental Gibbs (the paper ran
100 and kept the sample of highest posterior); held-out documents are folded in with φ fixed
rather than run through the sampler; the word order inside a document is a seeded shuffle
(shards are bags of words).

    python benchmarks/paper_canini.py --seeds 10 --jobs 2      # writes benchmarks/results/canini_*
"""
import argparse
import collections
import csv
import json
import multiprocessing as mp
import os
import sys
import tarfile
import time

import numpy as np

from lda_core.docbatch import DocBatch

HERE = os.path.dirname(os.path.abspath(__file__))
TAR = os.environ.get("LDABEAM_NEWS20_TAR", os.path.join(
    os.path.dirname(os.path.dirname(HERE)), "shared", "data", "20news-bydate",
    "20news-bydate.tar.gz"))


def evenly_spaced(items, n):
    """``n`` of ``items`` evenly spaced (all of them when n is 0 or not smaller)."""
    if not n or n >= len(items):
        return list(items)
    step = len(items) / float(n)
    return [items[int(i * step)] for i in range(n)]


def read_posts(groups=None, tar_path=TAR, max_docs=0):
    """[(split, group, name, tokens)] sorted by (split, group, name), for the given groups
    (None = all); ``max_docs``: that many of them, evenly spaced (tokenised after the choice)."""
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.utils import simple_preprocess
    out = []
    with tarfile.open(tar_path, "r:gz") as tf:
        for m in tf:
            if not m.isfile():
                continue
            parts = m.name.split("/")
            if len(parts) != 3:
                continue
            split, group, name = parts
            if groups is not None and group not in groups:
                continue
            t = tf.extractfile(m).read().decode("latin-1")
            if "\n\n" in t:
                t = t.split("\n\n", 1)[1]
            out.append((split, group, name, t))
    out.sort(key=lambda r: (r[0], r[1], r[2]))
    return [(split, group, name, [w for w in simple_preprocess(t) if w not in STOPWORDS])
            for split, group, name, t in evenly_spaced(out, max_docs)]


def to_batch(posts, min_df=5, max_df_frac=0.5):
    """(DocBatch with labels, vocabulary list); documents left empty by the vocabulary are
    dropped."""
    df = collections.Counter(w for p in posts for w in set(p[3]))
    D = len(posts)
    vocab = sorted(w for w, c in df.items() if min_df <= c <= max_df_frac * D)
    idx = {w: i for i, w in enumerate(vocab)}
    rows, ids, labels = [], [], []
    for split, group, name, toks in posts:
        c = collections.Counter(idx[w] for w in toks if w in idx)
        if not c:
            continue
        w = np.array(sorted(c), np.int32)
        rows.append((w, np.array([c[i] for i in w], np.int32)))
        ids.append("%s/%s/%s" % (split, group, name))
        labels.append(group)
    return DocBatch.from_rows(rows, doc_ids=ids, labels=labels), vocab


DATASETS = {
    "diff-3": ["alt.atheism", "rec.sport.baseball", "sci.space"],
    "sim-3": ["comp.graphics", "comp.os.ms-windows.misc", "comp.windows.x"],
    "rel-3": ["talk.politics.misc", "talk.politics.guns", "talk.politics.mideast"],
    "subset-20": None,   # 100 documents from each of the 20 groups
}
PF_SETTINGS = {3: dict(ess_threshold=20.0, n_rejuv=30), 20: dict(ess_threshold=10.0, n_rejuv=10)}
ALGOS = ["o-lda", "incremental-gibbs", "particle-filter"]


def build_dataset(name, min_df=5, max_df_frac=0.5, max_docs=0):
    """``max_docs``: keep that many of the dataset's posts, evenly spaced over its (sorted)
    posts so every group stays in, before the vocabulary is built (smoke tests; 0: all)."""
    groups = DATASETS[name]
    posts = read_posts(groups, max_docs=max_docs if groups is not None else 0)
    if groups is None:          # subset-20: 100 posts per group, chosen with a fixed seed
        rng = np.random.default_rng(20)
        by = collections.defaultdict(list)
        for p in posts:
            by[p[1]].append(p)
        posts = []
        for g in sorted(by):
            idx = rng.choice(len(by[g]), 100, replace=False)
            posts += [by[g][i] for i in sorted(idx)]
        posts = evenly_spaced(posts, max_docs)
    return to_batch(posts, min_df=min_df, max_df_frac=max_df_frac)


def _nmi(labels, clusters):
    from lda_core.evaluation.topic_quality import normalized_mutual_information
    return normalized_mutual_information(list(labels), list(clusters))


def run_one(task):
    """All algorithms on one (dataset, seed): returns a list of trace rows."""
    (name, batch, vocab_size, seed, args) = task
    sys.path.insert(0, os.path.dirname(HERE))
    from lda_core.algorithms.gibbs import CollapsedGibbs
    from lda_core.algorithms.online_samplers import IncrementalGibbs, OLDA
    from lda_core.algorithms.particle_filter import ParticleFilter
    labels = np.array(batch.labels)
    K = len(set(labels))
    D = len(batch.doc_ids)
    rng = np.random.default_rng(1000 + seed)
    perm = rng.permutation(D)
    n_held = int(round(0.1 * D))
    held = batch.take(np.sort(perm[:n_held]))
    stream_idx = perm[n_held:]
    stream = batch.take(stream_idx)
    y_stream, y_held = labels[stream_idx], np.array(held.labels)
    n_stream = len(stream_idx)
    n_init = int(np.ceil(0.1 * n_stream))
    alpha = beta = 0.1
    common = dict(alpha=alpha, eta=beta, seed=seed)
    rows = []
    # one batch Gibbs sample on the first 10%: the shared start
    init = stream.take(np.arange(n_init))
    g0 = CollapsedGibbs(K, vocab_size, alpha=alpha, eta=beta, seed=seed)
    g0.fit(init, sweeps=args.init_sweeps)
    z0 = g0.assignments.copy()
    cuts = np.unique(np.linspace(n_init, n_stream, args.trace_points + 1).round().astype(int))
    pf_set = PF_SETTINGS[3 if K <= 3 else 20]
    for algo in ALGOS:
        if algo == "particle-filter" and seed >= args.pf_seeds:
            continue
        if algo == "o-lda":
            s = OLDA(K, vocab_size, init_docs=n_init, **common)
        elif algo == "incremental-gibbs":
            s = IncrementalGibbs(K, vocab_size, n_rejuv=4, **common)
        else:
            s = ParticleFilter(K, vocab_size, n_particles=args.particles, **pf_set, **common)
        s.initialise(init, z0)
        cpu = 0.0
        for a, b in zip(cuts[:-1], cuts[1:]):
            t = time.thread_time()
            s.process(stream.take(np.arange(a, b)))
            cpu += time.thread_time() - t
            seen = np.argmax(s.doc_topic_counts(), axis=1)
            ho = np.argmax(s.infer(held), axis=1)
            rows.append(dict(dataset=name, seed=seed, algorithm=algo, docs_seen=int(b),
                             fraction=round(b / n_stream, 4),
                             nmi_seen=_nmi(y_stream[:b], seen), nmi_heldout=_nmi(y_held, ho),
                             cpu_s=cpu,
                             extra=json.dumps({"resamples": s.n_resamples,
                                               "max_depth": s.max_depth,
                                               "tree_entries": s.store.n_entries()})
                             if algo == "particle-filter" else ""))
    # batch Gibbs reference on the whole training stream
    t = time.thread_time()
    gb = CollapsedGibbs(K, vocab_size, alpha=alpha, eta=beta, seed=seed)
    gb.fit(stream, sweeps=args.batch_sweeps)
    cpu = time.thread_time() - t
    rows.append(dict(dataset=name, seed=seed, algorithm="batch-gibbs", docs_seen=n_stream,
                     fraction=1.0, nmi_seen=_nmi(y_stream, np.argmax(gb.doc_topic_counts(), 1)),
                     nmi_heldout=_nmi(y_held, np.argmax(gb.infer(held), 1)), cpu_s=cpu, extra=""))
    return rows


FIELDS = ["dataset", "seed", "algorithm", "docs_seen", "fraction", "nmi_seen", "nmi_heldout",
          "cpu_s", "extra"]


def summarise(rows):
    """Final-point mean ± sd per (dataset, algorithm), time as a multiple of o-LDA."""
    out = []
    for ds in DATASETS:
        finals = collections.defaultdict(list)
        for r in rows:
            if r["dataset"] == ds and float(r["fraction"]) >= 1.0:
                finals[r["algorithm"]].append(r)
        if not finals:
            continue
        olda_cpu = {int(r["seed"]): float(r["cpu_s"]) for r in finals.get("o-lda", [])}
        for algo in ALGOS + ["batch-gibbs"]:
            rs = finals.get(algo, [])
            if not rs:
                continue
            seen = np.array([float(r["nmi_seen"]) for r in rs])
            held = np.array([float(r["nmi_heldout"]) for r in rs])
            mean_held_trace = np.array([np.mean([float(x["nmi_heldout"]) for x in rows
                                                 if x["dataset"] == ds and x["algorithm"] == algo
                                                 and int(x["seed"]) == int(r["seed"])])
                                        for r in rs])
            cpu = np.array([float(r["cpu_s"]) for r in rs])
            ratio = np.array([float(r["cpu_s"]) / olda_cpu[int(r["seed"])] for r in rs
                              if int(r["seed"]) in olda_cpu and olda_cpu[int(r["seed"])] > 0])
            out.append(dict(dataset=ds, algorithm=algo, n_seeds=len(rs),
                            nmi_seen_mean=seen.mean(),
                            nmi_seen_sd=seen.std(ddof=1) if len(rs) > 1 else 0.0,
                            nmi_heldout_mean=held.mean(),
                            nmi_heldout_sd=held.std(ddof=1) if len(rs) > 1 else 0.0,
                            nmi_heldout_trace_mean=mean_held_trace.mean(),
                            cpu_s_mean=cpu.mean(),
                            time_x_olda=ratio.mean() if len(ratio) else float("nan")))
    return out


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dss = [d for d in DATASETS if any(r["dataset"] == d for r in rows)]
    fig, axes = plt.subplots(2, len(dss), figsize=(4.2 * len(dss), 7), squeeze=False)
    colors = {"o-lda": "tab:blue", "incremental-gibbs": "tab:orange",
              "particle-filter": "tab:green", "batch-gibbs": "k"}
    for j, ds in enumerate(dss):
        for i, key in enumerate(["nmi_seen", "nmi_heldout"]):
            ax = axes[i, j]
            for algo in ALGOS:
                rs = [r for r in rows if r["dataset"] == ds and r["algorithm"] == algo]
                if not rs:
                    continue
                fr = sorted(set(float(r["fraction"]) for r in rs))
                vals = [[float(r[key]) for r in rs if float(r["fraction"]) == f] for f in fr]
                m = np.array([np.mean(v) for v in vals])
                sd = np.array([np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in vals])
                ax.plot(fr, m, color=colors[algo], label="%s (n=%d)" % (algo, len(vals[-1])))
                ax.fill_between(fr, m - sd, m + sd, color=colors[algo], alpha=0.2)
            bg = [float(r[key]) for r in rows if r["dataset"] == ds
                  and r["algorithm"] == "batch-gibbs"]
            if bg:
                ax.axhline(np.mean(bg), color="k", ls="--", label="batch Gibbs")
            ax.set_title("%s: NMI %s" % (ds, "seen" if i == 0 else "held-out"))
            ax.set_xlabel("fraction of the training stream")
            if j == 0:
                ax.set_ylabel("NMI")
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed-start", type=int, default=0,
                    help="run seeds seed-start..seeds-1 (to split a run over processes)")
    ap.add_argument("--pf-seeds", type=int, default=None,
                    help="run the particle filter on the first N seeds only (default: all)")
    ap.add_argument("--particles", type=int, default=100)
    ap.add_argument("--trace-points", type=int, default=10)
    ap.add_argument("--init-sweeps", type=int, default=200)
    ap.add_argument("--batch-sweeps", type=int, default=300)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--max-docs", type=int, default=0,
                    help="use N posts of each dataset, evenly spaced over its groups (smoke "
                         "tests; default: all)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--tag", default="canini")
    ap.add_argument("--summarise", nargs="+", metavar="TRACES_CSV",
                    help="only merge these trace CSVs (e.g. of runs split by dataset) into "
                         "TAG_traces.csv / TAG_summary.csv / TAG_traces.png")
    args = ap.parse_args(argv)
    if args.summarise:
        os.makedirs(args.out, exist_ok=True)
        rows, seen = [], set()
        for path in args.summarise:
            with open(path, newline="") as f:
                for r in csv.DictReader(f):
                    key = (r["dataset"], r["seed"], r["algorithm"], r["docs_seen"])
                    if key not in seen:          # the first file listed wins
                        seen.add(key)
                        rows.append(r)
        trace_path = os.path.join(args.out, "%s_traces.csv" % args.tag)
        if os.path.abspath(trace_path) not in [os.path.abspath(p) for p in args.summarise]:
            with open(trace_path, "w", newline="") as f:
                w = csv.DictWriter(f, FIELDS)
                w.writeheader()
                w.writerows(rows)
        return report(rows, args)
    if args.pf_seeds is None:
        args.pf_seeds = args.seeds
    os.makedirs(args.out, exist_ok=True)
    tasks = []
    for ds in args.datasets:
        t = time.time()
        batch, vocab = build_dataset(ds, max_docs=args.max_docs)
        print("%s: %d documents, V=%d, %d tokens, %d groups (%.1f s to read)"
              % (ds, len(batch.doc_ids), len(vocab), int(batch.counts.sum()),
                 len(set(batch.labels)), time.time() - t), flush=True)
        tasks += [(ds, batch, len(vocab), s, args) for s in range(args.seed_start, args.seeds)]
    if args.pf_seeds < args.seeds:
        print("particle filter on %d of %d seeds (--pf-seeds)" % (args.pf_seeds, args.seeds))
    trace_path = os.path.join(args.out, "%s_traces.csv" % args.tag)
    rows = []
    t0 = time.time()
    with open(trace_path, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        with mp.get_context("fork").Pool(args.jobs) as pool:
            for res in pool.imap_unordered(run_one, tasks):
                for r in res:
                    w.writerow(r)
                rows += res
                f.flush()
                fin = [r for r in res if float(r["fraction"]) >= 1.0]
                print("[%6.0f s] %s seed %d: " % (time.time() - t0, res[0]["dataset"],
                                                  res[0]["seed"])
                      + "; ".join("%s seen %.3f held %.3f cpu %.1fs"
                                  % (r["algorithm"], r["nmi_seen"], r["nmi_heldout"], r["cpu_s"])
                                  for r in fin), flush=True)
    return report(rows, args)


def report(rows, args):
    summ = summarise(rows)
    trace_path = os.path.join(args.out, "%s_traces.csv" % args.tag)
    sum_path = os.path.join(args.out, "%s_summary.csv" % args.tag)
    with open(sum_path, "w", newline="") as f:
        w = csv.DictWriter(f, list(summ[0]))
        w.writeheader()
        w.writerows(summ)
    print("\nfinal NMI (mean ± sd over seeds), CPU time as a multiple of o-LDA")
    print("%-10s %-18s %5s %15s %15s %9s %8s" % ("dataset", "algorithm", "seeds", "NMI seen",
                                                 "NMI held-out", "cpu s", "x o-LDA"))
    for s in summ:
        print("%-10s %-18s %5d %7.3f ± %5.3f %7.3f ± %5.3f %9.2f %8.2f"
              % (s["dataset"], s["algorithm"], s["n_seeds"], s["nmi_seen_mean"],
                 s["nmi_seen_sd"], s["nmi_heldout_mean"], s["nmi_heldout_sd"], s["cpu_s_mean"],
                 s["time_x_olda"]))
    png = os.path.join(args.out, "%s_traces.png" % args.tag)
    plot(rows, png)
    print("wrote", trace_path, sum_path, png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
