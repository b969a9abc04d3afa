#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One graph across the ranks of an mpirun job: `mpirun -np 3 floe run GRAPH --cluster env`
# takes the cluster from PMIx (rank 0 the chief, ranks 1 and 2 workers 0 and 1; each rank
# listens on a free port of 127.0.0.1, all ranks being on this machine); rank 0 runs the step
# and writes the fetches, the other ranks serve until it is done, and every rank exits 0.
# The values must equal the one-process run of the same graph without device requests, byte
# for byte. Then floe train (mlp, sync; lstm, async) with rank 1 a ps task (--ps-tasks 1) between
# rank 0 and rank 2. Skipped (77) without mpirun, PMIx in the build or the fabric transport.
set -u
b=${top_builddir:-..}
FLOE="$b/tools/floe"
# the CPU plugin and the transports (make check names their folders)
FLOE_PLUGIN_PATH="${FLOE_PLUGIN_PATH:+$FLOE_PLUGIN_PATH:}${FLOE_TRANSPORT_DIR:-}:${FLOE_FABRIC_DIR:-}"
export FLOE_PLUGIN_PATH
NPY="${top_srcdir:-..}/tests/cli/npy.py"
command -v mpirun >/dev/null ||
  { echo "SKIP: mpirun not found (install openmpi-bin to run graphs under a launcher)"; exit 77; }
grep -q '^#define FLOE_HAVE_PMIX_H 1' "$b/config.h" ||
  { echo "SKIP: Floe was built without pmix.h (install libpmix-dev and reconfigure)"; exit 77; }
[ -e "$b/plugins/transport/fabric/.libs/floe-transport-fabric.so" ] ||
  { echo "SKIP: the fabric transport was not built (configure found no libfabric)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }

# An mpirun job has a chief and workers, no ps: chain's ps part goes on worker 1.
"$b/tests/dist/make_cluster_graphs" "$tmp" 2 --ps-on-worker || { echo "FAIL: make_cluster_graphs"; exit 1; }
python3 "$NPY" write "$tmp/x.npy" 2,3 1,2,3,-1,0.5,4
mkdir -p "$tmp/ref" "$tmp/out"
"$FLOE" run "$tmp/chain_local.floe" --feed x="$tmp/x.npy" --fetch y --fetch z --out "$tmp/ref" \
  >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; echo "FAIL: the one-process reference run"; exit 1; }

printf '%s' "0123456789abcdef0123456789abcdef" >"$tmp/secret"
chmod 600 "$tmp/secret"
# Open MPI refuses root unless told; the tests run as whoever runs make check.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No cluster may come from the environment: PMIx must be the source.
unset FLOE_CONFIG TF_CONFIG FLOE_SERVER_HOST FLOE_JOB_SECRET
export FLOE_TRANSPORT=fabric FLOE_JOB_SECRET_FILE="$tmp/secret"
# mpirun -x passes a variable to every rank (one not set gets a warning: only those set).
mpi() {
  xs=""
  for v in FLOE_PLUGIN_PATH FLOE_TRANSPORT FLOE_JOB_SECRET_FILE FLOE_NO_INSTALL_DIR FLOE_LOG_LEVEL; do
    eval "[ -n \"\${$v+x}\" ]" && xs="$xs -x $v"
  done
  n=$1
  shift
  timeout 60 mpirun -np "$n" --oversubscribe $xs "$@"
}

echo "# mpirun -np 3 floe run chain.floe --cluster env"
if mpi 3 "$FLOE" run "$tmp/chain.floe" --cluster env --feed x="$tmp/x.npy" --fetch y \
    --fetch z --out "$tmp/out" >"$tmp/out.txt" 2>"$tmp/err"; then
  ok
  if cmp -s "$tmp/out/y.npy" "$tmp/ref/y.npy" && cmp -s "$tmp/out/z.npy" "$tmp/ref/z.npy"; then ok
  else
    bad "values under mpirun differ from one process"
    python3 "$NPY" read "$tmp/out/y.npy"; python3 "$NPY" read "$tmp/ref/y.npy"
  fi
  # Only the chief prints the fetches.
  n=$(grep -c '^y: ' "$tmp/out.txt")
  if [ "$n" = 1 ]; then ok; else bad "expected one rank to print y, $n did"; cat "$tmp/out.txt"; fi
