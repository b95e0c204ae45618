"""What the emulator answered when it refused a request: the `Status` body, code included."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, ApiException


def refusal(call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Make the call, which must fail, and return the parsed `Status` it answered."""
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    status: dict[str, Any] = json.loads(caught.value.body)
    assert status["code"] == caught.value.status
    return status


def send(
    api: ApiClient, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> tuple[int, dict[str, Any]]:
    """A raw request, for bodies the typed client would refuse before sending them."""
    response = api.call_api(
        *api.param_serialize(method, path, header_params={"Content-Type": content_type}, body=body)
    )
    response.read()
    return response.status, json.loads(response.data)
