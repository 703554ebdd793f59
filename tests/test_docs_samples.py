"""Every command and code sample in README.md and docs/*.md, run as a reader would run it.

The fenced blocks are read from the files at run time, so a sample added by anyone is covered
as soon as it lands. Each block is one of:

* a shell sample (its first command is a program: ``ldabeam``, ``python``, ``make``, ...) or a
  Python sample (a ``python`` fence): run, in a sandbox folder that links the repository's
  files (so ``templates/...``, ``data/...`` resolve) with ``ldabeam``, ``python`` and
  ``.venv/bin/python`` running this tree; ``$W`` (and ``/tmp/`` in the docs) is a scratch
  folder of the test. Sizes are made small and placeholder paths replaced by :data:`SUBST`
  (each substitution says why); a command that cannot run offline is dropped by
  :data:`OFFLINE` (a cloud service or cluster), which says why; the rest must exit 0;
* not a sample: a diagram, a file tree, printed output, a formula -- its first word is no
  program (:func:`kind`) -- or a usage synopsis (``[--option ...]``), or a block listed in
  :data:`NOT_RUN` with the reason;
* a sample another test runs as it must run (:data:`COVERED`: cells that share one
  namespace, in order).

``test_every_block_is_accounted_for`` fails on a block that is none of these and on a list
entry that matches no block. ``-k README`` or ``-k cluster`` picks one file.

The numba warm-up samples compile every kernel into an empty ``NUMBA_CACHE_DIR`` and then load
them: that cold compile is the session's one (conftest.py ``cold_numba_cache`` runs the same
warm-up command on an empty cache and checks it), whose cache is copied into the sample's
folder before the sample runs (:func:`test_sample_runs`; the sample's own emptying of the
folder is dropped by a :data:`SUBST` rule).
"""
import glob
import os
import re
import shlex
import subprocess
from dataclasses import dataclass

import pytest

from helpers import warm
from helpers.paths import REPO, WIKI_SAMPLE
DOC_FILES = ["README.md"] + sorted(os.path.relpath(p, REPO)
                                   for p in glob.glob(os.path.join(REPO, "docs", "*.md")))

#: first words of a shell command line (a program, a shell built-in, an environment prefix)
COMMANDS = {"ldabeam", "python", "python3", ".venv/bin/python", ".venv/bin/ldabeam", "make",
            "export", "mkdir", "rm", "mv", "cp", "ls", "cd", "kill", "wait", "gcloud",
            "docker", "pip", "bash", "sh", "echo", "cat", "curl", "gsutil", "kubectl"}

#: commands that cannot run offline here: (pattern of the command, reason). A command of a
#: sample (with its continuation lines) matching one is not run; the rest of the block is.
OFFLINE = [
    (r"^gcloud\b|^gsutil\b", "Google Cloud CLI: needs the cloud service"),
    (r"^docker\b", "builds an image from Docker Hub / Google's base images: needs the network"),
    (r"gs://|s3://", "reads or writes an object store: needs the cloud service"),
    (r"bq://|--query\b", "BigQuery: needs the cloud service"),
    (r"DataflowRunner", "Dataflow: needs the cloud service"),
    (r"FlinkRunner|--flink_master", "Flink: needs a Flink cluster (and Maven Central for its "
                                    "job-server jar)"),
    (r"--subscription\b|--topic projects/", "Pub/Sub: needs the cloud service"),
    (r"^kubectl\b", "needs a Kubernetes cluster"),
    (r"benchmarks/\w+\.py", "a benchmark run (minutes to hours, some on ../shared/data); every "
                            "script is run small by tests/test_benchmarks_smoke.py"),
]

