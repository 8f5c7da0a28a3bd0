"""Where the dynamic providers' classes are: a stable interface, because stacks' state names them.

Pulumi's Python SDK pickles a dynamic resource's provider by reference into its ``__provider`` property, and the
engine's provider host (``python -m pulumi.dynamic``, started in the project directory) imports that path again to
check, diff, update, delete or refresh the resource. An `up` that changes nothing keeps the old outputs, and a
delete or a refresh uses the outputs' provider, so a path a release wrote must stay importable for as long as a
stack may hold it. Moving a class therefore means adding its old path to ``LEGACY`` with an alias that resolves to
it; tests/test_class_paths.py fails on a move without one.
"""

from __future__ import annotations

#: Every dynamic provider class, by the path this release pickles.
CURRENT = (
    "headscale_ha.components.version_gate.VersionGateProvider",
    "headscale_ha.provider.resources.ApiKeyProvider",
    "headscale_ha.provider.resources.NodeSettingsProvider",
    "headscale_ha.provider.resources.PolicyProvider",
    "headscale_ha.provider.resources.PreAuthKeyProvider",
    "headscale_ha.provider.resources.UserProvider",
)

#: A path an earlier release pickled -> (the current path, where the old path resolves).
#: "package": the installed distribution ships an alias (the top-level ``headscale_provider``), so it resolves
#: wherever headscale-ha is installed. "checkout": it resolves only where the host runs in a headscale-ha checkout
#: (a top-level ``components`` package cannot ship in a distribution without taking a name every project uses);
#: 0.1.x could only be run from a checkout, so that is where its stacks are.
LEGACY = {
    "headscale_provider.resources.ApiKeyProvider": ("headscale_ha.provider.resources.ApiKeyProvider", "package"),
    "headscale_provider.resources.NodeSettingsProvider": (
        "headscale_ha.provider.resources.NodeSettingsProvider",
        "package",
    ),
    "headscale_provider.resources.PolicyProvider": ("headscale_ha.provider.resources.PolicyProvider", "package"),
    "headscale_provider.resources.PreAuthKeyProvider": (
        "headscale_ha.provider.resources.PreAuthKeyProvider",
        "package",
    ),
    "headscale_provider.resources.UserProvider": ("headscale_ha.provider.resources.UserProvider", "package"),
    "components.version_gate.VersionGateProvider": (
        "headscale_ha.components.version_gate.VersionGateProvider",
        "checkout",
    ),
}
