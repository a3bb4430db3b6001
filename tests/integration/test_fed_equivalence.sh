#!/usr/bin/env bash
# salus-fed (tests/workloads/fed.cu): federated rounds that must agree bit for bit.
#   test_fed_equivalence.sh            the sequential mode (one process, the server's rule of
#                                      ps-core/ps_fed.c in-process; no daemon)
#   test_fed_equivalence.sh --salus    the same through salusd: each client a rank of a salus
#                                      group (salusctl run --group G --world N --rank R)
# Sequential: with 0 % stragglers and mu = 0, FedProx (policy partial) and FedAvg (policy drop)
# end with the same weights (the digest line and the --dump-weights file, byte for byte: %.9g is
# a float's exact text), every client being on time; with 50 % stragglers they do not (FedAvg
# drops the late clients' models, FedProx averages them in: fewer accepted clients, other
# weights), so the comparison can fail. Bad command lines (a proximal term with FedAvg, an
# unknown --fed, K > N, F > 1, E = 0, the salus mode without a rank, a world that is not N,
# --rank with --sequential): exit status 2 and the reason, nothing printed.
# --salus: N = 4 ranks, K = 3 per round, 3 rounds, under FedAvg and FedProx mu = 0 without
# stragglers: every rank ends with the weights of the sequential run of the same seed (file and
# digest), the two rules agree with each other, and the round lines (loss, accepted) are those of
# the sequential run (accepted equal, loss within 1e-5 relative: the loss table adds the
# clients' float sums in arrival order, the sequential run in client order); then one run with
# stragglers (FedProx mu = 1, 50 %): salus mode equals sequential mode there too.
. "$(dirname "$0")/lib.sh"

FED="$BIN/salus-fed"
[ -x "$FED" ] || fail "$FED not built"
MODE=sequential
[ "${1:-}" = "--salus" ] && MODE=salus
COMMON=(--clients 4 --per-round 3 --local-epochs 2 --rounds 3 --seed 11 --alpha 1 --beta 1)

# seq TAG ARGS...: salus-fed --sequential on simgpu (no daemon); $WORK/TAG.out, $WORK/TAG.w
seq_run() {
    local tag="$1"
    shift
    LD_LIBRARY_PATH="$SALUS_BUILD_DIR/lib/simgpu" "$FED" --sequential "${COMMON[@]}" "$@" \
        --dump-weights "$WORK/$tag.w" >"$WORK/$tag.out" 2>"$WORK/$tag.err" ||
        fail "salus-fed --sequential $* ($tag): $(cat "$WORK/$tag.err")"
}
digest() { grep '^fed_weights_digest ' "$1" || fail "no digest in $1: $(cat "$1")"; }
rounds() { grep '^round=' "$1"; }

# same_weights A B WHAT: the two runs' weight files and digests are identical
same_weights() {
    cmp -s "$WORK/$1.w" "$WORK/$2.w" || fail "$3: the weight files differ: $(diff "$WORK/$1.w" "$WORK/$2.w" | head -4)"
    [ "$(digest "$WORK/$1.out")" = "$(digest "$WORK/$2.out")" ] || fail "$3: digests differ"
    [ "$(wc -l <"$WORK/$1.w")" -eq 610 ] || fail "$3: $(wc -l <"$WORK/$1.w") weights, expected 610"
}

# same_rounds A B WHAT: the round lines agree (accepted equal, loss within 1e-5 relative)
same_rounds() {
    paste -d' ' <(rounds "$WORK/$1.out") <(rounds "$WORK/$2.out") | sed 's/[a-z_]*=//g' | awk '
        { n++; if ($1 != $4 || $3 != $6) bad = 1
          d = $2 - $5; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2
          if (d > 1e-5 * s) bad = 1 }
        END { exit (bad || n != 4) }' || fail "$3: round lines differ: $(paste -d'|' <(rounds "$WORK/$1.out") <(rounds "$WORK/$2.out"))"
}

seq_run avg0 --fed fedavg --stragglers 0
seq_run prox0 --fed fedprox --mu 0 --stragglers 0
grep -H '' "$WORK/avg0.out" "$WORK/prox0.out" | grep -E 'round=|digest'
same_weights avg0 prox0 "0 % stragglers, mu = 0"
[ "$(rounds "$WORK/avg0.out")" = "$(rounds "$WORK/prox0.out")" ] || fail "0 % stragglers: the round lines differ"
[ "$(rounds "$WORK/avg0.out" | grep -c 'accepted=3$')" -eq 3 ] || fail "not 3 accepted each round: $(rounds "$WORK/avg0.out")"
pass "sequential, 0 % stragglers, mu = 0: FedAvg and FedProx end with the same weights ($(digest "$WORK/avg0.out"))"

