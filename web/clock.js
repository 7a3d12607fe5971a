// The sale's clock, as seen from the browser.
//
// Buyers' clocks are wrong (by seconds, sometimes by hours), so the page never counts down from
// Date.now(). It estimates the gateway's clock from the server_time_ms of status answers and
// advances the estimate with performance.now(), which is monotonic and ignores changes to the
// device's clock. A sample is taken at the midpoint of its round trip, so it is off by at most
// half of it; the lowest-round-trip sample is the best one and is kept.

// How far two estimates may disagree beyond their own uncertainty before the older one is taken
// to be broken (the device slept and paused the monotonic clock, or the server's clock stepped).
const CONSISTENCY_SLACK_MS = 50;

/** ServerClock estimates the gateway's clock. */
export class ServerClock {
  /** @param {() => number} monotonic a monotonic clock in ms; performance.now by default */
  constructor(monotonic = () => performance.now()) {
    this.monotonic = monotonic;
    /** @type {{server: number, at: number, rtt: number} | null} */
    this.best = null;
  }

  /**
   * add records one sample and reports whether it became the estimate.
   * @param {number} sent monotonic time the request was sent
   * @param {number} received monotonic time the answer arrived
   * @param {number} serverMs the answer's server_time_ms
   */
  add(sent, received, serverMs) {
    const rtt = received - sent;
    if (!Number.isFinite(rtt) || rtt < 0 || !Number.isFinite(serverMs)) {
      return false;
    }
    const sample = { server: serverMs + rtt / 2, at: received, rtt };
    if (this.best) {
      const predicted = this.best.server + (received - this.best.at);
      const bound = (rtt + this.best.rtt) / 2 + CONSISTENCY_SLACK_MS;
      const consistent = Math.abs(predicted - sample.server) <= bound;
      if (consistent && rtt >= this.best.rtt) {
        return false;
      }
    }
    this.best = sample;
    return true;
  }

  /** synced reports whether there is an estimate at all. */
  get synced() {
    return this.best !== null;
  }

  /** now is the estimated server time in Unix ms. */
  now() {
    if (!this.best) {
      throw new Error("server clock: no sample yet");
    }
    return this.best.server + (this.monotonic() - this.best.at);
  }

  /** uncertainty bounds the estimate's error in ms: half the best round trip. */
  get uncertainty() {
    return this.best ? this.best.rtt / 2 : Infinity;
  }

  /** skew is how far the device's clock is ahead of the server's (negative: behind), in ms. */
  skew(deviceNow = Date.now()) {
    return deviceNow - this.now();
  }
}

/**
 * msUntilTick returns the delay until a countdown to target, read at now, next changes its shown
 * whole second (a small margin past it, so the display never lags a rounding step).
 */
export function msUntilTick(target, now) {
  const left = target - now;
  if (left <= 0) {
    return 1000;
  }
  const frac = left % 1000;
  return (frac === 0 ? 1000 : frac) + 5;
}

/**
 * formatCountdown shows a duration as H:MM:SS (with days when needed), counting whole seconds up:
 * 0.2 s left shows 00:00:01, so the display reaches 00:00:00 exactly at the target.
 */
export function formatCountdown(ms) {
  let s = Math.max(0, Math.ceil(ms / 1000));
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  const hms = [h, m, s].map((n) => String(n).padStart(2, "0")).join(":");
  return d > 0 ? `${d}d ${hms}` : hms;
}

/**
 * COUNTDOWN_MAX_MS is the furthest instant the page counts down to; beyond it the page shows the
 * date: "It ends in 3315d 09:11:57" tells a buyer nothing a date does not say better.
 */
export const COUNTDOWN_MAX_MS = 2 * 86400 * 1000;

/** countdownText is formatCountdown(ms) up to COUNTDOWN_MAX_MS, and null beyond (show a date). */
export function countdownText(ms) {
  return ms > COUNTDOWN_MAX_MS ? null : formatCountdown(ms);
}

/** describeSkew says in words how far off a device clock is ("1 h 2 min", "45 s"). */
export function describeSkew(ms) {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 60) {
    return `${s} s`;
  }
  const h = Math.floor(s / 3600);
  const m = Math.round((s - h * 3600) / 60);
  if (h === 0) {
    return `${m} min`;
  }
  return m === 0 ? `${h} h` : `${h} h ${m} min`;
}
