"""The vectorize pipeline: raw text, Wikipedia dumps or bag-of-words files -> shards.

Stages (one composite ``PTransform`` each)::

    inputs ─ReadWorkItems─▶ page chunks / raw documents ─Reshuffle─▶ ─TokenizeDocuments─▶
        token counts ─┬─ BuildVocabulary (CombinePerKey df/cf/first, filter_extremes) ─▶ vocab
                      └─ ApplyVocabulary (vocab as a side input) ─▶ rows ─WriteShards─▶ Parquet
    dead letters ─WriteDeadLetters─▶ DIR/deadletter/deadletter.jsonl
    counts (per bundle) + shard list + vocabulary ─WriteManifest─▶ DIR/manifest.json

* A dump (or tar archive, or text file) is read sequentially by one DoFn that only cuts it
  into pages / documents; a ``Reshuffle`` then spreads the parsing, markup stripping and
  tokenizing over the workers. Documents travel in batches (``BATCH_ITEMS`` /
  ``BATCH_CHARS``) from the reader to the shard writer, each batch tokenized and counted at
  once (:func:`pipelines.ingest.tokenize.count_batch`).
* Counts for the manifest are exact: each DoFn sums its counts per bundle and emits them in
  ``finish_bundle`` as a small PCollection (a retried bundle's outputs are discarded as a
  whole), summed with ``CombinePerKey``; Beam metrics carry the same numbers for monitoring.
* Held-out split and shard assignment use a keyed hash of ``doc_id``
  (blake2b of ``"<seed>:<doc_id>"``): bits 0-63 give ``u`` in [0, 1) (held out when
  ``u < holdout_fraction``), bits 64-127 give the row order inside a shard and the shard
  index. The output does not depend on the runner, the number of workers or bundling.
* ``--vocab FILE`` skips the corpus-wide vocabulary pass: words outside it are dropped and
  counted. Bag-of-words inputs (``uci``, ``ldac``, ``mm``) keep their vocabulary and its
  order unless a pruning option is given explicitly.

This module holds the options, the input checks and the job's assembly
(:func:`build_pipeline`); the steps are in :mod:`pipelines.ingest.vectorize_steps` (reading,
tokenizing, applying the vocabulary), :mod:`pipelines.ingest.vectorize_output` (split, shards, dead
letters, vocabulary file, manifest) and :mod:`pipelines.ingest.vectorize_bow` (bag-of-words inputs).
The ``ldabeam vectorize`` command (:mod:`pipelines.commands.vectorize`) parses the options
and calls :func:`vectorize` / :func:`submit`.
"""
from __future__ import annotations

import collections
import hashlib
import logging
from dataclasses import asdict, dataclass, replace
from typing import Callable, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.pvalue import AsDict, AsList, AsSingleton

from lda_core.errors import InputError, UsageError
from lda_core.storage import output_paths
from lda_core.storage.vocab_file import Vocabulary
from pipelines.ingest import (bigquery_source, bow_sources, input_files,
                              manifest as dataset_manifest, splits, text_sources, wiki_source)
from pipelines.ingest.phrases import check_settings, learn_phrases
from pipelines.ingest.tokenize import (doc_tokens, load_stopwords, Preprocessor, tokenizer_record,
                                       TokenizerConfig, TOKENS_FROM_BOW)
from pipelines.ingest.vectorize_bow import bow_vocab_record, ReadBowFn, RemapBowFn
from pipelines.ingest.vectorize_output import (finish_manifest, MAX_SHARDS, write_vocabulary,
                                               WriteDeadLetters, WriteShards)
from pipelines.ingest.vectorize_steps import (ApplyVocabulary, DEAD, group_inputs, ReadWorkItems,
                                              STATS, TokenizeDocuments, VOCAB_STATS)
from pipelines.ingest.vocabulary import BuildVocabulary, PruneSettings
from pipelines.runtime.beam_options import pipeline_options

logger = logging.getLogger(__name__)

