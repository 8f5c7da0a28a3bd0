"""`tailnet.failover.automatic` in a stack: what it needs (each missing piece named by key, no secret shown), and what
the site program then renders: every site's Headscale behind the gate at one replica whatever its `role`, the
kubeconfigs in Secrets only, and nothing else of the site changed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from headscale_ha.components.settings import PROJECT
from tests.support.config_samples import parse, problems, section
from tests.support.site_objects import headscale_pod, object_named, objects_of
from tests.support.stacks import ACTIVE_STACK
from tests.support.witness_samples import TOKEN, kubeconfig
from tools.harness import PROJECT_DIR, SECRET, ProgramRun, run_program
from tools.plan import PLACEHOLDERS
from tools.stack_files import read_stack_settings

WITNESS = kubeconfig(server="https://witness.example.com:6443/")
SECRETS = ("witnessKubeconfig", "peerKubeconfigs")


def automatic(stack: str = "hydra", **failover: Any) -> dict[str, Any]:
    tailnet = section(stack, "tailnet")
    return {**tailnet, "failover": {**tailnet.get("failover", {}), "automatic": True, **failover}}


def peer_of(stack: str) -> str:
    return "cosmos" if stack == "hydra" else "hydra"


def peers(stack: str) -> dict[str, str]:
    other = peer_of(stack)
    return {other: kubeconfig(server=f"https://{other}.example.com:6443/")}


def test_automatic_failover_needs_the_witness_and_every_other_sites_kubeconfig() -> None:
    found = problems(tailnet=automatic())
    assert found == [
        f"{PROJECT}:peerKubeconfigs.cosmos: is required with tailnet.failover.failsafe: a kubeconfig of cosmos's "
        "cluster with the token of its account headscale-failsafe-hydra, got nothing",
        f"{PROJECT}:witnessKubeconfig: is required with tailnet.failover.automatic: a kubeconfig of the witness API "
        "server (docs/witness-lease.md), got nothing",
    ]


def test_without_the_failsafe_no_other_site_is_needed_and_none_is_made_up() -> None:
    config = parse(tailnet=automatic(failsafe=False), witnessKubeconfig=WITNESS, secret_keys=SECRETS)
    assert config.tailnet.failover.automatic
    found = problems(tailnet=automatic(), witnessKubeconfig=WITNESS, secret_keys=SECRETS,
                     peerKubeconfigs={**peers("hydra"), "vega": WITNESS})  # fmt: skip
    assert found == [f"{PROJECT}:peerKubeconfigs.vega: is not another site of tailnet.sites (cosmos), got nothing"]


def test_a_stage_or_endpoint_that_cannot_follow_the_lease_is_refused_by_name() -> None:
    found = problems(
        tailnet=automatic(failsafe=False),
        witnessKubeconfig=WITNESS,
        secret_keys=SECRETS,
        endpoint={**section("hydra", "endpoint"), "failover": "externalDns"},
        database={**section("hydra", "database"), "stage": "postgres"},
    )
    by_key = {problem.split(": ", 1)[0]: problem for problem in found}
    assert "a PostgreSQL replica cluster is promoted by hand" in by_key[f"{PROJECT}:database.stage"]
    assert "externalDns does not follow the Lease" in by_key[f"{PROJECT}:endpoint.failover"]


def test_one_site_cannot_fail_over() -> None:
    tailnet = automatic(failsafe=False)
    tailnet["sites"] = [site for site in tailnet["sites"] if site["name"] == "hydra"]
    found = problems(tailnet=tailnet, witnessKubeconfig=WITNESS, secret_keys=SECRETS)
    assert found == [
        f"{PROJECT}:tailnet.failover.automatic: needs two sites in tailnet.sites at least: a site takes over from "
        "another, got True"
    ]


def test_a_kubeconfig_set_in_clear_is_refused_without_its_value() -> None:
    found = problems(tailnet=automatic(), witnessKubeconfig=WITNESS, peerKubeconfigs=peers("hydra"),
                     secret_keys=("witnessKubeconfig",))  # fmt: skip
    assert any(problem.startswith(f"{PROJECT}:peerKubeconfigs: must be a secret") for problem in found), found
    assert TOKEN not in "\n".join(found)


def test_a_kubeconfig_the_lease_script_cannot_use_is_refused_at_its_key_without_its_value() -> None:
    found = problems(tailnet=automatic(failsafe=False), secret_keys=SECRETS,
                     witnessKubeconfig=kubeconfig(server="http://witness.example.com:6443"))  # fmt: skip
    assert len(found) == 1, found
    assert found[0].startswith(f"{PROJECT}:witnessKubeconfig: cluster.server: ")
    assert found[0].endswith(", got [secret]")
    assert TOKEN not in found[0]


# --- what a stack renders ----------------------------------------------------------------------------------------


def planned(
    stack: str,
    stack_outputs: dict[str, dict],
    *,
    failsafe: bool = True,
    witness: str = WITNESS,
    peer_kubeconfigs: dict[str, str] | None = None,
) -> ProgramRun:
    """The stack's plan with automatic failover on and both kubeconfigs set as secrets."""
    settings = read_stack_settings_for(stack)
    config = dict(settings.config)
    config[f"{PROJECT}:tailnet"] = json.dumps(automatic(stack, failsafe=failsafe))
    config[f"{PROJECT}:witnessKubeconfig"] = witness
    if failsafe:
        config[f"{PROJECT}:peerKubeconfigs"] = json.dumps(peer_kubeconfigs or peers(stack))
    secret_keys = set(settings.secret_keys) | {f"{PROJECT}:{key}" for key in SECRETS}
    if stack != "hydra":  # a standby enters after its active (program/lease_gates.py)
        stack_outputs = {**stack_outputs, ACTIVE_STACK: {**stack_outputs[ACTIVE_STACK], "servingLease": True}}
    return run_program(project=settings.project, stack=stack, config=config, secret_keys=secret_keys,
                       stack_outputs=stack_outputs)  # fmt: skip


