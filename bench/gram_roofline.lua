-- Gram's bytes against the roof (the Gram method's measurement list): runs the seed
-- batch (or any table) with gram in process and prints one JSON line with the
-- GPU time, the bytes of G and of the approx state the kernel must move, their
-- rates, and the window-size histogram. bench/peers/ceilings.py measures the
-- copy bandwidth in the same campaign call; gram_campaign.sh `roofline` joins them.
--   luajit bench/gram_roofline.lua EMBEDDINGS A:B [LENGTH]
local divgpu = require "divgpu"
local vk = require "divgpu.vk_compute"
local driver = require "divgpu.driver"
local gram = require "divgpu.methods.gram"

local e = assert(divgpu.load_embeddings(assert(arg[1], "usage: gram_roofline.lua EMBEDDINGS A:B [LENGTH]")))
local a, b = assert(arg[2], "A:B"):match("^(%d+):(%d+)$")
a, b = tonumber(a), tonumber(b)
local n = e.n
local length = tonumber(arg[3]) or n
local starts = divgpu.array("u32", b - a)
for i = 1, b - a do starts[i] = a + i - 1 end
local ctx = assert(vk.open{ device = os.getenv("DIVGPU_DEVICE") })
local _, stats = assert(driver.run{ ctx = ctx, embeddings = e, starts = starts, length = length, method = "gram" })

-- Step t (1 .. L-1) of a sequence visits the N - t unmasked candidates: it
-- reads one G entry (4 B) of each, reads and writes approx (8 + 8 B) in pass A
-- and rereads approx (8 B) in pass B. Useful bytes only: sectors, masks, the
-- L2-resident inv_norm and row norms, and the window's chains are not counted.
local S = b - a
local visits = S * ((length - 1) * n - length * (length - 1) / 2)
local g_bytes, approx_bytes = 4 * visits, 24 * visits
local g, hist = stats.gram, {}
for k, c in ipairs(g.window_histogram) do
    hist[#hist + 1] = string.format('"%s": %d', gram.histogram_labels[k], c)
end
print(string.format('{"n": %d, "dim": %d, "sequences": %d, "length": %d, "gpu_seconds": %.4f, '
    .. '"build_seconds": %.4f, "g_bytes": %.6g, "g_tb_per_s": %.4f, "approx_bytes": %.6g, '
    .. '"state_tb_per_s": %.4f, "mean_window": %.4f, "fallbacks": %d, "steps": %d, "window_histogram": {%s}}',
    n, e.dim, S, length, stats.gpu_seconds, stats.build_seconds, g_bytes, g_bytes / stats.gpu_seconds / 1e12,
    approx_bytes, (g_bytes + approx_bytes) / stats.gpu_seconds / 1e12, g.window_total / g.steps,
    g.fallbacks, g.steps, table.concat(hist, ", ")))
