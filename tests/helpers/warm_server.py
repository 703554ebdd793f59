"""A warm Python interpreter the tests' child processes are forked from (``helpers.warm``).

Started once per test process as ``python warm_server.py SOCKET``: it imports what an
``ldabeam`` command imports (Beam, pyarrow, numba, scipy, the project's packages) without
running anything, listens on the Unix socket SOCKET, and for each request forks one child that
runs ``python ARGS`` as a new interpreter would (``-m MODULE``, ``-c CODE``, ``-`` (code on
standard input) or ``SCRIPT``) with the request's standard streams (passed as file
descriptors), environment, working directory, process group and SIGINT disposition. The
child's exit status is reported back on the request's connection: ``{"pid": N}`` first, then
``{"rc": R}`` (negative: killed by signal -R), as ``subprocess`` reports it.

The server stays single-threaded and never runs a kernel, so forking it is safe (a numba
OpenMP pool or a Beam thread would not survive a fork). It exits when its standard input
closes (the test process ended), killing children still running. A child whose requester
goes away (its connection closes) is killed: no stray processes.

What a fresh interpreter would do differently, and how the child makes up for it: modules
imported already (the point); ``sys.path`` is rebuilt from the request's ``PYTHONPATH`` and
the entry point as ``python`` builds it; ``random`` and numpy's global generator are reseeded
from the OS; handlers registered with ``atexit`` run at the end and non-daemon threads are
joined. Requests whose environment changes what is read at import (``NUMBA_*``, most
``PYTHON*``) are not sent here (``helpers.warm.needs_fresh``).
"""
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys

PRELOAD = (
    "pipelines.cli", "pipelines.commands.train", "pipelines.commands.vectorize",
    "pipelines.commands.infer", "pipelines.commands.evaluate", "pipelines.commands.topics",
    "pipelines.commands.report", "pipelines.commands.export", "pipelines.commands.stream",
    "pipelines.commands.synth", "apache_beam", "apache_beam.runners.direct.direct_runner",
    "apache_beam.runners.portability.fn_api_runner", "apache_beam.io.parquetio",
    "pyarrow.parquet", "numba", "scipy.sparse", "scipy.special", "gensim",
    "lda_core.algorithms.online_vb", "lda_core.algorithms.scvb0",
    "lda_core.algorithms.sparse_gibbs_vb", "lda_core.algorithms.gibbs",
    "lda_core.algorithms.online_samplers", "lda_core.algorithms.particle_filter",
    "lda_core.training.trainer", "lda_core.evaluation.metrics",
    "lda_core.evaluation.topic_quality", "ldabeam",
)
MAX_FDS = 3


