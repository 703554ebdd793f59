"""Child Python processes forked from one warm interpreter instead of started cold.

A test that needs a separate process -- to kill it at a fault point, to signal it, to run two
writers at once, to run a script as a user runs it -- asks for ``python ARGS`` here:
:func:`popen` and :func:`run` take the arguments after ``python`` (``["-m", "pipelines.cli",
"train", ...]``, ``["-c", CODE]``, ``[SCRIPT, ...]``) and return what ``subprocess.Popen`` /
``subprocess.run`` return (pid, poll, wait, send_signal, kill, communicate, returncode:
negative for a death by signal). The process is forked from ``warm_server.py``, one per test
process, which has imported Beam, pyarrow, numba and the project already: a child starts in
milliseconds instead of re-importing them, and is otherwise a new process (its own
environment, working directory, standard streams, exit status; killed, it dies as a cold one
would).

An environment that changes what an interpreter reads as it starts (``NUMBA_CACHE_DIR``,
``PYTHONHASHSEED``, a ``sitecustomize`` on ``PYTHONPATH``, ...) gets a cold
``subprocess.Popen`` instead (:func:`needs_fresh`). Shell commands reach the server through
:data:`SHIM_CLIENT` (``python -S warm_client.py ARGS``: a shim named ``ldabeam`` or ``python``
in a sandbox's PATH), which passes its own streams, environment, signals and exit status
through.
"""
import atexit
import io
import json
import locale
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "warm_server.py")
SHIM_CLIENT = os.path.join(HERE, "warm_client.py")
SOCKET_ENV = "LDABEAM_TEST_WARM_SOCKET"
ENV_FILE_ENV = "LDABEAM_TEST_WARM_ENV"
#: environment variables read while an interpreter starts or imports (numba's settings, the
#: interpreter's own, the loader's and the allocator's): a child whose values differ from the
#: server's must start cold
FRESH_PREFIXES = ("NUMBA_", "PYTHON", "LD_", "MALLOC_", "GLIBC_", "COVERAGE_")
#: ... except these, which the forked child applies itself
EMULATED = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONIOENCODING")
START_TIMEOUT = 900


def needs_fresh(env, server_env) -> bool:
    """True when ``env`` differs from the server's in what is read at start-up."""
    keys = set(env) | set(server_env)
    for k in keys:
        if k.startswith(FRESH_PREFIXES) and k not in EMULATED and \
                env.get(k) != server_env.get(k):
            return True
    for p in env.get("PYTHONPATH", "").split(os.pathsep):
        if p and any(os.path.exists(os.path.join(p, n))
                     for n in ("sitecustomize.py", "usercustomize.py")):
            return True
    return False


class _Server:
    """The warm interpreter of this test process (started on first use, stopped at exit)."""

    def __init__(self):
        self.proc = None
        self.owner = None
        self.dir = None
        self.sock = None
        self.env = None

    def start(self):
        """Start the server without waiting for it (``ensure`` waits)."""
        if self.proc is not None and self.owner == os.getpid() and self.proc.poll() is None:
            return
        self.dir = tempfile.mkdtemp(prefix="ldabeam-warm-")
        self.sock = os.path.join(self.dir, "sock")
        self.env = dict(os.environ)
        self.env.pop(SOCKET_ENV, None)
        self.env.pop(ENV_FILE_ENV, None)
        with open(os.path.join(self.dir, "env.json"), "w") as f:
            json.dump(self.env, f)
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen([sys.executable, SERVER, self.sock], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=self.env,
                                     cwd=self.dir)
        self.owner = os.getpid()
        self.ready = False

    def ensure(self):
        self.start()
        if not self.ready:
            r, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT)
            line = self.proc.stdout.readline() if r else b""
            if line.strip() != b"ready":
                self.log.flush()
                with open(self.log.name, "rb") as f:
                    err = f.read()[-4000:].decode("utf-8", "replace")
                self.stop()
                raise RuntimeError("the warm interpreter did not start:\n%s" % err)
            self.ready = True
        return self

    def stop(self):
        if self.proc is None or self.owner != os.getpid():
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.proc = None

    def shell_env(self):
        """What a shim client needs in its environment to find this server."""
        self.ensure()
        return {SOCKET_ENV: self.sock, ENV_FILE_ENV: os.path.join(self.dir, "env.json")}


SERVER_PROCESS = _Server()
atexit.register(SERVER_PROCESS.stop)


def start():
    """Start the warm interpreter in the background (its imports overlap the caller's work)."""
    SERVER_PROCESS.start()


def shell_env() -> dict:
    """Environment entries that send the shims' ``python``/``ldabeam`` to the server."""
    return SERVER_PROCESS.shell_env()


def shim(name: str, args_prefix=()) -> str:
    """The body of a ``/bin/sh`` shim named ``name`` that runs ``python ARGS_PREFIX "$@"``
    through the warm server (cold when it is not reachable)."""
    import shlex
    return "#!/bin/sh\nexec %s -S %s %s \"$@\"\n" % (
        shlex.quote(sys.executable), shlex.quote(SHIM_CLIENT),
        " ".join(shlex.quote(a) for a in args_prefix))


