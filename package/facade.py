"""What every package component does around the Python component it builds: the child's options and the outputs.

- ``child_options``: the child is the facade's, and every resource below it waits for what the facade was told to
  wait for. A component's ``dependsOn`` orders only the component itself; its children do not inherit it (the SDK
  merges a parent's providers, protect and transformations into a child's options, never its dependencies), so a
  consumer's `dependsOn: [backups]` would order nothing that matters. A transformation, which every descendant
  inherits from its parent, adds the facade's dependencies to each of them.
- ``expose``: the outputs, as attributes (what a Python caller reads) and registered outputs (what the engine keeps
  and a consumer's SDK reads), one mapping for both.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
from pydantic.alias_generators import to_camel


def dependencies(opts: pulumi.ResourceOptions | None) -> tuple[pulumi.Resource, ...]:
    """The resources of ``opts.depends_on`` known at construction (the component provider host passes one per URN
    of the consumer's `dependsOn`); empty when there are none, or when they are an Output (then only the facade
    waits for them)."""
    depends_on = None if opts is None else opts.depends_on
    if isinstance(depends_on, pulumi.Resource):
        return (depends_on,)
    if isinstance(depends_on, Sequence):
        known = tuple(r for r in depends_on if isinstance(r, pulumi.Resource))
        return known if len(known) == len(depends_on) else ()
    return ()


def child_options(facade: pulumi.ComponentResource, opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions:
    """The options of the Python component the facade builds: its parent, and the facade's dependencies for every
    resource below it."""
    waits_for = dependencies(opts)
    if not waits_for:
        return pulumi.ResourceOptions(parent=facade)

    def wait(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult:
        extra = pulumi.ResourceOptions(depends_on=list(waits_for))
        return pulumi.ResourceTransformationResult(args.props, pulumi.ResourceOptions.merge(args.opts, extra))

    return pulumi.ResourceOptions(parent=facade, transformations=[wait])


def expose(component: pulumi.ComponentResource, outputs: Mapping[str, Any]) -> None:
    """Set each output attribute (an Output; None when the value is absent, as the schema's optional outputs are)
    and register them under their schema names (the analyzer's camelCase of the attribute)."""
    registered: dict[str, pulumi.Output[Any] | None] = {}
    for attribute, value in outputs.items():
        output = None if value is None else pulumi.Output.from_input(value)
        setattr(component, attribute, output)
        registered[to_camel(attribute)] = output
    component.register_outputs(registered)
