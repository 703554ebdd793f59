#!/usr/bin/env python3
"""Variants of the VB E-step's fixed point, timed in one process against the kernel in
``lda_core.algorithms.estep_vb`` on the same 20 Newsgroups minibatches, λ and initial γ as
``benchmarks/estep_bench.py`` (its loader and protocol), float32.

Each variant replaces only ``_doc_fixed_point`` (the kernel's per-document loop; the document
chunks, the tile copy, the bound and the statistics are the module's own):

* ``one_pass``    -- all rows' dot products, then all rows' axpy, each a pass over the whole
                     tile, for every document (the kernel runs it only for tiles that fit L1
                     or have short rows, and row blocks, ``_fixed_point_blocked``, otherwise);
* ``dot8``        -- ``one_pass`` with eight rows per dot-product group instead of four;
                     (each variant is the module's ``_doc_fixed_point`` compiled afresh with some
                     of its globals replaced);
* ``blocked_fresh`` -- the module's kernel compiled afresh in this process (the module's own
                     is loaded from numba's cache), to tell compile effects from the variants';
* ``blocked_512`` -- the module's kernel compiled with 512-bit vectors for this one function
                     (LLVM function attributes ``prefer-vector-width``/``min-legal-vector-width``
                     = 512, added to the IR of functions whose name holds ``wide512``; numba
                     itself has no per-function setting, so this script patches its
                     ``CPUCodeLibrary.add_ir_module`` in this process only).

Reported per K: the FLOP rate of ``estep()`` and of the fixed point alone (4 K FLOPs per
non-zero and iteration, per CPU-second, fastest of ``--rounds``) as fractions of the nominal
float32 peak (``estep_bench.cpu_peak``), the ratio to the module's kernel, and how far γ and the
iteration counts moved (max relative |Δγ|, documents with another iteration count). Saved to
``benchmarks/results/estep_bench_variants.json``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import types

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from lda_core.algorithms import estep_vb as ev  # noqa: E402
from numba import njit  # noqa: E402

WIDE = "wide512"


def _install_wide_hook():
    """Let functions whose LLVM name holds ``wide512`` use 512-bit vectors (this process)."""
    import llvmlite.binding as ll
    from numba.core import cgutils, codegen
    if getattr(codegen.CPUCodeLibrary, "_wide512", False):
        return
    orig = codegen.CPUCodeLibrary.add_ir_module

    def add_ir_module(self, ir_module):
        text = str(ir_module)
        if WIDE not in text:
            return orig(self, ir_module)
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if line.startswith("define") and WIDE in line:
                lines[i] = (line.rstrip() + ' "prefer-vector-width"="512"'
                            ' "min-legal-vector-width"="512"')
        mod = ll.parse_assembly(cgutils.normalize_ir_text("\n".join(lines)))
        mod.name = ir_module.name
        mod.verify()
        self.add_llvm_module(mod)

    codegen.CPUCodeLibrary.add_ir_module = add_ir_module
    codegen.CPUCodeLibrary._wide512 = True


@njit(fastmath=True, error_model="numpy", inline="always")
def _phinorm8(tile, j0, j1, et, eps, out):
    """:func:`lda_core.algorithms.estep_vb._phinorm` with eight rows per group."""
    K = et.shape[0]
    j = j0
    while j + 8 <= j1:
        r0, r1, r2, r3 = tile[j], tile[j + 1], tile[j + 2], tile[j + 3]
        r4, r5, r6, r7 = tile[j + 4], tile[j + 5], tile[j + 6], tile[j + 7]
        e = et[0]
        s0, s1, s2, s3 = r0[0] * e, r1[0] * e, r2[0] * e, r3[0] * e
        s4, s5, s6, s7 = r4[0] * e, r5[0] * e, r6[0] * e, r7[0] * e
        for k in range(1, K):
            e = et[k]
            s0 += r0[k] * e
            s1 += r1[k] * e
            s2 += r2[k] * e
            s3 += r3[k] * e
            s4 += r4[k] * e
            s5 += r5[k] * e
            s6 += r6[k] * e
            s7 += r7[k] * e
        out[j], out[j + 1], out[j + 2], out[j + 3] = s0 + eps, s1 + eps, s2 + eps, s3 + eps
        out[j + 4], out[j + 5], out[j + 6], out[j + 7] = s4 + eps, s5 + eps, s6 + eps, s7 + eps
        j += 8
    ev._phinorm(tile, j, j1, et, eps, out)


def _kernel_with(fixed_point, name):
    """The module's ``_estep_kernel`` (same code) calling ``fixed_point`` per document."""
    py = ev._estep_kernel.py_func
    glb = dict(py.__globals__)
    glb["_doc_fixed_point"] = fixed_point
    fn = types.FunctionType(py.__code__, glb, name, py.__defaults__, py.__closure__)
    fn.__qualname__ = name          # numba names the machine code after the qualified name
    return njit(fastmath=True, parallel=True, error_model="numpy")(fn)


