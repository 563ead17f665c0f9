-- The Lua job of scripts/bench_programs.sh: every Lua value lives in memory the interpreter gets
-- through realloc/free (lauxlib's l_alloc), so tables and strings are the allocator's work.
-- A word count, records in tables sorted on two keys, string building with format, gsub and
-- concat, and short-lived tables. A fixed xorshift generator (not math.random): the same data on
-- every machine. Usage: lua5.4 work.lua N. Prints a checksum of its results.
local n = tonumber(arg[1] or "100000")
local s = 18
local function rnd(k) -- 0 .. k-1
  s = s ~ (s << 13) & 0xffffffff
  s = s ~ (s >> 17)
  s = s ~ (s << 5) & 0xffffffff
  return s % k
end
local letters = "abcdefghijklmnopqrstuvwxyz"
local words = {}
for i = 1, 30000 do
  local t = {}
  for j = 1, 3 + rnd(12) do local c = rnd(26) + 1; t[j] = letters:sub(c, c) end
  words[i] = table.concat(t)
end
local sum = 0
local function add(str) for i = 1, #str, 7 do sum = (sum * 31 + str:byte(i)) % 4294967296 end end

local tokens, count = {}, {}
for i = 1, n do
  local w = words[rnd(#words) + 1]
  tokens[i] = w
  count[w] = (count[w] or 0) + 1
end
local keys = {}
for k in pairs(count) do keys[#keys + 1] = k end
table.sort(keys, function(a, b) if count[a] ~= count[b] then return count[a] > count[b] end return a < b end)
for i = 1, 50 do add(keys[i]) end

local recs = {}
for i = 1, n // 4 do
  local tags = {}
  for j = 1, rnd(5) do tags[j] = words[rnd(#words) + 1] end
  recs[i] = { name = words[rnd(#words) + 1], v = rnd(1000000000), tags = tags }
end
table.sort(recs, function(a, b) if a.name ~= b.name then return a.name < b.name end return a.v > b.v end)
local groups = {}
for _, r in ipairs(recs) do
  local g = r.name:sub(1, 2)
  groups[g] = groups[g] or {}
  table.insert(groups[g], r)
end
local parts = {}
for _, r in ipairs(recs) do
  parts[#parts + 1] = string.format("%s=%d[%s]", r.name, r.v, table.concat(r.tags, ","))
end
local text = table.concat(parts, "\n")
local t2, m = text:gsub("([aeiou])(%a+)", "%2%1")
add(t2:sub(1, 100000)); sum = (sum + m) % 4294967296
local kept = {}
for i = 0, n // 8 do
  local h = {}
  for j = 1, 12 do h[tokens[(i % 1000) + j]] = i end
  local ks = {}
  for k in pairs(h) do ks[#ks + 1] = k end
  table.sort(ks)
  if i % 97 == 0 then kept[#kept + 1] = table.concat(ks, "-") end
end
table.sort(kept)
add(table.concat(kept))
local ng = 0
for _ in pairs(groups) do ng = ng + 1 end
print(string.format("%d %d %d %d", sum, #text, ng, #kept))
