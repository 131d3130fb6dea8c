#!/usr/bin/env node
// Reads the state siwa-endpoint writes to Redis, with node-redis (the `redis` client, v4;
// Debian: apt-get install node-redis). Only the Redis contract is used (docs/contract.md, "The
// Redis contract"). As a module: sessionIsValid, userState, drainDeletions, subscribeToRevocations,
// and after an app transfer resolveSub; isAppleRelay for private relay addresses.
//
//   node siwa_reader.js state --redis-url redis://127.0.0.1:6379/0 --client-id com.example.app \
//       --sub 001234.abc.0123 --session-started-at 1796000000000
//   node siwa_reader.js resolve --redis-url URL --client-id com.example.app --id TRANSFER_SUB_OR_OLD_SUB
//   node siwa_reader.js relay --emails abc@private.icloud.com,someone@example.com
//   node siwa_reader.js deletions --redis-url URL [--group account-cleanup]
//   node siwa_reader.js subscribe --redis-url URL [--count N]
//
// With Redis Cluster, instead of --redis-url (which then gives only the ACL user and password,
// and rediss:// for TLS): --cluster-nodes host:port,... (SIWA_REDIS_CLUSTER_NODES) and the
// endpoint's prefix, a hash tag: --prefix {siwa}. node-redis's createCluster learns from the
// cluster which primary holds the one slot of every key of the contract.
//
// Over TLS (a rediss:// URL, one node or a cluster), the server's certificate is verified,
// host name included, against --redis-tls-ca-file FILE (SIWA_REDIS_TLS_CA_FILE) when given,
// else against Node's CAs; a cluster's certificates must name the addresses it announces.
//
// Debian installs node-redis under /usr/share/nodejs, which Debian's own node searches;
// another node finds it with NODE_PATH=/usr/share/nodejs.
"use strict";

const fs = require("fs");
const { createClient, createCluster } = require("redis");

// The contract's names, in one place.
const userKey = (clientId, sub, prefix = "siwa") => `${prefix}:user:{${clientId}:${sub}}`; // {client_id:sub}: a hash tag
const eventsStream = (prefix = "siwa") => `${prefix}:events`;
const deletionsStream = (prefix = "siwa") => `${prefix}:deletions`; // one entry per account-deleted
const notificationsChannel = (prefix = "siwa") => `${prefix}:notifications`;

// A session is invalid if it began at or before the latest consent-revoked or
// account-deleted event for this user in this app (times in Unix milliseconds).
// After an app transfer, an old sub linked to its new one (transferred_to) counts the new
// sub's events too.
async function sessionIsValid(redis, clientId, sub, sessionStartedAtMs, prefix = "siwa") {
  const [revokedAt, movedTo] = await redis.hmGet(userKey(clientId, sub, prefix), ["sessions_revoked_at", "transferred_to"]);
  const times = [revokedAt];
  if (movedTo != null) times.push(await redis.hGet(userKey(clientId, movedTo, prefix), "sessions_revoked_at"));
  const known = times.filter((time) => time != null).map(Number);
  return known.length === 0 || sessionStartedAtMs > Math.max(...known);
}

// Apple's private relay (Hide My Email) domains: new addresses use private.icloud.com, the
// older privaterelay.appleid.com ones keep working.
const appleRelayDomains = ["privaterelay.appleid.com", "private.icloud.com"];

// Whether an email address is one of Apple's private relay addresses (either domain).
function isAppleRelay(address) {
  const at = address.trim().lastIndexOf("@");
  return at > 0 && appleRelayDomains.includes(address.trim().slice(at + 1).toLowerCase());
}

// After an app transfer: the sub a user's notifications arrive under now, for a transfer
// identifier `transfer import` exchanged or an old sub linked to its new one; null otherwise
// (keep the identifier you have).
const transferKey = (clientId, transferSub, prefix = "siwa") => `${prefix}:transfer-id:{${clientId}:${transferSub}}`;
async function resolveSub(redis, clientId, identifier, prefix = "siwa") {
  return (await redis.hGet(transferKey(clientId, identifier, prefix), "sub"))
    ?? (await redis.hGet(userKey(clientId, identifier, prefix), "transferred_to"));
}

