package jwtauth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MintConfig describes a token for Mint.
type MintConfig struct {
	Algorithm string   // HS256 (default), HS384 or HS512
	Secret    []byte   // at least as long as the algorithm's hash
	Subject   string   // required: the user
	Issuer    string   // optional
	Audience  []string // optional
	TTL       time.Duration
	Now       time.Time      // the issue time; default time.Now()
	Extra     map[string]any // more claims; they override the ones above
}

// Mint signs an HMAC token, for tests and the command line: iat is Now and exp is Now+TTL (a
// negative TTL gives an already expired token; zero means 15 minutes).
func Mint(cfg MintConfig) (string, error) {
	if cfg.Algorithm == "" {
		cfg.Algorithm = "HS256"
	}
	a, ok := algorithms[cfg.Algorithm]
	if !ok || a.family != famHMAC {
		return "", fmt.Errorf("mint: algorithm %q is not HS256, HS384 or HS512", cfg.Algorithm)
	}
	if len(cfg.Secret) < a.minKey {
		return "", fmt.Errorf("mint: %s needs a secret of at least %d bytes, got %d", cfg.Algorithm, a.minKey, len(cfg.Secret))
	}
	if cfg.Subject == "" {
		return "", errors.New("mint: subject is required")
	}
	if cfg.Now.IsZero() {
		cfg.Now = time.Now()
	}
	if cfg.TTL == 0 {
		cfg.TTL = 15 * time.Minute
	}
	claims := jwt.MapClaims{
		"sub": cfg.Subject,
		"iat": cfg.Now.Unix(),
		"exp": cfg.Now.Add(cfg.TTL).Unix(),
	}
	if cfg.Issuer != "" {
		claims["iss"] = cfg.Issuer
	}
	if len(cfg.Audience) > 0 {
		claims["aud"] = cfg.Audience
	}
	for k, val := range cfg.Extra {
		claims[k] = val
	}
	s, err := jwt.NewWithClaims(jwt.GetSigningMethod(cfg.Algorithm), claims).SignedString(cfg.Secret)
	if err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	return s, nil
}
