"""What a LitestreamBackup adds to its application's pod and objects, read from a run (one component's or a whole
stack's): the served witnesses, an application's restore container, which containers mount a volume, and what
each container's ServiceAccount token lets it do. Shared by tests/components/test_litestream.py and
tests/program/test_site_litestream.py."""

from __future__ import annotations

from tools.harness import ProgramRun, RegisteredResource

WITNESS_TYPE = "kubernetes:core/v1:ConfigMapPatch"


def witnesses(run: ProgramRun) -> dict[str, RegisteredResource]:
    """The served witnesses (ConfigMap patches), by name."""
    return {r.inputs["metadata"]["name"]: r for r in run.of_type(WITNESS_TYPE)}


def restore_of(run: ProgramRun, app: str) -> tuple[dict, dict]:
    """The pod spec of ``app``'s Deployment and its restore init container."""
    (deployment,) = [o for o in run.kubernetes_objects() if o["kind"] == "Deployment" and o["metadata"]["name"] == app]
    pod = deployment["spec"]["template"]["spec"]
    (restore,) = [c for c in pod["initContainers"] if c["name"] == "restore"]
    return pod, restore


def holds(container: dict, volume: str) -> bool:
    """Whether ``container`` mounts ``volume``."""
    return any(mount["name"] == volume for mount in container.get("volumeMounts", []))


def api_access(objects: list[dict], namespace: str, workload: str) -> dict[str, set[tuple[str, str, str]]]:
    """Per container of ``workload``'s pod: what its token lets it do, as (resource, name, verb); a container holds
    the token only when it mounts the automounted one (automountServiceAccountToken) or a projected
    serviceAccountToken volume. A rule without resourceNames reaches every name (`*`)."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == workload]
    spec = deployment["spec"]["template"]["spec"]
    account = spec.get("serviceAccountName", "default")
    roles = {(o["kind"], o["metadata"]["name"]): o["rules"] for o in objects if o["kind"] in ("Role", "ClusterRole")}
    granted: set[tuple[str, str, str]] = set()
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if subject in binding["subjects"]:
            for rule in roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]), []):
                names = rule.get("resourceNames") or ["*"]
                granted |= {(r, n, v) for r in rule["resources"] for n in names for v in rule["verbs"]}
    token_volumes = {
        v["name"]
        for v in spec["volumes"]
        if any("serviceAccountToken" in source for source in v.get("projected", {}).get("sources", []))
    }
    automount = spec.get("automountServiceAccountToken", True)
    access = {}
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        holds = automount or any(m["name"] in token_volumes for m in container.get("volumeMounts", []))
        access[container["name"]] = granted if holds else set()
    return access
