// What the buyer reads for each machine word of the API. Kept in one place so a shop can translate
// the page by editing this file alone. tone is "info", "good", "warn" or "bad" (the style).

const MESSAGES = {
  // Refusals of the gateway (docs/api.md, "Status words").
  sold_out: ["bad", "Sold out. Every item has been taken; there may be more if a buyer does not pay in time."],
  limit_reached: ["warn", "You already hold as many of these as one buyer may have."],
  busy: ["warn", "The sale is very busy right now."],
  rate_limited: ["warn", "Too many tries in a short time."],
  not_started: ["warn", "The sale had not quite opened when your request arrived."],
  ended: ["bad", "The sale has ended."],
  captcha_invalid: ["warn", "Those digits did not match. Here is a new image: please type its digits."],
  captcha_missing: ["warn", "Type the digits in the image first."],
  bad_path: ["warn", "Your buy link was not accepted. Please press Buy again."],
  unauthorized: ["warn", "Your sign-in is missing or has expired. Please sign in again."],
  not_found: ["bad", "There is no such sale here."],
  // The waiting room (docs/api.md, "The waiting room"); the page joins the line for the buyer.
  not_admitted: ["warn", "Your turn in the waiting room has not come, or is over: the page is checking your place."],
  not_in_line: ["warn", "You are not in this sale's waiting room yet."],
  line_waiting: ["info", "You are in the line. Keep this page open: it moves on by itself when your turn comes."],
  line_admitted: ["good", "It is your turn! You can buy now."],
  line_expired: ["bad", "Your turn in the waiting room is over."],
  line_closed: ["bad", "The line is closed: the sale is sold out or has ended."],
  bad_request: ["bad", "The server did not accept the request."],
  network: ["warn", "No answer from the server. Check your connection; trying again is safe."],
  bad_answer: ["bad", "The server's answer could not be understood."],
  // The order API.
  expired: ["bad", "The payment window has closed, so the order was cancelled and the item went back on sale."],
  payment_declined: ["bad", "The payment was declined. You can try again before the payment window closes."],
  // Result records.
  queued: ["good", "You got one! Your order is being confirmed…"],
  pending_payment: ["good", "Your order is reserved. Pay before the time runs out to keep it."],
  paid: ["good", "Paid. Thank you for your order!"],
  cancelled: ["bad", "The order was cancelled and the item went back on sale."],
  failed: ["bad", "Sorry, your order could not be completed. The item was released."],
  // The sale itself.
  open: ["good", "The sale is open!"],
  signed_out: ["info", "You are signed out."],
  forbidden: ["warn", "The demo sign-in answers only on the machine that runs the gateway."],
  demo_signin_off: [
    "warn",
    "Demo sign-in is off on this server. Get a token with “caddy seckill token --user alice” (with the gateway's SECKILL_JWT_SECRET) and add #token=<the token> to this page's address.",
  ],
};

/** message returns [tone, text] for a machine word, with a generic text for unknown words. */
export function message(code) {
  return MESSAGES[code] ?? ["bad", `Something went wrong (${code}). Please try again.`];
}

/** waitText says how long to wait, for the busy and rate-limited messages. */
export function waitText(ms) {
  const s = Math.max(1, Math.ceil(ms / 1000));
  return s === 1 ? "1 second" : `${s} seconds`;
}

/** durationText says a span in words ("45 seconds", "3 minutes", "2 h 5 min"), for the line. */
function durationText(ms) {
  const s = Math.max(1, Math.ceil(ms / 1000));
  if (s < 90) {
    return waitText(ms);
  }
  const m = Math.round(s / 60);
  if (m < 90) {
    return `${m} minutes`;
  }
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** linePlaceText is the headline of the waiting room's box for a place in the line. */
export function linePlaceText(line) {
  switch (line.state) {
    case "admitted":
      return "It is your turn";
    case "expired":
      return "Your turn is over";
    case "closed":
      return "The line is closed";
  }
  return line.position > 0 ? `You are number ${line.position} in line` : "You are in the line";
}

/** lineAheadText says how many buyers wait in front. */
export function lineAheadText(ahead) {
  if (ahead <= 0) {
    return "Nobody is waiting ahead of you.";
  }
  return ahead === 1 ? "1 person is waiting ahead of you." : `${ahead} people are waiting ahead of you.`;
}

/** lineEtaText estimates the wait; before the start the order is drawn by lot. */
export function lineEtaText(ms, lottery) {
  if (lottery) {
    return `Places are drawn by lot when the sale opens. Your turn: in about ${durationText(ms)}.`;
  }
  return ms <= 0 ? "Your turn is about to come." : `Your turn: in about ${durationText(ms)}.`;
}

/** lineSessionText says how long the admitted buyer has to buy. */
export function lineSessionText(ms) {
  return ms <= 0 ? "" : `Buy within ${durationText(ms)}.`;
}

/** lineHintText is the Buy button's hint while the line keeps it closed. */
export function lineHintText(state) {
  switch (state) {
    case "expired":
      return "Your turn has passed.";
    case "closed":
      return "Nobody is let through any more.";
  }
  return "The button opens when your turn in the line comes.";
}
