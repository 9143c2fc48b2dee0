from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.entries import Entries
from ...models.error import Error
from ...types import UNSET, Response, Unset


def _get_kwargs(
    id: int,
    *,
    from_: int | Unset = UNSET,
    to: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["from"] = from_

    params["to"] = to

    params["follow"] = follow

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/ledgers/{id}/entries".format(
            id=quote(str(id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Entries | Error | None:
    if response.status_code == 200:
        response_200 = Entries.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())

        return response_404

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Entries | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    from_: int | Unset = UNSET,
    to: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
) -> Response[Entries | Error]:
    """Entries from..=to, at most up to the LAC (streamed); with follow=true, entries as the LAC passes
    them until the ledger closes (NDJSON, or server-sent events by Accept)

    Args:
        id (int):
        from_ (int | Unset):
        to (int | Unset):
        follow (bool | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Entries | Error]
    """

    kwargs = _get_kwargs(
        id=id,
        from_=from_,
        to=to,
        follow=follow,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    from_: int | Unset = UNSET,
    to: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
) -> Entries | Error | None:
    """Entries from..=to, at most up to the LAC (streamed); with follow=true, entries as the LAC passes
    them until the ledger closes (NDJSON, or server-sent events by Accept)

    Args:
        id (int):
        from_ (int | Unset):
        to (int | Unset):
        follow (bool | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Entries | Error
    """

    return sync_detailed(
        id=id,
        client=client,
        from_=from_,
        to=to,
        follow=follow,
    ).parsed


async def asyncio_detailed(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    from_: int | Unset = UNSET,
    to: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
) -> Response[Entries | Error]:
    """Entries from..=to, at most up to the LAC (streamed); with follow=true, entries as the LAC passes
    them until the ledger closes (NDJSON, or server-sent events by Accept)

    Args:
        id (int):
        from_ (int | Unset):
        to (int | Unset):
        follow (bool | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Entries | Error]
    """

    kwargs = _get_kwargs(
        id=id,
        from_=from_,
        to=to,
        follow=follow,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    from_: int | Unset = UNSET,
    to: int | Unset = UNSET,
    follow: bool | Unset = UNSET,
) -> Entries | Error | None:
    """Entries from..=to, at most up to the LAC (streamed); with follow=true, entries as the LAC passes
    them until the ledger closes (NDJSON, or server-sent events by Accept)

    Args:
        id (int):
        from_ (int | Unset):
        to (int | Unset):
        follow (bool | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Entries | Error
    """

    return (
        await asyncio_detailed(
            id=id,
            client=client,
            from_=from_,
            to=to,
            follow=follow,
        )
    ).parsed
