// A real OAuth 2.1 authorization server for moat's auth tests, built on
// oidc-provider (the certified OpenID provider) with only what the tests need:
// the client_credentials grant, RFC 8707 resource indicators, RFC 7662
// introspection, RFC 7009 revocation, discovery (RFC 8414 and OpenID) and
// JWKS, over plain http on 127.0.0.1.
//
//   node auth-server.mjs CONFIG.json
//
// with the Node 22 of tests/npm/node_modules/.bin/node (Node 20 works too, with
// an "Unsupported runtime" warning from oidc-provider).
//
// CONFIG.json: {"port": 0, "access_token_ttl": 300,
//   "resources": {"http://127.0.0.1:8080/mcp": {"scopes": ["tools", "admin"]}},
//   (a resource with "format": "opaque" gets opaque tokens bound to it instead of JWTs)
//   "clients": [{"client_id": "alice", "client_secret": "s", "scope": "tools admin", "groups": ["eng"]}]}
//   (a client's own "access_token_ttl" takes the place of the global one for its tokens)
// Port 0 takes any free port. Once listening it prints one JSON line to stdout,
// {"issuer": "http://127.0.0.1:PORT", "port": PORT}; logs go to stderr.
//
// Tokens come from POST /token (client_secret_basic or client_secret_post):
// - with resource=<a configured resource>: a JWT (RS256, typ at+jwt) whose aud
//   is that resource, whose scope is the requested scope cut to the resource's
//   scopes, and which carries the client's "groups";
// - with an unknown resource: refused with invalid_target;
// - without a resource: an opaque token, to be checked at
//   POST /token/introspection (any configured client may introspect; the answer
//   has "groups" too) and revoked at POST /token/revocation (by its own client).
//   JWTs are checked against GET /jwks only: introspecting or revoking one is
//   refused (400 unsupported_token_type).
// A scope that some resource names but the client's "scope" lacks is refused
// (invalid_scope); other unknown scopes are dropped; a client without "scope"
// may ask for any.
//
// With "authorization_code": true it is also a third party's server that people consent at:
// oidc-provider's development login and consent pages (any login, any password; the login is
// the token's sub), the authorization code grant with PKCE, and refresh tokens for clients
// allowed the refresh_token grant. A client's "grant_types", "response_types",
// "redirect_uris" and "token_endpoint_auth_method" are then given in its entry; tokens for a
// configured resource (the authorization request's `resource`) are JWTs for it. With
// "rotate_refresh_tokens": true each refresh gives a new refresh token and a used one, sent
// again, revokes the whole grant (oidc-provider's reuse detection).
//
// Token exchange (RFC 8693, grant urn:ietf:params:oauth:grant-type:token-exchange),
// for a client with "token_exchange": true: its subject_token must be a JWT this server
// signed (an access token, unexpired); the answer is a JWT for the requested audience
// (which must be in "exchange_audiences", else invalid_target) whose sub is the subject's
// sub (or client_id), with an `act` claim naming the exchanging client, living
// "exchange_ttl" seconds (default 300). Each exchange is counted by subject.
//
// Test-only controls (POST, JSON body optional):
//   /_test/rotate {"keep_old": false}  new RS256 key with a new kid, signs all
//       new JWTs and comes first in the JWKS; the old keys stay in the JWKS only
//       with keep_old true. Opaque tokens live on across rotation (the in-memory
//       store is shared by the old and new provider).
//   /_test/down, /_test/up             the JWKS endpoint answers 503 while down.
//   /_test/slow {"ms": 5000}           the JWKS endpoint answers after ms ({"ms": 0} undoes).
//   /_test/sign {"claims": {...}}      {"token": a JWT of exactly these claims, signed (RS256)
//       by the current key and naming its kid}: tokens no grant would issue, for the tests
//       of what moat refuses.
//   /_test/exchanges                   {"by_subject": {SUBJECT: exchanges so far}}.
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';

