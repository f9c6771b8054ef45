"""The airline tools exactly as τ²-bench's (``tau2/domains/airline/tools.py``), their published JSON schemas, and
the one entry point the env uses, :func:`call_tool`.

**Semantics.** :class:`AirlineTools` is a line-by-line transliteration of τ²'s ``AirlineTools`` onto plain dicts in
τ²'s dumped form (:mod:`.models`): the same checks in the same order, the same error texts, the same partial
changes when a check fails midway (a certificate listed twice in one booking is spent, then ``'certificate_..'``
fails), ids matched exactly (``Reservation k1nw8n not found``: τ² neither folds case nor strips spaces), no seat
release on cancellation or flight change, new ids ``HATHAT``/``HATHAU``/``HATHAV`` and ``certificate_3221322``..,
the fixed clock ``2024-05-15T15:00:00``. ``calculate`` is τ²'s, evaluated safely (:mod:`.calculator`).

**What the agent reads** is τ²'s tool message: a string result as is, anything else as
``json.dumps(model_dump(), default=str)`` (so ``50.0`` for a float amount, ``null`` for an unset field, non-ASCII
escaped), and for any failure ``Error: {exception}`` with τ²'s exception text. The call goes through the same
chain as in τ² (``Environment.make_tool_call(name, requestor="assistant", **arguments)`` ->
``AirlineTools.use_tool`` -> the method), so Python itself words the errors of a bad call exactly as it does for
τ²: ``Error: Tool 'think' not found.``, ``Error: AirlineTools.search_direct_flight() missing 1 required positional
argument: 'origin'``, ``Error: AirlineTools.get_user_details() got an unexpected keyword argument 'note'``.

**The one exception** (τ² validates no argument types): a call whose argument breaks τ²'s published schema (a
string where the schema says integer, a boolean, a non-integral number for an integer, a value outside an enum, an
item of ``flights``/``passengers``/``payment_methods`` that is not an object with the model's fields of the
model's types) is refused before the tool runs, with agentgym's own text ``Error: invalid arguments for TOOL:
PATH must be TYPE, got JSONTYPE`` (a :class:`SchemaViolation`). τ² would run such a call on whatever Python makes
of it. The schema's items are ``anyOf [FlightInfo, object]`` (τ²'s ``List[FlightInfo | dict]``); every dict is
turned into a ``FlightInfo`` by τ², so the ``FlightInfo`` branch is what is checked. Extra keys in an item are
ignored, as pydantic ignores them; an integral float (``2.0``) is an integer, as in JSON Schema, and flows on as
in τ² (``send_certificate(amount=50.0)`` says ``with amount 50.0``).

:class:`ToolResult.kind`: ``ok``; ``invalid_call`` for a call that never reached a tool's body (unknown tool,
argument binding, schema); ``tool_error`` for a refusal inside the tool. ``think`` is not one of τ²'s airline tools;
the env offers it only when asked (``think_tool=True``).
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from typing import Any

from . import models
from .calculator import calculate as _calculate
from .db import EpisodeDB

__all__ = ["ToolResult", "ToolSpec", "TOOLS", "THINK", "AirlineTools", "SchemaViolation", "call_tool",
           "openai_tools", "tool_names", "to_json_str", "is_write", "NOW"]

NOW = "2024-05-15T15:00:00"


class SchemaViolation(ValueError):
    """An argument breaks τ²'s published schema (agentgym's own refusal; see the module docstring)."""


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call. ``content`` is τ²'s tool message (the result or ``Error: ...``)."""

    name: str
    ok: bool
    content: str
    kind: str = "ok"  # "ok" | "invalid_call" | "tool_error"
    arguments: dict | None = None  # the arguments as the agent sent them


