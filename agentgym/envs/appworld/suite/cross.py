"""Scenarios across apps (levels 2 and 3)."""

from __future__ import annotations

import random

from . import PEOPLE, Draft, Scenario, login, register
from .media import HOME, _FIND_PLAYLIST, _playlists, files_world, spotify_world
from .money import _WHAT, _amount, expenses_between, users
from .notes import _notes
from .social import _MESSAGES, _SUBJECTS, emails, phone_world
from .todo import _TASKS, _world


def _note_to_todo(rng: random.Random, n: int) -> Draft:
    projects, links, tasks = _world(rng, n_projects=3, per_project=(2, 4))
    project = rng.choice(projects)["name"]
    title = rng.choice(["Errands for Saturday", "Before the move", "Party prep", "Weekend chores", "Trip to-dos"])
    items = rng.sample([t for t in _TASKS if t not in {x["title"] for x in tasks}], rng.randint(5, 6))
    notes = _notes(rng, 5)
    notes.append({"user_id": 1, "title": title, "content": "\n".join(items), "tags": ["personal"], "pinned": False})
    rng.shuffle(notes)
    body = (f"found = apis.simple_note.search_notes(query={title!r}, access_token=tokens['simple_note'])\n"
            f"note = [x for x in found if x['title'] == {title!r}][0]\n"
            "content = apis.simple_note.show_note(note_id=note['note_id'], access_token=tokens['simple_note'])"
            "['content']\n"
            "projects = apis.todoist.show_projects(page_limit=20, access_token=tokens['todoist'])\n"
            f"project = [p for p in projects if p['name'] == {project!r}][0]\n"
            "for line in [x.strip() for x in content.splitlines() if x.strip()]{skip}:\n"
            "    apis.todoist.create_task(project_id=project['project_id'], title=line, "
            "access_token=tokens['todoist'])")
    return Draft(
        instruction=f'Add each line of my Simple Note note "{title}" as a task in my Todoist project "{project}".',
        solution=[login("simple_note", "todoist"), body.format(skip=""), "apis.supervisor.complete_task()"],
        wrong=[login("simple_note", "todoist"), body.format(skip="[1:]")],  # takes the first line for a heading
        seed={"simple_note.Note": notes, "todoist.Project": projects, "todoist.ProjectCollaboratorLink": links,
              "todoist.Task": tasks},
        public_data={"project": project, "lines": items})


