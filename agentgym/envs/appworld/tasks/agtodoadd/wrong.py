passwords = {a["account_name"]: a["password"] for a in apis.supervisor.show_account_passwords()}
profile = apis.supervisor.show_profile()
token = apis.todoist.login(username=profile["email"], password=passwords["todoist"])["access_token"]
projects = apis.todoist.show_projects(access_token=token, page_limit=20)
project = [p for p in projects if p["name"] == "$wrong_project"][0]
apis.todoist.create_task(project_id=project["project_id"], title="$title", access_token=token)
apis.supervisor.complete_task()
