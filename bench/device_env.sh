# Sourced by the device campaigns (bench/campaign.sh, bench/gram_campaign.sh):
# unpacks the carried .gl debs (Vulkan loader, libglvnd, LuaJIT, lua-argparse;
# bench/README.md#running-a-campaign-on-an-offline-nvidia-machine) and sets the paths and the NVIDIA driver file.
for f in .gl/libvulkan1*.deb .gl/libglvnd0*.deb .gl/libegl1*.deb .gl/libopengl0*.deb \
         .gl/libgl1*.deb .gl/libglx0*.deb .gl/libgles2*.deb; do dpkg -x "$f" /; done
ldconfig
mkdir -p /tmp/x && for f in .gl/luajit*.deb .gl/libluajit*.deb .gl/lua-argparse*.deb .gl/lua-dkjson*.deb; do dpkg -x "$f" /tmp/x; done
export PATH=/tmp/x/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/x/usr/lib/x86_64-linux-gnu
export LUA_PATH="/tmp/x/usr/share/lua/5.1/?.lua;./?.lua;lua/?.lua;;" LUA_CPATH="build/?.so;;"
if ! bin/divgpu info >/dev/null 2>&1; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
