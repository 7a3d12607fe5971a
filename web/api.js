// The gateway's public HTTP API (docs/api.md) and the order API, as the page calls them. Every
// answer is JSON {"code", "message", ...}; a refusal becomes an ApiError carrying that code, so the
// page branches on the stable machine word and never on a status number or a message.

import { retryAfterMs } from "./backoff.js";

// A call that has not answered in this long is given up (and may be retried): a hung request must
// not keep the buy button spinning forever.
const REQUEST_TIMEOUT_MS = 15000;

/** ApiError is a refusal, or a failure to get any answer (code "network"). */
export class ApiError extends Error {
  constructor(status, code, message, retryAfter = 0) {
    super(message || code);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter; // ms the server asked us to wait; 0 when it did not say
  }
}

// Words for answers that carry no JSON body (a proxy's error page, a handle_errors restyle).
function codeForStatus(status) {
  switch (status) {
    case 400:
    case 413:
      return "bad_request";
    case 401:
      return "unauthorized";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 409:
      return "conflict";
    case 410:
      return "sold_out";
    case 429:
      return "rate_limited";
    case 503:
      return "busy";
  }
  return "error";
}

/**
 * samePath accepts only a path on this origin ("/x", not "//host/x" or "https://..."): the page
 * sends the buyer's token to these URLs, so neither the address bar nor an answer may point it
 * anywhere else.
 */
export function samePath(p) {
  return typeof p === "string" && p.startsWith("/") && !p.startsWith("//") && !p.includes("\\");
}

/** Api calls the gateway for one activity. */
export class Api {
  /**
   * @param {{base: string, orders: string, activity: string, token: () => string | null}} opts
   * base and orders are same-origin path prefixes (default "/seckill" and "/orders").
   */
  constructor({ base, orders, activity, token }) {
    this.base = base.replace(/\/+$/, "");
    this.orders = orders.replace(/\/+$/, "");
    this.activity = activity;
    this.token = token;
    this.actURL = `${this.base}/${encodeURIComponent(activity)}`;
  }

  /**
   * status is GET {base}/{activity}. With fresh, it bypasses every cache (for clock samples: a
   * cached answer carries an old server_time_ms) and reports when it was sent and received on the
   * monotonic clock.
   */
  async status({ fresh = false } = {}) {
    const sent = performance.now();
    const { body, headers } = await this.call("GET", this.actURL, { cache: fresh ? "no-store" : "default" });
    const received = performance.now();
    // A shared cache that answered despite no-store says so with Age: not a usable clock sample.
    const age = Number(headers.get("Age") || "0");
    return { body, sent, received, fromCache: age > 0 };
  }

  /** captcha is POST {base}/{activity}/captcha: {captcha_id, image}. */
  async captcha() {
    return (await this.call("POST", `${this.actURL}/captcha`, { auth: true })).body;
  }

  /** path is POST {base}/{activity}/path: the caller's hashed buy path. */
  async path(captchaID, answer) {
    const body = captchaID ? { captcha_id: captchaID, answer } : {};
    const r = await this.call("POST", `${this.actURL}/path`, { auth: true, json: body });
    if (!samePath(r.body.path)) {
      throw new ApiError(r.status, "bad_answer", "the gateway answered a buy path that is not on this site");
    }
    return r.body.path;
  }

  /** buy is POST {path} with an Idempotency-Key: a retry with the same key is the same purchase. */
  async buy(path, key, qty = 1) {
    const r = await this.call("POST", path, {
      auth: true,
      json: { qty },
      headers: { "Idempotency-Key": key },
    });
    return r.body;
  }

  /** result is GET {base}/{activity}/result: the caller's latest result record. */
  async result() {
    return (await this.call("GET", `${this.actURL}/result`, { auth: true, cache: "no-store" })).body;
  }

  /**
   * joinLine is POST {base}/{activity}/queue: a place in the waiting room's line (kept if taken);
   * proof is {challenge, answer} when the room asks a proof of work.
   */
  async joinLine(proof) {
    const opts = proof ? { auth: true, json: proof } : { auth: true };
    return (await this.call("POST", `${this.actURL}/queue`, opts)).body;
  }

  /** lineChallenge is GET {base}/{activity}/queue/challenge: a proof of work to join with. */
  async lineChallenge() {
    return (await this.call("GET", `${this.actURL}/queue/challenge`, { auth: true, cache: "no-store" })).body;
  }

  /** placeInLine is GET {base}/{activity}/queue: the caller's place in the line. */
  async placeInLine() {
    return (await this.call("GET", `${this.actURL}/queue`, { auth: true, cache: "no-store" })).body;
  }

  /** order is GET {orders}/{id}. */
  async order(id) {
    return (await this.call("GET", `${this.orders}/${encodeURIComponent(id)}`, { auth: true, cache: "no-store" })).body;
  }

  /** pay is POST {orders}/{id}/pay; paying twice is harmless (the API answers paid again). */
  async pay(id) {
    return (await this.call("POST", `${this.orders}/${encodeURIComponent(id)}/pay`, { auth: true })).body;
  }

  /** signIn asks the gateway's demo sign-in endpoint for a token for user. */
  async signIn(url, user) {
    return (await this.call("POST", url, { json: { user } })).body;
  }

  async call(method, url, { auth = false, json, headers = {}, cache = "no-store" } = {}) {
    const h = { Accept: "application/json", ...headers };
    if (auth) {
      const t = this.token();
      if (!t) {
        throw new ApiError(401, "unauthorized", "sign in first");
      }
      h.Authorization = `Bearer ${t}`;
    }
    let body;
    if (json !== undefined) {
      h["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    }
    let res;
    try {
      res = await fetch(url, {
        method,
        headers: h,
        body,
        cache,
        credentials: "same-origin",
        redirect: "error",
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    } catch (err) {
      throw new ApiError(0, "network", `no answer from the server (${err.name})`);
    }
    let data = null;
    if ((res.headers.get("Content-Type") || "").includes("json")) {
      try {
        data = await res.json();
      } catch {
        data = null;
      }
    }
    if (!res.ok) {
      const code = (data && typeof data.code === "string" && data.code) || codeForStatus(res.status);
      const wait = retryAfterMs(res.headers.get("Retry-After"), res.headers.get("Date"));
      throw new ApiError(res.status, code, data?.message || res.statusText, wait);
    }
    if (!data || typeof data !== "object") {
      throw new ApiError(res.status, "bad_answer", "the server's answer is not JSON");
    }
    return { status: res.status, body: data, headers: res.headers };
  }
}
