"""Regular expressions that cannot backtrack without bound: the safe subset a token pattern
(``--token-pattern``, and the ``token_pattern`` a model's ``tokenizer.json`` supplies) must
compile under, so that no pattern a model file carries can hang a reader.

Python's ``re`` backtracks: a pattern such as ``(a|aa)+$`` takes time exponential in the
length of a run of ``a``, and ``\\w+\\w+!`` time polynomial in it. :func:`check_safe` reads the
pattern's parse tree (``re``'s own parser) and refuses, with one line naming the construct:

* a backreference or a conditional group (``\\1``, ``(?(1)...)``);
* a repeat (``*``, ``+``, ``{m,n}`` with n > 1) inside another repeat: ``(a+)+``, ``(\\w{1,3})*``;
* an alternation inside a repeat: ``(a|aa)+``, ``(?:x|y)*`` (a character class ``[xy]`` is
  the safe way to say the latter);
* two unbounded repeats in one sequence that can match the same characters with nothing
  between them that the first cannot match: ``\\w+\\w+``, ``[a-z]+.[a-z]+`` (but
  ``[a-z]+'[a-z]+`` is fine: ``'`` ends the first run).

Under these rules every match attempt is linear in the text it scans (each position is
reached by one repeat in one way). Whether two one-character items can match the same
character is decided on the code points U+0000 to U+FFFF (the categories and classes of
``re`` do not change above them in ways a token pattern relies on).
"""
from __future__ import annotations

import re

try:                                  # Python 3.11+: the parser moved
    from re import _compiler as _sre_compile, _constants as _c, _parser as _sre_parse
except ImportError:                   # pragma: no cover (Python < 3.11)
    import sre_compile as _sre_compile          # type: ignore[no-redef]
    import sre_constants as _c                  # type: ignore[no-redef]
    import sre_parse as _sre_parse              # type: ignore[no-redef]

from lda_core.errors import UsageError

