"""Storage of the particles' topic assignments for the particle filter.

Two implementations of one interface, so that the filter can run on either and produce the
same assignments for the same random stream:

* :class:`TreeStore` — Canini, Shi & Griffiths (2009) §4: the particles are the leaves of a
  tree of hash tables. Each node stores only its differences from its parent (position ->
  topic); looking up z_j of particle p walks from p's leaf towards the root until a table holds
  j. Resampling a particle c ≥ 2 times turns its leaf into an inactive internal node with c new
  empty children (O(c), no copying of history). After each resampling, dead subtrees are
  pruned and every inactive node left with a single child is merged with that child (the
  smaller table is merged into the larger one), so every internal node has ≥ 2 children and
  the depth is at most P. Only leaves are ever written to, so an assignment change never has
  to be pushed down to children.
* :class:`NaiveStore` — every particle owns a dense array of its assignments, and resampling
  copies whole arrays (O(P·i) per resampling: the quadratic cost the tree removes).

Interface: ``append(start, zbuf)`` (new positions start.. for every particle), ``get(pos)`` and
``set(pos, values)`` with ``pos`` a (P, R) array of positions (row p for particle p),
``resample(src_of)`` (slot q becomes a copy of particle ``src_of[q]``), ``full(p)``,
``n_entries()``, ``nbytes()``, ``depth()``, and ``to_arrays`` / ``from_arrays`` for checkpoints.
"""
from __future__ import annotations

from typing import Dict

import numpy as np
from numba import njit, types
from numba.typed import Dict as NDict
from numba.typed import List as NList

from lda_core.errors import DataIntegrityError

_KEY = types.int64
_VAL = types.int64
# numba's typed dict stores key, value and hash per entry (8 bytes each) plus an index slot;
# used for the memory estimate next to the measured process RSS
BYTES_PER_ENTRY = 8 * 3 + 8


def _new_table():
    return NDict.empty(key_type=_KEY, value_type=_VAL)


def slot_mapping(copies: np.ndarray) -> np.ndarray:
    """From resampling counts to slots: ``src_of[q]`` is the particle slot q copies. Particles
    with ≥ 1 copy keep their own slot; their extra copies fill the dead slots in increasing
    order (the same convention for every store, so they stay in step)."""
    copies = np.asarray(copies, np.int64)
    P = len(copies)
    if copies.sum() != P or np.any(copies < 0):
        raise ValueError("resampling counts must be >= 0 and sum to P=%d" % P)
    src = np.arange(P, dtype=np.int64)
    dead = [q for q in range(P) if copies[q] == 0]
    j = 0
    for a in range(P):
        for _ in range(int(copies[a]) - 1):
            src[dead[j]] = a
            j += 1
    return src


# ------------------------------------------------------------------------------------------
# numba helpers over the list of tables
# ------------------------------------------------------------------------------------------
@njit(cache=True)
def _tree_get(tables, parent, leaf, pos, max_depth):
    P, R = pos.shape
    out = np.empty((P, R), np.int64)
    for p in range(P):
        for r in range(R):
            j = pos[p, r]
            n = leaf[p]
            found = False
            for _ in range(max_depth + 1):        # capped walk to the root
                v = tables[n].get(j, -1)
                if v >= 0:
                    out[p, r] = v
                    found = True
                    break
                n = parent[n]
                if n < 0:
                    break
            if not found:
                out[p, r] = -1
    return out


@njit(cache=True)
def _tree_set(tables, leaf, pos, val):
    P, R = pos.shape
    for p in range(P):
        t = tables[leaf[p]]
        for r in range(R):
            t[pos[p, r]] = val[p, r]


@njit(cache=True)
def _tree_append(tables, leaf, start, zbuf, m):
    for p in range(len(leaf)):
        t = tables[leaf[p]]
        for i in range(m):
            t[start + i] = zbuf[p, i]


@njit(cache=True)
def _table_len_sum(tables, alive):
    s = 0
    for n in range(len(tables)):
        if alive[n]:
            s += len(tables[n])
    return s


