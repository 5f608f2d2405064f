-- The simulated node's script environment (see lua.rs): the redis library
-- around `call` and `pcall` (Rust), the read-only globals and the error
-- handler that turns an error into Redis 7.0's error table.
local call, pcall_command, raised, locate, lrand48, srand48, sha1hex, base = ...
local error, type, tostring, select, xpcall = error, type, tostring, select, xpcall
local setmetatable, floor, sub, find = setmetatable, math.floor, string.sub, string.find

local redis = {
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
  REDIS_VERSION = '7.0.15', REDIS_VERSION_NUM = 0x0007000f,
}

redis.call = call
redis.pcall = pcall_command

local function one_string(...)
  local text = ...
  return select('#', ...) == 1 and type(text) == 'string' and text or nil
end

-- "-CODE text" keeps its code, anything else gets ERR (luaPushErrorBuff).
function redis.error_reply(...)
  local text = one_string(...)
  if not text then return {err = 'ERR wrong number or type of arguments'} end
  if sub(text, 1, 1) ~= '-' then text = '-' .. text end
  local code, message = 'ERR', sub(text, 2)
  local space = find(text, ' ', 1, true)
  if space then code, message = sub(text, 2, space - 1), sub(text, space + 1) end
  message = string.gsub(string.gsub(message, '^[\r\n]+', ''), '[\r\n]+$', '')
  return {err = code .. ' ' .. message}
end

function redis.status_reply(...)
  local text = one_string(...)
  if not text then return {err = 'ERR wrong number or type of arguments'} end
  return {ok = text}
end

function redis.sha1hex(...)
  local text = one_string(...)
  if not text then error('wrong number of arguments', 2) end
  return sha1hex(text)
end

function redis.log() end
function redis.setresp(version)
  if version ~= 2 then error('RESP version other than 2 is not supported by the simulated node', 2) end
end
function redis.replicate_commands() return true end
function redis.set_repl() end
function redis.breakpoint() return false end
function redis.debug() end

local maths = {}
for name, value in pairs(math) do maths[name] = value end
-- Lua's math_random over Redis' lrand48, as Redis 7.0 builds it.
function maths.random(...)
  local r = (lrand48() % 2147483647) / 2147483647
  local n, low, high = select('#', ...), ...
  if n == 0 then return r end
  if n == 1 then
    if low < 1 then error("bad argument #1 to 'random' (interval is empty)", 2) end
    return floor(r * low) + 1
  end
  if n == 2 then
    if low > high then error("bad argument #2 to 'random' (interval is empty)", 2) end
    return floor(r * (high - low + 1)) + low
  end
  error('wrong number of arguments', 2)
end
function maths.randomseed(seed) srand48(seed) end

for _, name in ipairs({
  'assert', 'error', 'ipairs', 'next', 'pairs', 'pcall', 'rawequal', 'rawget', 'rawset',
  'select', 'setmetatable', 'getmetatable', 'tonumber', 'tostring', 'type', 'unpack',
  'xpcall', '_VERSION', 'string', 'table', 'gcinfo',
}) do
  base[name] = _G[name]
end
base.math = maths
base.redis = redis

local env = setmetatable({}, {
  __index = function(_, name)
    local value = base[name]
    if value == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return value
  end,
  __newindex = function()
    error('Attempt to modify a readonly table', 2)
  end,
  __metatable = false,
})
base._G = env

local function handler(err)
  local from_call = raised(err)
  if from_call then return from_call end
  local source, line = locate()
  if type(err) ~= 'table' then err = {err = 'ERR ' .. tostring(err)} end
  if source then
    err.source = source
    err.line = line
  end
  return err
end

local function run(script)
  return xpcall(script, handler)
end

return env, run
