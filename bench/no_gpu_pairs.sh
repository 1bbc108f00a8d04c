#!/usr/bin/env bash
# Without a GPU: the CPU method against divgpu on lavapipe and two numpy
# peers, the same job, in alternating rounds on one machine:
#   numpy_filtered  bench/peers/numpy_filtered.py: SGEMM scores, a proven
#                   bound, the contract's chain in the window (the contract's
#                   bytes by construction; the same-bytes numpy peer)
#   numpy_sgemm     bench/peers/numpy_direct.py --chain sgemm: c @ E.T a step
#                   (timing only: not the contract's arithmetic, its bytes
#                   compared, never claimed)
#   torch_gram      bench/peers/torch_gram.py --device cpu: the Gram filter
#                   (divgpu's algorithm and certificate) in PyTorch, on the
#                   CPU (the contract's bytes)
#   torch_direct    bench/peers/torch_direct.py --device cpu: PyTorch direct,
#                   one SGEMM a step (timing only, as numpy_sgemm)
# The PyTorch sides run in the peers' virtual environment ($PEERS_PYTHON, else $PEERS_VENV,
# default ~/.cache/divgpu/peers-venv; tests/peers_test.sh makes it). Every
# side uses every core (rayon, OpenBLAS and PyTorch's threads by default).
# Each round also measures the machine's ceilings with PyTorch
# (bench/peers/ceilings.py --device cpu --size 2048: copy bandwidth, SGEMM,
# DGEMM) into ceilings.tsv beside RAW, with the job's N, D, sequences and
# length, from which bench/render_nogpu.py computes each algorithm's floor.
# Each run is a whole command (table load, set-up and writing included on
# every side: the span of divgpu's `done in` plus process start). Wall and
# CPU (user + sys) seconds go to RAW (TSV), with the sha256 of each side's
# sequences and whether they are the CPU method's of that round
# (same_as_cpu). After the rounds, one `mirror` row: `bin/divgpu verify` of
# the last round's CPU-method cache against the CPU mirror (every sequence,
# or a seeded sample where the whole check would take long); its sha256 is
# that cache's when the mirror agreed, else "differs", so a side whose
# sha256 equals the mirror row's gives the mirror's bytes.
#
#   bench/no_gpu_pairs.sh JOB ROUNDS RAW
#   JOB: poems     the shipped poems, every start in full (make run's job)
#        fortunes  Debian's fortunes, 4,000 x 384 (all-MiniLM-L6-v2;
#                  bench/tables/fortunes.py builds it, $FORTUNES_TABLE or
#                  ~/.cache/divgpu/tables/fortunes/fortunes.npy),
#                  512 starts sample:512:1 x 200 steps
#        synth     divgpu synth 4000 x 384 (16 clusters, seed 1), 512 starts
#                  (0:512) x 200 steps
#        tiny      synth 300 x 16, 8 starts x 20 steps (the smoke test)
# The peers take `--starts` as a list: a `sample:K:SEED` is expanded for
# them by docs/cli.md#starts's algorithm (divgpu gets the sample itself).
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:?JOB}; rounds=${2:?ROUNDS}; raw=${3:?RAW}
py=/usr/bin/python3   # Debian's numpy (OpenBLAS where libopenblas0 is installed)
torch_py=${PEERS_PYTHON:-${PEERS_VENV:-$HOME/.cache/divgpu/peers-venv}/bin/python}
"$torch_py" -c 'import torch' 2>/dev/null \
    || { echo "no_gpu_pairs: no PyTorch at $torch_py (tests/peers_test.sh makes the peers' environment)" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
check=()              # verify's scope: every sequence unless set
case $job in
    poems) table=assets/embeddings/all-MiniLM-L6-v2/embeddings.json; span=() ;;  # the mirror checks every sequence: 5 min on 2 cores
    fortunes) table=${FORTUNES_TABLE:-$HOME/.cache/divgpu/tables/fortunes/fortunes.npy}
           [ -s "$table" ] || { echo "no_gpu_pairs: no $table (python bench/tables/fortunes.py builds it)" >&2; exit 2; }
           span=(--starts sample:512:1 --length 200) ;;
    synth) table=$work/t.json; bin/divgpu synth --n 4000 --dim 384 --clusters 16 --seed 1 --out "$table" >/dev/null
           span=(--starts 0:512 --length 200) ;;
    tiny)  table=$work/t.json; bin/divgpu synth --n 300 --dim 16 --seed 2 --out "$table" >/dev/null
           span=(--starts 0:8 --length 20) ;;
    *) echo "no_gpu_pairs: unknown job '$job' (poems, fortunes, synth, tiny)" >&2; exit 2 ;;
