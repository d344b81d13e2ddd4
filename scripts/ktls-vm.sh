#!/usr/bin/env bash
# Runs a host-built binary (typically a test binary) inside a small QEMU VM
# whose kernel has kernel TLS, and exits with the binary's exit status:
#
#   scripts/ktls-vm.sh BINARY [ARGS...]
#   e.g. KTLS_VM_FILES="$PWD/target/debug/portcullis" \
#        KTLS_VM_ENV="PORTCULLIS_REQUIRE_KTLS RUST_LOG RUST_BACKTRACE" \
#        scripts/ktls-vm.sh target/debug/deps/it-0123abcd ktls::
#
# Why: the host kernel has no "tls" TCP ULP (tcp_available_ulp lists only
# mptcp), so the kTLS paths can only be exercised under another kernel. The
# VM runs Debian's stock kernel with tls.ko loaded; KVM is unusable here
# (nested: "failed to set MSR"), so QEMU emulates the CPU (TCG).
#
# The VM is an initramfs only: static busybox, the kernel's TLS and crypto
# modules, BINARY and the KTLS_VM_FILES at their host absolute paths, and
# every shared library ldd names for them. Loopback networking only
# (-nic none); /tmp is a tmpfs; the binary runs as root in the directory the
# script was called from, with HOME=/tmp, PATH=/bin, and the host variables
# named in KTLS_VM_ENV. Its output goes to the serial console, which this
# script streams to stdout.
#
# Environment:
#   KTLS_VM_FILES    space-separated absolute paths also copied into the VM
#                    (directories recursively), executables with their libraries
#   KTLS_VM_ENV      space-separated names of host variables passed in
#   KTLS_VM_TIMEOUT  seconds for the whole VM (default 600)
#   KTLS_VM_CPUS     virtual CPUs (default 2, at most the host's CPUs)
#   KTLS_VM_MEM      MiB of guest memory (default 2048)
#
# Exit status: BINARY's; 124 when the kernel has no working kTLS; 125 when
# the VM did not report one (panic, timeout, setup failure).
#
# The kernel (.deb and the extracted parts used) is cached under
# target/ktls-vm/; delete target/ktls-vm/kernel to pick up a newer one.
# Needs root and apt on Debian 12 (installs qemu-system-x86, busybox-static).
set -euo pipefail

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "ktls-vm: $*" >&2; exit 125; }
log() { echo "ktls-vm: $*" >&2; }

[ $# -ge 1 ] || usage
case $1 in -h | --help) usage ;; esac

caller_dir=$PWD
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=$root/target/ktls-vm
timeout_s=${KTLS_VM_TIMEOUT:-600}
mem=${KTLS_VM_MEM:-2048}
host_cpus=$(nproc)
cpus=${KTLS_VM_CPUS:-$((host_cpus < 2 ? host_cpus : 2))}

# Absolute path without resolving symlinks: the binary lands in the VM at the
# path the caller (and anything baked into the binary) names.
abspath() {
    case $1 in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s/%s\n' "$caller_dir" "${1#./}" ;;
    esac
}
bin=$(abspath "$1")
shift
[ -f "$bin" ] && [ -x "$bin" ] || die "not an executable file: $bin"

# --- host tools -------------------------------------------------------------

# apt-get install, refreshing the package lists only if the install fails
# (a fresh machine may have none, or stale ones).
apt_install() {
    [ "$(id -u)" = 0 ] || die "need root to install: $* (or install them yourself)"
    log "installing $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "$@" >&2 ||
        { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "$@" >&2; } ||
        die "apt-get install $* failed"
}

# busybox must be static: it is the VM's whole userland.
static_busybox() { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; }

