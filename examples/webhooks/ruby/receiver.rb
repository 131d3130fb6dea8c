# frozen_string_literal: true

# A siwa-endpoint webhook receiver in Ruby, with the standard library only (openssl, json,
# webrick: Debian's ruby-webrick): verify, dedupe on webhook-id, apply by event_time, then
# 2xx (docs/webhooks.md).
#
# consent-revoked and account-deleted end the user's sessions that began at or before the
# event; account-deleted also starts the account's deletion (an entry of
# `account_deletions`). The store is one JSON file, rewritten whole (written, fsync'd,
# renamed over the old one, directory fsync'd) before the answer: a 2xx means it is stored.
#
#   ruby receiver.rb --listen 127.0.0.1:8080 --keys-file /etc/myapp/siwa-webhook.keys \
#       --store /var/lib/myapp/siwa.json
#
# The keys file: one key a line, `whsec_...` (v1, HMAC-SHA256) or `whpk_...` (v1a, ed25519),
# two during a rotation.

require 'base64'
require 'json'
require 'openssl'
require 'optparse'
require 'webrick'

TOLERANCE_SECONDS = 300
MAX_BODY_BYTES = 65_536
DRAIN_LIMIT_BYTES = 1 << 20 # a larger body is read and dropped, so the client gets the 413, not a reset
REVOKING = %w[consent-revoked account-deleted].freeze
EMAIL = %w[email-disabled email-enabled].freeze
# Google's events (data.provider "google", sent only to a destination whose types name them):
# these end the Google user's sessions, as account-disabled does for hijacking.
GOOGLE_ENDING = %w[sessions-revoked tokens-revoked].freeze

# Apple's bodies carry no provider. Google's client IDs never equal Apple's, so a Google
# user's records sit beside Apple's under their own client_id and sub.
def ends_sessions?(data)
  provider = data.fetch('provider', 'apple')
  kind = data['event_type']
  return REVOKING.include?(kind) if provider == 'apple'

  provider == 'google' && data['sub'] != '' &&
    (GOOGLE_ENDING.include?(kind) || (kind == 'account-disabled' && data['reason'] == 'hijacking'))
end
# An ed25519 public key as DER (SubjectPublicKeyInfo): this prefix, then the 32 raw bytes.
ED25519_SPKI_PREFIX = ['302a300506032b6570032100'].pack('H*')

Refused = Class.new(StandardError) do
  attr_reader :status

  def initialize(status, outcome)
    super(outcome)
    @status = status
  end
end

def read_keys(file)
  File.read(file).split.map do |line|
    if line.start_with?('whsec_')
      [:v1, Base64.strict_decode64(line.delete_prefix('whsec_'))]
    elsif line.start_with?('whpk_')
      [:v1a, OpenSSL::PKey.read(ED25519_SPKI_PREFIX + Base64.strict_decode64(line.delete_prefix('whpk_')))]
    else
      abort("#{file}: a key is whsec_... or whpk_...")
    end
  end
end

# The webhook-id, once one signature of the header verifies under one key (a rotation sends
# old and new: any one passes) and the timestamp is within 5 minutes of now.
def verify(keys, request, body)
  id, timestamp, signatures = request['webhook-id'], request['webhook-timestamp'], request['webhook-signature']
  raise Refused.new(401, 'headers_missing') if [id, timestamp, signatures].any? { |value| value.nil? || value.empty? }
  unless timestamp.match?(/\A[0-9]{1,12}\z/) && (Time.now.to_i - Integer(timestamp, 10)).abs <= TOLERANCE_SECONDS
    raise Refused.new(401, 'timestamp_out_of_tolerance')
  end

  signed = "#{id}.#{timestamp}.".b + body
  signatures.split(' ').each do |signature|
    scheme, value = signature.split(',', 2)
    given = Base64.decode64(value.to_s)
    keys.each do |key_scheme, key|
      next unless key_scheme.to_s == scheme

      if key_scheme == :v1
        return id if OpenSSL.secure_compare(OpenSSL::HMAC.digest('SHA256', key, signed), given)
      else
        begin
          return id if key.verify(nil, given, signed)
        rescue OpenSSL::PKey::PKeyError
          next
        end
      end
    end
  end
  raise Refused.new(401, 'signature_invalid')
end

def event_of(body)
  event = JSON.parse(body)
  data = event['data'] if event.is_a?(Hash) && event['version'] == 1
  valid = data.is_a?(Hash) && %w[client_id sub event_type].all? { |name| data[name].is_a?(String) } &&
          data['event_time'].is_a?(Integer)
  raise Refused.new(400, 'body_invalid') unless valid

  data
rescue JSON::ParserError
  raise Refused.new(400, 'body_invalid')
end