register(Scenario("xnotetodo", ("simple_note", "todoist"), 3, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    project = models.start.todoist.Project.find_one(user_id=1, name=public_data.project)
    added, updated, removed = models.changed_records("todoist.Task")
    with test("one task per line of the note, all in the project"):
        test.case(sorted(t.title for t in added), "==", sorted(public_data.lines))
        test.case({t.project_id for t in added}, "==", {project.id})
    with test("nothing else changed (collateral damage)"):
        test.case(len(removed), "==", 0)
        for task in updated:  # new tasks shift the project's order: nothing else of an old task may change
            test.case(models.changed_field_names("todoist.Task", task.id), "<=", {"order_index"})
        test.case(models.changed_model_names(), "==", {"todoist.Task"})
''', draw=_note_to_todo))


def _settle(rng: random.Random, n: int) -> Draft:
    people = rng.sample(PEOPLE, 6)
    creditors = list(range(2, 2 + rng.randint(4, 5)))
    expenses, shares = [], []
    for uid in range(2, 8):
        while True:
            e, s, owe = expenses_between(rng, 1, uid, rng.randint(1, 3))
            if (owe > 0) == (uid in creditors) and owe != 0:
                break
        for share in s:
            share["expense_id"] += len(expenses)
        expenses += e
        shares += s
    friends = [r for i in range(2, 8) for r in ({"user_id": 1, "friend_id": i}, {"user_id": i, "friend_id": 1})]
    seed = {"splitwise.User": users("splitwise", people), "splitwise.Expense": expenses,
            "splitwise.ExpenseShare": shares,
            "venmo.User": [dict(u, venmo_balance=100.0) for u in users("venmo", people)],
            "venmo.Friendship": friends}
    loop = ("balance = apis.splitwise.show_people_balance(access_token=tokens['splitwise'])\n"
            "for b in balance['breakdown']:\n{cond}"
            "        apis.venmo.create_transaction(receiver_email=b['email'], amount=round(b['amount'], 2), "
            "description='Splitwise', access_token=tokens['venmo'])\n"
            "        apis.splitwise.record_payment(payer_email=profile['email'], receiver_email=b['email'], "
            "amount=round(b['amount'], 2), access_token=tokens['splitwise'])")
    return Draft(
        instruction='Pay everyone I owe money on Splitwise on Venmo, the exact amount I owe each, with the '
                    'description "Splitwise"; then record each of those payments on Splitwise.',
        solution=[login("splitwise", "venmo"), loop.format(cond="    if b['direction'] == 'you_owe_them':\n"),
                  "apis.supervisor.complete_task()"],
        wrong=[login("splitwise", "venmo"), loop.format(cond="    if True:\n")],  # pays those who owe me too
        seed=seed, supervisor_fields={"venmo": {"venmo_balance": 3000.0}})


register(Scenario("xsplitvenmo", ("splitwise", "venmo"), 3, "gen-test", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    owe = {}
    for e in models.start.splitwise.Expense.all():
        for s in models.start.splitwise.ExpenseShare.find_all(expense_id=e.id):
            if s.debtor_id == 1 and e.payer_id != 1:
                owe[e.payer_id] = owe.get(e.payer_id, 0.0) + s.share_amount
            elif e.payer_id == 1 and s.debtor_id != 1:
                owe[s.debtor_id] = owe.get(s.debtor_id, 0.0) - s.share_amount
    creditors = {}
    for uid, amount in owe.items():
        if round(amount, 2) > 0:
            creditors[models.start.splitwise.User.find_one(id=uid).email] = round(amount, 2)
    venmo_ids = {u.id: u.email for u in models.start.venmo.User.all()}
    sent = models.changed_records("venmo.Transaction")[0]
    with test("one Venmo payment to each person I owe, for the amount, with the description"):
        test.case(sorted((venmo_ids[t.receiver_id], round(t.amount, 2)) for t in sent), "==", sorted(creditors.items()))
        test.case({t.sender_id for t in sent}, "==", {1})
        test.case({t.description for t in sent}, "==", {"Splitwise"})
    recorded = models.changed_records("splitwise.Payment")[0]
    split_ids = {u.id: u.email for u in models.start.splitwise.User.all()}
    with test("each recorded on Splitwise as my payment to them"):
        test.case(sorted((split_ids[p.receiver_id], round(p.amount, 2)) for p in recorded), "==",
                  sorted(creditors.items()))
        test.case({p.payer_id for p in recorded}, "==", {1})
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"venmo.Transaction", "venmo.User", "venmo.Notification",
                                                         "splitwise.Payment", "splitwise.Notification"})
''', draw=_settle))


def _roommates(rng: random.Random, n: int) -> Draft:
    people, seed = phone_world(rng, k=7)
    for i, contact in enumerate(seed["phone.Contact"]):
        contact["relationships"] = ["roommate"] if i < rng.randint(4, 5) else [rng.choice(["friend", "coworker"])]
    friends = [r for i in range(2, 9) for r in ({"user_id": 1, "friend_id": i}, {"user_id": i, "friend_id": 1})]
    seed.update({"venmo.User": users("venmo", people), "venmo.Friendship": friends})
    amount, what = _amount(rng), rng.choice(_WHAT)
    text = "I sent you a Venmo request."
    body = ("contacts = apis.phone.search_contacts({filter}page_limit=20, access_token=tokens['phone'])\n"
            "for c in contacts:\n"
            f"    apis.venmo.create_payment_request(user_email=c['email'], amount={amount}, description={what!r}, "
            "access_token=tokens['venmo'])\n"
            f"    apis.phone.send_text_message(phone_number=c['phone_number'], message={text!r}, "
            "access_token=tokens['phone'])")
    return Draft(
        instruction=f'Request ${amount:.2f} for "{what}" on Venmo from each of my phone contacts whose relationship '
                    f'is roommate, and text each of them "{text}"',
        solution=[login("phone", "venmo"), body.format(filter="relationship='roommate', "),
                  "apis.supervisor.complete_task()"],
        wrong=[login("phone", "venmo"), body.format(filter="")],  # everybody
        seed=seed, public_data={"amount": amount, "description": what, "text": text})


