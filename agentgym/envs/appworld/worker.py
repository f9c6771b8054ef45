"""The AppWorld fork server and its children. RUNS IN THE APPWORLD VENV, not in agentgym.

Started by :mod:`agentgym.envs.appworld.pool` as ``<appworld-python> -I worker.py CONFIG_JSON`` inside the network
namespace of :mod:`.sandbox`, with a scrubbed environment. ``CONFIG_JSON`` is ``{"control_fd": int}``: one end of a
``SOCK_SEQPACKET`` socket pair shared with the parent.

**The server** imports AppWorld, every app's models and APIs and AppWorld's evaluator once (the slow part of a
start, seconds), then forks one child per request. It never creates a world and never runs agent code, so every
child starts from the same clean, fully imported state: one world per process at the cost of a ``fork``. Control
messages (one JSON datagram each, answered by one):

* ``{"op": "fork", "role": "worker" | "evaluate", ...}`` with the child's pipe ends attached (``SCM_RIGHTS``):
  ``resp`` (the child writes its replies there) and, for a worker, ``req`` (it reads requests there) ->
  ``{"pid": int}``.
* ``{"op": "kill", "pid": int}`` -> kills the child's process group, reaps it -> ``{"status": str}`` (how it ended).
* ``{"op": "poll", "pid": int}`` -> ``{"alive": bool, "status": str or null}``; a dead child is reaped by the poll.

Children are reaped only by these two, and the server forgets a pid once reaped: a pid can never name a process
that merely reused it.

**A worker child** (``role`` ``worker``; ``workspace``, ``world_data``, ``timeout_seconds``, ``max_interactions``,
``limits``) makes its own session, lowers its rlimits, points stdout/stderr at ``workspace/.worker-stderr.log``
(stray prints cannot reach the protocol), forbids itself new processes, writes ``{"ready": true, "id": ...,
"unconfined": null or why the kernel filter could not be installed}`` and serves JSON-lines requests
``{"id": nonce, "op": ...}``; every reply repeats the request's ``id`` (a per-request secret of the parent, so a line
that agent code writes to the reply pipe is recognised as forged and ignored):

* ``{"op": "reset", "task_id": ..., "experiment": ...}`` -> ``{"ok": true, "instruction", "supervisor",
  "app_descriptions", "datetime"}``. Once per process: a second reset is refused (the parent starts a fresh child
  per episode).
* ``{"op": "execute", "code": ...}`` -> ``{"ok": true, "output": str, "task_completed": bool}``. After every cell
  AppWorld saves the world's changes under ``workspace/experiments/outputs/<experiment>/tasks/<task>/dbs``, the
  only place the parent's evaluator reads them from.

Any failure of the worker itself is ``{"ok": false, "error": str}``. The parent trusts nothing else a worker says:
it keeps the taint itself and builds every path itself.

**An evaluator child** (``role`` ``evaluate``, ``job``) runs :func:`evaluator.evaluate_job` (loaded from the file
beside this one), writes one result line and exits. It never runs agent code.

**The guard.** Before the first agent cell runs, a worker child installs an audit hook (PEP 578; it cannot be
removed) that refuses: opening files for writing outside the workspace, and for reading outside the workspace, the
Python installation and what the task's world needs (``data/api_docs``, ``data/base_dbs``,
``data/tasks/<task>/specs.json`` and ``.../dbs`` -- never a ``ground_truth`` folder); SQLite databases opened
outside the workspace (``sqlite3.connect`` opens files without an ``open`` event) except in-memory ones and
read-only (``mode=ro``) URIs of those world files; any socket connect/bind/sendto; process creation (fork, exec,
spawn, posix_spawn, subprocess, os.system) and fresh imports of the modules that create processes or
interpreters behind the audit events (``_posixsubprocess``, ``_xxsubinterpreters``...); ctypes library loading;
and frame/gc introspection that could reach the hook's own state. The server also replaces
``_posixsubprocess.fork_exec`` (which forks and execs with no audit event) by a refusal, and makes AppWorld open
its base databases read-only. The hook is a second line behind the OS-level limits: network namespace, rlimits,
wall-clock kill, and a seccomp filter each worker installs right after the fork (:func:`_forbid_new_processes`)
that makes the kernel refuse every new process -- C code the agent reaches without an audit event (cffi is
installed in AppWorld's venv) can still open files the hook would refuse.
"""

import json
import os
import signal
import socket
import sys

_FAIL_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_HERE = os.path.dirname(os.path.abspath(__file__))
#: modules whose fresh import would create processes or interpreters without an audit event, or load C code
_BLOCKED_IMPORTS = ("_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters",
                    "_testcapi", "_testinternalcapi", "_testmultiphase", "uvloop", "_ctypes", "_cffi_backend")


