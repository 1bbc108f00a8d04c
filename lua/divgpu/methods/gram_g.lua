-- gram_g: G's build for the Gram method (methods/gram.lua): G''s blocks
-- allocated on a thread of their own, the build kernel's tiling per device
-- kind (checked against its limits) and its compile begun, and the build
-- itself, submissions sized from the rate of those before.
--
--   local gram_g = require "divgpu.methods.gram_g"
--   local builder_pending = gram_g.begin_builder(job, ctx, e, opts)
--   local g_pending = gram_g.begin_g(job, ctx, opts)
--   local gpu_seconds = gram_g.build_g(job, ctx, e, rows_table, need(builder_pending:wait()), g_pending)
--
-- Failures are thrown (divgpu.failure): the caller runs inside catch.

local divgpu = require "divgpu"
local device = require "divgpu.device"
local device_profile = require "divgpu.device_profile"
local failure = require "divgpu.failure"
local kernel = require "divgpu.kernel"

local need, fail = failure.need, failure.fail
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local string_format, pairs, ipairs, tonumber, select = string.format, pairs, ipairs, tonumber, select
local table_remove = table.remove

local _M = {}

local GRAM_BUILD = kernel.descriptor("gram_build")

-- G's build: each submission aims at this much GPU time (the chunk
-- controller's rule: well under a second), sized from the rate measured on
-- the submissions before it; the first is small.
local BUILD_TARGET_SECONDS = 0.25
local BUILD_FIRST_FMA = 2 ^ 26

-- Two define tables in one (nil when both are empty).
function _M.merged(a, b)
    if not a then return b end
    if not b then return a end
    local m = {}
    for k, v in pairs(a) do m[k] = v end
    for k, v in pairs(b) do m[k] = v end
    return m
end

-- G's build tiling per device kind. A GPU: 128 x 128 tiles of 8 x 8 f64
-- entries a thread, as compile-time constants, the panels padded, the tiles
-- in groups of 16 tile-rows (the shipped variant gram_build-16x16x8x8x8): on
-- the H200 18.0 TFLOP/s at N = 65,536 and 14.6-15.1 at 131,072; 16.3 and 9.9
-- in row order; 10.7 and 5.2-5.3 with 64 x 64 tiles of 8 x 4
-- (bench/gram_tune.lua, alternating in one call; bench/RESULTS.md). A CPU
-- device, whose "threads" are loop iterations: small tiles, by
-- specialization constants.
local BUILD_TILING = {
    gpu = { wx = 16, wy = 16, tm = 8, tn = 8, slice = 8, compiled = true },
    cpu = { wx = 8, wy = 8, tm = 2, tn = 2, slice = 8 },
}

