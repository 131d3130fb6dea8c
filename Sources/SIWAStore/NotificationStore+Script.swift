import SIWARedis

extension NotificationStore {
    /// The one script that applies a notification. Redis runs it atomically, so a
    /// check (seen marker, stored times) and the writes that depend on it cannot
    /// interleave with another worker's.
    ///
    /// KEYS: 1 user hash, 2 seen marker, 3 events stream, 4 deletions stream.
    /// ARGV: 1 channel, 2 client_id, 3 sub, 4 type (normalised), 5 raw_type,
    /// 6 event_time (ms), 7 jti, 8 email ('' when none), 9 is_private_email
    /// ('true'/'false'/''), 10 received_at (ms), 11 seen-marker TTL (ms),
    /// 12 stream max length, 13 the published JSON up to (not including) the
    /// `applied` value, 14 the receive time (ms) of an earlier call for this same delivery
    /// whose reply was lost ('' when there was none).
    ///
    /// A seen marker whose value is argument 14 was written by that earlier call (a timeout,
    /// or a connection that dropped after the script ran): the answer is `stored`, not
    /// `duplicate`, because this delivery is what wrote it.
    ///
    /// Redis does not roll a script back: a runtime error after a write leaves that
    /// write. So every refusal happens before the first write, and the seen marker is
    /// written last: if anything failed before it, Apple's retry applies the
    /// notification again, and every write here is idempotent (times only move
    /// forward), so a repeat is harmless.
    ///
    /// Probe mode (two ARGV: channel, stream max length), used by the start-up check: asks
    /// Redis whether this user may run every command below on these keys and this channel
    /// (`redis.acl_check_cmd`, Redis 7; Redis 6 only shows the script loads and runs), and
    /// returns `ready` or a NOPERM error naming the command. It writes nothing.
    ///
    /// No email address goes to the stream: a stream entry cannot be changed, and
    /// `XADD MAXLEN` keeps entries for a long time, so an address written there would
    /// outlive the user's `account-deleted`. The address lives in the user hash only,
    /// which `account-deleted` purges.
    ///
    /// The deletions stream gets a copy of the events entry of every accepted
    /// `account-deleted` (stale ones too: each is a deletion duty), in the same call, so a
    /// consumer group's lag on it is exactly its deletions not yet handled. It is never
    /// trimmed here: a trimmed entry would be a deletion nobody is told about.
    ///
    /// The events stream is trimmed to `SIWA_STREAM_MAXLEN` (`XADD MAXLEN ~`), except below
    /// what a webhook destination still needs: when delivery groups (`deliver:*`) exist, the
    /// trim (`XTRIM MINID`) stops at the lowest of their oldest pending entries and
    /// last-delivered IDs, so a destination that is down keeps its events (the stream then
    /// grows past the maximum until it catches up; `siwa_webhook_pending` shows it).
    static let applyScript = """
        local user_key, seen_key, stream_key = KEYS[1], KEYS[2], KEYS[3]
        local deletions_key = KEYS[4]
        if #ARGV == 2 then
          -- Redis 6 has no acl_check_cmd: loading and running the script is all it can show.
          if redis.acl_check_cmd == nil then return 'ready' end
          local checks = {
            {'EXISTS', seen_key}, {'GET', seen_key}, {'TYPE', user_key}, {'TYPE', stream_key}, {'HGET', user_key, 'f'},
            {'HEXISTS', user_key, 'f'}, {'HSET', user_key, 'f', 'v'}, {'HDEL', user_key, 'f'},
            {'XADD', stream_key, 'MAXLEN', '~', ARGV[2], '*', 'f', 'v'}, {'PUBLISH', ARGV[1], 'm'},
            {'XINFO', 'GROUPS', stream_key}, {'XPENDING', stream_key, 'g'}, {'XLEN', stream_key},
            {'XRANGE', stream_key, '-', '+', 'COUNT', '1'}, {'XTRIM', stream_key, 'MINID', '0-1'},
            {'SET', seen_key, 'v', 'PX', '1'},
            {'TYPE', deletions_key}, {'XADD', deletions_key, '*', 'f', 'v'},
          }
          for _, check in ipairs(checks) do
            if not redis.acl_check_cmd(unpack(check)) then
              return redis.error_reply('NOPERM this user may not run ' .. check[1] ..
                ' on the keys or the channel siwa-endpoint writes (' .. check[2] .. ')')
            end
          end
          return 'ready'
        end
        \(streamAppendFunction)
        local channel, client_id, sub, event_type, raw_type = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
        local event_time_text, jti, email, is_private = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
        local received_at, seen_ttl_ms, stream_maxlen, message_head = ARGV[10], ARGV[11], ARGV[12], ARGV[13]
        local earlier_attempt = ARGV[14] or ''
        local event_time = tonumber(event_time_text)
        if event_time == nil then return redis.error_reply('ERR event_time is not a number') end

        if redis.call('EXISTS', seen_key) == 1 then
          -- A marker of another type (written by another program) is still a marker: this
          -- record's own key, never an error that would block every other record.
          if earlier_attempt ~= '' and redis.call('TYPE', seen_key)['ok'] == 'string'
            and redis.call('GET', seen_key) == earlier_attempt then return 'stored' end
          return 'duplicate'
        end

        -- The shared key first: a stream key of the wrong type refuses every record alike (a
        -- deployment refusal, named), and must not pass for one user's key of the wrong type.
        local stream_type = redis.call('TYPE', stream_key)['ok']
        if stream_type ~= 'none' and stream_type ~= 'stream' then
          return redis.error_reply('WRONGTYPE the events key ' .. stream_key .. ' holds a ' .. stream_type ..
            ', not a stream: every notification is refused until it is deleted or renamed')
        end
        local user_type = redis.call('TYPE', user_key)['ok']
        if user_type ~= 'none' and user_type ~= 'hash' then
          return redis.error_reply('\(RedisError.userKeyWrongTypeReply)')
        end
        if event_type == 'account-deleted' then
          local deletions_type = redis.call('TYPE', deletions_key)['ok']
          if deletions_type ~= 'none' and deletions_type ~= 'stream' then
            return redis.error_reply('WRONGTYPE the deletions key ' .. deletions_key .. ' holds a ' .. deletions_type ..
              ', not a stream: every account deletion is refused until it is deleted or renamed')
          end
        end

        -- True when no time is stored in the field or this event is strictly later.
        -- Ties keep what is stored: the first of two events at the same millisecond wins.
        local function newer(field)
          local stored = tonumber(redis.call('HGET', user_key, field) or '')
          return stored == nil or event_time > stored
        end

        local changes, removals = {}, {}
        local function set(field, value)
          changes[#changes + 1] = field
          changes[#changes + 1] = value
        end

        local outcome
        if event_type == 'consent-revoked' or event_type == 'account-deleted' then
          local own_field = 'consent_revoked_at'
          if event_type == 'account-deleted' then own_field = 'account_deleted_at' end
          if newer(own_field) then
            outcome = 'applied'
            set(own_field, event_time_text)
            if newer('sessions_revoked_at') then set('sessions_revoked_at', event_time_text) end
            if event_type == 'account-deleted' then
              -- Apple disables relay forwarding for a deleted account, whatever came before.
              set('email_forwarding', 'disabled')
              if newer('email_forwarding_at') then set('email_forwarding_at', event_time_text) end
              removals = {'email', 'is_private_email'}
            end
          else
            outcome = 'stale'
          end
        elseif event_type == 'email-enabled' or event_type == 'email-disabled' then
          -- After account deletion no email field changes again, whatever the event time:
          -- the address must never come back.
          if redis.call('HEXISTS', user_key, 'account_deleted_at') == 1 or not newer('email_forwarding_at') then
            outcome = 'stale'
          else
            outcome = 'applied'
            if event_type == 'email-enabled' then
              set('email_forwarding', 'enabled')
            else
              set('email_forwarding', 'disabled')
            end
            set('email_forwarding_at', event_time_text)
            if email ~= '' then set('email', email) end
            -- A flag that came with an older address must not describe the new one.
            if is_private ~= '' then set('is_private_email', is_private) else removals = {'is_private_email'} end
          end
        else
          outcome = 'recorded'
        end

        if outcome == 'applied' then
          if newer('last_event_at') then
            set('last_event_type', event_type)
            set('last_event_at', event_time_text)
            set('last_jti', jti)
          end
          set('updated_at', received_at)
          redis.call('HSET', user_key, unpack(changes))
          if #removals > 0 then redis.call('HDEL', user_key, unpack(removals)) end
        end

        local applied = '0'
        if outcome == 'applied' then applied = '1' end
        local fields = {'provider', 'apple', 'client_id', client_id, 'sub', sub, 'type', event_type,
          'raw_type', raw_type, 'event_time', event_time_text, 'jti', jti, 'applied', applied}
        append_event(stream_key, stream_maxlen, fields)
        if event_type == 'account-deleted' then redis.call('XADD', deletions_key, '*', unpack(fields)) end
        local published = 'false'
        if outcome == 'applied' then published = 'true' end
        redis.call('PUBLISH', channel, message_head .. published .. '}')
        redis.call('SET', seen_key, received_at, 'PX', seen_ttl_ms)
        return outcome
        """