pkgs=()
command -v qemu-system-x86_64 >/dev/null || pkgs+=(qemu-system-x86)
static_busybox || pkgs+=(busybox-static)
command -v ldd >/dev/null || pkgs+=(libc-bin)
[ ${#pkgs[@]} -eq 0 ] || apt_install "${pkgs[@]}"
static_busybox || die "/bin/busybox is not a static binary"
bb=/bin/busybox

# --- kernel (cached) ---------------------------------------------------------

# target/ktls-vm/kernel holds vmlinuz, the kernel release, and a module tree
# with only what kTLS needs (net/tls, crypto and their libraries), with
# modules.dep/alias for modprobe. Built once, in a temp dir renamed into place
# so an interrupted run leaves nothing half-made.
kdir=$cache/kernel
if [ ! -f "$kdir/ready" ]; then
    mkdir -p "$cache/debs"
    # The package Debian's linux-image-amd64 meta package currently points to.
    # (awk reads to the end: an early exit would SIGPIPE apt-cache and,
    # with pipefail, fail the script.)
    kpkg_of_meta() {
        apt-cache depends linux-image-amd64 2>/dev/null |
            awk '/Depends: linux-image-/ && !k {k = $2} END {print k}' || true
    }
    kpkg=$(kpkg_of_meta)
    if [ -z "$kpkg" ]; then
        apt-get update -q >&2 || true
        kpkg=$(kpkg_of_meta)
    fi
    [ -n "$kpkg" ] || die "cannot find the Debian kernel package (apt-cache depends linux-image-amd64)"
    deb=$(ls "$cache/debs/${kpkg}"_*.deb 2>/dev/null | tail -n1 || true)
    if [ -z "$deb" ]; then
        log "downloading $kpkg"
        # apt-get download writes to the current directory (as root: the _apt
        # sandbox user cannot write there); stale lists 404.
        dl() { apt-get download -q -o APT::Sandbox::User=root "$kpkg" >&2; }
        (cd "$cache/debs" && { dl || { apt-get update -q >&2 && dl; }; }) ||
            die "apt-get download $kpkg failed"
        deb=$(ls "$cache/debs/${kpkg}"_*.deb | tail -n1)
    fi
    rm -rf "$cache"/kernel.tmp.*
    ktmp=$(mktemp -d "$cache/kernel.tmp.XXXXXX")
    log "extracting $(basename "$deb")"
    dpkg-deb -x "$deb" "$ktmp/x"
    krel=$(ls "$ktmp/x/lib/modules" | head -n1)
    [ -n "$krel" ] && [ -f "$ktmp/x/boot/vmlinuz-$krel" ] || die "unexpected layout in $deb"
    cp "$ktmp/x/boot/vmlinuz-$krel" "$ktmp/vmlinuz"
    echo "$krel" >"$ktmp/release"
    # tls.ko plus what TLS_TX/TLS_RX may ask for (gcm, ccm, chacha20poly1305,
    # their AES-NI/CLMUL/SIMD variants and library modules).
    for sub in net/tls crypto arch/x86/crypto lib; do
        src=$ktmp/x/lib/modules/$krel/kernel/$sub
        [ -d "$src" ] || continue
        mkdir -p "$ktmp/mods/lib/modules/$krel/kernel/$sub"
        cp -a "$src/." "$ktmp/mods/lib/modules/$krel/kernel/$sub/"
    done
    [ -f "$ktmp/mods/lib/modules/$krel/kernel/net/tls/tls.ko" ] || die "no tls.ko in $deb"
    # The .deb ships no modules.dep (its postinst runs depmod); busybox's
    # depmod writes modules.dep and modules.alias for the subset.
    "$bb" depmod -b "$ktmp/mods" "$krel"
    rm -rf "$ktmp/x"
    touch "$ktmp/ready"
    chmod 755 "$ktmp"
    rm -rf "$kdir"
    mv "$ktmp" "$kdir"
fi
krel=$(cat "$kdir/release")

# --- initramfs -----------------------------------------------------------------

# One scratch dir per run, named by PID: a run killed before its EXIT trap
# (SIGPIPE, SIGKILL) leaves one that a later run removes.
for d in "$cache"/run.*; do
    [ -d "$d" ] || continue
    kill -0 "${d##*.}" 2>/dev/null || rm -rf "$d"
done
work=$cache/run.$$
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
ir=$work/root

# Copies a host file into the initramfs at the same absolute path, as a real
# file (symlinks followed).
put() {
    mkdir -p "$ir$(dirname "$1")"
    cp -L "$1" "$ir$1"
}
# A file and, for a dynamic executable, every library ldd names (the loader
# included), each also at the path its symlinks resolve to.
put_with_libs() {
    put "$1"
    local lib
    # (ldd fails on static executables: they need nothing.)
    for lib in $({ ldd "$1" 2>/dev/null || true; } | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i}'); do
        [ -e "$ir$lib" ] || put "$lib"
        local real
        real=$(readlink -f "$lib")
        [ "$real" = "$lib" ] || [ -e "$ir$real" ] || put "$real"
    done
}

mkdir -p "$ir"/{bin,dev,proc,sys,tmp,etc,root}
cp "$bb" "$ir/bin/busybox"
cp -a "$kdir/mods/lib" "$ir/"
# Name resolution for tests that use "localhost" (glibc's files NSS is built in).
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' >"$ir/etc/hosts"
printf 'hosts: files\npasswd: files\ngroup: files\n' >"$ir/etc/nsswitch.conf"
printf 'root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$ir/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ir/etc/group"
# modprobe (busybox) resolves the kernel's request_module("crypto-gcm(aes)")
# through aliases; it reads them from modprobe.d.
mkdir -p "$ir/etc/modprobe.d"
[ ! -f "$ir/lib/modules/$krel/modules.alias" ] ||
    cp "$ir/lib/modules/$krel/modules.alias" "$ir/etc/modprobe.d/modules-alias.conf"

put_with_libs "$bin"
for f in ${KTLS_VM_FILES:-}; do
    case $f in /*) ;; *) die "KTLS_VM_FILES entries must be absolute: $f" ;; esac
    if [ -d "$f" ]; then
        mkdir -p "$ir$f"
        cp -aL "$f/." "$ir$f/"
    elif [ -e "$f" ]; then
        put_with_libs "$f"
    else
        die "KTLS_VM_FILES: no such file: $f"
    fi
done

# Single-quotes a value for the VM's shell.
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

envs=("HOME=/tmp" "PATH=/bin")
for name in ${KTLS_VM_ENV:-}; do
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "KTLS_VM_ENV: bad name: $name"
    [ -z "${!name+set}" ] || envs+=("$name=${!name}")
done
cmd=$(q "$bin")
for a in "$@"; do cmd+=" $(q "$a")"; done
envline=
for e in "${envs[@]}"; do envline+=" $(q "$e")"; done

# PID 1. Every path out of it prints the marker and powers off: PID 1
# exiting would panic the kernel instead of telling the host anything.
{
    cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
# Re-applying the console's own settings (stty sets them with TCSADRAIN)
# waits until the UART has sent everything: poweroff does not.
finish() {
    printf '\nKTLS_VM_EXIT=%s\n' "$1"
    s=$(stty -g </dev/console) && stty "$s" </dev/console
    poweroff -f
    sleep 60
}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
ip link set lo up
hostname ktls-vm
# The kernel's crypto API loads gcm/chacha20poly1305 on demand through this.
echo /bin/modprobe >/proc/sys/kernel/modprobe
# The CPU's AES and GHASH, as a distribution loads them at boot (by CPU
# feature): on demand the crypto API would take the generic C AES first.
modprobe aesni_intel 2>/dev/null || true
modprobe ghash_clmulni_intel 2>/dev/null || true
EOF
    echo "krel=$(q "$krel")"
    echo "cwd=$(q "$caller_dir")"
    # Mirror the host's open-file limits (the kernel default soft limit is 1024).
    echo "ulimit -Hn $(ulimit -Hn) 2>/dev/null; ulimit -Sn $(ulimit -Sn) 2>/dev/null"
    cat <<'EOF'
if ! insmod /lib/modules/$krel/kernel/net/tls/tls.ko; then
    echo "ktls-vm: insmod tls.ko failed"
    finish 124
fi
if ! grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp; then
    echo "ktls-vm: tls not in tcp_available_ulp: $(cat /proc/sys/net/ipv4/tcp_available_ulp)"
    finish 124
fi
mkdir -p "$cwd" && cd "$cwd" || finish 125
EOF
    echo "env -i$envline $cmd </dev/null"
    echo 'finish $?'
} >"$ir/init"
chmod 755 "$ir/init"

# Uncompressed: gunzip in an emulated CPU costs more than loading the bytes.
(cd "$ir" && find . | "$bb" cpio -o -H newc 2>/dev/null) >"$work/initrd.cpio"
rm -rf "$ir"

# --- run -----------------------------------------------------------------------

log "booting $krel (TCG, $cpus CPUs, $mem MiB, initrd $(($(stat -c %s "$work/initrd.cpio") >> 20)) MiB)"
# -cpu max: TCG emulates AES-NI, PCLMUL and RDRAND, so the guest's crypto and
# its random pool initialise fast. -nographic puts the serial console on
# stdout; stdin is /dev/null so qemu leaves the terminal alone.
qemu=(qemu-system-x86_64 -accel tcg -cpu max -smp "$cpus" -m "$mem"
    -nographic -no-reboot -nic none
    -kernel "$kdir/vmlinuz" -initrd "$work/initrd.cpio"
    -append "console=ttyS0 panic=-1 quiet loglevel=3 random.trust_cpu=on")
set +e
timeout -k 10 "$timeout_s" "${qemu[@]}" </dev/null |
    # CRs of the serial line, SeaBIOS's screen clearing and banner. The
    # kernel's UART reset may eat the end of "Booting from ROM...\r\n", so
    # the guest's first line can follow it on the same line.
    sed -u -e 's/\r//g' -e 's/\x1bc//g' -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' \
        -e '/^SeaBIOS (version [^)]*)$/d' -e '/^Booting from ROM\.*$/d' \
        -e 's/^Booting from ROM\.*//' \
        -e '/^\[ *[0-9.]*\] reboot: Power down$/d' |
    tee "$work/console.log"
status=("${PIPESTATUS[@]}")
set -e

code=$({ grep -o 'KTLS_VM_EXIT=[0-9]*' "$work/console.log" || true; } | tail -n1 | cut -d= -f2)
if [ -z "$code" ]; then
    if [ "${status[0]}" = 124 ] || [ "${status[0]}" = 137 ]; then
        die "VM timed out after ${timeout_s}s (KTLS_VM_TIMEOUT) without reporting an exit status"
    fi
    die "VM ended (qemu status ${status[0]}) without reporting an exit status (kernel panic?)"
fi
exit "$code"
