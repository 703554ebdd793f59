"""What the machine provides, checked before a large allocation: a training run whose topic
state cannot fit is a :class:`lda_core.errors.ResourceError` naming the estimate, the memory
available and the largest number of topics that fits, instead of a ``MemoryError`` (or the
kernel's OOM killer) halfway through numpy.

The estimate counts every copy of the state a run holds at its peak, not one K x V matrix: the
algorithm's own arrays, the statistics of a step, the copy a checkpoint writes, the topic-word
matrix an evaluation builds. Each algorithm declares the bytes per topic-word cell it holds at
its peak (:attr:`lda_core.algorithms.algorithm.TopicModel.RUN_BYTES_PER_CELL`), measured on
runs of two sizes (tests/test_memory_estimate.py measures the peak again against it)."""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from lda_core.errors import ResourceError

# bytes per topic-word cell of one dense float64 K x V matrix, the smallest state any algorithm
# keeps (check_state_memory's default: a state that cannot fit at all)
STATE_BYTES_PER_CELL = 8
# what a training run holds beside its K x V copies and independent of K x V (a minibatch's
# documents and their K-sized rows, the kernels' thread buffers, the checkpoint writer's
# buffers), counted on top of the copies
RUN_OVERHEAD_BYTES = 64 << 20


def available_memory() -> Optional[int]:
    """Bytes this process could still allocate: ``MemAvailable`` plus free swap from
    ``/proc/meminfo`` (Linux), else the free physical pages; None when unknown."""
    try:
        with open("/proc/meminfo", "rb") as f:
            info = {}
            for line in f:
                key, _, rest = line.partition(b":")
                fields = rest.split()
                if fields and fields[0].isdigit():
                    info[key.decode("ascii", "replace")] = int(fields[0]) * 1024
        if "MemAvailable" in info:
            return info["MemAvailable"] + info.get("SwapFree", 0)
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return ("%d %s" % (n, unit)) if unit == "bytes" else ("%.1f %s" % (n, unit))
        n /= 1024.0
    return "%d bytes" % n    # pragma: no cover


def check_state_memory(n_topics: int, n_words: int,
                       bytes_per_cell: int = STATE_BYTES_PER_CELL,
                       available: Optional[int] = None) -> int:
    """The estimated bytes of a K x V topic state (``n_topics * n_words * bytes_per_cell``);
    ResourceError naming the estimate and the memory available when it exceeds it.
    ``available`` (bytes) overrides :func:`available_memory`."""
    need = int(n_topics) * int(n_words) * int(bytes_per_cell)
    avail = available_memory() if available is None else int(available)
    if avail is not None and need > avail:
        raise ResourceError(
            "a topic state of K = %d topics x V = %d words needs at least %s (%d bytes per "
            "cell) but %s of memory is available; use fewer --topics or a smaller vocabulary "
            "(vectorize --keep-n / --no-below)"
            % (n_topics, n_words, _human(need), bytes_per_cell, _human(avail)))
    return need


def run_memory_estimate(n_topics: int, n_words: int, bytes_per_cell: float,
                        overhead: int = RUN_OVERHEAD_BYTES, n_docs: int = 0,
                        bytes_per_doc_cell: float = 0.0) -> int:
    """Bytes a training run of K x V holds at its peak beyond what the process already holds:
    ``bytes_per_cell`` (every copy of the state, summed) per topic-word cell, plus
    ``bytes_per_doc_cell`` per document-topic cell of ``n_docs`` documents (the samplers'
    document-topic counts), plus ``overhead``."""
    return (int(int(n_topics) * int(n_words) * float(bytes_per_cell))
            + int(int(n_topics) * int(n_docs) * float(bytes_per_doc_cell)) + int(overhead))


