"""Apache Airflow DAG: vectorize -> train (one more window, resuming from the latest
checkpoint) -> evaluate -> report, as one scheduled batch job on Dataflow (the ldabeam Flex
Templates of templates/dataflow/).

Why a chain of launches: a Flex Template launcher must return soon after submitting its job
(Dataflow fails a launch that waits: "Your launch takes too long to finish"), so the
templates run detached (``detach=true``, also the launcher's default): one train launch
submits exactly ONE window -- ``minibatches-per-window`` minibatches from the checkpoint
``LATEST`` names -- and returns; the window's job publishes its checkpoint, evaluates and
appends its run-log records itself, in its last step. The train task is the Dataflow job:
``DataflowStartFlexTemplateOperator(wait_until_finished=True)`` launches the template and
then waits for the *job* it submitted (not for the launcher), so evaluate and report see the
window's checkpoint. Each scheduled run advances the model by one window; a failed run loses
at most that window, and because every step is deterministic the chain ends with the same
model, bit for bit, as one uninterrupted run with the same window size.

The window runs the remote exchange (``exchange=remote``, the default of every remote launch
of online-vb and scvb0, said here so the parameters mean the same on any runner): the state
cut into word blocks whose rows, statistics and documents move through Beam's shuffle inside
the window. The train parameters leave the minibatch, pieces, word blocks, staleness and
E-step threads to the remote defaults (the cluster model's fastest choice for the job's
workers and machine type, logged in one line at the start; docs/cluster.md section 8), and the
window at 900 minibatches, the remote runners' default: one job within Dataflow's 10 MB graph
limit. Check a configuration before scheduling it with ``ldabeam train --plan`` and the same
options (docs/cluster.md, "Runbook"). tests/test_template_local_runs.py runs this DAG's train
parameters through the template launcher with the DirectRunner, chained by ``plan_train``,
and checks the model against the in-process trainer's, bit for bit.

    vectorize      Flex Template ldabeam-vectorize, skipped when the dataset's manifest.json
                   already exists (the corpus is vectorised once); the operator waits for
                   the job, whose last step writes manifest.json
    plan_train     reads MODEL/checkpoints/LATEST (and that checkpoint's state.json): a fresh
                   model (resume=false, topics=K), the next window (resume=true), or -- when
                   the latest checkpoint already completes every pass -- skips train
    train          Flex Template ldabeam-train with those parameters: one window; the model
                   directory is on GCS (checkpoints under unique names committed by the
                   LATEST object, written last; docs/model-format.md)
    evaluate       ldabeam evaluate on the Airflow worker, reading the model and the held-out
                   shards straight from GCS; metrics JSON to GCS (also when train was
                   skipped)
    report         ldabeam report, reading the model from GCS and writing the HTML there

Runs never overlap (``max_active_runs=1``, and each run waits for its jobs): two windows of
one model must not run at once (each launch clears the model's scratch folder and the run
log is rewritten by one writer at a time).

Set the Airflow Variables ``ldabeam_project``, ``ldabeam_region``, ``ldabeam_bucket`` and
``ldabeam_image`` (the worker image of templates/dataflow/Dockerfile), build the templates as
templates/dataflow/README.md shows, and install ``ldabeam`` with its GCS extra (``pip install
'.[gcp,report]'`` from this repository: evaluate and report read ``gs://`` through Beam's
FileSystems) and the Google provider (``apache-airflow-providers-google``) on the Airflow
workers.

This file only compiles where Airflow is absent (tests/test_templates.py checks that, and that
every ldabeam option named here exists in the CLI).
"""
from __future__ import annotations

import datetime
import json

from airflow import DAG
from airflow.operators.bash import BashOperator
from airflow.operators.python import ShortCircuitOperator
from airflow.providers.google.cloud.hooks.gcs import GCSHook
from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator

PROJECT = "{{ var.value.ldabeam_project }}"
REGION = "{{ var.value.ldabeam_region }}"
BUCKET = "{{ var.value.ldabeam_bucket }}"
IMAGE = "{{ var.value.ldabeam_image }}"
TEMPLATES = "gs://" + BUCKET + "/templates"
DATASET = "gs://" + BUCKET + "/ldabeam/dataset"
MODEL = "gs://" + BUCKET + "/ldabeam/model"
REPORTS = "gs://" + BUCKET + "/ldabeam/reports/{{ ds }}"

TOPICS = 100
# minibatches per scheduled run: one detached window (the remote runners' default window,
# beam_train.REMOTE_WINDOW_STEPS: one job well within Dataflow's graph limit)
STEPS_PER_RUN = 900
WORKERS = 16
MACHINE_TYPE = "n2-standard-4"

