"""Algorithm parameters: their validation and their declaration.

Every algorithm checks its constructor arguments here, so a bad value always raises the same
``UsageError``, naming the parameter, the allowed range and the value given (``"n_parts must
be an integer in [1, 4096], got 0"``). The command line prefixes the option that set the
parameter (``pipelines.training.algorithm_options``), which finds the parameter by the name at
the start of the message.

:class:`Param` and :class:`ParamSpec` declare an algorithm's settings once (its ``SPEC``):
the constructor's validation, ``params()``, the ``ldabeam train`` options, the Flex Template
metadata and the scikit-learn estimator's mapping are generated from it
(docs/architecture.md, "The parameter spec")."""
import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from lda_core.errors import DataIntegrityError, UsageError

__all__ = ["is_number", "check_number", "check_int", "check_positive", "check_choice", "Param",
           "ParamSpec"]


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


@dataclass(frozen=True)
class Param:
    """One setting of an algorithm, declared once: its constructor keyword and ``params()`` key
    (``name``), ``type`` (int, float, bool, str or ``np.dtype``), ``default``, allowed range
    (``lo``/``hi``, ``*_open`` excluding the bound; or ``choices``), ``help``, the paper's
    ``symbol``, ``option``, the ``ldabeam train`` option (argparse dest) that sets it (None:
    set by the trainer itself, not an option), and ``sklearn``, the scikit-learn estimator
    parameter that sets it (lda_core.sklearn_api; None: none does). The command line, the Flex
    Template metadata, the estimator's mapping and ``params()`` are generated from these
    declarations."""
    name: str
    type: type
    default: Any = None
    lo: Any = None
    hi: Any = None
    lo_open: bool = False
    hi_open: bool = False
    choices: Tuple = ()
    help: str = ""
    symbol: str = ""
    option: Optional[str] = None
    sklearn: Optional[str] = None
    record: bool = True
    attr: Optional[str] = None
    vector: bool = False

    @property
    def attribute(self) -> str:
        """The attribute of the algorithm that holds the setting."""
        return self.attr or self.name

    def check(self, value):
        """``value`` validated and converted to the declared type (UsageError naming the
        setting, the allowed range and the value otherwise); None stays None when the default
        is None (an optional setting)."""
        if value is None and self.default is None:
            return None
        if self.type is np.dtype:
            try:
                dt = np.dtype(value)
            except TypeError:
                raise UsageError("%s=%r is not a numpy dtype (use %s)"
                                 % (self.name, value, " or ".join(self.choices))) from None
            if dt.name not in self.choices:
                raise UsageError("%s=%r is not allowed (%s)"
                                 % (self.name, value, " or ".join(self.choices)))
            return dt
        if self.choices:
            value = check_choice(self.name, value, self.choices)
            return str(value) if self.type is str else value
        if self.vector and not is_number(value):
            return self._check_vector(value)
        if self.type is bool:
            return bool(value)
        if self.type in (int, float):
            return check_number(self.name, value, self.lo, self.hi, self.lo_open, self.hi_open,
                                integer=self.type is int)
        return self.type(value)

    def _check_vector(self, value) -> np.ndarray:
        """A non-empty 1-d sequence of finite numbers in the range, as float64."""
        try:
            a = np.array(value, dtype=np.float64)
        except (TypeError, ValueError):
            a = None
        ok = a is not None and a.ndim == 1 and a.size > 0 and bool(np.all(np.isfinite(a)))
        if ok and self.lo is not None:
            ok = bool(np.all(a > self.lo if self.lo_open else a >= self.lo))
        if ok and self.hi is not None:
            ok = bool(np.all(a < self.hi if self.hi_open else a <= self.hi))
        if not ok:
            raise UsageError("%s must be a number or a sequence of numbers in %s, got %r"
                             % (self.name, _range(self.lo, self.hi, self.lo_open, self.hi_open),
                                value))
        return a

    def export(self, value):
        """The JSON value of a checked setting (as ``params()`` records it)."""
        if isinstance(value, np.dtype):
            return value.name
        if isinstance(value, np.ndarray):
            return [float(x) for x in value]
        return value

    def range_text(self) -> str:
        """The allowed values as help text shows them (``"in (0.5, 1]"``)."""
        if self.choices:
            return "one of %s" % ", ".join(map(str, self.choices))
        if self.type in (int, float) and (self.lo is not None or self.hi is not None):
            return "in " + _range(self.lo, self.hi, self.lo_open, self.hi_open)
        return ""


