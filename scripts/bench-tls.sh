#!/usr/bin/env bash
# HTTPS benchmark (scripts/bench.sh runs it last; it also runs alone): a local
# nginx origin serving large files over TLS, downloaded with curl directly,
# through portcullis as a plain tunnel (passthrough; -rw: on the read/write
# path, no splice, the floor of a relay that copies every byte without TLS),
# through portcullis terminating TLS (tls = "terminate"), through mitmproxy
# and through Squid with ssl-bump. Loopback only: every name is *.bench.test, mapped to
# 127.0.0.1 by a private /etc/hosts (a mount namespace, `unshare -m`) for
# the proxies and curl, and by `hosts_file` for Squid.
#
#   scripts/bench-tls.sh
#   TLS_BYTES=1GiB TLS_REPEAT=3 TLS_STREAMS=16 TLS_STREAM_BYTES=128MiB SETUP=500 scripts/bench-tls.sh
#   TLS_PEERS="portcullis-terminate squid-bump" scripts/bench-tls.sh
#   PROFILE=1 scripts/bench-tls.sh   # also perf-record portcullis terminating one download
#   scripts/bench-tls.sh --write BENCHMARKS.md   # the HTTPS fragment of BENCHMARKS.md
#
# Prints the results as a Markdown fragment (kept in $WORK/bench-tls.md);
# with --write FILE, puts it into FILE in place of the previous one (between
# "<!-- begin scripts/bench-tls.sh -->" and "<!-- end ... -->").
#
# Per path: throughput of one TLS_BYTES download (MB/s, median of
# TLS_REPEAT) with the proxy's CPU seconds per GiB (utime+stime of the proxy
# and its children, Squid's helpers included, from /proc); TLS_STREAMS
# parallel downloads of TLS_STREAM_BYTES each, with the proxy's peak RSS;
# setup rate: SETUP sequential HTTPS requests for a 1 KiB file over new
# tunnels, to SETUP distinct names (a leaf minted for each) and to one name
# (a warm leaf cache), with the proxy's CPU per tunnel. curl offers HTTP/1.1
# only (portcullis speaks nothing else inside TLS) and never resumes a TLS
# session (--no-sessionid): every handshake is a full one.
# Installs nginx-light, squid-openssl (apt-get) and mitmproxy (pip, in a
# venv under MITM_VENV) when missing; a path that cannot be had is reported
# as n/a.
set -euo pipefail
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

WRITE=""
ARGS=("$@")
while [ "$#" -gt 0 ]; do
    case $1 in
        --write) WRITE=${2:?--write needs a file}; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) log "unknown argument $1 (only --write FILE)"; exit 2 ;;
    esac
done
# Run by scripts/bench.sh: its command is the one that made these figures.
CMDLINE=${BENCH_CMDLINE:-$(command_line "$0" "TLS_BYTES TLS_REPEAT TLS_STREAMS TLS_STREAM_BYTES SETUP TLS_PEERS PROFILE PORTCULLIS_ARGS" "${ARGS[@]}")}

TLS_BYTES=${TLS_BYTES:-1GiB}
TLS_REPEAT=${TLS_REPEAT:-3}
TLS_STREAMS=${TLS_STREAMS:-16}
TLS_STREAM_BYTES=${TLS_STREAM_BYTES:-128MiB}
SETUP=${SETUP:-500}
PROFILE=${PROFILE:-0}
MITM_VENV=${MITM_VENV:-/opt/portcullis-bench/mitmproxy}
TLS_PEERS=${TLS_PEERS:-"direct portcullis-passthrough portcullis-passthrough-rw portcullis-terminate mitmproxy squid-bump"}

ulimit -n "$(ulimit -Hn)"
trap 'cleanup_started; restore_hosts' EXIT

# ---- tools --------------------------------------------------------------------

