"""Errors in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}``.

Handlers raise ``APIError``; the server's app turns it (and anything else, as a 500) into an HTTP
response with that body, ``clover.LLM`` into a ``RequestError``.
"""

from __future__ import annotations


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def unauthorized(message: str) -> APIError:
    return APIError(
        401, message, type="authentication_error", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
    )


def queue_full(capacity: int, retry_after: int = 1) -> APIError:
    return APIError(
        429,
        f"the server is at capacity ({capacity} requests running or queued); retry shortly",
        type="rate_limit_error",
        code="queue_full",
        headers={"Retry-After": str(retry_after)},
    )


def too_large(message: str, code: str = "request_too_large", param: str | None = None) -> APIError:
    return APIError(413, message, param=param, code=code)


def server_error(message: str = "internal server error") -> APIError:
    return APIError(500, message, type="server_error", code="internal_error")


def from_validation(errors: list[dict]) -> APIError:
    """A pydantic ``ValidationError.errors()`` list → one 400 naming the first bad parameter."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = [str(x) for x in first.get("loc", ()) if x not in ("body",)]
    # drop pydantic's union-branch tags ("str", "list[str]", "function-after[...]") from the path
    loc = [x for x in loc if not any(c in x for c in "[(") and x not in ("str", "int", "float", "list", "dict")]
    param = ".".join(loc) or None
    msg = first.get("msg", "invalid value").removeprefix("Value error, ")  # a validator's own message
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return bad_request(f"{param}: {msg}{more}" if param else f"{msg}{more}", param=param)


def as_api_error(e: Exception) -> APIError:
    """An exception as the client sees it: an APIError as it is, a ValueError (a bad parameter) as a
    400, anything else as the engine's 500."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, ValueError):
        return bad_request(str(e), getattr(e, "param", None))  # ParamError names it
    return APIError(500, f"engine error: {e}", type="server_error", code="engine_error")
