-- Tile size for the tiled shapes (docs/contract.md#tile-size), and where the L2 size
-- comes from. Vulkan does not report the L2 size, so it is taken from, in
-- order: the user (--l2-bytes), a measurement (`divgpu info --measure-l2`,
-- or measure = true), or the table of known devices below; the plans ask
-- it through the device profile (divgpu.device_profile.l2).

local floor, max = math.floor, math.max
local error, type, ipairs, string_format = error, type, ipairs, string.format

local _M = {}

-- Bytes per stored value: FP32 tables 4, FP16 tables 2.
_M.BYTES_PER_VALUE = { fp32 = 4, fp16 = 2, ["fp16-exact"] = 2 }

--- Candidates per tile: as many rows as fit in 85% of the L2. The other 15%
--- is left for what the scan also keeps hot: the centroids, the masks and
--- the code. With 768-dim rows, FP32 (4 bytes a value) on 5.5 MB (10^6 bytes)
--- gives floor(5.5e6 * 0.85 / (768 * 4)) = 1,521 candidates; FP16 (2 bytes)
--- halves the row and doubles the tile to 3,043.
function _M.tile_size(l2_bytes, embedding_dim, bytes_per_value)
    if type(l2_bytes) ~= "number" or l2_bytes <= 0 then error("tile_size: l2_bytes must be positive", 2) end
    if type(embedding_dim) ~= "number" or embedding_dim < 1 then error("tile_size: embedding_dim must be >= 1", 2) end
    if bytes_per_value ~= 2 and bytes_per_value ~= 4 then error("tile_size: bytes_per_value must be 2 or 4", 2) end
    return max(1, floor(l2_bytes * 0.85 / (embedding_dim * bytes_per_value)))
end

-- Known L2 sizes in bytes, matched against the Vulkan device name. The
-- numbers are what CUDA's cudaDeviceProp.l2CacheSize reports (binary
-- megabytes), which is what vendors' datasheets round to "MB".
_M.KNOWN_L2 = {
    { "H200", 50 * 1048576, "NVIDIA H200 datasheet: 50 MB L2 (Hopper GH100, as H100 SXM)" },
    { "H100", 50 * 1048576, "NVIDIA H100 datasheet: 50 MB L2 (SXM5)" },
    { "A100", 40 * 1048576, "NVIDIA A100 datasheet: 40 MB L2" },
    { "RTX 4090", 72 * 1048576, "NVIDIA Ada whitepaper: 72 MB L2 (AD102 in RTX 4090)" },
    { "RTX 3090", 6 * 1048576, "NVIDIA Ampere GA102 whitepaper: 6 MB L2" },
    { "RTX 2080 Ti", 5.5 * 1048576, "NVIDIA Turing TU102 whitepaper: 5.5 MB L2 (RTX 2080 Ti)" },
    { "GTX 1080 Ti", 2.75 * 1048576, "NVIDIA GTX 1080 Ti (GP102): 2,816 KB L2" },
    { "llvmpipe", 1 * 1048576, "lavapipe runs on the CPU: 1 MiB, a typical per-core L2" },
}

--- The L2 size for a device: returns bytes, source (a sentence).
--- opts.l2_bytes (user) wins, then opts.measured, then the table.
function _M.l2_bytes(info, opts)
    opts = opts or {}
    if opts.l2_bytes then
        return opts.l2_bytes, "given with --l2-bytes"
    end
    if opts.measured then
        return opts.measured, "measured on this device (bandwidth knee of a read sweep)"
    end
    for _, known in ipairs(_M.KNOWN_L2) do
        if info.name:find(known[1], 1, true) then
            return known[2], string_format("known-device table: %s", known[3])
        end
    end
    return nil, string_format("device '%s' is not in the table of known L2 sizes; pass --l2-bytes "
        .. "or measure it with 'divgpu info --measure-l2'", info.name)
end

return _M
