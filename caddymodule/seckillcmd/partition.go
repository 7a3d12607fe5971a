package seckillcmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// cmdPartition rewrites the configuration's PostgreSQL order database into --partitions hash
// partitions by user (caddymodule.App.PartitionDirect).
func cmdPartition(fl caddycmd.Flags) (int, error) {
	file := fl.String("config")
	if file == "" {
		return caddy.ExitCodeFailedStartup, errors.New("--config is required: the configuration whose orders postgres database to partition")
	}
	n := fl.Int("partitions")
	if n < 1 || n > orderbackend.MaxPartitions {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("--partitions %d: want 1 (not partitioned) to %d", n, orderbackend.MaxPartitions)
	}
	cfg, _, _, err := caddycmd.LoadConfig(file, fl.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	app, err := seckillAppOf(cfg)
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("%s: %w", file, err)
	}
	// A rewrite of every order may take a while on a big database; it is one transaction, so an
	// interrupted run changes nothing.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	rep, err := app.PartitionDirect(ctx, n)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	fmt.Print(rep.String())
	return caddy.ExitCodeSuccess, nil
}
