package caddymodule

import (
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// parseJWT parses the jwt option of the global seckill block. Syntax:
//
//	jwt {
//		algorithms       <alg>...       # pinned (HS256, RS256, ES256, EdDSA, ...); required
//		hmac_secret      <secret>       # HS*: at least the hash size (32 bytes for HS256)
//		public_key_file  <pem file>...  # RS*, PS*, ES*, EdDSA
//		jwks_url         <url>          # fetched at start-up, then on an unknown kid
//		jwks_min_refresh <duration>     # least time between two JWKS fetches; default 30s
//		issuer           <iss>          # required in tokens when set
//		audience         <aud>          # required in tokens when set
//		leeway           <duration>     # clock skew allowed on exp, nbf and iat; default 0
//		user_claim       <claim>        # the claim holding the user id; default sub
//	}
//
// public_key_file may be given several times: the keys add up.
func parseJWT(d *caddyfile.Dispenser) (*JWTConfig, error) {
	if err := caddyfileargs.NoArg(d); err != nil {
		return nil, err
	}
	j := new(JWTConfig)
	var algsAt, secretAt, jwksAt caddyfile.Token // the lines the checks after the block point at
	err := caddyfileargs.ParseBlock(d, "seckill", "jwt ", func(opt string) (err error) {
		switch opt {
		case "algorithms":
			algsAt = d.Token()
			j.Algorithms, err = caddyfileargs.SomeArgs(d)
		case "hmac_secret":
			secretAt = d.Token()
			j.HMACSecret, err = caddyfileargs.SecretArg(d, "jwt hmac_secret")
		case "public_key_file":
			err = caddyfileargs.AppendArgs(d, &j.PublicKeyFiles)
		case "jwks_url":
			jwksAt = d.Token()
			j.JWKSURL, err = caddyfileargs.OneArg(d)
		case "jwks_min_refresh":
			j.JWKSMinRefresh, err = caddyfileargs.PositiveDurationArg(d, "jwt jwks_min_refresh")
		case "issuer":
			j.Issuer, err = caddyfileargs.OneArg(d)
		case "audience":
			j.Audience, err = caddyfileargs.OneArg(d)
		case "leeway":
			j.Leeway, err = caddyfileargs.DurationArg(d, "jwt leeway")
		case "user_claim":
			j.UserClaim, err = caddyfileargs.OneArg(d)
		default:
			err = d.Errf("seckill: unrecognized jwt option %q", opt)
		}
		return err
	}, "public_key_file")
	if err != nil {
		return nil, err
	}
	if len(j.Algorithms) == 0 {
		return nil, d.Err("seckill: jwt needs algorithms (e.g. algorithms HS256)")
	}
	if j.JWKSMinRefresh != 0 && j.JWKSURL == "" {
		return nil, d.Err("seckill: jwt jwks_min_refresh needs a jwks_url")
	}
	// Here rather than at start, where the error could not name its line.
	for _, alg := range j.Algorithms {
		if err := jwtauth.CheckAlgorithm(alg); err != nil {
			return nil, caddyfileargs.ErrAt(algsAt, "seckill: jwt algorithms: %v", err)
		}
	}
	if j.JWKSURL != "" && !strings.Contains(j.JWKSURL, "{") { // a placeholder is checked at start
		if err := jwtauth.CheckJWKSURL(j.JWKSURL); err != nil {
			return nil, caddyfileargs.ErrAt(jwksAt, "seckill: jwt: %v", err)
		}
	}
	// A secret with a placeholder ({env.VAR}) is known at start only: Provision checks it then.
	if !strings.Contains(j.HMACSecret, "{") {
		for _, alg := range j.Algorithms {
			if err := jwtauth.CheckHMACSecret(alg, len(j.HMACSecret)); err != nil {
				at := secretAt
				if j.HMACSecret == "" {
					at = algsAt
				}
				return nil, caddyfileargs.ErrAt(at, "seckill: jwt: %v", err)
			}
		}
	}
	return j, nil
}
