// A scripted mail API for the example's tests, wired in as Miniflare's
// outbound fetch handler: records every mail, answers as told.
export class MailSink {
  constructor() {
    this.mails = [];
    this.status = 202;
    this.delayMs = 0;
    /** The body of a refusal, when set (the default: a JSON status). */
    this.refusal = null;
    this.handler = this.handle.bind(this);
  }

  async handle(request) {
    const body = await request.json();
    if (this.delayMs) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    const status = typeof this.status === "function" ? this.status(body) : this.status;
    const key = request.headers.get("idempotency-key");
    const traceparent = request.headers.get("traceparent");
    this.mails.push({ ...body, id: key, key, status, url: request.url, traceparent });
    const refused = status >= 300 && this.refusal !== null;
    return new Response(refused ? this.refusal : JSON.stringify({ status }), { status });
  }

  /** Mails answered with 2xx. */
  delivered() {
    return this.mails.filter((mail) => mail.status >= 200 && mail.status < 300);
  }
}
