"""Pulumi components of headscale-ha: one concern per module, renderers kept pure."""