def _base_path():
    """``sys.path`` of a new interpreter without its first entry (the server's is removed at
    start) and without PYTHONPATH's entries."""
    extra = set(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    return [p for p in sys.path if p not in extra]


BASE_PATH = None
IMPORT_ENV = {}


def _read_request(conn):
    """(request dict, [fds]) from one connection: a 4-byte length, JSON, fds attached."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, MAX_FDS)
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError("short request")
        data += more
    n = struct.unpack(">I", data[:4])[0]
    return json.loads(data[4:4 + n].decode("utf-8")), fds


def _send(conn, obj):
    try:
        conn.sendall((json.dumps(obj) + "\n").encode("utf-8"))
    except OSError:
        pass


def _exit_code(e: SystemExit, stderr) -> int:
    """The status ``python`` exits with for ``SystemExit(e.code)``."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, bool) or not isinstance(code, int):
        try:
            print(code, file=stderr)
        except Exception:
            pass
        return 1
    return code & 0xFF


def _streams(env):
    """New ``sys.stdin/stdout/stderr`` on descriptors 0-2, buffered as a new interpreter
    buffers them (line-buffered on a terminal, write-through with PYTHONUNBUFFERED)."""
    import io
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    enc = env.get("PYTHONIOENCODING", "").split(":")[0] or "utf-8"

    def wrap(fd, mode):
        try:
            tty = os.isatty(fd)
        except OSError:
            tty = False
        raw = io.FileIO(fd, mode, closefd=False)
        if mode == "r":
            return io.TextIOWrapper(io.BufferedReader(raw), encoding=enc, errors="strict",
                                    line_buffering=tty)
        return io.TextIOWrapper(io.BufferedWriter(raw), encoding=enc,
                                errors="backslashreplace" if fd == 2 else "strict",
                                line_buffering=tty or fd == 2 or unbuffered,
                                write_through=unbuffered)
    sys.stdin, sys.stdout, sys.stderr = wrap(0, "r"), wrap(1, "w"), wrap(2, "w")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _child(req, fds, keep_closed):
    """In the forked child: become ``python ARGS`` and exit with its status."""
    for s in keep_closed:
        try:
            s.close()
        except OSError:
            pass
    for i, fd in enumerate(fds):
        if fd != i:
            os.dup2(fd, i)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    try:
        os.setpgid(0, req["pgid"])
    except (OSError, KeyError, TypeError):
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN if req.get("sigint_ignored")
                  else signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if req.get("sigterm_ignored")
                  else signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    env = req["env"]
    os.environ.clear()
    os.environ.update(env)
    for k, v in IMPORT_ENV.items():
        os.environ.setdefault(k, v)
    os.chdir(req["cwd"])
    _streams(env)
    import random
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    args = list(req["args"])
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    code = 0
    try:
        import runpy
        import types
        if args[0] == "-m":
            sys.argv = [args[1]] + args[2:]      # runpy sets argv[0] to the module's file
            sys.path[:] = [os.getcwd()] + extra + BASE_PATH
            # imported here already (the point of the server): a new interpreter would not
            # have it, nor warn about it
            import warnings
            warnings.filterwarnings("ignore", category=RuntimeWarning,
                                    message=".*found in sys.modules after import of package")
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] in ("-c", "-"):
            if args[0] == "-c":
                source, name = args[1], "<string>"
                sys.argv = ["-c"] + args[2:]
            else:
                source, name = sys.stdin.read(), "<stdin>"
                sys.argv = ["-"] + args[1:]
            sys.path[:] = [""] + extra + BASE_PATH
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(source, name, "exec"), main.__dict__)
        else:
            script = args[0]
            sys.argv = args
            sys.path[:] = [os.path.dirname(os.path.realpath(script))] + extra + BASE_PATH
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e, sys.stderr)
    except BaseException as e:           # as python reports it: without this function's frame
        sys.excepthook(type(e), e, e.__traceback__.tb_next)
        code = -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
    try:
        import threading
        threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    if code < 0:                  # an interrupt nobody caught: die by it, as python does
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def serve(sock_path):
    global BASE_PATH, IMPORT_ENV
    before = dict(os.environ)
    for mod in PRELOAD:
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    # what the imports set in the environment (numba_config: OMP_WAIT_POLICY): a new
    # interpreter would set it when it imports them, so each child does
    IMPORT_ENV = {k: v for k, v in os.environ.items() if before.get(k) != v}
    BASE_PATH = _base_path()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    children = {}                  # pid -> the connection that asked for it
    stdin = sys.stdin.fileno()
    alive = True
    while alive or children:
        watch = [srv, stdin] + list(children.values()) if alive else list(children.values())
        ready, _, _ = select.select(watch, [], [], 0.02)
        for r in ready:
            if r is stdin:
                if not os.read(stdin, 4096):
                    alive = False            # the test process ended: stop
                    for pid in children:
                        _kill(pid)
            elif r is srv:
                conn, _ = srv.accept()
                try:
                    req, fds = _read_request(conn)
                except (OSError, EOFError, ValueError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    try:
                        _child(req, fds, [srv, conn] + list(children.values()))
                    finally:
                        os._exit(1)
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                _send(conn, {"pid": pid})
            else:                            # a requester went away (or wrote): kill
                try:
                    gone = not r.recv(1)
                except OSError:
                    gone = True
                if gone:
                    for pid, c in children.items():
                        if c is r:
                            _kill(pid)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                _send(conn, {"rc": rc})
                conn.close()
    srv.close()
    # the socket's folder is this server's (helpers.warm made it): gone with it, also when
    # the test process died without removing it
    import shutil
    shutil.rmtree(os.path.dirname(sock_path), ignore_errors=True)


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


if __name__ == "__main__":
    sys.path.pop(0)               # this folder (the tests' helpers) is no child's
    serve(sys.argv[1])
