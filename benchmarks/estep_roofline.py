"""Roofline of the VB E-step on this CPU: what a numba loop can reach, and what the E-step's
memory pattern alone allows (used by ``benchmarks/estep_bench.py``, printed and saved there).

* :func:`fma_peak` -- the attainable multiply-add rate of a numba loop: ``W`` independent float32
  accumulators (x = x·a + b, no loads or stores in the loop once LLVM keeps them in registers),
  as numba compiles it by default (256-bit vectors on this CPU: LLVM's ``prefer-256-bit`` tuning
  for Intel server cores) and, in a child process started with
  ``NUMBA_CPU_FEATURES=<host features>,-prefer-256-bit``, with 512-bit vectors (a process-wide
  setting, hence the child process).
* :func:`pattern_rate` -- the fixed point's two passes alone, exactly as the kernel inlines them
  (:func:`lda_core.algorithms.estep_vb._phinorm` and ``_weighted_rows``) over an n x K tile of
  columns of exp(E[log β]) with a fixed exp(E[log θ]), repeated: one dot product and one axpy
  per row (4 K FLOPs per row), plus the one division per row the kernel does. The tile size
  decides where it lives: K = 100 and n = 48 (19 KB) fits L1 (48 KB per core here), K = 1000
  and n = 80 (320 KB, a 20 Newsgroups document's typical size) or K = 100 and n = 2000 only
  L2 (2 MB per core).

All rates are FLOPs per CPU-second of this process (``time.process_time``), the fastest of a few
repetitions, so other jobs on the shared machine only lower them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lda_core.algorithms.estep_vb import _phinorm, _weighted_rows  # noqa: E402
from numba import njit  # noqa: E402

# the tile shapes of the pattern measurement: (K, n, where the tile lives)
PATTERN_SHAPES = ((100, 48, "L1"), (100, 80, "L1"), (100, 2000, "L2"),
                  (1000, 8, "L1"), (1000, 80, "L2"), (1000, 400, "L2"))
_W_SMALL = 128       # 16 256-bit or 8 512-bit accumulators: two FMA units x 4 cycles latency
_W_LARGE = 256


def _fma_loop(width):
    """A numba loop of ``width`` independent accumulators x = x·a + b (``width`` is a
    compile-time constant, so LLVM unrolls the inner loop and keeps x in registers)."""
    @njit(fastmath=True)
    def loop(reps, a, b, x):
        for r in range(reps):
            for k in range(width):
                x[k] = x[k] * a + b
        s = np.float32(0.0)
        for k in range(width):
            s += x[k]
        return s
    return loop


def _best_rate(fn, flops, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return flops / max(best, 1e-9)


def fma_peak(seconds: float = 0.3) -> dict:
    """The multiply-add rate (FLOPs per CPU-second) of :func:`_fma_loop` with 128 and 256 float32
    accumulators in this process, and the vector width LLVM chose for them."""
    out = {}
    a, b = np.float32(0.999999), np.float32(1e-7)
    for name, w in (("small", _W_SMALL), ("large", _W_LARGE)):
        fn = _fma_loop(w)
        x = np.ones(w, np.float32)
        fn(10, a, b, x)
        t = time.process_time()
        fn(100000, a, b, x)
        per_rep = max(time.process_time() - t, 1e-6) / 100000
        reps = max(1000, int(seconds / per_rep))
        out[name] = _best_rate(lambda: fn(reps, a, b, x), 2.0 * w * reps)
        asm = fn.inspect_asm(fn.signatures[0])
        out[name + "_vector_bits"] = (512 if "zmm" in asm else 256 if "ymm" in asm else 128)
    out["flops_per_s"] = max(out["small"], out["large"])
    out["vector_bits"] = max(out["small_vector_bits"], out["large_vector_bits"])
    return out


def fma_peak_512(seconds: float = 0.3, timeout: float = 300.0) -> dict:
    """:func:`fma_peak` in a child process compiled for 512-bit vectors (``NUMBA_CPU_FEATURES``
    = the host's features with ``-prefer-256-bit``; a separate ``NUMBA_CACHE_DIR`` so its
    machine code does not replace this process's cached one). ``{"error": ...}`` if the child
    fails."""
    import tempfile
    import llvmlite.binding as llb
    env = dict(os.environ)
    env["NUMBA_CPU_FEATURES"] = llb.get_host_cpu_features().flatten() + ",-prefer-256-bit"
    with tempfile.TemporaryDirectory() as cache:
        env["NUMBA_CACHE_DIR"] = cache
        env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
        code = ("import json, sys; sys.path.insert(0, %r); from benchmarks import estep_roofline "
                "as r; print(json.dumps(r.fma_peak(%r)))" % (REPO, float(seconds)))
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=timeout)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


@njit(fastmath=True, cache=True, error_model="numpy")
def _pattern_loop(tile, n, et, phin, ratio, acc, reps, eps):
    """``reps`` times the fixed point's two passes over the n rows of ``tile``: phinorm (dot
    products), one division per row, the weighted row sum (axpy)."""
    K = et.shape[0]
    one = tile[0, 0] * 0 + 1
    for r in range(reps):
        _phinorm(tile, 0, n, et, eps, phin)
        for j in range(n):
            ratio[j] = one / phin[j]
        for k in range(K):
            acc[k] = 0
        _weighted_rows(tile, 0, n, ratio, acc)
        for k in range(K):
            et[k] = et[k] * (acc[k] * np.float32(1e-9) + one)   # a dependency between reps
    return acc[0]


def pattern_rate(K: int, n: int, seconds: float = 0.3, seed: int = 0) -> float:
    """FLOPs (4 K n per repetition) per CPU-second of :func:`_pattern_loop` on an n x K float32
    tile of positive values (the E-step's columns of exp(E[log β]) are in (0, 1])."""
    rng = np.random.default_rng(seed)
    tile = rng.uniform(0.001, 0.01, (n, K)).astype(np.float32)
    et = rng.uniform(0.0, 1.0 / K, K).astype(np.float32)
    phin, ratio = np.empty(n, np.float32), np.empty(n, np.float32)
    acc = np.empty(K, np.float32)
    eps = np.float32(np.finfo(np.float32).eps)
    _pattern_loop(tile, n, et, phin, ratio, acc, 2, eps)
    t = time.process_time()
    _pattern_loop(tile, n, et, phin, ratio, acc, 20, eps)
    per_rep = max(time.process_time() - t, 1e-6) / 20
    reps = max(20, int(seconds / per_rep))
    return _best_rate(lambda: _pattern_loop(tile, n, et, phin, ratio, acc, reps, eps),
                      4.0 * K * n * reps)


def roofline(peak_flops_per_s: float, with_512: bool = True, seconds: float = 0.3) -> dict:
    """The FMA loop's rate (256-bit here, 512-bit in a child process) and the pattern's rate per
    tile shape, each also as a fraction of ``peak_flops_per_s``; printed. ``seconds``: the
    length of one timed repetition of each measurement."""
    f256 = fma_peak(seconds)
    res = {"fma_loop_default": f256,
           "fma_loop_default_fraction": f256["flops_per_s"] / peak_flops_per_s}
    print("roofline: numba FMA loop (%d-bit vectors, as numba compiles by default) %.1f "
          "GFLOP/s per CPU-s = %.2f x the nominal peak"
          % (f256["vector_bits"], f256["flops_per_s"] / 1e9, res["fma_loop_default_fraction"]),
          flush=True)
    if with_512:
        f512 = fma_peak_512(seconds)
        res["fma_loop_512"] = f512
        if "flops_per_s" in f512:
            res["fma_loop_512_fraction"] = f512["flops_per_s"] / peak_flops_per_s
            print("roofline: numba FMA loop (%d-bit vectors, child process with "
                  "-prefer-256-bit) %.1f GFLOP/s per CPU-s = %.2f x the nominal peak"
                  % (f512["vector_bits"], f512["flops_per_s"] / 1e9,
                     res["fma_loop_512_fraction"]), flush=True)
        else:
            print("roofline: 512-bit FMA loop failed: %s" % f512.get("error"), flush=True)
    res["pattern"] = []
    for K, n, where in PATTERN_SHAPES:
        r = pattern_rate(K, n, seconds)
        row = {"K": K, "n": n, "tile_bytes": 4 * K * n, "resident": where, "flops_per_s": r,
               "peak_fraction": r / peak_flops_per_s,
               "fma_loop_fraction": r / f256["flops_per_s"]}
        res["pattern"].append(row)
        print("roofline: E-step pattern (dot + division + axpy per row) K=%-5d n=%-5d tile "
              "%7.0f KB (%s) %.1f GFLOP/s per CPU-s = %.1f%% of the nominal peak, %.0f%% of the "
              "FMA loop" % (K, n, row["tile_bytes"] / 1024, where, r / 1e9,
                            100 * row["peak_fraction"], 100 * row["fma_loop_fraction"]),
              flush=True)
    return res


if __name__ == "__main__":
    from benchmarks.estep_bench import cpu_peak
    roofline(cpu_peak()["core_peak_flops_per_s"])
