import SIWARedis

extension NotificationStore {
    /// The one script that applies a Security Event Token from Google, every event of it for
    /// every client ID its `aud` names, atomically (one call per token).
    ///
    /// KEYS: 1 seen marker (`P:google:seen:<jti>`), 2 events stream, then the key of each entry
    /// that has one (a user hash, or a verification hash), named by index from ARGV.
    /// ARGV: 1 channel, 2 received_at (ms), 3 seen-marker TTL (ms), 4 stream max length,
    /// 5 jti, 6 event_time (`iat` in ms), 7 verification TTL (ms), then 12 per entry: key
    /// index (0: none), client_id, sub ('' when none), type (short name), raw_type, reason,
    /// state, token_type, token_identifier_alg, token (each '' when not sent), ends_sessions
    /// ('1'/'0'), the published JSON up to (not including) the `applied` value.
    ///
    /// Every refusal comes before the first write, and the seen marker is written last, as in
    /// Apple's script: a redelivery after a failure applies the token again, and every write
    /// is idempotent (times only move forward; ties keep what is stored).
    ///
    /// The user hash `P:google:user:{<client_id>:<sub>}`: `sessions_revoked_at` (raised by
    /// `sessions-revoked`, `tokens-revoked` and `account-disabled` for `hijacking`),
    /// `account_disabled` (`true`/`false`), `account_disabled_reason` (when sent),
    /// `account_state_at` (the time of the latest disabled / enabled applied),
    /// `credential_change_required_at`, `last_event_type`, `last_event_at`, `last_jti`,
    /// `updated_at`.
    ///
    /// Probe mode (two ARGV: channel, stream max length; KEYS: seen marker, events stream, a
    /// user hash, a verification hash), used by the start-up check as Apple's script's is:
    /// asks Redis (`redis.acl_check_cmd`, Redis 7) whether this user may run every command
    /// below on these keys and this channel, and returns `ready` or a NOPERM error naming
    /// the command. It writes nothing.
    ///
    /// Returns `applied` when any entry moved a user field, else `stale` when
    /// a user event moved nothing (older than what is held), else `recorded`
    /// (`token-revoked`, `verification` and unknown types change no user field).
    static let securityEventScript = """
        local seen_key, stream_key = KEYS[1], KEYS[2]
        if #ARGV == 2 then
          if redis.acl_check_cmd == nil then return 'ready' end
          local user_key, verification_key = KEYS[3], KEYS[4]
          local checks = {
            {'EXISTS', seen_key}, {'TYPE', stream_key}, {'TYPE', user_key}, {'HGET', user_key, 'f'},
            {'HSET', user_key, 'f', 'v'}, {'HDEL', user_key, 'f'}, {'HSET', verification_key, 'f', 'v'},
            {'PEXPIRE', verification_key, '1'}, {'XADD', stream_key, 'MAXLEN', '~', ARGV[2], '*', 'f', 'v'},
            {'XINFO', 'GROUPS', stream_key}, {'XPENDING', stream_key, 'g'}, {'XLEN', stream_key},
            {'XRANGE', stream_key, '-', '+', 'COUNT', '1'}, {'XTRIM', stream_key, 'MINID', '0-1'},
            {'PUBLISH', ARGV[1], 'm'}, {'SET', seen_key, 'v', 'PX', '1'},
          }
          for _, check in ipairs(checks) do
            if not redis.acl_check_cmd(unpack(check)) then
              return redis.error_reply('NOPERM this user may not run ' .. check[1] ..
                ' on the keys or the channel siwa-endpoint writes for Google (' .. check[2] .. ')')
            end
          end
          return 'ready'
        end
        local channel, received_at, seen_ttl_ms, stream_maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
        local jti, event_time_text, verification_ttl_ms = ARGV[5], ARGV[6], ARGV[7]
        local event_time = tonumber(event_time_text)
        if event_time == nil then return redis.error_reply('ERR event_time is not a number') end
        local per_entry = 12
        local count = (#ARGV - 7) / per_entry

        if redis.call('EXISTS', seen_key) == 1 then return 'duplicate' end

        local stream_type = redis.call('TYPE', stream_key)['ok']
        if stream_type ~= 'none' and stream_type ~= 'stream' then
          return redis.error_reply('WRONGTYPE the events key ' .. stream_key .. ' holds a ' .. stream_type ..
            ', not a stream: every notification is refused until it is deleted or renamed')
        end
        for i = 0, count - 1 do
          local index = tonumber(ARGV[8 + i * per_entry])
          if index > 0 then
            local key_type = redis.call('TYPE', KEYS[index])['ok']
            if key_type ~= 'none' and key_type ~= 'hash' then
              return redis.error_reply('\(RedisError.userKeyWrongTypeReply)')
            end
          end
        end
        \(streamAppendFunction)
        local any_applied, any_stale = false, false
        for i = 0, count - 1 do
          local base = 8 + i * per_entry
          local index = tonumber(ARGV[base])
          local client_id, sub, event_type, raw_type = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
          local reason, state = ARGV[base + 5], ARGV[base + 6]
          local token_type, token_alg, token = ARGV[base + 7], ARGV[base + 8], ARGV[base + 9]
          local ends_sessions, message_head = ARGV[base + 10], ARGV[base + 11]
          local applied = false
          if index > 0 and event_type == 'verification' then
            local key = KEYS[index]
            redis.call('HSET', key, 'received_at', received_at, 'jti', jti, 'client_id', client_id,
              'event_time', event_time_text)
            redis.call('PEXPIRE', key, verification_ttl_ms)
          elseif index > 0 then
            local user_key = KEYS[index]
            local function newer(field)
              local stored = tonumber(redis.call('HGET', user_key, field) or '')
              return stored == nil or event_time > stored
            end
            local changes, removals = {}, {}
            local function set(field, value)
              changes[#changes + 1] = field
              changes[#changes + 1] = value
            end
            if ends_sessions == '1' and newer('sessions_revoked_at') then
              set('sessions_revoked_at', event_time_text)
              applied = true
            end
            if event_type == 'account-disabled' or event_type == 'account-enabled' then
              if newer('account_state_at') then
                applied = true
                set('account_state_at', event_time_text)
                if event_type == 'account-disabled' then
                  set('account_disabled', 'true')
                  if reason ~= '' then set('account_disabled_reason', reason) else removals = {'account_disabled_reason'} end
                else
                  set('account_disabled', 'false')
                  removals = {'account_disabled_reason'}
                end
              end
            elseif event_type == 'account-credential-change-required' then
              if newer('credential_change_required_at') then
                set('credential_change_required_at', event_time_text)
                applied = true
              end
            end
            if applied then
              if newer('last_event_at') then
                set('last_event_type', event_type)
                set('last_event_at', event_time_text)
                set('last_jti', jti)
              end
              set('updated_at', received_at)
              redis.call('HSET', user_key, unpack(changes))
              if #removals > 0 then redis.call('HDEL', user_key, unpack(removals)) end
              any_applied = true
            elseif event_type ~= 'unknown' then
              any_stale = true
            end
          end

          local applied_flag = '0'
          if applied then applied_flag = '1' end
          local fields = {'provider', 'google', 'client_id', client_id, 'sub', sub, 'type', event_type,
            'raw_type', raw_type, 'event_time', event_time_text, 'jti', jti, 'applied', applied_flag}
          local optional = {{'reason', reason}, {'state', state}, {'token_type', token_type},
            {'token_identifier_alg', token_alg}, {'token', token}}
          for _, pair in ipairs(optional) do
            if pair[2] ~= '' then
              fields[#fields + 1] = pair[1]
              fields[#fields + 1] = pair[2]
            end
          end
          append_event(stream_key, stream_maxlen, fields)
          local published = 'false'
          if applied then published = 'true' end
          redis.call('PUBLISH', channel, message_head .. published .. '}')
        end

        redis.call('SET', seen_key, received_at, 'PX', seen_ttl_ms)
        if any_applied then return 'applied' end
        if any_stale then return 'stale' end
        return 'recorded'
        """
}
