"""HeadscaleServer: the singleton Deployment, its identity, volume, backup wiring and Service.

At the component seam: each test builds one HeadscaleServer from hand-written args (tests/support/seam_samples.py,
or a program of its own). The stack-level checks (a single-node cluster's placement of every workload, every file the
config names mounted wherever Headscale loads it, the STUN port and every listener reachable through Service and
NetworkPolicy, over the stacks and option sets) are in tests/program/test_site_headscale.py.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import yaml

from headscale_ha.components.headscale import (
    PATHS,
    HeadscaleServer,
    IdentityFromStack,
    ImportedIdentity,
    PolicyFile,
    PostgresStorage,
    SqliteStorage,
    server_files,
    stun_annotations,
)
from headscale_ha.components.settings import DatabaseStage
from headscale_ha.program.args import headscale_replicas, identity_source
from headscale_ha.program.site_args import site_args
from tests.support import api_objects as api
from tests.support.config_samples import DERP, NOISE, parse
from tests.support.manifest_validator import validate
from tests.support.seam_samples import (
    BACKUP_CLAIM,
    DERP_KEY,
    IDENTITY_STACK,
    NOISE_KEY,
    backup,
    build_referencing,
    headscale_server_sample,
    sqlite,
)
from tests.support.site_objects import headscale_pod as _pod
from tests.support.site_objects import object_named as _object
from tools.harness import SECRET, ProgramRun, run_program
from tools.plan import write_rendered

SCRIPTS = Path(__file__).resolve().parents[2] / "components" / "scripts"


def _lone_server(**overrides: Any) -> ProgramRun:
    """HeadscaleServer alone, from the Args hydra's config maps to (tests/support/seam_samples.py), its keys read
    from a hand-written identity stack."""
    return build_referencing(lambda: HeadscaleServer("headscale", headscale_server_sample(**overrides)))


def test_active_runs_exactly_one_replica_recreated() -> None:
    spec = _object(_lone_server(), "Deployment", "headscale")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_standby_keeps_everything_but_runs_nothing() -> None:
    run = _lone_server(replicas=0, database=sqlite(require_backup=True))
    assert _object(run, "Deployment", "headscale")["spec"]["replicas"] == 0
    assert {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}} in _pod(run)["volumes"], "disposable by default"
    env = {e["name"]: e["value"] for e in _pod(run)["initContainers"][0]["env"]}
    assert env["REQUIRE_BACKUP"] == "true", "a standby that scales up must restore, never start empty"


def test_scheduling_avoids_control_plane_and_excluded_nodes() -> None:
    pod = _pod(_lone_server())
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
                {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["hydra-gpu-1"]},
            ]
        }
    ]
    assert {(t["key"], t["tolerationSeconds"]) for t in pod["tolerations"]} == {
        ("node.kubernetes.io/not-ready", 60),
        ("node.kubernetes.io/unreachable", 60),
    }


def test_every_container_is_restricted_and_bounded() -> None:
    pod = _pod(_lone_server())
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"] + pod["initContainers"]:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        assert security["allowPrivilegeEscalation"] is False, container["name"]
        assert security["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert set(container["resources"]) == {"requests", "limits"}, container["name"]


def test_probes_use_the_unauthenticated_health_endpoint() -> None:
    (container,) = _pod(_lone_server())["containers"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["image"] == "ghcr.io/juanfont/headscale:0.29.2"
    assert container["args"] == ["serve"]


def _mounts_volume(container: dict, volume: str) -> bool:
    return any(m["name"] == volume for m in container.get("volumeMounts", []))


def test_restore_runs_before_replication_and_the_app() -> None:
    pod = _pod(_lone_server())
    restore, pre_upgrade, recorder, signer, sidecar = pod["initContainers"]
    assert restore["name"] == "restore"
    # The position recorder (tests/components/test_litestream.py): after the restore, stopped after the signer.
    assert (recorder["name"], recorder["restartPolicy"]) == ("position-recorder", "Always")
    assert "restartPolicy" not in restore, "the restore must finish before anything else starts"
    # Between the restore and the sidecar: the snapshot is taken while nothing writes the database.
    assert pre_upgrade["name"] == "pre-upgrade"
    assert "restartPolicy" not in pre_upgrade
    upgrade_env = {e["name"]: e["value"] for e in pre_upgrade["env"]}
    assert upgrade_env["TO_VERSION"] == "0.29.2"
    assert upgrade_env["DB_PATH"] == "/var/lib/headscale/db.sqlite"
    assert upgrade_env["BACKUP_DIR"] == "/backup/headscale"
    assert pre_upgrade["command"] == ["/bin/sh", "/etc/litestream/pre-upgrade.sh"]
    (scratch_mount,) = [m for m in pre_upgrade["volumeMounts"] if m["mountPath"] == upgrade_env["SCRATCH_DIR"]]
    scratch = next(v for v in pod["volumes"] if v["name"] == scratch_mount["name"])
    assert scratch["emptyDir"]["sizeLimit"] == str(3 * 1024**3), "three times the 1Gi database"
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["args"] == ["replicate", "-config", "/etc/litestream/litestream.yml"]
    env = {e["name"]: e["value"] for e in restore["env"]}
    assert env["DB_PATH"] == "/var/lib/headscale/db.sqlite"
    assert env["BACKUP_DIR"] == "/backup/headscale"
    assert "IDENTITY_FILE" not in env, "the restore gets the fingerprint, not the Noise key"
    assert re.fullmatch("[0-9a-f]{64}", env["IDENTITY_FINGERPRINT"])
    assert not [m for m in restore["volumeMounts"] if m["name"] == "identity"], "the Noise key is not mounted"
    assert env["REQUIRE_BACKUP"] == "false"
    # Authenticated backups: the signer sidecar starts before Litestream (and so stops after it); only it, the
    # restore and the rehearsal mount the backup key.
    assert signer["name"] == "backup-signer"
    assert signer["restartPolicy"] == "Always"
    assert signer["command"] == ["/bin/sh", "/etc/litestream/sign.sh", "run"]
    # It signs only what this writer wrote: it reads Litestream's local level-0 copies beside the restore's database
    # and the restore's record of what it verified, from the data volume mounted read-only.
    signer_env = {e["name"]: e["value"] for e in signer["env"]}
    assert signer_env["DB_PATH"] == env["DB_PATH"]
    assert signer_env["BASELINE_FILE"] == "/var/lib/headscale/.backup-baseline"
    assert 'BASELINE="$DB_DIR/.backup-baseline"' in (SCRIPTS / "litestream-restore.sh").read_text()
    (data,) = [m for m in restore["volumeMounts"] if m["mountPath"] == "/var/lib/headscale"]
    assert [m for m in signer["volumeMounts"] if m["name"] == data["name"]] == [{**data, "readOnly": True}]
    # It sources the manifest script beside it, and proves compactions in a scratch volume of its own, four times
    # the 1Gi database (the mirror of what it signed and two restores).
    assert signer_env["MANIFEST_SCRIPT"] == "/etc/litestream/manifest.sh"
    (scratch_mount,) = [m for m in signer["volumeMounts"] if m["mountPath"] == signer_env["SCRATCH_DIR"]]
    scratch = next(v for v in pod["volumes"] if v["name"] == scratch_mount["name"])
    assert scratch["emptyDir"]["sizeLimit"] == str(4 * 1024**3)
    others = [c for c in [*pod["initContainers"], *pod["containers"]] if c is not signer]
    assert [c["name"] for c in others if _mounts_volume(c, scratch["name"])] == []
    assert env["BACKUP_KEY_FILE"] == "/etc/litestream-key/backup.key"
    assert env["MAX_REPLICA_AGE_SECONDS"] == str(24 * 3600)
    holders = [c["name"] for c in [*pod["initContainers"], *pod["containers"]] if _mounts_volume(c, "backup-key")]
    assert holders == ["restore", "pre-upgrade", "backup-signer"]
    backup = next(v for v in pod["volumes"] if v["name"] == "backup")
    assert backup == {"name": "backup", "persistentVolumeClaim": {"claimName": BACKUP_CLAIM}}
    for container in (restore, pre_upgrade, signer, sidecar):
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "backup"]
        assert mount == {"name": "backup", "mountPath": "/backup/headscale", "subPath": "headscale"}


def test_volume_is_rwo_and_survives_a_destroy() -> None:
    run = _lone_server(database=sqlite(backup=backup(local={"storage": "persistent"})))
    claim = _object(run, "PersistentVolumeClaim", "headscale-data")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["storageClassName"] == "ceph-block"
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"


def test_the_site_keys_come_from_the_identity_stack_secret_and_mounted_read_only() -> None:
    run = _lone_server()
    assert not [r for r in run.resources if r.type == "random:index/randomBytes:RandomBytes"], "never generated"
    (reference,) = [r for r in run.resources if r.name == "headscale-identity-stack"]
    assert reference.inputs["name"] == IDENTITY_STACK
    secret = _object(run, "Secret", "headscale-identity")
    assert secret["stringData"] == {"noise.key": SECRET, "derp.key": SECRET}
    mount = next(m for m in _pod(run)["containers"][0]["volumeMounts"] if m["name"] == "identity")
    assert mount == {"name": "identity", "mountPath": "/etc/headscale/identity", "readOnly": True}


def test_identity_never_lands_in_a_config_map() -> None:
    run = _lone_server()
    # Imported keys are plain text in the Args: none of them may reach a ConfigMap either.
    imported = _lone_server(identity=ImportedIdentity(noise_private_key=NOISE_KEY, derp_private_key=DERP_KEY))
    for obj in [*run.kubernetes_objects(), *imported.kubernetes_objects()]:
        if obj["kind"] == "ConfigMap":
            assert not re.search(r"privkey:[0-9a-f]{64}", yaml.safe_dump(obj)), obj["metadata"]["name"]
    config = yaml.safe_load(_object(run, "ConfigMap", "headscale-config")["data"]["config.yaml"])
    assert config["noise"]["private_key_path"] == "/etc/headscale/identity/noise_private.key"
    assert config["policy"]["mode"] == "file"


def test_imported_identity_replaces_the_generated_one() -> None:
    run = _lone_server(identity=ImportedIdentity(noise_private_key=NOISE_KEY, derp_private_key=DERP_KEY))
    assert not [r for r in run.resources if r.type.startswith("random:index/randomBytes")]
    assert _object(run, "Secret", "headscale-identity")["stringData"] == {"noise.key": SECRET, "derp.key": SECRET}


def test_a_config_change_rolls_the_pod() -> None:
    base = _object(_lone_server(), "Deployment", "headscale")
    changed = _object(_lone_server(nameservers=("9.9.9.9",)), "Deployment", "headscale")
    annotation = "checksum/config"
    assert (
        base["spec"]["template"]["metadata"]["annotations"][annotation]
        != (changed["spec"]["template"]["metadata"]["annotations"][annotation])
    )


def test_service_exposes_http_and_metrics_only() -> None:
    ports = _object(_lone_server(), "Service", "headscale")["spec"]["ports"]
    assert {(p["name"], p["port"]) for p in ports} == {("http", 8080), ("metrics", 9090)}


# ------------------------------------------------------------------------------------------ args


def test_the_site_decides_replicas_identity_and_storage() -> None:
    """The component follows its Args; the role and stage decisions are the site's (program/args_headscale.py)."""
    hydra, cosmos = parse("hydra"), parse("cosmos")
    assert (headscale_replicas(hydra), headscale_replicas(cosmos)) == (1, 0)
    migrating = hydra.database.model_copy(update={"stage": DatabaseStage.MIGRATING})
    assert headscale_replicas(hydra.model_copy(update={"database": migrating})) == 0
    identity_stack = IdentityFromStack(stack_name="organization/headscale-ha-identity/tailnet")
    assert identity_source(hydra) == identity_source(cosmos) == identity_stack, "whatever the role"
    keys = {"noisePrivateKey": NOISE, "derpPrivateKey": DERP}
    for stack in ("hydra", "cosmos"):
        imported = identity_source(parse(stack, secret_keys=tuple(keys), **keys))
        assert imported == ImportedIdentity(noise_private_key=NOISE, derp_private_key=DERP), "imported keys win"
    active, standby = site_args(hydra).headscale, site_args(cosmos).headscale
    assert isinstance(active.database, SqliteStorage)
    assert isinstance(standby.database, SqliteStorage)
    assert (active.database.require_backup, standby.database.require_backup) == (False, True)
    assert active.database.storage_class == "ceph-block"
    assert active.split_dns == {hydra.tailnet.zone_of(site): (site.gateway_ip,) for site in hydra.tailnet.sites}


