"""templates/: Flex Template metadata names exactly the CLI options (required ones required),
the launcher turns template strings into CLI arguments the parsers accept and runs the
template commands detached (one training window per launch), the Dockerfile
bakes the numba cache, the Airflow DAG compiles without Airflow and names only existing
options, and the Cloud Scheduler body launches the train template with real options."""
import argparse
import ast
import importlib
import json
import os
import py_compile
import re
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = os.path.join(REPO, "templates")
DATAFLOW = os.path.join(TEMPLATES, "dataflow")
sys.path.insert(0, DATAFLOW)
import launch  # noqa: E402  (templates/dataflow/launch.py)

# the template parameters a launch must give (ldabeam COMMAND --help; the
# vectorize template has no bundled sample worth reading on Dataflow, so its input is required;
# infer takes shards or input)
REQUIRED = {"vectorize": {"input", "output"}, "train": {"shards", "output"},
            "infer": {"model", "output"}}
# CLI options with no template parameter, each with the reason; every other long option of
# the live parser must be a parameter (a new option without metadata fails the test)
NOT_IN_TEMPLATE = {
    "vectorize": {},
    "train": {
        "runner": "the template runs on Dataflow: the launcher passes --runner=DataflowRunner "
                  "(launch.py adds it when absent); any other value would train inside the "
                  "launcher VM",
        "no-unroll": "the 'unroll' parameter is both forms of --unroll/--no-unroll "
                     "(unroll=false becomes --no-unroll)",
        "plan": "a template launch submits a window; --plan is asked of the command line "
                "before a launch and submits nothing",
        "passes-patience": "it applies only with --passes auto, which the template's 'passes' "
                           "(a number) does not offer: a detached launch cannot stop the "
                           "chain of windows on the held-out score",
        **{opt: "--update reads the new documents and grows the vocabulary on the driver and "
                "waits for its training run, while the template submits detached windows "
                "(--update, --grow-vocab, --input, --format, --exclude, --corpus-size, "
                "--keep-n, --replay and --replay-shards apply only with it)"
           for opt in ("update", "grow-vocab", "input", "format", "exclude", "corpus-size",
                       "keep-n", "replay", "replay-shards")},
    },
    "infer": {},
}

def command_parser(command):
    from pipelines.cli import COMMANDS
    mod = COMMANDS[command][0]
    p = argparse.ArgumentParser(prog="ldabeam " + command)
    importlib.import_module(mod).add_arguments(p)
    return p


def options_of(parser):
    """'--name' -> action for every long option of the parser."""
    return {s: a for a in parser._actions for s in a.option_strings if s.startswith("--")}


def template_options(command):
    """The option names (without '--') a Flex Template of ``command`` must offer: every long
    option of the live parser but --help and NOT_IN_TEMPLATE."""
    opts = {s[2:] for s in options_of(command_parser(command))} - {"help"}
    stale = set(NOT_IN_TEMPLATE[command]) - opts
    assert not stale, "NOT_IN_TEMPLATE names options ldabeam %s no longer has: %s" % (
        command, sorted(stale))
    return opts - set(NOT_IN_TEMPLATE[command])


