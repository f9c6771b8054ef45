"""Venmo and Splitwise scenarios."""

from __future__ import annotations

import random

from . import PEOPLE, Draft, Scenario, login, register

_WHAT = ["dinner", "concert tickets", "groceries", "rent share", "taxi", "coffee", "movie night", "gas",
         "birthday gift", "utilities", "brunch", "parking", "museum tickets", "pizza"]


def users(app: str, people) -> list[dict]:
    """``<app>.User`` seed records for ``people`` (user ids 2, 3, ... after the supervisor)."""
    out = []
    for p in people:
        rec = {"first_name": p.first_name, "last_name": p.last_name, "password": p.password}
        if app == "phone":
            rec["phone_number"] = p.phone_number
        else:
            rec["email"] = p.email
        if app not in ("phone", "gmail"):
            rec["verified"] = True
        out.append(rec)
    return out


def venmo_world(rng: random.Random, k: int = 5, balance: float = 2000.0):
    """k people on Venmo (user ids 2..k+1), all friends of the supervisor (user 1)."""
    people = rng.sample(PEOPLE, k)
    friends = [r for i in range(2, k + 2) for r in ({"user_id": 1, "friend_id": i}, {"user_id": i, "friend_id": 1})]
    seed = {"venmo.User": [dict(u, venmo_balance=500.0) for u in users("venmo", people)],
            "venmo.Friendship": friends}
    return people, seed, {"venmo": {"venmo_balance": balance}}


def _amount(rng: random.Random) -> float:
    return round(rng.randint(500, 15000) / 100, 2)


def _request(rng: random.Random, n: int) -> Draft:
    people, seed, sup = venmo_world(rng)
    who, amount, what = rng.choice(people), _amount(rng), rng.choice(_WHAT)
    return Draft(
        instruction=f'Request ${amount:.2f} on Venmo from {who.name} for "{what}".',
        solution=[login("venmo"), f"apis.venmo.create_payment_request(user_email={who.email!r}, amount={amount}, "
                  f"description={what!r}, access_token=tokens['venmo'])", "apis.supervisor.complete_task()"],
        # (sends the money instead of asking for it)
        wrong=[login("venmo"), f"apis.venmo.create_transaction(receiver_email={who.email!r}, amount={amount}, "
               f"description={what!r}, access_token=tokens['venmo'])"],
        seed=seed, supervisor_fields=sup, public_data={"email": who.email, "amount": amount, "description": what})


