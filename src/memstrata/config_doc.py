"""Render docs/CONFIGURATION.md from ``Settings`` so the reference never drifts."""

from __future__ import annotations

from memstrata.config import Settings


def render() -> str:
    lines = [
        "# Configuration",
        "",
        "Every setting is an environment variable `MEMSTRATA_<NAME>` (or a line in `.env`).",
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
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