@njit(cache=True)
def _flatten(tables, alive):
    n_ent = _table_len_sum(tables, alive)
    node = np.empty(n_ent, np.int64)
    key = np.empty(n_ent, np.int64)
    val = np.empty(n_ent, np.int64)
    i = 0
    for n in range(len(tables)):
        if alive[n]:
            for j, v in tables[n].items():
                node[i] = n
                key[i] = j
                val[i] = v
                i += 1
    return node, key, val


@njit(cache=True)
def _fill_tables(tables, node, key, val):
    for i in range(len(node)):
        tables[node[i]][key[i]] = val[i]


@njit(cache=True)
def _full(tables, parent, leaf_node, n_pos, max_depth):
    """Dense assignments of one leaf: nearest-first, so a child's entry wins over its parent's."""
    out = np.full(n_pos, -1, np.int64)
    n = leaf_node
    for _ in range(max_depth + 1):
        for j, v in tables[n].items():
            if j < n_pos and out[j] < 0:
                out[j] = v
        n = parent[n]
        if n < 0:
            break
    return out


@njit(cache=True)
def _alloc(tables, parent, nchild, alive, par):
    """A free node id (its table emptied), child of ``par`` (-1: a root)."""
    for n in range(len(alive)):
        if not alive[n]:
            tables[n] = NDict.empty(key_type=types.int64, value_type=types.int64)
            alive[n] = True
            parent[n] = par
            nchild[n] = 0
            if par >= 0:
                nchild[par] += 1
            return n
    return -1


@njit(cache=True)
def _free(tables, parent, nchild, alive, n):
    p = parent[n]
    if p >= 0:
        nchild[p] -= 1
    tables[n] = NDict.empty(key_type=types.int64, value_type=types.int64)
    alive[n] = False
    parent[n] = -1
    nchild[n] = 0


@njit(cache=True)
def _tree_resample(tables, parent, nchild, alive, leaf, src_of):
    """Slot q becomes a copy of particle src_of[q]: a particle with c >= 2 copies turns its leaf
    into an inactive internal node with c new (empty) leaves; a dead particle's leaf is deleted
    with every ancestor left childless; then every inactive node with a single child is merged
    with it (smaller table into larger). Returns False if the node pool ran out."""
    P = len(leaf)
    cap = len(alive)
    ncopies = np.zeros(P, np.int64)
    for q in range(P):
        ncopies[src_of[q]] += 1
    old = leaf.copy()
    for a in range(P):
        if ncopies[a] >= 2:
            for q in range(P):
                if src_of[q] == a:
                    n = _alloc(tables, parent, nchild, alive, old[a])
                    if n < 0:
                        return False
                    leaf[q] = n
    for a in range(P):
        if ncopies[a] == 0:
            n = old[a]
            for _ in range(cap):
                p = parent[n]
                _free(tables, parent, nchild, alive, n)
                if p < 0 or nchild[p] > 0:
                    break
                n = p
    is_leaf = np.zeros(cap, np.bool_)
    for q in range(P):
        is_leaf[leaf[q]] = True
    for _ in range(cap):                      # each pass merges >= 1 pair or stops
        changed = False
        for a in range(cap):
            if not alive[a] or is_leaf[a] or nchild[a] != 1:
                continue
            c = -1
            for n in range(cap):
                if alive[n] and parent[n] == a:
                    c = n
                    break
            ta = tables[a]
            tc = tables[c]
            if len(tc) <= len(ta):
                # the child's differences win; a takes c's place
                for j, v in tc.items():
                    ta[j] = v
                for g in range(cap):
                    if alive[g] and parent[g] == c:
                        parent[g] = a
                nchild[a] = nchild[c]
                if is_leaf[c]:
                    for q in range(P):
                        if leaf[q] == c:
                            leaf[q] = a
                    is_leaf[c] = False
                    is_leaf[a] = True
                tables[c] = NDict.empty(key_type=types.int64, value_type=types.int64)
                alive[c] = False
                parent[c] = -1
                nchild[c] = 0
            else:
                # the parent's entries fill the child's gaps; c takes a's place
                for j, v in ta.items():
                    if j not in tc:
                        tc[j] = v
                parent[c] = parent[a]
                tables[a] = NDict.empty(key_type=types.int64, value_type=types.int64)
                alive[a] = False
                parent[a] = -1
                nchild[a] = 0
            changed = True
        if not changed:
            break
    return True


