"""What the machine provides, checked before a large allocation: a K x V topic state that
cannot fit is a :class:`lda_core.errors.ResourceError` naming the estimate and the memory
available, instead of a ``MemoryError`` (or the kernel's OOM killer) halfway through numpy."""
from __future__ import annotations

import os
from typing import Optional

from lda_core.errors import ResourceError

# bytes per topic-word cell of the smallest dense topic state any algorithm keeps (one float64
# K x V matrix); the real footprint is a small multiple of it, so the check refuses only a
# state that cannot fit at all, and a merely tight one is left to run
STATE_BYTES_PER_CELL = 8


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
