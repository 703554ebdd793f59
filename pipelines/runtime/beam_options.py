"""Runner and pipeline-option plumbing for the Beam trainer.

``ldabeam train --runner R [BEAM OPTIONS...]`` ends up here: :func:`runner_config` turns the
runner name and the pass-through Beam options into a :class:`RunnerConfig` that knows

* which runner object to build (``DirectRunner`` is mapped to Beam's ``FnApiRunner`` directly:
  the 2.77 ``DirectRunner`` first tries to download the Prism runner, which fails offline and
  costs a graph walk per pipeline; the FnApiRunner is what it falls back to anyway);
* whether every worker shares the driver's process (``in_memory`` DirectRunner), which lets
  the trainer pass the topic state between steps in memory instead of through files;
* how many workers there are (to split each minibatch into at least that many pieces).

Defaults: ``DirectRunner`` in-process (``--direct_running_mode=in_memory``, one worker);
``--direct_running_mode=multi_processing --direct_num_workers=N`` for worker processes;
``PortableRunner`` needs ``--job_endpoint=HOST:PORT`` (e.g. the SDK's own job service,
``python -m apache_beam.runners.portability.local_job_service_main --port N``) and defaults to
``--environment_type=LOOPBACK`` (workers in the driver process; ``EXTERNAL`` with
``--environment_config=HOST:PORT`` for a worker pool started with
``python -m apache_beam.runners.worker.worker_pool_main --service_port=PORT``).
``DataflowRunner`` / ``FlinkRunner`` take their usual options (project, region,
temp_location, flink_master, ...) unchanged; see docs/beam-training.md.
"""
from __future__ import annotations

import argparse
import difflib
import logging
import os
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence

from lda_core.errors import UsageError

logger = logging.getLogger(__name__)

RUNNERS = ("DirectRunner", "FnApiRunner", "PortableRunner", "DataflowRunner", "FlinkRunner",
           "SparkRunner", "PrismRunner")


class _OptionParser(argparse.ArgumentParser):
    """A parser Beam's option classes can declare themselves on (``_add_argparse_args`` calls
    ``add_value_provider_argument`` besides ``add_argument``) and whose errors are
    :class:`UsageError` instead of an exit."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.names: List[str] = []          # every option string declared

    def add_argument(self, *args, **kwargs):
        self.names += [a for a in args if isinstance(a, str) and a.startswith("--")]
        return super().add_argument(*args, **kwargs)

    def add_value_provider_argument(self, *args, **kwargs):
        return self.add_argument(*args, **kwargs)

    def error(self, message):
        raise UsageError("Beam pipeline options: %s" % message)


def _beam_option_parser() -> _OptionParser:
    """Every pipeline option Beam registers (each subclass of ``PipelineOptions`` declares its
    own with ``_add_argparse_args``, as Beam itself gathers them)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    parser = _OptionParser(add_help=False, allow_abbrev=False, conflict_handler="resolve")
    classes, todo = set(), [PipelineOptions]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in classes:
                classes.add(sub)
                todo.append(sub)
    for cls in sorted(classes, key=lambda c: (c.__module__, c.__name__)):
        cls._add_argparse_args(parser)
    return parser


def suggest(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean --X?)`` for the candidate option closest to ``name``, or ``""``."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return " (did you mean %s?)" % close[0] if close else ""


def check_unknown_options(command: str, argv: Sequence[str], ours: Iterable[str],
                          beam: bool) -> None:
    """:class:`UsageError` for the first argument of ``argv`` (what the ``command``'s own parser
    left) that is neither one of ``ours`` (the command's option strings) nor, when the command
    runs Beam pipelines (``beam``), a registered Beam pipeline option; with the closest known
    option as a suggestion (ours first). Beam would only warn and run on with its default."""
    argv = list(argv or ())
    if not argv:
        return
    ours = [o for o in ours if o.startswith("--")]
    unknown = argv
    beam_names: List[str] = []
    if beam:
        parser = _beam_option_parser()
        beam_names = parser.names
        _, unknown = parser.parse_known_args(argv)
    for arg in unknown:
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            hint = suggest(name, ours) or suggest(name, beam_names)
            raise UsageError("unknown option %s%s: not an option of ldabeam %s%s (see `ldabeam "
                             "%s --help`)" % (name, hint, command,
                                              " nor a Beam pipeline option" if beam else "",
                                              command))
    if unknown:
        raise UsageError("unexpected argument %r; ldabeam %s takes options only (see `ldabeam "
                         "%s --help`)" % (unknown[0], command, command))


def _strip_option(argv: List[str], name: str) -> Optional[str]:
    """Remove ``--name=value`` / ``--name value`` from ``argv`` and return the value."""
    value = None
    out = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--" + name and i + 1 < len(argv):
            value = argv[i + 1]
            i += 2
            continue
        if a.startswith("--" + name + "="):
            value = a.split("=", 1)[1]
            i += 1
            continue
        out.append(a)
        i += 1
    argv[:] = out
    return value


