"""A pre-imported ``depthtraj`` for the suite's command lines: each ``depthtraj ...`` a test or a
documentation page runs is still a process of its own (its argv, working directory, environment,
stdin/stdout/stderr, exit status and signals), forked from a server that has already imported
torch, transformers, dask, xarray, zarr, scipy and depthtraj, instead of importing them afresh
(10-15 s of CPU per command line, half the suite's subprocess time, issue 47).

How: each pytest worker starts one server (``python tests/zygote.py SOCKET``); the suite puts a
small ``depthtraj`` shim first on ``PATH`` (and in :data:`CLI`). The shim sends its argv, working
directory and environment over a Unix socket with its three standard file descriptors; the server
forks a child that takes them, runs ``depthtraj.cli:main`` and exits as the command would; the
shim exits with the child's status (or dies of the child's signal) and forwards SIGINT/SIGTERM/
SIGHUP to it; a shim that dies (a test's timeout, SIGKILL) takes the child with it.

The shim runs the installed ``depthtraj`` itself (``os.execv``) whenever the fork would not be the
same process: no server yet (it is still importing) or an environment variable that the server's
imports read differs from the server's own (``HF_*``, ``TRANSFORMERS_*``, thread counts, torch's
CPU capability, ``PYTHONPATH``, ...: :data:`IMPORT_TIME_ENV`). Tests that kill a collection with
SIGKILL and resume it use the installed entry point (``python -m depthtraj.cli``), not the shim,
so that the killed process is the collection itself. ``DEPTHTRAJ_TEST_ZYGOTE=0`` turns it off.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

#: environment variables read when the server imports its modules (or by the interpreter at
#: start-up): a command whose value of one differs from the server's runs the real entry point
IMPORT_TIME_ENV = ("HF_", "FSSPEC_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "DASK_", "NUMBA_", "OMP_", "MKL_",
                   "OPENBLAS_", "ATEN_", "ONEDNN_", "DNNL_", "TORCH", "PYTORCH_", "CUDA_", "LD_", "MPL",
                   "PYTHONPATH", "PYTHONHOME", "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONOPTIMIZE",
                   "PYTHONIOENCODING", "PYTHONUTF8", "LC_", "LANG", "HOME", "XDG_")

#: what the server imports before it forks (each import is tried; one that fails is left to the
#: command, as without the server)
PRELOAD = (
    "depthtraj.cli", "depthtraj.collect", "depthtraj.collect.run", "depthtraj.adapter", "depthtraj.analysis",
    "depthtraj.analysis.cli", "depthtraj.validate", "depthtraj.demo", "depthtraj_adapters",
    "depthtraj_adapters.layers", "depthtraj_adapters.raven", "depthtraj_adapters.ouro",
    "depthtraj_adapters.recurrent_llama", "depthtraj.tasks",
    "numpy", "scipy.stats", "xarray", "dask.array", "zarr", "numba", "pydantic", "rich", "typer", "fsspec",
    "matplotlib.figure", "matplotlib.backends.backend_agg",
    "torch", "transformers", "transformers.models.auto.modeling_auto", "transformers.models.auto.tokenization_auto",
    "transformers.masking_utils", "transformers.models.llama.modeling_llama", "transformers.models.gpt2.modeling_gpt2",
    "transformers.integrations.ggml", "tokenizers", "safetensors.torch", "lm_eval", "lm_eval.api.registry",
)

_HEADER = struct.Struct("!I")
#: environment variables the server's imports set (a command's own imports would set them too)
_IMPORTS_SET: dict[str, str] = {}


def _import_time_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)}


# ------------------------------------------------------------------ the server
def _preload(bin_dir: str) -> None:
    import importlib
    import warnings

    sys.path[0] = bin_dir  # a console script's sys.path[0] is its bin directory, not tests/
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in PRELOAD:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
        with contextlib.suppress(Exception):
            import transformers

            transformers.AutoModelForCausalLM, transformers.AutoTokenizer, transformers.AutoConfig  # noqa: B018


def _threads() -> int:
    """Python threads (a zarr event loop, a dask pool would not survive ``fork``); native ones
    that libraries start at load and restart after a fork (OpenBLAS's pool, pyarrow's jemalloc
    background thread) are not counted."""
    import threading

    return threading.active_count()


def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the command and exit with its status (never returns)."""
    import atexit
    import io
    import threading
    import traceback
    import types

    code: int = 0
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()  # what the command was given, and what its imports would have set
        os.environ.update(request["env"])
        for key, value in _IMPORTS_SET.items():
            os.environ.setdefault(key, value)
        sys.argv = list(request["argv"])
        sys.modules["__main__"] = types.ModuleType("__main__")  # like `python -c`, not this file
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        tty = os.isatty(1)
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=sys.stdin.encoding)
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), encoding=sys.stdout.encoding, line_buffering=tty,
            write_through=unbuffered)
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding=sys.stderr.encoding, errors="backslashreplace",
            line_buffering=True, write_through=unbuffered)
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        try:
            from depthtraj.cli import main

            main()
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            traceback.print_exc()
            code = -signal.SIGINT
        except BaseException:  # noqa: BLE001 - what the interpreter prints for an uncaught exception
            traceback.print_exc()
            code = 1
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as at exit
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
    finally:
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    msg, ancdata, _flags, _addr = conn.recvmsg(_HEADER.size, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    (size,) = _HEADER.unpack(msg)
    payload = b""
    while len(payload) < size:
        chunk = conn.recv(size - len(payload))
        if not chunk:
            raise ConnectionError("short request")
        payload += chunk
    return json.loads(payload), list(fds)


def serve(sock_path: str, bin_dir: str) -> None:
    """Import :data:`PRELOAD`, then fork one child per request on ``sock_path`` until the parent
    process (the pytest worker) is gone."""
    parent = os.getppid()
    before = dict(os.environ)
    _preload(bin_dir)
    global _IMPORTS_SET
    _IMPORTS_SET = {k: v for k, v in os.environ.items() if k not in before}
    # the shims leave these out of their comparison: a caller that imported the same modules has them too
    Path(sock_path + ".set.json").write_text(json.dumps(sorted(_IMPORTS_SET)))
    if _threads() > 1:  # a thread would not survive fork(): serve nothing, every shim runs the real CLI
        print(f"zygote: {_threads()} threads after the imports; not serving", file=sys.stderr)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = sock_path + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    listener.bind(tmp)
    listener.listen(64)
    os.replace(tmp, sock_path)  # shims connect only once the imports are done
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    by_conn: dict[socket.socket, int] = {}
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while os.getppid() == parent:
        for key, _ in sel.select(timeout=0.05):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                try:
                    request, fds = _receive(conn)
                except (OSError, ValueError, ConnectionError, struct.error):
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:  # the command: none of the server's sockets stay open in it
                    for sock in (listener, conn, *by_conn):
                        sock.close()
                    os.close(sel.fileno())  # the server's epoll descriptor
                    _run_child(request, fds)
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                by_conn[conn] = pid
                conn.sendall(struct.pack("!i", pid))
                sel.register(conn, selectors.EVENT_READ)
            else:  # the shim forwards a signal, or it is gone (EOF): the child goes with it
                conn = key.fileobj
                pid = by_conn[conn]
                try:
                    data = conn.recv(16)
                except OSError:
                    data = b""
                for sig in (data or bytes([signal.SIGKILL])):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                if not data:
                    sel.unregister(conn)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid)
            by_conn.pop(conn, None)
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(conn)
            with contextlib.suppress(OSError):
                conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
            conn.close()
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------ the shim
SHIM = r'''#!{python} -IS
# depthtraj for the test suite: forked from a pre-imported server (tests/zygote.py), else the real one
import array, json, os, signal, socket, struct, sys
SOCK, REAL, SERVER = {sock!r}, {real!r}, int(open({sock!r} + ".pid").read())
PREFIXES = {prefixes!r}
def real(why):
    with open(SOCK + ".log", "a") as f:
        f.write("real: " + why + "\n")
    os.execv(REAL, [REAL, *sys.argv[1:]])
for _ in range(1200):  # the server is importing (at most 2 minutes): as long as this command would
    if os.path.exists(SOCK):
        break
    try:
        os.kill(SERVER, 0)
    except OSError:
        real("no server")
    import time
    time.sleep(0.1)
else:
    real("the server is not ready after 2 minutes")
with open(SOCK + ".env.json") as f:  # the server's environment, before its imports
    want = json.load(f)
with open(SOCK + ".set.json") as f:  # what its imports set (this command's caller may have imported them)
    ignore = set(json.load(f))
have = {{k: v for k, v in os.environ.items() if k.startswith(PREFIXES) and k not in ignore}}
want = {{k: v for k, v in want.items() if k not in ignore}}
if have != want:
    real("environment: " + " ".join(sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))))
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(SOCK)
except OSError:
    real("the server is gone")
with open(SOCK + ".log", "a") as f:
    f.write("forked\n")
payload = json.dumps({{"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
conn.sendmsg([struct.pack("!I", len(payload))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
conn.sendall(payload)
def read_int():
    data = b""
    while len(data) < 4:
        chunk = conn.recv(4 - len(data))
        if not chunk:
            os._exit(255)
        data += chunk
    return struct.unpack("!i", data)[0]
read_int()  # the child's pid: it runs
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, lambda s, _f: conn.sendall(bytes([s])))
status = read_int()
if status < 0:
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
os._exit(status)
'''


