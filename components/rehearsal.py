"""RestoreRehearsal: a CronJob that proves, on a schedule, that an application's Litestream backup restores.

Replication that silently stopped, or a replica that no longer restores, is only noticed on the day it is needed.
The CronJob mounts the NFS backup read-only, restores the newest replica into a scratch emptyDir with SQLite's full
integrity check (components/scripts/litestream-rehearse.sh), and fails the Job when the replica is missing, empty,
older than ``max_age_seconds`` or broken; failed Jobs are kept so an alert on failed Jobs sees them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ContainerArgsDict,
    EnvVarArgsDict,
    PodSpecArgsDict,
    VolumeArgsDict,
    VolumeMountArgsDict,
)

from headscale_ha.components.config_types import quantity_value
from headscale_ha.components.litestream import (
    BACKUP_KEY_FILE,
    BACKUP_KEY_VOLUME_MOUNT,
    BACKUP_MOUNT,
    BACKUP_VOLUME,
    MANIFEST_FILE_NAME,
    MANIFEST_SCRIPT_KEY,
    backup_key_volume,
    backup_mount,
    manifest_script,
)
from headscale_ha.components.pod import (
    checksum,
    container_security,
    labels,
    pod_security,
    resources,
    scheduling,
    static_check_skips,
)
from headscale_ha.components.settings import ClusterSettings, ComputeResources
from headscale_ha.components.shell_scripts import packaged_script

REHEARSE_SCRIPT_NAME = "litestream-rehearse.sh"
REHEARSAL_SCRIPT_KEY = "rehearse.sh"
SCRIPT_VOLUME = "rehearsal-script"
SCRIPT_MOUNT = "/etc/litestream-rehearsal"
SCRIPT_FILE = f"{SCRIPT_MOUNT}/{REHEARSAL_SCRIPT_KEY}"
SCRATCH_VOLUME = "scratch"
SCRATCH_MOUNT = "/scratch"
TMP_VOLUME = "tmp"
COMPONENT = "rehearsal"
#: How late a missed run may still start (a controller outage); later, the run is skipped and the next one counts.
STARTING_DEADLINE_SECONDS = 3600
SCRIPT_CHECKSUM_ANNOTATION = "headscale-ha/rehearse-script-sha256"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CRON_FIELD = re.compile(r"^[A-Za-z0-9*/,?-]+$")
#: The CronJob's name is `<app>-restore-rehearsal` and a Job's pod adds suffixes: Kubernetes caps CronJob names at
#: 52 characters so the Jobs it creates fit in 63.
_MAX_APP = 52 - len("-restore-rehearsal")


def rehearse_script() -> str:
    """Text of the rehearsal script, shipped as package data next to this module."""
    return packaged_script(REHEARSE_SCRIPT_NAME)


def cron_job_name(app: str) -> str:
    """The CronJob (and its script ConfigMap) of one application, in its namespace."""
    return f"{app}-restore-rehearsal"


def replica_dir(app: str) -> str:
    """Where the pod sees the application's replica: its backup sub-directory (`backup_mount`) + `/replica`."""
    return f"{BACKUP_MOUNT}/{app}/replica"


