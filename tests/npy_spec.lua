-- `.npy` input: a table written as .npy gives the same sequences as its JSON
-- form (GPU and CPU mirror), its sha256 is the .npy file's, its titles come
-- from the sidecar, and every file divgpu cannot take is refused in one line
-- through the command line. Each check has a twin that must fail it.
local divgpu = require "divgpu"
local h = require "tests.helpers"

local FIXTURES = "tests/data/npy/"

--- Runs bin/divgpu; returns exit status, stdout, stderr.
local function cli(args, dir)
    local cmd = "bin/divgpu " .. args .. " >" .. dir .. "/stdout 2>" .. dir .. "/stderr"
    local ok, _, code = os.execute(cmd)
    local rc = type(ok) == "number" and ok / 256 or (ok and 0 or code)
    local function slurp(name)
        local f = assert(io.open(dir .. "/" .. name))
        local s = f:read("*a")
        f:close()
        return s
    end
    return rc, slurp("stdout"), slurp("stderr")
end

local function sha256_of(path)
    local p = assert(io.popen("sha256sum '" .. path .. "'"))
    local out = p:read("*a")
    p:close()
    return out:match("^(%x+)")
end

--- A copy of the .npy at `src` with the float32 of row `row`, column `col`
--- (of a table `dim` wide) replaced by `value`, written to `dst`.
local function patched_copy(src, dst, dim, row, col, value)
    local f = assert(io.open(src, "rb"))
    local bytes = f:read("*a")
    f:close()
    local header = bytes:byte(9) + 256 * bytes:byte(10) + 10 -- a version 1.0 header
    local at = header + 4 * (row * dim + col)
    local ffi = require "ffi"
    local x = ffi.new("float[1]", value)
    local patch = ffi.string(ffi.cast("const char *", x), 4)
    local out = assert(io.open(dst, "wb"))
    out:write(bytes:sub(1, at), patch, bytes:sub(at + 5))
    out:close()
end