@dataclass
class RunnerConfig:
    """A runner choice plus the Beam options to build each window's pipeline with."""

    runner: str
    argv: List[str] = field(default_factory=list)   # Beam options without --runner
    running_mode: Optional[str] = None               # DirectRunner: in_memory | multi_processing ...
    num_workers: int = 1

    @property
    def in_process(self) -> bool:
        """True when every worker runs inside the driver's process (state shared in memory)."""
        return self.runner in ("DirectRunner", "FnApiRunner") and self.running_mode == "in_memory"

    @property
    def local(self) -> bool:
        """True when workers run on this machine and can read the driver's local files."""
        return self.runner in ("DirectRunner", "FnApiRunner", "PortableRunner", "PrismRunner")

    def pipeline_options(self):
        from apache_beam.options.pipeline_options import PipelineOptions
        return PipelineOptions(list(self.argv))

    def make_runner(self):
        """The runner object (``FnApiRunner`` for the DirectRunner, see module docstring)."""
        if self.runner in ("DirectRunner", "FnApiRunner"):
            from apache_beam.runners.portability.fn_api_runner import FnApiRunner
            return FnApiRunner()
        return self.runner   # Beam resolves the name

    def describe(self) -> str:
        if self.runner in ("DirectRunner", "FnApiRunner"):
            return "%s(%s, %d worker%s)" % (self.runner, self.running_mode, self.num_workers,
                                            "s" if self.num_workers != 1 else "")
        return self.runner


def pipeline_options(beam_argv: Sequence[str] = (), *, in_memory: bool = True,
                     streaming: bool = False):
    """Beam ``PipelineOptions`` from command-line Beam options, with the runner set explicitly
    (the DirectRunner when none is given: the unnamed default would first try to download the
    Prism runner) and, unless ``in_memory`` is False, the DirectRunner's in-process mode when
    no running mode is given. ``streaming`` sets ``StandardOptions.streaming``. The one
    builder of options for pipelines other than the trainer's (:class:`RunnerConfig`)."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    argv = list(beam_argv or [])
    if not any(a == "--runner" or a.startswith("--runner=") for a in argv):
        argv.append("--runner=DirectRunner")
    if in_memory and not any(a.startswith("--direct_running_mode") for a in argv):
        argv.append("--direct_running_mode=in_memory")
    opts = PipelineOptions(argv)
    if streaming:
        opts.view_as(StandardOptions).streaming = True
    return opts


def runner_config(runner: str = "DirectRunner", beam_argv: Sequence[str] = ()) -> RunnerConfig:
    """Normalise a runner name and Beam options (see module docstring). Raises ``ValueError``
    for an unknown runner or a PortableRunner without ``--job_endpoint``."""
    argv = list(beam_argv or ())
    given = _strip_option(argv, "runner")
    runner = runner or given or "DirectRunner"
    if runner.lower() in ("direct", "directrunner"):
        runner = "DirectRunner"
    if runner not in RUNNERS:
        raise UsageError("unknown Beam runner %r; choose one of %s (or --runner inprocess for "
                         "the in-process trainer)" % (runner, ", ".join(RUNNERS)))
    if not any(a.startswith(("--pipeline_type_check", "--no_pipeline_type_check"))
               for a in argv):
        # construction-time type checking inspects every DoFn signature of the graph again,
        # for every unrolled step; the trainer declares its element types itself
        argv.append("--no_pipeline_type_check")
    cfg = RunnerConfig(runner=runner, argv=argv)
    if runner in ("DirectRunner", "FnApiRunner"):
        mode = _strip_option(argv, "direct_running_mode") or "in_memory"
        if mode not in ("in_memory", "multi_threading", "multi_processing"):
            raise UsageError("--direct_running_mode must be in_memory, multi_threading or "
                             "multi_processing, got %r" % mode)
        nw = _strip_option(argv, "direct_num_workers")
        n = int(nw) if nw is not None else (1 if mode == "in_memory" else (os.cpu_count() or 1))
        if n < 1:
            raise UsageError("--direct_num_workers must be >= 1, got %d" % n)
        if mode == "in_memory" and n > 1:
            # in_memory with N > 1 only splits every stage over N threads of this process;
            # the numba kernel already uses the cores, so that would only add overhead
            logger.info("in_memory DirectRunner: one worker (--direct_num_workers=%d ignored; "
                        "use multi_processing for worker processes)", n)
            n = 1
        argv += ["--direct_running_mode=%s" % mode, "--direct_num_workers=%d" % n]
        cfg.running_mode, cfg.num_workers = mode, n
    elif runner == "PortableRunner":
        if not any(a.startswith("--job_endpoint") for a in argv):
            raise UsageError("--runner PortableRunner needs --job_endpoint=HOST:PORT (for a local "
                             "test: python -m apache_beam.runners.portability."
                             "local_job_service_main --port N)")
        if not any(a.startswith("--environment_type") for a in argv):
            argv.append("--environment_type=LOOPBACK")
        nw = _strip_option(argv, "sdk_worker_parallelism")
        cfg.num_workers = max(1, int(nw)) if nw else 1
        if nw:
            argv.append("--sdk_worker_parallelism=%s" % nw)
        argv.insert(0, "--runner=PortableRunner")
    else:
        nw = next((a.split("=", 1)[1] for a in argv if a.startswith("--num_workers=")), None)
        cfg.num_workers = max(1, int(nw)) if nw else 2
        argv.insert(0, "--runner=%s" % runner)
    return cfg
