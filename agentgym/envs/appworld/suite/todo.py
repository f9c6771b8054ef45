"""Todoist scenarios."""

from __future__ import annotations

import random

from . import ANSWER_ONLY, Draft, Scenario, login, register

_PROJECTS = ["Home", "Work", "Garden", "Errands", "Fitness", "Side project", "Travel", "Finances", "Kitchen", "School"]
_TASKS = ["Fix the shelf", "Clean the oven", "Call the landlord", "Write the report", "Review the budget",
          "Water the roses", "Buy compost", "Trim the hedge", "Book flights", "Renew passport", "Pay rent",
          "Order printer ink", "Email the dentist", "Plan the menu", "Sort the mail", "Back up photos",
          "Replace bulbs", "Wash the car", "Donate clothes", "Update resume", "Pack lunch", "Return library books",
          "Schedule checkup", "Defrost freezer", "Repot the fern", "File receipts", "Charge the drill",
          "Sharpen knives", "Mend the jacket", "Test smoke alarms"]
_PRIORITIES = ["low", "medium", "high"]


def _world(rng: random.Random, n_projects: int = 3, per_project: tuple[int, int] = (4, 6)) -> tuple[list, list, list]:
    """Projects (ids 1..), their collaborator links, and tasks with distinct titles."""
    names = rng.sample(_PROJECTS, n_projects)
    titles = iter(rng.sample(_TASKS, n_projects * per_project[1]))
    projects = [{"user_id": 1, "name": name} for name in names]
    links = [{"project_id": i + 1, "user_id": 1} for i in range(n_projects)]
    tasks = []
    for p in range(1, n_projects + 1):
        for k in range(rng.randint(*per_project)):
            tasks.append({"project_id": p, "user_id": 1, "title": next(titles), "order_index": k + 1,
                          "priority": rng.choice(_PRIORITIES), "is_completed": rng.random() < 0.3})
    return projects, links, tasks


def _find_project(name: str) -> str:
    return (f"projects = apis.todoist.show_projects(page_limit=20, access_token=tokens['todoist'])\n"
            f"project = [p for p in projects if p['name'] == {name!r}][0]\n"
            "shown = apis.todoist.show_tasks(project_id=project['project_id'], access_token=tokens['todoist'])\n"
            "tasks = shown['no_section_tasks'] + [t for s in shown['sections'] for t in s['tasks']]")


_TASK_CHANGED_ONLY = '''
    with test("no other model changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"todoist.Task"})
'''


def _done(rng: random.Random, n: int) -> Draft:
    projects, links, tasks = _world(rng)
    open_tasks = [t for t in tasks if not t["is_completed"]] or tasks[:1]
    target = rng.choice(open_tasks)
    target["is_completed"] = False
    project = projects[target["project_id"] - 1]["name"]
    return Draft(
        instruction=f'Mark my Todoist task "{target["title"]}" in the project "{project}" as completed.',
        solution=[login("todoist"), _find_project(project) + f"\ntask = [t for t in tasks if t['title'] == "
                  f"{target['title']!r}][0]\napis.todoist.update_task(task_id=task['task_id'], is_completed=True, "
                  "access_token=tokens['todoist'])", "apis.supervisor.complete_task()"],
        # (completes the project's first open task instead of looking the title up)
        wrong=[login("todoist"), _find_project(project) + "\ntask = [t for t in tasks if not t['is_completed'] and "
               f"t['title'] != {target['title']!r}][0]\napis.todoist.update_task(task_id=task['task_id'], "
               "is_completed=True, access_token=tokens['todoist'])"],
        seed={"todoist.Project": projects, "todoist.ProjectCollaboratorLink": links, "todoist.Task": tasks},
        public_data={"title": target["title"], "project": project})


