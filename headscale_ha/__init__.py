"""headscale-ha as a library: one import name for everything another Pulumi program may reuse.

- ``headscale_ha.components``: the ComponentResources (the repository's ``components/``);
- ``headscale_ha.policy``: the tailnet ACL policy, its model and renderer (``policy/``);
- ``headscale_ha.guardrails``: the CrossGuard pack and the image-pin rules it shares with the stack config
  (``guardrails/``);
- ``headscale_ha.program``: the site program the stacks run (``program/``);
- ``headscale_ha.provider``: the dynamic provider for the Headscale API (``provider/``);
- ``headscale_ha.package``: the component package, the components for programs in any Pulumi language
  (``package/``, run by ``plugin/``).

Each ``headscale_ha.<name>`` is the repository's top-level folder ``<name>/``, linked here as ``headscale_ha/<name>``
(docs/contributing.md, "Where code lives"): the checkout, its editable install (``make plan`` makes one in
``.venv``) and ``pip install <repo>`` import the same code, and a type checker reads it as it is.
"""

from headscale_ha.components.release import VERSION

__version__ = VERSION