# Flex Template parameters: names are exactly the ldabeam options (templates/dataflow/metadata_*)
# or Beam pipeline options, which the launched program passes to Beam
VECTORIZE_PARAMETERS = {
    "input": "gs://" + BUCKET + "/corpus/enwiki-*-pages-articles*.xml*.bz2",
    "output": DATASET,
    "holdout-fraction": "0.001",
    "keep-n": "100000",
}
# the default algorithm (scvb0); minibatch, pieces, word-blocks, staleness and threads are the
# remote defaults unless set here (a resume keeps the checkpoint's)
TRAIN_PARAMETERS = {
    "shards": DATASET,
    "output": MODEL,
    "topics": str(TOPICS),
    "passes": "1",
    "checkpoint-every": "100",
    "minibatches-per-window": str(STEPS_PER_RUN),
    "exchange": "remote",       # every remote launch's exchange, said here
    "detach": "true",           # one window per launch (the launcher's default, said here)
    "resume": "{{ ti.xcom_pull(task_ids='plan_train')['resume'] }}",
    # Beam options the remote defaults are chosen for (the launched program reads them; the
    # environment below sizes the job itself)
    "max_num_workers": str(WORKERS),
    "machine_type": MACHINE_TYPE,
}
ENVIRONMENT = {
    "tempLocation": "gs://" + BUCKET + "/tmp",
    "sdkContainerImage": IMAGE,
    "machineType": MACHINE_TYPE,
    "maxWorkers": WORKERS,
}

# evaluate and report read the model (its LATEST checkpoint, vocabulary and run log) and the
# shards in place on GCS; the dataset's heldout split is the default of --shards DATASET
EVALUATE_COMMAND = (
    "set -euo pipefail; W=$(mktemp -d); M=" + MODEL + "; D=" + DATASET + "; R=" + REPORTS + "; "
    "ldabeam evaluate --model $M --shards $D --train-shards none --max-docs 5000 "
    "> $W/metrics.json && gsutil -q cp $W/metrics.json $R/metrics.json; rm -rf $W")
REPORT_COMMAND = (
    "set -euo pipefail; M=" + MODEL + "; R=" + REPORTS + "; "
    "ldabeam report --model $M --output $R/report.html")


def _split(uri: str):
    bucket, _, path = uri[len("gs://"):].partition("/")
    return bucket, path


def dataset_missing(**context) -> bool:
    """ShortCircuit: True (run vectorize) unless the dataset's manifest.json exists."""
    bucket, path = _split(context["templates_dict"]["dataset"])
    return not GCSHook().exists(bucket, path + "/manifest.json")


def plan_train(**context):
    """ShortCircuit: this run's train parameters from MODEL/checkpoints/LATEST -- a fresh
    model, the next window, or False (train is skipped; evaluate and report still run) when
    the latest checkpoint has done every minibatch of every pass."""
    bucket, path = _split(context["templates_dict"]["model"])
    hook = GCSHook()
    latest = path + "/checkpoints/LATEST"
    if not hook.exists(bucket, latest):
        return {"resume": "false"}
    # e.g. step-000001234-3f9c0a1b2c4d (on object stores every checkpoint name carries a
    # unique suffix); its state.json records the position and the run's settings
    name = hook.download(bucket, latest).decode("utf-8").strip()
    meta = json.loads(hook.download(bucket, "%s/checkpoints/%s/state.json" % (path, name)))
    info = meta.get("info") or {}
    done = int((info.get("trainer") or {}).get("minibatches_done", meta["step"]))
    run = info.get("run") or {}
    if run.get("n_docs") and run.get("minibatch"):
        # the passes this DAG asks for (raising them continues a finished model)
        total = int(TRAIN_PARAMETERS["passes"]) * -(-int(run["n_docs"]) // int(run["minibatch"]))
        if done >= total:
            print("training complete: %s is at minibatch %d of %d" % (name, done, total))
            return False
    return {"resume": "true"}


def _flex(task_id: str, template: str, parameters: dict, trigger_rule: str = "all_success"):
    # wait_until_finished: the task lasts as long as the Dataflow job the (detached) launcher
    # submitted, so the next task sees what the job wrote (manifest.json, the checkpoint)
    return DataflowStartFlexTemplateOperator(
        task_id=task_id,
        project_id=PROJECT,
        location=REGION,
        body={"launchParameter": {
            "jobName": "ldabeam-" + template + "-{{ ds_nodash }}-{{ ti.try_number }}",
            "containerSpecGcsPath": TEMPLATES + "/ldabeam-" + template + ".json",
            "parameters": parameters,
            "environment": ENVIRONMENT,
        }},
        wait_until_finished=True,
        trigger_rule=trigger_rule,
    )


with DAG(
    dag_id="ldabeam_train",
    description="vectorize -> train (one more window) -> evaluate -> report on Dataflow",
    schedule="@daily",
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,          # runs chain through the checkpoints: never two at once
    default_args={"retries": 1, "retry_delay": datetime.timedelta(minutes=10)},
    tags=["ldabeam"],
) as dag:
    check = ShortCircuitOperator(
        task_id="dataset_missing", python_callable=dataset_missing,
        templates_dict={"dataset": DATASET}, ignore_downstream_trigger_rules=False)
    vectorize = _flex("vectorize", "vectorize", VECTORIZE_PARAMETERS)
    plan = ShortCircuitOperator(
        task_id="plan_train", python_callable=plan_train, templates_dict={"model": MODEL},
        ignore_downstream_trigger_rules=False,   # False skips train only
        trigger_rule="none_failed")              # runs when vectorize was skipped
    train = _flex("train", "train", TRAIN_PARAMETERS)
    evaluate = BashOperator(task_id="evaluate", bash_command=EVALUATE_COMMAND,
                            trigger_rule="none_failed")    # also when train was skipped
    report = BashOperator(task_id="report", bash_command=REPORT_COMMAND)

    check >> vectorize >> plan >> train >> evaluate >> report