#: blocks not run, each with the reason: (file, a string of the block, reason)
NOT_RUN = [
    ("README.md", "make demo", "creates .venv and installs from PyPI; the demo target's "
                               "commands are run by test_demo_target_gives_healthy_topics"),
    ("README.md", "local_job_service_main", "starts Beam's job service and worker pool and "
     "stages the package (minutes); this submission path is run by tests/test_portable_e2e.py. "
     "Its dataset $W/wiki, which the streaming sample reads, is made by PREPARE"),
    ("docs/cluster.md", "local_job_service_main", "as README's portable-runner block "
                                                  "(tests/test_portable_e2e.py)"),
    ("docs/beam-training.md", "ldabeam train ... --runner PortableRunner",
     "an elided command (`...`) showing the options to add"),
    ("docs/sequential-samplers.md", "cls = lda_core.algorithms.algorithm.algorithm_class",
     "pseudo-code of the sampler interface (`(checkpoint) ...`, `resume: ...`), not Python"),
    ("docs/input-formats.md", "ag_news_train/", "reads the reader's own exports and a Hugging "
     "Face dataset saved to disk (illustrative paths; each format has its reader tests)"),
]

#: samples another test runs as they must run (cells in order, sharing one namespace):
#: (file, its "## " section or None for the whole file, the test that runs them)
COVERED = [
    ("README.md", "Python", "tests/test_library_docs.py (cells in order in one namespace, "
                            "after a model is trained)"),
    ("README.md", "Beam", "tests/test_library_docs.py"),
    ("docs/library.md", None, "tests/test_library_docs.py (the walk-through, in order)"),
]

#: (file or None for every file, pattern, replacement, why)
SUBST = [
    (None, r"'dumps/enwiki-\*-pages-articles\*\.xml\.bz2'", shlex.quote(WIKI_SAMPLE),
     "the bundled sample stands in for a full dump"),
    (None, r"--topics 100\b", "--topics 5", "small"),
    (None, r"--minibatch 4096\b", "--minibatch 32", "small"),
    (None, r"--holdout-fraction 0\.01\b", "--holdout-fraction 0.1",
     "1 % of the sample's 106 articles is one article"),
    ("docs/cluster.md", r"(?m)^rm -rf /tmp/nbcache\n", "",
     "emptying the numba cache for a cold compile: the session's cold compile ran the same "
     "warm-up on an empty cache (conftest.py cold_numba_cache); its cache is copied in"),
    ("docs/", r"/tmp/", "$W/", "the docs' scratch paths go to the test's scratch folder"),
    ("docs/", r"--docs 2000 --words 2000", "--docs 600 --words 500", "small"),
    (None, r"--stop-after \d+", "--stop-after 30",
     "the stream watches its inbox this long while the next command writes the file into it "
     "(the window is applied when the run stops); the docs' 10-12 s assume an idle machine, "
     "and the test machine may be loaded"),
    ("docs/", r"range\(500\)", "range(200)", "small (the synthetic corpus above is smaller)"),
    ("docs/beam-training.md", r"--shards DATA --output MODEL",
     "--shards $W/wiki --output $W/model-unroll --passes 1", "placeholders: the sample, one pass"),
    ("docs/model-format.md", r"MODEL_DIR", "$W/model", "placeholder: a model trained by PREPARE"),
    ("docs/input-formats.md", r'from_model_dir\("model"\)', 'from_model_dir("$W/model")',
     "placeholder: a model trained by PREPARE"),
    ("docs/model-format.md", r"step-000000070", "$STEP",
     "placeholder: that model's checkpoint (STEP is set by PREPARE)"),
]

#: commands run before a file's samples (what the samples assume exists)
PREPARE = {
    "README.md": ["ldabeam vectorize --output $W/wiki --holdout-fraction 0.1 --no-below 2"],
    "docs/beam-training.md": ["ldabeam vectorize --output $W/wiki --holdout-fraction 0.1 "
                              "--no-below 2"],
    "docs/input-formats.md": ["ldabeam vectorize --output $W/wiki --holdout-fraction 0.1 "
                              "--no-below 2",
                              "ldabeam train --shards $W/wiki --output $W/model --topics 5 "
                              "--passes 1 --minibatch 32 --no-progress"],
    "docs/model-format.md": ["ldabeam vectorize --output $W/wiki --holdout-fraction 0.1 "
                             "--no-below 2",
                             "ldabeam train --shards $W/wiki --output $W/model --topics 5 "
                             "--algorithm online-vb --passes 1 --minibatch 32 --no-progress"],
}

