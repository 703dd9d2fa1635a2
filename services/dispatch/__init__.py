"""Pods: the runpod-spec, the pod accounts table and its backends, the GPU catalogue and
costs, what the owner's approval fixed, secrets a pod may receive, preflight checks, the
provisioner saga and the watcher, pod logs and SSH keys, the progress, metrics and artifacts
pods post, spend and the cost ledger, and recovery of failed runs (which weighs the spend).

May import: core, code, claude, workflow."""
