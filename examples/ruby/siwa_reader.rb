#!/usr/bin/env ruby
# frozen_string_literal: true

# Reads the state siwa-endpoint writes to Redis, with redis-rb (Debian: apt-get install
# ruby-redis). Only the Redis contract is used (docs/contract.md, "The Redis contract"). As a
# library: SIWAReader.session_valid?, user_state, drain_deletions, subscribe_to_revocations,
# and after an app transfer resolve_sub; apple_relay? for private relay addresses.
#
#   ruby siwa_reader.rb state --redis-url redis://127.0.0.1:6379/0 --client-id com.example.app \
#       --sub 001234.abc.0123 --session-started-at 1796000000000
#   ruby siwa_reader.rb resolve --redis-url URL --client-id com.example.app --id TRANSFER_SUB_OR_OLD_SUB
#   ruby siwa_reader.rb relay --emails abc@private.icloud.com,someone@example.com
#   ruby siwa_reader.rb deletions --redis-url URL [--group account-cleanup]
#   ruby siwa_reader.rb subscribe --redis-url URL [--count N]
#
# With Redis Cluster, instead of --redis-url (which then gives only the ACL user and password,
# and rediss:// for TLS): --cluster-nodes host:port,... (SIWA_REDIS_CLUSTER_NODES) and the
# endpoint's prefix, a hash tag: --prefix {siwa}. redis-rb's cluster option learns from the
# cluster which primary holds the one slot of every key of the contract.
#
# Over TLS (a rediss:// URL, one node or a cluster), the server's certificate is verified,
# host name included, against --redis-tls-ca-file FILE (SIWA_REDIS_TLS_CA_FILE) when given,
# else against the system's CAs; a cluster's certificates must name the addresses it announces.

require "json"
require "openssl"
require "redis"
require "uri"

module SIWAReader
  module_function

  # The contract's names, in one place.
  def user_key(client_id, sub, prefix = "siwa")
    "#{prefix}:user:{#{client_id}:#{sub}}" # {client_id:sub}: a hash tag
  end

  def events_stream(prefix = "siwa") = "#{prefix}:events"
  def deletions_stream(prefix = "siwa") = "#{prefix}:deletions" # one entry per account-deleted
  def notifications_channel(prefix = "siwa") = "#{prefix}:notifications"

  # A session is invalid if it began at or before the latest consent-revoked or
  # account-deleted event for this user in this app (times in Unix milliseconds).
  # After an app transfer, an old sub linked to its new one (transferred_to) counts the new
  # sub's events too.
  def session_valid?(redis, client_id, sub, session_started_at_ms, prefix = "siwa")
    revoked_at, moved_to = redis.hmget(user_key(client_id, sub, prefix), "sessions_revoked_at", "transferred_to")
    times = [revoked_at]
    times << redis.hget(user_key(client_id, moved_to, prefix), "sessions_revoked_at") if moved_to
    known = times.compact.map { |time| Integer(time) }
    known.empty? || session_started_at_ms > known.max
  end

  # Apple's private relay (Hide My Email) domains: new addresses use private.icloud.com, the
  # older privaterelay.appleid.com ones keep working.
  APPLE_RELAY_DOMAINS = %w[privaterelay.appleid.com private.icloud.com].freeze

  # Whether an email address is one of Apple's private relay addresses (either domain).
  def apple_relay?(address)
    local, _, domain = address.strip.rpartition("@")
    !local.empty? && APPLE_RELAY_DOMAINS.include?(domain.downcase)
  end

  # After an app transfer: the sub a user's notifications arrive under now, for a transfer
  # identifier `transfer import` exchanged or an old sub linked to its new one; nil otherwise
  # (keep the identifier you have).
  def transfer_key(client_id, transfer_sub, prefix = "siwa") = "#{prefix}:transfer-id:{#{client_id}:#{transfer_sub}}"

  def resolve_sub(redis, client_id, identifier, prefix = "siwa")
    redis.hget(transfer_key(client_id, identifier, prefix), "sub") ||
      redis.hget(user_key(client_id, identifier, prefix), "transferred_to")
  end

  def user_state(redis, client_id, sub, prefix = "siwa")
    fields = redis.hgetall(user_key(client_id, sub, prefix))
    {
      "account_deleted" => fields.key?("account_deleted_at"),
      "email_forwarding" => fields["email_forwarding"], # "enabled", "disabled" or nil
      "sessions_revoked_at" => fields.key?("sessions_revoked_at") ? Integer(fields["sessions_revoked_at"]) : nil,
      "last_event_type" => fields["last_event_type"]
    }
  end

  # Google's users (contract version 2): sub is the Google account ID, client_id the OAuth client ID.
  def google_user_key(client_id, sub, prefix = "siwa") = "#{prefix}:google:user:{#{client_id}:#{sub}}"

  # A Google session is invalid if it began at or before the latest sessions-revoked,
  # tokens-revoked or account-disabled (hijacking), or while Google says the account is disabled.
  def google_session_valid?(redis, client_id, sub, session_started_at_ms, prefix = "siwa")
    revoked_at, disabled = redis.hmget(google_user_key(client_id, sub, prefix), "sessions_revoked_at", "account_disabled")
    return false if disabled == "true"

    revoked_at.nil? || session_started_at_ms > Integer(revoked_at)
  end

  def google_user_state(redis, client_id, sub, prefix = "siwa")
    fields = redis.hgetall(google_user_key(client_id, sub, prefix))
    {
      "account_disabled" => fields["account_disabled"] == "true",
      "account_disabled_reason" => fields["account_disabled_reason"],
      "sessions_revoked_at" => fields.key?("sessions_revoked_at") ? Integer(fields["sessions_revoked_at"]) : nil,
      "last_event_type" => fields["last_event_type"]
    }
  end

  # Acts once per account deletion: a consumer group on the deletions stream (every entry
  # is an `account-deleted`). Each entry is acknowledged after it is handled, so a crash
  # re-delivers it (at least once: make the block idempotent). Returns how many deletions
  # were handled when nothing new is left.
  def drain_deletions(redis, group: "account-cleanup", consumer: "worker-1", prefix: "siwa")
    stream = deletions_stream(prefix)
    begin
      redis.xgroup(:create, stream, group, "0", mkstream: true)
    rescue Redis::CommandError => e
      raise unless e.message.start_with?("BUSYGROUP") # the group exists already: fine
    end
    handled = 0
    loop do
      entries = redis.xreadgroup(group, consumer, stream, ">", count: 100)[stream] || []
      return handled if entries.empty?

      entries.each do |id, fields|
        yield fields["client_id"], fields["sub"], Integer(fields["event_time"])
        handled += 1
        redis.xack(stream, group, id)
      end
    end
  end

  # Drops cached sessions the moment a revocation arrives: yields client_id, sub, type for
  # each applied consent-revoked or account-deleted. Blocks; subscribing takes the
  # connection, so give it one of its own. The block may `throw :stop` to return.
  def subscribe_to_revocations(subscriber, prefix = "siwa", on_subscribed: nil)
    catch(:stop) do
      subscriber.subscribe(notifications_channel(prefix)) do |on|
        on.subscribe { on_subscribed&.call }
        on.message do |_channel, text|
          message = JSON.parse(text) # never an email address
          if message["applied"] && %w[consent-revoked account-deleted].include?(message["type"])
            yield message["client_id"], message["sub"], message["type"]
          end
        end
      end
    end
  end
