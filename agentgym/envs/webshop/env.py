"""WebShop-v0: shop in the 1,000-product WebShop by ``search[...]`` and ``click[...]`` actions.

An episode is one goal ("Find me ... with color: ..., and price lower than 50.00 dollars"). The agent starts on
the search page, searches (BM25 over the catalogue, :mod:`.search`), pages through results, opens products,
chooses options and buys. Only Buy Now ends an episode (``terminated``); ``max_turns`` (15, verl-agent's
``max_steps``) truncates it, and a truncated episode scores 0.

* **Observation** (``observation_mode``): ``"text"`` (default) is WebShop's raw ``text`` string (the page's
  segments joined by ``[SEP]``, instruction included, as AgentGym shows it); ``"verl-agent"`` is the page as
  verl-agent shows it to GiGPO/BiPACE models — the segments after the instruction, each quoted. The *prompt*
  (:meth:`WebShopEnv.prompt`) is always verl-agent's: the instruction as ``{task}``, the quoted pages as current
  observation and history, and the admissible actions. ``prompt_style`` picks the wording: ``"bipace"`` (default)
  is BiPACE Appendix J's copy of it; ``"verl-agent"`` (and ``"verl-agent-gigpo"``, the same here) is verl-agent's
  ``WEBSHOP_TEMPLATE_NO_HIS``/``WEBSHOP_TEMPLATE`` byte for byte (its "e\u2011commerce" with a non-breaking hyphen,
  the spaces after "environment." in the first form, after "are:" and after "tags.", a leading and a trailing
  newline), with the history's actions as verl-agent's projection of the responses (lower-cased ``<action>`` body,
  or the last 20 characters when there is no tag; :func:`agentgym.prompts.verl_agent_action`). The admissible
  actions are verl-agent's ``format_avail_actions``: ``search[<your query>]`` when the page has a search bar, then
  ``click[<clickable>]`` for each of WebShop's clickables, each written ``'<action>',`` on its own line.
* **Actions**: the body of ``<action>...</action>``, lower-cased as verl-agent does (``lowercase_actions``). An
  action that does not parse or names no button on the page changes nothing; it is flagged
  (``action_valid=False``, ``invalid_reason``) and the observation is the unchanged page, as WebShop returns it
  (spec §2). A search is accepted on every page but is admissible only on the search page. The buttons and
  admissible clicks are the original ``web_agent_site``'s: its clickables are dict keys, so an option value that
  a product repeats is one click (tests/conformance renders the original templates on all 1,000 products).
* **Rules** (``rules``, part of a run's identity: :meth:`WebShopEnv.run_identity`): ``"canonical"`` (the default
  on every split) shows exactly what WebShop shows: a response with no parsable ``<action>`` tag is played as the
  empty command, which WebShop ignores, so the agent reads the unchanged page; why is only in ``info``.
  ``"lenient"`` is agentgym's earlier wording: a parse failure is answered ``Invalid action: ... Nothing
  changed.`` above the page (as AgentGym's client answers one), and ``invalid_feedback=True`` (lenient only) adds
  that note after every invalid WebShop action too. Scores and rewards are the same under both; only what the
  agent reads differs, which changes what a model does. See the package README for the remaining differences.
* **Reward** (``reward_mode``): ``"raw"`` (default) gives WebShop's score in [0, 1] on Buy Now; ``"verl-agent"``
  gives 10 when that score is 1.0. ``info["won"]`` is score == 1.0, ``info["score"]`` the raw score, and
  ``info["reward_info"]`` WebShop's breakdown (r_type, r_att, r_option, r_price, their weights, query/category
  match, title score) after a purchase.
* **Tasks**: see :mod:`.goals`. ``split`` is ``test`` (goals 0-499 of the seed-0 list), ``train`` (500-6,909 less
  the 2 goals that repeat a test goal), ``all``, ``human`` or ``verl-agent-val`` (the 128 (worker seed, goal) pairs
  of verl-agent's first validation batch, for comparing with published curves; it overlaps ``train``);
  ``goal_seed`` builds the list with another seed (a verl-agent worker's). Task ids are ``ws<seed>-<index>``
  (``wsh`` for human goals). ``reset(options={"task_id": ...})``, ``{"task_index": k}`` (the k-th id of the split) or
  ``{"task": {...}}`` (a goal dict as :meth:`~.goals.WebShopGoal.to_dict` writes it) select a goal; otherwise it is
  drawn from the split with ``self.np_random``. Goal k of the whole seed list, the split aside, is the task id
  ``ws<seed>-<k>``.
"""

from __future__ import annotations

import logging
import random
import re
from functools import lru_cache
from typing import Any

