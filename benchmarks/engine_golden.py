"""Golden checkpoints of every runner: record once, compare after a change to the training
engine.

    python benchmarks/engine_golden.py record  OUT.json [--only NAME ...]
    python benchmarks/engine_golden.py compare OUT.json [--only NAME ...]

Trains a fixed small run (300 KOS documents from ../shared/data, K=5, S=50, two passes,
held-out evaluation every 4 steps, windows of 5 minibatches) of each algorithm with each runner
that can train it -- in-process, Beam in-process (unrolled and one pipeline per minibatch),
Beam with two worker processes, detached windows, and the streaming job fed by TestStream --
plus the other callers of the training loop: the scikit-learn estimators (``fit``,
``partial_fit``, online / batch / SCVB0, saved with ``save``), the library's
``LdaModel.update`` (saved with ``save``) and ``ldabeam train --update`` in-process and on
the DirectRunner -- and records, for every checkpoint the run kept, the sha256 of each array plus step, documents
seen, parameters and RNG state, and the run log's step records without their times. ``compare``
re-runs and reports every difference; the exit status is the number of runs that differ.

This is a tool, not a test: the hashes are exact float64 bit patterns, which depend on the
numba/LLVM build and the CPU's vector width, so they are only comparable on one machine and one
environment (before/after a refactor in the same venv).
"""
import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

KOS = os.path.join(REPO, "..", "..", "shared", "data", "uci-bow-kos")
if not os.path.isdir(KOS):
    KOS = "/work/shared/data/uci-bow-kos"

COMMON = ["--topics", 5, "--minibatch", 50, "--seed", 2, "--alpha", 0.1, "--eta", 0.01,
          "--no-progress", "--eval-every", 4, "--keep-checkpoints", 0, "--checkpoint-every", 5]
DIRECT = ["--runner", "DirectRunner", "--minibatches-per-window", 5]
MULTI = DIRECT + ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
VOLATILE = {"wall_time", "elapsed", "eval_seconds", "global_step_seconds", "checkpoint",
            "run_key", "seconds", "time", "started", "model_dir", "output", "shards",
            "pid", "host", "argv", "command"}

SEQUENTIAL = ["o-lda", "incremental-gibbs", "particle-filter"]


def runs():
    """name -> (algorithm, extra argv, launches) of every recorded run."""
    out = {}
    for a in ["online-vb", "scvb0", "sparse-gibbs-vb"]:
        out["inprocess/" + a] = (a, ["--passes", 2], 1)
        out["direct/" + a] = (a, ["--passes", 2] + DIRECT, 1)
        out["direct-stepwise/" + a] = (a, ["--passes", 2, "--no-unroll"] + DIRECT, 1)
        out["detached/" + a] = (a, ["--passes", 2] + DIRECT, 3)
    out["multi/online-vb"] = ("online-vb", ["--passes", 2] + MULTI, 1)
    out["multi/scvb0"] = ("scvb0", ["--passes", 2] + MULTI, 1)
    out["inprocess/batch-vb"] = ("batch-vb", ["--passes", 3], 1)
    out["inprocess/gibbs"] = ("gibbs", ["--passes", 4, "--burn-in", 2], 1)
    out["direct/gibbs"] = ("gibbs", ["--passes", 4, "--burn-in", 2, "--runner",
                                     "DirectRunner"], 1)
    for a in SEQUENTIAL:
        extra = ["--particles", 3, "--ess-threshold", 1.5] if a == "particle-filter" else []
        out["inprocess/" + a] = (a, extra, 1)
        out["direct/" + a] = (a, extra + DIRECT, 1)
    out["stream/online-vb"] = ("online-vb", None, 0)
    for name in ("sklearn/online", "sklearn/online-partial", "sklearn/batch", "sklearn/scvb0",
                 "sklearn/scvb0-partial", "update/online-vb", "update/scvb0",
                 "update-cli/inprocess", "update-cli/direct"):
        out[name] = (name.split("/")[1], name, 0)
    return out


