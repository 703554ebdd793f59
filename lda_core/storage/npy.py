"""The ``.npy`` format, read and written in one place: arrays as data (never pickled), C or
Fortran order, format versions 1.0 to 3.0 read, 1.0 written (numpy's own choice for every
array this project writes). Topic states (:mod:`lda_core.storage.state`), word-block files
(:mod:`lda_core.storage.blocks`), exports and the synthetic corpora's planted topics go
through it."""
from __future__ import annotations

import io
from typing import BinaryIO, Tuple

import numpy as np

from lda_core.storage.files import files_for


def read_header(f: BinaryIO) -> Tuple[tuple, bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the .npy file ``f`` is open on, read from its
    start; ``f`` is left at the first data byte. ValueError when it is not a .npy file of a
    known version. Nothing is allocated from the shape."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ValueError("unsupported .npy version %s" % (version,))
    return tuple(shape), bool(fortran), dtype


def write_header(f: BinaryIO, dtype: np.dtype, shape: tuple) -> None:
    """The header of a C-order array of ``dtype`` and ``shape``: the same bytes
    :func:`write_array` writes before such an array's data."""
    np.lib.format.write_array_header_1_0(
        f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
            "shape": tuple(shape)})


def write_array(f: BinaryIO, arr: np.ndarray) -> None:
    """``arr`` (header and data) to ``f``; a writer that is not a real file receives the data
    in chunks of numpy's buffer size."""
    np.lib.format.write_array(f, arr, allow_pickle=False)


def read_array(f: BinaryIO) -> np.ndarray:
    """The array of the .npy file ``f`` is open on (object arrays refused)."""
    return np.load(f, allow_pickle=False)


def npy_bytes(arr: np.ndarray) -> bytes:
    """``arr`` as the bytes of a .npy file."""
    buf = io.BytesIO()
    write_array(buf, np.asarray(arr))
    return buf.getvalue()


def write_npy_atomic(path: str, arr: np.ndarray) -> None:
    """One array as a .npy file that a reader sees whole or not at all (local or URL: the
    file layer's ``write_atomic``)."""
    files_for(path).write_atomic(path, npy_bytes(arr))
