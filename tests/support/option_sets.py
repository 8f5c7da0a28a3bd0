"""The option sets (every stage, role and feature) and how to plan them: used by test_main and the component tests."""

from __future__ import annotations

from pathlib import Path

import yaml

from headscale_ha.program.config import StackConfig, parse_stack_config
from tests.support.stacks import ACTIVE_STACK
from tools.harness import PROJECT_DIR, ProgramRun
from tools.plan import PLACEHOLDERS, plan_stack
from tools.stack_files import read_stack_settings

POSTGRES_STAGE = """\
  headscale-ha:database:
    stage: {stage}
    postgres:
      instances: 1
      objectStore: {{destinationPath: "s3://headscale-wal/hydra"}}
    migration: {{image: "registry.example.com/headscale-ha/migrate:1.0.0"}}
  headscale-ha:objectStoreAccessKeyId:
    secure: v1:AAAA
  headscale-ha:objectStoreSecretAccessKey:
    secure: v1:BBBB
"""
OIDC_SECRETS = """\
  headscale-ha:oidcClientSecret:
    secure: v1:CCCC
  headscale-ha:headplaneApiKey:
    secure: v1:DDDD
"""
LAB_ACTIVE = (
    "config:\n  headscale-ha:role: active\n"
    "  headscale-ha:cluster: {name: hydra, nodes: 3, apiServer: {host: 10.10.0.10}}\n"
    "  headscale-ha:networkPolicy: {apiServerCidrs: [10.10.0.0/24]}\n"
)
#: name -> (stack file text of "lab", changes to the shared config, secrets assumed set). Every stage, both roles,
#: both router modes and key paths, both routes, both backup volume sources, OIDC, embedded DERP, VolSync.
OPTION_SETS: dict[str, tuple[str, dict, tuple[str, ...]]] = {
    "sqlite-kernel-routers-router-key": (
        LAB_ACTIVE + "  headscale-ha:gateway: {routers: {mode: kernel, replicas: 2}}\n"
        "  headscale-ha:routerAuthKeys:\n    - secure: v1:EEEE\n    - secure: v1:FFFF\n",
        {},
        (),
    ),
    "sqlite-api-key-storage-class-volsync": (
        LAB_ACTIVE,
        {
            "backup": {
                "nfs": {"storageClass": "nfs-csi"},
                "local": {"storage": "persistent"},
                "volsync": {"repository": "restic-config"},
            }
        },
        ("bootstrapApiKey",),
    ),
    "sqlite-ephemeral-volume-no-rehearsal": (
        LAB_ACTIVE,
        {"backup": {"local": {"ephemeralStorageClass": "local-path"}, "rehearsal": {"enabled": False}}},
        (),
    ),
    "migrating-oidc": (
        LAB_ACTIVE + POSTGRES_STAGE.format(stage="migrating") + OIDC_SECRETS,
        {
            "headscale": {"oidc": {"issuer": "https://id.example.com", "clientId": "hs", "allowedGroups": ["ops"]}},
            "headplane": {"oidcLogin": True},
        },
        (),
    ),
    "postgres-embedded-derp-ingress-kernel-api-key": (
        LAB_ACTIVE + POSTGRES_STAGE.format(stage="postgres") + "  headscale-ha:endpoint: {route: ingress}\n"
        "  headscale-ha:gateway: {routers: {mode: kernel}}\n",
        {"headscale": {"derp": {"embedded": True}}},
        ("bootstrapApiKey",),
    ),
    "standby-postgres-external-dns": (
        "config:\n  headscale-ha:role: standby\n"
        "  headscale-ha:cluster: {name: cosmos, nodes: 1, workloadsOnControlPlane: true, apiServer: {host: 10.2.0.1}}\n"
        "  headscale-ha:networkPolicy: {apiServerCidrs: [10.2.0.1/32]}\n"
        "  headscale-ha:endpoint: {failover: externalDns}\n" + POSTGRES_STAGE.format(stage="postgres"),
        {},
        ("bootstrapApiKey",),
    ),
    "standby-postgres-streaming-k8gb": (
        "config:\n  headscale-ha:role: standby\n"
        "  headscale-ha:cluster: {name: cosmos, nodes: 1, workloadsOnControlPlane: true, apiServer: {host: 10.2.0.1}}\n"
        "  headscale-ha:networkPolicy: {apiServerCidrs: [10.2.0.1/32]}\n"
        "  headscale-ha:endpoint: {failover: k8gb}\n"
        + POSTGRES_STAGE.format(stage="postgres").replace(
            "      instances: 1\n",
            "      instances: 1\n      replicaSource: streaming\n      streamingHost: 172.30.250.10\n",
        ),
        {},
        (),
    ),
}


#: name -> what the active site (hydra) exports differently for that option set: a standby checks its active.
ACTIVE_OUTPUTS: dict[str, dict] = {
    "standby-postgres-external-dns": {"databaseStage": "postgres"},
    "standby-postgres-streaming-k8gb": {"databaseStage": "postgres"},
}


def option_set_stack(name: str, project_copy) -> tuple[Path, str, list[str]]:
    """Where an option set's stack files are: (project directory, stack, secrets assumed set)."""
    if name in STACKS:
        return PROJECT_DIR, name, ["bootstrapApiKey"] if name == "hydra" else []
    stack_text, shared, secrets = OPTION_SETS[name]
    project = project_copy(lab=stack_text)
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    for key, value in shared.items():
        document["config"][key]["value"] = {**document["config"][key]["value"], **value}
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return project, "lab", list(secrets)


def option_set_run(name: str, project_copy, stack_outputs: dict[str, dict]) -> ProgramRun:
    """Plan an option set; ``stack_outputs`` (the fixture) gives the identity stack's and the active's outputs."""
    project, stack, secrets = option_set_stack(name, project_copy)
    stack_outputs[ACTIVE_STACK].update(ACTIVE_OUTPUTS.get(name, {}))
    return plan_stack(stack, project_dir=project, assume_secrets=secrets, stack_outputs=stack_outputs)


def option_set_config(name: str, project_copy) -> StackConfig:
    """The StackConfig the program sees for an option set (what its externals are derived from)."""
    project, stack, secrets = option_set_stack(name, project_copy)
    settings = read_stack_settings(project, stack, placeholders=PLACEHOLDERS, assume_secrets=secrets)
    prefix = f"{settings.project}:"
    raw = {key.removeprefix(prefix): value for key, value in settings.config.items() if key.startswith(prefix)}
    secret = {key.removeprefix(prefix) for key in settings.secret_keys if key.startswith(prefix)}
    return parse_stack_config(raw, stack=stack, secret_keys=secret)


STACKS = ("hydra", "cosmos")
ALL_SETS = [*STACKS, *OPTION_SETS]