def test_only_the_embedded_relay_asks_for_the_public_address_and_only_oidc_mounts_its_secret() -> None:
    assert stun_annotations(None) == {"pulumi.com/skipAwait": "true"}
    assert stun_annotations("198.51.100.10")["lbipam.cilium.io/ips"] == "198.51.100.10"
    without, _ = server_files(oidc=False)
    with_oidc, _ = server_files(oidc=True)
    assert [v["name"] for v in without] == ["config", "identity"]
    assert [v["name"] for v in with_oidc] == ["config", "identity", "oidc"]
    with_policy, mounts = server_files(oidc=False, policy=PolicyFile(config_map="published", sha256="0" * 64))
    assert api.volume(with_policy[-1])["configMap"]["name"] == "published"
    assert api.mount(mounts[-1]) == {"name": "policy", "mountPath": PATHS.policy, "subPath": "policy.json",
                                     "readOnly": True}  # fmt: skip


#: A program of its own: HeadscaleServer on PostgreSQL with imported keys, OIDC and the embedded relay.
HAND_WRITTEN = """
    import pulumi

    from headscale_ha.components.headscale import (
        HeadscaleServer,
        HeadscaleServerArgs,
        ImportedIdentity,
        PostgresStorage,
    )
    from headscale_ha.components.headscale_config import PostgresConnection
    from headscale_ha.components.settings import (
        ClusterSettings,
        ComputeResources,
        DerpSettings,
        HeadscaleSettings,
        OidcSettings,
        ResourceAmounts,
    )

    server = HeadscaleServer(
        "hs",
        HeadscaleServerArgs(
            namespace="vpn",
            settings=HeadscaleSettings(
                image="ghcr.io/juanfont/headscale:0.28.0",
                version="0.28.0",
                resources=ComputeResources(
                    requests=ResourceAmounts(cpu="10m", memory="64Mi"), limits=ResourceAmounts(cpu="1", memory="256Mi")
                ),
                derp=DerpSettings(embedded=True, urls=[]),
                oidc=OidcSettings(issuer="https://login.example.org", client_id="vpn", allowed_domains=["example.org"]),
            ),
            cluster=ClusterSettings(nodes=1, workloads_on_control_plane=True),
            identity=ImportedIdentity(
                noise_private_key=pulumi.Output.secret("privkey:" + "ab" * 32),
                derp_private_key="privkey:" + "cd" * 32,
            ),
            database=PostgresStorage(
                connection=PostgresConnection(host="pg.db.svc", name="vpn", user="vpn_app"),
                password_secret="vpn-db",
                password_key="pass",
            ),
            server_hostname="vpn.example.org",
            stun_address="203.0.113.7",
            oidc_client_secret=pulumi.Output.secret("not-rendered"),
            base_domain="nodes.example.org",
            split_dns={"lab.example.org": ("10.0.0.53",)},
        ),
    )
    pulumi.export(
        "server",
        {
            "apiUrl": server.api_url,
            "service": server.service_name,
            "stunService": server.stun_service_name,
            "identitySecret": server.identity_secret_name,
            "oidcSecret": server.oidc_secret_name,
            "configMap": server.config_map_name,
            "dataClaim": server.data_claim_name,
        },
    )
"""


