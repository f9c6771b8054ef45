"""Evaluate one finished episode in a fresh process. RUNS IN THE APPWORLD VENV, not in agentgym.

``<appworld-python> -I evaluator.py``: the process imports AppWorld's evaluator, writes ``{"ready": true}``, then
reads ONE job line ``{"full_data": dir, "manifest": file or null, "task_id": str, "output_dbs": dir, "scratch":
dir}`` from stdin, answers it and exits (so the pool can start it ahead of need and every evaluation still runs
in a process of its own). This process never runs agent code: it reads the task's
pristine start databases and ground truth (``full_data``, a tree no worker can see), checks them against the build
manifest, copies the episode's saved database *changes* (``output_dbs``, written by the worker) into its own
scratch root after checking that every change is a plain INSERT/UPDATE/DELETE on the app's tables, and runs
``appworld.evaluator.evaluate_task``. Agent code that patched the evaluator inside its worker therefore has no
effect here.

Writes one JSON line: ``{"ok": true, "success": bool, "num_tests": int, "passes": [...], "failures": [...]}``, or
``{"ok": false, "error": str}``. A tampered state is a *failed task* (``success`` false with a failure naming the
tampering), not an error: it is the agent's doing.
"""

import hashlib
import json
import os
import re
import shutil
import sys

_ALLOWED_SQL = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\s", re.IGNORECASE)
_EXPERIMENT = "agentgym-eval"


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_manifest(full_data, manifest_path, task_id):
    with open(manifest_path) as f:
        manifest = json.load(f)
    prefix = os.path.join("tasks", task_id) + os.sep
    expected = {k: v for k, v in manifest.items() if k.startswith(prefix) or k.startswith("base_dbs" + os.sep)}
    if not any(k.startswith(prefix) for k in expected):
        raise RuntimeError(f"task {task_id} is not in the build manifest")
    for rel, digest in expected.items():
        if _sha256(os.path.join(full_data, rel)) != digest:
            raise RuntimeError(f"the built task data was modified: {rel}")


def _copy_changes(src, dst):
    """Copy the worker's change logs, refusing anything but row changes. Returns a tamper message or None."""
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not os.path.isfile(path) or os.path.islink(path):
            return f"unexpected entry in the saved state: {name}"
        if name == "model_hashes.json":
            with open(path) as f:
                hashes = json.load(f)
            if not isinstance(hashes, dict):
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
        shutil.copy(path, os.path.join(dst, name))
    return None


def main(argv):
    chan = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import appworld.evaluator  # noqa: F401 - the slow import, done before the job arrives

    chan.write(json.dumps({"ready": True}) + "\n")
    chan.flush()
    line = sys.stdin.readline()
    try:
        cfg = json.loads(line)
        task_id = cfg["task_id"]
        scratch = cfg["scratch"]
        os.makedirs(scratch, exist_ok=True)
        data_link = os.path.join(scratch, "data")
        if not os.path.islink(data_link):
            os.symlink(cfg["full_data"], data_link)
        os.environ["APPWORLD_ROOT"] = scratch
        os.environ["APPWORLD_CACHE"] = os.path.join(scratch, ".appworld")
        os.chdir(scratch)
        if cfg.get("manifest"):
            _check_manifest(cfg["full_data"], cfg["manifest"], task_id)
        dst = os.path.join(scratch, "experiments", "outputs", _EXPERIMENT, "tasks", task_id, "dbs")
        shutil.rmtree(dst, ignore_errors=True)
        tamper = _copy_changes(cfg["output_dbs"], dst)
        if tamper is not None:
            result = {"ok": True, "success": False, "num_tests": 1, "passes": [],
                      "failures": [{"requirement": "the saved state holds only app row changes",
                                    "trace": tamper, "label": None}]}
        else:
            from appworld.evaluator import evaluate_task

            tracker = evaluate_task(task_id=task_id, experiment_name=_EXPERIMENT, suppress_errors=True,
                                    save_report=False)
            d = tracker.to_dict()
            result = {"ok": True, "success": bool(d["success"]), "num_tests": int(d["num_tests"]),
                      "passes": [{"requirement": p["requirement"]} for p in d["passes"]],
                      "failures": [{"requirement": f["requirement"], "trace": str(f.get("trace", ""))[:2000]}
                                   for f in d["failures"]]}
    except BaseException as e:  # noqa: BLE001 - reported to the parent as an evaluation error
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    chan.write(json.dumps(result) + "\n")
    chan.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
