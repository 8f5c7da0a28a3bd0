"""An in-process fake of Headscale's REST API (0.28.0 or 0.29.2) for tests and benches.

Why a fake: the Pulumi program manages users, keys, nodes and the policy through ``/api/v1``, and the interesting
failures (born-expired keys, masked listings, 500s for "not found", partial writes, dropped connections) are
properties of the real server that a mock written from memory would get wrong. The fake reproduces them from the
swagger, the upstream docs and the notes in ``../shared/reference/headscale/API.md`` and checks every exchange
against the release's swagger (:mod:`tests.models.swagger.swagger_contract`).

Only the REST surface is faked: there are no Tailscale clients, so nodes are created with
:meth:`FakeHeadscale.register_node`, which does what a ``tailscale up --authkey`` would do to the server state.

This package's public API is what it re-exports here (``from tests.models.headscale import FakeHeadscale``).
Its modules:

- :mod:`.server`: :class:`FakeHeadscale` (lifecycle, faults, records, the request path);
- :mod:`.store` and :mod:`.state`: the registry, its clock and its records;
- :mod:`.users`, :mod:`.keys`, :mod:`.nodes`, :mod:`.policy`: the API's operations, one family each;
- :mod:`.hujson` and :mod:`.policy_errors`: a refused policy worded as each release words it;
- :mod:`.gateway`: grpc-gateway's routing and request decoding; :mod:`.wire`: timestamps, prefixes, errors;
- :mod:`.handler`: the HTTP server and request handler; :mod:`.unreachable`: a Headscale that is not there.
"""

from tests.models.headscale.server import SUPPORTED_VERSIONS, FakeHeadscale
from tests.models.headscale.state import (
    FAULT_KINDS,
    TAGGED_DEVICES_USER_ID,
    ZERO_TIME,
    ApiKey,
    Node,
    PendingRegistration,
    PreAuthKey,
    RecordedRequest,
    User,
)
from tests.models.headscale.unreachable import UNREACHABLE_MODES, Unreachable
from tests.models.headscale.wire import GrpcError, format_timestamp, parse_prefix, parse_timestamp

__all__ = [
    "FAULT_KINDS",
    "SUPPORTED_VERSIONS",
    "TAGGED_DEVICES_USER_ID",
    "UNREACHABLE_MODES",
    "ZERO_TIME",
    "ApiKey",
    "FakeHeadscale",
    "GrpcError",
    "Node",
    "PendingRegistration",
    "PreAuthKey",
    "RecordedRequest",
    "Unreachable",
    "User",
    "format_timestamp",
    "parse_prefix",
    "parse_timestamp",
]
