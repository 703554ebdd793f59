"""``ldabeam report``: one self-contained static HTML page about a trained model.

    ldabeam report --model MODEL_DIR --output report.html [--shards SHARD_DIR]

See :mod:`pipelines.reports.report` for what the page shows.
"""
from __future__ import annotations

import importlib
from lda_core.errors import UsageError
from lda_core.storage.output_paths import check_file_output
from pipelines.reports.report import write_report
from pipelines.runtime import paths


def add_arguments(p) -> None:
    p.add_argument("--model", metavar="MODEL_DIR", default=None,
                   help="model directory written by `ldabeam train` (required)")
    p.add_argument("--output", metavar="HTML", default=None,
                   help="the HTML file to write (required)")
    p.add_argument("--shards", metavar="SHARD_DIR", default=None,
                   help="documents for topic sizes, coherence and examples (default: the "
                        "training shards named in the run log)")
    p.add_argument("--unverified", action="store_true",
                   help="also read shards that no dataset manifest lists (written by another "
                        "tool, or by a killed `ldabeam vectorize`); shards a manifest lists "
                        "are always verified against it")
    p.add_argument("--max-docs", type=int, default=2000,
                   help="documents of --shards used: a seeded sample (pipelines.ingest.doc_sample; "
                        "the documents `ldabeam evaluate` and the trainer measure topic "
                        "health on)")
    p.add_argument("--top", type=int, default=10, help="top words per topic")
    p.add_argument("--examples", type=int, default=3, help="example documents per topic")
    p.add_argument("--template", metavar="HTML", default=None,
                   help="page template (string.Template; default: templates/report.html)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier report at --output (a file of any other kind is "
                        "never replaced)")
    p.add_argument("--topic", type=int, action="append", default=None, metavar="K",
                   help="topic(s) whose top words are followed across checkpoints "
                        "(default: the 3 largest)")


def run(args, beam_argv) -> int:
    if not args.model:
        raise UsageError("--model MODEL_DIR is required")
    if not args.output:
        raise UsageError("--output HTML is required")
    # the page never replaces nor lands inside the model, the documents, the template or
    # any other output; an earlier page is replaced only with --overwrite
    check_file_output(args.output, "report", [args.model, paths.model_dir_of(args.model),
                                              args.shards, args.template], args.overwrite)
    for name in ("max_docs", "top"):
        if getattr(args, name) < 1:
            raise UsageError("--%s must be >= 1, got %d" % (name.replace("_", "-"),
                                                          getattr(args, name)))
    if args.examples < 0:
        raise UsageError("--examples must be >= 0, got %d" % args.examples)
    try:
        importlib.import_module("matplotlib")   # the plots; an optional extra of the package
    except ImportError:
        raise UsageError("ldabeam report draws its plots with matplotlib, which is not "
                         "installed: pip install 'ldabeam[report]' (or matplotlib)")
    data = write_report(args.model, args.output, shards=args.shards, max_docs=args.max_docs,
                        top_n=args.top, examples=args.examples, evolution_topics=args.topic,
                        template=args.template, unverified=args.unverified)
    print("report: %s (%s, K=%d, step %d, %d checkpoints in the evolution table)"
          % (paths.absolute(args.output), data["algorithm"], data["n_topics"], data["step"],
             len(data["evolution"]["checkpoints"])))
    return 0
