"""Defaults of the remote exchange -- minibatch S, pieces P, word blocks B, staleness, E-step
threads -- chosen by the cluster model's time to a held-out score.

Pure Python (no Beam): the driver calls :func:`remote_defaults` with the runner's worker count
(``--num_workers`` / ``--max_num_workers``: :func:`workers_of`), the vCPUs of a worker
(``--machine_type``: :func:`vcpus_of`), the algorithm, K, V and D -- or
:func:`remote_defaults_for` with the Beam arguments -- and logs :attr:`RemoteDefaults.reason`.

The model (docs/cluster.md section 8; ``benchmarks/cluster_model.py`` prints every term with
the results file it came from). A step of the remote exchange (:mod:`pipelines.training.
beam_remote`) on W workers of c vCPUs, run as N = W c / T SDK processes of T E-step threads,
P = N pieces (one per process) and B word blocks, staleness s::

    barriers   = (2 - s) x stage latency            one shuffle barrier per step with s = 1
    requests   = shard requests of a reader x request latency   (the step's only object-store
                                                                 requests, on its critical path)
    E-step     = ceil(P/N) x (S/P) x t_doc / (T e(c))     e(c): the efficiency of c busy
                                                      vCPUs (threads or processes), measured
    read       = f x S x read CPU per document        a reader decodes whole shards (two cached
               f = 1 - (1 - 1/N)^(P x R / S)          per process): every process that gets a
                                                      piece of a shard of R rows decodes it once
    owners     = ceil(B/N) x g(K, V/B, u(S)/B)        the global step, spread over the blocks
    bytes      = (in + out) / bandwidth, per worker:  its pieces' documents, rows of their
                 words in and statistics out (cut by block), the requests; its blocks' rows from
                 the previous owner and on to the next, every piece's statistics of the block,
                 the rows served to every E-step; the B owners' partials (side input); its
                 processes' shard reads
    step       = barriers + requests + E-step + read + owners + bytes
    run        = windows x (job start + window files) + ceil(passes(S, s) x D / S) x step
    windows    = ceil(steps / min(REMOTE_WINDOW_STEPS, graph limit / graph bytes per step))

u(n) (the words of n documents) is min(V, n x non-zeros per document) over the ratio measured
on 20 Newsgroups at the same load n x non-zeros / V.
passes(S, s) is the passes the algorithm needs at S to reach the score one pass reaches at
its default minibatch (:class:`PassesCurve`, measured with the in-process trainer by
``benchmarks/passes_to_score_bench.py``): a run of at least ``ENOUGH_STEPS_PER_PASS`` steps a
pass needs one pass (Hoffman et al. 2010, Table 1: S from 1,024 to 16,384 equal on the 3.3 M
Wikipedia articles once tau0 is retuned, i.e. 201 steps a pass -- an ASSUMPTION where it is
extrapolated), fewer steps the measured curve at the same fraction of that.

The one-machine baseline (:func:`baseline_time`): the in-process trainer with c threads at
its best S, every step's reading, E-step and global step in one process. A worker's c vCPUs
and the one machine's c cores do the same E-step work per second (c e(c)), as threads or as
processes.

The constants below (:data:`MEASURED`) are what ``benchmarks/cluster_model.py`` derives from
the benchmark results (``tests/test_remote_defaults.py`` checks that they still agree); the
cloud constants (:class:`Cloud`) are assumptions, as the docs state.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

# the remote window (beam_train.REMOTE_WINDOW_STEPS; tests check they agree): one Dataflow job
REMOTE_WINDOW_STEPS = 900
GRAPH_LIMIT_BYTES = 10 * 1024 * 1024     # Dataflow's job graph
MAX_PIECES = 4096                        # lda_core.training.pieces.MAX_PIECES
MAX_BLOCKS = 4096                        # lda_core.algorithms.word_blocks.MAX_BLOCKS
ALGORITHMS = ("online-vb", "scvb0")      # the word-sharded algorithms (remote exchange)
DEFAULT_MINIBATCH = {"online-vb": 256, "scvb0": 100}
# Dataflow's default worker for batch jobs when --machine_type is absent
DEFAULT_MACHINE_TYPE = "n1-standard-1"
# a Hoffman-sized run has this many steps a pass at the largest S the paper found as good as
# S = 1,024 (3.3 M / 16,384); see the module docstring
ENOUGH_STEPS_PER_PASS = 3_300_000 / 16_384
# non-zeros per document when the driver does not know them: the 20 Newsgroups posts of the
# E-step benchmark (pass the corpus's own)
DEFAULT_NNZ_PER_DOC = 77.0
ID_BYTES = 8                             # a requested row id / a CSR word id and count
MINIBATCHES = tuple(2 ** k for k in range(8, 21))     # 256 .. 1,048,576


# ----------------------------------------------------------------------------- machines

_CUSTOM = re.compile(r"^(?:[a-z][a-z0-9]*-)?custom-(\d+)-\d+(?:-ext)?$")
_FAMILY = re.compile(r"^[a-z][a-z0-9]*-[a-z]+-(\d+)(?:-[a-z0-9]+)*$")
_SHARED_CORE = {"f1-micro": 1, "g1-small": 1, "e2-micro": 2, "e2-small": 2, "e2-medium": 2}


def vcpus_of(machine_type: Optional[str], default: Optional[int] = None) -> int:
    """vCPUs of a Compute Engine machine type: the number after the family and the class
    (``n1-standard-4`` -> 4, ``n2-highmem-8`` -> 8, ``c3-standard-4-lssd`` -> 4),
    ``custom-8-30720`` / ``n2-custom-8-30720`` -> 8, the shared-core types by name. None or ''
    -> ``default`` (else that of :data:`DEFAULT_MACHINE_TYPE`); an unknown name: ValueError
    naming it."""
    if not machine_type:
        return int(default) if default else vcpus_of(DEFAULT_MACHINE_TYPE)
    name = str(machine_type).strip().lower().rsplit("/", 1)[-1]   # a full resource URL too
    if name in _SHARED_CORE:
        return _SHARED_CORE[name]
    for pattern in (_CUSTOM, _FAMILY):
        m = pattern.match(name)
        if m and int(m.group(1)) >= 1:
            return int(m.group(1))
    raise ValueError("--machine_type %r: cannot tell its vCPUs (expected a name like "
                     "n1-standard-4, n2-highmem-8 or custom-8-30720)" % (machine_type,))


def option_value(argv: Sequence[str], name: str) -> Optional[str]:
    """The value of ``--name=V`` or ``--name V`` in a Beam argument list (the last one)."""
    out = None
    flag = "--" + name
    for i, a in enumerate(argv):
        if a.startswith(flag + "="):
            out = a.split("=", 1)[1]
        elif a == flag and i + 1 < len(argv):
            out = argv[i + 1]
    return out


def workers_of(argv: Sequence[str], default: int = 1) -> int:
    """The workers a remote run may use: the largest of ``--num_workers`` and
    ``--max_num_workers`` (``default`` when neither is given); ValueError on a bad value."""
    got = []
    for name in ("num_workers", "max_num_workers"):
        v = option_value(argv, name)
        if v is not None:
            try:
                n = int(v)
            except ValueError:
                n = 0
            if n < 1:
                raise ValueError("--%s=%s: expected a positive integer" % (name, v))
            got.append(n)
    return max(got) if got else int(default)


def machine_of(argv: Sequence[str]) -> Optional[str]:
    """``--machine_type`` (or its alias ``--worker_machine_type``) of a Beam argument list."""
    return option_value(argv, "machine_type") or option_value(argv, "worker_machine_type")


# ----------------------------------------------------------------------------- constants

@dataclass(frozen=True)
class Cloud:
    """Cluster constants: assumptions, not measurements (docs/cluster.md section 8)."""
    stage_latency_s: float = 1.0          # a shuffle barrier (the model's rows: 0.2, 1, 3)
    request_latency_s: float = 0.02       # one object-store request (GCS: ~10-50 ms)
    job_start_s: float = 240.0            # a Dataflow job's VMs booting, per window
    bandwidth_bytes_per_s: float = 250e6  # per worker, shuffle and object store
    shard_rows: int = 20_000              # vectorize's automatic sharding
    window_steps: int = REMOTE_WINDOW_STEPS
    # Dataflow batch list prices, us-central1 (disks, Shuffle and storage extra), and the
    # memory of an n1-standard vCPU
    price_per_vcpu_hour: float = 0.056
    price_per_gb_hour: float = 0.003557
    memory_gb_per_vcpu: float = 3.75

    def price_usd(self, workers: int, vcpus: int, seconds: float) -> float:
        """The list price of ``workers`` workers of ``vcpus`` vCPUs for ``seconds``."""
        per_hour = vcpus * (self.price_per_vcpu_hour
                            + self.memory_gb_per_vcpu * self.price_per_gb_hour)
        return workers * per_hour * seconds / 3600.0


@dataclass(frozen=True)
class PassesCurve:
    """Passes needed to reach the score of one pass at the default minibatch, against the
    steps a pass relative to the reference run's (``points``: (steps-a-pass ratio, passes),
    measured; ratio 1 is the reference: 1 pass). A run of n steps a pass takes ratio
    n / :data:`ENOUGH_STEPS_PER_PASS`; at or above 1, one pass; below the smallest ratio
    measured, no answer (None: the model does not extrapolate)."""
    points: Tuple[Tuple[float, float], ...]

    def passes(self, steps_per_pass: float) -> Optional[float]:
        x = steps_per_pass / ENOUGH_STEPS_PER_PASS
        pts = sorted(self.points, reverse=True)
        if x >= 1.0:
            return 1.0 * next((p for r, p in pts if r >= 1.0), 1.0)
        for (r1, p1), (r0, p0) in zip(pts, pts[1:]):
            if r0 <= x <= r1:
                w = math.log(r1 / x) / math.log(r1 / r0) if r1 > r0 else 0.0
                return max(p1 + w * (p0 - p1), 1.0)
        return None


@dataclass(frozen=True)
class Costs:
    """Per-algorithm measured constants (``benchmarks/cluster_model.py``: ``remote_costs``).

    ``cpu_s_per_nnz``: K -> E-step CPU seconds per non-zero, one thread, reading excluded;
    ``global_s``: K -> (seconds per row of the state, seconds per row touched) of one global
    step, one thread; ``thread_efficiency``: K -> speed-up of 2 threads over 1, over 2;
    ``row_bytes``, ``stats_bytes``: per topic-word value of a state row / of statistics;
    ``small_bytes``, ``partial_bytes``: (a, b) of a + b K bytes of a statistics cut's small
    part and of an owner's partial; ``read_cpu_s_per_nnz``, ``file_bytes_per_nnz``: decoding
    shards; ``union_ratio``: (load n nnz/doc / V, min(V, n nnz/doc) / the words n documents hold);
    ``requests_per_reader``: object-store requests of one reader task a step; ``passes``:
    staleness -> :class:`PassesCurve`; ``graph_bytes``: staleness -> job graph bytes a step."""
    cpu_s_per_nnz: Dict[int, float]
    global_s: Dict[int, Tuple[float, float]]
    thread_efficiency: Dict[int, float]
    row_bytes: float
    stats_bytes: float
    small_bytes: Tuple[float, float]
    partial_bytes: Tuple[float, float]
    read_cpu_s_per_nnz: float
    file_bytes_per_nnz: float
    union_ratio: Tuple[Tuple[float, float], ...]
    requests_per_reader: float
    passes: Dict[int, PassesCurve]
    graph_bytes: Dict[int, float]


def _by_k(table: Dict[int, float], K: int) -> float:
    """A per-K constant at K: log-log between the measured K, scaled linearly in K beyond."""
    ks = sorted(table)
    if K in table:
        return table[K]
    if len(ks) == 1:
        return table[ks[0]]
    lo, hi = (ks[0], ks[1]) if K < ks[0] else (ks[-2], ks[-1]) if K > ks[-1] else \
        max((a, b) for a, b in zip(ks, ks[1:]) if a <= K)
    if K < ks[0] or K > ks[-1]:
        return table[lo if K < lo else hi] * K / (lo if K < lo else hi)
    e = math.log(table[hi] / table[lo]) / math.log(hi / lo)
    return table[lo] * (K / lo) ** e


def thread_efficiency(costs: Costs, K: int, threads: int) -> float:
    """Efficiency of ``threads`` busy cores of one machine (E-step threads or processes): the
    measured two-thread efficiency per doubling (one: 1)."""
    if threads <= 1:
        return 1.0
    e2 = min(1.0, _by_k(costs.thread_efficiency, K))
    return e2 ** math.log2(threads)


def words_of(costs: Costs, n_docs: float, nnz_per_doc: float, V: int) -> float:
    """Words of ``n_docs`` documents: the bound min(V, n nnz/doc) over the measured ratio of
    bound to words at the same load n nnz/doc / V (``union_ratio``: (load, ratio); log-linear
    in the load between the points, the end ratios beyond; a ratio below 1 counts as 1)."""
    bound = min(float(V), max(1.0, n_docs) * nnz_per_doc)
    pts = sorted(costs.union_ratio)
    if not pts:
        return bound
    load = max(1.0, n_docs) * nnz_per_doc / V
    if load <= pts[0][0]:
        ratio = pts[0][1]
    elif load >= pts[-1][0]:
        ratio = pts[-1][1]
    else:
        (x0, r0), (x1, r1) = max(((a, b) for a, b in zip(pts, pts[1:]) if a[0] <= load),
                                 key=lambda ab: ab[0][0])
        w = math.log(load / x0) / math.log(x1 / x0)
        ratio = r0 + w * (r1 - r0)
    return max(1.0, min(bound, bound / max(ratio, 1.0)))


def global_step_s(costs: Costs, K: int, V: float, touched: float) -> float:
    """One thread's seconds of a global step over V rows of which ``touched`` have
    statistics."""
    per_row, per_touched = _global(costs, K)
    return per_row * V + per_touched * min(touched, V)


def _global(costs: Costs, K: int) -> Tuple[float, float]:
    a = {k: v[0] for k, v in costs.global_s.items()}
    b = {k: v[1] for k, v in costs.global_s.items()}
    return (_by_k(a, K) if all(a.values()) else 0.0), _by_k(b, K)


# ----------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class Shape:
    """A corpus and model: D documents of ``nnz_per_doc`` non-zeros, K topics, V words; the
    E-step CPU seconds per document (one thread) when measured on the corpus itself (else
    non-zeros x the per-non-zero cost at K)."""
    D: int
    K: int
    V: int
    nnz_per_doc: float = DEFAULT_NNZ_PER_DOC
    t_doc_s: Optional[float] = None


@dataclass(frozen=True)
class Layout:
    """W workers of c vCPUs as N = W c / T processes of T E-step threads; S, P, B, s."""
    W: int
    c: int
    S: int
    P: int
    B: int
    T: int
    s: int

    @property
    def processes(self) -> int:
        return self.W * max(1, self.c // self.T)


def t_doc(costs: Costs, shape: Shape) -> float:
    return shape.t_doc_s if shape.t_doc_s else shape.nnz_per_doc * _by_k(costs.cpu_s_per_nnz,
                                                                          shape.K)


def step_parts(costs: Costs, cloud: Cloud, shape: Shape, lay: Layout) -> Dict[str, float]:
    """Seconds of each term of one step (module docstring) and the bytes per worker."""
    K, V, nnz = shape.K, shape.V, shape.nnz_per_doc
    N, W = lay.processes, lay.W
    n_p = lay.S / lay.P
    u_p = words_of(costs, n_p, nnz, V)
    u_step = words_of(costs, lay.S, nnz, V)
    rb, sb = costs.row_bytes, costs.stats_bytes
    small = costs.small_bytes[0] + costs.small_bytes[1] * K
    partial = costs.partial_bytes[0] + costs.partial_bytes[1] * K
    pieces_per_worker = lay.P / W
    blocks_per_worker = math.ceil(lay.B / W)
    block_rows = V / lay.B
    # every process that gets a piece of a shard decodes that shard once (two cached)
    f = 1.0 - (1.0 - 1.0 / N) ** (lay.P * cloud.shard_rows / lay.S) if N > 1 else 1.0
    docs = pieces_per_worker * n_p * nnz * 2 * ID_BYTES
    estep_in = pieces_per_worker * u_p * K * rb + docs
    estep_out = pieces_per_worker * (u_p * K * sb + lay.B * small + u_p * ID_BYTES) + docs
    owner_in = blocks_per_worker * (block_rows * K * rb
                                    + lay.P * (u_p / lay.B * (K * sb + ID_BYTES) + small))
    owner_out = blocks_per_worker * (block_rows * K * rb + lay.P * u_p / lay.B * K * rb)
    partials = (N / W) * lay.B * partial
    read_bytes = (N / W) * f * lay.S * nnz * costs.file_bytes_per_nnz
    bytes_in = estep_in + owner_in + partials + read_bytes
    bytes_out = estep_out + owner_out
    return {
        "barriers": (2 - lay.s) * cloud.stage_latency_s,
        "requests": costs.requests_per_reader * cloud.request_latency_s,
        # c busy vCPUs of a worker, as threads or processes, each at the measured efficiency
        "estep": math.ceil(lay.P / N) * n_p * t_doc(costs, shape)
        / (lay.T * thread_efficiency(costs, K, lay.c)),
        "read": f * lay.S * nnz * costs.read_cpu_s_per_nnz,
        "owners": math.ceil(lay.B / N) * global_step_s(costs, K, block_rows, u_step / lay.B),
        "bytes": (bytes_in + bytes_out) / cloud.bandwidth_bytes_per_s,
        "bytes_in_per_worker": bytes_in, "bytes_out_per_worker": bytes_out,
        "read_fraction": f,
    }


STEP_TERMS = ("barriers", "requests", "estep", "read", "owners", "bytes")


def passes_needed(costs: Costs, shape: Shape, S: int, s: int) -> Optional[float]:
    curve = costs.passes.get(s)
    return None if curve is None else curve.passes(shape.D / S)


def steps_per_job(costs: Costs, cloud: Cloud, s: int) -> int:
    g = costs.graph_bytes.get(s)
    return int(min(cloud.window_steps, GRAPH_LIMIT_BYTES // g)) if g else cloud.window_steps


def run_time(costs: Costs, cloud: Cloud, shape: Shape, lay: Layout) -> Optional[dict]:
    """Seconds to the target score of a remote run (None: S outside the passes measured)."""
    passes = passes_needed(costs, shape, lay.S, lay.s)
    if passes is None:
        return None
    steps = math.ceil(passes * math.ceil(shape.D / lay.S) - 1e-9)
    return dict(steps_time(costs, cloud, shape, lay, steps), passes=passes)


def steps_time(costs: Costs, cloud: Cloud, shape: Shape, lay: Layout, steps: int,
               window_steps: Optional[int] = None) -> dict:
    """Seconds of ``steps`` steps of a remote run in windows of ``window_steps`` (default: as
    many as a job holds), each window a job: its start and its files, then the steps."""
    parts = step_parts(costs, cloud, shape, lay)
    step = sum(parts[k] for k in STEP_TERMS)
    windows = math.ceil(steps / (window_steps or steps_per_job(costs, cloud, lay.s)))
    state = shape.V * shape.K * costs.row_bytes
    window_files = ((2 * (2 + lay.s) + lay.B) * cloud.request_latency_s
                    + 2 * state / (lay.W * cloud.bandwidth_bytes_per_s))
    total = windows * (cloud.job_start_s + window_files) + steps * step
    terms = {"job starts": windows * cloud.job_start_s, "window files": windows * window_files}
    terms.update((k, steps * parts[k]) for k in STEP_TERMS)
    return {"layout": lay, "steps": steps, "windows": windows,
            "step_s": step, "parts": parts, "terms": terms, "total_s": total}


def baseline_time(costs: Costs, shape: Shape, c: int, S: int,
                  read_cpu_s_per_doc: Optional[float] = None) -> Optional[dict]:
    """Seconds to the target score of the in-process trainer on one machine of c cores at S:
    per step the minibatch read (one thread), its E-step on c threads, the global step."""
    passes = passes_needed(costs, shape, S, 0)
    if passes is None:
        return None
    read = (shape.nnz_per_doc * costs.read_cpu_s_per_nnz if read_cpu_s_per_doc is None
            else read_cpu_s_per_doc)
    estep = S * t_doc(costs, shape) / (c * thread_efficiency(costs, shape.K, c))
    glob = global_step_s(costs, shape.K, shape.V, words_of(costs, S, shape.nnz_per_doc,
                                                           shape.V))
    step = estep + S * read + glob
    steps = math.ceil(passes * math.ceil(shape.D / S) - 1e-9)
    return {"S": S, "passes": passes, "steps": steps, "step_s": step, "total_s": steps * step,
            "terms": {"E-step": steps * estep, "read": steps * S * read,
                      "global step": steps * glob}}


def best_baseline(costs: Costs, shape: Shape, c: int, sizes: Iterable[int] = ()) -> dict:
    """The in-process trainer's fastest S to the target (its default S and ``sizes``)."""
    got = [baseline_time(costs, shape, c, S) for S in sorted(set(sizes) | set(MINIBATCHES))
           if S <= shape.D]
    got = [g for g in got if g]
    if not got:
        raise ValueError("no minibatch size within the measured passes for D = %d" % shape.D)
    return min(got, key=lambda g: (g["total_s"], g["S"]))


