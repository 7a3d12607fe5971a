// Signing in: the token from the address, a pasted token, or the gateway's demo sign-in (which
// answers only when the gateway's demo_signin option is on). Methods of Sale (see app.js).

import { ApiError } from "./api.js";
import { waitText } from "./messages.js";
import { claims, expired } from "./token.js";

const USER_NAME = /^[A-Za-z0-9._-]{1,64}$/;

/** signInMethods are the Sale methods that sign the buyer in and out. */
export const signInMethods = {
  /** token returns the token and its claims, or null (dropping a token that has expired). */
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
  },

  /** signedIn reports whether the buyer has a usable token. */
  signedIn() {
    return this.token() !== null;
  },

  /** showAccount shows who is signed in, or the sign-in form. */
  showAccount() {
    const t = this.token();
    this.el.account.hidden = !t;
    this.el.signin.hidden = !!t;
    if (t) {
      this.setText(this.el.accountName, `Signed in as ${t.claims.sub ?? "a buyer"}`);
    }
    this.render();
  },

  /** enter sets up a signed-in buyer: any result they already have, and the captcha. */
  async enter() {
    this.showAccount();
    try {
      const r = await this.api.result();
      if (r.code && r.code !== "none") {
        this.showResult(r);
        if (r.code === "queued") {
          this.pollResult(); // reloaded while the order was being made
        }
      }
    } catch (err) {
      if (err.code === "unauthorized") {
        this.signOut("unauthorized");
        return;
      }
      // Otherwise the buyer still may buy; their result shows after the buy.
    }
    this.followLine(); // with a waiting room: join the line (a second join keeps the place)
    if (!this.holding()) {
      await this.newCaptcha();
    }
    this.render();
  },

  /** demoSignIn asks the gateway's demo sign-in for a token (404 when it is off). */
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
  },

  /** useToken signs in with a pasted token. */
  async useToken(t) {
    if (!claims(t)) {
      this.sayText("bad_token", "warn", "That is not a JWT (three dot-separated parts).");
      this.el.signinToken.focus();
      return;
    }
    await this.signedInWith(t);
  },

  /** signedInWith keeps the token and sets the buyer up. */
  async signedInWith(t) {
    this.tokens.set(t);
    this.el.signinToken.value = "";
    this.sayText("signed_in", "info", "Signed in.");
    await this.enter();
    // The sign-in form just disappeared: put focus where the buyer goes next.
    (this.el.captcha.hidden ? this.el.label : this.el.captchaAnswer).focus();
  },

  /** signOut forgets the token and everything that belonged to the buyer. */
  signOut(reason = "signed_out") {
    this.tokens.clear();
    this.captcha = null;
    this.path = null;
    this.pathTried = false;
    this.order = null;
    this.polling = false;
    this.forgetLine();
    this.el.order.hidden = true;
    this.say(reason);
    this.showAccount();
  },
};