BOW_FORMATS = input_files.BOW_FORMATS
TEXT_FORMATS = input_files.TEXT_FORMATS
BIGQUERY_FORMAT = "bigquery"     # --input bq://PROJECT.DATASET.TABLE or --query
QUERY_INPUT = "bq-query"         # the input name of --query
WIKI_MIN_ARTICLE_TOKENS = 50     # gensim.corpora.wikicorpus.ARTICLE_MIN_WORDS
PREFLIGHT_INPUTS = 20            # inputs opened before the pipeline starts
MAX_LISTED_INPUTS = 10000        # more input files: the manifest summarises them (input_summary)


@dataclass
class VectorizeOptions:
    """Everything that determines the output (recorded in the manifest's ``settings``)."""

    inputs: List[str]
    output: str
    format: str = "auto"
    exclude: Tuple[str, ...] = ()              # globs of input files not to read (README.TXT)
    vocab: Optional[str] = None               # fixed vocabulary (text) / BOW vocabulary file
    holdout_fraction: float = 0.0
    seed: int = 0
    num_shards: int = 0                        # 0: automatic (ceil(docs / DOCS_PER_SHARD))
    heldout_shards: int = 0
    no_below: Optional[int] = None             # None: gensim defaults (text), no pruning (BOW)
    no_above: Optional[float] = None
    keep_n: Optional[int] = -1                 # -1: default; None/0: no cap
    keep_tokens: Tuple[str, ...] = ()
    stopwords: Optional[str] = None
    lowercase: bool = True
    deaccent: bool = True
    min_token_len: int = 2
    max_token_len: int = 15
    min_article_tokens: Optional[int] = None   # None: 50 for wiki dumps (gensim), else 1
    encoding: str = "utf-8"
    encoding_errors: str = "replace"          # replaced characters are counted in the manifest
    id_field: str = "id"
    text_field: str = "text"
    label_field: Optional[str] = "label"
    title_field: Optional[str] = "title"
    strip_headers: bool = False
    strip_quotes: bool = False                 # quoted replies and their attributions
    strip_signatures: bool = False             # the lines after a "-- " line
    query: Optional[str] = None                # BigQuery standard SQL, read as one input
    overwrite: bool = False
    reshuffle: bool = True
    # preprocessing (recorded in the settings by pipelines.ingest.tokenize.tokenizer_record)
    token_pattern: Optional[str] = None        # regex of a token (default: gensim's rule)
    segmenter: str = "none"                    # none | jieba | janome
    learn_phrases: bool = False                # gensim Phrases learned on the train documents
    phrases_min_count: int = 5
    phrases_threshold: float = 10.0
    phrases_scoring: str = "default"
    phrases_sample: float = 1.0                # share of the train documents learned on
    tokenizer: Optional[Callable] = None       # Python API: text -> tokens (recorded by name)
    tokenizer_from: Optional[str] = None       # a model or dataset whose preprocessing to reuse

    def validate(self) -> None:
        if not self.output:
            raise UsageError("--output is required: the dataset directory to write")
        if not self.inputs and not self.query:
            raise UsageError("no --input given")
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise UsageError("holdout_fraction must be in [0, 1), got %r" % self.holdout_fraction)
        for name in ("num_shards", "heldout_shards"):
            v = getattr(self, name)
            if not 0 <= v <= MAX_SHARDS:
                raise UsageError("%s must be in [0, %d] (0: automatic), got %r"
                                 % (name, MAX_SHARDS, v))
        if self.min_article_tokens is not None and self.min_article_tokens < 0:
            raise UsageError("min_article_tokens must be >= 0, got %r" % self.min_article_tokens)
        if self.encoding_errors not in ("strict", "replace", "ignore"):
            raise UsageError("encoding_errors must be strict, replace or ignore, got %r"
                             % self.encoding_errors)
        import codecs
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise UsageError("unknown encoding %r" % self.encoding)
        self.tokenizer_config().validate()
        if self.tokenizer_from:
            recorded_tokenizer(self)       # refused now, before the output is prepared
        if self.learn_phrases:
            check_settings(self.phrases_min_count, self.phrases_threshold, self.phrases_scoring)
        if not 0.0 < self.phrases_sample <= 1.0:
            raise UsageError("--phrases-sample must be a share of the train documents in "
                             "(0, 1], got %r" % (self.phrases_sample,))

    def pruning_requested(self) -> bool:
        return (self.no_below is not None or self.no_above is not None or self.keep_n != -1
                or bool(self.keep_tokens))

    def prune_settings(self) -> PruneSettings:
        d = PruneSettings()
        keep_n = d.keep_n if self.keep_n == -1 else (self.keep_n or None)
        s = PruneSettings(no_below=d.no_below if self.no_below is None else self.no_below,
                          no_above=d.no_above if self.no_above is None else self.no_above,
                          keep_n=keep_n, keep_tokens=tuple(self.keep_tokens))
        s.validate()
        return s

    def tokenizer_config(self, stopwords: frozenset = frozenset()) -> TokenizerConfig:
        return TokenizerConfig(lowercase=self.lowercase, deaccent=self.deaccent,
                               min_len=self.min_token_len, max_len=self.max_token_len,
                               stopwords=stopwords, token_pattern=self.token_pattern,
                               segmenter=self.segmenter, tokenizer=self.tokenizer)

    def reader_options(self) -> dict:
        return dict(encoding=self.encoding, encoding_errors=self.encoding_errors,
                    id_field=self.id_field, text_field=self.text_field,
                    label_field=self.label_field, title_field=self.title_field,
                    strip_headers=self.strip_headers, strip_quotes=self.strip_quotes,
                    strip_signatures=self.strip_signatures)

    def min_tokens_for(self, fmt: str) -> int:
        if self.min_article_tokens is not None:
            return self.min_article_tokens
        return WIKI_MIN_ARTICLE_TOKENS if fmt == "wiki" else 1


