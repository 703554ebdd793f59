"""Every file name of a Beam run's scratch folder, in one place.

A run's scratch folder (:func:`pipelines.runtime.scratch.new_scratch`) holds what its windows
hand over between processes:

* the exchanges that hand a whole state version from step to step (in-process, local worker
  processes, the state exchange): state versions (``state-<position>.npz``), statistics pieces
  spilled by local workers (``stats-<position>-<piece>.bin``), each step's info for the driver
  (``info-<position>.json``);
* the remote exchange (:mod:`pipelines.training.beam_remote`), only at a window's ends: the
  header (``header-<position>.bin``), the row blocks (``rows-<position>-<block>.npy``), the
  statistics in flight (``pending-<position>-<minibatch>-<block>.bin``) and the window's log
  (``window-<position>.json``);
* the local exchange's marks (:mod:`pipelines.training.beam_chain`: ``chain-<mark>``, e.g. the
  claim of a piece ``chain-claim-piece-<position>-<piece>``, a freed step's
  ``chain-gone-<position>``);
* the stream-order samplers' window results (``result-<position>.json``) and a fresh
  sampler's starting state (``initial``).

Checkpoint names are :mod:`lda_core.storage.checkpoint`'s.
"""
from __future__ import annotations

from typing import Optional

from lda_core.storage.files import files_for


def _join(folder: str, name: str) -> str:
    return files_for(folder).join(folder, name)


def state_path(folder: str, position: int) -> str:
    return _join(folder, "state-%09d.npz" % int(position))


def stats_prefix(position: int) -> str:
    """The names of the statistics pieces of step ``position`` start with this."""
    return "stats-%09d-" % int(position)


def stats_path(folder: str, position: int, piece: int) -> str:
    return _join(folder, "%s%04d.bin" % (stats_prefix(position), int(piece)))


def info_path(folder: str, position: int) -> str:
    return _join(folder, "info-%09d.json" % int(position))


def header_path(folder: str, position: int) -> str:
    return _join(folder, "header-%09d.bin" % int(position))


def rows_path(folder: str, position: int, block: int) -> str:
    return _join(folder, "rows-%09d-%04d.npy" % (int(position), int(block)))


def pending_path(folder: str, position: int, m: int, block: int) -> str:
    """The statistics of minibatch ``m`` in flight at ``position``, block ``block``."""
    return _join(folder, "pending-%09d-%09d-%04d.bin" % (int(position), int(m), int(block)))


def window_log_path(folder: str, position: int) -> str:
    """The log of the window that ends at ``position``."""
    return _join(folder, "window-%09d.json" % int(position))


def result_path(folder: str, position: int) -> str:
    """A stream-order sampler's window result at ``position``."""
    return _join(folder, "result-%09d.json" % int(position))


def chain_name(kind: str, position: int, piece: Optional[int] = None) -> str:
    """The name of one of the local exchange's marks: ``kind`` of step ``position`` (and
    ``piece``)."""
    name = "%s-%09d" % (kind, int(position))
    return name if piece is None else "%s-%04d" % (name, int(piece))


def chain_mark(name: str) -> str:
    """The file name of the local exchange's mark ``name`` (a claim is ``claim-<name>``);
    a name that is a prefix gives the prefix of the marks it begins."""
    return "chain-" + name


def initial_state_path(folder: str) -> str:
    """A fresh stream-order sampler's starting state (a state directory)."""
    return _join(folder, "initial")
