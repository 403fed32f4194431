#!/usr/bin/env bash
# trainer_bench: the trainer's rate and model quality on one `sparrow gen` stream (39 fields), FM
# with latent dimension 16 and LR, Adagrad, against a baseline of the same run:
#   (a) the reference: a single-thread C loop (spw_ref, bench/trainer_bench_ref.c) doing the same
#       model and Adagrad over an in-memory table;
#   (b) `sparrow trainer`, CPU backend, in-process shard (trainer.shards=inproc);
#   (c) `sparrow trainer` with one `sparrow pserver` process on loopback (pipelined pulls, with
#       fresh reads of its own pushes; also shown without prefetch: c0, and with prefetch but
#       without fresh reads, the rows the two micro-batches share one update stale: c1);
#   (d) (c) at top-k ratios 1.0, 0.25, 0.1, 0.01, with and without error feedback: bytes pushed per
#       example and final-window logloss.
# Targets (issue 14): final-window logloss of (c) within +0.2% of (c0)'s, at c/c1 >= 0.95 in
# examples/s (fresh reads cost at most 5% of the pipelined rate).
# Targets (issue 5): b/a >= 0.7 and c/a >= 0.35 in examples/s; final-window logloss of (b) within
# 1% of (a)'s; >= 10x fewer bytes pushed for at most +0.002 logloss with error feedback, and the
# run without error feedback visibly worse. Bytes per example are those of the steps' pushes; the
# residual flush at the end of the run (a checkpoint's work, amortised over a whole checkpoint
# interval in a long run) is shown beside them. Rates are each process's own training loop (input
# decoding included, process start and shard start excluded).
# Usage: bench/trainer_bench.sh <build dir> [examples]   (also: cmake --build <dir> --target
# trainer_bench). Default 1,000,000 examples: about 3 minutes on 2 cores.
set -euo pipefail
BUILD=${1:?usage: trainer_bench.sh <build dir> [examples]}
N=${2:-1000000}
SPARROW=$BUILD/sparrow
REF=$BUILD/bench/trainer_bench_ref
[ -x "$SPARROW" ] || { echo "trainer_bench: $SPARROW not built" >&2; exit 1; }
[ -x "$REF" ] || { echo "trainer_bench: $REF not built" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/trainer_bench.XXXXXX")
PS_PID=""
trap '[ -n "$PS_PID" ] && kill -9 "$PS_PID" 2>/dev/null; rm -rf "$TMP"' EXIT

K=16
BATCH=1024
LR=0.02
WINDOW=100000
declare -A RATE LL BPE

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# kv KEY LINE
kv() { { grep -o " $1=[^ ]*" <<<" $2" || true; } | head -1 | cut -d= -f2 | tr -d '"'; }
calc() { python3 -c "print($1)"; }

# record NAME LINE: keeps the figures of a run and prints them
record() {
    local name=$1 line=$2
    [ "$(kv status "$line")" = success ] || { echo "trainer_bench: $name failed: $line" >&2; exit 1; }
    RATE[$name]=$(kv ex_per_s "$line")
    LL[$name]=$(kv window_logloss "$line")
    BPE[$name]=$(kv step_bytes_per_example "$line")
    BPE[$name]=${BPE[$name]:-0}
    local all
    all=$(kv bytes_per_example "$line")
    printf '  %-14s examples/s %8s  final-window logloss %s  bytes pushed/example %7s' "$name" \
        "${RATE[$name]}" "${LL[$name]}" "${BPE[$name]}"
    if [ "$all" != "${BPE[$name]}" ] && [ "$name" != "${name%.a}" ]; then
        printf '\n'
    elif [ "$all" != "${BPE[$name]}" ]; then
        printf ' (%s with the residual flush at the end)\n' "$all"
    else
        printf '\n'
    fi
}

trainer() { # MODEL ARGS...: one `sparrow trainer` run; prints its finished line
    local model=$1
    shift
    "$SPARROW" trainer --in "file:${IN:-$TMP/data.pb}" --model "$model" --latent-dim $K --batch $BATCH \
        --backend cpu --http-port -1 --set trainer.lr=$LR --set trainer.eval.window=$WINDOW \
        --set trainer.log.interval=0 "$@" 2>"$TMP/trainer.log" || {
        tail -5 "$TMP/trainer.log" >&2
        return 1
    }
    grep ' finished ' "$TMP/trainer.log" | tail -1
}

with_pserver() { # MODEL DIM ARGS...: (c)-style run against a fresh `sparrow pserver`
    local model=$1 dim=$2
    shift 2
    local port
    port=$(free_port)
    rm -rf "$TMP/ps"
    "$SPARROW" pserver --listen "tcp://127.0.0.1:$port" --dim "$dim" --data-dir "$TMP/ps" \
        --http-port 0 --memory-mb 2048 --set pserver.lr=$LR >"$TMP/ps.log" 2>&1 &
    PS_PID=$!
    trainer "$model" --shards "tcp://127.0.0.1:$port" "$@"
    kill -TERM "$PS_PID"
    wait "$PS_PID" || { tail -5 "$TMP/ps.log" >&2; return 1; }
    PS_PID=""
}

echo "trainer_bench: $N examples of sparrow gen (39 fields, seed 1), batch $BATCH, Adagrad lr $LR,"
echo "progressive-validation window $WINDOW; $(nproc) cores"
"$SPARROW" gen --n "$N" --seed 1 --fields 39 --out "$TMP/data.pb" 2>"$TMP/gen.log"
echo "  gen: $(grep -o 'bayes_logloss=[0-9.]*' "$TMP/gen.log") over the whole stream"

for model in fm lr; do
    if [ $model = fm ]; then dim=$((K + 1)); label="FM k=$K"; else dim=1; label="LR"; fi
    echo
    echo "== $label"
    record "$model.a" "$("$REF" "$TMP/data.pb" $model $K $BATCH $LR $WINDOW)"
    record "$model.b" "$(trainer $model --shards inproc)"
    record "$model.c" "$(with_pserver $model $dim)"
    record "$model.c0" "$(with_pserver $model $dim --set trainer.pull.prefetch=false)"
    record "$model.c1" "$(with_pserver $model $dim --set trainer.pull.fresh=false)"
    for r in 0.25 0.1 0.01; do
        record "$model.d$r+ef" "$(with_pserver $model $dim --topk $r)"
        record "$model.d$r-ef" "$(with_pserver $model $dim --topk $r \
            --set trainer.error_feedback=false)"
    done
done

verdict() { if python3 -c "import sys; sys.exit(0 if ($1) else 1)"; then echo MET; else echo MISSED; fi; }
for model in fm lr; do
    a=$model.a b=$model.b c=$model.c
    echo
    echo "== ratios, $model"
    echo "  b/a examples/s   $(calc "round(${RATE[$b]} / ${RATE[$a]}, 3)")   (target >= 0.7: $(verdict "${RATE[$b]} / ${RATE[$a]} >= 0.7"))"
    echo "  c/a examples/s   $(calc "round(${RATE[$c]} / ${RATE[$a]}, 3)")   (target >= 0.35: $(verdict "${RATE[$c]} / ${RATE[$a]} >= 0.35"))"
    echo "  c0/a examples/s  $(calc "round(${RATE[$model.c0]} / ${RATE[$a]}, 3)")   (c without prefetch)"
    echo "  c/c0 examples/s  $(calc "round(${RATE[$c]} / ${RATE[$model.c0]}, 3)")   (gain of pipelined pulls)"
    echo "  logloss b vs a   $(calc "round(100 * (${LL[$b]} - ${LL[$a]}) / ${LL[$a]}, 3)")%   (target within 1%: $(verdict "abs(${LL[$b]} - ${LL[$a]}) <= 0.01 * ${LL[$a]}"))"
    echo "  logloss c vs a   $(calc "round(100 * (${LL[$c]} - ${LL[$a]}) / ${LL[$a]}, 3)")%   (c0 vs a: $(calc "round(100 * (${LL[$model.c0]} - ${LL[$a]}) / ${LL[$a]}, 3)")%)"
    echo "  logloss c vs c0  $(calc "round(100 * (${LL[$c]} - ${LL[$model.c0]}) / ${LL[$model.c0]}, 3)")%   (target <= +0.2%: $(verdict "${LL[$c]} <= 1.002 * ${LL[$model.c0]}"); c1 vs c0: $(calc "round(100 * (${LL[$model.c1]} - ${LL[$model.c0]}) / ${LL[$model.c0]}, 3)")%)"
    echo "  c/c1 examples/s  $(calc "round(${RATE[$c]} / ${RATE[$model.c1]}, 3)")   (fresh reads' cost; target >= 0.95: $(verdict "${RATE[$c]} / ${RATE[$model.c1]} >= 0.95"))"
    echo "  top-k vs c (ratio 1.0: ${BPE[$c]} bytes/example, logloss ${LL[$c]}):"
    for r in 0.25 0.1 0.01; do
        for ef in +ef -ef; do
            d=$model.d$r$ef
            printf '    ratio %-5s %s  bytes %8s  %6sx fewer  logloss %s  (%+.4f vs c, %+.4f vs a)\n' \
                "$r" "$ef" "${BPE[$d]}" "$(calc "round(${BPE[$c]} / ${BPE[$d]}, 2)")" "${LL[$d]}" \
                "$(calc "${LL[$d]} - ${LL[$c]}")" "$(calc "${LL[$d]} - ${LL[$a]}")"
        done
    done
    # the target: some ratio with error feedback gives >= 10x fewer bytes for <= +0.002 logloss,
    # and at that ratio the run without error feedback is visibly worse (> +0.002 beyond it)
    best=""
    for r in 0.25 0.1 0.01; do
        d=$model.d$r+ef
        # 10x to one decimal: top-k sends ceil(ratio x rows), so ratio 0.1 gives 9.97x
        if python3 -c "import sys; sys.exit(0 if (round(${BPE[$c]} / ${BPE[$d]}, 1) >= 10 and ${LL[$d]} - ${LL[$c]} <= 0.002) else 1)"; then
            best=$r
        fi
    done
    if [ -n "$best" ]; then
        echo "  >= 10x fewer bytes for <= +0.002 logloss with error feedback: MET at ratio $best;" \
            "without error feedback there: $(calc "round(${LL[$model.d$best-ef]} - ${LL[$model.d$best+ef]}, 4)") worse" \
            "($(verdict "${LL[$model.d$best-ef]} - ${LL[$model.d$best+ef]} > 0.002"))"
    else
        echo "  >= 10x fewer bytes for <= +0.002 logloss with error feedback: MISSED at every ratio"
    fi
done

# Compute threads (issue 20 section 3): one trainer process, in-process shard, trainer.threads 1
# and 2 (and 4, 8, 16 where the machine has that many cores), in the same run, three interleaved
# rounds (1, 2, .., 1, 2, ..) of which each count keeps its fastest: a shared machine's
# contention hits both counts, and the 2-thread runs, which need both cores at once, most (on
# this VM the same binary's 2-thread FM run ranged from 406,000 to 559,000 examples/s within a
# minute, the 1-thread one from 256,000 to 292,000). FM k=$K on the stream above (or on 200,000
# examples of the same generator when it is shorter) and DeepFM k=$K (MLP 400,400, the 39
# fields) on the first 200,000 of that (100,000 on the short stream). The result equals one
# thread's up to float order, so the final-window logloss is shown beside the rate; compute_s (the
# loop's time in forward/backward and progressive validation, without reading, pulls and pushes)
# shows how much of the run the threads divide.
# Target: 2 threads / 1 >= 1.7 in examples/s on a 2-core machine.
THREADS="1 2"
for t in 4 8 16; do [ "$(nproc)" -ge $t ] && THREADS="$THREADS $t"; done
# At least 200,000 examples (run_all --quick's 30,000 took 0.1 s a run: the ratio measured the
# runs' start, 1.09 in one CI run); DeepFM on 200,000, or 100,000 with such a short stream (CI's
# time).
THREAD_N=$((N > 200000 ? N : 200000))
IN=$TMP/data.pb
DEEP_N=200000
if [ "$THREAD_N" -gt "$N" ]; then
    IN=$TMP/threads.pb
    DEEP_N=100000
    "$SPARROW" gen --n "$THREAD_N" --seed 1 --fields 39 --out "$IN" 2>"$TMP/gen-threads.log"
fi
DEEP_FIELDS=$(python3 -c 'print(",".join(["I%d" % i for i in range(1, 14)] + ["C%d" % i for i in range(1, 27)]))')
echo
THREAD_ROUNDS=3
echo "== compute threads (trainer.threads $THREADS), in-process shard, best of $THREAD_ROUNDS interleaved rounds"
for model in fm deepfm; do
    if [ $model = fm ]; then
        margs=(--max-examples "$THREAD_N")
    else
        margs=(--max-examples "$DEEP_N" --set "trainer.fields=$DEEP_FIELDS")
    fi
    for round in $(seq 1 $THREAD_ROUNDS); do
        for t in $THREADS; do
            line=$(trainer $model --shards inproc --set trainer.threads=$t "${margs[@]}")
            [ "$(kv status "$line")" = success ] || { echo "trainer_bench: $model threads=$t failed: $line" >&2; exit 1; }
            r=$(kv ex_per_s "$line")
            printf '  %-6s threads %-2s round %s  examples/s %8s  compute_s %6s  final-window logloss %s\n' \
                "$model" "$t" "$round" "$r" "$(kv compute_s "$line")" "$(kv window_logloss "$line")"
            if [ -z "${RATE[thr.$model.$t]:-}" ] || python3 -c "import sys; sys.exit(0 if $r > ${RATE[thr.$model.$t]} else 1)"; then
                RATE[thr.$model.$t]=$r
            fi
            LL[thr.$model.$t]=$(kv window_logloss "$line")
        done
    done
done
unset IN
for model in fm deepfm; do
    for t in $THREADS; do
        [ "$t" = 1 ] && continue
        ratio=$(calc "round(${RATE[thr.$model.$t]} / ${RATE[thr.$model.1]}, 3)")
        if [ "$t" = 2 ]; then
            echo "  $model threads 2/1 examples/s $ratio   (${RATE[thr.$model.2]} vs ${RATE[thr.$model.1]}; target >= 1.7 on 2 cores: $(verdict "$ratio >= 1.7"))"
        else
            echo "  $model threads $t/1 examples/s $ratio   (${RATE[thr.$model.$t]} vs ${RATE[thr.$model.1]})"
        fi
    done
    echo "  $model logloss threads 2 vs 1 $(calc "${LL[thr.$model.2]} - ${LL[thr.$model.1]}")   (final window; equal up to float order)"
done

# On a machine with the CUDA backend and a GPU: CUDA vs CPU at batch 8192, latent 64 (in-process
# shard, so that the backend is what differs).
echo
if "$SPARROW" trainer --in "file:$TMP/data.pb" --shards inproc --backend cuda --max-examples 10 \
    --http-port -1 >"$TMP/cuda-probe.log" 2>&1; then
    echo "== CUDA vs CPU, FM k=64, batch 8192, in-process shard"
    for be in cpu cuda; do
        line=$("$SPARROW" trainer --in "file:$TMP/data.pb" --shards inproc --backend $be \
            --model fm --latent-dim 64 --batch 8192 --http-port -1 --set trainer.lr=$LR \
            --set trainer.log.interval=0 2>&1 | grep ' finished ' | tail -1)
        record "gpu.$be" "$line"
    done
    echo "  cuda/cpu examples/s $(calc "round(${RATE[gpu.cuda]} / ${RATE[gpu.cpu]}, 3)")"
else
    echo "== CUDA vs CPU: skipped ($(grep -o 'error="[^"]*"' "$TMP/cuda-probe.log" | head -1))"
fi
