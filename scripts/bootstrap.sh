# Shared by scripts/collector and scripts/test: make sure uv exists and the workspace is synced.
# Sourced, not run. Installs uv with pip into the user's site when it is missing.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.local/bin:$PATH"
if ! command -v uv >/dev/null 2>&1; then
  echo "bootstrap: installing uv (pip install --user uv)" >&2
  python3 -m pip install --quiet --user uv 2>/dev/null || python3 -m pip install --quiet uv
fi
export UV_PYTHON_DOWNLOADS=never

# One sync for both scripts: the whole workspace with every extra ([mcp], [otel], [fleet]) and the dev tools.
# `uv sync` is exact (it removes what it was not asked for), so a narrower sync here would uninstall
# what the other script installed.
# Bytecode is compiled here: each collector, agent and command starts a fresh interpreter, which
# would otherwise compile every module it imports again where bytecode is not written at import
# (PYTHONDONTWRITEBYTECODE). Kept cheap when nothing changed: site-packages is compiled only when a
# sync added, upgraded or removed a package (its directory changed since the last compile), and
# compileall skips sources whose bytecode is current; `--no-sync` because the sync just ran.
sync_workspace() {
  uv sync --quiet --all-extras --all-packages --frozen 2>/dev/null || uv sync --quiet --all-extras --all-packages
  uv run --no-sync --quiet python - "$REPO/client/src" "$REPO/collector/src" <<'PY'
import compileall, sys, sysconfig
from pathlib import Path

site = Path(sysconfig.get_paths()["purelib"])
stamp = Path(sys.prefix) / ".bytecode-compiled"
if not stamp.exists() or stamp.stat().st_mtime < site.stat().st_mtime:
    compileall.compile_dir(site, quiet=2, workers=0)
    stamp.touch()
for source in sys.argv[1:]:
    compileall.compile_dir(source, quiet=2)
PY
}
