#!/usr/bin/env bash
# salus-mlp on simgpu follows the pure-CPU reference (--cpu-reference): every printed
# loss and the final loss agree within a relative difference of 1e-5, with the
# activations allocated per iteration, kept, or stream-ordered. The comparison must
# also be able to fail: a reference with another learning rate has to be rejected.
source "$(dirname "${BASH_SOURCE[0]}")/workload_lib.sh"
workload_use_simgpu

MLP="$WORKLOAD_BIN/salus-mlp"
ARGS=(--seed 7 --inputs 24 --hidden 48 --outputs 6 --batch 16 --samples 200 --iterations 120 --lr 0.05
      --print-every 10)
TOLERANCE=1e-5

"$MLP" "${ARGS[@]}" --cpu-reference > "$WORKLOAD_TMP/cpu.out" || workload_fail "salus-mlp --cpu-reference"
grep -q '^final_loss=' "$WORKLOAD_TMP/cpu.out" || workload_fail "no final_loss line from the CPU reference"

# the training must actually learn: the last printed loss well under the first
first_loss=$(awk -F'loss=' '/^iter=/ { print $2; exit }' "$WORKLOAD_TMP/cpu.out")
last_loss=$(awk -F'final_loss=' '/^final_loss=/ { print $2 }' "$WORKLOAD_TMP/cpu.out")
awk -v first="$first_loss" -v last="$last_loss" 'BEGIN { exit !(last < 0.8 * first) }' ||
    workload_fail "loss does not fall: first $first_loss, final $last_loss"
echo "CPU reference: first printed loss $first_loss, final $last_loss"

for mode in "" --keep-activations --async-alloc; do
    echo "simgpu ${mode:-(per-iteration cuMemAlloc)}:"
    "$MLP" "${ARGS[@]}" $mode > "$WORKLOAD_TMP/simgpu.out" || workload_fail "salus-mlp $mode on simgpu"
    workload_mlp_compare "$WORKLOAD_TMP/cpu.out" "$WORKLOAD_TMP/simgpu.out" "$TOLERANCE" || workload_fail "simgpu $mode differs from the CPU reference"
done

# the check must be able to fail
"$MLP" "${ARGS[@]/#0.05/0.04}" --cpu-reference > "$WORKLOAD_TMP/other.out" || workload_fail "salus-mlp --lr 0.04 --cpu-reference"
if workload_mlp_compare "$WORKLOAD_TMP/other.out" "$WORKLOAD_TMP/simgpu.out" "$TOLERANCE" > "$WORKLOAD_TMP/negative.txt"; then
    workload_fail "a reference with another learning rate was accepted"
fi
echo "negative check: --lr 0.04 reference rejected ($(tail -1 "$WORKLOAD_TMP/negative.txt"))"
echo PASS
