"""Thread count and compile cache of the numba kernels (``lda_core.algorithms.estep_vb`` and its helpers).

* Compile cache: every kernel is compiled with ``cache=True``, so a process pays the compile
  only the first time on a machine; later processes load the machine code from
  the cache. By default the cache lives in ``__pycache__`` beside the module; where that is
  read-only (site-packages in a container, Beam workers) set the environment variable
  ``NUMBA_CACHE_DIR`` to a writable folder *before* Python starts (numba reads it at import).
* Threads: the E-step runs ``prange`` over one chunk of documents per thread. The count
  defaults to numba's (``NUMBA_NUM_THREADS``, the number of cores); pass ``n_threads`` to
  ``OnlineVB``/``BatchVB`` or call :func:`set_threads`. On a Beam worker that already runs
  one SDK harness per core, use 1 thread. Results do not depend on the thread count or the
  chunking (bit for bit): the statistics are summed word by word in a fixed order.
* Idle threads: numba's default OpenMP layer (GNU libgomp) spin-waits between parallel
  regions, which costs process CPU time on a machine whose cores are busy with other work.
  The kernel modules call :func:`prefer_passive_wait` when they are imported: it sets
  ``OMP_WAIT_POLICY=PASSIVE`` unless the environment already sets it; it only takes effect if
  libgomp was not loaded before (set it in the environment to be sure, or use
  ``NUMBA_THREADING_LAYER=workqueue``).
"""
from __future__ import annotations

import os
from typing import Optional

from lda_core.errors import UsageError


def prefer_passive_wait() -> None:
    """Idle OpenMP threads sleep instead of spinning (module docstring), unless the
    environment says otherwise; called by the kernel modules before numba starts threads."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def max_threads() -> int:
    import numba
    return int(numba.config.NUMBA_NUM_THREADS)


def set_threads(n: Optional[int]) -> int:
    """Set the numba thread count for this thread of the process (None: leave as is); returns
    the count in effect. ValueError unless 1 <= n <= NUMBA_NUM_THREADS."""
    import numba
    if n is not None:
        top = max_threads()
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= top:
            raise UsageError("n_threads=%r is outside the allowed range [1, %d]" % (n, top))
        numba.set_num_threads(n)
    return int(numba.get_num_threads())


def cache_dir() -> Optional[str]:
    """The folder numba caches compiled kernels in (None: ``__pycache__`` beside the modules)."""
    return os.environ.get("NUMBA_CACHE_DIR") or None
