"""LitestreamBackup: config and script shipped to the pod, the served witness, the backup key, the position
recorder.

At the component seam: LitestreamBackup alone for an application of the caller's, and HeadscaleServer with Headplane
(the two applications it serves here) built alone from hand-written Args (tests/support/seam_samples.py). What the
stacks' config renders (the volumes kept or not, VolSync and its movers, the backup settings and overrides, the
optional witness declared where the site reads it) is in tests/program/test_site_litestream.py.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re

import pulumi
import pytest
import yaml
from pydantic import ValidationError

from headscale_ha.components.headplane import Headplane
from headscale_ha.components.identity import application_backup_key, derived_backup_key, identity_fingerprint
from headscale_ha.components.litestream import (
    SERVED_FILE,
    SERVED_KEY,
    SERVED_MOUNT,
    SERVED_VOLUME,
    LitestreamBackup,
    LitestreamBackupArgs,
    served_config_map,
)
from headscale_ha.components.litestream_config import restore_script
from headscale_ha.components.position_recorder import FIELD_MANAGER, POSITION_FILE, WITNESS_KEY
from headscale_ha.components.settings import BackupSettings, HeadscaleSettings
from tests.support.component_run import build_component
from tests.support.seam_litestream import api_access as _api_access
from tests.support.seam_litestream import holds as _holds
from tests.support.seam_litestream import restore_of as _restore
from tests.support.seam_litestream import witnesses as _witnesses
from tests.support.seam_samples import backup, build_pair, headplane_sample, sqlite
from tests.support.site_objects import deployment_pod as _deployment_pod
from tests.support.site_objects import objects_of as _objects
from tools.harness import ProgramRun


def test_volsync_needs_persistent_storage() -> None:
    with pytest.raises(ValidationError, match="volsync snapshots a PersistentVolumeClaim"):
        BackupSettings.model_validate({"volsync": {"repository": "restic-config"}})
    with pytest.raises(ValidationError, match="ephemeralStorageClass applies to disposable storage only"):
        BackupSettings.model_validate({"local": {"storage": "persistent", "ephemeralStorageClass": "local-path"}})


# --- the served witness: a third record, outside both volumes, that the site has served ----------------------------


def test_allow_empty_start_is_a_documented_date() -> None:
    field = HeadscaleSettings.model_fields["allow_empty_start"]
    assert field.alias == "allowEmptyStart"
    assert field.default is None
    assert "exit 24" in field.description
    assert "YYYY-MM-DD" in field.description
    base = {"version": "0.29.2", "image": "ghcr.io/juanfont/headscale:0.29.2"}
    # An unquoted YAML date and the text Pulumi hands over both mean the same day.
    assert HeadscaleSettings.model_validate(
        {**base, "allowEmptyStart": datetime.date(2031, 2, 3)}
    ).allow_empty_start == ("2031-02-03")
    assert HeadscaleSettings.model_validate({**base, "allowEmptyStart": "2031-02-03"}).allow_empty_start == "2031-02-03"
    for bad in ("yes", "true", "2031-2-3", "2031-02-30", "03.02.2031", "2031-02-03T00:00:00"):
        with pytest.raises(ValidationError, match="YYYY-MM-DD"):
            HeadscaleSettings.model_validate({**base, "allowEmptyStart": bad})


def test_every_site_derives_the_same_backup_key_and_the_epoch_rotates_it() -> None:
    """The backup key comes from the tailnet's Noise key, so an active reading the identity stack and a standby that
    imports the same keys sign and verify with one key; it reveals nothing of the Noise key."""
    noise = "privkey:" + "ab" * 32
    key = derived_backup_key(noise)
    assert re.fullmatch("[0-9a-f]{64}", key)
    assert derived_backup_key(f"  {noise}\n") == key, "trimmed like the fingerprint"
    assert derived_backup_key(noise, 2) != key
    assert derived_backup_key("privkey:" + "cd" * 32) != key
    assert "ab" * 32 not in key
    assert key != identity_fingerprint(noise)


def test_headplane_signs_with_its_own_key_derived_one_way_from_the_tailnets() -> None:
    """One key per application: Headplane's Secret holds HMAC-SHA256(tailnet key, label naming headplane), so its
    restore, signer and rehearsal hold nothing that signs Headscale's replica (HMAC is one-way); Headscale's replica
    keeps the tailnet key. Checked against the formula and on what the component writes."""
    tailnet = derived_backup_key("privkey:" + "ab" * 32)
    own = application_backup_key(tailnet, "headplane")
    label = b"headscale-ha backup key of application headplane v1"
    assert own == hmac.new(tailnet.encode(), label, hashlib.sha256).hexdigest()
    assert application_backup_key(f" {tailnet}\n", "headplane") == own
    assert own not in (tailnet, application_backup_key(tailnet, "headscale"))

    def build() -> None:
        headplane = Headplane("headplane", headplane_sample(backup_key=pulumi.Output.secret(tailnet)))
        assert headplane.backup.backup_key is not None
        pulumi.export("written", pulumi.Output.unsecret(headplane.backup.backup_key.string_data))

    run = build_component(build)
    assert run.outputs["written"] == {"backup.key": own}


WITNESS_TYPE = "kubernetes:core/v1:ConfigMapPatch"
DEPLOYMENT_TYPE = "kubernetes:apps/v1:Deployment"
ROLE_TYPES = ("kubernetes:core/v1:ServiceAccount", "kubernetes:rbac.authorization.k8s.io/v1:Role")
ROLE_TYPES += ("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",)


# --- at the seam: HeadscaleServer and Headplane, the applications the backup serves, built alone ---------------------


def test_each_application_gets_its_own_replica_directory() -> None:
    run = build_pair()
    maps = {
        o["metadata"]["name"]: o for o in _objects(run, "ConfigMap") if o["metadata"]["name"].endswith("-litestream")
    }
    assert set(maps) == {"headscale-litestream", "headplane-litestream"}
    for app, config_map in maps.items():
        config = yaml.safe_load(config_map["data"]["litestream.yml"])
        text = yaml.safe_dump(config)
        assert f"/backup/{app.removesuffix('-litestream')}/replica" in text
        assert config_map["data"]["restore.sh"] == restore_script()


def test_an_ephemeral_storage_class_gives_each_pod_its_own_claim() -> None:
    ephemeral = sqlite(backup=backup(local={"ephemeralStorageClass": "local-path"}))
    run = build_pair(server={"database": ephemeral})
    pod = _deployment_pod(run, "headscale")
    (data,) = [v for v in pod["volumes"] if v["name"] == "data"]
    spec = data["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert spec == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "local-path",
        "resources": {"requests": {"storage": "1Gi"}},
    }
    claims = [o["metadata"]["name"] for o in run.kubernetes_objects() if o["kind"] == "PersistentVolumeClaim"]
    assert claims == [], "the ephemeral-volume controller creates the pod's claim, not Pulumi"


def test_the_witness_is_written_only_after_the_deployment_rolled_out_and_is_retained() -> None:
    run = build_pair()
    witnesses = _witnesses(run)
    assert set(witnesses) == {served_config_map("headscale"), served_config_map("headplane")}
    deployments = {r.inputs["metadata"]["name"]: r for r in run.of_type(DEPLOYMENT_TYPE)}
    for app in ("headscale", "headplane"):
        witness = witnesses[f"{app}-served"]
        # pulumi-kubernetes awaits the Deployment's readiness: the witness is created after a ready rollout only.
        assert deployments[app].urn in witness.dependencies
        assert witness.retain_on_delete, "destroy and a demotion leave the witness in the cluster"
        assert witness.inputs["kind"] == "ConfigMap"
        assert witness.inputs["metadata"]["namespace"] == "headscale"
        assert witness.inputs["data"] == {SERVED_KEY: "true"}
        # Server-side apply: a retained witness from an earlier life of the site is adopted, not AlreadyExists.
        assert witness.inputs["metadata"]["annotations"] == {"pulumi.com/patchForce": "true"}


def test_the_restore_reads_the_witness_through_an_optional_volume() -> None:
    run = build_pair()
    for app in ("headscale", "headplane"):
        pod, restore = _restore(run, app)
        env = {e["name"]: e.get("value") for e in restore["env"]}
        assert env["SERVED_FILE"] == SERVED_FILE == f"{SERVED_MOUNT}/served"
        assert "ALLOW_EMPTY_START" not in env, "no override unless configured"
        (mount,) = [m for m in restore["volumeMounts"] if m["name"] == SERVED_VOLUME]
        assert mount == {"name": SERVED_VOLUME, "mountPath": SERVED_MOUNT, "readOnly": True}
        (volume,) = [v for v in pod["volumes"] if v["name"] == SERVED_VOLUME]
        assert volume["configMap"]["name"] == f"{app}-served"
        assert volume["configMap"]["optional"] is True, "absent until the first ready rollout"
        served = [{"key": SERVED_KEY, "path": SERVED_KEY}]
        if app == "headscale":
            assert volume["configMap"]["items"] == [*served, {"key": WITNESS_KEY, "path": WITNESS_KEY}], (
                "the served flag, and the position the running pod recorded"
            )
            assert env["POSITION_WITNESS_FILE"] == f"{SERVED_MOUNT}/{WITNESS_KEY}"
        else:
            assert volume["configMap"]["items"] == served, "Headplane records no position"
            assert "POSITION_WITNESS_FILE" not in env
        # Only the restore reads it: the replicator and the application never see it.
        others = [c for c in [*pod["initContainers"], *pod["containers"]] if c["name"] != "restore"]
        assert all(m["name"] != SERVED_VOLUME for c in others for m in c.get("volumeMounts", []))


def test_a_standby_writes_the_witness_for_its_promotion_but_does_not_read_it() -> None:
    """A promoted standby has never served where it runs; the witness it wrote as a standby makes its restore refuse
    an empty start once promoted (its REQUIRE_BACKUP is off then), as on the site that served."""
    run = build_pair(
        server={"replicas": 0, "database": sqlite(require_backup=True)},
        headplane={"replicas": 0, "require_backup": True},
    )
    witnesses = _witnesses(run)
    assert set(witnesses) == {served_config_map("headscale"), served_config_map("headplane")}
    deployments = {r.inputs["metadata"]["name"]: r for r in run.of_type(DEPLOYMENT_TYPE)}
    for app in ("headscale", "headplane"):
        assert deployments[app].urn in witnesses[f"{app}-served"].dependencies
        assert witnesses[f"{app}-served"].retain_on_delete
    for app in ("headscale", "headplane"):
        pod, restore = _restore(run, app)
        env = {e["name"]: e.get("value") for e in restore["env"]}
        assert env["REQUIRE_BACKUP"] == "true", "stricter than the witness: a standby never starts empty"
        assert "SERVED_FILE" not in env
        assert all(v["name"] != SERVED_VOLUME for v in pod["volumes"])


def test_a_stopped_server_writes_no_witness() -> None:
    """0 replicas roll out "ready" without serving: no witness for Headscale then (Headplane still serves)."""
    run = build_pair(server={"replicas": 0})
    assert set(_witnesses(run)) == {"headplane-served"}
    _, restore = _restore(run, "headscale")
    assert {e["name"]: e.get("value") for e in restore["env"]}["SERVED_FILE"] == SERVED_FILE


def test_only_the_signer_the_restores_and_the_pre_upgrade_hold_the_backup_key() -> None:
    """Authenticated backups: each application's key Secret, a Pulumi secret, mounted by exactly the containers that
    sign or verify; the Litestream sidecar waits for its position before the application starts and stops after
    the last sync."""
    run = build_pair()
    secrets = {
        o["metadata"]["name"]: o for o in _objects(run, "Secret") if o["metadata"]["name"].endswith("-backup-key")
    }
    assert set(secrets) == {"headscale-backup-key", "headplane-backup-key"}
    assert all(repr(secret["stringData"]["backup.key"]) == "[secret]" for secret in secrets.values())
    for app in ("headscale", "headplane"):
        pod = _deployment_pod(run, app)
        (key,) = [v for v in pod["volumes"] if v["name"] == "backup-key"]
        assert key["secret"]["secretName"] == f"{app}-backup-key"
        containers = [*pod["initContainers"], *pod["containers"]]
        # Headscale's pre-upgrade container MACs its snapshot; Headplane has none.
        holders = ["restore", "pre-upgrade", "backup-signer"] if app == "headscale" else ["restore", "backup-signer"]
        assert [c["name"] for c in containers if _holds(c, "backup-key")] == holders
        names = [c["name"] for c in pod["initContainers"]]
        assert names.index("backup-signer") < names.index("litestream"), "starts first, stops last"
        sidecar = next(c for c in pod["initContainers"] if c["name"] == "litestream")
        assert sidecar["startupProbe"]["exec"]["command"] == ["/bin/sh", "/etc/litestream/position.sh", "caught-up"]
        assert sidecar["lifecycle"]["preStop"]["exec"]["command"][-1] == "drain"
        config = next(o for o in _objects(run, "ConfigMap") if o["metadata"]["name"] == f"{app}-litestream")
        assert {"restore.sh", "manifest.sh", "position.sh"} <= set(config["data"])
        cron = next(o for o in _objects(run, "CronJob") if o["metadata"]["name"] == f"{app}-restore-rehearsal")
        job_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        (rehearsal,) = job_pod["containers"]
        assert _holds(rehearsal, "backup-key")
        env = {e["name"]: e["value"] for e in rehearsal["env"]}
        assert env["BACKUP_KEY_FILE"] == "/etc/litestream-key/backup.key"
        assert env["MANIFEST_MAX_AGE_SECONDS"] == str(24 * 3600)


def test_only_the_recorder_holds_a_token_and_it_patches_only_the_witness() -> None:
    """Least privilege: the pod's account is the recorder's, its token is mounted into the recorder alone, and it
    can get and patch the served witness, nothing else (no create, no other ConfigMap, no Secret). Headplane's pod
    holds no token at all."""
    app = "headscale"
    run = build_pair()
    objects = run.kubernetes_objects()
    assert not any(_api_access(objects, "headscale", "headplane").values())
    assert "serviceAccountName" not in _deployment_pod(run, "headplane")
    access = _api_access(objects, "headscale", app)
    assert {name: grants for name, grants in access.items() if grants} == {
        "position-recorder": {("configmaps", f"{app}-served", "get"), ("configmaps", f"{app}-served", "patch")}
    }
    (account,) = [o for o in _objects(run, "ServiceAccount") if o["metadata"]["name"] == f"{app}-position-recorder"]
    assert account["automountServiceAccountToken"] is False
    pod = _deployment_pod(run, app)
    assert pod["serviceAccountName"] == f"{app}-position-recorder"
    assert pod["automountServiceAccountToken"] is False
    # The evaluator is not blind: the automounted token would give every container the recorder's rights.
    loose = [
        {
            **o,
            "spec": {
                **o["spec"],
                "template": {**o["spec"]["template"], "spec": {**pod, "automountServiceAccountToken": True}},
            },
        }
        if o["kind"] == "Deployment" and o["metadata"]["name"] == app
        else o
        for o in objects
    ]
    assert all(_api_access(loose, "headscale", app).values())


def test_the_recorder_sits_between_the_restore_and_the_signer_and_sees_only_the_position() -> None:
    run = build_pair()
    headplane = [c["name"] for c in _deployment_pod(run, "headplane")["initContainers"]]
    assert headplane == ["restore", "backup-signer", "litestream"]
    for app in ("headscale",):
        pod = _deployment_pod(run, app)
        names = [c["name"] for c in pod["initContainers"]]
        expected = ["restore", "pre-upgrade"]
        assert names == [*expected, "position-recorder", "backup-signer", "litestream"], "stops after the signer"
        recorder = next(c for c in pod["initContainers"] if c["name"] == "position-recorder")
        assert recorder == {
            "name": "position-recorder",
            "image": "docker.io/curlimages/curl:8.16.0",
            "command": ["/bin/sh", "/etc/litestream/position-recorder.sh"],
            "restartPolicy": "Always",
            "env": [
                {"name": "POSITION_FILE", "value": POSITION_FILE},
                {"name": "NAMESPACE", "value": "headscale"},
                {"name": "CONFIG_MAP", "value": f"{app}-served"},
                {"name": "DATA_KEY", "value": "position"},
                {"name": "TOKEN_FILE", "value": "/var/run/secrets/headscale-ha/recorder/token"},
                {"name": "CA_FILE", "value": "/var/run/secrets/headscale-ha/recorder/ca.crt"},
                {"name": "INTERVAL_SECONDS", "value": "5"},
                {"name": "FIELD_MANAGER", "value": FIELD_MANAGER},
            ],
            "volumeMounts": [
                {"name": "backup-position", "mountPath": "/run/backup-position", "readOnly": True},
                {"name": "recorder-token", "mountPath": "/var/run/secrets/headscale-ha/recorder", "readOnly": True},
                {"name": "litestream-config", "mountPath": "/etc/litestream", "readOnly": True},
                {"name": "recorder-tmp", "mountPath": "/tmp"},
            ],
            "resources": recorder["resources"],
            "securityContext": next(c for c in pod["initContainers"] if c["name"] == "litestream")["securityContext"],
        }
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["backup-position"] == {
            "name": "backup-position",
            "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"},
        }
        assert volumes["recorder-token"]["projected"]["sources"] == [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        ]
        signer = next(c for c in pod["initContainers"] if c["name"] == "backup-signer")
        assert {"name": "POSITION_FILE", "value": POSITION_FILE} in signer["env"]
        assert {"name": "backup-position", "mountPath": "/run/backup-position", "readOnly": False} in signer[
            "volumeMounts"
        ]
        mounting = [c["name"] for c in [*pod["initContainers"], *pod["containers"]] if _holds(c, "backup-position")]
        assert mounting == ["position-recorder", "backup-signer"]
        private = [c["name"] for c in [*pod["initContainers"], *pod["containers"]] if _holds(c, "recorder-tmp")]
        assert private == ["position-recorder"], "its request header holds the token"
        assert volumes["recorder-tmp"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}
        config = next(o for o in _objects(run, "ConfigMap") if o["metadata"]["name"] == f"{app}-litestream")
        assert config["data"]["position-recorder.sh"].startswith("#!/bin/sh")


def test_the_deployments_wait_for_the_recorders_account_and_outlive_it_on_destroy() -> None:
    run = build_pair()
    deployments = {r.inputs["metadata"]["name"]: r for r in run.of_type(DEPLOYMENT_TYPE)}
    for app in ("headscale",):
        rbac = [
            r for t in ROLE_TYPES for r in run.of_type(t) if r.inputs["metadata"]["name"] == f"{app}-position-recorder"
        ]
        assert len(rbac) == 3
        assert {r.urn for r in rbac} <= set(deployments[app].dependencies)


def test_without_position_recording_nothing_holds_a_token() -> None:
    unrecorded = backup(auth={"recordPosition": False, "allowRollback": "2026-12-01"})
    run = build_pair(server={"database": sqlite(backup=unrecorded)}, headplane={"backup": unrecorded})
    assert not [o for o in _objects(run, "ServiceAccount") if "position-recorder" in o["metadata"]["name"]]
    for app in ("headscale", "headplane"):
        pod, restore = _restore(run, app)
        assert "serviceAccountName" not in pod
        assert "position-recorder" not in [c["name"] for c in pod["initContainers"]]
        env = {e["name"]: e.get("value") for e in restore["env"]}
        assert "POSITION_WITNESS_FILE" not in env
        assert env["ALLOW_ROLLBACK_RESTORE"] == "2026-12-01", "an older record may still be there"
        (witness,) = [v for v in pod["volumes"] if v["name"] == SERVED_VOLUME]
        assert witness["configMap"]["items"] == [{"key": SERVED_KEY, "path": SERVED_KEY}]


def _lone_backup(*, record_position: bool, backup_key: str | None = "ab" * 32) -> ProgramRun:
    """LitestreamBackup alone, for an application of the caller's (no stack file, no other component)."""
    settings = BackupSettings.model_validate({"nfs": {"server": "nfs.example.org", "path": "/export/b"}})
    args = LitestreamBackupArgs(
        app="vault",
        part_of="vaultwarden",
        namespace="apps",
        settings=settings,
        db_path="/data/db.sqlite",
        data_volume="data",
        data_mount="/data",
        pvc_name=None,
        backup_claim="backup",
        backup_key=backup_key,
        record_position=record_position,
    )
    return build_component(lambda: LitestreamBackup("vault", args))