register(Scenario("xphonevenmo", ("phone", "venmo"), 3, "gen-dev", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    roommates = [c for c in models.start.phone.Contact.find_all(user_id=1) if "roommate" in c.relationships]
    venmo_emails = {u.id: u.email for u in models.start.venmo.User.all()}
    phone_numbers = {u.id: u.phone_number for u in models.start.phone.User.all()}
    requests = models.changed_records("venmo.PaymentRequest")[0]
    with test("one Venmo request to each roommate, for the amount and reason"):
        test.case(sorted(venmo_emails[r.receiver_id] for r in requests), "==", sorted(c.email for c in roommates))
        test.case({(r.sender_id, round(r.amount, 2), r.description) for r in requests}, "==",
                  {(1, round(public_data.amount, 2), public_data.description)})
    texts = models.changed_records("phone.GlobalTextMessage")[0]
    with test("one text to each roommate, saying so"):
        test.case(sorted(phone_numbers[t.receiver_id] for t in texts), "==",
                  sorted(c.phone_number for c in roommates))
        test.case({t.message for t in texts}, "==", {public_data.text})
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"venmo.PaymentRequest", "venmo.Notification",
                                                         "phone.GlobalTextMessage", "phone.UserTextMessage"})
''', draw=_roommates))


def _playlist_note(rng: random.Random, n: int) -> Draft:
    _, seed = spotify_world(rng, 3)
    names = _playlists(rng, seed)
    target = rng.choice(names)
    title = f"{target} songs"
    seed["simple_note.Note"] = _notes(rng, 4)
    body = (_FIND_PLAYLIST.format(title=target)
            + "shown = apis.spotify.show_playlist(playlist_id=playlist['playlist_id'], access_token=tokens['spotify'])\n"
            "lines = [s['title'] for s in shown['songs']]{order}\n"
            f"apis.simple_note.create_note(title={title!r}, content='\\n'.join(lines), "
            "access_token=tokens['simple_note'])")
    return Draft(
        instruction=f'Create a Simple Note note titled "{title}" listing the titles of the songs in my Spotify '
                    f'playlist "{target}", one per line, in the playlist\'s order.',
        solution=[login("spotify", "simple_note"), body.format(order=""), "apis.supervisor.complete_task()"],
        wrong=[login("spotify", "simple_note"), body.format(order="[::-1]")],  # reversed
        seed=seed, public_data={"playlist": target, "title": title})


register(Scenario("xspotnote", ("simple_note", "spotify"), 2, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    playlist = models.start.spotify.Playlist.find_one(user_id=1, title=public_data.playlist)
    links = sorted(models.start.spotify.PlaylistSong.find_all(playlist_id=playlist.id), key=lambda x: x.id)
    titles = [models.start.spotify.Song.find_one(id=x.song_id).title for x in links]
    added, updated, removed = models.changed_records("simple_note.Note")
    with test("exactly one note was created, with the title"):
        test.case(len(added), "==", 1)
        test.case(added[0].title, "==", public_data.title)
    with test("its lines are the playlist's song titles, in order"):
        test.case([x.strip() for x in added[0].content.strip().splitlines()], "==", titles)
    with test("nothing else changed (collateral damage)"):
        test.case(len(updated) + len(removed), "==", 0)
        test.case(models.changed_model_names(), "==", {"simple_note.Note"})
''', draw=_playlist_note))