seq_run avg5 --fed fedavg --stragglers 0.5
seq_run prox5 --fed fedprox --mu 0 --stragglers 0.5
cmp -s "$WORK/avg5.w" "$WORK/prox5.w" && fail "50 % stragglers: FedAvg and FedProx gave the same weights"
a5=$(rounds "$WORK/avg5.out" | sed -n 's/.*accepted=//p' | awk '{ s += $1 } END { print s }')
p5=$(rounds "$WORK/prox5.out" | sed -n 's/.*accepted=//p' | awk '{ s += $1 } END { print s }')
[ "$a5" -lt "$p5" ] && [ "$p5" -eq 9 ] || fail "50 % stragglers: accepted FedAvg $a5, FedProx $p5 (expected fewer, 9)"
pass "sequential, 50 % stragglers: the weights differ (FedAvg accepted $a5 of 9 pushes, FedProx $p5)"
# bad command lines: exit status 2 and the reason, before any work
bad_usage() {
    local want="$1" rc=0
    shift
    LD_LIBRARY_PATH="$SALUS_BUILD_DIR/lib/simgpu" "$FED" "$@" >"$WORK/bad.out" 2>"$WORK/bad.err" || rc=$?
    [ "$rc" -eq 2 ] || fail "salus-fed $*: exit status $rc, expected 2"
    qgrep -F -e "$want" "$WORK/bad.err" || fail "salus-fed $*: no '$want' in: $(cat "$WORK/bad.err")"
    [ ! -s "$WORK/bad.out" ] || fail "salus-fed $*: printed $(cat "$WORK/bad.out")"
}
bad_usage "--mu 0.5: FedAvg has no proximal term" --sequential --fed fedavg --mu 0.5
bad_usage "--fed: expected 'fedavg' or 'fedprox', got 'fedsgd'" --sequential --fed fedsgd
bad_usage "--per-round 5 is more than the 4 clients" --sequential --clients 4 --per-round 5
bad_usage "--stragglers: expected a number in [0, 1], got '1.5'" --sequential --stragglers 1.5
bad_usage "--local-epochs: expected an integer in [1, 1000], got '0'" --sequential --local-epochs 0
bad_usage "the salus mode needs --rank and --world" --clients 4 --per-round 2
bad_usage "rank 1 of world 3: the world must be --clients (4)" --clients 4 --per-round 2 --rank 1 --world 3
bad_usage "--rank/--world are the salus mode's: not with --sequential" --sequential --rank 0 --world 4
pass "bad command lines: exit status 2 with the reason"
[ "$MODE" = sequential ] && exit 0

# ---- through salusd: each client a rank of a group ----
start_daemon --policy pack
trap cleanup_runs EXIT

# salus_run TAG ARGS...: the 4 clients of group TAG-$$, in the background; waits (bounded) for
# them; $WORK/TAG.R.out and TAG.R.w per rank
salus_run() {
    local tag="$1" r pids=()
    shift
    for r in 0 1 2 3; do
        "$SALUSCTL" run --name "$tag.$r" --group "$tag-$$" --world 4 --rank $r --sync asp --share-gpus \
            --persistent 64MiB --ephemeral 64MiB -- \
            "$FED" "${COMMON[@]}" "$@" --dump-weights "$WORK/$tag.$r.w" >"$WORK/$tag.$r.out" 2>&1 &
        pids+=($!)
        RUN_PIDS+=($!)
    done
    all_done() { local p; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
    wait_until 60 all_done || { "$SALUSCTL" ps >&2; tail -n 3 "$WORK/$tag".*.out >&2; fail "group $tag not done in 60 s"; }
    for r in 0 1 2 3; do
        wait "${pids[$r]}" || fail "$tag rank $r exited $?: $(tail -n 5 "$WORK/$tag.$r.out")"
    done
}

# the salus runs against the sequential ones: every rank's weights and rounds
salus_equals() {
    local tag="$1" seq="$2" r
    for r in 0 1 2 3; do
        cp "$WORK/$tag.$r.w" "$WORK/$tag-r$r.w"
        cp "$WORK/$tag.$r.out" "$WORK/$tag-r$r.out"
        same_weights "$tag-r$r" "$seq" "salus $tag rank $r vs sequential"
        same_rounds "$tag-r$r" "$seq" "salus $tag rank $r vs sequential"
    done
}

salus_run savg0 --fed fedavg --stragglers 0
salus_run sprox0 --fed fedprox --mu 0 --stragglers 0
grep -E 'round=|digest' "$WORK/savg0.0.out"
salus_equals savg0 avg0
salus_equals sprox0 prox0
pass "salus, 0 % stragglers, mu = 0: FedAvg and FedProx give the same weights, those of the sequential mode"

seq_run prox1 --fed fedprox --mu 1 --stragglers 0.5
salus_run sprox1 --fed fedprox --mu 1 --stragglers 0.5
salus_equals sprox1 prox1
pass "salus, FedProx mu = 1, 50 % stragglers: the weights and rounds of the sequential mode"
