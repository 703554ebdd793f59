"""The variational E-step of LDA (Hoffman, Blei & Bach 2010): a numba kernel and a numpy reference.

For a document with unique words w (counts n_w), with λ frozen and B_wk = exp(E[log β_kw])
(``eb``, word-major, only the batch's words: U x K), iterate from an initial γ:

    E[log θ_k] = ψ(γ_k) − ψ(Σ_j γ_j),       t_k = exp(E[log θ_k])
    phinorm_w  = Σ_k t_k B_wk + ε             (ε = machine epsilon of the dtype, as gensim)
    γ_k       ← α_k + t_k Σ_w (n_w / phinorm_w) B_wk
    (recompute t and phinorm)  stop when mean_k |γ_k − γ_k^old| < tol, or after max_iter.

This is exactly gensim's ``LdaModel.inference`` loop (same order of updates and stopping rule).
Sufficient statistics without materialising φ:
    sstats_wk = B_wk · Σ_d t_dk n_dw / phinorm_dw                    (float64 sums)
and the per-document bound (paper eq. 16's numerator, φ at its optimum for the final γ):
    ELBO_d = Σ_w n_w log phinorm_w + Σ_k (α_k − γ_k) E[log θ_k] + log Γ(γ_k) − log Γ(α_k)
             + log Γ(Σ α) − log Γ(Σ γ).

The numba kernel runs ``prange`` over chunks of documents (balanced by non-zeros, a few
chunks per thread), copies each document's rows of B into a small local tile, and computes in
``eb.dtype`` (float32 or float64). It keeps each document's final exp(E[log θ_d]) and
n_dw / phinorm_dw; a second parallel pass over the batch's words then sums the statistics in
float64, documents in a fixed order — so the result is the same bit for bit whatever the
thread count or chunking, and no per-thread U x K buffer is needed. exp(E[log θ]) comes from
``lda_core.algorithms.vb_digamma`` (no log, at most one exp per value), B from
``lda_core.algorithms.vb_exp_elog_beta``, the initial γ from ``lda_core.algorithms.vb_gamma_init``. ``numba`` compiles
once and caches the machine code (``cache=True``) in ``__pycache__`` or ``$NUMBA_CACHE_DIR``
(see ``lda_core.algorithms.numba_config``).

Cost: 4 K FLOPs per non-zero and iteration (a dot product and an axpy over the K topics);
docs/algorithms.md ("The VB E-step kernel") gives the measured fraction of the CPU's peak, the
roofline of this memory pattern on the CPU (``benchmarks/estep_roofline.py``) and the variants
measured against the kernel (``benchmarks/estep_variants.py``).

The fixed-point helpers (:func:`_phinorm`, :func:`_weighted_rows`, four rows unrolled, and
:func:`_rows_pass`, which runs them block by block of rows for
:func:`_fixed_point_blocked`) are kept together with the kernel
that inlines them: LLVM vectorises them only as inlined there.
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple, Optional

import numpy as np

from lda_core.algorithms import numba_config

numba_config.prefer_passive_wait()     # before numba starts its threads
from lda_core.algorithms.vb_digamma import (F_ZERO, exp_digamma_for, digamma,  # noqa: E402
                                      exp_digamma_f32_vec)
from lda_core.algorithms.vb_exp_elog_beta import tiny_cutoff  # noqa: E402
from numba import njit, prange  # noqa: E402
from scipy.special import gammaln, psi  # noqa: E402


# ---------------------------------------------------------------------------------------------
# the E-step
# ---------------------------------------------------------------------------------------------
class EStepResult(NamedTuple):
    gamma: np.ndarray          # n x K (eb.dtype), final γ
    sstats: np.ndarray         # U x K float64, word-major (rows = the batch's unique words)
    iterations: np.ndarray     # n int32, iterations run per document
    converged: np.ndarray      # n bool
    scores: np.ndarray         # n float64, ELBO_d
    sum_elogtheta: np.ndarray  # K float64, Σ_d E[log θ_d]


@njit(cache=True, inline="always", error_model="numpy")
def _exp_expect(g, et):
    """et = exp(ψ(g) − ψ(Σ g)) = exp_digamma(g) / exp_digamma(Σ g) (in et's dtype); values
    below ``tiny_cutoff(et)`` are stored as 0 (see :func:`tiny_cutoff`)."""
    tiny = tiny_cutoff(et)
    s = 0.0
    for k in range(g.shape[0]):
        s += g[k]
    inv = 1.0 / exp_digamma_for(et, s)
    if et.itemsize == 4:
        # float32 lanes, vectorised: this loop was about half of an iteration's time at
        # K = 100 and K = 1000 with one libm expf per topic
        inv32 = np.float32(inv)
        tiny32 = np.float32(tiny)
        for k in range(g.shape[0]):
            v = exp_digamma_f32_vec(np.float32(g[k])) * inv32
            et[k] = v if v >= tiny32 else F_ZERO
    else:
        for k in range(g.shape[0]):
            v = exp_digamma_for(et, np.float64(g[k])) * inv
            et[k] = v if v >= tiny else 0.0


@njit(cache=True, inline="always", error_model="numpy")
def _phinorm(tile, j0, j1, et, eps, out):
    """out[j] = Σ_k tile[j, k] et[k] + ε for rows j0..j1-1, four rows at a time (each et[k]
    loaded once for four dot products). Row bounds rather than a slice of the tile: the
    inlined loops then vectorise as over the whole tile."""
    K = et.shape[0]
    j = j0
    while j + 4 <= j1:
        r0 = tile[j]
        r1 = tile[j + 1]
        r2 = tile[j + 2]
        r3 = tile[j + 3]
        e = et[0]
        s0 = r0[0] * e
        s1 = r1[0] * e
        s2 = r2[0] * e
        s3 = r3[0] * e
        for k in range(1, K):
            e = et[k]
            s0 += r0[k] * e
            s1 += r1[k] * e
            s2 += r2[k] * e
            s3 += r3[k] * e
        out[j] = s0 + eps
        out[j + 1] = s1 + eps
        out[j + 2] = s2 + eps
        out[j + 3] = s3 + eps
        j += 4
    while j < j1:
        row = tile[j]
        s = row[0] * et[0]
        for k in range(1, K):
            s += row[k] * et[k]
        out[j] = s + eps
        j += 1


@njit(cache=True, inline="always", error_model="numpy")
def _weighted_rows(tile, j0, j1, ratio, acc):
    """acc += Σ_j ratio[j] tile[j] over rows j0..j1-1, four rows per pass over acc."""
    K = acc.shape[0]
    j = j0
    while j + 4 <= j1:
        a0 = ratio[j]
        a1 = ratio[j + 1]
        a2 = ratio[j + 2]
        a3 = ratio[j + 3]
        r0 = tile[j]
        r1 = tile[j + 1]
        r2 = tile[j + 2]
        r3 = tile[j + 3]
        for k in range(K):
            acc[k] += a0 * r0[k] + a1 * r1[k] + a2 * r2[k] + a3 * r3[k]
        j += 4
    while j < j1:
        r = ratio[j]
        row = tile[j]
        for k in range(K):
            acc[k] += r * row[k]
        j += 1


# Rows of the tile per block of :func:`_fixed_point_blocked`: as many as fit in this many bytes
# (a multiple of four, at least four), so that the axpy re-reads rows the dot products just
# brought into L1 (a third of a 48 KB L1 leaves room for et, acc and the next rows). Used only
# for tiles larger than twice this (they outgrow L1) with rows of at least
# _BLOCK_MIN_ROW_BYTES: with short rows the blocked loop did not beat the one-pass loop, with
# long rows it did (docs/algorithms.md, "The VB E-step kernel", has the measurements).
_BLOCK_BYTES = 16384
_BLOCK_MIN_ROW_BYTES = 2048


@njit(cache=True, inline="always", error_model="numpy")
def _rows_pass(tile, n, B, cts, et, eps, phin, ratio, acc, accumulate):
    """phin = the rows' dot products with et (:func:`_phinorm`) and, if ``accumulate``, acc +=
    Σ_j (n_j / phin_j) tile[j] (:func:`_weighted_rows`), block by block of B rows: each block's
    rows are read twice while in L1 instead of the whole tile twice. B is a multiple of four,
    so the four-row groups and the order of the additions into acc are those of one pass over
    the whole tile: the same result bit for bit."""
    one = tile[0, 0] * 0 + 1
    j0 = 0
    while j0 < n:
        j1 = min(n, j0 + B)
        _phinorm(tile, j0, j1, et, eps, phin)
        if accumulate:
            for j in range(j0, j1):
                ratio[j] = cts[j] * one / phin[j]
            _weighted_rows(tile, j0, j1, ratio, acc)
        j0 = j1


@njit(cache=True, inline="always", error_model="numpy")
def _fixed_point_blocked(tile, n, B, cts, alpha, g, et, last, acc, phin, ratio, max_iter, tol,
                         eps):
    """:func:`_doc_fixed_point` for a tile that outgrows L1: the phinorm pass of an iteration
    and the axpy of the next one read the same rows with the same t, so they run together,
    block by block (:func:`_rows_pass`); the stopping test needs only γ, so it comes first and
    the last pass skips the axpy. The same operations in the same order as the one-pass loop."""
    K = g.shape[0]
    _exp_expect(g, et)
    for k in range(K):
        acc[k] = 0
    _rows_pass(tile, n, B, cts, et, eps, phin, ratio, acc, max_iter > 0)
    it = 0
    conv = False
    while it < max_iter:
        it += 1
        for k in range(K):
            last[k] = g[k]
        for k in range(K):
            g[k] = alpha[k] + et[k] * acc[k]
        mc = 0.0
        for k in range(K):
            mc += abs(np.float64(g[k]) - np.float64(last[k]))
        for k in range(K):
            acc[k] = 0
        conv = mc / K < tol
        _exp_expect(g, et)
        _rows_pass(tile, n, B, cts, et, eps, phin, ratio, acc, not conv and it < max_iter)
        if conv:
            break
    return it, conv


@njit(fastmath=True, cache=True, error_model="numpy")
def _doc_fixed_point(tile, n, cts, alpha, g, et, last, acc, phin, ratio, max_iter, tol, eps):
    """γ fixed point of one document, gensim's loop: γ from the current phinorm, then t and
    phinorm of the new γ, stop on the mean absolute change of γ. A separate function so that
    LLVM vectorises the loops over K (it does not inside the prange body). Tiles that outgrow
    L1 with long rows go to :func:`_fixed_point_blocked` (same result bit for bit). (The phinorm
    and γ passes are not fused row by row: each row's axpy would then wait for its dot product;
    docs/algorithms.md, "The VB E-step kernel".)"""
    K = g.shape[0]
    row_bytes = tile.shape[1] * tile.itemsize
    if row_bytes >= _BLOCK_MIN_ROW_BYTES and n * row_bytes > 2 * _BLOCK_BYTES:
        return _fixed_point_blocked(tile, n, max(4, (_BLOCK_BYTES // row_bytes) // 4 * 4), cts,
                                    alpha, g, et, last, acc, phin, ratio, max_iter, tol, eps)
    one = tile[0, 0] * 0 + 1
    _exp_expect(g, et)
    _phinorm(tile, 0, n, et, eps, phin)
    it = 0
    conv = False
    while it < max_iter:
        it += 1
        for k in range(K):
            last[k] = g[k]
            acc[k] = 0
        for j in range(n):
            ratio[j] = cts[j] * one / phin[j]
        _weighted_rows(tile, 0, n, ratio, acc)
        for k in range(K):
            g[k] = alpha[k] + et[k] * acc[k]
        _exp_expect(g, et)
        _phinorm(tile, 0, n, et, eps, phin)
        mc = 0.0
        for k in range(K):
            mc += abs(np.float64(g[k]) - np.float64(last[k]))
        if mc / K < tol:
            conv = True
            break
    return it, conv


@njit(fastmath=True, parallel=True, cache=True, error_model="numpy")
def _estep_kernel(indptr, lids, cts, eb, alpha, gamma, chunks, max_iter, tol, eps,
                  et_out, p_out, iters, converged):
    """Per document d (chunks of documents in parallel): the fixed point for γ_d, then
    et_out[d] = exp(E[log θ_d]) and p_out[j] = phinorm_dw for its non-zeros. The statistics
    are summed word by word afterwards (:func:`_word_sstats`) and the bound is computed by
    :func:`_doc_scores`, so nothing depends on the chunking or the thread count."""
    K = eb.shape[1]
    for c in prange(chunks.shape[0] - 1):
        d0 = chunks[c]
        d1 = chunks[c + 1]
        maxlen = 1
        for d in range(d0, d1):
            maxlen = max(maxlen, indptr[d + 1] - indptr[d])
        tile = np.empty((maxlen, K), eb.dtype)
        phin = np.empty(maxlen, eb.dtype)
        ratio = np.empty(maxlen, eb.dtype)
        et = np.empty(K, eb.dtype)
        last = np.empty(K, eb.dtype)
        acc = np.empty(K, eb.dtype)
        for d in range(d0, d1):
            s = indptr[d]
            n = indptr[d + 1] - s
            for j in range(n):
                w = lids[s + j]
                for k in range(K):
                    tile[j, k] = eb[w, k]
            g = gamma[d]
            it, conv = _doc_fixed_point(tile, n, cts[s:s + n], alpha, g, et, last, acc, phin,
                                        ratio, max_iter, tol, eps)
            iters[d] = it
            converged[d] = conv
            for j in range(n):
                p_out[s + j] = phin[j]
            for k in range(K):
                et_out[d, k] = et[k]


@njit(parallel=True, cache=True, error_model="numpy")
def _doc_scores(indptr, cts, p, gamma, alpha, alpha_const, elogt, scores):
    """elogt[d] = E[log θ_d] and ELBO_d = Σ_w n_dw log phinorm_dw + Σ_k (α_k − γ_dk) E[log θ_dk]
    + log Γ(γ_dk) − log Γ(α_k) + log Γ(Σα) − log Γ(Σγ_d). Documents in parallel, each one's
    sums in a fixed order by one thread and without ``fastmath``, so nothing depends on the
    thread count (inside the fastmath kernel's prange the last bits did)."""
    n, K = gamma.shape
    for d in prange(n):
        ll = 0.0
        for j in range(indptr[d], indptr[d + 1]):
            ll += cts[j] * math.log(p[j])
        gs = 0.0
        for k in range(K):
            gs += np.float64(gamma[d, k])
        psum = digamma(gs)
        for k in range(K):
            gk = np.float64(gamma[d, k])
            e = digamma(gk) - psum
            elogt[d, k] = e
            ll += (alpha[k] - gk) * e + math.lgamma(gk)
        scores[d] = ll + alpha_const - math.lgamma(gs)


@njit(cache=True, error_model="numpy")
def _word_sstats_block(u0, u1, wptr, wdoc, wpos, cts, p, et, eb, out, acc):
    """Words u0..u1-1 of :func:`_word_sstats` (a function of its own so that the loops over
    k vectorise, which they do not inside a prange body)."""
    K = out.shape[1]
    for u in range(u0, u1):
        for k in range(K):
            acc[k] = 0.0
        for e in range(wptr[u], wptr[u + 1]):
            d = wdoc[e]
            rv = cts[wpos[e]] / p[wpos[e]]
            for k in range(K):
                acc[k] += rv * et[d, k]
        for k in range(K):
            out[u, k] = acc[k] * eb[u, k]


_WORDS_PER_BLOCK = 64


@njit(parallel=True, cache=True, error_model="numpy")
def _word_sstats(wptr, wdoc, wpos, cts, p, et, eb, out):
    """out[u, k] = eb[u, k] · Σ_{d ∋ u} (n_du / phinorm_du) · et[d, k], documents in increasing
    order (float64; the same sums whatever the number of threads: each word's sum is one
    thread's, in a fixed order). No ``fastmath`` here: with it the kernel loaded from numba's
    cache rounded differently from the freshly compiled one (contraction/reciprocal choices),
    so a resumed process drifted a few ULPs from an uninterrupted one
    (tests/test_kernel_cache.py)."""
    U, K = out.shape
    nb = (U + _WORDS_PER_BLOCK - 1) // _WORDS_PER_BLOCK
    for b in prange(nb):
        u0 = b * _WORDS_PER_BLOCK
        acc = np.empty(K, np.float64)
        _word_sstats_block(u0, min(U, u0 + _WORDS_PER_BLOCK), wptr, wdoc, wpos, cts, p, et,
                           eb, out, acc)


def balanced_chunks(indptr: np.ndarray, n_chunks: int) -> np.ndarray:
    """Document boundaries of ``n_chunks`` contiguous chunks with about equal non-zeros."""
    n = len(indptr) - 1
    n_chunks = max(1, min(int(n_chunks), n))
    if n == 0:
        return np.zeros(1, np.int64)
    targets = indptr[-1] * np.arange(1, n_chunks) / n_chunks
    cuts = np.searchsorted(indptr[1:], targets, side="left") + 1
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 1, n - 1) if n > 1 else [], [n]]))
    return bounds.astype(np.int64)