def _install_guard(workspace, read_roots):
    """Install the audit hook. Everything it uses is bound as immutable defaults (tuples, str, builtins)."""
    ws = os.path.realpath(workspace) + os.sep
    reads = tuple(os.path.realpath(r).rstrip(os.sep) + os.sep for r in read_roots) + (ws,)
    device_ok = ("/dev/null", "/dev/urandom", "/dev/random")
    blocked = frozenset({
        "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
        "pty.spawn", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
        "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata", "ctypes.addressof",
        "sys._current_frames", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
        "os.kill", "os.killpg", "signal.pthread_kill", "sqlite3.enable_load_extension",
        "sqlite3.load_extension", "shutil.chown", "os.chmod", "os.chown", "os.symlink", "os.link", "os.chdir",
        "os.chroot", "resource.setrlimit", "resource.prlimit",
    })
    blocked_imports = frozenset(_BLOCKED_IMPORTS)
    memory_params = frozenset({"mode=memory", "cache=shared"})

    def hook(event, args, _blocked=blocked, _ws=ws, _reads=reads, _dev=device_ok, _realpath=os.path.realpath,
             _isinstance=isinstance, _str=str, _bytes=bytes, _flags=_FAIL_WRITE_FLAGS, _sep=os.sep,
             _perm=PermissionError, _fspath=os.fspath, _imports=blocked_imports, _memory=memory_params,
             _frozenset=frozenset):
        if event in _blocked:
            raise _perm(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            if not _isinstance(path, (_str, _bytes)):
                return  # an already open file descriptor
            if _isinstance(path, _bytes):
                path = path.decode("utf-8", "replace")
            real = _realpath(path)
            if real in _dev:
                return
            writing = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and _isinstance(flags, int) and flags & _flags)
            target = real + _sep
            if writing:
                if not target.startswith(_ws):
                    raise _perm(f"sandbox: writing {path} is outside the workspace")
            elif not any(target.startswith(r) for r in _reads) or (_sep + "ground_truth" + _sep) in target:
                raise _perm(f"sandbox: reading {path} is outside the workspace")
        elif event == "sqlite3.connect":
            db = args[0]
            if _isinstance(db, _bytes):
                db = db.decode("utf-8", "replace")
            elif not _isinstance(db, _str):
                db = _fspath(db)
            if db in ("", ":memory:"):
                return
            if db.startswith("file:"):
                # A URI (when the caller passes uri=True; otherwise a file of that odd name in the workspace, which
                # the checks below also accept). Only plain paths: no %-escapes, fragments or authorities.
                path, _, query = db[5:].partition("?")
                params = query.split("&") if query else []
                if "%" in path or "#" in db or path.startswith("//"):
                    raise _perm(f"sandbox: sqlite database {db!r} is not allowed")
                if params.count("mode=memory") == 1 and _frozenset(params) <= _memory:
                    return  # in memory: no file at all
                if params == ["mode=ro"]:
                    target = _realpath(path) + _sep
                    if any(target.startswith(r) for r in _reads) and (_sep + "ground_truth" + _sep) not in target:
                        return
                db = path
            if not (_realpath(db) + _sep).startswith(_ws):
                raise _perm(f"sandbox: sqlite database {db} is outside the workspace")
        elif event == "import":
            if args[0] in _imports:
                raise _perm(f"sandbox: importing {args[0]} is not allowed")
        elif event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.utime"):
            path = args[0]
            if _isinstance(path, (_str, _bytes)):
                if _isinstance(path, _bytes):
                    path = path.decode("utf-8", "replace")
                if not (_realpath(path) + _sep).startswith(_ws):
                    raise _perm(f"sandbox: {event} on {path} is outside the workspace")
        elif event == "os.listdir" or event == "os.scandir":
            path = args[0]
            if _isinstance(path, (_str, _bytes)):
                if _isinstance(path, _bytes):
                    path = path.decode("utf-8", "replace")
                target = _realpath(path) + _sep
                if not any(target.startswith(r) for r in _reads) or (_sep + "ground_truth" + _sep) in target:
                    raise _perm(f"sandbox: listing {path} is outside the workspace")

    sys.addaudithook(hook)


def _refuse_unaudited_spawning():
    """``_posixsubprocess.fork_exec`` forks and execs with no audit event (``subprocess`` keeps its own reference
    as ``_fork_exec``): replace both by a refusal. A fresh import of the module is refused by the guard."""
    import _posixsubprocess
    import subprocess

    def fork_exec(*args, **kwargs):
        raise PermissionError("sandbox: process creation is not allowed")

    _posixsubprocess.fork_exec = fork_exec
    subprocess._fork_exec = fork_exec


