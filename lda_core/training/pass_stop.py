"""The ``--passes auto`` stopping rule: stop when a pass no longer raises the held-out score.

The training session (:mod:`lda_core.training.session`) feeds it the held-out score at each pass end;
its state travels in the run info and checkpoints so ``--resume`` continues the same rule.
The model kept is the best pass's, not the last one's: the session publishes a checkpoint at
every pass end, keeps the best one from pruning, and when the rule stops re-publishes it as the
model (:meth:`lda_core.training.session.Session.keep_best`). A pass that scores
:data:`AUTO_COLLAPSE` nats/token or more below the best stops the run at once, whatever the
patience, with a warning: the model collapsed, and more passes of the same schedule do not
bring it back.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

from lda_core.errors import UsageError

# --passes auto: a pass must raise the held-out document-completion LL/token by this much
AUTO_MIN_GAIN = 0.005
AUTO_MAX_PASSES = 20     # ... and at most this many passes are run
AUTO_PATIENCE = 1        # ... and it stops after this many passes in a row that did not
AUTO_KEY = "passes_auto"   # run info / step record key of the rule's state
# ... and a pass this far below the best (nats/token) is a collapse: stop at once
AUTO_COLLAPSE = 0.1
# evaluation cadence (global steps) when --eval-every is not given; with --passes auto the
# pass ends are the evaluations (a cadence would score the held-out set again mid-pass)
EVAL_EVERY = 50


def default_eval_every(eval_every, auto: bool) -> int:
    """``--eval-every`` as given, else :data:`EVAL_EVERY`, or 0 (the pass ends only) for a
    ``--passes auto`` run."""
    if eval_every is not None:
        return int(eval_every)
    return 0 if auto else EVAL_EVERY


class PassStop:
    """The ``--passes auto`` rule: the held-out score (document completion, LL/token) is
    evaluated at the end of every pass; a pass *improves* when its score is at least
    ``min_gain`` nats/token above the best earlier pass's (the first pass always does).
    Training stops after ``patience`` passes in a row that did not improve, or after
    ``max_passes`` passes. The decision is a function of the settings and ``scores`` alone
    (deterministic), and both travel in the checkpoints' run info (:meth:`to_info`,
    :meth:`from_info`), so a resumed run applies the same rule to the same history."""

    def __init__(self, min_gain: float = AUTO_MIN_GAIN, max_passes: int = AUTO_MAX_PASSES,
                 scores: Sequence[float] = (), patience: int = AUTO_PATIENCE,
                 steps: Sequence[int] = (), collapse: float = AUTO_COLLAPSE):
        if not (float(min_gain) >= 0 and math.isfinite(float(min_gain))):
            raise UsageError("passes auto: min_gain must be a finite number >= 0, got %r"
                             % (min_gain,))
        if int(max_passes) < 1:
            raise UsageError("passes auto: max_passes must be >= 1, got %r" % (max_passes,))
        if int(patience) < 1:
            raise UsageError("passes auto: patience must be >= 1 (passes without a gain "
                             "before stopping), got %r" % (patience,))
        self.min_gain = float(min_gain)
        self.max_passes = int(max_passes)
        self.patience = int(patience)
        self.scores: List[float] = [float(x) for x in scores]
        #: the global step of each pass end (the checkpoint published there); a rule state
        #: recorded before they were kept has fewer than its scores
        self.steps: List[int] = [int(x) for x in steps]
        self.collapse = float(collapse)

    def _stale(self) -> int:
        """Passes in a row, up to the last, that did not improve on the best before them."""
        n = 0
        for i in range(len(self.scores) - 1, 0, -1):
            if self.scores[i] >= max(self.scores[:i]) + self.min_gain:
                break
            n += 1
        return n

    @property
    def collapsed(self) -> bool:
        """The last pass scored :data:`AUTO_COLLAPSE` or more below the best before it."""
        return len(self.scores) > 1 and \
            self.scores[-1] <= max(self.scores[:-1]) - self.collapse

    @property
    def stopped(self) -> bool:
        return (len(self.scores) >= self.max_passes or self._stale() >= self.patience
                or self.collapsed)

    @property
    def best(self) -> int:
        """The index (from 0) of the pass with the highest score (the earliest of equals)."""
        return max(range(len(self.scores)), key=lambda i: (self.scores[i], -i)) \
            if self.scores else -1

    def best_step(self):
        """The global step of the best pass's end, or None when not recorded."""
        b = self.best
        return self.steps[b] if 0 <= b < len(self.steps) else None

    def reason(self) -> str:
        if not self.stopped:
            return ""
        n, stale = len(self.scores), self._stale()
        if self.collapsed:
            return ("pass %d scored %.4f, %.4g nats/token below the best (pass %d, %.4f): the "
                    "model collapsed" % (n, self.scores[-1], max(self.scores[:-1]) -
                                         self.scores[-1], self.best + 1,
                                         self.scores[self.best]))
        if stale >= self.patience:
            what = "pass %d" % n if stale == 1 else "passes %d-%d" % (n - stale + 1, n)
            return ("%s gained < %g nats/token over the best earlier pass (the last: %.4g; "
                    "patience %d)" % (what, self.min_gain,
                                      self.scores[-1] - max(self.scores[:-1]), self.patience))
        return "the cap of %d passes was reached" % self.max_passes

    def add(self, score: float, step: Optional[int] = None) -> bool:
        """Record the held-out score at the end of the next pass (``step``: the global step
        there); whether to stop now."""
        if step is not None and len(self.steps) == len(self.scores):
            self.steps.append(int(step))
        self.scores.append(float(score))
        return self.stopped

    def to_info(self) -> Dict[str, Any]:
        out = dict(min_gain=self.min_gain, max_passes=self.max_passes,
                   patience=self.patience, scores=list(self.scores), stopped=self.stopped,
                   steps=list(self.steps), collapse=self.collapse)
        if self.stopped and self.scores:
            out["kept_pass"] = self.best + 1
        return out

    @classmethod
    def from_info(cls, info: Dict[str, Any]) -> "PassStop":
        return cls(info.get("min_gain", AUTO_MIN_GAIN),
                   info.get("max_passes", AUTO_MAX_PASSES), info.get("scores", ()),
                   info.get("patience", AUTO_PATIENCE), info.get("steps", ()),
                   info.get("collapse", AUTO_COLLAPSE))
