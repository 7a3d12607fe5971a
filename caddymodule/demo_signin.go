package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

func init() {
	caddy.RegisterModule(DemoSignin{})
}

// DemoSignin mints a buyer token for whoever asks: POST {"user":"alice"} answers
// {"token", "user", "expires_ms"}, a token the app's jwt configuration accepts, valid for an hour.
// It lets the sale page be tried without a shop's login. It is off unless the directive is
// written, answers only loopback clients unless Allow names more, and logs a warning at every
// provisioning. Never enable it in production: anyone who can reach it can sign in as anyone.
type DemoSignin struct {
	// Allow names the clients (Caddy's client_ip, which honours trusted_proxies) that may sign in
	// besides loopback ones: "loopback" (no more; the default), "private" (the private networks of
	// RFC 1918 and RFC 4193, such as a Docker host's bridge), "any", or CIDR ranges.
	Allow []string `json:"allow,omitempty"`

	allowAny  bool
	allowed   []netip.Prefix
	private   bool
	mint      jwtauth.MintConfig
	userClaim string // when not sub, the user goes in this claim too
	logger    *zap.Logger
	now       func() time.Time
	// bodyTimeout is the app's body_timeout: a sign-in's body must arrive within it like the API's.
	bodyTimeout time.Duration
}

// Limits of the demo sign-in.
const (
	demoTokenTTL = time.Hour
	demoMaxBody  = 4 << 10
	demoMaxUser  = 64
)

// CaddyModule returns the Caddy module information.
func (DemoSignin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.seckill_demo_signin",
		New: func() caddy.Module { return new(DemoSignin) },
	}
}

// mintTemplate returns the template of the tokens a verifier configuration accepts if it can
// verify HMAC tokens, or nil: the first HS* algorithm, the secret, the issuer and the audience.
func mintTemplate(c jwtauth.Config) *jwtauth.MintConfig {
	if len(c.HMACSecret) == 0 {
		return nil
	}
	for _, alg := range c.Algorithms {
		if strings.HasPrefix(alg, "HS") {
			m := &jwtauth.MintConfig{Algorithm: alg, Secret: c.HMACSecret, Issuer: c.Issuer}
			if c.Audience != "" {
				m.Audience = []string{c.Audience}
			}
			return m
		}
	}
	return nil
}

// The names Allow takes besides CIDR ranges.
const (
	demoAllowLoopback = "loopback"
	demoAllowPrivate  = "private"
	demoAllowAny      = "any"
)

// parseAllow reads Allow.
func (h *DemoSignin) parseAllow() error {
	for _, a := range h.Allow {
		switch a {
		case demoAllowLoopback:
		case demoAllowPrivate:
			h.private = true
		case demoAllowAny:
			h.allowAny = true
		default:
			p, err := netip.ParsePrefix(a)
			if err != nil {
				return fmt.Errorf("seckill_demo_signin: allow %q: want loopback, private, any or a CIDR range", a)
			}
			h.allowed = append(h.allowed, p.Masked())
		}
	}
	return nil
}

// allows reports whether the client of r may sign in.
func (h *DemoSignin) allows(r *http.Request) bool {
	if h.allowAny {
		return true
	}
	addr, ok := clientAddr(r)
	if !ok {
		return false
	}
	if addr.IsLoopback() || (h.private && addr.IsPrivate()) {
		return true
	}
	for _, p := range h.allowed {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Provision takes the token template from the seckill app.
func (h *DemoSignin) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.now = time.Now
	if err := h.parseAllow(); err != nil {
		return err
	}
	v, err := ctx.App("seckill")
	if err != nil {
		return fmt.Errorf("seckill app: %w", err)
	}
	app := v.(*App)
	if app.mint == nil {
		return errors.New("seckill_demo_signin mints HMAC tokens: the seckill app's jwt block needs an " +
			"hmac_secret and an HS256, HS384 or HS512 algorithm")
	}
	h.mint = *app.mint
	h.bodyTimeout = app.bodyTimeout
	if c := app.JWT.UserClaim; c != "" && c != "sub" {
		h.userClaim = c
	}
	h.logger.Warn("demo sign-in is ON: anyone who can reach it can sign in as anyone; never enable it in production",
		zap.Strings("allow", append([]string{demoAllowLoopback}, h.Allow...)))
	return nil
}

// demoAnswer is the body of a successful sign-in.
type demoAnswer struct {
	Token     string `json:"token"`
	User      string `json:"user"`
	ExpiresMS int64  `json:"expires_ms"`
}

// ServeHTTP signs the caller in as the user it names.
func (h *DemoSignin) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if servedError(w, r) {
		return nil
	}
	// The client check comes first: a remote client learns nothing else about this endpoint.
	if !h.allows(r) {
		return answerError(errorsAuto, w, r, apiError(http.StatusForbidden, codeForbidden,
			"the demo sign-in does not answer this client (see its allow option)"))
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return answerError(errorsAuto, w, r, apiError(http.StatusMethodNotAllowed, codeMethodNotAllowed,
			r.Method+" is not allowed here; use POST"))
	}
	armBodyDeadline(w, r, h.bodyTimeout)
	user, e := readDemoUser(w, r, h.bodyTimeout)
	if e != nil {
		return answerError(errorsAuto, w, r, e)
	}
	m := h.mint
	m.Subject, m.Now, m.TTL = user, h.now(), demoTokenTTL
	if h.userClaim != "" {
		m.Extra = map[string]any{h.userClaim: user}
	}
	tok, err := jwtauth.Mint(m)
	if err != nil {
		h.logger.Error("minting a demo token", zap.Error(err))
		return answerError(errorsAuto, w, r, apiError(http.StatusInternalServerError, "error", "minting the token failed"))
	}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set(placeholderCode, codeOK)
		repl.Set(placeholderUser, user)
	}
	writeJSON(w, nil, http.StatusOK, demoAnswer{Token: tok, User: user, ExpiresMS: m.Now.Add(demoTokenTTL).Unix() * 1000})
	return nil
}

// readDemoUser reads {"user": "..."} and checks the user id. The body must arrive by the deadline
// ServeHTTP armed (408 otherwise), which is lifted once it is read.
func readDemoUser(w http.ResponseWriter, r *http.Request, timeout time.Duration) (string, *Error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, demoMaxBody+1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "", errBodyTimeout(timeout)
	}
	if err != nil {
		return "", errBadRequest("the request body could not be read")
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if len(body) > demoMaxBody {
		return "", errTooLarge
	}
	var in struct {
		User string `json:"user"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || dec.More() {
		return "", errBadRequest(`the body must be {"user": "<name>"}`)
	}
	if !validDemoUser(in.User) {
		return "", errBadRequest(fmt.Sprintf("user: want 1-%d of [A-Za-z0-9._-]", demoMaxUser))
	}
	return in.User, nil
}

func validDemoUser(u string) bool {
	if u == "" || len(u) > demoMaxUser {
		return false
	}
	for i := 0; i < len(u); i++ {
		if !demoUserByte(u[i]) {
			return false
		}
	}
	return true
}

func demoUserByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '.' || c == '_' || c == '-'
}

// clientAddr returns Caddy's client_ip of the request. Without one (outside a Caddy server) there
// is none, and the client is not trusted.
func clientAddr(r *http.Request) (netip.Addr, bool) {
	s, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	addr, err := netip.ParseAddr(s)
	return addr.Unmap(), err == nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*DemoSignin)(nil)
	_ caddyhttp.MiddlewareHandler = (*DemoSignin)(nil)
)