def run_sklearn(ds, md, kind):
    """An estimator fit on the training shards (K=5, batch_size=50), saved to ``md``."""
    import scipy.sparse as sp
    from lda_core.sklearn_api import OnlineLDA, SCVB0LDA
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    from lda_core.storage.vocab_file import Vocabulary
    b = dataset.read_docbatch(dataset.resolve_shards(ds))
    V = len(Vocabulary.read(os.path.join(ds, "vocab.tsv")))
    X = sp.csr_matrix((b.counts.astype(float), b.word_ids, b.indptr), shape=(b.n_docs, V))
    if kind == "online":
        est = OnlineLDA(5, batch_size=50, max_iter=2, random_state=2, evaluate_every=1,
                        perp_tol=1e-9).fit(X)
    elif kind == "online-partial":
        est = OnlineLDA(5, batch_size=50, random_state=2, total_samples=300)
        est.partial_fit(X[:120]).partial_fit(X[120:])
    elif kind == "batch":
        est = OnlineLDA(5, learning_method="batch", batch_size=50, max_iter=3,
                        random_state=2).fit(X)
    elif kind == "scvb0":
        est = SCVB0LDA(5, batch_size=50, max_iter=2, random_state=2).fit(X)
    else:
        est = SCVB0LDA(5, batch_size=50, random_state=2, total_samples=300)
        est.partial_fit(X[:120]).partial_fit(X[120:])
    est.save(md)
    return md


