"""Headplane behind the witness lease (components/headplane.py ``lease``): the pod as the component renders it, a
follower and a watcher that only read the Lease, the follower run from that rendering against a real kube-apiserver
filling ``serving`` with exactly what Headplane and its Litestream read, the watcher stopping the rendered writers,
and every object admitted by a real kube-apiserver (the pod at the `restricted` level)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from headscale_ha.components.headplane import Headplane
from headscale_ha.components.serving_lease import PeerSite, ServedPod, ServingLeaseArgs
from headscale_ha.components.settings import FailoverSettings
from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.seam_samples import build_referencing, headplane_sample
from tests.support.site_objects import object_named
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
SERVED = {"config": "headplane", "litestream-config": "litestream"}
NAMESPACE = "headscale"


def lease() -> ServingLeaseArgs:
    """hydra's place, with the failsafe on: a follower still reads no other site."""
    cosmos = PeerSite(kubeconfig=kubeconfig(server="https://cosmos.example.com:6443"), namespace="headscale")
    witness = kubeconfig(server=WITNESS_URL)
    return ServingLeaseArgs(
        site="hydra", failover=FailoverSettings(), witness_kubeconfig=witness, peers={"cosmos": cosmos}
    )


def built(**overrides: Any) -> ProgramRun:
    return build_referencing(lambda: Headplane("headplane", headplane_sample(**overrides)))


def pod_of(run: ProgramRun) -> dict[str, Any]:
    spec: dict[str, Any] = object_named(run, "Deployment", "headplane")["spec"]["template"]["spec"]
    return spec


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["initContainers"], *pod["containers"]]


def test_the_follower_and_the_watcher_come_first_and_every_config_is_read_through_serving() -> None:
    plain_run, run = built(), built(lease=lease())
    plain, pod = pod_of(plain_run), pod_of(run)
    assert [c["name"] for c in pod["initContainers"]] == [
        "lease-follower",
        "lease-watcher",
        *(c["name"] for c in plain["initContainers"]),
    ]
    assert pod["shareProcessNamespace"] is True
    assert {v["name"] for v in pod["volumes"]} - {v["name"] for v in plain["volumes"]} == {
        "serving", "lease-state", "lease-tmp", "lease-witness", "lease-local", "lease-script",
    }  # fmt: skip
    follower, watcher, *others = containers(pod)
    assert [m for m in follower["volumeMounts"] if m["name"] in SERVED] == [
        {"name": "config", "mountPath": "/serve-from/headplane", "readOnly": True},
        {"name": "litestream-config", "mountPath": "/serve-from/litestream", "readOnly": True},
    ]
    assert [m["name"] for m in watcher["volumeMounts"] if m["name"] in SERVED] == []
    moved = mounts_moved_to_serving({c["name"]: c for c in containers(plain)}, others, SERVED)
    assert moved == 3, "the restore and Litestream read litestream/, Headplane its config file"
    deployment = object_named(run, "Deployment", "headplane")
    assert deployment["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert "pulumi.com/skipAwait" not in object_named(plain_run, "Deployment", "headplane")["metadata"].get(
        "annotations", {}
    )


def test_the_followers_objects_resolve_and_give_no_failsafe() -> None:
    run = built(lease=lease())
    pod = pod_of(run)
    made = {(o["kind"], o["metadata"]["name"]) for o in run.kubernetes_objects()}
    for volume in (v for v in pod["volumes"] if v["name"].startswith("lease-")):
        for kind, ref in (("ConfigMap", "configMap"), ("Secret", "secret")):
            if ref in volume:
                assert (kind, volume[ref].get("name") or volume[ref].get("secretName")) in made, volume
    assert object_named(run, "Role", "headplane-lease-renewer")["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}
    ]
    binding = object_named(run, "RoleBinding", "headplane-lease-renewer")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}
    ]
    policy = object_named(run, "ValidatingAdmissionPolicy", f"headscale-ha-{NAMESPACE}-headplane-own-pod")
    assert f"system:serviceaccount:{NAMESPACE}:{pod['serviceAccountName']}" in str(policy["spec"]["matchConditions"])
    assert all(
        value is SECRET for value in object_named(run, "Secret", "headplane-lease-witness")["stringData"].values()
    )
    assert not [name for kind, name in made if name.startswith(("headplane-lease-peers", "headplane-failsafe"))]


@pytest.mark.real_tool(*LAB_TOOLS)
def test_a_real_api_server_admits_the_followers_objects_and_its_pod(witness: Witness) -> None:
    run = built(lease=lease())
    deployment = object_named(run, "Deployment", "headplane")
    admitted = admit_lease_objects(witness.client, run.kubernetes_objects(), NAMESPACE, deployment)
    assert [c["name"] for c in admitted["spec"]["initContainers"]][:2] == ["lease-follower", "lease-watcher"]


