#!/bin/sh
# Berth agent installer.
#
#   printf '%s\n' srt_live_… | sudo sh install.sh    (the token on standard input;
#                                                     BERTH_TOKEN=… also works)
#
# Installs berth-agent into its own virtualenv (/opt/berth-agent) from the
# packages the control plane serves, registers it with the single-use token
# (passed on stdin, never on a command line), and runs it under systemd when
# systemd is there. Safe to run again: it reinstalls the agent from the
# served packages and keeps the credential.
#   sh install.sh --uninstall    removes everything it added (environment data
#                                under /srv/berth is kept).
#   sh install.sh --wheelhouse FILE --no-register
#                                what the control plane runs over SSH for a server
#                                it reaches that way: the packages from FILE, no
#                                registration, no service (it calls berth-agent).
#
# The whole body is inside main(), called on the last line: a truncated
# download defines functions at most and runs nothing.

main() {
    set -eu
    CONTROL_PLANE="${BERTH_CONTROL_PLANE:-__BERTH_CONTROL_PLANE__}"
    PREFIX="${BERTH_PREFIX:-/opt/berth-agent}"
    BIN_LINK="${BERTH_BIN_LINK:-/usr/local/bin/berth-agent}"
    CONFIG_DIR="${BERTH_CONFIG_DIR:-/etc/berth-agent}"
    DATA_DIR="${BERTH_DATA_DIR:-/var/lib/berth-agent}"
    ENV_ROOT="${BERTH_ENV_ROOT:-/srv/berth}"  # the agent's BERTH_AGENT_ENV_ROOT
    UNIT=/etc/systemd/system/berth-agent.service

    WHEELHOUSE="" REGISTER=yes
    while [ $# -gt 0 ]; do
        case "$1" in
            --uninstall) need_root; uninstall; exit 0 ;;
            --wheelhouse)  # a wheelhouse tar already here (the control plane sent it)
                [ -n "${2:-}" ] || die "--wheelhouse needs a file"
                WHEELHOUSE=$2; shift 2 ;;
            --no-register) REGISTER=no; shift ;;  # reached over SSH: no daemon
            *) die "unknown option: $1 (use --uninstall, --wheelhouse FILE, --no-register)" ;;
        esac
    done

    # The token comes on standard input (install_command pipes it from the shell's
    # builtin printf, so it is in no command line) or, for scripts, in BERTH_TOKEN.
    # Read first, before any other program could read from standard input.
    if [ "$REGISTER" = yes ] && [ -z "${BERTH_TOKEN:-}" ] && [ ! -t 0 ]; then
        IFS= read -r BERTH_TOKEN || true
    fi

    need_root
    detect_system
    need_python
    need_git
    need_zstd
    install_agent
    make_dirs
    if [ "$REGISTER" = no ]; then
        say "installed; the control plane runs it over SSH (no service started)"
        return 0
    fi
    register_agent
    start_agent
}

say() { printf 'berth: %s\n' "$*"; }
die() { printf 'berth: error: %s\n' "$*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" -eq 0 ] && return 0
    die "this installer needs root: run it as root or through sudo"
}

detect_system() {
    OS=unknown
    if [ -r /etc/os-release ]; then
        OS=$(. /etc/os-release && printf '%s %s' "${ID:-linux}" "${VERSION_ID:-}")
    fi
    ARCH=$(uname -m)
    case "$ARCH" in  # spelled as in wheel platform tags
        amd64) ARCH=x86_64 ;;
        arm64) ARCH=aarch64 ;;
    esac
    case "$ARCH" in
        x86_64|aarch64) ;;
        *) die "unsupported CPU architecture: $ARCH (x86_64 and aarch64 are supported)" ;;
    esac
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        INIT=systemd
    else
        INIT=none
    fi
    say "system: $OS, $ARCH, init: $INIT"
}

