"""Child processes: signals, and services listening on free ports (Beam's job service)."""
import signal
import socket
import subprocess
import sys
import time

PY = sys.executable


def interruptible() -> None:
    """``preexec_fn`` of a child the test will interrupt: SIGINT and SIGTERM at their defaults.
    A process started in the background by a non-interactive shell (as CI may start the
    suite) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt, so a
    Ctrl-C test would see the command run to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc, timeout: float = 60.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("service exited early with code %s" % proc.returncode)
        with socket.socket() as s:
            if s.connect_ex(("localhost", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError("nothing listens on port %d after %.0f s" % (port, timeout))


class Service:
    """A subprocess listening on a free port; killed on exit."""

    def __init__(self, args, log_path, env=None):
        self.port = free_port()
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([a.replace("{port}", str(self.port)) for a in args],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def __enter__(self):
        try:
            wait_port(self.port, self.proc)
        except Exception:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.log.close()


def job_service(tmp_path):
    """Beam's own job service (``local_job_service_main``) on a free port."""
    return Service([PY, "-m", "apache_beam.runners.portability.local_job_service_main",
                    "--port", "{port}"], str(tmp_path / "job_service.log"))
