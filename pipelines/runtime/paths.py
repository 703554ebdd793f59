"""Paths of the pipelines, local or object-store URLs (``gs://``, ``s3://``, ...), all through
the one file layer of :mod:`lda_core.storage.files` (``files_for(path)``: local files, the
object-store layer, or a test's fake).

Importing :mod:`pipelines` registers the object-store layer
(:mod:`pipelines.runtime.object_store_files`) for every URL scheme, so topic states,
checkpoints and run logs under a URL go through Beam's ``FileSystems`` too. What a layer
does not offer stays here, in one place: the absolute form of a path, a file's version stamp,
and glob matching (``FileSystems.match`` for URLs).
"""
from __future__ import annotations

import contextlib
import glob
import os
import signal
from typing import BinaryIO, List, Optional, Sequence, Tuple

from lda_core.errors import UsageError
from lda_core.storage.files import files_for, path_scheme


def is_remote(path) -> bool:
    """True for a URL of an object store (any scheme but ``file``); False for a local path."""
    return path is not None and path_scheme(path) is not None


def join(base: str, *parts: str) -> str:
    return files_for(base).join(base, *parts)


def exists(path: str) -> bool:
    return files_for(path).exists(path)


def isdir(path: str) -> bool:
    """A local directory, or a URL prefix holding at least one object."""
    return files_for(path).isdir(path)


def parent(path: str) -> str:
    """The folder holding ``path`` (absolute locally; a URL stays a URL)."""
    return files_for(path).dirname(path.rstrip("/") if is_remote(path) else path)


def folder(path: str) -> str:
    """The folder part of ``path`` as written (a relative local path stays relative; ``""``
    above its first component)."""
    return path.rstrip("/").rsplit("/", 1)[0] if is_remote(path) else os.path.dirname(path)


def relative(path: str, root: str) -> Optional[str]:
    """``path`` relative to the folder ``root`` with ``/`` separators, or None when it lies
    outside it."""
    if is_remote(root):
        prefix = root.rstrip("/") + "/"
        return path[len(prefix):] if path.startswith(prefix) else None
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root)).replace(os.sep, "/")
    return None if rel == ".." or rel.startswith("../") else rel


def absolute(path: str) -> str:
    """``os.path.abspath`` for a local path; a URL as it is (without a trailing ``/``)."""
    return path.rstrip("/") if is_remote(path) else os.path.abspath(path)


def open_read(path: str) -> BinaryIO:
    """A binary file object for a local path or a URL."""
    return files_for(path).open_read(path)


def make_dirs(path: str) -> None:
    """Create the local folder ``path`` and its parents (an object store has no folders)."""
    files_for(path).makedirs(path)


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` so that a reader sees either nothing or the whole file: the file layer's
    ``write_atomic`` (locally a temporary sibling, fsync, ``os.replace`` and an fsync of the
    folder; on object stores one upload, which appears only when it completes)."""
    files_for(path).write_atomic(path, data)


@contextlib.contextmanager
def interrupts_held():
    """SIGINT and SIGTERM that arrive inside the block take effect at its end: a block that
    publishes several files as one output is never cut in the middle by Ctrl-C. Only the
    main thread can hold them (the handlers are the interpreter's); elsewhere the block runs
    as it is."""
    held: List[int] = []

    def hold(signum, frame):
        held.append(signum)
    try:
        old = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:               # not the main thread
        yield
        return
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if held:
            handler = old[held[0]]
            if callable(handler):
                handler(held[0], None)          # raises KeyboardInterrupt / Terminated
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), held[0])


def write_files_atomic(items: Sequence[Tuple[str, bytes]], unpublish: Sequence[str] = (),
                       remove: Sequence[str] = ()) -> None:
    """Several files that form one output: ``unpublish`` (the file readers open first, when
    it is being replaced) is removed, each of ``items`` written with :func:`write_atomic` in
    order (the file readers open first comes last), then ``remove`` (files of the old output
    the new one does not have) deleted; interrupts wait for the end (:func:`interrupts_held`).
    A kill in the middle leaves complete files only, and never the old main file beside new
    side files."""
    with interrupts_held():
        for p in unpublish:
            files_for(p).remove_file(p)
        for p, data in items:
            write_atomic(p, data)
        for p in remove:
            files_for(p).remove_file(p)


def model_dir_of(model: str) -> str:
    """MODEL_DIR of ``--model``: the model directory itself, or the one a checkpoint
    directory (``MODEL_DIR/checkpoints/step-...``, recognised by its state.json) belongs to."""
    if exists(join(model, "state.json")):
        return parent(parent(model))
    return absolute(model)


def file_identity(path: str) -> Tuple[str, float, int]:
    """``(path, modification time, size)`` of a local file, to key a cache of what was read
    from it (a rewritten file gets a new key); an object-store path is ``(path, 0.0, 0)``:
    objects the trainer reads are written once."""
    if is_remote(path):
        return (path, 0.0, 0)
    st = os.stat(path)
    return (path, st.st_mtime, st.st_size)


def version_stamp(path: str) -> Optional[tuple]:
    """What identifies this version of a local file (path, device, inode, size, modification
    time), to key a cache of its hash; None for an object (no cheap version stamp) or a file
    that is gone."""
    if is_remote(path):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def parquet_source(path: str):
    """What pyarrow opens ``path`` from: the local path itself (memory-mapped by pyarrow), or
    an open file object for a URL."""
    return open_read(path) if is_remote(path) else path


def match_sizes(pattern: str) -> List[Tuple[str, int]]:
    """``(path, size in bytes)`` of the files matching a local or remote glob, sorted by path
    (a local file removed between the listing and its ``stat`` is left out)."""
    if is_remote(pattern):
        from apache_beam.io.filesystems import FileSystems   # only for URLs
        res = FileSystems.match([pattern])[0]
        return sorted((m.path, int(m.size_in_bytes)) for m in res.metadata_list)
    out = []
    for path in sorted(glob.glob(pattern)):
        try:
            out.append((path, os.path.getsize(path)))
        except OSError:
            pass
    return out


def match(pattern: str) -> List[str]:
    """Sorted paths matching a local or remote glob."""
    if is_remote(pattern):
        return [p for p, _ in match_sizes(pattern)]
    return sorted(glob.glob(pattern))


def cheap_to_read(path: str) -> bool:
    """Reading ``path`` again costs no transfer: a local file (an object is downloaded)."""
    return not is_remote(path)


def require_local(path: str, what: str) -> None:
    """UsageError unless ``path`` is a local path; ``what`` says what needs it and what to do
    instead (``"write_dataset writes local directories; copy ..."``)."""
    if is_remote(path):
        raise UsageError("%s (got %s)" % (what, path))