def _mail_to_todo(rng: random.Random, n: int) -> Draft:
    people = rng.sample(PEOPLE, 5)
    projects, links, tasks = _world(rng, n_projects=2, per_project=(2, 3))
    projects.append({"user_id": 1, "name": "Inbox", "is_inbox": True})
    links.append({"project_id": 3, "user_id": 1})
    actions = rng.sample([t for t in _TASKS if t not in {x["title"] for x in tasks}], rng.randint(4, 5))
    items = [(rng.randint(2, 6), [1], f"Action: {a}", "please take care of this") for a in actions]
    decoys = [(rng.randint(2, 6), [1], rng.choice(_SUBJECTS), "fyi") for _ in range(3)]
    old = [(rng.randint(2, 6), [1], f"Action: {t}", "done already")
           for t in rng.sample([t for t in _TASKS if t not in actions], 2)]
    mail = items + decoys + old
    rng.shuffle(mail)
    seed = {"gmail.User": users("gmail", people), **emails(mail), "todoist.Project": projects,
            "todoist.ProjectCollaboratorLink": links, "todoist.Task": tasks}
    read_ones = {i for i, m in enumerate(mail, start=1) if m in old}
    for thread in seed["gmail.UserEmailThread"]:  # the old action emails are read already
        if thread["user_id"] == 1 and thread["global_email_thread_id"] in read_ones:
            thread["read"] = True
    body = ("threads = apis.gmail.show_inbox_threads({read}page_limit=20, access_token=tokens['gmail'])\n"
            "projects = apis.todoist.show_projects(page_limit=20, access_token=tokens['todoist'])\n"
            "inbox = [p for p in projects if p['name'] == 'Inbox'][0]\n"
            "for t in threads:\n    if t['subject'].startswith('Action:'):\n"
            "        apis.todoist.create_task(project_id=inbox['project_id'], title=t['subject'][len('Action:'):]"
            ".strip(), access_token=tokens['todoist'])\n"
            "        apis.gmail.mark_thread_read(email_thread_id=t['email_thread_id'], access_token=tokens['gmail'])")
    return Draft(
        instruction='For each unread email thread in my Gmail inbox whose subject starts with "Action:", add a task '
                    'to my Todoist project "Inbox" titled with the rest of the subject, then mark that thread read.',
        solution=[login("gmail", "todoist"), body.format(read="read=False, "), "apis.supervisor.complete_task()"],
        wrong=[login("gmail", "todoist"), body.format(read="")],  # the read ones too
        seed=seed, public_data={"tasks": sorted(actions)})


register(Scenario("xmailtodo", ("gmail", "todoist"), 3, "gen-test", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    inbox = models.start.todoist.Project.find_one(user_id=1, name="Inbox")
    added, updated, removed = models.changed_records("todoist.Task")
    with test("one task per unread action email, in Inbox, titled without the prefix"):
        test.case(sorted(t.title for t in added), "==", sorted(public_data.tasks))
        test.case({t.project_id for t in added}, "==", {inbox.id})
        test.case(len(updated) + len(removed), "==", 0)
    threads = models.changed_records("gmail.UserEmailThread")[1]
    with test("exactly those threads were marked read"):
        subjects = sorted(models.start.gmail.Email.find_one(id=t.email_ids[0]).subject for t in threads)
        test.case(subjects, "==", sorted("Action: " + t for t in public_data.tasks))
        test.case(all(t.read for t in threads), "is", True)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"todoist.Task", "gmail.UserEmailThread"})
