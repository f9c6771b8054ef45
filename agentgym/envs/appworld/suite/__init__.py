"""The generated AppWorld task suite: scenarios (generators) that write tasks on the real apps.

A :class:`Scenario` is AppWorld's *generator*: one kind of task over fixed apps at one difficulty level, with one
evaluation (AppWorld's ``evaluate(test, public_data, private_data, main_user, models, ground_truth_answer)``, in
AppWorld's style: the required state changes, then a collateral-damage check that no other model changed) and a
function that draws task ``n`` of the scenario from ``random.Random(f"{scenario}:{n}")``: the seed records of the
apps, the instruction, the public and private data, the answer, a gold solution that wins and a wrong solution
that loses (both Python code cells). Building the suite is deterministic and offline: nothing but the scenario ids
and the task numbers feeds the generators.

Difficulty follows AppWorld's levels (the apps and API calls of the gold solution): **1** one app, a handful of
calls; **2** one app with many calls (a loop over records) or two apps with few; **3** several apps and many
calls (:func:`level_of` has the exact thresholds). ``agentgym appworld validate`` checks each gold solution's measured calls against its scenario's level
(:func:`level_of`).

Scenario modules (``notes``, ``todo``, ``money``, ``social``, ``media``, ``cross``) register themselves in
:data:`SCENARIOS`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Scenario", "Draft", "SCENARIOS", "register", "generated_specs", "level_of", "SUPERVISOR", "DATETIME",
           "login", "PEOPLE", "ANSWER_ONLY"]

#: the supervisor of every generated task (the static tasks' common.json names the same person)
SUPERVISOR = {"first_name": "Morgan", "last_name": "Reyes", "email": "morgan.reyes@example.com",
              "phone_number": "2125550147", "birthday": "1988-04-12",
              "passwords": {"simple_note": "k3ep-n0tes!", "venmo": "v3nmo-pass#", "todoist": "t0do-list$",
                            "splitwise": "spl1t-it%", "phone": "ph0ne-pin&", "spotify": "sp0t-tunes*",
                            "gmail": "gm4il-box^", "file_system": "f1les-root("}}
DATETIME = "2023-05-18T10:30:00"

#: (first, last) names of the people the generators draw from; emails and phone numbers derive from them
_NAMES = [("Jamie", "Chen"), ("Priya", "Natarajan"), ("Luis", "Ortega"), ("Hannah", "Schmidt"), ("Kwame", "Mensah"),
          ("Sofia", "Rossi"), ("Ethan", "Walker"), ("Aiko", "Tanaka"), ("Omar", "Haddad"), ("Lena", "Novak"),
          ("Mateo", "Silva"), ("Grace", "Okafor"), ("Noah", "Fischer"), ("Isla", "MacLeod"), ("Ravi", "Kapoor"),
          ("Chloe", "Dubois"), ("Daniel", "Kim"), ("Amara", "Diallo"), ("Felix", "Berg"), ("Yara", "Saleh"),
          ("Lucas", "Moreau"), ("Mei", "Lin"), ("Tomas", "Horvat"), ("Zoe", "Adams")]


@dataclass(frozen=True)
class Person:
    first_name: str
    last_name: str
    email: str
    phone_number: str
    password: str

    @property
    def name(self) -> str:
        return f"{self.first_name} {self.last_name}"


PEOPLE = tuple(Person(f, l, f"{f.lower()}.{l.lower()}@example.com", f"212555{2000 + i:04d}", f"{f.lower()}-pw{i}")
               for i, (f, l) in enumerate(_NAMES))


@dataclass
class Draft:
    """One task drawn by a scenario."""

    instruction: str
    solution: list[str]
    wrong: list[str]
    seed: dict[str, list[dict]] = field(default_factory=dict)
    supervisor_fields: dict[str, dict] = field(default_factory=dict)
    public_data: dict = field(default_factory=dict)
    private_data: dict = field(default_factory=dict)
    answer: object = None


@dataclass(frozen=True)
class Scenario:
    """An AppWorld generator: ``id`` (alphanumeric: task ids are ``<id>_<n>``), the ``apps`` its gold solutions use
    (besides the supervisor app), ``difficulty`` (1-3), ``split`` (``gen-train``/``gen-dev``/``gen-test``), its
    ``evaluation`` source and ``draw(rng, n) -> Draft``."""

    id: str
    apps: tuple[str, ...]
    difficulty: int
    split: str
    evaluation: str
    draw: Callable[[random.Random, int], Draft]
    n: int = 6


SCENARIOS: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    if not scenario.id.isalnum() or scenario.id in SCENARIOS:
        raise ValueError(f"bad or duplicate scenario id {scenario.id!r}")
    if scenario.difficulty not in (1, 2, 3) or scenario.split not in ("gen-train", "gen-dev", "gen-test"):
        raise ValueError(f"scenario {scenario.id}: bad difficulty or split")
    SCENARIOS[scenario.id] = scenario
    return scenario


def level_of(calls: dict[str, int]) -> int:
    """AppWorld's difficulty level of a solution from its API calls per app (calls to ``supervisor`` and
    ``api_docs`` are not counted): **1** one app and at most 4 calls; **3** three or more apps, or two apps and at
    least 10 calls; **2** the rest (one app and 5 or more calls, or two apps and fewer than 10)."""
    counted = {app: n for app, n in calls.items() if app not in ("supervisor", "api_docs") and n > 0}
    total = sum(counted.values())
    if len(counted) >= 3 or (len(counted) == 2 and total >= 10):
        return 3
    if len(counted) <= 1 and total <= 4:
        return 1
    return 2


def login(*apps: str) -> str:
    """A cell that logs in to ``apps`` as the supervisor: ``tokens[app]`` afterwards (AppWorld's usual opening)."""
    lines = ["passwords = {a['account_name']: a['password'] for a in apis.supervisor.show_account_passwords()}",
             "profile = apis.supervisor.show_profile()", "tokens = {}"]
    for app in apps:
        user = "profile['phone_number']" if app == "phone" else "profile['email']"
        lines.append(f"tokens[{app!r}] = apis.{app}.login(username={user}, password=passwords[{app!r}])"
                     "['access_token']")
    return "\n".join(lines)


#: the evaluation of a task whose whole job is its answer: the answer is right and no app changed
ANSWER_ONLY = '''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    with test("the answer is right"):
        test.answer(models.end.supervisor.Task.all()[0].answer, ground_truth_answer)
    with test("nothing changed in any app (collateral damage)"):
        test.case(models.changed_model_names(), "==", set())
'''


def generated_specs() -> list[tuple[Scenario, int, Draft]]:
    """Every generated task, in a stable order (scenario id, then n): ``(scenario, n, draft)``."""
    from . import cross, media, money, notes, social, todo  # noqa: F401 - they register their scenarios

    out = []
    for sid in sorted(SCENARIOS):
        scenario = SCENARIOS[sid]
        for n in range(1, scenario.n + 1):
            out.append((scenario, n, scenario.draw(random.Random(f"{sid}:{n}"), n)))
    return out
