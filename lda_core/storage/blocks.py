"""Checkpoints of word-sharded algorithms held as word blocks (online VB, SCVB0 with B > 1).

A word-sharded algorithm (``word_sharded = True``, :mod:`lda_core.algorithms.word_blocks`)
holds its word-major array Ñ (V x K, ``ntilde`` in a state) in *row order*: word w is row
w // B of block w mod B. Its checkpoint stores the B blocks as B files
(:class:`lda_core.storage.state.RowBlocks`, state.json version 2; ``docs/model-format.md``),
so that

* the in-process trainer writes its own rows, block by block, with no permuted copy
  (:func:`checkpoint_state`);
* the Beam word-sharded trainer publishes a checkpoint from its scratch block files and the
  O(K) header without any process holding the whole state
  (:meth:`lda_core.storage.checkpoint.CheckpointStore.publish_blocks`, built on
  :func:`state_from_block_files`), and seeds a window's scratch block files from a
  checkpoint by copying files (:func:`copy_blocks`,
  :meth:`~lda_core.storage.checkpoint.CheckpointStore.latest_blocks`);
* a resumed run takes the blocks, read into one contiguous array, as its state
  (:func:`algorithm_from_state` of ``TopicState.load(..., row_order=True)``).

Every other reader gets the array in word order from ``TopicState.load`` (read block by
block into place), so it reads a blocked checkpoint as it reads an unblocked one. B = 1
checkpoints are written exactly as before.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Union

import numpy as np

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.errors import DataIntegrityError, UsageError
from lda_core.storage import npy, pending as pending_stats
from lda_core.storage.files import files_for, LocalFiles
from lda_core.storage.state import (array_files, block_row_counts, copy_npy, read_state_json,
                                    RowBlocks, StateFormatError, TopicState, value_problem)

if TYPE_CHECKING:
    from lda_core.algorithms.word_blocks import BlockHeader

logger = logging.getLogger(__name__)

ROWS = "ntilde"        # the state array a word-sharded algorithm holds in row order

Destinations = Union[Sequence[str], Callable[[int], str]]


def _sharded_class(name: str, where: str):
    cls = algorithm_class(name)
    if not getattr(cls, "word_sharded", False):
        raise UsageError("%s: algorithm %s is not word-sharded (no word blocks to copy)"
                         % (where, name))
    return cls


def checkpoint_state(algorithm) -> TopicState:
    """The state to checkpoint ``algorithm``: for a word-sharded algorithm with B > 1 word
    blocks its rows as B blocks (views of its own array: nothing is copied, so publish it
    before the next step), else ``algorithm.to_state()``."""
    cls = type(algorithm)
    B = int(getattr(algorithm, "word_blocks", 1) or 1)
    if not getattr(cls, "word_sharded", False) or B == 1:
        state = algorithm.to_state()
    else:
        header = algorithm.shard_header()
        state = cls.state_without_rows(header)
        state.arrays[ROWS] = RowBlocks((header.n_words, header.n_topics),
                                       cls.row_dtype(header),
                                       [algorithm.block_rows(b) for b in range(B)])
    # the statistics in flight of a pipelined run (lda_core.storage.pending)
    pending_stats.add_to_state(state, getattr(algorithm, "pending", None))
    return state


def algorithm_from_state(state: TopicState, n_threads: Optional[int] = None,
                         take: bool = False):
    """The algorithm of ``state``, whichever way its word-major array is held: a
    :class:`RowBlocks` (``TopicState.load(..., row_order=True)``) becomes the algorithm's
    row-order array itself with ``take`` (the caller gives the state up: one V x K array in
    all), a copy without; a plain array goes through the algorithm's ``from_state``."""
    cls = algorithm_class(state.algorithm)
    check_ranges(cls, state)
    pending = pending_stats.pending_of_state(state, getattr(cls, "stats_type", None))
    algo = _algorithm_of(cls, pending_stats.without_pending(state), n_threads, take)
    if pending is not None:
        algo.pending = pending
    return algo


def check_ranges(cls, state: TopicState) -> None:
    """DataIntegrityError when an array the algorithm declares non-negative
    (``NONNEGATIVE_ARRAYS``: counts, Dirichlet parameters) holds a negative value: a loaded
    state is checked in range as its files were checked finite (TopicState.load), so an
    edited checkpoint is refused (and the checkpoint store falls back to the previous one)
    before a kernel computes with it."""
    for name in getattr(cls, "NONNEGATIVE_ARRAYS", ()):
        v = state.arrays.get(name)
        if v is None:
            continue
        parts = ([p for p in v.parts if isinstance(p, np.ndarray)] if isinstance(v, RowBlocks)
                 else [v])
        problem = value_problem(name, parts, nonnegative=True)
        if problem is not None:
            raise DataIntegrityError("%s state at step %d: %s, which %s never holds: a "
                                     "damaged or edited checkpoint" % (
                                         state.algorithm, state.step, problem, name))


