"""The `ldabeam` command line (`ldabeam --help`; README.md lists the commands).

Each subcommand lives in ``pipelines.commands.<name>`` and is imported only when used, so
``ldabeam topics`` does not pay for importing Beam. Options the subcommand does not know are
passed through to Beam as pipeline options (``--runner``, ``--direct_num_workers``, ...) by
the commands that run pipelines, once checked against the options Beam registers; anything
else is an error naming the closest option. :func:`main` maps what goes wrong to one line and
an exit code (docs/reliability.md, "Exit codes and error classes").
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import logging
import os
import re
import signal
import sys
import traceback
from importlib import metadata
from typing import List, Optional

from lda_core.errors import Terminated, UserError
from lda_core.storage.files import files_for
from pipelines.runtime import log_filters

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


# the commands that run Beam pipelines: options they do not define must be Beam's own
BEAM_COMMANDS = ("vectorize", "train", "infer", "stream")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
REPORT_BUG = "please report this as a bug with the command line and the traceback"
# exit codes (docs/reliability.md, "Exit codes and error classes")
EXIT_INTERNAL, EXIT_USER = 1, 2
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
# what an interrupted command leaves behind, beyond "nothing half-written is published"
INTERRUPT_HINTS = {
    "train": "the latest published checkpoint stays the latest; --resume continues from it",
    # an update publishes its checkpoint only at its end (--resume is refused with --update)
    "train --update": "the model is unchanged (an update publishes its checkpoint at its "
                      "end); run the same `ldabeam train --update` again (on a Beam runner "
                      "it continues from where it stopped)",
    "stream": "the latest published checkpoint stays the latest; start the stream again to "
              "continue from it",
}


def version() -> str:
    """The installed distribution's version, else the one setup.py declares beside this tree."""
    try:
        return metadata.version("ldabeam")
    except metadata.PackageNotFoundError:
        pass
    setup = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")
    try:
        with open(setup, encoding="utf-8") as f:
            m = re.search(r"""version\s*=\s*["']([^"']+)["']""", f.read())
    except OSError:
        m = None
    return m.group(1) if m else "unknown"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default shown once: ``(default: X)`` is added only when the help text
    does not already state a default, and not for flags or options without one (None)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" in text.lower() or action.default is None or action.nargs == 0
                or isinstance(action.default, bool)):
            return text
        return super()._get_help_string(action)


def _add_global_options(p: argparse.ArgumentParser, top: bool) -> None:
    """Options accepted before and after the command (``ldabeam --log-level DEBUG train`` and
    ``ldabeam train --log-level DEBUG``); after it they override the value before it."""
    p.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS,
                   default="INFO" if top else argparse.SUPPRESS,
                   help="how much to log (default INFO; DEBUG adds the traceback of errors)")


def build_parser(commands=None) -> argparse.ArgumentParser:
    commands = COMMANDS if commands is None else commands
    parser = argparse.ArgumentParser(
        prog="ldabeam",
        description="Online LDA topic modelling at corpus scale on Apache Beam.",
        epilog="Options a subcommand does not define are passed to Beam as pipeline options "
               "(e.g. --direct_running_mode=multi_processing --direct_num_workers=2); an "
               "option that is not a Beam pipeline option either is an error.")
    parser.add_argument("--version", action="version", version="ldabeam " + version())
    _add_global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    parser.command_parsers = {}
    for name, (mod, help_) in commands.items():
        p = sub.add_parser(name, help=help_, description=help_, formatter_class=HelpFormatter)
        importlib.import_module(mod).add_arguments(p)
        _add_global_options(p, top=False)
        p.set_defaults(_module=mod)
        parser.command_parsers[name] = p
    return parser


def _model_dir_lease(module, args):
    """The lease of the model directory a writing command declares with ``MODEL_DIR = (option,
    input options)`` (``lda_core.storage.lease``: one writer per model, never over its input); a
    no-op for readers."""
    spec = getattr(module, "MODEL_DIR", None)
    model_dir = getattr(args, spec[0], None) if spec else None
    if not model_dir or getattr(args, "plan", False):     # --plan writes nothing
        return contextlib.nullcontext()
    # only the commands that write a model directory need the lease: `ldabeam --help` /
    # `--version` start without it
    from lda_core.storage.lease import hold_model_dir
    return hold_model_dir(model_dir, "ldabeam " + args.command,
                          inputs=[getattr(args, a, None) for a in spec[1]],
                          files=files_for(model_dir))


