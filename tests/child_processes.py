"""Helpers for tests that signal a child ``ldabeam`` process."""
import signal


def interruptible() -> None:
    """``preexec_fn`` of a child the test will interrupt: SIGINT and SIGTERM at their defaults.
    A process started in the background by a non-interactive shell (as CI may start the
    suite) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt, so a
    Ctrl-C test would see the command run to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
