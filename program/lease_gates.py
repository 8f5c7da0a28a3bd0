"""The order in which sites enter and leave automatic failover, checked as gates on the stack's provider.

A Headscale outside the lease and a gated pod of another site must never run together: the gate takes a Lease that
nobody holds, while the ungated server writes on. So the configured active enters first and leaves last:

- **Entering**: a standby runs its Headscale behind the lease only once its active's stack says that its own does
  (its output ``servingLease``); the active's pod, gated, then holds the Lease before any other gate looks at it
  (wait for the active's rollout before the standby's `pulumi up`: docs/witness-lease.md).
- **Leaving**: the active, with automatic failover off but its witness's kubeconfig still set (a site that has run
  the lease, or is preparing to), refuses while any other site's stack still says ``servingLease``: those sites'
  `pulumi up` comes first (a standby then scales its Headscale to 0).

A gate rejects the Output the provider depends on, so the run stops before any step, as the standby gate does
(program/standby.py). Nothing is referenced unless the lease is on or being left: a stack without it plans as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from headscale_ha.components.settings import PROJECT, Role
from headscale_ha.program.config import StackConfig

#: The output a site stack exports (true) while its Headscale runs behind the witness lease.
SERVING_LEASE = "servingLease"


class LeaseOrderError(pulumi.RunError):
    """A site would run outside the lease while another runs behind it (or the other way round)."""


def entry_problem(active_stack: str, active_serving: Any) -> str | None:
    """Why this standby may not run behind the lease yet, or None."""
    if active_serving is True:
        return None
    return (
        f"{PROJECT}: this standby would run its Headscale behind the witness lease, but the active stack "
        f"{active_stack} does not yet (its output {SERVING_LEASE} is not true): `pulumi up` the active site first "
        "and wait for its rollout (kubectl rollout status deployment/headscale), so that its pod holds the Lease "
        "before this site's gate looks at it; else this gate could take a Lease nobody holds while the active's "
        "Headscale, outside the lease, still writes"
    )


def exit_problem(serving: Mapping[str, Any]) -> str | None:
    """Why this active may not run outside the lease yet (``serving``: each other site's stack, its output), or
    None."""
    still = sorted(stack for stack, value in serving.items() if value is True)
    if not still:
        return None
    return (
        f"{PROJECT}: tailnet.failover.automatic is off, but {', '.join(still)} still run Headscale behind the "
        f"witness lease (output {SERVING_LEASE}): `pulumi up` them first (a standby then scales its Headscale to "
        "0), then this site; run now, this site's Headscale would serve outside the lease while their gates may "
        "take the Lease it releases. If such a site is lost, fence it by hand (docs/failover.md) and remove "
        "witnessKubeconfig from this stack to skip this check"
    )


def _passed(problem: str | None, reference: pulumi.StackReference) -> pulumi.Resource:
    if problem is not None:
        raise LeaseOrderError(problem)
    return reference


@dataclass(frozen=True, kw_only=True)
class LeaseOrder:
    """What this stack checks before its provider opens: the active it enters after, or the sites it leaves
    after (fully qualified stacks)."""

    enters_after: str | None = None  # a standby behind the lease: its active's stack
    leaves_after: tuple[str, ...] = ()  # an active leaving the lease: every other site's stack


def lease_order(config: StackConfig) -> LeaseOrder | None:
    """This stack's place in the order (module docstring), or None: nothing to check."""
    tailnet, automatic = config.tailnet, config.tailnet.failover.automatic
    if automatic and config.role is Role.STANDBY:
        return LeaseOrder(enters_after=tailnet.stack_of(tailnet.site(tailnet.active_site)))
    if not automatic and config.role is Role.ACTIVE and config.witness_kubeconfig is not None:
        others = tuple(tailnet.stack_of(site) for site in tailnet.sites if site.name != config.site.name)
        return LeaseOrder(leaves_after=others) if others else None
    return None


def lease_gate(name: str, order: LeaseOrder, opts: pulumi.ResourceOptions) -> pulumi.Output[pulumi.Resource]:
    """The gate this stack's provider waits for: it rejects, naming the sites and what to do, when the order is
    wrong."""
    if order.enters_after is not None:
        active = order.enters_after
        reference = pulumi.StackReference(f"{name}-lease-active", stack_name=active, opts=opts)
        return reference.get_output(SERVING_LEASE).apply(lambda value: _passed(entry_problem(active, value), reference))
    references = {
        stack: pulumi.StackReference(f"{name}-lease-{index}", stack_name=stack, opts=opts)
        for index, stack in enumerate(order.leaves_after)
    }
    first = next(iter(references.values()))
    values = pulumi.Output.all(
        **{stack: reference.get_output(SERVING_LEASE) for stack, reference in references.items()}
    )
    return values.apply(lambda serving: _passed(exit_problem(serving), first))
