package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/webhook"
	"google.golang.org/protobuf/types/known/durationpb"
)

func (c *cli) webhooksCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "webhooks", `Usage: amctl webhooks COMMAND [flags]

Your org's events POSTed to your HTTP endpoints, signed the Standard
Webhooks way (webhook-id, webhook-timestamp, webhook-signature), retried
with backoff for a day. Event types: `+strings.Join(webhook.EventTypes, ", ")+`.

Commands:
  create URL [--event T ...] [--description D]   register an endpoint, print its secret
  list                                           list the endpoints
  get ID                                         show an endpoint
  update ID [--url U] [--event T ...] [--enable|--disable] [--description D]
  delete ID                                      remove it
  rotate ID [--grace D]                          a new secret; the old one also signs for D (default 24h)
  deliveries ID [--limit N]                      the delivery log of an endpoint, newest first
  redeliver DELIVERY                             send a delivery again, now

Run 'amctl webhooks COMMAND -h' for a command's flags.
`, args,
		subcommand{"create", c.webhookCreate},
		subcommand{"list", c.webhookList},
		subcommand{"get", c.webhookGet},
		subcommand{"update", c.webhookUpdate},
		subcommand{"delete", c.webhookDelete},
		subcommand{"rotate", c.webhookRotate},
		subcommand{"deliveries", c.webhookDeliveries},
		subcommand{"redeliver", c.webhookRedeliver},
	)
}

func (c *cli) webhooks() agentmeshv1.WebhookServiceClient {
	return agentmeshv1.NewWebhookServiceClient(c.conn)
}

func (c *cli) showEndpoint(ep *agentmeshv1.WebhookEndpoint, secret string) error {
	if c.json() {
		return c.printJSON(ep, true)
	}
	types := "every type"
	if len(ep.EventTypes) > 0 {
		types = strings.Join(ep.EventTypes, ", ")
	}
	state := "enabled"
	if ep.Disabled {
		state = "disabled"
	}
	fmt.Fprintf(c.stdout, "endpoint %s\n  url:     %s\n  events:  %s\n  state:   %s\n  secret:  %s…", ep.Id, ep.Url, types, state, ep.SecretHint)
	if ep.PreviousSecretExpiresAt != nil {
		fmt.Fprintf(c.stdout, " (the previous one signs too until %s)", when(ep.PreviousSecretExpiresAt))
	}
	fmt.Fprintln(c.stdout)
	if secret != "" {
		fmt.Fprintf(c.stdout, "signing secret: %s\n", secret)
		fmt.Fprintln(c.stderr, "The secret is shown once: store it now.")
	}
	return nil
}

func (c *cli) webhookCreate(ctx context.Context, args []string) error {
	fs := c.flags("webhooks create", "URL [--event T ...] [--description D] [--disabled]", "Register a webhook endpoint and print its signing secret, once.")
	var events stringList
	fs.Var(&events, "event", "an event type to send (repeat, or comma-separate; default: every type)")
	desc := fs.String("description", "", "a description")
	disabled := fs.Bool("disabled", false, "create it disabled")
	pos, err := c.parseConnect(fs, args, "webhooks create", "URL")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.webhooks().CreateWebhookEndpoint(cctx, &agentmeshv1.CreateWebhookEndpointRequest{Url: pos[0], EventTypes: events, Description: *desc, Disabled: *disabled})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	return c.showEndpoint(resp.Endpoint, resp.Secret)
}

func (c *cli) webhookList(ctx context.Context, args []string) error {
	fs := c.flags("webhooks list", "", "List your org's webhook endpoints.")
	if _, err := c.parseConnect(fs, args, "webhooks list"); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.webhooks().ListWebhookEndpoints(cctx, &agentmeshv1.ListWebhookEndpointsRequest{})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tURL\tEVENTS\tSTATE\tCREATED")
	for _, ep := range resp.Endpoints {
		types, state := "all", "enabled"
		if len(ep.EventTypes) > 0 {
			types = strings.Join(ep.EventTypes, ",")
		}
		if ep.Disabled {
			state = "disabled"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ep.Id, ep.Url, types, state, when(ep.CreatedAt))
	}
	return tw.Flush()
}

