"""The measured traffic of the load test (run by ``benchmarks/load/run.py``; not alone).

Every simulated client is one Locust user that sends requests back to back (a closed
loop, so throughput is what the service sustains). Each client owns a disjoint slice of
the seeded memstrata users and only touches those, so no two clients ever write the same
file: a 409 can only be a bug, and every non-2xx response counts as an error. Requests
are spread over the replicas at random, as a load balancer would.

A search that degraded to BM25 or a turn stored without its vector (the embedder timed
out) also counts as an error: the service answered 200, but not with the full path.

Mix (weights): search 5, turn ingestion 2, memory-file read 2, If-Match write 1 (a read
then a PUT guarded by the version it returned).

Configuration comes from the driver through environment variables: ``LOAD_HOSTS``
(comma-separated base URLs), ``LOAD_SECRET`` (HS256), ``LOAD_USERS`` (seeded user count),
``LOAD_USER_PREFIX``, ``LOAD_DATA`` (JSON file with ``turns`` and ``queries``).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from typing import Any, ClassVar

import jwt
from locust import HttpUser, constant, task

HOSTS = os.environ["LOAD_HOSTS"].split(",")
SECRET = os.environ["LOAD_SECRET"]
USERS = int(os.environ["LOAD_USERS"])
PREFIX = os.environ["LOAD_USER_PREFIX"]
with open(os.environ["LOAD_DATA"], encoding="utf-8") as f:
    DATA: dict[str, Any] = json.load(f)
FILES = ("user", "memory")
_client_numbers = itertools.count()


class MemstrataClient(HttpUser):
    host = HOSTS[0]
    wait_time = constant(0)
    clients: ClassVar[int] = int(os.environ.get("LOAD_CLIENTS", "1"))

    def on_start(self) -> None:
        number = next(_client_numbers)
        self.users = [f"{PREFIX}{i:05d}" for i in range(number, USERS, self.clients)]
        self.tokens: dict[str, str] = {}
        self.session = f"load-{number}-{int(time.time())}"
        self.turn = 0
        self.rng = random.Random(number)

    def _auth(self, user: str) -> dict[str, str]:
        token = self.tokens.get(user)
        if token is None:
            claims = {"sub": user, "exp": int(time.time()) + 3600}
            token = self.tokens[user] = jwt.encode(claims, SECRET, "HS256")
        return {"Authorization": f"Bearer {token}"}

    def _url(self, path: str) -> str:
        return self.rng.choice(HOSTS) + path

    @task(5)
    def search(self) -> None:
        user = self.rng.choice(self.users)
        body = {"query": self.rng.choice(DATA["queries"]), "top_k": 10}
        with self.client.post(
            self._url("/api/memory/search"),
            json=body,
            headers=self._auth(user),
            name="search",
            catch_response=True,
        ) as response:
            # A search that fell back to BM25 (the query's embedding failed) is a failure
            # here: the load test measures the full hybrid path.
            if response.ok and response.json()["mode"] != "hybrid":
                response.failure(f"degraded search: {response.json()['warnings']}")

    @task(2)
    def ingest_turn(self) -> None:
        user = self.rng.choice(self.users)
        message, reply = self.rng.choice(DATA["turns"])
        self.turn += 1
        body = {"turn_index": self.turn, "user_message": message, "assistant_reply": reply}
        with self.client.post(
            self._url(f"/api/memory/conversations/{self.session}/turns"),
            json=body,
            headers=self._auth(user),
            name="ingest turn",
            catch_response=True,
        ) as response:
            if response.ok and response.json()["embedding_failed"]:
                response.failure(f"stored without a vector: {response.json()['warnings']}")

    @task(2)
    def read_file(self) -> None:
        user = self.rng.choice(self.users)
        name = self.rng.choice(FILES)
        self.client.get(
            self._url(f"/api/config/agent-files/{name}"),
            headers=self._auth(user),
            name="read file",
        )

    @task(1)
    def guarded_write(self) -> None:
        user = self.rng.choice(self.users)
        name = self.rng.choice(FILES)
        headers = self._auth(user)
        read = self.client.get(
            self._url(f"/api/config/agent-files/{name}"), headers=headers, name="read file"
        )
        if not read.ok:
            return
        current = read.json()
        line = self.rng.choice(DATA["turns"])[0][:200]
        # Keep files bounded: replace the tail once it grows past a few KiB.
        content = (current["content"][-4000:] + "\n- " + line).strip()
        self.client.put(
            self._url(f"/api/config/agent-files/{name}"),
            json={"content": content},
            headers={**headers, "If-Match": f'"{current["version"]}"'},
            name="write file (If-Match)",
        )
