"""Where pods run (SPEC §6.9): RunPod accounts over REST v2, or subprocesses on this host.

Everything above this package (the provisioner saga, the watcher, the orphan sweep) talks
to one narrow interface, `PodBackend`, obtained through `backend_for(account)`.
"""
from services.dispatch.backends.base import (  # noqa: F401
    PROVIDER_STATUSES,
    BackendError,
    LogLine,
    PodBackend,
    PodRequest,
    ProviderPod,
)
from services.dispatch.backends.factory import backend_for  # noqa: F401
