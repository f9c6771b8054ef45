"""The airline tools with τ²-bench semantics, their OpenAI-format JSON schemas, and argument validation.

Every tool is a function ``(db: EpisodeDB, **arguments) -> result`` registered in :data:`TOOLS` with a JSON
schema (the ``parameters`` of an OpenAI function tool). :func:`call_tool` is the only entry point the env uses:

* a call whose name is unknown, or whose arguments do not fit the schema (missing, unexpected, ill-typed, not in
  an enum) returns a :class:`ToolResult` with ``ok=False`` and ``kind="invalid_call"``;
* a well-formed call that the domain refuses (unknown reservation, payment that does not add up...) returns
  ``ok=False`` and ``kind="tool_error"`` with τ²'s message;
* nothing raises.

Semantics follow ``sierra-research/tau2-bench`` ``src/tau2/domains/airline/tools.py``: prices and balances,
refunds on cancellation, no seat release on cancel or flight change, new ids ``HATHAT``/``HATHAU``/``HATHAV`` and
``certificate_3221322``.., the fixed clock ``2024-05-15T15:00:00``, look-ups tolerant of case and surrounding
spaces. Like τ²'s pydantic models, nested objects keep only their declared fields (extra keys are dropped) and
integral floats are accepted for integers.
"""

from __future__ import annotations

import ast
import copy
import json
import operator
from dataclasses import dataclass
from typing import Any, Callable

from .db import EpisodeDB

__all__ = ["ToolResult", "ToolSpec", "TOOLS", "call_tool", "openai_tools", "ToolError", "NOW", "is_write"]

NOW = "2024-05-15T15:00:00"
CABINS = ["basic_economy", "economy", "business"]
_NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
_NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
_AIRPORTS = (("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"), ("ORD", "Chicago"),
             ("DFW", "Dallas"), ("DEN", "Denver"), ("SEA", "Seattle"), ("ATL", "Atlanta"), ("MIA", "Miami"),
             ("BOS", "Boston"), ("PHX", "Phoenix"), ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"),
             ("EWR", "Newark"), ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"),
             ("PHL", "Philadelphia"), ("LGA", "LaGuardia"))


class ToolError(Exception):
    """A domain refusal inside a tool (τ²'s ValueError); turned into a tool-error observation."""


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call. ``content`` is what the agent sees (JSON text or τ²'s message)."""

    name: str
    ok: bool
    content: str
    kind: str = "ok"  # "ok" | "invalid_call" | "tool_error"
    arguments: dict | None = None  # the validated arguments (None when the call was invalid)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict
    fn: Callable[..., Any]
    kind: str  # "read" | "write" | "generic" | "think"

    def openai(self) -> dict:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


# ---- schema helpers ---------------------------------------------------------------------------------------------
def _s(desc: str, **kw) -> dict:
    return {"type": "string", "description": desc, **kw}


def _i(desc: str, **kw) -> dict:
    return {"type": "integer", "description": desc, **kw}


def _obj(props: dict, required: list[str] | None = None, desc: str = "") -> dict:
    out = {"type": "object", "properties": props, "required": list(props) if required is None else required}
    if desc:
        out["description"] = desc
    return out


_FLIGHT_INFO = _obj({"flight_number": _s("Flight number, such as 'HAT001'."),
                     "date": _s("The date for the flight in the format 'YYYY-MM-DD', such as '2024-05-01'.")})
_PASSENGER = _obj({"first_name": _s("Passenger's first name"), "last_name": _s("Passenger's last name"),
                   "dob": _s("Date of birth in YYYY-MM-DD format")})
_PAYMENT = _obj({"payment_id": _s("The payment id stored in user profile, such as 'credit_card_7815826'."),
                 "amount": _i("The amount to pay with this payment method.")})
_RES_ID = _s("The reservation ID, such as 'ZFA04Y'.")
_USER_ID = _s("The user ID, such as 'sara_doe_496'.")
_PAYMENT_ID = _s("The payment id stored in user profile, such as 'credit_card_7815826', 'gift_card_7815826', "
                 "'certificate_7815826'.")
_CABIN = _s("The cabin class such as 'basic_economy', 'economy', or 'business'.", enum=CABINS)


def _validate(value: Any, schema: dict, path: str) -> Any:
    """Check ``value`` against a (small) JSON schema; return the normalized value or raise ValueError."""
    t = schema.get("type")
    if t == "string":
        if not isinstance(value, str):
            raise ValueError(f"{path} must be a string, got {type(value).__name__}")
    elif t == "integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{path} must be an integer, got {value!r}")
        if "minimum" in schema and value < schema["minimum"]:
            raise ValueError(f"{path} must be >= {schema['minimum']}, got {value}")
    elif t == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{path} must be a number, got {value!r}")
    elif t == "array":
        if not isinstance(value, list):
            raise ValueError(f"{path} must be an array, got {type(value).__name__}")
        value = [_validate(v, schema["items"], f"{path}[{i}]") for i, v in enumerate(value)]
    elif t == "object":
        if not isinstance(value, dict):
            raise ValueError(f"{path} must be an object, got {type(value).__name__}")
        props = schema.get("properties", {})
        missing = [k for k in schema.get("required", []) if k not in value]
        if missing:
            raise ValueError(f"{path or 'arguments'} is missing required field(s) {missing}")
        # Declared fields only, in schema order: as τ²'s pydantic models do with extra keys.
        value = {k: _validate(value[k], props[k], f"{path}.{k}" if path else k) for k in props if k in value}
    if "enum" in schema and value not in schema["enum"]:
        raise ValueError(f"{path} must be one of {schema['enum']}, got {value!r}")
    return value


