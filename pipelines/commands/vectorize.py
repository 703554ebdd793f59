"""``ldabeam vectorize``: raw text / Wikipedia dumps / tables (CSV, Parquet, Arrow, BigQuery) /
bag-of-words files -> vocabulary + Parquet shards (see ``docs/vectorize.md``,
``docs/input-formats.md`` and :mod:`pipelines.ingest.vectorize`).

Options this command does not define go to Beam as pipeline options, e.g.
``--direct_running_mode=multi_processing --direct_num_workers=2`` or ``--runner ...``.
"""
from __future__ import annotations

import argparse
import os

from lda_core.errors import InputError, UsageError
from pipelines.cli import main as cli_main
from pipelines.ingest import dataset, manifest as dataset_manifest
from pipelines.runtime import paths
from pipelines.runtime.beam_options import pipeline_options
from pipelines.runtime.remote_checks import check_command
from pipelines.training import detached

# the dataset directory is held (lease) while it is written, and never overlaps an input
MODEL_DIR = ("output", ("input", "vocab"))
BUNDLED_SAMPLE = "enwiki-sample-206pages.xml.bz2"
INPUT_FORMATS = ("auto", "wiki", "text", "lines", "jsonl", "csv", "tsv", "parquet", "arrow",
                 "uci", "ldac", "mm")


def bundled_sample() -> str:
    """The bundled Wikipedia sample: ``data/`` of the repository (editable install / source
    tree) or ``pipelines/data/`` of an installed package."""
    here = os.path.dirname(os.path.abspath(__file__))            # pipelines/commands
    candidates = [os.path.join(os.path.dirname(os.path.dirname(here)), "data", BUNDLED_SAMPLE),
                  os.path.join(os.path.dirname(here), "data", BUNDLED_SAMPLE)]
    for c in candidates:
        if os.path.exists(c):
            return c
    raise FileNotFoundError("no --input given and the bundled sample %s was not found (looked "
                            "in %s)" % (BUNDLED_SAMPLE, ", ".join(candidates)))


def _fraction(s: str) -> float:
    v = float(s)
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError("must be a fraction in [0, 1), got %s" % s)
    return v


def _nonneg_int(s: str) -> int:
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError("must be an integer >= 0, got %s" % s)
    return v


def _shown_in_help(p: argparse.ArgumentParser, **defaults) -> str:
    """Register the parsed default of an option whose stored value is a sentinel (``None``
    for "decided by the input format", ``-1`` for "the default cap", ``True`` for a
    ``--no-X`` flag) and hide it from ``--help``: ``ldabeam`` formats help with
    ``ArgumentDefaultsHelpFormatter``, which would print the sentinel ("(default: True)" for
    ``--no-lowercase``); the option's help text says what happens instead. Use as
    ``default=_shown_in_help(p, dest=value)`` (the value reaches ``args`` through the parser's
    own defaults)."""
    p.set_defaults(**defaults)
    return argparse.SUPPRESS


