from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.log_appended import LogAppended
from ...models.precondition_failed import PreconditionFailed
from ...types import UNSET, File, Response, Unset


def _get_kwargs(
    name: str,
    *,
    body: File | Unset = UNSET,
    producer_id: str | Unset = UNSET,
    sequence: int | Unset = UNSET,
    expected_offset: int | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    params: dict[str, Any] = {}

    params["producer_id"] = producer_id

    params["sequence"] = sequence

    params["expected_offset"] = expected_offset

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/logs/{name}/records".format(
            name=quote(str(name), safe=""),
        ),
        "params": params,
    }

    if not isinstance(body, Unset):
        _kwargs["content"] = body.payload
    headers["Content-Type"] = "application/octet-stream"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | LogAppended | PreconditionFailed | None:
    if response.status_code == 200:
        response_200 = LogAppended.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())

        return response_403

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())

        return response_404

    if response.status_code == 408:
        response_408 = Error.from_dict(response.json())

        return response_408

    if response.status_code == 409:
        response_409 = Error.from_dict(response.json())

        return response_409

    if response.status_code == 412:
        response_412 = PreconditionFailed.from_dict(response.json())

        return response_412

    if response.status_code == 413:
        response_413 = Error.from_dict(response.json())

        return response_413

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())

        return response_503

    if response.status_code == 504:
        response_504 = Error.from_dict(response.json())

        return response_504

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Error | LogAppended | PreconditionFailed]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    body: File | Unset = UNSET,
    producer_id: str | Unset = UNSET,
    sequence: int | Unset = UNSET,
    expected_offset: int | Unset = UNSET,
) -> Response[Error | LogAppended | PreconditionFailed]:
    """Append one record (raw body); producer_id and sequence make it idempotent; expected_offset makes it
    conditional

    Args:
        name (str):
        producer_id (str | Unset):
        sequence (int | Unset):
        expected_offset (int | Unset):
        body (File | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LogAppended | PreconditionFailed]
    """

    kwargs = _get_kwargs(
        name=name,
        body=body,
        producer_id=producer_id,
        sequence=sequence,
        expected_offset=expected_offset,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    body: File | Unset = UNSET,
    producer_id: str | Unset = UNSET,
    sequence: int | Unset = UNSET,
    expected_offset: int | Unset = UNSET,
) -> Error | LogAppended | PreconditionFailed | None:
    """Append one record (raw body); producer_id and sequence make it idempotent; expected_offset makes it
    conditional

    Args:
        name (str):
        producer_id (str | Unset):
        sequence (int | Unset):
        expected_offset (int | Unset):
        body (File | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LogAppended | PreconditionFailed
    """

    return sync_detailed(
        name=name,
        client=client,
        body=body,
        producer_id=producer_id,
        sequence=sequence,
        expected_offset=expected_offset,
    ).parsed


async def asyncio_detailed(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    body: File | Unset = UNSET,
    producer_id: str | Unset = UNSET,
    sequence: int | Unset = UNSET,
    expected_offset: int | Unset = UNSET,
) -> Response[Error | LogAppended | PreconditionFailed]:
    """Append one record (raw body); producer_id and sequence make it idempotent; expected_offset makes it
    conditional

    Args:
        name (str):
        producer_id (str | Unset):
        sequence (int | Unset):
        expected_offset (int | Unset):
        body (File | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LogAppended | PreconditionFailed]
    """

    kwargs = _get_kwargs(
        name=name,
        body=body,
        producer_id=producer_id,
        sequence=sequence,
        expected_offset=expected_offset,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    body: File | Unset = UNSET,
    producer_id: str | Unset = UNSET,
    sequence: int | Unset = UNSET,
    expected_offset: int | Unset = UNSET,
) -> Error | LogAppended | PreconditionFailed | None:
    """Append one record (raw body); producer_id and sequence make it idempotent; expected_offset makes it
    conditional

    Args:
        name (str):
        producer_id (str | Unset):
        sequence (int | Unset):
        expected_offset (int | Unset):
        body (File | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LogAppended | PreconditionFailed
    """

    return (
        await asyncio_detailed(
            name=name,
            client=client,
            body=body,
            producer_id=producer_id,
            sequence=sequence,
            expected_offset=expected_offset,
        )
    ).parsed
