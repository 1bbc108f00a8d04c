# Sourced by the shell tests that run `luarocks make`: Debian's lua-argparse
# and lua-dkjson are plain files LuaRocks does not see, so a config tells it
# they are provided (docs/install.md), and --only-server names an empty
# folder so luarocks never reaches the network.
#
# ensure_luarocks: installs Debian's luarocks when it is missing (a fresh
# machine: `make test` runs habits_test, which needs it, before install_test).
ensure_luarocks() {
    command -v luarocks >/dev/null && return 0
    local sudo=
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "installing: luarocks"
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq luarocks >/dev/null
}

# debian_luarocks CONFIG EMPTY_DIR ROCK=PACKAGE...: sets the array
# `luarocks` to run Debian's luarocks for Lua 5.1 with a config (written to
# CONFIG) providing each ROCK at its PACKAGE's installed version.
debian_luarocks() {
    local config=$1 empty=$2 pair version
    shift 2
    mkdir -p "$empty"
    {
        echo "rocks_provided = {"
        for pair in "$@"; do
            version=$(dpkg-query -W -f='${Version}' "${pair#*=}")
            version=${version#*:}  # no epoch
            echo "   [\"${pair%%=*}\"] = \"${version%-*}-1\","
        done
        echo "}"
    } >"$config"
    # divgpu is a LuaJIT (Lua 5.1) module; Debian's luarocks may default to 5.2.
    luarocks=(env LUAROCKS_CONFIG="$config" luarocks --lua-version=5.1 --only-server="$empty")
}
