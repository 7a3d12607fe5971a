// Where the page finds its sale: the activity id and the API prefixes, from the address first
// (?activity=phone-1001&api=/seckill&orders=/orders), then from the data- attributes of <main>.

import { samePath } from "./api.js";

const ACTIVITY_ID = /^[A-Za-z0-9._-]{1,64}$/; // as admission.ValidActivityID

/**
 * readConfig returns {activity, base, orders, signin}, or throws when a value is unusable. Every
 * URL must be a path on this site: the page sends the buyer's token there.
 */
export function readConfig(root, search) {
  const q = new URLSearchParams(search);
  const pick = (name, fallback) => q.get(name) || root.dataset[name] || fallback;
  const cfg = {
    activity: pick("activity", "demo"),
    base: pick("api", "/seckill"),
    orders: pick("orders", "/orders"),
  };
  // The sign-in URL is not taken from the address: a link must not pick where a name is posted.
  // It is outside the API prefix, where it could be taken for an activity named "demo".
  cfg.signin = root.dataset.signin || "/demo/token";
  if (!ACTIVITY_ID.test(cfg.activity)) {
    throw new Error(`"${cfg.activity}" is not a sale id`);
  }
  for (const k of ["base", "orders", "signin"]) {
    if (!samePath(cfg[k])) {
      throw new Error(`${k} must be a path on this site, like /seckill`);
    }
  }
  return cfg;
}