import numpy as np

from ...core import RULES, AgentEnv, StepInfo, StepOutcome, check_rules
from ...errors import TaskError
from ...parsing import ParsedAction
from ...prompts import PromptTemplate, check_prompt_style, verl_agent_action
from .catalog import Catalog, load_catalog
from .goals import (WebShopGoal, get_goal, goal_list, session_prices, split_indices, verl_agent_val_tasks)
from .oracle import oracle_command, oracle_query
from .pages import SEARCH_PLACEHOLDER, ShopSession, parse_webshop_action, verl_agent_view
from .reward import RewardGoal, get_reward
from .search import BM25Index, analyze

__all__ = ["WebShopEnv", "get_engine", "SPLITS", "RULES"]

logger = logging.getLogger(__name__)

SPLITS = ("test", "train", "all", "human", "verl-agent-val")
# RULES (from core, re-exported): what the agent reads after an unparsable response (see the module docstring);
# canonical is every split's default.
_MAX_PROMPT_CHARS = 13_000
_TASK_ID = re.compile(r"^(ws|wsh)(\d+)-(\d+)$")

_HEAD = ("You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
         "Your task is to: {task}.\n")
_TAIL = ("Your admissible actions of the current situation are: \n[\n{available_actions}\n].\n\n"
         "Now it's your turn to take one action for the current step.\n"
         "You should first reason step-by-step about the current situation, then think carefully which admissible "
         "action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> "
         "tags.\nOnce you've finished your reasoning, you should choose an admissible action for current step and "
         "present it within <action> </action> tags.")
# verl-agent's two WebShop templates (first step / with history), as in BiPACE Appendix J.
_TEMPLATE = PromptTemplate(
    first=_HEAD + "Your current observation is: {current_observation}.\n" + _TAIL,
    with_history=_HEAD + "Prior to this step, you have already taken {step_count} step(s). Below are the most "
    "recent {history_length} observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}.\n" + _TAIL,
)

# verl-agent's agent_system/environments/prompts/webshop.py, verbatim: U+2011 in "e\u2011commerce", trailing spaces
# spelled out. Copyright Nanyang Technological University and the verl-agent (GiGPO) team, Apache-2.0.
_VERL_TAIL = ("Your admissible actions of the current situation are: \n"
              "[\n"
              "{available_actions}\n"
              "].\n"
              "\n"
              "Now it's your turn to take one action for the current step.\n"
              "You should first reason step-by-step about the current situation, then think carefully which "
              "admissible action best advances the shopping goal. This reasoning process MUST be enclosed within "
              "<think> </think> tags. \n"
              "Once you've finished your reasoning, you should choose an admissible action for current step and "
              "present it within <action> </action> tags.\n")
_VERL_TEMPLATE = PromptTemplate(
    first=("\n"
           "You are an expert autonomous agent operating in the WebShop e\u2011commerce environment. \n"
           "Your task is to: {task_description}.\n"
           "Your current observation is: {current_observation}.\n" + _VERL_TAIL),
    with_history=("\n"
                  "You are an expert autonomous agent operating in the WebShop e\u2011commerce environment.\n"
                  "Your task is to: {task_description}.\n"
                  "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
                  "{history_length} observations and the corresponding actions you took: {action_history}\n"
                  "You are now at step {current_step} and your current observation is: {current_observation}.\n"
                  + _VERL_TAIL),
)


def _page_part(observation: str) -> str:
    """The page text of an observation (without the invalid-action feedback line)."""
    head, sep, rest = observation.partition("Nothing changed.\n")
    return rest if sep and head.startswith("Invalid action:") else observation


class _Engine:
    """The BM25 index of a catalogue plus a query cache (searches repeat a lot across episodes)."""

    def __init__(self, catalog: Catalog):
        ids = [p.asin for p in catalog.products]
        if catalog.doc_tokens is not None:
            tokens = [catalog.doc_tokens[a] for a in ids]
        else:
            tokens = [analyze(p.contents) for p in catalog.products]
        self.index = BM25Index(ids, tokens)
        self._cache: dict[str, list[str]] = {}

    def search(self, query: str) -> list[str]:
        hit = self._cache.get(query)
        if hit is None:
            hit = [h.doc_id for h in self.index.search(analyze(query), 50)]
            if len(self._cache) > 50_000:
                self._cache.clear()
            self._cache[query] = hit
        return list(hit)


@lru_cache(maxsize=4)
def get_engine(catalog: Catalog) -> _Engine:
    """The (cached) search engine of ``catalog``."""
    return _Engine(catalog)


