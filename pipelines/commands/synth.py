"""``ldabeam synth``: write a synthetic corpus drawn from the LDA generative model (load tests).

    ldabeam synth --output DIR --docs D [--words V] [--topics K] [--doc-length L]
                  [--alpha A] [--eta E] [--seed N] [--heldout-docs H] [--docs-per-shard N]

The result is an ordinary dataset directory (``ldabeam train --shards DIR`` reads it) plus
``planted_topics.npy``, the K x V topics the documents were drawn from. See
:mod:`pipelines.ingest.synthetic` for the model and the seeding.
"""
from __future__ import annotations

from lda_core.errors import UsageError
from pipelines.ingest import synthetic

# the dataset directory is held (lease) while it is written
MODEL_DIR = ("output", ())


def add_arguments(p) -> None:
    p.add_argument("--output", metavar="DIR", default=None,
                   help="dataset directory to write (required)")
    p.add_argument("--docs", type=int, default=None, metavar="D",
                   help="number of documents (required)")
    p.add_argument("--words", type=int, default=8000, metavar="V", help="vocabulary size")
    p.add_argument("--topics", type=int, default=100, metavar="K", help="planted topics")
    p.add_argument("--doc-length", type=float, default=150.0, metavar="L",
                   help="mean tokens per document (Poisson)")
    p.add_argument("--alpha", type=float, default=0.1, help="document-topic Dirichlet")
    p.add_argument("--eta", type=float, default=0.01, help="topic-word Dirichlet")
    p.add_argument("--seed", type=int, default=0, help="seed of the topics and documents")
    p.add_argument("--heldout-docs", type=int, default=0,
                   help="the last N documents go to heldout/")
    p.add_argument("--docs-per-shard", type=int, default=synthetic.DOCS_PER_SHARD,
                   help="documents per train shard")
    p.add_argument("--overwrite", action="store_true", help="replace a dataset in --output")


def run(args, beam_argv) -> int:
    if not args.output:
        raise UsageError("--output DIR is required (the dataset directory to write)")
    if args.docs is None:
        raise UsageError("--docs D is required (the number of documents)")
    if beam_argv:
        raise UsageError("unknown options %s (ldabeam synth runs no pipeline)"
                         % " ".join(beam_argv))
    spec = synthetic.SyntheticSpec(n_docs=args.docs, n_words=args.words, n_topics=args.topics,
                                   doc_length=args.doc_length, alpha=args.alpha, eta=args.eta,
                                   seed=args.seed)
    manifest = synthetic.write_dataset(spec, args.output, docs_per_shard=args.docs_per_shard,
                                       heldout_docs=args.heldout_docs, overwrite=args.overwrite)
    print(synthetic.summary(manifest, args.output))
    return 0


def main(argv=None) -> int:
    """``python -m pipelines.commands.synth ...`` (the same as ``ldabeam synth ...``)."""
    import argparse
    import logging
    import sys
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                                                   "%(message)s")
    p = argparse.ArgumentParser(prog="ldabeam synth", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_arguments(p)
    args, rest = p.parse_known_args(argv)
    try:
        return run(args, rest)
    except (ValueError, FileNotFoundError) as e:
        print("ldabeam synth: error: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
