// The sale page: a countdown on the sale's clock, the captcha, the hashed buy path fetched at the
// opening instant, the buy, then the result and the payment. See index.html for the settings.

import { Api, ApiError, samePath } from "./api.js";
import { backoffDelay, sleep, withJitter } from "./backoff.js";
import { ServerClock, describeSkew, formatCountdown, msUntilTick } from "./clock.js";
import { readConfig } from "./config.js";
import { message, waitText } from "./messages.js";
import { TokenStore, claims, expired, takeFragmentToken } from "./token.js";

const USER_NAME = /^[A-Za-z0-9._-]{1,64}$/;
const SYNC_SAMPLES = 4; // clock samples taken at load; the first pays for the connection set-up
const SYNC_GAP_MS = 150;
const PRESYNC_WINDOW_MS = [4000, 30000]; // re-sample the clock once this long before the path instant
const SKEW_NOTE_MS = 2000; // a device clock further off than this is pointed out to the buyer
const STATUS_EVERY_MS = 10000; // remaining stock and state; the answer is cacheable for 1 s
const BUSY_RETRIES = 3; // automatic retries of a buy answered "busy", each after Retry-After
const PATH_RETRIES = 4; // retries of a path fetch answered "not_started" (a clock a hair early)
const SOLD_OUT_STICKY_MS = 3000; // a status read cached before a sold-out answer must not undo it
const HOLDING = new Set(["queued", "pending_payment", "paid"]); // a win in progress or done
const FINAL = new Set(["paid", "cancelled", "failed"]);

/** newKey is a random Idempotency-Key (crypto.randomUUID needs a secure context; this does not). */
function newKey() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** Sale drives the page for one activity. */
export class Sale {
  constructor(root, cfg) {
    const $ = (id) => document.getElementById(id);
    this.el = {
      root,
      account: $("account"), accountName: $("account-name"), signout: $("signout"),
      stock: $("stock"),
      label: $("countdown-label"), countdown: $("countdown"), when: $("when"), clockNote: $("clock-note"),
      signin: $("signin"), signinUser: $("signin-user"), signinButton: $("signin-button"),
      signinToken: $("signin-token"), signinTokenUse: $("signin-token-use"),
      buyForm: $("buy-form"), buy: $("buy"), buyHint: $("buy-hint"),
      captcha: $("captcha"), captchaImage: $("captcha-image"), captchaNew: $("captcha-new"),
      captchaAnswer: $("captcha-answer"),
      message: $("message"), announce: $("announce"),
      order: $("order"), orderStatus: $("order-status"), orderIDRow: $("order-id-row"), orderID: $("order-id"),
      orderDueRow: $("order-due-row"), orderDue: $("order-due"), pay: $("pay"),
    };
    this.cfg = cfg;
    this.tokens = new TokenStore();
    this.api = new Api({ ...cfg, token: () => this.tokens.get() });
    this.clock = new ServerClock();
    this.dateFormat = new Intl.DateTimeFormat(undefined, {
      weekday: "short", day: "numeric", month: "short", hour: "2-digit", minute: "2-digit", second: "2-digit",
    });

    this.sale = null; // {start, end, reveal, remaining} from the status call
    this.soldOut = false;
    this.soldOutAt = -Infinity; // monotonic ms of the last sold-out answer to a call of ours
    this.captchaOn = null; // unknown until the gateway says
    this.captcha = null; // {id, image}
    this.path = null; // the buy path, once revealed
    this.pathPromise = null;
    this.pathTried = false; // the automatic fetch at the opening instant was made
    this.presynced = false;
    this.buyKey = null; // one purchase, one key: retries and double clicks reuse it
    this.buying = false;
    this.busyRetries = 0;
    this.holdUntil = -Infinity; // server ms before which the Buy button stays closed (Retry-After)
    this.order = null; // the latest result record {code, order_id, pay_before_ms}
    this.polling = false;
    this.paying = false;
    this.payHoldUntil = -Infinity;
    this.dueChecked = false;
    this.announced = new Set();
    this.tickTimer = 0;
  }