def read_stack_settings_for(stack: str) -> Any:
    assume = ["bootstrapApiKey"] if stack == "hydra" else []
    return read_stack_settings(PROJECT_DIR, stack, placeholders=PLACEHOLDERS, assume_secrets=assume)


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_every_site_runs_its_gated_headscale_whatever_its_role(stack: str, stack_outputs: dict[str, dict]) -> None:
    run = planned(stack, stack_outputs)
    assert object_named(run, "Deployment", "headscale")["spec"]["replicas"] == 1
    pod = headscale_pod(run)
    assert [c["name"] for c in pod["initContainers"][:2]] == ["lease-gate", "lease-renewer"]
    env = {e["name"]: e.get("value") for e in pod["initContainers"][0]["env"]}
    assert env["IDENTITY"] == f"{stack}/$(POD_NAME)"
    assert env["API_URL"] == "https://witness.example.com:6443"
    peers_secret = object_named(run, "Secret", "headscale-lease-peers")
    assert sorted(peers_secret["stringData"]) == [f"{peer_of(stack)}.{part}" for part in
                                                  ("api-url", "ca.crt", "namespace", "token")]  # fmt: skip
    assert object_named(run, "ServiceAccount", f"headscale-failsafe-{peer_of(stack)}")
    for name in ("headscale-lease-witness", "headscale-lease-peers"):
        assert set(object_named(run, "Secret", name)["stringData"].values()) == {SECRET}
    assert TOKEN not in json.dumps([run.kubernetes_objects(), run.outputs], default=str)


