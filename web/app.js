// The sale page: a countdown on the sale's clock, the captcha, the hashed buy path fetched at the
// opening instant, the buy, then the result and the payment. See index.html for the settings.

import { Api } from "./api.js";
import { backoffDelay, sleep, withJitter } from "./backoff.js";
import { ServerClock, countdownText, describeSkew, msUntilTick } from "./clock.js";
import { readConfig } from "./config.js";
import { lineHintText, message, waitText } from "./messages.js";
import { lineMethods } from "./line.js";
import { orderMethods } from "./order.js";
import { purchaseMethods } from "./purchase.js";
import { signInMethods } from "./signin.js";
import { TokenStore, takeFragmentToken } from "./token.js";

const SYNC_SAMPLES = 4; // clock samples taken at load; the first pays for the connection set-up
const SYNC_GAP_MS = 150;
const PRESYNC_WINDOW_MS = [4000, 30000]; // re-sample the clock once this long before the path instant
const SKEW_NOTE_MS = 2000; // a device clock further off than this is pointed out to the buyer
const STATUS_EVERY_MS = 10000; // remaining stock and state; the answer is cacheable for 1 s
const ANSWER_SETTLE_MS = 1200; // the captcha answer counts as typed after this long without a keystroke
const SOLD_OUT_STICKY_MS = 3000; // a status read cached before a sold-out answer must not undo it

