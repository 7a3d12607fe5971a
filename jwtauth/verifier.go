package jwtauth

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
)

// Config configures a Verifier.
type Config struct {
	// Algorithms are the accepted JWS algorithms (HS256, HS384, HS512, RS256, RS384, RS512, PS256,
	// PS384, PS512, ES256, ES384, ES512, EdDSA). Required: the token's own "alg" header is never
	// trusted to choose one.
	Algorithms []string

	// HMACSecret verifies HS* tokens; it must be at least as long as the hash (32 bytes for HS256).
	HMACSecret []byte

	// PublicKeyPEM are public keys for RS*, PS*, ES* and EdDSA: PEM "PUBLIC KEY" (PKIX),
	// "RSA PUBLIC KEY" (PKCS#1) or "CERTIFICATE" blocks, several per entry allowed.
	PublicKeyPEM [][]byte

	// JWKSURL is a JSON Web Key Set fetched by New (which fails if it cannot be fetched), then
	// again when a token names a kid the set lacks, or when the set is older than JWKSMaxAge; never
	// more often than once per JWKSMinRefresh, so that tokens with made-up kids cannot make the
	// verifier hammer the endpoint. A failed refresh is logged and keeps the last good set.
	JWKSURL        string
	JWKSMinRefresh time.Duration // default DefaultJWKSMinRefresh
	JWKSMaxAge     time.Duration // default 15m

	// Issuer and Audience, when set, must appear in the token's iss and aud claims.
	Issuer, Audience string

	// Leeway tolerates this much clock skew on exp, nbf and iat: a token whose iat is later than
	// now + Leeway is refused, as is one whose nbf is.
	Leeway time.Duration

	// UserClaim names the claim holding the user id; default "sub". Its value must be a non-empty
	// string of at most MaxUserLen bytes.
	UserClaim string

	// HTTPClient fetches the JWKS; default a client with a 10s timeout.
	HTTPClient *http.Client

	// Logger receives a warning for every failed JWKS refresh; default none.
	Logger *zap.Logger
}

// DefaultJWKSMinRefresh is the least time between two fetches of a JWKS when Config.JWKSMinRefresh
// is not set.
const DefaultJWKSMinRefresh = 30 * time.Second

// Verifier verifies tokens. It is safe for concurrent use.
type Verifier struct {
	algs      []string       // the configured algorithms
	validator *jwt.Validator // exp (required), nbf, iat, iss, aud, leeway
	leeway    time.Duration  // the validator's settings, for the checks of a good token (claimsValid)
	issuer    string
	audience  string
	scratch   *sync.Pool // of *scratch: buffers and HMAC states reused across verifications
	headers   headerMemo // the headers of verified tokens, read once
	userClaim string
	secret    []byte
	static    []crypto.PublicKey
	jwks      *jwksCache // nil without a JWKSURL
}

// New checks cfg and returns a Verifier. Every mistake that would make some configured algorithm
// unusable (a missing or short secret, a missing key, a key no configured algorithm can use) is an
// error here rather than a stream of 401s later.
func New(cfg Config) (*Verifier, error) {
	if len(cfg.Algorithms) == 0 {
		return nil, errors.New("jwt: algorithms is required (e.g. HS256): the token's own alg header is never trusted")
	}
	v := &Verifier{userClaim: cfg.UserClaim, secret: cfg.HMACSecret}
	if v.userClaim == "" {
		v.userClaim = "sub"
	}
	hasHMAC := false
	for _, name := range cfg.Algorithms {
		if err := CheckAlgorithm(name); err != nil {
			return nil, fmt.Errorf("jwt: %w", err)
		}
		a := algorithms[name]
		if a.family == famHMAC {
			hasHMAC = true
			if err := CheckHMACSecret(name, len(cfg.HMACSecret)); err != nil {
				return nil, fmt.Errorf("jwt: %w", err)
			}
		}
	}
	if len(cfg.HMACSecret) > 0 && !hasHMAC {
		return nil, errors.New("jwt: an hmac secret is set but no HS256, HS384 or HS512 algorithm is configured")
	}
	for i, p := range cfg.PublicKeyPEM {
		keys, err := parsePublicKeys(p)
		if err != nil {
			return nil, fmt.Errorf("jwt: public key %d: %w", i+1, err)
		}
		for _, k := range keys {
			if !slices.ContainsFunc(cfg.Algorithms, func(n string) bool { return algorithms[n].fits(k) }) {
				return nil, fmt.Errorf("jwt: public key %d is %s, which none of the algorithms %v uses", i+1, describeKey(k), cfg.Algorithms)
			}
		}
		v.static = append(v.static, keys...)
	}
	if cfg.JWKSURL == "" {
		for _, name := range cfg.Algorithms {
			a := algorithms[name]
			if a.family != famHMAC && !slices.ContainsFunc(v.static, a.fits) {
				return nil, fmt.Errorf("jwt: %s needs a matching public key or a jwks url", name)
			}
		}
	} else if err := v.startJWKS(cfg); err != nil {
		return nil, err
	}
	if cfg.Leeway < 0 {
		return nil, fmt.Errorf("jwt: leeway %v is negative", cfg.Leeway)
	}
	opts := []jwt.ParserOption{jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(cfg.Leeway)}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.algs = slices.Clone(cfg.Algorithms)
	v.validator = jwt.NewValidator(opts...)
	v.leeway, v.issuer, v.audience = cfg.Leeway, cfg.Issuer, cfg.Audience
	v.scratch = newScratchPool()
	return v, nil
}

