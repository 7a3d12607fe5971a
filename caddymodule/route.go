package caddymodule

import (
	"net/http"
	"strings"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// callKind is one of the calls of the public API (docs/api.md).
type callKind uint8

const (
	callStatus    callKind = iota + 1 // GET    {prefix}/{activity}
	callCaptcha                       // POST   {prefix}/{activity}/captcha
	callImage                         // GET    {prefix}/{activity}/captcha/{id}.png
	callAudio                         // GET    {prefix}/{activity}/captcha/{id}.wav
	callPath                          // POST   {prefix}/{activity}/path
	callBuy                           // POST   {prefix}/{activity}/buy/{hash}
	callResult                        // GET    {prefix}/{activity}/result
	callQueue                         // POST or GET {prefix}/{activity}/queue (queue.go)
	callChallenge                     // GET    {prefix}/{activity}/queue/challenge (queue.go)
)

// call is a parsed request path.
type call struct {
	kind     callKind
	activity string
	arg      string // captcha id (callImage, callAudio) or hash (callBuy)
}

// Longest accepted path arguments: a captcha id or a hash longer than this is no valid one, and
// refusing it early keeps hostile input out of logs and stores.
const maxPathArg = 128

// parseCall maps a request path to a call. prefix has no trailing slash ("" mounts the API at the
// root). It reports false for any other path.
func parseCall(prefix, path string) (call, bool) {
	tail, ok := strings.CutPrefix(path, prefix)
	if !ok || len(tail) < 2 || tail[0] != '/' {
		return call{}, false
	}
	// At most three segments; a fourth makes the path unknown. Cut, not Split: no allocation.
	var seg [3]string
	n, rest := 0, tail[1:]
	for {
		if n == len(seg) {
			return call{}, false
		}
		var more bool
		seg[n], rest, more = strings.Cut(rest, "/")
		n++
		if !more {
			break
		}
	}
	c := call{activity: seg[0]}
	if !admission.ValidActivityID(c.activity) {
		return call{}, false
	}
	switch {
	case n == 1:
		c.kind = callStatus
	case n == 2 && seg[1] == "captcha":
		c.kind = callCaptcha
	case n == 2 && seg[1] == "path":
		c.kind = callPath
	case n == 2 && seg[1] == "result":
		c.kind = callResult
	case n == 2 && seg[1] == "queue":
		c.kind = callQueue
	case n == 3 && seg[1] == "captcha":
		if id, ok := strings.CutSuffix(seg[2], ".png"); ok {
			c.kind, c.arg = callImage, id
		} else if id, ok := strings.CutSuffix(seg[2], ".wav"); ok {
			c.kind, c.arg = callAudio, id
		}
		if c.kind == 0 || !validArg(c.arg) {
			return call{}, false
		}
	case n == 3 && seg[1] == "queue" && seg[2] == "challenge":
		c.kind = callChallenge
	case n == 3 && seg[1] == "buy":
		if !validArg(seg[2]) {
			return call{}, false
		}
		c.kind, c.arg = callBuy, seg[2]
	default:
		return call{}, false
	}
	return c, true
}

// validArg accepts a non-empty, bounded path argument of printable ASCII.
func validArg(s string) bool {
	if s == "" || len(s) > maxPathArg {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// methods returns the methods a call answers, as the Allow header lists them.
func (k callKind) methods() string {
	switch k {
	case callStatus, callImage, callAudio, callResult, callChallenge:
		return "GET, HEAD"
	case callQueue:
		return "GET, HEAD, POST"
	}
	return "POST"
}

// allows reports whether the call answers method.
func (k callKind) allows(method string) bool {
	switch k {
	case callStatus, callImage, callAudio, callResult, callChallenge:
		return method == http.MethodGet || method == http.MethodHead
	case callQueue:
		return method == http.MethodGet || method == http.MethodHead || method == http.MethodPost
	}
	return method == http.MethodPost
}

// String names the call in logs and metrics.
func (k callKind) String() string {
	switch k {
	case callStatus:
		return "status"
	case callCaptcha:
		return "captcha"
	case callImage:
		return "captcha_image"
	case callAudio:
		return "captcha_audio"
	case callPath:
		return "path"
	case callBuy:
		return "buy"
	case callResult:
		return "result"
	case callQueue:
		return "queue"
	case callChallenge:
		return "queue_challenge"
	}
	return "unknown"
}
