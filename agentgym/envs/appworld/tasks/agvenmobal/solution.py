passwords = {a["account_name"]: a["password"] for a in apis.supervisor.show_account_passwords()}
profile = apis.supervisor.show_profile()
token = apis.venmo.login(username=profile["email"], password=passwords["venmo"])["access_token"]
# %%
balance = apis.venmo.show_venmo_balance(access_token=token)["venmo_balance"]
print(balance)
# %%
apis.supervisor.complete_task(answer=balance)
