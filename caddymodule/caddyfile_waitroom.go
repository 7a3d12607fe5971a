package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// parseWaitingRoom parses the waiting_room block of an activity (what names the activity for
// messages); the block may be left out for the defaults. Syntax:
//
//	waiting_room {
//		opens   <duration>        # the line opens this long before start; default 15m
//		admit   <n>/<period>      # buyers let through, across every gateway; default 200/s
//		session <duration>        # how long an admitted buyer may take to buy; default 2m
//		proof_of_work [<bits>]    # a join costs a proof of work; bare: 16 bits; 1 to 28; default off
//	}
func parseWaitingRoom(d *caddyfile.Dispenser, what string) (*WaitingRoomConfig, error) {
	if err := caddyfileargs.NoArg(d); err != nil {
		return nil, err
	}
	c := new(WaitingRoomConfig)
	what += "waiting_room "
	return c, caddyfileargs.ParseBlock(d, "seckill", what, func(opt string) (err error) {
		// Each value is checked at its line, with the bounds the JSON's are checked with: the
		// room of that one value, the others at their defaults.
		var one WaitingRoomConfig
		switch opt {
		case "opens":
			c.Opens, err = caddyfileargs.PositiveDurationArg(d, what+"opens")
			one.Opens = c.Opens
		case "admit":
			c.Admit, err = caddyfileargs.OneArg(d)
			one.Admit = c.Admit
		case "session":
			c.Session, err = caddyfileargs.PositiveDurationArg(d, what+"session")
			one.Session = c.Session
		case "proof_of_work":
			c.ProofOfWork = waitroom.DefaultProofBits
			if d.CountRemainingArgs() > 0 {
				c.ProofOfWork, err = caddyfileargs.IntArg(d, what+"proof_of_work", waitroom.MinProofBits, waitroom.MaxProofBits,
					fmt.Sprintf("want %d to %d bits (leave it out for %d)", waitroom.MinProofBits, waitroom.MaxProofBits, waitroom.DefaultProofBits))
			}
			one.ProofOfWork = c.ProofOfWork
		default:
			return d.Errf("seckill: %sunrecognized option %q", what, opt)
		}
		if err != nil {
			return err
		}
		if _, err := one.room(); err != nil {
			return d.Errf("seckill: %s%v", what, err)
		}
		return nil
	})
}
