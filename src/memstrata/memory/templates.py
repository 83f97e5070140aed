"""Memory-file templates (``docs/sandbox_template/``), YAML frontmatter stripped."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memstrata.errors import TemplateMissingError
from memstrata.frontmatter import split_frontmatter
from memstrata.memory.kinds import FileKind


def strip_frontmatter(text: str) -> str:
    """Remove a leading ``---`` … ``---`` block; text without one is returned unchanged."""
    return split_frontmatter(text)[1].lstrip("\r\n")


def default_template_dir() -> Path:
    """The repository's docs/sandbox_template, or the copy packaged into the wheel."""
    here = Path(__file__).resolve()
    repo_docs = here.parents[3] / "docs" / "sandbox_template"
    if repo_docs.is_dir():
        return repo_docs
    return here.parent / "sandbox_template"


@dataclass(frozen=True)
class TemplateSet:
    directory: Path

    def load(self, kind: FileKind) -> str:
        path = self.directory / kind.filename
        try:
            return strip_frontmatter(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise TemplateMissingError(
                f"template {kind.filename} is missing from {self.directory}; "
                "set MEMSTRATA_TEMPLATE_DIR to a directory with SOUL.md, USER.md, MEMORY.md "
                "and AGENTS.md"
            ) from exc

    def check(self, kinds: Iterable[FileKind]) -> None:
        """Load each of ``kinds`` once: ``TemplateMissingError`` names the first missing."""
        for kind in kinds:
            self.load(kind)

    def agents_md(self) -> str:
        return self.load(FileKind.AGENTS)
