"""Up-front checks of a launch on a remote runner, before any file is read or written.

A Dataflow job needs a project, a region and a ``gs://`` temp location, and its workers read
and write only what an object store holds; without credentials, Beam's and the storage
client's look-ups retry with back-off for minutes before failing. Each of these is one line
naming what is missing and the fix (:class:`lda_core.errors.UsageError`, exit 2), found
before the command touches its inputs:

* Dataflow: ``--project``, ``--region`` and ``--temp_location`` given, the temp location on
  ``gs://``;
* every remote runner (not the DirectRunner, PortableRunner or Prism on this machine): the
  paths the workers open (``--shards``, ``--output``, ...) on an object store;
* credentials: found within :data:`CREDENTIALS_TIMEOUT_S` when the run will need them (a
  Dataflow launch, or any ``gs://`` path not served by an emulator), unless ``--dry_run``
  with ``--no_auth`` says that nothing will be submitted or read.
"""
from __future__ import annotations

import os
import threading
from urllib.parse import urlparse
from typing import Dict, List, Optional

from lda_core.errors import UsageError
from pipelines.runtime.beam_options import runner_config, RunnerConfig
from pipelines.runtime.paths import is_remote

# how long the credential look-up may take before the command says none were found
CREDENTIALS_TIMEOUT_S = 10.0
DATAFLOW_NEEDS = (("project", "--project"), ("region", "--region"),
                  ("temp_location", "--temp_location"))


def _options(cfg: RunnerConfig) -> Dict[str, object]:
    return cfg.pipeline_options().get_all_options(drop_default=False)


def _truthy(v) -> bool:
    return v is True or str(v).lower() in ("true", "1", "yes")


def find_credentials(timeout_s: float = CREDENTIALS_TIMEOUT_S) -> Optional[str]:
    """None when Google application-default credentials are found within ``timeout_s``, else
    why not (the look-up runs in a thread: a metadata server that never answers cannot hold
    the command)."""
    out: Dict[str, Optional[str]] = {}

    def look():
        try:
            import google.auth
            google.auth.default()
            out["why"] = None
        except Exception as e:        # DefaultCredentialsError, TransportError, ...
            out["why"] = str(e).splitlines()[0] if str(e) else type(e).__name__

    t = threading.Thread(target=look, name="credential-lookup", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return "the look-up did not finish within %g s" % timeout_s
    return out.get("why")


def dataflow_option_errors(cfg: RunnerConfig) -> List[str]:
    """Beam's own refusals of a Dataflow job's project and temp/staging locations (its
    validator's name rules), found here: Beam otherwise meets an invalid bucket name by
    looking up a default bucket, retrying for minutes, and an invalid project when the
    pipeline is built, as an internal error."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    po = cfg.pipeline_options()
    view = po.view_as(GoogleCloudOptions)
    if urlparse(view.dataflow_endpoint or "").netloc.startswith("localhost"):
        return []         # a local stand-in for the service: Beam checks none of these either
    v = PipelineOptionsValidator(po, None)
    errors = list(v.validate_cloud_options(view)) + list(v.validate_gcs_path(view,
                                                                            "temp_location"))
    if view.staging_location:
        errors += v.validate_gcs_path(view, "staging_location")
    return [str(e).splitlines()[0] for e in errors]


def unreachable(cfg: RunnerConfig, paths: Dict[str, Optional[str]]) -> List[str]:
    """The options among ``paths`` (option -> path) whose path the workers of ``cfg`` cannot
    open: paths on this machine, for a runner whose workers run elsewhere."""
    if cfg.local or cfg.in_process:
        return []
    return [opt for opt, p in paths.items() if p and not is_remote(p)]


def check_remote_launch(cfg: RunnerConfig, paths: Dict[str, Optional[str]],
                        timeout_s: float = CREDENTIALS_TIMEOUT_S, offline: bool = False) -> None:
    """The checks of the module docstring for a launch on ``cfg`` that opens ``paths``
    (option name -> path; None: not given). Nothing for a runner on this machine.
    ``offline``: nothing will be submitted or opened by a worker (``ldabeam train --plan``):
    the options are checked, the paths and credentials are not."""
    given = {k: v for k, v in paths.items() if v}
    if cfg.local or cfg.in_process:
        # an emulator (STORAGE_EMULATOR_HOST) takes requests without credentials
        needs_auth = not os.environ.get("STORAGE_EMULATOR_HOST") and any(
            str(p).startswith("gs://") for p in given.values())
        opts = None
    else:
        opts = _options(cfg)
        if cfg.runner == "DataflowRunner":
            missing = [opt for key, opt in DATAFLOW_NEEDS if not opts.get(key)]
            if missing:
                raise UsageError("--runner DataflowRunner needs %s: give %s (e.g. --project "
                                 "my-project --region us-central1 --temp_location "
                                 "gs://my-bucket/tmp)" % (", ".join(missing),
                                                          " ".join(m + "=..." for m in missing)))
            if not str(opts.get("temp_location")).startswith("gs://"):
                raise UsageError("--temp_location %s: Dataflow stages and writes temporary "
                                 "files on Cloud Storage; give a gs:// location"
                                 % opts.get("temp_location"))
            bad = dataflow_option_errors(cfg)
            if bad:
                raise UsageError("--runner DataflowRunner: %s" % bad[0])
        for opt in ([] if offline else unreachable(cfg, given)):
            raise UsageError("%s %s is on this machine: the workers of %s cannot open it; "
                             "give a path on an object store (gs://, s3://, ...)"
                             % (opt, given[opt], cfg.runner))
        needs_auth = cfg.runner == "DataflowRunner" or any(
            str(p).startswith("gs://") for p in given.values())
        if _truthy(opts.get("dry_run")) and _truthy(opts.get("no_auth")):
            return
    if needs_auth and not offline:
        why = find_credentials(timeout_s)
        if why is not None:
            raise UsageError("no Google Cloud credentials for %s (%s): run `gcloud auth "
                             "application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
                             "to a service-account key file"
                             % (cfg.runner if opts is not None else ", ".join(
                                 p for p in given.values() if str(p).startswith("gs://")),
                                why))


def check_command(runner: Optional[str], beam_argv, paths: Dict[str, object],
                  offline: bool = False) -> None:
    """:func:`check_remote_launch` for a command: ``runner`` (``--runner`` of ``ldabeam
    train``; None: the Beam options' own, else the DirectRunner; ``inprocess``: the in-process
    trainer) and the option -> path(s) it opens (lists flattened; None: not given)."""
    if runner and runner.lower() in ("inprocess", "in-process", "local"):
        cfg = RunnerConfig("DirectRunner", [], "in_memory")
    else:
        try:
            cfg = runner_config(runner, list(beam_argv or ()))
        except ValueError:
            return        # an unknown runner is reported later, with its own message
    flat: Dict[str, Optional[str]] = {}
    for opt, value in paths.items():
        for i, p in enumerate(value if isinstance(value, (list, tuple)) else [value]):
            flat[opt if i == 0 else "%s (#%d)" % (opt, i + 1)] = p
    check_remote_launch(cfg, flat, offline=offline)
