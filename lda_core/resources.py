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
from typing import Optional

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
                        overhead: int = RUN_OVERHEAD_BYTES) -> int:
    """Bytes a training run of K x V holds at its peak beyond what the process already holds:
    ``bytes_per_cell`` (every copy of the state, summed) per topic-word cell plus
    ``overhead``."""
    return int(int(n_topics) * int(n_words) * float(bytes_per_cell)) + int(overhead)


def largest_topics_that_fit(n_words: int, bytes_per_cell: float, available: int,
                            overhead: int = RUN_OVERHEAD_BYTES) -> int:
    """The largest K whose :func:`run_memory_estimate` is at most ``available`` (0 when even
    one topic does not fit)."""
    room = int(available) - int(overhead)
    if room <= 0:
        return 0
    k = int(room // (int(n_words) * float(bytes_per_cell)))
    while k > 0 and run_memory_estimate(k, n_words, bytes_per_cell, overhead) > available:
        k -= 1
    return k


def check_run_memory(n_topics: int, n_words: int, bytes_per_cell: float, what: str,
                     available: Optional[int] = None,
                     overhead: int = RUN_OVERHEAD_BYTES, option: str = "--topics ") -> int:
    """The estimated peak bytes of a training run (:func:`run_memory_estimate`);
    ResourceError naming the estimate, how it is counted, the memory available and the
    largest K that fits when it exceeds what is available. ``what``: the run (e.g.
    "training scvb0"); ``option``: what sets K, written before its value (``"--topics "``,
    ``"n_components="``). ``available`` (bytes) overrides :func:`available_memory`."""
    need = run_memory_estimate(n_topics, n_words, bytes_per_cell, overhead)
    avail = available_memory() if available is None else int(available)
    if avail is not None and need > avail:
        fit = largest_topics_that_fit(n_words, bytes_per_cell, avail, overhead)
        raise ResourceError(
            "%s with K = %d topics x V = %d words needs about %s at its peak (every copy of "
            "the state it holds: %.0f bytes per topic-word cell, about %.1f float64 copies of "
            "K x V, plus %s) but %s of memory is available; %s, or use a smaller vocabulary "
            "(vectorize --keep-n / --no-below)"
            % (what, n_topics, n_words, _human(need), bytes_per_cell, bytes_per_cell / 8.0,
               _human(overhead), _human(avail),
               "the largest K that fits is %d (%s%d)" % (fit, option, fit) if fit
               else "not even one topic fits"))
    return need
