#!/usr/bin/env bash
# One device call of the acceptance campaign, as run through the lent machine:
#   bash bench/device_call.sh SECONDS MODE...
# Unpacks the carried module (.campaign/so/divgpu.so.xz, made by `make build`
# and `xz -k`), runs bench/acceptance_campaign.sh MODE... under SECONDS, then
# packs everything it wrote into the device's $OUT as two files (the call
# brings back only a few): summary.txt and all.tgz (results and logs).
# Its work folder (CAMPAIGN_WORK, default /tmp/campaign_out) is emptied first,
# so a warm machine's earlier call is not packed again. SMALL=1 (the dry run,
# tests/peers_bench_smoke.sh): the module built here, not the carried one.
set -uo pipefail
cd "$(dirname "$0")/.."
limit=$1; shift
back=${OUT:?the device sets OUT}
if [ "${SMALL:-0}" != 1 ] && [ -f .campaign/so/divgpu.so.xz ]; then
    mkdir -p build && xz -dc .campaign/so/divgpu.so.xz >build/divgpu.so
fi
work=${CAMPAIGN_WORK:-/tmp/campaign_out}
rm -rf "$work" && mkdir -p "$work/logs"
OUT=$work LOGS=$work/logs timeout "$limit" bash bench/acceptance_campaign.sh "$@"
echo "campaign exit $?" | tee -a "$work/summary.txt"
cp "$work/summary.txt" "$back/"
tar czf "$back/all.tgz" -C "$(dirname "$work")" "$(basename "$work")"
