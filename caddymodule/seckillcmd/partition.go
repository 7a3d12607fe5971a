package seckillcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/caddymodule"
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

// cmdArchive moves a finished sale's orders to the archive tables: itself when it can open the
// configuration's store (caddymodule.App.ArchiveDirect), else through the running Caddy's admin
// API (store memory, or a store local folder that Caddy holds), as reconcile does.
func cmdArchive(fl caddycmd.Flags) (int, error) {
	activity := fl.Arg(0)
	if !admission.ValidActivityID(activity) {
		return exitCannotCheck, fmt.Errorf("activity id %q is not valid", activity)
	}
	file := fl.String("config")
	if file == "" {
		return exitCannotCheck, errors.New("--config is required: the configuration whose store and order database hold the sale")
	}
	batch := fl.Int("batch")
	if batch < 1 {
		return exitCannotCheck, fmt.Errorf("--batch %d: want at least 1", batch)
	}
	cfg, _, _, err := caddycmd.LoadConfig(file, fl.String("adapter"))
	if err != nil {
		return exitCannotCheck, err
	}
	app, err := seckillAppOf(cfg)
	if err != nil {
		return exitCannotCheck, fmt.Errorf("%s: %w", file, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	rep, err := app.ArchiveDirect(ctx, activity, batch)
	if errors.Is(err, caddymodule.ErrNotOpenable) || errors.Is(err, admission.ErrInUse) {
		rep, err = archiveViaAdmin(fl.String("address"), cfg, file, fl.String("adapter"), activity, batch)
	}
	if err != nil {
		return 1, err
	}
	fmt.Print(rep.String())
	return caddy.ExitCodeSuccess, nil
}

// archiveViaAdmin asks the running Caddy to archive a sale of its own store
// (POST /seckill/activities/{id}/archive).
func archiveViaAdmin(address string, cfg []byte, configFile, adapter, activity string, batch int) (orderbackend.ArchiveReport, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(address, cfg, configFile, adapter)
	if err != nil {
		return orderbackend.ArchiveReport{}, fmt.Errorf("admin API address: %w", err)
	}
	uri := "/seckill/activities/" + activity + "/archive?batch=" + strconv.Itoa(batch)
	resp, err := caddycmd.AdminAPIRequest(addr, http.MethodPost, uri, make(http.Header), nil)
	if err != nil {
		return orderbackend.ArchiveReport{}, fmt.Errorf("ask the running Caddy at %s to archive %s (with store memory the sale "+
			"lives only there; a store local folder in use is read through it): %w", addr, activity, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return orderbackend.ArchiveReport{}, fmt.Errorf("read answer: %w", err)
	}
	var rep orderbackend.ArchiveReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return orderbackend.ArchiveReport{}, fmt.Errorf("admin API answer: %w: %s", err, body)
	}
	return rep, nil
}
