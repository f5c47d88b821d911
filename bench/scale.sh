# SPDX-License-Identifier: Apache-2.0
# Scale and storm scenarios of the performance issue, sourced by
# bench/run.sh (which defines BUILD, KEYLESSD, BENCH, PKI, WORK, REPS, DUR,
# WARM, smoke, TLS, pick_port, stop_server, pub, log, SERVER_PID):
#
#   scale_keys    100,000 P-256 keys: load time, key store memory, and
#                 ECDSA throughput spread over all of them (keyless-bench
#                 -ski-file) against a one-key store
#   scale_storm   10,000 clients with cached TLS sessions reconnect at
#                 once (bench/tools/storm.c)
#   scale_flood   keylessd's peak RSS (VmHWM) under each client flood,
#                 default limits (bench/tools/flood.c, keyless-bench -idle)
#   scale_nonce   ECDSA nonce precomputation, measured
#                 (bench/tools/ecdsa-nonce.c)
#
# SCALE_ONLY="flood" (say) runs only the scenarios named; STORM_REPS=1
# runs the storm once instead of REPS times (quick A/B:
# SCALE_ONLY=storm STORM_REPS=1 bench/run.sh --scale). Each writes its
# raw results under $WORK (scale-*, storm.*, flood.*,
# nonce.json); bench/scale.py turns them into the Targets rows and the
# "Scale and storm scenarios" section. Smoke mode runs each tiny.

if [ "$smoke" = 1 ]; then
    SC_KEYS=1000; SC_STORM=200; SC_IDLE=200; SC_TCP=300; SC_FLOODN=10
    SC_FLOOD_S=2; SC_NONCE=1000
else
    SC_KEYS=100000; SC_STORM=10000; SC_IDLE=10000; SC_TCP=15000
    SC_FLOODN=100; SC_FLOOD_S=12; SC_NONCE=20000
fi
SC_TOOLS=$BUILD/bench-tools

# The tools are plain OpenSSL programs: built here, when missing or older
# than their source, with the project's warnings.
scale_tools() {
    mkdir -p "$SC_TOOLS"
    local t src
    for t in keygen-many storm flood ecdsa-nonce; do
        src=$ROOT/bench/tools/$t.c
        if [ ! -x "$SC_TOOLS/$t" ] || [ "$src" -nt "$SC_TOOLS/$t" ] ||
            [ "$ROOT/bench/tools/tlsconn.h" -nt "$SC_TOOLS/$t" ]; then
            log "building bench/tools/$t.c"
            ${CC:-cc} -O2 -std=gnu11 -Wall -Wextra -Werror -o "$SC_TOOLS/$t" \
                "$src" -lssl -lcrypto
        fi
    done
}

# scale_server KEYDIR LOG [FLAGS...]: keylessd on a free port, info log
# (the key store's load line), metrics off; SERVER_PID, PORT, TLS set.
scale_server() {
    local dir=$1 logf=$2
    shift 2
    for _try in 1 2 3; do
        KEYLESS_METRICS_PORT=0 "$KEYLESSD" --listen-address=127.0.0.1 \
            --port=$PORT --auth-cert="$PKI/server.crt" \
            --auth-key="$PKI/server.key" --cloudflare-ca-cert="$PKI/ca.crt" \
            --private-key-dirs="$dir" --loglevel=1 "$@" >"$logf" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 600); do
            if grep -q "listening on" "$logf" 2>/dev/null; then
                return 0
            fi
            kill -0 $SERVER_PID 2>/dev/null || break
            sleep 0.1
        done
        wait $SERVER_PID 2>/dev/null || true
        SERVER_PID=
        grep -q "already in use" "$logf" || break
        pick_port
    done
    tail -20 "$logf" >&2
    log "keylessd did not start"
    exit 1
}

sc_status() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$SERVER_PID/status"; }

# ---- 100,000 keys -----------------------------------------------------------
scale_keys() {
    local keys=$BUILD/bench-keys-$SC_KEYS
    if [ ! -s "$keys/skis.txt" ]; then
        log "keys: generating $SC_KEYS P-256 keys into $keys (kept for the next run)"
        rm -rf "$keys"
        "$SC_TOOLS/keygen-many" "$keys" $SC_KEYS
    fi
    mkdir -p "$WORK/onekey"
    chmod 700 "$WORK/onekey"
    cp "$WORK/keys/ecdsa-p256.key" "$WORK/onekey/"
    local rep which dir args t0 t1
    for rep in $(seq $REPS); do
        # alternating, so both stores see the same background load
        for which in one many; do
            log "keys: $which-key store, run $rep/$REPS"
            if [ $which = one ]; then
                dir=$WORK/onekey
                args=(-pubkey "$(pub ecdsa-p256)")
            else
                dir=$keys
                args=(-ski-file "$keys/skis.txt")
            fi
            t0=$(date +%s.%N)
            scale_server "$dir" "$WORK/scale-keys.$which.$rep.log"
            t1=$(date +%s.%N)
            # wall time to listening, the load line, RSS once loaded
            printf '%s %s %s\n' "$(calc "$t1 - $t0")" "$(sc_status VmRSS)" \
                "$(sc_status VmHWM)" >"$WORK/scale-keys.$which.$rep.mem"
            "$BENCH" "${TLS[@]}" -json -warmup ${WARM}s -duration ${DUR}s \
                -op ecdsa-sha256 -connections 8 -depth 64 "${args[@]}" \
                >"$WORK/scale-keys.$which.$rep.json" ||
                log "keys: keyless-bench failed ($which, run $rep)"
            stop_server
        done
    done
}