class Zygote:
    """One server and its shim for this process (a pytest worker)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin_dir = root / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        self.sock = str(root / "s")  # AF_UNIX paths are limited to ~100 bytes: root must be short
        real_bin = str(Path(sys.executable).parent)
        real = str(Path(real_bin) / "depthtraj")
        # what the server's imports read (it inherits this environment): a shim whose environment
        # agrees waits for the server's socket; one that differs runs the real entry point
        Path(self.sock + ".env.json").write_text(json.dumps(_import_time_env(dict(os.environ))))
        self.proc = subprocess.Popen([sys.executable, __file__, self.sock, real_bin], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        Path(self.sock + ".pid").write_text(str(self.proc.pid))
        shim = self.bin_dir / "depthtraj"
        shim.write_text(SHIM.format(python=sys.executable, sock=self.sock, real=real, prefixes=IMPORT_TIME_ENV))
        shim.chmod(0o755)

    @property
    def cli(self) -> list[str]:
        """The shim's command line."""
        return [str(self.bin_dir / "depthtraj")]

    def close(self) -> None:
        """Stop the server (its running children end with their shims)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()


def ensure_started(config) -> None:
    """Start this process's server (once), where tests/conftest.py wants one
    (``config._depthtraj_zygote_wanted``): point :data:`CLI` and ``$DEPTHTRAJ_TEST_SHIM`` (the
    tests) and ``$DEPTHTRAJ_TEST_SHIM_DIR`` (the pages' ``PATH``, docs/conftest.py) at its shim."""
    import tempfile

    if getattr(config, "_depthtraj_zygote", None) is not None or not getattr(config, "_depthtraj_zygote_wanted", False):
        return
    root = Path(tempfile.mkdtemp(prefix="dtz-"))  # short: a Unix socket path is at most ~100 bytes
    config._depthtraj_zygote = zygote = Zygote(root)
    CLI[:] = zygote.cli  # the list the test modules imported
    os.environ["DEPTHTRAJ_TEST_SHIM"] = zygote.cli[0]
    os.environ["DEPTHTRAJ_TEST_SHIM_DIR"] = str(zygote.bin_dir)


#: the ``depthtraj`` command line for tests that run the CLI in a process of its own: the shim
#: when the suite runs a server (``DEPTHTRAJ_TEST_SHIM``, set by tests/conftest.py), else the
#: installed console script
_SCRIPT = Path(sys.executable).parent / "depthtraj"
CLI: list[str] = ([os.environ["DEPTHTRAJ_TEST_SHIM"]] if os.environ.get("DEPTHTRAJ_TEST_SHIM")
                  else [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from depthtraj.cli import main; main()"])


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
