"""The exception tree (names follow nats-py so NATS users feel at home)."""

from __future__ import annotations

import builtins
import string
from typing import Any, ClassVar

from rayjet.errors.table import ERRORS, ErrorSpec


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return ""


def _render(template: str, fields: dict[str, Any]) -> str:
    text = string.Formatter().vformat(template, (), _Blank(fields))
    return text.rstrip(": ").strip() or template


class APIError(Exception):
    """An error with the NATS ``code``, ``err_code`` and a description that says what to fix.

    ``APIError(description=None, *, spec=None, code=None, err_code=None, hint=None, **fields)``:
    the description defaults to the spec's template filled with ``fields``.
    """

    spec_name: ClassVar[str] = "BAD_REQUEST"

    def __init__(
        self,
        description: str | None = None,
        *,
        spec: str | None = None,
        code: int | None = None,
        err_code: int | None = None,
        hint: str | None = None,
        **fields: Any,
    ) -> None:
        row: ErrorSpec = ERRORS[spec or self.spec_name]
        self.spec = row.name
        self.code = row.code if code is None else code
        self.err_code = row.err_code if err_code is None else err_code
        self.description = description if description is not None else _render(row.description, fields)
        self.hint = row.hint if hint is None else hint
        self.fields = fields
        super().__init__(self.description)

    def __str__(self) -> str:
        text = f"{self.description} (err_code={self.err_code}, code={self.code})"
        return f"{text}: {self.hint}" if self.hint else text

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(code={self.code}, err_code={self.err_code}, "
                f"description={self.description!r})")

    # Keyword-only constructors do not survive the default pickling; Ray ships errors
    # between processes, so rebuild from the full state.
    def __reduce__(self):
        return (_rebuild, (type(self), self.__dict__.copy()))

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "err_code": self.err_code, "description": self.description}


def _rebuild(cls: type[APIError], state: dict[str, Any]) -> APIError:
    err = cls.__new__(cls)
    Exception.__init__(err, state.get("description", ""))
    err.__dict__.update(state)
    return err


# -- families by HTTP-like code ----------------------------------------------------------
class BadRequestError(APIError):
    spec_name = "BAD_REQUEST"


class NotFoundError(APIError):
    spec_name = "NO_MESSAGE_FOUND"


class ServiceUnavailableError(APIError):
    spec_name = "CLUSTER_NOT_AVAILABLE"


class ServerError(APIError):
    spec_name = "STREAM_GENERAL"


class TimeoutError(APIError, builtins.TimeoutError):  # noqa: A001 - nats-py's name
    spec_name = "TIMEOUT"


class NoMessagesError(TimeoutError):
    """A fetch found nothing before its timeout (a TimeoutError, as nats-py raises)."""

    spec_name = "NO_MESSAGES"


class AuthorizationError(APIError):
    """The cluster refused this process's credentials (nats-py's name for the same)."""

    spec_name = "AUTHORIZATION_VIOLATION"


class ServerConfigError(BadRequestError):
    """A server configuration (``rayjet server start --config``) that cannot be used; the
    description names the file, line or option."""


class PermissionViolationError(AuthorizationError):
    """This user may not publish to, or subscribe to, the subject named (nats-server's
    ``Permissions Violation`` text in the description)."""

    spec_name = "PERMISSIONS_VIOLATION"


class NotLeaderError(ServiceUnavailableError):
    spec_name = "NOT_LEADER"


class ClusterNoPeersError(BadRequestError):
    spec_name = "CLUSTER_NO_PEERS"


# -- streams -------------------------------------------------------------------------------
class StreamNotFoundError(NotFoundError):
    spec_name = "STREAM_NOT_FOUND"


class StreamNameInUseError(BadRequestError):
    spec_name = "STREAM_NAME_EXISTS"


class InvalidConfigError(BadRequestError):
    spec_name = "STREAM_INVALID_CONFIG"


class InvalidSubjectError(BadRequestError):
    spec_name = "BAD_SUBJECT"


class SubjectNotCapturedError(InvalidSubjectError):
    """A stream was handed a subject none of its subjects capture: the sender's route to it
    is stale (its subjects changed), and it should look the subject up again."""


class SubjectsOverlapError(BadRequestError):
    spec_name = "STREAM_SUBJECT_OVERLAP"


class WrongLastSequenceError(BadRequestError):
    spec_name = "STREAM_WRONG_LAST_SEQUENCE"


class WrongLastMsgIdError(BadRequestError):
    spec_name = "STREAM_WRONG_LAST_MSG_ID"


class ExpectedStreamMismatchError(BadRequestError):
    spec_name = "STREAM_NOT_MATCH"


class MessageTooBigError(BadRequestError):
    spec_name = "STREAM_MSG_TOO_BIG"


class StreamSealedError(BadRequestError):
    spec_name = "STREAM_SEALED"


class RollupNotPermittedError(ServerError):
    spec_name = "STREAM_ROLLUP_FAILED"


class DuplicateInProcessError(APIError):
    spec_name = "STREAM_DUPLICATE_IN_PROCESS"


class MessageTTLInvalidError(BadRequestError):
    spec_name = "MESSAGE_TTL_INVALID"


class MessageTTLDisabledError(BadRequestError):
    spec_name = "MESSAGE_TTL_DISABLED"


