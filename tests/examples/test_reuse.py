"""examples/reuse: headscale-ha's components in a program of their own, planned offline like the stacks."""

from __future__ import annotations

import re
from pathlib import Path

from headscale_ha.program.externals import OptionalRef
from tests.support.manifest_validator import validate
from tools.harness import PROJECT_DIR, ProgramRun
from tools.plan import plan_stack, write_rendered
from tools.wiring import check_wiring

EXAMPLE = PROJECT_DIR / "examples" / "reuse"


def _run() -> ProgramRun:
    return plan_stack("dev", project_dir=EXAMPLE, program=EXAMPLE / "__main__.py")


def _object(run: ProgramRun, kind: str, name: str) -> dict:
    (found,) = [o for o in run.kubernetes_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_the_example_plans_with_its_own_config_and_passes_the_cluster_checks(shared_dir: Path, tmp_path: Path) -> None:
    run = _run()
    assert run.project == "reuse-example"
    files = [f for f in write_rendered(run, tmp_path) if f.suffix == ".yaml"]
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout + result.stderr
    # The restores read an optional "served" witness: absent until the program records a first ready rollout;
    # Headscale's running pod adds its recorded position to it later.
    witnesses = [
        OptionalRef(
            namespace=namespace,
            workload=f"Deployment/{app}",
            name=f"{app}-served",
            absence_shown_by="first start",
            runtime_keys=frozenset({"position"} if app == "headscale" else ()),
        )
        for namespace, app in (("vault", "vaultwarden"), ("vpn", "headscale"))
    ]
    assert [str(f) for f in check_wiring(run.kubernetes_objects(), optional_refs=witnesses)] == []


def test_vaultwarden_restores_before_it_serves_and_replicates_while_it_runs() -> None:
    run = _run()
    pod = _object(run, "Deployment", "vaultwarden")["spec"]["template"]["spec"]
    restore, replicate = pod["initContainers"]
    assert restore["command"][-1] == "/etc/litestream/restore.sh"
    assert "restartPolicy" not in restore, "the restore finishes before the application starts"
    assert replicate["restartPolicy"] == "Always"
    env = {e["name"]: e["value"] for e in restore["env"]}
    assert env["DB_PATH"] == "/data/db.sqlite3"
    assert env["BACKUP_DIR"] == "/backup/vaultwarden"
    assert "IDENTITY_FILE" not in env, "no identity contract outside Headscale"
    claim = run.outputs["vaultwarden"]["backupClaim"]
    assert {"name": "backup", "persistentVolumeClaim": {"claimName": claim}} in pod["volumes"]
    (volume,) = [
        o
        for o in run.kubernetes_objects()
        if o["kind"] == "PersistentVolume" and o["spec"]["claimRef"]["namespace"] == "vault"
    ]
    assert volume["spec"]["nfs"] == {"server": "nfs.lab.example.com", "path": "/export/vault-backup"}
    assert volume["spec"]["claimRef"] == {"namespace": "vault", "name": claim}
    data = _object(run, "PersistentVolumeClaim", "vaultwarden-data")
    assert data["spec"]["storageClassName"] == "local-path"


def test_a_headscale_server_from_hand_written_args_restores_with_its_identity_contract() -> None:
    run = _run()
    assert run.outputs["headscale"]["apiUrl"] == "http://headscale.vpn.svc.cluster.local:8080"
    deployment = next(
        o for o in run.kubernetes_objects() if o["kind"] == "Deployment" and o["metadata"]["namespace"] == "vpn"
    )
    restore = deployment["spec"]["template"]["spec"]["initContainers"][0]
    env = {e["name"]: e["value"] for e in restore["env"]}
    # The restore checks the identity by its fingerprint; the Noise key itself is not mounted into it.
    assert re.fullmatch(r"[0-9a-f]{64}", env["IDENTITY_FINGERPRINT"])
    assert "IDENTITY_FILE" not in env
    assert not [m for m in restore["volumeMounts"] if "identity" in m["mountPath"]]
    assert env["BACKUP_DIR"] == "/backup/headscale"
    keys = [r for r in run.resources if r.type == "random:index/randomBytes:RandomBytes"]
    assert len(keys) == 2
    assert all(r.protect for r in keys)
    config = next(
        o for o in run.kubernetes_objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "headscale-config"
    )
    assert "server_url: https://vpn.lab.example.com" in config["data"]["config.yaml"]


def test_each_object_names_the_application_it_belongs_to() -> None:
    """Vaultwarden's objects (its backup's included) are `part-of: vaultwarden`; the Headscale server's, a
    headscale-ha component with its own backup, `part-of: headscale-ha`. Selectors follow the same labels."""
    run = _run()
    part_of: dict[str, set[str]] = {}
    for o in run.kubernetes_objects():
        labels = o["metadata"].get("labels", {})
        if "app.kubernetes.io/part-of" in labels:  # a static PersistentVolume counts in its claim's namespace
            namespace = o["metadata"].get("namespace") or o["spec"]["claimRef"]["namespace"]
            part_of.setdefault(namespace, set()).add(labels["app.kubernetes.io/part-of"])
    assert part_of == {"vault": {"vaultwarden"}, "vpn": {"headscale-ha"}}
    deployment = _object(run, "Deployment", "vaultwarden")
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/part-of"] == "vaultwarden"
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "vaultwarden"
    service = _object(run, "Service", "vaultwarden")
    assert service["spec"]["selector"]["app.kubernetes.io/part-of"] == "vaultwarden"