/**
 * Sale drives the page for one activity. Its methods are spread over a few modules, one concern
 * each: the clock and the display here, signing in (signin.js), buying (purchase.js) and the
 * order (order.js).
 */
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
      buyForm: $("buy-form"), buy: $("buy"), buyHint: $("buy-hint"), captchaHint: $("captcha-hint"),
      captcha: $("captcha"), captchaImage: $("captcha-image"), captchaNew: $("captcha-new"),
      productName: $("product-name"), price: $("price"), priceNow: $("price-now"),
      captchaAnswer: $("captcha-answer"), captchaListen: $("captcha-listen"), captchaAudio: $("captcha-audio"),
      message: $("message"), announce: $("announce"),
      line: $("line"), linePlace: $("line-place"), lineAhead: $("line-ahead"), lineEta: $("line-eta"),
      order: $("order"), orderStatus: $("order-status"), orderIDRow: $("order-id-row"), orderID: $("order-id"),
      orderDueRow: $("order-due-row"), orderDue: $("order-due"), pay: $("pay"),
    };
    this.cfg = cfg;
    this.tokens = new TokenStore();
    this.api = new Api({ ...cfg, token: () => this.tokens.get() });
    this.clock = new ServerClock();
    // With the year: a sale may end years from now (the demo ends in 2036).
    this.dateFormat = new Intl.DateTimeFormat(undefined, {
      weekday: "short", day: "numeric", month: "short", year: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
    });
    // In place of a countdown to an instant days away.
    this.dayFormat = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short", year: "numeric" });

    this.sale = null; // {start, end, reveal, remaining} from the status call
    this.soldOut = false;
    this.soldOutAt = -Infinity; // monotonic ms of the last sold-out answer to a call of ours
    this.captchaOn = null; // unknown until the gateway says
    this.captcha = null; // {id, image, audio}
    this.path = null; // the buy path, once revealed
    this.pathPromise = null;
    this.pathTried = false; // the automatic fetch at the opening instant was made
    this.answerEditedAt = -Infinity; // monotonic ms of the last keystroke in the captcha answer
    this.presynced = false;
    this.buyKey = null; // one purchase, one key: retries and double clicks reuse it
    this.buying = false;
    this.busyRetries = 0;
    this.notStartedRetries = 0;
    this.holdUntil = -Infinity; // server ms before which the Buy button stays closed (Retry-After)
    this.order = null; // the latest result record {code, order_id, pay_before_ms}
    this.polling = false;
    this.paying = false;
    this.payHoldUntil = -Infinity;
    this.dueChecked = false;
    this.announced = new Set();
    this.tickTimer = 0;
    // {opens, pow} of the activity's waiting room (when its line opens, whether a join costs a
    // proof of work); null without one
    this.room = null;
    this.line = null; // the buyer's place {state, position, ahead, etaAt, until} (line.js)
    this.lineJoined = false;
    this.lineCalling = false;
    this.lineTimer = 0;
    this.lineGen = 0; // bumped at sign-out: an answer for the previous buyer is dropped
    this.lineFailures = 0;
  }

  async start() {
    const fromAddress = takeFragmentToken();
    if (fromAddress) {
      this.tokens.set(fromAddress);
    }
    this.bind();
    if (!(await this.firstSync())) {
      return;
    }
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
    e.captchaListen.addEventListener("click", () => this.listenCaptcha());
    e.captchaAnswer.addEventListener("input", () => {
      this.answerEditedAt = performance.now();
    });
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

  /**
   * firstSync takes the load-time clock samples, waiting out failures with backoff. It reports
   * false when there is no such sale.
   */
  async firstSync() {
    for (let attempt = 0; ; attempt++) {
      const err = await this.sync(SYNC_SAMPLES);
      if (this.clock.synced && this.sale) {
        return true;
      }
      if (err?.code === "not_found") {
        this.say("not_found");
        this.setText(this.el.label, "No such sale");
        this.setText(this.el.countdown, "");
        return false;
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
    const room = b.waiting_room;
    this.room = Number.isFinite(room?.opens_ms) ? { opens: room.opens_ms, pow: room.proof_of_work > 0 } : null;
    if (typeof b.captcha === "boolean") {
      this.captchaOn = b.captcha;
    }
    this.showProduct(b);
    if (b.state === "sold_out") {
      if (!this.soldOut && !this.holding()) {
        this.say("sold_out"); // said, not only shown: the buyer may be looking elsewhere
      }
      this.soldOut = true;
    } else if (this.soldOut && b.state === "open" && b.remaining > 0 &&
      performance.now() - this.soldOutAt > SOLD_OUT_STICKY_MS) {
      this.soldOut = false; // restocked: an unpaid order went back on sale
    }
  }

  /** showProduct shows the activity's title and price, when it has them. */
  showProduct(b) {
    const e = this.el;
    const title = typeof b.title === "string" && b.title !== "" ? b.title : String(b.activity ?? "");
    this.setText(e.productName, title);
    if (document.title !== `Flash sale · ${title}`) {
      document.title = `Flash sale · ${title}`;
    }
    const display = typeof b.price?.display === "string" ? b.price.display : "";
    this.setText(e.priceNow, display);
    e.price.hidden = display === "";
  }

  /** refreshStatusLater keeps the stock and state current, gently (jittered, cacheable reads). */
  refreshStatusLater() {
    setTimeout(async () => {
      if (this.clock.synced && this.sale && this.clock.now() >= this.sale.end) {
        return; // nothing changes after the end
      }
      if (!document.hidden) {
        await this.refreshStatus();
      }
      this.refreshStatusLater();
    }, withJitter(STATUS_EVERY_MS, STATUS_EVERY_MS / 2));
  }

  /** refreshStatus reads the status once (a cacheable read: no clock sample). */
  async refreshStatus() {
    try {
      const s = await this.api.status();
      this.applyStatus(s.body);
      this.render();
    } catch {
      // The next refresh will try again; the countdown does not depend on it.
    }
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
      case "upcoming": {
        const left = countdownText(start - now);
        this.setText(e.label, left === null ? "The sale opens on" : "The sale opens in");
        this.setText(e.countdown, left ?? this.dayFormat.format(new Date(start)));
        this.setText(e.when, `Opens ${fmt.format(new Date(start))} (your time zone)`);
        break;
      }
      case "open": {
        const left = countdownText(end - now);
        this.setText(e.label, left === null ? "The sale is open until" : "The sale is open. It ends in");
        this.setText(e.countdown, left ?? this.dayFormat.format(new Date(end)));
        this.setText(e.when, `Ends ${fmt.format(new Date(end))} (your time zone)`);
        break;
      }
      case "sold_out":
        this.setText(e.label, "Sold out");
        this.setText(e.when, "Every item has been taken.");
        break;
      default:
        this.setText(e.label, "The sale has ended");
        this.setText(e.when, `Ended ${fmt.format(new Date(end))} (your time zone)`);
    }
    e.countdown.hidden = phase === "sold_out" || phase === "ended";
    // A countdown with days ("1d 09:12:33") or a date gets a smaller size, to stay on one line.
    e.countdown.classList.toggle("long", e.countdown.textContent.length > 8);

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
    this.renderLine(now);
    this.renderBuy(phase, now);
    this.renderOrder(now);

    // The clock is re-sampled once shortly before the path instant, when it matters most.
    const toPath = this.pathInstant() - now;
    if (!this.presynced && toPath > PRESYNC_WINDOW_MS[0] && toPath < PRESYNC_WINDOW_MS[1]) {
      this.presynced = true;
      setTimeout(() => this.sync(2), Math.random() * (toPath - PRESYNC_WINDOW_MS[0]));
    }
    // The opening instant: fetch the buy path now, so that Buy costs one call.
    // With a waiting room, the instant is the buyer's turn in the line.
    if (!this.pathTried && this.signedIn() && now >= this.pathInstant() && (phase === "upcoming" || phase === "open") &&
      !this.holding() && this.admitted(now) && (this.captchaOn === false || this.answerReady())) {
      this.pathTried = true;
      this.prefetchPath();
    }
  }

  /**
   * answerReady reports whether the captcha answer can be sent: typed, and not being typed right
   * now (a half-typed answer sent at the opening instant would only waste the captcha).
   */
  answerReady() {
    return this.captcha !== null && this.el.captchaAnswer.value.trim() !== "" &&
      performance.now() - this.answerEditedAt > ANSWER_SETTLE_MS;
  }

  renderBuy(phase, now) {
    const e = this.el;
    const signedIn = this.signedIn();
    e.buyForm.hidden = this.holding();
    e.captcha.hidden = !(signedIn && this.captchaOn && this.captcha && (phase === "upcoming" || phase === "open"));
    const held = now < this.holdUntil;
    const turn = this.admitted(now);
    e.buy.disabled = !(signedIn && phase === "open" && !this.buying && !held && turn);
    this.setText(e.buy, this.buying ? "Buying…" : "Buy now");
    e.buy.setAttribute("aria-busy", String(this.buying));
    // Signed out, the sign-in form says what to do: the hint says nothing more.
    let hint = "";
    if (!signedIn) {
      hint = "";
    } else if (phase === "upcoming") {
      hint = "The button opens when the sale starts.";
    } else if (phase === "open" && !turn) {
      hint = lineHintText(this.line?.state);
    } else if (phase === "open") {
      hint = held ? `Please wait ${waitText(this.holdUntil - now)}.` : "One press is one purchase.";
    } else if (phase === "sold_out") {
      hint = "Sold out.";
    } else {
      hint = "The sale has ended.";
    }
    this.setText(e.buyHint, hint);
    e.buyHint.hidden = hint === "";
    this.setText(e.captchaHint, phase === "upcoming"
      ? "Type them now: they are checked when the sale opens."
      : "Type them, then press Buy now.");
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
      let text = "The sale is open.";
      if (this.signedIn()) {
        text += this.admitted() ? " The Buy button is enabled." : " The Buy button opens when your turn in the line comes.";
      }
      once("open", text);
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

Object.assign(Sale.prototype, signInMethods, purchaseMethods, orderMethods, lineMethods);

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
