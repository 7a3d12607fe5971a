// The waiting room (docs/api.md, "The waiting room"): for an activity that has one, the page joins
// the line for its signed-in buyer, shows the place, the buyers ahead and the estimate, asks again
// at the refresh_ms the gateway names, and opens the buy step only once the turn has come.
// Methods of Sale (see app.js).

import { backoffDelay } from "./backoff.js";
import { solveChallenge } from "./pow.js";
import { lineAheadText, lineEtaText, linePlaceText, lineSessionText } from "./messages.js";

// A little spread on the gateway's refresh_ms, so that pages that joined together do not poll in
// the same millisecond. Not below a second: the gateway then names the moment just after this
// buyer's own turn, which no other page shares.
const LINE_JITTER_MS = 200;
const LINE_JITTER_FROM_MS = 1000;

/** lineMethods are the Sale methods of the waiting room. */
export const lineMethods = {
  /** inLine reports whether this buyer's purchase waits for the line: a room, and no win yet. */
  inLine() {
    return this.room !== null && this.signedIn() && !this.holding();
  },

  /** admitted reports whether the buy step is open to this buyer: no room, or a turn that lasts. */
  admitted(now = this.clock.now()) {
    if (this.room === null) {
      return true;
    }
    return this.line?.state === "admitted" && now < this.line.until;
  },

  /**
   * followLine joins the line (the first time) or reads the place, then comes back when the
   * gateway said to. One call at a time; a call due later is replaced by soon.
   */
  followLine({ soon = false } = {}) {
    if (soon) {
      clearTimeout(this.lineTimer);
      this.lineTimer = 0;
    }
    if (this.lineTimer || this.lineCalling || !this.inLine() || !this.clock.synced) {
      return;
    }
    const early = this.room.opens - this.clock.now();
    if (early > 0) {
      // Joining before the line opens is refused: come back when it opens.
      this.lineLater(early + Math.min(this.clock.uncertainty, 1000) + 50);
      return;
    }
    this.lineCall();
  },

  /** lineLater calls the line again after ms. */
  lineLater(ms) {
    clearTimeout(this.lineTimer);
    this.lineTimer = setTimeout(() => {
      this.lineTimer = 0;
      this.followLine();
    }, Math.max(0, ms));
  },

  async lineCall() {
    this.lineCalling = true;
    const gen = this.lineGen;
    let next = 0;
    try {
      const a = this.lineJoined ? await this.api.placeInLine() : await this.api.joinLine(await this.lineProof());
      if (gen !== this.lineGen) {
        return; // signed out meanwhile
      }
      this.lineJoined = true;
      this.lineFailures = 0;
      this.showLine(a);
      next = a.refresh_ms > 0 ? a.refresh_ms + lineJitter(a.refresh_ms) : 0;
    } catch (err) {
      if (gen !== this.lineGen) {
        return;
      }
      next = this.lineRefused(err);
    } finally {
      this.lineCalling = false;
    }
    this.render();
    if (next > 0 && this.inLine()) {
      this.lineLater(next);
    }
  },

  /** lineProof solves a fresh challenge when the room asks a proof of work to join; else null. */
  async lineProof() {
    if (!this.room?.pow) {
      return null;
    }
    const c = await this.api.lineChallenge();
    return { challenge: c.challenge, answer: await solveChallenge(c.challenge, c.bits) };
  },

  /** showLine keeps the gateway's answer, with its instants on the sale's clock, and says a change. */
  showLine(a) {
    const now = this.clock.now();
    const before = this.line?.state;
    this.line = {
      state: a.state,
      position: Number.isFinite(a.position) ? a.position : 0,
      ahead: Number.isFinite(a.ahead) ? a.ahead : 0,
      etaAt: now + (Number.isFinite(a.eta_ms) ? a.eta_ms : 0),
      until: Number.isFinite(a.admitted_until_ms) ? a.admitted_until_ms : 0,
    };
    if (before === a.state) {
      return;
    }
    switch (a.state) {
      case "waiting":
        this.say("line_waiting");
        break;
      case "admitted":
        this.say("line_admitted");
        break;
      case "expired":
        this.say("line_expired");
        break;
      case "closed":
        this.say("line_closed");
        break;
    }
  },

  /** lineRefused says why a line call failed and returns when to try again (0: not). */
  lineRefused(err) {
    switch (err.code) {
      case "not_in_line": // the line was lost (a store restarted): take a place again
        this.lineJoined = false;
        return 1000;
      case "not_started": // the clock ran a hair early: the line opens in a moment
        this.sync(2).then(() => this.tick());
        return 1000;
      case "sold_out":
        this.markSoldOut();
        this.say("sold_out");
        return 0;
      case "ended":
        this.say("ended");
        return 0;
      case "unauthorized":
        this.signOut("unauthorized");
        return 0;
      case "not_found": // the activity has no waiting room any more: buy as without one
        this.room = null;
        return 0;
      case "pow_required": // the room asks a proof of work now (a reload of the gateway)
        this.room.pow = true;
        return 100;
      case "pow_expired": // slow to solve, or a stale challenge: solve a fresh one
      case "pow_spent":
      case "pow_invalid":
        return 100;
    }
    this.lineFailures = (this.lineFailures ?? 0) + 1;
    this.say(err.code, " Your place in the line is kept; asking again shortly.");
    return Math.max(err.retryAfter || 0, backoffDelay(this.lineFailures - 1));
  },

  /** forgetLine drops the buyer's place on this page (signed out). */
  forgetLine() {
    this.lineGen++;
    clearTimeout(this.lineTimer);
    this.lineTimer = 0;
    this.line = null;
    this.lineJoined = false;
  },

  /** renderLine shows the place in the line while the purchase waits for it. */
  renderLine(now) {
    const e = this.el;
    const l = this.line;
    e.line.hidden = !(this.inLine() && l !== null);
    if (e.line.hidden) {
      return;
    }
    e.line.dataset.state = l.state;
    this.setText(e.linePlace, linePlaceText(l));
    this.setText(e.lineAhead, l.state === "waiting" ? lineAheadText(l.ahead) : "");
    e.lineAhead.hidden = l.state !== "waiting";
    let eta = "";
    if (l.state === "waiting") {
      eta = lineEtaText(l.etaAt - now, l.position === 0);
    } else if (l.state === "admitted") {
      eta = lineSessionText(l.until - now);
    }
    this.setText(e.lineEta, eta);
    e.lineEta.hidden = eta === "";
  },
};

/** lineJitter is the spread added to a refresh_ms: none when the turn is due within a second. */
function lineJitter(refreshMs) {
  return refreshMs < LINE_JITTER_FROM_MS ? 0 : Math.random() * LINE_JITTER_MS;
}