def _read_only_base_dbs():
    """AppWorld opens the base databases with a plain (read-write) ``sqlite3.connect`` and caches the connection;
    open them read-only instead, so no connection in a child can write to the build."""
    import sqlite3

    from appworld.apps import model_lib

    def connect(db_app_path):
        connection = sqlite3.connect("file:" + os.path.abspath(db_app_path) + "?mode=ro", uri=True)
        connection.execute("PRAGMA mmap_size = 268435456")  # as AppWorld's own connection does
        return connection

    model_lib.get_direct_sqlite3_connection = connect


def _forbid_new_processes():
    """A seccomp filter (kernel level, inherited by every later thread) that refuses fork, vfork, execve, execveat
    and clone without ``CLONE_THREAD`` with EPERM, and clone3 with ENOSYS (glibc then makes its threads with clone):
    no process creation, whatever C code agent code reaches (cffi reaches libc without an audit event). Must run
    while the process has one thread. Returns None when on, else why not."""
    import ctypes
    import platform
    import struct

    machine = platform.machine()
    if machine == "x86_64":
        arch, nrs = 0xC000003E, {"clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone3": 435}
    elif machine == "aarch64":
        arch, nrs = 0xC00000B7, {"clone": 220, "execve": 221, "execveat": 281, "clone3": 435}
    else:
        return f"no seccomp filter for {machine}"
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    # (code, jump-if-true label, jump-if-false label, k); labels resolve to relative offsets below.
    prog = [(ld, None, None, 4), (jeq, None, "deny", arch), (ld, None, None, 0),
            (jge, "deny", None, 0x40000000),  # the x32 ABI's numbers
            (jeq, "nosys", None, nrs["clone3"])]
    prog += [(jeq, "deny", None, nrs[name]) for name in ("fork", "vfork", "execve", "execveat") if name in nrs]
    prog += [(jeq, None, "allow", nrs["clone"]), (ld, None, None, 16), (jset, "allow", "deny", 0x00010000)]
    labels = {"allow": len(prog), "deny": len(prog) + 1, "nosys": len(prog) + 2}
    prog += [(ret, None, None, allow), (ret, None, None, eperm), (ret, None, None, enosys)]
    raw = b"".join(struct.pack("HBBI", code, labels[jt] - i - 1 if jt else 0, labels[jf] - i - 1 if jf else 0, k)
                   for i, (code, jt, jf, k) in enumerate(prog))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    fprog = Prog(len(prog), raw)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: lets an unprivileged process install a filter
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return f"seccomp is not available: {os.strerror(ctypes.get_errno())}"
    return None


def _apply_limits(limits):
    """Lower this process's rlimits (``{"RLIMIT_AS": bytes, ...}``); raising them needs privileges it lacks."""
    import resource

    for name, value in limits.items():
        which = getattr(resource, name)
        soft, hard = resource.getrlimit(which)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (cap, cap))


def _reply(chan, obj):
    chan.write(json.dumps(obj) + "\n")
    chan.flush()


def _world_read_roots(workspace, task_id):
    """What a task's world reads from the data tree after its reset (never a ``ground_truth`` folder)."""
    data = os.path.join(workspace, "data")
    task = os.path.join(data, "tasks", task_id)
    return [os.path.join(data, "api_docs"), os.path.join(data, "base_dbs"), os.path.join(task, "specs.json"),
            os.path.join(task, "dbs")]


