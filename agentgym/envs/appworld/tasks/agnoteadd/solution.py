passwords = {a["account_name"]: a["password"] for a in apis.supervisor.show_account_passwords()}
profile = apis.supervisor.show_profile()
token = apis.simple_note.login(username=profile["email"], password=passwords["simple_note"])["access_token"]
# %%
print(apis.simple_note.create_note(title="$title", content="$content", access_token=token))
# %%
apis.supervisor.complete_task()
