"""headscale-ha: one cluster's part of a self-hosted Tailscale control plane."""

import pulumi

from headscale_ha.program.config import load_stack_config
from headscale_ha.program.site import TailnetSite
from headscale_ha.program.site_args import site_args

site = TailnetSite(pulumi.get_stack(), site_args(load_stack_config()))
for key, value in site.outputs.items():
    pulumi.export(key, value)