@njit(cache=True)
def _depth(parent, leaf):
    best = 0
    for q in range(len(leaf)):
        n = leaf[q]
        d = 0
        for _ in range(len(parent)):
            if parent[n] < 0:
                break
            n = parent[n]
            d += 1
        if d > best:
            best = d
    return best


class TreeStore:
    """Particles as leaves of a tree of hash tables (see module docstring). The node pool
    (3P + 1 nodes: ≤ P leaves, ≤ P − 1 internal nodes, P transient new leaves) and all tree
    surgery live in numba; ``tables[n]`` is node n's dict position -> topic."""

    kind = "tree"

    def __init__(self, n_particles: int, root: np.ndarray):
        P = int(n_particles)
        self.P = P
        self.n_pos = len(root)
        cap = 3 * P + 1
        self.tables = NList()
        for _ in range(cap):
            self.tables.append(_new_table())
        self.parent = np.full(cap, -1, np.int64)
        self.nchild = np.zeros(cap, np.int64)
        self.alive = np.zeros(cap, np.bool_)
        r = _alloc(self.tables, self.parent, self.nchild, self.alive, -1)
        if len(root):
            _fill_tables(self.tables, np.full(len(root), r, np.int64),
                         np.arange(len(root), dtype=np.int64), np.asarray(root, np.int64))
        self.leaf = np.array([_alloc(self.tables, self.parent, self.nchild, self.alive, r)
                              for _ in range(P)], np.int64)

    def append(self, start: int, zbuf: np.ndarray):
        m = zbuf.shape[1]
        if start != self.n_pos:
            raise ValueError("append at %d but %d positions are stored" % (start, self.n_pos))
        _tree_append(self.tables, self.leaf, start, zbuf, m)
        self.n_pos += m

    def get(self, pos: np.ndarray) -> np.ndarray:
        out = _tree_get(self.tables, self.parent, self.leaf, np.asarray(pos, np.int64),
                        len(self.parent))
        if out.size and out.min() < 0:
            raise RuntimeError("particle tree lost an assignment (position not found)")
        return out

    def set(self, pos: np.ndarray, val: np.ndarray):
        _tree_set(self.tables, self.leaf, np.asarray(pos, np.int64), np.asarray(val, np.int64))

    def resample(self, src_of: np.ndarray):
        """Slot q becomes a copy of particle src_of[q]; then prune and merge."""
        if not _tree_resample(self.tables, self.parent, self.nchild, self.alive, self.leaf,
                              np.asarray(src_of, np.int64)):
            raise RuntimeError("particle tree node pool exhausted (bug: the pool holds 3P+1)")

    def full(self, p: int) -> np.ndarray:
        return _full(self.tables, self.parent, int(self.leaf[p]), self.n_pos, len(self.parent))

    def depth(self) -> int:
        """Largest number of edges from a leaf to its root."""
        return int(_depth(self.parent, self.leaf))

    def n_nodes(self) -> int:
        return int(self.alive.sum())

    def n_entries(self) -> int:
        return int(_table_len_sum(self.tables, self.alive))

    def nbytes(self) -> int:
        return self.n_entries() * BYTES_PER_ENTRY

    # -- checkpoints -----------------------------------------------------------------------
    def to_arrays(self) -> Dict[str, np.ndarray]:
        node, key, val = _flatten(self.tables, self.alive)
        return {"tree_parent": self.parent.copy(), "tree_alive": self.alive.copy(),
                "tree_leaf": self.leaf.copy(), "tree_node": node, "tree_pos": key,
                "tree_topic": val.astype(np.int16),
                "tree_npos": np.array([self.n_pos], np.int64)}

    @classmethod
    def from_arrays(cls, P: int, a: Dict[str, np.ndarray]) -> "TreeStore":
        self = cls.__new__(cls)
        self.P = int(P)
        parent = np.asarray(a["tree_parent"], np.int64)
        alive = np.asarray(a["tree_alive"], np.bool_)
        n = len(parent)
        leaf = np.asarray(a["tree_leaf"], np.int64)
        node = np.asarray(a["tree_node"], np.int64)
        if n != 3 * P + 1 or len(alive) != n or len(leaf) != P \
                or (len(leaf) and (leaf.min() < 0 or leaf.max() >= n)) \
                or (len(node) and (node.min() < 0 or node.max() >= n)) \
                or np.any((parent < -1) | (parent >= n)):
            raise DataIntegrityError("checkpoint particle tree is inconsistent")
        self.n_pos = int(a["tree_npos"][0])
        self.tables = NList()
        for _ in range(n):
            self.tables.append(_new_table())
        self.parent = parent.copy()
        self.alive = alive.copy()
        self.nchild = np.zeros(n, np.int64)
        for c in range(n):
            if alive[c] and parent[c] >= 0:
                self.nchild[parent[c]] += 1
        self.leaf = leaf.copy()
        _fill_tables(self.tables, node, np.asarray(a["tree_pos"], np.int64),
                     np.asarray(a["tree_topic"], np.int64))
        return self


