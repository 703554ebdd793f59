"""What the streaming tests share: a model folder to stream into, a Beam state cell for calling
the stateful DoFn directly, and one job of the file route on the FnApiRunner."""
import argparse

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions


def stream_model(tmp_path, vocab, corpus_size=None, topics=5):
    """(model folder, vocabulary path, initial algorithm) of a stream over ``vocab``: online VB,
    ``topics`` topics, minibatches of 80, seed 5, α 0.1, η 0.05."""
    from pipelines.streaming import stream
    model = str(tmp_path / "model")
    vpath = str(tmp_path / "vocab.tsv")
    vocab.write(vpath)
    algo, mv = stream.initial_checkpoint(model, topics=topics, vocab_path=vpath, minibatch=80,
                                         corpus_size=corpus_size, seed=5,
                                         settings=dict(alpha=0.1, eta=0.05))
    return model, mv, algo


class Cell:
    """A Beam state cell (bag or value) for calling the stateful DoFn directly."""

    def __init__(self, v=None):
        self.v = v

    def add(self, x):
        self.v.append(x)

    def read(self):
        return list(self.v) if isinstance(self.v, list) else self.v

    def clear(self):
        self.v = []

    def write(self, x):
        self.v = x


def stream_args(argv):
    """``ldabeam stream ARGV`` parsed by the command's own parser (no Beam options left)."""
    from pipelines.commands import stream as cmd
    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    args, rest = p.parse_known_args(argv)
    assert rest == []
    return args


def streaming_options(argv=()):
    opts = PipelineOptions(list(argv))
    opts.view_as(StandardOptions).streaming = True
    return opts


def run_file_route(model, inbox, dead):
    """One job of the MatchContinuously route (``ldabeam stream --input-glob`` as built for a
    streaming runner) on the FnApiRunner over the ``*.jsonl`` files present in ``inbox``: one
    day-long window, the step applied on arrival."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from pipelines.commands import stream as cmd
    args = stream_args(["--model", model, "--input-glob", str(inbox / "*.jsonl"),
                        "--poll-seconds", "1", "--stop-after", "2", "--window-seconds", "86400",
                        "--order", "arrival", "--deadletter", dead])
    setup = cmd.prepare(args)
    with beam.Pipeline(runner=FnApiRunner(), options=streaming_options()) as p:
        cmd.build_pipeline(p, args, setup)


#: the streaming tests' vocabulary size, topics and window seconds (also benchmarks/engine_golden)
V, K, W = 300, 5, 60.0


def messages(batch, vocab, lo, hi, as_text_every=3):
    """Documents lo..hi-1 as JSON messages: every third as text, the others as ids."""
    import json
    out = []
    for i in range(lo, hi):
        w, c = batch.doc(i)
        if i % as_text_every == 0:
            words = []
            for wi, ci in zip(w, c):
                words += [vocab.tokens[wi]] * int(ci)
            out.append(json.dumps({"doc_id": batch.doc_ids[i], "text": " ".join(words)}))
        else:
            out.append(json.dumps({"doc_id": batch.doc_ids[i], "word_ids": w.tolist(),
                                   "counts": c.tolist()}))
    return out
