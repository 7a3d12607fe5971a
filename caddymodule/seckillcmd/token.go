package seckillcmd

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// cmdToken prints an HMAC token for a user: signed with --secret (or $SECKILL_JWT_SECRET), or with
// the jwt block of the configuration given by --config, so that this configuration accepts it.
func cmdToken(fl caddycmd.Flags) (int, error) {
	user := fl.String("user")
	if user == "" {
		return caddy.ExitCodeFailedStartup, errors.New("--user is required")
	}
	ttl := fl.Duration("ttl")
	if ttl <= 0 {
		return caddy.ExitCodeFailedStartup, errors.New("--ttl must be positive")
	}
	m, userClaim, err := tokenTemplate(fl)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	m.Subject, m.TTL = user, ttl
	if userClaim != "" && userClaim != "sub" {
		m.Extra = map[string]any{userClaim: user}
	}
	tok, err := jwtauth.Mint(m)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	fmt.Println(tok)
	return caddy.ExitCodeSuccess, nil
}

// tokenTemplate returns the token to mint, but for its subject and lifetime, and the claim that
// names the user (empty for sub). With --config it comes from the configuration's jwt block, with
// the flags given explicitly overriding it; otherwise from the flags alone.
func tokenTemplate(fl caddycmd.Flags) (jwtauth.MintConfig, string, error) {
	file := fl.String("config")
	if file == "" {
		if fl.Changed("adapter") {
			return jwtauth.MintConfig{}, "", errors.New("--adapter needs --config")
		}
		secret := fl.String("secret")
		if secret == "" {
			secret = os.Getenv("SECKILL_JWT_SECRET")
		}
		if secret == "" {
			return jwtauth.MintConfig{}, "", errors.New("no secret: use --secret, set SECKILL_JWT_SECRET, or give --config")
		}
		m := jwtauth.MintConfig{Algorithm: fl.String("alg"), Secret: []byte(secret), Issuer: fl.String("issuer")}
		if aud := fl.String("audience"); aud != "" {
			m.Audience = []string{aud}
		}
		return m, "", nil
	}

	if fl.Changed("secret") {
		return jwtauth.MintConfig{}, "", errors.New("--secret and --config are exclusive: with --config the " +
			"secret is the configuration's jwt hmac_secret")
	}
	raw, _, _, err := caddycmd.LoadConfig(file, fl.String("adapter"))
	if err != nil {
		return jwtauth.MintConfig{}, "", err
	}
	m, userClaim, err := configMintTemplate(raw)
	if err != nil {
		return jwtauth.MintConfig{}, "", fmt.Errorf("%s: %w", file, err)
	}
	if fl.Changed("alg") {
		alg := fl.String("alg")
		if !slices.Contains(m.accepted, alg) {
			return jwtauth.MintConfig{}, "", fmt.Errorf("--alg %s: the configuration accepts %v", alg, m.accepted)
		}
		m.Algorithm = alg
	}
	if fl.Changed("issuer") {
		m.Issuer = fl.String("issuer")
	}
	if fl.Changed("audience") {
		m.Audience = nil
		if aud := fl.String("audience"); aud != "" {
			m.Audience = []string{aud}
		}
	}
	return m.MintConfig, userClaim, nil
}

// configTemplate is the token template of a configuration and the algorithms it accepts.
type configTemplate struct {
	jwtauth.MintConfig
	accepted []string
}

// configMintTemplate returns the token template of a JSON configuration's seckill jwt block
// (placeholders such as {env.SECKILL_JWT_SECRET} replaced from the environment) and its user claim.
func configMintTemplate(cfg []byte) (configTemplate, string, error) {
	app, err := seckillAppOf(cfg)
	if err != nil {
		return configTemplate{}, "", err
	}
	if app.JWT == nil {
		return configTemplate{}, "", errors.New("the seckill app has no jwt block")
	}
	m, err := app.JWT.MintTemplate(caddy.NewReplacer())
	if err != nil {
		return configTemplate{}, "", fmt.Errorf("jwt: %w", err)
	}
	if m == nil {
		return configTemplate{}, "", fmt.Errorf("jwt: minting needs an hmac_secret and an HS256, HS384 or HS512 "+
			"algorithm; the configuration has algorithms %v without both (tokens of public-key algorithms come "+
			"from whoever holds the private key)", app.JWT.Algorithms)
	}
	var accepted []string
	for _, alg := range app.JWT.Algorithms {
		if slices.Contains([]string{"HS256", "HS384", "HS512"}, alg) {
			accepted = append(accepted, alg)
		}
	}
	return configTemplate{MintConfig: *m, accepted: accepted}, app.JWT.UserClaim, nil
}
