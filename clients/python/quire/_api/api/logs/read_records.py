from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.log_records import LogRecords
from ...types import UNSET, Response, Unset


def _get_kwargs(
    name: str,
    *,
    from_: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
    from_time: int | Unset = UNSET,
    limit: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
    wait_ms: int | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["from"] = from_

    params["cursor"] = cursor

    params["from_time"] = from_time

    params["limit"] = limit

    params["follow"] = follow

    params["wait_ms"] = wait_ms

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/logs/{name}/records".format(
            name=quote(str(name), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | LogRecords | None:
    if response.status_code == 200:
        response_200 = LogRecords.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())

        return response_404

    if response.status_code == 410:
        response_410 = Error.from_dict(response.json())

        return response_410

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
) -> Response[Error | LogRecords]:
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
    from_: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
    from_time: int | Unset = UNSET,
    limit: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
    wait_ms: int | Unset = UNSET,
) -> Response[Error | LogRecords]:
    """Records from an offset across ledgers, up to the committed end; with follow=true a long poll for the
    next ones, or server-sent events by Accept

    Args:
        name (str):
        from_ (int | Unset):
        cursor (str | Unset):
        from_time (int | Unset):
        limit (int | Unset):
        follow (bool | Unset):
        wait_ms (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LogRecords]
    """

    kwargs = _get_kwargs(
        name=name,
        from_=from_,
        cursor=cursor,
        from_time=from_time,
        limit=limit,
        follow=follow,
        wait_ms=wait_ms,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    from_: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
    from_time: int | Unset = UNSET,
    limit: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
    wait_ms: int | Unset = UNSET,
) -> Error | LogRecords | None:
    """Records from an offset across ledgers, up to the committed end; with follow=true a long poll for the
    next ones, or server-sent events by Accept

    Args:
        name (str):
        from_ (int | Unset):
        cursor (str | Unset):
        from_time (int | Unset):
        limit (int | Unset):
        follow (bool | Unset):
        wait_ms (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LogRecords
    """

    return sync_detailed(
        name=name,
        client=client,
        from_=from_,
        cursor=cursor,
        from_time=from_time,
        limit=limit,
        follow=follow,
        wait_ms=wait_ms,
    ).parsed


async def asyncio_detailed(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    from_: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
    from_time: int | Unset = UNSET,
    limit: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
    wait_ms: int | Unset = UNSET,
) -> Response[Error | LogRecords]:
    """Records from an offset across ledgers, up to the committed end; with follow=true a long poll for the
    next ones, or server-sent events by Accept

    Args:
        name (str):
        from_ (int | Unset):
        cursor (str | Unset):
        from_time (int | Unset):
        limit (int | Unset):
        follow (bool | Unset):
        wait_ms (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LogRecords]
    """

    kwargs = _get_kwargs(
        name=name,
        from_=from_,
        cursor=cursor,
        from_time=from_time,
        limit=limit,
        follow=follow,
        wait_ms=wait_ms,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    name: str,
    *,
    client: AuthenticatedClient | Client,
    from_: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
    from_time: int | Unset = UNSET,
    limit: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
    wait_ms: int | Unset = UNSET,
) -> Error | LogRecords | None:
    """Records from an offset across ledgers, up to the committed end; with follow=true a long poll for the
    next ones, or server-sent events by Accept

    Args:
        name (str):
        from_ (int | Unset):
        cursor (str | Unset):
        from_time (int | Unset):
        limit (int | Unset):
        follow (bool | Unset):
        wait_ms (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LogRecords
    """

    return (
        await asyncio_detailed(
            name=name,
            client=client,
            from_=from_,
            cursor=cursor,
            from_time=from_time,
            limit=limit,
            follow=follow,
            wait_ms=wait_ms,
        )
    ).parsed