def beam_options():
    """The names of Beam's registered pipeline options (``ldabeam`` passes them to Beam)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    return set(PipelineOptions([]).get_all_options(drop_default=False))


def check_options(command, names, beam=False):
    """Every name is an option of ``command`` (or, with ``beam``, one of Beam's pipeline
    options, which a launch passes through to Beam)."""
    parser = command_parser(command)
    opts = options_of(parser)
    known = beam_options() if beam else set()
    bad = sorted(n for n in names if "--" + n not in opts and n not in known)
    assert not bad, "ldabeam %s has no option(s) %s" % (command, ", ".join("--" + b for b in bad))
    return opts


def sample_value(param):
    for rx in param.get("regexes", []):
        if rx == "^(true|false)$":
            return "true"
        if "[0-9]+$" in rx and "." not in rx:
            return "3"
        if "\\." in rx:
            return "0.5"
        if rx.startswith("^gs://"):
            return "gs://bucket/path"
        m = re.match(r"^\^\(([^|)]+)", rx)
        if m:
            return m.group(1)
    return "value"


@pytest.mark.parametrize("command", ["vectorize", "train", "infer"])
def test_flex_template_metadata_matches_the_cli(command):
    with open(os.path.join(DATAFLOW, "metadata_%s.json" % command)) as f:
        meta = json.load(f)
    assert meta["name"] and meta["description"]
    params = meta["parameters"]
    names = [p["name"] for p in params]
    assert len(names) == len(set(names)), "duplicate parameter names"
    for p in params:
        assert set(p) >= {"name", "label", "helpText", "isOptional"}, p
        assert re.match(r"^[a-zA-Z][-a-zA-Z0-9_]*$", p["name"]), p["name"]
        for rx in p.get("regexes", []):
            re.compile(rx)
    required = {p["name"] for p in params if not p["isOptional"]}
    assert required == REQUIRED[command], "required parameters %s, expected %s" % (
        sorted(required), sorted(REQUIRED[command]))
    opts = check_options(command, names)
    # exactly the CLI's options: none missing (a new option needs its parameter, or a reason
    # in NOT_IN_TEMPLATE), none extra
    want = template_options(command)
    assert set(names) == want, "metadata_%s.json: missing %s, not CLI options %s" % (
        command, sorted(want - set(names)), sorted(set(names) - want))
    # options with fixed choices accept exactly those (the parser's choices, or for
    # --algorithm the installed algorithms)
    for p in params:
        action = opts["--" + p["name"]]
        choices = action.choices
        if p["name"] == "algorithm" and command == "train":
            from lda_core.algorithms.algorithm import ALGORITHMS
            choices = list(ALGORITHMS)
        if choices:
            assert p.get("regexes") == ["^(%s)$" % "|".join(choices)], p["name"]
    # on/off options must be declared true/false (the launcher converts them)
    for p in params:
        if opts["--" + p["name"]].nargs == 0:
            assert p.get("regexes") == ["^(true|false)$"], p["name"]
    # the launcher's arguments from sample values parse with the command's parser
    argv = ["--%s=%s" % (p["name"], sample_value(p)) for p in params]
    args = launch.normalise(argv, launch.flag_options(command))
    parsed, rest = command_parser(command).parse_known_args(args)
    assert rest == [], rest
    for p in params:
        dest = opts["--" + p["name"]].dest
        assert getattr(parsed, dest) is not None, p["name"]


def test_launcher_defaults_the_runner_to_dataflow():
    """The template commands run on Dataflow even if the launcher gave no --runner (ldabeam
    train's own default is the in-process trainer, Beam's the DirectRunner)."""
    for command in ("vectorize", "train", "infer"):
        assert launch.with_runner(command, ["--output=gs://b/x"]) == [
            "--output=gs://b/x", "--runner=DataflowRunner"]
        assert launch.with_runner(command, ["--runner=DataflowRunner", "--x=1"]) == [
            "--runner=DataflowRunner", "--x=1"]
        assert launch.with_runner(command, ["--runner", "PortableRunner"]) == [
            "--runner", "PortableRunner"]
    assert launch.with_runner("topics", ["--model=m"]) == ["--model=m"]


def test_launcher_runs_the_template_commands_detached():
    """A Flex Template launch must return soon after submitting its job: --detach is added
    unless the launch sets the detach parameter (true or false) itself."""
    for command in ("vectorize", "train", "infer"):
        assert launch.with_detach(command, ["--output=gs://b/x"]) == [
            "--output=gs://b/x", "--detach"]
        for given in ("--detach=false", "--detach=true", "--detach"):
            assert launch.with_detach(command, [given, "--x=1"]) == [given, "--x=1"]
        flags = launch.flag_options(command)
        assert launch.normalise(launch.with_detach(command, ["--detach=false"]), flags) == []
        assert launch.normalise(launch.with_detach(command, []), flags) == ["--detach"]
    assert launch.with_detach("topics", ["--model=m"]) == ["--model=m"]


def test_launcher_trains_one_window_per_launch(tmp_path, monkeypatch, capsys):
    """LDABEAM_COMMAND=train through the launcher (DirectRunner named, so nothing goes to
    Dataflow): each launch trains one window and returns; detach=false trains to the end."""
    from lda_core.storage.checkpoint import CheckpointStore
    from pipelines.ingest import synthetic
    ds = str(tmp_path / "ds")
    synthetic.write_dataset(synthetic.SyntheticSpec(n_docs=500, n_words=60, n_topics=3,
                                                    doc_length=20.0), ds)
    monkeypatch.setenv("LDABEAM_COMMAND", "train")
    common = ["--shards=%s" % ds, "--minibatch=100", "--runner=DirectRunner",
              "--minibatches-per-window=2", "--no-progress=true", "--heldout=none"]
    m = str(tmp_path / "m")
    assert launch.main(["--output=%s" % m, "--topics=3"] + common) == 0
    assert "window of minibatches 0..2 (of 5)" in capsys.readouterr().out
    assert CheckpointStore(m).pointer() == 2
    assert launch.main(["--output=%s" % m, "--resume=true"] + common) == 0
    assert CheckpointStore(m).pointer() == 4
    w = str(tmp_path / "w")
    assert launch.main(["--output=%s" % w, "--topics=3", "--detach=false"] + common) == 0
    assert "step 5 (5 this run)" in capsys.readouterr().out
    assert [c.step for c in CheckpointStore(w).list_checkpoints()][-1] == 5


def test_launcher_converts_flags_and_passes_beam_options():
    flags = launch.flag_options("train")
    out = launch.normalise(["--resume=true", "--unroll=false", "--no-progress=false",
                            "--topics=5", "--runner=DataflowRunner", "--project=p"], flags)
    assert out == ["--resume", "--no-unroll", "--topics=5", "--runner=DataflowRunner",
                   "--project=p"]
    with pytest.raises(SystemExit, match="takes true or false"):
        launch.normalise(["--resume=maybe"], flags)
    with pytest.raises(SystemExit, match="not an ldabeam subcommand"):
        launch.flag_options("nope")


def test_launcher_runs_the_command(tmp_path, monkeypatch, capsys):
    """LDABEAM_COMMAND=topics on a model trained here: the launcher is the CLI."""
    from pipelines.ingest import synthetic
    from pipelines.cli import main
    ds = str(tmp_path / "ds")
    synthetic.write_dataset(synthetic.SyntheticSpec(n_docs=300, n_words=80, n_topics=3,
                                                    doc_length=30.0), ds)
    assert main(["train", "--shards", ds, "--output", str(tmp_path / "m"), "--topics", "3",
                 "--algorithm", "online-vb", "--minibatch", "100", "--no-progress"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("LDABEAM_COMMAND", "topics")
    assert launch.main(["--model=%s" % (tmp_path / "m"), "--top=4"]) == 0
    assert "topic 0:" in capsys.readouterr().out


def test_dockerfile_bakes_the_numba_cache_and_copies_what_exists():
    text = open(os.path.join(DATAFLOW, "Dockerfile")).read()
    import apache_beam
    m = re.search(r"ARG BEAM_VERSION=(\S+)", text)
    assert m and m.group(1) == apache_beam.__version__
    assert re.search(r"^FROM apache/beam_python3\.\d+_sdk:\$\{BEAM_VERSION\}", text, re.M)
    env_at = text.index("NUMBA_CACHE_DIR=")
    assert "NUMBA_CPU_NAME=generic" in text
    assert text.index("warmup.py && ") > env_at, "warm-up must run with NUMBA_CACHE_DIR set"
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in text
    assert "FLEX_TEMPLATE_PYTHON_PY_FILE=/template/launch.py" in text
    for line in text.splitlines():
        if line.startswith("COPY") and "--from=" not in line:
            for src in line.split()[1:-1]:
                assert os.path.exists(os.path.join(REPO, src)), src
    # what setup.py ships inside the package (PACKAGE_FILES) is in the build context
    copied = [src for line in text.splitlines() if line.startswith("COPY")
              and "--from=" not in line for src in line.split()[1:-1]]
    setup_py = open(os.path.join(REPO, "setup.py")).read()
    block = setup_py[setup_py.index("PACKAGE_FILES"):]
    block = block[:block.index("]") + 1]
    shipped = ["/".join(parts) for parts in re.findall(r'os\.path\.join\("([^"]+)", "([^"]+)"\)',
                                                        block)]
    assert "templates/report.html" in shipped and len(shipped) >= 2, block
    for f in shipped:
        assert any(f == c or f.startswith(c.rstrip("/") + "/") for c in copied), (
            "%s (setup.py PACKAGE_FILES) is not copied into the image" % f)
    # the Beam version of the image, the worker requirements and the client: tests/test_pins.py


@pytest.mark.serial
@pytest.mark.slow
def test_warmup_fills_the_cache(cold_numba_cache):
    """The warm-up compiles into NUMBA_CACHE_DIR: the session's cold compile (conftest.py
    ``cold_numba_cache``) runs warmup.py in a new process (numba reads the variable at
    import) on an empty cache with NUMBA_CPU_NAME=generic, as the image build does, for every
    algorithm it compiles."""
    out = cold_numba_cache["stdout"]
    for name in ("online-vb", "batch-vb", "scvb0", "sparse-gibbs-vb"):
        assert "warmup: compiled %s" % name in out, out[-2000:]
    assert any(f.endswith(".nbc") for _, _, fs in os.walk(cold_numba_cache["dir"]) for f in fs)


def _dag_constants():
    path = os.path.join(TEMPLATES, "airflow", "ldabeam_dag.py")
    py_compile.compile(path, doraise=True)          # compiles without Airflow installed
    tree = ast.parse(open(path).read())
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            consts[node.targets[0].id] = node.value
    return tree, consts


def _strings(node):
    """All string pieces of an expression (constants joined by + are kept apart)."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]


