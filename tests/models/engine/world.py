"""What the engine model's runs share (the World: clusters, stack states, the environment) and what it reads from
a registration."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.models.engine.apiserver import Cluster
from tests.models.engine.state import ResourceState, holds_secret, unwrap_secrets
from tools import pulumi_internals as sdk
from tools.fields import pattern
from tools.harness import engine_urn
from tools.kubernetes_rules import active_cluster

PROVIDER_TYPE = "pulumi:providers:"


class StepError(Exception):
    """A step the engine could not complete: the run fails with this message."""


def kubeconfig_for(cluster: Cluster, *, user: str = "admin") -> str:
    """A kubeconfig whose active context is ``cluster``, named after it, as the docs ask (what a user's KUBECONFIG
    or a stack's secret holds; a stack without ``kubeconfig`` asks the ambient one for its site's context)."""
    return (
        f"apiVersion: v1\nkind: Config\ncurrent-context: {cluster.name}\n"
        f"clusters:\n- name: {cluster.name}\n  cluster: {{server: '{cluster.server}'}}\n"
        f"contexts:\n- name: {cluster.name}\n  context: {{cluster: {cluster.name}, user: {user}}}\n"
        f"users:\n- name: {user}\n  user: {{token: offline}}\n"
    )


@dataclass
class StackState:
    project: str
    name: str
    resources: dict[str, ResourceState] = field(default_factory=dict)  # by URN, in registration order
    outputs: dict[str, Any] = field(default_factory=dict)  # plain, for the report
    exports: dict[str, Any] = field(default_factory=dict)  # what a StackReference reads (harness form)
    #: Old halves of create-before-delete replacements a failed run did not delete: the next run deletes them.
    pending_deletes: list[ResourceState] = field(default_factory=list)


@dataclass
class World:
    """Everything the runs share: the clusters, the stacks' states and the environment of the `pulumi` process.

    ``ambient_kubeconfig``: the kubeconfig pulumi-kubernetes loads when a provider has none (by stack);
    ``headscale``: the fake Headscale the dynamic providers reach at the tailnet's public URL. ``serves`` says which
    site runs it and on which release (None: no site does); ``lost``: the sites whose cluster is gone (its API
    server and its addresses do not answer).

    The public name points at the site that served last (``dns_site``; DNS failover moves it when another site
    serves). While nothing serves, the URL answers 503 (the gateway has no upstream), unless the site it points at
    is lost: then its address refuses connections (``lost_mode`` "refuse") or drops every packet ("blackhole", a
    connect hangs until its timeout).
    """

    clusters: dict[str, Cluster]
    ambient_kubeconfig: dict[str, str] = field(default_factory=dict)
    stacks: dict[str, StackState] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    headscale: Any = None
    serves: Callable[[World], tuple[str, str] | None] | None = None
    lost: set[str] = field(default_factory=set)
    lost_mode: str = "refuse"
    dns_site: str = ""
    #: For a resource type, the names of the resources (of its stack) it must depend on: what runs the server its
    #: provider talks to. Without such an edge the engine runs both at once, so the model fails the step.
    needs: Callable[[str], tuple[str, ...]] | None = None

    def cluster_of(self, kubeconfig: str | None, overrides: Mapping[str, Any] | None = None) -> Cluster:
        """The cluster a provider talks to: its kubeconfig's active cluster (``overrides``: its context, cluster)."""
        active = active_cluster(kubeconfig, overrides)
        if active is None:
            raise StepError("pulumi-kubernetes: no kubeconfig (none set and no ambient one)")
        for cluster in self.clusters.values():
            if cluster.server == active.get("server"):
                if cluster.name in self.lost:
                    raise StepError(
                        f'pulumi-kubernetes: failed to read resource state: Get "{cluster.server}/api": dial tcp '
                        f"{cluster.server.split('//', 1)[1]}: i/o timeout"
                    )
                return cluster
        raise StepError(f"pulumi-kubernetes: cannot reach {active.get('server')}: no such cluster")

    def sync_headscale(self) -> None:
        """Make the fake answer as the public URL would now (see the class docstring)."""
        if self.headscale is None or self.serves is None:
            return
        self.headscale.clear_faults()
        served = self.serves(self)
        if served is None:
            if self.dns_site in self.lost:
                self.headscale.go_dark(self.lost_mode)
                return
            self.headscale.come_back()
            self.headscale.inject(kind="status", status=503, times=-1)
            return
        site, version = served
        self.dns_site = site
        self.headscale.come_back()
        if version != self.headscale.version:
            self.headscale.restart_as(version)


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    custom: bool
    parent: str | None
    inputs: dict[str, Any]  # plain
    secret_keys: frozenset[str]
    provider: str
    version: str
    dependencies: list[str]
    property_dependencies: list[str]
    protect: bool
    retain_on_delete: bool
    delete_before_replace: bool | None  # None: the option is not set (the provider's Diff decides)
    ignore_changes: list[str]
    replace_on_changes: list[str]
    #: The URNs this resource may have had in the old state (its aliases, resolved as the engine does).
    aliases: list[str] = field(default_factory=list)


