#!/bin/bash
# Two hosts on one machine: two network namespaces joined by a veth pair
# (10.77.0.1 and 10.77.0.2), an mpirun job with one rank in each (OpenMPI's
# plm_rsh_agent enters the other namespace instead of ssh; --mca btl
# tcp,self), so that stage messages and gradient all-reduces cross a
# network interface. Checks:
#   1. a two-stage pipeline on ranks 0 and 1 gives the loss log of the same
#      bundle run in one process, to the bit;
#   2. two data-parallel replicas give the losses of one process training
#      on the global batch, within 1e-5 relative;
#   3. the bytes really crossed the veth pair.
# Needs root (CI has it); prints SKIP and exits 0 where namespaces cannot
# be made.
#
# usage: scripts/two-host-mpi-test.sh GPIPE_OPT GPIPE_RUN WORK_DIR
set -euo pipefail
# Tools by path or on PATH.
opt=$(realpath "$(command -v "$1")") run=$(realpath "$(command -v "$2")")
work=$3
python=/usr/bin/python3
mkdir -p "$work"
work=$(realpath "$work")

if ! command -v mpirun > /dev/null; then
  echo "SKIP: no mpirun (install openmpi-bin)"
  exit 0
fi
ns0=gp$$h0 ns1=gp$$h1 veth0=gp$$v0 veth1=gp$$v1
cleanup() {
  ip netns del "$ns0" 2> /dev/null || true
  ip netns del "$ns1" 2> /dev/null || true
}
trap cleanup EXIT
if ! { ip netns add "$ns0" && ip netns add "$ns1"; } 2> "$work/netns.err"; then
  echo "SKIP: cannot make network namespaces here ($(head -1 "$work/netns.err"));" \
    "run as root on Linux"
  exit 0
fi
ip link add "$veth0" type veth peer name "$veth1"
ip link set "$veth0" netns "$ns0"
ip link set "$veth1" netns "$ns1"
ip -n "$ns0" addr add 10.77.0.1/24 dev "$veth0"
ip -n "$ns1" addr add 10.77.0.2/24 dev "$veth1"
for ns in "$ns0" "$ns1"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns0" link set "$veth0" up
ip -n "$ns1" link set "$veth1" up

# mpirun runs in the first namespace (host 10.77.0.1) and starts the other
# host's daemon through this agent, as it would through ssh.
cat > "$work/agent.sh" << AGENT
#!/bin/sh
host="\$1"; shift
case "\$host" in
  10.77.0.1) ns=$ns0 ;;
  10.77.0.2) ns=$ns1 ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$work/agent.sh"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' > "$work/hosts"
mpirun_two_hosts() {
  timeout 300 ip netns exec "$ns0" mpirun --allow-run-as-root \
    --hostfile "$work/hosts" -np 2 --mca plm_rsh_agent "$work/agent.sh" \
    --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 \
    --mca oob_tcp_if_include 10.77.0.0/24 "$@"
}
rx_bytes() {
  ip netns exec "$ns1" cat "/sys/class/net/$veth1/statistics/rx_bytes"
}

cd "$work"
"$python" - << 'PY'
import sys
import numpy as np
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128),
                      nn.ReLU(), nn.Linear(128, 10))
torch.onnx.export(model, torch.randn(16, 64), "mlp.onnx",
                  input_names=["input"], output_names=["logits"])
rng = np.random.RandomState(0)
np.savez("data.npz", input=rng.randn(256, 64).astype(np.float32),
         labels=rng.randint(0, 10, size=256).astype(np.int64))
PY
compile() {
  "$opt" mlp.onnx --mode=train --micro-batches=4 --optimizer=adamw \
    --lr=0.003 "$@" > /dev/null
}
train=(--train --data=data.npz --steps=30 --seed=1)
status=0
# train_two_hosts NAME: trains NAME.gpipe with one rank in each namespace
# (loss log NAME_hosts.csv); sets `received` to the bytes that crossed the
# veth pair meanwhile.
train_two_hosts() {
  local before
  before=$(rx_bytes)
  mpirun_two_hosts "$run" "$1.gpipe" "${train[@]}" \
    --loss-log="$1_hosts.csv" > "$1.out" 2>&1 || {
    cat "$1.out"
    echo "FAIL: the two-host run of $1.gpipe"
    exit 1
  }
  received=$(($(rx_bytes) - before))
}

# 1. A pipeline whose stages are on the two hosts.
compile --batch-size=16 --devices=r0:cpu:0,r1:cpu:1 -o pipeline.gpipe
train_two_hosts pipeline
pipeline_bytes=$received
"$run" pipeline.gpipe "${train[@]}" --in-one-process \
  --loss-log=pipeline_one.csv > /dev/null
if cmp -s pipeline_hosts.csv pipeline_one.csv; then
  echo "two hosts, pipeline r0:cpu:0,r1:cpu:1: 30 losses bit-identical to" \
    "one process ($pipeline_bytes bytes received over the veth)"
else
  echo "FAIL: the two-host pipeline's losses differ from one process"
  status=1
fi

# 2. Two data-parallel replicas, one on each host.
compile --batch-size=16 --data-parallel=2 -o replicas.gpipe
compile --batch-size=32 -o global.gpipe
train_two_hosts replicas
replica_bytes=$received
"$run" global.gpipe "${train[@]}" --loss-log=global_one.csv > /dev/null
if worst=$("$python" - << 'PY'
import numpy as np
a = np.loadtxt("replicas_hosts.csv", delimiter=",", skiprows=1)[:, 1]
b = np.loadtxt("global_one.csv", delimiter=",", skiprows=1)[:, 1]
worst = float(np.max(np.abs(a - b) / np.abs(b)))
print(f"{worst:.1e}")
raise SystemExit(0 if len(a) == len(b) == 30 and worst <= 1e-5 else 1)
PY
); then
  echo "two hosts, 2 data-parallel replicas: 30 losses within $worst of one" \
    "process on the global batch ($replica_bytes bytes received over the veth)"
else
  echo "FAIL: the two-host replicas' losses differ from one process ($worst)"
  status=1
fi
# Both jobs moved their messages over the veth: activations and gradients
# (pipeline), the all-reduce of 26 K float gradients per step (replicas).
if [ "$pipeline_bytes" -lt 100000 ] || [ "$replica_bytes" -lt 1000000 ]; then
  echo "FAIL: too few bytes crossed the veth pair" \
    "($pipeline_bytes, $replica_bytes)"
  status=1
fi
[ $status -eq 0 ] && echo "two-host MPI test: passed"
exit $status
