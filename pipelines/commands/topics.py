"""``ldabeam topics``: the top words of each topic of a trained model.

    ldabeam topics --model MODEL_DIR [--top N] [--format table|csv|json]
"""
from __future__ import annotations

import csv
import json
import sys


def add_arguments(p) -> None:
    p.add_argument("--model", metavar="MODEL_DIR", default=None,
                   help="model directory written by `ldabeam train` (required)")
    p.add_argument("--top", type=int, default=10, help="words per topic")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")


def run(args, beam_argv) -> int:
    from lda_core.evaluation import top_words
    from pipelines.commands.export import load_model
    if args.top < 1:
        raise ValueError("--top must be >= 1, got %d" % args.top)
    algo, state, vocab = load_model(args.model)
    phi = algo.topic_word()
    tops = top_words(phi, vocab.tokens if vocab is not None else None, n=args.top)
    out = sys.stdout
    if args.format == "json":
        json.dump([{"topic": k, "words": [str(w) for w, _ in t],
                    "weights": [float(x) for _, x in t]} for k, t in enumerate(tops)],
                  out, indent=1)
        out.write("\n")
    elif args.format == "csv":
        w = csv.writer(out)
        w.writerow(["topic", "rank", "word", "weight"])
        for k, t in enumerate(tops):
            for r, (word, x) in enumerate(t):
                w.writerow([k, r + 1, word, "%.6g" % x])
    else:
        print("%s, K=%d, step %d, %d documents seen" % (state.algorithm, state.n_topics,
                                                          state.step, state.docs_seen), file=out)
        width = len(str(len(tops) - 1))
        for k, t in enumerate(tops):
            print("topic %*d: %s" % (width, k, " ".join(str(w) for w, _ in t)), file=out)
    return 0