def _fd_for(spec, default_fd, mode, opened):
    """(the fd to pass the child, the parent's end to keep or None) for a stream spec."""
    if spec is None:
        return default_fd, None
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd, None
    if spec == subprocess.PIPE:
        r, w = os.pipe()
        if mode == "r":             # the child reads: we keep the write end
            opened.append(r)
            return r, w
        opened.append(w)
        return w, r
    if isinstance(spec, int):
        return spec, None
    return spec.fileno(), None


class WarmProcess:
    """``subprocess.Popen``'s interface over a child of the warm server."""

    def __init__(self, args, env=None, cwd=None, stdin=None, stdout=None, stderr=None,
                 text=False, interruptible=False):
        self.args = [str(a) for a in args]
        self.returncode = None
        env = dict(os.environ if env is None else env)
        env.pop(SOCKET_ENV, None)
        env.pop(ENV_FILE_ENV, None)
        opened = []
        fd0, w_in = _fd_for(stdin, 0, "r", opened)
        fd1, r_out = _fd_for(stdout, 1, "w", opened)
        if stderr == subprocess.STDOUT:
            fd2, r_err = fd1, None
        else:
            fd2, r_err = _fd_for(stderr, 2, "w", opened)
        ignored = lambda sig: (not interruptible) and signal.getsignal(sig) == signal.SIG_IGN
        req = {"args": self.args, "env": env, "cwd": os.path.abspath(str(cwd or os.getcwd())),
               "pgid": os.getpgrp(), "sigint_ignored": ignored(signal.SIGINT),
               "sigterm_ignored": ignored(signal.SIGTERM)}
        body = json.dumps(req).encode("utf-8")
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._conn.connect(SERVER_PROCESS.sock)
            socket.send_fds(self._conn, [struct.pack(">I", len(body)) + body], [fd0, fd1, fd2])
        finally:
            for fd in opened:
                os.close(fd)
        self._buf = b""
        msg = self._read_message(None)
        self.pid = msg["pid"]
        enc = locale.getpreferredencoding(False)

        def wrap(fd, mode):
            if fd is None:
                return None
            f = io.open(fd, mode + "b", buffering=-1 if mode == "r" else 0)
            return io.TextIOWrapper(f, encoding=enc, write_through=True) if text else f
        self.stdin = wrap(w_in, "w")
        self.stdout = wrap(r_out, "r")
        self.stderr = wrap(r_err, "r")

    def _read_message(self, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            r, _, _ = select.select([self._conn], [], [], left)
            if not r:
                return None
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError("the warm interpreter went away (child %s)"
                                   % getattr(self, "pid", "?"))
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line.decode("utf-8"))

    def poll(self):
        if self.returncode is None:
            msg = self._read_message(0)
            if msg is not None:
                self._done(msg["rc"])
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            msg = self._read_message(timeout)
            if msg is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._done(msg["rc"])
        return self.returncode

    def _done(self, rc):
        self.returncode = rc
        self._conn.close()

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def communicate(self, input=None, timeout=None):
        out, err = [], []
        threads = []
        for f, acc in ((self.stdout, out), (self.stderr, err)):
            if f is not None:
                t = threading.Thread(target=lambda f=f, acc=acc: acc.append(f.read()),
                                     daemon=True)
                t.start()
                threads.append(t)
        if self.stdin is not None:
            if input:
                try:
                    self.stdin.write(input)
                except BrokenPipeError:
                    pass
            self.stdin.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        return (out[0] if out else None), (err[0] if err else None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for f in (self.stdin, self.stdout, self.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        self.wait()

    def __del__(self):
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()


def popen(args, env=None, cwd=None, stdin=None, stdout=None, stderr=None, text=False,
          interruptible=False):
    """``python ARGS`` as a child process: a :class:`WarmProcess`, or a cold
    ``subprocess.Popen`` when ``env`` asks for one (:func:`needs_fresh`). ``interruptible``:
    SIGINT and SIGTERM at their defaults, whatever this process inherited
    (``helpers.procs.interruptible``)."""
    env = dict(os.environ if env is None else env)
    SERVER_PROCESS.ensure()
    if needs_fresh(env, SERVER_PROCESS.env):
        from helpers.procs import interruptible as preexec
        return subprocess.Popen([sys.executable] + [str(a) for a in args], env=env, cwd=cwd,
                                stdin=stdin, stdout=stdout, stderr=stderr, text=text,
                                preexec_fn=preexec if interruptible else None)
    return WarmProcess(args, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
                       text=text, interruptible=interruptible)


def run(args, env=None, cwd=None, input=None, capture_output=False, stdout=None, stderr=None,
        text=False, timeout=None, check=False):
    """``subprocess.run([sys.executable] + ARGS, ...)`` through :func:`popen`."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    p = popen(args, env=env, cwd=cwd, stdin=subprocess.PIPE if input is not None else None,
              stdout=stdout, stderr=stderr, text=text)
    try:
        out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    if check:
        r.check_returncode()
    return r
