package jwtauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Bounds on what a JWKS endpoint may send.
const (
	maxJWKSBytes = 1 << 20
	maxJWKSKeys  = 100
)

// jwk is one usable key of a JWKS document.
type jwk struct {
	kid string
	alg string // the key's "alg" if the document names one: then only that algorithm may use it
	key crypto.PublicKey
}

// keySet is one fetched JWKS document; it is never modified after it is built.
type keySet struct {
	keys    []jwk
	byKID   map[string]jwk
	fetched time.Time
}

// jwksCache holds the last good key set of a JWKS endpoint and refreshes it on demand, at most
// once per minRefresh, keeping the last good set when a refresh fails.
type jwksCache struct {
	url        string
	client     *http.Client
	minRefresh time.Duration
	maxAge     time.Duration
	logger     *zap.Logger

	set      atomic.Pointer[keySet] // read without locking on every verification
	failures atomic.Int64           // refreshes that failed (the last good set stayed)

	mu          sync.Mutex // serializes refreshes
	lastAttempt time.Time
	lastErr     error
}

// lookup returns the keys that may verify a token with alg and kid. A kid the set does not know
// triggers a refresh (the issuer may have rotated its keys); a set older than maxAge is refreshed
// by whoever notices first, without making the others wait.
func (c *jwksCache) lookup(ctx context.Context, alg string, kid string) []crypto.PublicKey {
	set := c.set.Load()
	if time.Since(set.fetched) > c.maxAge {
		if c.refresh(ctx, false) {
			set = c.set.Load()
		}
	}
	if kid != "" {
		if _, ok := set.byKID[kid]; !ok && c.refresh(ctx, true) {
			set = c.set.Load()
		}
	}
	var keys []crypto.PublicKey
	for _, k := range set.keys {
		// A key published without a kid may verify any token; one with a kid only its own tokens.
		if (kid == "" || k.kid == "" || k.kid == kid) && (k.alg == "" || k.alg == alg) && algorithms[alg].fits(k.key) {
			keys = append(keys, k.key)
		}
	}
	return keys
}

// refresh fetches the set unless one was attempted less than minRefresh ago, and reports whether
// a new set may be in place. With wait false it gives up at once when another refresh is running.
// The fetch outlives a canceled request: a client hanging up must not cost everyone a refresh.
func (c *jwksCache) refresh(ctx context.Context, wait bool) bool {
	if wait {
		c.mu.Lock()
	} else if !c.mu.TryLock() {
		return false
	}
	defer c.mu.Unlock()
	if time.Since(c.lastAttempt) < c.minRefresh {
		// Someone else just refreshed (perhaps while we waited): use their result.
		return true
	}
	c.lastAttempt = time.Now()
	set, err := c.fetch(context.WithoutCancel(ctx))
	c.lastErr = err
	if err != nil {
		c.failures.Add(1)
		old := c.set.Load()
		c.logger.Warn("refreshing the JWKS failed; keeping the last good key set",
			zap.String("url", c.url), zap.Duration("set_age", time.Since(old.fetched)),
			zap.Duration("next_try_after", c.minRefresh), zap.Error(err))
		return false
	}
	c.set.Store(set)
	return true
}

// fetch downloads and parses the key set.
func (c *jwksCache) fetch(ctx context.Context) (*keySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", c.url, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks %s: status %s", c.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", c.url, err)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("jwks %s: document larger than %d bytes", c.url, maxJWKSBytes)
	}
	set, err := parseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", c.url, err)
	}
	return set, nil
}

// rawJWK is a JSON Web Key as published (RFC 7517, 7518 §6, 8037).
type rawJWK struct {
	Kty string `json:"kty"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS keeps the document's signature keys that this package can use and skips the others
// (encryption keys, unknown key types), so that an issuer adding a new kind of key does not break
// verification; a document with no usable key at all is an error.
func parseJWKS(body []byte) (*keySet, error) {
	var doc struct {
		Keys []rawJWK `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	set := &keySet{byKID: make(map[string]jwk), fetched: time.Now()}
	var skipped []string
	for i, r := range doc.Keys {
		if len(set.keys) == maxJWKSKeys {
			break
		}
		if r.Use != "" && r.Use != "sig" {
			continue
		}
		if _, known := algorithms[r.Alg]; r.Alg != "" && !known {
			continue
		}
		key, err := r.publicKey()
		if err == nil {
			err = checkKey(key)
		}
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d (kid %q): %v", i, r.Kid, err))
			continue
		}
		k := jwk{kid: r.Kid, alg: r.Alg, key: key}
		set.keys = append(set.keys, k)
		if r.Kid != "" {
			set.byKID[r.Kid] = k
		}
	}
	if len(set.keys) == 0 {
		if len(skipped) > 0 {
			return nil, fmt.Errorf("no usable signature key: %s", strings.Join(skipped, "; "))
		}
		return nil, errors.New("no usable signature key")
	}
	return set, nil
}

func (r rawJWK) publicKey() (crypto.PublicKey, error) {
	switch r.Kty {
	case "RSA":
		n, err := b64(r.N)
		if err != nil {
			return nil, fmt.Errorf("n: %w", err)
		}
		e, err := b64(r.E)
		if err != nil {
			return nil, fmt.Errorf("e: %w", err)
		}
		if len(e) == 0 || len(e) > 4 {
			return nil, errors.New("e out of range")
		}
		exp := new(big.Int).SetBytes(e).Int64()
		if exp < 3 || exp%2 == 0 {
			return nil, errors.New("e out of range")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(exp)}, nil
	case "EC":
		var curve elliptic.Curve
		switch r.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, fmt.Errorf("unsupported curve %q", r.Crv)
		}
		size := (curve.Params().BitSize + 7) / 8
		x, errX := b64(r.X)
		y, errY := b64(r.Y)
		if errX != nil || errY != nil || len(x) != size || len(y) != size {
			return nil, fmt.Errorf("x and y must be %d bytes of base64url", size)
		}
		point := append(append([]byte{4}, x...), y...)
		return ecdsa.ParseUncompressedPublicKey(curve, point)
	case "OKP":
		if r.Crv != "Ed25519" {
			return nil, fmt.Errorf("unsupported curve %q", r.Crv)
		}
		x, err := b64(r.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("x must be %d bytes of base64url", ed25519.PublicKeySize)
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, fmt.Errorf("unsupported key type %q", r.Kty)
}

// b64 decodes unpadded base64url, tolerating the padding some issuers add.
func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}