async function userState(redis, clientId, sub, prefix = "siwa") {
  const fields = await redis.hGetAll(userKey(clientId, sub, prefix));
  return {
    account_deleted: "account_deleted_at" in fields,
    email_forwarding: fields.email_forwarding ?? null, // "enabled", "disabled" or null
    sessions_revoked_at: "sessions_revoked_at" in fields ? Number(fields.sessions_revoked_at) : null,
    last_event_type: fields.last_event_type ?? null,
  };
}

// Google's users (contract version 2): sub is the Google account ID, clientId the OAuth client ID.
const googleUserKey = (clientId, sub, prefix = "siwa") => `${prefix}:google:user:{${clientId}:${sub}}`;

// A Google session is invalid if it began at or before the latest sessions-revoked,
// tokens-revoked or account-disabled (hijacking), or while Google says the account is disabled.
async function googleSessionIsValid(redis, clientId, sub, sessionStartedAtMs, prefix = "siwa") {
  const [revokedAt, disabled] = await redis.hmGet(googleUserKey(clientId, sub, prefix),
    ["sessions_revoked_at", "account_disabled"]);
  if (disabled === "true") return false;
  return revokedAt == null || sessionStartedAtMs > Number(revokedAt);
}

async function googleUserState(redis, clientId, sub, prefix = "siwa") {
  const fields = await redis.hGetAll(googleUserKey(clientId, sub, prefix));
  return {
    account_disabled: fields.account_disabled === "true",
    account_disabled_reason: fields.account_disabled_reason ?? null,
    sessions_revoked_at: "sessions_revoked_at" in fields ? Number(fields.sessions_revoked_at) : null,
    last_event_type: fields.last_event_type ?? null,
  };
}

// Acts once per account deletion: a consumer group on the deletions stream (every entry is
// an `account-deleted`). Each entry is acknowledged after it is handled, so a crash
// re-delivers it (at least once: make `handle` idempotent). Returns how many deletions
// were handled when nothing new is left.
async function drainDeletions(redis, handle, group = "account-cleanup", consumer = "worker-1", prefix = "siwa") {
  const stream = deletionsStream(prefix);
  try {
    await redis.xGroupCreate(stream, group, "0", { MKSTREAM: true });
  } catch (error) {
    if (!String(error.message).startsWith("BUSYGROUP")) throw error; // the group exists already: fine
  }
  let handled = 0;
  for (;;) {
    const batches = await redis.xReadGroup(group, consumer, { key: stream, id: ">" }, { COUNT: 100 });
    if (!batches || batches.every((batch) => batch.messages.length === 0)) return handled;
    for (const { messages } of batches) {
      for (const { id, message } of messages) {
        await handle(message.client_id, message.sub, Number(message.event_time));
        handled += 1;
        await redis.xAck(stream, group, id);
      }
    }
  }
}

// Drops cached sessions the moment a revocation arrives: `onRevocation(clientId, sub, type)`
// for each applied consent-revoked or account-deleted. Subscribing needs a connection of
// its own (`subscriber`, not yet connected): with Redis Cluster, a client of any one node,
// since a cluster delivers every message to every node. Returns it (quit it to stop).
async function subscribeToRevocations(subscriber, onRevocation, prefix = "siwa") {
  await subscriber.connect();
  await subscriber.subscribe(notificationsChannel(prefix), (text) => {
    const { client_id, sub, type, applied } = JSON.parse(text); // never an email address
    if (applied && (type === "consent-revoked" || type === "account-deleted")) {
      onRevocation(client_id, sub, type);
    }
  });
  return subscriber;
}

module.exports = { userKey, googleUserKey, googleSessionIsValid, googleUserState, eventsStream, deletionsStream, notificationsChannel, sessionIsValid, userState, drainDeletions,
  subscribeToRevocations, isAppleRelay, transferKey, resolveSub };

