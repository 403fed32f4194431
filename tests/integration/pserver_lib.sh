# Shared helpers of the pserver integration scripts (sourced): the cluster library, and a shard
# started and probed with pserver_client.
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

# start_ps NAME ARGS...: starts a shard in the background; sets PS_PID, PS_EP.
start_ps() {
    local name=$1
    shift
    local port
    port=$(free_port)
    PS_EP="tcp://127.0.0.1:$port"
    "$SPARROW" pserver --listen "$PS_EP" "$@" >>"$DIR/$name.log" 2>&1 &
    PS_PID=$!
    for _ in $(seq 1 100); do
        if "$CLIENT" "$PS_EP" "$DIM" health >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$PS_PID" 2>/dev/null; then
            echo "pserver exited during start:"
            cat "$DIR/$name.log"
            exit 1
        fi
        sleep 0.1
    done
    echo "pserver did not answer"
    cat "$DIR/$name.log"
    exit 1
}

