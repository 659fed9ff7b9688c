# The trace backends the OTel export tests deliver to for real: Arize Phoenix and MLflow from PyPI,
# at pinned versions, each in a virtual environment of its own (their dependencies would clash with
# the project's and with each other's), installed once into the test cache and reused while its
# version holds. Sourced by scripts/test (and usable alone: `bash scripts/backends.sh` installs and
# prints the server commands). The tests find the servers through GZ_IA_TEST_BACKENDS (the cache
# folder); tests/fixtures/backends.py reads it.
BACKEND_PACKAGES=(
  "phoenix@arize-phoenix==20.26.1"
  "mlflow@mlflow==3.17.2"
)
export GZ_IA_TEST_BACKENDS="${GZ_IA_TEST_BACKENDS:-${XDG_CACHE_HOME:-$HOME/.cache}/gz-ia-test/backends}"

install_backends() {
  local entry name spec dir
  command -v uv >/dev/null 2>&1 || { echo "backends: uv is needed to install the trace backends" >&2; return 1; }
  for entry in "${BACKEND_PACKAGES[@]}"; do
    name="${entry%%@*}"
    spec="${entry#*@}"
    dir="$GZ_IA_TEST_BACKENDS/$name"
    # The stamp names the exact requirement: a changed pin reinstalls, an unchanged one costs nothing.
    if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$spec" ]; then
      echo "backends: installing $spec" >&2
      rm -rf "$dir"
      UV_PYTHON_DOWNLOADS=never uv venv --quiet "$dir" >&2
      VIRTUAL_ENV="$dir" uv pip install --quiet --python "$dir/bin/python" "$spec" >&2
      echo "$spec" >"$dir/.installed"
    fi
  done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  install_backends
  for entry in "${BACKEND_PACKAGES[@]}"; do
    name="${entry%%@*}"
    echo "$name: $GZ_IA_TEST_BACKENDS/$name/bin/$name"
  done
fi
