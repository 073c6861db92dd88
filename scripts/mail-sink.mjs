// A stand-in mail API for local runs: prints every mail it receives.
//   POST /send  {"to", "subject", "text"}, Idempotency-Key: <outbox id>  ->  202
// and, as a stand-in integration, every webhook an endpoint sends it:
//   POST /hooks  (webhook-id, webhook-signature)  ->  204
// MAIL_SINK_STATUS=503 (or any status) makes it refuse mail, to watch
// retries and dead letters.
import { createServer } from "node:http";

const port = Number(process.env.MAIL_SINK_PORT ?? 8025);
const status = Number(process.env.MAIL_SINK_STATUS ?? 202);
const seen = new Set();

createServer((request, response) => {
  let body = "";
  request.on("data", (chunk) => (body += chunk));
  request.on("end", () => {
    if (request.method === "POST" && request.url === "/hooks") {
      const id = request.headers["webhook-id"];
      console.log(`🔔 webhook ${id} (signed: ${Boolean(request.headers["webhook-signature"])}): ${body}`);
      response.writeHead(204).end();
      return;
    }
    if (request.method !== "POST" || request.url !== "/send") {
      response.writeHead(404).end();
      return;
    }
    let mail;
    try {
      mail = JSON.parse(body);
    } catch {
      response.writeHead(400).end("not JSON");
      return;
    }
    const key = request.headers["idempotency-key"];
    const repeat = seen.has(key) ? " (repeat, same Idempotency-Key)" : "";
    seen.add(key);
    console.log(`📬 mail ${key} to ${mail.to}: "${mail.subject}" -> ${status}${repeat}`);
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify({ accepted: status < 300 }));
  });
}).listen(port, "127.0.0.1", () => {
  console.log(`mail sink listening on http://127.0.0.1:${port}/send (answers ${status})`);
});
