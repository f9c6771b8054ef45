"""TRL 1.16 ``environment_factory`` (adapters.trl_env) and the SFT export in TRL.

* Every env's class exposes exactly its chat form's tools, and transformers renders each method into the schema the
  SFT export writes (same JSON text).
* Oracle episodes played through the tool methods give the same observations and rewards as in-process play.
* The whole path on a tiny model built here (byte-level BPE, TRL's own ``qwen3.jinja`` template, no downloads):
  ``agentgym eval`` (oracle, transcripts) -> ``agentgym export-sft --form tools`` -> TRL ``SFTTrainer`` (the model
  learns to emit real tool calls) -> TRL ``GRPOTrainer(environment_factory=...)`` for two steps, TRL's own
  tool-calling loop; every rollout is replayed in-process to the same rewards, and TRL's logged reward is
  ``get_reward``. The text-form and per-turn exports train in ``SFTTrainer`` too.
"""

from __future__ import annotations

import copy
import inspect
import json
import os

import pytest

pytest.importorskip("trl", reason="the TRL bridge needs the 'trl' extra: pip install -e '.[trl]'")
torch = pytest.importorskip("torch")

import agentgym  # noqa: E402
from adapters.tiny import build_chat_tokenizer, build_tiny_model  # noqa: E402
from adapters.trl_env import ENDED_NOTE, environment_factory, make_tool_dataset  # noqa: E402
from agentgym.chat import chat_form  # noqa: E402
from agentgym.eval.export import ExportConfig, export_sft  # noqa: E402
from agentgym.eval.grid import EvalGrid, run_grid  # noqa: E402
from agentgym.registration import env_ids, get_entry  # noqa: E402
from agentgym.rollout.policy import OraclePolicy  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402

