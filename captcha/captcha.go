// Package captcha issues single-use image captchas bound to a user and an activity, on top of
// github.com/dchest/captcha's renderer but not its process-global store: captchas live in a Store,
// in memory for one node or in Redis so that any node can verify what another issued.
//
// The PNG is rendered once, when the captcha is issued, and kept with it in the store. dchest's
// renderer is deterministic for one id and solution only within one process (it seeds from a
// random key made at start-up), so rendering on each fetch would give a different picture on each
// node, and every extra picture of the same digits helps an OCR attack. Storing the bytes makes
// every fetch, on every node, return the same image; fetches are also capped.
//
// The audio alternative (WAV, spoken digits over noise) is rendered on each fetch instead: a WAV is
// tens of kilobytes, too much to keep with every captcha in Redis, and its fetches count against
// the same cap as the image's, so an attacker gets no more renderings of one captcha either way.
package captcha

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dchest/captcha"
)

// Options configure an Issuer. Zero fields take their defaults.
type Options struct {
	Length        int           // digits in a captcha; default 5, from 4 to 10
	Width         int           // image width in pixels; default 400, from 60 to 1000
	Height        int           // image height in pixels; default 160, from 20 to 400
	AudioLanguage string        // language of the spoken digits: en (default), ja, pt, ru or zh
	TTL           time.Duration // how long a captcha may be used; default 2m, from 1s to 1h
	MaxFetches    int64         // image and audio fetches allowed per captcha; default 3, from 1 to 100
}

// Defaults of Options. dchest/captcha's distortion (the wave and the strike-through line) is a
// fixed number of pixels, so a taller image distorts its digits less, and fewer digits are fewer
// to misread; five digits still leave 1 in 100,000 for a guess at a single-use captcha.
const (
	DefaultLength        = 5
	DefaultWidth         = 400
	DefaultHeight        = 160
	DefaultAudioLanguage = "en"
)

// AudioLanguages are the languages dchest/captcha speaks digits in.
var AudioLanguages = []string{"en", "ja", "pt", "ru", "zh"}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	if o.Length == 0 {
		o.Length = DefaultLength
	}
	if o.Width == 0 {
		o.Width = DefaultWidth
	}
	if o.Height == 0 {
		o.Height = DefaultHeight
	}
	if o.AudioLanguage == "" {
		o.AudioLanguage = DefaultAudioLanguage
	}
	if o.TTL == 0 {
		o.TTL = 2 * time.Minute
	}
	if o.MaxFetches == 0 {
		o.MaxFetches = 3
	}
	return o
}

// Validate reports whether o, with its defaults filled in, is within the documented ranges.
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.Length < 4 || o.Length > 10:
		return fmt.Errorf("captcha length must be between 4 and 10 digits, got %d", o.Length)
	case o.Width < 60 || o.Width > 1000:
		return fmt.Errorf("captcha width must be between 60 and 1000 pixels, got %d", o.Width)
	case o.Height < 20 || o.Height > 400:
		return fmt.Errorf("captcha height must be between 20 and 400 pixels, got %d", o.Height)
	case !slices.Contains(AudioLanguages, o.AudioLanguage):
		return fmt.Errorf("captcha audio language must be one of %s, got %q",
			strings.Join(AudioLanguages, ", "), o.AudioLanguage)
	case o.TTL < time.Second || o.TTL > time.Hour:
		return fmt.Errorf("captcha ttl must be between 1s and 1h, got %v", o.TTL)
	case o.MaxFetches < 1 || o.MaxFetches > 100:
		return fmt.Errorf("captcha max fetches must be between 1 and 100, got %d", o.MaxFetches)
	}
	return nil
}

// Issuer issues, serves and verifies captchas. It is safe for concurrent use.
type Issuer struct {
	store Store
	opts  Options
}

// NewIssuer returns an Issuer keeping its captchas in store. opts must pass Validate: NewIssuer
// panics otherwise, as that is a configuration error the caller should have reported.
func NewIssuer(store Store, opts Options) *Issuer {
	if err := opts.Validate(); err != nil {
		panic("captcha: NewIssuer: " + err.Error())
	}
	return &Issuer{store: store, opts: opts.withDefaults()}
}

// Options returns the issuer's options with their defaults filled in.
func (i *Issuer) Options() Options { return i.opts }

