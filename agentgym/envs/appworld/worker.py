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

Every message carries a ``seq`` that its answer repeats (the parent skips answers to a call it gave up on). The
server reaps ended children before each message and remembers how they ended until a kill or poll asks; it forgets
a pid once reported: a pid can never name a process that merely reused it.

**A worker child** (``role`` ``worker``; ``workspace``, ``world_data``, ``timeout_seconds``, ``max_interactions``,
``limits``) makes its own session, lowers its rlimits, points stdout/stderr at ``workspace/.worker-stderr.log``
(stray prints cannot reach the protocol), confines its writes to the workspace and forbids itself new processes,
writes ``{"ready": true, "id": ..., "unconfined": null or why the kernel filter could not be installed,
"files_unconfined": null or why Landlock could not be}`` and serves JSON-lines requests
``{"id": nonce, "op": ...}``; every reply repeats the request's ``id`` (a per-request nonce of the parent: a line
that agent code writes to the reply pipe without it is ignored; agent code can read the id of its own request by
frame introspection and so fake its own cell's reply, never the evaluation):

* ``{"op": "reset", "task_id": ..., "experiment": ...}`` -> ``{"ok": true, "instruction", "supervisor",
  "app_descriptions", "datetime"}``. Before the world starts, the worker confines its reads to the guard's read
  set (below) at the kernel level too. Once per process: a second reset is refused (the parent starts a fresh child
  per episode).
* ``{"op": "execute", "code": ...}`` -> ``{"ok": true, "output": str, "task_completed": bool}``. After every cell
  AppWorld saves the world's changes under ``workspace/experiments/outputs/<experiment>/tasks/<task>/dbs``, the
  only place the parent's evaluator reads them from.

Any failure of the worker itself is ``{"ok": false, "error": str}``. The parent trusts nothing else a worker says:
it keeps the taint itself and builds every path itself.

**An evaluator child** (``role`` ``evaluate``, ``job``) runs :func:`evaluator.evaluate_job` (loaded from the file
beside this one), writes one result line and exits. It never runs agent code.

