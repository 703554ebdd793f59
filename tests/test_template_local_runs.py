"""The templates run here as their docs show: the Flex Template launcher
(templates/dataflow/launch.py, the commands of its README's "Run the launcher here first") and
the Airflow DAG's train task (templates/airflow/ldabeam_dag.py: its TRAIN_PARAMETERS given to
the launcher, chained by its own ``plan_train``), each with the DirectRunner: every launch
trains one detached window on the remote exchange (the run log says so), and the model they
end with is the in-process trainer's, bit for bit.

Airflow is not a dependency: the DAG file is read with ``ast`` -- its parameter dict is
evaluated from the file's own constants and ``plan_train`` is compiled from its source, with
GCSHook's ``exists`` / ``download`` served by the test-only object store ``fakegs://`` that
holds the DAG's dataset and model (tests/helpers/fake_object_store.py).

Also: a detached template window whose job graph is over Dataflow's limit is refused before
submission (issue 31, item 2), and the windows the templates name fit within it."""
import ast
import json
import os
import re
import shlex
import shutil
import sys

import pytest

from helpers.bits import same_bits
from helpers.cli import error_lines
from helpers.procs import free_port
from helpers.uci import kos_dataset
from lda_core.storage.blocks import algorithm_from_state
from lda_core.storage.checkpoint import CheckpointStore
from lda_core.storage.run_log import read_run_log
from pipelines import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = os.path.join(REPO, "templates")
sys.path.insert(0, os.path.join(TEMPLATES, "dataflow"))
import launch  # noqa: E402  (templates/dataflow/launch.py)


@pytest.fixture(scope="module")
def ds(tmp_path_factory, kos_paths):
    """300 KOS training documents (3 minibatches of scvb0's default 100) and 60 held out."""
    return kos_dataset(str(tmp_path_factory.mktemp("tmplds") / "ds"), kos_paths,
                       n_train=300, n_held=60)


@pytest.fixture
def loopback_google(monkeypatch):
    """Every Google endpoint on a closed loopback port: nothing leaves the machine."""
    port = free_port()
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:%d" % port)
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:%d" % port)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:%d" % port)
    return "--dataflow_endpoint=http://localhost:%d" % port


def _inprocess_twin(ds_dir, model_dir, out_dir, capsys):
    """``ldabeam train --runner inprocess`` with the settings the launched run recorded (K,
    seed, S, passes, P, B, staleness and its warm-up) into ``out_dir``."""
    st = CheckpointStore(model_dir).latest()
    run = st.info["run"]
    argv = ["train", "--shards", ds_dir, "--output", out_dir, "--runner", "inprocess",
            "--algorithm", st.algorithm, "--topics", st.arrays["ntilde"].shape[1],
            "--seed", run["seed"], "--minibatch", run["minibatch"], "--passes", run["passes"],
            "--pieces", run["pieces_per_minibatch"], "--word-blocks", st.params["word_blocks"],
            "--staleness", run["staleness"], "--staleness-warmup", run["staleness_warmup"],
            "--no-progress"]
    assert cli.main([str(a) for a in argv]) == 0, capsys.readouterr().err[-3000:]
    capsys.readouterr()


def _same_model(ref_dir, got_dir):
    """The latest checkpoints hold the same model: the state bit for bit, and the statistics
    in flight (the in-process checkpoint keeps them whole, the remote exchange by block:
    compared as the algorithms that resume from them)."""
    ref, got = CheckpointStore(ref_dir).latest(), CheckpointStore(got_dir).latest()
    assert (got.step, got.docs_seen) == (ref.step, ref.docs_seen)
    ra, ga = algorithm_from_state(ref, take=True), algorithm_from_state(got, take=True)
    same_bits(ra, ga)
    assert (ra.pending is None) == (ga.pending is None)
    if ra.pending is not None:
        assert ra.pending.first == ga.pending.first
        assert [s.to_bytes() for s in ra.pending.stats] == \
            [s.to_bytes() for s in ga.pending.stats]


