"""Worker-process memory: the allocator settings a worker runs with, the release of freed
memory after a bundle, and an opt-in probe.

The SDK worker runs bundles on several threads; with glibc each thread gets its own malloc
arena, and glibc's *dynamic* mmap threshold rises to the size of the largest mmapped block
freed (up to 32 MB), after which arrays up to that size come from the arenas, whose freed
memory stays in the process. A worker that handles a piece's statistics (tens of MB) per
step then keeps the high-water mark of every thread's arena. :func:`tune_allocator`
(called from the DoFns' ``setup``, once per process) fixes the mmap threshold, so every
array of 128 kB or more gets its own mapping and is returned to the system when freed, and
bounds the number of arenas. What still lands in the arenas -- the data plane's receive
buffers arrive as many small blocks -- is freed but kept; :func:`release` (after every
bundle) hands the free pages back when there are many. Remote runners start their worker
processes themselves, so this uses ``mallopt`` / ``malloc_trim`` through ctypes (not the
``MALLOC_*`` environment variables); on a C library other than glibc it does nothing.

:func:`probe` (opt-in: ``LDABEAM_MEMORY_PROBE`` names a file) appends one JSON line per call
-- process id, phase, ``VmRSS`` and ``VmHWM``, glibc's mapped and free-in-arena bytes and,
when ``tracemalloc`` is tracing, Python's current and peak allocations -- to attribute a
worker's peak to the phases of a step (docs/beam-training.md "Worker memory").
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
import threading
import time
from typing import Optional

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

# blocks of at least this many bytes get their own mapping (returned to the system when
# freed); a fixed value also turns glibc's dynamic threshold off
MMAP_THRESHOLD = 128 << 10
# free memory at the top of an arena past this is returned to the system
TRIM_THRESHOLD = 4 << 20
ARENA_MAX = 2
# release() trims when this much is free inside the arenas
RELEASE_FREE_BYTES = 16 << 20

_LOCK = threading.Lock()
_LIBC: list = []
_TUNED: list = []


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]


def _glibc():
    """glibc through ctypes, or None (another C library, or no shared libc)."""
    with _LOCK:
        if not _LIBC:
            lib = None
            try:
                name = ctypes.util.find_library("c")
                lib = ctypes.CDLL(name) if name else None
                if lib is not None and not (hasattr(lib, "gnu_get_libc_version")
                                            and hasattr(lib, "mallopt")):
                    lib = None
            except (OSError, AttributeError):
                lib = None
            if lib is not None:
                lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                lib.mallopt.restype = ctypes.c_int
                lib.malloc_trim.argtypes = [ctypes.c_size_t]
                lib.malloc_trim.restype = ctypes.c_int
                if hasattr(lib, "mallinfo2"):       # glibc >= 2.33
                    lib.mallinfo2.restype = _MallInfo2
            _LIBC.append(lib)
        return _LIBC[0]


def worker_process() -> bool:
    """Whether this process is a Beam SDK worker (``python -m
    apache_beam.runners.worker.sdk_worker_main``: the local runner's worker processes and a
    remote runner's), not a driver that runs bundles in-process: only a worker's allocator is
    tuned, so a driver's (and the in-process trainer's) speed is left as it was."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "apache_beam.runners.worker.sdk_worker_main"


def tune_allocator() -> bool:
    """A fixed mmap threshold (:data:`MMAP_THRESHOLD`), a trim threshold and at most
    :data:`ARENA_MAX` malloc arenas for this process (glibc; applied once per process).
    Whether the settings are in force."""
    lib = _glibc()
    with _LOCK:
        if not _TUNED:
            ok = lib is not None and all(
                lib.mallopt(param, value) == 1 for param, value in
                ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                 (M_ARENA_MAX, ARENA_MAX)))
            _TUNED.append(ok)
        return _TUNED[0]


def malloc_stats() -> dict:
    """glibc's bytes in separate mappings (``mapped``) and free inside the arenas
    (``arena_free``); empty without glibc >= 2.33."""
    lib = _glibc()
    if lib is None or not hasattr(lib, "mallinfo2"):
        return {}
    mi = lib.mallinfo2()
    return {"mapped": int(mi.hblkhd), "arena": int(mi.arena), "arena_free": int(mi.fordblks)}


def release(min_free: Optional[int] = None) -> bool:
    """Return the arenas' free pages to the system (``malloc_trim``) when at least
    ``min_free`` bytes (default :data:`RELEASE_FREE_BYTES`) are free in them; whether it
    trimmed. A no-op without glibc."""
    lib = _glibc()
    if lib is None:
        return False
    limit = RELEASE_FREE_BYTES if min_free is None else int(min_free)
    free = malloc_stats().get("arena_free")
    if free is not None and free < limit:
        return False
    lib.malloc_trim(0)
    return True


def process_memory() -> dict:
    """``VmRSS`` and ``VmHWM`` of this process in bytes (empty where /proc is absent)."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def probe(phase: str, **extra) -> None:
    """One JSON line for ``phase`` in the file ``LDABEAM_MEMORY_PROBE`` names (nothing when
    unset): the process's memory, glibc's, and, when tracing, Python's current and peak
    allocations (the peak is then reset: each line's peak is that of the phase it closes)."""
    path = os.environ.get("LDABEAM_MEMORY_PROBE")
    if not path:
        return
    import tracemalloc
    rec = dict(process_memory(), pid=os.getpid(), thread=threading.get_ident(), phase=phase,
               t=time.time(), malloc=malloc_stats(), **extra)
    if tracemalloc.is_tracing():
        rec["py_current"], rec["py_peak"] = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
    line = json.dumps(rec, sort_keys=True) + "\n"
    with _LOCK:
        with open(path, "a") as f:
            f.write(line)