**The guard.** Before the first agent cell runs, a worker child installs an audit hook (PEP 578; it cannot be
removed; it binds everything it uses when installed, so agent code cannot swap its helpers, and it accepts paths
only as exact ``str``/``bytes``) that refuses: opening files for writing outside the workspace, opening a directory
outside it, and for reading outside the workspace, the Python installation and what the task's world needs
(``data/api_docs``, ``data/base_dbs``, ``data/tasks/<task>/specs.json`` and ``.../dbs`` -- never a ``ground_truth``
folder); SQLite databases opened outside the workspace (``sqlite3.connect`` opens files without an ``open`` event)
except in-memory ones and read-only (``mode=ro``) URIs of those world files; any socket connect/bind/sendto; process
creation (fork, exec, spawn, posix_spawn, subprocess, os.system) and fresh imports of the modules that create
processes or interpreters behind the audit events (``_posixsubprocess``, ``_xxsubinterpreters``...); ctypes library
loading; and ``sys._current_frames``/gc introspection. The server also replaces
``_posixsubprocess.fork_exec`` (which forks and execs with no audit event) by a refusal, and makes AppWorld open its
base databases read-only. The hook is a second line behind the OS-level limits: network namespace, rlimits,
wall-clock kill, a seccomp filter each worker installs right after the fork (:func:`_forbid_new_processes`) that
makes the kernel refuse every new process and every ptrace, pidfd or signal aimed at another process, and two
Landlock layers (:func:`_landlock`) that bind whatever C code the agent reaches without an audit event (cffi is
installed in AppWorld's venv): one added right after the fork that refuses creating, writing, truncating, removing,
renaming or linking files anywhere but beneath the workspace (and ``/dev/null``), and one added at the reset, before
the world starts any thread, that refuses opening files or listing directories anywhere but beneath the guard's read
set, the workspace and the shared libraries (``/usr/lib``, ``/lib``...) -- never a ``ground_truth`` folder. Where
the kernel has no Landlock (``files_unconfined`` says why; the parent logs a warning once) the hook alone confines
files, and C code can open files it would refuse.
"""

import json
import os
import signal
import socket
import stat
import sys

_FAIL_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_HERE = os.path.dirname(os.path.abspath(__file__))
#: modules whose fresh import would create processes or interpreters without an audit event, or load C code
_BLOCKED_IMPORTS = ("_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters",
                    "_testcapi", "_testinternalcapi", "_testmultiphase", "uvloop", "_ctypes", "_cffi_backend")


def _private_realpath(_getcwd=os.getcwd, _lstat=os.lstat, _readlink=os.readlink, _islnk=stat.S_ISLNK,
                      _oserror=OSError, _perm=PermissionError):
    """A ``realpath`` for str paths whose every dependency is bound now: ``posixpath.realpath`` looks its helpers
    (``_joinrealpath``, ``abspath``, ``os.lstat``...) up in module globals that agent code can replace. Missing
    components are kept as they are (as ``realpath`` does); more than 40 symlinks is refused (ELOOP)."""

    def realpath(path):
        if not path.startswith("/"):
            path = _getcwd() + "/" + path
        todo = path.split("/")
        todo.reverse()
        resolved = []
        hops = 0
        while todo:
            name = todo.pop()
            if name == "" or name == ".":
                continue
            if name == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = "/" + "/".join(resolved) + ("/" if resolved else "") + name
            try:
                is_link = _islnk(_lstat(candidate).st_mode)
            except _oserror:
                is_link = False
            if not is_link:
                resolved.append(name)
                continue
            hops += 1
            if hops > 40:
                raise _perm(f"sandbox: too many symlinks in {path}")
            target = _readlink(candidate)
            if target.startswith("/"):
                resolved = []
            more = target.split("/")
            more.reverse()
            todo += more
        return "/" + "/".join(resolved)

    return realpath


def _install_guard(workspace, read_roots):
    """Install the audit hook. Everything it uses is bound now, as defaults (builtins included: agent code can
    replace ``builtins.any`` or ``posixpath``'s helpers, not a function's defaults). Paths must be exactly ``str``
    or ``bytes`` (a descriptor exactly ``int``): for any other object the hook and the opener would each call its
    ``__fspath__``, and it could answer differently the second time."""
    realpath = _private_realpath()
    ws = realpath(os.path.realpath(workspace)) + "/"
    reads = tuple(realpath(os.path.realpath(r)).rstrip("/") + "/" for r in read_roots) + (ws,)
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
    path_events = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.utime"})

    def as_path(path, what, _type=type, _str=str, _bytes=bytes, _int=int, _perm=PermissionError):
        """``path`` as a str, None for a descriptor; refuses every other type (see above)."""
        kind = _type(path)
        if kind is _str:
            return path
        if kind is _bytes:
            return path.decode("utf-8", "surrogateescape")  # the bytes the kernel will see, one to one
        if kind is _int:
            return None
        raise _perm(f"sandbox: {what} takes only str or bytes paths here, not {kind.__name__}")

    def readable(target, _reads=reads):
        if "/ground_truth/" in target:
            return False
        for root in _reads:
            if target.startswith(root):
                return True
        return False

    def hook(event, args, _blocked=blocked, _ws=ws, _dev=device_ok, _realpath=realpath, _as_path=as_path,
             _readable=readable, _type=type, _int=int, _str=str, _flags=_FAIL_WRITE_FLAGS, _perm=PermissionError,
             _imports=blocked_imports, _memory=memory_params, _frozenset=frozenset, _path_events=path_events,
             _stat=os.stat, _isdir=stat.S_ISDIR, _oserror=OSError):
        if event in _blocked:
            raise _perm(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            path = _as_path(path, "open")
            if path is None:
                return  # an already open file descriptor
            real = _realpath(path)
            if real in _dev:
                return
            if mode is not None:
                writing = _type(mode) is not _str or "w" in mode or "a" in mode or "x" in mode or "+" in mode
            else:
                writing = _type(flags) is not _int or flags & _flags
            target = real + "/"
            if writing:
                if not target.startswith(_ws):
                    raise _perm(f"sandbox: writing {path} is outside the workspace")
            elif not _readable(target):
                raise _perm(f"sandbox: reading {path} is outside the workspace")
            if not target.startswith(_ws):
                # A descriptor of a directory outside the workspace would let ``dir_fd=`` calls (whose audit events
                # do not carry it) write relative to it.
                try:
                    is_dir = _isdir(_stat(real).st_mode)
                except _oserror:
                    is_dir = False
                if is_dir:
                    raise _perm(f"sandbox: opening the directory {path} is not allowed")
        elif event == "sqlite3.connect":
            db = _as_path(args[0], "sqlite3.connect")
            if db is None:
                raise _perm("sandbox: sqlite3.connect needs a path")
            if db == "" or db == ":memory:":
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
                if params == ["mode=ro"] and _readable(_realpath(path) + "/"):
                    return
                db = path
            if not (_realpath(db) + "/").startswith(_ws):
                raise _perm(f"sandbox: sqlite database {db} is outside the workspace")
        elif event == "import":
            if args[0] in _imports:
                raise _perm(f"sandbox: importing {args[0]} is not allowed")
        elif event in _path_events:
            path = _as_path(args[0], event)
            if path is not None and not (_realpath(path) + "/").startswith(_ws):
                raise _perm(f"sandbox: {event} on {path} is outside the workspace")
            if event == "os.rename":
                dst = _as_path(args[1], event)
                if dst is not None and not (_realpath(dst) + "/").startswith(_ws):
                    raise _perm(f"sandbox: {event} to {dst} is outside the workspace")
        elif event == "os.listdir" or event == "os.scandir":
            path = "." if args[0] is None else _as_path(args[0], event)
            if path is not None and not _readable(_realpath(path) + "/"):
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
    """A seccomp filter (kernel level, inherited by every later thread) that refuses with EPERM: fork, vfork,
    execve, execveat and clone without ``CLONE_THREAD`` (clone3 gets ENOSYS: glibc then makes its threads with
    clone) -- no process creation; ptrace, process_vm_readv/writev, pidfd_open/send_signal/getfd and
    rt_(tg)sigqueueinfo -- no reaching into another process; kill, tkill and tgkill unless their target (tgkill's
    thread group) is this process -- no signal to another process of the same user. Whatever C code agent code
    reaches (cffi reaches libc without an audit event). Must run while the process has one thread. Then it drops
    ``ctypes`` (:func:`_drop_ctypes`). Returns None when on, else why not."""
    import ctypes
    import platform
    import struct

    machine = platform.machine()
    if machine == "x86_64":
        arch, nrs = 0xC000003E, {"clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone3": 435,
                                 "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
                                 "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "kill": 62, "tkill": 200,
                                 "tgkill": 234}
    elif machine == "aarch64":
        arch, nrs = 0xC00000B7, {"clone": 220, "execve": 221, "execveat": 281, "clone3": 435, "ptrace": 117,
                                 "process_vm_readv": 270, "process_vm_writev": 271, "rt_sigqueueinfo": 138,
                                 "rt_tgsigqueueinfo": 240, "kill": 129, "tkill": 130, "tgkill": 131}
    else:
        return f"no seccomp filter for {machine}"
    nrs.update(pidfd_send_signal=424, pidfd_open=434, pidfd_getfd=438)  # the same on every architecture
    denied = ("fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
              "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal", "pidfd_open", "pidfd_getfd")
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    # (code, jump-if-true label, jump-if-false label, k); labels resolve to relative offsets below.
    prog = [(ld, None, None, 4), (jeq, None, "deny", arch), (ld, None, None, 0),
            (jge, "deny", None, 0x40000000),  # the x32 ABI's numbers
            (jeq, "nosys", None, nrs["clone3"])]
    prog += [(jeq, "deny", None, nrs[name]) for name in denied if name in nrs]
    # kill/tkill/tgkill: the first argument (its low 32 bits: pid_t) must be this process.
    prog += [(jeq, "own_pid", None, nrs[name]) for name in ("kill", "tkill", "tgkill")]
    prog += [(jeq, None, "allow", nrs["clone"]), (ld, None, None, 16), (jset, "allow", "deny", 0x00010000)]
    labels = {"own_pid": len(prog)}
    prog += [(ld, None, None, 16), (jeq, "allow", "deny", os.getpid())]
    labels.update(allow=len(prog), deny=len(prog) + 1, nosys=len(prog) + 2)
    prog += [(ret, None, None, allow), (ret, None, None, eperm), (ret, None, None, enosys)]
    raw = b"".join(struct.pack("HBBI", code, labels[jt] - i - 1 if jt else 0, labels[jf] - i - 1 if jf else 0, k)
                   for i, (code, jt, jf, k) in enumerate(prog))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    fprog = Prog(len(prog), raw)
    try:
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: lets an unprivileged process install a filter
            return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
        if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            return f"seccomp is not available: {os.strerror(ctypes.get_errno())}"
        return None
    finally:
        _drop_ctypes()


def _drop_ctypes():
    """Forget ``ctypes`` (imported by the hardening and by AppWorld's dependencies before the guard), so that an
    ``import ctypes`` in agent code is a fresh import, which the guard refuses."""
    for name in [n for n in sys.modules if n in ("ctypes", "_ctypes") or n.startswith("ctypes.")]:
        del sys.modules[name]


#: Landlock's filesystem access rights (linux/landlock.h); the write-type ones, and the read-type ones
_LL_WRITE = (1 << 1) | sum(1 << bit for bit in range(4, 13))  # WRITE_FILE, REMOVE_*, MAKE_*
_LL_READ = (1 << 2) | (1 << 3)  # READ_FILE, READ_DIR
_LL_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)  # what a rule on a non-directory may allow


def _landlock(roots, handled):
    """Add a Landlock layer (kernel level, inherited by every later thread and applying to whatever C code agent
    code reaches, cffi included) that refuses the ``handled`` accesses (``"write"``: creating, writing, truncating,
    removing, renaming, linking files; ``"read"``: opening files and listing directories) everywhere but beneath
    ``roots`` (paths that do not exist are skipped). Layers stack: each can only take rights away. It binds the
    calling thread and the threads it starts later, so it runs while the process has one thread. Returns None
    when the layer is on, else why not (no Landlock in this kernel)."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    create, add_rule, restrict = 444, 445, 446  # the same on x86_64 and aarch64 (the generic syscall table)
    fds = []
    try:
        abi = libc.syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # LANDLOCK_CREATE_RULESET_VERSION
        if abi < 1:
            return f"Landlock is not available: {os.strerror(ctypes.get_errno())}"
        access = _LL_WRITE if handled == "write" else _LL_READ
        if handled == "write":
            access |= (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)  # REFER, TRUNCATE
        attr = struct.pack("Q", access)  # struct landlock_ruleset_attr's first field (the kernel takes a prefix)
        ruleset = libc.syscall(create, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
        if ruleset < 0:
            return f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
        fds.append(ruleset)
        for root in roots:
            try:
                fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # nothing there to allow
            fds.append(fd)
            allowed = access if stat.S_ISDIR(os.fstat(fd).st_mode) else access & _LL_FILE_RIGHTS
            rule = struct.pack("=Qi", allowed, fd)  # struct landlock_path_beneath_attr (packed)
            if libc.syscall(add_rule, ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0)) != 0:
                return f"landlock_add_rule({root}) failed: {os.strerror(ctypes.get_errno())}"
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: lets an unprivileged process restrict itself
            return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
        if libc.syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}"
        return None
    finally:
        for fd in fds:
            os.close(fd)
        _drop_ctypes()


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


#: what a worker's C code (the dynamic loader, libc) reads beside the Python installation and the world
_SYSTEM_READS = ["/usr/lib", "/lib", "/usr/lib64", "/lib64", "/etc/ld.so.cache", "/dev/null", "/dev/urandom",
                 "/dev/random"]


def _serve_world(cfg, chan, landlock):
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
                python_dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix] + [p for p in sys.path if p]
                read_roots = _world_read_roots(workspace, req["task_id"]) + python_dirs
                if landlock:
                    # The guard's read set, for C code too (writes are confined since the fork). Before the world
                    # starts its threads (an asyncio portal): a layer binds only the thread that adds it and the
                    # threads it starts later.
                    if len(os.listdir("/proc/self/task")) != 1:
                        raise RuntimeError("the worker has more than one thread: Landlock would not bind them all")
                    failed = _landlock(read_roots + [workspace] + _SYSTEM_READS, "read")
                    if failed:
                        raise RuntimeError(failed)
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
                _install_guard(workspace, read_roots)
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
    limits = dict(msg.get("limits", {}))
    nproc = limits.pop("RLIMIT_NPROC", None)
    _apply_limits(limits)
    if msg["role"] == "worker":
        # Temporary files (SQLite's, tempfile's) stay in the workspace too: nothing else is writable.
        os.environ.update({"SQLITE_TMPDIR": workspace, "TMPDIR": workspace})
        os.symlink(msg["world_data"], os.path.join(workspace, "data"))
        files_unconfined = _landlock([workspace, "/dev/null"], "write")
        unconfined = _forbid_new_processes()
        if unconfined and nproc is not None:
            # Only without the filter: RLIMIT_NPROC counts every thread of the user, so it could starve AppWorld's
            # own threads, and the filter already refuses every new process.
            _apply_limits({"RLIMIT_NPROC": nproc})
        _reply(chan, {"ready": True, "id": msg["id"], "unconfined": unconfined,
                      "files_unconfined": files_unconfined})
        _serve_world(msg, chan, landlock=files_unconfined is None)
    else:
        _evaluate(msg, chan)
    chan.close()
    os._exit(0)  # skip interpreter teardown (AppWorld's atexit handlers write files)


def _status(code):
    if os.WIFSIGNALED(code):
        return f"killed by signal {os.WTERMSIG(code)}"
    return f"exit code {os.WEXITSTATUS(code)}"


def main(argv):
    import resource

    config = json.loads(argv[1])
    control = socket.socket(fileno=int(config["control_fd"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core dumps, here and in every child
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
    ended = {}  # pid -> how it ended, for children reaped before the parent asked
    control.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
        except OSError:
            break
        if not data:
            break  # the parent is gone
        while children:  # reap what ended meanwhile (children the parent forgot included): no zombies pile up
            try:
                done, code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not done:
                break
            if done in children:
                children.discard(done)
                ended[done] = _status(code)
        msg = {}
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
                ended.pop(pid, None)  # an earlier child of that pid is long reported
                answer = {"pid": pid}
            elif op == "kill":
                answer = {"status": ended.pop(pid, "already reaped")}
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
                answer = {"alive": False, "status": ended.pop(pid, "already reaped")}
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
        answer["seq"] = msg.get("seq") if isinstance(msg, dict) else None  # the parent matches answers by it
        control.send(json.dumps(answer).encode())
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