def _remote_windows(model_dir):
    """The run log's start records: every launch's window, all on the remote exchange,
    detached."""
    starts = read_run_log(model_dir.rstrip("/") + "/run_log.jsonl", "start")
    assert starts and all(r["run"]["exchange"] == "remote" and r["run"]["detached"] is True
                          for r in starts), [r["run"].get("exchange") for r in starts]
    return [tuple(r["window"]) for r in starts]


# ------------------------------------------------------------------------- the launcher

def _readme_launches():
    """The launch.py commands of templates/dataflow/README.md's local run, as argv lists."""
    text = open(os.path.join(TEMPLATES, "dataflow", "README.md"), encoding="utf-8").read()
    blocks = [b for b in re.findall(r"^```\n(.*?)^```", text, re.M | re.S)
              if "launch.py" in b and "DirectRunner" in b]
    assert len(blocks) == 1, "the README's local run of the launcher"
    assert "export LDABEAM_COMMAND=train" in blocks[0]
    cmds = [c for c in re.sub(r"\\\n\s*", " ", blocks[0]).splitlines()
            if c.startswith("python templates/dataflow/launch.py")]
    return [shlex.split(c)[2:] for c in cmds]


def test_the_launcher_as_its_readme_shows_trains_on_the_remote_exchange_bit_for_bit(
        ds, tmp_path, monkeypatch, capsys):
    """The README's two launch commands (fresh, then ``resume=true`` until training is
    complete) with the KOS slice for the sample's shards and windows of 2 minibatches: two
    windows, each on the remote exchange, ending on the in-process trainer's model."""
    fresh, resume = _readme_launches()
    assert "--exchange=remote" in fresh and "--runner=DirectRunner" in fresh
    assert "--resume=true" in resume and "--exchange=remote" in resume

    def local(argv):
        out = []
        for a in argv:
            a = a.replace("/tmp/sections", "SHARDS").replace("/tmp/", str(tmp_path) + "/")
            a = a.replace("SHARDS", ds)
            out.append("--minibatches-per-window=2" if a.startswith("--minibatches-per-window")
                       else a)
        return out + ["--no-progress=true"]

    monkeypatch.setenv("LDABEAM_COMMAND", "train")
    assert launch.main(local(fresh)) == 0
    for _ in range(3):
        assert launch.main(local(resume)) == 0
        if "training is complete" in capsys.readouterr().out:
            break
    else:
        pytest.fail("the launches did not complete the pass")
    model = str(tmp_path / "template-model")
    assert _remote_windows(model) == [(0, 2), (2, 3)]
    _inprocess_twin(ds, model, str(tmp_path / "inprocess"), capsys)
    _same_model(str(tmp_path / "inprocess"), model)


# ------------------------------------------------------------------------ the Airflow DAG

DAG_FILE = os.path.join(TEMPLATES, "airflow", "ldabeam_dag.py")


