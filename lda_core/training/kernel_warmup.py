"""The first run on a machine compiles the numba kernels (a long silent pause): say so, once.

Every kernel is compiled with ``cache=True`` (``lda_core.algorithms.numba_config``): a process
compiles it only when the compile cache holds no machine code for it yet, and otherwise loads
it. :func:`warm_kernels` runs the chosen algorithm and the evaluation on a tiny synthetic
corpus before training, listening to numba's compile events: on the first compile (a cache
miss) it logs one line, and after the tiny run how long the compiling took. With a warm cache
it logs nothing (the kernels are only loaded, as the run would load them anyway).

The library's entry points that run kernels in a user's process (the estimators' ``fit`` /
``partial_fit`` and the other callers of :func:`lda_core.training.in_memory.train_in_memory`,
``LdaModel.transform``) run inside :func:`compile_notice`: the same line when numba starts
compiling, and the seconds it took -- on stderr when the program has not configured logging
(a notebook), so that a first call is never silent for the tens of seconds it compiles.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Callable, Optional

import numpy as np
from numba.core import event as _event

from lda_core.docbatch import DocBatch
from lda_core.training.heldout import evaluate as run_evaluation, HeldOut

logger = logging.getLogger(__name__)

MESSAGE = "compiling the numba kernels once (cached for later runs)..."


def _say(message: str) -> None:
    """Log ``message`` at INFO when logging is configured, else write it to stderr."""
    if logger.hasHandlers():
        logger.info(message)
    else:
        print("ldabeam: " + message, file=sys.stderr, flush=True)


class _CompileWatch(_event.Listener):
    """A numba event listener: on the first real compile (numba fires ``numba:compile``
    only after a cache miss) it says :data:`MESSAGE` and starts the clock."""

    def __init__(self, say: Callable[[str], None] = logger.info):
        self.t0: Optional[float] = None
        self.say = say
        self.seconds = 0.0           # time spent in (outermost) compiles
        self._open = 0
        self._since = 0.0

    def on_start(self, event) -> None:
        if self.t0 is None:
            self.say(MESSAGE)
            self.t0 = time.perf_counter()
        if self._open == 0:
            self._since = time.perf_counter()
        self._open += 1

    def on_end(self, event) -> None:
        self._open = max(0, self._open - 1)
        if self._open == 0:
            self.seconds += time.perf_counter() - self._since


def tiny_corpus(n_docs: int = 200, n_words: int = 50, seed: int = 0):
    """A seeded random corpus of ``n_docs`` short documents over ``n_words`` words."""
    rng = np.random.RandomState(seed)
    rows = []
    for _ in range(n_docs):
        w = np.unique(rng.randint(0, n_words, 12)).astype(np.int32)
        rows.append((w, rng.randint(1, 4, len(w)).astype(np.int32)))
    indptr = np.zeros(n_docs + 1, np.int64)
    np.cumsum([len(w) for w, _ in rows], out=indptr[1:])
    return DocBatch(tuple("d%d" % i for i in range(n_docs)), indptr,
                    np.concatenate([w for w, _ in rows]), np.concatenate([c for _, c in rows]))


def warm_kernels(make_algorithm: Callable[[int, int], object], evaluate: bool = True
                 ) -> Optional[float]:
    """Run the kernels of the algorithm ``make_algorithm(n_words, corpus_size)`` builds (two
    steps on :func:`tiny_corpus`) and, with ``evaluate``, of the evaluation, so that they
    are compiled or loaded from the cache now. When one had to be compiled, :data:`MESSAGE`
    is logged before and the seconds it took after (returned); None when every kernel came
    from the cache. A failure of the tiny run is logged at DEBUG and left to the real run
    (which compiles as it goes)."""
    watch = _CompileWatch()
    _event.register("numba:compile", watch)
    try:
        docs = tiny_corpus()
        algo = make_algorithm(50, docs.n_docs)
        for lo in (0, 100):
            # two pieces a step, merged as workers merge them: plainly, then into a sum
            # reserved for both (the merge kernels of each form)
            first, second = (algo.local_step(docs.take(np.arange(lo + k, lo + k + 50)))
                             for k in (0, 50))
            if lo and second.row_ids() is not None:
                first.reserve_rows(second.row_ids())
            algo.global_step(first.merge(second))
        if evaluate:
            held = HeldOut.from_batch(docs.take(np.arange(100)))
            held.health = docs
            run_evaluation(algo, held)
    except Exception:  # noqa: BLE001 - the real run compiles what is left, and reports
        logger.debug("kernel warm-up failed; the run compiles as it goes", exc_info=True)
    finally:
        _event.unregister("numba:compile", watch)
    if watch.t0 is None:
        return None
    took = time.perf_counter() - watch.t0
    logger.info("numba kernels compiled in %.1f s", took)
    return took


@contextlib.contextmanager
def compile_notice():
    """Say :data:`MESSAGE` when a kernel run inside the block has to be compiled, and how
    long the compiling took when the block ends (module docstring); nothing with a warm
    cache. Nested blocks say it once."""
    if _NOTICE.depth:
        yield
        return
    watch = _CompileWatch(_say)
    _event.register("numba:compile", watch)
    _NOTICE.depth += 1
    try:
        yield
    finally:
        _NOTICE.depth -= 1
        _event.unregister("numba:compile", watch)
        if watch.t0 is not None:
            _say("numba kernels compiled in %.1f s" % watch.seconds)


class _Depth:
    depth = 0


_NOTICE = _Depth()