python_ok() {  # Python 3.11 or newer, with venv and ensurepip
    python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

need_python() {
    python_ok && return 0
    if command -v apt-get >/dev/null 2>&1; then
        say "installing python3 and python3-venv"
        apt_install python3 python3-venv || true
    fi
    python_ok || die "Python 3.11 or newer with the venv module is required"
}

need_git() {  # deployments check out the project's add-ons
    command -v git >/dev/null 2>&1 && return 0
    if command -v apt-get >/dev/null 2>&1; then
        say "installing git"
        apt_install git || say "warning: could not install git; deployments with add-ons will fail"
    else
        say "warning: git is missing; deployments with add-ons need it"
    fi
}

need_zstd() {  # backups compress the filestore with zstd (gzip, slower, without it)
    command -v zstd >/dev/null 2>&1 && return 0
    if command -v apt-get >/dev/null 2>&1; then
        say "installing zstd"
        apt_install zstd || say "warning: could not install zstd; backups will use gzip"
    else
        say "warning: zstd is missing; backups will use gzip"
    fi
}

apt_install() {  # apt_install PACKAGE...
    # Fresh images ship without package lists: update once per run, before the first install.
    if [ -z "${APT_UPDATED:-}" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || return 1
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# fetch URL FILE: fails on any HTTP error as curl -f would, but keeps the body, so
# that the control plane's own explanation ({"error", "message"}) can be shown;
# it is left in FETCH_ERROR.
fetch() {
    FETCH_ERROR=""
    if command -v curl >/dev/null 2>&1; then
        # Network errors: curl says why itself (-sS) and fails.
        code=$(curl -sSL -w '%{http_code}' "$1" -o "$2") || return 1
        case "$code" in
            2??) return 0 ;;
        esac
        FETCH_ERROR="HTTP $code: $(refusal_message "$2")"
        return 1
    elif command -v wget >/dev/null 2>&1; then
        if wget --help 2>&1 | grep -q content-on-error; then
            wget -q --content-on-error "$1" -O "$2" && return 0
            FETCH_ERROR=$(refusal_message "$2")
            return 1
        fi
        wget -q "$1" -O "$2"
    else
        die "curl or wget is required"
    fi
}

refusal_message() {  # refusal_message FILE: the "message" of a JSON error body
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["message"])' "$1" \
        2>/dev/null || head -c 300 "$1" 2>/dev/null | tr -d '\000-\037' || true
}

install_agent() {
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    if [ -n "$WHEELHOUSE" ]; then
        cp "$WHEELHOUSE" "$WORK/wheelhouse.tar" || die "cannot read $WHEELHOUSE"
    else
        case "$CONTROL_PLANE" in
            http://*|https://*) ;;
            *) die "no control plane address: set BERTH_CONTROL_PLANE" ;;
        esac
        say "downloading the agent from $CONTROL_PLANE"
        fetch "$CONTROL_PLANE/agent/wheelhouse.tar" "$WORK/wheelhouse.tar" \
            || die "could not download the agent packages from $CONTROL_PLANE${FETCH_ERROR:+: $FETCH_ERROR}"
    fi
    mkdir "$WORK/wheels"
    tar -xf "$WORK/wheelhouse.tar" -C "$WORK/wheels"
    PYTHON=python3
    [ -x "$PREFIX/venv/bin/python" ] && PYTHON="$PREFIX/venv/bin/python"
    check_wheels "$WORK/wheels" "$PYTHON"
    [ -x "$PREFIX/venv/bin/python" ] || python3 -m venv "$PREFIX/venv"
    # --force-reinstall: a re-run replaces the agent even when its version number
    # is unchanged (--upgrade alone keeps an installed copy of the same version).
    "$PREFIX/venv/bin/python" -m pip install --quiet --no-index --find-links "$WORK/wheels" \
        --upgrade --force-reinstall berth || die "installing the agent packages failed"
    # The agent runs through $PREFIX/current: an upgrade sent by the control plane
    # installs beside it (venv-VERSION) and moves this link, or moves it back.
    ln -sfn venv "$PREFIX/current"
    mkdir -p "$(dirname "$BIN_LINK")"
    ln -sf "$PREFIX/current/bin/berth-agent" "$BIN_LINK"
    say "installed $("$BIN_LINK" --version)"
}

