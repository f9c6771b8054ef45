passwords = {a["account_name"]: a["password"] for a in apis.supervisor.show_account_passwords()}
profile = apis.supervisor.show_profile()
token = apis.todoist.login(username=profile["email"], password=passwords["todoist"])["access_token"]
# %%
projects = apis.todoist.show_projects(access_token=token, page_limit=20)
project = [p for p in projects if p["name"] == "$project"][0]
res = apis.todoist.show_tasks(access_token=token, project_id=project["project_id"])
tasks = res["no_section_tasks"] + [t for s in res["sections"] for t in s["tasks"]]
count = sum(1 for t in tasks if not t["is_completed"])
print(count)
# %%
apis.supervisor.complete_task(answer=count)
