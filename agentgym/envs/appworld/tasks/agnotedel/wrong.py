passwords = {a["account_name"]: a["password"] for a in apis.supervisor.show_account_passwords()}
profile = apis.supervisor.show_profile()
token = apis.simple_note.login(username=profile["email"], password=passwords["simple_note"])["access_token"]
notes = apis.simple_note.search_notes(access_token=token, query="$wrong_title", page_limit=20)
note = [n for n in notes if n["title"] == "$wrong_title"][0]
apis.simple_note.delete_note(note_id=note["note_id"], access_token=token)
apis.supervisor.complete_task()
