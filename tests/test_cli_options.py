"""`ldabeam`'s options as a new user meets them (issue 25, "Options"): global options anywhere
on the line, a misspelt option is an error with a suggestion (with a Beam runner too, where
Beam only warned and ran on with its default), --version, each default shown once in the help,
a help text for every option, and one default per field name across commands."""
import os
import re

import pytest

from pipelines import cli

from helpers.uci import kos_dataset as make_dataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ldabeam(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def help_text(capsys, command):
    with pytest.raises(SystemExit) as ei:
        cli.main([command, "--help"])
    assert ei.value.code == 0
    return capsys.readouterr().out


def option_entries(text):
    """The help of each option: its first line (two spaces, then a dash) and the deeper
    indented lines that continue it."""
    entries, cur = [], None
    for line in text.split("\n"):
        if re.match(r"^  -", line):
            cur = [line.strip()]
            entries.append(cur)
        elif cur is not None and line.startswith("    "):
            cur.append(line.strip())
        else:
            cur = None
    return [" ".join(e) for e in entries]


@pytest.fixture(scope="module")
def ds(tmp_path_factory, kos_paths):
    return make_dataset(str(tmp_path_factory.mktemp("kos") / "ds"), kos_paths, n_train=120,
                        n_held=20, n_shards=2)


# --------------------------------------------------------------------------------- global options
def test_log_level_is_accepted_before_and_after_the_command():
    """`ldabeam train --log-level DEBUG` was refused ("unrecognized arguments")."""
    for argv, level in ((["--log-level", "ERROR", "train"], "ERROR"),
                        (["train", "--log-level", "debug"], "DEBUG"),
                        (["--log-level", "ERROR", "topics", "--log-level", "WARNING"],
                         "WARNING"),
                        (["vectorize"], "INFO")):
        parser = cli.build_parser()
        args, leftovers = parser.parse_known_args(argv)
        assert (args.log_level, leftovers) == (level, []), argv


def test_log_level_after_the_command_takes_effect_in_train(ds, tmp_path, capsys):
    rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", tmp_path / "m",
                           "--topics", 3, "--algorithm", "online-vb", "--max-steps", 1,
                           "--heldout", "none", "--no-progress", "--log-level", "WARNING")
    assert rc == 0, err


def test_version(capsys):
    with open(os.path.join(REPO, "setup.py")) as f:
        declared = re.search(r"""version\s*=\s*["']([^"']+)["']""", f.read()).group(1)
    with pytest.raises(SystemExit) as ei:
        cli.main(["--version"])
    assert ei.value.code == 0
    assert capsys.readouterr().out.strip() == "ldabeam " + declared
    assert cli.version() == declared


# ------------------------------------------------------------------------------ unknown options
def test_a_misspelt_option_with_a_beam_runner_is_an_error_with_a_suggestion(ds, tmp_path,
                                                                            capsys):
    """Beam only warned ("Discarding unparseable args") and trained with the default
    minibatch; the in-process runner refused it without a suggestion."""
    for runner in ("DirectRunner", "inprocess"):
        md = tmp_path / runner
        rc, out, err = ldabeam(capsys, "train", "--shards", ds, "--output", md, "--topics", 3,
                               "--algorithm", "online-vb", "--max-steps", 1, "--heldout",
                               "none", "--no-progress", "--runner", runner, "--minibach", 64)
        assert rc == 2, err
        assert err.strip().split("\n")[-1] == (
            "ldabeam train: error: unknown option --minibach (did you mean --minibatch?): not "
            "an option of ldabeam train nor a Beam pipeline option (see `ldabeam train "
            "--help`)")
        assert not os.path.exists(str(md / "checkpoints"))


