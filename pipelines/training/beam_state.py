"""The frozen topic state inside Beam workers: small references in the graph, one copy per
process, loaded once per version.

The topic matrix never enters the pipeline graph (Beam pickles and compresses everything in
the graph: one run with a 20 MB matrix as a ``Create`` took 107 s here). The graph carries a
:class:`StateRef` instead -- a few dozen bytes naming a state *version* (``key``) and where to
find it (``path``: a directory written by :meth:`lda_core.storage.state.TopicState.save`, e.g. a
published checkpoint or a scratch state of the window). Workers resolve it with
:func:`acquire`:

1. the in-process table (:func:`put_local`): with the in-process DirectRunner the driver and
   the workers share one process, so the state of step t produced by the global-step DoFn is
   handed to the E-step of step t+1 as the very same object (no copy, no file);
2. otherwise the process cache (:mod:`pipelines.runtime.process_cache`, Beam's ``Shared``),
   keyed by the version: the first DoFn of a process that needs version ``key`` loads the
   directory once; every thread and every later
   bundle of that process reuses it until a newer version is asked for (then the old one is
   released: one state per process, bounded memory).

States, scratch files and JSON hand-overs may live on an object store (``gs://`` ...; the
Beam trainer's scratch folder is then ``MODEL_DIR/.beam-scratch``): the helpers below go
through the ``lda_core`` file layer of the path (:mod:`pipelines.runtime.object_store_files`), so a
worker reads what the driver wrote through Beam's ``FileSystems``. Every state and hand-over read
or written here is counted (and throttled when asked) by :mod:`lda_core.storage.traffic`: a
state as ``state``, a step's info as ``info``.

The E-step derives its inputs (exp(E[log β]) for the words of each piece) from that one copy;
nothing is recomputed per document. The state objects here are treated as read-only: the
global step works on a private copy (:func:`private_copy`).
"""
from __future__ import annotations

import copy
import json
import logging
import os
import threading
import time
from typing import Any, Dict, NamedTuple, Optional

import numpy as np

from lda_core.storage import traffic
from lda_core.storage.blocks import algorithm_from_state
from lda_core.storage.files import files_for
from lda_core.storage.run_log import jsonable
from lda_core.storage.state import TopicState
from pipelines.runtime import process_cache, scratch
from pipelines.runtime.paths import write_atomic as write_bytes_atomic
from pipelines.training import beam_cost

logger = logging.getLogger(__name__)


class StateRef(NamedTuple):
    """A state version as it travels through the graph (side input of every E-step)."""
    key: str               # unique version id: "<run id>/<position>"
    path: Optional[str]    # TopicState directory, or None when it lives only in memory
    position: int          # minibatches of the seeded order consumed (global step index)


_LOCK = threading.Lock()
_LOCAL: Dict[str, Any] = {}        # key -> algorithm (in-process runner only)
_LOCAL_INFO: Dict[str, Any] = {}   # key -> global-step info / error (in-process runner only)


def put_local(key: str, algorithm) -> None:
    with _LOCK:
        _LOCAL[key] = algorithm


def get_local(key: str):
    with _LOCK:
        return _LOCAL.get(key)


def put_local_info(key: str, info: Dict[str, Any]) -> None:
    with _LOCK:
        _LOCAL_INFO[key] = info


def get_local_info(key: str) -> Optional[Dict[str, Any]]:
    with _LOCK:
        return _LOCAL_INFO.get(key)


def drop_local(prefix: str, keep: Optional[str] = None) -> None:
    """Forget the in-process states and infos of a run (all keys starting with ``prefix``)."""
    with _LOCK:
        for d in (_LOCAL, _LOCAL_INFO):
            for k in [k for k in d if k.startswith(prefix) and k != keep]:
                del d[k]


SCRATCH_SUFFIX = ".npz"
_META = "__ldabeam_state_meta__"


def load_algorithm(path: str):
    """A state -> the algorithm object it describes: a published checkpoint directory
    (``TopicState.load``: version, shapes and checksums verified) or a scratch file."""
    if path.endswith(SCRATCH_SUFFIX):
        state = load_scratch(path)
    else:
        # word blocks read in row order: the algorithm takes them as they are
        state = TopicState.load(path, row_order=True)
        traffic.record_in(state.nbytes(), traffic.STATE)
    # the arrays just read are this call's own: no second copy of λ (a worker's peak memory
    # while it loads a big model)
    return algorithm_from_state(state, take=True)


