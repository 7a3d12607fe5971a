// Package seckillcmd registers the `caddy seckill` command: token mints test tokens, status shows
// the activities, reconcile checks the sale's invariants and watch is a live view of the sale. The
// command talks to a running Caddy's admin API (module admin.api.seckill of package caddymodule),
// or opens the configuration's store and order database itself (reconcile). Importing the package
// registers the command; the root package of caddy-seckill does, so that every Caddy built with
// caddy-seckill has it.
package seckillcmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "seckill",
		Usage: "token|status|reconcile|watch|partition|archive ...",
		Short: "Flash-sale tools: mint test tokens, show activities, check the invariants, watch the sale",
		Long: `
Tools for caddy-seckill.

  caddy seckill token --user <id> [--secret <s>] [--alg HS256] [--ttl 15m] [--issuer <iss>] [--audience <aud>]
  caddy seckill token --user <id> --config <file> [--adapter <name>] [--ttl 15m]
      prints an HMAC-signed JWT for the user (for tests and load tests). The secret defaults to
      the SECKILL_JWT_SECRET environment variable. With --config, the token is minted with the
      configuration's jwt block (its first HS* algorithm, hmac_secret with {env.*} placeholders
      replaced, issuer, audience and user_claim), so that configuration accepts it; --alg,
      --issuer and --audience, when given, override it.

  caddy seckill status [<activity>] [--address <admin>] [--config <file> [--adapter <name>]]
      prints the activities (or one) with their live counters, from the running Caddy's admin
      API (module admin.api.seckill).

  caddy seckill reconcile [--config <file> [--adapter <name>]] [--address <admin>] [--activity <id>] [--json]
      checks the sale's invariants (never oversell, never lose a win, never undersell) across
      the store and the order database of the embedded order backend (the orders option), for
      every activity or one. With --config and store redis it connects to both itself; with
      store memory it asks the running Caddy through its admin API. Exit status 1 when an
      invariant does not hold, 2 when it could not check. Run it once the sale is over and the
      queue has drained: wins still in flight show as violations.

  caddy seckill watch [--address <admin>] [--config <file> [--adapter <name>]] [--interval 1s] [--once]
      a live view of every activity (remaining, admits/s, wins, order backlog, dead letters; a
      waiting room's line: joined, waiting, admitted/s), the breaker and the refusals by funnel layer, redrawn every interval from the running Caddy's
      admin API (/seckill/stats and /metrics); q or Ctrl-C quits. Not on a terminal it prints a
      frame per interval; --once prints one frame (two readings an interval apart) and exits.

  caddy seckill partition --config <file> [--adapter <name>] --partitions <n>
      rewrites the orders and payments tables of the orders postgres database into n hash
      partitions by user (1: not partitioned), in one transaction that keeps every order; run it
      with the sale and Caddy stopped, then set the orders option's partitions to n.

  caddy seckill archive <activity> --config <file> [--adapter <name>] [--address <admin>] [--batch 1000]
      moves a finished sale's orders and payment attempts from the hot tables to the archive
      tables, in transactions of --batch orders, once reconcile holds and no order is pending;
      prints the counts before and after. Reconcile and the order API read archived orders. A
      second run moves nothing; an interrupted run is finished by the next. With store redis, or a
      store local folder no Caddy holds, it opens the store and the database itself; with store
      memory or a store local folder the running Caddy holds, that Caddy archives through its
      admin API (the config's admin address, or --address).`,
		CobraFunc: func(cmd *cobra.Command) {
			token := &cobra.Command{
				Use:   "token --user <id> [--secret <s> | --config <file> [--adapter <name>]] [--alg HS256] [--ttl 15m] [--issuer <iss>] [--audience <aud>]",
				Short: "Prints an HMAC-signed JWT for a user",
				Args:  cobra.NoArgs,
				RunE:  caddycmd.WrapCommandFuncForCobra(cmdToken),
			}
			token.Flags().String("user", "", "The user id (sub claim, and the configured user_claim); required")
			token.Flags().String("secret", "", "The HMAC secret; default $SECKILL_JWT_SECRET (not with --config)")
			token.Flags().StringP("config", "c", "", "Configuration file whose seckill jwt block the token is minted for")
			token.Flags().StringP("adapter", "a", "", "Name of config adapter to apply (if --config is used)")
			token.Flags().String("alg", "HS256", "HS256, HS384 or HS512 (with --config: its first HS* algorithm)")
			token.Flags().Duration("ttl", 15*time.Minute, "How long the token is valid")
			token.Flags().String("issuer", "", "The iss claim (with --config: its issuer)")
			token.Flags().String("audience", "", "The aud claim (with --config: its audience)")

			status := &cobra.Command{
				Use:   "status [<activity>] [--address <admin>] [--config <file> [--adapter <name>]]",
				Short: "Prints the activities and their counters from the admin API",
				Args:  cobra.MaximumNArgs(1),
				RunE:  caddycmd.WrapCommandFuncForCobra(cmdStatus),
			}
			status.Flags().String("address", "", "Address of the administration API listener (if --config is not used)")
			status.Flags().StringP("config", "c", "", "Configuration file (if --address is not used)")
			status.Flags().StringP("adapter", "a", "", "Name of config adapter to apply (if --config is used)")

			rec := &cobra.Command{
				Use:   "reconcile [--config <file> [--adapter <name>]] [--address <admin>] [--activity <id>] [--json]",
				Short: "Checks the sale's invariants across the store and the order database",
				Args:  cobra.NoArgs,
				RunE:  caddycmd.WrapCommandFuncForCobra(cmdReconcile),
			}
			rec.Flags().StringP("config", "c", "", "Configuration file: its store and orders settings (or its admin address, with store memory)")
			rec.Flags().StringP("adapter", "a", "", "Name of config adapter to apply (if --config is used)")
			rec.Flags().String("address", "", "Address of the administration API listener (store memory)")
			rec.Flags().String("activity", "", "Check only this activity (default: every activity in the store)")
			rec.Flags().Bool("json", false, "Print the reports as JSON")

			watch := &cobra.Command{
				Use:   "watch [--address <admin>] [--config <file> [--adapter <name>]] [--interval 1s] [--once]",
				Short: "A live terminal view of the sale from the admin API",
				Args:  cobra.NoArgs,
				RunE:  caddycmd.WrapCommandFuncForCobra(cmdWatch),
			}
			watch.Flags().String("address", "", "Address of the administration API listener (if --config is not used)")
			watch.Flags().StringP("config", "c", "", "Configuration file (if --address is not used)")
			watch.Flags().StringP("adapter", "a", "", "Name of config adapter to apply (if --config is used)")
			watch.Flags().Duration("interval", time.Second, "How often the view is refreshed")
			watch.Flags().Bool("once", false, "Print one frame and exit")

			part := &cobra.Command{
				Use:   "partition --config <file> [--adapter <name>] --partitions <n>",
				Short: "Rewrites the order database into n hash partitions by user",
				Args:  cobra.NoArgs,
				RunE:  caddycmd.WrapCommandFuncForCobra(cmdPartition),
			}
			part.Flags().StringP("config", "c", "", "Configuration file: its orders postgres database; required")
			part.Flags().StringP("adapter", "a", "", "Name of config adapter to apply")
			part.Flags().Int("partitions", 0, "The number of partitions wanted, 1 (not partitioned) to 1024; required")

			arch := &cobra.Command{
				Use:   "archive <activity> --config <file> [--adapter <name>] [--address <admin>] [--batch 1000]",
				Short: "Moves a finished sale's orders to the archive tables",
				Args:  cobra.ExactArgs(1),
				RunE:  caddycmd.WrapCommandFuncForCobra(cmdArchive),
			}
			arch.Flags().StringP("config", "c", "", "Configuration file: its store and orders settings; required")
			arch.Flags().StringP("adapter", "a", "", "Name of config adapter to apply")
			arch.Flags().String("address", "", "Address of the administration API listener (store memory, or a store local folder Caddy holds)")
			arch.Flags().Int("batch", orderbackend.DefaultArchiveBatch, "Orders moved per transaction")

			cmd.AddCommand(token, status, rec, watch, part, arch)
		},
	})
}

func cmdStatus(fl caddycmd.Flags) (int, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("admin API address: %w", err)
	}
	uri := "/seckill/stats"
	if id := fl.Arg(0); id != "" {
		if !admission.ValidActivityID(id) {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("activity id %q is not valid", id)
		}
		uri = "/seckill/activities/" + id
	}
	resp, err := caddycmd.AdminAPIRequest(addr, http.MethodGet, uri, make(http.Header), nil)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("read answer: %w", err)
	}
	var out bytes.Buffer
	if json.Indent(&out, body, "", "  ") != nil {
		out.Reset()
		out.Write(body)
	}
	fmt.Println(out.String())
	return caddy.ExitCodeSuccess, nil
}
