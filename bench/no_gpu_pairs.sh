#!/usr/bin/env bash
# Without a GPU: the CPU method against divgpu on lavapipe and the numpy
# SGEMM peer (bench/peers/numpy_direct.py --chain sgemm, timing only, its
# bytes compared), the same job, in alternating rounds on one machine.
# Each run is a whole command (table load, set-up and writing included on
# every side: the span of divgpu's `done in` plus process start). Wall and
# CPU (user + sys) seconds go to RAW (TSV), with the sha256 of each cache's
# sequences.
#
#   bench/no_gpu_pairs.sh JOB ROUNDS RAW
#   JOB: poems   the shipped poems, every start in full (make run's job)
#        synth   divgpu synth 4000 x 384 (16 clusters, seed 1), 512 starts
#                (0:512) x 200 steps
#        tiny    synth 300 x 16, 8 starts x 20 steps (the smoke test)
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:?JOB}; rounds=${2:?ROUNDS}; raw=${3:?RAW}
py=/usr/bin/python3   # Debian's numpy (OpenBLAS where libopenblas0 is installed)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
case $job in
    poems) table=assets/embeddings/all-MiniLM-L6-v2/embeddings.json; span=() ;;
    synth) table=$work/t.json; bin/divgpu synth --n 4000 --dim 384 --clusters 16 --seed 1 --out "$table" >/dev/null
           span=(--starts 0:512 --length 200) ;;
    tiny)  table=$work/t.json; bin/divgpu synth --n 300 --dim 16 --seed 2 --out "$table" >/dev/null
           span=(--starts 0:8 --length 20) ;;
    *) echo "no_gpu_pairs: unknown job '$job' (poems, synth, tiny)" >&2; exit 2 ;;
esac
sides=(cpu lavapipe numpy_sgemm)
command_of() {
    case $1 in
        cpu) echo env -u DIVGPU_DEVICE bin/divgpu run --method cpu --embeddings "$table" "${span[@]}" --out "$2" --quiet ;;
        lavapipe) echo env DIVGPU_DEVICE=0 bin/divgpu run --embeddings "$table" "${span[@]}" --out "$2" --quiet ;;
        numpy_sgemm) echo "$py" bench/peers/numpy_direct.py --chain sgemm --embeddings "$table" "${span[@]}" --out "$2" ;;
    esac
}
[ -s "$raw" ] || printf 'job\tround\tside\twall_s\tcpu_s\tsha256\n' >"$raw"
# The machine beside the raw file: its processor, cores, and the load when the job began.
{ echo "$job: $(date -u +%FT%TZ), $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"; } >>"$(dirname "$raw")/machine.txt"
for ((r = 1; r <= rounds; r++)); do
    # Alternate the order each round so no side always runs first.
    order=("${sides[@]}"); ((r % 2 == 0)) && order=(numpy_sgemm lavapipe cpu)
    for side in "${order[@]}"; do
        out=$work/$side.json
        rm -f "$out"
        /usr/bin/time -f '%e %U %S' -o "$work/time" $(command_of "$side" "$out") >/dev/null
        read -r wall user sys <"$work/time"
        # The sequences' hash (the headers of the peer's cache and divgpu's differ in their writer fields).
        sha=$("$py" -c 'import hashlib, json, sys; print(hashlib.sha256(json.dumps(json.load(open(sys.argv[1]))["sequences"]).encode()).hexdigest())' "$out")
        printf '%s\t%d\t%s\t%s\t%s\t%s\n' "$job" "$r" "$side" "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')" "$sha" | tee -a "$raw"
    done
done
