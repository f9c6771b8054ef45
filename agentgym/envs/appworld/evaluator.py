"""Evaluate one finished episode. RUNS IN THE APPWORLD VENV, not in agentgym.

:func:`evaluate_job` runs in a child the fork server of ``worker.py`` forks for this one job (a fresh process that
never runs agent code; the server has AppWorld's evaluator imported already). The job is ``{"full_data": dir,
"manifest": file or null, "task_id": str, "output_dbs": dir, "scratch": dir}``. It reads the task's pristine start
databases and ground truth (``full_data``, a tree no worker can read), checks them against the build manifest,
copies the episode's saved database *changes* (``output_dbs``, written by the worker; the parent names the folder,
never the worker) into its own scratch root after checking that every change is a plain INSERT/UPDATE/DELETE on
the app's tables, checks that they load, and runs ``appworld.evaluator.evaluate_task``. Agent code that patched
the evaluator inside its worker therefore has no effect here.

Returns ``{"ok": true, "success": bool, "num_tests": int, "passes": [...], "failures": [...]}``, or ``{"ok": false,
"error": str}`` when the evaluation itself failed (a damaged build, an AppWorld error on a clean state). A saved
state that is missing, malformed, over :data:`MAX_STATE_BYTES`, holds anything but row changes, or does not load is
a *failed task* (``success`` false with a failure naming the problem, ``"tampered": true``), not an error: the state
is the agent's doing.
"""

import hashlib
import json
import os
import re
import shutil

_ALLOWED_SQL = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\s", re.IGNORECASE)
_EXPERIMENT = "agentgym-eval"
#: the most bytes of saved state evaluated: the agent controls its size (up to RLIMIT_FSIZE per file), and a real
#: episode's changes are kilobytes; more is a tampered state, not work for the evaluator
MAX_STATE_BYTES = 64 * 1024**2


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_manifest(manifest_path, task_id):
    """The task's files and the base databases in ``full/data`` hash as built (keys are relative to the build)."""
    root = os.path.dirname(os.path.abspath(manifest_path))
    with open(manifest_path) as f:
        manifest = json.load(f)
    data = os.path.join("full", "data")
    prefixes = (os.path.join(data, "tasks", task_id) + os.sep, os.path.join(data, "base_dbs") + os.sep)
    expected = {k: v for k, v in manifest.items() if k.startswith(prefixes)}
    if not any(k.startswith(prefixes[0]) for k in expected):
        raise RuntimeError(f"task {task_id} is not in the build manifest")
    for rel, digest in expected.items():
        if _sha256(os.path.join(root, rel)) != digest:
            raise RuntimeError(f"the built task data was modified: {rel}")


def _copy_changes(src, dst):
    """Copy the worker's change logs, refusing anything but row changes. Returns a tamper message or None."""
    if not os.path.isdir(src) or os.path.islink(src):
        return "the episode left no saved state"
    os.makedirs(dst, exist_ok=True)
    total = 0
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not os.path.isfile(path) or os.path.islink(path):
            return f"unexpected entry in the saved state: {name}"
        total += os.path.getsize(path)
        if total > MAX_STATE_BYTES:
            return f"the saved state is over {MAX_STATE_BYTES} bytes"
        try:
            if name == "model_hashes.json":
                with open(path) as f:
                    if not isinstance(json.load(f), dict):
                        return "model_hashes.json is not an object"
            elif name.endswith(".jsonl"):
                with open(path) as f:
                    for line in f:
                        if not line.strip():
                            continue
                        entry = json.loads(line)
                        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                                and _ALLOWED_SQL.match(entry[0]) and ";" not in entry[0]):
                            return f"disallowed statement in the saved state of {name}: {str(entry)[:120]}"
            else:
                return f"unexpected file in the saved state: {name}"
        except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
            return f"malformed saved state in {name}: {e}"
        shutil.copy(path, os.path.join(dst, name))
    return None


def _check_loads(task_id, dst):
    """Load the saved state as ``evaluate_task`` will (it then finds it cached). Returns a tamper message or None."""
    from appworld.apps import get_all_apps
    from appworld.apps.model_lib import get_db_home_path
    from appworld.collections.models import ModelCollection

    try:
        ModelCollection.load(to_db_home_path=get_db_home_path(storage_type="memory", type="task_output",
                                                              task_id=task_id),
                             from_db_home_path=dst, load_apps=get_all_apps(skip_admin=True))
    except (MemoryError, OSError, ImportError):
        raise  # the evaluator's own resources or install, not the agent's state: an evaluation error
    except Exception as e:  # noqa: BLE001 - any other failure to load the agent's state is the agent's doing
        return f"the saved state does not load: {type(e).__name__}: {str(e)[:300]}"
    return None


def evaluate_job(job):
    """Evaluate one job (see the module docstring); never raises."""
    try:
        task_id = job["task_id"]
        scratch = job["scratch"]
        os.makedirs(scratch, exist_ok=True)
        data_link = os.path.join(scratch, "data")
        if not os.path.islink(data_link):
            os.symlink(job["full_data"], data_link)
        os.environ["APPWORLD_ROOT"] = scratch
        os.environ["APPWORLD_CACHE"] = os.path.join(scratch, ".appworld")
        os.chdir(scratch)
        if job.get("manifest"):
            _check_manifest(job["manifest"], task_id)
        dst = os.path.join(scratch, "experiments", "outputs", _EXPERIMENT, "tasks", task_id, "dbs")
        shutil.rmtree(dst, ignore_errors=True)
        tamper = _copy_changes(job["output_dbs"], dst) or _check_loads(task_id, dst)
        if tamper is not None:
            return {"ok": True, "success": False, "num_tests": 1, "passes": [], "tampered": True,
                    "failures": [{"requirement": "the saved state holds only app row changes that load",
                                  "trace": tamper}]}
        from appworld.evaluator import evaluate_task

        tracker = evaluate_task(task_id=task_id, experiment_name=_EXPERIMENT, suppress_errors=True,
                                save_report=False)
        d = tracker.to_dict()
        return {"ok": True, "success": bool(d["success"]), "num_tests": int(d["num_tests"]), "tampered": False,
                "passes": [{"requirement": p["requirement"]} for p in d["passes"]],
                "failures": [{"requirement": f["requirement"], "trace": str(f.get("trace", ""))[:2000]}
                             for f in d["failures"]]}
    except BaseException as e:  # noqa: BLE001 - reported to the parent as an evaluation error
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
