"""Compile every numba kernel once, at image build time, into ``NUMBA_CACHE_DIR``.

Run by the Dockerfile (``RUN python /template/warmup.py``) after the package is installed and
with ``NUMBA_CACHE_DIR`` and ``NUMBA_CPU_NAME=generic`` set, so the machine code lands in the
image and every worker process loads it instead of compiling (a few seconds per kernel per
process otherwise). ``NUMBA_CPU_NAME=generic`` compiles for a generic x86-64 target: the
cache is then valid on whatever CPU type the workers get (numba ignores cache entries built
for another CPU). Exits non-zero if the cache directory ends up empty.

    python warmup.py [ALGORITHM ...]     (default: every local/global-step algorithm)
"""
import logging
import os
import sys


ALGORITHMS = ("online-vb", "batch-vb", "scvb0", "sparse-gibbs-vb")


def main(argv=None) -> int:
    names = list(sys.argv[1:] if argv is None else argv) or list(ALGORITHMS)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cache = os.environ.get("NUMBA_CACHE_DIR")
    if not cache:
        print("warmup: set NUMBA_CACHE_DIR first (the folder baked into the image)",
              file=sys.stderr)
        return 2
    from lda_core.algorithms.algorithm import algorithm_class
    from lda_core.training.heldout import HeldOut, evaluate
    from pipelines.ingest import synthetic
    spec = synthetic.SyntheticSpec(n_docs=400, n_words=200, n_topics=4, doc_length=30.0, seed=1)
    docs = synthetic.generate(spec)
    train, held = docs.take(range(300)), docs.take(range(300, 400))
    heldout = HeldOut.from_batch(held, seed=0)
    from pipelines.training.algorithm_options import build_algorithm
    for name in names:
        try:
            algorithm_class(name)
        except ValueError as e:      # an algorithm this installation does not have
            print("warmup: skipping %s (%s)" % (name, e), file=sys.stderr)
            continue
        algo = build_algorithm(name, 4, spec.n_words, settings={}, corpus_size=300, seed=0, vocab_hash=None,
                               corpus_tokens=int(train.n_tokens))
        for lo in (0, 100):
            algo.global_step(algo.local_step(train.take(range(lo, lo + 100))))
        algo.infer(held)
        evaluate(algo, heldout)
        print("warmup: compiled %s" % name)
    n = sum(len(f) for _, _, f in os.walk(cache))
    print("warmup: %d files in %s" % (n, cache))
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())