# ---- look-ups (τ²: case- and whitespace-tolerant, exact first) ------------------------------------------------
def _resolve(db: EpisodeDB, table: str, key: str) -> str | None:
    if (table, key) in db:
        return key
    k = key.strip()
    if (table, k) in db:
        return k
    folded = k.casefold()
    for cand in db.keys(table):
        if cand.casefold() == folded:
            return cand
    return None


def _user_key(db: EpisodeDB, user_id: str) -> str:
    k = _resolve(db, "users", user_id)
    if k is None:
        raise ToolError(f"User {user_id} not found")
    return k


def _reservation_key(db: EpisodeDB, reservation_id: str) -> str:
    k = _resolve(db, "reservations", reservation_id)
    if k is None:
        raise ToolError(f"Reservation {reservation_id} not found")
    return k


def _flight_key(db: EpisodeDB, flight_number: str) -> str:
    k = _resolve(db, "flights", flight_number)
    if k is None:
        raise ToolError(f"Flight {flight_number} not found")
    return k


def _flight_date(flight: dict, flight_number: str, date: str) -> dict:
    if date not in flight["dates"]:
        raise ToolError(f"Flight {flight_number} not found on date {date}")
    return flight["dates"][date]


# ---- views (the shape τ²'s pydantic models dump to) ------------------------------------------------------------
def _reservation_view(r: dict) -> dict:
    out = copy.deepcopy(r)
    out.setdefault("status", None)
    return out


def _user_view(u: dict) -> dict:
    out = copy.deepcopy(u)
    out.get("address", {}).setdefault("address2", None)
    out.setdefault("saved_passengers", [])
    out.setdefault("reservations", [])
    return out


def _search_direct(db: EpisodeDB, date: str, origin: str | None = None, destination: str | None = None,
                   leave_after: str | None = None, with_date: bool = False) -> list[dict]:
    out = []
    for f in db.values("flights"):
        d = f["dates"].get(date)
        if d is None or d.get("status") != "available":
            continue
        if origin is not None and f["origin"] != origin:
            continue
        if destination is not None and f["destination"] != destination:
            continue
        if leave_after is not None and f["scheduled_departure_time_est"] < leave_after:
            continue
        out.append({"flight_number": f["flight_number"], "origin": f["origin"], "destination": f["destination"],
                    "status": "available", "scheduled_departure_time_est": f["scheduled_departure_time_est"],
                    "scheduled_arrival_time_est": f["scheduled_arrival_time_est"],
                    "available_seats": dict(d["available_seats"]), "prices": dict(d["prices"]),
                    "date": date if with_date else None})
    return out


def _payment_for_update(user: dict, payment_id: str, total_price: int) -> dict | None:
    if payment_id not in user["payment_methods"]:
        raise ToolError("Payment method not found")
    method = user["payment_methods"][payment_id]
    if method["source"] == "certificate":
        raise ToolError("Certificate cannot be used to update reservation")
    if method["source"] == "gift_card" and method["amount"] < total_price:
        raise ToolError("Gift card balance is not enough")
    if method["source"] == "gift_card":
        method["amount"] -= total_price
    return None if total_price == 0 else {"payment_id": payment_id, "amount": total_price}


