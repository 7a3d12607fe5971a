package redisstore

import "github.com/caddy-seckill/caddy-seckill/admission/admissiontest"

// The suite's helpers, under this package's names.
var (
	openAt        = admissiontest.OpenAt
	mustDefine    = admissiontest.MustDefine
	mustAdmit     = admissiontest.MustAdmit
	mustRemaining = admissiontest.MustRemaining
	startGuard    = admissiontest.StartGuard
	eventually    = admissiontest.Eventually
	waitHeld      = admissiontest.WaitHeld
)