# ---- the published schemas (τ²'s Tool.openai_schema: pydantic's JSON schema of each method's signature) ---------
@dataclass(frozen=True)
class ToolSpec:
    """One tool: its parameters as ``(name, kind, description)``; kind is ``string``, ``integer``, a tuple of enum
    values (strings), or ``FlightInfo``/``Passenger``/``Payment`` for an array of that model."""

    name: str
    description: str
    params: tuple[tuple[str, Any, str], ...]
    kind: str  # τ²'s ToolType: read | write | generic | think

    def openai(self) -> dict:
        props = {n: _param_schema(n, k, d) for n, k, d in self.params}
        defs = sorted({k for _, k, _ in self.params if isinstance(k, str) and k in _MODELS})
        parameters: dict[str, Any] = {}
        if defs:
            parameters["$defs"] = {m: _model_schema(m) for m in defs}
        parameters["properties"] = props
        if props:
            parameters["required"] = list(props)
        parameters.update({"title": "parameters", "type": "object"})
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": parameters}}


_MODELS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "FlightInfo": (("flight_number", "string", "Flight number, such as 'HAT001'."),
                   ("date", "string", "The date for the flight in the format 'YYYY-MM-DD', such as '2024-05-01'.")),
    "Passenger": (("first_name", "string", "Passenger's first name"),
                  ("last_name", "string", "Passenger's last name"),
                  ("dob", "string", "Date of birth in YYYY-MM-DD format")),
    "Payment": (("payment_id", "string", "Unique identifier for the payment"),
                ("amount", "integer", "Payment amount in dollars")),
}


def _title(name: str) -> str:
    return name.title().replace("_", " ")  # pydantic's default field title


def _param_schema(name: str, kind: Any, desc: str) -> dict:
    if isinstance(kind, tuple):
        return {"description": desc, "enum": list(kind), "title": _title(name), "type": "string"}
    if kind in _MODELS:
        return {"description": desc, "items": {"anyOf": [{"$ref": f"#/$defs/{kind}"},
                                                          {"additionalProperties": True, "type": "object"}]},
                "title": _title(name), "type": "array"}
    return {"description": desc, "title": _title(name), "type": kind}


def _model_schema(model: str) -> dict:
    fields = _MODELS[model]
    return {"properties": {n: {"description": d, "title": _title(n), "type": k} for n, k, d in fields},
            "required": [n for n, _, _ in fields], "title": model, "type": "object"}


_RES_ID = "The reservation ID, such as 'ZFA04Y'."
_PAYMENT_ID = ("The payment id stored in user profile, such as 'credit_card_7815826', 'gift_card_7815826', "
               "'certificate_7815826'.")
_ORIGIN = "The origin city airport in three letters, such as 'JFK'."
_DESTINATION = "The destination city airport in three letters, such as 'LAX'."