install_tls_peers() {
    local want=()
    have nginx || want+=(nginx-light)
    have squid || want+=(squid-openssl)
    command -v curl >/dev/null || want+=(curl)
    command -v openssl >/dev/null || want+=(openssl)
    if [ "${#want[@]}" -gt 0 ] && [ "${BENCH_NO_INSTALL:-0}" != 1 ] && command -v apt-get >/dev/null; then
        log "installing: ${want[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null || true
        apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null || log "install failed; those paths are n/a"
    fi
    # mitmproxy in its own venv: its pinned dependencies never touch the system's.
    if [ ! -x "$MITM_VENV/bin/mitmdump" ] && [ "${BENCH_NO_INSTALL:-0}" != 1 ] && command -v python3 >/dev/null; then
        log "installing mitmproxy into $MITM_VENV"
        { python3 -m venv "$MITM_VENV" && "$MITM_VENV/bin/pip" install -q mitmproxy; } >"$WORK/pip-mitmproxy.log" 2>&1 ||
            log "mitmproxy install failed (see $WORK/pip-mitmproxy.log)"
    fi
}

# ---- names: *.bench.test -> 127.0.0.1 -----------------------------------------

HOSTS="$WORK/hosts"
HOSTS_MODE=""
make_hosts() {
    {
        cat /etc/hosts
        echo "127.0.0.1 bulk.bench.test warm.bench.test"
        seq 1 "$SETUP" | sed 's/.*/127.0.0.1 n&.bench.test/'
    } >"$HOSTS"
    # shellcheck disable=SC2016 # $0 is expanded by the inner sh
    if unshare -m sh -c 'mount --bind "$0" /etc/hosts' "$HOSTS" 2>/dev/null; then
        HOSTS_MODE=ns
    else
        # No mount namespace: add the names to /etc/hosts, marked, removed at exit.
        log "unshare -m unavailable: adding *.bench.test names to /etc/hosts until the end of the run"
        cp /etc/hosts "$WORK/hosts.orig"
        { echo "# portcullis-bench begin"; grep bench.test "$HOSTS"; echo "# portcullis-bench end"; } >>/etc/hosts
        HOSTS_MODE=etc
    fi
}
restore_hosts() {
    if [ "$HOSTS_MODE" = etc ]; then
        sed -i '/# portcullis-bench begin/,/# portcullis-bench end/d' /etc/hosts
    fi
}
# "${WITH_HOSTS[@]}" CMD ARGS...: runs CMD seeing the bench names. A plain
# command prefix, not a function, so `... &` gives CMD's own PID (unshare
# and sh exec into it).
WITH_HOSTS=()
set_with_hosts() {
    # shellcheck disable=SC2016 # expanded by the inner sh
    [ "$HOSTS_MODE" = ns ] && WITH_HOSTS=(unshare -m sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$HOSTS")
    return 0
}

# ---- certificates -------------------------------------------------------------

# origin-ca (signs the origin's *.bench.test leaf) and proxy-ca (the CA each
# terminating proxy mints its leaves with), ECDSA P-256, made with openssl.
make_certs() {
    local d=$WORK/pki
    mkdir -p "$d"
    for ca in origin-ca proxy-ca; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
            -subj "/CN=portcullis bench $ca" -keyout "$d/$ca.key" -out "$d/$ca.pem" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    done
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=bench.test" \
        -keyout "$d/origin.key" -out "$d/origin.csr" 2>/dev/null
    printf 'subjectAltName=DNS:*.bench.test,DNS:bench.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$d/origin.ext"
    openssl x509 -req -in "$d/origin.csr" -CA "$d/origin-ca.pem" -CAkey "$d/origin-ca.key" -CAcreateserial \
        -days 30 -extfile "$d/origin.ext" -out "$d/origin.pem" 2>/dev/null
    # mitmproxy reads its CA as one PEM, key and certificate.
    mkdir -p "$WORK/mitm"
    cat "$d/proxy-ca.key" "$d/proxy-ca.pem" >"$WORK/mitm/mitmproxy-ca.pem"
    cp "$d/proxy-ca.pem" "$WORK/mitm/mitmproxy-ca-cert.pem"
}

# ---- the origin -----------------------------------------------------------------

start_origin() {
    local port=$1 d=$WORK/nginx
    mkdir -p "$d/www" "$d/tmp"
    truncate -s "$TLS_BYTES" "$d/www/big.bin"
    truncate -s "$TLS_STREAM_BYTES" "$d/www/stream.bin"
    head -c 1024 /dev/zero >"$d/www/small.bin"
    cat >"$d/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
error_log $d/error.log warn;
pid $d/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $d/tmp;
    proxy_temp_path $d/tmp;
    fastcgi_temp_path $d/tmp;
    uwsgi_temp_path $d/tmp;
    scgi_temp_path $d/tmp;
    keepalive_requests 100000;
    server {
        listen 127.0.0.1:$port ssl;
        server_name bench.test *.bench.test;
        ssl_certificate $WORK/pki/origin.pem;
        ssl_certificate_key $WORK/pki/origin.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:bench:1m;
        root $d/www;
    }
}
CONF
    nginx -p "$d" -c "$d/nginx.conf" >"$d/stdout.log" 2>&1 &
    ORIGIN_PID=$!
    STARTED_PIDS+=("$ORIGIN_PID")
    wait_listen "$port" || { log "nginx did not start (see $d/error.log)"; return 1; }
}

