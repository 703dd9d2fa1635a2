"""The table of pod accounts (services/core/pod_accounts.py): the accounts a pod may run on,
and what each declares — asked by billing, logs, approval and dispatch."""
import ast
from pathlib import Path

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


# Where an account's or a backend's name may be written in services/: the table, the module
# of the backend that registers it, and two strings that only look like one — the job
# queue for work that must run on this host (a queue, not a pod account; renaming it would
# strand jobs queued before an upgrade) and the old system's default account on import.
NAMED_HERE = {"services/core/pod_accounts.py", "services/dispatch/backends/local.py",
              "services/dispatch/backends/runpod.py"}
LOOK_ALIKES = {("services/workflow/jobs.py", "local"), ("services/planning/importer.py", "team")}


def test_no_code_outside_the_table_and_the_backends_names_an_account_or_a_backend():
    """Does nothing in services/ branch on an account's or a backend's name (a string equal
    to one), apart from the table, the backend modules and the two known look-alikes?"""
    root = Path(__file__).resolve().parents[2]
    names = set(pod_accounts.ACCOUNTS) | {account.backend for account in pod_accounts.ACCOUNTS.values()}
    found = []
    for path in sorted((root / "services").rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where in NAMED_HERE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names and (where, node.value) not in LOOK_ALIKES:
                found.append(f"{where}:{node.lineno}: {node.value!r}")
    assert not found, "Ask services/core/pod_accounts.py instead of naming an account:\n" + "\n".join(found)
