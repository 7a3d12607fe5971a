package orderbackend

import (
	"context"
	"fmt"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// Authenticator verifies a buyer's bearer token and names the user it was issued to. An error
// wrapping jwtauth.ErrUnauthorized means the token is not acceptable (401); any other error means
// the check could not be made now (503), for example a JWKS endpoint that is down.
type Authenticator interface {
	Verify(ctx context.Context, token string) (user string, err error)
}

// JWT adapts a jwtauth.Verifier, the edge's own token check, so that the order API accepts
// exactly the tokens the edge accepts.
func JWT(v *jwtauth.Verifier) Authenticator { return jwtAuth{v} }

type jwtAuth struct{ v *jwtauth.Verifier }

func (a jwtAuth) Verify(ctx context.Context, token string) (string, error) {
	c, err := a.v.Verify(ctx, token)
	if err != nil {
		return "", err
	}
	if c.User == "" {
		return "", fmt.Errorf("%w: the token names no user", jwtauth.ErrUnauthorized)
	}
	return c.User, nil
}
