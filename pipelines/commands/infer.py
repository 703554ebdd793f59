"""``ldabeam infer``: per-document topic proportions of a trained model, written as Parquet.

    ldabeam infer --model MODEL_DIR --shards SHARD_DIR --output DIR [BEAM OPTIONS]
    ldabeam infer --model MODEL_DIR --input PATH_OR_GLOB... [--format F] --output DIR [--csv]

The pipeline is :mod:`pipelines.infer` (same E-step code and frozen state as training).
"""
from __future__ import annotations

from pipelines.commands.vectorize import add_field_arguments, INPUT_FORMATS
from pipelines.runtime.beam_options import pipeline_options
from pipelines.runtime.remote_checks import check_command
from pipelines.training import detached

# the output folder is held (lease) while it is written, and never overlaps an input
MODEL_DIR = ("output", ("model", "shards", "input"))
READER_OPTIONS = ("id_field", "text_field", "title_field", "label_field", "encoding",
                  "encoding_errors")


def add_arguments(p) -> None:
    g = p.add_argument_group("model, documents, output")
    g.add_argument("--model", metavar="MODEL_DIR", default=None,
                   help="model directory written by `ldabeam train` (its latest checkpoint), "
                        "or one checkpoint directory (required)")
    g.add_argument("--shards", metavar="SHARD_DIR", default=None,
                   help="documents to infer: a dataset directory (its --split), a directory "
                        "of shards or a glob; vectorised with the model's vocabulary")
    g.add_argument("--input", nargs="+", action="extend", metavar="PATH_OR_GLOB", default=[],
                   help="raw text instead of --shards, in any `ldabeam vectorize` format "
                        "(files, tables, bq://PROJECT.DATASET.TABLE), tokenized with the "
                        "model's own settings and vocabulary; unknown words are ignored and "
                        "counted")
    g.add_argument("--query", default=None, metavar="SQL",
                   help="raw text from a BigQuery query (needs pip install 'ldabeam[gcp]')")
    g.add_argument("--format", dest="input_format", default="auto",
                   choices=[f for f in INPUT_FORMATS if f not in ("uci", "ldac", "mm")],
                   help="format of --input")
    g.add_argument("--exclude", nargs="+", action="extend", metavar="GLOB", default=[],
                   help="with --input: files not to read, globs matched against a file's name "
                        "and its path (e.g. --exclude README.TXT)")
    g.add_argument("--unverified", action="store_true",
                   help="also read shards that no dataset manifest lists (written by another "
                        "tool, or by a killed `ldabeam vectorize`); shards a manifest lists "
                        "are always verified against it")
    g.add_argument("--split", default="train", choices=["train", "heldout"],
                   help="split of a dataset directory given as --shards")
    g.add_argument("--output", metavar="DIR", default=None,
                   help="directory for part-*.parquet and _summary.json, published last "
                        "(required)")
    g.add_argument("--overwrite", action="store_true",
                   help="replace inference results already in --output (removes only the "
                        "files its summary lists; a folder holding anything else is refused)")
    g.add_argument("--csv", dest="write_csv", action="store_true",
                   help="also write part-*.csv (doc_id, title, label, n_tokens, top_topic, "
                        "top_topics, theta_0 ... theta_K-1)")
    g = p.add_argument_group("raw text readers (default: as the model's training data)")
    add_field_arguments(g, defaults=False)
    g.add_argument("--encoding", default=None, help="text encoding of --input")
    g.add_argument("--encoding-errors", default=None, choices=["strict", "replace", "ignore"],
                   help="replace: undecodable bytes become U+FFFD, ignore: they are dropped "
                        "(both counted); strict: such a "
                        "record is skipped and counted as a dead letter")
    g = p.add_argument_group("inference")
    g.add_argument("--top-n", type=int, default=3, help="topics listed in top_topics")
    g.add_argument("--batch-size", type=int, default=1024,
                   help="documents per E-step piece (the unit of parallel work)")
    g.add_argument("--gamma-seed", choices=["infer", "training"], default="infer",
                   help="seed of the initial gamma: 'infer' (default) seeds each document by "
                        "its content, so the same text gets the same theta whatever its id; "
                        "'training' seeds by document id as the trainer does, and reproduces "
                        "its gamma for a minibatch when given the checkpoint it was computed "
                        "with")
    g.add_argument("--write-gamma", action="store_true",
                   help="also write the unnormalised variational gamma (list<float64>)")
    g.add_argument("--threads", type=int, default=None, help="E-step threads (numba)")
    g = p.add_argument_group("runner")
    detached.add_detach_option(g, "_summary.json in DIR")