--- G's build kernel for `asked` (a tiling): the shipped variant of a
--- compiled tiling where gram_build's `tiling` axis has it, else compiled
--- now; by specialization constants otherwise.
--- The shipped variant of a compiled tiling (gram_build's `tiling` axis), or nil.
local function shipped_build_variant(t)
    if not t.compiled then return nil end
    local key = string_format("%dx%dx%dx%dx%d", t.wx, t.wy, t.tm, t.tn, t.slice)
    for _, v in ipairs(kernel.axis_values(GRAM_BUILD, "tiling")) do
        if v == key then return kernel.variant(GRAM_BUILD, { tiling = key }) end
    end
end

--- (Its pipeline made on a thread of its own: pending:wait() gives it.)
local function builder_for(self, ctx, tiling, asked, opts)
    local variant, defines = "gram_build", _M.merged(opts.build_defines, self.underflow)
    local constants = { wx = tiling.wx, wy = tiling.wy, tm = tiling.tm, tn = tiling.tn, slice = tiling.slice,
                        acc_slots = tiling.acc_slots, stage = tiling.stage }
    if asked.compiled then
        local shipped = shipped_build_variant(asked)
        if shipped then
            variant = shipped
        else
            defines = _M.merged(defines, { DIVGPU_BUILD_TILING = 1, BUILD_WX = tiling.wx, BUILD_WY = tiling.wy,
                                        BUILD_TM = tiling.tm, BUILD_TN = tiling.tn, BUILD_SLICE = tiling.slice })
        end
        constants = nil
    end
    return need(kernel.begin(ctx, GRAM_BUILD, { variant = variant, defines = defines, constants = constants }))
end

--- G's build tiling for this job and device, checked against its limits,
--- and its kernel begun (kernel.begin): pending.
function _M.begin_builder(self, ctx, e, opts)
    local info = need(device_profile.profile(ctx))
    local asked = opts.build_tiling or BUILD_TILING[info.type == "cpu" and "cpu" or "gpu"]
    -- The panels' padding, for the shared-memory check: a define's, else the
    -- shipped variant's (gram_build.axes.json), else none.
    local padded = {}
    for k, v in pairs(asked) do padded[k] = v end
    local shipped = shipped_build_variant(asked)
    padded.pad = tonumber(opts.build_defines and opts.build_defines.DIVGPU_BUILD_PAD)
        or tonumber(shipped and select(2, divgpu.shaders.source(shipped)).DIVGPU_BUILD_PAD) or 0
    local tiling = GRAM_BUILD.tiling(padded)
    if tiling.shared_bytes > info.max_shared_memory then
        fail(string_format("G's build tiling needs %d bytes of shared memory; device '%s' has %d",
            tiling.shared_bytes, info.name, info.max_shared_memory))
    end
    if tiling.wx * tiling.wy > info.max_workgroup_invocations then
        fail(string_format("G's build tiling needs %d threads a workgroup; device '%s' allows %d",
            tiling.wx * tiling.wy, info.name, info.max_workgroup_invocations))
    end
    self.build_tiling = tiling
    return builder_for(self, ctx, tiling, asked, opts)
end

--- G''s blocks from `first` (1-based) to the last, once allocated, in block
--- order from 1 (nil below `first`); their device addresses written into
--- the job's address table by `rec` (vkCmdUpdateBuffer: no allocation, no
--- upload) before its dispatch reads them.
local function blocks_from(self, rec, pending, first, had)
    local got = need(pending:first(self.block_count - first + 1))
    local blocks = {}
    for i, block in ipairs(got) do blocks[self.block_count - i + 1] = block end
    -- (vkCmdUpdateBuffer takes at most 65,536 bytes: 8,192 entries a write.)
    for from = first, had - 1, 8192 do
        local to = min(had - 1, from + 8191)
        local new = need(divgpu.array("u32", 2 * (to - from + 1)))
        for b = from, to do
            local address = blocks[b].address
            new[2 * (b - from) + 1], new[2 * (b - from) + 2] = address[1], address[2]
        end
        need(rec:update(self.g_block_table, new, 8 * (from - 1)))
    end
    local referenced = {}
    for b = first, self.block_count do referenced[#referenced + 1] = blocks[b] end
    return blocks, referenced
end

--- Builds G' into the job's blocks from the last tile-row to the first
--- (tile-row bi writes rows bi * tile .. N - 1 only, its own and their
--- mirror), so each submission needs only the blocks from its first row on:
--- those allocated first (begin_g). Submissions of about
--- BUILD_TARGET_SECONDS each, sized from the rate of those before (a tile-row
--- bi holds the tiles bi .. last of the upper triangle); two in flight, so
--- their summed GPU seconds (the return value) may count an overlap twice.
--- Sets self.g_blocks and the address table.
function _M.build_g(self, ctx, e, rows_table, builder, g_pending)
    local n, dim, tiling = e.n, e.dim, self.build_tiling
    self.builder = builder
    local tiles = ceil(n / tiling.tile)
    local function tiles_in(first, last) -- tiles of tile-rows first .. last - 1
        return (last - first) * tiles - ((last - 1) * last - (first - 1) * first) / 2
    end
    -- The address table's entries are written as their blocks come.
    self.g_block_table = need(ctx:buffer(8 * self.block_count, "G block addresses"))
    local lowest_block, group = self.block_count + 1, nil
    local function group_for(rec, first_tile_row)
        local needed = floor(first_tile_row * tiling.tile / self.block_rows) + 1
        if needed < lowest_block then
            local referenced
            self.g_blocks, referenced = blocks_from(self, rec, g_pending, needed, lowest_block)
            group = need(builder:bind({ embeddings = rows_table, inv_norm = self.inv_norm_buffer,
                                        g_blocks = self.g_block_table }, referenced))
            lowest_block = needed
        end
        return group
    end
    local tiles_per_submission = max(1, BUILD_FIRST_FMA / (tiling.tile * tiling.tile * dim))
    -- Two submissions in flight, so that the GPU does not idle while the
    -- host waits for one and records the next.
    local recs, in_flight, submitted = { need(ctx:recorder()), need(ctx:recorder()) }, {}, 0
    local seconds, tiles_done, last = 0, 0, tiles
    self.build_submissions = {}
    local function settle_oldest()
        local oldest = table_remove(in_flight, 1)
        -- (Yields, when the driver builds several devices' G at once.)
        local t = need(device.await(ctx, oldest.rec)) or 0
        self.build_submissions[#self.build_submissions + 1] = t
        seconds, tiles_done = seconds + t, tiles_done + oldest.tiles
        if seconds > 0 then
            -- Next submission: the target time at the rate measured so far.
            tiles_per_submission = max(1, min(BUILD_TARGET_SECONDS * tiles_done / seconds, 4 * tiles_per_submission))
        end
    end
    while last > 0 do
        if #in_flight == #recs then settle_oldest() end
        -- As many tile-rows as make about tiles_per_submission tiles.
        local first = last - 1
        while first > 0 and tiles_in(first - 1, last) <= tiles_per_submission do first = first - 1 end
        submitted = submitted + 1
        local rec = recs[(submitted - 1) % #recs + 1]
        need(builder:dispatch(rec, group_for(rec, first), { num_items = n, dim = dim, tile_row_begin = first,
                                                       tile_row_end = last, block_rows = self.block_rows }, tiles, last - first))
        -- Orders G''s writes before every later command that reads G'.
        need(rec:barrier())
        need(rec:submit())
        in_flight[#in_flight + 1] = { rec = rec, tiles = tiles_in(first, last) }
        last = first
    end
    while #in_flight > 0 do settle_oldest() end
    -- Useful work, one triangle: N (N + 1) / 2 entries of D multiply-adds.
    self.build_flops = n * (n + 1) / 2 * dim * 2
    return seconds
end
--- G''s blocks: whole rows, each block one allocation, allocated on a
--- thread of their own (ctx:begin_buffers), the last block first: pending.
--- On the H200 the 64 GiB of N = 131,072 took 0.15 s (1.48-1.68 s through
--- the shared allocator); the table is prepared and uploaded meanwhile, and
--- G's build starts on the last rows as soon as their blocks are there
--- (build_g).
function _M.begin_g(self, ctx, opts)
    local n, info = self.n, need(device_profile.profile(ctx))
    local row_bytes = n * 4
    self.block_rows = opts.g_block_rows or max(1, min(n, floor(info.max_memory_allocation_size / row_bytes)))
    self.block_count = ceil(n / self.block_rows)
    local wanted = {}
    for i = 1, self.block_count do
        local b = self.block_count - i + 1
        local rows = min(self.block_rows, n - (b - 1) * self.block_rows)
        wanted[i] = { rows * row_bytes, "G block " .. b }
    end
    return need(ctx:begin_buffers(wanted))
end

return _M