// CheckJWKSURL reports whether s can be fetched as a JWKS: an http or https URL with a host.
func CheckJWKSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("jwks url %q is not an http(s) URL", s)
	}
	return nil
}

func (v *Verifier) startJWKS(cfg Config) error {
	if err := CheckJWKSURL(cfg.JWKSURL); err != nil {
		return fmt.Errorf("jwt: %w", err)
	}
	c := &jwksCache{
		url:        cfg.JWKSURL,
		client:     cfg.HTTPClient,
		minRefresh: cfg.JWKSMinRefresh,
		maxAge:     cfg.JWKSMaxAge,
		logger:     cfg.Logger,
	}
	if c.logger == nil {
		c.logger = zap.NewNop()
	}
	if c.client == nil {
		c.client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.JWKSMinRefresh < 0 || cfg.JWKSMaxAge < 0 {
		return fmt.Errorf("jwt: jwks min refresh %v and max age %v must not be negative", cfg.JWKSMinRefresh, cfg.JWKSMaxAge)
	}
	if c.minRefresh == 0 {
		c.minRefresh = DefaultJWKSMinRefresh
	}
	if c.maxAge == 0 {
		c.maxAge = 15 * time.Minute
	}
	c.lastAttempt = time.Now()
	set, err := c.fetch(context.Background())
	if err != nil {
		return fmt.Errorf("jwt: %w", err)
	}
	c.set.Store(set)
	v.jwks = c
	return nil
}

// JWKSRefreshFailures counts the JWKS refreshes that failed since the verifier was made (each
// kept the last good key set); 0 without a JWKS URL. Monitoring exports it.
func (v *Verifier) JWKSRefreshFailures() int64 {
	if v == nil || v.jwks == nil {
		return 0
	}
	return v.jwks.failures.Load()
}

// Verify checks token and returns its claims. Every failure wraps ErrUnauthorized.
func (v *Verifier) Verify(ctx context.Context, token string) (Claims, error) {
	switch {
	case token == "":
		return Claims{}, unauthorized("no token")
	case len(token) > MaxTokenLen:
		return Claims{}, unauthorized("token longer than %d bytes", MaxTokenLen)
	case !compactJWS(token):
		// Go's base64 decoders skip CR and LF, so without this a signed token with line breaks
		// inserted would verify too: one token would have many spellings.
		return Claims{}, unauthorized("token has a byte outside base64url and '.'")
	}
	tc := tokenClaims{userClaim: v.userClaim}
	if err := v.parse(ctx, token, &tc); err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	user := tc.user
	switch {
	case !tc.hasUser:
		return Claims{}, unauthorized("user claim %q is missing or not a string", v.userClaim)
	case user == "":
		return Claims{}, unauthorized("user claim %q is empty", v.userClaim)
	case len(user) > MaxUserLen:
		return Claims{}, unauthorized("user claim %q is longer than %d bytes", v.userClaim, MaxUserLen)
	}
	if tc.expAt.IsZero() {
		// Unreachable after parse's own checks; kept so that a zero ExpiresAt never escapes.
		return Claims{}, unauthorized("no usable exp claim")
	}
	return Claims{User: user, ExpiresAt: tc.expAt, payload: tc.payload}, nil
}

// keys returns the public keys that may verify a token of the public-key algorithm alg whose
// header names kid. parse has already refused any algorithm not in the configuration, and the
// keys offered depend only on that algorithm's family: an RS256 token gets RSA keys only, and an
// HS256 token never gets here (it is checked against the HMAC secret and nothing else).
func (v *Verifier) keys(ctx context.Context, alg, kid string) ([]crypto.PublicKey, error) {
	a, ok := algorithms[alg]
	if !ok || a.family == famHMAC {
		return nil, fmt.Errorf("algorithm %q not supported", alg)
	}
	if len(kid) > maxKIDLen {
		return nil, fmt.Errorf("kid longer than %d bytes", maxKIDLen)
	}
	var keys []crypto.PublicKey
	for _, k := range v.static {
		if a.fits(k) {
			keys = append(keys, k)
		}
	}
	if v.jwks != nil {
		keys = append(keys, v.jwks.lookup(ctx, alg, kid)...)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no %s key with kid %q", alg, kid)
	}
	return keys, nil
}

// compactJWS reports whether token uses only the bytes of the JWS compact serialisation:
// base64url without padding, and the dots between the segments.
func compactJWS(token string) bool {
	for i := 0; i < len(token); i++ {
		if !jwsByte[token[i]] {
			return false
		}
	}
	return true
}

// jwsByte marks the bytes of the JWS compact serialisation: one table lookup a byte instead of a
// chain of comparisons, on a few hundred bytes of every request.
var jwsByte = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")

// byteSet returns a table that marks the bytes of chars.
func byteSet(chars string) (t [256]bool) {
	for i := 0; i < len(chars); i++ {
		t[chars[i]] = true
	}
	return t
}