_SPECS = (
    ToolSpec("book_reservation", "Book a reservation.", (
        ("user_id", "string", "The ID of the user to book the reservation such as 'sara_doe_496'`."),
        ("origin", "string", "The IATA code for the origin city such as 'SFO'."),
        ("destination", "string", "The IATA code for the destination city such as 'JFK'."),
        ("flight_type", ("round_trip", "one_way"), "The type of flight such as 'one_way' or 'round_trip'."),
        ("cabin", models.CABINS, "The cabin class such as 'basic_economy', 'economy', or 'business'."),
        ("flights", "FlightInfo", "An array of objects containing details about each piece of flight."),
        ("passengers", "Passenger", "An array of objects containing details about each passenger."),
        ("payment_methods", "Payment", "An array of objects containing details about each payment method."),
        ("total_baggages", "integer", "The total number of baggage items to book the reservation."),
        ("nonfree_baggages", "integer", "The number of non-free baggage items to book the reservation."),
        ("insurance", ("yes", "no"), "Whether the reservation has insurance."),
    ), "write"),
    ToolSpec("calculate", "Calculate the result of a mathematical expression.", (
        ("expression", "string", "The mathematical expression to calculate, such as '2 + 2'. The expression can "
                                 "contain numbers, operators (+, -, *, /), parentheses, and spaces."),
    ), "generic"),
    ToolSpec("cancel_reservation", "Cancel the whole reservation.", (("reservation_id", "string", _RES_ID),),
             "write"),
    ToolSpec("get_reservation_details", "Get the details of a reservation.",
             (("reservation_id", "string", "The reservation ID, such as '8JX2WO'."),), "read"),
    ToolSpec("get_user_details", "Get the details of a user, including their reservations.",
             (("user_id", "string", "The user ID, such as 'sara_doe_496'."),), "read"),
    ToolSpec("list_all_airports", "Returns a list of all available airports.", (), "read"),
    ToolSpec("search_direct_flight", "Search for direct flights between two cities on a specific date.", (
        ("origin", "string", _ORIGIN), ("destination", "string", _DESTINATION),
        ("date", "string", "The date of the flight in the format 'YYYY-MM-DD', such as '2024-01-01'."),
    ), "read"),
    ToolSpec("search_onestop_flight", "Search for one-stop flights between two cities on a specific date.", (
        ("origin", "string", _ORIGIN), ("destination", "string", _DESTINATION),
        ("date", "string", "The date of the flight in the format 'YYYY-MM-DD', such as '2024-05-01'."),
    ), "read"),
    ToolSpec("send_certificate", "Send a certificate to a user. Be careful!", (
        ("user_id", "string", "The ID of the user to book the reservation, such as 'sara_doe_496'."),
        ("amount", "integer", "The amount of the certificate to send."),
    ), "write"),
    ToolSpec("transfer_to_human_agents", "Transfer the user to a human agent, with a summary of the user's issue.\n\n"
             "Only transfer if\n -  the user explicitly asks for a human agent\n -  given the policy and the "
             "available tools, you cannot solve the user's issue.",
             (("summary", "string", "A summary of the user's issue."),), "generic"),
    ToolSpec("update_reservation_baggages", "Update the baggage information of a reservation.", (
        ("reservation_id", "string", "The reservation ID, such as 'ZFA04Y'"),
        ("total_baggages", "integer", "The updated total number of baggage items included in the reservation."),
        ("nonfree_baggages", "integer", "The updated number of non-free baggage items included in the reservation."),
        ("payment_id", "string", _PAYMENT_ID),
    ), "write"),
    ToolSpec("update_reservation_flights", "Update the flight information of a reservation.", (
        ("reservation_id", "string", _RES_ID),
        ("cabin", models.CABINS, "The cabin class of the reservation"),
        ("flights", "FlightInfo", "An array of objects containing details about each piece of flight in the ENTIRE "
                                  "new reservation. Even if the a flight segment is not changed, it should still "
                                  "be included in the array."),
        ("payment_id", "string", _PAYMENT_ID),
    ), "write"),
    ToolSpec("update_reservation_passengers", "Update the passenger information of a reservation.", (
        ("reservation_id", "string", _RES_ID),
        ("passengers", "Passenger", "An array of objects containing details about each passenger."),
    ), "write"),
    ToolSpec("get_flight_status", "Get the status of a flight.", (
        ("flight_number", "string", "The flight number."), ("date", "string", "The date of the flight."),
    ), "read"),
)
#: The opt-in think tool (τ²'s airline toolkit has it commented out; its text is kept).
THINK = ToolSpec("think", "Use the tool to think about something.\n\nIt will not obtain new information or change "
                 "the database, but just append the thought to the log.\nUse it when complex reasoning or some "
                 "cache memory is needed.", (("thought", "string", "A thought to think about."),), "think")

#: name -> spec of τ²'s airline tools, in τ²'s order (``think`` excluded).
TOOLS: dict[str, ToolSpec] = {s.name: s for s in _SPECS}


def tool_names(think: bool = False) -> list[str]:
    return [*TOOLS, *(["think"] if think else [])]


def openai_tools(think: bool = False) -> list[dict]:
    """The tool list in OpenAI's ``tools=[...]`` format: τ²'s ``[t.openai_schema for t in env.get_tools()]``,
    plus ``think`` at the end when asked for."""
    return [s.openai() for s in (*_SPECS, *((THINK,) if think else ()))]


def is_write(name: str) -> bool:
    spec = TOOLS.get(name)
    return spec is not None and spec.kind == "write"


# ---- the schema check (agentgym's; see the module docstring) ---------------------------------------------------
def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object" if isinstance(v, dict) else type(v).__name__