describe(".npy tables", function()
    local dir = h.tmpdir()
    teardown(function()
        h.assert_no_validation_messages()
        os.execute("rm -rf " .. dir)
    end)

    local synthetic = divgpu.synth{ n = 600, dim = 48, clusters = 8, seed = 11 }
    local npy, json = dir .. "/t.npy", dir .. "/t.json"
    synthetic:write(npy)
    synthetic:write(json)

    it("hold the same values as the JSON form, under the .npy file's sha256", function()
        local a, b = divgpu.load_embeddings(npy), divgpu.load_embeddings(json)
        assert.are.same({ 600, 48 }, { a.n, a.dim })
        assert.are.same({ b.n, b.dim }, { a.n, a.dim })
        local va, vb = a:values(), b:values()
        for i = 1, a.n * a.dim do
            if va[i] ~= vb[i] then error("value " .. i .. " differs: " .. va[i] .. " vs " .. vb[i]) end
        end
        assert.are.equal(sha256_of(npy), a.sha256)
        assert.are.equal(sha256_of(json), b.sha256)
        assert.are.equal(synthetic.model, a.model)
    end)

    it("give the same sequences as the JSON form, on the GPU (gram and direct) and the mirror", function()
        local a, b = divgpu.load_embeddings(npy), divgpu.load_embeddings(json)
        local starts = h.range(0, a.n)
        local gpu_a, cpu_a = h.both(a, starts, a.n, { method = "gram" })
        local gpu_b = h.both(b, starts, b.n, { method = "gram" })
        local d = divgpu.first_difference(gpu_a, cpu_a, a.n)
        assert(d == nil, h.describe_difference(d))
        d = divgpu.first_difference(gpu_a, gpu_b, a.n)
        assert(d == nil, h.describe_difference(d))
        local few = divgpu.array("u32", { 0, 1, 299, 599 })
        local direct_a, mirror_few = h.both(a, few, a.n, { method = "direct" })
        local direct_b = h.both(b, few, b.n, { method = "direct" })
        d = divgpu.first_difference(direct_a, mirror_few, a.n)
        assert(d == nil, h.describe_difference(d))
        d = divgpu.first_difference(direct_a, direct_b, a.n)
        assert(d == nil, h.describe_difference(d))
    end)

    it("twin: a .npy with one value changed has another sha256 and other sequences", function()
        local changed = dir .. "/changed.npy"
        -- Item 5 pushed far from every cluster: every sequence takes it early.
        patched_copy(npy, changed, 48, 5, 0, 40.0)
        local a, c = divgpu.load_embeddings(npy), divgpu.load_embeddings(changed)
        assert.are_not.equal(a.sha256, c.sha256)
        local starts = h.range(0, 8)
        local seq_a, seq_c = divgpu.mirror(a, starts, 50), divgpu.mirror(c, starts, 50)
        assert.is_not_nil(divgpu.first_difference(seq_a, seq_c, 50))
        -- ... and the patch is where it was meant to be, nowhere else.
        local va, vc = a:values(), c:values()
        for i = 1, a.n * a.dim do
            if (va[i] ~= vc[i]) ~= (i == 5 * 48 + 1) then error("value " .. i .. " is not as patched") end
        end
    end)

    it("take titles, ids and the model from the sidecar; none without one", function()
        local e = divgpu.load_embeddings(FIXTURES .. "labelled.npy")
        assert.are.same({ "one", "104", "fixture" }, { e:title(0), e:id(4), e.model })
        local bare = divgpu.load_embeddings(FIXTURES .. "table_v1.npy")
        assert.is_nil(bare:title(0))
        assert.is_nil(bare.model)
    end)

    it("run and verify through the command line, and convert-fp16 works on them", function()
        local cache = dir .. "/cache.json"
        local rc, out, err = cli("run --embeddings " .. npy .. " --out " .. cache .. " --starts 0:24 --length 40 --quiet", dir)
        assert.are.equal(0, rc, err)
        rc, out, err = cli("verify --embeddings " .. npy .. " --cache " .. cache .. " --quiet", dir)
        assert.are.equal(0, rc, err)
        assert.truthy(out:find("24 of 24 sequences (length 40, contract fp32) match the CPU mirror", 1, true), out)
        -- The cache names the .npy's sha256: its JSON form is another file.
        rc, out, err = cli("verify --embeddings " .. json .. " --cache " .. cache .. " --quiet", dir)
        assert.are.equal(1, rc)
        assert.truthy(err:find("was made from another table (sha256 " .. sha256_of(npy), 1, true), err)
        rc, out, err = cli("convert-fp16 " .. npy, dir)
        assert.are.equal(0, rc, err)
        assert.are.equal(dir .. "/embeddings_fp16.bin\n" .. dir .. "/embeddings_fp16.meta.json\n", out)
        local half = dir .. "/half.json"
        rc, out, err = cli("run --embeddings " .. npy .. " --precision fp16 --method direct --out " .. half
            .. " --starts 0:4 --length 20 --quiet", dir)
        assert.are.equal(0, rc, err)
        rc, out, err = cli("verify --embeddings " .. npy .. " --cache " .. half .. " --quiet", dir)
        assert.are.equal(0, rc, err)
        assert.truthy(out:find("contract fp16", 1, true), out)
    end)

    it("that divgpu cannot take are refused in one line naming the file", function()
        local cases = {
            { "float64.npy", "values are '<f8' (float64): only float32 ('<f4') tables are read" },
            { "bigendian.npy", "values are big-endian float32 ('>f4')" },
            { "fortran.npy", "fortran_order is True: only C-order (row-major) tables are read" },
            { "one_d.npy", "the array has 1 dimension(s), shape [3]: a table is 2-D" },
            { "nan.npy", "row 2, column 1: value is not finite" },
            { "zero_row.npy", "row 3 is all zeros" },
            { "truncated.npy", "the file is truncated: shape (5, 3) needs 60 bytes" },
            { "object.npy", "values are '|O'" },
        }
        for _, c in ipairs(cases) do
            local path = FIXTURES .. c[1]
            local rc, _, err = cli("run --embeddings " .. path .. " --out " .. dir .. "/never.json --quiet", dir)
            assert.are.equal(1, rc, c[1])
            local expected = "divgpu: " .. path .. ": " .. c[2]
            assert.are.equal(expected, err:sub(1, #expected), c[1])
            assert.are.equal(1, select(2, err:gsub("\n", "")), c[1] .. ": " .. err)
            assert.is_nil(err:find("%.lua:%d"), err)
        end
        local f = io.open(dir .. "/never.json")
        assert.is_nil(f, "a refused table left an output")
        -- Twin: a good .npy from the same folder runs.
        local rc, _, err = cli("run --embeddings " .. FIXTURES .. "table_v3.npy --out " .. dir .. "/ok.json --quiet", dir)
        assert.are.equal(0, rc, err)
    end)

    it("refuse a sidecar of the wrong length, naming it", function()
        local copy = dir .. "/short.npy"
        assert(os.execute("cp " .. FIXTURES .. "table_v1.npy " .. copy) == 0)
        local f = assert(io.open(dir .. "/short.titles.json", "w"))
        f:write('{"titles": ["a", "b"]}\n')
        f:close()
        local rc, _, err = cli("run --embeddings " .. copy .. " --out " .. dir .. "/never.json --quiet", dir)
        assert.are.equal(1, rc)
        assert.are.equal("divgpu: " .. dir .. "/short.titles.json: \"titles\" has 2 entries but there are 5 rows\n", err)
    end)

    it("are written by the extension of the name; any other is refused", function()
        local ok, err = synthetic:write(dir .. "/t.txt")
        assert.is_nil(ok)
        assert.truthy(err:find("t.txt: a table is written as .npy or .json", 1, true), err)
        assert.is_nil(io.open(dir .. "/t.txt"))
        -- Twin: the two names it knows write the two formats.
        local f = assert(io.open(npy, "rb"))
        assert.are.equal("\147NUMPY", f:read(6))
        f:close()
        f = assert(io.open(json, "rb"))
        assert.are.equal("{", f:read(1))
        f:close()
    end)
end)
