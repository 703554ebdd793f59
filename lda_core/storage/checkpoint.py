"""Checkpoints of a training run: published atomically, resumed from the newest valid one.

Layout under the model directory::

    MODEL_DIR/checkpoints/step-000000123/   a complete TopicState (lda_core.storage.state)
    MODEL_DIR/checkpoints/step-000000246/
    MODEL_DIR/checkpoints/LATEST            one line: the name of the current checkpoint

``publish(state)`` writes the state under a temporary name (a dot-name that is never listed),
renames it to ``step-<state.step, 9 digits>`` (an existing directory of that name is
replaced), and only then rewrites ``LATEST`` atomically (temporary file, fsync, rename). The
pointer is the commit point: a checkpoint directory newer than the one ``LATEST`` names was
never committed (the run died between the two renames) and is not used. The first publish of
a store removes the temporary directories and files of publishes that were killed
(``.step-N.tmp-*``, ``.step-N.old-*``, ``.LATEST.tmp-*``): the writer holds the model
directory's lease (:mod:`lda_core.storage.lease`), so no other publish is under way.

On an object store (a file layer with ``atomic_dir_rename = False``, e.g. ``gs://`` through
``pipelines.runtime.object_store_files``) nothing can be renamed: every file of a checkpoint is
written under its final, unique name ``step-<9 digits>-<12 hex digits>/`` (``state.json``
last), and then the ``LATEST`` object (one upload: readers see the old or the new one) is
written naming it. That pointer is again the commit point: a directory it does not name at
the same or a newer step -- a checkpoint being written, or one of a run that died before its
pointer -- is never used (a warning names it), and another directory of the step just
committed (an earlier attempt at that step) is deleted after the pointer is written, as the
local rename replaces it. Readers accept both name forms everywhere, so a model directory
copied from an object store to a local disk (``gsutil cp -r``) reads the same.

``latest()`` loads the checkpoint ``LATEST`` names. If it is missing, partial or corrupt
(no state.json, a truncated .npy, a bad checksum, ...), a WARNING naming it and the reason
is logged and the next older checkpoint is tried, and so on. It returns ``None`` when the
store holds no checkpoint at all, and raises :class:`lda_core.storage.state.StateFormatError` when
checkpoints exist but none of them is valid (so a resume never silently restarts from
scratch over a damaged model directory).

File operations go through a file layer (:func:`lda_core.storage.files.files_for` of the model
directory unless one is passed): local here, Beam ``FileSystems`` for URLs once
``pipelines.runtime.object_store_files`` is imported.
"""
from __future__ import annotations

import errno
import logging
import re
import uuid
from typing import Callable, List, NamedTuple, Optional

import numpy as np

from lda_core.algorithms.algorithm import algorithm_class
from lda_core.errors import ResourceError, TrainingError, UsageError
from lda_core.faults import fault_point
from lda_core.storage.blocks import algorithm_from_state, copy_blocks, state_from_block_files
from lda_core.storage.files import files_for, LocalFiles
from lda_core.storage.state import RowBlocks, StateFormatError, TopicState, value_problem

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
POINTER = "LATEST"
# times a reader re-reads LATEST when the checkpoint it was loading was pruned under it
RACE_RETRIES = 20
# the temporary names of LocalFiles.make_temp_dir / publish_dir / write_atomic in CHECKPOINTS
_LEFTOVER = re.compile(r"^\.(?:step-\d{9,}(?:-[0-9a-f]{8,32})?|%s)\.(?:tmp|old)-[0-9a-f]{32}$"
                       % POINTER)
# step-<step, 9+ digits>, and on object stores -<unique suffix> (see module docstring)
_NAME = re.compile(r"^step-(\d{9,})(?:-([0-9a-f]{8,32}))?$")


class DiskFullError(ResourceError):
    """A checkpoint could not be written for lack of space (nothing was published)."""


class Checkpoint(NamedTuple):
    step: int
    path: str


def checkpoint_name(step: int) -> str:
    if int(step) < 0:
        raise ValueError("step must be >= 0, got %r" % (step,))
    return "step-%09d" % int(step)


