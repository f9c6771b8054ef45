"""Simple Note scenarios."""

from __future__ import annotations

import random

from . import ANSWER_ONLY, Draft, Scenario, login, register

_TITLES = ["Grocery run", "Book club picks", "Trip to Lisbon", "Team offsite", "Garden plan", "Tax documents",
           "Birthday ideas", "Piano practice", "Marathon training", "Wedding checklist", "Car service", "Podcast list",
           "Bike repairs", "Movie night", "Meal prep", "Reading list", "Gift budget", "Conference notes",
           "Kitchen remodel", "Camping gear", "Language lessons", "Recipe swaps", "Dentist follow-up", "Home insurance"]
_TAGS = ["personal", "work", "travel", "finance", "health", "family", "ideas", "shopping", "home", "hobby"]
_WORDS = ["remember", "check", "call", "buy", "book", "plan", "review", "ask", "send", "pack", "fix", "try"]


def _content(rng: random.Random) -> str:
    return "\n".join(f"{rng.choice(_WORDS)} {rng.choice(_WORDS)} {rng.randint(1, 99)}" for _ in range(rng.randint(1, 3)))


def _notes(rng: random.Random, k: int, titles: list[str] | None = None) -> list[dict]:
    titles = titles or rng.sample(_TITLES, k)
    return [{"user_id": 1, "title": t, "content": _content(rng), "tags": sorted(rng.sample(_TAGS, rng.randint(1, 2))),
             "pinned": False} for t in titles]


_NOTE_CHANGED_ONLY = '''
    with test("no other model changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"simple_note.Note"})
'''


def _tag(rng: random.Random, n: int) -> Draft:
    notes = _notes(rng, 7)
    target = rng.choice(notes)
    tag = rng.choice([t for t in _TAGS if t not in target["tags"]])
    find = (f"notes = apis.simple_note.search_notes(query={target['title']!r}, page_limit=20, "
            "access_token=tokens['simple_note'])\n"
            f"note = [x for x in notes if x['title'] == {target['title']!r}][0]")
    return Draft(
        instruction=f'Add the tag "{tag}" to my Simple Note note titled "{target["title"]}"; keep its other tags.',
        solution=[login("simple_note"), find + f"\napis.simple_note.update_note(note_id=note['note_id'], "
                  f"tags=note['tags'] + [{tag!r}], access_token=tokens['simple_note'])",
                  "apis.supervisor.complete_task()"],
        wrong=[login("simple_note"), find + f"\napis.simple_note.update_note(note_id=note['note_id'], tags=[{tag!r}], "
               "access_token=tokens['simple_note'])"],
        seed={"simple_note.Note": notes}, public_data={"title": target["title"], "tag": tag})


register(Scenario("gnotetag", ("simple_note",), 1, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("simple_note.Note")
    with test("exactly one note was changed, none added or removed"):
        test.case(len(updated), "==", 1)
        test.case(len(added) + len(removed), "==", 0)
    with test("it is the requested note, with the new tag and its old ones"):
        before = models.start.simple_note.Note.find_one(id=updated[0].id)
        test.case(updated[0].title, "==", public_data.title)
        test.case(set(updated[0].tags), "==", set(before.tags) | {public_data.tag})
''' + _NOTE_CHANGED_ONLY, draw=_tag))


def _pin(rng: random.Random, n: int) -> Draft:
    notes = _notes(rng, 7)
    target = rng.choice(notes[1:])
    find = (f"notes = apis.simple_note.search_notes(query={target['title']!r}, page_limit=20, "
            "access_token=tokens['simple_note'])\n"
            f"note = [x for x in notes if x['title'] == {target['title']!r}][0]")
    return Draft(
        instruction=f'Pin my Simple Note note titled "{target["title"]}".',
        solution=[login("simple_note"), find + "\napis.simple_note.update_note(note_id=note['note_id'], pinned=True, "
                  "access_token=tokens['simple_note'])", "apis.supervisor.complete_task()"],
        # (searches for the title's first word and pins the first hit that is another note)
        wrong=[login("simple_note"), f"notes = apis.simple_note.search_notes(query={target['title'].split()[0]!r}, "
               "page_limit=20, access_token=tokens['simple_note'])\n"
               f"note = [x for x in notes if x['title'] != {target['title']!r}][0]\n"
               "apis.simple_note.update_note(note_id=note['note_id'], pinned=True, access_token=tokens['simple_note'])"],
        seed={"simple_note.Note": notes}, public_data={"title": target["title"]})


register(Scenario("gnotepin", ("simple_note",), 1, "gen-test", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("simple_note.Note")
    with test("exactly one note was changed, none added or removed"):
        test.case(len(updated), "==", 1)
        test.case(len(added) + len(removed), "==", 0)
    with test("the requested note is pinned"):
        test.case(updated[0].title, "==", public_data.title)
        test.case(updated[0].pinned, "is", True)
''' + _NOTE_CHANGED_ONLY, draw=_pin))