# ----------------------------------------------------------------------------- driver

def _settings_dict(opts: VectorizeOptions, inputs, vocab_source: str,
                   pruning: Optional[PruneSettings]) -> dict:
    s = asdict(opts)
    pruning = None if pruning is None else dict(asdict(pruning),
                                                keep_tokens=list(pruning.keep_tokens))
    for k in ("inputs", "output", "overwrite", "reshuffle", "tokenizer"):
        s.pop(k)
    for k in ("no_below", "no_above", "keep_n", "keep_tokens"):
        s.pop(k)
    s["vocabulary_source"] = vocab_source
    s["pruning"] = pruning
    s["_input_summary"] = input_summary(inputs, opts.inputs)
    s["_inputs"] = ([{"path": p, "format": f} for p, f in inputs]
                    if len(inputs) <= MAX_LISTED_INPUTS else None)
    return s


def input_summary(inputs: Sequence[Tuple[str, str]], patterns: Sequence[str]) -> dict:
    """What the inputs were, in constant size: the number of files, the patterns given, the
    files per format, and the sha256 of the sorted newline-joined listing ``path\tformat``
    (the manifest lists every file only up to MAX_LISTED_INPUTS of them)."""
    h = hashlib.sha256()
    formats = collections.Counter()
    for p, f in sorted(inputs):
        h.update(("%s\t%s\n" % (p, f)).encode("utf-8"))
        formats[f] += 1
    return {"count": len(inputs), "patterns": list(patterns), "formats": dict(formats),
            "listing_sha256": h.hexdigest(), "listed": len(inputs) <= MAX_LISTED_INPUTS}


def _prepare_output(opts: VectorizeOptions) -> None:
    """The output rules (:mod:`lda_core.storage.output_paths`): never an input (nor the fixed
    vocabulary), never another kind of output; ``--overwrite`` removes only what the old
    manifest lists; the directory is then marked as this dataset's."""
    output_paths.prepare_output(opts.output, "dataset", "ldabeam vectorize",
                                inputs=list(opts.inputs) + [opts.vocab],
                                overwrite=opts.overwrite)