end

def options(words)
  raise ArgumentError, "arguments come as --name value" unless words.length.even?

  parsed = words.each_slice(2).to_h { |name, value| [name.delete_prefix("--"), value] }
  raise ArgumentError, "--redis-url or --cluster-nodes is required" unless parsed["redis-url"] || parsed["cluster-nodes"]

  parsed
end

# A client of one node, or of a cluster from its seed nodes (host:port,...).
def connect(args, prefix)
  url = URI(args.fetch("redis-url", "redis://localhost"))
  # Over TLS: the certificate and its host name verified, against the given CA file.
  tls = { ssl_params: { verify_mode: OpenSSL::SSL::VERIFY_PEER, verify_hostname: true,
                        ca_file: args["redis-tls-ca-file"] }.compact }
  tls = {} unless url.scheme == "rediss"
  return Redis.new(url: args["redis-url"], **tls) unless args["cluster-nodes"]
  raise ArgumentError, "--cluster-nodes needs a --prefix that is a hash tag, such as {siwa}" unless prefix =~ /{[^}]+}/

  credentials = url.user || url.password ? "#{url.user}:#{url.password}@" : ""
  Redis.new(cluster: args["cluster-nodes"].split(",").map { |node| "#{url.scheme}://#{credentials}#{node.strip}" }, **tls)
end

def main(command, words)
  if command == "relay"
    addresses = words[words.index("--emails") + 1].split(",")
    puts JSON.generate(addresses.to_h { |address| [address, SIWAReader.apple_relay?(address)] })
    return
  end
  args = options(words)
  prefix = args.fetch("prefix", "siwa")
  redis = connect(args, prefix)
  case command
  when "state"
    if args["provider"] == "google"
      state = SIWAReader.google_user_state(redis, args["client-id"], args["sub"], prefix)
      state["session_valid"] = SIWAReader.google_session_valid?(redis, args["client-id"], args["sub"],
                                                                 Integer(args["session-started-at"]), prefix)
      puts JSON.generate(state)
      return
    end
    state = SIWAReader.user_state(redis, args["client-id"], args["sub"], prefix)
    state["session_valid"] = SIWAReader.session_valid?(redis, args["client-id"], args["sub"],
                                                        Integer(args["session-started-at"]), prefix)
    puts JSON.generate(state)
  when "resolve"
    puts JSON.generate({ "sub" => SIWAReader.resolve_sub(redis, args["client-id"], args.fetch("id"), prefix) })
  when "deletions"
    SIWAReader.drain_deletions(redis, group: args.fetch("group", "account-cleanup"),
                                      consumer: args.fetch("consumer", "worker-1"), prefix: prefix) do |client_id, sub, event_time|
      # Your deletion duty goes here: delete what you hold for (client_id, sub).
      puts JSON.generate({ "client_id" => client_id, "sub" => sub, "event_time" => event_time })
    end
  when "subscribe"
    left = Integer(args.fetch("count", "1"))
    SIWAReader.subscribe_to_revocations(connect(args, prefix), prefix,
                                        on_subscribed: -> { puts "subscribed" }) do |client_id, sub, type|
      puts JSON.generate({ "client_id" => client_id, "sub" => sub, "type" => type }) # your code: drop cached sessions
      left -= 1
      throw :stop if left.zero?
    end
  else
    raise ArgumentError, "the command is state, resolve, relay, deletions or subscribe"
  end
ensure
  redis&.close
end

if $PROGRAM_NAME == __FILE__
  $stdout.sync = true
  begin
    main(ARGV.first, ARGV.drop(1))
  rescue StandardError => e
    warn "siwa_reader.rb: #{e.message}"
    exit 1
  end
end