# ---- reconnect storm --------------------------------------------------------
scale_storm() {
    mkdir -p "$WORK/onekey"
    chmod 700 "$WORK/onekey"
    cp "$WORK/keys/ecdsa-p256.key" "$WORK/onekey/"
    # Every client comes from 127.0.0.1 here, one "source" for keylessd's
    # per-source handshake limit (default 100, meant for one edge): it is
    # raised to max_handshaking's default (1000), which stays as it is -
    # clients beyond it wait in the listen backlog until handshake slots
    # free (keylessd stops accepting at the cap; each listener's backlog
    # is net.core.somaxconn, storm.c reports the SYNs dropped when it
    # overflows as listen_drops).
    local flags=(--max-handshaking-per-source=1000
                 --max-connections=$((SC_STORM + 2000)) --idle-timeout=10m)
    echo "${flags[*]}" >"$WORK/storm.flags"
    local rep reps=${STORM_REPS:-$REPS}
    for rep in $(seq $reps); do
        log "storm: $SC_STORM clients, run $rep/$reps (priming takes a while)"
        scale_server "$WORK/onekey" "$WORK/storm.$rep.log" "${flags[@]}"
        "$SC_TOOLS/storm" -server "127.0.0.1:$PORT" -cert "$PKI/client.crt" \
            -key "$PKI/client.key" -ca "$PKI/ca.crt" -n $SC_STORM -prime 50 \
            -timeout 30 >"$WORK/storm.$rep.json" ||
            log "storm: not every client was served (run $rep)"
        stop_server
    done
}

# ---- memory under floods ----------------------------------------------------
# One fresh keylessd per flood, default limits; its VmHWM at the end of
# the flood is the flood's peak. The tools run until interrupted.
SC_FPIDS=()
sc_flood_run() { # KIND N: one flood tool in the background
    local out=$WORK/flood.$SC_PHASE.$1.out
    case $1 in
    idle)
        "$BENCH" "${TLS[@]}" -idle -connections "$2" -duration 600s \
            >"$out" 2>&1 &
        ;;
    *)
        # all at once: each flood from its own loopback address, one
        # source each for keylessd's per-source handshake limit (else the
        # TCP flood's half-open connections refuse everyone else's)
        local src=127.0.0.1
        if [ "$SC_PHASE" = all ]; then
            case $1 in
            pipeline) src=127.0.0.2 ;; oversized) src=127.0.0.3 ;;
            tcp) src=127.0.0.4 ;;
            esac
        fi
        "$SC_TOOLS/flood" -server "127.0.0.1:$PORT" -cert "$PKI/client.crt" \
            -key "$PKI/client.key" -ca "$PKI/ca.crt" -ski "$SC_SKI" \
            -bind $src -mode "$1" -n "$2" -duration 600 >"$out" 2>&1 &
        ;;
    esac
    SC_FPIDS+=($!)
    BG_PIDS+=($!) # run.sh's exit trap stops them too
}

sc_flood_phase() { # NAME KIND N [KIND N ...]
    SC_PHASE=$1
    shift
    log "flood: $SC_PHASE"
    scale_server "$WORK/onekey" "$WORK/flood.$SC_PHASE.log"
    local rss0 f
    rss0=$(sc_status VmRSS)
    SC_FPIDS=()
    while [ $# -gt 0 ]; do
        sc_flood_run "$1" "$2"
        shift 2
    done
    # idle connections: from when they are all open
    f=$WORK/flood.$SC_PHASE.idle.out
    if [ -e "$f" ]; then
        for _ in $(seq 1200); do
            grep -q "Idle connections open" "$f" && break
            kill -0 "${SC_FPIDS[0]}" 2>/dev/null || break
            sleep 0.1
        done
    fi
    sleep $SC_FLOOD_S
    printf '%s\t%s\t%s\t%s\n' "$SC_PHASE" "$rss0" "$(sc_status VmHWM)" \
        "$(sc_status VmRSS)" >>"$WORK/flood.tsv"
    for f in "${SC_FPIDS[@]}"; do
        kill -INT "$f" 2>/dev/null || true
    done
    wait "${SC_FPIDS[@]}" 2>/dev/null || true
    SC_FPIDS=()
    BG_PIDS=()
    stop_server
}

scale_flood() {
    mkdir -p "$WORK/onekey"
    chmod 700 "$WORK/onekey"
    cp "$WORK/keys/ecdsa-p256.key" "$WORK/onekey/"
    : >"$WORK/flood.tsv"
    SC_SKI=$("$BUILD/keyless-cli" ski "$(pub ecdsa-p256)" | awk '{print $1}')
    sc_flood_phase idle idle $SC_IDLE
    sc_flood_phase tcp tcp $SC_TCP
    sc_flood_phase pipeline pipeline $SC_FLOODN
    sc_flood_phase oversized oversized $SC_FLOODN
    # all at once (idle: half as many)
    sc_flood_phase all idle $((SC_IDLE / 2)) pipeline $SC_FLOODN \
        oversized $SC_FLOODN tcp $SC_TCP
}

# ---- ECDSA nonce precomputation -----------------------------------------------
scale_nonce() {
    log "nonce: ECDSA P-256 sign, sign_setup, sign_ex ($SC_NONCE each, 5 rounds)"
    "$SC_TOOLS/ecdsa-nonce" $SC_NONCE 5 >"$WORK/nonce.json"
}

# SCALE_ONLY="keys storm" runs some of them (names as above, no scale_)
scale_all() {
    scale_tools
    local s
    for s in ${SCALE_ONLY:-nonce keys storm flood}; do
        case $s in
        nonce | keys | storm | flood) "scale_$s" ;;
        *) log "SCALE_ONLY: unknown scenario $s (nonce keys storm flood)"; exit 2 ;;
        esac
    done
}