def test_role_keeps_its_meaning_for_what_the_lease_does_not_decide(stack_outputs: dict[str, dict]) -> None:
    """cosmos stays the standby of the config: its restores (Headscale's and Headplane's) still require a backup
    (they must never start empty); only the replica counts of Headscale and Headplane follow the Lease instead."""
    manual = planned_manual("cosmos", stack_outputs)
    run = planned("cosmos", stack_outputs, failsafe=False)
    headplane = object_named(run, "Deployment", "headplane")["spec"]["template"]["spec"]
    for pod in (headscale_pod(run), headplane):
        restore = next(c for c in pod["initContainers"] if c["name"] == "restore")
        assert {"name": "REQUIRE_BACKUP", "value": "true"} in restore["env"]
    for kind in ("Deployment", "StatefulSet"):
        replicas = {o["metadata"]["name"]: o["spec"]["replicas"] for o in objects_of(run, kind)}
        before = {o["metadata"]["name"]: o["spec"]["replicas"] for o in objects_of(manual, kind)}
        assert replicas == ({**before, "headscale": 1, "headplane": 1} if kind == "Deployment" else before), kind
    assert object_named(manual, "Deployment", "headscale")["spec"]["replicas"] == 0
    assert object_named(manual, "Deployment", "headplane")["spec"]["replicas"] == 0


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_headplane_follows_its_sites_holder_and_stops_its_own_writers(
    stack: str, stack_outputs: dict[str, dict]
) -> None:
    """Headplane's pod reads the Lease (a follower and a watcher, no failsafe), reads its config and Litestream's
    through ``serving`` only, is not awaited, and its watcher may delete its own pod and nothing else."""
    run = planned(stack, stack_outputs)
    deployment = object_named(run, "Deployment", "headplane")
    assert deployment["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    follower, watcher = pod["initContainers"][:2]
    assert (follower["name"], follower["command"][-1]) == ("lease-follower", "follow")
    assert (watcher["name"], watcher["command"][-1], watcher["restartPolicy"]) == ("lease-watcher", "watch", "Always")
    env = {e["name"]: e.get("value") for e in watcher["env"]}
    assert env["IDENTITY"] == f"{stack}/$(POD_NAME)"
    assert env["STOP"] == "node litestream sign.sh"
    assert env["LEASE"] == "headscale", "Headscale's Lease: Headplane follows it"
    assert [name for name in ("FAILSAFE_LEASE", "PEERS_DIR") if name in env] == [], "a follower has no failsafe"
    assert "READY_URL" not in env, "a follower never gives the Lease up: it holds none"
    for container in pod["initContainers"][2:] + pod["containers"]:
        for mount in container.get("volumeMounts", []):
            assert mount["name"] not in ("config", "litestream-config"), (container["name"], mount)
    role = object_named(run, "Role", "headplane-lease-renewer")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]
    assert set(object_named(run, "Secret", "headplane-lease-witness")["stringData"].values()) == {SECRET}
    assert not [o for o in objects_of(run, "Secret") if o["metadata"]["name"] == "headplane-lease-peers"]
    assert TOKEN not in json.dumps([run.kubernetes_objects(), run.outputs], default=str)


def planned_manual(stack: str, stack_outputs: dict[str, dict]) -> ProgramRun:
    settings = read_stack_settings_for(stack)
    return run_program(project=settings.project, stack=stack, config=settings.config,
                       secret_keys=set(settings.secret_keys), stack_outputs=stack_outputs)  # fmt: skip


def egress_to(run: ProgramRun, port: int, app: str = "headscale") -> list[list[dict[str, Any]]]:
    """The destinations ``app``'s pods may reach on ``port`` (its egress NetworkPolicy), rule by rule."""
    policy = object_named(run, "NetworkPolicy", f"{app}-egress")
    return [rule["to"] for rule in policy["spec"]["egress"] if {"protocol": "TCP", "port": port} in rule["ports"]]


