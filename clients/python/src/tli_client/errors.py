"""Errors of the tli client: every failed call raises a :class:`TliError`.

A host refusal keeps its gRPC status code (``error.code``, a :class:`grpc.StatusCode`) and the
host's message (``error.message``: what was wrong and what to do, e.g. ``models[0].steps: 0 is
not in 1 ..= 1000000000``). The common codes have their own subclasses, so callers can write
``except NotFound:``; any other code is a plain :class:`TliError`.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

__all__ = [
    "TliError",
    "InvalidArgument",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "Unauthenticated",
    "ResourceExhausted",
    "FailedPrecondition",
    "Unavailable",
    "DeadlineExceeded",
    "Cancelled",
    "Internal",
    "Unimplemented",
    "DataLoss",
    "error_from_rpc",
]


class TliError(Exception):
    """A call the host (or the transport) refused: its gRPC status code and message."""

    #: The code of the subclass; a plain TliError carries its own.
    default_code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, code: grpc.StatusCode, message: str, method: str = "") -> None:
        self.code: grpc.StatusCode = code
        self.message: str = message
        #: The RPC that failed, e.g. ``StartTraining`` (empty when unknown).
        self.method: str = method
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{code.name}: {message}")


class InvalidArgument(TliError):
    """A request field was wrong; the message names the field and the problem."""

    default_code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(TliError):
    """No job, task or model with that id."""

    default_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(TliError):
    """E.g. an import under the name of a model the host already has."""

    default_code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(TliError):
    """E.g. a bar file outside the host's data roots."""

    default_code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(TliError):
    """The host needs a bearer token (it listens beyond loopback) and got none or a wrong one."""

    default_code = grpc.StatusCode.UNAUTHENTICATED


class ResourceExhausted(TliError):
    """A task (or a model to load) too big for the memory budget, a message too large, a full
    disk."""

    default_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(TliError):
    """The job is not in a state that allows the call, a model is not loaded (``model X is not
    loaded``) or its plugin is missing, or the store is read-only."""

    default_code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(TliError):
    """No host answers at the endpoint (not started, wrong address, shutting down)."""

    default_code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(TliError):
    default_code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(TliError):
    default_code = grpc.StatusCode.CANCELLED


class Internal(TliError):
    default_code = grpc.StatusCode.INTERNAL


class Unimplemented(TliError):
    """The host does not serve this method (an older host)."""

    default_code = grpc.StatusCode.UNIMPLEMENTED


class DataLoss(TliError):
    """Bytes that arrived damaged: e.g. an exported file whose SHA-256 is not the one in the
    bundle's ``checksums.sha256``."""

    default_code = grpc.StatusCode.DATA_LOSS


_BY_CODE: Dict[grpc.StatusCode, Type[TliError]] = {
    cls.default_code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        Unauthenticated,
        ResourceExhausted,
        FailedPrecondition,
        Unavailable,
        DeadlineExceeded,
        Cancelled,
        Internal,
        Unimplemented,
        DataLoss,
    )
}


def error_from_rpc(error: grpc.RpcError, method: str = "") -> TliError:
    """The :class:`TliError` subclass for a grpc error (its code and the host's message)."""
    code: Optional[grpc.StatusCode] = None
    message = str(error)
    if isinstance(error, grpc.Call):
        code = error.code()
        message = error.details() or ""
    code = code or grpc.StatusCode.UNKNOWN
    cls = _BY_CODE.get(code, TliError)
    return cls(code, message, method)