register(Scenario("gvenmoreq", ("venmo",), 1, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("venmo.PaymentRequest")
    other = models.start.venmo.User.find_one(email=public_data.email)
    with test("exactly one payment request was made"):
        test.case(len(added), "==", 1)
        test.case(len(updated) + len(removed), "==", 0)
    with test("from me to the requested person, for the amount and reason"):
        test.case(added[0].sender_id, "==", 1)
        test.case(added[0].receiver_id, "==", other.id)
        test.case(round(added[0].amount, 2), "==", round(public_data.amount, 2))
        test.case(added[0].description.strip(), "==", public_data.description)
    with test("no money moved and nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"venmo.PaymentRequest", "venmo.Notification"})
''', draw=_request))


def _like(rng: random.Random, n: int) -> Draft:
    people, seed, sup = venmo_world(rng)
    who = rng.choice(people)
    who_id = people.index(who) + 2
    txs = []
    for i in range(rng.randint(5, 7)):
        other = who_id if i < 4 or rng.random() < 0.5 else rng.choice([j for j in range(2, 7) if j != who_id])
        sender, receiver = (1, other) if rng.random() < 0.5 else (other, 1)
        txs.append({"sender_id": sender, "receiver_id": receiver, "amount": _amount(rng),
                    "description": rng.choice(_WHAT), "private": False})
    rng.shuffle(txs)
    seed["venmo.Transaction"] = txs
    loop = (f"txs = apis.venmo.show_transactions(user_email={who.email!r}, page_limit=20{{direction}}, "
            "access_token=tokens['venmo'])\nfor tx in txs:\n"
            "    apis.venmo.like_transaction(transaction_id=tx['transaction_id'], access_token=tokens['venmo'])")
    return Draft(
        instruction=f"Like every Venmo transaction between me and {who.name}.",
        solution=[login("venmo"), loop.format(direction=""), "apis.supervisor.complete_task()"],
        wrong=[login("venmo"), loop.format(direction=", direction='sent'")],  # only the ones I sent
        seed=seed, supervisor_fields=sup, public_data={"email": who.email})


register(Scenario("gvenmolike", ("venmo",), 2, "gen-test", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    other = models.start.venmo.User.find_one(email=public_data.email)
    between = {t.id for t in models.start.venmo.Transaction.all()
               if {t.sender_id, t.receiver_id} == {1, other.id}}
    added, updated, removed = models.changed_records("venmo.TransactionLike")
    with test("I liked exactly the transactions between me and that person"):
        test.case({like.transaction_id for like in added}, "==", between)
        test.case({like.user_id for like in added}, "==", {1})
        test.case(len(updated) + len(removed), "==", 0)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "in", [{"venmo.TransactionLike", "venmo.Transaction"},
                                                      {"venmo.TransactionLike", "venmo.Transaction",
                                                       "venmo.Notification"}])
''', draw=_like))


def _approve(rng: random.Random, n: int) -> Draft:
    people, seed, sup = venmo_world(rng)
    who = rng.choice(people)
    who_id = people.index(who) + 2
    others = [j for j in range(2, 7) if j != who_id]
    reqs = [{"sender_id": who_id, "receiver_id": 1, "amount": _amount(rng), "description": rng.choice(_WHAT)}
            for _ in range(rng.randint(3, 5))]
    reqs += [{"sender_id": rng.choice(others), "receiver_id": 1, "amount": _amount(rng),
              "description": rng.choice(_WHAT)} for _ in range(3)]
    reqs.append({"sender_id": who_id, "receiver_id": 1, "amount": _amount(rng), "description": rng.choice(_WHAT),
                 "denied_at": {"$datetime": "2023-05-10T12:00:00"}})
    rng.shuffle(reqs)
    seed["venmo.PaymentRequest"] = reqs
    pending = ("reqs = apis.venmo.show_received_payment_requests(status='pending', page_limit=20, "
               "access_token=tokens['venmo'])\nfor req in reqs:\n")
    return Draft(
        instruction=f"Approve every pending Venmo payment request that {who.name} sent me; leave the others alone.",
        solution=[login("venmo"), pending + f"    if req['sender']['email'] == {who.email!r}:\n"
                  "        apis.venmo.approve_payment_request(payment_request_id=req['payment_request_id'], "
                  "access_token=tokens['venmo'])", "apis.supervisor.complete_task()"],
        wrong=[login("venmo"), pending + "    apis.venmo.approve_payment_request(payment_request_id="
               "req['payment_request_id'], access_token=tokens['venmo'])"],  # approves everybody's
        seed=seed, supervisor_fields=sup, public_data={"email": who.email})


register(Scenario("gvenmoapprove", ("venmo",), 2, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    other = models.start.venmo.User.find_one(email=public_data.email)
    pending = {r.id for r in models.start.venmo.PaymentRequest.all()
               if r.sender_id == other.id and r.receiver_id == 1 and not r.approved_at and not r.denied_at}
    added, updated, removed = models.changed_records("venmo.PaymentRequest")
    with test("exactly that person's pending requests changed, and they are approved"):
        test.case({r.id for r in updated}, "==", pending)
        test.case(all(r.approved_at and not r.denied_at for r in updated), "is", True)
        test.case(len(added) + len(removed), "==", 0)
    with test("one payment to that person per request, for its amount"):
        tx_added = models.changed_records("venmo.Transaction")[0]
        test.case(sorted(round(t.amount, 2) for t in tx_added), "==", sorted(round(r.amount, 2) for r in updated))
        test.case({(t.sender_id, t.receiver_id) for t in tx_added}, "==", {(1, other.id)})
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"venmo.PaymentRequest", "venmo.Transaction", "venmo.User",
                                                         "venmo.Notification"})
''', draw=_approve))


def splitwise_world(rng: random.Random, k: int = 5):
    people = rng.sample(PEOPLE, k)
    return people, {"splitwise.User": users("splitwise", people)}


def _expense(rng: random.Random, n: int) -> Draft:
    people, seed = splitwise_world(rng)
    who, amount, what = rng.choice(people), _amount(rng), rng.choice(_WHAT)
    call = ("apis.splitwise.record_expense(description={what!r}, paid_amount={amount}, payer_email=profile['email'], "
            "debtor_emails={debtors}, access_token=tokens['splitwise'])")
    return Draft(
        instruction=f'Record a ${amount:.2f} expense for "{what}" on Splitwise that I paid, split equally between me '
                    f"and {who.name} (not in a group).",
        solution=[login("splitwise"), call.format(what=what, amount=amount,
                                                  debtors=f"[profile['email'], {who.email!r}]"),
                  "apis.supervisor.complete_task()"],
        wrong=[login("splitwise"), call.format(what=what, amount=amount, debtors=f"[{who.email!r}]")],
        seed=seed, public_data={"email": who.email, "amount": amount, "description": what})


register(Scenario("gsplitexp", ("splitwise",), 1, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("splitwise.Expense")
    other = models.start.splitwise.User.find_one(email=public_data.email)
    with test("exactly one expense was recorded, outside any group"):
        test.case(len(added), "==", 1)
        test.case(len(updated) + len(removed), "==", 0)
        test.case(added[0].group_id, "is", None)
    with test("paid by me, for the amount and description"):
        test.case(added[0].payer_id, "==", 1)
        test.case(round(added[0].amount, 2), "==", round(public_data.amount, 2))
        test.case(added[0].description.strip(), "==", public_data.description)
    with test("split equally between me and that person"):
        shares = models.changed_records("splitwise.ExpenseShare")[0]
        test.case({s.debtor_id: round(s.share_amount, 2) for s in shares}, "==",
                  {1: round(public_data.amount / 2, 2), other.id: round(public_data.amount / 2, 2)})
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"splitwise.Expense", "splitwise.ExpenseShare",
                                                         "splitwise.Notification"})
''', draw=_expense))


