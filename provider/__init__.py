"""A Pulumi dynamic provider for the Headscale REST API (0.28 and 0.29).

Imports nothing from the Pulumi program (`components`): dynamic providers are pickled by reference and
re-imported by the engine, so this package must stand on its own.
"""
