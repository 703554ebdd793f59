"""Validation of algorithm parameters: every algorithm checks its constructor arguments here, so
a bad value always raises the same ``ValueError``, naming the parameter, the allowed range and
the value given (``"n_parts must be an integer in [1, 4096], got 0"``). The command line
prefixes the option that set the parameter (``pipelines.training.algorithm_options``), which finds the
parameter by the name at the start of the message."""
import math
from typing import Optional, Sequence

import numpy as np

from lda_core.errors import UsageError

__all__ = ["is_number", "check_number", "check_int", "check_positive", "check_choice"]


def is_number(value) -> bool:
    """A real number (Python or numpy), not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _range(lo, hi, lo_open: bool, hi_open: bool) -> str:
    return "%s%s, %s%s" % ("(" if lo_open or lo is None else "[", "-inf" if lo is None else lo,
                           "inf" if hi is None else hi, ")" if hi_open or hi is None else "]")


def check_number(name: str, value, lo=None, hi=None, lo_open: bool = False,
                 hi_open: bool = False, integer: bool = False):
    """``value`` as an int (``integer``) or float, or ValueError unless it is a finite number in
    the range from ``lo`` to ``hi`` (``None``: unbounded; ``*_open``: the bound itself is
    excluded). An integer parameter accepts an integral float (``5.0``)."""
    ok = is_number(value)
    if ok:
        try:
            ok = math.isfinite(float(value))
        except OverflowError:          # an int beyond float range: finite, compare exactly
            ok = True
    if ok and integer and not isinstance(value, (int, np.integer)):
        ok = float(value).is_integer()
    if ok and lo is not None:
        ok = value > lo if lo_open else value >= lo
    if ok and hi is not None:
        ok = value < hi if hi_open else value <= hi
    if not ok:
        raise UsageError("%s must be %s in %s, got %r"
                         % (name, "an integer" if integer else "a finite number",
                            _range(lo, hi, lo_open, hi_open), value))
    return int(value) if integer else float(value)


def check_int(name: str, value, lo: int, hi: Optional[int] = None) -> int:
    """An integer in [lo, hi] (hi ``None``: unbounded)."""
    return check_number(name, value, lo, hi, integer=True)


def check_positive(name: str, value, allow_zero: bool = False) -> float:
    """A finite number > 0 (``allow_zero``: >= 0)."""
    return check_number(name, value, 0, None, lo_open=not allow_zero)


def check_choice(name: str, value, choices: Sequence):
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise UsageError("%s must be one of %s, got %r" % (name, ", ".join(map(repr, choices)),
                                                           value))
    return value