def check_state_finite(state: TopicState) -> None:
    """TrainingError naming each float array of ``state`` that holds NaN or +inf (scanned in
    bounded chunks: no full-size temporaries)."""
    bad = []
    for name in sorted(state.arrays):
        v = state.arrays[name]
        # word blocks held as arrays are scanned here, those in files while they are copied
        parts = ([p for p in v.parts if isinstance(p, np.ndarray)] if isinstance(v, RowBlocks)
                 else [np.asarray(v)])
        problem = value_problem(name, parts)
        if problem is not None:
            bad.append(problem)
    if bad:
        raise TrainingError("refusing to checkpoint step %d of %s: %s (the previous checkpoint "
                            "stays the latest)" % (state.step, state.algorithm, "; ".join(bad)))


def check_loadable(state: TopicState, where: str) -> None:
    """StateFormatError when the algorithm of ``state`` cannot be built from it (a missing
    parameter, arrays that disagree with each other, ...: an edited or damaged checkpoint),
    so :meth:`CheckpointStore.latest_checkpoint` falls back to the previous checkpoint
    instead of every reader failing later. An algorithm not installed here is not checked."""
    try:
        algorithm_class(state.algorithm)
    except ValueError:
        return
    try:
        # a state read in word blocks: the algorithm takes (shares) its rows, no copy
        algorithm_from_state(state, take=isinstance(state.arrays.get("ntilde"), RowBlocks))
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, MemoryError,
            RecursionError) as e:
        raise StateFormatError("%s: damaged checkpoint, %s cannot be built from it (%s: %s)"
                               % (where, state.algorithm, type(e).__name__, e))


