package seckillcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/caddymodule"
)

// exitCannotCheck is the reconcile command's status when it could not look at all (bad usage, a
// store or database it cannot reach); 1 is reserved for violated invariants.
const exitCannotCheck = 2

// cmdReconcile checks the invariants of the sale across the store and the order database.
//
// With --config and store redis it connects to both itself, so it works whether Caddy runs or
// not. With store local it opens the folder itself when no Caddy holds it, and asks the running
// Caddy otherwise. With store memory the sale exists only inside the running Caddy, so it asks
// that process through the admin API (the config's admin address, or --address).
func cmdReconcile(fl caddycmd.Flags) (int, error) {
	activity := fl.String("activity")
	if activity != "" && !admission.ValidActivityID(activity) {
		return exitCannotCheck, fmt.Errorf("activity id %q is not valid", activity)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var (
		cfg []byte
		app *caddymodule.App
	)
	if file := fl.String("config"); file != "" {
		var err error
		if cfg, _, _, err = caddycmd.LoadConfig(file, fl.String("adapter")); err != nil {
			return exitCannotCheck, err
		}
		if app, err = seckillAppOf(cfg); err != nil {
			return exitCannotCheck, fmt.Errorf("%s: %w", file, err)
		}
	}

	var (
		ans caddymodule.ReconcileAnswer
		err error
	)
	if app != nil {
		ans, err = app.ReconcileDirect(ctx, activity)
	}
	// A store only the running Caddy can read (store memory), or one it holds (a store local
	// folder): ask it.
	if app == nil || errors.Is(err, caddymodule.ErrNotOpenable) || errors.Is(err, admission.ErrInUse) {
		ans, err = reconcileViaAdmin(fl.String("address"), cfg, fl.String("config"), fl.String("adapter"), activity)
	}
	if err != nil {
		return exitCannotCheck, err
	}

	if fl.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(ans); err != nil {
			return exitCannotCheck, err
		}
	} else {
		for _, r := range ans.Reports {
			fmt.Print(r.String())
		}
		if len(ans.Reports) == 0 {
			fmt.Println("no activities")
		}
	}
	if !ans.OK {
		return 1, errors.New("reconcile: some invariants do not hold (see above); a sale still running or " +
			"a queue not yet drained also shows here: run it again once the sale is over")
	}
	return caddy.ExitCodeSuccess, nil
}

// seckillAppOf decodes the seckill app of a JSON configuration.
func seckillAppOf(cfg []byte) (*caddymodule.App, error) {
	var c struct {
		Apps struct {
			Seckill json.RawMessage `json:"seckill"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		return nil, fmt.Errorf("decode the configuration: %w", err)
	}
	if len(c.Apps.Seckill) == 0 {
		return nil, errors.New("the configuration has no seckill app")
	}
	app := new(caddymodule.App)
	if err := json.Unmarshal(c.Apps.Seckill, app); err != nil {
		return nil, fmt.Errorf("decode the seckill app: %w", err)
	}
	return app, nil
}

// reconcileViaAdmin asks the running Caddy to reconcile its own sale.
func reconcileViaAdmin(address string, cfg []byte, configFile, adapter, activity string) (caddymodule.ReconcileAnswer, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(address, cfg, configFile, adapter)
	if err != nil {
		return caddymodule.ReconcileAnswer{}, fmt.Errorf("admin API address: %w", err)
	}
	uri := "/seckill/reconcile"
	if activity != "" {
		uri += "?activity=" + url.QueryEscape(activity)
	}
	resp, err := caddycmd.AdminAPIRequest(addr, http.MethodGet, uri, make(http.Header), nil)
	if err != nil {
		return caddymodule.ReconcileAnswer{}, fmt.Errorf("ask the running Caddy at %s (with store memory the sale lives only there; "+
			"a store local folder in use is read through it): %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return caddymodule.ReconcileAnswer{}, fmt.Errorf("read answer: %w", err)
	}
	var ans caddymodule.ReconcileAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		return caddymodule.ReconcileAnswer{}, fmt.Errorf("admin API answer: %w: %s", err, body)
	}
	return ans, nil
}
