-- The command line's grammar (lua-argparse): every command, its options and
-- their help text, and --help caught (help_requested) instead of argparse's
-- print and exit. What each option's value must be is checked in
-- divgpu.cli.options, after the parse.

local argparse = require "argparse"
local options = require "divgpu.cli.options"
local report = require "divgpu.cli.report"
local direct = require "divgpu.methods.direct"
local methods = require "divgpu.methods"

local ipairs, unpack = ipairs, unpack
local concat = table.concat

local _M = {}

--- The options of how progress is shown (run, verify).
function _M.progress_options(command)
    command:option("--progress", "How progress is shown on stderr: auto (a line redrawn in place on a terminal, "
        .. "plain lines elsewhere), plain (a line every --progress-interval seconds) or json (a JSON line as often; "
        .. "docs/cli.md#progress). Default: auto.")
    command:option("--progress-interval", "Seconds between progress lines in a log (plain, json, or auto off a "
        .. "terminal); more than 0. Default: " .. report.PROGRESS_INTERVAL .. ".")
end

local function run_command(p)
    local run = p:command("run", "Compute the diversity sequences and write the cache (docs/formats.md#cache-file).")
    run:epilog("Each finished batch is committed to OUT.checkpoint/ beside the output. Ctrl-C (SIGINT) or "
        .. "SIGTERM stops at the next chunk boundary (exit 130 or 143; a second signal, more than a second after the first, exits at once: "
        .. "two within a second, as `timeout -s INT` sends to the process and its group, count as one); kill -9 "
        .. "loses at most the batches in progress and any still being written. Running the same command again resumes and writes the bytes "
        .. "of an uninterrupted run; a checkpoint of another table, --length, --starts or contract is refused "
        .. "(--restart discards it).")
    run:option("--embeddings", "The table to read: an embeddings.json, or X.npy (float32 rows; titles from "
        .. "X.titles.json beside it, if there)." .. options.EMBEDDINGS_HELP, options.DEFAULT_EMBEDDINGS)
    run:option("--out", "Cache to write (atomically; a link is written through), held by OUT.lock while the run lasts; "
        .. "- streams it to standard output (no checkpoint). Default: diversity_cache.json, or diversity_cache.bin "
        .. "with --format binary.")
    run:option("--format", "The cache's form: json or binary (docs/formats.md#binary-cache; 'divgpu convert' "
        .. "turns one into the other, byte for byte).", "json")
    run:option("--starts", "Starting items: A:B (A <= s < B), i,j,k, @FILE (one index a line) or sample:K:SEED "
        .. "(K distinct items chosen by a seeded generator, the same on every machine, in ascending order; "
        .. "docs/cli.md#starts). Default: every item.")
    run:option("--shard", "I/N: run only part I of N of the starts (I is 0-based: 0 <= I < N; N <= the number of "
        .. "starts), the contiguous block of positions floor(I*M/N) .. floor((I+1)*M/N)-1 of the M starts; the cache "
        .. "is a part for 'divgpu merge'.")
    run:option("--length", "Items per sequence, 1..N. Default: N (a full ordering).")
    run:option("--batch", "Sequences per GPU batch. Default: from the device's limits, and no more than the plan "
        .. "estimates to finish in --checkpoint-interval seconds.")
    run:option("--checkpoint-interval", "Seconds of work a batch aims at (its size from the plan's estimate), so a "
        .. "finished batch is committed to the checkpoint about this often; the bytes do not depend on it.", "60")
    run:option("--device", "Device index or name substring (see 'divgpu info'); all (every GPU); or a list "
        .. "0,1 (the sequences are split across them, same output; naming one device twice opens two "
        .. "contexts on it); or cpu (the host's cores, the cpu method, no Vulkan). Default: $DIVGPU_DEVICE where set, "
        .. "else a discrete GPU (none named: auto may move a job from a CPU-only Vulkan device to the host).")
    run:option("--target-ms", "GPU time each submission aims at, in milliseconds (90: a tenfold rise in cost "
        .. "still keeps the two chunks in flight under a second).", "90")
    run:option("--method", "auto (the cheapest, by estimates from the device's rates, of the methods that "
        .. "serve the request and fit the device; the run prints its plan), or one of: " .. options.method_docs() .. ".",
        "auto")
    run:option("--memory-budget", "Device memory in MiB that --method auto may plan for. Default: the device's.")
    run:option("--shape", "Shape of the direct method's work: auto (the cheapest of gemm and "
        .. direct.default_shape() .. " by the cost model, for the plain fp32 job; else " .. direct.default_shape()
        .. "), or one of " .. concat(options.shapes(), ", ") .. " (docs/contract.md#shapes).", methods.AUTO_SHAPE)
    run:option("--in-flight", "Submissions kept in flight (the CPU records the next while the GPU runs one).", "2")
    run:option("--precision", "fp32 (the contract), fp16 (reads embeddings_fp16.bin; own contract) "
        .. "or fp16-exact (half loads filter, fp32 decides: identical to fp32).", "fp32")
    run:option("--layout", "Table layout on the GPU: rows (as the JSON) or columns (coalesced loads; same output). "
        .. "Default: the method's (" .. options.default_layouts() .. ").")
    run:option("--tile-size", "Candidates per tile for tiled shapes, or auto (from the L2 size). Default: auto.")
    run:option("--l2-bytes", "L2 size in bytes for --tile-size auto (default: known-device table).")
    run:flag("--measure-l2", "Measure the L2 size for --tile-size auto instead of using the table.")
    run:option("--workgroup-size", "Threads per sequence of the Vulkan methods (default: 256 on a GPU, 64 on a CPU device; not with --method cpu).")
    run:flag("--wait", "If another run is writing --out (it holds OUT.lock), wait for it instead of refusing.")
    run:flag("--restart", "Discard OUT.checkpoint/ (what an interrupted run of another job left) "
        .. "instead of refusing it. A checkpoint of this same job is resumed without it.")
    run:flag("--quiet", "No progress or summary on stderr.")
    run:flag("--plan-only", "Print the plan (method, shape, tile, layout and why) and stop: no output is written.")
    _M.progress_options(run)
    run:option("--stats", "Write per-chunk figures (steps, speed, GPU time; gram: windows, fallbacks) to this "
        .. "file as JSON lines (docs/formats.md#stats-file), streamed to a temporary beside it and renamed at the end.")