def resolve_inputs(opts: VectorizeOptions) -> List[Tuple[str, str]]:
    """Expand the input globs; fail at once (InputError / ValueError naming it) on an unusable
    input or an unsupported mix."""
    if opts.format not in input_files.FORMATS:
        raise UsageError("unsupported --format %r (expected one of %s)"
                         % (opts.format, ", ".join(input_files.FORMATS)))
    bq = [i for i in opts.inputs if bigquery_source.is_bigquery(i)]
    if opts.query:
        bq.append(QUERY_INPUT)
    files = [i for i in opts.inputs if not bigquery_source.is_bigquery(i)]
    for spec in bq:
        if spec != QUERY_INPUT:
            bigquery_source.bigquery_table(spec)        # ValueError naming a malformed spec
    if bq:
        bigquery_source.require_bigquery()
    inputs = input_files.expand_inputs(files, opts.format, tuple(opts.exclude or ())) \
        if files else []
    inputs += [(spec, BIGQUERY_FORMAT) for spec in bq]
    if not inputs:
        raise InputError("the inputs %s match no file" % ", ".join(opts.inputs))
    for path, _ in inputs:
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:         # os.fsdecode kept undecodable bytes as surrogates
            raise InputError("input file name %s is not valid UTF-8 (document ids and the "
                             "manifest are UTF-8); rename the file, e.g. convmv -f latin1 -t "
                             "utf-8 --notest FILE" % path.encode("utf-8", "surrogateescape")
                             .decode("utf-8", "backslashreplace")) from None
    fmts = {f for _, f in inputs}
    if fmts & set(BOW_FORMATS):
        if len(inputs) != 1:
            raise UsageError("bag-of-words input (%s) must be a single corpus file, got %d "
                             "inputs: %s" % ("/".join(sorted(fmts)), len(inputs),
                                             ", ".join(p for p, _ in inputs)))
    if fmts & set(BOW_FORMATS) and BIGQUERY_FORMAT in fmts:
        raise UsageError("a bag-of-words corpus cannot be mixed with BigQuery input")
    for path, fmt in [i for i in inputs if i[1] != BIGQUERY_FORMAT][:PREFLIGHT_INPUTS]:
        preflight(path, fmt, opts.reader_options(), opts.vocab)
    return inputs


def preflight(path: str, fmt: str, reader_options: dict, vocab: Optional[str] = None) -> None:
    """Open ``path`` and read its first record so that a wholly unusable input (missing, not
    a dump, not an archive) fails before any pipeline work, with a message naming it."""
    if fmt in BOW_FORMATS:
        tokens = bow_sources.read_bow_vocab(path, fmt, vocab)
        gen = bow_sources.iter_bow_documents(path, fmt, len(tokens))
    elif fmt == "wiki":
        gen = wiki_source.iter_wiki_page_chunks(path)
    else:
        gen = text_sources.read_documents(path, fmt, **reader_options)
    try:
        next(gen, None)
    finally:
        gen.close()