@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The tiny model gains nothing from a second thread, and on a busy machine two threads spin against other
    processes (several times slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("env_id", env_ids())
def test_tools_are_the_chat_form_and_render_to_the_exported_schema(env_id):
    cls = environment_factory(env_id)
    form = chat_form(env_id)
    # TRL's own rule for what becomes a tool: public functions of the class other than reset / get_reward
    tools = [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]
    assert sorted(tools) == sorted(form.tool_names)
    for name in form.tool_names:
        assert json.dumps(get_json_schema(getattr(cls, name))) == json.dumps(form.tool(name).schema())
    assert (env_id == "TauAirline-v0") == form.native


#: env -> (split, tasks played); AppWorld's sandboxed oracle is exercised by its own tests, its tool form here by the
#: schema test (act with tag code).
ORACLE_SPLITS = {"TextCraft-v0": ("gen-depth1", 2), "TauAirline-v0": ("test", 2), "WikiSearch-v0": ("demo", 2),
                 "WebShop-v0": ("test", 2), "ALFWorld-v0": ("generated", 1)}


@pytest.mark.parametrize("env_id", sorted(ORACLE_SPLITS))
def test_oracle_play_through_the_tools_equals_in_process_play(env_id):
    split, n_tasks = ORACLE_SPLITS[env_id]
    ok, why = get_entry(env_id).split_available(split)
    if not ok:
        pytest.skip(f"{env_id} {split} is not available here: {why}")
    ref = agentgym.make(env_id, split=split)
    tool_env = environment_factory(env_id, split=split)()
    form = chat_form(env_id)
    for task_id in ref.task_ids(n_tasks)[:n_tasks]:
        ref.reset(seed=3, options={"task_id": task_id})
        assert tool_env.reset(task_id=task_id, seed=3, prompt=[]) == ref.prompt()
        total, done = 0.0, False
        while not done:
            obs, rew, term, trunc, info = ref.step(ref.oracle_action())
            call = form.tool_call(info)["function"]
            assert getattr(tool_env, call["name"])(**call["arguments"]) == obs
            total, done = total + rew, term or trunc
            assert tool_env.get_reward() == total and tool_env.done == done
        assert info["won"]
        assert tool_env.steps[-1]["info"]["obs_hash"] == info["obs_hash"]
        name = form.tool_names[0]
        args = {p.name: "x" for p in form.tool(name).params if p.required}
        assert getattr(tool_env, name)(**args) == ENDED_NOTE  # a call after the end does not step the env


# ------------------------------------------------------------------------- export -> SFT -> GRPO
#: env -> (split, eval grid, completion budget, SFT steps): TextCraft through its act tool, τ through its own tools
#: (τ's first two test tasks have the shortest oracle conversations: a look-up, then the answer to the user).
PIPELINES = {"TextCraft-v0": ("gen-depth1", {"episodes": 4, "seeds": (0, 1), "max_turns": 6}, 160, 80),
             "TauAirline-v0": ("test", {"first": 2, "max_turns": 8}, 192, 60)}


def _sft_config(out_dir, steps, **kw):
    from trl import SFTConfig

    return SFTConfig(output_dir=str(out_dir), max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-2,
                     lr_scheduler_type="constant", use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                     logging_steps=10, gradient_checkpointing=False, max_length=2048, disable_tqdm=True, seed=0, **kw)


def _messages(row):  # the keys datasets filled with None where other rows have them
    return [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]


@pytest.fixture(scope="module", params=sorted(PIPELINES))
def exported(request, tmp_path_factory):
    env_id = request.param
    split, grid, _, _ = PIPELINES[env_id]
    ok, why = get_entry(env_id).split_available(split)
    if not ok:
        pytest.skip(f"{env_id} {split} is not available here: {why}")
    d = tmp_path_factory.mktemp("sft")
    run_grid(EvalGrid(env_id=env_id, split=split, **grid), OraclePolicy(), d / "oracle.jsonl")
    files = {"env_id": env_id}
    for name, cfg in (("tools", ExportConfig(form="tools", success="won")), ("text", ExportConfig(form="text")),
                      ("turns", ExportConfig(per_turn=True))):
        files[name] = d / f"{name}.jsonl"
        assert export_sft(d / "oracle.jsonl", files[name], cfg).rows > 0
    return files


@pytest.fixture(scope="module")
def tuned(exported, tmp_path_factory):
    """The tiny model after SFT on the tool-form export of the env's oracle trajectories."""
    from datasets import load_dataset
    from trl import SFTTrainer

    ds = load_dataset("json", data_files=str(exported["tools"]), split="train")
    convs = [(_messages(r), json.loads(r["tools"])) for r in ds]
    text = load_dataset("json", data_files=str(exported["text"]), split="train")
    tok = build_chat_tokenizer([m["content"] for r in text for m in _messages(r)], conversations=convs)
    model = build_tiny_model(tok, hidden_size=64, seed=0)
    steps = PIPELINES[exported["env_id"]][3]
    trainer = SFTTrainer(model=model, args=_sft_config(tmp_path_factory.mktemp("sft-out"), steps,
                                                       assistant_only_loss=True),
                         train_dataset=ds, processing_class=tok)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses[-1] < 0.5 * losses[0], losses
    return trainer.model, tok


@pytest.mark.parametrize("exported", ["TextCraft-v0"], indirect=True)  # same formats for every env; short ones
def test_text_and_per_turn_exports_train_in_sft_trainer(exported, tuned, tmp_path):
    from datasets import load_dataset
    from trl import SFTTrainer

    model, tok = copy.deepcopy(tuned[0]), tuned[1]  # the GRPO test starts from the tool-calling model
    for name in ("text", "turns"):
        ds = load_dataset("json", data_files=str(exported[name]), split="train")
        assert ("completion" in ds.column_names) == (name == "turns")
        trainer = SFTTrainer(model=model, args=_sft_config(tmp_path / name, 2), train_dataset=ds,
                             processing_class=tok)
        trainer.train()
        assert all(torch.isfinite(torch.tensor(h["train_loss"])) for h in trainer.state.log_history
                   if "train_loss" in h)


def test_grpo_with_environment_factory_plays_the_real_env(exported, tuned, tmp_path):
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    env_id = exported["env_id"]
    split, grid, budget, _ = PIPELINES[env_id]
    model, tok = tuned
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    env_cls = environment_factory(env_id, split=split, max_turns=grid["max_turns"])
    form = chat_form(env_id)
    task_ids = sorted(set(load_dataset("json", data_files=str(exported["tools"]), split="train")["task_id"]))
    dataset = make_tool_dataset(env_id, task_ids=task_ids[:2], env_kwargs={"split": split})
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_steps=2,
                      use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1,
                      gradient_checkpointing=False, max_completion_length=budget, learning_rate=1e-4, beta=0.0,
                      seed=0, disable_tqdm=True, max_tool_calling_iterations=grid["max_turns"], temperature=1.0)
    trainer = GRPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok,
                          environment_factory=env_cls)
    trainer.train()
    key = f"rewards/{env_cls.__name__}/mean"
    logs = [h for h in trainer.state.log_history if key in h]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert sum(h["tools/call_frequency"] for h in logs) > 0  # the SFT'd model called the env's tools
    envs = trainer.environments
    assert len(envs) == 8 and any(e.steps for e in envs)
    assert {s["tool"] for e in envs for s in e.steps} <= set(form.tool_names)
    # the last step's rollouts (the pooled instances keep them), replayed in-process
    for e in envs:
        ref = agentgym.make(env_id, split=split, max_turns=grid["max_turns"])
        ref.reset(seed=e.seed, options={"task_id": e.task_id})
        total = 0.0
        for s in e.steps:
            assert s["action_text"] == form.action_text(s["tool"], s["arguments"])
            obs, rew, term, trunc, info = ref.step(s["action_text"])
            assert (obs, rew, term, trunc, info["obs_hash"]) == \
                (s["observation"], s["reward"], s["terminated"], s["truncated"], s["info"]["obs_hash"])
            total += rew
        assert e.get_reward() == total
    mean = sum(e.get_reward() for e in envs) / len(envs)
    assert logs[-1][key] == pytest.approx(mean)


@pytest.mark.parametrize("exported", ["TextCraft-v0"], indirect=True)  # one env is enough for the command line
def test_command_line_trains_a_saved_model(exported, tuned, tmp_path):
    from adapters.trl_env import main

    model, tok = tuned
    copy.deepcopy(model).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    assert main(["TextCraft-v0", "--split", "gen-depth1", "--model", str(tmp_path / "model"), "--tasks", "1",
                 "--max-turns", "4", "--group-size", "2", "--steps", "1", "--max-completion-length", "96",
                 "--learning-rate", "1e-4", "--cpu", "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "config.json").exists()
