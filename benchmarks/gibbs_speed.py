"""Speed of batch collapsed Gibbs on 20 Newsgroups, K=100, against tomotopy (C++) in the same run.

Corpus: all 18,846 posts of ../shared/data/20news-bydate (headers stripped, tokenised like
../shared/bench/text2uci.py, min df 5, max df 50%), minus 1,000 random held-out posts — about
the 17.8k documents / 2.2 M tokens of ../shared/bench/README.md. α = 0.1, η = 0.01.

We time ``--sweeps`` sweeps after one warm-up sweep (numba compilation) with 1 partition
(exact sequential sampler) and 2 partitions (AD-LDA on 2 threads); tomotopy runs the same
documents (word ids as tokens) with ``--sweeps`` iterations on 1 and 2 workers in a separate
interpreter (``--tomotopy-python``, a venv that has tomotopy: it is not a project dependency).
Reported: tokens per second per sweep (wall) and the ratio ours / tomotopy; CPU seconds too,
since the machine is shared. Target: ratio >= 0.5 at 2 cores.

    python benchmarks/gibbs_speed.py --tomotopy-python /tmp/tpvenv/bin/python
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (benchmarks/common.py)

TOMOTOPY_SCRIPT = r"""
import json, sys, time, numpy as np, tomotopy as tp
d = np.load(sys.argv[1]); K = int(sys.argv[2]); sweeps = int(sys.argv[3]); workers = int(sys.argv[4])
indptr, w, c = d["indptr"], d["word_ids"], d["counts"]
mdl = tp.LDAModel(tw=tp.TermWeight.ONE, min_cf=0, min_df=0, rm_top=0, k=K, alpha=0.1, eta=0.01, seed=1)
mdl.optim_interval = 0
for i in range(len(indptr) - 1):
    mdl.add_doc([str(x) for x in np.repeat(w[indptr[i]:indptr[i+1]], c[indptr[i]:indptr[i+1]])])
mdl.train(1, workers=workers)             # warm-up (model preparation)
t = time.perf_counter(); c0 = time.process_time()
mdl.train(sweeps, workers=workers)
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c0,
                  "ll_per_word": mdl.ll_per_word, "version": tp.__version__, "isa": tp.isa}))
"""


def load_corpus(cache, max_docs=0):
    """The corpus (cached in ``cache``). ``max_docs``: only that many posts, evenly spaced over
    the tar's (sorted) posts, none held out (smoke tests); a cache of another size is rebuilt."""
    from lda_core.docbatch import DocBatch
    if os.path.exists(cache):
        d = np.load(cache)
        if (int(d["max_docs"]) if "max_docs" in d else 0) == max_docs:
            return DocBatch.from_csr(__import__("scipy.sparse").sparse.csr_matrix(
                (d["counts"], d["word_ids"], d["indptr"])))
    from paper_canini import read_posts, to_batch
    if max_docs:
        batch, vocab = to_batch(read_posts(None, max_docs=max_docs))
    else:
        batch, vocab = to_batch(read_posts(None))
        rng = np.random.default_rng(0)
        keep = np.sort(rng.permutation(len(batch.doc_ids))[1000:])
        batch = batch.take(keep)
    extra = {"max_docs": max_docs} if max_docs else {}
    np.savez(cache, indptr=batch.indptr, word_ids=batch.word_ids, counts=batch.counts,
             n_words=len(vocab), **extra)
    return batch


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--sweeps", type=int, default=20)
    ap.add_argument("--tomotopy-python", default="/tmp/tpvenv/bin/python")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(),
                                                    "ldabeam_20news_speed.npz"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gibbs_speed.json"))
    ap.add_argument("--max-docs", type=int, default=0,
                    help="only N posts, evenly spaced over the groups, none held out (smoke "
                         "tests; default: all but 1,000 held out)")
    a = ap.parse_args(argv)
    from lda_core.algorithms.gibbs import CollapsedGibbs
    batch = load_corpus(a.cache, a.max_docs)
    V = int(batch.word_ids.max()) + 1
    n_tok = int(batch.counts.sum())
    print("20 Newsgroups: %d documents, V=%d, %d tokens, K=%d, %d sweeps"
          % (len(batch.doc_ids), V, n_tok, a.topics, a.sweeps), flush=True)
    res = {"docs": len(batch.doc_ids), "V": V, "tokens": n_tok, "K": a.topics,
           "sweeps": a.sweeps, "load_avg_start": os.getloadavg()[0]}
    for parts in (1, 2):
        g = CollapsedGibbs(a.topics, V, alpha=0.1, eta=0.01, n_parts=parts, seed=1,
                           burn_in=10 ** 6)
        g.process(batch)
        g.sweep(1)                                   # warm-up: numba compilation
        t, c0 = time.perf_counter(), time.process_time()
        g.sweep(a.sweeps)
        wall, cpu = time.perf_counter() - t, time.process_time() - c0
        g.check_invariants()
        res["ours_%d" % parts] = {"wall": wall, "cpu": cpu,
                                  "tokens_per_s": n_tok * a.sweeps / wall}
        print("ours, %d partition(s): %.2f s wall, %.2f s CPU, %.2f M tokens/s per sweep"
              % (parts, wall, cpu, n_tok * a.sweeps / wall / 1e6), flush=True)
    if os.path.exists(a.tomotopy_python):
        fd, npz = tempfile.mkstemp(suffix=".npz")
        os.close(fd)
        np.savez(npz, indptr=batch.indptr, word_ids=batch.word_ids, counts=batch.counts)
        for workers in (1, 2):
            out = subprocess.run([a.tomotopy_python, "-c", TOMOTOPY_SCRIPT, npz,
                                  str(a.topics), str(a.sweeps), str(workers)],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r["tokens_per_s"] = n_tok * a.sweeps / r["wall"]
            res["tomotopy_%d" % workers] = r
            print("tomotopy %s, %d worker(s): %.2f s wall, %.2f s CPU, %.2f M tokens/s per sweep"
                  % (r["version"], workers, r["wall"], r["cpu"], r["tokens_per_s"] / 1e6),
                  flush=True)
        os.unlink(npz)
        for n in (1, 2):
            res["ratio_%d" % n] = res["ours_%d" % n]["tokens_per_s"] / \
                res["tomotopy_%d" % n]["tokens_per_s"]
            res["cpu_ratio_%d" % n] = res["tomotopy_%d" % n]["cpu"] / res["ours_%d" % n]["cpu"]
            print("ratio ours/tomotopy at %d core(s): %.2f wall, %.2f per CPU second "
                  "(target >= 0.5 at 2)" % (n, res["ratio_%d" % n], res["cpu_ratio_%d" % n]))
    else:
        ref = 5.9e6
        res["ratio_2_vs_readme_5.9M"] = res["ours_2"]["tokens_per_s"] / ref
        print("tomotopy not available; vs the README's 5.9 M tokens/s: %.2f"
              % res["ratio_2_vs_readme_5.9M"])
    res["load_avg_end"] = os.getloadavg()[0]
    res["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    common.save_results(res, a.out, argv, os.path.basename(__file__))
    print("load average %.1f -> %.1f" % (res["load_avg_start"], res["load_avg_end"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