  async start() {
    const fromAddress = takeFragmentToken();
    if (fromAddress) {
      this.tokens.set(fromAddress);
    }
    this.bind();
    await this.firstSync();
    this.tick();
    this.refreshStatusLater();
    if (this.signedIn()) {
      await this.enter();
    } else {
      this.showAccount();
    }
  }

  bind() {
    const e = this.el;
    e.buyForm.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.buy();
    });
    e.pay.addEventListener("click", () => this.pay());
    e.captchaNew.addEventListener("click", () => this.newCaptcha());
    e.captchaImage.addEventListener("error", () => {
      if (this.captcha) {
        this.sayText("captcha_image", "warn", "The picture could not be loaded. Press “New image”.");
      }
    });
    e.signin.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.demoSignIn();
    });
    e.signinTokenUse.addEventListener("click", () => this.useToken(e.signinToken.value.trim()));
    e.signout.addEventListener("click", () => this.signOut());
    document.addEventListener("visibilitychange", () => {
      // A sleeping device may have paused the monotonic clock: check it against the server.
      if (!document.hidden && this.clock.synced) {
        this.sync(2).then(() => this.tick());
      }
    });
  }

  // --- the clock ---------------------------------------------------------------------------------

  /** firstSync takes the load-time clock samples, waiting out failures with backoff. */
  async firstSync() {
    for (let attempt = 0; ; attempt++) {
      const err = await this.sync(SYNC_SAMPLES);
      if (this.clock.synced && this.sale) {
        return;
      }
      if (err?.code === "not_found") {
        this.say("not_found");
        this.setText(this.el.label, "No such sale");
        throw err;
      }
      const wait = err?.retryAfter ? withJitter(err.retryAfter) : backoffDelay(attempt);
      this.say(err?.code || "network", ` Trying again in ${waitText(wait)}.`);
      await sleep(wait);
    }
  }

  /** sync takes n fresh status samples; it returns the last error, if any. */
  async sync(n) {
    let last = null;
    for (let i = 0; i < n; i++) {
      try {
        const s = await this.api.status({ fresh: true });
        if (!s.fromCache) {
          this.clock.add(s.sent, s.received, s.body.server_time_ms);
        }
        this.applyStatus(s.body);
      } catch (err) {
        last = err;
        if (err.code === "not_found" || err.code === "rate_limited") {
          return err;
        }
      }
      if (i < n - 1) {
        await sleep(SYNC_GAP_MS);
      }
    }
    return last;
  }

  applyStatus(b) {
    if (!Number.isFinite(b?.start_ms) || !Number.isFinite(b?.end_ms)) {
      return;
    }
    this.sale = {
      start: b.start_ms,
      end: b.end_ms,
      reveal: Number.isFinite(b.reveal_ms) ? b.reveal_ms : 0,
      remaining: Number.isFinite(b.remaining) ? b.remaining : null,
    };
    if (typeof b.captcha === "boolean") {
      this.captchaOn = b.captcha;
    }
    if (b.state === "sold_out") {
      this.soldOut = true;
    } else if (this.soldOut && b.state === "open" && b.remaining > 0 &&
      performance.now() - this.soldOutAt > SOLD_OUT_STICKY_MS) {
      this.soldOut = false; // restocked: an unpaid order went back on sale
    }
  }

  /** refreshStatusLater keeps the stock and state current, gently (jittered, cacheable reads). */
  refreshStatusLater() {
    setTimeout(async () => {
      if (this.clock.synced && this.sale && this.clock.now() >= this.sale.end) {
        return; // nothing changes after the end
      }
      if (!document.hidden) {
        try {
          const s = await this.api.status();
          this.applyStatus(s.body);
          this.render();
        } catch {
          // The next refresh will try again; the countdown does not depend on it.
        }
      }
      this.refreshStatusLater();
    }, withJitter(STATUS_EVERY_MS, STATUS_EVERY_MS / 2));
  }

  // --- the ticker --------------------------------------------------------------------------------

  /** tick renders, then sleeps until the next moment something visible changes. */
  tick() {
    clearTimeout(this.tickTimer);
    this.render();
    if (!this.clock.synced || !this.sale) {
      return;
    }
    const now = this.clock.now();
    const { start, end } = this.sale;
    const target = now < start ? start : end;
    let delay = Math.min(1000, msUntilTick(target, now));
    // Wake exactly at the instants that act, not only at whole seconds.
    for (const t of [this.pathInstant(), start, this.holdUntil, this.payHoldUntil]) {
      if (t > now && t - now < delay) {
        delay = t - now + 2;
      }
    }
    this.tickTimer = setTimeout(() => this.tick(), Math.max(10, delay));
  }

  /**
   * pathInstant is the earliest server time the buy path may be asked for: start - reveal, plus
   * the clock's uncertainty so that an estimate that runs early never asks before it.
   */
  pathInstant() {
    return this.sale.start - this.sale.reveal + Math.min(this.clock.uncertainty, 1000);
  }

  phase(now) {
    const { start, end } = this.sale;
    if (now < start) {
      return "upcoming";
    }
    if (now >= end) {
      return "ended";
    }
    return this.soldOut ? "sold_out" : "open";
  }

  render() {
    if (!this.clock.synced || !this.sale) {
      return;
    }
    const e = this.el;
    if (!e.account.hidden && !this.signedIn()) {
      this.showAccount(); // the token expired while the page was open; this renders again
      return;
    }
    const now = this.clock.now();
    const { start, end, remaining } = this.sale;
    const phase = this.phase(now);
    e.root.dataset.phase = phase;

    const fmt = this.dateFormat;
    switch (phase) {
      case "upcoming":
        this.setText(e.label, "The sale opens in");
        this.setText(e.countdown, formatCountdown(start - now));
        this.setText(e.when, `Opens ${fmt.format(new Date(start))} (your time zone)`);
        break;
      case "open":
        this.setText(e.label, "The sale is open. It ends in");
        this.setText(e.countdown, formatCountdown(end - now));
        this.setText(e.when, `Ends ${fmt.format(new Date(end))} (your time zone)`);
        break;
      case "sold_out":
        this.setText(e.label, "Sold out");
        this.setText(e.countdown, "00:00:00");
        this.setText(e.when, "Every item has been taken.");
        break;
      default:
        this.setText(e.label, "The sale has ended");
        this.setText(e.countdown, "00:00:00");
        this.setText(e.when, `Ended ${fmt.format(new Date(end))} (your time zone)`);
    }

    const skew = this.clock.skew();
    e.clockNote.hidden = Math.abs(skew) < SKEW_NOTE_MS;
    if (!e.clockNote.hidden) {
      const way = skew < 0 ? "behind" : "ahead of";
      this.setText(e.clockNote,
        `Your device's clock is ${describeSkew(skew)} ${way} the sale's clock. The countdown follows the sale's clock.`);
    }
    if (remaining !== null) {
      this.setText(e.stock, phase === "sold_out" || remaining <= 0 ? "None left" : `${remaining} left`);
    }

    this.announceMilestones(phase, start - now);
    this.renderBuy(phase, now);
    this.renderOrder(now);

    // The clock is re-sampled once shortly before the path instant, when it matters most.
    const toPath = this.pathInstant() - now;
    if (!this.presynced && toPath > PRESYNC_WINDOW_MS[0] && toPath < PRESYNC_WINDOW_MS[1]) {
      this.presynced = true;
      setTimeout(() => this.sync(2), Math.random() * (toPath - PRESYNC_WINDOW_MS[0]));
    }
    // The opening instant: fetch the buy path now, so that Buy costs one call.
    if (!this.pathTried && this.signedIn() && now >= this.pathInstant() && (phase === "upcoming" || phase === "open") &&
      !this.holding() && (this.captchaOn === false || (this.captcha && this.el.captchaAnswer.value.trim()))) {
      this.pathTried = true;
      this.prefetchPath();
    }
  }

  renderBuy(phase, now) {
    const e = this.el;
    const signedIn = this.signedIn();
    e.buyForm.hidden = this.holding();
    e.captcha.hidden = !(signedIn && this.captchaOn && this.captcha && (phase === "upcoming" || phase === "open"));
    const held = now < this.holdUntil;
    e.buy.disabled = !(signedIn && phase === "open" && !this.buying && !held);
    this.setText(e.buy, this.buying ? "Buying…" : "Buy now");
    e.buy.setAttribute("aria-busy", String(this.buying));
    let hint;
    if (!signedIn) {
      hint = "Sign in to buy.";
    } else if (phase === "upcoming") {
      hint = "The button opens when the sale starts.";
    } else if (phase === "open") {
      hint = held ? `Please wait ${waitText(this.holdUntil - now)}.` : "One press is one purchase.";
    } else if (phase === "sold_out") {
      hint = "Sold out.";
    } else {
      hint = "The sale has ended.";
    }
    this.setText(e.buyHint, hint);
  }

  announceMilestones(phase, toStart) {
    const once = (key, text) => {
      if (!this.announced.has(key)) {
        this.announced.add(key);
        this.setText(this.el.announce, text);
      }
    };
    if (phase === "upcoming") {
      // Said as the countdown passes them (ticks are at most a second apart), never late.
      if (toStart <= 10000 && toStart > 8500) {
        once("10s", "The sale opens in 10 seconds.");
      } else if (toStart <= 60000 && toStart > 58500) {
        once("60s", "The sale opens in 1 minute.");
      }
    } else if (phase === "open") {
      once("open", this.signedIn() ? "The sale is open. The Buy button is enabled." : "The sale is open.");
    }
  }

  // --- signing in --------------------------------------------------------------------------------

  token() {
    const t = this.tokens.get();
    if (!t) {
      return null;
    }
    const c = claims(t);
    if (!c || (this.clock.synced && expired(c, this.clock.now()))) {
      this.tokens.clear();
      return null;
    }
    return { token: t, claims: c };
  }

  signedIn() {
    return this.token() !== null;
  }

  showAccount() {
    const t = this.token();
    this.el.account.hidden = !t;
    this.el.signin.hidden = !!t;
    if (t) {
      this.setText(this.el.accountName, `Signed in as ${t.claims.sub ?? "a buyer"}`);
    } else if (!this.el.message.textContent) {
      this.say("signed_out");
    }
    this.render();
  }

  /** enter sets up a signed-in buyer: any result they already have, and the captcha. */
  async enter() {
    this.showAccount();
    try {
      const r = await this.api.result();
      if (r.code && r.code !== "none") {
        this.showResult(r);
      }
    } catch (err) {
      if (err.code === "unauthorized") {
        this.signOut("unauthorized");
        return;
      }
      // Otherwise the buyer still may buy; their result shows after the buy.
    }
    if (!this.holding()) {
      await this.newCaptcha();
    }
    this.render();
  }

  async demoSignIn() {
    const e = this.el;
    const user = e.signinUser.value.trim();
    if (!USER_NAME.test(user)) {
      this.sayText("bad_name", "warn", "Use 1 to 64 letters, digits, dots, dashes or underscores.");
      e.signinUser.focus();
      return;
    }
    e.signinButton.disabled = true;
    try {
      const r = await this.api.signIn(this.cfg.signin, user);
      if (typeof r.token !== "string" || !claims(r.token)) {
        throw new ApiError(200, "bad_answer", "no token in the answer");
      }
      await this.signedInWith(r.token);
    } catch (err) {
      // 404/405: the gateway has no demo sign-in (it is off unless explicitly enabled).
      this.say(err.code === "not_found" || err.code === "method_not_allowed" ? "demo_signin_off" : err.code,
        err.retryAfter ? ` Wait ${waitText(err.retryAfter)}.` : "");
    } finally {
      e.signinButton.disabled = false;
    }
  }

  async useToken(t) {
    if (!claims(t)) {
      this.sayText("bad_token", "warn", "That is not a JWT (three dot-separated parts).");
      this.el.signinToken.focus();
      return;
    }
    await this.signedInWith(t);
  }

  async signedInWith(t) {
    this.tokens.set(t);
    this.el.signinToken.value = "";
    this.sayText("signed_in", "info", "Signed in.");
    await this.enter();
    // The sign-in form just disappeared: put focus where the buyer goes next.
    (this.el.captcha.hidden ? this.el.label : this.el.captchaAnswer).focus();
  }

  signOut(reason = "signed_out") {
    this.tokens.clear();
    this.captcha = null;
    this.path = null;
    this.pathTried = false;
    this.order = null;
    this.polling = false;
    this.el.order.hidden = true;
    this.say(reason);
    this.showAccount();
  }

  // --- captcha and path --------------------------------------------------------------------------

  /** newCaptcha asks for a captcha, or learns that the captcha is off. */
  async newCaptcha() {
    const e = this.el;
    if (this.captchaOn === false || !this.signedIn()) {
      return;
    }
    e.captchaNew.disabled = true;
    try {
      const c = await this.api.captcha();
      if (!samePath(c.image) || typeof c.captcha_id !== "string") {
        throw new ApiError(200, "bad_answer", "bad captcha answer");
      }
      this.captchaOn = true;
      this.captcha = { id: c.captcha_id, image: c.image };
      e.captchaAnswer.value = "";
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
  }

  prefetchPath() {
    this.pathPromise = this.fetchPath()
      .then((p) => {
        this.path = p;
      })
      .catch((err) => this.buyRefused(err, { prefetch: true }))
      .finally(() => {
        this.pathPromise = null;
      });
  }

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
  }

  // --- buying ------------------------------------------------------------------------------------

  holding() {
    return this.order !== null && HOLDING.has(this.order.code);
  }

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
      this.queued(r);
    } catch (err) {
      this.buyRefused(err, {});
    } finally {
      this.buying = false;
      this.render();
    }
  }

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
        break;
      case "limit_reached":
        this.buyKey = null;
        this.say("limit_reached");
        this.checkResult(); // show the order they already have
        break;
      case "not_started":
        this.say("not_started");
        this.sync(2).then(() => this.tick());
        break;
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
        this.pathTried = false;
        this.say("bad_path");
        break;
      case "unauthorized":
        this.signOut("unauthorized");
        break;
      default:
        this.say(err.code);
    }
    this.render();
  }

  focusAnswer() {
    if (!this.el.captcha.hidden) {
      this.el.captchaAnswer.focus();
    }
  }

  markSoldOut() {
    this.soldOut = true;
    this.soldOutAt = performance.now();
  }

  queued(r) {
    this.showResult({ code: "queued", reservation_id: r.reservation_id });
    if (this.sale && Number.isFinite(r.remaining)) {
      this.sale.remaining = r.remaining;
    }
    this.el.order.focus(); // the buy form is gone; the order is where the buyer is now
    this.pollResult();
  }

  /** checkResult reads the result once and shows it when there is one. */
  async checkResult() {
    try {
      const r = await this.api.result();
      if (r.code && r.code !== "none") {
        this.showResult(r, { quiet: true });
        if (r.code === "queued") {
          this.pollResult();
        }
      }
    } catch {
      // The refusal already said what matters.
    }
  }

  /**
   * pollResult asks for the result until it settles, backing off exponentially with jitter: until
   * the order exists (pending_payment) or, with final, until it is paid, cancelled or failed.
   */
  async pollResult({ final = false } = {}) {
    if (this.polling) {
      return;
    }
    this.polling = true;
    for (let attempt = 0; this.polling; attempt++) {
      let wait = backoffDelay(attempt);
      try {
        const r = await this.api.result();
        if (!this.polling) {
          break;
        }
        if (r.code && r.code !== "none") {
          this.showResult(r);
        }
        if (FINAL.has(r.code) || (!final && r.code === "pending_payment")) {
          break; // from here the buyer acts (pay) or the pay-before countdown runs out
        }
      } catch (err) {
        if (err.code === "unauthorized") {
          this.signOut("unauthorized");
          break;
        }
        if (err.retryAfter) {
          wait = Math.max(wait, withJitter(err.retryAfter));
        }
      }
      await sleep(wait);
    }
    this.polling = false;
  }

  // --- the order ---------------------------------------------------------------------------------

  showResult(r, { quiet = false } = {}) {
    const before = this.order?.code;
    this.order = { ...this.order, ...r };
    if (r.code === "paid" || r.code === "cancelled" || r.code === "failed") {
      this.el.pay.hidden = true;
    }
    if (!quiet && before !== r.code) {
      this.say(r.code);
    }
    this.render();
  }

  renderOrder(now) {
    const e = this.el;
    const o = this.order;
    e.order.hidden = !o || o.code === "none";
    if (e.order.hidden) {
      return;
    }
    const words = {
      queued: "Confirming…", pending_payment: "Waiting for payment", paid: "Paid",
      cancelled: "Cancelled", failed: "Failed",
    };
    this.setText(e.orderStatus, words[o.code] ?? o.code);
    e.order.dataset.status = o.code;
    e.orderIDRow.hidden = !o.order_id;
    this.setText(e.orderID, o.order_id ?? "");
    const pending = o.code === "pending_payment" && Number.isFinite(o.pay_before_ms);
    e.orderDueRow.hidden = !pending;
    e.pay.hidden = o.code !== "pending_payment";
    if (!pending) {
      return;
    }
    const left = o.pay_before_ms - now;
    this.setText(e.orderDue, left > 0 ? formatCountdown(left) : "Time is up");
    e.pay.disabled = left <= 0 || this.paying || now < this.payHoldUntil;
    this.setText(e.pay, this.paying ? "Paying…" : "Pay now");
    e.pay.setAttribute("aria-busy", String(this.paying));
    if (left <= 0 && !this.dueChecked) {
      // The sweeper cancels the order; read the outcome rather than guess it.
      this.dueChecked = true;
      this.say("expired");
      this.pollResult({ final: true });
    }
  }

  async pay() {
    const o = this.order;
    if (this.paying || !o?.order_id || this.el.pay.disabled) {
      return;
    }
    this.paying = true;
    this.render();
    try {
      const r = await this.api.pay(o.order_id);
      this.showResult({ code: r.status || r.code, order_id: o.order_id });
    } catch (err) {
      switch (err.code) {
        case "expired":
          this.showResult({ code: "cancelled" }, { quiet: true });
          this.say("expired");
          break;
        case "busy":
        case "rate_limited": {
          const wait = withJitter(err.retryAfter || 1000);
          this.payHoldUntil = this.clock.now() + wait;
          this.say(err.code, ` Press Pay again in ${waitText(wait)}.`);
          break;
        }
        case "unauthorized":
          this.signOut("unauthorized");
          break;
        default:
          this.say(err.code);
      }
    } finally {
      this.paying = false;
      this.render();
    }
  }

  // --- output ------------------------------------------------------------------------------------

  /** say shows the message for a machine word, with extra text, in the polite live region. */
  say(code, extra = "") {
    const [tone, text] = message(code);
    this.sayText(code, tone, text + extra);
  }

  /** sayText shows a message of the page's own; code names it for styles and tests. */
  sayText(code, tone, text) {
    const m = this.el.message;
    m.dataset.code = code;
    m.dataset.tone = tone;
    m.textContent = text;
  }

  setText(node, text) {
    if (node.textContent !== text) {
      node.textContent = text;
    }
  }
}

async function main() {
  const root = document.getElementById("sale");
  let cfg;
  try {
    cfg = readConfig(root, window.location.search);
  } catch (err) {
    const m = document.getElementById("message");
    m.dataset.code = "config";
    m.dataset.tone = "bad";
    m.textContent = `This page is not set up right: ${err.message}.`;
    return;
  }
  const sale = new Sale(root, cfg);
  window.seckillSale = sale; // for the browser's console
  await sale.start();
}

main().catch((err) => {
  // Every expected failure is shown where it happens; this is a bug, kept visible for reports.
  console.error("sale page:", err);
});
