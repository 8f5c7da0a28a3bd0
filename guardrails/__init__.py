"""The program's guard rails: the rules every resource a stack registers must keep, whoever wrote it.

- ``images``: what pins a container image (moving tags, exact releases, digests). The stack config refuses an
  unpinned image before anything is planned, and the pack refuses one in any resource: one rule, read by both;
- ``pack``: the CrossGuard policy pack (``pulumi preview --policy-pack guardrails/pack``): ``rules`` as plain
  functions over one resource, which the tests and ``make plan`` run too, and ``pack`` adapting them to CrossGuard.

A package of its own, not part of ``policy`` (the tailnet's ACL policy, another subject that shared its name).
It sits below the components, which read ``images``: it imports nothing from ``components``, nor from ``policy``.
"""
