"""Re-apply after a conflict is the server's three-way merge (``POST web/merge``), never a
second one in the page: the route answers exactly what ``sandbox.merge.merge3`` does, and
the page shows its answer."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import jwt
from fastapi import FastAPI
from fastapi.testclient import TestClient
from playwright.sync_api import expect

from memstrata.api.app import create_router
from memstrata.api.context import ApiContext
from memstrata.config import Settings
from memstrata.runtime import Memstrata
from memstrata.sandbox.merge import merge3
from memstrata.web import web_router
from tests.web.conflict_support import conflict_on
from tests.web.conftest import MAX_CONTENT_BYTES, Console, SignedIn, sign_in
from tests.web.server import Serve

# base, ours, theirs: the page's former merge (in JavaScript) merged this to "b\na" where
# the server's rule sees two edits touching the same lines (found by running both on
# random cases).
DISAGREED = ("a\nc\nb", "b", "b\na")
# Where it conflicts: all three base lines, as one line of mine and two of theirs.
DISAGREED_PLACE = {
    "base": [0, 3],
    "mine": [0, 1],
    "theirs": [0, 2],
    "mine_lines": ["b"],
    "theirs_lines": ["b", "a"],
}
CASES = [
    DISAGREED,
    ("1\n2\n3\n4\n5", "1\n2x\n3\n4\n5", "1\n2\n3\n4\n5y"),  # far apart: merged
    ("1\n2\n3\n4\n5", "0\n1\n2\n3\n4\n5", "1\n2\n3\n4\n5\n6"),
    ("1\n2\n3", "1\n2x\n3", "1\n2y\n3"),  # the same line: never guessed
    ("1\n2\n3", "1\n2x\n3", "1\n2x\n3"),  # the same edit twice
    ("1\n2\n3", "1x\n2\n3", "1\n2y\n3"),  # neighbouring lines: a conflict too
    ("", "mine", ""),
    ("x\r\ny", "x\r\ny\r\nz", "w\r\nx\r\ny"),
]


def _post(client: httpx.Client, body: object, **headers: str) -> httpx.Response:
    return client.post("/web/merge", json=body, headers=headers)


def test_the_route_answers_what_the_servers_merge_does(server: Serve, user: str) -> None:
    rng = random.Random(7)
    randoms = [
        tuple("\n".join(rng.choice("ab") for _ in range(rng.randrange(4))) for _ in range(3))
        for _ in range(60)
    ]
    with server.rest(user) as rest:
        for base, mine, theirs in CASES + randoms:
            answer = _post(rest, {"base": base, "mine": mine, "theirs": theirs})
            assert answer.status_code == 200, answer.text
            merged = merge3(base, mine, theirs)
            assert answer.json()["merged"] == merged, (base, mine, theirs)
            # the places to choose at come with a merge that gave up, and only then
            assert (answer.json()["parts"] is None) == (merged is not None)
        assert _post(
            rest, dict(zip(("base", "mine", "theirs"), DISAGREED, strict=True))
        ).json() == {"merged": None, "parts": [{"conflict": DISAGREED_PLACE}]}
        same_line = _post(rest, dict(zip(("base", "mine", "theirs"), CASES[3], strict=True)))
        assert same_line.json() == {
            "merged": None,
            "parts": [
                {"lines": ["1"]},
                {
                    "conflict": {
                        "base": [1, 2],
                        "mine": [1, 2],
                        "theirs": [1, 2],
                        "mine_lines": ["2x"],
                        "theirs_lines": ["2y"],
                    }
                },
                {"lines": ["3"]},
            ],
        }
        clean = _post(rest, dict(zip(("base", "mine", "theirs"), CASES[1], strict=True)))
        assert clean.json() == {"merged": "1\n2x\n3\n4\n5y", "parts": None}


def test_the_route_is_the_apis_in_authentication_and_errors(server: Serve, user: str) -> None:
    good = {"base": "a", "mine": "b", "theirs": "a"}
    with httpx.Client(base_url=server.url) as anonymous:
        refused = _post(anonymous, good)
        assert refused.status_code == 401
        assert refused.json()["code"] == "unauthorized"
        assert refused.headers["www-authenticate"].startswith("Bearer")
        # the token is checked before the body is read: a bad body is not a stranger's 422
        garbled = anonymous.post(
            "/web/merge", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert garbled.status_code == 401
    with server.rest(user) as rest:
        for body, loc in [
            ({"base": "a", "mine": "b"}, ["body", "theirs"]),  # missing
            ({**good, "ours": "b"}, ["body", "ours"]),  # extra: never ignored
            ({**good, "mine": 3}, ["body", "mine"]),  # not a string
            ({**good, "base": None}, ["body", "base"]),
        ]:
            answer = _post(rest, body)
            assert answer.status_code == 422, body
            assert answer.json()["code"] == "validation_error"
            assert [e["loc"] for e in answer.json()["errors"]] == [loc]
        # each text is held to the store's limit for a file (the server runs with 64 KiB)
        too_big = _post(rest, {**good, "theirs": "x" * (MAX_CONTENT_BYTES + 1)})
        assert too_big.status_code == 413
        assert too_big.json()["code"] == "payload_too_large"
        assert f"over the limit of {MAX_CONTENT_BYTES} bytes" in too_big.json()["detail"]
        at_limit = _post(rest, {**good, "mine": "a", "theirs": "x" * MAX_CONTENT_BYTES})
        assert at_limit.json() == {"merged": "x" * MAX_CONTENT_BYTES, "parts": None}
        nul = _post(rest, {**good, "mine": "b\x00"})
        assert (nul.status_code, nul.json()["code"]) == (422, "validation_error")
        assert rest.get("/web/merge").status_code == 404  # GET is the asset route
    assert "/web/merge" not in httpx.get(f"{server.url}/openapi.json").json()["paths"]


def test_a_host_app_mounts_it_with_its_own_runtime(tmp_path: Path) -> None:
    settings = Settings(environment="test", data_dir=tmp_path, jwt_secret="s" * 40)
    # the route reads only the store's limit from the runtime
    runtime = cast(
        Memstrata, SimpleNamespace(settings=settings, store=SimpleNamespace(max_content_bytes=8))
    )
    context = ApiContext(settings, memstrata=runtime)
    host = FastAPI()
    host.include_router(create_router(context, include_operations=False), prefix="/memory")
    host.include_router(web_router(context), prefix="/memory")
    client = TestClient(host)
    assert client.post("/memory/web/merge", json={}).status_code == 401
    token = jwt.encode({"sub": "host-user", "exp": 2**31 - 1}, "s" * 40, "HS256")
    auth = {"Authorization": f"Bearer {token}"}
    body: dict[str, Any] = dict(zip(("base", "mine", "theirs"), CASES[1], strict=True))
    assert client.post("/memory/web/merge", json=body, headers=auth).status_code == 413
    body = dict(zip(("base", "mine", "theirs"), DISAGREED, strict=True))
    answer = client.post("/memory/web/merge", json=body, headers=auth).json()
    assert answer == {"merged": None, "parts": [{"conflict": DISAGREED_PLACE}]}


# Holds the page's merge request until the test calls window.__release().
_HOLD_MERGES = """() => {
  const fetch = window.fetch;
  window.__release = null;
  window.__merges = 0;
  window.fetch = async (url, init) => {
    if (String(url).endsWith("/web/merge")) {
      window.__merges += 1;
      await new Promise((go) => { window.__release = go; });
    }
    return fetch(url, init);
  };
}"""


def test_the_reviewers_case_is_overlapping_edits_in_the_page(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    base, mine, theirs = DISAGREED
    conflict_on(page, server, user, base, mine, theirs)
    page.click("#conflict-reapply")
    message = page.locator("#file-message")
    # the place is the server's, exactly: all three base lines, two of theirs and one of mine
    expect(message).to_have_text(
        "Your edits and version 3 change the same or neighbouring lines, so they were not "
        "re-applied automatically: lines 1–2 of version 3 (line 1 of your text). Choose what "
        "to keep there below; the rest of your edits were re-applied."
    )
    expect(message).to_have_class("banner warn")
    expect(page.locator("#conflict")).to_be_hidden()
    place = page.locator("#resolve-list > li")
    expect(place).to_have_count(1)
    expect(place.locator(".place-theirs .place-line")).to_have_text(["b", "a"])
    expect(place.locator(".place-mine .place-line")).to_have_text(["b"])
    expect(place.get_by_label("Keep version 3's lines")).to_be_focused()
    # one place: nowhere to step to, so no Previous/Next place
    expect(page.get_by_role("button", name="Next place")).to_be_hidden()
    page.click("#resolve-leave")
    assert page.locator("#editor").input_value() == theirs
    assert page.locator("#kept-text").input_value() == mine  # the user's text, beside it
    expect(page.locator("#file-state")).to_have_text("Earlier text not saved")
    expect(page.locator("#editor")).to_be_focused()


def test_re_apply_cannot_be_pressed_twice_while_the_server_merges(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    conflict_on(page, server, user, "1\n2\n3", "1\n2\n3 mine", "0\n1\n2\n3")
    page.evaluate(_HOLD_MERGES)
    page.click("#conflict-reapply")
    page.wait_for_function("window.__release !== null")
    # waiting for the server: no second re-apply, no overwrite meanwhile
    expect(page.locator("#conflict-reapply")).to_be_disabled()
    expect(page.locator("#conflict-overwrite")).to_be_disabled()
    expect(page.locator("#file-message")).to_have_text(
        "Re-applying your edits on top of version 3…"
    )
    page.locator("#conflict-reapply").dispatch_event("click")
    assert page.evaluate("window.__merges") == 1
    page.evaluate("window.__release()")
    expect(page.locator("#file-message")).to_contain_text("Your edits were re-applied")
    assert page.locator("#editor").input_value() == "0\n1\n2\n3 mine"
    assert page.evaluate("window.__merges") == 1


def test_a_failed_merge_keeps_the_conflict_view_and_can_be_tried_again(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409, 413, 503)
    page = signed_in()
    conflict_on(page, server, user, "1\n2\n3", "1\n2x\n3", "0\n1\n2\n3")
    error = '{"code": "%s", "detail": "%s", "message": "%s"}'
    page.route(
        "**/web/merge",
        lambda route: route.fulfill(
            status=503,
            content_type="application/json",
            body=error % ("unavailable", "down", "The database is unavailable"),
        ),
    )
    page.click("#conflict-reapply")
    message = page.locator("#file-message")
    expect(message).to_have_text(
        "Your edits were not re-applied. The database is unavailable. Your text is still "
        "beside version 3: re-apply again, overwrite, or copy your text."
    )
    expect(message).to_have_class("banner error")
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("#conflict-reapply")).to_be_enabled()
    expect(page.locator("#conflict-reapply")).to_be_focused()
    page.unroute("**/web/merge")
    page.route(
        "**/web/merge",
        lambda route: route.fulfill(
            status=413,
            content_type="application/json",
            body=error % ("payload_too_large", "MEMSTRATA_MAX_REQUEST_BYTES", "over"),
        ),
    )
    page.click("#conflict-reapply")
    # the page's words, not the server's setting names
    expect(message).to_contain_text("The texts are too large to merge on the server.")
    page.unroute("**/web/merge")
    page.click("#conflict-reapply")
    expect(message).to_contain_text("Your edits were re-applied on top of version 3")
    assert page.locator("#editor").input_value() == "0\n1\n2x\n3"


def test_a_refused_token_while_merging_signs_out_and_keeps_the_conflict(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409, 401)
    page = signed_in()
    conflict_on(page, server, user, "1\n2", "1\n2 mine", "0\n1\n2")
    page.route(
        "**/web/merge",
        lambda route: route.fulfill(
            status=401,
            content_type="application/json",
            body='{"code": "unauthorized", "detail": "token expired", "message": "token expired"}',
        ),
    )
    page.click("#conflict-reapply")
    expect(page.locator("#signin-view")).to_be_visible()
    # in the page's words, not the API's (which names the server's settings)
    expect(page.locator("#signin-error")).to_contain_text(
        "You were signed out: this sign-in token is no longer accepted."
    )
    page.unroute("**/web/merge")
    sign_in(page, server.token(user))
    expect(page.locator("#conflict")).to_be_visible()  # nothing was lost
    page.click("#conflict-reapply")
    expect(page.locator("#file-message")).to_contain_text("Your edits were re-applied")
    assert page.locator("#editor").input_value() == "0\n1\n2 mine"