# The wheelhouse holds binary wheels (grpcio, psutil, ...) built for the control
# plane's Python version and CPU architecture; pip would refuse them here with an
# obscure message, so say plainly what does not match before installing anything.
check_wheels() {  # check_wheels DIR PYTHON
    PYVER=$("$2" -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
        || die "cannot run $2"
    PYTAG="cp$(printf '%s' "$PYVER" | tr -d .)"
    for wheel in "$1"/*.whl; do
        [ -e "$wheel" ] || die "the agent packages from $CONTROL_PLANE are empty"
        name=${wheel##*/}
        name=${name%.whl}
        platform=${name##*-}
        rest=${name%-*}
        abi=${rest##*-}
        # "none" and "abi3" wheels are not tied to one Python version.
        case "$abi" in cp[0-9]*) [ "$abi" = "$PYTAG" ] || wheel_mismatch "$wheel" ;; esac
        case "$platform" in any|*linux*"$ARCH"*) ;; *) wheel_mismatch "$wheel" ;; esac
    done
}

wheel_mismatch() {
    die "the agent packages from $CONTROL_PLANE were built for another Python version or CPU \
architecture (${1##*/}) than this server's Python $PYVER ($PYTAG) on $ARCH: \
servers need the Python version and architecture of the control plane that ran \`berth wheelhouse\`"
}

make_dirs() {
    # Every path the systemd unit lists without a "-" must exist or the unit cannot
    # start (226/NAMESPACE), and under ProtectSystem=strict the agent cannot make them.
    mkdir -p "$CONFIG_DIR" "$DATA_DIR" "$ENV_ROOT"
    chmod 700 "$CONFIG_DIR" "$DATA_DIR"
}

register_agent() {
    export BERTH_AGENT_CONFIG="$CONFIG_DIR/agent.json" BERTH_AGENT_DATA_DIR="$DATA_DIR" \
        BERTH_AGENT_ENV_ROOT="$ENV_ROOT"
    if [ -s "$CONFIG_DIR/agent.json" ]; then
        say "already registered; keeping the existing credential"
        return 0
    fi
    [ -n "${BERTH_TOKEN:-}" ] || die "no registration token: pass it on standard input (srt_live_…)"
    printf '%s' "$BERTH_TOKEN" | "$BIN_LINK" register --control-plane "$CONTROL_PLANE" \
        --token-file - || die "registration failed (see the message above)"
}

start_agent() {
    if [ "$INIT" != systemd ]; then
        say "no systemd here: start the agent with"
        say "  BERTH_AGENT_CONFIG=$CONFIG_DIR/agent.json BERTH_AGENT_DATA_DIR=$DATA_DIR" \
            "BERTH_AGENT_ENV_ROOT=$ENV_ROOT $BIN_LINK run"
        return 0
    fi
    cat > "$UNIT" <<UNIT
[Unit]
Description=Berth agent
Wants=network-online.target docker.service
After=network-online.target docker.service

[Service]
Environment=BERTH_AGENT_CONFIG=$CONFIG_DIR/agent.json
Environment=BERTH_AGENT_DATA_DIR=$DATA_DIR
Environment=BERTH_AGENT_ENV_ROOT=$ENV_ROOT
ExecStart=$BIN_LINK run
Restart=always
RestartSec=5
# Hardening: the agent needs the Docker socket and its own directories only
# ($PREFIX: an upgrade installs its new version there).
# A missing path without "-" keeps the unit from starting (226/NAMESPACE). The
# installer makes the directories; "-": Docker may come after the agent, and a
# removed environment root should fail deploys, not keep the agent down.
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ReadWritePaths=$DATA_DIR $CONFIG_DIR $PREFIX -$ENV_ROOT -/var/run/docker.sock
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
LockPersonality=yes

[Install]
WantedBy=multi-user.target
UNIT
    systemctl daemon-reload
    systemctl enable berth-agent >/dev/null 2>&1
    systemctl restart berth-agent
    say "berth-agent is running under systemd (berth-agent status)"
}

uninstall() {
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now berth-agent >/dev/null 2>&1 || true
        rm -f "$UNIT"
        systemctl daemon-reload || true
    fi
    rm -rf "$PREFIX" "$CONFIG_DIR" "$DATA_DIR"
    rm -f "$BIN_LINK"
    # Environments' files (filestore, add-ons) are the customer's: only an empty root goes.
    rmdir "$ENV_ROOT" 2>/dev/null || [ ! -d "$ENV_ROOT" ] || say "kept $ENV_ROOT (environment data)"
    say "berth-agent removed"
}

main "$@"
