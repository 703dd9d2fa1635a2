"""The table of pod accounts (services/dispatch/pod_accounts.py): the names the registry
accepts, and what each declares — asked by billing, logs, approval and dispatch."""
from services.core import registry
from services.dispatch import pod_accounts


def test_the_table_holds_exactly_the_accounts_the_registry_accepts():
    """Is every account a plan may name in the table, and nothing else?"""
    assert sorted(pod_accounts.ACCOUNTS) == sorted(registry.RUNPOD_ACCOUNTS)


def test_what_each_account_declares():
    """Do RunPod accounts bill and run elsewhere, the local one bill nothing and run here?"""
    assert pod_accounts.bills("team") and pod_accounts.bills("personal") and not pod_accounts.bills("local")
    assert pod_accounts.on_this_host("local") and not pod_accounts.on_this_host("team")
    assert pod_accounts.log_source("local") == "local" and pod_accounts.log_source("team") == "runpod"
    assert pod_accounts.pod_label("local") == "Local pod" and pod_accounts.pod_label("personal") == "RunPod pod"
    assert pod_accounts.FREE == ("local",)


def test_an_account_the_table_does_not_know_is_taken_to_bill():
    """Is an unknown account's pod priced as unknown (billing), never a free $0 one, nor on this host?"""
    assert pod_accounts.bills("acme-cloud") and pod_accounts.bills(None)
    assert not pod_accounts.on_this_host("acme-cloud")
