// The waiting room's proof of work (docs/api.md, "Proof of work"): the page finds an answer such
// that SHA-256(challenge ":" answer) begins with `bits` zero bits, with Web Crypto (a secure
// context: HTTPS, or localhost while developing).

// Hashes asked of Web Crypto at once: its digest is asynchronous, and one call per await would
// spend most of the time waiting for the event loop.
const POW_BATCH = 256;

/** leadingZeroBits counts the zero bits at the start of a digest. */
export function leadingZeroBits(digest) {
  const b = new Uint8Array(digest);
  let z = 0;
  for (const x of b) {
    if (x !== 0) {
      return z + Math.clz32(x) - 24;
    }
    z += 8;
  }
  return z;
}

/**
 * solveChallenge returns the smallest decimal answer to challenge with at least bits zero bits,
 * as a string; it gives up (rejects with an AbortError) when signal aborts.
 */
export async function solveChallenge(challenge, bits, signal) {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) {
    throw new Error("this page needs HTTPS to join the line (Web Crypto)");
  }
  const enc = new TextEncoder();
  const prefix = challenge + ":";
  for (let base = 0; ; base += POW_BATCH) {
    signal?.throwIfAborted();
    const tries = [];
    for (let i = 0; i < POW_BATCH; i++) {
      tries.push(subtle.digest("SHA-256", enc.encode(prefix + (base + i))));
    }
    const digests = await Promise.all(tries);
    for (let i = 0; i < POW_BATCH; i++) {
      if (leadingZeroBits(digests[i]) >= bits) {
        return String(base + i);
      }
    }
  }
}