@dataclass(frozen=True, kw_only=True)
class RestoreRehearsalArgs:
    """Which application's backup to rehearse, how often, and what counts as too old."""

    app: str  # the application; its replica is `<app>/replica` on the backup claim (as LitestreamBackup writes it)
    namespace: str  # the application's namespace, where its backup claim is
    image: str  # the Litestream image (the same as the replicating sidecar's)
    backup_claim: str  # the claim of the NFS export, mounted read-only
    schedule: str  # five-field cron, in the controller's time zone
    max_age_seconds: int  # the newest transaction in the replica must be younger than this
    resources: ComputeResources  # requests and limits of the rehearsal container
    cluster: ClusterSettings  # placement of the Job's pod
    scratch_size: str  # Kubernetes quantity: the scratch emptyDir's limit; must hold a restored copy of the database
    deadline_seconds: int = 900  # a run that takes longer fails (a hung NFS mount must not block the next ones)
    #: The Secret with the tailnet's backup key (`<app>-backup-key`): the rehearsal verifies the replica's signed
    #: manifest as the restore does; None: no authentication.
    backup_key_secret: str | None = None
    #: With ``backup_key_secret``: the restore's ``backup.auth.maxAge`` in seconds; an older manifest fails the
    #: rehearsal as it would fail a restore. None: no age check of the manifest.
    manifest_max_age_seconds: int | None = None

    def __post_init__(self) -> None:
        problems = [*self._name_problems(), *self._timing_problems(), *self._size_problems()]
        if problems:
            raise ValueError("RestoreRehearsalArgs: " + "; ".join(problems))

    def _name_problems(self) -> list[str]:
        """The names the rehearsal's objects are made from: the application, the namespace, the image, the claim."""
        problems = []
        if not _DNS_LABEL.match(self.app) or len(self.app) > _MAX_APP:
            problems.append(f"app {self.app!r}: must be a DNS label of at most {_MAX_APP} characters")
        if not _DNS_LABEL.match(self.namespace) or len(self.namespace) > 63:
            problems.append(f"namespace {self.namespace!r}: must be a DNS label")
        if not self.image:
            problems.append("image '': must name the Litestream image")
        if not self.backup_claim:
            problems.append("backup_claim '': must name the claim of the NFS backup export")
        return problems

    def _timing_problems(self) -> list[str]:
        """The schedule, the age a replica may reach, and how long one run may take."""
        problems = []
        fields = self.schedule.split()
        if len(fields) != 5 or not all(_CRON_FIELD.match(field) for field in fields):
            problems.append(f"schedule {self.schedule!r}: must be a five-field cron expression such as '17 4 * * *'")
        if isinstance(self.max_age_seconds, bool) or not isinstance(self.max_age_seconds, int):
            problems.append(f"max_age_seconds {self.max_age_seconds!r}: must be a whole number of seconds")
        elif not 0 < self.max_age_seconds < 10**10:
            problems.append(f"max_age_seconds {self.max_age_seconds!r}: must be positive (and below 10^10)")
        if isinstance(self.deadline_seconds, bool) or not isinstance(self.deadline_seconds, int):
            problems.append(f"deadline_seconds {self.deadline_seconds!r}: must be a whole number of seconds")
        elif self.deadline_seconds <= 0:
            problems.append(f"deadline_seconds {self.deadline_seconds!r}: must be positive")
        return problems

    def _size_problems(self) -> list[str]:
        try:
            if quantity_value(self.scratch_size) <= 0:
                return [f"scratch_size {self.scratch_size!r}: must be more than zero"]
        except ValueError:
            return [f"scratch_size {self.scratch_size!r}: must be a Kubernetes quantity such as 1Gi"]
        return []