def expenses_between(rng: random.Random, me: int, other: int, k: int) -> tuple[list[dict], list[dict], float]:
    """``k`` non-group expenses between the supervisor and ``other`` (user ids), each paid by one of them and owed
    entirely by the other; returns the expenses, their shares, and what the supervisor owes ``other`` net."""
    expenses, shares, owe = [], [], 0.0
    for _ in range(k):
        amount = _amount(rng)
        payer, debtor = (other, me) if rng.random() < 0.6 else (me, other)
        expenses.append({"user_id": payer, "payer_id": payer, "description": rng.choice(_WHAT), "amount": amount,
                         "debtor_ids": [debtor]})
        shares.append({"expense_id": len(expenses), "debtor_id": debtor, "share_amount": amount})
        owe += amount if debtor == me else -amount
    return expenses, shares, round(owe, 2)


def _owe(rng: random.Random, n: int) -> Draft:
    people, seed = splitwise_world(rng)
    who = rng.choice(people)
    who_id = people.index(who) + 2
    while True:
        expenses, shares, owe = expenses_between(rng, 1, who_id, rng.randint(3, 5))
        if owe > 0:
            break
    # Expenses with someone else (not counted) come after.
    third = rng.choice([j for j in range(2, 7) if j != who_id])
    more, more_shares, _ = expenses_between(rng, 1, third, 2)
    for share in more_shares:
        share["expense_id"] += len(expenses)
    seed.update({"splitwise.Expense": expenses + more, "splitwise.ExpenseShare": shares + more_shares})
    return Draft(
        instruction=f"How much do I owe {who.name} in total on Splitwise, in dollars?",
        solution=[login("splitwise"), f"b = apis.splitwise.show_person_balance(email={who.email!r}, "
                  "access_token=tokens['splitwise'])\nprint(b)\n"
                  "apis.supervisor.complete_task(answer=round(b['total'], 2))"],
        # (adds up what they paid, forgetting what I paid for them)
        wrong=[login("splitwise"), "exps = apis.splitwise.show_no_group_expenses(participant_email="
               f"{who.email!r}, page_limit=20, access_token=tokens['splitwise'])\n"
               f"apis.supervisor.complete_task(answer=round(sum(e['amount'] for e in exps if e['payer']['email'] == "
               f"{who.email!r}), 2))"],
        seed=seed, public_data={"email": who.email}, answer=owe)


register(Scenario("gsplitowe", ("splitwise",), 1, "gen-test", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    with test("the answer is right"):
        test.answer(round(float(models.end.supervisor.Task.all()[0].answer), 2), ground_truth_answer)
    with test("nothing changed in any app (collateral damage)"):
        test.case(models.changed_model_names(), "==", set())
''', draw=_owe))
