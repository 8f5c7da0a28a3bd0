"""A lab for lifecycle tests: two clusters (hydra, cosmos), the identity stack and the two site stacks of this
repository, run by the engine model with their real config; optionally a fake Headscale behind hydra's public URL.

``lab.run("up", "hydra", overrides={"headscale-ha:gateway.routers.replicas": 3})`` runs `pulumi up` of hydra with
that config value changed (a dotted path inside a key's object, as `pulumi config set --path` does).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components.endpoint import NAME as ROUTE
from program.config import SECRET_KEYS
from tests.support.engine.apiserver import Cluster
from tests.support.engine.engine import Engine
from tests.support.engine.state import RunResult
from tests.support.engine.world import World, kubeconfig_for
from tests.support.fake_headscale import FakeHeadscale
from tools.harness import PROJECT_DIR
from tools.plan import IDENTITY_DIR, PLACEHOLDERS
from tools.stack_files import read_stack_settings

SITES = ("hydra", "cosmos")
IDENTITY = "tailnet"
API_KEY = "headscale-ha:bootstrapApiKey"
API_URL = "headscale-ha:headscaleApiUrl"


def _headscale_serves(world: World) -> bool:
    """Headscale answers at its public URL while hydra runs it: the Deployment with a replica, its route."""
    cluster = world.clusters["hydra"]
    deployment = cluster.find("Deployment", "headscale", "headscale")
    route = cluster.find("HTTPRoute", ROUTE, "headscale")
    return (
        deployment is not None
        and route is not None
        and (deployment.get("spec") or {}).get("replicas", 1) > 0
        and "headscale" not in cluster.unready
    )


def _needs_headscale(type_: str) -> tuple[str, ...]:
    """The Headscale-API resources need the server's Deployment and the public route (the URL they use)."""
    if type_.startswith("pulumi-python:dynamic/headscale:"):
        return ("-headscale-deployment", "-endpoint-route")
    return ()


def set_path(config: dict[str, str], dotted: str, value: Any) -> None:
    """``headscale-ha:gateway.routers.replicas`` → the wire JSON of ``headscale-ha:gateway`` with that value."""
    namespace, _, rest = dotted.partition(":")
    key, _, path = rest.partition(".")
    full = f"{namespace}:{key}"
    if not path:
        config[full] = value if isinstance(value, str) else json.dumps(value)
        return
    document = json.loads(config.get(full, "{}"))
    target = document
    parts = path.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value
    config[full] = json.dumps(document)


def migration_job(cluster: Cluster, job: dict[str, Any]) -> str | None:
    """How the migration Job ends, from what it finds when it starts (None: it succeeds).

    - Its first step that reaches PostgreSQL (`schema`, Headscale's configtest) fails while CloudNativePG has not
      made the Cluster ready: the read-write Service has no endpoint yet.
    - A target an earlier run loaded and verified is verified again and left as it is: the Job succeeds
      (migration/__main__.py; tests/migration/test_migration.py proves it against a real PostgreSQL).
    - An empty target is loaded and verified (the Cluster remembers it, as its database would).
    Other Jobs succeed.
    """
    if not str(job["metadata"]["name"]).startswith("headscale-migration"):
        return None
    namespace = job["metadata"]["namespace"]
    key = ("postgresql.cnpg.io", "Cluster", namespace, "headscale-db")
    if not cluster.is_ready(key):
        return "schema: configtest: dial tcp: lookup headscale-db-rw: no endpoints (the database is not ready)"
    cluster.objects[key].body.setdefault("status", {})["modelTarget"] = "verified"
    return None


class Lab:
    def __init__(self, *, api: bool = False, headscale_version: str = "0.29.2", env: Mapping[str, str] = ()) -> None:
        self.hydra = Cluster("hydra", server="https://10.10.0.10:6443", job_runner=migration_job)
        self.cosmos = Cluster("cosmos", server="https://10.20.0.10:6443", job_runner=migration_job)
        self.world = World(
            clusters={"hydra": self.hydra, "cosmos": self.cosmos},
            ambient_kubeconfig={
                "hydra": kubeconfig_for(self.hydra),
                "cosmos": kubeconfig_for(self.cosmos),
                IDENTITY: kubeconfig_for(self.hydra),
            },
            env=dict(env),
        )
        self.engine = Engine(self.world)
        self.headscale: FakeHeadscale | None = None
        if api:
            self.headscale = FakeHeadscale(version=headscale_version).start()
            self.world.headscale = self.headscale
            self.world.serves = _headscale_serves
            self.world.needs = _needs_headscale
            self.world.sync_headscale()
        self.overrides: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        if self.headscale is not None:
            self.headscale.stop()

    def config(self, stack: str, overrides: Mapping[str, Any] | None = None) -> tuple[str, dict[str, str], frozenset]:
        directory = IDENTITY_DIR if stack == IDENTITY else PROJECT_DIR
        settings = read_stack_settings(directory, stack, placeholders=PLACEHOLDERS)
        config = dict(settings.config)
        secret_keys = set(settings.secret_keys)
        if self.headscale is not None and stack != IDENTITY:
            config[API_KEY] = self.headscale.admin_key
            config[API_URL] = self.headscale.url
            secret_keys.add(API_KEY)
        for dotted, value in {**self.overrides.get(stack, {}), **(overrides or {})}.items():
            set_path(config, dotted, value)
            key = dotted.split(".", 1)[0]
            if key.split(":", 1)[1] in SECRET_KEYS:
                secret_keys.add(key)
        return settings.project, config, frozenset(secret_keys)

    def run(
        self, kind: str, stack: str, overrides: Mapping[str, Any] | None = None, *, replace: tuple[str, ...] = ()
    ) -> RunResult:
        project, config, secret_keys = self.config(stack, overrides)
        program = IDENTITY_DIR / "__main__.py" if stack == IDENTITY else None
        return self.engine.run(
            kind,
            project=project,
            stack=stack,
            config=config,
            secret_keys=secret_keys,
            program=program,
            replace=frozenset(replace),
        )

    def unprotect(self, stack: str, name: str) -> None:
        project = read_stack_settings(IDENTITY_DIR if stack == IDENTITY else PROJECT_DIR, stack).project
        self.engine.unprotect(project, stack, name)

    def deploy(self, stack: str, overrides: Mapping[str, Any] | None = None) -> tuple[RunResult, RunResult]:
        """`pulumi preview`, then `pulumi up`; both must succeed."""
        preview = self.run("preview", stack, overrides)
        assert preview.error is None, preview.text()
        up = self.run("up", stack, overrides)
        assert up.error is None, up.text()
        return preview, up

    def first_deployment(self) -> dict[str, tuple[RunResult, RunResult]]:
        """The documented order: the identity stack, the active site, the standby."""
        return {stack: self.deploy(stack) for stack in (IDENTITY, *SITES)}

    def resources(self, stack: str) -> dict[str, Any]:
        for state in self.world.stacks.values():
            if state.name == stack:
                return {r.name: r for r in state.resources.values()}
        return {}


def project_file(path: Path) -> Path:
    return PROJECT_DIR / path
