"""``agentgym train`` (adapters.train): flags and config-file form, per-step estimator diagnostics in
metrics.jsonl, checkpoints and resume, on CPU with a tiny random model written by ``--save-tiny-model``."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl", reason="agentgym train needs the 'trl' extra: pip install -e '.[trl]'")

from adapters.train import TrainSettings, main, parse_settings  # noqa: E402
from agentgym import cli  # noqa: E402


def test_adapters_train_settings_precedence(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('env = "WikiSearch-v0"\nestimator = "gigpo"\ngroup_size = 8\nsteps = 5\n'
                   'estimator_config = {gamma = 0.9}\nenv_kwargs = {split = "demo"}\n')
    s = parse_settings(["--config", str(cfg), "--steps", "7", "--set", "step_advantage_w=0.5", "--cpu"])
    assert isinstance(s, TrainSettings)
    assert (s.env, s.estimator, s.group_size, s.steps, s.cpu) == ("WikiSearch-v0", "gigpo", 8, 7, True)
    assert s.estimator_config == {"gamma": 0.9, "step_advantage_w": 0.5}
    assert s.env_kwargs == {"split": "demo"}
    js = tmp_path / "run.json"
    js.write_text(json.dumps({"estimator": "bipace", "resume": None}))
    assert parse_settings(["--config", str(js)]).estimator == "bipace"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"estimater": "grpo"}))
    assert main(["--config", str(bad)]) == 2  # unknown key: a clear error, not a crash


def test_adapters_train_cli_checkpoint_resume(tmp_path):
    model_dir, out = tmp_path / "tiny", tmp_path / "run"
    assert cli.main(["train", "--save-tiny-model", str(model_dir), "--env", "TextCraft-v0"]) == 0
    assert (model_dir / "config.json").is_file() and (model_dir / "tokenizer.json").is_file()
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'env = "TextCraft-v0"\nestimator = "bipace"\nmodel = "{model_dir}"\noutput_dir = "{out}"\n'
                   'group_size = 2\nbatch_groups = 2\nmax_turns = 2\nmax_new_tokens = 6\n'
                   'max_completion_tokens = 48\nmax_prompt_tokens = 48\nsave_steps = 1\nlearning_rate = 1e-3\n'
                   'cpu = true\nn_tasks = 4\n')
    assert cli.main(["train", "--config", str(cfg), "--steps", "2"]) == 0
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in recs if "agentgym/adv_std" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # the estimator's diagnostics next to reward and success
        for key in ("reward", "agentgym/success", "agentgym/singleton_record_frac", "agentgym/frac_rows_pace",
                    "agentgym/mean_cluster_size"):
            assert key in r
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()
    # resume: one more step from checkpoint-2, not a restart
    assert main(["--config", str(cfg), "--steps", "3", "--resume"]) == 0
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "agentgym/adv_std" in r] == [1, 2, 3]
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    assert json.loads((out / "agentgym_train.json").read_text())["estimator"] == "bipace"


def test_a_split_smaller_than_n_tasks_is_refused_not_shortened():
    """``--n-tasks`` larger than the split: a clear error, never a run on fewer tasks than asked for."""
    from adapters.train import SettingsError, TrainSettings, training_tasks
    from adapters.trl import make_task_dataset

    assert len(make_task_dataset("TextCraft-v0", 3, env_kwargs={"split": "val"})) == 3
    with pytest.raises(ValueError, match="fewer than the 100000 asked for"):
        make_task_dataset("TextCraft-v0", 100_000, env_kwargs={"split": "val"})
    with pytest.raises(SettingsError, match="fewer than the 100000 asked for"):
        training_tasks(TrainSettings(env="TextCraft-v0", split="val", n_tasks=100_000))


def test_adapters_train_pvpo_v_table_file_and_loss_flags(tmp_path):
    """PVPO's static value table from a JSON file ``{task_id: V}`` (``--set v_table=...``); the loss is the
    estimator's recipe unless the TRL-style flags override it."""
    from adapters.trl import make_task_dataset
    from estimators.pvpo import StaticValueTable

    model_dir, out = tmp_path / "tiny", tmp_path / "run"
    assert cli.main(["train", "--save-tiny-model", str(model_dir), "--env", "TextCraft-v0"]) == 0
    tasks = list(make_task_dataset("TextCraft-v0", 2)["task_id"])
    vt = tmp_path / "v.json"
    vt.write_text(json.dumps({t: 0.25 * (i + 1) for i, t in enumerate(tasks)}))
    common = ["--env", "TextCraft-v0", "--model", str(model_dir), "--output-dir", str(out), "--group-size", "2",
              "--batch-groups", "2", "--max-turns", "2", "--max-new-tokens", "6", "--max-completion-tokens", "32",
              "--max-prompt-tokens", "48", "--cpu", "--save-steps", "10", "--n-tasks", "2"]
    assert main(common + ["--estimator", "pvpo", "--set", f"v_table={vt}", "--steps", "1"]) == 0
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "agentgym/adv_std" in r] == [1]
    # the trainer built from the same settings: the table, and PVPO's recipe (token-mean, KL 0.001: a reference model)
    from adapters.train import build_trainer

    s = parse_settings(common + ["--estimator", "pvpo", "--set", f"v_table={vt}", "--steps", "1"])
    trainer = build_trainer(s)
    table = trainer.ag.estimator_config["v_table"]
    assert isinstance(table, StaticValueTable) and table.values == {t: 0.25 * (i + 1) for i, t in enumerate(tasks)}
    assert (trainer.loss_type, trainer.beta, trainer.args.delta) == ("dapo", 0.001, 3.0)
    assert trainer.ref_model is not None
    # the flags override the recipe's aggregation, clip bound and KL
    s = parse_settings(common + ["--estimator", "grpo", "--loss-type", "dr_grpo", "--epsilon-high", "0.3",
                                 "--beta", "0", "--steps", "1"])
    trainer = build_trainer(s)
    r = trainer.ag_loss_plan.recipe
    assert (r.agg, r.clip_low, r.clip_high, r.kl_coef) == ("seq-mean-token-sum-norm", 0.2, 0.3, 0.0)
    assert (trainer.loss_type, trainer.epsilon_high, trainer.beta, trainer.ref_model) == ("dr_grpo", 0.3, 0.0, None)
    # unusable settings: a clear error and exit code 2, before any training
    vt.write_text(json.dumps({tasks[0]: 0.5}))
    assert main(common + ["--estimator", "pvpo", "--set", f"v_table={vt}", "--steps", "1"]) == 2
    vt.write_text("{not json")
    assert main(common + ["--estimator", "pvpo", "--set", f"v_table={vt}", "--steps", "1"]) == 2
    assert main(common + ["--estimator", "grpo", "--loss-type", "cispo", "--steps", "1"]) == 2