def test_another_program_can_still_generate_protected_keys(tmp_path: Path) -> None:
    """The component keeps GeneratedIdentity for other programs (the site stacks never use it)."""
    program = tmp_path / "__main__.py"
    text = re.sub(
        r"identity=ImportedIdentity\(\n.*?\n *\),\n",
        "identity=GeneratedIdentity(),\n",
        textwrap.dedent(HAND_WRITTEN),
        count=1,
        flags=re.DOTALL,
    )
    assert "ImportedIdentity(\n" not in text
    imports = "import (\n    HeadscaleServer,"
    assert imports in text
    program.write_text(text.replace(imports, "import (\n    GeneratedIdentity,\n    HeadscaleServer,"))
    run = run_program(project="vpn", stack="dev", config={}, program=program)
    keys = run.of_type("random:index/randomBytes:RandomBytes")
    assert sorted(r.name for r in keys) == ["hs-derp-key", "hs-noise-key"]
    assert all(r.inputs["length"] == 32 and r.protect for r in keys)


def test_a_server_from_hand_written_args_outside_the_stack_config(tmp_path: Path, shared_dir: Path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(textwrap.dedent(HAND_WRITTEN))
    run = run_program(project="vpn", stack="dev", config={}, program=program)
    files = [f for f in write_rendered(run, tmp_path / "rendered") if f.suffix == ".yaml"]
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert run.outputs["server"] == {
        "apiUrl": "http://headscale.vpn.svc.cluster.local:8080",
        "service": "headscale",
        "stunService": "headscale-stun",
        "identitySecret": "headscale-identity",
        "oidcSecret": "headscale-oidc",
        "configMap": "headscale-config",
        "dataClaim": None,
    }
    assert not [r for r in run.resources if r.type.startswith("random:")], "imported keys: nothing generated"
    assert not [o for o in run.kubernetes_objects() if o["kind"] == "PersistentVolumeClaim"]
    assert _object(run, "Secret", "headscale-identity")["stringData"] == {"noise.key": SECRET, "derp.key": SECRET}
    assert _object(run, "Secret", "headscale-oidc")["stringData"] == {"client-secret": SECRET}
    config = yaml.safe_load(_object(run, "ConfigMap", "headscale-config")["data"]["config.yaml"])
    assert config["server_url"] == "https://vpn.example.org"
    assert config["ephemeral_node_inactivity_timeout"] == "30m", "0.28 keys for a 0.28 server"
    assert (
        config["database"]["postgres"] | {"host": "pg.db.svc", "name": "vpn", "user": "vpn_app"}
        == (config["database"]["postgres"])
    )
    assert config["dns"]["nameservers"]["split"] == {"lab.example.org": ["10.0.0.53"]}
    (container,) = _pod(run)["containers"]
    assert container["env"] == [
        {"name": "HEADSCALE_DATABASE_POSTGRES_PASS", "valueFrom": {"secretKeyRef": {"name": "vpn-db", "key": "pass"}}}
    ]
    assert {v["name"] for v in _pod(run)["volumes"]} >= {"identity", "oidc", "config"}
    annotations = _object(run, "Service", "headscale-stun")["metadata"]["annotations"]
    assert annotations["lbipam.cilium.io/ips"] == "203.0.113.7"


def test_postgres_storage_needs_no_volume_settings() -> None:
    """The two storage choices carry nothing of each other: SQLite has its backup, PostgreSQL its Secret."""
    assert set(SqliteStorage.__dataclass_fields__) == {
        "size",
        "storage_class",
        "backup",
        "require_backup",
        "allow_empty_start",
    }
    assert set(PostgresStorage.__dataclass_fields__) == {
        "connection",
        "password_secret",
        "password_key",
        "ca_secret",
        "ca_key",
    }