else
  bad "mpirun -np 3 floe run exited $?"; cat "$tmp/out.txt" "$tmp/err"
fi

# A rank with no secret: every rank ends, the error says how to pass one, mpirun fails.
echo "# a job without the secret"
if (unset FLOE_JOB_SECRET_FILE FLOE_JOB_SECRET; mpi 2 "$FLOE" run "$tmp/chain_local.floe" \
    --cluster env --feed x="$tmp/x.npy" --fetch y) >"$tmp/out.txt" 2>"$tmp/err"; then
  bad "a job without a secret succeeded"
elif grep -q 'mpirun -x FLOE_JOB_SECRET_FILE' "$tmp/err"; then ok; else
  bad "no secret: the error does not say how to pass it"; cat "$tmp/err"; fi

# floe train under mpirun: rank 0 the chief, rank 1 the ps (--ps-tasks 1), rank 2 a worker;
# sync replication; every rank exits 0 and the chief reports the cluster it trained on.
DATA=/usr/share/datasets/fashion-mnist
if [ -e "$DATA/train-images-idx3-ubyte.gz" ] || [ -e "$DATA/train-images-idx3-ubyte" ]; then
  echo "# mpirun -np 3 floe train --cluster env --ps-tasks 1 --replication sync"
  if mpi 3 "$FLOE" train --cluster env --ps-tasks 1 --replication sync --data "$DATA" \
      --limit 1280 --epochs 1 --threads 1 --json >"$tmp/train.txt" 2>"$tmp/err"; then
    if python3 - "$tmp/train.txt" <<'PY'
import json, sys
# every training task writes a line, in no set order under mpirun: the chief's
lines = [l for l in open(sys.argv[1]) if l.startswith("{") and '"/job:chief/' in l]
d = json.loads(lines[-1])
ok = (d["replicas"] == 2 and d["ps_tasks"] == 1 and d["replication"] == "sync"
      and d["global_step"] == 10 and d["cluster_task"] == "/job:chief/replica:0/task:0")
print("mpirun train: %d replicas, %d ps, global step %d" % (d["replicas"], d["ps_tasks"],
      d["global_step"]))
sys.exit(0 if ok else 1)
PY
    then ok; else bad "floe train under mpirun: $(cat "$tmp/train.txt")"; fi
  else
    bad "mpirun -np 3 floe train: $(tail -5 "$tmp/err")"
  fi
fi

# The language model the same way, async, its embedding and softmax on the ps (1 shard).
if [ -d /usr/share/games/fortunes ]; then
  echo "# mpirun -np 3 floe train --model lstm --cluster env --ps-tasks 1"
  if mpi 3 "$FLOE" train --model lstm --cluster env --ps-tasks 1 --vocab 500 --hidden 32 \
      --layers 1 --batch 8 --bptt 8 --steps 20 --eval-windows 2 --threads 1 --json \
      >"$tmp/lstm.txt" 2>"$tmp/err"; then
    if python3 - "$tmp/lstm.txt" <<'PY'
import json, sys
# every training task writes a line, in no set order under mpirun: the chief's
lines = [l for l in open(sys.argv[1]) if l.startswith("{") and '"/job:chief/' in l]
d = json.loads(lines[-1])
# one a window: 20, or up to 2 windows in flight more
ok = (d["model"] == "lstm" and d["replicas"] == 2 and d["ps_tasks"] == 1
      and d["softmax_shards"] == 1 and 20 <= d["global_step"] <= 22)
print("mpirun lstm: %d replicas, %d ps, global step %d" % (d["replicas"], d["ps_tasks"],
      d["global_step"]))
sys.exit(0 if ok else 1)
PY
    then ok; else bad "floe train --model lstm under mpirun: $(cat "$tmp/lstm.txt")"; fi
  else
    bad "mpirun -np 3 floe train --model lstm: $(tail -5 "$tmp/err")"
  fi
fi

echo "test_mpirun: $pass passed, $fails failed"
[ "$fails" = 0 ]