class StoreFailedError(ServiceUnavailableError):
    spec_name = "STREAM_STORE_FAILED"


class StoreLimitError(StoreFailedError):
    """A write refused by a limit (discard new): 'maximum messages exceeded' and friends."""


class StoreCorruptionError(StoreFailedError):
    spec_name = "STORE_CORRUPT"


class EncryptionKeyError(StoreFailedError):
    spec_name = "STORE_ENCRYPTION_KEY"


# -- consumers -----------------------------------------------------------------------------
class ConsumerNotFoundError(NotFoundError):
    spec_name = "CONSUMER_NOT_FOUND"


class ConsumerNameExistsError(BadRequestError):
    spec_name = "CONSUMER_NAME_EXISTS"


class ConsumerAlreadyExistsError(BadRequestError):
    spec_name = "CONSUMER_ALREADY_EXISTS"


class ConsumerDoesNotExistError(BadRequestError):
    spec_name = "CONSUMER_DOES_NOT_EXIST"


class MaximumConsumersError(BadRequestError):
    spec_name = "CONSUMER_MAX_CONSUMERS"


class InvalidPriorityGroupError(BadRequestError):
    spec_name = "CONSUMER_INVALID_PRIORITY_GROUP"


class PinIdMismatchError(APIError):
    """A pull carried a pin id that is not (or no longer) the pinned client's: status 423."""

    spec_name = "CONSUMER_PIN_ID_MISMATCH"


# -- key-value -----------------------------------------------------------------------------
class KeyValueError(APIError):
    spec_name = "BAD_REQUEST"


class BadBucketNameError(KeyValueError, BadRequestError):
    spec_name = "KV_BAD_BUCKET"


class InvalidKeyError(KeyValueError, BadRequestError):
    spec_name = "KV_BAD_KEY"


class BucketNotFoundError(NotFoundError):
    spec_name = "KV_BUCKET_NOT_FOUND"


class KeyNotFoundError(KeyValueError, NotFoundError):
    spec_name = "KV_KEY_NOT_FOUND"


class KeyDeletedError(KeyNotFoundError):
    spec_name = "KV_KEY_DELETED"


class KeyWrongLastSequenceError(KeyValueError, BadRequestError):
    spec_name = "KV_WRONG_LAST_SEQUENCE"


class KeyHistoryTooLargeError(KeyValueError, BadRequestError):
    spec_name = "KV_HISTORY_TOO_LARGE"


# -- object store --------------------------------------------------------------------------
class ObjectStoreError(APIError):
    spec_name = "BAD_REQUEST"


class ObjectNotFoundError(ObjectStoreError, NotFoundError):
    spec_name = "OBJ_NOT_FOUND"


class ObjectDeletedError(ObjectNotFoundError):
    spec_name = "OBJ_DELETED"


class DigestMismatchError(ObjectStoreError):
    spec_name = "OBJ_DIGEST_MISMATCH"


class BadObjectMetaError(ObjectStoreError, BadRequestError):
    spec_name = "OBJ_BAD_META"


class LinkIsABucketError(ObjectStoreError, BadRequestError):
    spec_name = "OBJ_LINK_IS_BUCKET"


class ObjectAlreadySealedError(ObjectStoreError, BadRequestError):
    spec_name = "OBJ_SEALED"


# -- lookup --------------------------------------------------------------------------------
def _classes() -> list[type[APIError]]:
    seen: list[type[APIError]] = []
    todo = [APIError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return seen


_FAMILY_BY_CODE: dict[int, type[APIError]] = {
    400: BadRequestError, 404: NotFoundError, 408: TimeoutError,
    500: ServerError, 503: ServiceUnavailableError,
}


def _class_for_spec(name: str) -> type[APIError]:
    # the base classes name BAD_REQUEST only as a default: the family class wins for it
    exact = [cls for cls in _classes()[1:] if cls.__dict__.get("spec_name") == name]
    family = _FAMILY_BY_CODE.get(ERRORS[name].code, APIError)
    if not exact or family in exact:
        return family
    return exact[0]


def error_for(name: str, description: str | None = None, **fields: Any) -> APIError:
    """The typed error for table row ``name`` (e.g. ``error_for("STREAM_NOT_FOUND")``)."""
    if name not in ERRORS:
        raise KeyError(f"unknown error {name!r}")
    return _class_for_spec(name)(description, spec=name, **fields)


def from_wire(payload: dict[str, Any]) -> APIError:
    """Rebuild a typed error from a NATS-style ``{"code", "err_code", "description"}``."""
    err_code = int(payload.get("err_code") or 0)
    code = int(payload.get("code") or 500)
    description = payload.get("description")
    for row in ERRORS.values():
        if err_code and row.err_code == err_code:
            return error_for(row.name, description, )
    family = _FAMILY_BY_CODE.get(code, APIError)
    return family(description, code=code, err_code=err_code)


def error_classes() -> list[type[APIError]]:
    """APIError and every subclass of it."""
    return _classes()


def rebuild_error(cls: type[APIError], state: dict[str, Any]) -> APIError:
    """An error of ``cls`` with ``state`` (its ``__dict__``), as unpickling rebuilds one."""
    return _rebuild(cls, state)
