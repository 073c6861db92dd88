// The harness's Hyperdrive proxies keep a connection's socket errors to the
// connection: a Worker that closes its Hyperdrive socket while the database is
// still sending must not fail the test file (cloudflare/workers-sdk#15768).
// The database here is a TCP server that never stops sending.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { Miniflare } from "miniflare";
import { compatibilityDate, eventually, hyperdriveProxiesWithErrorListeners, hyperdriveProxy } from "./harness.mjs";

const worker = `import { connect } from "cloudflare:sockets";
export default {
  async fetch(request, env) {
    const socket = connect({ hostname: env.HYPERDRIVE.host, port: env.HYPERDRIVE.port });
    const { value } = await socket.readable.getReader().read();
    await socket.close();
    return new Response(String(value.byteLength > 0));
  },
};`;

describe("Miniflare's Hyperdrive proxy in the harness", () => {
  let database;
  const connections = new Set();
  let mf;
  before(async () => {
    database = net.createServer((socket) => {
      connections.add(socket);
      socket.on("error", () => {});
      const chunk = Buffer.alloc(64 * 1024, 1);
      const send = () => {
        while (!socket.destroyed && socket.write(chunk));
      };
      socket.on("drain", send);
      send();
    });
    await new Promise((resolve) => database.listen(0, "127.0.0.1", resolve));
    const url = `postgres://user:password@127.0.0.1:${database.address().port}/database`;
    mf = await hyperdriveProxiesWithErrorListeners(true, async () => {
      const mf = new Miniflare({ modules: true, compatibilityDate, script: worker, hyperdrives: { HYPERDRIVE: url } });
      await mf.ready;
      return mf;
    });
  });
  after(async () => {
    await mf?.dispose();
    for (const socket of connections) socket.destroy();
    database?.close();
  });

  it("lets a Worker close a connection the database is still sending on", async () => {
    const errorsBefore = hyperdriveProxy.errors;
    for (let i = 0; i < 20; i++) {
      const response = await mf.dispatchFetch("http://worker/");
      assert.equal(await response.text(), "true");
    }
    // The proxy's writes into the closed sockets fail after the responses.
    // None failing would mean this Miniflare proxies differently, and the
    // harness's listeners are to be looked at again.
    await eventually(() => hyperdriveProxy.errors > errorsBefore, { timeoutMs: 5000 });
  });
});
