"""Worker processes that keep their own copy of the state: one Beam stage per step.

With local worker processes (the DirectRunner's ``multi_processing`` mode, a local worker
pool) every stage costs Beam a scheduling round trip to every worker, so a step of the
unrolled window is **one** stage rather than two (the two-stage window of
:mod:`pipelines.training.beam_window`: the E-step of the pieces, then the combine and the
global step in one worker, which writes state ``t`` to a scratch file every worker then
loads). The one stage is :class:`ChainedEStepFn` over the pieces of minibatch
``t``, whose side input is the list of the (spilled) statistics pieces of minibatch ``t-1``:

* each worker process keeps one copy of the state (:data:`_COPY`, loaded once from the
  window's start state) and, before its first piece of step ``t``, applies the global step
  of ``t-1`` to it itself: the pieces summed in piece order
  (:func:`pipelines.training.beam_stats.sum_in_order`: for online VB a lazy sum the global step
  reads block by block of rows from the pieces' files, so no copy ever holds the whole summed
  statistics next to the state -- at K = 1,000 a minibatch's sum is as large as λ) and
  ``global_step``, the same sums in the same order as the single global-step worker's merge,
  so every copy, and the final state, is bit for bit the one of the two-stage window;
* the worker that runs piece 0 of step ``t`` also publishes state ``t`` to the scratch folder
  with the step's info for the driver (:func:`pipelines.training.beam_steps.apply_global_step`'s
  files), and removes state ``t-2`` and the pieces of ``t-2``: a worker that ran no piece
  of the previous step (its copy is behind) loads state ``t-1`` from there, which the stage
  before this one wrote;
* after the window's last step, :class:`ChainedFinishFn` (one element) applies the last
  global step the same way and publishes the final state.

A refused global step (non-finite statistics) is refused identically by every worker: the
worker of piece 0 stores the error for the driver and no worker emits anything further, so
the rest of the window does nothing (as in the two-stage window).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, List, Optional, Tuple

from pipelines.runtime import scratch as scratch_space
from pipelines.training import scratch_names
from pipelines.training import beam_cost, beam_state
from pipelines.training.beam_plan import StepPlan
from pipelines.training.beam_state import StateRef
from pipelines.training.beam_stats import sum_in_order
from pipelines.training.beam_steps import (LeanDoFn, StepMetrics, global_step_info, remove_quietly,
                                           store_step_info, piece_statistics)

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
# this process's copy: (run key, position, algorithm); one per process (a newer run or window
# replaces it)
_COPY: List[Optional[Tuple[str, int, Any]]] = [None]

# the phases every worker runs for every step in this mode (their seconds overlap in wall time)
PARALLEL_PHASES = ("read", "estep", "stats_encode", "stats_decode", "stats_combine",
                   "global_step", "state_delivery")


def state_path(scratch: str, position: int) -> str:
    return scratch_names.state_path(scratch, position)


def _load(path: str, n_threads: Optional[int]):
    t0 = time.perf_counter()
    algo = beam_state.load_algorithm(path)
    beam_cost.report("state_delivery", time.perf_counter() - t0, beam_state.state_file_size(path))
    beam_state.set_threads(algo, n_threads)
    return algo


def advance(run_key: str, position: int, start: StateRef, prev: Optional[StepPlan],
            prev_pieces, scratch: str, publisher: bool, n_threads: Optional[int]):
    """This process's copy of the state at ``position`` (None when a step of the window
    failed): loaded at the window's start; otherwise the copy at ``position - 1`` (loaded from
    the scratch folder when this process's copy is further behind) plus the global step of
    minibatch ``prev`` from its pieces ``prev_pieces``. ``publisher``: this worker runs piece
    0 of the step, and publishes the new state and the step's info."""
    with _LOCK:
        have = _COPY[0]
        if have is not None and have[0] == run_key and have[1] == position:
            return have[2]
        if position == start.position:
            have = _COPY[0] = None    # a previous window's copy is freed before the load
            algo = _load(start.path, n_threads)
            _COPY[0] = (run_key, position, algo)
            return algo
        if not prev_pieces:           # the previous step failed or produced nothing
            return None
        if have is not None and have[0] == run_key and have[1] == position - 1:
            algo = have[2]
        else:
            have = _COPY[0] = None    # the stale copy is freed before the load
            path = start.path if position - 1 == start.position else state_path(scratch,
                                                                                position - 1)
            algo = _load(path, n_threads)
        stats = sum_in_order(dict(prev_pieces))
        key = "%s/%d" % (run_key, position)
        info = global_step_info(algo, stats, prev.position, prev.n_docs)
        if "error" in info:
            _COPY[0] = None
            if publisher:
                store_step_info(scratch, key, info)
                logger.error("global step at position %d failed: %s", prev.position,
                             info["error"])
            return None
        _COPY[0] = (run_key, position, algo)
        if publisher:
            t0 = time.perf_counter()
            beam_state.save_scratch(algo, state_path(scratch, position))
            beam_cost.report("publish", time.perf_counter() - t0)
            store_step_info(scratch, key, info)
            beam_cost.mark(beam_cost.LAST_STEP)
            if position - 2 > start.position:
                remove_quietly(state_path(scratch, position - 2))
            prefix = scratch_names.stats_prefix(position - 2)
            for name in scratch_space.list_names(scratch):
                if name.startswith(prefix):
                    remove_quietly(os.path.join(scratch, name))
        return algo


