"""The trainers driven directly (no command line): an algorithm built on a dataset folder,
trained in-process or on a Beam runner, and the Beam options of the multi-process runner."""
import weakref

from helpers.uci import kos_train_dataset

# the minibatch size S each algorithm :func:`new_vb` / :func:`new_scvb0` built is to be trained
# with (S belongs to the run's schedule, not to the algorithm)
_MINIBATCH = weakref.WeakKeyDictionary()


def with_minibatch(algo, S: int):
    """``algo``, to be trained by these helpers in minibatches of ``S`` documents."""
    _MINIBATCH[algo] = int(S)
    return algo


def minibatch_of(algo) -> int:
    """The minibatch size S ``algo`` was built for (:func:`with_minibatch`)."""
    return _MINIBATCH[algo]


def mp_argv(workers):
    """Beam options of the multi-process DirectRunner with ``workers`` worker processes."""
    return ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
            "--direct_num_workers=%d" % workers]


def _dataset(dataset_dir):
    from lda_core.storage.vocab_file import Vocabulary
    from pipelines.ingest import dataset
    files = dataset.resolve_shards(dataset_dir)
    vh = dataset.check_vocab_hash(files, None)
    V = len(Vocabulary.read(dataset_dir))
    return files, vh, V


def new_vb(dataset_dir, *, K=8, S=50, seed=1, dtype="float64"):
    """(online VB for the dataset in ``dataset_dir``, its shard files)."""
    from lda_core.algorithms.online_vb import OnlineVB
    from pipelines.ingest import dataset
    files, vh, V = _dataset(dataset_dir)
    D = dataset.count_documents(files)
    algo = OnlineVB(K, V, corpus_size=D, seed=seed, dtype=dtype, vocab_hash=vh,
                    tau0=16.0)
    return with_minibatch(algo, S), files


def new_scvb0(dataset_dir, *, K=6, S=40, seed=3, n_threads=None):
    """(SCVB0 for the dataset in ``dataset_dir``, its shard files)."""
    from lda_core.algorithms.scvb0 import SCVB0
    files, vh, V = _dataset(dataset_dir)
    algo = SCVB0(K, V, seed=seed, vocab_hash=vh, n_threads=n_threads, corpus_tokens=None)
    return with_minibatch(algo, S), files


def train_inprocess(algo, files, passes=1, **kw):
    """``algo`` trained in this process on the seeded order of ``files``; returns it."""
    from lda_core.training.trainer import train
    from pipelines.training.shard_stream import ShardStream
    stream = ShardStream(files, minibatch=minibatch_of(algo), seed=algo.seed, passes=passes)
    train(algo, stream, progress=False, **kw)
    return algo


def train_beam(algo, files, md, argv, **kw):
    """``algo`` trained by the Beam driver with Beam options ``argv`` into model folder
    ``md``; the driver's result."""
    from pipelines.training import beam_train
    return beam_train.train(algo, files, md, seed=algo.seed, minibatch=minibatch_of(algo),
                            beam_argv=argv, progress=False, **kw)


def inprocess_reference(dataset_dir, *, passes=1, **kw):
    """Online VB (:func:`new_vb` settings ``kw``) trained in-process on the dataset."""
    algo, files = new_vb(dataset_dir, **kw)
    return train_inprocess(algo, files, passes=passes)


def beam_run(dataset_dir, model_dir, *, passes=1, beam_argv=("--runner=DirectRunner",), **kw):
    """Online VB (:func:`new_vb` settings among ``kw``) trained by the Beam driver; the other
    ``kw`` go to the driver."""
    from pipelines.training import beam_train
    algo, files = new_vb(dataset_dir, **{k: kw.pop(k) for k in ("K", "S", "seed", "dtype")
                                          if k in kw})
    return beam_train.train(algo, files, model_dir, passes=passes, seed=algo.seed,
                            minibatch=minibatch_of(algo), beam_argv=list(beam_argv),
                            progress=False, **kw)


def run_both_trainers(name, kos_paths, tmp_path, **kw):
    """The in-process trainer and the Beam trainer (DirectRunner, windows of 4 minibatches)
    of algorithm ``name`` on 400 KOS documents in 3 shards, from the same initial state and
    order: (the in-process state's arrays, the Beam run's)."""
    from lda_core.algorithms.algorithm import algorithm_class
    from lda_core.training.trainer import train
    from pipelines.training import beam_train
    from pipelines.training.shard_stream import ShardStream
    ds = kos_train_dataset(kos_paths, str(tmp_path / "ds"), 400)
    files, vh, V = _dataset(ds)

    def make():
        return algorithm_class(name)(8, V, seed=1, vocab_hash=vh, **kw)

    ref = make()
    train(ref, ShardStream(files, minibatch=50, seed=1, passes=1), progress=False)
    res = beam_train.train(make(), files, str(tmp_path / "m"), passes=1, seed=1, minibatch=50,
                           beam_argv=["--runner=DirectRunner"], progress=False,
                           minibatches_per_window=4)
    assert ref.step == res.algorithm.step == 8
    return ref.to_state().arrays, res.algorithm.to_state().arrays