def test_airflow_dag_compiles_and_names_existing_options():
    tree, consts = _dag_constants()
    for name, command in (("VECTORIZE_PARAMETERS", "vectorize"), ("TRAIN_PARAMETERS", "train")):
        keys = [k.value for k in consts[name].keys]
        check_options(command, keys, beam=True)
    train = {k.value: v for k, v in zip(consts["TRAIN_PARAMETERS"].keys,
                                        consts["TRAIN_PARAMETERS"].values)}
    # one detached window per run, resuming from LATEST; no --max-steps (the window and
    # --passes bound each launch and the whole chain)
    assert "resume" in train and "max-steps" not in train
    assert isinstance(train["detach"], ast.Constant) and train["detach"].value == "true"
    assert "minibatches-per-window" in train
    seen = set()
    for name in ("EVALUATE_COMMAND", "REPORT_COMMAND"):
        text = " ".join(_strings(consts[name]))
        for m in re.finditer(r"ldabeam (\w+)((?: --?[\w-]+(?: [^-\s&>][^\s&>]*)?)*)", text):
            command, rest = m.group(1), m.group(2)
            names = re.findall(r"--([\w-]+)", rest)
            assert names, text
            check_options(command, names)
            seen.add(command)
    assert seen == {"evaluate", "report"}
    # the four stages are chained in order
    src = open(os.path.join(TEMPLATES, "airflow", "ldabeam_dag.py")).read()
    assert "check >> vectorize >> plan >> train >> evaluate >> report" in src
    ops = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)
           and isinstance(n.func, ast.Name)}
    assert {"DataflowStartFlexTemplateOperator", "BashOperator", "ShortCircuitOperator"} <= ops
    # the launcher returns after submitting: the operator itself waits for the Dataflow job
    flex = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == "DataflowStartFlexTemplateOperator"]
    assert flex and all(any(k.arg == "wait_until_finished" and isinstance(k.value, ast.Constant)
                            and k.value.value is True for k in n.keywords) for n in flex)
    # plan_train reads the position from LATEST's state.json the way the trainer records it
    assert "minibatches_done" in src and "state.json" in src


