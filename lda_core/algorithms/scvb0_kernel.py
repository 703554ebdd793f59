"""The SCVB0 E-step as a numba kernel (Foulds, Boyles, DuBois, Smyth & Welling 2013).

Per document j (C_j tokens), with the topic statistics frozen for the minibatch, every distinct
word w of the document is one "clump" of m = n_jw copies. Over ``passes`` = burn-in + 1 passes
(clumps visited in a per-document random order derived from (seed, step, doc id)):

    γ_k ∝ (N^Φ_wk + η) / (N^Z_k + Vη) · (N^Θ_jk + α)                      (paper eq. 5)
    ρ^Θ = min(1, s_θ (τ_θ + t)^-κ_θ),  t = updates made so far in this document (from 0)
    N^Θ_j ← (1-ρ^Θ)^m N^Θ_j + C_j γ (1 - (1-ρ^Θ)^m)                       (eq. 9, clumping)

and on the last pass the minibatch statistic N̂^Φ_w += m γ (γ before the N^Θ update, as in
Algorithm 2). The C/|M| scaling is applied by the global step. N^Θ_j starts at C_j/K.

The first factor is the "tile": a U x K float64 array for the U distinct words of the
minibatch, computed once per minibatch from the lazily scaled state. Documents are split into
contiguous chunks processed in parallel (``prange``; the only parallel region of a local
step), each chunk summing into its own block of the rows its documents touch; a piece's sum is
its chunks' blocks added in chunk order, and the statistics of several pieces (consecutive
runs of chunks) are their sums added in piece order -- exactly the sums of computing each
piece on its own and merging them in piece order (a row a chunk or piece does not touch
adds nothing). Each document's computation depends only on the tile and its own seed, so the
bits do not depend on the thread count.
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import numba
import numpy as np
from numba import prange


def doc_seeds(seed: int, step: int, doc_ids: Sequence[str], tag: str = "") -> np.ndarray:
    """A 32-bit seed per document, a hash of (tag, seed, step, doc id) (uint32 as int64)."""
    out = np.empty(len(doc_ids), np.int64)
    prefix = ("%s:%d:%d:" % (tag, int(seed), int(step))).encode()
    for i, d in enumerate(doc_ids):
        h = hashlib.blake2b(prefix + str(d).encode("utf-8", "surrogatepass"), digest_size=4)
        out[i] = int.from_bytes(h.digest(), "little")
    return out


@numba.njit(fastmath=True, cache=True)
def scvb0_doc(lo, hi, local_ids, counts, tile, alpha, passes, s_th, tau_th, kappa_th,
              seed, shuffle, ntheta, gamma, order, acc, acc_ids, accumulate):
    """One document (positions lo:hi of the CSR arrays); fills ``ntheta`` (K); returns updates.

    ``acc`` receives m·γ on the last pass when ``accumulate``, position i's in row
    ``acc_ids[i]``."""
    K = tile.shape[1]
    n = hi - lo
    cj = 0.0
    for i in range(lo, hi):
        cj += counts[i]
    for k in range(K):
        ntheta[k] = cj / K
    for i in range(n):
        order[i] = lo + i
    if shuffle:
        np.random.seed(seed)
    t = 0
    for p in range(passes):
        if shuffle:
            for i in range(n - 1, 0, -1):       # Fisher-Yates, per pass
                j = np.random.randint(0, i + 1)
                tmp = order[i]
                order[i] = order[j]
                order[j] = tmp
        last = accumulate and (p == passes - 1)
        for ii in range(n):
            pos = order[ii]
            u = local_ids[pos]
            m = counts[pos]
            norm = 0.0
            for k in range(K):
                g = tile[u, k] * (ntheta[k] + alpha)
                gamma[k] = g
                norm += g
            inv = 1.0 / norm
            rho = s_th * (tau_th + t) ** (-kappa_th)
            if rho > 1.0:
                rho = 1.0
            t += 1
            # (1-ρ)^m via exp/log: LLVM's fast-math turns pow(x, int) into __powidf2
            if rho >= 1.0:
                dec = 0.0
            else:
                dec = np.exp(m * np.log(1.0 - rho))
            w = cj * (1.0 - dec)
            if last:
                a = acc_ids[pos]
                for k in range(K):
                    g = gamma[k] * inv
                    acc[a, k] += m * g
                    ntheta[k] = dec * ntheta[k] + w * g
            else:
                for k in range(K):
                    ntheta[k] = dec * ntheta[k] + w * gamma[k] * inv
    return t


@numba.njit(cache=True)
def chunk_rows(indptr, local_ids, chunks, U):
    """Each chunk's block of rows (the distinct ``local_ids`` of its documents, in order of
    first use): (``where[c, u]``, the row of ``u`` in chunk ``c``'s block or -1; the chunks'
    offsets into one array of all the blocks; each position's row in its chunk's block)."""
    C = chunks.shape[0] - 1
    where = np.full((C, U), -1, np.int64)
    offsets = np.zeros(C + 1, np.int64)
    acc_ids = np.empty(local_ids.shape[0], np.int64)
    for c in range(C):
        n = 0
        for pos in range(indptr[chunks[c]], indptr[chunks[c + 1]]):
            u = local_ids[pos]
            if where[c, u] < 0:
                where[c, u] = n
                n += 1
            acc_ids[pos] = where[c, u]
        offsets[c + 1] = offsets[c] + n
    return where, offsets, acc_ids


@numba.njit(parallel=True, fastmath=True, cache=True)
def scvb0_estep(indptr, local_ids, counts, tile, alpha, passes, s_th, tau_th, kappa_th,
                seeds, shuffle, chunks, piece_chunks, accumulate):
    """E-step over a minibatch cut into pieces of chunks: ``chunks`` (C+1 document offsets),
    piece p being chunks ``piece_chunks[p]`` .. ``piece_chunks[p+1] - 1``. Returns (N^Θ
    n x K, N̂^Φ U x K float64 sums of m·γ, N̂^Z K, updates per document); the sums are the
    pieces' added in piece order, each piece's its chunks' added in chunk order, N̂^Z each
    piece's rows added in row order (module docstring)."""
    n_docs = indptr.shape[0] - 1
    U, K = tile.shape
    C = chunks.shape[0] - 1
    ntheta = np.zeros((n_docs, K), np.float64)
    updates = np.zeros(n_docs, np.int64)
    if accumulate:
        where, offsets, acc_ids = chunk_rows(indptr, local_ids, chunks, U)
    else:
        where, offsets = np.zeros((C, 0), np.int64), np.zeros(C + 1, np.int64)
        acc_ids = np.zeros(local_ids.shape[0], np.int64)
    acc = np.zeros((max(offsets[C], 1), K), np.float64)
    maxlen = 0
    for d in range(n_docs):
        if indptr[d + 1] - indptr[d] > maxlen:
            maxlen = indptr[d + 1] - indptr[d]
    for c in prange(C):
        gamma = np.empty(K, np.float64)
        order = np.empty(max(maxlen, 1), np.int64)
        a = acc[offsets[c]:max(offsets[c + 1], offsets[c] + 1)]
        for d in range(chunks[c], chunks[c + 1]):
            lo, hi = indptr[d], indptr[d + 1]
            if hi == lo:
                continue
            updates[d] = scvb0_doc(lo, hi, local_ids, counts, tile, alpha, passes, s_th,
                                   tau_th, kappa_th, seeds[d], shuffle, ntheta[d], gamma,
                                   order, a, acc_ids, accumulate)
    P = piece_chunks.shape[0] - 1
    nz = np.zeros(K, np.float64)
    if not accumulate:
        return ntheta, np.zeros((0, K), np.float64), nz, updates
    # serial reduction, row by row: a second parallel region costs more in thread wake-ups
    # than it saves at minibatch sizes
    out = np.zeros((U, K), np.float64)
    piece_nz = np.zeros((P, K), np.float64)
    s = np.empty(K, np.float64)
    for u in range(U):
        for p in range(P):
            used = False
            for c in range(piece_chunks[p], piece_chunks[p + 1]):
                i = where[c, u]
                if i < 0:
                    continue
                i += offsets[c]
                if not used:
                    for k in range(K):
                        s[k] = 0.0
                    used = True
                for k in range(K):
                    s[k] += acc[i, k]
            if used:
                for k in range(K):
                    piece_nz[p, k] += s[k]
                    out[u, k] += s[k]
    for p in range(P):
        for k in range(K):
            nz[k] += piece_nz[p, k]
    return ntheta, out, nz, updates


