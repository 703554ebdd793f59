"""Bit-for-bit and relative comparisons of topic states."""
import numpy as np


def same_bits(a, b):
    """Two algorithms (or anything with ``to_state()``) hold the same state: the same step and
    arrays with the same bytes."""
    sa, sb = a.to_state(), b.to_state()
    assert sa.step == sb.step
    assert sorted(sa.arrays) == sorted(sb.arrays)
    for name in sa.arrays:
        assert sa.arrays[name].tobytes() == sb.arrays[name].tobytes(), name


def max_rel(a: np.ndarray, b: np.ndarray) -> float:
    """The largest relative difference of ``b`` from ``a``, element by element."""
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-300)))
