"""Memory-file content that is not prose, for ``token_estimate.py``: code, Markdown tables,
JSON and URLs, as an agent records them ("the deploy script is …", "prices: | … |").

Written for the benchmark (a few generated from a pattern, so a long file is measured as
well as short snippets), so no data set has to be fetched. Whitespace is what the estimate
charges here (indentation, padded cells, a space before a number), so the texts keep the
spacing real files have: four-space Python, two-space JavaScript and YAML, aligned tables.
"""

from __future__ import annotations

_PYTHON = '''def load_settings(path: Path) -> Settings:
    """Read the YAML file, falling back to the defaults."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        return Settings()
    for key in ("timeout", "retries"):
        if key in raw and raw[key] < 0:
            raise ValueError(f"{key} must be >= 0, got {raw[key]}")
    return Settings(**raw)'''

_JAVASCRIPT = """export async function fetchInvoices(customerId, { limit = 50 } = {}) {
  const response = await fetch(`/api/customers/${customerId}/invoices?limit=${limit}`);
  if (!response.ok) {
    throw new Error(`HTTP ${response.status}`);
  }
  const body = await response.json();
  return body.items.filter((invoice) => invoice.total > 0);
}"""

_SHELL = """# deploy the billing service (run from the repo root)
export RELEASE=2026.12.1
docker build -t registry.internal/billing:$RELEASE .
docker push registry.internal/billing:$RELEASE
kubectl -n billing set image deploy/billing api=registry.internal/billing:$RELEASE
kubectl -n billing rollout status deploy/billing --timeout=300s"""

_SQL = """SELECT c.id, c.name, SUM(i.total) AS revenue
FROM customers c
JOIN invoices i ON i.customer_id = c.id
WHERE i.issued_at >= '2026-01-01'
  AND i.status IN ('paid', 'overdue')
GROUP BY c.id, c.name
HAVING SUM(i.total) > 10000
ORDER BY revenue DESC
LIMIT 20;"""

_YAML = """services:
  api:
    image: registry.internal/billing:2026.12.1
    ports:
      - "8080:8080"
    environment:
      DATABASE_URL: postgres://billing@db:5432/billing
      WORKERS: 4
    depends_on:
      - db
  db:
    image: postgres:16
    volumes:
      - pgdata:/var/lib/postgresql/data"""

CODE = [
    _PYTHON,
    _JAVASCRIPT,
    _SHELL,
    _SQL,
    _YAML,
    "```python\n" + "\n".join(f"x{i} = {i}  # step {i}" for i in range(200)) + "\n```",
    "\n".join(f"    x{i} = compute({i}, key='k{i}')  # step {i}" for i in range(200)),
    "- 2026-12-03: the user's retry loop: `for attempt in range(5): time.sleep(2 ** attempt)`",
]

TABLES = [
    "| a | b | c |\n|---|---|---|\n" + "\n".join(f"| {i} | v{i} | note {i} |" for i in range(200)),
    """| Plan       | Price / month | Seats | Storage |
|------------|---------------|-------|---------|
| Starter    | $9            | 1     | 10 GB   |
| Team       | $49           | 10    | 100 GB  |
| Business   | $199          | 50    | 1 TB    |
| Enterprise | on request    | any   | custom  |""",
    """| Day | Time | What |
|---|---|---|
| Mon | 09:30 | stand-up with the billing team |
| Tue | 14:00 | dentist (Dr. Okafor) |
| Thu | 18:15 | pick up Mia from swimming |
| Sat | 10:00 | 5 km run in the park |""",
    """| 指标 | 上月 | 本月 | 变化 |
|:---|---:|---:|---:|
| 活跃用户 | 12,480 | 13,905 | +11.4% |
| 付费转化 | 3.1% | 3.4% | +0.3 |
| 客服工单 | 842 | 701 | -16.7% |""",
    "| version | date | notes |\n| --- | --- | --- |\n"
    + "\n".join(f"| 1.{i}.0 | 2026-{1 + i % 12:02d}-15 | fixes {i * 3} bugs |" for i in range(40)),
]

JSON = [
    "\n".join(
        f'{{"id": {i}, "name": "item-{i}", "tags": ["a", "b"], "ok": true}},' for i in range(200)
    ),
    """{
  "user": "ann",
  "preferences": {
    "language": "en",
    "timezone": "Europe/Oslo",
    "notifications": {"email": true, "sms": false}
  },
  "projects": ["billing-migration", "q3-report"],
  "quota": {"used": 5120, "limit": 10240}
}""",
    '{"event":"deploy","service":"billing","version":"2026.12.1","replicas":3,'
    '"regions":["eu-west-1","us-east-1"],"duration_ms":48213,"ok":true}',
    """[
    {"date": "2026-11-28", "amount": 42.5, "category": "groceries"},
    {"date": "2026-11-29", "amount": 18.0, "category": "transport"},
    {"date": "2026-11-30", "amount": 120.99, "category": "utilities"}
]""",
]

URLS = [
    "\n".join(
        f"- https://github.com/org{i}/repo-{i}/pull/{1000 + i}#issuecomment-{i * 7919}"
        for i in range(200)
    ),
    "Docs: https://docs.python.org/3/library/asyncio-task.html#asyncio.TaskGroup",
    "- [design doc](https://docs.google.com/document/d/1aB2cD3eF4gH5iJ6kL7mN8oP9qR0sT/edit)\n"
    "- [dashboard](https://grafana.example.com/d/billing/overview?orgId=1&from=now-24h)\n"
    "- [ticket](https://linear.app/acme/issue/BIL-482/migrate-invoices-table)",
    "The user's blog is at https://ann.example.org/posts/2026/11/why-i-moved-to-oslo/ "
    "and her talk is on https://www.youtube.com/watch?v=dQw4w9WgXcQ&t=42s",
    "curl -s 'https://api.example.com/v2/customers?page=3&per_page=100&sort=-created_at'",
]

CONTENT: dict[str, list[str]] = {
    "code": CODE,
    "Markdown tables": TABLES,
    "JSON": JSON,
    "URLs": URLS,
}
