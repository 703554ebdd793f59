"""The project's error types: what a user can fix, apart from what is a bug.

Every error the project raises on purpose derives from :class:`LdaBeamError`.

* :class:`UserError` and its subclasses are input, usage and resource errors: the command line
  prints them as one line naming the file, record or option and the fix, and exits 2. They
  also derive from the built-in type a caller would expect (``ValueError`` for bad values,
  ``OSError`` for a full disk), so ``except ValueError`` in callers keeps working.
* :class:`StepRefused` is an algorithm refusing one minibatch (non-finite statistics): the
  training session turns it into a :class:`TrainingError` and keeps the last good checkpoint.
* Anything else reaching the command line (``ValueError`` from numpy, ``KeyError``, ...) is an
  internal error: a traceback, exit 1, and a line asking to report it.
* :class:`Terminated` is SIGTERM as an exception: a ``KeyboardInterrupt``, so the code that
  cleans up after Ctrl-C runs for it too (the command line installs the handler).
"""
from __future__ import annotations


class LdaBeamError(Exception):
    """Base of every error the project raises on purpose."""


class UserError(LdaBeamError):
    """Something the user can fix. One line, exit 2; the message names what and how to fix."""


class UsageError(UserError, ValueError):
    """Options missing, out of range or contradicting each other."""


class InputError(UserError, ValueError):
    """An input that is wholly unusable: missing, not of the expected format, unsupported."""


class DataIntegrityError(InputError):
    """Data that is not what was published: a shard changed after vectorize, a dataset or
    output whose writer was killed (no manifest), a checkpoint that does not verify."""


class OutputError(UserError, ValueError):
    """An output that cannot be written where asked: it is, contains or lies inside an input,
    another writer holds it, or it holds files this command did not write."""


class ResourceError(UserError, OSError):
    """Not enough of something the machine provides: disk space, memory, a writable file
    system."""


class SpecialFileError(UserError, OSError):
    """A FIFO, socket or device where a file is read: reading it could block forever or never
    end, so readers open only regular files (an OSError, so a reader that falls back on an
    unreadable file falls back on this one too)."""

    def __str__(self):
        return "%s %s" % (self.filename, self.strerror) if self.filename else super().__str__()


class StepRefused(LdaBeamError, ValueError):
    """An algorithm refuses to apply one minibatch (e.g. non-finite statistics)."""


class TrainingError(UserError, ValueError):
    """A minibatch could not be applied; the run stopped and the last good checkpoint stays
    the latest."""


class Terminated(KeyboardInterrupt):
    """SIGTERM received (raised by the command line's signal handler). A ``KeyboardInterrupt``
    so that a terminated command stops as on Ctrl-C: ``finally`` blocks and ``except
    KeyboardInterrupt`` clean-ups run, and ``except Exception`` does not swallow it."""