class ParamSpec(tuple):
    """An algorithm's settings: a tuple of :class:`Param` in ``params()`` order."""

    def __new__(cls, *params: Param):
        names = [p.name for p in params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError("settings declared twice: %s" % ", ".join(sorted(dup)))
        return super().__new__(cls, params)

    def get(self, name: str) -> Optional[Param]:
        for p in self:
            if p.name == name:
                return p
        return None

    def with_param(self, param: Param) -> "ParamSpec":
        """This spec with ``param`` appended (a subclass extending its base's settings)."""
        return ParamSpec(*self, param)

    def replace(self, name: str, **changes) -> "ParamSpec":
        """This spec with setting ``name`` changed (a subclass's own default or range)."""
        if self.get(name) is None:
            raise ValueError("no setting %s to replace" % name)
        return ParamSpec(*(dataclasses.replace(p, **changes) if p.name == name else p
                           for p in self))

    def insert_before(self, name: str, *params: Param) -> "ParamSpec":
        """This spec with ``params`` declared just before setting ``name``."""
        at = [p.name for p in self].index(name)
        return ParamSpec(*self[:at], *params, *self[at:])

    def apply(self, obj, given: Dict[str, Any], owner: str) -> None:
        """Set every setting on ``obj`` (:meth:`resolve`d, each on its attribute)."""
        for name, value in self.resolve(given, owner).items():
            setattr(obj, self.get(name).attribute, value)

    def export(self, obj) -> Dict[str, Any]:
        """The recorded settings of ``obj`` as JSON values, in declaration order."""
        return {p.name: p.export(getattr(obj, p.attribute)) for p in self if p.record}

    def recorded(self, params: Dict[str, Any],
                 older: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The settings of a checkpoint's ``params`` this spec records (the constructor's
        keywords to rebuild the algorithm; the others, state, are left out). A recorded
        setting missing from ``params`` is a DataIntegrityError (an edited or damaged
        checkpoint is never rebuilt with defaults in its place), except those of ``older``:
        settings added after states were first written, with the value those states meant."""
        older = older or {}
        missing = [p.name for p in self
                   if p.record and p.name not in params and p.name not in older]
        if missing:
            raise DataIntegrityError("the checkpoint's parameters lack %s (recorded by every "
                                     "checkpoint of this algorithm)" % ", ".join(missing))
        return {p.name: params[p.name] if p.name in params else older[p.name]
                for p in self if p.record and (p.name in params or p.name in older)}

    def resolve(self, given: Dict[str, Any], owner: str) -> Dict[str, Any]:
        """Every setting of the spec, checked: ``given`` values, the defaults for the rest. A
        name the spec does not declare is a UsageError naming ``owner`` and the settings.
        ``batch_size`` is taken and dropped with a DeprecationWarning: it was a setting of
        every algorithm that no step read; the minibatch size is the schedule's."""
        if "batch_size" in given and "batch_size" not in {p.name for p in self}:
            warnings.warn("%s: batch_size is not an algorithm setting (no step reads it); the "
                          "minibatch size is the schedule's: --minibatch, Schedule.minibatch or "
                          "the estimators' batch_size" % owner, DeprecationWarning,
                          stacklevel=3)
            given = {k: v for k, v in given.items() if k != "batch_size"}
        unknown = sorted(set(given) - {p.name for p in self})
        if unknown:
            raise UsageError("%s has no setting %s (its settings: %s)"
                             % (owner, ", ".join(unknown), ", ".join(p.name for p in self)))
        return {p.name: p.check(given.get(p.name, p.default)) for p in self}