# ---- the proxies ----------------------------------------------------------------

# start_tls_peer LABEL PORT ORIGIN_PORT: prints the proxy's PID.
start_tls_peer() {
    local label=$1 port=$2 oport=$3 pid conf
    case $label in
        portcullis-passthrough | portcullis-passthrough-rw | portcullis-terminate)
            conf=$WORK/$label.toml
            {
                # -rw: the read/write path (no splice): what a relay that
                # copies every byte through user space pays without TLS.
                [ "$label" = portcullis-passthrough-rw ] && printf '[limits]\nsplice = false\n\n'
                # The setup row opens hundreds of terminated tunnels a second
                # from one client: past the per-client handshake budget (a
                # flood defence; scripts/handshake-flood.sh measures it).
                [ "$label" = portcullis-terminate ] && printf '[limits]\nhandshakes_per_client_per_sec = 0\n\n'
                printf '[tls]\nca_cert = "%s"\nca_key = "%s"\nupstream_ca = ["%s"]\nstate_dir = "%s"\n\n' \
                    "$WORK/pki/proxy-ca.pem" "$WORK/pki/proxy-ca.key" "$WORK/pki/origin-ca.pem" "$WORK/state"
                printf '[[rules]]\nname = "bench"\naction = "allow"\nhosts = ["*.bench.test"]\n'
                printf 'cidrs = ["127.0.0.0/8"]\nmatch = "both"\nports = [%s]\n' "$oport"
                [ "$label" = portcullis-terminate ] && printf 'tls = "terminate"\n'
            } >"$conf"
            # shellcheck disable=SC2086
            RUST_LOG=$PORTCULLIS_LOG "${WITH_HOSTS[@]}" "$PORTCULLIS" --listen "127.0.0.1:$port" --config "$conf" \
                ${PORTCULLIS_ARGS:-} >"$WORK/$label.log" 2>&1 &
            pid=$!
            ;;
        mitmproxy)
            # stream_large_bodies: bodies over 1 MiB are streamed, not held
            # whole (the default would buffer each 1 GiB download in memory).
            "${WITH_HOSTS[@]}" "$MITM_VENV/bin/mitmdump" --listen-host 127.0.0.1 --listen-port "$port" \
                --set confdir="$WORK/mitm" --set ssl_verify_upstream_trusted_ca="$WORK/pki/origin-ca.pem" \
                --set stream_large_bodies=1m --set flow_detail=0 --set termlog_verbosity=error \
                >"$WORK/mitmproxy.log" 2>&1 &
            pid=$!
            ;;
        squid-bump)
            local d=$WORK/squid
            rm -rf "$d"
            mkdir -p "$d"
            cp "$WORK/pki/proxy-ca.pem" "$WORK/pki/proxy-ca.key" "$WORK/pki/origin-ca.pem" "$HOSTS" "$d/"
            /usr/lib/squid/security_file_certgen -c -s "$d/ssl_db" -M 16MB >/dev/null
            chown -R proxy:proxy "$d" 2>/dev/null || true
            chmod o+x "$WORK"
            cat >"$d/squid.conf" <<CONF