def chunk_bounds(pieces, n_chunks: int):
    """(chunks, piece_chunks) of :func:`scvb0_estep` for the pieces ``[(lo, hi), ...]`` (their
    document ranges, in order): each piece cut into ``min(n_chunks, its documents)`` runs of
    ``ceil(documents / chunks)`` documents (the last ones shorter or empty)."""
    chunks, piece_chunks = [0], [0]
    for lo, hi in pieces:
        n = hi - lo
        c = max(1, min(n_chunks, n))
        per = -(-n // c) if n else 0
        for j in range(c):
            chunks.append(lo + min(n, (j + 1) * per))
        piece_chunks.append(len(chunks) - 1)
    return np.array(chunks, np.int64), np.array(piece_chunks, np.int64)


@numba.njit(fastmath=True, cache=True)
def lazy_tile(rows, ntilde, pi, nz, eta, n_words):
    """(π·Ñ[rows] + η) / (N^Z + Vη): the minibatch's U x K topic factor (float64)."""
    U = rows.shape[0]
    K = ntilde.shape[1]
    inv = np.empty(K, np.float64)
    for k in range(K):
        inv[k] = 1.0 / (nz[k] + n_words * eta)
    out = np.empty((U, K), np.float64)
    for i in range(U):
        r = rows[i]
        for k in range(K):
            out[i, k] = (pi * ntilde[r, k] + eta) * inv[k]
    return out


@numba.njit(cache=True)
def lazy_add_rows(ntilde, rows, values, scale):
    """Ñ[rows] += scale · values (rows unique): touches only the minibatch's rows."""
    K = ntilde.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for k in range(K):
            ntilde[r, k] += scale * values[i, k]