def load(file)
  return { 'deliveries' => {}, 'users' => {}, 'sessions' => [], 'account_deletions' => [] } unless File.exist?(file)

  JSON.parse(File.read(file))
end

def save(file, state)
  temporary = "#{file}.tmp"
  File.open(temporary, 'w', 0o600) do |output|
    output.write(JSON.generate(state))
    output.flush
    output.fsync
  end
  File.rename(temporary, file)
  File.open(File.dirname(file)) { |directory| directory.fsync }
end

# Events of one user may arrive out of order (retries): each clock only moves forward, so
# an event older than the one applied changes nothing ("stale").
def apply_event(state, id, data)
  kind, at, client_id, sub = data.values_at('event_type', 'event_time', 'client_id', 'sub')
  user = (state['users']["#{client_id} #{sub}"] ||= {})
  deleting = state['account_deletions'].any? { |entry| entry['client_id'] == client_id && entry['sub'] == sub }
  outcome = 'stale'
  apple = data.fetch('provider', 'apple') == 'apple'
  ending = ends_sessions?(data)
  if ending && !(user['sessions_revoked_at'] && user['sessions_revoked_at'] >= at)
    user['sessions_revoked_at'] = at
    # Sessions begun after the event (the user signed in again) stay.
    state['sessions'].reject! { |s| s['client_id'] == client_id && s['sub'] == sub && s['started_at'] <= at }
    outcome = 'applied'
  end
  if apple && kind == 'account-deleted'
    # A deletion to carry out even when older than a revocation already applied.
    unless deleting
      state['account_deletions'] << { 'client_id' => client_id, 'sub' => sub, 'requested_at' => at, 'webhook_id' => id }
    end
    user['email_forwarding'] = 'disabled'
    user.delete('email')
    user.delete('is_private_email')
    outcome = 'applied'
  elsif apple && EMAIL.include?(kind) && !deleting && !(user['email_forwarding_at'] && user['email_forwarding_at'] >= at)
    user['email_forwarding'] = kind.delete_prefix('email-')
    user['email_forwarding_at'] = at
    user['email'] = data['email'] if data['email'].is_a?(String)
    user['is_private_email'] = data['is_private_email'] if [true, false].include?(data['is_private_email'])
    outcome = 'applied'
  elsif !ending && !(apple && EMAIL.include?(kind))
    outcome = 'ignored' # unknown, test, or a Google event that ends nothing: recorded, nothing to change
  end
  outcome
end

options = { listen: '127.0.0.1:8080' }
OptionParser.new do |parser|
  parser.on('--listen HOST:PORT') { |value| options[:listen] = value }
  parser.on('--keys-file FILE') { |value| options[:keys_file] = value }
  parser.on('--store FILE') { |value| options[:store] = value }
end.parse!
abort('usage: receiver.rb --keys-file FILE --store FILE [--listen host:port]') unless options[:keys_file] && options[:store]
keys = read_keys(options[:keys_file])
host, port = options[:listen].split(/:(?=[0-9]+\z)/)
store_lock = Mutex.new # WEBrick serves each connection on its own thread

server = WEBrick::HTTPServer.new(BindAddress: host, Port: Integer(port, 10), AccessLog: [],
                                 Logger: WEBrick::Log.new($stderr, WEBrick::Log::WARN))
server.mount_proc('/') do |request, response|
  answer = lambda do |status, outcome|
    response.status = status
    response['content-type'] = 'application/json'
    response.body = JSON.generate({ outcome: outcome })
    # One line, no body and no address: the webhook-id says which delivery.
    warn(JSON.generate({ webhook_id: request['webhook-id'], status: status, outcome: outcome }))
  end
  next answer.call(405, 'method_not_allowed') unless request.request_method == 'POST'
  if request.content_length > MAX_BODY_BYTES
    request.body { |_chunk| } if request.content_length <= DRAIN_LIMIT_BYTES
    next answer.call(413, 'body_too_large')
  end

  body = (request.body || '').b
  begin
    id = verify(keys, request, body)
    data = event_of(body)
    # The webhook-id and its effect are saved together, or neither.
    outcome = store_lock.synchronize do
      state = load(options[:store])
      next 'duplicate' if state['deliveries'].key?(id)

      result = apply_event(state, id, data)
      state['deliveries'][id] = { 'received_at' => (Time.now.to_f * 1000).to_i, 'outcome' => result }
      save(options[:store], state)
      result
    end
    answer.call(200, outcome)
  rescue Refused => e
    answer.call(e.status, e.message)
  rescue SystemCallError, JSON::ParserError
    answer.call(500, 'store_failed') # not stored: siwa-endpoint retries
  end
end
trap('TERM') { server.shutdown }
trap('INT') { server.shutdown }
$stdout.puts("listening on #{host}:#{server.listeners.first.addr[1]}")
$stdout.flush
server.start