def add_arguments(p: argparse.ArgumentParser) -> None:
    # long because it declares every option of `ldabeam vectorize`, one argparse call each
    io = p.add_argument_group("input and output")
    io.add_argument("--input", nargs="+", action="extend", metavar="PATH_OR_GLOB",
                    default=_shown_in_help(p, input=None),
                    help="files, directories, globs or URLs (gs://, s3://); compressed or not; "
                         "bq://PROJECT.DATASET.TABLE for a BigQuery table "
                         "(default: the bundled Wikipedia sample, %s)" % BUNDLED_SAMPLE)
    io.add_argument("--format", default="auto", choices=list(INPUT_FORMATS),
                    help="input format (auto: from the file names / contents)")
    io.add_argument("--exclude", nargs="+", action="extend", metavar="GLOB", default=[],
                    help="input files not to read: globs matched against a file's name and "
                         "its path (e.g. --exclude README.TXT '*.md')")
    io.add_argument("--query", default=_shown_in_help(p, query=None), metavar="SQL",
                    help="BigQuery standard SQL whose rows are the documents (columns named by "
                         "--id-field / --text-field / ...); needs pip install 'ldabeam[gcp]'")
    io.add_argument("--output", metavar="SHARD_DIR", default=_shown_in_help(p, output=None),
                    help="dataset directory to write (train/, heldout/, vocab.tsv, "
                         "manifest.json, deadletter/); required")
    io.add_argument("--overwrite", action="store_true",
                    help="replace a dataset already in --output (removes only the files its "
                         "manifest lists; a directory holding anything else is refused)")
    io.add_argument("--vocab", metavar="FIXED_VOCAB", default=_shown_in_help(p, vocab=None),
                    help="text inputs: a fixed vocabulary (vocab.tsv of a dataset or one token "
                         "per line); no corpus-wide pass, unknown words are dropped and "
                         "counted (default: the vocabulary is built from the corpus). Bag-of-words "
                         "inputs: the corpus' vocabulary file (default: found beside the "
                         "corpus)")
    io.add_argument("--holdout-fraction", type=_fraction, default=0.0,
                    help="fraction of documents (by a hash of doc_id) written to heldout/")
    io.add_argument("--seed", type=int, default=0,
                    help="salt of the doc_id hash deciding the held-out split and row order")
    io.add_argument("--num-shards", type=_nonneg_int, default=0,
                    help="train shards (0: one per 20,000 documents)")
    io.add_argument("--heldout-shards", type=_nonneg_int, default=0,
                    help="held-out shards (0: one per 20,000 documents)")

    vo = p.add_argument_group("vocabulary (gensim Dictionary.filter_extremes semantics)")
    vo.add_argument("--no-below", type=_nonneg_int, default=_shown_in_help(p, no_below=None),
                    help="keep words in at least this many documents (default: 5 for text "
                         "inputs; bag-of-words inputs keep their whole vocabulary unless one "
                         "of --no-below, --no-above, --keep-n, --keep-tokens is given)")
    vo.add_argument("--no-above", type=float, default=_shown_in_help(p, no_above=None),
                    help="keep words in at most this fraction of documents (default: 0.5; "
                         "bag-of-words inputs as --no-below)")
    vo.add_argument("--keep-n", type=_nonneg_int, default=_shown_in_help(p, keep_n=-1),
                    help="keep only the N most frequent words by document frequency; 0: no "
                         "cap (default: 100000; bag-of-words inputs as --no-below)")
    vo.add_argument("--keep-tokens", default=_shown_in_help(p, keep_tokens=""),
                    help="comma-separated words kept whatever their frequency (default: "
                         "none)")
    vo.add_argument("--stopwords", default=_shown_in_help(p, stopwords=None),
                    help="'gensim' (gensim's English list), 'none', or a file with one word "
                         "per line; several separated by commas are combined "
                         "(gensim,extra.txt); the words are recorded in the dataset (default: "
                         "none; --no-above drops the most common words)")

    tk = p.add_argument_group("tokenizer (defaults: gensim conventions)")
    tk.add_argument("--no-lowercase", dest="lowercase", action="store_false",
                    default=_shown_in_help(p, lowercase=True),
                    help="keep the case of tokens (default: tokens are lower-cased)")
    tk.add_argument("--no-deaccent", dest="deaccent", action="store_false",
                    default=_shown_in_help(p, deaccent=True),
                    help="keep accents (default: accents are removed, as gensim's "
                         "utils.deaccent; gensim WikiCorpus keeps them)")
    tk.add_argument("--min-token-len", type=int, default=2,
                    help="shortest token kept, in characters")
    tk.add_argument("--max-token-len", type=int, default=15,
                    help="longest token kept, in characters")
    tk.add_argument("--token-pattern", metavar="REGEX",
                    default=_shown_in_help(p, token_pattern=None),
                    help="a token is a whole match of this Python regular expression on the "
                         "lower-cased, de-accented text (e.g. \"[a-z0-9][a-z0-9+#-]*\"); "
                         "--min/--max-token-len still apply (default: gensim's rule, runs of "
                         "letters not starting with _); recorded")
    tk.add_argument("--segmenter", choices=["none", "jieba", "janome"], default="none",
                    help="cut Chinese (jieba) or Japanese (janome) text into words before "
                         "tokenizing; needs pip install 'ldabeam[cjk]'; use with "
                         "--min-token-len 1; recorded")
    tk.add_argument("--phrases", dest="learn_phrases", action="store_true",
                    help="learn phrases (gensim Phrases: new york -> new_york) from the "
                         "train documents, read once more on the driver, and join them in "
                         "every document; the phrase table is recorded in the dataset and "
                         "re-applied by `ldabeam infer --input`")
    tk.add_argument("--phrases-min-count", type=int, default=5,
                    help="gensim Phrases min_count: ignore bigrams seen fewer times")
    tk.add_argument("--phrases-threshold", type=float, default=10.0,
                    help="gensim Phrases threshold: join bigrams scoring above it")
    tk.add_argument("--phrases-scoring", choices=["default", "npmi"], default="default",
                    help="gensim Phrases scoring (npmi: threshold in [-1, 1])")
    tk.add_argument("--phrases-sample", type=float, default=1.0,
                    help="learn the phrases from this seeded share of the train documents "
                         "(1: all of them)")
    tk.add_argument("--tokenizer-from", metavar="MODEL_OR_DATASET",
                    default=_shown_in_help(p, tokenizer_from=None),
                    help="tokenize exactly as this model (MODEL_DIR/tokenizer.json) or dataset "
                         "(its manifest) recorded: stop words, pattern, segmenter, phrases; "
                         "for new documents vectorised with that model's --vocab")
    tk.add_argument("--min-article-tokens", type=_nonneg_int,
                    default=_shown_in_help(p, min_article_tokens=None),
                    help="drop documents with fewer tokens (default: 50 for Wikipedia dumps, "
                         "as gensim WikiCorpus; 1 otherwise)")

    rd = p.add_argument_group("readers")
    rd.add_argument("--encoding", default="utf-8", help="text encoding of text inputs")
    rd.add_argument("--encoding-errors", default="replace",
                    choices=["strict", "replace", "ignore"],
                    help="replace: an undecodable byte becomes U+FFFD; ignore: it is "
                         "dropped (both counted in the manifest as replaced_characters); "
                         "strict: a record with invalid bytes goes to the dead letters")
    rd.add_argument("--strip-headers", action="store_true",
                    help="drop e-mail headers up to the first blank line (20 Newsgroups)")
    rd.add_argument("--strip-quotes", action="store_true",
                    help="text files: drop quoted reply lines ('> ...', '|> ...') and their "
                         "attributions ('In article <...> ... writes:')")
    rd.add_argument("--strip-signatures", action="store_true",
                    help="text files: drop the signature after a '-- ' line at the end")
    add_field_arguments(rd)
    rd.add_argument("--no-reshuffle", dest="reshuffle", action="store_false",
                    default=_shown_in_help(p, reshuffle=True),
                    help="do not redistribute documents between reading and tokenizing "
                         "(default: they are redistributed, so the pages of one large dump "
                         "are parsed on every worker; never with the in-process "
                         "DirectRunner's single worker, where there is nowhere to spread "
                         "them)")

    rn = p.add_argument_group("runner")
    detached.add_detach_option(rn, "manifest.json in SHARD_DIR")