http_port 127.0.0.1:$port ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=16MB tls-cert=$d/proxy-ca.pem tls-key=$d/proxy-ca.key
sslcrtd_program /usr/lib/squid/security_file_certgen -s $d/ssl_db -M 16MB
sslcrtd_children 5 startup=1 idle=1
ssl_bump bump all
tls_outgoing_options cafile=$d/origin-ca.pem
acl bench dstdomain .bench.test
acl bench_port port $oport
acl CONNECT method CONNECT
http_access allow CONNECT bench bench_port
http_access allow bench bench_port
http_access deny all
hosts_file $d/hosts
# Every name is in hosts_file; should Squid ask DNS anyway, it asks loopback.
dns_nameservers 127.0.0.1
cache deny all
cache_mem 8 MB
access_log none
cache_store_log none
cache_log $d/cache.log
pid_filename $d/squid.pid
coredump_dir $d
shutdown_lifetime 1 seconds
CONF
            /usr/sbin/squid -N -f "$d/squid.conf" >"$d/stdout.log" 2>&1 &
            pid=$!
            ;;
        *) log "unknown TLS path $label"; return 1 ;;
    esac
    STARTED_PIDS+=("$pid")
    if ! wait_listen "$port"; then
        log "$label did not start listening on $port (see $WORK)"
        kill "$pid" 2>/dev/null || true
        return 1
    fi
    echo "$pid"
}

tls_have() {
    case $1 in
        direct | portcullis-*) return 0 ;;
        mitmproxy) [ -x "$MITM_VENV/bin/mitmdump" ] || { echo "n/a (mitmproxy not installed)"; return 1; } ;;
        squid-bump) if ! have squid || [ ! -x /usr/lib/squid/security_file_certgen ]; then echo "n/a (squid-openssl not installed)"; return 1; fi ;;
    esac
}

# ---- measuring ----------------------------------------------------------------

# CPU seconds (utime+stime+cutime+cstime) of a process tree.
tree_cpu_s() {
    local p t=0 hz
    hz=$(getconf CLK_TCK)
    for p in $(pid_tree "$1"); do
        t=$((t + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    awk -v t="$t" -v hz="$hz" 'BEGIN { printf "%.3f", t / hz }'
}

# curl_args LABEL: how curl reaches the origin on this path (proxy, trust).
curl_args() {
    local label=$1 port=$2
    case $label in
        direct) echo "--cacert $WORK/pki/origin-ca.pem" ;;
        portcullis-passthrough | portcullis-passthrough-rw) echo "-x http://127.0.0.1:$port --cacert $WORK/pki/origin-ca.pem" ;;
        *) echo "-x http://127.0.0.1:$port --cacert $WORK/pki/proxy-ca.pem" ;;
    esac
}

CURL_BASE=(curl --http1.1 --no-sessionid -s -S --max-time 600)

# ---- run ------------------------------------------------------------------------

install_tls_peers
if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then build_release; fi
for t in nginx curl openssl; do have "$t" || { log "$t missing: no TLS benchmark"; exit 1; }; done
make_hosts
set_with_hosts
make_certs
OPORT=$(pick_port)
start_origin "$OPORT"
big_mib=$(mib_of "$TLS_BYTES")
stream_mib=$(mib_of "$TLS_STREAM_BYTES")

median() { sort -g | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "-"}'; }

