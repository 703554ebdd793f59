"""What ``ldabeam train`` prints when it is done: the summary of a run, or of a detached launch."""
from __future__ import annotations

import sys

from pipelines.training import detached


def print_detached(args, algorithm, algo, stream, sub) -> None:
    """What a detached launch did: the window it submitted, where its results will be."""
    out = sys.stdout
    if sub.result is None:
        print("training is complete: position %d of %d (%s); no job submitted"
              % (sub.start, sub.total, "--max-steps reached" if args.max_steps is not None
                 and sub.total == args.max_steps else "every pass done"), file=out)
        print("  model: %s" % args.output, file=out)
        return
    print("%s %s: K=%d, V=%d, D=%d documents, minibatch %d; window of minibatches %d..%d "
          "(of %d), run %s" % ("trained" if sub.runs_here else "submitted", algorithm,
                               algo.n_topics, algo.n_words, stream.n_docs, stream.minibatch,
                               sub.start, sub.stop, sub.total, sub.run_key), file=out)
    if getattr(sub, "dry_run", False):
        print("  --dry_run: the %s translated the job and did not submit it: nothing ran, "
              "nothing will be published, the window's scratch was removed; launch without "
              "--dry_run to train" % args.runner, file=out)
        return
    if sub.runs_here:
        sub.wait()
        print("  --detach: the %s runs the job in this process, so it was waited for (%s)"
              % (args.runner, detached.describe(sub.result, sub.runner)), file=out)
    else:
        print("  job: %s" % detached.describe(sub.result, sub.runner), file=out)
        print("  when the job ends it has published the checkpoint of position %d "
              "(%s/checkpoints/LATEST) and appended the window to %s/run_log.jsonl; then "
              "launch again with --resume%s" % (sub.stop, args.output, args.output,
                                                "" if sub.stop < sub.total
                                                else " (this is the last window)"), file=out)
    print("  model: %s (vocab.tsv, checkpoints/, run_log.jsonl)" % args.output, file=out)


def print_summary(args, algorithm, algo, stream, res, pass_stop=None) -> None:
    # the global step the checkpoint is named by; the run's position in its minibatch order
    # differs from it after an update (whose steps lie outside that order)
    position = getattr(res, "step", getattr(algo, "step", None))
    step = getattr(getattr(res, "algorithm", None), "step", None)
    step = position if step is None else step
    out = sys.stdout
    planned = ("--passes auto: at most %d passes" % stream.passes if pass_stop is not None
               else "%d passes planned" % stream.passes)
    print("trained %s: K=%d, V=%d, D=%d documents, minibatch %d, %s"
          % (algorithm, algo.n_topics, algo.n_words, stream.n_docs, stream.minibatch,
             planned), file=out)
    if pass_stop is not None:
        print("  --passes auto: %s after %d passes (held-out LL/token by pass: %s)"
              % (pass_stop.reason() or "not stopped", len(pass_stop.scores),
                 ", ".join("%.4f" % x for x in pass_stop.scores)), file=out)
        if pass_stop.stopped and pass_stop.scores:
            b = pass_stop.best
            print("  model kept: pass %d (held-out %.4f)%s"
                  % (b + 1, pass_stop.scores[b],
                     ", the last" if b == len(pass_stop.scores) - 1 else
                     ", the best; the later passes' checkpoints were removed"), file=out)
    if res is not None and hasattr(res, "elapsed"):
        # the note is for updates, whose global steps run ahead of the minibatch order; a
        # batch sampler counts its one batch as a step and its sweeps as the run's steps
        print("  step %s (%d this run%s), %d documents seen, %.1f s"
              % (step, res.steps_run, "" if position is None or int(step) <= int(position) else
                 "; %d step(s) of updates outside the run's minibatch order, whose position "
                 "is %s" % (int(step) - int(position), position),
                 res.docs_seen, res.elapsed), file=out)
        m = res.metrics or {}
        if "completion_ll_per_token" in m:
            print("  held-out document completion: %.4f log-likelihood/token (perplexity %.1f)"
                  % (m["completion_ll_per_token"], m["completion_perplexity"]), file=out)
        if "per_word_bound" in m:
            print("  held-out per-word bound (eq. 16): %.4f (perplexity bound %.1f)"
                  % (m["per_word_bound"], m["perplexity_bound"]), file=out)
        if res.checkpoint:
            print("  checkpoint: %s" % res.checkpoint, file=out)
    print("  model: %s (vocab.tsv, checkpoints/, run_log.jsonl)" % args.output, file=out)