class CheckpointStore:
    """Checkpoints of one model directory (see module docstring).

    ``keep_last``: keep only this many newest checkpoints after each publish (``None`` keeps
    all); the one just published and the one ``LATEST`` names are never deleted.
    ``files``: the file layer (default :func:`lda_core.storage.files.files_for` ``(model_dir)``).
    ``check_algorithm``: :meth:`latest_checkpoint` also builds the algorithm from each
    candidate (:func:`check_loadable`), so an edited or damaged checkpoint that passes the
    format checks still falls back to the previous one (what the commands use).
    """

    def __init__(self, model_dir: str, keep_last: Optional[int] = None,
                 files: Optional[LocalFiles] = None, check_algorithm: bool = False):
        if keep_last is not None and (isinstance(keep_last, bool) or int(keep_last) < 1):
            raise UsageError("keep_last must be None (keep all) or an integer >= 1, got %r"
                             % (keep_last,))
        self.model_dir = model_dir
        self.keep_last = None if keep_last is None else int(keep_last)
        self.files = files or files_for(model_dir)
        self.root = self.files.join(model_dir, CHECKPOINTS)
        self.check_algorithm = bool(check_algorithm)
        # no atomic directory rename (object stores): unique names, committed by LATEST
        self.unique_names = not getattr(self.files, "atomic_dir_rename", True)
        self._swept = False
        #: steps whose checkpoints pruning keeps whatever ``keep_last`` says (the best pass
        #: of a ``--passes auto`` run, which may become the model)
        self.pinned: set = set()

    # -- listing --------------------------------------------------------------------------
    def path(self, step: int) -> str:
        """The directory of the checkpoint of ``step``: the one LATEST names if it is at that
        step, else the (newest-named) listed one; ``step-<9 digits>`` when there is none."""
        if self.unique_names:
            name = self.pointer_name()
            if name is not None and _step_of(name) == int(step):
                return self.files.join(self.root, name)
            same = [c for c in self.list_checkpoints() if c.step == int(step)]
            if same:
                return same[-1].path
        return self.files.join(self.root, checkpoint_name(step))

    def list_checkpoints(self) -> List[Checkpoint]:
        """Published checkpoint directories, sorted by step (temporary directories excluded;
        their validity is not checked here). On object stores a directory being written is
        listed too: only LATEST tells what was committed (see :meth:`latest_checkpoint`)."""
        if not self.files.isdir(self.root):
            return []
        out = []
        for name in self.files.listdir(self.root):
            m = _NAME.match(name)
            if m:
                p = self.files.join(self.root, name)
                # on object stores every listed prefix is a "directory" (one request saved)
                if self.unique_names or self.files.isdir(p):
                    out.append(Checkpoint(int(m.group(1)), p))
        out.sort()
        return out

    def pointer_name(self) -> Optional[str]:
        """The checkpoint name ``LATEST`` holds, or None if there is no (readable) pointer."""
        p = self.files.join(self.root, POINTER)
        if not self.files.exists(p):
            return None
        try:
            with self.files.open_read(p) as f:
                text = f.read(256).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            logger.warning("cannot read checkpoint pointer %s (%s); scanning checkpoints", p, e)
            return None
        m = _NAME.match(text)
        if not m:
            logger.warning("checkpoint pointer %s holds %r, not a checkpoint name; scanning "
                           "checkpoints", p, text[:80])
            return None
        return text

    def pointer(self) -> Optional[int]:
        """The step ``LATEST`` names, or None if there is no (readable) pointer."""
        name = self.pointer_name()
        return None if name is None else _step_of(name)

    def pointer_path(self) -> Optional[str]:
        """The checkpoint directory ``LATEST`` names, or None."""
        name = self.pointer_name()
        return None if name is None else self.files.join(self.root, name)

    # -- reading --------------------------------------------------------------------------
    def load(self, step: int, row_order: bool = False) -> TopicState:
        """The checkpoint of ``step`` (FileNotFoundError if absent, StateFormatError if bad);
        ``row_order``: as in :meth:`TopicState.load`."""
        return TopicState.load(self.path(step), files=self.files, row_order=row_order)

    def latest(self, row_order: bool = False) -> Optional[TopicState]:
        """The newest committed valid checkpoint (see module docstring for the fall-back).
        ``row_order``: word blocks as :class:`~lda_core.storage.state.RowBlocks` (for
        :func:`lda_core.storage.blocks.algorithm_from_state`: a resume holds one V x K
        array), else every array as one plain array in word order."""
        found = self.latest_checkpoint(row_order=row_order)
        return None if found is None else found[1]

    def latest_blocks(self, dest):
        """``(Checkpoint, BlockHeader)``: the word blocks of the newest committed valid
        checkpoint copied to ``dest`` (:func:`lda_core.storage.blocks.copy_blocks`: B paths,
        or a function of the block index), with the same fall-back to older checkpoints as
        :meth:`latest_checkpoint`; None when the store holds no checkpoint. No V x K array is
        allocated for a blocked checkpoint, or an unblocked one of B = 1."""

        def load(path: str):
            header = copy_blocks(path, dest, files=self.files)
            return header, int(header.counters["step"])
        return self._find_latest(load)

    def latest_checkpoint(self, row_order: bool = False):
        """``(Checkpoint, TopicState)`` of the newest committed valid checkpoint, or None.

        A reader racing a writer that prunes (``keep_last``) can find the checkpoint it was
        loading removed under it: whenever an attempt had to skip or fall back, ``LATEST``
        is read again, and if it has moved meanwhile the attempt is repeated from the new
        pointer (at most :data:`RACE_RETRIES` times) without reporting the vanished
        checkpoint as damaged. Only an attempt during which the pointer stayed put reports
        its fall-backs (warnings) or its error. ``row_order``: as in :meth:`latest`."""
        def load(path: str):
            state = TopicState.load(path, files=self.files, row_order=row_order)
            if self.check_algorithm:
                check_loadable(state, path)
            return state, state.step
        return self._find_latest(load)

    def _find_latest(self, load):
        """:meth:`latest_checkpoint` with ``load(path) -> (value, step)`` reading each
        candidate (StateFormatError or OSError: damaged, the next older one is tried)."""
        for attempt in range(RACE_RETRIES + 1):
            name = self.pointer_name()
            notes: List[tuple] = []
            try:
                found, error = self._latest_once(name, notes, load), None
            except StateFormatError as e:
                found, error = None, e
            if (found is not None and not notes) or attempt == RACE_RETRIES \
                    or self.pointer_name() == name:
                for n in notes:
                    logger.warning(*n)
                if error is not None:
                    raise error
                return found
            logger.info("checkpoint pointer %s moved from %s while reading (a writer "
                        "published and pruned); reading the new one",
                        self.files.join(self.root, POINTER), name)
        raise AssertionError("unreachable")   # pragma: no cover

    def _latest_once(self, name: Optional[str], notes: List[tuple], load):
        """One attempt of :meth:`latest_checkpoint` from pointer ``name`` (read before the
        listing); warnings are appended to ``notes`` instead of logged."""
        ckpts = self.list_checkpoints()
        ptr = None if name is None else _step_of(name)
        if ptr is None:
            if ckpts:
                notes.append(("no LATEST pointer in %s; trying the %d checkpoint directories "
                              "newest first", self.root, len(ckpts)))
            candidates = ckpts[::-1]
        else:
            named = [c for c in ckpts if self.files.basename(c.path) == name]
            newer = [c for c in ckpts if c.step > ptr or (
                c.step == ptr and self.files.basename(c.path) != name)]
            if newer:
                notes.append(("ignoring %d checkpoint(s) newer than LATEST (%s) in %s: never "
                              "committed (%s)", len(newer), name, self.root,
                              ", ".join(self.files.basename(c.path) for c in newer)))
            candidates = named + [c for c in ckpts if c.step < ptr][::-1]
            if not named:
                notes.append(("checkpoint %s named by LATEST is missing; falling back to the "
                              "newest previous checkpoint", self.files.join(self.root, name)))
        if not candidates:
            if ptr is not None or ckpts:
                raise StateFormatError("no valid checkpoint in %s (LATEST names %s, which is "
                                       "missing, and there is no older one)"
                                       % (self.root, name))
            return None
        failures = []
        for c in candidates:
            try:
                state, step = load(c.path)
            except (StateFormatError, OSError) as e:
                notes.append(("skipping checkpoint %s (damaged checkpoint, using the previous "
                              "one): %s", c.path, e))
                failures.append("%s (%s)" % (self.files.basename(c.path), e))
                continue
            if step != c.step:
                msg = "state.json says step %d but the directory is %s" % (
                    step, self.files.basename(c.path))
                notes.append(("skipping checkpoint %s: %s", c.path, msg))
                failures.append("%s (%s)" % (self.files.basename(c.path), msg))
                continue
            if failures:
                notes.append(("resuming from checkpoint %s (step %d) after skipping %d "
                              "invalid newer one(s)", c.path, c.step, len(failures)))
            return c, state
        raise StateFormatError("no valid checkpoint in %s: %s" % (self.root,
                                                                  "; ".join(failures)))

    # -- writing --------------------------------------------------------------------------
    def _new_name(self, step: int) -> str:
        name = checkpoint_name(step)
        return "%s-%s" % (name, uuid.uuid4().hex[:12]) if self.unique_names else name

    def publish(self, state: TopicState, check_finite: bool = True) -> str:
        """Write ``state`` as the checkpoint of ``state.step``, then point LATEST at it.

        Returns the checkpoint's path. Prunes to ``keep_last`` afterwards. With
        ``check_finite`` (the default) a state whose float arrays hold NaN or +inf is refused
        with a ValueError naming the array before anything is written, so the last good
        checkpoint stays the latest (-inf is allowed: log-weights of dead particles)."""
        if check_finite:
            check_state_finite(state)
        if not self._swept:
            self.remove_leftovers()
        name = self._new_name(state.step)
        path = self.files.join(self.root, name)
        try:
            state.save(path, files=self.files, refuse_nonfinite=check_finite)
            fault_point("publish-written")
            self.files.write_atomic(self.files.join(self.root, POINTER),
                                    (name + "\n").encode("utf-8"))
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise DiskFullError("the disk is full: checkpoint step %d could not be written to "
                                "%s (%s); the previous checkpoint stays the latest -- free "
                                "space, then --resume" % (state.step, path, e.strerror)) from e
        fault_point("publish-pointer")
        logger.info("published checkpoint %s (step %d, %d documents seen)",
                    path, state.step, state.docs_seen)
        if self.unique_names:
            # earlier attempts at this step (a run that died before its pointer): replaced,
            # as the local rename replaces a directory of the same name
            for c in self.list_checkpoints():
                if c.step == state.step and self.files.basename(c.path) != name:
                    self.files.remove_tree(c.path)
        if self.keep_last is not None:
            self.prune(keep_last=self.keep_last, protect=state.step, protect_name=name)
        return path

    def publish_blocks(self, header, sources, source_files: Optional[LocalFiles] = None,
                       prepare: Optional[Callable[[TopicState], TopicState]] = None,
                       check_finite: bool = True) -> str:
        """Publish the checkpoint of a word-sharded algorithm from its word-block ``header``
        (:class:`lda_core.algorithms.word_blocks.BlockHeader`) and its B row blocks, the plain
        ``.npy`` files ``sources`` (block order; any file layer, ``source_files`` default
        :func:`files_for` of the first), exactly as :meth:`publish` publishes the assembled
        algorithm's :func:`lda_core.storage.blocks.checkpoint_state` (the same files, bit
        for bit). No process holds the state: the O(K) part comes from the header, each
        block is copied in bounded chunks, its shape and dtype checked against the header and
        its sha256 computed on the way (NaN or +inf in a block: TrainingError, nothing
        published). Publication (temporary name and rename, or unique name and LATEST last),
        pruning and the lease rules are those of :meth:`publish`. ``prepare``: applied to the
        O(K) state before it is written (e.g. ``lda_core.training.session.stamp``: the trainer
        info). Returns the path."""
        state = state_from_block_files(header, sources, source_files)
        if prepare is not None:
            state = prepare(state)
        if header.counters.get("step") != state.step:
            raise UsageError("word-block header step %s does not match its state's %d"
                             % (header.counters.get("step"), state.step))
        return self.publish(state, check_finite=check_finite)

    def remove_leftovers(self) -> List[str]:
        """Delete what killed publishes left behind (temporary checkpoint directories and
        pointer files, module docstring); only the writer holding the lease calls this.
        Returns the deleted paths."""
        self._swept = True
        if not self.files.isdir(self.root):
            return []
        gone = []
        for name in self.files.listdir(self.root):
            if _LEFTOVER.match(name):
                p = self.files.join(self.root, name)
                if self.files.isdir(p):
                    self.files.remove_tree(p)
                else:
                    self.files.remove_file(p)
                gone.append(p)
        if gone:
            logger.info("removed %d leftover(s) of killed checkpoint publishes in %s",
                        len(gone), self.root)
        return gone

    def prune(self, keep_last: int, protect: Optional[int] = None,
              protect_name: Optional[str] = None) -> List[str]:
        """Delete all but the ``keep_last`` newest checkpoints (by step), never ``protect``
        (a step; ``protect_name``: only that directory of the step), a :attr:`pinned` step
        nor the one LATEST names. Returns the deleted paths."""
        if keep_last < 1:
            raise UsageError("keep_last must be >= 1, got %r" % (keep_last,))
        ptr = self.pointer_name()
        ckpts = self.list_checkpoints()
        deleted = []
        for c in ckpts[:-keep_last] if len(ckpts) > keep_last else []:
            base = self.files.basename(c.path)
            if base == ptr or base == protect_name or c.step in self.pinned or (
                    protect_name is None and c.step == protect):
                continue
            self.files.remove_tree(c.path)
            deleted.append(c.path)
            fault_point("prune")
        if deleted:
            logger.debug("pruned %d old checkpoint(s), keeping the last %d", len(deleted),
                         keep_last)
        return deleted


    def discard_after(self, step: int) -> List[str]:
        """Delete the checkpoints after ``step`` (LATEST must already name ``step``'s: they
        are then never read as the model). Returns the deleted paths."""
        ptr = self.pointer()
        if ptr is None or ptr != int(step):
            raise UsageError("discard_after(%d): LATEST names step %s, not %d"
                             % (step, ptr, step))
        gone = []
        for c in self.list_checkpoints():
            if c.step > int(step):
                self.files.remove_tree(c.path)
                gone.append(c.path)
        return gone


def _step_of(name: str) -> int:
    return int(_NAME.match(name).group(1))
