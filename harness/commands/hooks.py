"""`hooks`: install the git pre-push hook that runs the pre-push verification (`make verify`).

The hook runs from the repository's top folder, so the Makefile's defaults (dist/ zip, out/ data)
apply; ``git push --no-verify`` skips it. An existing hook that this command did not write is
kept aside as ``pre-push.local`` and run first, so installing never loses someone's hook.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

from harness.common.errors import InputError
from harness.common.files import atomic_write_bytes

MARKER = "# installed by spider-scoring: python3 -m harness hooks"

HOOK = f"""#!/bin/sh
{MARKER}
# Pre-push verification: the bundle zip is checked by the emulated trainer in a locked-down
# container before anything leaves this machine. Skip once with: git push --no-verify
set -e
top=$(git rev-parse --show-toplevel)
cd "$top"
local_hook="$(git rev-parse --git-path hooks)/pre-push.local"
if [ -x "$local_hook" ]; then
  "$local_hook" "$@"
fi
echo "pre-push: make verify (skip with git push --no-verify)" >&2
if ! make -s verify; then
  echo "pre-push: verification failed; the push was stopped. Fix the report above, or push with --no-verify." >&2
  exit 1
fi
"""


def hooks_dir(repo: Path) -> Path:
    """The repository's hooks folder (honours core.hooksPath and worktrees via git itself)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--git-path", "hooks"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise InputError(f"{repo} is not a git checkout ({exc}); run `make hooks` inside the repository") from None
    return (repo / out).resolve()


def install(repo: Path) -> Path:
    """Write the pre-push hook (mode 0755); an unrelated existing hook is moved to pre-push.local."""
    target = hooks_dir(repo) / "pre-push"
    if target.exists() and MARKER not in target.read_text(encoding="utf-8", errors="replace"):
        keep = target.with_name("pre-push.local")
        if keep.exists():
            raise InputError(f"{target} and {keep} both exist and neither is ours: merge them by hand, "
                             "then run `make hooks` again")
        os.replace(target, keep)
    atomic_write_bytes(target, HOOK.encode("utf-8"))
    os.chmod(target, 0o755)
    return target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", type=Path, default=Path("."), help="the repository (default: here)")


def run(args: argparse.Namespace) -> int:
    target = install(args.repo)
    print(f"installed {target}: `git push` now runs `make verify` first (skip with --no-verify)")
    return 0