def build_pipeline(p: beam.Pipeline, opts: VectorizeOptions, inputs: List[Tuple[str, str]]):
    """Add the whole vectorize job to ``p``; returns the manifest PCollection."""
    output = opts.output
    fmt0 = inputs[0][1]
    is_bow = fmt0 in BOW_FORMATS
    stats_parts = []
    dead_parts = []

    if is_bow:
        path, fmt = inputs[0]
        tokens = bow_sources.read_bow_vocab(path, fmt, opts.vocab)
        settings = opts.prune_settings() if opts.pruning_requested() else None
        res = (p | "Inputs" >> beam.Create([(0, path, fmt)])
               | "ReadBow" >> beam.ParDo(ReadBowFn(len(tokens)))
               .with_outputs(STATS, DEAD, VOCAB_STATS, main="rows"))
        stats_parts.append(res[STATS])
        dead_parts.append(res[DEAD])
        vocab_record = (res[VOCAB_STATS] | "GatherBowStats" >> beam.combiners.ToList()
                        | "BowVocab" >> beam.Map(bow_vocab_record, tokens, settings))
        remapped = res.rows | "Remap" >> beam.ParDo(RemapBowFn(), AsSingleton(vocab_record)) \
            .with_outputs(STATS, main="rows")
        rows = remapped.rows
        stats_parts.append(remapped[STATS])
        vocab_source = "bag-of-words vocabulary" + (" (pruned)" if settings else "")
        pruning = settings
        record = {"tokens_from": TOKENS_FROM_BOW}
    else:
        cfg = tokenizer_with_phrases(opts, inputs)
        record = tokenizer_record(cfg, recorded_tokenizer(opts)[1] if opts.tokenizer_from
                                  else opts.stopwords)
        min_tokens = {i: opts.min_tokens_for(f) for i, (_, f) in enumerate(inputs)}
        items, dead, st = read_text_items(p, opts, inputs)
        stats_parts.extend(st)
        dead_parts.extend(dead)
        docs, vstats, dead, st = items | "Tokenize" >> TokenizeDocuments(
            cfg, min_tokens, fixed_vocab=opts.vocab,
            paths={i: path for i, (path, _) in enumerate(inputs)})
        stats_parts.append(st)
        dead_parts.append(dead)
        if opts.vocab:
            fixed = Vocabulary.read(opts.vocab)
            vocab_record = p | "FixedVocab" >> beam.Create(
                [{"tokens": fixed.tokens, "df": fixed.df.tolist(), "cf": fixed.cf.tolist(),
                  "num_docs": None}])
            rows = docs
            vocab_source = "fixed: %s" % opts.vocab
            pruning = None
        else:
            num_docs = st | "VocabDocs" >> beam.FlatMap(_vocab_documents)
            vocab_record = vstats | "Vocabulary" >> BuildVocabulary(num_docs,
                                                                     opts.prune_settings())
            rows, st2 = docs | "Apply" >> ApplyVocabulary(vocab_record)
            stats_parts.append(st2)
            vocab_source = "built"
            pruning = opts.prune_settings()

    vocab_info = vocab_record | "WriteVocab" >> beam.Map(write_vocabulary, output)
    vhash = vocab_info | "Hash" >> beam.Map(lambda v: v["hash"])
    shards = rows | "Shards" >> WriteShards(output, vhash, opts.holdout_fraction, opts.seed,
                                            opts.num_shards, opts.heldout_shards)
    dead_info = (tuple(dead_parts) | "AllDead" >> beam.Flatten()
                 | "DeadLetters" >> WriteDeadLetters(output))
    stats = (tuple(stats_parts) | "AllStats" >> beam.Flatten()
             | "SumStats" >> beam.CombinePerKey(sum))
    settings = _settings_dict(opts, inputs, vocab_source, pruning)
    settings.update(record)
    return (p | "Start" >> beam.Impulse()
            | "Manifest" >> beam.Map(finish_manifest, AsDict(stats), AsList(shards),
                                     AsSingleton(vocab_info), AsSingleton(dead_info),
                                     settings, output))


def _vocab_documents(kv):
    """The per-bundle counts of documents in the vocabulary statistics."""
    if kv[0] == "vocab_documents":
        yield kv[1]


def spreads_work(options) -> bool:
    """False for the DirectRunner in this process with one worker (the default local run):
    there is no other worker to spread inputs and documents to, so the two reshuffles would
    only pass every document's text through the runner's grouping. The output is the same
    either way."""
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
    runner = options.view_as(StandardOptions).runner
    direct = options.view_as(DirectOptions)
    return not (str(runner) in ("DirectRunner", "direct", "FnApiRunner")
                and direct.direct_running_mode == "in_memory"
                and (direct.direct_num_workers or 1) <= 1)


def read_text_items(p: beam.Pipeline, opts: VectorizeOptions, inputs: List[Tuple[str, str]]):
    """The work items of text inputs -- files through :class:`ReadWorkItems`, BigQuery tables
    and queries through Beam's BigQuery source -- as ``(items, [dead letters], [stats])``."""
    files = [(i, path, f) for i, (path, f) in enumerate(inputs) if f != BIGQUERY_FORMAT]
    items, dead, stats = [], [], []
    if files:
        groups = group_inputs(files)
        it, dl, st = (p | "Inputs" >> beam.Create(groups)
                      | "Read" >> ReadWorkItems(opts.reader_options(),
                                                opts.reshuffle and spreads_work(p.options),
                                                spread_inputs=len(groups) > 1))
        items.append(it)
        dead.append(dl)
        stats.append(st)
    for i, (path, f) in enumerate(inputs):
        if f != BIGQUERY_FORMAT:
            continue
        src = bigquery_source.ReadBigQueryDocuments(
            i, table=None if path == QUERY_INPUT else path,
            query=opts.query if path == QUERY_INPUT else None, id_field=opts.id_field,
            text_field=opts.text_field, title_field=opts.title_field,
            label_field=opts.label_field)
        res = p | ("BigQuery%d" % i) >> src.transform()
        items.append(res.items)
        dead.append(res.dead)
    if len(items) == 1:
        return items[0], dead, stats
    return tuple(items) | "AllItems" >> beam.Flatten(), dead, stats


