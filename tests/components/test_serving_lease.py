"""HeadscaleServer behind the witness lease (components/serving_lease.py): the pod as the component renders it, the
gate run from that rendering against a real kube-apiserver filling ``serving`` with exactly what every other
container then reads, and every object the lease adds admitted by a real kube-apiserver (the pod at the
`restricted` level)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from headscale_ha.components.headscale import HeadscaleServer, PostgresStorage
from headscale_ha.components.headscale_config import PostgresConnection
from headscale_ha.components.serving_lease import FailsafeAccountsArgs, PeerSite, ServingLeaseArgs
from headscale_ha.components.settings import FailoverSettings
from tests.support.headscale_real import binary
from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.seam_samples import build_referencing, headscale_server_sample
from tests.support.site_objects import headscale_pod, object_named
from tests.support.witness_lab import SCRIPT, TEST_TIMING, Witness, new_site
from tests.support.witness_samples import (
    admit_lease_objects,
    as_config_map_volume,
    as_run_in,
    kubeconfig,
    mounts_moved_to_serving,
)
from tools.harness import SECRET, ProgramRun

WITNESS_URL = "https://witness.example.com:6443"
POSTGRES = PostgresStorage(connection=PostgresConnection(host="pg.db.svc", name="vpn", user="vpn_app"),
                           password_secret="pg-app")  # fmt: skip
SERVED = {"config": "headscale", "litestream-config": "litestream"}


def lease(*, failsafe: bool = True) -> ServingLeaseArgs:
    cosmos = PeerSite(kubeconfig=kubeconfig(server="https://cosmos.example.com:6443"), namespace="headscale")
    return ServingLeaseArgs(
        site="hydra",
        failover=FailoverSettings(failsafe=failsafe),
        witness_kubeconfig=kubeconfig(server=f"{WITNESS_URL}/"),
        peers={"cosmos": cosmos},
    )


def gated(*, failsafe: bool = True) -> ProgramRun:
    accounts = FailsafeAccountsArgs(app="headscale", namespace="headscale", failsafe_lease="headscale-failsafe",
                                    peers=("cosmos",))  # fmt: skip
    sample = headscale_server_sample(lease=lease(failsafe=failsafe), failsafe_accounts=accounts if failsafe else None)
    return build_referencing(lambda: HeadscaleServer("headscale", sample))


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["initContainers"], *pod["containers"]]


def test_the_gate_and_the_renewer_come_first_and_the_pod_shares_its_processes() -> None:
    pod = headscale_pod(gated())
    plain = headscale_pod(build_referencing(lambda: HeadscaleServer("headscale", headscale_server_sample())))
    assert [c["name"] for c in pod["initContainers"]] == [
        "lease-gate",
        "lease-renewer",
        *(c["name"] for c in plain["initContainers"]),
    ]
    assert pod["shareProcessNamespace"] is True
    assert pod["serviceAccountName"] == plain["serviceAccountName"] == "headscale-position-recorder"
    assert {v["name"] for v in pod["volumes"]} - {v["name"] for v in plain["volumes"]} == {
        "serving", "lease-state", "lease-tmp", "lease-witness", "lease-local", "lease-script", "lease-peers",
    }  # fmt: skip
    env = {e["name"]: e.get("value") for e in pod["initContainers"][0]["env"]}
    assert env["API_URL"] == WITNESS_URL, "from the witness kubeconfig, not a secret"
    assert env["SERVE_FROM"] == "/serve-from"


def test_nothing_but_the_gate_reads_the_config_except_through_serving() -> None:
    """Each mount of Headscale's or Litestream's config becomes the same path in ``serving``; the gate alone mounts
    the ConfigMaps, whole, under SERVE_FROM."""
    pod = headscale_pod(gated())
    plain = {c["name"]: c for c in containers(headscale_pod(build_referencing(
        lambda: HeadscaleServer("headscale", headscale_server_sample()))))}  # fmt: skip
    gate, renewer, *others = containers(pod)
    assert [m for m in gate["volumeMounts"] if m["name"] in SERVED] == [
        {"name": "config", "mountPath": "/serve-from/headscale", "readOnly": True},
        {"name": "litestream-config", "mountPath": "/serve-from/litestream", "readOnly": True},
    ]
    moved = mounts_moved_to_serving(plain, others, SERVED)
    assert moved == 6, "restore, pre-upgrade, recorder, signer and Litestream read litestream/, Headscale its file"
    assert [m["name"] for m in renewer["volumeMounts"] if m["name"] in SERVED] == []


def test_the_lease_objects_are_made_and_every_reference_resolves() -> None:
    run = gated()
    pod = headscale_pod(run)
    made = {(o["kind"], o["metadata"]["name"]) for o in run.kubernetes_objects()}
    lease_volumes = [v for v in pod["volumes"] if v["name"].startswith("lease-")]
    assert len(lease_volumes) == 6
    for volume in lease_volumes:
        for kind, ref in (("ConfigMap", "configMap"), ("Secret", "secret")):
            if ref in volume and not volume[ref].get("optional"):
                name = volume[ref].get("name") or volume[ref].get("secretName")
                assert (kind, name) in made, volume
    binding = object_named(run, "RoleBinding", "headscale-lease-renewer")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "headscale"}
    ]
    policy = object_named(run, "ValidatingAdmissionPolicy", "headscale-ha-headscale-headscale-own-pod")
    assert "namespace" not in policy["metadata"], "cluster-scoped"
    assert "system:serviceaccount:headscale:headscale-position-recorder" in str(policy["spec"]["matchConditions"])
    peer = object_named(run, "Role", "headscale-failsafe-cosmos")
    assert peer["rules"][0]["resourceNames"] == ["headscale-failsafe"]
    assert object_named(run, "ServiceAccount", "headscale-failsafe-cosmos")["automountServiceAccountToken"] is False
    for name in ("headscale-lease-witness", "headscale-lease-peers"):
        secret = object_named(run, "Secret", name)
        assert secret["stringData"], name
        assert all(value is SECRET for value in secret["stringData"].values()), name


def test_without_the_failsafe_no_other_site_is_read_or_given_an_account() -> None:
    run = gated(failsafe=False)
    names = {o["metadata"]["name"] for o in run.kubernetes_objects()}
    assert "headscale-lease-peers" not in names
    assert "headscale-failsafe-cosmos" not in names
    assert "lease-peers" not in {v["name"] for v in headscale_pod(run)["volumes"]}


def test_postgresql_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^lease: automatic failover needs the SQLite stage"):
        build_referencing(
            lambda: HeadscaleServer("headscale", headscale_server_sample(lease=lease(), database=POSTGRES))
        )


def test_a_witness_kubeconfig_the_script_cannot_use_is_refused_by_key_without_its_value() -> None:
    bad = ServingLeaseArgs(
        site="hydra", failover=FailoverSettings(failsafe=False), witness_kubeconfig=kubeconfig(user={"password": "pw1"})
    )
    with pytest.raises(Exception, match=r"witnessKubeconfig: user\.token: is required") as refused:
        build_referencing(lambda: HeadscaleServer("headscale", headscale_server_sample(lease=bad)))
    assert "pw1" not in str(refused.value)


# --- the rendered gate, run --------------------------------------------------------------------------------------


@pytest.mark.real_tool("curl", *LAB_TOOLS)
def test_the_rendered_gate_serves_exactly_what_every_container_reads(witness: Witness, tmp_path: Path) -> None:
    """The gate as rendered (its environment, its mounts under SERVE_FROM) takes a real Lease and fills ``serving``;
    every other container's subPath of ``serving`` then holds the ConfigMap's text. A second run over the filled
    directory (an init container run again in the same pod) serves the same, and nothing of the last copy."""
    witness.release()
    run = gated(failsafe=False)
    gate = headscale_pod(run)["initContainers"][0]
    root = tmp_path / "pod"
    env = as_run_in(gate, root)
    site = new_site(witness, tmp_path / "site", "hydra", TEST_TIMING)
    lab = {key: site.env[key] for key in ("API_URL", "NAMESPACE", "LEASE", "TOKEN_FILE", "CA_FILE", "CURL_BIN", "PATH")}
    env |= {**lab, **{key: value for key, value in TEST_TIMING.items() if key in env}}
    local = Path(env["LOCAL_DIR"])  # the projected volume: a token, the CA and the namespace
    for name, source in (("token", site.env["TOKEN_FILE"]), ("ca.crt", site.env["CA_FILE"])):
        (local / name).write_text(Path(source).read_text())
    (local / "namespace").write_text(site.env["NAMESPACE"])
    env["LOCAL_API_URL"] = site.env["API_URL"]
    config_maps = {"config": "headscale-config", "litestream-config": "headscale-litestream"}
    for mount in gate["volumeMounts"]:
        if mount["name"] in config_maps:
            target = root / mount["mountPath"].lstrip("/")
            target.rmdir()
            as_config_map_volume(target, object_named(run, "ConfigMap", config_maps[mount["name"]])["data"])
    stale = root / "serving" / "litestream" / "gone-from-the-config-map.sh"
    try:
        for attempt in (1, 2):
            done = subprocess.run(["sh", str(SCRIPT), "acquire"], env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (attempt, done.stderr)
            assert_served(run, root / "serving")
            if attempt == 1:
                stale.write_text("a file of the last copy\n")
                stale.chmod(0o444)
        assert not stale.exists(), "the second run served the ConfigMaps as they are, not over the last copy"
    finally:
        site.close()
    assert witness.lease()["spec"]["holderIdentity"] == "hydra/headscale-7d9c-x2x7q"


def assert_served(run: ProgramRun, serving: Path) -> None:
    config = object_named(run, "ConfigMap", "headscale-config")["data"]
    litestream = object_named(run, "ConfigMap", "headscale-litestream")["data"]
    for container in containers(headscale_pod(run))[1:]:
        for mount in container["volumeMounts"]:
            if mount["name"] != "serving" or "subPath" not in mount:
                continue
            path = serving / mount["subPath"]
            if mount["subPath"] == "headscale/config.yaml":
                assert path.read_text() == config["config.yaml"]
            else:
                assert mount["subPath"] == "litestream"
                assert {key: (path / key).read_text() for key in litestream} == litestream, container["name"]
                assert os.access(path / "litestream.yml", os.R_OK)


# --- a real API server admits what the lease adds ------------------------------------------------------------------

NAMESPACE = "headscale"


@pytest.mark.real_tool(*LAB_TOOLS)
def test_a_real_api_server_admits_every_lease_object_and_the_gated_pod(witness: Witness) -> None:
    run = gated()
    deployment = object_named(run, "Deployment", "headscale")
    admitted = admit_lease_objects(witness.client, run.kubernetes_objects(), NAMESPACE, deployment)
    assert admitted["spec"]["shareProcessNamespace"] is True
    assert [c["name"] for c in admitted["spec"]["initContainers"]][:2] == ["lease-gate", "lease-renewer"]


# --- a writer restarted in place after a fence -------------------------------------------------------------------


@pytest.mark.real_tool("headscale")
def test_headscale_restarted_after_a_fence_exits_instead_of_serving_defaults(tmp_path: Path) -> None:
    """After a fence the kubelet mounts an empty directory where config.yaml was (a subPath it creates). Headscale,
    started with the rendered args, refuses it; without ``-c`` it would search other paths and fall back to its
    defaults."""
    (headscale,) = headscale_pod(gated())["containers"]
    config_path = next(m["mountPath"] for m in headscale["volumeMounts"] if m.get("subPath") == "headscale/config.yaml")
    args = [arg.replace(config_path, str(tmp_path / "config.yaml")) for arg in headscale["args"]]
    (tmp_path / "config.yaml").mkdir()
    done = subprocess.run([str(binary()), *args], env={"HOME": str(tmp_path)}, cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert done.returncode != 0
    assert f"read {tmp_path}/config.yaml: is a directory" in done.stdout + done.stderr
    assert "using defaults" not in done.stdout + done.stderr