_REPEATS = tuple(getattr(_c, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
                 if hasattr(_c, n))
_ONE_CHAR = (_c.LITERAL, _c.NOT_LITERAL, _c.IN, _c.ANY, _c.CATEGORY)
_ZERO_WIDTH = (_c.AT, _c.ASSERT, _c.ASSERT_NOT)
_REFERENCES = (_c.GROUPREF, _c.GROUPREF_EXISTS) + tuple(
    getattr(_c, n) for n in ("GROUPREF_IGNORE", "GROUPREF_LOC_IGNORE", "GROUPREF_UNI_IGNORE")
    if hasattr(_c, n))
_SAMPLE = "".join(chr(i) for i in range(0xD800)) + "".join(chr(i) for i in range(0xE000,
                                                                              0x10000))
_FIX = "rewrite it so that no part can match the same text in two ways"


class _Unsafe(Exception):
    pass


def _body(item) -> list:
    op, av = item
    if op in _REPEATS:
        return list(av[2])
    if op == _c.SUBPATTERN:
        return list(av[-1])
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return list(av[1])
    if getattr(_c, "ATOMIC_GROUP", None) is not None and op == _c.ATOMIC_GROUP:
        return list(av)
    return []


def _single(items: list):
    """The one-character item a sequence consists of (through groups), or None."""
    while len(items) == 1 and items[0][0] == _c.SUBPATTERN:
        items = list(items[0][1][-1])
    return items[0] if len(items) == 1 and items[0][0] in _ONE_CHAR else None


class _Checker:
    def __init__(self, parsed):
        self.state = parsed.state
        self.flags = parsed.state.flags
        self._seen = {}

    def _chars(self, item) -> frozenset:
        """The sampled characters a one-character item matches."""
        if item not in self._seen:
            rx = _sre_compile.compile(_sre_parse.SubPattern(self.state, [item]), self.flags)
            self._seen[item] = frozenset(m.group(0) for m in rx.finditer(_SAMPLE))
        return self._seen[item]

    def _overlap(self, a, b) -> bool:
        if a is None or b is None:
            return True                       # not one character: assume they can meet
        return bool(self._chars(_freeze(a)) & self._chars(_freeze(b)))

    def sequence(self, items: list, in_repeat: bool) -> None:
        """Check one sequence of parse items (rules in the module docstring)."""
        run = None          # the unbounded repeat whose run is not yet ended: its item, or ANY
        for item in items:
            op, av = item
            if op in _REFERENCES:
                raise _Unsafe("a backreference or conditional group")
            if op == _c.BRANCH:
                if in_repeat:
                    raise _Unsafe("an alternation (|) inside a repeat")
                for alt in av[1]:
                    self.sequence(list(alt), in_repeat)
                run = "any" if run is not None else None
                continue
            if op in _REPEATS:
                lo, hi, body = av[0], av[1], list(av[2])
                repeating = hi > 1
                if repeating and in_repeat:
                    raise _Unsafe("a repeat inside a repeat")
                if repeating and self._delimited(body):
                    # each pass begins with a character no run inside it takes: (?:-\w+)*
                    self.sequence(body, in_repeat)
                    if hi == _c.MAXREPEAT and run is not None and self._overlap(
                            run if run != "any" else None, body[0]):
                        raise _Unsafe("two unbounded repeats that can match the same "
                                      "characters one after the other")
                    run = "any"
                    continue
                self.sequence(body, in_repeat or repeating)
                if hi == _c.MAXREPEAT:
                    if run is not None and self._overlap(run if run != "any" else None,
                                                         _single(body)):
                        raise _Unsafe("two unbounded repeats that can match the same "
                                      "characters one after the other")
                    run = _single(body) or "any"
                elif lo == 0 and run is not None:
                    first = body[0] if body and body[0][0] in _ONE_CHAR else None
                    if self._contains_unbounded(body) and (
                            first is None or self._overlap(run if run != "any" else None,
                                                           first)):
                        raise _Unsafe("two unbounded repeats that can match the same "
                                      "characters one after the other")
                continue
            if op in _ZERO_WIDTH:
                if op != _c.AT:
                    self.sequence(_body(item), in_repeat)
                continue
            if op in _ONE_CHAR:
                if run is not None and not self._overlap(run if run != "any" else None, item):
                    run = None                  # a character the run cannot take ends it
                continue
            body = _body(item)
            if body:                            # a group: its items in this sequence
                self.sequence(body, in_repeat)
                if self._contains_unbounded(body):
                    run = _single(body) if _single(body) is not None else "any"
                continue
            raise _Unsafe("the construct %s" % op)

    def _delimited(self, body: list) -> bool:
        """``body`` begins with one required character that none of its unbounded repeats
        can match, and holds no alternation: passes of a repeat of it cannot overlap."""
        if len(body) < 2 or body[0][0] not in _ONE_CHAR:
            return False
        for op, av in body[1:]:
            if op == _c.BRANCH:
                return False
            if op in _REPEATS and av[1] == _c.MAXREPEAT and self._overlap(
                    _single(list(av[2])), body[0]):
                return False
            if op not in _REPEATS and op not in _ONE_CHAR and op not in _ZERO_WIDTH:
                return False
        return True

    def _contains_unbounded(self, items: list) -> bool:
        for op, av in items:
            if op in _REPEATS and av[1] == _c.MAXREPEAT:
                return True
            if op == _c.BRANCH and any(self._contains_unbounded(list(a)) for a in av[1]):
                return True
            if self._contains_unbounded(_body((op, av))):
                return True
        return False


def _freeze(x):
    """A hashable copy of a parse item (for the cache)."""
    if isinstance(x, list):
        return tuple(_freeze(i) for i in x)
    if isinstance(x, tuple):
        return tuple(_freeze(i) for i in x)
    return x


def check_safe(pattern: str, what: str = "--token-pattern") -> None:
    """UsageError naming ``pattern`` and the construct when it is outside the safe subset
    (module docstring); a pattern ``re`` cannot parse is left to the caller's compile."""
    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, TypeError):
        return
    try:
        _Checker(parsed).sequence(list(parsed), False)
    except _Unsafe as e:
        raise UsageError("%s %r could take time exponential or polynomial in the length of "
                         "the text (it holds %s), so it is refused: a pattern must not be "
                         "able to hang a reader; %s (a character class [..] in place of an "
                         "alternation, one repeat per run of characters)"
                         % (what, pattern, e, _FIX)) from None

