// Waiting politely. A page that retries in a tight loop does an attacker's work for them, and a
// million pages that retry on the same beat are a second rush: every wait grows exponentially and
// is jittered, and a server's Retry-After is honoured.

/**
 * backoffDelay is the wait in ms before retry number attempt (0-based): exponential, capped, with
 * "equal jitter" (between half and all of the exponential value), so it is never near zero and
 * clients that started together drift apart.
 */
export function backoffDelay(attempt, { base = 500, factor = 1.7, cap = 10000, random = Math.random } = {}) {
  const ceiling = Math.min(cap, base * Math.pow(factor, Math.max(0, attempt)));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/**
 * withJitter adds up to spread ms (default: a quarter of ms, at least 250) to a wait the server
 * asked for, so that everyone told "1 s" does not come back in the same millisecond.
 */
export function withJitter(ms, spread = Math.max(250, ms / 4), random = Math.random) {
  return Math.round(ms + random() * spread);
}

/**
 * retryAfterMs reads a Retry-After header value (delta-seconds, or an HTTP date measured against
 * the answer's own Date header, never against the device's clock). It returns 0 when absent or
 * unreadable.
 */
export function retryAfterMs(value, dateHeader) {
  if (!value) {
    return 0;
  }
  const v = value.trim();
  if (/^\d+$/.test(v)) {
    return Number(v) * 1000;
  }
  const at = Date.parse(v);
  const sent = Date.parse(dateHeader || "");
  if (Number.isFinite(at) && Number.isFinite(sent)) {
    return Math.max(0, at - sent);
  }
  return 0;
}

/** sleep resolves after ms, or rejects with the signal's reason when it is aborted. */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
