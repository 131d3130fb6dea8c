// A siwa-endpoint webhook receiver in Node.js, with node's own `crypto` and `http` only:
// verify, dedupe on webhook-id, apply by event_time, then 2xx (docs/webhooks.md).
//
// account-deleted starts the account's deletion (an entry of `account_deletions` for your
// deletion job) and, like consent-revoked, ends the user's sessions that began at or before
// the event. The store is one JSON file, rewritten whole (written, fsync'd, renamed over the
// old one, directory fsync'd) before the answer: a 2xx means it is stored.
//
//   node receiver.js --listen 127.0.0.1:8080 --keys-file /etc/myapp/siwa-webhook.keys \
//       --store /var/lib/myapp/siwa.json
//
// The keys file: one key a line, `whsec_...` (v1, HMAC-SHA256) or `whpk_...` (v1a, ed25519),
// two during a rotation.
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const TOLERANCE_SECONDS = 300;
const MAX_BODY_BYTES = 65536;
const DRAIN_LIMIT_BYTES = 1 << 20; // a larger body is read and dropped, so the client gets the 413, not a reset
const REVOKING = ['consent-revoked', 'account-deleted'];
const EMAIL = ['email-disabled', 'email-enabled'];
// Google's events (data.provider "google", sent only to a destination whose types name them):
// these end the Google user's sessions, as account-disabled does for hijacking.
const GOOGLE_ENDING = ['sessions-revoked', 'tokens-revoked'];

// Apple's bodies carry no provider. Google's client IDs never equal Apple's, so a Google
// user's records sit beside Apple's under their own client_id and sub.
function endsSessions(data) {
  const provider = data.provider ?? 'apple';
  const kind = data.event_type;
  if (provider === 'apple') return REVOKING.includes(kind);
  return provider === 'google' && data.sub !== '' &&
    (GOOGLE_ENDING.includes(kind) || (kind === 'account-disabled' && data.reason === 'hijacking'));
}

class Refused extends Error {
  constructor(status, outcome) { super(outcome); this.status = status; this.outcome = outcome; }
}

function readKeys(file) {
  return fs.readFileSync(file, 'utf8').split(/\s+/).filter(Boolean).map((line) => {
    if (line.startsWith('whsec_')) return { scheme: 'v1', secret: Buffer.from(line.slice(6), 'base64') };
    if (line.startsWith('whpk_')) {
      const x = Buffer.from(line.slice(5), 'base64').toString('base64url');
      return { scheme: 'v1a', key: crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x }, format: 'jwk' }) };
    }
    throw new Error(`${file}: a key is whsec_... or whpk_...`);
  });
}

// The webhook-id, once one signature of the header verifies under one key (a rotation sends
// old and new: any one passes) and the timestamp is within 5 minutes of now.
function verify(keys, headers, body) {
  const id = headers['webhook-id'];
  const timestamp = headers['webhook-timestamp'];
  const signatures = headers['webhook-signature'];
  if (!id || !timestamp || !signatures) throw new Refused(401, 'headers_missing');
  if (!/^[0-9]{1,12}$/.test(timestamp) || Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE_SECONDS) {
    throw new Refused(401, 'timestamp_out_of_tolerance');
  }
  const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]);
  for (const signature of signatures.split(' ')) {
    const [scheme, value = ''] = signature.split(',');
    const given = Buffer.from(value, 'base64');
    for (const key of keys.filter((candidate) => candidate.scheme === scheme)) {
      if (scheme === 'v1') {
        const expected = crypto.createHmac('sha256', key.secret).update(signed).digest();
        if (given.length === expected.length && crypto.timingSafeEqual(given, expected)) return id;
      } else if (given.length === 64 && crypto.verify(null, signed, key.key, given)) {
        return id;
      }
    }
  }
  throw new Refused(401, 'signature_invalid');
}

function eventOf(body) {
  let data;
  try { const event = JSON.parse(body); data = event.version === 1 ? event.data : undefined; } catch { data = undefined; }
  if (!data || typeof data.client_id !== 'string' || typeof data.sub !== 'string' ||
      typeof data.event_type !== 'string' || !Number.isSafeInteger(data.event_time)) {
    throw new Refused(400, 'body_invalid');
  }
  return data;
}