def _check_value(tool: str, path: str, kind: Any, v: Any) -> None:
    def bad(expected: str, got: str | None = None) -> SchemaViolation:
        return SchemaViolation(f"invalid arguments for {tool}: {path} must be {expected}, got {got or _json_type(v)}")

    if kind == "string":
        if not isinstance(v, str):
            raise bad("a string")
    elif kind == "integer":
        integral = isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
        if isinstance(v, bool) or not integral:
            raise bad("an integer", f"{v!r}" if isinstance(v, float) else None)
    elif isinstance(kind, tuple):
        if not isinstance(v, str) or v not in kind:
            raise bad(f"one of {list(kind)}", json.dumps(v) if isinstance(v, str) else None)
    else:  # an array of model objects
        if not isinstance(v, list):
            raise bad(f"an array of {kind} objects")
        for i, item in enumerate(v):
            if not isinstance(item, dict):
                raise SchemaViolation(f"invalid arguments for {tool}: {path}[{i}] must be a {kind} object, got "
                                      f"{_json_type(item)}")
            for field, fkind, _ in _MODELS[kind]:
                if field not in item:
                    raise SchemaViolation(f"invalid arguments for {tool}: {path}[{i}] is missing the required "
                                          f"field {field!r}")
                _check_value(tool, f"{path}[{i}].{field}", fkind, item[field])


def check_arguments(name: str, arguments: dict) -> None:
    """Raise :class:`SchemaViolation` when a present argument breaks the published schema."""
    spec = TOOLS[name] if name in TOOLS else THINK
    for pname, kind, _ in spec.params:
        if pname in arguments:
            _check_value(name, pname, kind, arguments[pname])


# ---- τ²'s call chain and tools ------------------------------------------------------------------------------------
class Environment:
    """τ²'s ``Environment.make_tool_call`` -> ``use_tool`` chain, for an assistant request. Kept as a class of that
    name so that Python words a bad call's errors as it does for τ² (``Environment.make_tool_call() got multiple
    values for keyword argument 'requestor'``)."""

    def __init__(self, tools: "AirlineTools"):
        self.tools = tools

    def make_tool_call(self, tool_name: str, requestor: str = "assistant", **kwargs: Any) -> Any:
        return self.use_tool(tool_name=tool_name, **kwargs)

    # A duplicate keyword at the call site is worded with the function's module too (``tau2.environment.environment.
    # Environment.make_tool_call() got multiple values for keyword argument 'requestor'``): name τ²'s.
    make_tool_call.__module__ = "tau2.environment.environment"

    def use_tool(self, tool_name: str, **kwargs: Any) -> Any:
        return self.tools.use_tool(tool_name=tool_name, **kwargs)