# ---- the tools ---------------------------------------------------------------------------------------------------
def book_reservation(db: EpisodeDB, user_id: str, origin: str, destination: str, flight_type: str, cabin: str,
                     flights: list[dict], passengers: list[dict], payment_methods: list[dict], total_baggages: int,
                     nonfree_baggages: int, insurance: str) -> dict:
    ukey = _user_key(db, user_id)
    user_ro = db.peek("users", ukey)
    reservation_id = next((r for r in _NEW_RESERVATION_IDS if ("reservations", r) not in db), None)
    if reservation_id is None:
        raise ToolError("Too many reservations")
    reservation = {"reservation_id": reservation_id, "user_id": ukey, "origin": origin, "destination": destination,
                   "flight_type": flight_type, "cabin": cabin, "flights": [], "passengers": copy.deepcopy(passengers),
                   "payment_history": copy.deepcopy(payment_methods), "created_at": NOW,
                   "total_baggages": total_baggages, "nonfree_baggages": nonfree_baggages, "insurance": insurance,
                   "status": None}
    total_price = 0
    legs: list[tuple[str, str]] = []
    for info in flights:
        fkey = _flight_key(db, info["flight_number"])
        flight = db.peek("flights", fkey)
        d = _flight_date(flight, fkey, info["date"])
        if d.get("status") != "available":
            raise ToolError(f"Flight {fkey} not available on date {info['date']}")
        if d["available_seats"][cabin] < len(passengers):
            raise ToolError(f"Not enough seats on flight {fkey}")
        price = d["prices"][cabin]
        reservation["flights"].append({"origin": flight["origin"], "destination": flight["destination"],
                                       "flight_number": fkey, "date": info["date"], "price": price})
        legs.append((fkey, info["date"]))
        total_price += price * len(passengers)
    if insurance == "yes":
        total_price += 30 * len(passengers)
    total_price += 50 * nonfree_baggages
    for p in payment_methods:
        if p["payment_id"] not in user_ro["payment_methods"]:
            raise ToolError(f"Payment method {p['payment_id']} not found")
        method = user_ro["payment_methods"][p["payment_id"]]
        if method["source"] in ("gift_card", "certificate") and method["amount"] < p["amount"]:
            raise ToolError(f"Not enough balance in payment method {p['payment_id']}")
    paid = sum(p["amount"] for p in payment_methods)
    if paid != total_price:
        raise ToolError(f"Payment amount does not add up, total price is {total_price}, but paid {paid}")
    # All checks passed: only now touch the episode's records.
    user = db.mutable("users", ukey)
    for p in payment_methods:
        method = user["payment_methods"].get(p["payment_id"])
        if method is None:  # the same certificate listed twice: τ² would fail on the second pop
            raise ToolError(f"Payment method {p['payment_id']} not found")
        if method["source"] == "gift_card":
            method["amount"] -= p["amount"]
        elif method["source"] == "certificate":
            user["payment_methods"].pop(p["payment_id"])
    for fkey, date in legs:
        db.mutable("flights", fkey)["dates"][date]["available_seats"][cabin] -= len(passengers)
    db.insert("reservations", reservation_id, reservation)
    user["reservations"].append(reservation_id)
    return _reservation_view(reservation)


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNOPS = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _arith(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_arith(node.left), _arith(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
        return _UNOPS[type(node.op)](_arith(node.operand))
    raise ToolError("Invalid expression")


def calculate(db: EpisodeDB, expression: str) -> str:
    # τ² eval()s the expression after a character check; an AST walk gives the same numbers without eval.
    if not all(c in "0123456789+-*/(). " for c in expression):
        raise ToolError("Invalid characters in expression")
    if len(expression) > 10_000:
        raise ToolError("Invalid expression: too long")
    try:
        return str(round(float(_arith(ast.parse(expression, mode="eval"))), 2))
    except SyntaxError as e:
        raise ToolError(f"Invalid expression: {e.msg}") from None
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("numerical result out of range") from None
    except (RecursionError, MemoryError):
        raise ToolError("Invalid expression: nested too deeply") from None


def cancel_reservation(db: EpisodeDB, reservation_id: str) -> dict:
    r = db.mutable("reservations", _reservation_key(db, reservation_id))
    r["payment_history"].extend([{"payment_id": p["payment_id"], "amount": -p["amount"]}
                                 for p in r["payment_history"]])
    r["status"] = "cancelled"
    # τ² does not release the seats on cancellation.
    return _reservation_view(r)


def get_reservation_details(db: EpisodeDB, reservation_id: str) -> dict:
    return _reservation_view(db.peek("reservations", _reservation_key(db, reservation_id)))


def get_user_details(db: EpisodeDB, user_id: str) -> dict:
    return _user_view(db.peek("users", _user_key(db, user_id)))


def list_all_airports(db: EpisodeDB) -> list[dict]:
    return [{"iata": code, "city": city} for code, city in _AIRPORTS]


def search_direct_flight(db: EpisodeDB, origin: str, destination: str, date: str) -> list[dict]:
    return _search_direct(db, date, origin=origin, destination=destination)


def search_onestop_flight(db: EpisodeDB, origin: str, destination: str, date: str) -> list[list[dict]]:
    out = []
    for first in _search_direct(db, date, origin=origin, with_date=True):
        if "+1" in first["scheduled_arrival_time_est"]:
            # τ²'s next-day date (it writes the day without zero padding: "2024-05-6"); kept for parity.
            try:
                date2 = f"2024-05-{int(date[-2:]) + 1}"
            except ValueError:
                continue
        else:
            date2 = date
        for second in _search_direct(db, date2, origin=first["destination"], destination=destination,
                                     leave_after=first["scheduled_arrival_time_est"], with_date=True):
            out.append([first, second])
    return out


def send_certificate(db: EpisodeDB, user_id: str, amount: int) -> str:
    ukey = _user_key(db, user_id)
    user = db.peek("users", ukey)
    cid = next((c for c in _NEW_CERTIFICATE_IDS if c not in user["payment_methods"]), None)
    if cid is None:
        raise ToolError("Too many certificates")
    db.mutable("users", ukey)["payment_methods"][cid] = {"source": "certificate", "id": cid, "amount": amount}
    return f"Certificate {cid} added to user {user_id} with amount {amount}."


def think(db: EpisodeDB, thought: str) -> str:
    return ""


def transfer_to_human_agents(db: EpisodeDB, summary: str) -> str:
    return "Transfer successful"


def update_reservation_baggages(db: EpisodeDB, reservation_id: str, total_baggages: int, nonfree_baggages: int,
                                payment_id: str) -> dict:
    rkey = _reservation_key(db, reservation_id)
    r_ro = db.peek("reservations", rkey)
    ukey = _user_key(db, r_ro["user_id"])
    total_price = 50 * max(0, nonfree_baggages - r_ro["nonfree_baggages"])
    _check_payment(db.peek("users", ukey), payment_id, total_price)
    payment = _payment_for_update(db.mutable("users", ukey), payment_id, total_price)
    r = db.mutable("reservations", rkey)
    if payment is not None:
        r["payment_history"].append(payment)
    r["total_baggages"] = total_baggages
    r["nonfree_baggages"] = nonfree_baggages
    return _reservation_view(r)


def _check_payment(user_ro: dict, payment_id: str, total_price: int) -> None:
    """The checks of :func:`_payment_for_update` on a read-only record, so a refusal copies nothing."""
    method = user_ro["payment_methods"].get(payment_id)
    if method is None:
        raise ToolError("Payment method not found")
    if method["source"] == "certificate":
        raise ToolError("Certificate cannot be used to update reservation")
    if method["source"] == "gift_card" and method["amount"] < total_price:
        raise ToolError("Gift card balance is not enough")


def update_reservation_flights(db: EpisodeDB, reservation_id: str, cabin: str, flights: list[dict],
                               payment_id: str) -> dict:
    rkey = _reservation_key(db, reservation_id)
    r_ro = db.peek("reservations", rkey)
    ukey = _user_key(db, r_ro["user_id"])
    n = len(r_ro["passengers"])
    total_price = 0
    new_flights = []
    for info in flights:
        fkey = _flight_key(db, info["flight_number"])
        kept = next((f for f in r_ro["flights"] if f["flight_number"] == fkey and f["date"] == info["date"]
                     and cabin == r_ro["cabin"]), None)
        if kept is not None:
            total_price += kept["price"] * n
            new_flights.append(copy.deepcopy(kept))
            continue
        flight = db.peek("flights", fkey)
        d = _flight_date(flight, fkey, info["date"])
        if d.get("status") != "available":
            raise ToolError(f"Flight {fkey} not available on date {info['date']}")
        if d["available_seats"][cabin] < n:
            raise ToolError(f"Not enough seats on flight {fkey}")
        leg = {"flight_number": fkey, "date": info["date"], "price": d["prices"][cabin], "origin": flight["origin"],
               "destination": flight["destination"]}
        total_price += leg["price"] * n
        new_flights.append(leg)
    total_price -= sum(f["price"] for f in r_ro["flights"]) * n
    _check_payment(db.peek("users", ukey), payment_id, total_price)
    payment = _payment_for_update(db.mutable("users", ukey), payment_id, total_price)
    r = db.mutable("reservations", rkey)
    if payment is not None:
        r["payment_history"].append(payment)
    r["flights"] = new_flights
    r["cabin"] = cabin
    # τ² leaves the flights' seat counts unchanged here.
    return _reservation_view(r)


def update_reservation_passengers(db: EpisodeDB, reservation_id: str, passengers: list[dict]) -> dict:
    rkey = _reservation_key(db, reservation_id)
    if len(passengers) != len(db.peek("reservations", rkey)["passengers"]):
        raise ToolError("Number of passengers does not match")
    r = db.mutable("reservations", rkey)
    r["passengers"] = copy.deepcopy(passengers)
    return _reservation_view(r)


def get_flight_status(db: EpisodeDB, flight_number: str, date: str) -> str:
    fkey = _flight_key(db, flight_number)
    return _flight_date(db.peek("flights", fkey), fkey, date)["status"]


_SPECS = [
    ToolSpec("book_reservation", "Book a reservation.", _obj({
        "user_id": _s("The ID of the user to book the reservation such as 'sara_doe_496'."),
        "origin": _s("The IATA code for the origin city such as 'SFO'."),
        "destination": _s("The IATA code for the destination city such as 'JFK'."),
        "flight_type": _s("The type of flight such as 'one_way' or 'round_trip'.", enum=["round_trip", "one_way"]),
        "cabin": _CABIN,
        "flights": {"type": "array", "items": _FLIGHT_INFO,
                    "description": "An array of objects containing details about each piece of flight."},
        "passengers": {"type": "array", "items": _PASSENGER,
                       "description": "An array of objects containing details about each passenger."},
        "payment_methods": {"type": "array", "items": _PAYMENT,
                            "description": "An array of objects containing details about each payment method."},
        "total_baggages": _i("The total number of baggage items to book the reservation.", minimum=0),
        "nonfree_baggages": _i("The number of non-free baggage items to book the reservation.", minimum=0),
        "insurance": _s("Whether the reservation has insurance.", enum=["yes", "no"]),
    }), book_reservation, "write"),
    ToolSpec("calculate", "Calculate the result of a mathematical expression.", _obj({
        "expression": _s("The mathematical expression to calculate, such as '2 + 2'. The expression can contain "
                         "numbers, operators (+, -, *, /), parentheses, and spaces."),
    }), calculate, "generic"),
    ToolSpec("cancel_reservation", "Cancel the whole reservation.", _obj({"reservation_id": _RES_ID}),
             cancel_reservation, "write"),
    ToolSpec("get_reservation_details", "Get the details of a reservation.", _obj({"reservation_id": _RES_ID}),
             get_reservation_details, "read"),
    ToolSpec("get_user_details", "Get the details of a user, including their reservations.",
             _obj({"user_id": _USER_ID}), get_user_details, "read"),
    ToolSpec("list_all_airports", "Returns a list of all available airports.", _obj({}), list_all_airports, "read"),
    ToolSpec("search_direct_flight", "Search for direct flights between two cities on a specific date.", _obj({
        "origin": _s("The origin city airport in three letters, such as 'JFK'."),
        "destination": _s("The destination city airport in three letters, such as 'LAX'."),
        "date": _s("The date of the flight in the format 'YYYY-MM-DD', such as '2024-01-01'."),
    }), search_direct_flight, "read"),
    ToolSpec("search_onestop_flight", "Search for one-stop flights between two cities on a specific date.", _obj({
        "origin": _s("The origin city airport in three letters, such as 'JFK'."),
        "destination": _s("The destination city airport in three letters, such as 'LAX'."),
        "date": _s("The date of the flight in the format 'YYYY-MM-DD', such as '2024-05-01'."),
    }), search_onestop_flight, "read"),
    ToolSpec("send_certificate", "Send a certificate to a user. Be careful!", _obj({
        "user_id": _s("The ID of the user to book the reservation, such as 'sara_doe_496'."),
        "amount": _i("The amount of the certificate to send.", minimum=0),
    }), send_certificate, "write"),
    ToolSpec("think", "Use the tool to think about something. It will not obtain new information or change the "
             "database, but just append the thought to the log. Use it when complex reasoning or some cache memory "
             "is needed.", _obj({"thought": _s("A thought to think about.")}), think, "think"),
    ToolSpec("transfer_to_human_agents", "Transfer the user to a human agent, with a summary of the user's issue. "
             "Only transfer if the user explicitly asks for a human agent, or given the policy and the available "
             "tools, you cannot solve the user's issue.", _obj({"summary": _s("A summary of the user's issue.")}),
             transfer_to_human_agents, "generic"),
    ToolSpec("update_reservation_baggages", "Update the baggage information of a reservation.", _obj({
        "reservation_id": _RES_ID,
        "total_baggages": _i("The updated total number of baggage items included in the reservation.", minimum=0),
        "nonfree_baggages": _i("The updated number of non-free baggage items included in the reservation.",
                               minimum=0),
        "payment_id": _PAYMENT_ID,
    }), update_reservation_baggages, "write"),
    ToolSpec("update_reservation_flights", "Update the flight information of a reservation.", _obj({
        "reservation_id": _RES_ID,
        "cabin": _CABIN,
        "flights": {"type": "array", "items": _FLIGHT_INFO,
                    "description": "An array of objects containing details about each piece of flight in the "
                    "ENTIRE new reservation. Even if the a flight segment is not changed, it should still be "
                    "included in the array."},
        "payment_id": _PAYMENT_ID,
    }), update_reservation_flights, "write"),
    ToolSpec("update_reservation_passengers", "Update the passenger information of a reservation.", _obj({
        "reservation_id": _RES_ID,
        "passengers": {"type": "array", "items": _PASSENGER,
                       "description": "An array of objects containing details about each passenger."},
    }), update_reservation_passengers, "write"),
    ToolSpec("get_flight_status", "Get the status of a flight.", _obj({
        "flight_number": _s("The flight number."), "date": _s("The date of the flight."),
    }), get_flight_status, "read"),
]

#: name -> spec, in τ²'s order.
TOOLS: dict[str, ToolSpec] = {s.name: s for s in _SPECS}


def is_write(name: str) -> bool:
    spec = TOOLS.get(name)
    return spec is not None and spec.kind == "write"


def openai_tools() -> list[dict]:
    """The tool list in OpenAI's ``tools=[...]`` format."""
    return [s.openai() for s in _SPECS]


def _to_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def validate_arguments(name: str, arguments: Any) -> dict:
    """The normalized arguments of a call to ``name``; raises ValueError with a message for the agent."""
    spec = TOOLS.get(name)
    if spec is None:
        raise ValueError(f"unknown tool {name!r}; available tools: {', '.join(TOOLS)}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ValueError(f"the arguments of {name} must be a JSON object, got {type(arguments).__name__}")
    unexpected = sorted(set(arguments) - set(spec.parameters["properties"]))
    if unexpected:
        raise ValueError(f"{name} got unexpected argument(s) {unexpected}")
    return _validate(arguments, spec.parameters, "")


def call_tool(db: EpisodeDB, name: Any, arguments: Any) -> ToolResult:
    """Validate and run one tool call on ``db``; never raises (see the module docstring)."""
    if not isinstance(name, str):
        return ToolResult(str(name), False, f"Error: the tool name must be a string, got {name!r}", "invalid_call")
    try:
        args = validate_arguments(name, arguments)
    except ValueError as e:
        return ToolResult(name, False, f"Error: {e}", "invalid_call")
    try:
        result = TOOLS[name].fn(db, **args)
    except ToolError as e:
        return ToolResult(name, False, f"Error: {e}", "tool_error", args)
    return ToolResult(name, True, _to_text(result), "ok", args)