def add_field_arguments(group, defaults: bool = True) -> None:
    """The field / column options of JSON Lines and tables (also used by ``ldabeam infer``,
    where ``defaults=False`` means "as the model's training data")."""
    d = (lambda v: v) if defaults else (lambda v: None)
    group.add_argument("--id-field", default=d("id"),
                       help="JSON Lines / tables: document id field or column")
    group.add_argument("--text-field", default=d("text"),
                       help="JSON Lines / tables: text field; tables: several columns "
                            "separated by commas are joined (title,body)")
    group.add_argument("--label-field", default=d("label"),
                       help="JSON Lines / tables: label field or column")
    group.add_argument("--title-field", default=d("title"),
                       help="JSON Lines / tables: title field or column")


def options_from_args(args):
    # imports Beam: only when the command runs
    from pipelines.ingest.vectorize import VectorizeOptions
    inputs = list(args.input or [])
    if not inputs and not getattr(args, "query", None):
        inputs = [bundled_sample()]
    keep_tokens = tuple(t.strip() for t in (args.keep_tokens or "").split(",") if t.strip())
    return VectorizeOptions(
        inputs=inputs, output=args.output, format=args.format,
        exclude=tuple(getattr(args, "exclude", None) or ()), vocab=args.vocab,
        holdout_fraction=args.holdout_fraction, seed=args.seed, num_shards=args.num_shards,
        heldout_shards=args.heldout_shards, no_below=args.no_below, no_above=args.no_above,
        keep_n=args.keep_n, keep_tokens=keep_tokens, stopwords=args.stopwords,
        lowercase=args.lowercase, deaccent=args.deaccent, min_token_len=args.min_token_len,
        max_token_len=args.max_token_len, min_article_tokens=args.min_article_tokens,
        encoding=args.encoding, encoding_errors=args.encoding_errors,
        id_field=args.id_field, text_field=args.text_field, label_field=args.label_field,
        title_field=args.title_field, strip_headers=args.strip_headers,
        strip_quotes=args.strip_quotes, strip_signatures=args.strip_signatures,
        query=getattr(args, "query", None), overwrite=args.overwrite, reshuffle=args.reshuffle,
        token_pattern=args.token_pattern, segmenter=args.segmenter,
        learn_phrases=args.learn_phrases, phrases_min_count=args.phrases_min_count,
        phrases_threshold=args.phrases_threshold, phrases_scoring=args.phrases_scoring,
        phrases_sample=args.phrases_sample, tokenizer_from=args.tokenizer_from)