function load(file) {
  if (!fs.existsSync(file)) return { deliveries: {}, users: {}, sessions: [], account_deletions: [] };
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

function save(file, state) {
  const temporary = `${file}.tmp`;
  const descriptor = fs.openSync(temporary, 'w', 0o600);
  fs.writeSync(descriptor, JSON.stringify(state));
  fs.fsyncSync(descriptor);
  fs.closeSync(descriptor);
  fs.renameSync(temporary, file);
  const directory = fs.openSync(path.dirname(file), 'r');
  fs.fsyncSync(directory);
  fs.closeSync(directory);
}

// Events of one user may arrive out of order (retries): each clock only moves forward, so an
// event older than the one applied changes nothing ("stale").
function applyEvent(state, id, data) {
  const { event_type: kind, event_time: at, client_id: clientId, sub } = data;
  const userKey = `${clientId} ${sub}`;
  const user = (state.users[userKey] ??= {});
  const deleting = state.account_deletions.some((entry) => entry.client_id === clientId && entry.sub === sub);
  let outcome = 'stale';
  const apple = (data.provider ?? 'apple') === 'apple';
  const ending = endsSessions(data);
  if (ending && !(user.sessions_revoked_at >= at)) {
    user.sessions_revoked_at = at;
    // Sessions begun after the event (the user signed in again) stay.
    state.sessions = state.sessions.filter((s) => !(s.client_id === clientId && s.sub === sub && s.started_at <= at));
    outcome = 'applied';
  }
  if (apple && kind === 'account-deleted') {
    // A deletion to carry out even when older than a revocation already applied.
    if (!deleting) state.account_deletions.push({ client_id: clientId, sub, requested_at: at, webhook_id: id });
    Object.assign(user, { email_forwarding: 'disabled', email: undefined, is_private_email: undefined });
    outcome = 'applied';
  } else if (apple && EMAIL.includes(kind) && !deleting && !(user.email_forwarding_at >= at)) {
    Object.assign(user, { email_forwarding: kind.slice('email-'.length), email_forwarding_at: at });
    if (typeof data.email === 'string') user.email = data.email;
    if (typeof data.is_private_email === 'boolean') user.is_private_email = data.is_private_email;
    outcome = 'applied';
  } else if (!ending && !(apple && EMAIL.includes(kind))) {
    outcome = 'ignored'; // unknown, test, or a Google event that ends nothing: recorded, nothing to change
  }
  return outcome;
}

// The webhook-id and its effect are saved together, or neither. Node runs this without a
// break (synchronous), so two deliveries never interleave.
function apply(file, id, data) {
  const state = load(file);
  if (state.deliveries[id]) return 'duplicate';
  const outcome = applyEvent(state, id, data);
  state.deliveries[id] = { received_at: Date.now(), outcome };
  save(file, state);
  return outcome;
}

function main() {
  const option = (name, fallback) => {
    const index = process.argv.indexOf(name);
    if (index > 0 && process.argv[index + 1]) return process.argv[index + 1];
    if (fallback === undefined) { console.error(`usage: receiver.js --keys-file FILE --store FILE [--listen host:port]`); process.exit(2); }
    return fallback;
  };
  const keys = readKeys(option('--keys-file'));
  const store = option('--store');
  const [host, port] = option('--listen', '127.0.0.1:8080').split(/:(?=[0-9]+$)/);

  const server = http.createServer((request, response) => {
    const answer = (status, outcome) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ outcome }));
      // One line, no body and no address: the webhook-id says which delivery.
      console.error(JSON.stringify({ webhook_id: request.headers['webhook-id'], status, outcome }));
    };
    if (request.method !== 'POST') return answer(405, 'method_not_allowed');
    const chunks = [];
    let size = 0;
    request.on('data', (chunk) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
      else if (size > DRAIN_LIMIT_BYTES && !response.headersSent) {
        response.on('finish', () => request.destroy());
        answer(413, 'body_too_large');
      }
    });
    request.on('end', () => {
      if (response.headersSent) return;
      if (size > MAX_BODY_BYTES) return answer(413, 'body_too_large');
      const body = Buffer.concat(chunks);
      try {
        const id = verify(keys, request.headers, body);
        answer(200, apply(store, id, eventOf(body)));
      } catch (error) {
        if (error instanceof Refused) answer(error.status, error.outcome);
        else answer(500, 'store_failed'); // not stored: siwa-endpoint retries
      }
    });
  });
  server.listen(Number(port), host, () => console.log(`listening on ${host}:${server.address().port}`));
}

main();
