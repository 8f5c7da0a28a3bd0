"""Stack names and the "lab" stack text shared by tests/conftest.py and the tests that plan or reference stacks."""

from __future__ import annotations

#: A stack "lab" that runs the hydra site as the active one; tests append the keys they vary.
LAB_STACK = (
    "config:\n  headscale-ha:role: active\n"
    "  headscale-ha:cluster: {name: hydra, nodes: 3, apiServer: {host: 10.10.0.10}}\n"
    "  headscale-ha:networkPolicy: {apiServerCidrs: [10.10.0.0/24]}\n"
)

#: The stacks a site stack references, by the names the shipped Pulumi.yaml gives them.
IDENTITY_STACK = "organization/headscale-ha-identity/tailnet"
ACTIVE_STACK = "organization/headscale-ha/hydra"