def _fixed_point_copy(name, **globals_):
    """The module's ``_doc_fixed_point`` compiled afresh as ``name`` with some of its globals
    replaced (numba freezes globals at compile time)."""
    py = ev._doc_fixed_point.py_func
    glb = dict(py.__globals__)
    glb.update(globals_)
    fn = types.FunctionType(py.__code__, glb, name, py.__defaults__, py.__closure__)
    fn.__qualname__ = name
    return njit(fastmath=True, error_model="numpy")(fn)


def variants() -> dict:
    _install_wide_hook()
    never = 1 << 62                     # no tile has rows this long: always one pass
    return {"one_pass": _kernel_with(_fixed_point_copy("fp_one_pass", _BLOCK_MIN_ROW_BYTES=never),
                                     "kernel_one_pass"),
            "dot8": _kernel_with(_fixed_point_copy("fp_dot8", _BLOCK_MIN_ROW_BYTES=never,
                                                   _phinorm=_phinorm8), "kernel_dot8"),
            "blocked_fresh": _kernel_with(_fixed_point_copy("fp_fresh"), "kernel_fresh"),
            "blocked_512": _kernel_with(_fixed_point_copy("fp_" + WIDE), "kernel_" + WIDE)}


def run(args):
    from benchmarks.estep_bench import cpu_peak, load_corpus
    from lda_core.algorithms.online_vb import OnlineVB
    from lda_core.algorithms.vb_gamma_init import doc_keys, init_gamma
    batch, V = load_corpus(args.corpus)
    S = args.minibatch
    order = np.random.default_rng(0).permutation(batch.n_docs)
    n_train = min(args.train_steps * S, batch.n_docs // 2)
    train, pool = batch.take(order[:n_train]), order[n_train:]
    bench = [batch.take(np.sort(pool[i * S:(i + 1) * S])) for i in range(args.batches)
             if (i + 1) * S <= len(pool)]
    peak = cpu_peak(dtype="float32")["core_peak_flops_per_s"]
    kernels = variants()
    current = ev._estep_kernel
    rows = []
    for K in args.topics:
        m = OnlineVB(K, V, alpha=0.1, eta=0.01, corpus_size=batch.n_docs, dtype="float32", max_iter=args.max_iter, tol=args.tol)
        for i in range(0, n_train, S):
            m.global_step(m.local_step(train.take(range(i, min(i + S, n_train)))))
        data = []
        for b in bench:
            uniq, lids = ev.local_ids(b.word_ids, V)
            data.append((b, lids, m.exp_elog_beta(uniq),
                         init_gamma(doc_keys(b.doc_ids, 0, 0), K)))
        best, ref = {}, None
        names = ["current"] + list(kernels)
        for rnd in range(args.rounds):
            for name in (names if rnd % 2 == 0 else names[::-1]):
                ev._estep_kernel = current if name == "current" else kernels[name]
                try:
                    t, res, flops = {}, [], 0
                    c0 = time.process_time()
                    for b, lids, eb, g0 in data:
                        r = ev.estep(b.indptr, lids, b.counts, eb, m.alpha, g0, args.max_iter,
                                     args.tol, timings=t)
                        res.append(r)
                        flops += 4 * K * int(np.dot(r.iterations.astype(np.int64),
                                                    np.diff(b.indptr)))
                    cpu = time.process_time() - c0
                finally:
                    ev._estep_kernel = current
                ref = res if ref is None else ref
                dg = max(float(np.max(np.abs(r.gamma.astype(np.float64) - q.gamma)
                                      / np.abs(q.gamma))) for r, q in zip(res, ref))
                dit = sum(int(np.sum(r.iterations != q.iterations)) for r, q in zip(res, ref))
                row = {"K": K, "variant": name, "flops": flops,
                       "peak_fraction": flops / cpu / peak,
                       "peak_fraction_fixed_point": flops / t["fixed_point"] / peak,
                       "gamma_max_rel_diff": dg, "docs_other_iterations": dit}
                if name not in best or row["peak_fraction_fixed_point"] > \
                        best[name]["peak_fraction_fixed_point"]:
                    best[name] = row
        for name, row in best.items():
            row["fixed_point_vs_current"] = (row["peak_fraction_fixed_point"]
                                             / best["current"]["peak_fraction_fixed_point"])
            row["estep_vs_current"] = row["peak_fraction"] / best["current"]["peak_fraction"]
            rows.append(row)
            print("K=%-5d %-12s estep() %.1f%% of peak (%.2fx current), fixed point %.1f%% "
                  "(%.2fx); max rel |dgamma| %.1e, %d documents with another iteration count"
                  % (K, name, 100 * row["peak_fraction"], row["estep_vs_current"],
                     100 * row["peak_fraction_fixed_point"], row["fixed_point_vs_current"],
                     row["gamma_max_rel_diff"], row["docs_other_iterations"]), flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default="20news", choices=["20news", "kos", "nips"])
    p.add_argument("--topics", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--minibatch", type=int, default=256)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--train-steps", type=int, default=4)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=os.path.join(REPO, "benchmarks", "results",
                                                  "estep_bench_variants.json"))
    args = p.parse_args(argv)
    rows = run(args)
    if args.json:
        from benchmarks import common
        common.save_results({"rounds": args.rounds, "results": rows}, args.json, argv,
                            os.path.basename(__file__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