func (c *cli) webhookGet(ctx context.Context, args []string) error {
	fs := c.flags("webhooks get", "ID", "Show a webhook endpoint.")
	pos, err := c.parseConnect(fs, args, "webhooks get", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.webhooks().GetWebhookEndpoint(cctx, &agentmeshv1.GetWebhookEndpointRequest{Id: pos[0]})
	if err != nil {
		return err
	}
	return c.showEndpoint(resp.Endpoint, "")
}

func (c *cli) webhookUpdate(ctx context.Context, args []string) error {
	fs := c.flags("webhooks update", "ID [--url U] [--event T ...] [--enable|--disable] [--description D]", "Change what the flags name.")
	u := fs.String("url", "", "the new URL")
	var events stringList
	fs.Var(&events, "event", "the event types (repeat, or comma-separate; \"all\": every type)")
	desc := fs.String("description", "", "the description")
	enable := fs.Bool("enable", false, "send again")
	disable := fs.Bool("disable", false, "send nothing (events meanwhile are not queued)")
	pos, err := c.parseConnect(fs, args, "webhooks update", "ID")
	if err != nil {
		return err
	}
	if *enable && *disable {
		return usagef("webhooks update: --enable or --disable, not both")
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	cur, err := c.webhooks().GetWebhookEndpoint(cctx, &agentmeshv1.GetWebhookEndpointRequest{Id: pos[0]})
	if err != nil {
		return err
	}
	ep := cur.Endpoint
	req := &agentmeshv1.UpdateWebhookEndpointRequest{Id: ep.Id, Url: ep.Url, Description: ep.Description, EventTypes: ep.EventTypes,
		Disabled: ep.Disabled, ExpectedVersion: ep.Version}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["url"] {
		req.Url = *u
	}
	if set["description"] {
		req.Description = *desc
	}
	if set["event"] {
		req.EventTypes = events
		if len(events) == 1 && events[0] == "all" {
			req.EventTypes = nil
		}
	}
	if *enable || *disable {
		req.Disabled = *disable
	}
	resp, err := c.webhooks().UpdateWebhookEndpoint(cctx, req)
	if err != nil {
		return err
	}
	return c.showEndpoint(resp.Endpoint, "")
}

func (c *cli) webhookDelete(ctx context.Context, args []string) error {
	fs := c.flags("webhooks delete", "ID", "Delete a webhook endpoint and its delivery log; nothing more is sent to it.")
	pos, err := c.parseConnect(fs, args, "webhooks delete", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	if _, err := c.webhooks().DeleteWebhookEndpoint(cctx, &agentmeshv1.DeleteWebhookEndpointRequest{Id: pos[0]}); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "endpoint %s deleted\n", pos[0])
	return nil
}

func (c *cli) webhookRotate(ctx context.Context, args []string) error {
	fs := c.flags("webhooks rotate", "ID [--grace D]", "Make a new signing secret (printed once); the old one also signs for --grace.")
	grace := fs.Duration("grace", 24*time.Hour, "how long the old secret signs beside the new one (at most 168h; 0: not at all)")
	pos, err := c.parseConnect(fs, args, "webhooks rotate", "ID")
	if err != nil {
		return err
	}
	if *grace < 0 {
		return usagef("--grace: must not be negative")
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.webhooks().RotateWebhookSecret(cctx, &agentmeshv1.RotateWebhookSecretRequest{Id: pos[0], Grace: durationpb.New(*grace)})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	return c.showEndpoint(resp.Endpoint, resp.Secret)
}

func (c *cli) webhookDeliveries(ctx context.Context, args []string) error {
	fs := c.flags("webhooks deliveries", "ID [--limit N]", "The delivery log of an endpoint, newest first: status, tries, the last answer and its latency.")
	limit := fs.Int("limit", 20, "at most this many")
	token := fs.String("page-token", "", "continue from a previous listing")
	pos, err := c.parseConnect(fs, args, "webhooks deliveries", "ID")
	if err != nil {
		return err
	}
	if *limit < 0 || *limit > 1000 {
		return usagef("--limit: must be between 0 and 1000")
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.webhooks().ListWebhookDeliveries(cctx, &agentmeshv1.ListWebhookDeliveriesRequest{EndpointId: pos[0], PageSize: int32(*limit), PageToken: *token})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DELIVERY\tEVENT\tOF\tSTATUS\tTRIES\tHTTP\tLATENCY\tLAST TRY\tNEXT\tERROR")
	for _, d := range resp.Deliveries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", d.Id, d.EventType, d.SubjectId,
			strings.ToLower(strings.TrimPrefix(d.Status.String(), "WEBHOOK_DELIVERY_STATUS_")), d.Attempts, d.ResponseStatus,
			d.GetLatency().AsDuration().Round(time.Millisecond), when(d.LastAttemptAt), when(d.NextAttemptAt), clip(d.Error, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.NextPageToken != "" {
		fmt.Fprintf(c.stdout, "more: --page-token %s\n", resp.NextPageToken)
	}
	return nil
}

func (c *cli) webhookRedeliver(ctx context.Context, args []string) error {
	fs := c.flags("webhooks redeliver", "DELIVERY", "Send a delivery again now, under the same webhook-id.")
	pos, err := c.parseConnect(fs, args, "webhooks redeliver", "DELIVERY")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.webhooks().RedeliverWebhook(cctx, &agentmeshv1.RedeliverWebhookRequest{DeliveryId: pos[0]})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	fmt.Fprintf(c.stdout, "delivery %s queued again\n", resp.Delivery.Id)
	return nil
}
