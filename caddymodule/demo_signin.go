package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
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
// written, answers only loopback clients unless AllowRemote is set, and logs a warning at every
// provisioning. Never enable it in production: anyone who can reach it can sign in as anyone.
type DemoSignin struct {
	// AllowRemote answers clients that are not on the loopback interface too (Caddy's client_ip,
	// which honours trusted_proxies).
	AllowRemote bool `json:"allow_remote,omitempty"`

	mint      jwtauth.MintConfig
	userClaim string // when not sub, the user goes in this claim too
	logger    *zap.Logger
	now       func() time.Time
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

// Provision takes the token template from the seckill app.
func (h *DemoSignin) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.now = time.Now
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
	if c := app.JWT.UserClaim; c != "" && c != "sub" {
		h.userClaim = c
	}
	h.logger.Warn("demo sign-in is ON: anyone who can reach it can sign in as anyone; never enable it in production",
		zap.Bool("allow_remote", h.AllowRemote))
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
	if !h.AllowRemote && !loopbackClient(r) {
		return answerError(errorsAuto, w, r, apiError(http.StatusForbidden, codeForbidden,
			"the demo sign-in answers only local clients"))
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return answerError(errorsAuto, w, r, apiError(http.StatusMethodNotAllowed, codeMethodNotAllowed,
			r.Method+" is not allowed here; use POST"))
	}
	user, e := readDemoUser(r)
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
	writeJSON(w, http.StatusOK, demoAnswer{Token: tok, User: user, ExpiresMS: m.Now.Add(demoTokenTTL).Unix() * 1000})
	return nil
}

// readDemoUser reads {"user": "..."} and checks the user id.
func readDemoUser(r *http.Request) (string, *Error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, demoMaxBody+1))
	if err != nil {
		return "", errBadRequest("the request body could not be read")
	}
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

// loopbackClient reports whether Caddy's client_ip of the request is a loopback address. Without
// one (outside a Caddy server) the client is not trusted.
func loopbackClient(r *http.Request) bool {
	s, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	addr, err := netip.ParseAddr(s)
	return err == nil && addr.Unmap().IsLoopback()
}

// Interface guards
var (
	_ caddy.Provisioner           = (*DemoSignin)(nil)
	_ caddyhttp.MiddlewareHandler = (*DemoSignin)(nil)
)
