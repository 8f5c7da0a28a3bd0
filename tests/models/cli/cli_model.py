"""Recording fakes of the `pulumi` and `kubectl` commands the runbooks run, answering as the engine model would.

``CommandLine(lab)`` is a runner for tools/runbook.py: every argv is recorded, then

- `pulumi config set -s <org/project/stack> <key> <value>` writes the key into the stack file of the lab's project
  copy, as the CLI does (other keys and their order kept);
- `pulumi preview [--refresh] -s …` is a preview of that stack on the engine model (exit 255 with its error
  when it fails);
- `pulumi up --yes -s …` is a preview and then an update of that stack on the engine model (the CLI previews first
  and stops there when the preview fails), reading the project copy's files; a failed run exits 255 with the
  engine's error, as the CLI does; with `--refresh` it first checks that a refresh would find nothing gone;
- `pulumi stack output -s … <name> --json` prints the stack's last output (exit 255 for an unknown stack or
  output: "current stack does not have output property");
- `kubectl --context <site> -n <namespace> get pods -l … -o name` lists the Headscale pods: one while the
  Deployment has a replica; once it is scaled to 0 the pod stays (terminating) for the pod's
  ``terminationGracePeriodSeconds``, measured on the fake's clock, which the runbook's sleeps advance;
- `kubectl … rollout status deployment/headscale` succeeds when the Deployment exists with its pods ready, and
  times out when they are not (the cluster's ``unready``);
- any kubectl command against a lost site fails as an unreachable API server does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.models.engine.apiserver import describe, object_key
from tests.models.engine.lifecycle import Lab
from tests.models.engine.state import RunResult
from tools.runbook import Completed

PULUMI_FAILED = 255


@dataclass
class CommandLine:
    lab: Lab
    calls: list[tuple[str, ...]] = field(default_factory=list)
    runs: list[tuple[str, str, RunResult]] = field(default_factory=list)  # (kind, stack, result)
    clock: float = 0.0
    printed: list[str] = field(default_factory=list)
    _scaled_down_at: dict[str, float] = field(default_factory=dict)

    def __call__(self, argv: Sequence[str], *, capture: bool) -> Completed:
        argv = tuple(argv)
        self.calls.append(argv)
        if argv[0] == "pulumi":
            return self._pulumi(argv[1:])
        if argv[0] == "kubectl":
            return self._kubectl(argv[1:])
        raise AssertionError(f"the runbook ran {argv[0]!r}, which is neither pulumi nor kubectl")

    def sleep(self, seconds: float) -> None:
        self.clock += seconds

    def commands(self, program: str) -> list[tuple[str, ...]]:
        return [call for call in self.calls if call[0] == program]

    # ------------------------------------------------------------------------------------------------ pulumi

    def _stack(self, qualified: str) -> str:
        org, project, stack = qualified.split("/")
        assert (org, project) == ("organization", "headscale-ha"), f"{qualified} is not a site stack"
        assert (self.lab.project_dir / f"Pulumi.{stack}.yaml").is_file(), f"no stack file for {qualified}"
        return stack

    def _pulumi(self, args: tuple[str, ...]) -> Completed:
        stack_at = args.index("-s") + 1
        qualified = args[stack_at]
        rest = args[: stack_at - 1] + args[stack_at + 1 :]
        if rest[:2] == ("config", "set"):
            return self._config_set(self._stack(qualified), rest[2], rest[3])
        if rest in (("up", "--yes"), ("up", "--refresh", "--yes")):
            stack = self._stack(qualified)
            if "--refresh" in rest:
                self._refresh_finds_no_drift(stack)
            return self._up(stack)
        if rest in (("preview",), ("preview", "--refresh")):
            stack = self._stack(qualified)
            if "--refresh" in rest:
                self._refresh_finds_no_drift(stack)
            return self._run_kinds(stack, ("preview",))
        if rest[:2] == ("stack", "output") and rest[-1] == "--json":
            return self._output(qualified, rest[2])
        raise AssertionError(f"unmodelled pulumi command: {args}")

    def _refresh_finds_no_drift(self, stack: str) -> None:
        """The engine model has no refresh: it stands in for one only where a refresh changes nothing, every object
        the stack's state holds being in its cluster. A rebuilt cluster is tests/real/test_promotion.py's."""
        (state,) = [s for s in self.lab.world.stacks.values() if s.name == stack]
        objects = set(self.lab.world.clusters[stack].object_keys())
        for resource in state.resources.values():
            if resource.type.startswith("kubernetes:"):
                key = object_key(resource.outputs)
                assert key in objects, f"unmodelled: a refresh of {stack} would find {describe(key)} gone"

    def _config_set(self, stack: str, key: str, value: str) -> Completed:
        path = self.lab.project_dir / f"Pulumi.{stack}.yaml"
        document = yaml.safe_load(path.read_text()) or {}
        document.setdefault("config", {})[key] = value
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return Completed(0, "")

    def _up(self, stack: str) -> Completed:
        return self._run_kinds(stack, ("preview", "up"))

    def _run_kinds(self, stack: str, kinds: tuple[str, ...]) -> Completed:
        before = self._replicas()
        try:
            for kind in kinds:
                result = self.lab.run(kind, stack)
                self.runs.append((kind, stack, result))
                if result.error is not None:
                    self.printed.append(f"error: {result.error}")
                    return Completed(PULUMI_FAILED, "")
            return Completed(0, "")
        finally:
            for site, replicas in self._replicas().items():
                if before.get(site, 0) > 0 and replicas == 0:
                    self._scaled_down_at[site] = self.clock  # its pod terminates from now on

    def _replicas(self) -> dict[str, int]:
        found = {}
        for site, cluster in self.lab.world.clusters.items():
            deployment = cluster.find("Deployment", "headscale", "headscale")
            if deployment is not None and site not in self.lab.world.lost:
                found[site] = deployment["spec"].get("replicas", 1)
        return found

    def _output(self, qualified: str, name: str) -> Completed:
        state = self.lab.world.stacks.get(qualified)
        if state is None or name not in state.outputs:
            self.printed.append(f"error: current stack does not have output property '{name}'")
            return Completed(PULUMI_FAILED, "")
        return Completed(0, json.dumps(state.outputs[name]))

    # ------------------------------------------------------------------------------------------------ kubectl

    def _kubectl(self, args: tuple[str, ...]) -> Completed:
        assert args[0] == "--context", f"kubectl without --context: {args}"
        assert args[2] == "-n", f"kubectl without -n: {args}"
        site, namespace, rest = args[1], args[3], args[4:]
        if site in self.lab.world.lost:
            self.printed.append(f"Unable to connect to the server: dial tcp {site}: i/o timeout")
            return Completed(1, "")
        cluster = self.lab.world.clusters[site]
        deployment = cluster.find("Deployment", "headscale", namespace)
        if rest[:2] == ("get", "pods"):
            return Completed(0, "".join(f"pod/{name}\n" for name in self._pods(site, deployment)))
        if rest[:3] == ("rollout", "status", "deployment/headscale"):
            if deployment is None:
                self.printed.append('Error from server (NotFound): deployments.apps "headscale" not found')
                return Completed(1, "")
            if "headscale" in cluster.unready and deployment["spec"].get("replicas", 1) > 0:
                self.printed.append("error: timed out waiting for the condition")
                return Completed(1, "")
            return Completed(0, 'deployment "headscale" successfully rolled out\n')
        raise AssertionError(f"unmodelled kubectl command: {args}")

    def _pods(self, site: str, deployment: dict[str, Any] | None) -> list[str]:
        if deployment is None:
            return []
        if deployment["spec"].get("replicas", 1) > 0:
            return ["headscale-7d9f8-abcde"]
        grace = deployment["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        since = self._scaled_down_at.get(site)
        return ["headscale-7d9f8-abcde"] if since is not None and self.clock - since < grace else []