LAST_SUBMITTED = None   # --detach: the PipelineResult of the last submission (for callers)


def check_launch(args, beam_argv) -> None:
    """The runner's up-front checks (pipelines.runtime.remote_checks), before the lease."""
    check_command(None, beam_argv, {"--input": args.input, "--output": args.output})


def run(args, beam_argv) -> int:
    if not args.output:
        raise UsageError("--output SHARD_DIR is required (the dataset directory to write)")
    # imports Beam: only when the command runs
    from pipelines.ingest.vectorize import summary, vectorize
    from pipelines.ingest.vectorize_output import nothing_kept_message
    opts = options_from_args(args)
    if getattr(args, "detach", False):
        return _run_detached(opts, beam_argv)
    manifest = vectorize(opts, beam_argv)
    print(summary(manifest, opts.output))
    counts = manifest.get("counts", {})
    if not counts.get("documents_kept"):     # the pipeline refuses to publish such a run
        raise InputError(nothing_kept_message(counts, opts.inputs, opts.output,
                                              counts.get("dead_letters", 0)))
    return 0


def _run_detached(opts, beam_argv) -> int:
    global LAST_SUBMITTED
    # imports Beam: only when the command runs
    from pipelines.ingest.vectorize import submit, summary
    runner = detached.runner_of_options(pipeline_options(beam_argv))
    result = submit(opts, beam_argv)
    LAST_SUBMITTED = result
    manifest = paths.join(opts.output, dataset.MANIFEST_FILE)
    if detached.job_runs_here(runner, beam_argv):
        result.wait_until_finish()
        print("--detach: the %s runs the job in this process, so it was waited for "
              "(%s)" % (runner, detached.describe(result, runner)))
        print(summary(dataset_manifest.read_manifest(opts.output), opts.output))
        return 0
    print("submitted: %s" % detached.describe(result, runner))
    print("the dataset is written to %s; %s appears when the job has finished (check the "
          "job in the runner's console, or: ldabeam train --shards %s ...)"
          % (opts.output, manifest, opts.output))
    return 0


def main(argv=None) -> int:
    """``python -m pipelines.commands.vectorize ...`` (the same as ``ldabeam vectorize ...``)."""
    import sys
    return cli_main(["vectorize"] + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
