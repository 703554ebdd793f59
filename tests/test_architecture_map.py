"""docs/architecture.md stays true to the tree:

(a) its module map names every module of ``lda_core/``, ``pipelines/`` and ``ldabeam/`` once,
    each with its purpose, and names no module that does not exist;
(b) its error tree is the project's exception classes as built: every class derived from
    ``LdaBeamError`` or ``KeyboardInterrupt`` that a project module defines appears under its
    real base class, and nothing else does.

Read from the sources and the imported classes; the page's text is the only input."""
import importlib
import inspect
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "architecture.md")
PACKAGES = ("lda_core", "pipelines", "ldabeam")


def _section(title):
    text = open(PAGE, encoding="utf-8").read()
    start = text.index("\n## " + title)
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def _first_block(section):
    m = re.search(r"```[^\n]*\n(.*?)```", section, re.S)
    assert m, "no code block in the section"
    return m.group(1).splitlines()


def _tree_modules():
    found = set()
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(REPO, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in files:
                if f.endswith(".py"):
                    found.add(os.path.relpath(os.path.join(folder, f), REPO).replace(os.sep, "/"))
    return found


def _map_entries():
    """(path, purpose) of every module line of the map, the path rebuilt from the folder
    lines above it (two spaces of indentation per level)."""
    entries, stack = [], []
    for line in _first_block(_section("Module map")):
        m = re.match(r"^( *)(\S+)( {2,}(\S.*))?$", line)
        if not m or not line.strip():
            continue
        depth = len(m.group(1)) // 2
        name, purpose = m.group(2), (m.group(4) or "").strip()
        if not (name.endswith("/") or name.endswith(".py")):
            continue            # a purpose continued on the next line
        stack = stack[:depth]
        if name.endswith("/"):
            stack.append(name)
            continue
        entries.append(("".join(stack) + name, purpose))
    return entries


def test_the_module_map_names_every_module_once_with_its_purpose():
    entries = _map_entries()
    named = [p for p, _ in entries]
    tree = _tree_modules()
    twice = sorted({p for p in named if named.count(p) > 1})
    missing = sorted(tree - set(named))
    extra = sorted(set(named) - tree)
    no_purpose = sorted(p for p, purpose in entries if len(purpose) < 5)
    assert not twice, "named more than once in docs/architecture.md: %s" % twice
    assert not missing, "modules missing from the map in docs/architecture.md: %s" % missing
    assert not extra, "the map names modules that do not exist: %s" % extra
    assert not no_purpose, "modules without a purpose in the map: %s" % no_purpose


def test_the_map_reader_sees_the_whole_tree():
    """The check above reads the map as this parser does; a parser that found nothing would
    make it vacuous."""
    entries = _map_entries()
    assert len(entries) == len(_tree_modules()) > 100
    assert ("lda_core/training/session.py" in dict(entries)
            and "pipelines/ingest/manifest.py" in dict(entries))


def _project_exception_classes():
    """{class name: base class name} of the exceptions the project defines on purpose."""
    from lda_core.errors import LdaBeamError
    found = {}
    for path in sorted(_tree_modules()):
        module = path[:-3].replace("/", ".")
        if module.endswith(".__init__"):
            continue
        text = open(os.path.join(REPO, path), encoding="utf-8").read()
        if not re.search(r"^class \w+\(", text, re.M):
            continue
        mod = importlib.import_module(module)
        for name, cls in vars(mod).items():
            if not (inspect.isclass(cls) and cls.__module__ == module
                    and issubclass(cls, (LdaBeamError, KeyboardInterrupt))):
                continue
            base = next(b for b in cls.__mro__[1:]
                        if issubclass(b, (LdaBeamError, KeyboardInterrupt)) or b is Exception)
            found[name] = base.__name__
    return found


def _page_error_tree():
    """{class name: parent name} of the error tree on the page."""
    tree, stack = {}, []
    for line in _first_block(_section("Errors")):
        m = re.match(r"^( *)([A-Z]\w+)\b", line)
        if not m:
            continue
        depth = len(m.group(1)) // 2
        stack = stack[:depth] + [m.group(2)]
        if depth:
            tree[m.group(2)] = stack[depth - 1]
    return tree


@pytest.mark.parametrize("part", ["classes", "bases"])
def test_the_error_tree_is_the_one_built(part):
    built = _project_exception_classes()
    page = _page_error_tree()
    assert len(built) >= 10
    if part == "classes":
        assert set(page) == set(built), \
            "error classes on the page and in the code differ: %s" % sorted(set(built) ^ set(page))
    else:
        wrong = {n: (page.get(n), b) for n, b in built.items() if page.get(n) != b}
        assert not wrong, "page parent != built base class: %s" % wrong
