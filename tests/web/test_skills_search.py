"""Skills (optimistic toggles, visible rollback) and the explained search."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from playwright.sync_api import Page, Route, expect

from tests.web.conftest import Console, SignedIn
from tests.web.server import Serve


def _skills(page: Page) -> None:
    page.click("#nav a[data-view=skills]")
    expect(page.locator("#skills-view")).to_be_visible()
    expect(page.locator("#skill-list")).to_have_attribute("aria-busy", "false")


def test_skills_list_matches_the_api(signed_in: SignedIn, server: Serve, user: str) -> None:
    page = signed_in()
    _skills(page)
    with server.rest(user) as rest:
        skills = rest.get("/api/config/skills").json()["skills"]
    assert skills
    items = page.locator(".skill")
    expect(items).to_have_count(len(skills))
    for skill in skills:
        item = page.locator(f"[data-skill='{skill['name']}']")
        expect(item.locator(".skill-name")).to_have_text(skill["name"])
        # the page is in English: the English description where there is one
        described = skill["description_en"] or skill["description"]
        expect(item.locator(".skill-desc")).to_have_text(described)
        expect(item.locator("[role=switch]")).to_have_attribute(
            "aria-checked", str(skill["enabled"]).lower()
        )


def test_a_skill_is_described_in_the_page_s_language(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    page = signed_in()
    _skills(page)
    desc = page.locator("[data-skill='web_search'] .skill-desc")
    # the page is in English: the English description, marked as such
    expect(desc).to_have_text("Search the internet")
    expect(desc).to_have_attribute("lang", "en")
    # a page in another language (a translation sets <html lang>): the spec's description
    page.evaluate("document.documentElement.lang = 'zh-CN'")
    page.click("#nav a[data-view=files]")
    with page.expect_response(lambda r: r.url.endswith("/api/config/skills")):
        _skills(page)  # read again on opening
    expect(desc).to_have_text("搜索互联网")
    expect(desc).to_have_attribute("lang", "zh")


def test_a_toggle_persists_across_reload(signed_in: SignedIn, server: Serve, user: str) -> None:
    page = signed_in()
    _skills(page)
    switch = page.locator("#skill-web_search-switch")
    expect(switch).to_have_attribute("aria-checked", "true")
    with page.expect_response("**/api/config/skills/web_search") as response:
        switch.focus()
        page.keyboard.press("Space")  # a switch is a button: the keyboard toggles it
    assert response.value.status == 200
    expect(switch).to_have_attribute("aria-checked", "false")
    page.reload()
    _skills(page)
    expect(page.locator("#skill-web_search-switch")).to_have_attribute("aria-checked", "false")
    with server.rest(user) as rest:
        stored = {s["name"]: s["enabled"] for s in rest.get("/api/config/skills").json()["skills"]}
    assert stored["web_search"] is False


def test_the_skills_list_is_read_again_when_the_view_is_opened(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    page = signed_in()
    _skills(page)
    switch = page.locator("#skill-web_search-switch")
    expect(switch).to_have_attribute("aria-checked", "true")
    # the agent (MCP skill_set) or the platform (REST) turns it off meanwhile
    with server.rest(user) as rest:
        rest.put("/api/config/skills/web_search", json={"enabled": False}).raise_for_status()
    page.click("#nav a[data-view=files]")
    _skills(page)
    expect(switch).to_have_attribute("aria-checked", "false")


def test_a_failed_toggle_rolls_back_visibly(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(503, text="net::ERR_FAILED")
    page = signed_in()
    _skills(page)
    switch = page.locator("#skill-code_interpreter-switch")
    expect(switch).to_have_attribute("aria-checked", "true")

    def unavailable(route: Route) -> None:
        route.fulfill(
            status=503,
            content_type="application/json",
            body='{"detail": "the database is unavailable; try again shortly"}',
        )

    page.route("**/api/config/skills/code_interpreter", unavailable)
    switch.click()
    error = page.locator("#skill-code_interpreter-error")
    expect(error).to_have_text(
        "Could not turn code_interpreter off. The database is unavailable; try again shortly. "
        "It is on again."
    )
    expect(switch).to_have_attribute("aria-checked", "true")
    expect(page.locator("#skill-code_interpreter")).to_have_class("skill rolled-back")

    page.unroute("**/api/config/skills/code_interpreter")
    page.route("**/api/config/skills/code_interpreter", lambda route: route.abort())
    switch.click()
    expect(error).to_have_text(
        "Could not turn code_interpreter off. Could not reach the server. Check your connection "
        "and try again. It is on again."
    )
    expect(switch).to_have_attribute("aria-checked", "true")
    with server.rest(user) as rest:
        stored = {s["name"]: s["enabled"] for s in rest.get("/api/config/skills").json()["skills"]}
    assert stored["code_interpreter"] is True


def _search(page: Page, query: str) -> None:
    page.click("#nav a[data-view=search]")
    page.fill("#query", query)
    page.press("#query", "Enter")
    # a hybrid search embeds the query first: allow for a busy machine
    expect(page.locator("#hits")).to_have_attribute("aria-busy", "false", timeout=90_000)


def _hybrid_search(rest: httpx.Client, query: str) -> dict[str, Any]:
    """The search's answer once it is hybrid: on a loaded machine the query's embedding may
    time out (the search then answers BM25-only with a warning, as designed, and the query
    circuit may stay open for its cool-down), which heals by itself within seconds."""
    deadline = time.monotonic() + 60
    while True:
        answer: dict[str, Any] = rest.post("/api/memory/search", json={"query": query}).json()
        if answer["mode"] == "hybrid" or time.monotonic() > deadline:
            assert answer["mode"] == "hybrid", answer  # the warnings say why not
            return answer
        time.sleep(0.5)


def add_to_user_md(rest: httpx.Client, line: str) -> None:
    current = rest.get("/api/config/agent-files/user")  # provisions the user first
    current.raise_for_status()
    rest.put(
        "/api/config/agent-files/user",
        json={"content": current.json()["content"] + "\n" + line + "\n"},
    ).raise_for_status()


def test_search_shows_hits_with_their_explanation(
    signed_in: SignedIn, hybrid_server: Serve, user: str
) -> None:
    when = datetime.now(UTC) - timedelta(days=10)
    with hybrid_server.rest(user) as rest:
        add_to_user_md(rest, "- Wants a puppy named Biscuit to meet the cat.")  # resident
        indexed = rest.post(
            "/api/memory/conversations/trip/turns",
            json={
                "turn_index": 3,
                "user_message": "We adopted a puppy and named her Biscuit.",
                "assistant_reply": "Biscuit is a lovely name for a puppy!",
                "timestamp": when.isoformat(),
            },
        )
        assert indexed.status_code == 200, indexed.text
        expected = _hybrid_search(rest, "puppy Biscuit")
    page = signed_in(on=hybrid_server)
    _search(page, "puppy Biscuit")
    count = len(expected["hits"])
    expect(page.locator("#search-summary")).to_contain_text(
        f"{count} {'hit' if count == 1 else 'hits'} · hybrid: BM25 + vectors"
    )
    hits = page.locator(".hit")
    expect(hits).to_have_count(len(expected["hits"]))
    for index, want in enumerate(expected["hits"]):
        hit = hits.nth(index)
        expect(hit.locator(".hit-text")).to_have_text(want["text"])
        expect(hit.locator(".score")).to_have_text(f"score {want['score']:.4f}")
        explain = want["explain"]
        facts = hit.locator(".explain dd")
        rank = lambda value: "—" if value is None else f"#{value}"  # noqa: E731
        expect(facts.nth(0)).to_have_text(rank(explain["bm25_rank"]))
        expect(facts.nth(1)).to_have_text(rank(explain["vector_rank"]))
        expect(facts.nth(2)).to_have_text(f"{explain['rrf_score']:.5f}")
    turn = hits.filter(has_text="Biscuit is a lovely name")
    expect(turn.locator(".origin")).to_have_text("session trip · turn 3")
    expect(turn.locator("time")).to_contain_text("10 days ago")
    expect(turn.locator(".explain dd").nth(3)).to_have_text(f"×{0.5 ** (10 / 30):.3f} (age 10.0 d)")
    expect(hits.filter(has_text="USER.md").first.locator(".explain dd").nth(3)).to_have_text(
        "none (resident file)"
    )


def test_the_source_filter_restricts_the_search(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    with server.rest(user) as rest:
        # The untouched templates are not indexed: the memory side needs the user's own text.
        add_to_user_md(rest, "- My user profile says I live in Lyon.")
        rest.post(
            "/api/memory/conversations/s1/turns",
            json={"turn_index": 0, "user_message": "my user profile", "assistant_reply": "ok"},
        ).raise_for_status()
    page = signed_in()
    page.click("#nav a[data-view=search]")
    page.locator("#sources label", has_text="conversations").locator("input").uncheck()
    with page.expect_request("**/api/memory/search") as request:
        _search(page, "user profile")
    assert request.value.post_data_json["sources"] == ["memory", "notes"]
    expect(page.locator(".hit").first).to_be_visible()
    for badge in page.locator(".hit .badge").all_inner_texts():
        assert badge == "memory"
    page.locator("#sources input").evaluate_all("boxes => boxes.forEach(b => b.checked = false)")
    page.click("#search-form button[type=submit]")
    expect(page.locator("#search-message")).to_have_text("Choose at least one source.")
    # the results of the previous search are not left under a search that did not run
    expect(page.locator(".hit")).to_have_count(0)
    expect(page.locator("#search-summary")).to_have_text("")


def test_every_view_fits_a_phone_screen(signed_in: SignedIn) -> None:
    page = signed_in(width=390, height=800)
    for view in ("files", "skills", "search"):
        page.click(f"#nav a[data-view={view}]")
        expect(page.locator(f"#{view}-view")).to_be_visible()
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{view} is {overflow}px wider than a 390px screen"


def test_a_skills_list_that_failed_to_load_says_so_and_loads_when_opened_again(
    signed_in: SignedIn, console: Console
) -> None:
    console.allow(503)
    page = signed_in()
    reads: list[str] = []

    def unavailable(route: Route) -> None:
        reads.append(route.request.url)
        route.fulfill(status=503, content_type="application/json", body='{"detail": "starting"}')

    page.route("**/api/config/skills", unavailable)
    page.reload()  # signed in from the tab's storage, the list fails to load
    expect(page.locator("#skills-retry:not([hidden])")).to_be_attached()
    # the message already has this text, so wait for the read's answer: the
    # text alone can match before the read is even sent
    with page.expect_response("**/api/config/skills"):
        _skills(page)  # opening the view tries again
    failed = "Could not load the skills. Starting. Press Retry to try again."
    expect(page.locator("#skills-message")).to_have_text(failed)
    expect(page.locator("#skills-retry")).to_be_visible()
    assert len(reads) == 2
    with page.expect_response("**/api/config/skills"):
        page.click("#skills-retry")
    expect(page.locator("#skills-message")).to_have_text(failed)
    assert len(reads) == 3
    page.unroute("**/api/config/skills")
    page.click("#nav a[data-view=files]")
    _skills(page)  # opening the view again tries again
    expect(page.locator(".skill").first).to_be_visible()
    expect(page.locator("#skills-message")).to_be_hidden()
    expect(page.locator("#skills-retry")).to_be_hidden()


def test_a_slow_earlier_search_does_not_replace_the_newer_results(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    with server.rest(user) as rest:
        add_to_user_md(rest, "- alpha apples")
        rest.post(
            "/api/memory/conversations/s1/turns",
            json={"turn_index": 0, "user_message": "bravo bananas", "assistant_reply": "ok"},
        ).raise_for_status()
    page = signed_in()
    held: list[Route] = []

    def hold_alpha(route: Route) -> None:
        if route.request.post_data_json["query"] == "alpha":
            held.append(route)  # answered later, after the newer search
        else:
            route.continue_()

    page.route("**/api/memory/search", hold_alpha)
    page.click("#nav a[data-view=search]")
    page.fill("#query", "alpha")
    page.press("#query", "Enter")
    _search(page, "bravo")
    expect(page.locator(".hit .origin")).to_have_text(["session s1 · turn 0"])
    assert len(held) == 1
    with page.expect_response("**/api/memory/search"):
        held[0].continue_()
    page.evaluate("() => new Promise((done) => setTimeout(done, 200))")
    expect(page.locator("#query")).to_have_value("bravo")
    expect(page.locator(".hit .origin")).to_have_text(["session s1 · turn 0"])
    expect(page.locator("#search-summary")).to_contain_text("1 hit ·")


def test_search_warnings_are_sentences(signed_in: SignedIn) -> None:
    page = signed_in()
    _search(page, "the and")
    expect(page.locator("#search-message")).to_have_text(
        "Nothing of this user's is indexed yet (no conversation, notes or own text in USER.md "
        "or MEMORY.md): there is nothing to search. "
        "No embedding API is configured: searched with BM25 only. The query has no searchable "
        "words (only common words, punctuation or symbols), so keyword search matched nothing."
    )


def test_a_query_over_the_limit_is_refused_with_the_limit_not_cut(signed_in: SignedIn) -> None:
    page = signed_in()
    sent: list[str] = []
    page.on(
        "request", lambda request: sent.append(request.url) if "search" in request.url else None
    )
    page.click("#nav a[data-view=search]")
    long_query = "memory " * 714 + "ab"  # 5,000 characters; the server takes 4,000
    page.locator("#query").fill(long_query)
    page.press("#query", "Enter")
    expect(page.locator("#search-message")).to_have_text(
        "Your search is 5,000 characters long; the limit is 4,000. Shorten it and search again."
    )
    expect(page.locator("#query")).to_have_value(long_query)
    assert sent == []