def _check_inputs(indptr, lids, cts, eb, alpha, gamma0):
    n = len(indptr) - 1
    if gamma0.shape != (n, eb.shape[1]):
        raise ValueError("gamma0 has shape %s, expected (%d, %d)" % (gamma0.shape, n, eb.shape[1]))
    if len(alpha) != eb.shape[1]:
        raise ValueError("alpha has %d entries for K=%d" % (len(alpha), eb.shape[1]))
    if len(lids) and (lids.min() < 0 or lids.max() >= eb.shape[0]):
        raise ValueError("local word ids outside [0, %d)" % eb.shape[0])


@njit(cache=True, error_model="numpy")
def _local_ids(word_ids, n_words, mark):
    """(sorted unique word ids, each non-zero's index into them), with ``mark`` (n_words
    int32, all -1) as scratch, left all -1 again. O(nnz + distinct words): a counting pass
    instead of np.unique + searchsorted, which sort."""
    nnz = word_ids.shape[0]
    n_u = 0
    for i in range(nnz):
        w = word_ids[i]
        if mark[w] < 0:
            mark[w] = 0
            n_u += 1
    uniq = np.empty(n_u, np.int64)
    j = 0
    for i in range(nnz):
        w = word_ids[i]
        if mark[w] == 0:
            mark[w] = 1
            uniq[j] = w
            j += 1
    uniq.sort()
    for u in range(n_u):
        mark[uniq[u]] = u
    lids = np.empty(nnz, np.int64)
    for i in range(nnz):
        lids[i] = mark[word_ids[i]]
    for u in range(n_u):
        mark[uniq[u]] = -1
    return uniq, lids


