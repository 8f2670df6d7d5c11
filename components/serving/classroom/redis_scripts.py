"""The Lua scripts of ``RedisRoomStore``: every method that checks and changes a room is one script, so it is atomic
across replicas as the lock makes it in one process. Each script gets the room's hash as ``KEYS[1]`` (its other keys
are that name with a suffix, all in one hash slot: ``specdec:class:{CODE}``) and the caller's clock as ``ARGV[1]``
(epoch seconds: replicas agree on a timer's end as their clocks do). It answers a status word first (``ok``, or the
refusal the store turns into words) and then its values.

The room's hash holds: ``secret`` (the presenter secret's SHA-256, never the secret), ``chapter``, ``question`` (JSON),
``phase``, ``run_no``, ``deadline`` (the guess timer's end, or ""), ``setting`` (JSON) and ``setting_label``,
``nicknames`` ("1" when joining asks for one), ``next_handle``, ``live_no``, ``expires_ms``, ``stage`` and
``version``. Beside it: ``:students`` (id → [handle, nickname]), ``:handles`` (handle → id), ``:nicks`` (nickname
key → id), ``:removed`` (id → handle), ``:guesses`` (id → the guess as JSON, this run), ``:sends`` (id → recent send
times), ``:shown``, ``:memo``, ``:revealed``, ``:live`` (JSON) and ``:results`` (a list of JSON records). Every key
expires when the room does (``PEXPIREAT``): Redis frees an expired room itself.
"""
from __future__ import annotations

PRELUDE = r"""
local R = KEYS[1]
local now = tonumber(ARGV[1])
local function k(suffix) return R .. ':' .. suffix end
local function field(f) return redis.call('HGET', R, f) end
local function touch(key) redis.call('PEXPIREAT', key, field('expires_ms')) end
local function alive()
  local e = field('expires_ms')
  return e and tonumber(e) > now * 1000
end
local function phase_now()
  local p, d = field('phase'), field('deadline')
  if p == 'open' and d and d ~= '' and now >= tonumber(d) then return 'locked' end
  return p
end
local function bump(students_see)
  redis.call('HINCRBY', R, 'version', 1)
  if students_see then redis.call('HINCRBY', R, 'stage', 1) end
end
local function lead_info()
  local p = phase_now()
  local d = field('deadline')
  return {'ok', field('chapter'), p, field('run_no'), tostring(redis.call('HLEN', k('students'))),
          tostring(redis.call('HLEN', k('guesses'))), field('version'), field('expires_ms'),
          (p == 'open' and d) or '', field('nicknames')}
end
"""

# checks the presenter's secret (ARGV[2], its hash) before the body
LED = PRELUDE + r"""
if not alive() then return {'gone'} end
if field('secret') ~= ARGV[2] then return {'not_lead'} end
"""

CREATE = r"""
local rooms, R = KEYS[1], KEYS[2]
local now, limit, exp = tonumber(ARGV[3]), tonumber(ARGV[5]), ARGV[4]
redis.call('ZREMRANGEBYSCORE', rooms, '-inf', now * 1000)
if redis.call('ZCARD', rooms) >= limit then return {'full'} end
if redis.call('EXISTS', R) == 1 then return {'taken'} end
redis.call('HSET', R, 'secret', ARGV[2], 'chapter', '1', 'phase', 'waiting', 'run_no', '0', 'stage', '0',
           'version', '0', 'deadline', '', 'nicknames', ARGV[6], 'next_handle', '0', 'live_no', '0',
           'expires_ms', exp, 'setting_label', '')
redis.call('PEXPIREAT', R, exp)
redis.call('ZADD', rooms, exp, ARGV[1])
return {'ok'}
"""

LEAD = LED + "return lead_info()"

END = LED + r"""
for _, s in ipairs({'students', 'handles', 'nicks', 'removed', 'guesses', 'sends', 'shown', 'memo', 'revealed',
                    'live', 'results'}) do redis.call('DEL', k(s)) end
redis.call('DEL', R)
redis.call('ZREM', KEYS[2], ARGV[3])
return {'ok'}
"""

SET_CHAPTER = LED + r"""
if field('chapter') ~= ARGV[3] or not field('question') then
  redis.call('HSET', R, 'chapter', ARGV[3], 'question', ARGV[4], 'phase', 'waiting', 'setting', '',
             'setting_label', '', 'deadline', '')
  redis.call('DEL', k('shown'), k('memo'), k('revealed'), k('guesses'))
  bump(true)
end
return lead_info()
"""

PUBLISH = LED + r"""
redis.call('HSET', R, 'chapter', ARGV[3], 'question', ARGV[4], 'phase', 'open', 'setting', ARGV[7],
           'setting_label', ARGV[8], 'deadline', '')
redis.call('HINCRBY', R, 'run_no', 1)
redis.call('SET', k('shown'), ARGV[5])
redis.call('SET', k('memo'), ARGV[6])
touch(k('shown'))
touch(k('memo'))
redis.call('DEL', k('guesses'), k('revealed'))
bump(true)
return lead_info()
"""

CHOOSE_SETTING = LED + r"""
local p = field('phase')
if field('chapter') == ARGV[3] and (p == 'open' or p == 'locked' or p == 'waiting') then
  redis.call('HSET', R, 'setting', ARGV[5], 'setting_label', ARGV[4])
  bump(true)
end
return lead_info()
"""