esac
# The table's N and D (a sample's expansion and the ceilings' floors read them).
read -r n dim < <("$py" -c 'import sys, json, numpy as np
p = sys.argv[1]
if p.endswith(".npy"): print(*np.load(p, mmap_mode="r").shape)
else:
    e = json.load(open(p))["embeddings"]; print(len(e), len(e[0]))' "$table")
# The peers' span: a sample expanded to its list (ascending, as divgpu orders it).
peer_span=("${span[@]}")
if [[ ${span[1]:-} == sample:* ]]; then
    IFS=: read -r _ k seed <<<"${span[1]}"
    peer_span[1]=$("$py" - "$n" "$k" "$seed" <<'EOF'
import sys
M = 2**64
def sample_starts(n, k, seed):  # docs/cli.md#starts, verbatim
    state = seed
    def next_u64():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) % M
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % M
        return z ^ (z >> 31)
    def below(m):
        while True:
            x = next_u64()
            if x >= M % m:
                return x % m
    chosen = set()
    for j in range(n - k, n):
        t = below(j + 1)
        chosen.add(j if t in chosen else t)
    return sorted(chosen)
print(",".join(map(str, sample_starts(*map(int, sys.argv[1:])))))
EOF
)
fi
# The job's sequences and length, from the span (every item in full where none is given).
sequences=$n length=$n
if [ ${#peer_span[@]} -gt 0 ]; then
    starts=${peer_span[1]} length=${peer_span[3]}
    case $starts in
        *:*) sequences=$(( ${starts#*:} - ${starts%%:*} )) ;;
        *) sequences=$(tr ',' '\n' <<<"$starts" | grep -c .) ;;
    esac
fi
sides=(cpu lavapipe numpy_filtered numpy_sgemm torch_gram torch_direct)
command_of() {
    case $1 in
        cpu) echo env -u DIVGPU_DEVICE bin/divgpu run --method cpu --embeddings "$table" "${span[@]}" --out "$2" --quiet ;;
        lavapipe) echo env DIVGPU_DEVICE=0 bin/divgpu run --embeddings "$table" "${span[@]}" --out "$2" --quiet ;;
        numpy_filtered) echo "$py" bench/peers/numpy_filtered.py --embeddings "$table" "${peer_span[@]}" --out "$2" ;;
        numpy_sgemm) echo "$py" bench/peers/numpy_direct.py --chain sgemm --embeddings "$table" "${peer_span[@]}" --out "$2" ;;
        torch_gram) echo "$torch_py" bench/peers/torch_gram.py --device cpu --embeddings "$table" "${peer_span[@]}" --out "$2" ;;
        torch_direct) echo "$torch_py" bench/peers/torch_direct.py --device cpu --embeddings "$table" "${peer_span[@]}" --out "$2" ;;
    esac
}
# The sequences' hash (the headers of the peers' caches and divgpu's differ in their writer fields).
seq_sha() {
    "$py" -c 'import hashlib, json, sys; print(hashlib.sha256(json.dumps(json.load(open(sys.argv[1]))["sequences"]).encode()).hexdigest())' "$1"
}
cpu_sum() { awk -v u="$1" -v s="$2" 'BEGIN { printf "%.2f", u + s }'; }
[ -s "$raw" ] || printf 'job\tround\tside\twall_s\tcpu_s\tsha256\tsame_as_cpu\n' >"$raw"
# The machine's load while the rounds run, every 30 s, to load.tsv beside RAW
# (the machine may be shared: the walls carry its load, the renderer says how much).
load=$(dirname "$raw")/load.tsv
[ -s "$load" ] || printf 'utc\tload1\tload5\tload15\n' >"$load"
( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while :; do
      printf '%s\t%s\n' "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' '\t')" >>"$load"
      sleep 30 & nap=$!; wait "$nap"
  done ) >/dev/null 2>&1 &
