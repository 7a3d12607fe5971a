package jwtauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"fmt"
	"slices"
	"strings"
)

// family groups the algorithms that use one kind of key.
type family uint8

const (
	famHMAC family = iota + 1
	famRSA
	famECDSA
	famEdDSA
)

// algorithm describes one supported JWS algorithm.
type algorithm struct {
	family family
	curve  elliptic.Curve // ECDSA only: the one curve the algorithm is defined on
	minKey int            // HMAC: least secret length in bytes (RFC 7518 §3.2: the hash size)
}

// algorithms are the supported JWS algorithms; "none" is deliberately absent.
var algorithms = map[string]algorithm{
	"HS256": {family: famHMAC, minKey: 32},
	"HS384": {family: famHMAC, minKey: 48},
	"HS512": {family: famHMAC, minKey: 64},
	"RS256": {family: famRSA},
	"RS384": {family: famRSA},
	"RS512": {family: famRSA},
	"PS256": {family: famRSA},
	"PS384": {family: famRSA},
	"PS512": {family: famRSA},
	"ES256": {family: famECDSA, curve: elliptic.P256()},
	"ES384": {family: famECDSA, curve: elliptic.P384()},
	"ES512": {family: famECDSA, curve: elliptic.P521()},
	"EdDSA": {family: famEdDSA},
}

// CheckHMACSecret checks an HMAC secret of n bytes for alg: HS256, HS384 and HS512 need their
// hash size or more. A missing secret is told apart from a short one, and both errors say what
// to do. Other algorithms, and unknown names, need no secret: nil.
func CheckHMACSecret(alg string, n int) error {
	a, ok := algorithms[alg]
	switch {
	case !ok || a.family != famHMAC || n >= a.minKey:
		return nil
	case n == 0:
		return fmt.Errorf("%s verifies tokens with an HMAC secret, and hmac_secret is not set: set it to %d "+
			"random bytes or more (e.g. the output of `openssl rand -base64 %d`), from an environment variable",
			alg, a.minKey, a.minKey)
	}
	return fmt.Errorf("%s needs an hmac_secret of %d bytes or more, and the one set has %d: use a longer "+
		"random secret (e.g. the output of `openssl rand -base64 %d`)", alg, a.minKey, n, a.minKey)
}

// CheckAlgorithm reports whether name is a supported JWS algorithm (case matters: "HS256"), and
// otherwise names the supported ones.
func CheckAlgorithm(name string) error {
	if _, ok := algorithms[name]; !ok {
		return fmt.Errorf("unknown algorithm %q (use one of %s)", name, algorithmNames())
	}
	return nil
}

func algorithmNames() string {
	names := make([]string, 0, len(algorithms))
	for n := range algorithms {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// fits reports whether key can verify signatures of alg: an HS256 token is never checked against
// a public key, nor an ES256 token against a P-384 key.
func (a algorithm) fits(key crypto.PublicKey) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return a.family == famRSA
	case *ecdsa.PublicKey:
		return a.family == famECDSA && k.Curve == a.curve
	case ed25519.PublicKey:
		return a.family == famEdDSA
	}
	return false
}

// describeKey names a key's type for error messages.
func describeKey(key crypto.PublicKey) string {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return "unsupported"
}
