"""``--detach``: submit a pipeline and return without waiting for it (Flex Templates).

A Dataflow Flex Template's launcher must return soon after ``run()`` (a launch that waits for
its job fails with "Timeout in polling result file ... Your launch takes too long to
finish"), so ``ldabeam vectorize / infer / train --detach`` submit their pipeline and return
the :class:`apache_beam.runners.runner.PipelineResult`; everything a waiting command does
after the pipeline (the manifest, summary.json, the trainer's checkpoint and run log) is
written by the pipeline itself, in its last step.

Some runners run the job *inside the submitting process*: the DirectRunner (Beam's FnApiRunner
returns from ``run()`` only when the job is done; with ``multi_processing`` its workers are
this process's children), a PortableRunner job with ``--environment_type=LOOPBACK`` (the SDK
workers are threads of the submitting process) and the PrismRunner (a local binary this
process starts). There ``--detach`` cannot leave the job running after the command exits, so
the commands wait for it and say so (:func:`job_runs_here`).
"""
from __future__ import annotations

from typing import Optional, Sequence

# runners whose jobs run in (or are owned by) the submitting process
LOCAL_RUNNERS = ("DirectRunner", "FnApiRunner", "BundleBasedDirectRunner",
                 "SwitchingDirectRunner", "PrismRunner")


def add_detach_option(group, last_write: str) -> None:
    """``--detach`` of a command whose job writes ``last_write`` (e.g. "summary.json in DIR")
    as its last step (vectorize, infer; train explains its windows itself)."""
    group.add_argument("--detach", action="store_true",
                       help="submit the pipeline and return without waiting for it (Dataflow "
                            "Flex Templates); the job writes %s as its last step. Runners "
                            "that run the job in this process (DirectRunner, PortableRunner "
                            "with LOOPBACK workers) are still waited for" % last_write)


def _runner_name(runner) -> str:
    if runner is None:
        return "DirectRunner"
    if not isinstance(runner, str):
        runner = type(runner).__name__
    name = runner.rsplit(".", 1)[-1]
    return "DirectRunner" if name.lower() in ("direct", "directrunner") else name


def job_runs_here(runner, beam_argv: Sequence[str] = ()) -> bool:
    """True when a job of ``runner`` (name or runner object) with the Beam options
    ``beam_argv`` runs inside this process, so the process must wait for it (module
    docstring)."""
    name = _runner_name(runner)
    if name in LOCAL_RUNNERS:
        return True
    if name == "PortableRunner":
        from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions
        env = PipelineOptions(list(beam_argv or ())).view_as(PortableOptions).environment_type
        return (env or "").upper() == "LOOPBACK"
    return False


def runner_of_options(options) -> str:
    """The runner name a ``PipelineOptions`` selects (DirectRunner when none)."""
    from apache_beam.options.pipeline_options import StandardOptions
    return _runner_name(options.view_as(StandardOptions).runner)


def job_id(result) -> Optional[str]:
    """The runner's id of a submitted job (Dataflow: the job id), or None if it has none."""
    if result is None:
        return None
    f = getattr(result, "job_id", None)
    if callable(f):
        try:
            v = f()
            if v:
                return str(v)
        except Exception:  # pragma: no cover - runner-specific
            pass
    v = getattr(result, "_job_id", None)
    return str(v) if v else None


def job_state(result) -> str:
    try:
        return str(result.state)
    except Exception:  # pragma: no cover - runner-specific
        return "UNKNOWN"


def describe(result, runner: str) -> str:
    """One line naming the submitted job (runner, id, state)."""
    jid = job_id(result)
    return "%s job%s, state %s" % (_runner_name(runner), " %s" % jid if jid else "",
                                   job_state(result))
