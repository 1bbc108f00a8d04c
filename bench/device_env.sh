# Sourced by the device campaigns (bench/campaign.sh, bench/gram_campaign.sh):
# unpacks the carried .gl debs (Vulkan loader, libglvnd, LuaJIT, lua-argparse;
# bench/README.md#running-a-campaign-on-an-offline-nvidia-machine) and sets the paths and the NVIDIA driver file.
# On the device the system's libraries go into / (DEVICE_ENV_ROOT) and LuaJIT
# into /tmp/x (DEVICE_ENV_TOOLS), from .gl (DEVICE_ENV_DEBS); the bench smoke
# test (tests/peers_bench_smoke.sh) points all three at folders of its own.
debs=${DEVICE_ENV_DEBS:-.gl} root=${DEVICE_ENV_ROOT:-/} tools=${DEVICE_ENV_TOOLS:-/tmp/x}
for f in "$debs"/libvulkan1*.deb "$debs"/libglvnd0*.deb "$debs"/libegl1*.deb "$debs"/libopengl0*.deb \
         "$debs"/libgl1*.deb "$debs"/libglx0*.deb "$debs"/libgles2*.deb; do dpkg -x "$f" "$root"; done
if [ "$root" = / ]; then
    ldconfig
    export LD_LIBRARY_PATH=$tools/usr/lib/x86_64-linux-gnu
else
    export LD_LIBRARY_PATH=$tools/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu
fi
mkdir -p "$tools" && for f in "$debs"/luajit*.deb "$debs"/libluajit*.deb "$debs"/lua-argparse*.deb "$debs"/lua-dkjson*.deb; do dpkg -x "$f" "$tools"; done
export PATH=$tools/usr/bin:$PATH
export LUA_PATH="$tools/usr/share/lua/5.1/?.lua;./?.lua;lua/?.lua;;" LUA_CPATH="build/?.so;;"
if ! bin/divgpu info >/dev/null 2>&1; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
