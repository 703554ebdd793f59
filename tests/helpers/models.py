"""Trained models the tests share: a small real 20 Newsgroups run (built once per test
process), copies of a model folder, and a run cut in two and resumed."""
import os
import shutil

from helpers.news20 import write_train_jsonl

#: topics of the 20 Newsgroups run
NEWS20_K = 8
NEWS20_PER_GROUP = 30


def news20_run(tmp_path_factory, tar_path):
    """(dataset dir, model dir) of a real small run (30 training posts per newsgroup, online
    VB, K = 8, one pass, a checkpoint and an evaluation every 3 steps), built once per test
    process."""
    from pipelines.cli import main as cli_main
    base = tmp_path_factory.getbasetemp() / "news20_run"
    ds, model = str(base / "ds"), str(base / "model")
    if os.path.exists(os.path.join(model, "run_log.jsonl")):
        return ds, model
    base.mkdir(exist_ok=True)
    src = str(base / "posts.jsonl")
    write_train_jsonl(tar_path, src, NEWS20_PER_GROUP)
    assert cli_main(["vectorize", "--input", src, "--format", "jsonl", "--output", ds,
                     "--holdout-fraction", "0.1"]) == 0
    assert cli_main(["train", "--shards", ds, "--output", model, "--topics", str(NEWS20_K),
                     "--algorithm", "online-vb", "--minibatch", "48", "--passes", "1", "--seed",
                     "1", "--eval-every", "3", "--checkpoint-every", "3", "--keep-checkpoints",
                     "20", "--no-progress"]) == 0
    return ds, model


def copy_model(model, tmp_path, name="copy"):
    """A copy of model folder ``model`` under ``tmp_path``."""
    dst = str(tmp_path / name)
    shutil.copytree(model, dst)
    return dst


def run_and_resume(make, steps, cut, tmp_path, apply=None):
    """(the run of ``steps`` in one go, the run of steps[:cut], saved, loaded and continued
    with steps[cut:]) for the algorithm ``make()``; ``apply(m, batch)`` does one step."""
    from lda_core.storage.state import TopicState
    apply = apply or (lambda m, b: m.global_step(m.local_step(b)))
    full = make()
    infos = [apply(full, b) for b in steps]
    half = make()
    for b in steps[:cut]:
        apply(half, b)
    half.to_state().save(str(tmp_path / "ck"))
    resumed = type(half).from_state(TopicState.load(str(tmp_path / "ck")))
    for b in steps[cut:]:
        apply(resumed, b)
    return full, resumed, infos
