"""A small component for the component-host tests: a few ConfigMaps and a password under one parent.

Kept free of imports from the checkout: the plugin process runs it with only this directory on the path, and the
test process imports the same file as ``tests.support.sample_component_plugin.sample_components``.

No ``from __future__ import annotations``: the SDK's analyzer reads the annotations as objects, not strings.
"""

from typing import NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random


class GreetingArgs(TypedDict):
    """What a Greeting says, and how often."""

    message: pulumi.Input[str]
    """The text every ConfigMap holds."""
    copies: NotRequired[int]
    """How many ConfigMaps hold the message (default 1)."""
    namespace: NotRequired[pulumi.Input[str]]
    """The namespace of the ConfigMaps (default `default`)."""


class Greeting(pulumi.ComponentResource):
    """Writes a message into ``copies`` ConfigMaps and makes a password beside them."""

    names: pulumi.Output[list[str]]
    """The ConfigMaps' names, in order."""
    password: pulumi.Output[str]
    """The generated password (secret)."""

    def __init__(self, name: str, args: GreetingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("sample:index:Greeting", name, {}, opts)
        copies = int(args.get("copies", 1))
        namespace = args.get("namespace", "default")
        pulumi.log.info(f"greeting {name}: {copies} copies")
        child = pulumi.ResourceOptions(parent=self)
        maps = [
            k8s.core.v1.ConfigMap(
                f"{name}-{index}",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=f"{name}-{index}", namespace=namespace, labels={"app.kubernetes.io/name": name}
                ),
                data={"message": args["message"], "index": str(index)},
                opts=child,
            )
            for index in range(copies)
        ]
        secret = random.RandomPassword(f"{name}-password", length=24, special=False, opts=child)
        self.names = pulumi.Output.all(*[m.metadata.apply(lambda meta: meta.name) for m in maps]).apply(list)
        self.password = secret.result
        self.register_outputs({"names": self.names, "password": self.password})
