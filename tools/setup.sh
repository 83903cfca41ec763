# Sourced by tools/domino and tools/test: installs the Debian packages domino builds with (only
# those missing), then configures and builds into build/ (ninja rebuilds only what changed).
# Build output goes to stderr so that a command's stdout stays clean for pipes.

domino_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
domino_build="${DOMINO_BUILD_DIR:-$domino_root/build}"

# patchelf: tools/gpu-bundle sets its binaries' RUNPATH, and two of the tests run it at once (two
# apt-get installs racing for dpkg's lock would fail one of them).
domino_packages=(cmake ninja-build g++ pkg-config libyaml-cpp-dev libcli11-dev libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin nlohmann-json3-dev
  libfmt-dev python3-matplotlib clang clang-format patchelf)

domino_say() { echo "domino: $*" >&2; }

domino_install_packages() {
  local missing=() pkg
  for pkg in "${domino_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { domino_say "missing packages (${missing[*]}); run as root or install them"; return 1; }
    sudo=(sudo)
  fi
  domino_say "installing ${missing[*]}"
  local log="${TMPDIR:-/tmp}/domino-apt.$$.log"
  if ! { "${sudo[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
         "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    domino_say "package installation failed (log above)"
    return 1
  fi
  rm -f "$log"
}

domino_build_all() {
  if [[ ! -f "$domino_build/build.ninja" ]]; then
    domino_say "configuring $domino_build"
    cmake -S "$domino_root" -B "$domino_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      ${DOMINO_CMAKE_ARGS:-} >&2 || { rm -rf "$domino_build"; return 1; }
  fi
  local log="$domino_build/last-build.log"
  if ! cmake --build "$domino_build" >"$log" 2>&1; then
    cat "$log" >&2
    domino_say "build failed (log above, also in $log)"
    return 1
  fi
  if ! grep -q "no work to do" "$log"; then domino_say "built $(grep -c '^\[' "$log") step(s)"; fi
}

domino_setup() {
  domino_install_packages && domino_build_all
}
