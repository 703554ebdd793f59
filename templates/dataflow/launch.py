"""Flex Template entry point: run one ``ldabeam`` subcommand with the template's parameters.

The Dataflow Flex Template launcher runs ``python launch.py --name=value ...`` with one
``--name=value`` per template parameter (names are exactly the CLI options, see
``metadata_*.json``) plus Dataflow's own pipeline options (``--runner``, ``--project``,
``--region``, ``--temp_location``, ``--sdk_container_image``, ...). The subcommand comes from
the environment variable ``LDABEAM_COMMAND`` baked into the image (``docker build
--build-arg LDABEAM_COMMAND=train``), so one Dockerfile serves the vectorize, train and infer
templates.

Template parameters are always strings, so on/off options arrive as ``--resume=true``;
:func:`normalise` turns those into the bare flag (``false`` drops it) using the subcommand's
own argparse definitions, and leaves every other argument untouched.

The template commands run on Dataflow: without a ``--runner`` argument :func:`with_runner`
adds ``--runner=DataflowRunner`` (``ldabeam train``'s own default is the in-process trainer
and Beam's the DirectRunner, either of which would run the job inside the launcher VM).

They run *detached*: a Flex Template launch must finish soon after the job is submitted
(Dataflow fails a launcher that waits for its job with "Timeout in polling result file ...
Your launch takes too long to finish"), so :func:`with_detach` adds ``--detach`` unless the
launch gives the ``detach`` parameter itself (``detach=false`` turns it off, e.g. for a
launch that must wait). Detached, ``vectorize`` and ``infer`` return after submitting their
pipeline (which writes manifest.json / summary.json last), and ``train`` submits exactly one
window (``minibatches-per-window`` minibatches from the latest checkpoint with
``resume=true``) whose job publishes the checkpoint and the run log itself
(docs/beam-training.md, "Detached windows").
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List

TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off", "")


def flag_options(command: str) -> Dict[str, argparse.Action]:
    """``--option`` -> its argparse action, for the options of ``command`` that take no
    value (store_true / store_false / BooleanOptionalAction)."""
    import importlib
    from pipelines.cli import COMMANDS
    if command not in COMMANDS:
        raise SystemExit("LDABEAM_COMMAND=%r is not an ldabeam subcommand (%s)"
                         % (command, ", ".join(COMMANDS)))
    p = argparse.ArgumentParser(add_help=False)
    importlib.import_module(COMMANDS[command][0]).add_arguments(p)
    out = {}
    for a in p._actions:
        if a.nargs == 0:
            for s in a.option_strings:
                out[s] = a
    return out


def normalise(argv: List[str], flags: Dict[str, argparse.Action]) -> List[str]:
    out = []
    for a in argv:
        name, eq, value = a.partition("=")
        if eq and name in flags:
            v = value.strip().lower()
            if v in TRUE:
                out.append(name)
            elif v not in FALSE:
                raise SystemExit("%s takes true or false, got %r" % (name, value))
            elif isinstance(flags[name], argparse.BooleanOptionalAction):
                out.append("--no-" + name[2:])
            continue
        out.append(a)
    return out


TEMPLATE_COMMANDS = ("vectorize", "train", "infer")


def with_runner(command: str, argv: List[str]) -> List[str]:
    """``argv`` plus ``--runner=DataflowRunner`` for a template command that names no runner."""
    if command in TEMPLATE_COMMANDS and not any(a == "--runner" or a.startswith("--runner=")
                                                for a in argv):
        return list(argv) + ["--runner=DataflowRunner"]
    return list(argv)


def with_detach(command: str, argv: List[str]) -> List[str]:
    """``argv`` plus ``--detach`` for a template command whose launch does not set the
    ``detach`` parameter (before :func:`normalise`, so ``--detach=false`` is respected)."""
    if command in TEMPLATE_COMMANDS and not any(
            a == "--detach" or a.startswith("--detach=") for a in argv):
        return list(argv) + ["--detach"]
    return list(argv)


def main(argv=None) -> int:
    command = os.environ.get("LDABEAM_COMMAND", "")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = with_runner(command, normalise(with_detach(command, argv), flag_options(command)))
    from pipelines.cli import main as cli_main
    return cli_main([command] + args)


if __name__ == "__main__":
    sys.exit(main())
