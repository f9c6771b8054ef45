"""ALFWorld-v0 on the real engine: oracle/random policies over the generated split, loading, errors, hashing.

The generated games are built once (expert-verified) and cached in the user cache dir (``$AGENTGYM_CACHE``), the
same cache the contract suite uses, so the 60-game oracle run pays for generation only on a cold cache.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("alfworld", reason="pip install -e '.[alfworld]'")
pytest.importorskip("textworld", reason="pip install -e '.[alfworld]'")
pytest.importorskip("fast_downward", reason="pip install -e '.[alfworld]'")

import agentgym  # noqa: E402
from agentgym.envs.alfworld.env import ALFWorldEnv  # noqa: E402
from agentgym.envs.alfworld.games import generated_game  # noqa: E402
from agentgym.envs.alfworld.cli import main as generate_main  # noqa: E402
from agentgym.envs.alfworld.generate import generate_game, write_game  # noqa: E402
from agentgym.envs.alfworld.scenes import FAMILIES  # noqa: E402
from agentgym.errors import DataNotFoundError, TaskError  # noqa: E402

N_GAMES = 60  # 10 per family (game i has family FAMILIES[i % 6])


def play(env, policy, options, seed=0):
    obs, info = env.reset(seed=seed, options=options)
    while True:
        obs, r, term, trunc, info = env.step(policy())
        if term or trunc:
            return info, r, term


@pytest.fixture(scope="module")
def env():
    return agentgym.make("ALFWorld-v0")


_ORACLE: dict[str, tuple] = {}


@pytest.mark.parametrize("family", FAMILIES)
def test_oracle_wins_every_generated_game(env, family):
    """10 games per family (ids gen-i, i < 60, i % 6 = the family's index); each test stays under the timeout."""
    k = FAMILIES.index(family)
    tids = [f"gen-{i}" for i in range(k, N_GAMES, 6)]
    assert len(tids) == N_GAMES // 6
    for tid in tids:
        info, r, term = play(env, env.oracle_action, {"task_id": tid})
        _ORACLE[tid] = (info["task_type"], info["won"], r, term, info["turn"])
        assert info["task_type"] == family
        assert info["won"] and r == 1.0 and term, f"the oracle lost {tid} after {info['turn']} turns"


def test_cli_eval_oracle_reports_100_percent_per_family_in_the_papers_order(tmp_path):
    """The issue's acceptance command: ``agentgym eval ALFWorld-v0 --split generated --policy oracle`` over the 60
    cached games, in two worker processes, under the default (canonical) rules; the table has the papers' rows
    (Pick, Look, Clean, Heat, Cool, Pick2)."""
    import subprocess
    import sys

    out = tmp_path / "alfworld_oracle.jsonl"
    res = subprocess.run([sys.executable, "-m", "agentgym.cli", "eval", "ALFWorld-v0", "--split", "generated",
                          "--policy", "oracle", "--workers", "2", "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.splitlines()[0] == "rules: canonical · prompt_style: bipace"  # the defaults, above the table
    rows = [line.split("|")[1:4] for line in res.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    table = {fam.strip(): (int(eps), int(wins)) for fam, eps, wins in rows[1:]}
    assert list(table) == ["Pick", "Look", "Clean", "Heat", "Cool", "Pick2", "All"]
    assert all(eps == wins == 10 for fam, (eps, wins) in table.items() if fam != "All")
    assert table["All"] == (60, 60)


def test_random_policy_wins_far_less(env):
    rng = np.random.default_rng(0)
    wins = Counter()
    tids = env.task_ids(12)  # two games per family
    for tid in tids:
        info, _, _ = play(env, lambda: env.random_action(rng), {"task_id": tid})
        wins[info["task_type"]] += info["won"]
    # The oracle wins all 12; uniform admissible commands win at most one in 50 steps (measured: 0 of these 12, the
    # same under any PYTHONHASHSEED; 1 of the 60 games in the README's run).
    assert sum(wins.values()) <= 1, wins


def _signature(gamefile: str) -> tuple:
    traj = json.loads((Path(gamefile).parent / "traj_data.json").read_text())
    p = traj["pddl_params"]
    poses = sorted((o["objectName"], o["parentReceptacle"]) for o in traj["scene"]["object_poses"])
    return (traj["task_type"], p["object_target"], p["parent_target"], p["toggle_target"], traj["scene"]["room"],
            tuple(sorted(traj["scene"]["receptacles"].items())), tuple(poses))


def test_generated_games_are_distinct_and_verified():
    games = [generated_game(i) for i in range(N_GAMES)]
    sigs = {_signature(g.gamefile) for g in games}
    assert len(sigs) == N_GAMES, "two generated games pose the same problem"
    data = json.loads(Path(games[0].gamefile).read_text())
    assert data["solvable"] is True and data["walkthrough"] and set(data) >= {"pddl_domain", "grammar", "pddl_problem"}


def test_generation_is_deterministic_per_seed(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert generate_main(["generate", "--out", str(a), "--n", "2", "--seed", "7", "--start", "5"]) == 0
    write_game(b / "generated", generate_game(7, 5))
    write_game(b / "generated", generate_game(7, 6))
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b and len(files_a) == 4
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes()
    game5 = next(a / rel for rel in files_a if rel.name == "game.tw-pddl" and "-5" in str(rel.parent.parent))
    assert generate_game(8, 5).gamedata["pddl_problem"] != json.loads(game5.read_text())["pddl_problem"]


def test_documented_generate_command_runs(tmp_path):
    """``agentgym alfworld generate --out DIR --n N`` exactly as both READMEs write it (it used to exit 2 with
    ``unrecognized arguments: generate``), through the installed console script; the games land in ALFWorld's
    layout and alfworld's own game filter (AlfredTWEnv.collect_game_files) would keep them."""
    import shutil as _shutil
    import subprocess
    import sys

    exe = _shutil.which("agentgym") or str(Path(sys.executable).with_name("agentgym"))
    res = subprocess.run([exe, "alfworld", "generate", "--out", str(tmp_path), "--n", "1"], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"wrote 1 games under {tmp_path / 'generated'}" in res.stdout
    (game,) = tmp_path.glob("generated/*/trial_*/game.tw-pddl")
    data = json.loads(game.read_text())
    traj = json.loads((game.parent / "traj_data.json").read_text())
    assert data["solvable"] is True and traj["task_type"] == FAMILIES[0] == game.parent.parent.name.split("-")[0]
    bad = subprocess.run([exe, "alfworld", "generate", "--out", str(tmp_path), "--n", "-1"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "--n must be >= 0" in bad.stderr


def test_empty_official_data_fails_at_once(tmp_path, monkeypatch):
    """No games: the error lists every folder looked in ($ALFWORLD_DATA, $AGENTGYM_DATA when set, each shared data
    folder) and says how to get the games."""
    from agentgym.data import shared_data_dirs

    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "alf"))
    monkeypatch.delenv("AGENTGYM_DATA", raising=False)
    with pytest.raises(DataNotFoundError) as e:
        ALFWorldEnv(split="valid_seen")
    msg = str(e.value)
    assert str(tmp_path / "alf" / "json_2.1.1" / "valid_seen") in msg and "alfworld-download" in msg
    assert "$AGENTGYM_DATA unset" in msg
    for root in shared_data_dirs():
        assert str(root / "alfworld" / "json_2.1.1" / "valid_seen") in msg
    monkeypatch.setenv("AGENTGYM_DATA", str(tmp_path / "ag"))
    (tmp_path / "ag" / "alfworld" / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    with pytest.raises(DataNotFoundError) as e:
        ALFWorldEnv(split="valid_seen")
    assert f"{tmp_path / 'ag' / 'alfworld' / 'json_2.1.1' / 'valid_seen'} ($AGENTGYM_DATA; no games)" in str(e.value)
    ok, why = agentgym.registration.get_entry("ALFWorld-v0").split_available("valid_seen")
    assert not ok and "alfworld-download" in why
    (tmp_path / "json_2.1.1" / "valid_seen" / "empty_task").mkdir(parents=True)
    with pytest.raises(DataNotFoundError, match="alfworld-download"):
        ALFWorldEnv(split="valid_seen", data_path=tmp_path / "json_2.1.1")


def _official_tree(root: Path, env) -> dict[str, list[str]]:
    """Copy generated games into json_2.1.1/<split>/<task>/<trial>/ like the official release."""
    placed = {}
    for split, ids in (("train", range(0, 6)), ("valid_seen", range(6, 12)), ("valid_unseen", range(12, 14))):
        placed[split] = []
        for i in ids:
            g = generated_game(i)
            src = Path(g.gamefile).parent
            dst = root / "json_2.1.1" / split / src.parent.name / src.name
            shutil.copytree(src, dst)
            placed[split].append(f"{split}/{src.parent.name}/{src.name}")
    return placed


def test_official_folder_layout_loads_and_plays(tmp_path, monkeypatch, env):
    placed = _official_tree(tmp_path, env)
    # Games alfworld would skip: unsolvable, no "solvable" key, movable receptacles.
    bad = tmp_path / "json_2.1.1" / "valid_seen"
    src = Path(generated_game(0).gamefile).parent
    for name, edit in (("pick_and_place_simple-X-None-Y-900", False), ("pick_and_place_simple-X-None-Y-901", None),
                       ("pick_and_place_with_movable_recep-X-Bowl-Y-902", True)):
        dst = bad / name / src.name
        shutil.copytree(src, dst)
        data = json.loads((dst / "game.tw-pddl").read_text())
        if edit is None:
            del data["solvable"]
        else:
            data["solvable"] = edit
        (dst / "game.tw-pddl").write_text(json.dumps(data))
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    for split, ids in placed.items():
        e = agentgym.make("ALFWorld-v0", split=split)
        assert e.task_ids() == sorted(ids)
        entry = agentgym.registration.get_entry("ALFWorld-v0")
        assert entry.split_available(split) == (True, "ok")
    e = ALFWorldEnv(split="valid_seen", data_path=tmp_path)  # explicit path: parent of json_2.1.1 also works
    assert e.task_ids() == sorted(placed["valid_seen"])
    info, r, term = play(e, e.oracle_action, {"task_id": placed["valid_seen"][0]})
    assert info["won"] and r == 1.0 and info["task_id"] == placed["valid_seen"][0]
    _, info = e.reset(seed=1)
    assert info["task_id"] in placed["valid_seen"]
    # A game folder given directly.
    obs, info = e.reset(options={"task_id": "file:" + str(Path(generated_game(3).gamefile).parent)})
    assert info["task_type"] == "pick_heat_then_place_in_recep" and info["family"] == "Heat"
    assert "Your task is to:" in obs
    with pytest.raises(TaskError):
        e.reset(options={"task_id": "valid_seen/nope/trial_x"})


def test_staged_alfred_trajectory_fixture_reads_through_the_loader(tmp_path, shared_data):
    """The staged real ALFRED trial (a 3-agent debug variant: format only) is found by family and filtered as
    alfworld does: without "solvable" it is skipped; with it, it is listed under its family."""
    from agentgym.envs.alfworld.games import scan_games

    fixture = shared_data / "alfworld" / "fixtures" / "multiagent_debug_example"
    traj = json.loads((fixture / "traj_data.json").read_text())
    dst = tmp_path / "train" / f"{traj['task_type']}-Potato-None-SinkBasin-14" / traj["task_id"]
    shutil.copytree(fixture, dst)
    with pytest.raises(DataNotFoundError):
        scan_games(tmp_path / "train", "train")
    data = json.loads((dst / "game.tw-pddl").read_text())
    data["solvable"] = True
    (dst / "game.tw-pddl").write_text(json.dumps(data))
    (games,) = scan_games(tmp_path / "train", "train")
    assert games.family == "pick_heat_then_place_in_recep" and games.task_id.endswith(traj["task_id"])


def test_commands_feedback_info_and_hash(env):
    assert env.rules == "canonical" and env.run_identity() == {"rules": "canonical", "prompt_style": "bipace"}
    obs, info = env.reset(options={"task_id": "gen-2"})  # a clean task
    assert info["task_type"] == "pick_clean_then_place_in_recep" and info["family"] == "Clean"
    assert info["progress"] == 0.0
    adm = info["admissible_actions"]
    assert "look" in adm and "help" not in adm and all(isinstance(a, str) for a in adm)
    h0 = info["obs_hash"]
    _, r, _, _, info = env.step("<action>go to nowhere 7</action>")  # well-formed, not admissible
    assert info["action_valid"] and info["action_admissible"] is False and info["process_ok"] is False
    assert env.last_observation == "Nothing happens." and r == 0.0
    h_nothing_start = info["obs_hash"]
    obs, _, _, _, info = env.step("<action>dance wildly</action>")  # not a command at all: ALFWorld's words only
    assert obs == "Nothing happens." and info["action_valid"] is False
    assert info["invalid_reason"] == "'dance wildly' is not an ALFWorld command"
    go = next(a for a in adm if a.startswith("go to "))
    obs, _, _, _, info = env.step(f"<action>  {go}  </action>")  # surrounding spaces: stripped, as ALFWorld does
    assert info["action_admissible"] and info["process_ok"] and info["action"] == go and obs.startswith("You arrive")
    env.step("<action>go to nowhere 7</action>")
    # "Nothing happens." in another state hashes differently; the same state and text hash the same.
    assert env.last_observation == "Nothing happens."
    assert env.step("<action>go to nowhere 8</action>")[4]["obs_hash"] != h_nothing_start
    env.reset(options={"task_id": "gen-2"})
    assert env.step("<action>go to nowhere 9</action>")[4]["obs_hash"] == h_nothing_start != h0


def _issue_variants(go: str) -> list[str]:
    """The off-script spellings issue 15 lists, built from an admissible ``go to <recep> <n>``."""
    return [go.upper(), go.replace(" ", "  ", 1), go + ".", go.replace(" ", "\t", 1),
            go.rsplit(" ", 2)[0] + "\u2003" + " ".join(go.rsplit(" ", 2)[1:]), go.replace(" ", "\u00a0"),
            go.title(), go + " .", "", "   "]


def test_canonical_rules_run_only_exact_admissible_commands(env):
    """ALFWorld's PddlEnv.step strips the command and looks it up exactly: every other spelling is 'Nothing
    happens.', changes nothing, and the observation carries no hint (the did-you-mean is in info)."""
    obs0, info0 = env.reset(options={"task_id": "gen-2"})
    go = next(a for a in info0["admissible_actions"] if a.startswith("go to "))
    for variant in _issue_variants(go):
        obs, r, term, trunc, info = env.step(f"<action>{variant}</action>")
        assert obs == "Nothing happens." and r == 0.0 and not term, variant
        assert info["action_admissible"] is not True and info["process_ok"] is not True, variant
        assert info["admissible_actions"] == info0["admissible_actions"], "a refused command changed the state"
        if variant.strip():
            assert info["action_valid"] and f"did you mean {go!r}?" in info["invalid_reason"], variant
        else:  # an empty <action> tag does not parse: played as the empty command
            assert info["action_valid"] is False and info["invalid_reason"] == "the <action> tag is empty"
    # No <action> tag at all: the empty command too; the parse problem is in info only.
    obs, _, _, _, info = env.step("I would go to the sink basin now.")
    assert obs == "Nothing happens." and info["action_valid"] is False and info["action"] is None
    assert "no well-formed <action>" in info["invalid_reason"]
    assert env.last_observation == "Nothing happens." and env.prompt().count("Nothing happens.") >= 1
    obs, _, _, _, info = env.step(f"<action>{go}</action>")
    assert info["process_ok"] and obs.startswith("You arrive")


def test_lenient_rules_read_case_spaces_periods_and_give_hints():
    lenient = agentgym.make("ALFWorld-v0", rules="lenient")
    assert lenient.run_identity() == {"rules": "lenient", "prompt_style": "bipace"}
    _, info = lenient.reset(options={"task_id": "gen-2"})
    go = next(a for a in info["admissible_actions"] if a.startswith("go to "))
    for variant in _issue_variants(go)[:-2]:
        lenient.reset(options={"task_id": "gen-2"})
        obs, _, _, _, info = lenient.step(f"<action>{variant}</action>")
        assert info["process_ok"] and obs.startswith("You arrive"), variant
    obs, _, _, _, info = lenient.step("<action>dance wildly</action>")
    assert info["action_valid"] is False and obs.startswith("Nothing happens. (Invalid action: ")
    obs, _, _, _, info = lenient.step("no tag here")
    assert obs.startswith("Invalid action: ") and info["action_valid"] is False


def test_rules_option_default_and_errors():
    from agentgym.envs.alfworld.env import SPLITS, default_rules

    assert {s: default_rules(s) for s in SPLITS} == dict.fromkeys(SPLITS, "canonical")
    with pytest.raises(ValueError, match="rules must be one of"):
        agentgym.make("ALFWorld-v0", rules="friendly")
    with pytest.raises(TaskError):
        default_rules("valid_train")


def test_eval_rows_record_the_rules_and_refuse_to_mix_them(tmp_path):
    from agentgym.eval.grid import EvalGrid, run_grid
    from agentgym.eval.results import ResultsMismatchError
    from agentgym.rollout.policy import OraclePolicy

    out = tmp_path / "alf.jsonl"
    rows = run_grid(EvalGrid(env_id="ALFWorld-v0", split="generated", episodes=1), OraclePolicy(), str(out))
    assert len(rows) == 1 and rows[0]["rules"] == "canonical" and rows[0]["won"]
    with pytest.raises(ResultsMismatchError, match="rules: 'canonical' there, 'lenient' now"):
        run_grid(EvalGrid(env_id="ALFWorld-v0", split="generated", episodes=1, env_kwargs={"rules": "lenient"}),
                 OraclePolicy(), str(out))


def test_old_put_wording_and_progress(env):
    lenient = agentgym.make("ALFWorld-v0", rules="lenient")
    for e in (env, lenient):
        e.reset(options={"task_id": "gen-0"})  # pick and place
        walkthrough = e._oracle.walkthrough
        for cmd in walkthrough[:-1]:
            e.step(f"<action>{cmd}</action>")
    last = walkthrough[-1]
    assert last.startswith("move ")
    obj, recep = last[5:].split(" to ")
    # ALFWorld 0.4.2's grammar says "move X to Y"; the older "put X in/on Y" is not a command of it.
    for older in (f"put {obj} in/on {recep}", f"put {obj} in {recep}"):
        obs, r, term, _, info = env.step(f"<action>{older}</action>")
        assert obs == "Nothing happens." and r == 0.0 and not term and f"did you mean {last!r}?" in \
            info["invalid_reason"]
    _, r, term, _, info = env.step(f"<action>{last}</action>")
    assert r == 1.0 and term and info["won"] and info["progress"] == 1.0 and info["score"] == 1.0
    _, r, term, _, info = lenient.step(f"<action>put {obj} in/on {recep}</action>")  # the lenient reading
    assert r == 1.0 and term and info["won"] and info["progress"] == 1.0 and info["score"] == 1.0


def test_oracle_recovers_off_the_walkthrough(env):
    rng = np.random.default_rng(3)
    env.reset(options={"task_id": "gen-6"})
    for _ in range(4):
        env.step(env.random_action(rng))
    for _ in range(40):
        _, r, term, trunc, info = env.step(env.oracle_action())
        if term or trunc:
            break
    assert info["won"], "the planner expert should finish from any state"


def test_prompt_appendix_j_and_react(env):
    env.reset(options={"task_id": "gen-4"})
    p = env.prompt()
    assert p.startswith("You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: ")
    assert "Your admissible actions of the current situation are: ['" in p and "<think> </think>" in p
    env.step(env.oracle_action())
    p2 = env.prompt()
    assert "Prior to this step, you have already taken 1 step(s)." in p2 and "[Observation 1:" in p2


def test_react_few_shot_option(shared_data):
    e = agentgym.make("ALFWorld-v0", react_examples=2)
    e.reset(options={"task_id": "gen-4"})  # cool
    p = e.prompt()
    assert "Here are examples" in p and "cool" in p.split("(End of examples.)")[0]
    shots = p.split("(End of examples.)")[0]
    assert not re.search(r"^>\s*put .+ in/on ", shots, re.M) and "You put the" not in shots  # engine wording
    assert re.search(r"^> move .+ to .+$", shots, re.M)


def test_react_option_without_the_prompt_files_fails_when_built(tmp_path, monkeypatch):
    """ReAct's prompt files are data: where no data root holds them, building the env with react_examples > 0 fails
    at once, saying where it looked and where to get them (the plain prompt needs nothing)."""
    import agentgym.data
    from agentgym.envs.alfworld import prompts

    monkeypatch.delenv("AGENTGYM_DATA", raising=False)
    monkeypatch.setenv("AGENTGYM_SHARED_DATA", str(tmp_path / "empty"))
    monkeypatch.setattr(agentgym.data, "_REPO_ROOT", tmp_path / "repo")  # no ../shared/data beside the checkout
    monkeypatch.chdir(tmp_path)
    prompts._react_file.cache_clear()
    try:
        with pytest.raises(DataNotFoundError, match=r"ysymyth/ReAct.*alfworld/prompts/react_alfworld\.json"):
            agentgym.make("ALFWorld-v0", react_examples=2)
        agentgym.make("ALFWorld-v0")  # react_examples=0 needs no file
    finally:
        prompts._react_file.cache_clear()


def test_bad_options_raise_task_errors(env):
    with pytest.raises(TaskError):  # (the generated split has no end: any index >= 0 is a game, see tests/contract)
        env.reset(options={"task_index": -1})
    with pytest.raises(TaskError):
        env.reset(options={"bogus": 1})
    with pytest.raises(TaskError):
        env.reset(options={"task_id": "file:/nonexistent/game.tw-pddl"})
    with pytest.raises(TaskError):
        agentgym.make("ALFWorld-v0", split="valid_train")