// New issues a captcha for user on activity and returns its id, an unguessable 26-character token
// of ASCII letters and digits, safe in URLs. Only that user may use it, and only on that activity.
func (i *Issuer) New(ctx context.Context, user, activity string) (string, error) {
	switch {
	case user == "":
		return "", errors.New("new captcha: empty user")
	case activity == "":
		return "", errors.New("new captcha: empty activity")
	case !utf8.ValidString(user) || !utf8.ValidString(activity):
		// The Redis store keeps the owner in JSON, which would not give invalid UTF-8 back.
		return "", errors.New("new captcha: user or activity is not valid UTF-8")
	}
	id := rand.Text()
	digits := captcha.RandomDigits(i.opts.Length)
	var png bytes.Buffer
	if _, err := captcha.NewImage(id, digits, i.opts.Width, i.opts.Height).WriteTo(&png); err != nil {
		return "", fmt.Errorf("new captcha: render: %w", err)
	}
	c := Challenge{User: user, Activity: activity, Digits: digits, PNG: png.Bytes()}
	if err := i.store.Put(ctx, id, c, i.opts.TTL); err != nil {
		return "", fmt.Errorf("new captcha: %w", err)
	}
	return id, nil
}

// Image returns the PNG of captcha id: the same bytes on every fetch. After MaxFetches fetches of
// its image and audio together it returns ErrTooManyFetches; for an unknown, expired or used id,
// ErrNotFound.
func (i *Issuer) Image(ctx context.Context, id string) ([]byte, error) {
	c, err := i.fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(c.PNG) == 0 {
		return nil, fmt.Errorf("captcha %s: stored without an image", id)
	}
	return c.PNG, nil
}

// Audio returns captcha id's digits spoken in the issuer's AudioLanguage, as a WAV file (8 kHz,
// 8-bit mono), rendered anew on each fetch. Fetches count with the image's, as in Image.
func (i *Issuer) Audio(ctx context.Context, id string) ([]byte, error) {
	c, err := i.fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(c.Digits) == 0 {
		return nil, fmt.Errorf("captcha %s: stored without digits", id)
	}
	a := captcha.NewAudio(id, c.Digits, i.opts.AudioLanguage)
	var wav bytes.Buffer
	wav.Grow(a.EncodedLen())
	if _, err := a.WriteTo(&wav); err != nil {
		return nil, fmt.Errorf("captcha %s: render audio: %w", id, err)
	}
	return wav.Bytes(), nil
}

// fetch counts a fetch of captcha id and returns it, unless it was fetched too often.
func (i *Issuer) fetch(ctx context.Context, id string) (Challenge, error) {
	if !validID(id) {
		return Challenge{}, ErrNotFound
	}
	n, err := i.store.CountFetch(ctx, id)
	if err != nil {
		return Challenge{}, err
	}
	if n > i.opts.MaxFetches {
		return Challenge{}, ErrTooManyFetches
	}
	return i.store.Peek(ctx, id)
}

// Verify reports whether captcha id was issued to user for activity and answer (the digits as
// typed, spaces ignored) solves it. The owner's attempt uses the captcha up, whatever the answer,
// so that of concurrent attempts at most one is true; anyone else's attempt (another user, or the
// owner on another activity) is false and leaves the captcha as it was, so that nobody who learns
// an id, which is in the image URL, can use it up by answering it. (Fetching its image, which
// needs no login, still counts against MaxFetches.) An unknown, expired or
// already used id is false with a nil error; an error means the store failed.
func (i *Issuer) Verify(ctx context.Context, id, user, activity, answer string) (bool, error) {
	if !validID(id) || user == "" || activity == "" {
		return false, nil
	}
	c, err := i.store.Take(ctx, id, Owner{User: user, Activity: activity})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("verify captcha %s: %w", id, err)
	}
	digits, ok := parseAnswer(answer, len(c.Digits))
	if !ok {
		return false, nil
	}
	match := subtle.ConstantTimeCompare(digits, c.Digits) == 1
	return match, nil // Take gave it to its owner only
}

// parseAnswer turns typed digits into digit values, skipping spaces; it fails on any other
// character and on an answer longer than want digits.
func parseAnswer(s string, want int) ([]byte, bool) {
	d := make([]byte, 0, want)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
		case c >= '0' && c <= '9' && len(d) < want:
			d = append(d, c-'0')
		default:
			return nil, false
		}
	}
	return d, len(d) == want
}