def save_scratch(algorithm, path: str) -> str:
    """The state of a step *inside* a window, for the other workers of the same run.

    One uncompressed ``.npz`` (arrays + the JSON fields as a byte array), published by an
    atomic rename but neither fsynced nor checksummed: it lives only while its window runs
    (never resumed from; a killed run's scratch is deleted unread). Measured at K=100,
    V=29,403 on this machine: ~0.9 s for ``TopicState.save`` (sha256 + fsync of 24 MB) vs a
    few tens of ms here. Data only: read back with ``allow_pickle=False``."""
    # written out at once: the algorithm's own arrays where it can hand them over uncopied
    state = algorithm.to_state(copy=False)
    meta = dict(algorithm=state.algorithm, n_topics=state.n_topics, n_words=state.n_words,
                vocab_hash=state.vocab_hash, params=state.params, step=state.step,
                docs_seen=state.docs_seen, rng=state.rng, info=state.info)
    arrays = dict(state.arrays)
    if _META in arrays:
        raise ValueError("array name %r is reserved" % _META)
    arrays[_META] = np.frombuffer(json.dumps(jsonable(meta)).encode("utf-8"), np.uint8)
    scratch.write_npz_atomic(path, arrays)
    traffic.record_out(_npz_bytes(arrays), traffic.STATE)
    return path


def _npz_bytes(arrays) -> int:
    """The bytes of an uncompressed ``.npz`` of ``arrays``, less its small per-array headers."""
    return int(sum(np.asarray(a).nbytes for a in arrays.values()))


def load_scratch(path: str):
    with np.load(scratch.npz_source(path), allow_pickle=False) as z:
        raw = z[_META]
        meta = json.loads(bytes(raw).decode("utf-8"))
        arrays = {k: z[k] for k in z.files if k != _META}
    traffic.record_in(_npz_bytes(arrays) + raw.nbytes, traffic.STATE)
    return TopicState(arrays=arrays, **meta)


def set_threads(algorithm, n_threads: Optional[int]) -> None:
    if n_threads is not None and hasattr(algorithm, "n_threads"):
        algorithm.n_threads = int(n_threads)


def acquire(ref: StateRef, n_threads: Optional[int] = None):
    """The (read-only) algorithm of version ``ref`` in this process (see module docstring)."""
    algo = get_local(ref.key)
    if algo is None:
        if ref.path is None:
            raise RuntimeError("state %s lives in the driver's memory but this worker runs in "
                               "another process; use a file state transport for this runner"
                               % ref.key)

        def load():
            logger.info("loading state %s from %s (pid %d)", ref.key, ref.path, os.getpid())
            t0 = time.perf_counter()
            held = process_cache.Held(load_algorithm(ref.path))
            beam_cost.report("state_delivery", time.perf_counter() - t0, state_file_size(ref.path))
            return held

        algo = process_cache.acquire(ref.key, load).algorithm
    set_threads(algo, n_threads)
    return algo


def state_file_size(path: str) -> Optional[int]:
    """Bytes of a state file (None for a directory or an object)."""
    try:
        return os.path.getsize(path) if os.path.isfile(path) else None
    except OSError:
        return None


def offer(ref: StateRef, algorithm) -> None:
    """Make ``algorithm`` the cached copy of version ``ref`` in this process (the worker that
    ran the global step does not read back the file it just wrote)."""
    process_cache.acquire(ref.key, lambda: process_cache.Held(algorithm))


def private_copy(algorithm):
    """A copy the global step may modify (the cached one stays frozen for other readers)."""
    return copy.deepcopy(algorithm)


def write_json_atomic(path: str, obj: Dict[str, Any]) -> None:
    data = json.dumps(jsonable(obj), sort_keys=True).encode("utf-8")
    write_bytes_atomic(path, data)
    traffic.record_out(len(data), traffic.INFO)


def read_json(path: str) -> Optional[Dict[str, Any]]:
    """The JSON object at ``path`` (local or an object store), or None when it does not exist."""
    fs = files_for(path)
    if not fs.exists(path):
        return None
    data = fs.read_bytes(path)
    traffic.record_in(len(data), traffic.INFO)
    return json.loads(data.decode("utf-8"))
