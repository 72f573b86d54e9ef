# Shared by the quick start, the test command and CI. Sourced, not run.

# Debian 12 packages sceau builds and tests against.
# systemd brings systemd-analyze and systemd-socket-activate; util-linux brings
# setpriv and prlimit (the non-root caller and fd-exhaustion tests); procps
# brings kill (the metrics flood test pauses and resumes its flooders); python3
# runs the refused-uid client of server_limits.rs and the metrics tests' launcher; binutils brings strip (scripts/size.sh);
# the test kit's EK-certificate TPMs (ek_ca) need gnutls-bin (certtool, which
# swtpm_localca runs to make its CA) and openssl (their tests' own verifier);
# age (age and age-keygen) is the custodians' tool: the tests make their age
# keys with it and open share files with it, as a custodian would;
# openssh-client brings ssh-keygen, for the custodians' SSH keys.
SCEAU_PACKAGES=(libtss2-dev libssl-dev pkg-config gcc binutils swtpm swtpm-tools tpm2-tools systemd util-linux procps python3
    gnutls-bin openssl zsh man-db groff-base dpkg-dev lintian age openssh-client strace python3-cryptography)

# Installs whichever of SCEAU_PACKAGES are missing (needs root on a fresh machine).
# The version of the root package (the daemon's), which every package
# and image carries.
package_version() {
    awk -F'"' '/^\[/ { in_pkg = ($0 == "[package]") } in_pkg && /^version *=/ { print $2; exit }' Cargo.toml
}

install_packages() {
    local missing=()
    for pkg in "${SCEAU_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Rust comes from rustup (Debian 12's rustc is too old for tonic).
require_cargo() {
    if ! command -v cargo >/dev/null; then
        [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null || {
        echo "cargo not found: install Rust 1.88 or newer with rustup" >&2
        exit 1
    }
}

# The interop tests' Go modules need Go 1.26 (on this project's machines it is
# preinstalled; Debian 12's golang package is too old to build them).
require_go() {
    command -v go >/dev/null || {
        echo "go not found: the interop tests need Go 1.26 or newer" >&2
        exit 1
    }
}

# require_interop_tools: what every script against a Go peer needs first:
# the packages, cargo and Go.
require_interop_tools() {
    install_packages
    require_cargo
    require_go
}

# build_sceau: the debug build of the workspace's binaries the scripts run.
build_sceau() {
    echo "== building sceau (cargo build --locked)"
    cargo build --locked --quiet
}

# cleanup_on_exit FUNCTION: FUNCTION runs when the script exits, also on
# Ctrl-C and SIGTERM (which exit 130 and 143, so that it sees a failure).
cleanup_on_exit() {
    trap "$1" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Prints the first port P >= $1 such that P and P+1 are both free on loopback.
free_port_pair() {
    local port=$1
    while (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null ||
        (echo >/dev/tcp/127.0.0.1/$((port + 1))) 2>/dev/null; do
        port=$((port + 2))
    done
    echo "$port"
}

# Starts a throwaway swtpm with its state in DIR through the test kit's
# sceau-rig (crates/testkit; `cargo build` at the top builds it into
# target/debug, the quick start sets sceau_rig to its release build): the same
# starter as the Rust tests, on a free loopback port pair below the kernel's
# ephemeral range (32768+), where probing cannot see ports held by outgoing
# connections; PORT, if given, is tried first. Returns once swtpm answers.
# Sets swtpm_port, and swtpm_pid to the rig's pid, which stops and reaps swtpm
# when it gets SIGTERM or SIGINT. The rig's messages go to DIR.log, swtpm's to
# DIR/swtpm.log. The caller stops it: kill "$swtpm_pid".
start_swtpm() {
    local dir=$1 ready=$1.ready line=""
    mkdir -p "$dir"
    rm -f "$ready"
    mkfifo "$ready"
    "${sceau_rig:-target/debug/sceau-rig}" swtpm --state "$dir" ${2:+--port "$2"} >"$ready" 2>"$dir.log" &
    swtpm_pid=$!
    # The rig prints one line, port=P, once swtpm answers; it gives up (and
    # closes the fifo) after a bounded number of tries.
    read -r line <"$ready" || true
    rm -f "$ready"
    swtpm_port=${line#port=}
    [[ $swtpm_port =~ ^[0-9]+$ ]] && return 0
    wait "$swtpm_pid" 2>/dev/null || true
    cat "$dir.log" >&2
    echo "swtpm did not start" >&2
    return 1
}

# Installs a cargo subcommand at an exact version and puts it on PATH. Usage:
# require_cargo_tool CRATE VERSION BINARY. Each tool has its own root, outside
# the clone and outside ~/.cargo, keyed by crate, version and rustc version
# (${SCEAU_TOOLS_CACHE:-~/.cache/sceau-tools}/CRATE-VERSION-RUSTC), so a clean
# clone gets exactly the pinned version, built once per machine: building
# cargo-deny, cargo-vet and cargo-fuzz took about 9 minutes of every CI run.
require_cargo_tool() {
    local crate=$1 version=$2 binary=$3
    local rustc root
    rustc=$(rustc --version | cut -d' ' -f2)
    root="${SCEAU_TOOLS_CACHE:-$HOME/.cache/sceau-tools}/$crate-$version-rustc-$rustc"
    export PATH="$root/bin:$PATH"
    if [ -x "$root/bin/$binary" ] &&
        grep -q "^\"$crate $version " "$root/.crates.toml" 2>/dev/null; then
        return 0
    fi
    echo "installing $crate $version into $root (cargo install --locked, quick profile)"
    # These are checkers that run for seconds, so their build is what costs:
    # cargo-deny's own release profile asks for fat LTO in one codegen unit,
    # a long single-threaded link on a cold 2-core machine. Built without
    # LTO, at opt-level 1, in 16 units, they do the same checks.
    CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
        CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=0 \
        cargo install --locked --quiet --root "$root" "$crate" --version "=$version"
}

# Stops a background process the rigs started (lib-apiserver.sh, lib-spire.sh):
stop() { # stop PID [SECONDS]: TERM, then KILL after SECONDS (default 20)
    local pid=$1 limit=${2:-20}
    [ -n "$pid" ] || return 0
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq $((limit * 10))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
}

# The PASS/FAIL lines of a checking script and their counts: `pass NAME`,
# `fail NAME WHY`, then "$passed passed, $failed failed" at its end.
count_checks() {
    passed=0
    failed=0
    pass() { echo "PASS $1"; passed=$((passed + 1)); }
    fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
}
