"""The canonical side of the ALFWorld conformance test: alfworld 0.4.2's ``AlfredTWEnv``, served over a pipe.

Run as a script in its own process (``python alfworld_canonical.py CONFIG.yaml TRAIN_EVAL SEED``), never imported by a
process that has imported agentgym: agentgym's engine memoises two of TextWorld's functions in-process
(``agentgym.envs.alfworld.engine.install_speedups``), and this side must be the stock code. It checks that on exit.

The env is built exactly as alfworld's own scripts build it (``alfworld-play-tw``, ``train_dagger.py``):
``AlfredTWEnv(config, train_eval=...).init_env(batch_size=1)`` with ``config`` the YAML file given (alfworld's
``configs/base_config.yaml``, whose paths read ``$ALFWORLD_DATA``: the caller sets that variable to the folder of the
games). ``train_eval="train"`` adds alfworld's handcoded expert (``AlfredExpert``) as base_config does. The expert
breaks ties with the ``random`` module, which is seeded with SEED (as alfworld's training scripts seed it), so a
run is reproducible.

Protocol: one JSON object per line on stdin, one answer per line on stdout (library prints go to stderr):
``{"op": "reset"}`` -> ``{"obs", "admissible", "won", "done", "gamefile", "expert"}``; ``{"op": "step", "command":
"..."}`` -> the same keys (``done``: the env's own flag, won or the 50-step limit); ``{"op": "close"}`` -> ``{"ok":
true, "agentgym_imported": bool, "cpu_s": this process's CPU seconds}``. An exception inside the env is answered
``{"error": "Type: message"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def main(argv: list[str]) -> int:
    config_path, train_eval, seed = argv[0], argv[1], int(argv[2])
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # AlfredTWEnv prints progress; keep the protocol channel clean

    import random

    import yaml
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    with open(config_path) as f:
        config = yaml.safe_load(f)
    random.seed(seed)
    tw = AlfredTWEnv(config, train_eval=train_eval)
    env = tw.init_env(batch_size=1)

    def answer(obs, dones, infos) -> dict:
        plan = infos.get("extra.expert_plan")
        return {"obs": obs[0], "admissible": list(infos["admissible_commands"][0]), "won": bool(infos["won"][0]),
                "done": bool(dones[0]), "gamefile": infos["extra.gamefile"][0],
                "expert": plan[0][0] if plan and plan[0] else None}

    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "reset":
                obs, infos = env.reset()
                res = answer(obs, [False], infos)
            elif req["op"] == "step":
                obs, _scores, dones, infos = env.step([req["command"]])
                res = answer(obs, dones, infos)
            elif req["op"] == "close":
                env.close()
                out.write(json.dumps({"ok": True, "agentgym_imported": "agentgym" in sys.modules,
                                      "cpu_s": time.process_time()}) + "\n")
                return 0
            else:
                res = {"error": f"unknown op {req['op']!r}"}
        except Exception as e:  # noqa: BLE001 - reported to the driver, which decides
            traceback.print_exc(file=sys.stderr)
            res = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