def run_update(ds, d, name):
    """A model trained in-process (one pass), then continued on the held-out documents:
    ``LdaModel.update`` (two passes, saved) or ``ldabeam train --update`` (in-process or
    DirectRunner)."""
    import ldabeam
    from pipelines.ingest import dataset
    from pipelines.ingest import manifest
    from lda_core.storage.vocab_file import Vocabulary
    algorithm = "scvb0" if name == "update/scvb0" else "online-vb"
    md = os.path.join(d, "model")
    run_cli(ds, md, algorithm, ["--passes", 1, "--heldout", "none"], 1)
    if name.startswith("update/"):
        b = dataset.read_docbatch(dataset.resolve_shards(ds, "heldout"))
        rows = [{"word_ids": b.word_ids[b.indptr[i]:b.indptr[i + 1]],
                 "counts": b.counts[b.indptr[i]:b.indptr[i + 1]]} for i in range(b.n_docs)]
        m = ldabeam.load(md)
        m.update(rows, passes=2, ids=[str(i) for i in b.doc_ids])
        m.save(md)
        return md
    held = os.path.join(d, "held")
    os.makedirs(os.path.join(held, "train"))
    import shutil as _sh
    for f in dataset.resolve_shards(ds, "heldout"):
        _sh.copy(f, os.path.join(held, "train", os.path.basename(f)))
    _sh.copy(os.path.join(ds, "vocab.tsv"), os.path.join(held, "vocab.tsv"))
    manifest.write_manifest(held, {"vocab_hash": Vocabulary.read(
        os.path.join(ds, "vocab.tsv")).hash, "splits": manifest.shard_listing(held)})
    from pipelines import cli
    argv = ["train", "--update", "--output", md, "--shards", held, "--passes", 2]
    if name.endswith("direct"):
        argv += ["--runner", "DirectRunner"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = cli.main([str(a) for a in argv])
    if rc != 0:
        raise RuntimeError("ldabeam %s failed with %s" % (" ".join(map(str, argv)), rc))
    return md


def digest_store(md):
    from lda_core.storage.checkpoint import CheckpointStore
    from lda_core.storage.run_log import read_run_log
    store = CheckpointStore(md)
    cks = {}
    for c in store.list_checkpoints():
        st = store.load(c.step)
        params = json.loads(json.dumps(st.params, default=str))
        # the minibatch size S is compared as one value wherever the checkpoint keeps it (its
        # run information; checkpoints written before issue 34 also held it among the
        # algorithm's parameters as batch_size)
        legacy = params.pop("batch_size", None)
        cks[str(c.step)] = {
            "step": st.step, "docs_seen": st.docs_seen, "algorithm": st.algorithm,
            "minibatch": ((st.info or {}).get("run") or {}).get("minibatch", legacy),
            "params": params,
            "rng": json.loads(json.dumps(st.rng, default=str)),
            "arrays": {k: hashlib.sha256(v.tobytes()).hexdigest() + ":%s%s" % (v.dtype, v.shape)
                       for k, v in sorted(st.arrays.items())}}
    log = os.path.join(md, "run_log.jsonl")
    steps = []
    if os.path.exists(log):
        steps = [_strip(r) for r in read_run_log(log, "step")]
    return {"checkpoints": cks, "steps": steps}


def _strip(rec):
    return {k: (_strip(v) if isinstance(v, dict) else v) for k, v in rec.items()
            if k not in VOLATILE}


def run_cli(ds, md, algorithm, extra, launches):
    from pipelines import cli
    for i in range(launches):
        if launches > 1:
            argv = ["train", "--shards", ds, "--output", md, "--detach"]
            argv += (["--algorithm", algorithm] + COMMON + extra if i == 0
                     else ["--resume", "--no-progress", "--eval-every", 4,
                           "--keep-checkpoints", 0] + DIRECT)
        else:
            argv = ["train", "--shards", ds, "--output", md, "--algorithm", algorithm] \
                + COMMON + extra
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            rc = cli.main([str(a) for a in argv])
        if rc != 0:
            raise RuntimeError("ldabeam %s failed with %s" % (" ".join(map(str, argv)), rc))


def run_stream(tmp):
    """The streaming job on TestStream: 4 windows of 80, 70, 90, 80 synthetic documents."""
    import numpy as np
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms import window
    from pipelines.streaming import stream, stream_parse
    from pipelines.ingest import synthetic
    from helpers.streams import K, V, W, messages as _messages, stream_model as _model
    spec = synthetic.SyntheticSpec(n_docs=320, n_words=V, n_topics=K, doc_length=50.0,
                                   alpha=0.1, eta=0.05, seed=3)
    batch, vocab = synthetic.generate(spec), synthetic.vocabulary(spec)
    import pathlib
    model, vpath, _ = _model(pathlib.Path(tmp), vocab)
    bounds = [0, 80, 150, 240, 320]
    ts = TestStream().advance_watermark_to(0)
    for w in range(4):
        msgs = _messages(batch, vocab, bounds[w], bounds[w + 1])
        rng = np.random.default_rng(w)
        msgs = [msgs[i] for i in rng.permutation(len(msgs))]
        ts = ts.add_elements([window.TimestampedValue(m, w * W + 1 + (j % 50))
                              for j, m in enumerate(msgs)])
        ts = ts.advance_watermark_to(w * W + W)
    ts = ts.advance_watermark_to_infinity()
    parse = stream_parse.ParseConfig(vocab_path=vpath, n_words=V)
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=opts) as p:
        _ = p | ts | stream.StreamTrain(model, parse, W, allowed_lateness=3600)
    return model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["record", "compare"])
    ap.add_argument("path")
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args(argv)
    from helpers.uci import kos_dataset as make_dataset
    docword = os.path.join(KOS, "docword.kos.txt.gz")
    vocab = os.path.join(KOS, "vocab.kos.txt")
    if not os.path.exists(docword):
        print("KOS data not found at %s" % KOS)
        return 2
    tmp = tempfile.mkdtemp(prefix="engine-golden-")
    try:
        ds = make_dataset(os.path.join(tmp, "ds"), (docword, vocab), n_train=300, n_held=60)
        plan = runs()
        names = [n for n in plan if not args.only or any(o in n for o in args.only)]
        got = {}
        for n in names:
            algorithm, extra, launches = plan[n]
            d = os.path.join(tmp, n.replace("/", "_"))
            os.makedirs(d)
            try:
                if extra is None:
                    md = run_stream(d)
                elif isinstance(extra, str) and extra.startswith("sklearn/"):
                    md = run_sklearn(ds, os.path.join(d, "model"), algorithm)
                elif isinstance(extra, str):
                    md = run_update(ds, d, extra)
                else:
                    md = os.path.join(d, "model")
                    run_cli(ds, md, algorithm, extra, launches)
                got[n] = digest_store(md)
            except Exception as e:         # recorded: a run that fails is a result too
                got[n] = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0]
                                                if str(e) else "")}
            print("%-32s %s" % (n, got[n].get("error") or
                                "%d checkpoints" % len(got[n]["checkpoints"])), flush=True)
        if args.mode == "record":
            old = {}
            if os.path.exists(args.path) and args.only:
                with open(args.path) as f:
                    old = json.load(f)
            old.update(got)
            with open(args.path, "w") as f:
                json.dump(old, f, indent=1, sort_keys=True)
            return 0
        with open(args.path) as f:
            ref = json.load(f)
        bad = 0
        for n in names:
            if n not in ref:
                print("NEW  %s (no reference)" % n)
                continue
            if ref[n] == got[n]:
                print("SAME %s" % n)
                continue
            bad += 1
            print("DIFF %s" % n)
            for part in ("error", "checkpoints", "steps"):
                if ref[n].get(part) != got[n].get(part):
                    print("     %s: %s\n  -> %s" % (part, str(ref[n].get(part))[:300],
                                                  str(got[n].get(part))[:300]))
        return bad
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
