"""``python ARGS`` through the tests' warm interpreter, for shell shims (``helpers.warm.shim``).

Run as ``python -S warm_client.py ARGS`` (no site: it starts in milliseconds). With the
server's socket in the environment (``helpers.warm.shell_env``) and nothing in it that the
server cannot honour, the command runs as a child forked from the server with this process's
standard streams, environment, working directory and SIGINT disposition; signals sent here are
passed on to it, and this process ends as it ended (its exit code, or killed by the same
signal). Otherwise it becomes a cold ``python ARGS`` (exec).
"""
import json
import os
import signal
import socket
import struct
import sys

from warm import ENV_FILE_ENV, SOCKET_ENV, needs_fresh

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)


def cold(args):
    os.execv(sys.executable, [sys.executable] + args)


def warm_args(args):
    """The arguments in a form the server runs, or None."""
    if not args:
        return None if os.isatty(0) else ["-"]
    if args[0] in ("-m", "-c") and len(args) >= 2:
        return args
    if args[0] == "-" or not args[0].startswith("-"):
        return args
    return None


def main():
    args = sys.argv[1:]
    sock, env_file = os.environ.get(SOCKET_ENV), os.environ.get(ENV_FILE_ENV)
    run = warm_args(args)
    if run is None or not sock or not env_file or not os.path.exists(sock):
        cold(args)
    with open(env_file) as f:
        server_env = json.load(f)
    env = dict(os.environ)
    if needs_fresh(env, server_env):
        cold(args)
    ignored = lambda sig: signal.getsignal(sig) == signal.SIG_IGN
    req = {"args": run, "env": env, "cwd": os.getcwd(), "pgid": os.getpgrp(),
           "sigint_ignored": ignored(signal.SIGINT), "sigterm_ignored": ignored(signal.SIGTERM)}
    body = json.dumps(req).encode("utf-8")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock)
    except OSError:
        cold(args)
    state = {"pid": None, "pending": []}

    def forward(sig, frame):
        if state["pid"] is None:
            state["pending"].append(sig)
        else:
            try:
                os.kill(state["pid"], sig)
            except OSError:
                pass
    for sig in FORWARDED:
        if not ignored(sig):
            signal.signal(sig, forward)
    socket.send_fds(conn, [struct.pack(">I", len(body)) + body], [0, 1, 2])
    buf = b""
    rc = None
    while rc is None:
        chunk = conn.recv(4096)
        if not chunk:
            sys.stderr.write("warm_client: the warm interpreter went away\n")
            os._exit(1)
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            msg = json.loads(line.decode("utf-8"))
            if "pid" in msg:
                state["pid"] = msg["pid"]
                for sig in state["pending"]:
                    forward(sig, None)
            elif "rc" in msg:
                rc = msg["rc"]
    if rc < 0:                   # killed: die by the same signal
        try:
            signal.signal(-rc, signal.SIG_DFL)
        except (OSError, ValueError):
            pass                 # SIGKILL, SIGSTOP: at their defaults always
        os.kill(os.getpid(), -rc)
        os._exit(128 - rc)
    os._exit(rc)


if __name__ == "__main__":
    main()