sampler=$!
trap 'kill "$sampler" 2>/dev/null; rm -rf "$work"' EXIT
# The machine beside the raw file: its processor, cores, the load when the job began, and the peers' numpy.
{ echo "$job: $(date -u +%FT%TZ), $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD), table $(sha256sum "$table" | cut -c1-16), numpy $("$py" -c 'import numpy; print(numpy.__version__)')"; } >>"$(dirname "$raw")/machine.txt"
for ((r = 1; r <= rounds; r++)); do
    # Alternate the order each round so no side always runs first.
    order=("${sides[@]}"); ((r % 2 == 0)) && order=(torch_direct torch_gram numpy_sgemm numpy_filtered lavapipe cpu)
    # The machine's ceilings in this round, beside the job's size (the renderer's floors).
    "$torch_py" bench/peers/ceilings.py --device cpu --size "${CEILING_SIZE:-2048}" --repeats 5 --copy-gib 0.5 \
        | "$py" -c 'import json, sys
c = json.loads(sys.stdin.read()); job, r, n, dim, seqs, length, path = sys.argv[1:]
new = not __import__("os").path.exists(path)
with open(path, "a") as f:
    if new: f.write("job\tround\tn\tdim\tsequences\tlength\tcopy_bytes_per_s\tsgemm_flops\tdgemm_flops\ttorch\n")
    rates = [f"{c[k] * 1e12:.4g}" for k in ("copy_tb_per_s", "sgemm_tflops", "dgemm_tflops")]
    f.write("\t".join([job, r, n, dim, seqs, length, *rates, c["torch"]]) + "\n")' \
        "$job" "$r" "$n" "$dim" "$sequences" "$length" "$(dirname "$raw")/ceilings.tsv"
    declare -A sha=() rows=()
    for side in "${order[@]}"; do
        out=$work/$side.json
        rm -f "$out"
        /usr/bin/time -f '%e %U %S' -o "$work/time" $(command_of "$side" "$out") >/dev/null
        read -r wall user sys <"$work/time"
        sha[$side]=$(seq_sha "$out")
        rows[$side]="$job	$r	$side	$wall	$(cpu_sum "$user" "$sys")"
        printf '%s\t%d\t%s\t%s\t%s\t%s\n' "$job" "$r" "$side" "$wall" "$(cpu_sum "$user" "$sys")" "${sha[$side]}" >&2
    done
    # Written when the round is whole, in the sides' order, each marked against the CPU method's bytes.
    for side in "${order[@]}"; do
        same=no; [ "${sha[$side]}" = "${sha[cpu]}" ] && same=yes
        printf '%s\t%s\t%s\n' "${rows[$side]}" "${sha[$side]}" "$same" | tee -a "$raw"
    done
    unset sha rows
done
# The mirror's word on the last round's CPU-method cache (not timed against anything).
/usr/bin/time -f '%e %U %S' -o "$work/time" bin/divgpu verify --embeddings "$table" --cache "$work/cpu.json" \
    "${check[@]}" --quiet >/dev/null && msha=$(seq_sha "$work/cpu.json") || msha=differs
read -r wall user sys <"$work/time"
same=no; [ "$msha" = "$(seq_sha "$work/cpu.json")" ] && same=yes
printf '%s\t%d\t%s\t%s\t%s\t%s\t%s\n' "$job" 0 "mirror${check[*]:+ (${check[*]})}" "$wall" "$(cpu_sum "$user" "$sys")" "$msha" "$same" | tee -a "$raw"