def recorded_tokenizer(opts: VectorizeOptions):
    """``(TokenizerConfig, stop-word spec)`` of ``--tokenizer-from`` (a model or a dataset):
    its recorded preprocessing, phrases included; UsageError when it records none or names a
    custom tokenizer not given, or when tokenizer options are given beside it."""
    d = VectorizeOptions(inputs=[], output="")
    clash = [name for name, flag in (
        ("--phrases", opts.learn_phrases), ("--stopwords", opts.stopwords is not None),
        ("--token-pattern", opts.token_pattern is not None),
        ("--segmenter", opts.segmenter != d.segmenter),
        ("--no-lowercase", opts.lowercase != d.lowercase),
        ("--no-deaccent", opts.deaccent != d.deaccent),
        ("--min-token-len", opts.min_token_len != d.min_token_len),
        ("--max-token-len", opts.max_token_len != d.max_token_len)) if flag]
    if clash:
        raise UsageError("--tokenizer-from %s takes the preprocessing recorded there; leave "
                         "out %s" % (opts.tokenizer_from, ", ".join(clash)))
    pre = Preprocessor.from_path(opts.tokenizer_from, tokenizer=opts.tokenizer)
    if not pre.known:
        raise UsageError("--tokenizer-from %s: %s, so there is nothing to reuse; give the "
                         "tokenizer options instead" % (opts.tokenizer_from, pre.note))
    return pre.config, pre.record().get("stopwords")


def training_token_lists(inputs: Sequence[Tuple[str, str]], reader_options: dict, cfg,
                         min_tokens: Sequence[int], holdout_fraction: float, seed: int,
                         sample: float = 1.0, counts: Optional[dict] = None):
    """Token lists (stop words kept, no phrases) of the documents vectorize will put in the
    train split, read again on the driver: every one, or with ``sample`` < 1 a seeded share
    of them (a hash of ``"phrases:<seed>:<doc_id>"``). Documents with fewer tokens than
    ``min_tokens[input]`` (after the stop words) are skipped as vectorize skips them.
    ``counts`` (a dict) receives ``documents`` and ``tokens``."""
    base = replace(cfg, phrases=None)
    stop = cfg.stopwords
    counts = {} if counts is None else counts
    counts.update(documents=0, tokens=0)
    for i, (path, fmt) in enumerate(inputs):
        if fmt == "bigquery":
            raise UsageError("--phrases learns on the driver, which cannot read BigQuery input "
                             "%s; export the table to files (JSON Lines, Parquet) first" % path)
        docs = _wiki_documents(path) if fmt == "wiki" else \
            text_sources.read_documents(path, fmt, **reader_options)
        for doc in docs:
            if doc is None or isinstance(doc, input_files.DeadLetter):
                continue
            if holdout_fraction and splits.split_of(doc.doc_id, holdout_fraction, seed) != "train":
                continue
            if sample < 1.0:
                h = hashlib.blake2b(("phrases:%d:%s" % (seed, doc.doc_id)).encode("utf-8"),
                                    digest_size=8).digest()
                if int.from_bytes(h, "big") / 2.0 ** 64 >= sample:
                    continue
            tokens = doc_tokens(doc.text, base)
            kept = sum(1 for t in tokens if t not in stop) if stop else len(tokens)
            if kept == 0 or kept < min_tokens[i]:
                continue
            counts["documents"] += 1
            counts["tokens"] += len(tokens)
            yield tokens


def _wiki_documents(path: str):
    """The articles of a dump as vectorize parses them (skipped pages give None)."""
    for item in wiki_source.iter_wiki_page_chunks(path):
        if not isinstance(item, input_files.DeadLetter):
            position, xml = item
            yield wiki_source.parse_wiki_page(xml, path, position)


