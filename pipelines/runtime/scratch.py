"""A Beam run's scratch space, on a local disk or an object store: where the states, statistics
and step infos of a window go while it runs, how a run's folder is made private and removed,
and the few places where a local folder and an object store differ (the file layer of the path,
:mod:`pipelines.runtime.object_store_files` / :mod:`lda_core.storage.files`)."""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import uuid
from typing import Dict, Optional

import numpy as np

from lda_core.storage.files import files_for
from pipelines.runtime.paths import is_remote

SCRATCH_DIR = ".beam-scratch"


def default_root(model_dir: str, local_runner: bool, scratch_dir: Optional[str] = None) -> str:
    """Where the states of the steps inside a window go when workers are other processes.

    Local runners: shared memory (``/dev/shm``) -- every worker is on the driver's machine,
    and a state is written there without disk write-back. Remote runners, and any model directory
    on an object store (``gs://`` ...): ``MODEL_DIR/.beam-scratch`` (read and written through
    Beam's ``FileSystems`` there). Locally this is a name prefix: each run's folder is created
    fresh and private beside it (:func:`new_scratch`). A killed run's folder is removed unread
    by the next run on the same model directory."""
    tag = hashlib.sha1(os.path.abspath(model_dir).encode()).hexdigest()[:16]
    if scratch_dir:
        return os.path.join(scratch_dir, "ldabeam-scratch-%s" % tag)
    if is_remote(model_dir):
        return model_dir.rstrip("/") + "/" + SCRATCH_DIR
    if local_runner and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return os.path.join("/dev/shm", "ldabeam-scratch-%s" % tag)
    return os.path.join(model_dir, SCRATCH_DIR)


def spill_dir(scratch: Optional[str], local_runner: bool) -> Optional[str]:
    """The folder statistics may be spilled to as files that workers on this machine read
    (a local runner's local scratch folder), or None (they travel through the runner)."""
    if scratch is None or not local_runner or is_remote(scratch):
        return None
    return scratch


def clean(scratch: str) -> None:
    """Empty a run's scratch folder after a window (an object-store one is removed: objects
    have no folder to keep)."""
    if is_remote(scratch):
        remove_tree(scratch)
        return
    for name in os.listdir(scratch):
        p = os.path.join(scratch, name)
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass


def remove_run(scratch: str, root: str) -> None:
    """Remove a finished run's folder, and on an object store the root prefix too (a local
    root is only a name prefix other runs share; on an object store the run's folder lies
    under the root, so one listing of the root finds both)."""
    if is_remote(root):
        remove_tree(root)
        return
    remove_tree(scratch)


def write_npz_atomic(path: str, arrays: Dict[str, np.ndarray]) -> None:
    """One uncompressed ``.npz`` published whole: locally a temporary sibling and a rename,
    on an object store one upload (which appears only when complete)."""
    if is_remote(path):
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        files_for(path).write_atomic(path, buf.getvalue())
        return
    tmp = "%s.tmp-%s" % (path, uuid.uuid4().hex)
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_bytes(path: str, data) -> None:
    """``data`` (bytes, or a list of byte buffers written one after the other, e.g. a header
    and an array's own memory) published whole at ``path``: locally a temporary sibling and a
    rename (not fsynced: scratch lives only while its window runs), on an object store one
    upload."""
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
    if is_remote(path):
        files_for(path).write_atomic(path, b"".join(parts))
        return
    tmp = "%s.tmp-%s" % (path, uuid.uuid4().hex)
    try:
        with open(tmp, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def npz_source(path: str):
    """What ``np.load`` reads ``path`` from: the local path, or the object's bytes."""
    return io.BytesIO(read_bytes(path)) if is_remote(path) else path



def read_bytes(path: str) -> bytes:
    return files_for(path).read_bytes(path)


def make_dirs(path: str) -> None:
    """``os.makedirs(exist_ok=True)`` locally; nothing on an object store."""
    files_for(path).makedirs(path)


def remove_tree(path: str) -> None:
    """Remove a folder and everything in it, if present (errors ignored)."""
    files_for(path).remove_tree(path)


def remove_file(path: str) -> None:
    """Remove one file, if present (errors ignored; on an object store one request, and an
    object that cannot be deleted is reported once by the file layer)."""
    try:
        files_for(path).remove_file(path)
    except OSError:
        pass


def remove_files(paths) -> None:
    """Remove files, if present (errors ignored): on an object store the store's batch delete
    (one request for up to 100 objects on ``gs://``), with single deletes for what it refuses
    and one warning for what is left."""
    paths = list(paths)
    if not paths:
        return
    if is_remote(paths[0]):
        files_for(paths[0]).remove_files(paths)
        return
    for p in paths:
        remove_file(p)


def list_names(path: str):
    """Names in a folder (``[]`` when it does not exist; one listing on an object store)."""
    fs = files_for(path)
    try:
        return fs.listdir(path)
    except OSError:
        return []


def new_scratch(root: str) -> str:
    """A fresh folder for one run's scratch files (states, statistics, infos).

    Locally (``/dev/shm`` or a folder beside the model): created by ``tempfile.mkdtemp``
    under ``root``'s parent with ``root``'s name and an unpredictable suffix -- it cannot
    exist before (no other user can prepare it), mode 0700 -- and checked to be a real folder
    owned by this user before anything is written into it (:func:`check_private`). On an object
    store: ``root/<random id>`` (the bucket's permissions apply)."""
    if is_remote(root):
        path = root.rstrip("/") + "/" + uuid.uuid4().hex
        make_dirs(path)
        return path
    import tempfile
    parent, prefix = os.path.split(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    path = tempfile.mkdtemp(prefix=prefix + "-", dir=parent)
    check_private(path)
    return path


def check_private(path: str) -> None:
    """PermissionError unless ``path`` is a folder (not a link) owned by this user that no
    one else can read or write."""
    import stat
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError("scratch folder %s is not a private folder of this user (owner "
                              "uid %d, mode %o): refusing to use it" % (path, st.st_uid,
                                                                       st.st_mode & 0o7777))


def remove_stale_scratch(root: str) -> None:
    """Remove, unread, the scratch folders a killed run on the same model left (those of
    :func:`new_scratch` for ``root`` that this user owns; other users' are not touched)."""
    if is_remote(root):
        remove_tree(root)
        return
    import shutil
    import stat
    parent, prefix = os.path.split(os.path.abspath(root))
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix + "-"):
            continue
        p = os.path.join(parent, name)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            shutil.rmtree(p, ignore_errors=True)
