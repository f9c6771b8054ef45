"""ALFWorld-v0 under its default rules ("canonical") plays exactly like alfworld 0.4.2's ``AlfredTWEnv``.

``AlfredTWEnv`` runs unmodified in its own process (``alfworld_canonical.py``: it must not import agentgym, whose
engine memoises two TextWorld functions in-process), built from alfworld's ``configs/base_config.yaml`` (staged in
the shared data) over games in ALFWorld's layout under ``$ALFWORLD_DATA/json_2.1.1/train``. The games are the
``generated`` split's first 12 (two per family, the split agentgym plays by default), copied into that layout.
``alfworld_lockstep.py`` has the driver, the command mutations and the comparison; see its docstring.

Sized for CI (2 cores): three chunks of 4 games x 10 episodes (each game two or three times, in the canonical env's
own shuffled order), about 1,100 lockstep steps in all, each chunk its own test so the per-test timeout has room on a
loaded machine. Larger runs on fresh games and seeds: ``python tests/conformance/alfworld_lockstep.py --games 36
--game-seed 9001 --episodes 72 --seed 9001`` (see the ALFWorld README for the figures of the last ones).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("alfworld", reason="pip install -e '.[alfworld]'")
pytest.importorskip("textworld", reason="pip install -e '.[alfworld]'")
pytest.importorskip("fast_downward", reason="pip install -e '.[alfworld]'")
pytest.importorskip("yaml", reason="the canonical side reads alfworld's YAML config: pip install pyyaml")

if str(Path(__file__).resolve().parent) not in sys.path:  # the driver sits beside this file (whatever import mode)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from alfworld_lockstep import run_lockstep, stage_games  # noqa: E402

from agentgym.envs.alfworld.games import generated_game  # noqa: E402
from agentgym.envs.alfworld.scenes import FAMILIES, FAMILY_SHORT  # noqa: E402

CHUNKS = 3
GAMES_PER_CHUNK = 4  # game ids gen-(4k) .. gen-(4k+3): families FAMILIES[i % 6], each family twice over the chunks
EPISODES_PER_CHUNK = 10
#: Mutation kinds every chunk must have played (the rarest kinds are checked over the whole run by hand).
MUST_COVER = {"expert", "admissible", "case", "double_space", "tab", "unicode_space", "period",
              "surrounding_space", "older_wording", "not_admissible"}


@pytest.fixture(scope="module")
def config(shared_data):
    path = shared_data / "alfworld" / "base_config.yaml"
    if not path.is_file():
        pytest.skip(f"alfworld's base_config.yaml is not staged at {path}")
    return path


@pytest.mark.timeout(900)
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_lockstep_with_alfredtwenv_on_mutated_commands(chunk, config, tmp_path):
    games = [generated_game(i).gamefile for i in range(chunk * GAMES_PER_CHUNK, (chunk + 1) * GAMES_PER_CHUNK)]
    stage_games(games, tmp_path, split="train")
    report = run_lockstep(tmp_path, config, episodes=EPISODES_PER_CHUNK, seed=chunk)
    print(report.summary())
    assert not report.canonical_errors, report.canonical_errors[:3]
    assert not report.mismatches, json.dumps(report.mismatches[:3], indent=1)[:6000]
    # The run did what it is meant to: every game, both ends of an episode, off-script commands of every kind.
    assert report.episodes == EPISODES_PER_CHUNK and len(report.games) == GAMES_PER_CHUNK
    assert set(report.families) == {FAMILY_SHORT[FAMILIES[i % 6]] for i in range(chunk * 4, chunk * 4 + 4)}
    assert report.steps >= 250 and report.not_run >= 0.2 * report.steps
    assert report.wins >= 1 and report.truncations >= 1
    assert MUST_COVER <= set(report.kinds), MUST_COVER - set(report.kinds)
    assert report.kinds["empty_command"] + report.kinds["blank_command"] + report.kinds["empty_tag"] + \
        report.kinds["no_tag"] >= 1