register(Scenario("gtododone", ("todoist",), 1, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("todoist.Task")
    with test("exactly one task was changed, none added or removed"):
        test.case(len(updated), "==", 1)
        test.case(len(added) + len(removed), "==", 0)
    with test("the requested task is completed"):
        test.case(updated[0].title, "==", public_data.title)
        test.case(updated[0].is_completed, "is", True)
''' + _TASK_CHANGED_ONLY, draw=_done))


def _high_count(rng: random.Random, n: int) -> Draft:
    projects, links, tasks = _world(rng, per_project=(5, 7))
    p = rng.randint(1, len(projects))
    answer = sum(1 for t in tasks if t["project_id"] == p and t["priority"] == "high" and not t["is_completed"])
    loop = _find_project(projects[p - 1]["name"])
    return Draft(
        instruction=f'How many high-priority tasks in my Todoist project "{projects[p - 1]["name"]}" are still open?',
        solution=[login("todoist"), loop + "\napis.supervisor.complete_task(answer=len([t for t in tasks if "
                  "t['priority'] == 'high' and not t['is_completed']]))"],
        wrong=[login("todoist"), loop + "\napis.supervisor.complete_task(answer=len([t for t in tasks if "
               "t['priority'] == 'high']) + 1)"],
        seed={"todoist.Project": projects, "todoist.ProjectCollaboratorLink": links, "todoist.Task": tasks},
        public_data={"project": projects[p - 1]["name"]}, answer=answer)


register(Scenario("gtodohigh", ("todoist",), 1, "gen-train", evaluation=ANSWER_ONLY, draw=_high_count))


def _prio(rng: random.Random, n: int) -> Draft:
    projects, links, tasks = _world(rng, per_project=(6, 8))
    p = rng.randint(1, len(projects))
    mine = [t for t in tasks if t["project_id"] == p]
    for t in mine:
        t["priority"] = rng.choice(["low", "medium"])
        t["is_completed"] = False
    for t in rng.sample(mine, 2):
        t["is_completed"] = True
    loop = _find_project(projects[p - 1]["name"]) + "\nfor task in tasks:\n"
    return Draft(
        instruction=f'Set the priority of every unfinished task in my Todoist project "{projects[p - 1]["name"]}" '
                    "to high.",
        solution=[login("todoist"), loop + "    if not task['is_completed']:\n"
                  "        apis.todoist.update_task(task_id=task['task_id'], priority='high', "
                  "access_token=tokens['todoist'])", "apis.supervisor.complete_task()"],
        wrong=[login("todoist"), loop + "    apis.todoist.update_task(task_id=task['task_id'], priority='high', "
               "access_token=tokens['todoist'])"],
        seed={"todoist.Project": projects, "todoist.ProjectCollaboratorLink": links, "todoist.Task": tasks},
        public_data={"project": projects[p - 1]["name"]})


register(Scenario("gtodoprio", ("todoist",), 2, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    project = models.start.todoist.Project.find_one(user_id=1, name=public_data.project)
    target = {t.id for t in models.start.todoist.Task.find_all(project_id=project.id) if not t.is_completed}
    added, updated, removed = models.changed_records("todoist.Task")
    with test("exactly the project's unfinished tasks were changed, none added or removed"):
        test.case({t.id for t in updated}, "==", target)
        test.case(len(added) + len(removed), "==", 0)
    with test("each is high priority now, and nothing else of it changed"):
        for task in updated:
            test.case(task.priority, "==", "high")
            test.case(models.changed_field_names("todoist.Task", task.id), "==", {"priority"})
''' + _TASK_CHANGED_ONLY, draw=_prio))


def _new_project(rng: random.Random, n: int) -> Draft:
    projects, links, tasks = _world(rng, n_projects=2)
    name = rng.choice([p for p in _PROJECTS if p not in {x["name"] for x in projects}])
    items = rng.sample([t for t in _TASKS if t not in {x["title"] for x in tasks}], rng.randint(3, 5))
    create = (f"project_id = apis.todoist.create_project(name={name!r}, access_token=tokens['todoist'])"
              "['project_id']\n")
    return Draft(
        instruction=f'Create a Todoist project named "{name}" with these tasks, in this order: '
                    + "; ".join(f'"{t}"' for t in items) + ".",
        solution=[login("todoist"), create + f"for i, title in enumerate({items!r}):\n"
                  "    apis.todoist.create_task(project_id=project_id, title=title, order_index=i, "
                  "access_token=tokens['todoist'])", "apis.supervisor.complete_task()"],
        # (skips the last task)
        wrong=[login("todoist"), create + f"for i, title in enumerate({items[:-1]!r}):\n"
               "    apis.todoist.create_task(project_id=project_id, title=title, order_index=i, "
               "access_token=tokens['todoist'])"],
        seed={"todoist.Project": projects, "todoist.ProjectCollaboratorLink": links, "todoist.Task": tasks},
        public_data={"name": name, "tasks": items})


register(Scenario("gtodonew", ("todoist",), 2, "gen-dev", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added_projects, updated_projects, removed_projects = models.changed_records("todoist.Project")
    added, updated, removed = models.changed_records("todoist.Task")
    with test("exactly one project was added, with the requested name"):
        test.case(len(added_projects), "==", 1)
        test.case(added_projects[0].name, "==", public_data.name)
        test.case(len(updated_projects) + len(removed_projects), "==", 0)
    with test("it holds exactly the requested tasks, in order"):
        test.case(len(updated) + len(removed), "==", 0)
        test.case({t.project_id for t in added}, "==", {added_projects[0].id})
        test.case([t.title for t in sorted(added, key=lambda t: t.order_index)], "==", list(public_data.tasks))
    with test("no other model changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"todoist.Project", "todoist.ProjectCollaboratorLink",
                                                         "todoist.Task"})
''', draw=_new_project))
