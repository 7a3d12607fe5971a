// The buyer's bearer token. A shop's own sign-in hands the page a JWT; for local use the page takes
// one from the address (#token=...) or from the gateway's demo sign-in, and keeps it in
// localStorage. The page never checks the signature (the gateway does); it only reads the claims to
// greet the buyer and to drop a token that has expired.

const STORAGE_KEY = "seckill.token";

/** TokenStore keeps the token in localStorage (or only in memory where storage is refused). */
export class TokenStore {
  constructor(storage = safeStorage()) {
    this.storage = storage;
    this.memory = null;
  }

  get() {
    return this.memory ?? this.storage?.getItem(STORAGE_KEY) ?? null;
  }

  set(token) {
    this.memory = token;
    try {
      this.storage?.setItem(STORAGE_KEY, token);
    } catch {
      // A full or refused storage leaves the token in memory for this page's life.
    }
  }

  clear() {
    this.memory = null;
    try {
      this.storage?.removeItem(STORAGE_KEY);
    } catch {
      // Nothing to clear.
    }
  }
}

function safeStorage() {
  try {
    return window.localStorage;
  } catch {
    return null; // storage disabled by the browser's privacy settings
  }
}

/**
 * takeFragmentToken returns the token in the address's #token=..., and removes it from the address
 * and the history so that it is not bookmarked, shared or left on screen.
 */
export function takeFragmentToken(loc = window.location, hist = window.history) {
  const params = new URLSearchParams(loc.hash.replace(/^#/, ""));
  const token = params.get("token");
  if (!token) {
    return null;
  }
  params.delete("token");
  const rest = params.toString();
  hist.replaceState(hist.state, "", loc.pathname + loc.search + (rest ? `#${rest}` : ""));
  return token.trim();
}

/**
 * claims decodes a JWT's payload without verifying it, or returns null when it is not a JWT. Only
 * for display and expiry: every decision that matters is the gateway's.
 */
export function claims(token) {
  const parts = typeof token === "string" ? token.split(".") : [];
  if (parts.length !== 3) {
    return null;
  }
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const bin = atob(b64 + "===".slice((b64.length + 3) % 4));
    const c = JSON.parse(new TextDecoder().decode(Uint8Array.from(bin, (ch) => ch.charCodeAt(0))));
    return c && typeof c === "object" ? c : null;
  } catch {
    return null;
  }
}

/**
 * expired reports whether a token's exp has passed at serverNow (Unix ms of the sale's clock, not
 * the device's, which may be wrong by hours).
 */
export function expired(c, serverNow) {
  return typeof c?.exp === "number" && c.exp * 1000 <= serverNow;
}
