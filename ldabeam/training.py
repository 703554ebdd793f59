"""``ldabeam.train``: a model from raw texts, a path or a table, in Python.

The same run as ``ldabeam vectorize`` then ``ldabeam train`` (the command line's own code,
:func:`pipelines.cli.main`), with the commands' options given by name::

    model = ldabeam.train(texts, topics=20, passes="auto", no_below=3, stopwords="gensim")

An option is the command line's long option with ``_`` for ``-`` (``no_below=3`` is
``--no-below 3``, ``minibatch=64`` is ``--minibatch 64``); ``True`` gives a flag, ``False`` or
``None`` leaves it out, a list or tuple gives its values in turn. Each goes to the command that
defines it: vectorize's (reading, tokenizing, pruning) or train's (algorithm, schedule,
evaluation, runner); ``seed``, ``overwrite`` and ``log_level`` go to both. A name neither
command defines is a UsageError naming it (and the closest names). Beam's own pipeline options
go, as written on the command line, in ``beam_args=["--direct_num_workers=2", ...]`` (to both).

``data``: a list of texts or of records (dicts with a ``text`` field, and ``id`` / ``title`` /
``label`` when they have them), a pandas DataFrame or a pyarrow Table (its rows as records), or
a path: raw input in any format of ``ldabeam vectorize`` (a file, a folder, a glob), or a
dataset ``ldabeam vectorize`` wrote (then only ``train`` runs). ``output``: the model
directory (default: a new temporary directory, kept, named in the log); ``dataset``: where the
vectorized dataset is written (default: a new temporary directory, kept: the model's reports
and exports read its shards). A failed command raises the error it printed (UsageError /
InputError / ... for a user error, TrainingError otherwise).
"""
from __future__ import annotations

import contextlib
import difflib
import io
import json
import logging
import os
import sys
import tempfile
from typing import Any, Dict, List, Optional

from lda_core.errors import InputError, TrainingError, UsageError
from ldabeam.model import LdaModel, load
from pipelines.cli import build_parser, COMMANDS, main as cli_main

logger = logging.getLogger(__name__)

# options both commands define, and which of them takes the value
_BOTH = {"seed", "overwrite", "log_level"}
_VECTORIZE_ONLY = {"format", "exclude", "keep_n", "vocab"}   # train's are --update's
# the function's own arguments, not options
_RESERVED = {"input", "output", "shards", "help", "update", "resume", "version"}


def _long_options(command: str) -> Dict[str, Any]:
    """``{name with _: argparse action}`` of a command's long options."""
    parser = build_parser({command: COMMANDS[command]}).command_parsers[command]
    out = {}
    for action in parser._actions:
        for s in action.option_strings:
            if s.startswith("--"):
                out[s[2:].replace("-", "_")] = action
    return out


def _argv(name: str, value, action) -> List[str]:
    flag = "--" + name.replace("_", "-")
    if value is None or value is False:
        return []
    if value is True:
        if action is not None and action.nargs != 0:
            raise UsageError("ldabeam.train(%s=True): --%s takes a value, give it"
                             % (name, flag[2:]))
        return [flag]
    if action is not None and action.nargs == 0:
        raise UsageError("ldabeam.train(%s=%r): --%s is a flag; give %s=True"
                         % (name, value, flag[2:], name))
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return [flag] + [str(v) for v in values]


def split_options(options: Dict[str, Any]):
    """``(vectorize argv, train argv)`` of options given by name (module docstring)."""
    vec, tr = _long_options("vectorize"), _long_options("train")
    v_argv: List[str] = []
    t_argv: List[str] = []
    for name, value in options.items():
        if name == "update":
            raise UsageError("ldabeam.train(update=...): to continue a model, use "
                             "ldabeam.load(MODEL_DIR).update(texts)")
        if name in _RESERVED:
            raise UsageError("ldabeam.train(%s=...): give the data as the first argument and "
                             "the model directory as output=" % name)
        if name == "beam_args":
            vals = [str(x) for x in (value or [])]
            v_argv += vals
            t_argv += vals
            continue
        if name in _BOTH:
            v_argv += _argv(name, value, vec.get(name))
            t_argv += _argv(name, value, tr.get(name))
        elif name in _VECTORIZE_ONLY or (name in vec and name not in tr):
            v_argv += _argv(name, value, vec[name])
        elif name in tr:
            t_argv += _argv(name, value, tr[name])
        else:
            close = difflib.get_close_matches(name, sorted(set(vec) | set(tr)), n=3)
            raise UsageError("ldabeam.train(%s=...): neither `ldabeam vectorize` nor `ldabeam "
                             "train` has --%s%s" % (name, name.replace("_", "-"),
                                                    "; did you mean %s?" % ", ".join(close)
                                                    if close else ""))
    return v_argv, t_argv