def test_under_default_deny_egress_the_lease_reaches_the_witness_and_the_other_site(
    stack_outputs: dict[str, dict],
) -> None:
    """The witness and cosmos's API servers, from their kubeconfigs, and this cluster's own (the renewer): nothing
    else is opened, and without automatic failover none of the two."""
    run = planned("hydra", stack_outputs, witness=kubeconfig(server="https://203.0.113.10:7443"),
                  peer_kubeconfigs={"cosmos": kubeconfig(server="https://198.51.100.20:8443")})  # fmt: skip
    assert egress_to(run, 7443) == [[{"ipBlock": {"cidr": "203.0.113.10/32"}}]]
    assert egress_to(run, 8443) == [[{"ipBlock": {"cidr": "198.51.100.20/32"}}]]
    assert egress_to(run, 6443) == [[{"ipBlock": {"cidr": "10.10.0.0/24"}}]], "the API server (apiServerCidrs)"
    # Headplane's watcher: the witness and its own pod's delete, never another site (a follower has no failsafe).
    assert egress_to(run, 7443, "headplane") == [[{"ipBlock": {"cidr": "203.0.113.10/32"}}]]
    assert egress_to(run, 6443, "headplane") == [[{"ipBlock": {"cidr": "10.10.0.0/24"}}]]
    assert egress_to(run, 8443, "headplane") == []
    manual = planned_manual("hydra", stack_outputs)
    assert egress_to(manual, 7443) == egress_to(manual, 8443) == []
    before, after = (object_named(r, "NetworkPolicy", "headscale-egress")["spec"]["egress"] for r in (manual, run))
    assert [rule for rule in after if rule not in before] == [
        {"to": [{"ipBlock": {"cidr": "203.0.113.10/32"}}], "ports": [{"protocol": "TCP", "port": 7443}]},
        {"to": [{"ipBlock": {"cidr": "198.51.100.20/32"}}], "ports": [{"protocol": "TCP", "port": 8443}]},
    ]