# --- the rendered follower and watcher, run ------------------------------------------------------------------------


def rendered_env(run: ProgramRun, container: dict[str, Any], root: Path, lab: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet would give it, pointed at the lab's witness, with the test's
    timing; no pod to delete (tests/components/test_witness_lease_own_pod.py runs that delete)."""
    env = as_run_in(container, root)
    env |= {**lab, **{key: value for key, value in TEST_TIMING.items() if key in env}}
    env["RETRY_SECONDS"] = TEST_TIMING["RETRY_SECONDS"]
    if "STOP_GRACE_SECONDS" in env:  # three stops in the test timing's margin (4 - 1 - 2.5)
        env["STOP_GRACE_SECONDS"] = "0.15"
    for key in ("POD_NAME", "POD_UID"):
        env.pop(key, None)
    config_maps = {"config": "headplane-config", "litestream-config": "headplane-litestream"}
    for mount in container["volumeMounts"]:
        target = root / mount["mountPath"].lstrip("/")
        if mount["name"] in config_maps and not any(target.iterdir()):
            target.rmdir()
            as_config_map_volume(target, object_named(run, "ConfigMap", config_maps[mount["name"]])["data"])
    return env


@pytest.mark.real_tool("curl", *LAB_TOOLS)
def test_the_rendered_follower_serves_a_lease_after_the_take_and_its_watcher_stops_the_rendered_writers(
    witness: Witness, tmp_path: Path
) -> None:
    """hydra's Headscale takes and renews the Lease (the script, as a site of the lab); Headplane's rendered
    follower fills ``serving`` a whole lease after the take with exactly what its containers read; its rendered
    watcher, in a PID namespace of its own beside a process named as Headplane's (``node``), stops it and empties
    ``serving`` once hydra's holder is lost, before any other site may take the Lease."""
    witness.release()
    run = built(lease=lease())
    follower, watcher = pod_of(run)["initContainers"][:2]
    root = tmp_path / "pod"
    holder = new_site(witness, tmp_path / "hydra", "hydra", TEST_TIMING)
    lab = {
        key: holder.env[key] for key in ("API_URL", "NAMESPACE", "LEASE", "TOKEN_FILE", "CA_FILE", "CURL_BIN", "PATH")
    }
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "node").symlink_to(shutil.which("sleep") or "/bin/sleep")  # its /proc/PID/comm is "node"
    watching = None
    try:
        assert holder.start("acquire").wait(timeout=30) == 0, holder.events()
        holding = holder.start("hold")
        env = rendered_env(run, follower, root, lab)
        done = subprocess.run(["sh", str(SCRIPT), "follow"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "following fencing=1" in done.stderr
        assert_served(run, root / "serving")
        env = rendered_env(run, watcher, root, lab)
        assert env["STOP"] == "node litestream sign.sh"
        script = f"{bin_dir / 'node'} 600 & exec sh {SCRIPT} watch"
        watching = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script], env=env,
                                    stderr=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(2)
        assert watching.poll() is None, watching.stderr.read() if watching.stderr else ""
        holding.kill()
        lost_at = time.monotonic()
        assert watching.wait(timeout=10) == 5
        stopped_after = time.monotonic() - lost_at
        log = watching.stderr.read() if watching.stderr else ""
        assert "fenced: no renewal by hydra seen for 2.5 seconds" in log
        assert "stopped node" in log
        assert stopped_after < 4 + 1, "before another site may take the unrenewed Lease (LEASE + SKEW)"
        assert list((root / "serving").iterdir()) == []
    finally:
        if watching is not None and watching.poll() is None:
            watching.kill()
        holder.close()


def assert_served(run: ProgramRun, serving: Path) -> None:
    config = object_named(run, "ConfigMap", "headplane-config")["data"]
    litestream = object_named(run, "ConfigMap", "headplane-litestream")["data"]
    for container in containers(pod_of(run))[2:]:
        for mount in container["volumeMounts"]:
            if mount["name"] != "serving":
                continue
            path = serving / mount["subPath"]
            if mount["subPath"] == "headplane/config.yaml":
                assert path.read_text() == config["config.yaml"]
            else:
                assert mount["subPath"] == "litestream", container["name"]
                assert {key: (path / key).read_text() for key in litestream} == litestream, container["name"]
                assert os.access(path / "litestream.yml", os.R_OK)


def test_a_pod_with_more_writers_than_the_timing_allows_for_is_refused() -> None:
    """The settings check the fence's stops for three writers: a fourth would not fit in the margin."""
    with pytest.raises(ValueError, match=r"at most 3, the stops the timing allows"):
        ServedPod(app="headplane", namespace=NAMESPACE, image="curl", resources={}, service_account=None, served={},
                  writers=("node", "litestream", "sign.sh", "another"), follows=True)  # fmt: skip