ROWS=()
declare -A TV=()
COMMANDS=()
LOADS=("$(cut -d' ' -f1-3 /proc/loadavg)")
START=$(date -u +%Y-%m-%dT%H:%MZ)
for label in $TLS_PEERS; do
    if ! why=$(tls_have "$label"); then
        log "skipping $label: $why"
        ROWS+=("| $label | $why | - | - | - | - | - | - | - |")
        continue
    fi
    LOADS+=("$(cut -d' ' -f1-3 /proc/loadavg)")
    port=$(pick_port)
    pid=""
    if [ "$label" != direct ]; then
        pid=$(start_tls_peer "$label" "$port" "$OPORT") || { ROWS+=("| $label | failed to start | - | - | - | - | - | - | - |"); continue; }
    fi
    read -r -a cargs <<<"$(curl_args "$label" "$port")"
    # curl runs with the bench names, like the proxies.
    c() { "${WITH_HOSTS[@]}" "${CURL_BASE[@]}" "${cargs[@]}" "$@"; }

    # 1. One large download, TLS_REPEAT times.
    url="https://bulk.bench.test:$OPORT/big.bin"
    COMMANDS+=("$label bulk: ${CURL_BASE[*]} ${cargs[*]} -o /dev/null $url")
    rates=() cpus=()
    for i in $(seq 1 "$TLS_REPEAT"); do
        cpu0=$([ -n "$pid" ] && tree_cpu_s "$pid" || echo 0)
        r=$(c -o /dev/null -w '%{http_code} %{size_download} %{speed_download}' "$url" || true)
        cpu1=$([ -n "$pid" ] && tree_cpu_s "$pid" || echo 0)
        log "$label bulk: $r cpu=$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }')"
        read -r code size speed <<<"$r"
        if [ "$code" = 200 ] && [ "$size" -ge $((${big_mib%.*} * 1048576)) ]; then
            rates+=("$(awk -v s="$speed" 'BEGIN { printf "%.0f", s / 1e6 }')")
            [ -z "$pid" ] || cpus+=("$(awk -v a="$cpu0" -v b="$cpu1" -v sz="$size" 'BEGIN { printf "%.2f", (b - a) / (sz / 1073741824) }')")
        fi
    done
    rate=$(printf '%s\n' "${rates[@]:-}" | awk NF | median)
    cpu=$(printf '%s\n' "${cpus[@]:-}" | awk NF | median)

    # 2. TLS_STREAMS downloads at once: aggregate MB/s, CPU, peak RSS.
    url="https://bulk.bench.test:$OPORT/stream.bin"
    COMMANDS+=("$label $TLS_STREAMS streams: $TLS_STREAMS x ${CURL_BASE[*]} ${cargs[*]} -o /dev/null $url (at once)")
    agg="-" peak="-" cpu16="-"
    done_file=$WORK/watch-$label.done
    rm -f "$done_file"
    if [ -n "$pid" ]; then
        "$LOADGEN" watch --watch-pid "$pid" --until-file "$done_file" --max-secs 900 >"$WORK/watch-$label.out" 2>&1 &
        wpid=$!
    fi
    t0=$(date +%s.%N)
    cpids=()
    for i in $(seq 1 "$TLS_STREAMS"); do
        c -o /dev/null -w '%{http_code} %{size_download}\n' "$url" >"$WORK/stream-$label-$i.out" 2>&1 &
        cpids+=("$!")
    done
    for p in "${cpids[@]}"; do wait "$p" || true; done
    t1=$(date +%s.%N)
    ok=$(cat "$WORK"/stream-"$label"-*.out | awk -v want=$((${stream_mib%.*} * 1048576)) '$1 == 200 && $2 >= want' | wc -l)
    if [ -n "$pid" ]; then
        touch "$done_file"
        wait "$wpid" || true
        w=$(grep '^RESULT' "$WORK/watch-$label.out" || true)
        peak=$(awk -v k="$(value peak_rss_kib <<<"$w")" 'BEGIN { if (k != "") printf "%.1f", k / 1024; else print "-" }')
        cpu16=$(awk -v s="$(value cpu_s <<<"$w")" -v n="$TLS_STREAMS" -v m="$stream_mib" 'BEGIN { if (s != "") printf "%.2f", s / (n * m / 1024); else print "-" }')
    fi
    if [ "$ok" = "$TLS_STREAMS" ]; then
        agg=$(awk -v a="$t0" -v b="$t1" -v n="$TLS_STREAMS" -v m="$stream_mib" 'BEGIN { printf "%.0f", n * m * 1048576 / (b - a) / 1e6 }')
    else
        agg="$ok of $TLS_STREAMS ok"
    fi
    log "$label $TLS_STREAMS streams: $agg MB/s, peak RSS $peak MiB, CPU $cpu16 s/GiB"

    # 3. Setup rate: SETUP new tunnels, distinct names (minting), then one name (warm cache).
    setups=()
    for kind in mint warm; do
        cfg=$WORK/setup-$label-$kind.curl
        if [ "$kind" = mint ]; then
            seq 1 "$SETUP" | awk -v p="$OPORT" '{ printf "url = \"https://n%d.bench.test:%s/small.bin\"\noutput = \"/dev/null\"\n", $1, p }' >"$cfg"
        else
            # One request first, so the leaf is in the cache.
            c -o /dev/null "https://warm.bench.test:$OPORT/small.bin" || true
            seq 1 "$SETUP" | awk -v p="$OPORT" '{ printf "url = \"https://warm.bench.test:%s/small.bin\"\noutput = \"/dev/null\"\n", p }' >"$cfg"
        fi
        COMMANDS+=("$label setup ($kind): ${CURL_BASE[*]} ${cargs[*]} -H 'Connection: close' -w '%{http_code}\\n' -K FILE ($SETUP x url = https://$([ "$kind" = mint ] && echo 'nN' || echo warm).bench.test:PORT/small.bin)")
        cpu0=$([ -n "$pid" ] && tree_cpu_s "$pid" || echo 0)
        t0=$(date +%s.%N)
        n200=$(c -H 'Connection: close' -w '%{http_code}\n' -K "$cfg" 2>>"$WORK/setup-$label.err" | grep -c '^200' || true)
        t1=$(date +%s.%N)
        cpu1=$([ -n "$pid" ] && tree_cpu_s "$pid" || echo 0)
        s=$(awk -v a="$t0" -v b="$t1" -v n="$n200" 'BEGIN { printf "%.0f", n / (b - a) }')
        [ "$n200" = "$SETUP" ] || s="$s ($n200 of $SETUP ok)"
        us=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$n200" -v p="$pid" 'BEGIN { if (p == "" || n == 0) print "-"; else printf "%.2f", (b - a) * 1000 / n }')
        log "$label setup $kind: $s/s, proxy CPU $us ms/tunnel"
        setups+=("$s" "$us")
    done

    if [ "$PROFILE" = 1 ] && [ "$label" = portcullis-terminate ] && command -v perf >/dev/null; then
        log "profiling $label: perf record during one download"
        # System-wide, filtered by PID below: attaching with -p records no
        # samples in this VM (software cpu-clock events only).
        perf record -e cpu-clock -F 999 -a -o "$WORK/perf-$label.data" -- sleep 600 >"$WORK/perf-$label.log" 2>&1 &
        ppid=$!
        sleep 1
        c -o /dev/null "https://bulk.bench.test:$OPORT/big.bin" || true
        kill -INT "$ppid" 2>/dev/null || true
        wait "$ppid" 2>/dev/null || true
        perf report -i "$WORK/perf-$label.data" --pid "$pid" --no-children --sort dso,symbol --stdio 2>/dev/null |
            grep -v '^#' | grep '%' | head -25 >"$WORK/perf-$label.top" || true
        log "top functions: $WORK/perf-$label.top"
    fi

    peak_note=""
    [ -n "$pid" ] || peak_note="-"
    ROWS+=("| $label | ${rate:--} | ${cpu:--} | ${agg} | ${cpu16} | ${peak_note:-$peak} | ${setups[0]} | ${setups[2]} | ${setups[1]} / ${setups[3]} |")
    TV[$label,rate]=${rate:-} TV[$label,cpu]=${cpu:-} TV[$label,agg]=$agg TV[$label,cpu16]=$cpu16 TV[$label,peak]=$peak
    if [ -n "$pid" ]; then
        stop_peer "$pid"
        # Squid's helpers outlive a killed parent only briefly; wait for them.
        sleep 0.5
    fi