LOCK = LED + r"""
local p = phase_now()
if p == 'open' or p == 'locked' then
  local new = (ARGV[3] == '1') and 'locked' or 'open'
  if new ~= p or field('deadline') ~= '' then
    redis.call('HSET', R, 'phase', new, 'deadline', '')
    bump(true)
  end
end
return lead_info()
"""

TIMER = LED + r"""
if phase_now() ~= 'open' then return {'not_open'} end
redis.call('HSET', R, 'deadline', ARGV[3])
bump(true)
return lead_info()
"""

BEGIN_REVEAL = LED + r"""
local memo = redis.call('GET', k('memo'))
if field('phase') == 'waiting' or not memo then return {'no_run'} end
if field('phase') ~= 'locked' or field('deadline') ~= '' then
  redis.call('HSET', R, 'phase', 'locked', 'deadline', '')
  bump(true)
end
return {'ok', field('chapter'), field('run_no'), memo, field('setting') or '', redis.call('HGETALL', k('guesses'))}
"""

FINISH_REVEAL = LED + r"""
if field('chapter') == ARGV[3] and field('run_no') == ARGV[4] and field('phase') == 'locked' then
  if ARGV[5] ~= '' then
    redis.call('SET', k('revealed'), ARGV[5])
    touch(k('revealed'))
    redis.call('HSET', R, 'phase', 'revealed')
    if ARGV[6] ~= '' then
      redis.call('RPUSH', k('results'), ARGV[6])
      touch(k('results'))
    end
  else
    redis.call('HSET', R, 'phase', 'open')
    redis.call('DEL', k('revealed'))
  end
  bump(true)
end
return lead_info()
"""

PUSH_LIVE = LED + r"""
redis.call('SET', k('live'), ARGV[3])
touch(k('live'))
redis.call('HINCRBY', R, 'live_no', 1)
bump(true)
return lead_info()
"""

ROSTER = LED + r"""
return {'ok', redis.call('HGETALL', k('students')), redis.call('HKEYS', k('guesses'))}
"""

REMOVE = LED + r"""
local id = redis.call('HGET', k('handles'), ARGV[3])
if not id then return {'no_student'} end
redis.call('HDEL', k('handles'), ARGV[3])
redis.call('HDEL', k('students'), id)
redis.call('HDEL', k('guesses'), id)
redis.call('HSET', k('removed'), id, ARGV[3])
touch(k('removed'))
bump(true)
return lead_info()
"""

RESULTS = LED + r"""
return {'ok', redis.call('LRANGE', k('results'), 0, -1)}
"""

# ARGV: now, the stored id ("" for none), a new id, the nickname ("" for none), its key, the room's student limit
JOIN = PRELUDE + r"""
if not alive() then return {'gone'} end
local old = ARGV[2]
if old ~= '' then
  if redis.call('HEXISTS', k('removed'), old) == 1 then return {'removed'} end
  local s = redis.call('HGET', k('students'), old)
  if s then return {'again', s, redis.call('HGET', k('guesses'), old) or ''} end
end
if redis.call('HLEN', k('students')) >= tonumber(ARGV[6]) then return {'full'} end
local nick = ''
if field('nicknames') == '1' then
  nick = ARGV[4]
  if nick == '' then return {'need_nick'} end
  if redis.call('HEXISTS', k('nicks'), ARGV[5]) == 1 then return {'nick_taken'} end
end
local h = redis.call('HINCRBY', R, 'next_handle', 1)
redis.call('HSET', k('students'), ARGV[3], cjson.encode({h, nick}))
redis.call('HSET', k('handles'), tostring(h), ARGV[3])
touch(k('students'))
touch(k('handles'))
if nick ~= '' then
  redis.call('HSET', k('nicks'), ARGV[5], ARGV[3])
  touch(k('nicks'))
end
bump(false)
return {'new', tostring(h), nick}
"""

# ARGV: now, the student, chapter, run, the guess as JSON, sends allowed, their window (s)
GUESS = PRELUDE + r"""
if not alive() then return {'gone'} end
local me = ARGV[2]
if redis.call('HEXISTS', k('students'), me) == 0 then
  if redis.call('HEXISTS', k('removed'), me) == 1 then return {'removed'} end
  return {'not_joined'}
end
if field('chapter') ~= ARGV[3] or field('run_no') ~= ARGV[4] then return {'moved'} end
local p = phase_now()
if p ~= 'open' then return {'closed', p} end
local raw = redis.call('HGET', k('sends'), me)
local recent = {}
if raw then
  for _, t in ipairs(cjson.decode(raw)) do
    if now - t < tonumber(ARGV[7]) then recent[#recent + 1] = t end
  end
end
if #recent >= tonumber(ARGV[6]) then return {'rate'} end
recent[#recent + 1] = now
redis.call('HSET', k('sends'), me, cjson.encode(recent))
touch(k('sends'))
if redis.call('HGET', k('guesses'), me) ~= ARGV[5] then
  redis.call('HSET', k('guesses'), me, ARGV[5])
  touch(k('guesses'))
  bump(false)
end
return {'ok'}
"""

__all__ = ["PRELUDE", "CREATE", "LEAD", "END", "SET_CHAPTER", "PUBLISH", "CHOOSE_SETTING", "LOCK", "TIMER",
           "BEGIN_REVEAL", "FINISH_REVEAL", "PUSH_LIVE", "ROSTER", "REMOVE", "RESULTS", "JOIN", "GUESS"]