def test_a_witness_kubeconfig_alone_prepares_the_accounts_and_changes_nothing_else(
    stack_outputs: dict[str, dict],
) -> None:
    """Before automatic failover is on, each site makes the account every other site vouches through, so that the
    tokens for `peerKubeconfigs` exist before any site needs them; nothing that serves changes."""
    settings = read_stack_settings_for("cosmos")
    config = {**settings.config, f"{PROJECT}:witnessKubeconfig": WITNESS}
    run = run_program(project=settings.project, stack="cosmos", config=config, stack_outputs=stack_outputs,
                      secret_keys=set(settings.secret_keys) | {f"{PROJECT}:witnessKubeconfig"})  # fmt: skip
    manual = planned_manual("cosmos", stack_outputs)

    def by_name(of: ProgramRun) -> dict[tuple[str, str, str], dict[str, Any]]:
        objects = of.kubernetes_objects()
        keyed = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}
        assert len(keyed) == len(objects), "one object per kind, namespace and name"
        return keyed

    before, after = by_name(manual), by_name(run)
    added = {key[::2]: after[key] for key in after.keys() - before.keys()}
    assert {key[1] for key in after.keys() - before.keys()} == {"headscale"}
    assert sorted(added) == [("Role", "headscale-failsafe-hydra"), ("RoleBinding", "headscale-failsafe-hydra"),
                             ("ServiceAccount", "headscale-failsafe-hydra")]  # fmt: skip
    assert added[("Role", "headscale-failsafe-hydra")]["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["headscale-failsafe"],
         "verbs": ["get", "patch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]  # fmt: skip
    assert {key: after[key] for key in before} == before


def served_witness(run: ProgramRun) -> list[dict[str, Any]]:
    """What the stack writes into the served witness (its ConfigMapPatch), if it writes it."""
    return [r.inputs["data"] for r in run.resources if r.type == "kubernetes:core/v1:ConfigMapPatch"
            and r.inputs["metadata"]["name"] == "headscale-served"]  # fmt: skip


@pytest.mark.parametrize(("stack", "witness"), [("hydra", []), ("cosmos", [{"served": "standby"}])])
def test_behind_the_lease_nothing_awaits_readiness_and_no_site_is_marked_as_served(
    stack: str, witness: list[dict[str, Any]], stack_outputs: dict[str, dict]
) -> None:
    """A site that does not hold the Lease waits in its gate, unready, for ever: `pulumi up` must not wait for it
    (nor fail at the rollout's deadline). Nothing then tells the program which site served: the active's witness
    (`true`) is not written (one written in manual mode stays, retained), a standby's says `standby` as before."""
    manual, run = planned_manual(stack, stack_outputs), planned(stack, stack_outputs)
    deployment = object_named(run, "Deployment", "headscale")
    assert deployment["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert "pulumi.com/skipAwait" not in object_named(manual, "Deployment", "headscale")["metadata"].get(
        "annotations", {}
    )
    assert served_witness(run) == witness
    assert served_witness(manual) == [{"served": "true" if stack == "hydra" else "standby"}]


# --- the recovery output -----------------------------------------------------------------------------------------


#: tailnet.failover's default leaseSeconds + skewSeconds.
LEASE_AND_SKEW = 22.0


def cluster_loss(run: ProgramRun, app: str = "headscale") -> dict[str, Any]:
    (row,) = [r for r in run.outputs["recovery"]["applications"][app]["failures"] if r["failure"] == "clusterLoss"]
    return row


def test_headplanes_whole_cluster_row_waits_a_lease_after_headscales_takeover(stack_outputs: dict[str, dict]) -> None:
    """Headplane's follower serves a whole lease after its site took the Lease: the same measured takeover as
    Headscale's, then leaseSeconds + skewSeconds, then Headplane's own restore and start."""
    run = planned("hydra", stack_outputs)
    row, headscale = cluster_loss(run, "headplane"), cluster_loss(run)
    manual = cluster_loss(planned_manual("hydra", stack_outputs), "headplane")
    assert row["steps"]["leaseTakeover"] == headscale["steps"]["leaseTakeover"]
    assert row["steps"]["followLease"] == LEASE_AND_SKEW
    assert {key: row["steps"][key] for key in ("imagePull", "restore", "start", "dnsTtl")} == {
        key: manual["steps"][key] for key in ("imagePull", "restore", "start", "dnsTtl")
    }
    assert row["rtoSeconds"] == pytest.approx(sum(row["steps"].values()), abs=0.1 * len(row["steps"]))
    assert "followLease" not in headscale["steps"]
    assert "followLease" not in manual["steps"]


def test_the_whole_cluster_row_is_the_measured_takeover_with_no_human(stack_outputs: dict[str, dict]) -> None:
    """The decision and the promote command give way to the takeover measured by bench/witness_replica.py (less
    its restore, which the model computes for this stack), then the restore, the start and the DNS TTL."""
    run = planned("hydra", stack_outputs)
    row, manual = cluster_loss(run), cluster_loss(planned_manual("hydra", stack_outputs))
    measured = json.loads((PROJECT_DIR / "bench" / "measured" / "takeover.json").read_text())
    slower = max(measured["scenarios"].values(), key=lambda scenario: scenario["withoutRestoreMedianSeconds"])
    assert (measured["timing"]["LEASE_SECONDS"], measured["timing"]["SKEW_SECONDS"]) == ("20", "2"), "the default"
    assert row["steps"]["leaseTakeover"] == pytest.approx(slower["withoutRestoreMedianSeconds"], abs=0.1)
    assert {key: row["steps"][key] for key in ("imagePull", "restore", "start", "dnsTtl")} == {
        key: manual["steps"][key] for key in ("imagePull", "restore", "start", "dnsTtl")
    }
    assert not {"decision", "promoteCommand"} & set(row["steps"])
    assert row["rtoSeconds"] == pytest.approx(sum(row["steps"].values()), abs=0.1 * len(row["steps"]))
    assert row["rtoSeconds"] < 180 < manual["rtoSeconds"], "issue 40's goal, the human's decision gone"
    assert row["rpoSeconds"] == manual["rpoSeconds"]
    assert run.outputs["recovery"]["inputs"]["measured"]["takeover"]["source"] == "bench/measured/takeover.json"
    assert "takeover" not in planned_manual("hydra", stack_outputs).outputs["recovery"]["inputs"]["measured"]


def test_a_longer_lease_moves_the_takeover_by_as_much(stack_outputs: dict[str, dict]) -> None:
    default = cluster_loss(planned("hydra", stack_outputs))["steps"]["leaseTakeover"]
    settings = read_stack_settings_for("hydra")
    config = dict(settings.config)
    config[f"{PROJECT}:tailnet"] = json.dumps(automatic("hydra", leaseSeconds=40, fenceAfterSeconds=30, failsafe=False))
    config[f"{PROJECT}:witnessKubeconfig"] = WITNESS
    run = run_program(project=settings.project, stack="hydra", config=config, stack_outputs=stack_outputs,
                      secret_keys=set(settings.secret_keys) | {f"{PROJECT}:witnessKubeconfig"})  # fmt: skip
    assert cluster_loss(run)["steps"]["leaseTakeover"] == pytest.approx(default + 20, abs=0.1)
