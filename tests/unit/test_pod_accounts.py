"""The table of pod accounts (services/core/pod_accounts.py): the accounts a pod may run on,
and what each declares — asked by billing, logs, approval and dispatch."""
from services.core import pod_accounts
from services.dispatch.backends import base
from services.dispatch.backends.factory import _load_backend_modules


def test_every_account_names_a_registered_backend():
    """Does each entry's backend exist under that name (the factory finds it through the table)?"""
    _load_backend_modules()
    assert {account.backend for account in pod_accounts.ACCOUNTS.values()} <= set(base.BUILDERS)
    assert pod_accounts.names() == ("team", "personal", "local")


def test_what_each_account_declares():
    """Do RunPod accounts bill and run elsewhere, the local one bill nothing and run here?"""
    assert pod_accounts.bills("team") and pod_accounts.bills("personal") and not pod_accounts.bills("local")
    assert pod_accounts.on_this_host("local") and not pod_accounts.on_this_host("team")
    assert pod_accounts.log_source("local") == "local" and pod_accounts.log_source("team") == "runpod"
    assert pod_accounts.pod_label("local") == "Local pod" and pod_accounts.pod_label("personal") == "RunPod pod"
    assert pod_accounts.free() == ("local",) == pod_accounts.on_host()


def test_an_account_the_table_does_not_know_is_taken_to_bill():
    """Is an unknown account's pod priced as unknown (billing), never a free $0 one, nor on this host?"""
    assert pod_accounts.bills("acme-cloud") and pod_accounts.bills(None)
    assert not pod_accounts.on_this_host("acme-cloud")