def _check_leftovers(parser: argparse.ArgumentParser, command: str, leftovers) -> None:
    """Arguments the command's parser did not take: Beam pipeline options for the commands
    that run pipelines, an error with a suggestion otherwise."""
    if not leftovers:
        return
    from pipelines.runtime.beam_options import check_unknown_options  # only when options are left
    ours = [o for a in parser.command_parsers[command]._actions for o in a.option_strings]
    check_unknown_options(command, leftovers, ours, beam=command in BEAM_COMMANDS)


def printable(text) -> str:
    """``text`` safe to print on any terminal: undecodable bytes of file names (surrogate
    escapes, :func:`os.fsdecode`) shown as ``\\xNN`` instead of failing to encode."""
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    text = str(text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def one_line(text) -> str:
    """The first line of a message (Beam appends the failing step's name and the worker's
    traceback on further lines when an error crosses a DoFn)."""
    lines = [l for l in printable(text).strip().splitlines() if l.strip()]
    return lines[0] if lines else ""


# errno -> what to do about it, for the one-line message of an OSError naming its path
OS_ERROR_FIXES = {
    errno.ENOENT: "check the path",
    errno.EEXIST: "remove it or choose another path",
    errno.EACCES: "choose a path you may read and write, or change its permissions",
    errno.EPERM: "choose a path you may read and write, or change its permissions",
    errno.EROFS: "choose an output on a writable file system",
    errno.ENOSPC: "free space or choose an output on another disk",
    errno.EDQUOT: "free space or choose an output on another disk",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.EISDIR: "give the path of a file, not of a directory",
    errno.ENOTDIR: "a part of the path is a file: check the path",
    errno.ENOTEMPTY: "empty it or choose another path",
    errno.EMFILE: "raise the limit (ulimit -n)",
    errno.ENFILE: "raise the limit (ulimit -n)",
    errno.ELOOP: "check the path's symbolic links",
}


def os_error_line(e: OSError) -> str:
    """``PATH: <what failed>; <what to do>`` for an OSError, PATH being its ``filename`` (the
    destination ``filename2`` of a failed rename: a temporary file's name means nothing to
    the user), or its message when it names no path."""
    what = e.strerror or one_line(e) or type(e).__name__
    fix = OS_ERROR_FIXES.get(e.errno)
    if e.filename is None:
        return "%s%s" % (one_line(e) or what, "; " + fix if fix else "")
    path = printable(e.filename if getattr(e, "filename2", None) is None else e.filename2)
    return "%s: %s%s" % (path, what, "; " + fix if fix else "")


def _raise_terminated(signum, frame):
    raise Terminated("SIGTERM")


@contextlib.contextmanager
def _sigterm_raises():
    """SIGTERM raises :class:`Terminated` (a KeyboardInterrupt) for the duration: a terminated
    command stops as on Ctrl-C. Only the main thread can install a handler; elsewhere (an
    embedding program) SIGTERM keeps its handler."""
    try:
        old = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _fail(command: str, message: str) -> None:
    print("ldabeam %s: error: %s" % (command, printable(message)), file=sys.stderr)


def root_error(e: BaseException) -> BaseException:
    """The exception raised where the failure happened. Beam re-raises an exception that
    crosses a DoFn as the same type with the step's name appended, or as a RuntimeError when
    that type cannot be built from a message (a KeyboardInterrupt, an OSError), tagged
    ``_tagged_with_step`` and raised while handling the original: follow those links back."""
    seen = set()
    while getattr(e, "_tagged_with_step", False) and e.__context__ is not None \
            and id(e) not in seen:
        seen.add(id(e))
        e = e.__context__
    return e


EXPECTED = (KeyboardInterrupt, UserError, MemoryError, OSError)


class QuietExpected(logging.Filter):
    """Drops log records that carry the traceback of an error the command line reports in one
    line (Beam logs every exception that crosses a DoFn with its traceback before re-raising
    it); shown at --log-level DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or not isinstance(root_error(exc), EXPECTED)


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``ldabeam ARGV``; returns the exit code: 0, 2 for a user error (one line naming what
    and how to fix it: bad options or input, an OSError with its path, memory), 130 / 143 for
    SIGINT / SIGTERM (one line), 1 for an internal error (the traceback and a line asking to
    report it). Argument errors and ``--help`` exit through argparse (SystemExit, 2 / 0)."""
    process_entry = argv is None         # the console script: the process ends after this
    argv = list(sys.argv[1:] if argv is None else argv)
    # Build only the chosen subcommand's parser (fast start, and no heavy imports for others).
    command = next((a for a in argv if a in COMMANDS), None)
    with _sigterm_raises():
        try:
            code = _run(argv, command)
        except BaseException as e:       # noqa: B036 (SystemExit and the like are re-raised)
            code = _report(command, e, "train --update" if command == "train" and
                           "--update" in argv else command)
    if process_entry:
        _ignore_signals_while_exiting()
        if code in EXIT_SIGNAL.values():
            _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End an interrupted command's process with ``code`` once its line is printed: the
    interpreter's own shutdown would report an interrupt that reached a Beam thread hand-over
    or a finalizer as a death by SIGINT (exit -2) and print the tracebacks of finalizers it
    interrupted. Outputs are already in their published-or-not state; the streams and the
    log handlers are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _ignore_signals_while_exiting() -> None:
    """The command has finished and reported; a SIGINT or SIGTERM landing while the
    interpreter shuts down (Beam's threads, atexit hooks) would turn that exit code into a
    silent death by signal, so the process's last moments ignore both."""
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    except ValueError:                   # not the main thread: leave the handlers alone
        pass


def _report(command: Optional[str], e: BaseException, mode: Optional[str] = None) -> int:
    """Print what went wrong (see :func:`main`) and return the exit code; ``mode`` names the
    command's mode for the interrupt hint (``"train --update"``)."""
    log = logging.getLogger(__name__)
    root = root_error(e)
    if isinstance(root, KeyboardInterrupt):
        sig = signal.SIGTERM if isinstance(root, Terminated) else signal.SIGINT
        log.debug("interrupted", exc_info=e)
        hint = INTERRUPT_HINTS.get(mode or command, "outputs that were not finished are not "
                                                    "published (no manifest or summary); run "
                                                    "the command again")
        print("ldabeam %s: interrupted (%s); %s" % (command, signal.Signals(sig).name, hint),
              file=sys.stderr)
        return EXIT_SIGNAL[sig]
    if isinstance(root, UserError):
        # input, usage and resource errors: one clear line (--log-level DEBUG: the trace)
        log.debug("error", exc_info=e)
        _fail(command, one_line(root))
        return EXIT_USER
    if isinstance(root, MemoryError):
        log.debug("error", exc_info=e)
        _fail(command, "out of memory%s; use fewer --topics, a smaller vocabulary or a "
                       "smaller --minibatch" % ((" (%s)" % one_line(root)) if str(root) else ""))
        return EXIT_USER
    if isinstance(root, OSError):
        log.debug("error", exc_info=e)
        _fail(command, os_error_line(root))
        return EXIT_USER
    if not isinstance(e, Exception):
        raise e                          # SystemExit, GeneratorExit: not errors to report
    traceback.print_exception(e)
    print("ldabeam %s: internal error (%s): %s" % (command, type(root).__name__, REPORT_BUG),
          file=sys.stderr)
    return EXIT_INTERNAL


def _run(argv: List[str], command: Optional[str]) -> int:
    parser = build_parser({command: COMMANDS[command]} if command else COMMANDS)
    args, leftovers = parser.parse_known_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log_filters.install()      # third-party warnings that do not concern the user
    if args.log_level != "DEBUG":
        # Beam's own INFO lines (type-hint conversions, runner fall-backs, worker pools) drown
        # the progress lines users need; keep its warnings and errors, but not the tracebacks
        # of errors reported in one line
        logging.getLogger("apache_beam").setLevel(logging.WARNING)
        for handler in logging.getLogger().handlers:
            if not any(isinstance(f, QuietExpected) for f in handler.filters):
                handler.addFilter(QuietExpected())
    _check_leftovers(parser, args.command, leftovers)
    module = importlib.import_module(args._module)
    # a command's up-front checks of its launch (a remote runner's options, paths and
    # credentials) run before the lease, whose first request would wait on them
    check_launch = getattr(module, "check_launch", None)
    if check_launch is not None:
        check_launch(args, leftovers)
    with _model_dir_lease(module, args):
        return int(module.run(args, leftovers) or 0)


if __name__ == "__main__":
    sys.exit(main())
