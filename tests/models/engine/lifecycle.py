"""A lab for lifecycle tests: two clusters (hydra, cosmos), the identity stack and the two site stacks of this
repository, run by the engine model with their real config; optionally a fake Headscale behind the public URL (served
by whichever site runs it), and more sites (``extra_sites``, with their stack files in a project copy).

``lab.run("up", "hydra", overrides={"headscale-ha:gateway.routers.replicas": 3})`` runs `pulumi up` of hydra with
that config value changed (a dotted path inside a key's object, as `pulumi config set --path` does).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headscale_ha.components.endpoint import PUBLIC_NAME
from headscale_ha.program.config_problems import SECRET_KEYS
from tests.models.engine.apiserver import Cluster
from tests.models.engine.dynamic import DynamicHost
from tests.models.engine.engine import Engine
from tests.models.engine.state import RunResult
from tests.models.engine.world import World, kubeconfig_for
from tests.models.headscale import FakeHeadscale
from tools.harness import PROJECT_DIR
from tools.plan import IDENTITY_DIR, PLACEHOLDERS
from tools.stack_files import read_stack_settings

SITES = ("hydra", "cosmos")
IDENTITY = "tailnet"
API_KEY = "headscale-ha:bootstrapApiKey"
API_URL = "headscale-ha:headscaleApiUrl"


def _headscale_serves(world: World) -> tuple[str, str] | None:
    """The site whose cluster runs Headscale behind its public route (a Deployment with a replica, pods ready, the
    HTTPRoute), and the release its image runs; None when no reachable site does. The public name keeps pointing at
    the site it points at (``world.dns_site``) while that one serves: another site that serves too (an old active
    back from a loss before it was fenced, a second writer) is not what the URL reaches."""
    for site in sorted(world.clusters, key=lambda name: name != world.dns_site):
        cluster = world.clusters[site]
        if site in world.lost:
            continue
        deployment = cluster.find("Deployment", "headscale", "headscale")
        route = cluster.find("HTTPRoute", PUBLIC_NAME, "headscale")
        if deployment is None or route is None or "headscale" in cluster.unready:
            continue
        if (deployment.get("spec") or {}).get("replicas", 1) == 0:
            continue
        containers = deployment["spec"]["template"]["spec"]["containers"]
        image = next(c["image"] for c in containers if c["name"] == "headscale")
        return site, image.split("@", 1)[0].rsplit(":", 1)[1].removeprefix("v")
    return None


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


@dataclass(frozen=True)
class SavedLab:
    """What a lab holds that its runs change: the world (clusters, states, lost sites), the fake's registry, and
    the stack files of a project copy."""

    world: World
    headscale: dict[str, Any] | None
    files: dict[Path, str]
    overrides: dict[str, dict[str, Any]]


class Lab:
    """``project_dir``: the project whose stack files the runs read (a copy a test edits, as a user would);
    ``headscale_version``: the release the fake Headscale runs before any site serves; ``extra_sites``: more
    clusters (site name → API server URL, the ambient kubeconfig of the stack of that name), for a project copy
    whose ``tailnet.sites`` and ``Pulumi.<site>.yaml`` add them."""

    def __init__(
        self,
        *,
        api: bool = False,
        headscale_version: str = "0.29.2",
        env: Mapping[str, str] = (),
        project_dir: Path = PROJECT_DIR,
        extra_sites: Mapping[str, str] | None = None,
    ) -> None:
        self.project_dir = project_dir
        self.hydra = Cluster("hydra", server="https://10.10.0.10:6443", job_runner=migration_job)
        self.cosmos = Cluster("cosmos", server="https://10.20.0.10:6443", job_runner=migration_job)
        clusters = {"hydra": self.hydra, "cosmos": self.cosmos}
        for site, server in (extra_sites or {}).items():
            clusters[site] = Cluster(site, server=server, job_runner=migration_job)
        #: Every site's stack (a stack named as its site), the shipped ones first.
        self.sites = tuple(clusters)
        self.world = World(
            clusters=clusters,
            ambient_kubeconfig={
                **{site: kubeconfig_for(cluster) for site, cluster in clusters.items()},
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
            self.world.dns_site = SITES[0]
            self.world.needs = _needs_headscale
            self.world.sync_headscale()
        self.overrides: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        if self.headscale is not None:
            self.headscale.stop()

    def saved(self) -> SavedLab:
        """Everything a run or a test can change, to put back with ``restore``: a module deploys once and starts
        each test from that deployment, as if the test had deployed it (module fixtures, ``deployed_lab``)."""
        fake = self.headscale
        files = {}
        if self.project_dir != PROJECT_DIR:  # the checkout's own files are never edited
            files = {path: path.read_text() for path in sorted(self.project_dir.glob("Pulumi*.yaml"))}
        return SavedLab(
            world=copy.deepcopy(self.world, {id(fake): fake}),
            headscale=None if fake is None else fake.saved(),
            files=files,
            overrides=copy.deepcopy(self.overrides),
        )

    def restore(self, saved: SavedLab) -> None:
        """Back to ``saved``: the world, the fake (same URL, the registry then) and the project copy's stack files;
        what a test added to the overrides or the stack files is dropped."""
        fake = self.headscale
        self.world = copy.deepcopy(saved.world, {id(fake): fake})
        self.engine = Engine(self.world)
        self.hydra, self.cosmos = self.world.clusters["hydra"], self.world.clusters["cosmos"]
        self.overrides = copy.deepcopy(saved.overrides)
        if fake is not None and saved.headscale is not None:
            fake.restore(saved.headscale)
        if saved.files:
            for path in set(self.project_dir.glob("Pulumi*.yaml")) - set(saved.files):
                path.unlink()
            for path, text in saved.files.items():
                path.write_text(text)

    def config(self, stack: str, overrides: Mapping[str, Any] | None = None) -> tuple[str, dict[str, str], frozenset]:
        settings = read_stack_settings(self._directory(stack), stack, placeholders=PLACEHOLDERS)
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
        program = IDENTITY_DIR / "__main__.py" if stack == IDENTITY else None  # the site program: the engine's
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
        project = read_stack_settings(self._directory(stack), stack).project
        self.engine.unprotect(project, stack, name)

    def _directory(self, stack: str) -> Path:
        return IDENTITY_DIR if stack == IDENTITY else self.project_dir

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

    def read_live(self, stack: str) -> tuple[dict[str, tuple[str, dict[str, Any]]], list[str]]:
        """What the Headscale providers' Read answers for each Headscale API resource in the stack's state, as
        `pulumi refresh` would call it (the SDK's host, the stack's config): name → (id, outputs), id "" for one the
        server no longer has; and the providers' stderr lines. The engine model has no refresh: the state is not
        changed, and Kubernetes objects are not read."""
        project, config, _ = self.config(stack)
        host = DynamicHost(config, project)
        try:
            found = {
                resource.name: host.read(resource.urn, resource.id, resource.outputs)
                for resource in self.resources(stack).values()
                if resource.type.startswith("pulumi-python:dynamic/headscale:")
            }
        finally:
            host.close()
        messages = host.messages()
        host.stderr.close()
        return found, messages

    def resources(self, stack: str) -> dict[str, Any]:
        for state in self.world.stacks.values():
            if state.name == stack:
                return {r.name: r for r in state.resources.values()}
        return {}


def project_file(path: Path) -> Path:
    return PROJECT_DIR / path


class DeployedLab:
    """A lab deployed once (the documented first deployment) that hands each test the lab as just deployed: a
    module fixture holds it and a test's fixture calls ``fresh``, so a module pays for one deployment, not one per
    test. ``options`` are the Lab's; ``overrides`` (by stack) apply from the first deployment on; ``then`` runs
    after it, before the state is saved (the steps every test of the module starts from)."""

    def __init__(
        self,
        overrides: Mapping[str, dict[str, Any]] | None = None,
        *,
        then: Callable[[Lab], object] | None = None,
        **options: Any,
    ) -> None:
        self.lab = Lab(**options)
        try:
            self.lab.overrides.update(overrides or {})
            self.deployments = self.lab.first_deployment()
            if then is not None:
                then(self.lab)
            self._saved = self.lab.saved()
        except BaseException:
            self.lab.close()
            raise

    def fresh(self) -> Lab:
        self.lab.restore(self._saved)
        return self.lab

    def close(self) -> None:
        self.lab.close()
