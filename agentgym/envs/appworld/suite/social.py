"""Phone and Gmail scenarios."""

from __future__ import annotations

import random

from . import ANSWER_ONLY, PEOPLE, Draft, Scenario, login, register
from .money import users

_MESSAGES = ["Running 10 minutes late", "Dinner at 7?", "Can you call me back?", "Happy birthday!",
             "The package arrived", "See you at the gym", "Thanks for yesterday", "Meeting moved to 3pm",
             "Don't forget the keys", "Tickets are booked"]
_RELATIONS = ["friend", "coworker", "family", "roommate", "neighbor"]
_DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_SUBJECTS = ["Quarterly numbers", "Weekend plans", "Invoice 2231", "Team lunch", "Flight details", "Lease renewal",
             "Photos from the trip", "Book recommendations", "Project kickoff", "Volunteer shift"]


def phone_world(rng: random.Random, k: int = 6, twins: bool = False):
    """k people with phone accounts (user ids 2..k+1) who are all the supervisor's contacts (contact ids 1..k); with
    ``twins``, the last one shares the first one's first name."""
    people = rng.sample(PEOPLE, k)
    if twins:
        t = people[-1]
        people[-1] = type(t)(people[0].first_name, t.last_name, f"{people[0].first_name.lower()}."
                             f"{t.last_name.lower()}@example.com", t.phone_number, t.password)
    contacts = [{"user_id": 1, "first_name": p.first_name, "last_name": p.last_name, "email": p.email,
                 "phone_number": p.phone_number, "relationships": [rng.choice(_RELATIONS)]} for p in people]
    return people, {"phone.User": users("phone", people), "phone.Contact": contacts}


def texts(pairs: list[tuple[int, int, str]]) -> dict:
    """Text messages ``(sender_id, receiver_id, message)`` between phone users, each seen by both of them."""
    return {"phone.GlobalTextMessage": [{"sender_id": s, "receiver_id": r, "message": m} for s, r, m in pairs],
            "phone.UserTextMessage": [{"global_text_message_id": i + 1, "user_id": u}
                                      for i, (s, r, _) in enumerate(pairs) for u in (s, r)]}


def _text(rng: random.Random, n: int) -> Draft:
    people, seed = phone_world(rng, twins=True)
    who = people[0] if rng.random() < 0.5 else people[-1]
    twin = people[-1] if who is people[0] else people[0]
    message = rng.choice(_MESSAGES)
    find = (f"contacts = apis.phone.search_contacts(query={who.first_name!r}, page_limit=20, "
            "access_token=tokens['phone'])\n")
    return Draft(
        instruction=f'Text {who.name} "{message}".',
        solution=[login("phone"), find + f"c = [c for c in contacts if (c['first_name'], c['last_name']) == "
                  f"({who.first_name!r}, {who.last_name!r})][0]\napis.phone.send_text_message(phone_number="
                  f"c['phone_number'], message={message!r}, access_token=tokens['phone'])",
                  "apis.supervisor.complete_task()"],
        # (texts the other contact of that first name)
        wrong=[login("phone"), find + f"c = [c for c in contacts if c['last_name'] == {twin.last_name!r}][0]\n"
               f"apis.phone.send_text_message(phone_number=c['phone_number'], message={message!r}, "
               "access_token=tokens['phone'])"],
        seed=seed, public_data={"phone_number": who.phone_number, "message": message})


register(Scenario("gphonetext", ("phone",), 1, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added = models.changed_records("phone.GlobalTextMessage")[0]
    other = models.start.phone.User.find_one(phone_number=public_data.phone_number)
    with test("exactly one text was sent, by me, to that person"):
        test.case(len(added), "==", 1)
        test.case(added[0].sender_id, "==", 1)
        test.case(added[0].receiver_id, "==", other.id)
    with test("it says the message"):
        test.case(added[0].message.strip(), "==", public_data.message)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"phone.GlobalTextMessage", "phone.UserTextMessage"})