done
LOADS+=("$(cut -d' ' -f1-3 /proc/loadavg)")
END=$(date -u +%Y-%m-%dT%H:%MZ)

# The targets of issue 8 for terminated TLS, checked on this run's figures.
TARGETS=""
if [ -n "${TV[portcullis-terminate,rate]:-}" ]; then
    t_rate=${TV[portcullis-terminate,rate]} t_agg=${TV[portcullis-terminate,agg]} t_cpu=${TV[portcullis-terminate,cpu]}
    t_cpu16=${TV[portcullis-terminate,cpu16]} t_rss=${TV[portcullis-terminate,peak]}
    s_rate=${TV[squid-bump,rate]:-} s_agg=${TV[squid-bump,agg]:-}
    verdict() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { if (v !~ /^[0-9.]+$/ || t !~ /^[0-9.]+$/) print "not measured"; else if ((op == ">=" && v + 0 >= t + 0) || (op == "<=" && v + 0 <= t + 0) || (op == "<" && v + 0 < t + 0)) print "**met**"; else print "**missed**" }'; }
    two_s=$(awk -v a="$s_rate" 'BEGIN { if (a ~ /^[0-9.]+$/) print 2 * a }')
    two_s16=$(awk -v a="$s_agg" 'BEGIN { if (a ~ /^[0-9.]+$/) print 2 * a }')
    TARGETS="Targets for \`tls = \"terminate\"\` (issue 8), this run: throughput at least twice Squid ssl-bump's: 1 download $t_rate MB/s against 2 × ${s_rate:--} ($(verdict "$t_rate" ">=" "$two_s")), $TLS_STREAMS at once $t_agg MB/s against 2 × ${s_agg:--} ($(verdict "$t_agg" ">=" "$two_s16")); at most 1.0 proxy CPU s/GiB: $t_cpu on 1 download ($(verdict "$t_cpu" "<=" 1.0)), $t_cpu16 with $TLS_STREAMS at once ($(verdict "$t_cpu16" "<=" 1.0)); peak RSS under 16 MiB at $TLS_STREAMS streams: $t_rss MiB ($(verdict "$t_rss" "<" 16))."