def _last(rng: random.Random, n: int) -> Draft:
    tag = rng.choice(_TAGS)
    notes = _notes(rng, 8)
    tagged = rng.sample(range(len(notes)), 3)
    for i in tagged:
        notes[i]["tags"] = sorted(set(notes[i]["tags"]) | {tag})
    for i, note in enumerate(notes):  # distinct update times, none tagged later than the answer by chance
        note["updated_at"] = {"$datetime": f"2023-05-{1 + i:02d}T09:00:00"}
        note["created_at"] = {"$datetime": f"2023-04-{1 + i:02d}T09:00:00"}
        if i not in tagged and tag in note["tags"]:
            note["tags"].remove(tag)
            note["tags"] = note["tags"] or [rng.choice([t for t in _TAGS if t != tag])]
    answer = notes[max(tagged)]["title"]
    return Draft(
        instruction=f'What is the title of my most recently updated Simple Note note tagged "{tag}"?',
        solution=[login("simple_note"), f"notes = apis.simple_note.search_notes(tags=[{tag!r}], "
                  "sort_by='-updated_at', page_limit=20, access_token=tokens['simple_note'])\n"
                  "apis.supervisor.complete_task(answer=notes[0]['title'])"],
        wrong=[login("simple_note"), f"notes = apis.simple_note.search_notes(tags=[{tag!r}], "
               "sort_by='updated_at', page_limit=20, access_token=tokens['simple_note'])\n"
               "apis.supervisor.complete_task(answer=notes[0]['title'])"],
        seed={"simple_note.Note": notes}, public_data={"tag": tag}, answer=answer)


register(Scenario("gnotelast", ("simple_note",), 1, "gen-dev", evaluation=ANSWER_ONLY, draw=_last))


def _clean(rng: random.Random, n: int) -> Draft:
    tag = rng.choice(_TAGS)
    notes = _notes(rng, 9)
    for note in notes:
        note["tags"] = [t for t in note["tags"] if t != tag] or [rng.choice([t for t in _TAGS if t != tag])]
    doomed = rng.sample(range(len(notes)), rng.randint(3, 5))
    for i in doomed:
        notes[i]["tags"] = sorted(set(notes[i]["tags"]) | {tag})
    search = (f"notes = apis.simple_note.search_notes(tags=[{tag!r}], page_limit={{limit}}, "
              "access_token=tokens['simple_note'])\nfor note in notes:\n"
              "    apis.simple_note.delete_note(note_id=note['note_id'], access_token=tokens['simple_note'])")
    return Draft(
        instruction=f'Delete every Simple Note note of mine tagged "{tag}".',
        solution=[login("simple_note"), search.format(limit=20), "apis.supervisor.complete_task()"],
        wrong=[login("simple_note"), search.format(limit=2)],  # forgets that results come in pages
        seed={"simple_note.Note": notes}, public_data={"tag": tag})


register(Scenario("gnoteclean", ("simple_note",), 2, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("simple_note.Note")
    tagged = {note.id for note in models.start.simple_note.Note.all() if public_data.tag in note.tags}
    with test("every note with the tag was deleted"):
        test.case({note.id for note in removed}, "==", tagged)
    with test("no other note was changed or added"):
        test.case(len(added) + len(updated), "==", 0)
''' + _NOTE_CHANGED_ONLY, draw=_clean))


def _append(rng: random.Random, n: int) -> Draft:
    tag = rng.choice(_TAGS)
    line = f"{rng.choice(['Reviewed', 'Checked', 'Updated', 'Archived'])} on May {rng.randint(1, 17)}"
    notes = _notes(rng, 9)
    for note in notes:
        note["tags"] = [t for t in note["tags"] if t != tag] or [rng.choice([t for t in _TAGS if t != tag])]
    chosen = rng.sample(range(len(notes)), rng.randint(3, 5))
    for i in chosen:
        notes[i]["tags"] = sorted(set(notes[i]["tags"]) | {tag})
    loop = (f"notes = apis.simple_note.search_notes(tags=[{tag!r}], page_limit=20, access_token=tokens['simple_note'])"
            "\nfor note in notes:\n")
    return Draft(
        instruction=f'Add the line "{line}" at the end of every Simple Note note of mine tagged "{tag}".',
        solution=[login("simple_note"), loop + "    apis.simple_note.add_content_to_note(note_id=note['note_id'], "
                  f"append_or_prepend='append', added_content={line!r}, access_token=tokens['simple_note'])",
                  "apis.supervisor.complete_task()"],
        wrong=[login("simple_note"), loop + "    apis.simple_note.add_content_to_note(note_id=note['note_id'], "
               f"append_or_prepend='prepend', added_content={line!r}, access_token=tokens['simple_note'])"],
        seed={"simple_note.Note": notes}, public_data={"tag": tag, "line": line})


register(Scenario("gnoteappend", ("simple_note",), 2, "gen-dev", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("simple_note.Note")
    tagged = {note.id: note for note in models.start.simple_note.Note.all() if public_data.tag in note.tags}
    with test("exactly the notes with the tag were changed, none added or removed"):
        test.case({note.id for note in updated}, "==", set(tagged))
        test.case(len(added) + len(removed), "==", 0)
    with test("each ends with the line, after its old content"):
        for note in updated:
            test.case(note.content.rstrip("\\n").endswith(public_data.line), "is", True)
            test.case(note.content.startswith(tagged[note.id].content), "is", True)
''' + _NOTE_CHANGED_ONLY, draw=_append))
