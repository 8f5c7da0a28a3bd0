"""The component provider the plugin directory (`plugin/`) runs: the package's components and their schema.

The SDK's analyzer infers the schema from the components' annotations and docstrings. A class docstring is read
as written, with its source indentation (Python 3.11 keeps it), so ``schema_ready`` rewrites the docstrings of the
package's classes as prose first: paragraphs kept, lines joined. Field docstrings are single literals already.
"""

import inspect
import json
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

import pulumi
from pulumi.provider import ConstructResult, main
from pulumi.provider.experimental.component import ComponentProvider

from headscale_ha.components.release import VERSION
from headscale_ha.package import types
from headscale_ha.package.backup_volume import BackupVolume
from headscale_ha.package.endpoint import PublicEndpoint
from headscale_ha.package.gateway_services import GatewayServices
from headscale_ha.package.headplane import Headplane
from headscale_ha.package.headscale import HeadscaleServer
from headscale_ha.package.litestream import LitestreamBackup
from headscale_ha.package.subnet_routers import SubnetRouters

#: The package's name: the schema's tokens are `headscale-ha:index:<Component>`; consumers' SDKs are named by it.
PACKAGE = "headscale-ha"

#: The components the package exposes, in the schema's order.
COMPONENTS: tuple[type[pulumi.ComponentResource], ...] = (
    LitestreamBackup,
    BackupVolume,
    HeadscaleServer,
    Headplane,
    SubnetRouters,
    GatewayServices,
    PublicEndpoint,
)


def prose(doc: str) -> str:
    """A docstring as a description: common indentation gone, each paragraph's lines joined by spaces."""
    return "\n\n".join(" ".join(part.split()) for part in inspect.cleandoc(doc).split("\n\n"))


def _package_modules() -> list[ModuleType]:
    return [types, *(sys.modules[component.__module__] for component in COMPONENTS)]


def schema_ready() -> tuple[type[pulumi.ComponentResource], ...]:
    """The components, with every class docstring of the package's modules rewritten as prose (idempotent)."""
    for module in _package_modules():
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == module.__name__ and value.__doc__:
                value.__doc__ = prose(value.__doc__)
    return COMPONENTS


#: The inputs that are not plain but are no secret either: outputs of another resource a consumer may pass on.
NOT_SECRET_INPUTS = frozenset({"identityFingerprint"})
#: The outputs that are secrets (a component's output is stored in the consumer's state).
SECRET_OUTPUTS = frozenset({("headscale-ha:index:HeadscaleServer", "backupKey")})


def with_secrets(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with `secret: true` on every secret input and output, which the analyzer cannot express.

    Why: a consumer's SDK wraps a property the schema marks secret as a secret before it sends it, so the value is
    encrypted in the consumer's state (where the component's inputs and outputs are kept) even when the consumer
    passed a plain string. Every input that is not plain is a secret (keys, client secrets, API and backup keys):
    what the components render must be known at construction, so only secrets are Inputs, save NOT_SECRET_INPUTS.
    """

    def mark(properties: dict[str, Any], secret: set[str]) -> None:
        for name, prop in properties.items():
            if name in secret:
                prop["secret"] = True

    for token, resource in schema["resources"].items():
        inputs = resource["inputProperties"]
        mark(inputs, {n for n, p in inputs.items() if not p.get("plain") and n not in NOT_SECRET_INPUTS})
        mark(resource["properties"], {name for owner, name in SECRET_OUTPUTS if owner == token})
    for definition in schema["types"].values():
        properties = definition.get("properties", {})
        mark(properties, {n for n, p in properties.items() if not p.get("plain") and n not in NOT_SECRET_INPUTS})
    return schema


class _Checked(Protocol):
    """What every package component offers: its inputs checked and mapped, without constructing anything."""

    component_args: Callable[..., object]


class PackageProvider(ComponentProvider):
    """The SDK's component provider, checking a component's inputs before it constructs the component.

    Why: the SDK reports any exception raised in a component's ``__init__`` as the component's crash (its text and
    traceback); an ``InputPropertyError`` raised before that is reported as the invalid property it is, at its
    path. ``component_args`` raises every input problem without registering anything.

    SDK internals (checked against pulumi 3.272.0, and exercised by tests/package/test_plugin.py, which fails if
    they change): ``ComponentProvider._component_defs`` (the analyzed definitions by component name) and
    ``map_inputs`` (schema names to Python names, the mapping ``construct`` applies).
    """

    def __init__(self, components: tuple[type[pulumi.ComponentResource], ...]) -> None:
        super().__init__(list(components), PACKAGE, None, VERSION)
        if self.schema is None:  # the SDK sets it from the components' analysis
            raise RuntimeError("the component provider has no schema after analyzing the components")
        self.schema = json.dumps(with_secrets(json.loads(self.schema)))
        self._checked: dict[str, _Checked] = {f"{PACKAGE}:index:{c.__name__}": c for c in components}  # type: ignore[misc]

    def python_inputs(self, resource_type: str, inputs: pulumi.Inputs) -> dict[str, Any]:
        """``inputs`` (schema names) as the component receives them, mapped as ``construct`` maps them; a missing
        required input raises InputPropertyError."""
        definition = self._component_defs[resource_type.rsplit(":", 1)[-1]]
        return dict(self.map_inputs(inputs, definition))

    def construct(
        self, name: str, resource_type: str, inputs: pulumi.Inputs, options: pulumi.ResourceOptions | None = None
    ) -> ConstructResult:
        component = self._checked.get(resource_type)
        if component is not None:
            component.component_args(self.python_inputs(resource_type, inputs), options)
        return super().construct(name, resource_type, inputs, options)


def provider() -> PackageProvider:
    """The provider the plugin serves, in this process: what GetSchema answers and Construct builds."""
    return PackageProvider(schema_ready())


def serve() -> None:
    """Serve the components as the engine expects of a provider plugin: argv ends with the engine's address, the
    port is printed on stdout (``pulumi.provider.main``, what the SDK's own component_provider_host calls)."""
    main(provider(), sys.argv[1:])