#: Python samples that use a name the text around them defines: (file, string, prelude, why)
PRELUDES = [
    ("docs/results.md", "CountVectorizer",
     "import bz2, re\n"
     "from gensim.corpora.wikicorpus import extract_pages, filter_wiki\n"
     "texts = [filter_wiki(t) for _, t, _ in extract_pages(bz2.open(%r), ('0',))][:80]\n"
     % WIKI_SAMPLE, "`texts`: a list of documents (the bundled sample's pages)"),
    ("docs/input-formats.md", "Preprocessor.from_model_dir",
     "from lda_core.storage.vocab_file import Vocabulary\n"
     "texts = ['The court heard the appeal of the state', 'Apollo 11 landed on the Moon']\n"
     "vocab = Vocabulary.read('$W/model/vocab.tsv')\n"
     "doc_ids = ['court', 'apollo']\n",
     "`texts`, `vocab`, `doc_ids`: what the text around it names (the model's vocabulary)"),
]


@dataclass
class Block:
    path: str
    line: int
    lang: str
    text: str
    section: str = ""

    @property
    def name(self):
        return "%s:%d" % (self.path, self.line)


def blocks():
    out = []
    for rel in DOC_FILES:
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            s = f.read()
        for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```", s, re.M | re.S):
            heads = re.findall(r"^## (.+)$", s[:m.start()], re.M)
            out.append(Block(rel, s[:m.start()].count("\n") + 1, m.group(1).strip().lower(),
                             m.group(2), heads[-1].strip() if heads else ""))
    return out


def _first_word(text):
    for line in text.split("\n"):
        line = line.strip()
        if line and not line.startswith("#"):
            words = [w for w in line.split() if not re.match(r"^[A-Z_][A-Z0-9_]*=", w)]
            return words[0] if words else "export"
    return ""


def listed(block, table):
    return [e for e in table if e[0] == block.path and e[1] in block.text]


def covered(block):
    return [c for c in COVERED if c[0] == block.path and c[1] in (None, block.section)]


def kind(block):
    """'python', 'shell', 'synopsis', 'not-run', 'covered' or 'text' (module docstring)."""
    if listed(block, NOT_RUN):
        return "not-run"
    if covered(block) and _first_word(block.text) not in ("make",):
        return "covered"
    if block.lang in ("python", "py", "python3"):
        return "python"
    if block.lang in ("json", "yaml", "toml", "text", "txt", "csv", "html", "xml"):
        return "text"
    if _first_word(block.text) not in COMMANDS:
        return "text"
    if re.search(r"\[--|\|\s*--|PATH_OR_GLOB", block.text):
        return "synopsis"
    return "shell"


def _open_quote(text):
    """The quote character left open at the end of shell ``text`` (comments skipped), or
    None."""
    q, prev = None, " "
    i = 0
    while i < len(text):
        c = text[i]
        if q:
            if c == q:
                q = None
            elif c == "\\" and q == '"':
                i += 1
        elif c in "'\"":
            q = c
        elif c == "#" and prev in " \t\n":
            j = text.find("\n", i)
            if j < 0:
                break
            i = j
            c = "\n"
        elif c == "\\":
            i += 1
        prev = c
        i += 1
    return q


def commands(text):
    """The block's commands: lines joined over trailing backslashes and open quotes."""
    out, cur = [], ""
    for line in text.split("\n"):
        cur = cur + "\n" + line if cur else line
        if cur.rstrip().endswith("\\") or _open_quote(cur):
            continue
        if cur.strip():
            out.append(cur)
        cur = ""
    if cur.strip():
        out.append(cur)
    return out


def offline_reason(cmd):
    body = "\n".join(l for l in cmd.split("\n") if not l.strip().startswith("#"))
    body = body.split("  #")[0] if "\n" not in body else body
    for pat, why in OFFLINE:
        if re.search(pat, body.strip(), re.M):
            return why
    return None


def runnable_script(block, env=None):
    """(the shell script to run, [(dropped command, reason)]); $W and $STEP are written in as
    their values (a Python sample runs from a quoted here-document, and a substituted path
    may sit in single quotes)."""
    text = block.text
    for where, pat, rep, _ in SUBST:
        if where is None or block.path == where or (where.endswith("/")
                                                    and block.path.startswith(where)):
            text = re.sub(pat, lambda m: rep, text)
    for name in ("W", "STEP"):     # written in: a quoted '$W/...' or a here-document
        if env and name in env:
            text = re.sub(r"\$\{%s\}|\$%s\b" % (name, name), lambda m: env[name], text)
    if block.lang in ("python", "py", "python3"):
        pre = "".join(p for f, s, p, _ in PRELUDES if f == block.path and s in block.text)
        for name in ("W", "STEP"):
            if env and name in env:
                pre = pre.replace("$" + name, env[name])
        return "python - <<'PYEOF'\n%s%s\nPYEOF\n" % (pre, text), []
    keep, dropped = [], []
    for cmd in commands(text):
        why = offline_reason(cmd)
        if why:
            dropped.append((cmd.strip().split("\n")[0], why))
        else:
            keep.append(cmd)
    return "\n".join(keep) + "\n", dropped


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A folder linking the repository's top-level entries, with ``ldabeam``/``python``
    shims (``.venv/bin``) running this tree, and a scratch folder per doc file. The shims fork
    each command from the tests' warm interpreter (``helpers.warm``: a new process without the
    imports' start-up), or start a cold one when the command's environment needs it (e.g. the
    numba warm-up's NUMBA_CACHE_DIR)."""
    root = tmp_path_factory.mktemp("docs_sandbox")
    for name in os.listdir(REPO):
        if name not in (".venv", ".git", "demo_output") and not name.startswith("."):
            os.symlink(os.path.join(REPO, name), str(root / name))
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    shims = {"python": warm.shim("python"),
             "ldabeam": warm.shim("ldabeam", ["-m", "pipelines.cli"])}
    shims["python3"] = shims["python"]
    for name, body in shims.items():
        p = bin_dir / name
        p.write_text(body)
        p.chmod(0o755)
    return root


def _env(sandbox, scratch):
    env = dict(os.environ)
    env["PATH"] = "%s:%s" % (sandbox / ".venv" / "bin", env.get("PATH", ""))
    env["PYTHONPATH"] = REPO + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["W"] = str(scratch)
    env.update(warm.shell_env())
    return env


def _run(script, sandbox, env, timeout=900):
    return subprocess.run(["bash", "-e", "-c", script], cwd=str(sandbox), env=env,
                          capture_output=True, text=True, timeout=timeout)


_PREPARED = {}


def _scratch(sandbox, path):
    """The scratch folder of one doc file, with PREPARE's commands run once."""
    if path in _PREPARED:
        return _PREPARED[path]
    scratch = sandbox.parent / ("scratch-" + re.sub(r"\W", "_", path))
    scratch.mkdir(exist_ok=True)
    env = _env(sandbox, scratch)
    for cmd in PREPARE.get(path, []):
        r = _run(cmd, sandbox, env)
        assert r.returncode == 0, "PREPARE %s failed:\n%s" % (cmd, r.stderr[-3000:])
    ckpts = sorted(glob.glob(str(scratch / "model" / "checkpoints" / "step-*")))
    if ckpts:
        env["STEP"] = os.path.basename(ckpts[-1])
    _PREPARED[path] = (scratch, env)
    return _PREPARED[path]


ALL = blocks()
RUN = [b for b in ALL if kind(b) in ("shell", "python")]


def test_every_block_is_accounted_for():
    """Each block is a sample that runs, a text block, a synopsis or listed with a reason; no
    list entry is stale; and the parser sees the samples it must (the README's typical run)."""
    kinds = {b.name: kind(b) for b in ALL}
    assert any(b.path == "README.md" and "ldabeam train" in b.text and kinds[b.name] == "shell"
               for b in ALL), kinds
    for f, s, why in NOT_RUN:
        assert any(b.path == f and s in b.text for b in ALL), "stale NOT_RUN entry %s %r" % (f, s)
        assert why
    for f, sec, _ in COVERED:
        assert any(b.path == f and sec in (None, b.section) for b in ALL), \
            "stale COVERED entry %s %r" % (f, sec)
    for f, s, _, _ in PRELUDES:
        assert any(b.path == f and s in b.text for b in ALL), "stale PRELUDE %s %r" % (f, s)
    for b in ALL:
        if kinds[b.name] == "python":
            pre = "".join(p for f, s, p, _ in PRELUDES if f == b.path and s in b.text)
            compile(pre + b.text, b.name, "exec")      # a Python sample is Python


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=[b.name for b in RUN])
def test_sample_runs(block, sandbox, request):
    if block.lang.startswith("py") and "sklearn" in block.text:
        pytest.importorskip("sklearn", reason="scikit-learn (the [test] extra) not installed")
    scratch, env = _scratch(sandbox, block.path)
    script, dropped = runnable_script(block, env)
    if not script.strip():
        pytest.skip("every command of %s needs a service: %s"
                    % (block.name, "; ".join("%s (%s)" % d for d in dropped)))
    if "nbcache" in block.text:       # the warm-up samples: the session's cold compile's cache
        cold = request.getfixturevalue("cold_numba_cache")["dir"]
        script = 'rm -rf "$W/nbcache" && cp -r %s "$W/nbcache"\n%s' % (shlex.quote(cold), script)
    r = _run(script, sandbox, env)
    assert r.returncode == 0, ("%s failed (exit %d)\n--- script\n%s\n--- stdout\n%s\n"
                               "--- stderr\n%s" % (block.name, r.returncode, script,
                                                   r.stdout[-3000:], r.stderr[-5000:]))


def demo_commands(demo_dir, venv):
    """The shell commands of the Makefile's ``demo`` recipe, with $(VENV) and $(DEMO) set
    (comments and echo lines left out)."""
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = next(i for i, l in enumerate(lines) if re.match(r"^demo\s*:", l))
    recipe, cur = [], ""
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        cur += line.strip()[:-1] + " " if line.rstrip().endswith("\\") else line.strip()
        if line.rstrip().endswith("\\"):
            continue
        if cur and not cur.startswith(("#", "@")):
            recipe.append(cur.replace("$(VENV)", venv).replace("$(DEMO)", demo_dir))
        cur = ""
    return recipe


@pytest.mark.serial
@pytest.mark.slow
def test_demo_target_gives_healthy_topics(sandbox):
    """`make demo`'s own commands (from the Makefile) run, and give what the demo is for:
    every topic alive, nearly all used, no stop word among any topic's top words, and the
    report written."""
    import json
    from gensim.parsing.preprocessing import STOPWORDS
    scratch = sandbox.parent / "scratch-demo"
    scratch.mkdir(exist_ok=True)
    env = _env(sandbox, scratch)
    cmds = demo_commands(str(scratch / "demo"), str(sandbox / ".venv"))
    assert any(" train " in c for c in cmds) and any(" report " in c for c in cmds)
    outputs = {}
    for c in cmds:
        r = _run(c, sandbox, env)
        assert r.returncode == 0, "%s failed:\n%s" % (c, r.stderr[-3000:])
        outputs[c] = r.stdout
    metrics = json.loads(next(out for c, out in outputs.items() if " evaluate " in c))
    K = metrics["n_topics"]
    assert metrics["dead_topics"] == 0
    assert metrics["effective_topics"] >= 0.9 * K
    assert metrics["npmi"] > 0
    topics = next(out for c, out in outputs.items() if " topics " in c)
    rows = re.findall(r"^topic\s+(\d+):(.*)$", topics, re.M)
    assert len(rows) == K
    for k, words in rows:
        top = re.findall(r"([^\s(]+)\(", words)
        assert top and not set(top) & STOPWORDS, (k, top)
    assert os.path.getsize(str(scratch / "demo" / "report.html")) > 10000
