"""WebShop-v0: the 1,000-product WebShop of the GiGPO / BiPACE papers, in pure Python.

See :mod:`.env` for the environment, :mod:`.pages` for the page state machine, :mod:`.search` for the BM25 engine,
:mod:`.reward` for the scoring, :mod:`.goals` for goals and splits, :mod:`.catalog` for data loading and
:mod:`.prepare` for ``agentgym webshop prepare``. docs/webshop.md describes the whole; "spec §N" in this package
cites its sections.
"""

from ...registration import EnvEntry


class _WebShopEntry(EnvEntry):
    """Every split needs the same data: the official files in ``$WEBSHOP_DATA`` or the processed catalogue, and a
    title-noun table (:func:`.catalog.data_status`)."""

    def split_available(self, split: str) -> tuple[bool, str]:
        missing = self.missing_requirements()
        if missing or split not in self.splits:
            return super().split_available(split)
        from .catalog import data_status

        return data_status()


ENTRY = _WebShopEntry(
    env_id="WebShop-v0",
    entry_point="agentgym.envs.webshop.env:WebShopEnv",
    splits={
        "test": "goals 0-499 of the global seed-0 list of the 6,910 synthetic goals (held out from train)",
        "train": "goals 500-6,909 of the same list, less 2 that repeat a test goal (shares products with test)",
        "all": "all 6,910 synthetic goals of the seed-0 list",
        "human": "the 13 human-written goals of the 1,000-product catalogue",
        "verl-agent-val": "verl-agent's first validation batch: 128 (worker seed 1000+i, goal) pairs (overlaps train)",
    },
    default_split="test",
    extra="webshop",
    requires=("regex",),
    description="WebShop (1,000 products, synthetic goals, text pages) with native BM25, reward and an oracle",
)