fi

FRAG=$WORK/bench-tls.md
{
    echo "<!-- begin scripts/bench-tls.sh -->"
    echo "<!-- Generated by scripts/bench-tls.sh; edits here are overwritten by the next --write. -->"
    echo
    echo "### HTTPS: passthrough, terminated TLS and TLS-intercepting peers"
    echo
    echo "- Date: $START to $END"
    md_machine
    echo "- Command: \`$CMDLINE\`"
    echo "- Load average (1, 5, 15 min) before the HTTPS run: ${LOADS[0]}; at the start of each path: $(printf '%s; ' "${LOADS[@]:1}" | sed 's/; $//')"
    echo "- Origin: nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), TLS on 127.0.0.1, one worker, certificate for *.bench.test from a test CA. Client: $(curl --version | head -1 | cut -d' ' -f1-2) \`--http1.1 --no-sessionid\` (a full handshake every time). Peers: $("$MITM_VENV/bin/mitmdump" --version 2>/dev/null | sed -n 's/^Mitmproxy: *\(.*\)/mitmproxy \1/p' | head -1), $(/usr/sbin/squid -v 2>/dev/null | head -1 | sed 's/.*Version \([^ ]*\).*/Squid \1 (ssl-bump)/')"
    echo "- Bulk: one $TLS_BYTES download, median of $TLS_REPEAT; streams: $TLS_STREAMS downloads of $TLS_STREAM_BYTES at once; setup: $SETUP sequential requests for 1 KiB, each on a new tunnel (\`Connection: close\`): to $SETUP distinct names (portcullis, mitmproxy and Squid mint a leaf for each) and to one name (a warm leaf cache)"
    echo
    echo "| Path | MB/s, 1 download | proxy CPU s/GiB | MB/s, $TLS_STREAMS at once | proxy CPU s/GiB, $TLS_STREAMS at once | peak RSS MiB, $TLS_STREAMS at once | setups/s, minting (distinct names) | setups/s, warm cache (one name) | proxy CPU ms/setup (minting / warm) |"
    echo "|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    echo
    [ -z "$TARGETS" ] || { echo "$TARGETS"; echo; }
    if [ "$PROFILE" = 1 ] && [ -s "$WORK/perf-portcullis-terminate.top" ]; then
        echo "perf (system-wide, cpu-clock), portcullis terminating one $TLS_BYTES download, its own samples by DSO and symbol:"
        echo
        echo '```'
        cat "$WORK/perf-portcullis-terminate.top"
        echo '```'
        echo
    fi
    echo "<details><summary>Every command of this run</summary>"
    echo
    echo "PORT = the origin's port; the names resolve to 127.0.0.1 through a private /etc/hosts."
    echo
    # shellcheck disable=SC2016 # backquotes are Markdown
    printf -- '- `%s`\n' "${COMMANDS[@]}" | sed "s#$WORK#WORK#g"
    echo
    echo "</details>"
    echo
    echo "<!-- end scripts/bench-tls.sh -->"
} >"$FRAG"
cat "$FRAG"
log "fragment: $FRAG; logs: $WORK"
[ -z "$WRITE" ] || splice_fragment "$WRITE" scripts/bench-tls.sh "$FRAG"
