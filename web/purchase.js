// Buying: the captcha, the hashed buy path fetched at the opening instant, the buy with its
// Idempotency-Key, and what each refusal means for the buyer. Methods of Sale (see app.js).

import { ApiError, samePath } from "./api.js";
import { backoffDelay, sleep, withJitter } from "./backoff.js";
import { waitText } from "./messages.js";

const BUSY_RETRIES = 3; // automatic retries of a buy answered "busy", each after Retry-After
const NOT_STARTED_RETRIES = 1; // automatic retries of a buy the gateway found early
const PATH_RETRIES = 4; // retries of a path fetch answered "not_started" (a clock a hair early)
const HOLDING = new Set(["queued", "pending_payment", "paid"]); // a win in progress or done

/** newKey is a random Idempotency-Key (crypto.randomUUID needs a secure context; this does not). */
function newKey() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** purchaseMethods are the Sale methods from the captcha to the buy's answer. */
export const purchaseMethods = {
  /** newCaptcha asks for a captcha, or learns that the captcha is off. */
  async newCaptcha() {
    const e = this.el;
    if (this.captchaOn === false || !this.signedIn()) {
      return;
    }
    e.captchaNew.disabled = true;
    try {
      const c = await this.api.captcha();
      if (!samePath(c.image) || !samePath(c.audio) || typeof c.captcha_id !== "string") {
        throw new ApiError(200, "bad_answer", "bad captcha answer");
      }
      this.captchaOn = true;
      if (this.captcha?.audioURL) {
        URL.revokeObjectURL(this.captcha.audioURL);
      }
      this.captcha = { id: c.captcha_id, image: c.image, audio: c.audio, audioURL: null };
      e.captchaAnswer.value = "";
      e.captchaAudio.removeAttribute("src");
      e.captchaImage.src = c.image;
    } catch (err) {
      if (err.code === "not_found") {
        this.captchaOn = false; // the gateway runs without a captcha
      } else if (err.code === "sold_out") {
        this.markSoldOut();
      } else if (err.code === "unauthorized") {
        this.signOut("unauthorized");
      } else if (err.code !== "ended") {
        this.say(err.code, err.retryAfter ? ` Try “New image” in ${waitText(err.retryAfter)}.` : "");
      }
    } finally {
      e.captchaNew.disabled = false;
      this.render();
    }
  },

  /**
   * listenCaptcha plays the captcha's digits. The WAV is fetched once, on the first press, and
   * replayed from memory: each fetch counts against the captcha's fetch limit, and a media
   * element left to itself may fetch a file several times (ranges, replays of a no-store file).
   */
  async listenCaptcha() {
    const c = this.captcha;
    const a = this.el.captchaAudio;
    if (!c) {
      return;
    }
    this.el.captchaAnswer.focus();
    try {
      if (!c.audioURL) {
        const r = await fetch(c.audio, { credentials: "same-origin" });
        if (!r.ok) {
          throw new Error(`audio: HTTP ${r.status}`);
        }
        const url = URL.createObjectURL(await r.blob());
        if (this.captcha !== c) {
          URL.revokeObjectURL(url); // a new image came meanwhile
          return;
        }
        c.audioURL = url;
        a.src = url;
      }
      a.currentTime = 0;
      await a.play();
    } catch {
      this.sayText("captcha_audio", "warn", "The digits could not be played. Press “New image” for new ones.");
    }
  },

  /** prefetchPath fetches the path at the opening instant, in the background. */
  prefetchPath() {
    this.pathPromise = this.fetchPath()
      .then((p) => {
        this.path = p;
        if (this.captchaOn) {
          this.sayText("ready", "good", "Digits accepted. Press Buy when the button opens.");
        }
      })
      .catch((err) => this.buyRefused(err, { prefetch: true }))
      .finally(() => {
        this.pathPromise = null;
      });
  },

  /** fetchPath asks for the buyer's hashed buy path, never before the path instant. */
  async fetchPath() {
    const early = this.pathInstant() - this.clock.now();
    if (early > 0) {
      await sleep(early);
    }
    if (this.captchaOn === null) {
      await this.newCaptcha(); // the first ask failed (busy, rate limited): learn whether there is one
    }
    let id = null;
    let answer = "";
    if (this.captchaOn !== false) {
      answer = this.el.captchaAnswer.value.trim();
      if (!this.captcha || !answer) {
        throw new ApiError(0, "captcha_missing", "no captcha answer");
      }
      id = this.captcha.id;
    }
    for (let attempt = 0; ; attempt++) {
      try {
        const p = await this.api.path(id, answer);
        this.captcha = null; // used up
        return p;
      } catch (err) {
        if (err.code === "not_started" && attempt < PATH_RETRIES) {
          await sleep(backoffDelay(attempt, { base: 200 }));
          continue;
        }
        if (err.code === "captcha_invalid") {
          this.captcha = null;
        }
        throw err;
      }
    }
  },

  /** holding reports whether the buyer has a win in progress or done. */
  holding() {
    return this.order !== null && HOLDING.has(this.order.code);
  },

  /**
   * buy makes the purchase: the path if not fetched yet, then the buy with this purchase's
   * Idempotency-Key. retry is an automatic retry (after "busy"), which the closed button allows.
   */
  async buy({ retry = false } = {}) {
    if (this.buying || (!retry && this.el.buy.disabled)) {
      return; // a double click or a second Enter is the same purchase, already under way
    }
    this.buying = true;
    this.buyKey ??= newKey();
    this.render();
    try {
      if (this.pathPromise) {
        await this.pathPromise;
        if (!this.path) {
          return; // the fetch at the opening instant was refused and said why
        }
      }
      if (!this.path) {
        this.path = await this.fetchPath();
      }
      const r = await this.api.buy(this.path, this.buyKey);
      this.buyKey = null;
      this.busyRetries = 0;
      this.notStartedRetries = 0;
      this.queued(r);
    } catch (err) {
      this.buyRefused(err, {});
    } finally {
      this.buying = false;
      this.render();
    }
  },

  /** buyRefused tells the buyer why a path fetch or a buy did not go through, and what happens next. */
  buyRefused(err, { prefetch = false }) {
    const now = this.clock.now();
    switch (err.code) {
      case "busy": {
        const wait = withJitter(err.retryAfter || 1000);
        if (!prefetch && this.busyRetries < BUSY_RETRIES) {
          this.busyRetries++;
          this.holdUntil = now + wait;
          this.say("busy", ` Trying again in ${waitText(wait)}…`);
          setTimeout(() => this.buy({ retry: true }), wait);
        } else {
          this.busyRetries = 0;
          this.holdUntil = now + wait;
          this.say("busy", ` Please press Buy again in ${waitText(wait)}.`);
        }
        break;
      }
      case "rate_limited": {
        const wait = withJitter(err.retryAfter || 1000);
        this.holdUntil = now + wait;
        this.say("rate_limited", ` The button opens again in ${waitText(wait)}.`);
        break;
      }
      case "sold_out":
        this.buyKey = null;
        this.markSoldOut();
        this.say("sold_out");
        this.refreshStatus();
        break;
      case "limit_reached":
        this.buyKey = null;
        this.say("limit_reached");
        this.checkResult(); // show the order they already have
        this.refreshStatus();
        break;
      case "not_started": {
        // The page thought the sale open, the gateway not yet: its clock estimate ran a hair
        // early. Re-sample the clock and try the same purchase once more when it says open.
        const retry = !prefetch && this.notStartedRetries < NOT_STARTED_RETRIES;
        if (retry) {
          this.notStartedRetries++;
        }
        this.sync(2).then(() => {
          this.tick();
          if (retry) {
            const wait = Math.max(0, this.sale.start - this.clock.now()) + this.clock.uncertainty + 50;
            setTimeout(() => this.buy({ retry: true }), wait);
          }
        });
        this.say("not_started", retry ? " Trying once more…" : " Press Buy again in a moment.");
        break;
      }
      case "ended":
        this.buyKey = null;
        this.say("ended");
        break;
      case "captcha_invalid":
        this.path = null;
        this.say("captcha_invalid");
        this.newCaptcha().then(() => this.focusAnswer());
        break;
      case "captcha_missing":
        this.say("captcha_missing");
        if (!prefetch) {
          this.focusAnswer();
        }
        break;
      case "bad_path":
        this.path = null;
        this.say("bad_path");
        this.newCaptcha(); // the next path needs a new captcha answer (when the captcha is on)
        break;
      case "unauthorized":
        this.signOut("unauthorized");
        break;
      case "not_admitted":
        // The gateway's line disagrees with the page's (a session just over, a clock a hair
        // early): forget the path and ask the line now; Buy opens again only if it says admitted.
        this.path = null;
        this.pathTried = false;
        this.say("not_admitted");
        this.followLine({ soon: true });
        break;
      default:
        this.say(err.code);
    }
    this.render();
  },

  /**
   * focusAnswer puts the focus in the captcha answer field, when it is shown, and scrolls the
   * message above it into view with it: on a phone the field alone would leave the reason unseen.
   */
  focusAnswer() {
    if (!this.el.captcha.hidden) {
      this.el.captchaAnswer.focus({ preventScroll: true });
      this.el.message.scrollIntoView({ block: "start" });
      this.el.captchaAnswer.scrollIntoView({ block: "nearest" });
    }
  },

  /** markSoldOut closes the sale on this page after a sold-out answer. */
  markSoldOut() {
    this.soldOut = true;
    this.soldOutAt = performance.now();
  },

  /** queued follows a win: the order section takes the buy form's place, and the polling starts. */
  queued(r) {
    this.order = null; // a new purchase: nothing of an earlier, cancelled one carries over
    this.dueChecked = false;
    this.showResult({ code: "queued", reservation_id: r.reservation_id });
    if (this.sale && Number.isFinite(r.remaining)) {
      this.sale.remaining = r.remaining;
    }
    this.el.order.focus(); // the buy form is gone; the order is where the buyer is now
    this.pollResult();
  },
};
