// After the win: polling the result with backoff and jitter until the order exists, the order
// with its pay-before countdown, and the payment. Methods of Sale (see app.js).

import { backoffDelay, sleep, withJitter } from "./backoff.js";
import { formatCountdown } from "./clock.js";
import { waitText } from "./messages.js";

const FINAL = new Set(["paid", "cancelled", "failed"]);

/** orderMethods are the Sale methods that follow the order from the queue to the payment. */
export const orderMethods = {
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
  },

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
  },

  /** showResult shows a result record; quiet leaves the message as it is. */
  showResult(r, { quiet = false } = {}) {
    const before = this.order?.code;
    this.order = { ...this.order, ...r };
    if (!quiet && before !== r.code) {
      this.say(r.code);
    }
    if (before !== r.code && (r.code === "cancelled" || r.code === "failed")) {
      this.refreshStatus(); // the item went back on sale: the stock shown is stale
    }
    this.render();
  },

  /** renderOrder shows the order and runs its pay-before countdown on the sale's clock. */
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
  },

  /** pay pays the order; paying twice is harmless, the order API answers "paid" again. */
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
  },
};