def layouts(W: int, c: int, S_values: Iterable[int], staleness: Iterable[int] = (0, 1)
            ) -> List[Layout]:
    """The candidates: one piece per process with 1 thread (N = W c) or c threads (N = W),
    B = W or B = N, every S (at least one document a piece), every s."""
    out = []
    for S in S_values:
        for T in sorted({1, c}):
            N = W * max(1, c // T)
            for B in sorted({W, N}):
                P = N
                if P > MAX_PIECES or B > MAX_BLOCKS or S < P:
                    continue
                for s in staleness:
                    out.append(Layout(W, c, S, P, B, T, s))
    return out


def best_run(costs: Costs, cloud: Cloud, shape: Shape, W: int, c: int,
             S_values: Optional[Iterable[int]] = None, staleness: Iterable[int] = (0, 1)
             ) -> Optional[dict]:
    """The fastest candidate to the target score (ties: the smaller S, then s = 0, then fewer
    threads), or None when none is within the measured passes."""
    sizes = [S for S in (S_values or MINIBATCHES) if S <= shape.D]
    got = [run_time(costs, cloud, shape, lay) for lay in layouts(W, c, sizes, staleness)]
    got = [g for g in got if g]
    if not got:
        return None
    return min(got, key=lambda g: (round(g["total_s"], 6), g["layout"].S, g["layout"].s,
                                   g["layout"].T, g["layout"].B))


# ----------------------------------------------------------------------------- defaults

@dataclass(frozen=True)
class RemoteDefaults:
    """What :func:`remote_defaults` chose, the model's time for it and the line to log."""
    minibatch: int
    pieces: int
    word_blocks: int
    staleness: int
    threads: int
    workers: int
    vcpus: int
    predicted_s: float
    reason: str


def remote_defaults(workers: int, vcpus: Optional[int], algorithm: str, K: int, V: int, D: int,
                    nnz_per_doc: Optional[float] = None, cloud: Optional[Cloud] = None,
                    costs: Optional[Dict[str, Costs]] = None) -> RemoteDefaults:
    """S, P, B, staleness and E-step threads of a remote run on ``workers`` workers of
    ``vcpus`` vCPUs (None: :data:`DEFAULT_MACHINE_TYPE`'s) for ``algorithm`` (online-vb,
    scvb0) at K topics, V words and D documents: the candidate of :func:`best_run` (the
    model's least time to the score one pass reaches at the algorithm's default minibatch)."""
    if algorithm not in ALGORITHMS:
        raise ValueError("the remote exchange runs %s, not %r" % (" and ".join(ALGORITHMS),
                                                                  algorithm))
    W, c = max(1, int(workers)), vcpus_of(None, vcpus)
    cloud = cloud or Cloud()
    table = (costs or MEASURED)[algorithm]
    shape = Shape(int(D), int(K), int(V), float(nnz_per_doc or DEFAULT_NNZ_PER_DOC))
    best = best_run(table, cloud, shape, W, c)
    if best is None:
        S0 = DEFAULT_MINIBATCH[algorithm]
        lay = Layout(W, c, S0, min(W * c, MAX_PIECES), min(W, MAX_BLOCKS), 1, 1)
        return RemoteDefaults(S0, lay.P, lay.B, 1, 1, W, c, float("nan"),
                              "remote defaults: S=%d, P=%d, B=%d, staleness 1, 1 E-step thread "
                              "(D = %d: too few documents for the measured passes; the "
                              "algorithm's default minibatch)" % (S0, lay.P, lay.B, D))
    lay = best["layout"]
    reason = ("remote defaults: S=%d, P=%d, B=%d, staleness %d, %d E-step thread%s (%d workers x "
              "%d vCPUs; the cluster model's least time to the score of one pass at S=%d: "
              "%.3g pass(es) of %d steps of %.2f s, %d job%s, ~%s at %g s per barrier)"
              % (lay.S, lay.P, lay.B, lay.s, lay.T, "" if lay.T == 1 else "s", W, c,
                 DEFAULT_MINIBATCH[algorithm], best["passes"], math.ceil(D / lay.S),
                 best["step_s"], best["windows"], "" if best["windows"] == 1 else "s",
                 _duration(best["total_s"]), cloud.stage_latency_s))
    return RemoteDefaults(lay.S, lay.P, lay.B, lay.s, lay.T, W, c, best["total_s"], reason)


def remote_defaults_for(argv: Sequence[str], algorithm: str, K: int, V: int, D: int,
                        nnz_per_doc: Optional[float] = None, default_workers: int = 1
                        ) -> RemoteDefaults:
    """:func:`remote_defaults` for a Beam argument list: its workers (:func:`workers_of`) and
    its ``--machine_type``'s vCPUs (:func:`vcpus_of`; ValueError naming an unknown type)."""
    return remote_defaults(workers_of(argv, default_workers), vcpus_of(machine_of(argv)),
                           algorithm, K, V, D, nnz_per_doc)


def _duration(s: float) -> str:
    return "%.1f h" % (s / 3600) if s >= 3 * 3600 else "%.0f min" % (s / 60)


# The measured constants (benchmarks/cluster_model.py --defaults-constants prints this table
# from the results files; tests/test_remote_defaults.py checks they agree).
MEASURED: Dict[str, Costs] = {
    'online-vb': Costs(
        cpu_s_per_nnz={100: 1.18299e-06, 1000: 8.951784e-06},
        global_s={100: (0.0, 8.788e-07), 1000: (0.0, 2.269e-05)},
        thread_efficiency={100: 0.6435, 1000: 0.8061},
        row_bytes=8.0, stats_bytes=8.0023,
        small_bytes=(330.4444, 16.0056),
        partial_bytes=(210.8889, 8.0011),
        read_cpu_s_per_nnz=5.136e-08, file_bytes_per_nnz=2.21,
        union_ratio=((0.002773, 1.7346), (0.011091, 0.8045), (0.044363, 1.3429),
                     (0.177451, 1.4656), (0.709803, 2.495), (2.839211, 1.7163),
                     (11.356846, 1.1013), (45.427384, 1.0)),
        requests_per_reader=3.75,
        passes={0: PassesCurve(points=((1.0, 1.0), (0.257143, 1.8941), (0.071429, 6.8097))),
                1: PassesCurve(points=((1.0, 1.0), (0.257143, 1.8408), (0.071429, 5.6271)))},
        graph_bytes={1: 4486.8, 0: 8571.3}),
    'scvb0': Costs(
        cpu_s_per_nnz={100: 1.342472e-06, 1000: 2.2588369e-05},
        global_s={100: (0.0, 4.035e-07), 1000: (0.0, 2.871e-06)},
        thread_efficiency={100: 0.6435, 1000: 0.8061},
        row_bytes=8.0, stats_bytes=8.0039,
        small_bytes=(201.6667, 8.0033),
        partial_bytes=(210.8889, 8.0011),
        read_cpu_s_per_nnz=5.136e-08, file_bytes_per_nnz=2.21,
        union_ratio=((0.002773, 1.7346), (0.011091, 0.8045), (0.044363, 1.3429),
                     (0.177451, 1.4656), (0.709803, 2.495), (2.839211, 1.7163),
                     (11.356846, 1.1013), (45.427384, 1.0)),
        requests_per_reader=3.75,
        passes={0: PassesCurve(points=((1.0, 1.0), (0.393258, 1.7934), (0.101124, 8.0167))),
                1: PassesCurve(points=((1.0, 1.0), (0.393258, 2.5017), (0.101124, 7.9148)))},
        graph_bytes={1: 4486.8, 0: 8571.3}),
}