def test_cloud_scheduler_body_launches_the_train_template():
    with open(os.path.join(TEMPLATES, "cloud_scheduler", "launch_train_body.json")) as f:
        body = json.load(f)
    lp = body["launchParameter"]
    assert lp["containerSpecGcsPath"].endswith("/ldabeam-train.json")
    params = lp["parameters"]
    assert params["resume"] == "true" and params["detach"] == "true"
    opts = check_options("train", list(params), beam=True)
    args = launch.normalise(["--%s=%s" % kv for kv in params.items()],
                            launch.flag_options("train"))
    parsed, rest = command_parser("train").parse_known_args(args)
    assert parsed.resume is True and parsed.detach is True and opts is not None
    assert parsed.exchange == "remote"
    # what the command does not take are the Beam options the remote defaults read, with the
    # values of the launch's environment
    env = lp["environment"]
    assert sorted(rest) == sorted(["--max_num_workers=%d" % env["maxWorkers"],
                                   "--machine_type=%s" % env["machineType"]])
    readme = open(os.path.join(TEMPLATES, "cloud_scheduler", "README.md")).read()
    assert "flexTemplates:launch" in readme and "gcloud scheduler jobs create http" in readme


def test_flink_readme_names_runner_options_and_the_offline_limit():
    text = open(os.path.join(TEMPLATES, "flink", "README.md")).read()
    for s in ("--runner=FlinkRunner", "--flink_master=", "--runner=PortableRunner",
              "--job_endpoint=", "--environment_type=", "--setup_file", "Maven Central"):
        assert s in text, s
    from apache_beam.options.pipeline_options import PipelineOptions
    beam = set(PipelineOptions([]).get_all_options(drop_default=False))
    checked = 0
    for m in re.finditer(r"ldabeam (\w+)((?: \\?\n?\s*--?[\w-]+(?:[= ][^-\s\\][^\s\\]*)?)*)",
                         text):
        command = m.group(1)
        if command not in ("vectorize", "train", "evaluate", "topics", "infer", "stream"):
            continue
        # an option the command does not define must be one of Beam's pipeline options
        # (they pass through to Beam)
        opts = options_of(command_parser(command))
        names = re.findall(r"--([\w-]+)", m.group(2))
        if not names:          # the command named in prose
            continue
        unknown = [n for n in names if "--" + n not in opts and n not in beam]
        assert not unknown, (command, unknown)
        checked += 1
    assert checked >= 3


