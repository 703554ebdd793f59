"""The `ldabeam` command line (contract: DESIGN.md §4).

Each subcommand lives in ``pipelines.commands.<name>`` and is imported only when used, so
``ldabeam topics`` does not pay for importing Beam. Options the subcommand does not know are
passed through to Beam as pipeline options (``--runner``, ``--direct_num_workers``, ...).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
from typing import List, Optional

# name -> (module, one-line help). Order is the order shown by `ldabeam --help`.
COMMANDS = {
    "vectorize": ("pipelines.commands.vectorize",
                  "raw text / Wikipedia dumps / bag-of-words files -> vocabulary + Parquet shards"),
    "train": ("pipelines.commands.train", "train a topic model on shards (checkpoints, resume)"),
    "evaluate": ("pipelines.commands.evaluate", "held-out metrics of a model, printed as JSON"),
    "export": ("pipelines.commands.export", "export a model (phi-npy, gensim, pyldavis)"),
    "infer": ("pipelines.commands.infer", "per-document topic proportions to Parquet"),
    "topics": ("pipelines.commands.topics", "top words per topic (table, CSV, JSON)"),
    "report": ("pipelines.commands.report", "a self-contained HTML report of a run"),
    "stream": ("pipelines.commands.stream", "online training on an unbounded stream"),
    "synth": ("pipelines.commands.synth",
              "a synthetic corpus from the LDA generative model (load tests, planted topics)"),
}


def available_commands():
    """The registered subcommands whose module is present in this installation."""
    out = {}
    for name, (mod, help_) in COMMANDS.items():
        if importlib.util.find_spec(mod) is not None:
            out[name] = (mod, help_)
    return out


def build_parser(commands=None) -> argparse.ArgumentParser:
    commands = available_commands() if commands is None else commands
    parser = argparse.ArgumentParser(
        prog="ldabeam",
        description="Online LDA topic modelling at corpus scale on Apache Beam.",
        epilog="Options a subcommand does not define are passed to Beam as pipeline options "
               "(e.g. --direct_running_mode=multi_processing --direct_num_workers=2).")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (mod, help_) in commands.items():
        p = sub.add_parser(name, help=help_, description=help_,
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        importlib.import_module(mod).add_arguments(p)
        p.set_defaults(_module=mod)
    return parser


def _model_dir_lease(module, args):
    """The lease of the model directory a writing command declares with ``MODEL_DIR = (option,
    input options)`` (``lda_core.storage.lease``: one writer per model, never over its input); a
    no-op for readers."""
    spec = getattr(module, "MODEL_DIR", None)
    model_dir = getattr(args, spec[0], None) if spec else None
    if not model_dir:
        return contextlib.nullcontext()
    from lda_core.storage.lease import hold_model_dir
    from pipelines.ingest import dataset
    return hold_model_dir(model_dir, "ldabeam " + args.command,
                          inputs=[getattr(args, a, None) for a in spec[1]],
                          files=dataset.files_for(model_dir))


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = available_commands()
    # Build only the chosen subcommand's parser (fast start, and no heavy imports for others).
    chosen = next((a for a in argv if a in commands), None)
    parser = build_parser({chosen: commands[chosen]} if chosen else commands)
    args, beam_argv = parser.parse_known_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pipelines.runtime import log_filters
    log_filters.install()      # third-party warnings that do not concern the user
    if args.log_level != "DEBUG":
        # Beam's own INFO lines (type-hint conversions, runner fall-backs, worker pools) drown
        # the progress lines users need; keep its warnings and errors.
        logging.getLogger("apache_beam").setLevel(logging.WARNING)
    module = importlib.import_module(args._module)
    try:
        with _model_dir_lease(module, args):
            return int(module.run(args, beam_argv) or 0)
    except (ValueError, FileNotFoundError) as e:
        # User errors: one clear line, no traceback (use --log-level DEBUG for the trace).
        logging.getLogger("ldabeam").debug("error", exc_info=True)
        print("ldabeam %s: error: %s" % (args.command, e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
