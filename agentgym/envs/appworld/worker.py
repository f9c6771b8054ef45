"""One AppWorld world per process, driven over JSON lines. RUNS IN THE APPWORLD VENV, not in agentgym.

Started by :mod:`agentgym.envs.appworld.pool` as ``<appworld-python> -I worker.py CONFIG_JSON`` inside the sandbox
of :mod:`.sandbox` (network namespace, rlimits, scrubbed environment, cwd = its workspace). ``CONFIG_JSON`` is
``{"workspace": dir, "world_data": dir, "timeout_seconds": int, "max_interactions": int,
"allowed_read": [dir, ...]}``.

Protocol: after start-up it writes ``{"ready": true, "pid": ...}``; then one request per line on stdin, one reply
per line on the protocol channel:

* ``{"op": "reset", "task_id": ..., "experiment": ...}`` -> ``{"ok": true, "instruction", "supervisor",
  "app_descriptions", "datetime"}``. One live world per process (a second AppWorld in the same process silently
  takes over the first one's in-memory databases): a second reset first closes the current world, and is refused
  once agent code has run here (the process may be polluted; the pool starts a fresh one instead).
* ``{"op": "execute", "code": ...}`` -> ``{"ok": true, "output": str, "task_completed": bool, "tainted": bool}``;
  ``tainted`` turns true for good once a cell that parses as Python was handed to AppWorld (a cell that does not
  parse never runs).
* ``{"op": "close"}`` -> ``{"ok": true, "output_dbs": dir}`` and the process exits.

Any failure of the worker itself is ``{"ok": false, "error": str}``. The protocol goes to a private duplicate of
the original stdout; fd 1 is pointed at stderr so that stray prints (AppWorld's warnings, agent code that escaped
output capture) cannot corrupt the channel.

Before the first agent cell runs, an audit hook (PEP 578; it cannot be removed) refuses: opening files for writing
outside the workspace, opening files for reading outside the workspace/world data/Python installation, any socket
connect/bind/sendto, process creation (fork, exec, spawn, subprocess, os.system), ctypes library loading, and
frame/gc introspection that could reach the hook's own state. It is a second line behind the OS-level limits the
parent applies (network namespace, rlimits, wall-clock kill), not a replacement for them.
"""

import ast
import json
import os
import sys

_FAIL_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


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

    def hook(event, args, _blocked=blocked, _ws=ws, _reads=reads, _dev=device_ok, _realpath=os.path.realpath,
             _isinstance=isinstance, _str=str, _bytes=bytes, _flags=_FAIL_WRITE_FLAGS, _sep=os.sep,
             _perm=PermissionError):
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
            elif not any(target.startswith(r) for r in _reads):
                raise _perm(f"sandbox: reading {path} is outside the workspace")
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
                if not any(target.startswith(r) for r in _reads):
                    raise _perm(f"sandbox: listing {path} is outside the workspace")

    sys.addaudithook(hook)


def _reply(chan, obj):
    chan.write(json.dumps(obj) + "\n")
    chan.flush()


def main(argv):
    config = json.loads(argv[1])
    # Keep the protocol on a private fd; make fd 1 an alias of stderr.
    chan = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    workspace = config["workspace"]
    os.chdir(workspace)
    os.environ["APPWORLD_ROOT"] = workspace
    os.environ["APPWORLD_CACHE"] = os.path.join(workspace, ".appworld")
    data_link = os.path.join(workspace, "data")
    if not os.path.exists(data_link):
        os.symlink(config["world_data"], data_link)

    # Heavy imports before the guard goes up (they read site-packages, which stays readable anyway).
    from appworld import AppWorld
    import appworld.apps  # noqa: F401
    from appworld.apps import get_all_apps
    from appworld.common.utils import import_apis_module, import_models_module

    # Import every app's API and model modules now, while the worker waits in the pool as a spare: building the
    # FastAPI routes is most of a world's start-up cost, and reset then only loads the task's databases.
    for app in get_all_apps():
        import_models_module(app)
        import_apis_module(app)

    _reply(chan, {"ready": True, "pid": os.getpid()})
    world = None
    tainted = False
    guarded = False
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "reset":
                if world is not None:
                    if tainted:
                        raise RuntimeError("agent code ran in this worker: it cannot host another world")
                    world.close()
                    world = None
                world = AppWorld(task_id=req["task_id"], experiment_name=req.get("experiment", "agentgym"),
                                 timeout_seconds=int(config.get("timeout_seconds", 10)),
                                 max_interactions=int(config.get("max_interactions", 1000)),
                                 load_ground_truth=False, raise_on_unsafe_syntax=True,
                                 null_patch_unsafe_execution=True)
                task = world.task
                # Import everything a cell may lazily need, then raise the guard before any agent code runs.
                world.execute("pass")
                world.environment_io.clear()
                world.num_interactions = 0
                python_dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix] + [p for p in sys.path if p]
                if not guarded:
                    _install_guard(workspace, config.get("allowed_read", []) + [config["world_data"]] + python_dirs)
                    guarded = True
                _reply(chan, {"ok": True, "instruction": task.instruction,
                              "supervisor": {k: task.supervisor[k] for k in
                                             ("first_name", "last_name", "email", "phone_number")},
                              "app_descriptions": dict(task.app_descriptions),
                              "datetime": task.datetime.isoformat()})
            elif op == "execute":
                if world is None:
                    raise RuntimeError("execute before reset")
                code = str(req["code"])
                try:
                    ast.parse(code.strip())
                    tainted = True
                except (SyntaxError, ValueError):
                    pass
                output = world.execute(code)
                _reply(chan, {"ok": True, "output": output, "task_completed": bool(world.task_completed()),
                              "tainted": tainted})
            elif op == "close":
                out = world.output_db_home_path_on_disk if world is not None else None
                _reply(chan, {"ok": True, "output_dbs": os.path.abspath(out) if out else None})
                break
            elif op == "ping":
                _reply(chan, {"ok": True})
            else:
                raise ValueError(f"unknown op {op!r}")
        except BaseException as e:  # noqa: BLE001 - any failure is reported, then the loop goes on
            _reply(chan, {"ok": False, "error": f"{type(e).__name__}: {e}"})
    chan.close()
    os._exit(0)  # skip interpreter teardown (AppWorld's atexit handlers write files)


if __name__ == "__main__":
    main(sys.argv)
