# The real agents the tests drive offline: Claude Code, Codex and Gemini CLI from the npm registry,
# at pinned versions, each installed once into the test cache and reused while its version holds.
# Sourced by scripts/test (and usable alone: `bash scripts/agents.sh` installs and prints the paths).
# The tests find the binaries through GZ_IA_TEST_AGENTS (the cache folder); tests/agents.py reads it.
AGENT_PACKAGES=(
  "claude@anthropic-ai/claude-code@2.1.197"
  "codex@openai/codex@0.171.0"
  "gemini@google/gemini-cli@0.61.0"
)
export GZ_IA_TEST_AGENTS="${GZ_IA_TEST_AGENTS:-${XDG_CACHE_HOME:-$HOME/.cache}/gz-ia-test/agents}"

install_agents() {
  local entry name spec dir
  command -v npm >/dev/null 2>&1 || { echo "agents: npm is needed to install the agents the tests drive" >&2; return 1; }
  for entry in "${AGENT_PACKAGES[@]}"; do
    name="${entry%%@*}"
    spec="@${entry#*@}"
    dir="$GZ_IA_TEST_AGENTS/$name"
    # The stamp names the exact package spec: a changed pin reinstalls, an unchanged one costs nothing.
    if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$spec" ]; then
      echo "agents: installing $spec" >&2
      rm -rf "$dir" && mkdir -p "$dir"
      npm install --silent --no-audit --no-fund --prefix "$dir" "$spec" >&2
      echo "$spec" >"$dir/.installed"
    fi
  done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  install_agents
  for entry in "${AGENT_PACKAGES[@]}"; do
    name="${entry%%@*}"
    echo "$name: $GZ_IA_TEST_AGENTS/$name/node_modules/.bin/$name"
  done
fi
