from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.append_records_body import AppendRecordsBody
from ...models.error import Error
from ...models.log_appended_batch import LogAppendedBatch
from ...models.precondition_failed import PreconditionFailed
from ...types import Response


def _get_kwargs(
    name: str,
    *,
    body: AppendRecordsBody,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/logs/{name}/records:batch".format(
            name=quote(str(name), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | LogAppendedBatch | PreconditionFailed | None:
    if response.status_code == 200:
        response_200 = LogAppendedBatch.from_dict(response.json())

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
) -> Response[Error | LogAppendedBatch | PreconditionFailed]:
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
    body: AppendRecordsBody,
) -> Response[Error | LogAppendedBatch | PreconditionFailed]:
    """Append several records (base64) atomically: all are written, at consecutive offsets, or none (a
    reader never sees part of a batch); producer_id and sequence (the first's) make them idempotent;
    expected_offset makes them conditional

    Args:
        name (str):
        body (AppendRecordsBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LogAppendedBatch | PreconditionFailed]
    """

    kwargs = _get_kwargs(
        name=name,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    body: AppendRecordsBody,
) -> Error | LogAppendedBatch | PreconditionFailed | None:
    """Append several records (base64) atomically: all are written, at consecutive offsets, or none (a
    reader never sees part of a batch); producer_id and sequence (the first's) make them idempotent;
    expected_offset makes them conditional

    Args:
        name (str):
        body (AppendRecordsBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LogAppendedBatch | PreconditionFailed
    """

    return sync_detailed(
        name=name,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    body: AppendRecordsBody,
) -> Response[Error | LogAppendedBatch | PreconditionFailed]:
    """Append several records (base64) atomically: all are written, at consecutive offsets, or none (a
    reader never sees part of a batch); producer_id and sequence (the first's) make them idempotent;
    expected_offset makes them conditional

    Args:
        name (str):
        body (AppendRecordsBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LogAppendedBatch | PreconditionFailed]
    """

    kwargs = _get_kwargs(
        name=name,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    body: AppendRecordsBody,
) -> Error | LogAppendedBatch | PreconditionFailed | None:
    """Append several records (base64) atomically: all are written, at consecutive offsets, or none (a
    reader never sees part of a batch); producer_id and sequence (the first's) make them idempotent;
    expected_offset makes them conditional

    Args:
        name (str):
        body (AppendRecordsBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LogAppendedBatch | PreconditionFailed
    """

    return (
        await asyncio_detailed(
            name=name,
            client=client,
            body=body,
        )
    ).parsed
