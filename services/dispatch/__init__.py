"""Pods: the runpod-spec, the GPU catalogue, costs, and (later) dispatch and watching."""