import Provider, { errors } from 'oidc-provider';
// oidc-provider's own in-memory store, made once so that every Provider built
// here (one per key rotation) shares it.
import { createMemoryAdapter } from 'oidc-provider/lib/adapters/memory_adapter.js';

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const resources = config.resources ?? {};
const clients = config.clients ?? [];
const ttl = config.access_token_ttl ?? 300;
const groupsOf = new Map(clients.map((c) => [c.client_id, c.groups ?? []]));
const ttlOf = new Map(clients.map((c) => [c.client_id, c.access_token_ttl ?? ttl]));
const allScopes = [...new Set(Object.values(resources).flatMap((r) => r.scopes ?? []))];
const exchangeAudiences = new Set(config.exchange_audiences ?? []);
const exchangeTtl = config.exchange_ttl ?? 300;
const exchangesBySubject = {};
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';

const adapter = createMemoryAdapter();
const log = (...args) => console.error('auth-server:', ...args);

function newKey() {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: crypto.randomUUID(), alg: 'RS256', use: 'sig' };
}

// oidc-provider fixes its keys at construction: a rotation builds a new
// Provider with the new key set and swaps the handler.
function build(issuer, keys) {
  const provider = new Provider(issuer, {
    clients: clients.map((c) => ({
      client_id: c.client_id,
      client_secret: c.client_secret,
      scope: c.scope || undefined, // oidc-provider refuses ""; no scope = may ask for any
      grant_types: c.grant_types ?? ['client_credentials', ...(c.token_exchange ? [TOKEN_EXCHANGE] : [])],
      response_types: c.response_types ?? [],
      redirect_uris: c.redirect_uris ?? [],
      // client_secret_post works too
      token_endpoint_auth_method: c.token_endpoint_auth_method ?? 'client_secret_basic',
    })),
    adapter,
    jwks: { keys },
    scopes: allScopes,
    features: {
      devInteractions: { enabled: Boolean(config.authorization_code) },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        // An authorization code's token is for the resource the person consented to.
        useGrantedResource: () => true,
        getResourceServerInfo(ctx, resource, client) {
          const rs = resources[resource];
          if (!rs) throw new errors.InvalidTarget(`unknown resource ${resource}`);
          return {
            scope: (rs.scopes ?? []).join(' '),
            audience: resource,
            accessTokenTTL: ttlOf.get(client?.clientId) ?? ttl,
            // "format": "opaque" on a resource: opaque tokens bound to it (aud in the
            // introspection answer), for the introspection tests.
            ...(rs.format === 'opaque'
              ? { accessTokenFormat: 'opaque' }
              : { accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } } }),
          };
        },
      },
    },
    issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
    // "rotate_refresh_tokens": each refresh token is good once; one used again revokes the grant.
    ...(config.rotate_refresh_tokens ? { rotateRefreshToken: true } : {}),
    extraTokenClaims: (ctx, token) => ({ groups: groupsOf.get(token.clientId) ?? [] }),
    ttl: {
      ClientCredentials: (ctx, token, client) => ttlOf.get(client?.clientId) ?? ttl,
      AccessToken: (ctx, token, client) => ttlOf.get(client?.clientId) ?? ttl,
    },
  });
  provider.registerGrantType(
    TOKEN_EXCHANGE,
    (ctx) => exchangeToken(ctx, issuer, keys),
    ['audience', 'resource', 'scope', 'requested_token_type', 'subject_token', 'subject_token_type'],
  );
  for (const event of ['server_error', 'grant.error', 'introspection.error', 'revocation.error']) {
    provider.on(event, (ctx, err) => log(event, err?.message ?? ctx?.message));
  }
  return provider.callback();
}

// The claims of a JWT this server signed with one of `keys`, or null.
function verified(token, keys) {
  const [header, payload, signature] = String(token).split('.');
  if (!signature) return null;
  let kid;
  try {
    kid = JSON.parse(Buffer.from(header, 'base64url')).kid;
  } catch {
    return null;
  }
  const key = keys.find((k) => k.kid === kid);
  if (!key) return null;
  const publicKey = crypto.createPublicKey(crypto.createPrivateKey({ key, format: 'jwk' }));
  const ok = crypto.verify('sha256', Buffer.from(`${header}.${payload}`), publicKey,
    Buffer.from(signature, 'base64url'));
  if (!ok) return null;
  const claims = JSON.parse(Buffer.from(payload, 'base64url'));
  return claims.exp > Date.now() / 1000 ? claims : null;
}

