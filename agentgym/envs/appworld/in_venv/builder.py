"""Build our task definitions into AppWorld's official on-disk layout. RUNS IN THE APPWORLD VENV, not in agentgym.

Usage (the agentgym side, :mod:`.tasks`, calls it): ``<appworld-python> -I builder.py SPEC.json OUT_DIR``.

``SPEC.json`` holds ``{"tasks": [task, ...], "splits": {name: [task_id, ...]}}`` where each task is a dict with
``task_id`` (``<scenario>_<n>``), ``instruction``, ``supervisor``, ``datetime``, ``apps``, ``seed`` (``{"app.Model":
[record, ...]}``), ``public_data``, ``private_data``, ``answer``, ``evaluation`` (source of ``evaluate(...)``),
``difficulty`` and ``solution`` (list of code cells). It writes two trees:

* ``OUT_DIR/full/data``: the official layout (``api_docs/standard``, ``base_dbs``, ``tasks/<id>/{specs.json,dbs,ground_truth}``,
  ``datasets/<split>.txt``) that ``appworld.evaluator.evaluate_task`` reads; only the evaluator process sees it.
* ``OUT_DIR/world/data``: the same without ``ground_truth`` -- the tree workers load their worlds from. Its files
  are copies, not hard links, of the full tree's (a write through one must never reach the evaluator's data), and
  every built file is made read-only. ``OUT_DIR/manifest.json`` records the SHA-256 of every file of both trees
  (keys relative to ``OUT_DIR``) so that the evaluator can refuse a tampered task and ``ensure_build`` can tell a
  damaged build and rebuild it.

The build is deterministic: time is frozen at each task's datetime, ids are assigned in record order, and nothing
random is drawn.  This file must import nothing from agentgym (it runs with ``python -I`` in another venv).
"""

import hashlib
import json
import os
import shutil
import sys
from datetime import datetime

_SUPERVISOR_DEFAULTS = {"birthday": "1990-01-01"}


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _coerce(value):
    # Seeds are JSON: ISO datetimes arrive as strings tagged {"$datetime": "..."}.
    if isinstance(value, dict) and set(value) == {"$datetime"}:
        return datetime.fromisoformat(value["$datetime"])
    return value


def _build_base(root, all_apps, api_docs):
    """``data/base_dbs``: every app's empty tables plus the API docs (the API docs app serves them from its DB)."""
    from appworld.apps.api_lib import save_local_dbs, set_local_dbs
    from appworld.apps.model_lib import CachedDBHandler
    from appworld.common.utils import import_models_module

    home = ":memory:build-base"
    set_local_dbs(to_db_home_path=home, from_db_home_path=home, app_names=list(all_apps), create=True)
    models = {app: import_models_module(app) for app in all_apps}
    for app in all_apps:
        models[app].SQLModel.create_db()
    api_doc = models["api_docs"].ApiDoc
    api_doc.save_all([api_doc(app_name_=app_name, api_name=doc["api_name"], path=doc["path"], method=doc["method"],
                              description=doc["description"], parameters=doc["parameters"],
                              response_schemas=doc["response_schemas"])
                      for app_name, docs in api_docs.items() for doc in docs.values()])
    base = os.path.join(root, "data", "base_dbs")
    save_local_dbs(home, base, format="full", app_names=list(all_apps), delete_if_exists=True,
                   save_model_hashes=True)
    CachedDBHandler.reset(home)
    return base


def _build_task(task, root, all_apps, base):
    """The task's input databases, saved as AppWorld does: the changes its seed makes over ``base_dbs``."""
    from freezegun import freeze_time

    from appworld.apps.api_lib import save_local_dbs, set_local_dbs
    from appworld.apps.model_lib import CachedDBHandler, ModelHashHandler
    from appworld.common.constants import CANARY_STRING, DB_VERSION
    from appworld.common.utils import import_models_module

    task_id = task["task_id"]
    home = f":memory:build-{task_id}"
    freezer = freeze_time(datetime.fromisoformat(task["datetime"]))
    freezer.start()
    try:
        set_local_dbs(to_db_home_path=home, from_db_home_path=base, app_names=list(all_apps))
        ModelHashHandler.load(base, home)
        models = {app: import_models_module(app) for app in all_apps}
        sup = dict(task["supervisor"])
        person = {k: sup[k] for k in ("first_name", "last_name", "email", "phone_number")}
        birthday = sup.get("birthday", _SUPERVISOR_DEFAULTS["birthday"])
        models["admin"].MainUser(**person, birthday=birthday).save()
        supervisor = models["supervisor"].Supervisor(**person, birthday=birthday)
        supervisor.save()
        models["supervisor"].Task(supervisor_id=supervisor.id, instruction=task["instruction"]).save()
        for app, password in sorted(sup.get("passwords", {}).items()):
            models["supervisor"].AccountPassword(supervisor_id=supervisor.id, account_name=app,
                                                 password=password).save()
            # The supervisor's own account in each app is user 1 (seeds may rely on it). Apps name their users by
            # email or by phone number, and not all of them verify accounts.
            user = models[app].User
            fields = {"first_name": person["first_name"], "last_name": person["last_name"], "password": password}
            for name, value in (("email", person["email"]), ("phone_number", person["phone_number"]),
                                ("verified", True)):
                if name in user.__fields__:
                    fields[name] = value
            fields.update({k: _coerce(v) for k, v in task.get("supervisor_fields", {}).get(app, {}).items()})
            user(**fields).save()
        for model_name, records in task.get("seed", {}).items():
            app, cls_name = model_name.split(".")
            cls = getattr(models[app], cls_name)
            cls.save_all([cls(**{k: _coerce(v) for k, v in record.items()}) for record in records])

        task_dir = os.path.join(root, "data", "tasks", task_id)
        save_local_dbs(home, os.path.join(task_dir, "dbs"), format="changes", app_names=list(all_apps),
                       delete_if_exists=True, save_model_hashes=True)
    finally:
        freezer.stop()
        CachedDBHandler.reset(home)
    specs = {"instruction": task["instruction"], "supervisor": person, "datetime": task["datetime"],
             "db_version": DB_VERSION, "canary_string": CANARY_STRING}
    _write_json(os.path.join(task_dir, "specs.json"), specs)
    gt = os.path.join(task_dir, "ground_truth")
    os.makedirs(gt, exist_ok=True)
    # "minimal" ground truth: all evaluate_task needs. The counts are given so GroundTruth does not try to run
    # code formatters over a solution it does not have.
    n_lines = sum(len(c.splitlines()) for c in task["solution"])
    _write_json(os.path.join(gt, "metadata.json"),
                {"difficulty": task.get("difficulty", 1), "mode": "minimal", "num_apps": len(task["apps"]),
                 "num_apis": task.get("num_apis", 1), "num_solution_code_lines": n_lines})
    _write_json(os.path.join(gt, "public_data.json"), task.get("public_data", {}))
    _write_json(os.path.join(gt, "private_data.json"), task.get("private_data", {}))
    with open(os.path.join(gt, "answer.json"), "w") as f:
        f.write(json.dumps(task.get("answer")))
    with open(os.path.join(gt, "evaluation.py"), "w") as f:
        f.write(f"# Canary String: {CANARY_STRING}\n" + task["evaluation"].strip() + "\n")
    _write_json(os.path.join(gt, "test_data.json"), None)