def _serve_world(cfg, chan):
    from appworld import AppWorld

    workspace = cfg["workspace"]
    world, started = None, False
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            op = req.get("op")
            if op == "reset":
                if started:
                    raise RuntimeError("this worker already tried to host a world (one world per process)")
                started = True
                new = AppWorld(task_id=req["task_id"], experiment_name=req["experiment"],
                               timeout_seconds=int(cfg["timeout_seconds"]),
                               max_interactions=int(cfg["max_interactions"]),
                               load_ground_truth=False, raise_on_unsafe_syntax=True, null_patch_unsafe_execution=True)
                task = new.task
                # Import everything a cell may lazily need, then raise the guard before any agent code runs: a
                # world that did not get this far never executes a cell.
                new.execute("pass")
                new.environment_io.clear()
                new.num_interactions = 0
                python_dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix] + [p for p in sys.path if p]
                _install_guard(workspace, _world_read_roots(workspace, req["task_id"]) + python_dirs)
                world = new
                _reply(chan, {"id": rid, "ok": True, "instruction": task.instruction,
                              "supervisor": {k: task.supervisor[k] for k in
                                             ("first_name", "last_name", "email", "phone_number")},
                              "app_descriptions": dict(task.app_descriptions),
                              "datetime": task.datetime.isoformat()})
            elif op == "execute":
                if world is None:
                    raise RuntimeError("execute before reset")
                output = world.execute(str(req["code"]))
                _reply(chan, {"id": rid, "ok": True, "output": output,
                              "task_completed": bool(world.task_completed())})
            else:
                raise ValueError(f"unknown op {op!r}")
        except BaseException as e:  # noqa: BLE001 - any failure is reported, then the loop goes on
            _reply(chan, {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}"})


def _evaluate(cfg, chan):
    import importlib.util

    spec = importlib.util.spec_from_file_location("agentgym_appworld_evaluator",
                                                  os.path.join(_HERE, "evaluator.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.evaluate_job(cfg["job"])
    _reply(chan, dict(result, id=cfg["id"]))


def _child(msg, fds):
    """In the forked child: own session, own files, lowered limits; then serve one world or one evaluation."""
    os.setsid()  # own process group: the server kills the whole group
    workspace = msg["workspace"]
    os.chdir(workspace)
    log = os.open(os.path.join(workspace, ".worker-stderr.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    chan = os.fdopen(fds[0], "w", encoding="utf-8")
    if len(fds) > 1:
        os.dup2(fds[1], 0)
        os.close(fds[1])
        sys.stdin = os.fdopen(0, "r", encoding="utf-8")
    os.environ.update({"HOME": workspace, "APPWORLD_ROOT": workspace,
                       "APPWORLD_CACHE": os.path.join(workspace, ".appworld")})
    _apply_limits(msg.get("limits", {}))
    if msg["role"] == "worker":
        os.environ["SQLITE_TMPDIR"] = workspace  # SQLite's temporary files stay in the workspace too
        os.symlink(msg["world_data"], os.path.join(workspace, "data"))
        unconfined = _forbid_new_processes()
        _reply(chan, {"ready": True, "id": msg["id"], "unconfined": unconfined})
        _serve_world(msg, chan)
    else:
        _evaluate(msg, chan)
    chan.close()
    os._exit(0)  # skip interpreter teardown (AppWorld's atexit handlers write files)


def _status(code):
    if os.WIFSIGNALED(code):
        return f"killed by signal {os.WTERMSIG(code)}"
    return f"exit code {os.WEXITSTATUS(code)}"


def main(argv):
    config = json.loads(argv[1])
    control = socket.socket(fileno=int(config["control_fd"]))
    # Heavy imports before any fork (they read site-packages); then the process-wide hardening every child inherits.
    from appworld import AppWorld  # noqa: F401
    from appworld.apps import get_all_apps
    from appworld.common.utils import import_apis_module, import_models_module
    import appworld.evaluator  # noqa: F401

    # Import every app's API and model modules once: building the FastAPI routes is most of a world's start-up
    # cost, and a child then only loads its task's databases.
    for app in get_all_apps():
        import_models_module(app)
        import_apis_module(app)
    _refuse_unaudited_spawning()
    _read_only_base_dbs()
    sys.dont_write_bytecode = True  # an evaluation imports the task's evaluation.py: no __pycache__ in the build
    children = set()
    control.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
        except OSError:
            break
        if not data:
            break  # the parent is gone
        try:
            msg = json.loads(data)
            op, pid = msg.get("op"), msg.get("pid")
            if op == "fork":
                pid = os.fork()
                if pid == 0:
                    control.close()
                    try:
                        _child(msg, fds)
                    except BaseException:  # noqa: BLE001 - the child's log says why; the parent sees it die
                        import traceback

                        traceback.print_exc()
                    os._exit(70)
                children.add(pid)
                answer = {"pid": pid}
            elif op == "kill":
                answer = {"status": "already reaped"}
                if pid in children:
                    for kill in (os.killpg, os.kill):
                        try:
                            kill(pid, signal.SIGKILL)
                            break
                        except (ProcessLookupError, PermissionError):
                            continue
                    answer = {"status": _status(os.waitpid(pid, 0)[1])}
                    children.discard(pid)
            elif op == "poll":
                answer = {"alive": False, "status": "already reaped"}
                if pid in children:
                    done, code = os.waitpid(pid, os.WNOHANG)
                    answer = {"alive": done == 0, "status": _status(code) if done else None}
                    if done:
                        children.discard(pid)
            else:
                raise ValueError(f"unknown control op {op!r}")
        except Exception as e:  # noqa: BLE001 - reported to the parent; the server goes on
            answer = {"error": f"{type(e).__name__}: {e}"}
        finally:
            for fd in fds:
                os.close(fd)
        control.send(json.dumps(answer).encode())
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