function options(words) {
  const parsed = {};
  for (let index = 0; index < words.length; index += 2) {
    if (!words[index].startsWith("--") || index + 1 >= words.length) throw new Error(`bad argument ${words[index]}`);
    parsed[words[index].slice(2)] = words[index + 1];
  }
  if (!parsed["redis-url"] && !parsed["cluster-nodes"]) throw new Error("--redis-url or --cluster-nodes is required");
  return parsed;
}

// One client for the commands, and a factory for the subscriber's own connection: a single
// node, or a cluster from its seed nodes (host:port,...).
function connections(args, prefix) {
  const url = new URL(args["redis-url"] ?? "redis://localhost");
  const scheme = url.protocol === "rediss:" ? "rediss" : "redis";
  // Over TLS: the certificate and its host name verified, against the given CA file.
  const caFile = args["redis-tls-ca-file"];
  const socket = scheme === "rediss" ? { tls: true, rejectUnauthorized: true, ...(caFile && { ca: fs.readFileSync(caFile) }) } : {};
  if (!args["cluster-nodes"]) {
    const client = () => createClient({ url: args["redis-url"], socket });
    return { redis: client(), newSubscriber: client };
  }
  if (!/{[^}]+}/.test(prefix)) throw new Error("--cluster-nodes needs a --prefix that is a hash tag, such as {siwa}");
  const credentials = url.username || url.password ? `${url.username}:${url.password}@` : "";
  const nodeURLs = args["cluster-nodes"].split(",").map((node) => `${scheme}://${credentials}${node.trim()}`);
  return {
    redis: createCluster({ rootNodes: nodeURLs.map((nodeURL) => ({ url: nodeURL })), defaults: { socket } }),
    newSubscriber: () => createClient({ url: nodeURLs[0], socket }),
  };
}

async function main([command, ...words]) {
  if (command === "relay") {
    const addresses = words[words.indexOf("--emails") + 1].split(",");
    console.log(JSON.stringify(Object.fromEntries(addresses.map((address) => [address, isAppleRelay(address)]))));
    return;
  }
  const args = options(words);
  const prefix = args.prefix ?? "siwa";
  const { redis, newSubscriber } = connections(args, prefix);
  await redis.connect();
  try {
    if (command === "state" && args.provider === "google") {
      const state = await googleUserState(redis, args["client-id"], args.sub, prefix);
      state.session_valid = await googleSessionIsValid(redis, args["client-id"], args.sub,
        Number(args["session-started-at"]), prefix);
      console.log(JSON.stringify(state));
    } else if (command === "state") {
      const state = await userState(redis, args["client-id"], args.sub, prefix);
      state.session_valid = await sessionIsValid(redis, args["client-id"], args.sub,
        Number(args["session-started-at"]), prefix);
      console.log(JSON.stringify(state));
    } else if (command === "resolve") {
      console.log(JSON.stringify({ sub: await resolveSub(redis, args["client-id"], args.id, prefix) }));
    } else if (command === "deletions") {
      await drainDeletions(redis, (clientId, sub, eventTime) => {
        // Your deletion duty goes here: delete what you hold for (clientId, sub).
        console.log(JSON.stringify({ client_id: clientId, sub, event_time: eventTime }));
      }, args.group, args.consumer, prefix);
    } else if (command === "subscribe") {
      let left = Number(args.count ?? 1);
      let finish;
      const finished = new Promise((resolve) => { finish = resolve; });
      const subscriber = await subscribeToRevocations(newSubscriber(), (clientId, sub, type) => {
        console.log(JSON.stringify({ client_id: clientId, sub, type })); // your code: drop cached sessions
        left -= 1;
        if (left === 0) finish();
      }, prefix);
      console.log("subscribed");
      await finished;
      await subscriber.quit();
    } else {
      throw new Error("the command is state, resolve, relay, deletions or subscribe");
    }
  } finally {
    await redis.quit();
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((error) => {
    console.error(`siwa_reader.js: ${error.message}`);
    process.exit(1);
  });
}