def largest_topics_that_fit(n_words: int, bytes_per_cell: float, available: int,
                            overhead: int = RUN_OVERHEAD_BYTES, n_docs: int = 0,
                            bytes_per_doc_cell: float = 0.0) -> int:
    """The largest K whose :func:`run_memory_estimate` is at most ``available`` (0 when even
    one topic does not fit)."""
    room = int(available) - int(overhead)
    if room <= 0:
        return 0
    per_topic = int(n_words) * float(bytes_per_cell) + int(n_docs) * float(bytes_per_doc_cell)
    k = int(room // per_topic)
    while k > 0 and run_memory_estimate(k, n_words, bytes_per_cell, overhead, n_docs,
                                        bytes_per_doc_cell) > available:
        k -= 1
    return k


def check_run_memory(n_topics: int, n_words: int, bytes_per_cell: float, what: str,
                     available: Optional[int] = None,
                     overhead: int = RUN_OVERHEAD_BYTES, option: str = "--topics ",
                     n_docs: int = 0, bytes_per_doc_cell: float = 0.0) -> int:
    """The estimated peak bytes of a training run (:func:`run_memory_estimate`);
    ResourceError naming the estimate, how it is counted, the memory available and the
    largest K that fits when it exceeds what is available. ``what``: the run (e.g.
    "training scvb0"); ``option``: what sets K, written before its value (``"--topics "``,
    ``"n_components="``). ``available`` (bytes) overrides :func:`available_memory`."""
    need = run_memory_estimate(n_topics, n_words, bytes_per_cell, overhead, n_docs,
                               bytes_per_doc_cell)
    avail = available_memory() if available is None else int(available)
    if avail is not None and need > avail:
        fit = largest_topics_that_fit(n_words, bytes_per_cell, avail, overhead, n_docs,
                                      bytes_per_doc_cell)
        docs = (", %.0f bytes per document-topic cell over D = %d documents"
                % (bytes_per_doc_cell, n_docs) if n_docs and bytes_per_doc_cell else "")
        raise ResourceError(
            "%s with K = %d topics x V = %d words needs about %s at its peak (every copy of "
            "the state it holds: %.0f bytes per topic-word cell, about %.1f float64 copies of "
            "K x V%s, plus %s) but %s of memory is available; %s, or use a smaller vocabulary "
            "(vectorize --keep-n / --no-below)"
            % (what, n_topics, n_words, _human(need), bytes_per_cell, bytes_per_cell / 8.0,
               docs, _human(overhead), _human(avail),
               "the largest K that fits is %d (%s%d)" % (fit, option, fit) if fit
               else "not even one topic fits"))
    return need


def _setting(cls, settings: Optional[Dict[str, Any]], name: str) -> float:
    """Setting ``name`` of a run of algorithm class ``cls``: as given in ``settings`` (the
    constructor's keywords), else its declared default."""
    if settings and settings.get(name) is not None:
        return float(settings[name])
    p = cls.SPEC.get(name)
    if p is None or p.default is None:
        raise ValueError("%s declares memory per unit of %r, which is not one of its settings"
                         % (cls.__name__, name))
    return float(p.default)


def run_bytes_per_cell(cls, settings: Optional[Dict[str, Any]] = None) -> float:
    """Bytes per topic-word cell a run of algorithm class ``cls`` holds at its peak: its
    ``RUN_BYTES_PER_CELL`` plus, for each setting that multiplies a copy of the state
    (``RUN_BYTES_PER_CELL_EACH``: setting -> bytes a cell per unit, e.g. the particle filter's
    counts per particle), that many bytes times the setting's value."""
    return float(cls.RUN_BYTES_PER_CELL) + sum(
        float(b) * _setting(cls, settings, name)
        for name, b in getattr(cls, "RUN_BYTES_PER_CELL_EACH", {}).items())


def run_bytes_per_doc_cell(cls, settings: Optional[Dict[str, Any]] = None) -> float:
    """Bytes per document-topic cell a run of ``cls`` holds (the samplers' n_dk over every
    document seen): ``RUN_BYTES_PER_DOC_CELL`` plus its per-setting part
    (``RUN_BYTES_PER_DOC_CELL_EACH``), as :func:`run_bytes_per_cell`."""
    return float(getattr(cls, "RUN_BYTES_PER_DOC_CELL", 0.0)) + sum(
        float(b) * _setting(cls, settings, name)
        for name, b in getattr(cls, "RUN_BYTES_PER_DOC_CELL_EACH", {}).items())


def algorithm_run_estimate(cls, n_topics: int, n_words: int, n_docs: int = 0,
                           settings: Optional[Dict[str, Any]] = None) -> int:
    """:func:`run_memory_estimate` of a run of algorithm class ``cls`` with ``settings`` (its
    constructor's keywords; absent ones take their defaults) over ``n_docs`` documents."""
    return run_memory_estimate(n_topics, n_words, run_bytes_per_cell(cls, settings),
                               n_docs=n_docs,
                               bytes_per_doc_cell=run_bytes_per_doc_cell(cls, settings))


def check_algorithm_memory(cls, n_topics: int, n_words: int, what: str, n_docs: int = 0,
                           settings: Optional[Dict[str, Any]] = None,
                           available: Optional[int] = None, option: str = "--topics ") -> int:
    """:func:`check_run_memory` of a run of algorithm class ``cls`` (:func:`run_bytes_per_cell`
    and :func:`run_bytes_per_doc_cell` of its settings, over ``n_docs`` documents).

    It is checked where the run's state is built, the process that calls it: an in-process
    run, or a Beam run's driver, which builds the whole state too (a worker of the remote
    exchange holds its word blocks, which this does not estimate). The settings that multiply
    the state are named beside ``what``."""
    each = sorted(set(getattr(cls, "RUN_BYTES_PER_CELL_EACH", {}))
                  | set(getattr(cls, "RUN_BYTES_PER_DOC_CELL_EACH", {})))
    if each:
        what = "%s (%s)" % (what, ", ".join("%s = %g" % (name, _setting(cls, settings, name))
                                            for name in each))
    return check_run_memory(n_topics, n_words, run_bytes_per_cell(cls, settings), what,
                            available=available, option=option, n_docs=n_docs,
                            bytes_per_doc_cell=run_bytes_per_doc_cell(cls, settings))