def alias_urns(request: Any, urn: str) -> list[str]:
    """The engine's alias resolution (pkg/resource/deploy, alias specs): each spec field left empty takes this
    resource's own value (name, type, stack, project, parent); ``noParent`` drops the parent. Built with the
    engine's URN scheme (tools/harness.py ``engine_urn``), which names every resource here."""
    stack, project = urn.split("::")[0].removeprefix("urn:pulumi:"), urn.split("::")[1]
    found = []
    for alias in request.aliases:
        if alias.WhichOneof("alias") == "urn":
            found.append(alias.urn)
            continue
        spec = alias.spec
        parent = None if spec.noParent else (spec.parentUrn or request.parent or None)
        type_ = spec.type or request.type
        name = spec.name or request.name
        found.append(engine_urn(spec.stack or stack, spec.project or project, parent or "", type_, name))
    return [*found, *request.aliasURNs]


def registration(request: Any, urn: str) -> Registration:
    raw = sdk.deserialize_properties(request.object, keep_unknowns=True)
    dependencies = list(request.dependencies)
    property_dependencies: list[str] = []
    for deps in request.propertyDependencies.values():
        property_dependencies += [d for d in deps.urns if d not in property_dependencies]
    dependencies += [d for d in property_dependencies if d not in dependencies]
    return Registration(
        urn=urn,
        type=request.type,
        name=request.name,
        custom=bool(request.custom),
        parent=request.parent or None,
        inputs=unwrap_secrets(raw),
        secret_keys=frozenset(k for k, v in raw.items() if holds_secret(v)),
        provider=request.provider,
        version=request.version,
        dependencies=dependencies,
        property_dependencies=property_dependencies,
        protect=bool(request.protect),
        retain_on_delete=bool(request.retainOnDelete),
        delete_before_replace=bool(request.deleteBeforeReplace) if request.deleteBeforeReplaceDefined else None,
        ignore_changes=list(request.ignoreChanges),
        replace_on_changes=list(request.replaceOnChanges),
        aliases=alias_urns(request, urn),
    )


_REMOVE = object()


def _get_path(source: Any, tokens: tuple) -> Any:
    for token in tokens:
        if not isinstance(source, dict) or token not in source:
            return _REMOVE
        source = source[token]
    return source


def apply_ignore_changes(inputs: dict[str, Any], old_inputs: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """The engine's processIgnoreChanges: each path takes its old value (removed when the old inputs lack it)."""
    result = copy.deepcopy(inputs)
    for path in paths:
        tokens = pattern(path)
        value = _get_path(old_inputs, tokens)
        target = result
        for token in tokens[:-1]:
            target = target.setdefault(token, {})
        if value is _REMOVE:
            target.pop(tokens[-1], None)
        else:
            target[tokens[-1]] = copy.deepcopy(value)
    return result