class ChainedEStepFn(LeanDoFn):
    """The pieces of minibatch ``step`` with this process's copy of the state, advanced by
    the previous step's global step first (module docstring). Side inputs: the window's start
    state reference, and the list of ``(piece id, spilled statistics)`` of the previous step
    (empty for the window's first step)."""

    def __init__(self, step: StepPlan, prev: Optional[StepPlan], run_key: str, scratch: str,
                 n_threads: Optional[int] = None):
        self.step, self.prev, self.run_key, self.scratch = step, prev, run_key, scratch
        self.n_threads = n_threads
        self.metrics = StepMetrics()

    def process(self, element, start: Optional[StateRef], prev_pieces):
        position, task = element
        if start is None:
            return
        with beam_cost.step(self.run_key, position):
            algo = advance(self.run_key, position, start, self.prev, prev_pieces, self.scratch,
                           task.piece == 0, self.n_threads)
            if algo is None:
                return
            out = piece_statistics(algo, task, self.metrics, self.scratch)
        yield task.piece, out


class ChainedFinishFn(LeanDoFn):
    """After the window's last step: its global step, and the final state published (one
    element; the last step's pieces as a side input)."""

    def __init__(self, last: StepPlan, run_key: str, scratch: str,
                 n_threads: Optional[int] = None):
        self.last, self.run_key, self.scratch, self.n_threads = last, run_key, scratch, n_threads

    def process(self, _, start: Optional[StateRef], last_pieces):
        if start is None:
            return
        position = self.last.position + 1
        # the last step's global step: its bytes are that step's
        with beam_cost.step(self.run_key, self.last.position):
            algo = advance(self.run_key, position, start, self.last, last_pieces, self.scratch,
                           True, self.n_threads)
        if algo is not None:
            yield StateRef("%s/%d" % (self.run_key, position), state_path(self.scratch,
                                                                          position), position)


def build_chain(p, tasks, steps: List[StepPlan], start_pcoll, run_key: str, scratch: str,
                n_threads: Optional[int]):
    """The window's chained steps (``tasks[j]``: the read tasks of ``steps[j]``); returns the
    PCollection of the final state's reference."""
    import apache_beam as beam
    start = beam.pvalue.AsSingleton(start_pcoll, default_value=None)
    pieces = p | "NoPieces" >> beam.Create([], reshuffle=False)
    prev = None
    for j, sp in enumerate(steps):
        pieces = tasks[j] | "Step%d" % sp.position >> beam.ParDo(
            ChainedEStepFn(sp.bare(), prev, run_key, scratch, n_threads), start,
            beam.pvalue.AsList(pieces))
        prev = sp.bare()      # the DoFns read no rows: the graph carries no read plan
    return (p | "Finish" >> beam.Create([None], reshuffle=False)
            | "Last%d" % steps[-1].position >> beam.ParDo(
                ChainedFinishFn(steps[-1].bare(), run_key, scratch, n_threads), start,
                beam.pvalue.AsList(pieces)))