def _help_of(command, monkeypatch):
    """``ldabeam COMMAND --help`` as the CLI formats it (ArgumentDefaultsHelpFormatter), on
    one line per option (a wide terminal: no hyphenated line breaks)."""
    monkeypatch.setenv("COLUMNS", "1000")
    from pipelines.cli import COMMANDS, build_parser
    parser = build_parser({command: COMMANDS[command]})
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(sub.choices[command].format_help().split())


def test_vectorize_help_states_what_happens(monkeypatch):
    """No sentinel shown as a default: ``--no-lowercase`` is not "(default: True)", ``--keep-n``
    not "(default: -1)"; the help text says what happens when the option is not given (and
    the parsed defaults are unchanged)."""
    text = _help_of("vectorize", monkeypatch)
    for bad in ("(default: True)", "(default: -1)", "(default: None)"):
        assert bad not in text, bad
    for want in ("keep the case of tokens (default: tokens are lower-cased)",
                 "(default: accents are removed", "0: no cap (default: 100000",
                 "default: they are redistributed",
                 "(default: the bundled Wikipedia sample", "(default: 5 for text inputs"):
        assert want in text, want
    args, rest = command_parser("vectorize").parse_known_args(["--output", "x"])
    assert rest == [] and args.input is None and args.keep_n == -1 and args.keep_tokens == ""
    assert args.lowercase is True and args.deaccent is True and args.reshuffle is True
    assert args.no_below is None and args.no_above is None and args.min_article_tokens is None
    args, _ = command_parser("vectorize").parse_known_args(
        ["--no-lowercase", "--no-deaccent", "--no-reshuffle", "--keep-n", "0"])
    assert (args.lowercase, args.deaccent, args.reshuffle, args.keep_n) == (False, False,
                                                                           False, 0)



def test_one_story_about_the_exchange_of_remote_launches(monkeypatch):
    """`ldabeam train --help`, docs/cluster.md, the templates' READMEs, the train template's
    metadata, the DAG and the scheduler body tell one story: every remote launch (waiting,
    detached, template, DAG, scheduler) of online VB and SCVB0 runs the remote exchange; none
    says that a template or a detached window runs the state exchange (issue 31, item 1)."""
    text = _help_of("train", monkeypatch)
    at = text.rindex("--exchange {")
    exchange = text[at:text.index("--unroll", at)]
    assert "Default: remote on remote runners (state for sparse-gibbs-vb)" in exchange
    read = lambda *p: " ".join(open(os.path.join(REPO, *p), encoding="utf-8").read().split())
    docs = {"docs/cluster.md": read("docs", "cluster.md"),
            "templates/dataflow/README.md": read("templates", "dataflow", "README.md"),
            "templates/cloud_scheduler/README.md": read("templates", "cloud_scheduler",
                                                        "README.md"),
            "templates/airflow/ldabeam_dag.py": read("templates", "airflow", "ldabeam_dag.py")}
    # the earlier claims, each of which said a remote launch took the state exchange
    stale = [r"what remote runners run today", r"which runs the state exchange",
             r"detach\W+(?:and|or) \W*--no-unroll\W* run the state exchange",
             r"template launch(?:es)?[^.]{0,80}(?:use|run)s? the state exchange",
             r"word blocks is the default on remote runners"]
    for name, body in docs.items():
        for rx in stale:
            assert not re.search(rx, body, re.I), (name, rx)
    assert "runs the **remote exchange** for `online-vb` and `scvb0`" in \
        docs["templates/dataflow/README.md"]
    assert "remote exchange" in docs["templates/cloud_scheduler/README.md"]
    assert "exchange=remote" in docs["templates/airflow/ldabeam_dag.py"]
    assert re.search(r"Every remote launch[^.]*runs the remote exchange", docs["docs/cluster.md"])
    meta = json.load(open(os.path.join(DATAFLOW, "metadata_train.json")))
    help_text = next(p for p in meta["parameters"] if p["name"] == "exchange")["helpText"]
    assert help_text.startswith("remote (default for online-vb and scvb0 on Dataflow)")
    body = json.load(open(os.path.join(TEMPLATES, "cloud_scheduler", "launch_train_body.json")))
    assert body["launchParameter"]["parameters"]["exchange"] == "remote"
