"""The learning lab's bookkeeping (``benchmarks/learning.py``, issue 32): task sets chosen by goal item with held-out
goals the training never asks for, caches that rebuild what other settings or other code made, and reports written
only by the profile they describe."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from agentgym.provenance import artefact_key, directory_digest, read_key, stale_reason, write_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab():
    spec = importlib.util.spec_from_file_location("learning_lab", ROOT / "benchmarks" / "learning.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["learning_lab"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("learning_lab", None)


def _goals(split: str, ids) -> list[str]:
    import agentgym

    env = agentgym.make("TextCraft-v0", split=split)
    return [",".join(sorted(env.get_task(t).targets)) for t in ids]


@pytest.mark.timeout(300)
def test_task_sets_hold_out_goal_items_the_training_never_asks_for(lab):
    for name in ("textcraft-d1", "textcraft-d12", "textcraft-broad"):
        spec = lab.ENV_SPECS[name]()
        train, held = spec.tasks()
        goals_train = _goals("gen-depth1", [t for t in train if t.startswith("gen-d1-")]) + \
            _goals("gen-depth2", [t for t in train if t.startswith("gen-d2-")])
        goals_held = _goals("gen-depth1", [t for t in held if t.startswith("gen-d1-")]) + \
            _goals("gen-depth2", [t for t in held if t.startswith("gen-d2-")])
        assert len(set(goals_train)) == len(train) and len(set(goals_held)) == len(held), name  # one task a goal
        assert not set(goals_train) & set(goals_held), name
    train, held = lab.ENV_SPECS["textcraft-broad"]().tasks()
    assert len(held) == 50 and len(train) + len(held) == len(lab.goal_tasks("gen-depth1", max_actions=4))
    assert len(train) >= 97
    # the CI direction test's tasks (test_learning_direction.TASKS): 8 distinct goals that fit its 3 turns
    direction = [f"gen-d1-{i}" for i in range(8)]
    fits = {tid for _goal, tid, n in lab.goal_tasks("gen-depth1", max_actions=3)}
    assert len(set(_goals("gen-depth1", direction))) == 8 and set(direction) <= fits


def test_only_the_full_profile_writes_the_tracked_results_file(lab, tmp_path):
    tracked = ROOT / "benchmarks" / "RESULTS_learning.md"
    assert lab.default_results("full", tmp_path) == tracked
    for name in lab.PROFILES:
        if name != "full":
            assert lab.default_results(name, tmp_path / name) == tmp_path / name / "RESULTS.md"


def test_a_stale_artefact_is_rebuilt_never_reused(lab, tmp_path):
    key = lab._key({"what": "x", "n": 1})
    d = tmp_path / "artefact"
    d.mkdir()
    write_key(d / "key.json", key)
    assert lab._fresh(d, key, "x") and d.is_dir()
    assert not lab._fresh(d, lab._key({"what": "x", "n": 2}), "x") and not d.exists()  # other settings: deleted
    f = tmp_path / "run.json"
    f.write_text(json.dumps({"key": key}))
    other_code = json.loads(json.dumps(key))
    other_code["code"]["source_sha256"] = "0" * 64
    assert "code.source_sha256" in stale_reason(other_code, key)
    assert not lab._fresh(f, other_code, "x") and not f.exists()  # made by other code: deleted
    f.write_text(json.dumps({"no": "key"}))
    assert not lab._fresh(f, key, "x")  # no key: made by older code or by hand


def test_provenance_keys_name_the_version_and_the_source(tmp_path):
    k = artefact_key({"b": 2, "a": [1]})
    assert k["config"] == {"a": [1], "b": 2}
    assert k["code"]["package"] == "agentgym-kit" and len(k["code"]["source_sha256"]) == 64
    extra = tmp_path / "script.py"
    extra.write_text("x = 1\n")
    assert artefact_key({}, extra_files=[extra])["code"]["source_sha256"] != artefact_key({})["code"]["source_sha256"]
    write_key(tmp_path / "k.json", k)
    assert stale_reason(read_key(tmp_path / "k.json"), k) is None
    assert stale_reason(None, k).startswith("no key")
    a = tmp_path / "m1"
    a.mkdir()
    (a / "w.bin").write_bytes(b"123")
    before = directory_digest(a)
    (a / "w.bin").write_bytes(b"124")
    assert directory_digest(a) != before


def test_agentgym_train_refuses_a_stale_warm_start(tmp_path):
    pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]'")
    from adapters.train import SettingsError, TrainSettings, run_warm_start, warm_start_key

    from adapters.tiny import build_tiny_model, build_tokenizer, env_vocabulary

    tasks = ["gen-d1-0"]
    tok = build_tokenizer(env_vocabulary("TextCraft-v0", 0, env_kwargs={"split": "gen-depth1"}, task_ids=tasks))
    tiny = tmp_path / "tiny"
    build_tiny_model(tok, hidden_size=16, seed=0).save_pretrained(tiny)
    tok.save_pretrained(tiny)
    s = TrainSettings(env="TextCraft-v0", model=str(tiny), split="gen-depth1", task_ids=tasks, max_turns=3,
                      max_new_tokens=8, max_completion_tokens=64, cpu=True, output_dir=str(tmp_path / "run"),
                      eval_samples=1, warm_start=True, steps=0, warm_start_max_epochs=1, context_first="observation")
    path = run_warm_start(s)
    key = read_key(Path(path) / "warm_start_key.json")
    assert key == json.loads(json.dumps(warm_start_key(s), sort_keys=True))
    assert run_warm_start(s) == path  # the same settings and code: reused
    with pytest.raises(SettingsError, match="other settings or code.*warm_start.max_epochs"):
        run_warm_start(TrainSettings(**{**s.__dict__, "warm_start_max_epochs": 2}))
    # another starting model (same path, other weights) is another warm start too
    build_tiny_model(tok, hidden_size=16, seed=1).save_pretrained(tiny)
    with pytest.raises(SettingsError, match="model_digest"):
        run_warm_start(s)