end

local function file_commands(p)
    local fp16 = p:command("convert-fp16", "Write embeddings_fp16.bin and its meta file next to an embeddings.json "
        .. "(for run --precision fp16; 'convert' converts caches).")
    fp16:argument("embeddings", "The embeddings.json to convert.")

    local verify = p:command("verify", "Check a cache (either form) against the CPU mirror; names the first difference.")
    verify:epilog("Exit status: 0 when every sequence checked agrees with the mirror, 1 for a difference (a sequence, "
        .. "or a cache made from another table), 2 for input that cannot be read or is not valid (a missing file, "
        .. "a truncated cache, bad JSON, a bad option).")
    verify:option("--embeddings", "The table the cache was made from: an embeddings.json, or X.npy." .. options.EMBEDDINGS_HELP, options.DEFAULT_EMBEDDINGS)
    verify:option("--cache", "Cache to check, JSON or binary.", "diversity_cache.json")
    verify:option("--sequences", "Check only the first K sequences. Default: all.")
    verify:option("--sample", "Check K sequences at positions chosen by --seed (the same on every machine, "
        .. "docs/formats.md#samples-of-a-cache); the positions are printed.")
    verify:option("--seed", "The seed of --sample's positions (default 1).")
    verify:flag("--quiet", "No progress on stderr.")
    _M.progress_options(verify)

    local convert = p:command("convert", "Convert a cache between its JSON and binary forms "
        .. "(docs/formats.md#binary-cache), byte-identical to a run that wrote that form.")
    convert:argument("cache", "The cache to convert (either form).")
    convert:option("--out", "Cache to write (atomically; never the input); required.")
    convert:option("--format", "The form to write: json or binary. Default: the other form than the input's.")
    convert:flag("--quiet", "No summary on stderr.")

    local merge = p:command("merge", "Check the parts of a sharded run (run --shard I/N) and merge them into one "
        .. "cache, byte-identical to the unsharded run's.")
    merge:epilog("Every part must be of the same table, contract, length, format version and run (its count of parts "
        .. "and starts); each shard once, none missing. Any other input is refused with one line naming the file; "
        .. "the output is written atomically (an existing one stays as it was on failure).")
    merge:argument("parts", "The part files, in any order."):args("+")
    merge:option("--out", "Cache to write (atomically; - for standard output); required.")
    merge:option("--format", "The form to write: json or binary. Default: the first part's (parts may be of "
        .. "either form, mixed).")
    merge:flag("--quiet", "No summary on stderr.")

    local synth = p:command("synth", "Write a clustered synthetic embeddings.json (docs/contract.md#reference-tables).")
    synth:option("--n", "Number of items."):args(1)
    synth:option("--dim", "Values per item."):args(1)
    synth:option("--clusters", "Number of cluster centres.", "16")
    synth:option("--seed", "Random seed.", "1")
    synth:option("--out", "File to write (atomically; - for standard output)."):args(1)

    local info = p:command("info", "List the Vulkan devices and their features.")
    info:flag("--measure-l2", "Measure the L2 size of a device with a read-bandwidth sweep.")
    info:option("--device", "Device to measure (index or name substring).")
    info:option("--max-mib", "Largest working set of the sweep, in MiB (default 512).")
