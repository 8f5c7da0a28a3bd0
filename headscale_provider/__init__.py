"""The dynamic provider's import name in release 0.1.0, kept as an alias of ``headscale_ha.provider``.

A stack's state holds each dynamic resource's provider pickled by reference (``__provider``), and an `up` that
changes nothing keeps the old outputs, so state written by 0.1.x names ``headscale_provider.resources.*`` until the
resource is next updated; the engine's provider host imports that path to delete or refresh it. New code imports
``headscale_ha.provider``; nothing here may grow (headscale_ha/class_paths.py lists what it must keep).
"""