def local_ids(word_ids: np.ndarray, n_words: int):
    """Sorted unique word ids of a batch and each non-zero's index into them (what
    ``np.unique`` + ``np.searchsorted`` give)."""
    mark = np.full(int(n_words), -1, np.int32)
    return _local_ids(np.ascontiguousarray(word_ids), int(n_words), mark)


@njit(cache=True, error_model="numpy")
def word_major_index(indptr, lids, n_u):
    """The non-zeros grouped by word, documents in increasing order within a word (a counting
    sort): ``wptr`` (n_u + 1), ``wpos`` (position of each in the document-major order) and
    ``wdoc`` (its document) -- np.argsort(lids, stable) and friends, in one O(nnz) pass."""
    nnz = lids.shape[0]
    wptr = np.zeros(n_u + 1, np.int64)
    for i in range(nnz):
        wptr[lids[i] + 1] += 1
    for u in range(n_u):
        wptr[u + 1] += wptr[u]
    fill = wptr[:-1].copy()
    wpos = np.empty(nnz, np.int64)
    wdoc = np.empty(nnz, np.int64)
    for d in range(indptr.shape[0] - 1):
        for i in range(indptr[d], indptr[d + 1]):
            u = lids[i]
            k = fill[u]
            wpos[k] = i
            wdoc[k] = d
            fill[u] = k + 1
    return wptr, wpos, wdoc


