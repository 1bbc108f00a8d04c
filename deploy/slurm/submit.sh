#!/usr/bin/env bash
# Submits a sharded divgpu run to Slurm: the shards as one job array, then the
# merge, which waits for every task of the array to succeed
# (--dependency=afterok) and is cancelled if one fails. Prints the two job ids.
#
#   DIVGPU_EMBEDDINGS=emb.json DIVGPU_OUT_DIR=/shared/run1 [DIVGPU_SHARDS=4] \
#   [DIVGPU_LENGTH=L] [DIVGPU_STARTS=A:B] [DIVGPU_RUN_ARGS="--method gram"] \
#   [DIVGPU=/path/to/bin/divgpu] deploy/slurm/submit.sh [sbatch options for both jobs, e.g. --partition=gpu]
#
# DIVGPU defaults to this checkout's bin/divgpu. Logs: $DIVGPU_OUT_DIR/slurm-*.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${DIVGPU_EMBEDDINGS:?set DIVGPU_EMBEDDINGS to the embeddings.json}"
: "${DIVGPU_OUT_DIR:?set DIVGPU_OUT_DIR to a folder every node can write}"
shards=${DIVGPU_SHARDS:-4}
if ! [[ $shards =~ ^[1-9][0-9]*$ ]]; then echo "submit.sh: DIVGPU_SHARDS '$shards' is not a positive integer" >&2; exit 2; fi
mkdir -p "$DIVGPU_OUT_DIR"
# The jobs run in other shells (and on other nodes): absolute paths.
DIVGPU_EMBEDDINGS=$(realpath "$DIVGPU_EMBEDDINGS")
DIVGPU_OUT_DIR=$(realpath "$DIVGPU_OUT_DIR")
DIVGPU=${DIVGPU:-$here/../../bin/divgpu}
if [[ $DIVGPU == */* ]]; then DIVGPU=$(realpath "$DIVGPU"); fi
export DIVGPU DIVGPU_EMBEDDINGS DIVGPU_OUT_DIR DIVGPU_SHARDS=$shards
array=$(sbatch --parsable --array="0-$((shards - 1))" --export=ALL \
    --output="$DIVGPU_OUT_DIR/slurm-shard-%a.log" "$@" "$here/shards.sbatch")
array=${array%%;*}  # --parsable prints "id" or "id;cluster"
merge=$(sbatch --parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes --export=ALL \
    --output="$DIVGPU_OUT_DIR/slurm-merge.log" "$@" "$here/merge.sbatch")
merge=${merge%%;*}
echo "$array $merge"