''', draw=_text))


def _alarm(rng: random.Random, n: int) -> Draft:
    people, seed = phone_world(rng, k=3)
    time = f"{rng.randint(5, 9):02d}:{rng.choice([0, 15, 30, 45]):02d}"
    days = sorted(rng.sample(_DAYS, rng.randint(2, 4)), key=_DAYS.index)
    label = rng.choice(["Gym", "Meds", "Standup", "Walk the dog", "School run", "Yoga"])
    call = f"apis.phone.create_alarm(time={time!r}, repeat_days={{days}}, label={label!r}, access_token=tokens['phone'])"
    return Draft(
        instruction=f'Set a phone alarm for {time} labeled "{label}" that repeats every '
                    + ", ".join(d.capitalize() for d in days) + ".",
        solution=[login("phone"), call.format(days=days), "apis.supervisor.complete_task()"],
        wrong=[login("phone"), call.format(days=_DAYS[:5])],  # every weekday instead
        seed=seed, public_data={"time": time, "days": days, "label": label})


register(Scenario("gphonealarm", ("phone",), 1, "gen-test", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("phone.Alarm")
    with test("exactly one alarm was added"):
        test.case(len(added), "==", 1)
        test.case(len(updated) + len(removed), "==", 0)
    with test("at the time, with the label and the days, enabled"):
        test.case(added[0].time, "==", public_data.time)
        test.case(added[0].label, "==", public_data.label)
        test.case(set(added[0].repeat_days), "==", set(public_data.days))
        test.case(added[0].enabled, "is", True)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"phone.Alarm"})
''', draw=_alarm))


def _number(rng: random.Random, n: int) -> Draft:
    people, seed = phone_world(rng)
    who = rng.choice(people)
    other = rng.choice([p for p in people if p is not who])
    find = f"contacts = apis.phone.search_contacts(query={who.name!r}, access_token=tokens['phone'])\n"
    return Draft(
        instruction=f"What is {who.name}'s phone number?",
        solution=[login("phone"), find + f"c = [c for c in contacts if c['last_name'] == {who.last_name!r}][0]\n"
                  "apis.supervisor.complete_task(answer=c['phone_number'])"],
        wrong=[login("phone"), f"contacts = apis.phone.search_contacts(query={other.name!r}, "
               "access_token=tokens['phone'])\napis.supervisor.complete_task(answer=contacts[0]['phone_number'])"],
        seed=seed, public_data={"name": who.name}, answer=who.phone_number)


register(Scenario("gphonenum", ("phone",), 1, "gen-dev", evaluation=ANSWER_ONLY, draw=_number))


def _clean_texts(rng: random.Random, n: int) -> Draft:
    people, seed = phone_world(rng, k=4)
    who_id = rng.randint(2, 5)
    who = people[who_id - 2]
    pairs = [(who_id, 1, rng.choice(_MESSAGES)) for _ in range(rng.randint(3, 5))]
    pairs += [(1, who_id, rng.choice(_MESSAGES)) for _ in range(2)]  # sent to them: kept
    pairs += [(rng.choice([i for i in range(2, 6) if i != who_id]), 1, rng.choice(_MESSAGES)) for _ in range(3)]
    rng.shuffle(pairs)
    seed.update(texts(pairs))
    loop = (f"msgs = apis.phone.search_text_messages(phone_number={who.phone_number!r}, page_limit=20, "
            "access_token=tokens['phone'])\nfor m in msgs:\n")
    return Draft(
        instruction=f"Delete every text message {who.name} sent me; keep the ones I sent them.",
        solution=[login("phone"), loop + f"    if m['sender']['phone_number'] == {who.phone_number!r}:\n"
                  "        apis.phone.delete_text_message(text_message_id=m['text_message_id'], "
                  "access_token=tokens['phone'])", "apis.supervisor.complete_task()"],
        wrong=[login("phone"), loop + "    apis.phone.delete_text_message(text_message_id=m['text_message_id'], "
               "access_token=tokens['phone'])"],  # the whole conversation
        seed=seed, public_data={"phone_number": who.phone_number})


