"""mkdocs hook: links from a docs page to files of the repository outside docs/ (results, scripts, code).

In the Markdown sources such links are relative paths (``../results/h200/tfla-fig4/report.md``), so they
work when the pages are read in the repository. mkdocs knows only the files under docs/; this hook
checks that every such target exists (a missing one is a warning, which fails ``mkdocs build --strict``),
copies the targets into the site under ``repository/`` and points the links there.
"""

from __future__ import annotations

import logging
import posixpath
import re
import shutil
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.repository_links")

SCHEME = "repository:"
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
CODE_BLOCK = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)

_targets: set[str] = set()


def _repository_root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def _rewrite(match: re.Match, page_dir: Path, docs_dir: Path, root: Path, source: str) -> str:
    target = match.group(2)
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith(("#", "/")):
        return match.group(0)
    path, _, anchor = target.partition("#")
    resolved = (page_dir / path).resolve()
    if resolved == docs_dir or docs_dir in resolved.parents:
        return match.group(0)  # a documentation page or asset: mkdocs checks it
    if root not in resolved.parents or not resolved.exists():
        log.warning("%s links to %s, which is not a file of the repository", source, target)
        return match.group(0)
    relative = resolved.relative_to(root).as_posix()
    if resolved.is_file():
        _targets.add(relative)
    return f"{match.group(1)}{SCHEME}{relative}{'#' + anchor if anchor else ''}{match.group(3)}"


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs_dir = Path(config.docs_dir).resolve()
    root = _repository_root(config)
    page_dir = Path(page.file.abs_src_path).resolve().parent
    pieces = []
    position = 0
    for block in CODE_BLOCK.finditer(markdown):  # links inside fenced code are left alone
        pieces.append(LINK.sub(lambda m: _rewrite(m, page_dir, docs_dir, root, page.file.src_uri),
                               markdown[position:block.start()]))
        pieces.append(block.group(0))
        position = block.end()
    pieces.append(LINK.sub(lambda m: _rewrite(m, page_dir, docs_dir, root, page.file.src_uri),
                           markdown[position:]))
    return "".join(pieces)


def on_page_content(html: str, page, config, files) -> str:
    prefix = posixpath.relpath("repository", posixpath.dirname(page.file.dest_uri) or ".")
    return html.replace(f'="{SCHEME}', f'="{prefix}/')


def on_post_build(config) -> None:
    root = _repository_root(config)
    for relative in sorted(_targets):
        destination = Path(config.site_dir) / "repository" / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / relative, destination)
