"""headscale-ha: one cluster's part of a self-hosted Tailscale control plane."""

import pulumi

from headscale_ha.program.config import load_stack_config
from headscale_ha.program.site import TailnetSite

config = load_stack_config()
site = TailnetSite(pulumi.get_stack(), config)
for key, value in site.outputs.items():
    pulumi.export(key, value)