class WebShopEnv(AgentEnv):
    """WebShop-v0; see the module docstring.

    Args:
        split: ``test`` | ``train`` | ``all`` | ``human`` | ``verl-agent-val``.
        goal_seed: seed of the goal list (0: the global list; a verl-agent worker's seed reproduces its list).
        observation_mode: ``"text"`` (WebShop's raw text) or ``"verl-agent"`` (quoted segments, no instruction).
        reward_mode: ``"raw"`` (WebShop's score) or ``"verl-agent"`` (10 for a score of 1.0, else 0).
        data_dir: a directory with the official WebShop files (default: ``$WEBSHOP_DATA``, else the processed
            catalogue from the agentgym data search path).
        noun_table, noun_model: the title-noun table of the type reward (default: the en_core_web_sm-3.8.0 lists,
            from ``agentgym webshop prepare``'s cache or the staged copy; see :mod:`.catalog`).
        show_attrs: show the Attributes button on item pages (off in every published setting).
        search_shortcuts: accept WebShop's ``<r>``, ``<c> category`` and ``<q> query`` searches.
        lowercase_actions: lower-case the whole action before parsing (verl-agent does; WebShop matches the action
            name case-sensitively).
        rules: ``"canonical"`` (default: WebShop's pages only, an unparsable response plays the empty command) or
            ``"lenient"`` (agentgym's invalid-action notes); part of the run's identity (:meth:`run_identity`).
        invalid_feedback: lenient rules only: prefix the unchanged page with the reason after an invalid WebShop
            action (default off: the page only, exactly as WebShop/verl-agent return it; ``info`` flags the action
            either way).
        prompt_style: ``"bipace"`` (default), ``"verl-agent"`` or ``"verl-agent-gigpo"``: the prompt's wording (see
            the module docstring); part of the run's identity.
        max_turns, invalid_action_penalty, history_length, render_mode: see :class:`~agentgym.core.AgentEnv`.
    """

    prompt_template = _TEMPLATE

    def __init__(self, split: str = "test", *, goal_seed: int = 0, observation_mode: str = "text",
                 reward_mode: str = "raw", data_dir: str | None = None, noun_table: str | None = None,
                 noun_model: str | None = None, show_attrs: bool = False, search_shortcuts: bool = True,
                 lowercase_actions: bool = True, rules: str | None = None, invalid_feedback: bool = False,
                 prompt_style: str = "bipace", max_turns: int = 15, invalid_action_penalty: float = 0.0,
                 history_length: int = 2, render_mode: str | None = None):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty,
                         history_length=history_length, render_mode=render_mode)
        if split not in SPLITS:
            raise TaskError(f"unknown WebShop split {split!r}; choose from {list(SPLITS)}")
        if observation_mode not in ("verl-agent", "text"):
            raise ValueError(f"observation_mode must be 'verl-agent' or 'text', got {observation_mode!r}")
        if reward_mode not in ("raw", "verl-agent"):
            raise ValueError(f"reward_mode must be 'raw' or 'verl-agent', got {reward_mode!r}")
        check_rules(rules)
        self.prompt_style = check_prompt_style(prompt_style, "WebShop-v0")
        self._responses: list[str] = []  # this episode's raw responses (verl-agent's prompt shows their projection)
        self.rules = "canonical" if rules is None else rules
        if invalid_feedback and self.rules == "canonical":
            raise ValueError("invalid_feedback=True needs rules='lenient': under canonical rules the agent reads "
                             "WebShop's page only (the reason is in info['invalid_reason'])")
        kwargs = {"noun_table": noun_table}
        if noun_model is not None:
            kwargs["noun_model"] = noun_model
        self.catalog = load_catalog(data_dir, **kwargs)
        self.engine = get_engine(self.catalog)
        self.split, self.goal_seed = split, int(goal_seed)
        self.observation_mode, self.reward_mode = observation_mode, reward_mode
        self.show_attrs, self.search_shortcuts = bool(show_attrs), bool(search_shortcuts)
        self.lowercase_actions, self.invalid_feedback = bool(lowercase_actions), bool(invalid_feedback)
        self.session: ShopSession | None = None
        self.raw_reward: float | None = None
        self.reward_info: dict[str, Any] | None = None
        self._oracle_query: str | None = None

    # ---- tasks --------------------------------------------------------------------------------------------
    def goals(self, seed: int | None = None, kind: str | None = None) -> tuple[WebShopGoal, ...]:
        """The whole goal list of ``seed`` (default: the env's) and kind (default: the split's)."""
        kind = kind or ("human" if self.split == "human" else "synthetic")
        return goal_list(self.catalog, self.goal_seed if seed is None else seed, kind)[0]

    def prices(self, seed: int | None = None) -> dict[str, float]:
        """The session prices (ranged products get a seeded uniform draw) of the WebShop built with ``seed``."""
        return session_prices(self.catalog, self.goal_seed if seed is None else int(seed))

    # Task data for the contract's selection (agentgym.core).
    def _split_task_ids(self) -> list[str]:
        if self.split == "verl-agent-val":
            return [f"ws{seed}-{index}" for seed, index in verl_agent_val_tasks(env_seed=self.goal_seed)]
        if self.split == "human":
            return [g.task_id for g in self.goals()]
        return [f"ws{self.goal_seed}-{i}" for i in split_indices(self.split, self.catalog, self.goal_seed)]

    def _load_task(self, task_id: str) -> WebShopGoal | None:
        m = _TASK_ID.match(task_id)  # ws<seed>-<index> or wsh<seed>-<index>
        if m is None:
            return None
        kind = "synthetic" if m.group(1) == "ws" else "human"
        try:
            return get_goal(self.catalog, int(m.group(2)), int(m.group(3)), kind)
        except TaskError:  # no such index in that list
            return None

    def _task_from_dict(self, task: Any) -> WebShopGoal:
        if not isinstance(task, dict):
            raise TaskError(f"a WebShop task is a goal dict, got {type(task).__name__}")
        return self._goal_from_dict(task)

    def _goal_from_dict(self, d: dict) -> WebShopGoal:
        try:
            asin = d["asin"]
            if asin not in self.catalog.by_asin:
                raise TaskError(f"no product {asin!r} in the catalogue")
            opts = d.get("goal_options", {})
            if not d["attributes"]:
                raise TaskError("a WebShop goal needs at least one attribute (the reward divides by their number)")
            return WebShopGoal(asin=asin, instruction=str(d["instruction"]), attributes=tuple(d["attributes"]),
                               goal_options=dict(opts) if isinstance(opts, dict) else list(opts),
                               price_upper=float(d["price_upper"]), kind=str(d.get("kind", "synthetic")),
                               seed=int(d.get("seed", self.goal_seed)), index=int(d.get("index", -1)))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, TaskError):
                raise
            raise TaskError(f"bad WebShop task dict: {e!r}") from e

    def _task_id(self, task: WebShopGoal) -> str:
        return task.task_id

    # ---- episode ------------------------------------------------------------------------------------------
    def _start(self, task: WebShopGoal) -> str:
        rng = random.Random(int(self.np_random.integers(0, 2**63 - 1)))  # only for <r> searches
        self.session = ShopSession(self.catalog, task.instruction, self.engine.search, rng,
                                   show_attrs=self.show_attrs, shortcuts=self.search_shortcuts)
        self.raw_reward, self.reward_info, self._oracle_query = None, None, None
        self._responses = []
        return self._page_observation()

    def _page_observation(self) -> str:
        text = self.session.text(self.raw_reward)
        return verl_agent_view(text) if self.observation_mode == "verl-agent" else text

    def _execute(self, command: str, parsed: ParsedAction) -> StepOutcome:
        action = command.lower() if self.lowercase_actions else command
        admissible = self._is_admissible(action)
        result = self.session.step(action)
        if not result.valid:
            return StepOutcome(self._feedback(result.reason), valid=False, admissible=False,
                               invalid_reason=result.reason)
        reward, terminated = 0.0, False
        if result.bought:
            self.raw_reward, self.reward_info = self._purchase_reward()
            self._won = self.raw_reward == 1.0
            reward = self.raw_reward if self.reward_mode == "raw" else (10.0 if self._won else 0.0)
            terminated = True
        return StepOutcome(self._page_observation(), reward=float(reward), terminated=terminated,
                           admissible=admissible)

    def _feedback(self, reason: str, always: bool = False) -> str:
        page = self._page_observation()
        return f"Invalid action: {reason}. Nothing changed.\n{page}" if always or self.invalid_feedback else page

    def _invalid_observation(self, problem: str | None) -> str:
        # A response without a well-formed <action> tag. Canonical rules: it plays the empty command, a no-op in
        # WebShop, so the agent reads the unchanged page (the problem is in info["invalid_reason"]). Lenient rules:
        # AgentGym's client answers a parse failure with a note above the page, so the note is always there.
        if self.rules == "canonical":
            return self._page_observation()
        return self._feedback(f"{problem}; put one search[...] or click[...] inside <action>...</action>",
                              always=True)

    def step(self, action: str):
        out = super().step(action)
        self._responses.append(action if isinstance(action, str) else repr(action))
        return out

    def run_identity(self) -> dict[str, Any]:
        """``rules`` (``"canonical"|"lenient"``): what the agent reads after an unparsable response;
        ``prompt_style``: the prompt preset the model reads."""
        return {"rules": self.rules, "prompt_style": self.prompt_style}

    def _is_admissible(self, action: str) -> bool:
        """Whether the action is one the admissible list offers (any query where the search bar is shown)."""
        name, arg = parse_webshop_action(action)
        adm = self.session.admissible_actions()
        if name == "search":
            return arg is not None and SEARCH_PLACEHOLDER in adm
        return name == "click" and f"click[{arg}]" in adm

    def _purchase_reward(self) -> tuple[float, dict[str, Any]]:
        goal: WebShopGoal = self.task
        gold = self.catalog.by_asin[goal.asin]
        product = self.session.product
        rgoal = RewardGoal(name=gold.title, query=gold.query, product_category=gold.product_category,
                           attributes=goal.attributes, goal_options=goal.goal_options, price_upper=goal.price_upper,
                           nouns=tuple(self.catalog.nouns[gold.asin]))
        price = self.prices(goal.seed).get(product.asin, 100.0)
        total, info = get_reward(product, rgoal, price, dict(self.session.options), self.catalog.nouns[product.asin])
        info = {**info, "asin": product.asin, "options": dict(self.session.options), "price": price}
        return float(total), info

    # ---- contract hooks -----------------------------------------------------------------------------------
    def admissible_actions(self) -> list[str] | None:
        if self.session is None or self.session.page == "done":
            return [] if self.session is not None else None
        return self.session.admissible_actions()

    def _anchor_text(self) -> str:
        # The state is the page (GiGPO's anchor is the quoted page); feedback text and the instruction are not.
        if self.session is None:
            return self.last_observation
        return verl_agent_view(self.session.text(self.raw_reward))

    def prompt(self, history_length: int | None = None) -> str:
        """verl-agent's WebShop prompt: pages in its quoted form (whatever ``observation_mode``), so an invalid
        action's feedback is not shown, exactly as there; in ``prompt_style``'s wording."""
        hl = self.history_length if history_length is None else history_length
        if self.prompt_style == "bipace":
            template, actions = self.prompt_template, [act for _, act in self.history]
        else:
            template, actions = _VERL_TEMPLATE, [verl_agent_action(r, 20) for r in self._responses]
        history = [(verl_agent_view(_page_part(obs)), act) for (obs, _), act in zip(self.history, actions)]
        current = verl_agent_view(_page_part(self.last_observation))
        text = template.render(history=history, history_length=hl, step=self.turn, current_observation=current,
                               **self._prompt_fields())
        if len(text) > _MAX_PROMPT_CHARS:  # verl-agent falls back to the first-step template
            text = template.render(history=[], history_length=0, step=self.turn, current_observation=current,
                                   **self._prompt_fields())
        return text

    def _prompt_fields(self) -> dict[str, Any]:
        adm = self.admissible_actions() or []
        return {"task": self.task.instruction, "task_description": self.task.instruction,
                "available_actions": "\n".join(f"'{a}'," for a in adm)}

    def score(self) -> float:
        return float(self.raw_reward) if self.raw_reward is not None else 0.0

    def _info(self, parsed: ParsedAction | None, raw: str, outcome: StepOutcome | None) -> StepInfo:
        info = super()._info(parsed, raw, outcome)
        s = self.session
        info.update({  # type: ignore[typeddict-unknown-key]
            "instruction": self.task.instruction, "goal_index": self.task.index, "page": s.page if s else None,
            "available_actions": {"has_search_bar": s.has_search_bar, "clickables": s.clickables()} if s else None,
            "task_score": self.score(), "reward_info": dict(self.reward_info) if self.reward_info else None,
            "anchor": self._anchor_text(),
        })
        return info

    def oracle_action(self) -> str:
        if self._oracle_query is None:
            self._oracle_query = oracle_query(self.task, self.catalog, self.engine.search)
        return f"<action>{oracle_command(self.session, self.task, self._oracle_query)}</action>"

    def random_action(self, rng: np.random.Generator) -> str:
        """Uniform over the admissible actions; the search placeholder becomes 1-5 random instruction words."""
        adm = self.admissible_actions() or ["click[back to search]"]
        action = adm[int(rng.integers(len(adm)))]
        if action == SEARCH_PLACEHOLDER:
            words = self.task.instruction.lower().replace(",", " ").split()
            k = int(rng.integers(1, min(5, len(words)) + 1))
            picked = [words[int(i)] for i in rng.choice(len(words), size=k, replace=False)]
            action = f"search[{' '.join(picked)}]"
        return f"<action>{action}</action>"
