-- Where divgpu's shipped data lives (the default embeddings table,
-- embeddings/all-MiniLM-L6-v2/embeddings.json), whichever way the modules
-- were found. In order:
--   1. $DIVGPU_DATA, if set and not empty (an override, e.g. for a copy);
--   2. installed (`make install`, `luarocks make`): the folder recorded in
--      installed.lua beside this file, which the install writes (a luarocks
--      tree keeps the data in its rock folder, not beside share/lua/5.1);
--   3. a checkout: ROOT/assets, when this file is ROOT/lua/divgpu/data.lua.
-- installed.lua is read as this file's sibling, never through package.path,
-- so a checkout's modules never pick up another installation's data.

local os_getenv, io_open, loadfile, type = os.getenv, io.open, loadfile, type

local _M = {}

_M.EMBEDDINGS = "embeddings/all-MiniLM-L6-v2/embeddings.json"

local function this_file()
    local source = debug.getinfo(1, "S").source
    return source:sub(1, 1) == "@" and source:sub(2) or nil
end

--- The data folder and where it came from ("DIVGPU_DATA", "installed",
--- "checkout"); nil, why when none applies. Never raises.
function _M.dir()
    local env = os_getenv("DIVGPU_DATA")
    if env and env ~= "" then return env, "DIVGPU_DATA" end
    local file = this_file()
    if not file then return nil, "divgpu.data was not loaded from a file" end
    local here = file:match("^(.*)/[^/]*$") or "."
    local chunk = loadfile(here .. "/installed.lua")
    if chunk then
        local ok, t = pcall(chunk)
        if ok and type(t) == "table" and type(t.data_dir) == "string" then return t.data_dir, "installed" end
    end
    -- A relative LUA_PATH ('lua/?.lua' from the root) gives a relative root.
    local root = file:match("^(.-)lua/divgpu/data%.lua$")
    if root then
        local probe = io_open(root .. "assets/" .. _M.EMBEDDINGS, "rb")
        if probe then
            probe:close()
            return root .. "assets", "checkout"
        end
    end
    return nil, "no DIVGPU_DATA, no installed.lua beside " .. file .. ", and not in a checkout"
end

--- The default embeddings table's path (it may not exist: the caller's
--- loader then names it) and a phrase saying where it came from.
function _M.default_embeddings()
    local dir, source = _M.dir()
    if not dir then return "assets/" .. _M.EMBEDDINGS, "relative to the current folder: " .. source end
    return dir .. "/" .. _M.EMBEDDINGS, source == "DIVGPU_DATA" and "from $DIVGPU_DATA"
        or source == "installed" and "the installed copy" or "the checkout's copy"
end

return _M
