"""``ldabeam topics``: the top words of each topic of a trained model, with their weights.

    ldabeam topics --model MODEL_DIR [--top N] [--format table|csv|json] [--output FILE]
    ldabeam topics --model MODEL_DIR --label K "TEXT" [--label K2 "TEXT2" ...]
    ldabeam topics --model MODEL_DIR --clear-label K

Labels are kept in MODEL_DIR/topic_labels.json ({"topic": "label"}); the tables and
``ldabeam report`` show them.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import sys
import time

from lda_core.errors import UsageError
from lda_core.evaluation.topic_quality import top_words
from lda_core.storage.lease import LeaseHeld, ModelLease
from lda_core.storage.output_paths import check_file_output
from pipelines.reports.report import model_dir_of, read_labels, write_labels
from pipelines.runtime.model_dir import load_model
from pipelines.runtime.paths import write_atomic as write_bytes_atomic


def add_arguments(p) -> None:
    p.add_argument("--model", metavar="MODEL_DIR", default=None,
                   help="model directory written by `ldabeam train` (required)")
    p.add_argument("--top", type=int, default=10, help="words per topic")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="table: one line per topic to read; csv: one row per (topic, rank) "
                        "with label, word and weight; json: one object per topic with its "
                        "words and weights")
    p.add_argument("--output", metavar="FILE", default=None,
                   help="write to FILE instead of standard output")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier listing at --output (a file of any other kind "
                        "is never replaced)")
    p.add_argument("--no-weights", action="store_true",
                   help="table: words only (CSV and JSON always have the weights)")
    p.add_argument("--label", nargs=2, action="append", metavar=("K", "TEXT"), default=None,
                   help="set the label of topic K (kept in MODEL_DIR/topic_labels.json)")
    p.add_argument("--clear-label", type=int, action="append", metavar="K", default=None,
                   help="remove the label of topic K")


#: an `ldabeam topics --label` waits this long for another labeller's lease
LABEL_WAIT_SECONDS = 60.0
LABEL_OWNER = "ldabeam topics --label"


@contextlib.contextmanager
def _label_lease(mdir: str):
    """The model directory's lease for a read-modify-write of its labels, held for the
    block: another labeller holds it for milliseconds, so it is waited for; a writer of the
    model (a training run) is one line (LeaseHeld)."""
    deadline = time.monotonic() + LABEL_WAIT_SECONDS
    for attempt in range(1 << 30):
        lease = ModelLease(mdir, LABEL_OWNER, heartbeat_seconds=0)
        try:
            lease.acquire()
            break
        except LeaseHeld:
            holder = lease.read()      # None: released since acquire() read it
            if holder is not None and not str(holder.get("owner", "")).startswith(
                    LABEL_OWNER) or time.monotonic() > deadline:
                raise
        time.sleep(min(0.5, 0.01 * (attempt + 1)))
    try:
        yield lease
    finally:
        lease.release()


def _update_labels(args, state) -> None:
    mdir = model_dir_of(args.model)
    # under the model's lease: two labellers never lose each other's labels
    with _label_lease(mdir):
        _update_labels_held(args, state, mdir)


def _update_labels_held(args, state, mdir: str) -> None:
    labels = read_labels(mdir)
    for k, text in args.label or []:
        try:
            k = int(k)
        except ValueError:
            raise UsageError("--label K TEXT: K must be a topic number, got %r" % k)
        if not 0 <= k < state.n_topics:
            raise UsageError("--label: topic %d is outside the model's topics [0, %d)"
                             % (k, state.n_topics))
        labels[k] = text.strip()
    for k in args.clear_label or []:
        labels.pop(k, None)
    path = write_labels(mdir, {k: v for k, v in labels.items() if v}, state.n_topics)
    print("labels: %s (%d labelled topics)" % (path, len([v for v in labels.values() if v])),
          file=sys.stderr)


def run(args, beam_argv) -> int:
    if args.top < 1:
        raise UsageError("--top must be >= 1, got %d" % args.top)
    if args.output:      # the output rules of a file output, before any work
        check_file_output(args.output, "topics", [args.model, model_dir_of(args.model)],
                          args.overwrite)
    algo, state, vocab = load_model(args.model)
    if args.label or args.clear_label:
        _update_labels(args, state)
    labels = read_labels(model_dir_of(args.model))
    phi = algo.topic_word()
    tops = top_words(phi, vocab.tokens if vocab is not None else None, n=args.top)
    out = io.StringIO()
    if args.format == "json":
        json.dump([{"topic": k, "label": labels.get(k, ""), "words": [str(w) for w, _ in t],
                    "weights": [float(x) for _, x in t]} for k, t in enumerate(tops)],
                  out, indent=1, ensure_ascii=False)
        out.write("\n")
    elif args.format == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["topic", "label", "rank", "word", "weight"])
        for k, t in enumerate(tops):
            for r, (word, x) in enumerate(t):
                w.writerow([k, labels.get(k, ""), r + 1, word, "%.6g" % x])
    else:
        print("%s, K=%d, step %d, %d documents seen" % (state.algorithm, state.n_topics,
                                                          state.step, state.docs_seen), file=out)
        width = len(str(len(tops) - 1))
        lw = max([len(v) for v in labels.values()] + [0])
        for k, t in enumerate(tops):
            words = " ".join(str(w) if args.no_weights else "%s(%.3f)" % (w, x)
                             for w, x in t)
            lab = (" %-*s" % (lw, labels.get(k, ""))) if lw else ""
            print("topic %*d%s: %s" % (width, k, lab, words), file=out)
    text = out.getvalue()
    if args.output:
        write_bytes_atomic(args.output, text.encode("utf-8"))
        print("wrote %s (%s, %d topics)" % (args.output, args.format, len(tops)),
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
