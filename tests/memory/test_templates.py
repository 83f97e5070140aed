from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.memory.templates import TemplateSet, default_template_dir, strip_frontmatter


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("---\ntitle: x\n---\n# Body\n", "# Body\n"),
        ("---\r\na: 1\r\n---\r\n\r\nBody", "Body"),
        ("\ufeff---\na: 1\n---\nBody", "Body"),
        (
            "# No frontmatter\n---\nnot: stripped\n---\n",
            "# No frontmatter\n---\nnot: stripped\n---\n",
        ),
        ("---\nunterminated: yes\nBody", "---\nunterminated: yes\nBody"),
        ("---\n---\nEmpty block", "Empty block"),
        ("", ""),
    ],
)
def test_strip_frontmatter(raw: str, expected: str) -> None:
    assert strip_frontmatter(raw) == expected


def test_shipped_templates_are_real_and_stripped() -> None:
    templates = TemplateSet(default_template_dir())
    for kind in FileKind:
        body = templates.load(kind)
        assert body.startswith(f"# {kind.filename}"), kind
        assert "---\nfile:" not in body
        assert len(body) > 300


def test_missing_template_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="MEMSTRATA_TEMPLATE_DIR"):
        TemplateSet(tmp_path).load(FileKind.USER)