def _build_tasks_in_parallel(tasks, full, all_apps, base):
    """Build the tasks in up to 4 forked processes (each its own in-memory databases; every task is written to its
    own folder, so the result is the same as one process building them in order)."""
    workers = max(1, min(4, len(os.sched_getaffinity(0)), len(tasks)))
    pids = []
    for w in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                for task in tasks[w::workers]:
                    _build_task(task, full, all_apps, base)
                    # one short write per task: whole lines in the parent's pipe, whichever worker writes
                    os.write(1, (json.dumps({"built": task["task_id"]}) + "\n").encode())
            except BaseException:  # noqa: BLE001 - reported by the exit code; the traceback is on stderr
                import traceback

                traceback.print_exc()
                code = 1
            os._exit(code)
        pids.append(pid)
    failed = [pid for pid in pids if os.waitpid(pid, 0)[1] != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} of {workers} build processes failed (see above)")


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)


def main(argv):
    spec_path, out_dir = argv[1], argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    tmp = out_dir + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    full = os.path.join(tmp, "full")
    os.makedirs(os.path.join(full, "data"), exist_ok=True)
    os.environ["APPWORLD_ROOT"] = full
    from appworld.apps import get_all_apps
    from appworld.collections.api_docs import ApiDocCollection
    from appworld.common.constants import CANARY_STRING

    all_apps = get_all_apps()
    api_docs = {app: dict(docs) for app, docs in ApiDocCollection.build(include_response_schemas=True).items()
                if app != "admin"}
    doc_dir = os.path.join(full, "data", "api_docs", "standard")
    os.makedirs(doc_dir, exist_ok=True)
    for app, docs in api_docs.items():
        _write_json(os.path.join(doc_dir, app + ".json"),
                    {k: dict(v, canary_string=CANARY_STRING) for k, v in docs.items()})
    base = _build_base(full, all_apps, api_docs)
    sys.stdout.write(json.dumps({"progress": "base"}) + "\n")
    sys.stdout.flush()  # before the fork: the workers must not inherit it unwritten
    _build_tasks_in_parallel(spec["tasks"], full, all_apps, base)
    ds = os.path.join(full, "data", "datasets")
    os.makedirs(ds, exist_ok=True)
    for split, ids in spec["splits"].items():
        with open(os.path.join(ds, split + ".txt"), "w") as f:
            f.write("\n".join(ids) + "\n")

    # The workers' tree: everything but ground truth, as copies.
    world = os.path.join(tmp, "world", "data")
    shutil.copytree(os.path.join(full, "data", "api_docs"), os.path.join(world, "api_docs"))
    shutil.copytree(base, os.path.join(world, "base_dbs"))
    for task in spec["tasks"]:
        src = os.path.join(full, "data", "tasks", task["task_id"])
        dst = os.path.join(world, "tasks", task["task_id"])
        os.makedirs(dst)
        shutil.copy(os.path.join(src, "specs.json"), dst)
        shutil.copytree(os.path.join(src, "dbs"), os.path.join(dst, "dbs"))
    manifest = {}
    for dirpath, _, files in os.walk(tmp):
        for name in files:
            p = os.path.join(dirpath, name)
            os.chmod(p, 0o444)
            manifest[os.path.relpath(p, tmp)] = _sha256(p)
    _write_json(os.path.join(tmp, "manifest.json"), dict(sorted(manifest.items())))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    sys.stdout.write(json.dumps({"ok": True, "tasks": len(spec["tasks"])}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