class AirlineTools:
    """τ²'s airline toolkit over one episode's :class:`~.db.EpisodeDB` (see the module docstring). Each tool's
    first line runs the schema check; ``entered`` tells whether a call got that far."""

    def __init__(self, db: EpisodeDB, think: bool = False):
        self.db = db
        self.names = tool_names(think)
        self.entered = False

    def use_tool(self, tool_name: str, **kwargs: Any) -> Any:
        if tool_name not in self.names:
            raise ValueError(f"Tool '{tool_name}' not found.")
        return getattr(self, tool_name)(**kwargs)

    def _check(self, name: str, args: dict) -> None:
        check_arguments(name, {k: v for k, v in args.items() if k != "self"})
        self.entered = True

    # ---- τ²'s helpers (reads return the stored record; callers take db.mutable() before changing it) ----------
    def _get_user(self, user_id: str) -> dict:
        if ("users", user_id) not in self.db:
            raise ValueError(f"User {user_id} not found")
        return self.db.peek("users", user_id)

    def _get_reservation(self, reservation_id: str) -> dict:
        if ("reservations", reservation_id) not in self.db:
            raise ValueError(f"Reservation {reservation_id} not found")
        return self.db.peek("reservations", reservation_id)

    def _get_flight(self, flight_number: str) -> dict:
        if ("flights", flight_number) not in self.db:
            raise ValueError(f"Flight {flight_number} not found")
        return self.db.peek("flights", flight_number)

    def _get_flight_instance(self, flight_number: str, date: str) -> dict:
        flight = self._get_flight(flight_number)
        if date not in flight["dates"]:
            raise ValueError(f"Flight {flight_number} not found on date {date}")
        return flight["dates"][date]

    def _get_new_reservation_id(self) -> str:
        for reservation_id in ["HATHAT", "HATHAU", "HATHAV"]:
            if ("reservations", reservation_id) not in self.db:
                return reservation_id
        raise ValueError("Too many reservations")

    def _search_direct_flight(self, date: str, origin: str | None = None, destination: str | None = None,
                              leave_after: str | None = None) -> list[dict]:
        results = []
        for flight in self.db.values("flights"):
            check = ((origin is None or flight["origin"] == origin)
                     and (destination is None or flight["destination"] == destination)
                     and (date in flight["dates"])
                     and (flight["dates"][date]["status"] == "available")
                     and (leave_after is None or flight["scheduled_departure_time_est"] >= leave_after))
            if check:
                results.append(models.direct_flight(flight, flight["dates"][date]))
        return results

    def _payment_for_update(self, user_id: str, payment_id: str, total_price: Any) -> dict | None:
        user = self.db.peek("users", user_id)
        if payment_id not in user["payment_methods"]:
            raise ValueError("Payment method not found")
        payment_method = user["payment_methods"][payment_id]
        if payment_method["source"] == "certificate":
            raise ValueError("Certificate cannot be used to update reservation")
        elif payment_method["source"] == "gift_card" and payment_method["amount"] < total_price:
            raise ValueError("Gift card balance is not enough")
        if payment_method["source"] == "gift_card":
            self.db.mutable("users", user_id)["payment_methods"][payment_id]["amount"] -= total_price
        payment = None
        if total_price != 0:
            payment = models.payment({"payment_id": payment_id, "amount": total_price})
        return payment

    # ---- the tools ------------------------------------------------------------------------------------------
    def book_reservation(self, user_id, origin, destination, flight_type, cabin, flights, passengers,
                         payment_methods, total_baggages, nonfree_baggages, insurance):
        self._check("book_reservation", locals())
        flights = [models.flight_info(f) for f in flights]
        passengers = [models.passenger(p) for p in passengers]
        payment_methods = [models.payment(p) for p in payment_methods]
        user = self._get_user(user_id)
        reservation_id = self._get_new_reservation_id()
        reservation = {"reservation_id": reservation_id, "user_id": user_id, "origin": origin,
                       "destination": destination, "flight_type": flight_type, "cabin": cabin, "flights": [],
                       "passengers": copy.deepcopy(passengers), "payment_history": copy.deepcopy(payment_methods),
                       "created_at": NOW, "total_baggages": models.as_int(total_baggages),
                       "nonfree_baggages": models.as_int(nonfree_baggages), "insurance": insurance, "status": None}
        total_price = 0
        all_flights_date_data: list[tuple[str, str]] = []
        for flight_info in flights:
            flight_number = flight_info["flight_number"]
            flight = self._get_flight(flight_number)
            flight_date_data = self._get_flight_instance(flight_number=flight_number, date=flight_info["date"])
            if flight_date_data["status"] != "available":
                raise ValueError(f"Flight {flight_number} not available on date {flight_info['date']}")
            if flight_date_data["available_seats"][cabin] < len(passengers):
                raise ValueError(f"Not enough seats on flight {flight_number}")
            price = flight_date_data["prices"][cabin]
            reservation["flights"].append(models.reservation_flight(
                flight_number, flight["origin"], flight["destination"], flight_info["date"], price))
            all_flights_date_data.append((flight_number, flight_info["date"]))
            total_price += price * len(passengers)
        if insurance == "yes":
            total_price += 30 * len(passengers)
        total_price += 50 * nonfree_baggages
        for payment_method in payment_methods:
            payment_id = payment_method["payment_id"]
            amount = payment_method["amount"]
            if payment_id not in user["payment_methods"]:
                raise ValueError(f"Payment method {payment_id} not found")
            user_payment_method = user["payment_methods"][payment_id]
            if user_payment_method["source"] in {"gift_card", "certificate"}:
                if user_payment_method["amount"] < amount:
                    raise ValueError(f"Not enough balance in payment method {payment_id}")
        total_payment = sum(payment["amount"] for payment in payment_methods)
        if total_payment != total_price:
            raise ValueError(f"Payment amount does not add up, total price is {total_price}, but paid "
                             f"{total_payment}")
        # Checks passed: deduct (a certificate listed twice is popped, then its second lookup fails, as in τ²).
        user = self.db.mutable("users", user_id)
        for payment_method in payment_methods:
            payment_id = payment_method["payment_id"]
            amount = payment_method["amount"]
            user_payment_method = user["payment_methods"][payment_id]
            if user_payment_method["source"] == "gift_card":
                user_payment_method["amount"] -= amount
            elif user_payment_method["source"] == "certificate":
                user["payment_methods"].pop(payment_id)
        for flight_number, date in all_flights_date_data:
            self.db.mutable("flights", flight_number)["dates"][date]["available_seats"][cabin] -= len(passengers)
        self.db.insert("reservations", reservation_id, reservation)
        user["reservations"].append(reservation_id)
        return reservation

    def calculate(self, expression):
        self._check("calculate", locals())
        return _calculate(expression)

    def cancel_reservation(self, reservation_id):
        self._check("cancel_reservation", locals())
        self._get_reservation(reservation_id)
        reservation = self.db.mutable("reservations", reservation_id)
        refunds = [{"payment_id": p["payment_id"], "amount": -p["amount"]} for p in reservation["payment_history"]]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        # τ² does not release the seats ("Seats release not implemented for cancellation!!!").
        return reservation

    def get_reservation_details(self, reservation_id):
        self._check("get_reservation_details", locals())
        return self._get_reservation(reservation_id)

    def get_user_details(self, user_id):
        self._check("get_user_details", locals())
        return self._get_user(user_id)

    def list_all_airports(self):
        self._check("list_all_airports", locals())
        return [{"iata": iata, "city": city} for iata, city in _AIRPORTS]

    def search_direct_flight(self, origin, destination, date):
        self._check("search_direct_flight", locals())
        return self._search_direct_flight(date=date, origin=origin, destination=destination)

    def search_onestop_flight(self, origin, destination, date):
        self._check("search_onestop_flight", locals())
        results = []
        for result1 in self._search_direct_flight(date=date, origin=origin, destination=None):
            result1["date"] = date
            # τ²'s next day: no zero padding ("2024-05-6"), and int() of the date's last two characters, which
            # fails ("invalid literal for int() ...") when the date does not end in digits.
            date2 = f"2024-05-{int(date[-2:]) + 1}" if "+1" in result1["scheduled_arrival_time_est"] else date
            for result2 in self._search_direct_flight(date=date2, origin=result1["destination"],
                                                      destination=destination,
                                                      leave_after=result1["scheduled_arrival_time_est"]):
                result2["date"] = date2
                results.append([result1, result2])
        return results

    def send_certificate(self, user_id, amount):
        self._check("send_certificate", locals())
        user = self._get_user(user_id)
        for payment_id in [f"certificate_{i}" for i in (3221322, 3221323, 3221324)]:
            if payment_id not in user["payment_methods"]:
                new_payment = models.certificate(payment_id, amount)
                self.db.mutable("users", user_id)["payment_methods"][payment_id] = new_payment
                return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
        raise ValueError("Too many certificates")

    def think(self, thought):
        self._check("think", locals())
        return ""

    def transfer_to_human_agents(self, summary):
        self._check("transfer_to_human_agents", locals())
        return "Transfer successful"

    def update_reservation_baggages(self, reservation_id, total_baggages, nonfree_baggages, payment_id):
        self._check("update_reservation_baggages", locals())
        reservation = self._get_reservation(reservation_id)
        self._get_user(reservation["user_id"])
        total_price = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
        payment = self._payment_for_update(reservation["user_id"], payment_id, total_price)
        reservation = self.db.mutable("reservations", reservation_id)
        if payment is not None:
            reservation["payment_history"].append(payment)
        # Stored as sent, as τ² assigns them (a 2.0 stays a float in its DB and its dumps).
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        return reservation

    def update_reservation_flights(self, reservation_id, cabin, flights, payment_id):
        self._check("update_reservation_flights", locals())
        flights = [models.flight_info(f) for f in flights]
        reservation = self._get_reservation(reservation_id)
        self._get_user(reservation["user_id"])
        n_passengers = len(reservation["passengers"])
        total_price = 0
        reservation_flights = []
        for flight_info in flights:
            matching_reservation_flight = next(
                (rf for rf in reservation["flights"] if rf["flight_number"] == flight_info["flight_number"]
                 and rf["date"] == flight_info["date"] and cabin == reservation["cabin"]), None)
            if matching_reservation_flight:
                total_price += matching_reservation_flight["price"] * n_passengers
                reservation_flights.append(matching_reservation_flight)
                continue
            flight = self._get_flight(flight_info["flight_number"])
            flight_date_data = self._get_flight_instance(flight_number=flight_info["flight_number"],
                                                         date=flight_info["date"])
            if flight_date_data["status"] != "available":
                raise ValueError(f"Flight {flight_info['flight_number']} not available on date {flight_info['date']}")
            if flight_date_data["available_seats"][cabin] < n_passengers:
                raise ValueError(f"Not enough seats on flight {flight_info['flight_number']}")
            reservation_flight = models.reservation_flight(flight_info["flight_number"], flight["origin"],
                                                           flight["destination"], flight_info["date"],
                                                           flight_date_data["prices"][cabin])
            total_price += reservation_flight["price"] * n_passengers
            reservation_flights.append(reservation_flight)
        total_price -= sum(f["price"] for f in reservation["flights"]) * n_passengers
        payment = self._payment_for_update(reservation["user_id"], payment_id, total_price)
        reservation = self.db.mutable("reservations", reservation_id)
        if payment is not None:
            reservation["payment_history"].append(payment)
        reservation["flights"] = copy.deepcopy(reservation_flights)  # kept legs may belong to the shared base
        reservation["cabin"] = cabin
        # τ² leaves the flights' seat counts unchanged here.
        return reservation

    def update_reservation_passengers(self, reservation_id, passengers):
        self._check("update_reservation_passengers", locals())
        passengers = [models.passenger(p) for p in passengers]
        reservation = self._get_reservation(reservation_id)
        if len(passengers) != len(reservation["passengers"]):
            raise ValueError("Number of passengers does not match")
        self.db.mutable("reservations", reservation_id)["passengers"] = copy.deepcopy(passengers)
        return self.db.peek("reservations", reservation_id)

    def get_flight_status(self, flight_number, date):
        self._check("get_flight_status", locals())
        return self._get_flight_instance(flight_number, date)["status"]


