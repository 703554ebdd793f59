"""Worker-process memory (pipelines.runtime.memory, wired into LeanDoFn's setup and
finish_bundle): arrays a worker thread frees go back to the system instead of staying in
glibc's per-thread arenas. Each case runs in a fresh process (the allocator settings are
per process)."""
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and os.path.exists("/proc/self/status")
         and "glibc" in " ".join(os.confstr("CS_GNU_LIBC_VERSION").split()[:1])),
    reason="glibc's allocator on Linux only")

# A worker-like thread: a freed 30 MB array raises glibc's dynamic mmap threshold (what a
# piece's statistics do), then twelve touched 20 MB arrays with small blocks between them
# (nothing to trim from the top of the heap) are freed. Prints the RSS still held, in bytes,
# after the frees and after the DoFn's finish_bundle.
SCRIPT = textwrap.dedent("""
    import sys, threading
    import numpy as np
    from pipelines.runtime import memory
    from pipelines.training.beam_steps import LeanDoFn

    def rss():
        return memory.process_memory()["VmRSS"]

    out = {}

    memory.worker_process = lambda: True      # as in an SDK worker process

    def work(setup):
        fn = LeanDoFn()
        if setup:
            fn.setup()
        a = np.ones(30 << 17)
        del a
        base = rss()
        keep, big = [], []
        for _ in range(12):
            big.append(np.ones(20 << 17))
            keep.append(np.ones(1000))
        del big
        out["held"] = rss() - base
        fn.finish_bundle()
        out["after_bundle"] = rss() - base

    t = threading.Thread(target=work, args=(sys.argv[1] == "setup",))
    t.start()
    t.join()
    print(out["held"], out["after_bundle"])
""")


def _held(mode: str):
    env = dict(os.environ, PYTHONPATH=REPO)
    for k in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    held, after = (int(x) for x in r.stdout.split())
    return held, after


def test_setup_returns_freed_arrays_to_the_system():
    held, after = _held("setup")
    # 240 MB were touched and freed: with the worker's settings none of it stays resident
    assert held < 24 << 20, held
    assert after < 24 << 20, after


def test_finish_bundle_releases_what_the_arenas_kept():
    held, after = _held("no-setup")
    # without the settings glibc keeps the freed arrays in the thread's arena (the case the
    # settings are for); the bundle's end hands the free pages back
    assert held > 120 << 20, held
    assert after < 24 << 20, after


def test_a_driver_running_bundles_in_process_keeps_its_allocator():
    """Only an SDK worker process is tuned: the in-process runner calls the same setup in the
    driver, whose allocator (and the in-process trainer's speed) is left as it was."""
    script = textwrap.dedent("""
        from pipelines.runtime import memory
        from pipelines.training.beam_steps import LeanDoFn
        fn = LeanDoFn()
        fn.setup()
        fn.finish_bundle()
        print(memory.worker_process(), memory._TUNED)
    """)
    r = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=REPO),
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "[]"]