def tokenizer_with_phrases(opts: VectorizeOptions, inputs: List[Tuple[str, str]]):
    """The TokenizerConfig of ``opts``; with ``learn_phrases`` the phrases are learned first,
    on the driver, from the documents that go to the train split (all of them, or the seeded
    ``phrases_sample`` share: :func:`training_token_lists`)."""
    if opts.tokenizer_from:
        return recorded_tokenizer(opts)[0]
    cfg = opts.tokenizer_config(load_stopwords(opts.stopwords))
    if not opts.learn_phrases:
        return cfg
    counts = {}
    token_lists = training_token_lists(
        inputs, opts.reader_options(), cfg, [opts.min_tokens_for(f) for _, f in inputs],
        opts.holdout_fraction, opts.seed, opts.phrases_sample, counts)
    learned_on = ("train documents" if opts.phrases_sample >= 1.0 else
                  "a seeded %.3g share of the train documents" % opts.phrases_sample)
    table = learn_phrases(token_lists, opts.phrases_min_count, opts.phrases_threshold,
                          opts.phrases_scoring, stopwords=cfg.stopwords, learned_on=learned_on)
    logger.info("phrases: %d learned from %d %s (%d tokens)", len(table),
                counts.get("documents", 0), learned_on, counts.get("tokens", 0))
    return replace(cfg, phrases=table)


def _checked_inputs(opts: VectorizeOptions) -> List[Tuple[str, str]]:
    """Every check that can fail before Beam (options, inputs, fixed vocabulary, output);
    prepares the output directory. Returns the resolved inputs."""
    opts.validate()
    inputs = resolve_inputs(opts)
    if opts.vocab and inputs[0][1] not in BOW_FORMATS:
        Vocabulary.read(opts.vocab)  # fail now if missing / malformed
    _prepare_output(opts)
    logger.info("vectorize: %d input(s) (%s) -> %s", len(inputs),
                ", ".join(sorted({f for _, f in inputs})), opts.output)
    return inputs


def vectorize(opts: VectorizeOptions, beam_argv: Sequence[str] = ()) -> dict:
    """Run the pipeline to completion; returns the manifest."""
    inputs = _checked_inputs(opts)
    with beam.Pipeline(options=pipeline_options(beam_argv)) as p:
        build_pipeline(p, opts, inputs)
    return dataset_manifest.read_manifest(opts.output)


def submit(opts: VectorizeOptions, beam_argv: Sequence[str] = ()):
    """``--detach``: the same checks and pipeline as :func:`vectorize`, submitted without
    waiting; returns the ``PipelineResult``. The pipeline writes OUTPUT/manifest.json in its
    last step, so the manifest appearing means the job has finished. (Runners that run the
    job in this process -- the DirectRunner -- return from ``run()`` only when it is done:
    :mod:`pipelines.training.detached`.)"""
    inputs = _checked_inputs(opts)
    p = beam.Pipeline(options=pipeline_options(beam_argv))
    build_pipeline(p, opts, inputs)
    return p.run()


def summary(manifest: dict, output: str) -> str:
    c = manifest["counts"]
    v = manifest["vocabulary"]
    s = manifest["splits"]
    lines = [
        "documents: %d read, %d kept (train %d, heldout %d), %d empty, %d too short, "
        "%d empty after pruning, %d skipped pages, %d dead-lettered"
        % (c["documents_read"], c["documents_kept"], c["train_documents"],
           c["heldout_documents"], c["empty_documents"], c["too_short"],
           c["empty_after_pruning"], c["skipped_pages"], c["dead_letters"]),
        "tokens: %d (train %d, heldout %d); out-of-vocabulary dropped: %d; undecodable "
        "characters replaced or dropped: %d"
        % (manifest["tokens"]["total"], manifest["tokens"]["train"],
           manifest["tokens"]["heldout"], c["oov_tokens_dropped"],
           c.get("replaced_characters", 0)),
        "vocabulary: V = %d, hash %s" % (v["size"], v["hash"]),
        "output: %s (%d train shard(s), %d heldout shard(s)%s)"
        % (output, len(s["train"]["shards"]), len(s["heldout"]["shards"]),
           ", dead letters in %s" % ", ".join(manifest["deadletter"]["files"])
           if manifest["deadletter"]["files"] else ""),
    ]
    if c.get("empty_cjk_documents"):
        lines.append("warning: %d documents with Chinese, Japanese or Korean text gave no token "
                     "(unsegmented runs are longer than --max-token-len): pass --segmenter "
                     "jieba (Chinese) or janome (Japanese) and --min-token-len 1"
                     % c["empty_cjk_documents"])
    return "\n".join(lines)