class _Evaluator:
    """The DAG file's module-level constants, evaluated from its source (Airflow not needed):
    strings, numbers, ``+``, ``str(...)``, dicts and names of earlier constants. ``names``
    gives the values of names to replace (the Jinja-templated variables)."""

    def __init__(self, names):
        self.tree = ast.parse(open(DAG_FILE).read())
        self.nodes = {n.targets[0].id: n.value for n in self.tree.body
                      if isinstance(n, ast.Assign) and len(n.targets) == 1
                      and isinstance(n.targets[0], ast.Name)}
        self.names = dict(names)

    def value(self, name):
        if name not in self.names:
            self.names[name] = self.eval(self.nodes[name])
        return self.names[name]

    def eval(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.value(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.eval(node.left) + self.eval(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "str" and len(node.args) == 1:
            return str(self.eval(node.args[0]))
        if isinstance(node, ast.Dict):
            return {self.eval(k): self.eval(v) for k, v in zip(node.keys, node.values)}
        raise AssertionError("the DAG's constants use %s: extend the test's evaluator"
                             % ast.dump(node)[:200])

    def functions(self, namespace, *names):
        """Compile the DAG's functions ``names`` into ``namespace`` (their globals)."""
        defs = [n for n in self.tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
        assert sorted(d.name for d in defs) == sorted(names)
        exec(compile(ast.Module(body=defs, type_ignores=[]), DAG_FILE, "exec"), namespace)
        return [namespace[n] for n in names]


class _StoreHook:
    """GCSHook's two calls plan_train makes (bucket, object name), on the fake object store's
    backing folder: gs://BUCKET/NAME is fakegs://BUCKET/NAME."""

    def __init__(self, root):
        self.root = root

    def exists(self, bucket, path):
        return os.path.isfile(os.path.join(self.root, bucket, path))

    def download(self, bucket, path):
        with open(os.path.join(self.root, bucket, path), "rb") as f:
            return f.read()


XCOM_RESUME = "{{ ti.xcom_pull(task_ids='plan_train')['resume'] }}"


def test_the_airflow_dag_trains_on_the_remote_exchange_bit_for_bit(
        ds, tmp_path, monkeypatch, capsys, store_root):
    """The DAG's train task, run here: its TRAIN_PARAMETERS (the bucket on the fake store,
    K and the window made small) given to the launcher as a Flex Template launch gives them,
    with the DirectRunner; ``plan_train`` decides each run (fresh, resume, skip), reading
    LATEST and state.json from the store. Two scheduled runs train the pass, the third skips
    train; every window ran the remote exchange and the model is the in-process one's."""
    from helpers import fake_object_store as fos
    root = os.environ[fos.ROOT_ENV]
    ev = _Evaluator({"BUCKET": "bucket", "PROJECT": "p", "REGION": "r", "IMAGE": "i"})
    params = dict(ev.value("TRAIN_PARAMETERS"))
    # what the DAG says its train task runs
    assert params["exchange"] == "remote" and params["detach"] == "true"
    assert params["resume"] == XCOM_RESUME
    assert not {"minibatch", "pieces", "word-blocks", "staleness", "threads"} & set(params), \
        "the remote defaults choose these"
    dataset, model = params["shards"], params["output"]
    assert dataset.startswith("gs://bucket/") and model.startswith("gs://bucket/")
    # the DAG's gs:// bucket is the fake store's; small sizes (as the docs' samples test does)
    params.update(shards="fake" + dataset, output="fake" + model, topics="5")
    params["minibatches-per-window"] = "2"
    shutil.copytree(ds, fos.local_path(params["shards"]))
    namespace = {"json": json, "GCSHook": lambda: _StoreHook(root),
                 "TRAIN_PARAMETERS": params}
    _, plan_train = ev.functions(namespace, "_split", "plan_train")

    monkeypatch.setenv("LDABEAM_COMMAND", "train")
    decisions = []
    for _ in range(4):
        plan = plan_train(templates_dict={"model": model})     # the DAG's gs:// URL
        decisions.append(plan)
        if plan is False:
            break
        argv = ["--%s=%s" % (k, plan["resume"] if v == XCOM_RESUME else v)
                for k, v in params.items()]
        rc = launch.main(argv + ["--runner=DirectRunner", "--no-progress=true"])
        assert rc == 0, capsys.readouterr().err[-3000:]
    assert decisions == [{"resume": "false"}, {"resume": "true"}, False]
    assert "training complete" in capsys.readouterr().out
    assert _remote_windows(params["output"]) == [(0, 2), (2, 3)]
    got = str(tmp_path / "got")          # the store's model as a local folder, to compare
    shutil.copytree(fos.local_path(params["output"]), got)
    _inprocess_twin(ds, got, str(tmp_path / "inprocess"), capsys)
    _same_model(str(tmp_path / "inprocess"), got)


# ------------------------------------------------------------------- graph limit (item 2)

def test_a_template_window_over_the_graph_limit_is_refused_before_submission(
        ds, monkeypatch, capsys, store_root, loopback_google):
    """A detached Dataflow launch through the launcher (``--dry_run=True --no_auth``) whose
    window's job graph is over the limit: one line naming the window that fits, exit 2,
    nothing published, no scratch left. The limit is lowered to 150 kB for the test so that
    the window over it has 40 steps (the real 10 MB takes ~2,300 steps of the remote
    exchange, a minute of graph building); the check, the graph and its measurement are the
    launch's own."""
    from helpers import fake_object_store as fos
    from pipelines.training import beam_window
    monkeypatch.setattr(beam_window, "GRAPH_LIMIT_BYTES", 150_000)
    shutil.copytree(ds, fos.local_path(store_root + "/ds"))
    monkeypatch.setenv("LDABEAM_COMMAND", "train")
    argv = ["--shards=%s/ds" % store_root, "--output=%s/m" % store_root, "--topics=5",
            "--minibatch=2", "--minibatches-per-window=40", "--project=ldabeam-test",
            "--region=us-central1", "--temp_location=gs://ldabeam-test/tmp", "--dry_run=True",
            "--no_auth", "--no-progress=true", loopback_google]
    assert launch.main(argv) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    m = re.search(r"DataflowRunner: this run is \d+ jobs \(150 steps, windows of 40.*this "
                  r"window is over it, give --minibatches-per-window (\d+) or fewer", lines[0])
    assert m and 0 < int(m.group(1)) < 40, lines[0]
    assert CheckpointStore(store_root + "/m").latest() is None
    left = [f for _, _, fs in os.walk(fos.local_path(store_root + "/m/.beam-scratch"))
            for f in fs]
    assert left == []


def test_the_templates_windows_fit_the_graph_limit():
    """The window the DAG, the scheduler body and the README launch (900 minibatches) is one
    job within Dataflow's 10 MB graph at the measured bytes of a remote step (its warm-up
    steps at staleness 0 included) for both word-block algorithms."""
    from lda_core.training.staleness import DEFAULT_WARMUP
    from pipelines.training import remote_defaults as rd
    from pipelines.training.beam_train import REMOTE_WINDOW_STEPS
    ev = _Evaluator({"BUCKET": "b", "PROJECT": "p", "REGION": "r", "IMAGE": "i"})
    body = json.load(open(os.path.join(TEMPLATES, "cloud_scheduler",
                                       "launch_train_body.json")))["launchParameter"]
    readme = open(os.path.join(TEMPLATES, "dataflow", "README.md")).read()
    gcloud = re.findall(r"minibatches-per-window=(\d+)", readme.split("## Run\n", 1)[1])
    windows = {int(ev.value("TRAIN_PARAMETERS")["minibatches-per-window"]),
               int(body["parameters"]["minibatches-per-window"])} | {int(w) for w in gcloud}
    assert windows == {REMOTE_WINDOW_STEPS}
    for alg in rd.ALGORITHMS:
        g = rd.MEASURED[alg].graph_bytes
        first = DEFAULT_WARMUP * g[0] + (REMOTE_WINDOW_STEPS - DEFAULT_WARMUP) * g[1]
        assert first <= 0.5 * rd.GRAPH_LIMIT_BYTES, (alg, first)


def test_a_template_launch_with_names_dataflow_refuses_is_one_line_within_seconds(
        ds, monkeypatch, capsys, store_root, loopback_google):
    """A bucket or project name Dataflow refuses (``gs://b/tmp``: bucket names have 3 to 63
    characters) is one line and exit 2 before anything is read: Beam itself would look up a
    default staging bucket for 120 s and then fail with an internal error (issue 31, item 4:
    never a silent hang)."""
    import time
    from helpers import fake_object_store as fos
    shutil.copytree(ds, fos.local_path(store_root + "/ds"))
    monkeypatch.setenv("LDABEAM_COMMAND", "train")
    # the service's own endpoint (Beam checks these names only for it): the refusal comes
    # before any request, and the storage client's would go to the closed loopback port
    common = ["--shards=%s/ds" % store_root, "--output=%s/m" % store_root, "--topics=5",
              "--region=us-central1", "--dry_run=True", "--no_auth"]
    for bad, named in ((["--project=ldabeam-test", "--temp_location=gs://b/tmp"],
                        "Invalid GCS bucket (gs://b/tmp), given for the option: temp_location"),
                       (["--project=Not A Project", "--temp_location=gs://ldabeam-test/t"],
                        "Invalid Project ID (Not A Project)")):
        t0 = time.monotonic()
        assert launch.main(common + bad) == 2
        lines = error_lines(capsys.readouterr().err)
        assert len(lines) == 1 and named in lines[0], lines
        assert time.monotonic() - t0 < 30