def _algorithm_of(cls, state: TopicState, n_threads: Optional[int], take: bool):
    rows = state.arrays.get(ROWS)
    if not isinstance(rows, RowBlocks):
        return cls.from_state(state, n_threads=n_threads, take=take)
    if not getattr(cls, "word_sharded", False):
        raise DataIntegrityError("state of %s holds %r as word blocks, which only word-sharded "
                                 "algorithms write" % (state.algorithm, ROWS))
    header = cls.header_of_state(state)
    if header.n_blocks != rows.n_blocks:
        raise DataIntegrityError("state of %s holds %d word blocks but its settings say "
                                 "word_blocks=%d" % (state.algorithm, rows.n_blocks,
                                                     header.n_blocks))
    whole = rows.rows()
    if rows.whole is not None and not take:
        whole = whole.copy()
    return cls.from_header_rows(header, whole, n_threads=n_threads)


def state_from_block_files(header: "BlockHeader", sources: Sequence[str],
                           files: Optional[LocalFiles] = None) -> TopicState:
    """The state of the word-sharded algorithm of ``header`` whose row blocks are the plain
    ``.npy`` files ``sources`` (block order; read through ``files``, default
    :func:`files_for` of the first). O(K) in memory: ``TopicState.save`` copies the files in
    bounded chunks, checking each one's shape and dtype against the header."""
    cls = _sharded_class(header.algorithm, "word-block header")
    sources = list(sources)
    if len(sources) != int(header.n_blocks):
        raise UsageError("%d word-block files for a header of %d blocks"
                         % (len(sources), header.n_blocks))
    state = cls.state_without_rows(header)
    state.arrays[ROWS] = RowBlocks((header.n_words, header.n_topics), cls.row_dtype(header),
                                   sources, files=files or files_for(sources[0]))
    return state


def read_block_header(path: str, files: Optional[LocalFiles] = None) -> "BlockHeader":
    """The word-block header of the checkpoint (state directory) ``path``; its word-major
    array is not read. StateFormatError when the checkpoint's other arrays are damaged."""
    files = files or files_for(path)
    state = TopicState.load(path, files=files, skip_arrays=(ROWS,))
    cls = _sharded_class(state.algorithm, path)
    try:
        return cls.header_of_state(state)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise StateFormatError("%s: damaged checkpoint, no word-block header can be built from "
                               "it (%s: %s)" % (path, type(e).__name__, e))


def copy_blocks(path: str, dest: Destinations, files: Optional[LocalFiles] = None,
                dest_files: Optional[LocalFiles] = None) -> "BlockHeader":
    """Copy the word blocks of the checkpoint ``path`` to plain ``.npy`` files (row order,
    the algorithm's row dtype) and return its word-block header.

    ``dest``: the B destination paths (block order), or a function of the block index giving
    each (B is the checkpoint's, known only once its header is read); written through
    ``dest_files`` (default :func:`files_for` of the first). A blocked checkpoint's block
    files are copied in bounded chunks, each checked against the sha256 state.json records;
    so is an unblocked one of B = 1. An unblocked checkpoint with B > 1 (word order, written
    before blocked checkpoints existed) is read whole and its blocks written from it. On any
    error the destinations written so far are deleted and StateFormatError names the file."""
    files = files or files_for(path)
    header = read_block_header(path, files)
    B, K = int(header.n_blocks), int(header.n_topics)
    dests = [dest(b) for b in range(B)] if callable(dest) else list(dest)
    if len(dests) != B:
        raise UsageError("%s holds %d word blocks, %d destinations given"
                         % (path, B, len(dests)))
    dest_files = dest_files or files_for(dests[0])
    dtype = _sharded_class(header.algorithm, path).row_dtype(header)
    entry = read_state_json(path, files)["arrays"].get(ROWS)
    if entry is None:
        raise StateFormatError("%s: state.json lists no array %r" % (path, ROWS))
    stored, shape, names = array_files(path, ROWS, entry)
    if shape != (header.n_words, K):
        raise StateFormatError("%s: array %r has shape %s, expected %s"
                               % (path, ROWS, shape, (header.n_words, K)))
    counts = block_row_counts(header.n_words, B)
    written: List[str] = []
    try:
        if len(names) == B and stored == dtype and (B == 1 or "layout" in entry):
            bad: List[str] = []
            nonnegative = ROWS in getattr(_sharded_class(header.algorithm, path),
                                          "NONNEGATIVE_ARRAYS", ())
            for b, (fname, _, sha) in enumerate(names):
                written.append(dests[b])
                copy_npy(files, files.join(path, fname), dest_files, dests[b], dtype,
                         (counts[b], K), nonfinite=bad, expect_sha=sha,
                         nonnegative=nonnegative)
            if bad:     # checked as TopicState.load checks: the previous checkpoint is used
                raise StateFormatError("%s: %s: a damaged or edited checkpoint"
                                       % (path, "; ".join(bad)))
        elif "layout" in entry:
            raise StateFormatError("%s: array %r is %s in %d word blocks, the algorithm's "
                                   "settings need %s in %d" % (path, ROWS, stored, len(names),
                                                               dtype, B))
        else:
            state = TopicState.load(path, files=files)
            by_word = np.asarray(state.arrays[ROWS])
            for b in range(B):
                written.append(dests[b])
                _write_rows(dest_files, dests[b], np.ascontiguousarray(by_word[b::B],
                                                                       dtype=dtype))
    except BaseException:
        for d in written:
            dest_files.remove_file(d)
        raise
    return header


def _write_rows(files: LocalFiles, path: str, rows: np.ndarray) -> None:
    with files.open_write(path) as f:
        npy.write_array(f, rows)
