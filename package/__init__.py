"""The component package: headscale-ha's components for programs in any Pulumi language.

Each component here takes plain inputs a schema can carry (``headscale_ha.package.types``), validates them with the
same models and rules as the stack config, and builds the Python component of the same name as its child, so the
resources it registers are the ones the Python program registers. `plugin/` (PulumiPlugin.yaml) runs
``headscale_ha.package.host``; see docs/package.md.
"""
