passwords = {a["account_name"]: a["password"] for a in apis.supervisor.show_account_passwords()}
profile = apis.supervisor.show_profile()
token = apis.simple_note.login(username=profile["email"], password=passwords["simple_note"])["access_token"]
# %%
notes = []
page = 0
while True:
    batch = apis.simple_note.search_notes(access_token=token, page_index=page, page_limit=20)
    if not batch:
        break
    notes += batch
    page += 1
count = sum(1 for n in notes if "$tag" in n["tags"])
print(count)
# %%
apis.supervisor.complete_task(answer=count)
