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