register(Scenario("gphoneclean", ("phone",), 2, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    other = models.start.phone.User.find_one(phone_number=public_data.phone_number)
    from_them = {m.id for m in models.start.phone.GlobalTextMessage.all()
                 if m.sender_id == other.id and m.receiver_id == 1}
    removed = models.changed_records("phone.UserTextMessage")[2]
    with test("my copies of exactly their texts to me were deleted"):
        test.case({u.global_text_message_id for u in removed}, "==", from_them)
        test.case({u.user_id for u in removed}, "==", {1})
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"phone.UserTextMessage"})
''', draw=_clean_texts))


def gmail_world(rng: random.Random, k: int = 5):
    people = rng.sample(PEOPLE, k)
    return people, {"gmail.User": users("gmail", people)}


def emails(items: list[tuple[int, list[int], str, str]]) -> dict:
    """Emails ``(sender_id, recipient_ids, subject, body)``, each a thread of its own seen by every participant;
    the supervisor's threads are unread."""
    seed = {"gmail.Email": [], "gmail.GlobalEmailThread": [], "gmail.UserEmailThread": []}
    for i, (sender, recipients, subject, body) in enumerate(items, start=1):
        seed["gmail.Email"].append({"sender_id": sender, "recipient_ids": recipients, "subject": subject,
                                    "body": body})
        seed["gmail.GlobalEmailThread"].append({"email_ids": [i]})
        for user in [sender, *recipients]:
            seed["gmail.UserEmailThread"].append({"global_email_thread_id": i, "user_id": user, "email_ids": [i],
                                                  "incoming": user != sender, "outgoing": user == sender,
                                                  "read": user == sender})
    return seed


def _send(rng: random.Random, n: int) -> Draft:
    people, seed = gmail_world(rng)
    who, other = rng.sample(people, 2)
    subject = rng.choice(_SUBJECTS)
    body = f"Hi {who.first_name}, {rng.choice(_MESSAGES).lower()}. Best, Morgan"
    call = ("apis.gmail.send_email(email_addresses=[{to!r}], subject={subject!r}, body={body!r}, "
            "access_token=tokens['gmail'])")
    return Draft(
        instruction=f'Email {who.name} ({who.email}) with the subject "{subject}" and the body "{body}".',
        solution=[login("gmail"), call.format(to=who.email, subject=subject, body=body),
                  "apis.supervisor.complete_task()"],
        wrong=[login("gmail"), call.format(to=who.email, subject=subject, body=body.split(",")[0])],  # cut short
        seed=seed, public_data={"email": who.email, "subject": subject, "body": body})


register(Scenario("gmailsend", ("gmail",), 1, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added = models.changed_records("gmail.Email")[0]
    other = models.start.gmail.User.find_one(email=public_data.email)
    with test("exactly one email was sent, by me, to that person only"):
        test.case(len(added), "==", 1)
        test.case(added[0].sender_id, "==", 1)
        test.case(list(added[0].recipient_ids), "==", [other.id])
    with test("with the subject and the body"):
        test.case(added[0].subject.strip(), "==", public_data.subject)
        test.case(added[0].body.strip(), "==", public_data.body)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"gmail.Email", "gmail.GlobalEmailThread",
                                                         "gmail.UserEmailThread"})
''', draw=_send))


def _star(rng: random.Random, n: int) -> Draft:
    people, seed = gmail_world(rng)
    who_id = rng.randint(2, 6)
    who = people[who_id - 2]
    items = [(who_id, [1], rng.choice(_SUBJECTS), "see attached") for _ in range(rng.randint(3, 5))]
    items += [(rng.choice([i for i in range(2, 7) if i != who_id]), [1], rng.choice(_SUBJECTS), "hello")
              for _ in range(3)]
    items += [(1, [who_id], rng.choice(_SUBJECTS), "from me")]  # sent by me: not in my inbox's "from" them
    rng.shuffle(items)
    seed.update(emails(items))
    loop = (f"threads = apis.gmail.show_inbox_threads(from_email={who.email!r}, page_limit={{limit}}, "
            "access_token=tokens['gmail'])\nfor t in threads:\n"
            "    apis.gmail.mark_thread_starred(email_thread_id=t['email_thread_id'], access_token=tokens['gmail'])")
    return Draft(
        instruction=f"Star every email thread in my Gmail inbox from {who.name}.",
        solution=[login("gmail"), loop.format(limit=20), "apis.supervisor.complete_task()"],
        wrong=[login("gmail"), loop.format(limit=2)],  # forgets that results come in pages
        seed=seed, public_data={"email": who.email})


register(Scenario("gmailstar", ("gmail",), 2, "gen-test", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    other = models.start.gmail.User.find_one(email=public_data.email)
    from_them = set()
    for thread in models.start.gmail.UserEmailThread.find_all(user_id=1):
        senders = {models.start.gmail.Email.find_one(id=i).sender_id for i in thread.email_ids}
        if other.id in senders:
            from_them.add(thread.id)
    added, updated, removed = models.changed_records("gmail.UserEmailThread")
    with test("exactly my threads from that person changed, and they are starred"):
        test.case({t.id for t in updated}, "==", from_them)
        test.case(all(t.starred for t in updated), "is", True)
        test.case(len(added) + len(removed), "==", 0)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"gmail.UserEmailThread"})
''', draw=_star))
