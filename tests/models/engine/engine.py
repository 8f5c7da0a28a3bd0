"""The Pulumi engine as the tests model it: `pulumi preview`, `pulumi up` and `pulumi destroy` of the real program,
one state per stack kept between runs, steps computed and applied the way the engine does.

Facts, from pulumi/pulumi (pkg/resource/deploy: step_generator.go, step.go, step_executor.go) unless said otherwise:
- Each registration is checked (provider Check), then compared with the state (provider Diff): no old state is a
  create; no change is a same (no provider call, outputs from the state); a change is an update; a Diff that names
  replace keys (or a matching ``replaceOnChanges``) is a replace.
- A replace is create-before-delete (the old one is deleted at the end of the run) unless the resource option
  ``deleteBeforeReplace`` or the provider's Diff asks for delete-before-replace (pulumi-kubernetes: an object that
  keeps its name). ``protect`` refuses the replace and the delete; ``retainOnDelete`` skips the provider's Delete,
  in the delete half of a replacement too.
- A registration whose URN is not in the old state but one of its aliases is takes that old state over: it is
  diffed against it (same, update or replace under the new URN) and the old URN is never deleted as an orphan; two
  registrations taking one old state over fail the deployment.
- ``ignoreChanges`` copies the old value of each listed path into the new inputs before Check (an absent old value
  removes it).
- A resource without an explicit provider uses the package's default provider,
  ``pulumi:providers:<pkg>::default_<version>``, whose inputs are the ``<pkg>:`` keys of the stack config (for the
  dynamic providers' ``pulumi-python``, the whole stack config).
  When a resource's provider reference changes, the engine asks the *new* provider's DiffConfig with the old
  provider's inputs (providerChanged): replace there replaces the resource (create-before-delete); otherwise the
  resource is diffed normally and moves to the new provider.
- Deletes (resources the program no longer registers, the old halves of create-before-delete replacements, and all
  of a destroy) run after the program, a resource before anything it depends on (dependencies, parent, provider).
  Resources with no order between them are deleted in parallel; the model deletes the Kubernetes objects of such a
  wave first, the worst order for a resource that needs a server those objects run.
- A step that fails ends the deployment: what was applied stays in the state, nothing else runs. A write whose await
  fails (a partial failure; for pulumi-kubernetes also an update the API server refuses) is kept in the state with
  an init error (an update: with the old inputs), and the next run updates it even without a change.
- A preview runs the program with ``dry_run``: creates and updates are not applied; ids and computed outputs of
  what would be created or updated are unknown; Check and Diff run for real.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from unittest import mock

from pulumi.runtime.proto import resource_pb2

from tests.models.engine.apiserver import ApiError
from tests.models.engine.dynamic import DynamicHost, ProviderCallError
from tests.models.engine.kubernetes import AwaitError, KubernetesProvider
from tests.models.engine.providers import DynamicAdapter, KubernetesAdapter, Provider, RandomAdapter
from tests.models.engine.state import ResourceState, RunResult, Step
from tests.models.engine.world import (
    Registration,
    StackState,
    StepError,
    World,
    apply_ignore_changes,
    registration,
)
from tools import harness
from tools import pulumi_internals as sdk
from tools.fields import covers, diff_values, pattern
from tools.kubernetes_rules import provider_replacement

PROVIDER_TYPE = "pulumi:providers:"
#: The packages the model has a provider for, and the errors their calls raise as a failed step.
STEP_ERRORS = (ApiError, ProviderCallError, AwaitError)


def _package(type_: str) -> str:
    return type_.removeprefix(PROVIDER_TYPE) if type_.startswith(PROVIDER_TYPE) else type_.split(":", 1)[0]


def _state(reg: Registration, **values: Any) -> ResourceState:
    values.setdefault("inputs", reg.inputs)
    return ResourceState(
        urn=reg.urn,
        type=reg.type,
        custom=reg.custom,
        parent=reg.parent,
        dependencies=reg.dependencies,
        property_dependencies=reg.property_dependencies,
        protect=reg.protect,
        retain_on_delete=reg.retain_on_delete,
        delete_before_replace=bool(reg.delete_before_replace),
        secret_keys=reg.secret_keys,
        **values,
    )


class Deployment:
    """One preview, up or destroy of one stack: the old state, what this run registered, and its steps."""

    def __init__(
        self,
        world: World,
        stack: StackState,
        config: Mapping[str, Any],
        *,
        preview: bool,
        replace: frozenset[str] = frozenset(),
    ) -> None:
        self.world = world
        self.replace_targets = replace
        self.stack = stack
        self.config = dict(config)
        self.preview = preview
        self.olds = {urn: r.copy() for urn, r in stack.resources.items()}
        self.news: dict[str, ResourceState] = {}
        self.result = RunResult("preview" if preview else "up")
        self.pending_deletes: list[ResourceState] = [r.copy() for r in stack.pending_deletes]
        self.deleted: set[int] = set()  # id() of the old states whose delete step ran (retained ones included)
        self.aliased: dict[str, str] = {}  # old URN -> the URN of the resource that took it over through an alias
        self.lock = threading.RLock()
        self.failed: str | None = None
        self._providers: dict[str, Provider] = {}
        self._host: DynamicHost | None = None

    # ---------------------------------------------------------------------------------------------- providers

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
            self.result.warnings += self._host.messages()
            self._host.stderr.close()

    def _instantiate(self, package: str, inputs: Mapping[str, Any]) -> Provider:
        if package == "kubernetes":
            kubeconfig = inputs.get("kubeconfig") or self.world.ambient_kubeconfig.get(self.stack.name)
            cluster = self.world.cluster_of(kubeconfig, inputs)
            return KubernetesAdapter(KubernetesProvider(inputs, cluster, self.world.env))
        if package == "random":
            return RandomAdapter()
        if package == "pulumi-python":
            if self._host is None:
                # Dynamic providers get the whole stack config (plain: the host does not accept secrets).
                self._host = DynamicHost(self.config, self.stack.project)
            return DynamicAdapter(self._host)
        raise StepError(f"the engine model has no provider for package {package!r}")

    def provider_for(self, ref: str) -> Provider:
        """The provider instance of ``ref`` (``urn::id``): a replaced provider keeps its URN and gets a new id, and
        the old halves of what it replaced are deleted with the old instance (the old inputs: the old cluster)."""
        if ref not in self._providers:
            urn, id_ = ref.rsplit("::", 1)
            states = [s for s in (self.news.get(urn), self.olds.get(urn)) if s is not None]
            state = next((s for s in states if s.id == id_), states[0] if states else None)
            if state is None:
                raise StepError(f"provider {urn} is not in the state")
            self._providers[ref] = self._instantiate(_package(state.type), state.inputs)
        return self._providers[ref]

    def default_provider_ref(self, type_: str, version: str) -> str:
        """The package's default provider, registered on first use: ``default_<version>``, inputs from the
        ``<pkg>:`` config keys (strings) plus ``version``."""
        package = _package(type_)
        name = f"default_{version.replace('.', '_')}" if version else "default"
        urn = f"urn:pulumi:{self.stack.name}::{self.stack.project}::{PROVIDER_TYPE}{package}::{name}"
        if urn not in self.news:
            inputs = {k.split(":", 1)[1]: v for k, v in self.config.items() if k.startswith(f"{package}:")}
            if package == "pulumi-python":
                # The real engine gives the dynamic providers' default provider the whole stack config, keys in
                # full: any config edit is an update of it (seen with the real CLI, tests/real/test_tailnet_api.py).
                inputs = dict(self.config)
            elif version:
                inputs["version"] = version
            reg = Registration(
                urn=urn, type=f"{PROVIDER_TYPE}{package}", name=name, custom=True, parent=None, inputs=inputs,
                secret_keys=frozenset(), provider="", version=version, dependencies=[], property_dependencies=[],
                protect=False, retain_on_delete=False, delete_before_replace=None, ignore_changes=[],
                replace_on_changes=[],
            )  # fmt: skip
            self._provider_step(reg)
        return f"{urn}::{self.news[urn].id}"

    def _provider_step(self, reg: Registration) -> ResourceState:
        """A provider resource: created, updated in place (same id: its resources do not notice) or replaced by
        its DiffConfig (a new id: every resource on it then asks DiffConfig again, see _provider_changed)."""
        old = self.olds.get(reg.urn)
        state = _state(reg, outputs=dict(reg.inputs))
        if old is None:
            state.id = sdk.UNKNOWN if self.preview else str(uuid.uuid4())
            self._record(Step("create", reg.urn, reg.type))
        else:
            why = provider_replacement(old.inputs, reg.inputs) if _package(reg.type) == "kubernetes" else None
            fields = tuple(sorted({c.text for c in diff_values(old.inputs, reg.inputs)}))
            if why:
                state.id = sdk.UNKNOWN if self.preview else str(uuid.uuid4())
                self._record(Step("replace", reg.urn, reg.type, "create-before-delete", (why,)))
            else:
                state.id = old.id
                self._record(Step("update" if fields else "same", reg.urn, reg.type, fields=fields))
        self.news[reg.urn] = state
        return state

    def _provider_changed(self, old: ResourceState, new_ref: str) -> str | None:
        """Why a move from ``old.provider`` to ``new_ref`` replaces the resource (step_generator providerChanged):
        the new provider's DiffConfig, given the old provider's inputs."""
        if old.provider == new_ref:
            return None
        old_provider = self.olds.get(old.provider.rsplit("::", 1)[0])
        new_provider = self.news.get(new_ref.rsplit("::", 1)[0])
        if old_provider is None or new_provider is None:
            return "its provider changed"
        if _package(new_provider.type) != "kubernetes":
            return None
        why = provider_replacement(old_provider.inputs, new_provider.inputs)
        return f"provider {old_provider.name} -> {new_provider.name}: {why}" if why else None

    # ---------------------------------------------------------------------------------------------- registrations

    def _record(self, step: Step) -> None:
        self.result.steps.append(step)

    def _fail(self, message: str) -> None:
        if self.failed is None:
            self.failed = message
        raise StepError(message)

    def register(self, reg: Registration) -> tuple[str, dict[str, Any]]:
        """The engine's answer to one RegisterResource: run its step, return its id and outputs."""
        with self.lock:
            if self.failed is not None:
                raise StepError(f"the deployment failed: {self.failed}")
            try:
                if reg.type.startswith(PROVIDER_TYPE):
                    state = self._provider_step(reg)
                elif not reg.custom:
                    state = self._component_step(reg)
                else:
                    state = self._custom_step(reg)
            except STEP_ERRORS as error:
                self._fail(f"{reg.type} {reg.name}: {error}")
            finally:
                self.world.sync_headscale()
            outputs = {k: sdk.wrap_rpc_secret(v) if k in state.secret_keys else v for k, v in state.outputs.items()}
            return state.id, outputs

    def _old(self, reg: Registration) -> ResourceState | None:
        """The old state of ``reg``: under its URN, or under one of its aliases (step_generator: the first alias in
        the old state is this resource, which then is never deleted as an orphan; two resources taking one old state
        over is an error)."""
        if reg.urn in self.olds:
            return self.olds[reg.urn]
        for alias in reg.aliases:
            if alias in self.aliased:
                self._fail(f"{reg.urn}: its alias {alias} is already the old state of {self.aliased[alias]}")
            if alias in self.olds:
                self.aliased[alias] = reg.urn
                return self.olds[alias]
        return None

    def _component_step(self, reg: Registration) -> ResourceState:
        state = _state(reg)
        self._record(Step("same" if self._old(reg) is not None else "create", reg.urn, reg.type))
        self.news[reg.urn] = state
        return state

    def _closure(self, urns: list[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(urns)
        while todo:
            urn = todo.pop()
            if urn not in seen:
                seen.add(urn)
                todo += self.news[urn].dependencies if urn in self.news else []
        return seen

    def _check_ordering(self, reg: Registration) -> None:
        """A resource whose provider needs a server another resource runs waits for it only through an edge."""
        needed = self.world.needs(reg.type) if self.world.needs else ()
        reached = {urn.rsplit("::", 1)[1] for urn in self._closure(reg.dependencies)}
        missing = [name for name in needed if not any(r.endswith(name) for r in reached)]
        if missing:
            self._fail(
                f"{reg.type} {reg.name} does not depend on {', '.join(missing)}: the engine runs it concurrently with "
                "what serves its API (a race the real run can lose)"
            )

    def _custom_step(self, reg: Registration) -> ResourceState:
        self._check_ordering(reg)
        ref = reg.provider or self.default_provider_ref(reg.type, reg.version)
        old = self._old(reg)
        provider = self.provider_for(ref)
        goal = apply_ignore_changes(reg.inputs, old.inputs, reg.ignore_changes) if old else dict(reg.inputs)
        state = _state(reg, provider=ref, inputs=provider.check(reg.urn, old.inputs if old else None, goal))
        if old is None:
            self._record(Step("create", reg.urn, reg.type))
            self._create(state, provider)
            return state
        moved = self._provider_changed(old, ref)
        if moved:
            return self._replace(reg, old, state, provider, (moved,), False)
        if reg.name in self.replace_targets:
            return self._replace(reg, old, state, provider, ("--replace",), False)
        diff = provider.diff(reg.urn, old.id, old.inputs, old.outputs, state.inputs)
        on_changes = tuple(
            f"replaceOnChanges: {f.text}"
            for f in diff_values(old.inputs, state.inputs)
            if any(covers(pattern(p), f.path) for p in reg.replace_on_changes)
        )
        if diff.replace_reasons or on_changes:
            # Engine-decided replacements (replaceOnChanges) carry no deleteBeforeReplace from the provider.
            dbr = diff.delete_before_replace if diff.replace_reasons else False
            return self._replace(reg, old, state, provider, diff.replace_reasons + on_changes, dbr)
        if not diff.changed and not old.init_errors:
            state.id, state.outputs, state.init_errors = old.id, old.outputs, []
            self.news[reg.urn] = state
            self._record(Step("same", reg.urn, reg.type))
            return state
        self._record(Step("update", reg.urn, reg.type, fields=diff.fields or ("(init errors: awaited again)",)))
        self._update(old, state, provider)
        return state

    def _update(self, old: ResourceState, state: ResourceState, provider: Provider) -> None:
        state.id = old.id
        self.news[state.urn] = state
        try:
            state.outputs = provider.update(state.urn, old.id, old.outputs, state.inputs, preview=self.preview)
            state.init_errors = []
        except AwaitError as error:
            # A partial failure: the old inputs are kept with the new outputs, and the init error.
            state.inputs, state.outputs, state.init_errors = old.inputs, error.outputs, [str(error)]
            raise
        except STEP_ERRORS:
            self.news[state.urn] = old
            raise

    def _replace(
        self,
        reg: Registration,
        old: ResourceState,
        state: ResourceState,
        provider: Provider,
        reasons: tuple[str, ...],
        provider_dbr: bool,
    ) -> ResourceState:
        if old.protect and reg.protect:
            self._fail(
                f"unable to replace resource {reg.urn} as it is currently marked for protection "
                f"(replace because: {'; '.join(reasons)})"
            )
        dbr = provider_dbr if reg.delete_before_replace is None else reg.delete_before_replace
        self._check_dependents(old, dbr)
        # Before a replacement the engine checks the inputs again without the old ones (a fresh autoname).
        state.inputs = provider.check(reg.urn, None, apply_ignore_changes(reg.inputs, old.inputs, reg.ignore_changes))
        self._record(
            Step("replace", reg.urn, reg.type, "delete-before-replace" if dbr else "create-before-delete", reasons)
        )
        if dbr:
            self._delete(old, replacing=True)
            self._create(state, provider)
        else:
            self._create(state, provider)
            self.pending_deletes.append(old)
        return state

    def _check_dependents(self, old: ResourceState, dbr: bool) -> None:
        """Not modelled: the dependents the engine replaces with a delete-before-replace (those whose inputs take
        its outputs). The model refuses to go on rather than be kinder than the engine."""
        if not dbr:
            return
        takers = [r.urn for r in (*self.olds.values(), *self.news.values()) if old.urn in r.property_dependencies]
        if takers:
            raise StepError(f"engine model limit: {old.urn} is replaced delete-first and {takers} take its outputs")

    def _create(self, state: ResourceState, provider: Provider) -> None:
        self.news[state.urn] = state
        try:
            state.id, state.outputs = provider.create(state.urn, state.inputs, preview=self.preview)
        except AwaitError as error:
            state.id, state.outputs, state.init_errors = state.id or "partial", error.outputs, [str(error)]
            raise
        except STEP_ERRORS:
            del self.news[state.urn]
            raise
        if not state.id:
            state.id = sdk.UNKNOWN

    # ---------------------------------------------------------------------------------------------- deletes

    def _delete(self, old: ResourceState, *, replacing: bool = False) -> None:
        """DeleteStep.Apply: protect refuses (in preview too), except the delete half of a replacement (the replace
        itself was refused if the resource stays protected); retainOnDelete (of the old state) skips the provider."""
        if old.protect and not replacing:
            self._fail(
                f"resource {old.urn} cannot be deleted because it is protected (remove `protect`, or "
                f"`pulumi state unprotect`)"
            )
        if self.preview:
            return
        if old.custom and not old.retain_on_delete and not old.type.startswith(PROVIDER_TYPE):
            try:
                self.provider_for(old.provider).delete(old.urn, old.id, old.outputs)
            except STEP_ERRORS as error:
                self._fail(f"deleting {old.type} {old.name}: {error}")
            finally:
                self.world.sync_headscale()
        self.deleted.add(id(old))

    def delete_phase(self, doomed: list[ResourceState]) -> None:
        """ScheduleDeletes: antichains of resources nothing left depends on (parent, dependencies, provider), each
        run in parallel; the model runs a wave's Kubernetes objects first (the worst order for the others)."""
        remaining = list(doomed)
        while remaining:
            depended: set[str] = set()
            for resource in remaining:
                depended |= {*resource.dependencies, resource.parent or "", resource.provider_urn}
            wave = [r for r in remaining if r.urn not in depended or any(d is r for d in self.pending_deletes)]
            if not wave:
                raise StepError(f"a dependency cycle among {[r.urn for r in remaining]}")
            wave.sort(key=lambda r: not r.type.startswith("kubernetes:"))
            for resource in wave:
                replaced = any(resource is p for p in self.pending_deletes)
                if not replaced:
                    retained = resource.custom and resource.retain_on_delete
                    self._record(Step("delete", resource.urn, resource.type, "retained" if retained else ""))
                self._delete(resource, replacing=replaced)
                remaining = [r for r in remaining if r is not resource]

    def checkpoint(self) -> tuple[dict[str, ResourceState], list[ResourceState]]:
        """The state after this run, failed or not: what ran is kept; olds not reached keep their state."""
        resources = dict(self.news)
        for urn, old in self.olds.items():
            if urn not in resources and urn not in self.aliased and id(old) not in self.deleted:
                resources[urn] = old
        pending = [r for r in self.pending_deletes if id(r) not in self.deleted]
        return resources, pending


class Engine:
    """Runs the program of ``program_dir`` as stacks of ``world``; each result says what `pulumi` would print."""

    def __init__(self, world: World, program_dir: Path = harness.PROJECT_DIR) -> None:
        self.world = world
        self.program = program_dir / "__main__.py"

    def stack(self, project: str, name: str) -> StackState:
        return self.world.stacks.setdefault(f"organization/{project}/{name}", StackState(project=project, name=name))

    def unprotect(self, project: str, stack: str, name: str) -> None:
        """`pulumi state unprotect <urn>`: the state's protect flag cleared (the program's stays as it is)."""
        matches = [r for r in self.stack(project, stack).resources.values() if r.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} resources named {name!r}")
        matches[0].protect = False

    def _stack_outputs(self) -> dict[str, Any]:
        return {key: stack.exports for key, stack in self.world.stacks.items() if stack.resources}

    def run(
        self,
        kind: str,
        *,
        project: str,
        stack: str,
        config: Mapping[str, Any],
        secret_keys: frozenset[str] = frozenset(),
        program: Path | None = None,
        replace: frozenset[str] = frozenset(),
    ) -> RunResult:
        """``kind``: preview, up or destroy; ``replace``: resource names given to ``--replace``. A failed deployment
        does not raise: the result carries its error."""
        state = self.stack(project, stack)
        deployment = Deployment(self.world, state, config, preview=kind == "preview", replace=replace)
        try:
            if kind == "destroy":
                return self._destroy(deployment)
            return self._update(deployment, config, secret_keys, program or self.program)
        finally:
            deployment.close()

    def _update(self, deployment: Deployment, config: Mapping[str, Any], secret_keys, program: Path) -> RunResult:
        error: str | None = None
        run = None
        try:
            with warnings.catch_warnings():
                # A failed deployment strands the SDK's coroutines (the run's error is what counts).
                warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
                run = self._run_program(deployment, config, secret_keys, program)
        except Exception as exc:  # noqa: BLE001 - the program's error or a failed step, as `pulumi up` reports it
            error = deployment.failed or f"{type(exc).__name__}: {exc}"
        finally:
            if deployment.failed is not None:
                harness.collect_stranded_coroutines()
        if error is None:
            doomed = [
                r
                for urn, r in reversed(deployment.olds.items())
                if urn not in deployment.news and urn not in deployment.aliased
            ]
            try:
                deployment.delete_phase(doomed + deployment.pending_deletes)
            except StepError as exc:
                error = str(exc)
        return self._finish(deployment, run, error)

    def _run_program(
        self, deployment: Deployment, config: Mapping[str, Any], secret_keys: frozenset[str], program: Path
    ) -> Any:
        state = deployment.stack
        # The program runs with the `pulumi` process's environment: the SDK reads some of it as provider inputs
        # (PULUMI_K8S_UPSERT_EXISTING_OBJECTS becomes the Kubernetes provider's `upsertExistingObjects`).
        with mock.patch.dict(os.environ, self.world.env):
            return harness.run_program(
                project=state.project,
                stack=state.name,
                config={k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()},
                secret_keys=secret_keys,
                program=program,
                stack_outputs=self._stack_outputs(),
                preview=deployment.preview,
                monitor_factory=lambda mocks: _EngineMonitor(mocks, deployment),
            )

    @staticmethod
    def _finish(deployment: Deployment, run: Any, error: str | None) -> RunResult:
        """The result, and (in `up`) the checkpoint: what was applied is kept, failed or not."""
        state = deployment.stack
        result = deployment.result
        result.error = error
        if run is not None:
            result.outputs = run.outputs
        if not deployment.preview:
            state.resources, state.pending_deletes = deployment.checkpoint()
            if run is not None and error is None:
                state.outputs, state.exports = run.outputs, run.exports
        return result

    def _destroy(self, deployment: Deployment) -> RunResult:
        """`pulumi destroy`: the program does not run; every resource of the state is deleted in dependency order."""
        deployment.result.kind = "destroy"
        try:
            deployment.delete_phase([*reversed(deployment.olds.values()), *deployment.pending_deletes])
        except StepError as exc:
            deployment.result.error = str(exc)
        state = deployment.stack
        state.resources, state.pending_deletes = deployment.checkpoint()
        if not state.resources:
            state.outputs, state.exports = {}, {}
        return deployment.result


class _EngineMonitor(harness._RecordingMonitor):
    """The resource monitor: each registration becomes a step of ``deployment``, answered with its outputs."""

    def __init__(self, mocks: Any, deployment: Deployment) -> None:
        super().__init__(mocks)
        self.deployment = deployment

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        self._track_thread_loop()
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            return resource_pb2.RegisterResourceResponse(urn=urn)
        sdk.thread_event_loop()
        self.record_registration(request, urn)
        id_, outputs = self.deployment.register(registration(request, urn))
        wire = sdk.sync_await(sdk.serialize_properties(outputs, {}))
        return resource_pb2.RegisterResourceResponse(urn=urn, id="" if id_ == sdk.UNKNOWN else id_, object=wire)
