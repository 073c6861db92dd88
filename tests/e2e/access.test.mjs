// The library's console::CloudflareAccess, as the example Worker's console
// uses it: the JWT in Cf-Access-Jwt-Assertion, verified in the Worker
// (WebCrypto) against the team's keys, which this test serves at the
// team's certs URL. (The token's claims are unit-tested natively too.)
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";
import { start } from "./harness.mjs";
import { MailSink } from "./mail_sink.mjs";

const TEAM = "example-team.cloudflareaccess.com";
const AUD = "4714c1358e65fe4b408ad6d432a5f878f08194bdb4752441fd56faefa9b2b6f2";
const KID = "test-key-1";
const keys = generateKeyPairSync("rsa", { modulusLength: 2048 });
const stranger = generateKeyPairSync("rsa", { modulusLength: 2048 });
const jwks = { keys: [{ ...keys.publicKey.export({ format: "jwk" }), kid: KID, alg: "RS256", use: "sig" }] };

const b64 = (value) => Buffer.from(typeof value === "string" ? value : JSON.stringify(value)).toString("base64url");

/** A token as Access issues it, with `changes` to its claims or header. */
function token({ claims = {}, header = {}, key = keys.privateKey } = {}) {
  const now = Math.floor(Date.now() / 1000);
  const head = b64({ alg: "RS256", kid: KID, typ: "JWT", ...header });
  const body = b64({
    aud: [AUD],
    email: "viewer@example.com",
    exp: now + 600,
    iat: now,
    nbf: now,
    iss: `https://${TEAM}`,
    sub: "6f4b8b1e",
    type: "app",
    ...claims,
  });
  const signature = sign("sha256", Buffer.from(`${head}.${body}`), key).toString("base64url");
  return `${head}.${body}.${signature}`;
}

describe("the console behind Cloudflare Access", () => {
  let mf;
  let certFetches = 0;
  before(async () => {
    const sink = new MailSink();
    mf = await start("examples/signup-mail", {
      bindings: {
        MAIL_API_URL: "https://mail.test/send",
        ADMIN_TOKEN: "unused-admin-token",
        ACCESS_TEAM_DOMAIN: TEAM,
        ACCESS_AUD: AUD,
        ACCESS_OPERATORS: "Ops@Example.com, other@example.com",
      },
      outboundService: (request) => {
        const url = new URL(request.url);
        if (url.hostname === TEAM && url.pathname === "/cdn-cgi/access/certs") {
          certFetches += 1;
          return Response.json(jwks);
        }
        return sink.handler(request);
      },
    });
  });
  after(() => mf?.dispose());

  const session = async (assertion) => {
    const headers = assertion === undefined ? {} : { "cf-access-jwt-assertion": assertion };
    const response = await mf.dispatchFetch("http://example.test/console/api/session", { headers });
    return { status: response.status, body: await response.json() };
  };

  it("admits a verified identity as a viewer, and an operator's email as an operator", async () => {
    const viewer = await session(token());
    assert.equal(viewer.status, 200, JSON.stringify(viewer.body));
    assert.equal(viewer.body.role, "viewer");
    const operator = await session(token({ claims: { email: "ops@example.com" } }));
    assert.equal(operator.body.role, "operator");
    const oneAudience = await session(token({ claims: { aud: AUD } }));
    assert.equal(oneAudience.body.role, "viewer", "`aud` may be one string");
    const pause = await mf.dispatchFetch("http://example.test/console/api/outboxes/mail/topics/pause", {
      method: "POST",
      headers: { "cf-access-jwt-assertion": token(), "x-outbox-console": "1", "content-type": "application/json" },
      body: JSON.stringify({ topic: "signup-confirmation" }),
    });
    assert.equal(pause.status, 403, "a viewer changes nothing");
    assert.equal(certFetches, 1, "the team's keys are fetched once and kept");
  });

  it("refuses tokens that are forged, expired, for another application or unsigned", async () => {
    const now = Math.floor(Date.now() / 1000);
    const refused = {
      "no token": undefined,
      "not a JWT": "garbage",
      "signed by another key": token({ key: stranger.privateKey }),
      "naming a key the team does not have": token({ header: { kid: "unknown" }, key: stranger.privateKey }),
      "another audience": token({ claims: { aud: ["someone-else"] } }),
      "another issuer": token({ claims: { iss: "https://evil.cloudflareaccess.com" } }),
      expired: token({ claims: { exp: now - 3600 } }),
      "not yet valid": token({ claims: { nbf: now + 3600 } }),
      "alg none": `${b64({ alg: "none", kid: KID })}.${b64({ aud: [AUD], iss: `https://${TEAM}`, exp: now + 600 })}.`,
      "a payload changed after signing": (() => {
        const [head, , signature] = token().split(".");
        return `${head}.${b64({ aud: [AUD], iss: `https://${TEAM}`, exp: now + 600, email: "ops@example.com" })}.${signature}`;
      })(),
    };
    for (const [why, assertion] of Object.entries(refused)) {
      const answer = await session(assertion);
      assert.equal(answer.status, 401, `${why}: ${JSON.stringify(answer.body)}`);
    }
    // An unknown key fetches the team's keys again at most once a minute:
    // tokens naming made-up keys cannot make the Worker fetch at will.
    for (let n = 0; n < 5; n += 1) await session(token({ header: { kid: `made-up-${n}` } }));
    assert.equal(certFetches, 1);
  });
});
