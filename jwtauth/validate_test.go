package jwtauth

import (
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestClaimsValidMatchesLibrary checks Verifier.claimsValid, the allocation-free checks of a good
// token, against the library's Validator with the same settings at the same instant: it must
// never accept claims the library refuses, and for these claims it decides as the library does.
func TestClaimsValidMatchesLibrary(t *testing.T) {
	now := time.Unix(1_800_000_000, 500_000_000)
	sec := now.Unix()
	payloads := []string{
		`{}`, `{"sub":"u"}`,
		fmt.Sprintf(`{"exp":%d}`, sec+60), fmt.Sprintf(`{"exp":%d}`, sec-60),
		fmt.Sprintf(`{"exp":%d}`, sec), fmt.Sprintf(`{"exp":%d}`, sec+1), fmt.Sprintf(`{"exp":%d.9}`, sec),
		fmt.Sprintf(`{"exp":%d.2}`, sec+1), fmt.Sprintf(`{"exp":%d}`, sec-29), fmt.Sprintf(`{"exp":%d}`, sec-30),
		`{"exp":0}`, `{"exp":"1"}`, `{"exp":null}`, `{"exp":-5}`, `{"exp":1e300}`,
		fmt.Sprintf(`{"exp":%d,"nbf":%d}`, sec+60, sec+60), fmt.Sprintf(`{"exp":%d,"nbf":%d}`, sec+60, sec),
		fmt.Sprintf(`{"exp":%d,"nbf":%d}`, sec+60, sec+1), fmt.Sprintf(`{"exp":%d,"nbf":%d}`, sec+60, sec+30),
		fmt.Sprintf(`{"exp":%d,"nbf":%d.7}`, sec+60, sec), fmt.Sprintf(`{"exp":%d,"nbf":0}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"nbf":"x"}`, sec+60), fmt.Sprintf(`{"exp":%d,"nbf":true}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"iat":%d}`, sec+60, sec-60), fmt.Sprintf(`{"exp":%d,"iat":%d}`, sec+60, sec+60),
		fmt.Sprintf(`{"exp":%d,"iat":%d}`, sec+60, sec+30), fmt.Sprintf(`{"exp":%d,"iat":%d}`, sec+60, sec+31),
		fmt.Sprintf(`{"exp":%d,"iat":%d}`, sec+60, sec), fmt.Sprintf(`{"exp":%d,"iat":%d}`, sec+60, sec+1),
		fmt.Sprintf(`{"exp":%d,"iat":null}`, sec+60), fmt.Sprintf(`{"exp":%d,"iat":[]}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"iss":"me"}`, sec+60), fmt.Sprintf(`{"exp":%d,"iss":"you"}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"iss":""}`, sec+60), fmt.Sprintf(`{"exp":%d,"iss":5}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"aud":"shop"}`, sec+60), fmt.Sprintf(`{"exp":%d,"aud":"other"}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"aud":["other","shop"]}`, sec+60), fmt.Sprintf(`{"exp":%d,"aud":["other"]}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"aud":[]}`, sec+60), fmt.Sprintf(`{"exp":%d,"aud":[""]}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"aud":""}`, sec+60), fmt.Sprintf(`{"exp":%d,"aud":["shop",1]}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"aud":7}`, sec+60),
		fmt.Sprintf(`{"exp":%d,"iss":"me","aud":"shop","nbf":%d,"iat":%d}`, sec+60, sec-1, sec-1),
	}
	configs := []Config{
		{Algorithms: []string{"HS256"}, HMACSecret: secret},
		{Algorithms: []string{"HS256"}, HMACSecret: secret, Leeway: 30 * time.Second},
		{Algorithms: []string{"HS256"}, HMACSecret: secret, Issuer: "me"},
		{Algorithms: []string{"HS256"}, HMACSecret: secret, Audience: "shop"},
		{Algorithms: []string{"HS256"}, HMACSecret: secret, Issuer: "me", Audience: "shop", Leeway: time.Second},
	}
	accepted := 0
	for i, cfg := range configs {
		v := mustNew(t, cfg)
		// The library's Validator as New builds it, its clock stopped at now.
		opts := []jwt.ParserOption{jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(cfg.Leeway),
			jwt.WithTimeFunc(func() time.Time { return now })}
		if cfg.Issuer != "" {
			opts = append(opts, jwt.WithIssuer(cfg.Issuer))
		}
		if cfg.Audience != "" {
			opts = append(opts, jwt.WithAudience(cfg.Audience))
		}
		lib := jwt.NewValidator(opts...)
		for _, p := range payloads {
			tc := tokenClaims{userClaim: "sub"}
			if err := decodeClaims([]byte(p), &tc); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			got, want := v.claimsValid(&tc, now), lib.Validate(&tc)
			if got != (want == nil) {
				t.Errorf("config %d, claims %s: claimsValid %v, library %v", i, p, got, want)
			}
			if got {
				accepted++
			}
		}
	}
	if accepted < 10 {
		t.Errorf("only %d accepted: the cases test too little", accepted)
	}
}