''', draw=_mail_to_todo))


def _family_note(rng: random.Random, n: int) -> Draft:
    people, seed = phone_world(rng, k=8)
    family = rng.sample(range(len(people)), rng.randint(3, 4))
    for i, contact in enumerate(seed["phone.Contact"]):
        contact["relationships"] = ["family"] if i in family else [rng.choice(["friend", "coworker", "neighbor"])]
    seed["simple_note.Note"] = _notes(rng, 3)
    lines = sorted(f"{people[i].name}: {people[i].phone_number}" for i in family)
    body = ("contacts = apis.phone.search_contacts({filter}page_limit=20, access_token=tokens['phone'])\n"
            "lines = sorted(f\"{{c['first_name']}} {{c['last_name']}}: {{c['phone_number']}}\" for c in contacts)\n"
            "apis.simple_note.create_note(title='Family numbers', content='\\n'.join(lines), "
            "access_token=tokens['simple_note'])")
    return Draft(
        instruction='Create a Simple Note note titled "Family numbers" with one line "First Last: phone number" for '
                    "each of my phone contacts whose relationship is family, sorted by name.",
        solution=[login("phone", "simple_note"), body.format(filter="relationship='family', "),
                  "apis.supervisor.complete_task()"],
        wrong=[login("phone", "simple_note"), body.format(filter="")],  # every contact
        seed=seed, public_data={"lines": lines})


register(Scenario("xcontactnote", ("phone", "simple_note"), 2, "gen-dev", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("simple_note.Note")
    with test("exactly one note titled Family numbers was created"):
        test.case(len(added), "==", 1)
        test.case(added[0].title, "==", "Family numbers")
    with test("one line per family contact, sorted"):
        test.case([x.strip() for x in added[0].content.strip().splitlines()], "==", list(public_data.lines))
    with test("nothing else changed (collateral damage)"):
        test.case(len(updated) + len(removed), "==", 0)
        test.case(models.changed_model_names(), "==", {"simple_note.Note"})
''', draw=_family_note))


def _file_mail(rng: random.Random, n: int) -> Draft:
    people = rng.sample(PEOPLE, 4)
    who = rng.choice(people)
    seed = files_world(rng, ["menu.pdf"])
    name = rng.choice(["agenda", "summary", "minutes", "plan"]) + f"-{rng.randint(10, 99)}.txt"
    content = "\n".join(f"{i + 1}. {rng.choice(_MESSAGES)}" for i in range(3))
    seed["file_system.File"].append({"path": HOME + "documents/" + name, "user_id": 1, "content": content})
    seed["gmail.User"] = users("gmail", people)
    subject = rng.choice(_SUBJECTS)
    send = (f"apis.gmail.send_email(email_addresses=[{who.email!r}], subject={subject!r}, body={{body}}, "
            "access_token=tokens['gmail'])")
    read = (f"content = apis.file_system.show_file(file_path='~/documents/{name}', "
            "access_token=tokens['file_system'])['content']\n")
    return Draft(
        instruction=f'Email {who.name} ({who.email}) the content of my file ~/documents/{name} as the body, with the '
                    f'subject "{subject}".',
        solution=[login("file_system", "gmail"), read + send.format(body="content"),
                  "apis.supervisor.complete_task()"],
        wrong=[login("file_system", "gmail"), read + send.format(body="content.splitlines()[0]")],  # first line only
        seed=seed, public_data={"email": who.email, "subject": subject, "content": content})


register(Scenario("xfilemail", ("file_system", "gmail"), 2, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    other = models.start.gmail.User.find_one(email=public_data.email)
    added = models.changed_records("gmail.Email")[0]
    with test("exactly one email, to that person, with the subject"):
        test.case(len(added), "==", 1)
        test.case(list(added[0].recipient_ids), "==", [other.id])
        test.case(added[0].subject, "==", public_data.subject)
    with test("its body is the file's content"):
        test.case(added[0].body.strip(), "==", public_data.content.strip())
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"gmail.Email", "gmail.GlobalEmailThread",
                                                         "gmail.UserEmailThread"})
''', draw=_file_mail))
