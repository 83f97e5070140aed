"""One embedding request over HTTP, for ``OpenAICompatibleEmbedder``: the connection pools,
a POST whose answer is read within its timeout, the retries, and what a failure says.

A failure is one of three ``Failure`` kinds, which the client turns into its error classes
(``embeddings``' module docstring says what each makes ``embed_each`` do):

- ``"rejected"``: a 4xx that refuses the input (400, 413, 422, ...): one text's, for good.
- ``"unavailable"``: HTTP 500 after the retries: the model may have failed on one text.
- ``"outage"``: no answer (a refused or dropped connection, a URL that cannot be sent to)
  or an answer about the API rather than the input (a redirect, 401/403/404/405/407/408,
  429, every 5xx but 500).
- ``"timeout"``: no answer within the timeout on a connection the server accepted. An
  outage too, unless the server is merely slow for that many texts: the background worker
  splits such a request (``embeddings``), and sends one text again with a longer timeout
  while the server answers (``embedding_slow``). A connection not accepted in time is an
  outage: nothing listens there, or nothing that takes requests.

Retried: a rate limit, a server error or a dropped connection, up to ``retries`` times
with an exponential pause (``Retry-After`` when longer, at most ``MAX_BACKOFF_S``); never a
timeout, which would cost a caller several, nor an attempt after the lane closed
(``stopped``): a stopping server's write commits within one timeout.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import httpx

from memstrata.errors import EmbeddingError
from memstrata.retrieval.embedding_answer import error_detail

Failure = Literal["rejected", "unavailable", "outage", "timeout"]

# Retrying a rate limit or a server error is worth a moment; retrying a 400 never helps.
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
# Transport failures that may succeed on a second try. Note httpx.RemoteProtocolError:
# a server may drop an idle keep-alive connection just as we reuse it.
_RETRY_EXCEPTIONS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
# 4xx statuses about the request's credentials, address, proxy or pace, not its texts.
_NOT_ABOUT_THE_INPUT = frozenset({401, 403, 404, 405, 407, 408, 429})
# Embedding runs inside a memory write, so no single wait may stall it for long.
MAX_BACKOFF_S = 2.0
_POOL_CONNECTIONS = 16
NOT_SENT_STOPPING = (
    "the server is stopping; the text is stored without a vector, which the background "
    "re-embedding fills in"
)


def post_with_retries(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    headers: Mapping[str, str],
    timeout_s: float,
    retries: int,
    *,
    backoff_s: float,
    stopped: Callable[[], bool],
    error: Callable[[str, Failure], EmbeddingError],
) -> httpx.Response:
    """The successful answer to ``body`` posted to ``url``, after at most ``retries``
    retries (module doc); else raises ``error(what happened, its Failure kind)``."""
    attempts = retries + 1
    for attempt in range(attempts):
        if attempt and stopped():  # the lane closed during the backoff
            raise error(f"was not sent again: {NOT_SENT_STOPPING}", "outage")
        last_try = attempt == attempts - 1
        try:
            response = post_within(client, url, body, headers, timeout_s)
        except httpx.TimeoutException as exc:
            # Neither retried nor split (embed_each): a hung API must not cost a caller
            # several timeouts.
            # This client's own pool full is no sign of a slow server, nor a connection
            # the server did not accept.
            refused = isinstance(exc, httpx.PoolTimeout | httpx.ConnectTimeout)
            failure: Failure = "outage" if refused else "timeout"
            raise error(f"timed out after {timeout_s:g} s: {_why_timed_out(exc)}", failure) from exc
        except _RETRY_EXCEPTIONS as exc:
            if last_try or stopped():
                raise error(
                    f"failed after {attempt + 1} attempt(s): {type(exc).__name__}: {exc}", "outage"
                ) from exc
            time.sleep(backoff(backoff_s, attempt, None))
            continue
        except httpx.HTTPError as exc:  # bad URL, unsupported scheme: retrying won't help
            raise error(f"could not be sent: {type(exc).__name__}: {exc}", "outage") from exc
        if response.is_success:
            return response
        detail = f"HTTP {response.status_code}: {error_detail(response)}"
        kind = failure_kind(response.status_code)
        if response.status_code not in _RETRY_STATUS:
            raise error(f"was rejected with {detail}", kind)
        if last_try or stopped():
            raise error(f"failed after {attempt + 1} attempt(s), last {detail}", kind)
        time.sleep(backoff(backoff_s, attempt, response.headers.get("Retry-After")))
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


def backoff(base_s: float, attempt: int, retry_after: str | None) -> float:
    """The pause before retry ``attempt + 1``: ``base_s`` doubled per attempt, or the
    server's ``Retry-After`` seconds when longer; at most ``MAX_BACKOFF_S``."""
    delay: float = base_s * 2**attempt
    if retry_after is not None:
        # An HTTP-date Retry-After is not worth parsing; the exponential delay will do.
        with contextlib.suppress(ValueError):
            delay = max(delay, float(retry_after))
    return min(delay, MAX_BACKOFF_S)


def failure_kind(status: int) -> Failure:
    """What a failed HTTP status says (module doc)."""
    if status == 500:  # the model may have failed on one of the texts
        return "unavailable"
    if 400 <= status < 500 and status not in _NOT_ABOUT_THE_INPUT:
        return "rejected"
    return "outage"


def pool(timeout_s: float, keepalive: bool) -> httpx.Client:
    # Wide enough that queries never queue for a connection behind bulk requests.
    connections = _POOL_CONNECTIONS if keepalive else 0
    limits = httpx.Limits(max_connections=_POOL_CONNECTIONS, max_keepalive_connections=connections)
    return httpx.Client(timeout=timeout_s, limits=limits, trust_env=False)


def post_within(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    headers: Mapping[str, str],
    timeout_s: float,
) -> httpx.Response:
    """POST and read the answer within ``timeout_s`` in all. httpx's timeout bounds each
    read, not the whole: an API (or a proxy) sending its answer a byte at a time held the
    request, and the one passage slot every user's writes wait for, without end."""
    deadline = time.monotonic() + timeout_s
    with client.stream(
        "POST", url, json=body, headers=headers, timeout=httpx.Timeout(timeout_s)
    ) as response:
        chunks: list[bytes] = []
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout("the answer was still arriving", request=response.request)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=b"".join(chunks),
            request=response.request,
        )


def _why_timed_out(exc: httpx.TimeoutException) -> str:
    if isinstance(exc, httpx.PoolTimeout):
        return "every connection of this client was busy (too many requests in flight)"
    return str(exc) or type(exc).__name__


def shown_url(url: str) -> str:
    """``url`` without user, password and query string (where API keys sometimes travel)."""
    return str(httpx.URL(url).copy_with(userinfo=b"", query=None))
