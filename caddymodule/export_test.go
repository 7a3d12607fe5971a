package caddymodule

import "context"

// CaptchaAnswer returns the solution of captcha id, as a buyer would read it off the image: the
// tests cannot do OCR.
func (a *App) CaptchaAnswer(ctx context.Context, id string) (string, error) {
	c, err := a.backend.captchas.Peek(ctx, id)
	if err != nil {
		return "", err
	}
	b := make([]byte, len(c.Digits))
	for i, d := range c.Digits {
		b[i] = '0' + d
	}
	return string(b), nil
}

// OrdersBackend returns the running embedded order backend (nil before it starts), so that tests
// can tell whether a reload kept it.
func (a *App) OrdersBackend() any {
	if st := a.orders.state(); st != nil {
		return st.backend
	}
	return nil
}