def test_beam_options_pass_and_misspelt_beam_options_get_a_suggestion(capsys):
    from pipelines.runtime.beam_options import check_unknown_options
    ours = ["--model", "--output", "--batch-size"]
    check_unknown_options("infer", ["--runner", "DirectRunner", "--direct_num_workers=2",
                                    "--direct_running_mode", "multi_processing"], ours, True)
    for argv, hint in ((["--direct_num_worker=2"], "--direct_num_workers"),
                       (["--batch-sise", "8"], "--batch-size"),
                       (["--runer", "DirectRunner"], "--runner")):
        with pytest.raises(ValueError, match="unknown option %s \\(did you mean %s\\?\\)"
                           % (argv[0].split("=")[0], hint)):
            check_unknown_options("infer", argv, ours, True)
    with pytest.raises(ValueError, match="unexpected argument 'extra'"):
        check_unknown_options("infer", ["--runner", "DirectRunner", "extra"], ours, True)


def test_commands_without_a_pipeline_refuse_unknown_options(tmp_path, capsys):
    """`ldabeam topics --tpo 3` ran and ignored --tpo."""
    rc, out, err = ldabeam(capsys, "topics", "--model", tmp_path, "--tpo", 3)
    assert rc == 2
    assert err.strip() == ("ldabeam topics: error: unknown option --tpo (did you mean --top?): "
                           "not an option of ldabeam topics (see `ldabeam topics --help`)")
    rc, out, err = ldabeam(capsys, "evaluate", "--model", tmp_path, "--runner",
                           "DirectRunner")
    assert rc == 2 and "unknown option --runner" in err


# ----------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_help_shows_each_default_once(capsys, command):
    """"(default 0) (default: None)" before: argparse's note added to a help text that states
    its default already, or for an option whose default is None."""
    parser = cli.build_parser({command: cli.COMMANDS[command]})
    sub = parser._subparsers._group_actions[0].choices[command]
    formatter = sub._get_formatter()
    checked = 0
    for action in sub._actions:
        if not action.help or action.help == "==SUPPRESS==":
            continue
        shown = formatter._expand_help(action)
        if shown != action.help % dict(vars(action), prog=sub.prog):   # a note was added
            assert "default" not in action.help.lower(), shown
            assert action.default is not None and not isinstance(action.default, bool), shown
        checked += 1
    assert checked >= 3
    assert "(default: None)" not in help_text(capsys, command)


def test_every_option_of_topics_has_a_help_text(capsys):
    """`topics --format` had none."""
    entries = option_entries(help_text(capsys, "topics"))
    fmt = [e for e in entries if e.startswith("--format")]
    assert fmt and "csv" in fmt[0].split("}", 1)[1] and "json" in fmt[0].split("}", 1)[1]
    assert all(len(e.split()) > 1 for e in entries), entries


def test_id_field_has_one_default_in_vectorize_and_stream():
    """--id-field defaulted to id in vectorize and doc_id in stream."""
    defaults = {}
    for command in ("vectorize", "stream"):
        args, _ = cli.build_parser({command: cli.COMMANDS[command]}).parse_known_args(
            [command])
        defaults[command] = args.id_field
    assert defaults == {"vectorize": "id", "stream": "id"}


def test_stream_reads_the_id_under_either_name():
    from pipelines.streaming.stream_parse import ParseConfig, parse_document
    cfg = ParseConfig(vocab_path="", n_words=10)
    for obj, want in (('{"id": "a", "word_ids": [1, 3], "counts": [2, 1]}', "a"),
                      ('{"doc_id": "b", "word_ids": [1], "counts": [1]}', "b"),
                      ('{"doc_id": "c", "id": "d", "word_ids": [1], "counts": [1]}', "d")):
        doc, bad, _ = parse_document(obj, None, cfg)
        assert bad is None and doc is not None, (obj, bad)
        assert doc[0] == want, (obj, doc)
    custom = ParseConfig(vocab_path="", n_words=10, id_field="key")
    doc, bad, _ = parse_document('{"key": "k", "id": "i", "word_ids": [1], "counts": [1]}',
                                 None, custom)
    assert doc[0] == "k"