function exchangeError(ctx, error, description) {
  ctx.status = 400;
  ctx.body = { error, error_description: description };
}

async function exchangeToken(ctx, issuer, keys) {
  const { params, client } = ctx.oidc;
  if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
    return exchangeError(ctx, 'invalid_request', 'subject_token_type must be an access token');
  }
  const subject = verified(params.subject_token, keys);
  if (!subject) return exchangeError(ctx, 'invalid_grant', 'the subject token is not valid here');
  const audience = params.audience ?? params.resource;
  if (!exchangeAudiences.has(audience)) {
    return exchangeError(ctx, 'invalid_target', `cannot issue tokens for ${audience}`);
  }
  const sub = subject.sub ?? subject.client_id;
  exchangesBySubject[sub] = (exchangesBySubject[sub] ?? 0) + 1;
  const now = Math.floor(Date.now() / 1000);
  const token = sign(keys[0], {
    iss: issuer, sub, aud: audience, client_id: client.clientId, act: { sub: client.clientId },
    scope: params.scope ?? subject.scope ?? '', iat: now, exp: now + exchangeTtl,
    jti: crypto.randomUUID(),
  });
  log('exchanged a token of', sub, 'for', audience);
  ctx.body = {
    access_token: token, issued_token_type: ACCESS_TOKEN_TYPE, token_type: 'Bearer',
    expires_in: exchangeTtl,
  };
}

let keys = [newKey()];
let handler;
let down = false;
let slowMs = 0;

function sign(key, claims) {
  const part = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const input = `${part({ alg: 'RS256', typ: 'at+jwt', kid: key.kid })}.${part(claims)}`;
  const privateKey = crypto.createPrivateKey({ key, format: 'jwk' });
  return `${input}.${crypto.sign('sha256', Buffer.from(input), privateKey).toString('base64url')}`;
}

async function readJson(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return body.trim() ? JSON.parse(body) : {};
}

function reply(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function control(req, res, issuer) {
  let body;
  try {
    body = await readJson(req);
  } catch {
    return reply(res, 400, { error: 'invalid_request', error_description: 'body must be JSON' });
  }
  switch (req.url) {
    case '/_test/rotate':
      keys = body.keep_old ? [newKey(), ...keys] : [newKey()];
      handler = build(issuer, keys);
      log('rotated, kids', keys.map((k) => k.kid));
      return reply(res, 200, { kid: keys[0].kid, kids: keys.map((k) => k.kid) });
    case '/_test/down': down = true; break;
    case '/_test/up': down = false; break;
    case '/_test/slow': slowMs = Number(body.ms ?? 0); break;
    case '/_test/sign': return reply(res, 200, { token: sign(keys[0], body.claims ?? {}) });
    case '/_test/exchanges': return reply(res, 200, { by_subject: exchangesBySubject });
    default: return reply(res, 404, { error: 'not_found' });
  }
  log(req.url, { down, slowMs });
  return reply(res, 200, { down, slow_ms: slowMs });
}

const server = http.createServer(async (req, res) => {
  const { issuer } = server;
  try {
    if (req.method === 'POST' && req.url.startsWith('/_test/')) return await control(req, res, issuer);
    if (req.url.split('?')[0] === '/jwks') {
      if (slowMs) await new Promise((resolve) => setTimeout(resolve, slowMs));
      if (down) return reply(res, 503, { error: 'temporarily_unavailable' });
    }
    return handler(req, res);
  } catch (err) {
    log('error', err);
    return reply(res, 500, { error: 'server_error', error_description: String(err) });
  }
});

server.listen(config.port ?? 0, '127.0.0.1', () => {
  const { port } = server.address();
  server.issuer = `http://127.0.0.1:${port}`;
  handler = build(server.issuer, keys);
  process.stdout.write(`${JSON.stringify({ issuer: server.issuer, port })}\n`);
});

for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