class NaiveStore:
    """Every particle owns a dense copy of its assignments; resampling copies whole rows."""

    kind = "naive"

    def __init__(self, n_particles: int, root: np.ndarray):
        self.P = int(n_particles)
        self.n_pos = len(root)
        self.z = np.zeros((self.P, max(1024, 2 * len(root))), np.int16)
        self.z[:, :len(root)] = np.asarray(root, np.int16)[None, :]

    def append(self, start: int, zbuf: np.ndarray):
        m = zbuf.shape[1]
        if start != self.n_pos:
            raise ValueError("append at %d but %d positions are stored" % (start, self.n_pos))
        if start + m > self.z.shape[1]:
            z = np.zeros((self.P, max(2 * self.z.shape[1], start + m)), np.int16)
            z[:, :self.n_pos] = self.z[:, :self.n_pos]
            self.z = z
        self.z[:, start:start + m] = zbuf
        self.n_pos += m

    def get(self, pos: np.ndarray) -> np.ndarray:
        pos = np.asarray(pos, np.int64)
        return self.z[np.arange(self.P)[:, None], pos].astype(np.int64)

    def set(self, pos: np.ndarray, val: np.ndarray):
        pos = np.asarray(pos, np.int64)
        for r in range(pos.shape[1]):      # in order, so a repeated position keeps the last
            self.z[np.arange(self.P), pos[:, r]] = val[:, r]

    def resample(self, src_of: np.ndarray):
        n = self.n_pos
        for q, a in enumerate(np.asarray(src_of)):
            if a != q:
                self.z[q, :n] = self.z[a, :n]

    def full(self, p: int) -> np.ndarray:
        return self.z[p, :self.n_pos].astype(np.int64)

    def depth(self) -> int:
        return 0

    def n_entries(self) -> int:
        return self.P * self.n_pos

    def nbytes(self) -> int:
        return self.z.nbytes

    def to_arrays(self) -> Dict[str, np.ndarray]:
        return {"naive_z": self.z[:, :self.n_pos].copy()}

    @classmethod
    def from_arrays(cls, P: int, a: Dict[str, np.ndarray]) -> "NaiveStore":
        z = np.asarray(a["naive_z"], np.int16)
        if z.ndim != 2 or z.shape[0] != P:
            raise DataIntegrityError(
                "checkpoint particle assignments have shape %s, expected (%d, n)"
                % (z.shape, P))
        self = cls(P, np.zeros(0, np.int16))
        self.z = np.zeros((P, max(1024, 2 * z.shape[1])), np.int16)
        self.z[:, :z.shape[1]] = z
        self.n_pos = z.shape[1]
        return self


STORES = {"tree": TreeStore, "naive": NaiveStore}
