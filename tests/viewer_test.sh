#!/usr/bin/env bash
# The viewer page in headless Chromium (tests/viewer_test.py). Installs what
# it needs from Debian, like the Makefile's deps target: no npm, no download
# of a browser of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
packages="chromium chromium-driver python3-selenium python3-pil python3-numpy python3-rangehttpserver fonts-dejavu-core fonts-wqy-microhei"
missing=$(for p in $packages; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"; done)
if [ -n "$missing" ]; then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    echo "installing:" $missing
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=600 $missing >/dev/null
fi
# Debian's python3-selenium is for the system interpreter, not one earlier on PATH.
# Both run, whatever the first gives; either failing fails the test.
rc=0
/usr/bin/python3 tests/viewer_test.py "$@" || rc=1
# The story: a .npy table's titles and distances, the starts, URLs' credentials never shown.
/usr/bin/python3 tests/viewer_story_test.py || rc=1
exit $rc
