"""Pulumi components of headscale-ha: one concern per module, renderers kept pure.

Names: a ComponentResource takes ``<Component>Args`` (``HeadscaleServerArgs``); a pure renderer takes one
``<Output>Input`` (``HeadscaleConfigInput`` renders Headscale's config.yaml), whose parts keep their noun
(``HeadscalePaths``, ``HeadscaleDns``, ``PostgresConnection``); ``<Section>Settings`` is a section of the stack
config (settings/).
"""