class RestoreRehearsal(pulumi.ComponentResource):
    """The restore rehearsal of one application; see the module docstring.

    Outputs (registered): ``cronJob`` [attribute cron_job]: the CronJob's name; ``schedule``: its schedule.
    The script's ConfigMap is the attribute ``config_map``.
    """

    config_map: k8s.core.v1.ConfigMap
    cron_job: k8s.batch.v1.CronJob

    def __init__(self, name: str, args: RestoreRehearsalArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:litestream:RestoreRehearsal", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        object_name = cron_job_name(args.app)
        # Its own name label: with the application's, its pods would match the application's Service selector and
        # receive the application's traffic while a rehearsal runs.
        object_labels = labels(object_name, COMPONENT)
        script = rehearse_script()
        scripts = {REHEARSAL_SCRIPT_KEY: script}
        if args.backup_key_secret is not None:
            scripts[MANIFEST_SCRIPT_KEY] = manifest_script()
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-script",
            metadata={"name": object_name, "namespace": args.namespace, "labels": object_labels},
            data=scripts,
            opts=child,
        )
        pod_spec = self._pod_spec(args, object_name)
        self.cron_job = k8s.batch.v1.CronJob(
            f"{name}-cronjob",
            metadata={
                "name": object_name,
                "namespace": args.namespace,
                "labels": object_labels,
                # checkov's image rules, skipped with the reasons every workload of this program gives.
                "annotations": static_check_skips(pod_spec),
            },
            spec={
                "schedule": args.schedule,
                # Never two restores at once: a slow NFS would otherwise pile up runs.
                "concurrency_policy": "Forbid",
                "starting_deadline_seconds": STARTING_DEADLINE_SECONDS,
                "successful_jobs_history_limit": 1,
                # A failed run stays visible (kube_job_failed, `kubectl get jobs`) until three newer ones failed.
                "failed_jobs_history_limit": 3,
                "job_template": {
                    "metadata": {"labels": object_labels},
                    "spec": {
                        # A failed rehearsal is a finding, not a flake to retry away.
                        "backoff_limit": 0,
                        "active_deadline_seconds": args.deadline_seconds,
                        "template": {
                            "metadata": {
                                "labels": object_labels,
                                "annotations": {SCRIPT_CHECKSUM_ANNOTATION: checksum(*scripts.values())},
                            },
                            "spec": pod_spec,
                        },
                    },
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.config_map]),
        )
        self.register_outputs({"cronJob": object_name, "schedule": args.schedule})

    @staticmethod
    def _pod_spec(args: RestoreRehearsalArgs, config_map: str) -> PodSpecArgsDict:
        env: list[EnvVarArgsDict] = [
            {"name": "APP", "value": args.app},
            {"name": "REPLICA_DIR", "value": replica_dir(args.app)},
            {"name": "SCRATCH_DIR", "value": SCRATCH_MOUNT},
            {"name": "MAX_AGE_SECONDS", "value": str(args.max_age_seconds)},
        ]
        mounts: list[VolumeMountArgsDict] = [
            # Read-only twice over: the mount and the claim volume, so the rehearsal can never harm the backup.
            backup_mount(args.app, read_only=True),
            {"name": SCRIPT_VOLUME, "mount_path": SCRIPT_MOUNT, "read_only": True},
            {"name": SCRATCH_VOLUME, "mount_path": SCRATCH_MOUNT},
            {"name": TMP_VOLUME, "mount_path": "/tmp"},
        ]
        volumes: list[VolumeArgsDict] = [
            {"name": BACKUP_VOLUME, "persistent_volume_claim": {"claim_name": args.backup_claim, "read_only": True}},
            {"name": SCRIPT_VOLUME, "config_map": {"name": config_map, "default_mode": 0o444}},
            {"name": SCRATCH_VOLUME, "empty_dir": {"size_limit": args.scratch_size}},
            {"name": TMP_VOLUME, "empty_dir": {"size_limit": "64Mi"}},  # the root filesystem is read-only
        ]
        if args.backup_key_secret is not None:
            env.extend(
                [
                    {"name": "BACKUP_KEY_FILE", "value": BACKUP_KEY_FILE},
                    {"name": "MANIFEST_FILE", "value": f"{BACKUP_MOUNT}/{args.app}/{MANIFEST_FILE_NAME}"},
                    {"name": "MANIFEST_SCRIPT", "value": f"{SCRIPT_MOUNT}/{MANIFEST_SCRIPT_KEY}"},
                ]
            )
            if args.manifest_max_age_seconds is not None:
                env.append({"name": "MANIFEST_MAX_AGE_SECONDS", "value": str(args.manifest_max_age_seconds)})
            mounts.append(BACKUP_KEY_VOLUME_MOUNT)
            volumes.append(backup_key_volume(args.backup_key_secret))
        container: ContainerArgsDict = {
            "name": COMPONENT,
            "image": args.image,
            "command": ["/bin/sh", SCRIPT_FILE],
            "env": env,
            "volume_mounts": mounts,
            "resources": resources(args.resources),
            "security_context": container_security(),
        }
        return {
            "restart_policy": "Never",
            "automount_service_account_token": False,
            "enable_service_links": False,
            "security_context": pod_security(),
            **scheduling(args.cluster),
            "containers": [container],
            "volumes": volumes,
        }