CHUNKS_PER_THREAD = 4


class _PhaseClock:
    """Adds the process CPU seconds since the last lap to ``timings[name]`` (no-op without a
    dict)."""

    def __init__(self, timings: Optional[dict]):
        self.timings = timings
        self.t = time.process_time() if timings is not None else 0.0

    def lap(self, name: str) -> None:
        if self.timings is not None:
            t = time.process_time()
            self.timings[name] = self.timings.get(name, 0.0) + t - self.t
            self.t = t


def estep(indptr: np.ndarray, lids: np.ndarray, cts: np.ndarray, eb: np.ndarray,
          alpha: np.ndarray, gamma0: np.ndarray, max_iter: int = 100, tol: float = 1e-3,
          n_chunks: Optional[int] = None, timings: Optional[dict] = None) -> EStepResult:
    """The numba E-step (see module docstring). ``lids`` index the rows of ``eb`` (U x K, its
    dtype sets the compute precision); ``gamma0`` (n x K) is the initial γ (not modified).
    The result does not depend on ``n_chunks`` or the thread count (bit for bit).
    ``timings``, if given, gets the process CPU seconds of the phases added to its keys
    ``fixed_point``, ``bound`` and ``statistics`` (benchmarks/estep_bench.py)."""
    import numba
    clock = _PhaseClock(timings)
    eb = np.ascontiguousarray(eb)
    dt = eb.dtype
    indptr = np.ascontiguousarray(indptr, np.int64)
    lids = np.ascontiguousarray(lids, np.int64)
    cts = np.ascontiguousarray(cts, np.int32)
    alpha = np.ascontiguousarray(alpha, np.float64)
    gamma = np.array(gamma0, dtype=dt, order="C", copy=True)
    _check_inputs(indptr, lids, cts, eb, alpha, gamma)
    n, K, U = len(indptr) - 1, eb.shape[1], eb.shape[0]
    if n_chunks is None:
        n_chunks = CHUNKS_PER_THREAD * numba.get_num_threads()
    chunks = balanced_chunks(indptr, n_chunks)
    et = np.zeros((n, K), dt)     # exp(E[log θ]) as the kernel computed it (exact in float64)
    elogt = np.zeros((n, K), np.float64)
    p = np.ones(len(lids), np.float64)
    iters = np.zeros(n, np.int32)
    conv = np.zeros(n, np.bool_)
    scores = np.zeros(n, np.float64)
    alpha_const = float(gammaln(alpha.sum()) - gammaln(alpha).sum())
    eps = dt.type(np.finfo(dt).eps)
    if n:
        _estep_kernel(indptr, lids, cts, eb, alpha.astype(dt), gamma, chunks, int(max_iter),
                      float(tol), eps, et, p, iters, conv)
        clock.lap("fixed_point")
        _doc_scores(indptr, cts, p, gamma, alpha, alpha_const, elogt, scores)
        clock.lap("bound")
    # word-major index of the non-zeros (documents in increasing order within a word)
    wptr, wpos, wdoc = word_major_index(indptr, lids, U)
    sstats = np.empty((U, K), np.float64)
    if U:
        _word_sstats(wptr, wdoc, wpos, cts, p, et, eb, sstats)
    clock.lap("statistics")
    return EStepResult(gamma, sstats, iters, conv, scores, elogt.sum(axis=0))


