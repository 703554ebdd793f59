"""Apache Airflow DAG: vectorize -> train (resuming from the latest checkpoint) -> evaluate ->
report, as one scheduled batch job on Dataflow (the ldabeam Flex Templates of
templates/dataflow/).

Why a chain of launches: a Flex Template job must return after ``run()``, so one launch is one
pipeline run. Each scheduled run continues the model from its latest checkpoint for at most
``steps_per_run`` more global steps (``--resume --max-steps``), so a long training is spread
over successive runs and a failed run loses at most one launch of work; because every step is
deterministic, the chain ends with the same model as one uninterrupted run.

    vectorize      Flex Template ldabeam-vectorize, skipped when the dataset's manifest.json
                   already exists (the corpus is vectorised once)
    plan_train     reads MODEL/checkpoints/LATEST: resume=true and max-steps = LATEST +
                   steps_per_run, or a fresh model (resume=false, topics=K)
    train          Flex Template ldabeam-train with those parameters; the model directory is
                   on GCS (checkpoints under unique names committed by the LATEST object,
                   written last; docs/model-format.md)
    evaluate       ldabeam evaluate on the Airflow worker, reading the model and the held-out
                   shards straight from GCS; metrics JSON to GCS
    report         ldabeam report, reading the model from GCS and writing the HTML there

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

from airflow import DAG
from airflow.models import Variable
from airflow.operators.bash import BashOperator
from airflow.operators.python import PythonOperator, ShortCircuitOperator
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
STEPS_PER_RUN = 2000

# Flex Template parameters: names are exactly the ldabeam options (templates/dataflow/metadata_*)
VECTORIZE_PARAMETERS = {
    "input": "gs://" + BUCKET + "/corpus/enwiki-*-pages-articles*.xml*.bz2",
    "output": DATASET,
    "holdout-fraction": "0.001",
    "keep-n": "100000",
}
TRAIN_PARAMETERS = {
    "shards": DATASET,
    "output": MODEL,
    "topics": str(TOPICS),
    "minibatch": "4096",
    "kappa": "0.7",
    "tau0": "64",
    "passes": "1",
    "checkpoint-every": "100",
    "minibatches-per-window": str(STEPS_PER_RUN),
    "threads": "1",
    "resume": "{{ ti.xcom_pull(task_ids='plan_train')['resume'] }}",
    "max-steps": "{{ ti.xcom_pull(task_ids='plan_train')['max_steps'] }}",
}
ENVIRONMENT = {
    "tempLocation": "gs://" + BUCKET + "/tmp",
    "sdkContainerImage": IMAGE,
    "machineType": "n2-standard-4",
    "maxWorkers": 16,
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


def plan_train(**context) -> dict:
    """resume / max-steps for this run from MODEL/checkpoints/LATEST."""
    bucket, path = _split(context["templates_dict"]["model"])
    hook = GCSHook()
    latest = path + "/checkpoints/LATEST"
    if not hook.exists(bucket, latest):
        return {"resume": "false", "max_steps": str(STEPS_PER_RUN)}
    # e.g. step-000001234-3f9c0a1b2c4d (on object stores every checkpoint name carries a
    # unique suffix; a local model's is step-000001234)
    name = hook.download(bucket, latest).decode("utf-8").strip()
    step = int(name.split("-")[1])
    return {"resume": "true", "max_steps": str(step + STEPS_PER_RUN)}


def _flex(task_id: str, template: str, parameters: dict, trigger_rule: str = "all_success"):
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
    description="vectorize -> train (resume) -> evaluate -> report on Dataflow",
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
    plan = PythonOperator(task_id="plan_train", python_callable=plan_train,
                          templates_dict={"model": MODEL},
                          trigger_rule="none_failed")     # runs when vectorize was skipped
    train = _flex("train", "train", TRAIN_PARAMETERS)
    evaluate = BashOperator(task_id="evaluate", bash_command=EVALUATE_COMMAND)
    report = BashOperator(task_id="report", bash_command=REPORT_COMMAND)

    check >> vectorize >> plan >> train >> evaluate >> report
