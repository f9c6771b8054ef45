"""τ²'s airline data model (``tau2/domains/airline/data_model.py``) as the plain dicts its pydantic models dump to.

τ² keeps the database as pydantic objects; what an agent reads is their ``model_dump()`` and the DB-hash check
hashes the same dump. agentgym keeps plain dicts, already in that dumped form: each record has the model's fields
in the model's order, ``null`` for an absent optional field and the model's number types (a gift card's or
certificate's ``amount`` is a float, ``100.0``). So a tool result is ``json.dumps`` of a record, byte for byte
τ²'s, and two databases are equal for τ² exactly when their records are equal here.

:func:`normalize_db` is the one place where the stored ``db.json`` is mapped to that form (in ``db.json``,
reservations have no ``status`` key and flight legs list their keys in another order; τ²'s loader fills and
reorders them the same way). The record constructors below (:func:`passenger`, :func:`payment`...) are the
pydantic models' constructors for arguments the agent passes: declared fields only, extra keys dropped, an
integral float accepted for an ``int`` field (pydantic's lax mode), as τ² builds its models from those arguments.
"""

from __future__ import annotations

from typing import Any

__all__ = ["normalize_db", "user", "reservation", "flight", "payment_method", "passenger", "payment", "flight_info",
           "reservation_flight", "direct_flight", "certificate", "as_int", "CABINS", "PAYMENT_METHOD_FIELDS",
           "FLIGHT_DATE_FIELDS"]

#: ``CabinClass`` in τ²'s order (its published schema lists the enum in this order).
CABINS = ("business", "economy", "basic_economy")

#: The field order of each payment method model, by ``source`` (CreditCard, GiftCard, Certificate).
PAYMENT_METHOD_FIELDS = {"credit_card": ("source", "id", "brand", "last_four"),
                         "gift_card": ("source", "id", "amount"),
                         "certificate": ("source", "id", "amount")}
#: The field order of each ``FlightDateStatus`` model, by ``status``.
FLIGHT_DATE_FIELDS = {"available": ("status", "available_seats", "prices"),
                      "landed": ("status", "actual_departure_time_est", "actual_arrival_time_est"),
                      "cancelled": ("status",),
                      "delayed": ("status", "estimated_departure_time_est", "estimated_arrival_time_est"),
                      "flying": ("status", "actual_departure_time_est", "estimated_arrival_time_est"),
                      "on time": ("status", "estimated_departure_time_est", "estimated_arrival_time_est")}
_ADDRESS = ("address1", "address2", "city", "country", "state", "zip")


def as_int(value: Any) -> Any:
    """A pydantic ``int`` field's lax conversion of a JSON number the schema accepts: ``2.0`` -> ``2``."""
    return int(value) if isinstance(value, float) else value


# ---- records built from the agent's arguments (the schema has already checked the types) ----------------------
def passenger(d: dict) -> dict:
    return {"first_name": d["first_name"], "last_name": d["last_name"], "dob": d["dob"]}


def payment(d: dict) -> dict:
    return {"payment_id": d["payment_id"], "amount": as_int(d["amount"])}


def flight_info(d: dict) -> dict:
    return {"flight_number": d["flight_number"], "date": d["date"]}


def reservation_flight(flight_number: str, origin: str, destination: str, date: str, price: int) -> dict:
    return {"flight_number": flight_number, "origin": origin, "destination": destination, "date": date,
            "price": price}


def direct_flight(f: dict, d: dict) -> dict:
    """τ²'s ``DirectFlight`` for flight ``f`` on a date whose record is ``d`` (``date`` unset: None)."""
    return {"flight_number": f["flight_number"], "origin": f["origin"], "destination": f["destination"],
            "status": "available", "scheduled_departure_time_est": f["scheduled_departure_time_est"],
            "scheduled_arrival_time_est": f["scheduled_arrival_time_est"], "date": None,
            "available_seats": dict(d["available_seats"]), "prices": dict(d["prices"])}


def certificate(cid: str, amount: Any) -> dict:
    # A float field: pydantic turns the int the agent sent into a float (50 -> 50.0).
    return {"source": "certificate", "id": cid, "amount": float(amount)}


# ---- the stored database -> τ²'s dumped form ---------------------------------------------------------------------
def payment_method(d: dict) -> dict:
    out = {k: d[k] for k in PAYMENT_METHOD_FIELDS[d["source"]]}
    if "amount" in out:
        out["amount"] = float(out["amount"])
    return out


def user(d: dict) -> dict:
    return {"user_id": d["user_id"], "name": {"first_name": d["name"]["first_name"],
                                              "last_name": d["name"]["last_name"]},
            "address": {k: d["address"].get(k) for k in _ADDRESS}, "email": d["email"], "dob": d["dob"],
            "payment_methods": {k: payment_method(v) for k, v in d["payment_methods"].items()},
            "saved_passengers": [passenger(p) for p in d["saved_passengers"]], "membership": d["membership"],
            "reservations": list(d["reservations"])}


def reservation(d: dict) -> dict:
    return {"reservation_id": d["reservation_id"], "user_id": d["user_id"], "origin": d["origin"],
            "destination": d["destination"], "flight_type": d["flight_type"], "cabin": d["cabin"],
            "flights": [reservation_flight(f["flight_number"], f["origin"], f["destination"], f["date"],
                                           f["price"]) for f in d["flights"]],
            "passengers": [passenger(p) for p in d["passengers"]],
            "payment_history": [payment(p) for p in d["payment_history"]], "created_at": d["created_at"],
            "total_baggages": d["total_baggages"], "nonfree_baggages": d["nonfree_baggages"],
            "insurance": d["insurance"], "status": d.get("status")}


def _flight_date(d: dict) -> dict:
    out = {k: d[k] for k in FLIGHT_DATE_FIELDS[d["status"]]}
    for k in ("available_seats", "prices"):
        if k in out:
            out[k] = dict(out[k])
    return out


def flight(d: dict) -> dict:
    return {"flight_number": d["flight_number"], "origin": d["origin"], "destination": d["destination"],
            "scheduled_departure_time_est": d["scheduled_departure_time_est"],
            "scheduled_arrival_time_est": d["scheduled_arrival_time_est"],
            "dates": {k: _flight_date(v) for k, v in d["dates"].items()}}


def normalize_db(raw: dict) -> dict[str, dict[str, Any]]:
    """``db.json`` as τ²'s ``FlightDB.load(path).model_dump()`` gives it: every record in its model's dumped form
    (the one documented mapping between the stored file and what the tools and the DB check see)."""
    return {"flights": {k: flight(v) for k, v in raw["flights"].items()},
            "users": {k: user(v) for k, v in raw["users"].items()},
            "reservations": {k: reservation(v) for k, v in raw["reservations"].items()}}
