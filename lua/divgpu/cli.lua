-- The command line: bin/divgpu <command> [options]. Its grammar and checks
-- are cli/options.lua, its output cli/report.lua, its commands cli/run.lua,
-- cli/bench.lua and cli/commands.lua. Every failure ends as one line on
-- stderr starting "divgpu:" and a non-zero exit status: 2 for an option
-- (checked before any work), 1 for a failure of the work.

local divgpu = require "divgpu"
local failure = require "divgpu.failure"
local options = require "divgpu.cli.options"
local grammar = require "divgpu.cli.grammar"
local report = require "divgpu.cli.report"

local io_stderr, io_stdout = io.stderr, io.stdout
local pcall, xpcall, type, tostring, require, setmetatable, os_getenv =
    pcall, xpcall, type, tostring, require, setmetatable, os.getenv

local _M = {}

local printable = report.printable  -- control characters escaped: one line

--- Writes to standard output for --help and --version: the exit status, 1
--- (one line said) when the text cannot be written (a full disk, a closed pipe).
local function write_out(...)
    local ok, err = io_stdout:write(...)
    if ok then ok, err = io_stdout:flush() end
    if ok then return 0 end
    io_stderr:write("divgpu: standard output: write failed: ", printable(err), "\n")
    return 1
end

local function bench() return require "divgpu.cli.bench" end
local function commands() return require "divgpu.cli.commands" end

-- Each command's checks (before any work) and its work.
local VALIDATE = setmetatable({ bench = function(a) return bench().validate(a) end }, { __index = options.validators })

local COMMANDS = {
    run = function(a) return require("divgpu.cli.run").command(a) end,
    bench = function(a) return bench().command(a) end,
    verify = function(a) return commands().verify(a) end,
    convert = function(a) return commands().convert(a) end,
    synth = function(a) return commands().synth(a) end,
    info = function(a) return commands().info(a) end,
    merge = function(a) return commands().merge(a) end,
    plot = function(a) return commands().plot(a) end,
    ["convert-fp16"] = function(a) return commands().convert_fp16(a) end,
}

--- Parses argv: the options, or the exit status of --help, --version or a
--- bad command line (its message written).
local function parse(argv)
    local parser = grammar.parser()
    local parsed, ok, a = pcall(parser.pparse, parser, argv)
    if not parsed then
        local help = grammar.help_requested()
        if help then return nil, write_out(help, "\n") end
        error(ok, 0)
    end
    if not ok then
        if a:match("^Usage") then  -- --help output
            return nil, write_out(a, "\n")
        end
        -- argparse's message may run over lines ("Did you mean ...?"): one line.
        io_stderr:write("divgpu: ", printable((a:gsub("%s*\n%s*", "; "))), " (see 'divgpu --help')\n")
        return nil, 2
    end
    if a.version then
        return nil, write_out("divgpu ", divgpu.version, "\n")
    end
    if not a.command then
        io_stderr:write("divgpu: a command is required (see 'divgpu --help')\n")
        return nil, 2
    end
    if a.command == "synth" and (not a.n or not a.dim or not a.out) then
        io_stderr:write("divgpu: synth needs --n, --dim and --out (see 'divgpu synth --help')\n")
        return nil, 2
    end
    return a
end

--- With DIVGPU_VALIDATION=1 (the tests), a validation-layer message during
--- the command fails it: one line more, and exit 1 where it would have been
--- 0, so no test passes over a message it did not look for.
local function validation_checked(status)
    if os_getenv("DIVGPU_VALIDATION") ~= "1" then return status end
    local loaded, testing = pcall(require, "divgpu.testing")
    local messages = loaded and testing.validation_messages() or {}
    if #messages == 0 then return status end
    io_stderr:write("divgpu: ", #messages, " validation-layer message(s) during this command (DIVGPU_VALIDATION=1)\n")
    return status == 0 and 1 or status
end

--- The whole command line: returns the exit status; never raises.
function _M.main(argv)
    -- SIGINT and SIGTERM end every command with 128 + the signal (130, 143),
    -- never luajit's "interrupted!" error: the default action, until a
    -- command that stops cleanly (run, verify, convert, merge) catches them.
    divgpu.process.catch_signals(true)  -- installs divgpu's handlers, in place of luajit's
    divgpu.process.catch_signals(false)
    local a, status = parse(argv)
    if not a then return status end
    -- Every option value is checked before any work starts (nothing read,
    -- nothing written, no device opened).
    local checked, why = pcall(VALIDATE[a.command], a)
    if not checked then
        io_stderr:write("divgpu: ", printable(report.first_line(why)), " (see 'divgpu ", a.command, " --help')\n")
        return 2
    end
    -- DIVGPU_DEBUG keeps the raw error and where it came from (a traceback).
    local debug_on = os_getenv("DIVGPU_DEBUG")
    local ran, result = xpcall(COMMANDS[a.command], function(e)
        if debug_on then return failure.trace(e) or debug.traceback(tostring(e), 2) end
        return e
    end, a)
    if not ran then
        io_stderr:write("divgpu: ", debug_on and tostring(result) or printable(report.first_line(result)), "\n")
        -- An option value the device refuses (a workgroup size over its limit) is
        -- still a usage error, found once the device is known: exit 2.
        return validation_checked(failure.is_usage(result) and 2 or 1)
    end
    return validation_checked(type(result) == "number" and result or 0)  -- a command's own exit status (run: 130 when interrupted)
end

return _M
