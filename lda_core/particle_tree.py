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

from typing import Dict, List

import numpy as np
from numba import njit, types
from numba.typed import Dict as NDict
from numba.typed import List as NList

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
                t = tables[n]
                if j in t:
                    out[p, r] = t[j]
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
def _merge_into(dst, src):
    """dst[j] = src[j] for every j of src (src overrides: src is the child)."""
    for j, v in src.items():
        dst[j] = v


@njit(cache=True)
def _merge_missing(dst, src):
    """dst[j] = src[j] where dst has no entry (dst is the child, src its parent)."""
    for j, v in src.items():
        if j not in dst:
            dst[j] = v


@njit(cache=True)
def _table_len_sum(tables, alive):
    s = 0
    for n in range(len(tables)):
        if alive[n]:
            s += len(tables[n])
    return s


@njit(cache=True)
def _flatten(tables, alive):
    n_ent = 0
    for n in range(len(tables)):
        if alive[n]:
            n_ent += len(tables[n])
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


class TreeStore:
    """Particles as leaves of a tree of hash tables (see module docstring)."""

    kind = "tree"

    def __init__(self, n_particles: int, root: np.ndarray):
        P = int(n_particles)
        self.P = P
        self.n_pos = len(root)
        self.tables = NList()
        self.parent: List[int] = []
        self.children: List[set] = []
        self.alive: List[bool] = []
        self._free: List[int] = []
        r = self._new_node(-1)
        t = self.tables[r]
        if len(root):
            _fill_tables(self.tables, np.full(len(root), r, np.int64),
                         np.arange(len(root), dtype=np.int64), np.asarray(root, np.int64))
        self.leaf = np.array([self._new_node(r) for _ in range(P)], np.int64)
        del t

    # -- node bookkeeping -------------------------------------------------------------------
    def _new_node(self, parent: int) -> int:
        if self._free:
            n = self._free.pop()
            self.tables[n] = _new_table()
            self.parent[n] = parent
            self.children[n] = set()
            self.alive[n] = True
        else:
            n = len(self.parent)
            self.tables.append(_new_table())
            self.parent.append(parent)
            self.children.append(set())
            self.alive.append(True)
        if parent >= 0:
            self.children[parent].add(n)
        return n

    def _delete(self, n: int):
        p = self.parent[n]
        if p >= 0:
            self.children[p].discard(n)
        self.tables[n] = _new_table()       # free the memory
        self.alive[n] = False
        self.parent[n] = -1
        self.children[n] = set()
        self._free.append(n)

    def _parent_array(self) -> np.ndarray:
        return np.array(self.parent, np.int64)

    # -- interface -------------------------------------------------------------------------
    def append(self, start: int, zbuf: np.ndarray):
        m = zbuf.shape[1]
        if start != self.n_pos:
            raise ValueError("append at %d but %d positions are stored" % (start, self.n_pos))
        _tree_append(self.tables, self.leaf, start, np.asarray(zbuf, np.int64), m)
        self.n_pos += m

    def get(self, pos: np.ndarray) -> np.ndarray:
        out = _tree_get(self.tables, self._parent_array(), self.leaf,
                        np.asarray(pos, np.int64), len(self.parent))
        if out.size and out.min() < 0:
            raise RuntimeError("particle tree lost an assignment (position not found)")
        return out

    def set(self, pos: np.ndarray, val: np.ndarray):
        _tree_set(self.tables, self.leaf, np.asarray(pos, np.int64), np.asarray(val, np.int64))

    def resample(self, src_of: np.ndarray):
        """Slot q becomes a copy of particle src_of[q]; then prune and merge."""
        src_of = np.asarray(src_of, np.int64)
        P = self.P
        n_copies = np.bincount(src_of, minlength=P)
        old_leaf = self.leaf.copy()
        new_leaf = old_leaf.copy()
        # particles with several copies: their leaf becomes an inactive internal node
        for a in range(P):
            if n_copies[a] >= 2:
                slots = [a] + [q for q in range(P) if src_of[q] == a and q != a]
                for q in slots:
                    new_leaf[q] = self._new_node(old_leaf[a])
        # dead particles: delete the leaf and every ancestor left without children
        for a in range(P):
            if n_copies[a] == 0:
                n = old_leaf[a]
                for _ in range(len(self.parent) + 1):
                    p = self.parent[n]
                    self._delete(n)
                    if p < 0 or self.children[p]:
                        break
                    n = p
        self.leaf = new_leaf
        self._merge_chains()

    def _merge_chains(self):
        """Merge every inactive node that has a single child with that child."""
        leaves = set(int(x) for x in self.leaf)
        for _ in range(len(self.parent) + 1):       # each pass merges ≥ 1 pair or stops
            todo = [n for n in range(len(self.parent))
                    if self.alive[n] and n not in leaves and len(self.children[n]) == 1]
            if not todo:
                break
            for a in todo:
                if not self.alive[a] or len(self.children[a]) != 1:
                    continue
                c = next(iter(self.children[a]))
                ta, tc = self.tables[a], self.tables[c]
                if len(tc) <= len(ta):
                    # child's differences win; a takes c's place
                    _merge_into(ta, tc)
                    for g in list(self.children[c]):
                        self.parent[g] = a
                        self.children[a].add(g)
                    self.children[c] = set()
                    self.children[a].discard(c)
                    self.tables[c] = _new_table()
                    self.alive[c] = False
                    self.parent[c] = -1
                    self._free.append(c)
                    if c in leaves:
                        self.leaf[self.leaf == c] = a
                        leaves.discard(c)
                        leaves.add(a)
                else:
                    # parent's entries fill the child's gaps; c takes a's place
                    _merge_missing(tc, ta)
                    gp = self.parent[a]
                    self.parent[c] = gp
                    if gp >= 0:
                        self.children[gp].discard(a)
                        self.children[gp].add(c)
                    self.children[a] = set()
                    self.tables[a] = _new_table()
                    self.alive[a] = False
                    self.parent[a] = -1
                    self._free.append(a)

    def full(self, p: int) -> np.ndarray:
        return _full(self.tables, self._parent_array(), int(self.leaf[p]), self.n_pos,
                     len(self.parent))

    def depth(self) -> int:
        """Largest number of edges from a leaf to its root."""
        best = 0
        for n in set(int(x) for x in self.leaf):
            d = 0
            while self.parent[n] >= 0 and d <= len(self.parent):
                n = self.parent[n]
                d += 1
            best = max(best, d)
        return best

    def n_nodes(self) -> int:
        return int(sum(self.alive))

    def n_entries(self) -> int:
        return int(_table_len_sum(self.tables, np.array(self.alive, np.bool_)))

    def nbytes(self) -> int:
        return self.n_entries() * BYTES_PER_ENTRY

    # -- checkpoints -----------------------------------------------------------------------
    def to_arrays(self) -> Dict[str, np.ndarray]:
        alive = np.array(self.alive, np.bool_)
        node, key, val = _flatten(self.tables, alive)
        return {"tree_parent": self._parent_array(), "tree_alive": alive,
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
        if len(alive) != n or len(leaf) != P or (len(leaf) and (leaf.min() < 0 or leaf.max() >= n)) \
                or (len(node) and (node.min() < 0 or node.max() >= n)) \
                or np.any((parent < -1) | (parent >= n)):
            raise ValueError("checkpoint particle tree is inconsistent")
        self.n_pos = int(a["tree_npos"][0])
        self.tables = NList()
        for _ in range(n):
            self.tables.append(_new_table())
        self.parent = [int(x) for x in parent]
        self.alive = [bool(x) for x in alive]
        self.children = [set() for _ in range(n)]
        for c in range(n):
            if alive[c] and parent[c] >= 0:
                self.children[parent[c]].add(c)
        self._free = [i for i in range(n) if not alive[i]]
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
            raise ValueError("checkpoint particle assignments have shape %s, expected (%d, n)"
                             % (z.shape, P))
        self = cls(P, np.zeros(0, np.int16))
        self.z = np.zeros((P, max(1024, 2 * z.shape[1])), np.int16)
        self.z[:, :z.shape[1]] = z
        self.n_pos = z.shape[1]
        return self


STORES = {"tree": TreeStore, "naive": NaiveStore}
