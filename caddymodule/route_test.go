package caddymodule

import (
	"testing"
	"time"
)

func TestParseCall(t *testing.T) {
	for _, tc := range []struct {
		prefix, path string
		want         call
		ok           bool
	}{
		{"/seckill", "/seckill/a", call{kind: callStatus, activity: "a"}, true},
		{"/seckill", "/seckill/a/captcha", call{kind: callCaptcha, activity: "a"}, true},
		{"/seckill", "/seckill/a/captcha/X1.png", call{kind: callImage, activity: "a", arg: "X1"}, true},
		{"/seckill", "/seckill/a/captcha/X1.wav", call{kind: callAudio, activity: "a", arg: "X1"}, true},
		{"/seckill", "/seckill/a/path", call{kind: callPath, activity: "a"}, true},
		{"/seckill", "/seckill/a/buy/h", call{kind: callBuy, activity: "a", arg: "h"}, true},
		{"/seckill", "/seckill/a/result", call{kind: callResult, activity: "a"}, true},
		{"/seckill", "/seckill/a/queue", call{kind: callQueue, activity: "a"}, true},
		{"/seckill", "/seckill/a/queue/challenge", call{kind: callChallenge, activity: "a"}, true},
		{"/seckill", "/seckill/a/queue/other", call{}, false},
		{"", "/a/buy/h", call{kind: callBuy, activity: "a", arg: "h"}, true},
		{"/api/sale", "/api/sale/a.b_c-1", call{kind: callStatus, activity: "a.b_c-1"}, true},
		{"/seckill", "/seckill", call{}, false},
		{"/seckill", "/seckill/", call{}, false},
		{"/seckill", "/seckillx/a", call{}, false},
		{"/seckill", "/other/a", call{}, false},
		{"/seckill", "/seckill/a/", call{}, false},
		{"/seckill", "/seckill/a b", call{}, false},
		{"/seckill", "/seckill/a/captcha/.png", call{}, false},
		{"/seckill", "/seckill/a/captcha/.wav", call{}, false},
		{"/seckill", "/seckill/a/captcha/x.jpg", call{}, false},
		{"/seckill", "/seckill/a/captcha/x.png/y", call{}, false},
		{"/seckill", "/seckill/a/buy", call{}, false},
		{"/seckill", "/seckill/a/buy/", call{}, false},
		{"/seckill", "/seckill/a/buy/h/x", call{}, false},
		{"/seckill", "/seckill/a/buy/h\x00", call{}, false},
		{"/seckill", "/seckill/a/stock", call{}, false},
		{"/seckill", "/seckill/a/result/x", call{}, false},
	} {
		got, ok := parseCall(tc.prefix, tc.path)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseCall(%q, %q) = %+v, %v; want %+v, %v", tc.prefix, tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[int64]string{0: "1", 1: "1", 999e6: "1", 1e9: "1", 1e9 + 1: "2", 59e9: "59"} {
		if got := retryAfterSeconds(durationOf(d)); got != want {
			t.Errorf("retryAfterSeconds(%d) = %s, want %s", d, got, want)
		}
	}
}

func durationOf(ns int64) time.Duration { return time.Duration(ns) }
