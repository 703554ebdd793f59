"""Rules on the project's own imports and loggers, checked on the source with ``ast``:

(a) no cycle among the project modules' imports (imports inside functions count too, unless the
    import line, or the line above it, carries a comment saying ``optional dependency``; imports
    under ``if TYPE_CHECKING:`` never run and do not count);
(b) no module uses another project module's private name (``from X import _name`` or
    ``X._name`` where X is a project module);
(c) a module's logger is named by ``__name__`` (``logging.getLogger()`` for the root logger and a
    literal naming a third-party logger such as ``"apache_beam"`` configure other loggers and
    are allowed; a literal naming a project logger is not);
(d) no module but the scikit-learn wrapper (whose ``get_params`` is defined by its estimators'
    signatures) reads a signature with ``inspect.signature``: what an algorithm accepts is its
    declared interface and parameter spec, never guessed;
(e) no test module imports another test module or conftest.py: what tests share lives in
    ``tests/helpers`` (and fixtures in conftest.py), so a test file can change alone.

Each failure lists the offenders as file:line.
"""
import ast
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("lda_core", "pipelines", "ldabeam")
OPTIONAL = re.compile(r"#.*optional dependency", re.IGNORECASE)


def _modules():
    """{module name: path} for every .py file of the project packages."""
    found = {}
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(REPO, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                path = os.path.join(folder, f)
                parts = os.path.relpath(path, REPO)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join(parts)] = path
    return found


MODULES = _modules()