end

local function bench_command(p)
    local b = p:command("bench", "A/B configurations of run in alternating pairs (docs/contract.md#measuring).")
    b:argument("configs", "SHAPE[:PRECISION][:kIN_FLIGHT][:tTILE][:columns] (the direct method) or "
        .. "gram|auto[:kIN_FLIGHT][:columns] (docs/contract.md#gram); the first is the reference."):args("2+")
    b:option("--method", "The method of configurations named by a shape: auto (gram where G fits the device, "
        .. "for baseline fp32), direct or gram (docs/contract.md#auto).", "auto")
    b:option("--embeddings", "The table to run on: an embeddings.json, or X.npy (default: the shipped poems).")
    b:option("--synth", "Use a synthetic clustered table N,D[,CLUSTERS] instead.")
    b:option("--sequences", "Sequences per run (default: every item, at most 4096).")
    b:option("--steps", "Steps per run (iterations timed).", "100")
    b:option("--pairs", "Alternating pairs after the warm-up (docs/contract.md#measuring: at least 24).", "24")
    b:option("--batch", "Sequences per batch (default: from the device).")
    b:option("--device", "Device index or name substring.")
    b:option("--l2-bytes", "L2 size in bytes for configurations without a tile (default: known-device table).")
    b:option("--parity-sequences", "Sequences of the first configuration checked against the CPU mirror.", "16")
    b:flag("--json", "Print the results as JSON.")
    b:option("--plot", "Also draw the pairs to this PNG: each configuration's time per pair and its speed-up "
        .. "over the first, per pair.")
end

local function plot_command(p)
    local plot = p:command("plot", "Draw stats files of 'run --stats' as a PNG chart: sequence-steps per second "
        .. "and GPU time per step over the run, one line per file.")
    plot:argument("stats", "Stats files written by run --stats."):args("+")
    plot:option("--out", "PNG to write (atomically).", "run.png")
    plot:option("--x", "The x axis: step (every batch from step 1) or elapsed (seconds since the run began).", "step")
    plot:option("--scale", "The y axes: linear, log, or auto (log where a panel's values span over 20x).", "auto")
    plot:option("--title", "The chart's title.")
    plot:option("--width", "Width in pixels.", "1200")
    plot:option("--height", "Height in pixels. Default: 800, 1000 with the gram panel.")
end

-- --help's text, once asked for: cli.lua writes it and checks the write (a
-- full disk behind a redirection is an error), where argparse would print it
-- and exit 0 whatever happened.
local help_text

--- The help text --help asked for while parsing, or nil.
function _M.help_requested() return help_text end

--- The parser's and each command's --help stop the parse with their text
--- kept (help_requested), in place of argparse's print and os.exit(0).
local function checked_help(p)
    for _, cmd in ipairs({ p, unpack(p._commands) }) do
        local help = cmd._help_option_idx and cmd._options[cmd._help_option_idx]
        if help then
            help:action(function()
                help_text = cmd:get_help()
                error("--help", 0)
            end)
        end
    end
end

--- The parser of the whole command line.
function _M.parser()
    local p = argparse("divgpu", "Diversity sequences on the GPU (Vulkan compute), bit-exact on every device.")
    p:command_target("command")
    p:require_command(false)
    p:flag("--version", "Print divgpu's version and exit.")
    run_command(p)
    file_commands(p)
    bench_command(p)
    plot_command(p)
    checked_help(p)
    return p
end

return _M
