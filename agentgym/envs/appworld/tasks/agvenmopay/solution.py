passwords = {a["account_name"]: a["password"] for a in apis.supervisor.show_account_passwords()}
profile = apis.supervisor.show_profile()
token = apis.venmo.login(username=profile["email"], password=passwords["venmo"])["access_token"]
# %%
print(apis.venmo.create_transaction(receiver_email="$email", amount=$amount, description="$description", access_token=token))
# %%
apis.supervisor.complete_task()