class _Source:
    def __init__(self, name, path):
        self.name = name
        self.path = path
        self.rel = os.path.relpath(path, REPO)
        with open(path, encoding="utf-8") as f:
            self.text = f.read()
        self.lines = self.text.splitlines()
        self.tree = ast.parse(self.text, filename=path)
        self.is_package = os.path.basename(path) == "__init__.py"
        self._parents = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self._parents[child] = node

    def where(self, node):
        return "%s:%d" % (self.rel, node.lineno)

    def optional(self, node):
        """The import is marked as an optional dependency on its line or the line above."""
        first = node.lineno - 1
        span = self.lines[max(first - 1, 0):getattr(node, "end_lineno", node.lineno)]
        return any(OPTIONAL.search(line) for line in span)

    def type_checking_only(self, node):
        parent = self._parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.If) and "TYPE_CHECKING" in ast.unparse(parent.test):
                return True
            parent = self._parents.get(parent)
        return False

    def absolute(self, node):
        """The module an ``ImportFrom`` names, relative imports resolved."""
        if not node.level:
            return node.module
        base = self.name.split(".")
        if not self.is_package:
            base = base[:-1]
        if node.level > 1:
            base = base[:-(node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def imports(self):
        """(node, imported project module, names taken from it) for every import that runs."""
        for node in ast.walk(self.tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if self.type_checking_only(node):
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in MODULES:
                        yield node, alias.name, alias
                continue
            module = self.absolute(node)
            for alias in node.names:
                sub = "%s.%s" % (module, alias.name)
                if sub in MODULES:
                    yield node, sub, alias
                elif module in MODULES:
                    yield node, module, alias


SOURCES = {name: _Source(name, path) for name, path in MODULES.items()}


def _graph():
    """{module: {imported module: first import's file:line}} over the imports that count."""
    graph = {name: {} for name in SOURCES}
    for name, src in SOURCES.items():
        for node, target, _ in src.imports():
            if target == name or src.optional(node):
                continue
            graph[name].setdefault(target, src.where(node))
    return graph


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def _private_uses():
    offenders = []
    for name, src in SOURCES.items():
        bound = {}                 # local name -> project module it stands for
        for node, target, alias in src.imports():
            if isinstance(node, ast.ImportFrom):
                if target != name and _private(alias.name) and not target.endswith(
                        "." + alias.name):
                    offenders.append("%s: %s imported from %s"
                                     % (src.where(node), alias.name, target))
                if target.endswith("." + alias.name):
                    bound[alias.asname or alias.name] = target
            elif alias.asname:
                bound[alias.asname] = target
            else:
                bound[alias.name] = target
        for node in ast.walk(src.tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            owner = ast.unparse(node.value)
            target = bound.get(owner)
            if target is None and owner in MODULES and owner.split(".")[0] in bound:
                target = owner          # ``import a.b`` then ``a.b._name``
            if target is not None and target != name:
                offenders.append("%s: %s.%s" % (src.where(node), target, node.attr))
    return sorted(set(offenders))


def _logger_names():
    offenders = []
    for src in SOURCES.values():
        for node in ast.walk(src.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
                    and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
                    == "getLogger"):
                continue
            if not node.args and not node.keywords:
                continue                                    # the root logger, configured
            arg = node.args[0] if node.args else node.keywords[0].value
            if isinstance(arg, ast.Name) and arg.id == "__name__":
                continue
            if (isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                    and arg.value.split(".")[0] not in PACKAGES):
                continue                                    # a third-party logger, configured
            offenders.append("%s: getLogger(%s)" % (src.where(node), ast.unparse(arg)))
    return sorted(offenders)


def test_the_rules_see_the_whole_project():
    # the checks below are only as good as the module list and the import resolution
    assert {"lda_core.training.session", "pipelines.cli", "ldabeam.model"} <= set(SOURCES)
    graph = _graph()
    assert "lda_core.errors" in graph["pipelines.cli"]


def test_no_import_cycles():
    graph = _graph()
    report = []
    for component in _cycles(graph):
        report.append("cycle: " + " <-> ".join(component))
        for a in component:
            for b in component:
                if b in graph[a]:
                    report.append("  %s imports %s" % (graph[a][b], b))
    assert not report, "\n" + "\n".join(report)


# uses of another module's private name allowed (None: none; what another module uses is public)
PRIVATE_USES_LEFT = None


def test_no_private_names_across_modules():
    offenders = _private_uses()
    if PRIVATE_USES_LEFT is None:
        assert not offenders, "\n" + "\n".join(offenders)
    else:
        assert len(offenders) <= PRIVATE_USES_LEFT, "\n" + "\n".join(offenders)


# the training layer passes a TrainSpec and a runner's settings object, an algorithm takes its
# SPEC's settings, never long lists of keywords; numba kernels (``@njit`` / ``@numba.jit``) and
# the scikit-learn estimators' constructors (scikit-learn's convention: every parameter a
# keyword of __init__) are exempt
MAX_PARAMETERS = 12
PARAMETER_RULE_FOLDERS = ("lda_core", "pipelines", "ldabeam")
PARAMETER_RULE_EXEMPT = {("lda_core/sklearn_api.py", "__init__")}


def _numba_kernel(node) -> bool:
    return any("jit" in ast.unparse(d) for d in node.decorator_list)


def _parameter_count(node) -> int:
    a = node.args
    return (len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None)
            + (a.kwarg is not None))


def _long_parameter_lists():
    offenders = []
    for src in SOURCES.values():
        if not src.rel.replace(os.sep, "/").startswith(PARAMETER_RULE_FOLDERS):
            continue
        for node in ast.walk(src.tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            n = _parameter_count(node)
            exempt = (src.rel.replace(os.sep, "/"), node.name) in PARAMETER_RULE_EXEMPT
            if n > MAX_PARAMETERS and not _numba_kernel(node) and not exempt:
                offenders.append("%s: %s has %d parameters" % (src.where(node), node.name, n))
    return sorted(offenders)


def test_no_long_parameter_lists():
    offenders = _long_parameter_lists()
    assert not offenders, "\n" + "\n".join(offenders)


def test_the_parameter_rule_counts_every_kind():
    # self, positional, keyword-only, *args and **kwargs all count
    text = "def f(self, a, /, b, *c, d, e=1, **g):\n    pass\n"
    assert _parameter_count(ast.parse(text).body[0]) == 7


def test_loggers_named_by_module():
    offenders = _logger_names()
    assert not offenders, "\n" + "\n".join(offenders)


# the one module whose interface is defined by signatures (scikit-learn's get_params)
SIGNATURE_READERS = {"lda_core.sklearn_api"}


def _signature_calls(src):
    """file:line of every call of ``inspect.signature`` (however ``inspect`` or ``signature``
    was imported) in ``src``."""
    names = {"inspect.signature"}
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Import):
            names.update("%s.signature" % (a.asname or a.name) for a in node.names
                         if a.name == "inspect")
        elif isinstance(node, ast.ImportFrom) and node.module == "inspect":
            names.update(a.asname or a.name for a in node.names if a.name == "signature")
    return [src.where(node) for node in ast.walk(src.tree)
            if isinstance(node, ast.Call) and ast.unparse(node.func) in names]


def test_no_signature_reading_outside_the_scikit_learn_wrapper():
    offenders = [w for name, src in SOURCES.items() if name not in SIGNATURE_READERS
                 for w in _signature_calls(src)]
    assert not offenders, "\n" + "\n".join(offenders)
    # the rule sees the calls it forbids, in every spelling
    for text in ("import inspect\ninspect.signature(f)\n",
                 "import inspect as i\ni.signature(f)\n",
                 "from inspect import signature as sig\nsig(f)\n"):
        src = _Source.__new__(_Source)
        src.rel, src.tree = "x.py", ast.parse(text)
        assert _signature_calls(src) == ["x.py:2"], text


@pytest.mark.parametrize("text, expected", [
    ("import pipelines.cli\n", True),
    ("from pipelines import cli\n", True),
    ("from . import cli\n", True),
])
def test_import_resolution(text, expected, tmp_path):
    # relative and absolute spellings of the same import reach the same module
    src = _Source.__new__(_Source)
    src.name, src.path, src.rel, src.is_package = "pipelines.x", "", "x.py", False
    src.text, src.lines, src.tree = text, text.splitlines(), ast.parse(text)
    src._parents = {}
    assert ("pipelines.cli" in [t for _, t, _ in src.imports()]) is expected


# local/remote differences live in the file layer (lda_core/storage, pipelines/runtime) and
# the two modules that open user paths (datasets; input files and globs)
REMOTE_TEST_MODULES = {"pipelines/ingest/dataset.py", "pipelines/ingest/input_files.py"}
FILE_LAYER = ("lda_core/storage/", "pipelines/runtime/")


def _is_remote_callers():
    found = set()
    for src in SOURCES.values():
        rel = src.rel.replace(os.sep, "/")
        if rel.startswith(FILE_LAYER):
            continue
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if name == "is_remote":
                    found.add(rel)
    return found


def test_local_and_remote_paths_differ_only_in_the_file_layer():
    callers = _is_remote_callers()
    assert callers <= REMOTE_TEST_MODULES, sorted(callers - REMOTE_TEST_MODULES)


def test_no_test_module_imports_another():
    tests = os.path.join(REPO, "tests")
    names = {f[:-3] for f in os.listdir(tests) if f.endswith(".py")}
    offenders = []
    for f in sorted(os.listdir(tests)) + ["helpers/" + h for h in
                                          sorted(os.listdir(os.path.join(tests, "helpers")))]:
        if not f.endswith(".py"):
            continue
        path = os.path.join(tests, f)
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            for m in mods:
                parts = m.split(".")
                first = parts[1] if parts[0] == "tests" and len(parts) > 1 else parts[0]
                if first in names and (first.startswith("test_") or first == "conftest"):
                    offenders.append("tests/%s:%d imports %s" % (f, node.lineno, m))
    assert not offenders, "\n".join(offenders)
