# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by weightd: one class per family of protocol error codes.

Every error carries the protocol's code name (``.code``, e.g. ``"unknown-tensor"``) and the
complete sentence libweightd or the daemon wrote (``str(e)`` and ``.message``), plus the
structured fields that apply (checkpoint, tensor, slot, node, axis, expected, actual).
"""

from __future__ import annotations

from typing import Dict, Type

__all__ = [
    "Error",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "SourceChanged",
    "InvalidArgument",
    "Disconnected",
]


class Error(Exception):
    """An error reported by weightd or libweightd.

    Attributes:
        code: the protocol's name of the error code (``"not-found"``, ``"source-changed"``...).
        number: the numeric code (``weightd.ErrorCode`` in the wire protocol).
        message: the sentence naming what was wrong and where.
        checkpoint, tensor, slot: what the error is about (``""`` when it does not apply).
        node: recipe node index + 1 (0: not about a node); axis: -1 when not about an axis.
        expected, actual: the numbers compared, when the error compares numbers.
    """

    def __init__(self, message: str, code: str = "internal-error", number: int = 11,
                 checkpoint: str = "", tensor: str = "", slot: str = "", node: int = 0,
                 axis: int = -1, expected: int = 0, actual: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.number = number
        self.checkpoint = checkpoint
        self.tensor = tensor
        self.slot = slot
        self.node = node
        self.axis = axis
        self.expected = expected
        self.actual = actual

    def __str__(self) -> str:
        return self.message


class NotFound(Error):
    """No such checkpoint or tensor (``not-found``, ``unknown-source``, ``unknown-tensor``).
    A checkpoint this process's uid may not read is answered the same way."""


class PermissionDenied(Error):
    """The socket's mode, or an operator-only request, refuses this process."""


class ResourceExhausted(Error):
    """Out of room: the memory budget, /dev/shm, or a per-client limit
    (``resource-exhausted``, ``limit-exceeded``)."""


class SourceChanged(Error):
    """The checkpoint's files changed on disk since the daemon admitted them."""


class InvalidArgument(Error):
    """The request is wrong: bad arguments, selections out of range, recipes or units that do
    not check (``invalid-argument``, ``out-of-range``, ``dtype-mismatch``, ``bad-alias``...)."""


class Disconnected(Error):
    """The connection to weightd is gone (or was never made), or weightd stopped before it
    started the work (``cancelled``): connect again."""


_BY_CODE: Dict[str, Type[Error]] = {
    "not-found": NotFound,
    "unknown-source": NotFound,
    "unknown-tensor": NotFound,
    "permission-denied": PermissionDenied,
    "resource-exhausted": ResourceExhausted,
    "limit-exceeded": ResourceExhausted,
    "source-changed": SourceChanged,
    "disconnected": Disconnected,
    "cancelled": Disconnected,
}
for _name in ("invalid-argument", "out-of-range", "empty-inputs", "dtype-mismatch",
              "shape-mismatch", "axis-out-of-range", "element-count-mismatch",
              "byte-count-mismatch", "not-a-permutation", "zero-sized-output",
              "unsupported-cast", "arithmetic-overflow", "recipe-too-deep", "recipe-too-large",
              "duplicate-name", "bad-alias", "alias-cycle", "slot-mismatch", "scale-mismatch"):
    _BY_CODE[_name] = InvalidArgument


def error_class(code: str) -> Type[Error]:
    """The exception class raised for a protocol code name (``Error`` for the others). The
    extension raises what this returns, built as ``cls(message, code, number, checkpoint,
    tensor, slot, node, axis, expected, actual)``."""
    return _BY_CODE.get(code, Error)