LAST_SUBMITTED = None   # --detach: the PipelineResult of the last submission (for callers)


def check_launch(args, beam_argv) -> None:
    """The runner's up-front checks (pipelines.runtime.remote_checks), before the lease."""
    check_command(None, beam_argv, {"--model": args.model, "--shards": args.shards, "--input": args.input,
                                     "--output": args.output})


def run(args, beam_argv) -> int:
    global LAST_SUBMITTED
    from pipelines.infer import InferOptions, infer  # imports Beam: only when the command runs
    opts = InferOptions(model=args.model, output=args.output, shards=args.shards,
                        inputs=list(args.input or []), input_format=args.input_format,
                        exclude=tuple(getattr(args, "exclude", None) or ()),
                        query=args.query, write_csv=args.write_csv,
                        reader={k: getattr(args, k) for k in READER_OPTIONS},
                        split=args.split, batch_size=args.batch_size, top_n=args.top_n,
                        gamma_seed=args.gamma_seed, write_gamma=args.write_gamma,
                        overwrite=args.overwrite, threads=args.threads,
                        unverified=args.unverified)
    if getattr(args, "detach", False):
        # imports Beam: only when the command runs
        from pipelines.infer import SUMMARY_FILE, read_summary, submit
        runner = detached.runner_of_options(pipeline_options(beam_argv))
        result = submit(opts, beam_argv)
        LAST_SUBMITTED = result
        if not detached.job_runs_here(runner, beam_argv):
            print("submitted: %s" % detached.describe(result, runner))
            print("results are written to %s; %s/%s appears when the job has finished "
                  "(check the job in the runner's console)" % (args.output, args.output,
                                                               SUMMARY_FILE))
            return 0
        result.wait_until_finish()
        print("--detach: the %s runs the job in this process, so it was waited for (%s)"
              % (runner, detached.describe(result, runner)))
        s = read_summary(args.output)
    else:
        s = infer(opts, beam_argv)
    line = ("inferred %d documents (%d tokens) with %s step %d, K=%d -> %s (%d file(s))"
            % (s["documents"], s["tokens"], s["algorithm"], s["step"], s["n_topics"],
               args.output, len(s["files"])))
    print(line)
    if s.get("source") == "text":
        _print_raw_text(s)
    return 0


def _print_raw_text(s: dict) -> None:
    """One line of counts with the share of raw-text tokens the model's vocabulary does not
    know (dropped); a warning line when that share is large or when CJK documents gave no
    token. (Unknown tokenizer settings are warned about by pipelines.infer before the run.)"""
    import sys
    from pipelines.infer import UNKNOWN_SHARE_WARNING  # imports Beam: only when the command runs
    share = s.get("unknown_token_share", 0.0)
    print("raw text: %d documents read; unknown tokens: %d of %d (%.1f%%), ignored; %d "
          "documents with no known word skipped"
          % (s["documents_read"], s["oov_tokens_dropped"], s["oov_tokens_dropped"] + s["tokens"],
             100.0 * share, s["empty_after_vocabulary"]))
    if share > UNKNOWN_SHARE_WARNING:
        print("warning: %.0f%% of the tokens are not in the model's vocabulary: the text may "
              "be preprocessed differently from the training data (stop words, phrases, "
              "language) or be about other things" % (100.0 * share), file=sys.stderr)
    if s.get("empty_cjk_text"):
        print("warning: %d documents with Chinese, Japanese or Korean text gave no token"
              % s["empty_cjk_text"], file=sys.stderr)