def test_the_component_alone_registers_the_recorder_only_where_asked() -> None:
    """At the component seam: the recorder's account, Role and binding exist only for an application that asks
    for it and signs its backups, named after that application, bound to its witness."""
    recording = _lone_backup(record_position=True)
    roles = [o for o in recording.kubernetes_objects() if o["kind"] == "Role"]
    assert [(r["metadata"]["name"], r["metadata"]["namespace"], r["rules"]) for r in roles] == [
        (
            "vault-position-recorder",
            "apps",
            [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": ["vault-served"],
                    "verbs": ["get", "patch"],
                }
            ],
        )
    ]
    kinds = sorted(o["kind"] for o in recording.kubernetes_objects())
    assert kinds == ["ConfigMap", "Role", "RoleBinding", "Secret", "ServiceAccount"]
    assert sorted(o["kind"] for o in _lone_backup(record_position=False).kubernetes_objects()) == [
        "ConfigMap",
        "Secret",
    ]
    unsigned = _lone_backup(record_position=True, backup_key=None)
    assert [o["kind"] for o in unsigned.kubernetes_objects()] == ["ConfigMap"], "no key: nothing to record"


def test_every_object_of_the_component_alone_names_the_callers_application() -> None:
    """`app.kubernetes.io/part-of` is the caller's (``part_of``), never headscale-ha's, on every object the
    backup makes for another application, its pod-facing pieces included."""
    recording = _lone_backup(record_position=True)
    part_of = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["labels"]["app.kubernetes.io/part-of"]
        for o in recording.kubernetes_objects()
    }
    assert set(part_of.values()) == {"vaultwarden"}, part_of
    assert len(part_of) == 5