def _is_dataset(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "manifest.json"))


def _records(data) -> Optional[List[dict]]:
    """``data`` as records when it is texts, records or a table; None for a path."""
    if isinstance(data, (str, os.PathLike)):
        return None
    if hasattr(data, "to_pylist"):                  # pyarrow Table
        rows = data.to_pylist()
    elif hasattr(data, "to_dict") and hasattr(data, "columns"):   # pandas DataFrame
        rows = data.to_dict("records")
    else:
        try:
            rows = list(data)
        except TypeError:
            raise UsageError("ldabeam.train(data=%s): give a list of texts or records, a "
                             "DataFrame or Table, or a path" % type(data).__name__) from None
    out = []
    for i, r in enumerate(rows):
        if isinstance(r, str):
            out.append({"id": "doc-%d" % i, "text": r})
        elif isinstance(r, dict):
            out.append({k: (v if isinstance(v, (str, int, float, bool)) or v is None
                            else str(v)) for k, v in r.items()})
        else:
            raise UsageError("ldabeam.train: document %d is a %s; give texts (str) or records "
                             "(dict with a 'text' field)" % (i, type(r).__name__))
    if not out:
        raise InputError("ldabeam.train: no documents were given")
    return out


class _Tee(io.TextIOBase):
    """Writes to ``stream`` and keeps the text (the command's error line, to raise)."""

    def __init__(self, stream):
        self.stream, self.kept = stream, []

    def write(self, s):
        self.kept.append(s)
        return self.stream.write(s)

    def flush(self):
        self.stream.flush()


def _run(argv: List[str]) -> None:
    tee = _Tee(sys.stderr)
    with contextlib.redirect_stderr(tee):
        rc = cli_main(argv)
    if rc == 0:
        return
    lines = [x for x in "".join(tee.kept).splitlines() if x.strip()]
    last = lines[-1] if lines else "ldabeam %s exited %d" % (argv[0], rc)
    if rc == 2:
        raise UsageError(last)
    if rc in (130, 143):
        raise KeyboardInterrupt(last)
    raise TrainingError(last)


def train(data, output: Optional[str] = None, *, dataset: Optional[str] = None,
          **options) -> LdaModel:
    """Vectorize ``data`` and train a model on it, as ``ldabeam vectorize`` + ``ldabeam
    train`` with ``options`` by name (module docstring); returns the model
    (:func:`ldabeam.load` of ``output``)."""
    v_argv, t_argv = split_options(options)
    if output is None:
        output = tempfile.mkdtemp(prefix="ldabeam-model-")
        logger.info("ldabeam.train: the model is written to %s", output)
    output = os.fspath(output)
    records = _records(data)
    if records is None and _is_dataset(os.fspath(data)):
        own = [n for n in options if n not in _BOTH and n != "beam_args"
               and split_options({n: options[n]})[0]]
        if own:
            raise UsageError("ldabeam.train: %s is a dataset already vectorized; options of "
                             "`ldabeam vectorize` (%s) do not apply"
                             % (os.fspath(data), ", ".join(own)))
        shards = os.fspath(data)
    else:
        if dataset is None:
            dataset = tempfile.mkdtemp(prefix="ldabeam-dataset-")
            os.rmdir(dataset)                 # vectorize publishes it
            logger.info("ldabeam.train: the dataset is written to %s", dataset)
        shards = os.fspath(dataset)
        with tempfile.TemporaryDirectory(prefix="ldabeam-texts-") as tmp:
            if records is None:
                inputs = [os.fspath(data)]
            else:
                path = os.path.join(tmp, "documents.jsonl")
                with open(path, "w", encoding="utf-8") as f:
                    for r in records:
                        f.write(json.dumps(r, ensure_ascii=False) + "\n")
                inputs = [path]
            _run(["vectorize", "--input"] + inputs + ["--output", shards] + v_argv)
    _run(["train", "--shards", shards, "--output", output] + t_argv)
    return load(output)
