#!/usr/bin/env bash
# salus.torch across two nodes (network namespaces, a salusd --cluster each, a real etcd): the
# example examples/torch_ps_mlp.py trained with DistributedOptimizer by 2 ranks, one per node
# (bsp, rule sgd, 16 rows each, averaged gradients, momentum 0, 50 steps; the tables' shards
# served by the group's nodes, n1 and n2), ends with the loss and weights of one process training on the global batch
# of 32 with torch.optim.SGD (relative difference <= 1e-5). Python: the build's venv.
. "$(dirname "$0")/lib.sh"
TTL=${TTL:-5}
. "$(dirname "$0")/nodes.sh"
. "$(dirname "$0")/ps_nodes.sh" # ps_rank, ranks_wait

PY="$SALUS_BUILD_DIR/venv/bin/python"
EXAMPLE="$CLUSTER_SOURCE_DIR/examples/torch_ps_mlp.py"
[ -x "$PY" ] || fail "no venv at $SALUS_BUILD_DIR/venv (tools/setup.sh makes it)"
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=256
nodes_up 2

"$PY" "$EXAMPLE" --mode single --out "$WORK/single.pt" >"$WORK/single.out" 2>&1 ||
    fail "the single process failed: $(cat "$WORK/single.out")"
G="py-cl-$$"
chmod 0755 "$WORK"
ps_rank 1 "$G" 2 0 r0 "$PY" "$EXAMPLE" --table eq --out "$WORK/salus.pt"
ps_rank 2 "$G" 2 1 r1 "$PY" "$EXAMPLE" --table eq
ranks_wait 180 r0 r1
echo "one process, torch.optim.SGD on the global batch of 32:"
cat "$WORK/single.out"
echo "2 ranks on nodes n1 and n2, DistributedOptimizer (bsp, rule sgd), 16 rows each:"
cat "$WORK/r0.out" "$WORK/r1.out"
"$PY" - "$WORK/single.pt" "$WORK/salus.pt" "$WORK/single.out" "$WORK/r0.out" <<'PYEOF' ||
import re, sys, torch
ref, got = torch.load(sys.argv[1]), torch.load(sys.argv[2])
loss = [float(re.search(r"final_loss (\S+)", open(p).read()).group(1)) for p in sys.argv[3:5]]
w_rel = float((got - ref).norm() / ref.norm())
loss_rel = abs(loss[1] - loss[0]) / loss[0]
print(f"relative difference: loss {loss_rel:.3g}, weights {w_rel:.3g} (bound 1e-05)")
sys.exit(0 if w_rel <= 1e-5 and loss_rel <= 1e-5 else 1)
PYEOF
    fail "the two nodes' training is not the single process's"
qgrep -x "rank 0 max_staleness 0 steps 50" "$WORK/r0.out" || fail "rank 0: $(cat "$WORK/r0.out")"
pass "DistributedOptimizer on 2 namespace nodes: the loss and weights of one process's SGD"