_AIRPORTS = (("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"), ("ORD", "Chicago"),
             ("DFW", "Dallas"), ("DEN", "Denver"), ("SEA", "Seattle"), ("ATL", "Atlanta"), ("MIA", "Miami"),
             ("BOS", "Boston"), ("PHX", "Phoenix"), ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"),
             ("EWR", "Newark"), ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"),
             ("PHL", "Philadelphia"), ("LGA", "LaGuardia"))


def to_json_str(result: Any) -> str:
    """τ²'s ``Environment.to_json_str`` for what these tools return (strings as they are; records and lists of
    records already in dumped form)."""
    return result if isinstance(result, str) else json.dumps(result, default=str)


def call_tool(db: EpisodeDB, name: str, arguments: dict, *, think: bool = False) -> ToolResult:
    """Run one call as τ²'s ``Environment.get_response`` does; never raises (see the module docstring).
    ``name`` must be a string and ``arguments`` a dict (a JSON object), as in τ²'s ``ToolCall``; anything else is
    refused with agentgym's protocol error."""
    if not isinstance(name, str) or not isinstance(arguments, dict):
        what = f"the tool name must be a string, got {name!r}" if not isinstance(name, str) else \
            f"the arguments of {name} must be a JSON object, got {type(arguments).__name__}"
        return ToolResult(str(name), False, f"Error: {what}", "invalid_call", None)
    tools = AirlineTools(db, think=think)
    try:
        result = Environment(tools).make_tool_call(name, requestor="assistant", **arguments)
    except SchemaViolation as e:
        return ToolResult(name, False, f"Error: {e}", "invalid_call", arguments)
    except Exception as e:  # noqa: BLE001 - τ² turns every exception of a tool call into its message
        return ToolResult(name, False, f"Error: {e}", "tool_error" if tools.entered else "invalid_call", arguments)
    return ToolResult(name, True, to_json_str(result), "ok", arguments)
