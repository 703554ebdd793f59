"""Worker processes on one machine that keep their own copy of the state: one Beam stage per
window, the steps exchanged through the local scratch folder.

With local worker processes (the DirectRunner's ``multi_processing`` mode, a local worker
pool) every Beam stage costs a scheduling round trip to every worker and a side input
materialised for it, so the steps of an unrolled window do not run as stages of their own.
The window is **one** stage: :class:`ChainedWindowFn` over the read tasks of the window's first
step (one element per piece, which Beam spreads over the worker processes). Each element that
reaches a worker process starts a *participant* (:class:`WindowRun`) that runs the whole window
with its own copy of the state:

* for each step ``t``: it claims pieces of minibatch ``t`` -- its element's piece first, then
  any piece no one has claimed -- by creating a claim file (``O_EXCL``: exactly one
  participant gets each piece), runs their E-step and spills their statistics to the scratch
  folder (:func:`pipelines.training.beam_steps.piece_statistics`);
* to go on to step ``t+1`` it waits for every piece of ``t`` (its own and the other
  participants'), sums them in piece order (:func:`pipelines.training.beam_stats.sum_in_order`)
  and applies the global step to its copy itself: the same sums in the same order as the
  two-stage window's single global-step worker, so every copy, and the final state, is bit
  for bit the one of the two-stage window and of the in-process trainer with the same pieces;
* the first participant to reach step ``t+1`` writes the step's info for the driver and
  frees the files of step ``t-1``; the first to finish its pieces of ``t`` writes state ``t``
  to the scratch folder while the others are still busy (what the driver reads back when the
  next step fails);
* after the last step, one participant (claim) applies the last global step, publishes the
  final state and yields its reference.

Nothing depends on how many participants there are or on when they start: a participant
alone claims every piece (a runner that runs the elements one after the other), one that
starts after the window's files have moved on (``gone`` marks) or after the window has ended
(``done``) stops at once, and one that waits far longer for a piece than pieces take computes
that piece itself (the same bits: a piece depends only on the state and its documents). A
participant that fails marks the window ``abort`` so the others stop waiting.

A refused global step (non-finite statistics) is refused identically by every participant:
the one that writes the step's info stores the error for the driver and none goes further.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Dict, List, Optional, Set

from pipelines.runtime import scratch as scratch_space
from pipelines.training import beam_cost, beam_state, scratch_names
from pipelines.training.beam_plan import ReadPlan, ReadTask, StepPlan
from pipelines.training.beam_state import StateRef
from pipelines.training.beam_stats import SpilledStats, sum_in_order
from pipelines.training.beam_steps import (LeanDoFn, StepMetrics, global_step_info,
                                           piece_statistics, remove_quietly, store_step_info)

logger = logging.getLogger(__name__)

# the phases every worker runs for every step in this mode (their seconds overlap in wall time)
PARALLEL_PHASES = ("read", "estep", "stats_encode", "stats_decode", "stats_combine",
                   "global_step", "state_delivery", "stats_wait")

# waiting for another participant's piece: polled with this backoff (seconds) ...
POLL_MIN, POLL_MAX = 0.0005, 0.005
# ... and computed here after waiting this long, or this many times the slowest piece so far
STEAL_AFTER_S, STEAL_AFTER_PIECES = 60.0, 20.0

_LOCK = threading.Lock()
# runs with a participant in this process: a second element of the same run reaching this
# process while one runs leaves the window to it (one copy of the state per process)
_ACTIVE: Set[str] = set()


def state_path(scratch: str, position: int) -> str:
    return scratch_names.state_path(scratch, position)


def _mark_path(scratch: str, name: str) -> str:
    return os.path.join(scratch, scratch_names.chain_mark(name))


def claim(scratch: str, name: str) -> bool:
    """Whether this call created the claim ``name`` (exactly one caller does)."""
    try:
        os.close(os.open(_mark_path(scratch, "claim-" + name),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return True
    except FileExistsError:
        return False


def _claimed(scratch: str, name: str) -> bool:
    return os.path.exists(_mark_path(scratch, "claim-" + name))


def _mark(scratch: str, name: str, text: str = "") -> None:
    with open(_mark_path(scratch, name), "w") as f:
        f.write(text)


def _marked(scratch: str, name: str) -> bool:
    return os.path.exists(_mark_path(scratch, name))


def _piece_name(position: int, piece: int) -> str:
    return scratch_names.chain_name("piece", position, piece)


def _load(path: str, n_threads: Optional[int]):
    t0 = time.perf_counter()
    algo = beam_state.load_algorithm(path)
    beam_cost.report("state_delivery", time.perf_counter() - t0, beam_state.state_file_size(path))
    beam_state.set_threads(algo, n_threads)
    return algo


class _Stop(Exception):
    """This participant leaves the window (others run it, or it has ended or failed)."""


class WindowRun:
    """One participant's run of the window (module docstring): ``steps`` (their positions
    and sizes), ``plan`` (the window's read plan), starting from ``start``."""

    def __init__(self, steps: List[StepPlan], plan: ReadPlan, start: StateRef, run_key: str,
                 scratch: str, n_threads: Optional[int], metrics: StepMetrics):
        self.steps, self.plan, self.start = steps, plan, start
        self.run_key, self.scratch, self.n_threads = run_key, scratch, n_threads
        self.metrics = metrics
        self.slowest_piece = 0.0
        # the window's own marks (a scratch folder that outlived a window cannot end the next)
        at = steps[0].position
        self.final, self.done, self.abort = (scratch_names.chain_name(kind, at)
                                             for kind in ("final", "done", "abort"))

    def run(self, first_piece: int) -> Optional[StateRef]:
        """The window from this participant's side; the final state's reference if this
        participant published it, else None."""
        if _marked(self.scratch, self.done) or _marked(self.scratch, self.abort):
            return None
        try:
            return self._run(first_piece)
        except _Stop:
            return None
        except BaseException as e:
            _mark(self.scratch, self.abort, "%s: %s" % (type(e).__name__, e))
            raise

    def _run(self, first_piece: int) -> Optional[StateRef]:
        algo, prev = None, None
        for sp in self.steps:
            if self._gone(sp.position):
                raise _Stop()           # the others are past this step
            with beam_cost.step(self.run_key, sp.position):
                algo = (_load(self.start.path, self.n_threads) if prev is None
                        else self._advance(algo, prev))
                self._pieces(algo, sp, first_piece)
            prev = sp
        last = self.steps[-1]
        if not claim(self.scratch, self.final):
            return None
        with beam_cost.step(self.run_key, last.position):
            algo = self._advance(algo, last)
            position = last.position + 1
            t0 = time.perf_counter()
            beam_state.save_scratch(algo, state_path(self.scratch, position))
            beam_cost.report("publish", time.perf_counter() - t0)
        _mark(self.scratch, self.done)
        return StateRef("%s/%d" % (self.run_key, position), state_path(self.scratch, position),
                        position)

    # -- one step ---------------------------------------------------------------------------
    def _gone(self, position: int) -> bool:
        return (_marked(self.scratch, scratch_names.chain_name("gone", position))
                or _marked(self.scratch, self.done))

    def _pieces(self, algo, sp: StepPlan, first_piece: int) -> None:
        """Claim and compute pieces of step ``sp``: ``first_piece`` first, then every piece no
        participant has claimed yet; then, while the others finish theirs, write state
        ``sp.position`` if no one else does."""
        n = self.plan.n_pieces(sp.position)
        for i in range(n):
            k = (first_piece + i) % n
            if claim(self.scratch, _piece_name(sp.position, k)):
                if self._gone(sp.position):
                    raise _Stop()   # its claims were freed: the others are past this step
                self._compute(algo, sp.position, k)
        if sp.position != self.start.position and claim(self.scratch,
                                                         scratch_names.chain_name(
                                                             "state", sp.position)):
            t0 = time.perf_counter()
            beam_state.save_scratch(algo, state_path(self.scratch, sp.position))
            beam_cost.report("publish", time.perf_counter() - t0)

    def _compute(self, algo, position: int, piece: int) -> None:
        t0 = time.perf_counter()
        piece_statistics(algo, ReadTask(position, piece, self.plan), self.metrics, self.scratch)
        self.slowest_piece = max(self.slowest_piece, time.perf_counter() - t0)

    def _collect(self, algo, sp: StepPlan) -> Dict[int, SpilledStats]:
        """Every piece of step ``sp``, waiting for those other participants compute (a piece
        whose files are gone: this participant is behind the others, and stops)."""
        out: Dict[int, SpilledStats] = {}
        t0 = time.perf_counter()
        for k in range(self.plan.n_pieces(sp.position)):
            path = scratch_names.stats_path(self.scratch, sp.position, k)
            delay, since = POLL_MIN, time.perf_counter()
            while not os.path.exists(path):
                if _marked(self.scratch, self.abort) or self._gone(sp.position):
                    raise _Stop()
                if not _claimed(self.scratch, _piece_name(sp.position, k)):
                    raise _Stop()       # freed: the others are past this step
                waited = time.perf_counter() - since
                if waited > max(STEAL_AFTER_S, STEAL_AFTER_PIECES * self.slowest_piece):
                    logger.warning("piece %d of step %d not written after %.0f s: computing it "
                                   "here", k, sp.position, waited)
                    self._compute(algo, sp.position, k)
                    break
                time.sleep(delay)
                delay = min(POLL_MAX, 2 * delay)
            out[k] = SpilledStats(path, os.path.getsize(path))
        beam_cost.report("stats_wait", time.perf_counter() - t0)
        return out

    def _advance(self, algo, sp: StepPlan):
        """This participant's copy after the global step of ``sp`` (its pieces summed in
        piece order); the first participant there writes the step's info and frees the files
        of the step before ``sp``."""
        pieces = self._collect(algo, sp)
        position = sp.position + 1
        try:
            # the sum may be read from the pieces' files by the global step itself
            info = global_step_info(algo, sum_in_order(pieces), sp.position, sp.n_docs)
        except FileNotFoundError:
            if self._gone(sp.position):
                raise _Stop() from None     # freed while read: the others are past this step
            raise
        writer = claim(self.scratch, scratch_names.chain_name("info", position))
        if "error" in info:
            if writer:
                store_step_info(self.scratch, "%s/%d" % (self.run_key, position), info)
                logger.error("global step at position %d failed: %s", sp.position,
                             info["error"])
            raise _Stop()
        if writer:
            store_step_info(self.scratch, "%s/%d" % (self.run_key, position), info)
            beam_cost.mark(beam_cost.LAST_STEP)
            self._free(sp.position - 1)
        return algo

    def _free(self, position: int) -> None:
        """Remove step ``position``'s pieces, claims and state (every participant still
        running has read them: its own claims of the next step needed them)."""
        if position < self.start.position:
            return
        _mark(self.scratch, scratch_names.chain_name("gone", position))
        pieces = scratch_names.chain_mark("claim-" + scratch_names.chain_name("piece", position))
        for name in scratch_space.list_names(self.scratch):
            if (name.startswith(scratch_names.stats_prefix(position))
                    or name.startswith(pieces)):
                remove_quietly(os.path.join(self.scratch, name))
        if position > self.start.position:
            remove_quietly(state_path(self.scratch, position))


class ChainedWindowFn(LeanDoFn):
    """The window's steps in one stage (module docstring). Main input: the read tasks of the
    window's first step (one participant each, starting with that piece); side input: the
    window's start state reference (None: nothing to do)."""

    def __init__(self, steps: List[StepPlan], run_key: str, scratch: str,
                 n_threads: Optional[int] = None):
        self.steps = [sp.bare() for sp in steps]    # the read plan comes with the element
        self.run_key, self.scratch, self.n_threads = run_key, scratch, n_threads
        self.metrics = StepMetrics()

    def process(self, element, start: Optional[StateRef]):
        _, task = element
        if start is None:
            return
        with _LOCK:
            if self.run_key in _ACTIVE:
                return
            _ACTIVE.add(self.run_key)
        try:
            ref = WindowRun(self.steps, task.plan, start, self.run_key, self.scratch,
                            self.n_threads, self.metrics).run(task.piece)
        finally:
            with _LOCK:
                _ACTIVE.discard(self.run_key)
        if ref is not None:
            yield ref


def build_chain(p, tasks, steps: List[StepPlan], start_pcoll, run_key: str, scratch: str,
                n_threads: Optional[int]):
    """The window's steps as one stage (``tasks[0]``: the read tasks of ``steps[0]``, one
    participant each); returns the PCollection of the final state's reference."""
    import apache_beam as beam
    start = beam.pvalue.AsSingleton(start_pcoll, default_value=None)
    return tasks[0] | "Window%d" % steps[0].position >> beam.ParDo(
        ChainedWindowFn(steps, run_key, scratch, n_threads), start)