def estep_reference(indptr: np.ndarray, lids: np.ndarray, cts: np.ndarray, eb: np.ndarray,
                    alpha: np.ndarray, gamma0: np.ndarray, max_iter: int = 100,
                    tol: float = 1e-3) -> EStepResult:
    """Plain numpy E-step, document by document (the reference the kernel is tested against)."""
    eb = np.asarray(eb)
    dt = eb.dtype
    alpha64 = np.asarray(alpha, np.float64)
    alpha_d = alpha64.astype(dt)
    gamma = np.array(gamma0, dtype=dt, copy=True)
    _check_inputs(np.asarray(indptr), np.asarray(lids), cts, eb, alpha64, gamma)
    n, K, U = len(indptr) - 1, eb.shape[1], eb.shape[0]
    eps = np.finfo(dt).eps
    acc = np.zeros((U, K), np.float64)
    iters = np.zeros(n, np.int32)
    conv = np.zeros(n, np.bool_)
    scores = np.zeros(n, np.float64)
    sum_elog = np.zeros(K, np.float64)

    def expect(g):
        g64 = g.astype(np.float64)
        e = psi(g64) - psi(g64.sum())
        return e, np.exp(e).astype(dt)

    for d in range(n):
        s, e_ = indptr[d], indptr[d + 1]
        ids = lids[s:e_]
        c = np.asarray(cts[s:e_]).astype(dt)
        B = eb[ids]                                  # n_d x K
        g = gamma[d].copy()
        elogt, et = expect(g)
        phin = B @ et + eps
        it = 0
        while it < max_iter:
            it += 1
            last = g
            g = alpha_d + et * ((c / phin) @ B)
            elogt, et = expect(g)
            phin = B @ et + eps
            if np.mean(np.abs(g.astype(np.float64) - last.astype(np.float64))) < tol:
                conv[d] = True
                break
        iters[d] = it
        gamma[d] = g
        c64 = c.astype(np.float64)
        p64 = phin.astype(np.float64)
        acc[ids] += np.outer(c64 / p64, et.astype(np.float64))
        g64 = g.astype(np.float64)
        sum_elog += elogt
        scores[d] = (np.sum(c64 * np.log(p64)) + np.sum((alpha64 - g64) * elogt)
                     + np.sum(gammaln(g64) - gammaln(alpha64))
                     + gammaln(alpha64.sum()) - gammaln(g64.sum()))
    return EStepResult(gamma, acc * eb.astype(np.float64), iters, conv, scores, sum_elog)