    /// The Lua function both apply scripts append a stream entry with: `XADD MAXLEN ~`, except
    /// below what a webhook destination still needs (see `applyScript`). One text, so Apple's
    /// and Google's entries are trimmed by one rule.
    static let streamAppendFunction = """
        local function append_event(stream_key, stream_maxlen, fields)
          -- Trimming never drops an entry a webhook destination has not had: below every
          -- delivery group's (deliver:*) oldest pending entry and last-delivered ID, nothing goes.
          local floor = nil
          local stream_type = redis.call('TYPE', stream_key)['ok']
          if stream_type == 'stream' then
            local function id_less(a, b)
              local am, as = string.match(a, '^(%d+)-(%d+)$')
              local bm, bs = string.match(b, '^(%d+)-(%d+)$')
              am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
              return am < bm or (am == bm and as < bs)
            end
            for _, group in ipairs(redis.call('XINFO', 'GROUPS', stream_key)) do
              local info = {}
              for i = 1, #group, 2 do info[group[i]] = group[i + 1] end
              if type(info['name']) == 'string' and string.sub(info['name'], 1, 8) == 'deliver:' then
                local need = info['last-delivered-id']
                if tonumber(info['pending']) > 0 then
                  local oldest = redis.call('XPENDING', stream_key, info['name'])[2]
                  if oldest and id_less(oldest, need) then need = oldest end
                end
                if floor == nil or id_less(need, floor) then floor = need end
              end
            end
            if floor ~= nil then
              redis.call('XADD', stream_key, '*', unpack(fields))
              local excess = redis.call('XLEN', stream_key) - tonumber(stream_maxlen)
              local first = redis.call('XRANGE', stream_key, '-', '+', 'COUNT', 1)[1]
              if excess > 0 and first and id_less(first[1], floor) then
                -- The first entry MAXLEN would keep (at most 1000 in: a long backlog drains a
                -- little with each notification), or the floor when that is lower.
                local probe = redis.call('XRANGE', stream_key, '-', '+', 'COUNT', math.min(excess, 1000) + 1)
                local boundary = probe[#probe][1]
                if id_less(floor, boundary) then boundary = floor end
                redis.call('XTRIM', stream_key, 'MINID', boundary)
              end
            end
          end
          if floor == nil then redis.call('XADD', stream_key, 'MAXLEN', '~', stream_maxlen, '*', unpack(fields)) end
        end
        """
}

// The record policy, beside the script that writes the reply it reads.
extension RedisError {
    /// The apply script's refusal when the user's own hash holds another type: the one
    /// `WRONGTYPE` that is about one record.
    static let userKeyWrongTypeReply = "WRONGTYPE the user key does not hold a hash"

    /// True only for a refusal known to be about one record, which the same record would
    /// meet again whatever is fixed in the deployment: the user's own hash of the wrong type
    /// (written by another program: the apply script's `userKeyWrongTypeReply`), or a sub
    /// that would break the key layout. Everything else is about the deployment: the spool
    /// keeps the record, in order, and retries. That includes every other `WRONGTYPE`: a
    /// shared key such as the events stream of the wrong type refuses every record alike, as
    /// do NOPERM, NOAUTH, `ERR max number of clients reached`, a script error every call
    /// hits and a reply of an unexpected shape.
    public var isRecordSpecific: Bool {
        code == .unsafeKey || (reply == .wrongType && message.hasPrefix(Self.userKeyWrongTypeReply))
    }
}
