package handler

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/retry"
)

// How the stopper stops a Smartlead lead (docs/platforms.md has the references): the
// reference has no read of one lead's status in one campaign — the lead by e-mail
// names its campaigns without a status, and a campaign's lead listing cannot be
// filtered by lead — so the stopper does not read before it writes: it pauses the lead
// in the campaign (pausing a paused lead is harmless) and, for an opt-out, unsubscribes
// it from every campaign. A pause is confirmed with the documented filters (status
// PAUSED, activity after the event), one page whatever the campaign's size; a listing
// that cannot show it (a lead whose last activity is older) is logged and counted, not
// retried: the pause was accepted, and pausing again would not tell more.

// confirmWindow is how far before the event the confirming listing looks for the
// lead's last activity (the reply itself is activity).
const confirmWindow = time.Minute

// confirmPages bounds the confirming listing: one page (100 leads), because every call
// counts against Smartlead's 1,000 an hour per key, and a confirmation changes nothing
// the pause did (a burst in one campaign may leave it not_seen: counted, not retried).
const confirmPages = 1

// smartlead pauses the contact's lead at Smartlead in the event's campaign (a
// Smartlead event naming one), else in every campaign it is in.
func (h *handler) smartlead(ctx context.Context, ev consumer.Event, c *smartlead.Client) (stop, error) {
	env := ev.Envelope
	leadID, campaigns, unsubscribed, found, err := h.smartleadLead(ctx, ev, c)
	if err != nil || !found {
		return stop{}, err
	}
	if cid := campaignID(env); env.Provider == Smartlead && cid != "" {
		n, err := strconv.ParseInt(cid, 10, 64)
		if err != nil {
			return stop{}, retry.Permanently(Smartlead, fmt.Errorf("campaign id %q is not a number", cid))
		}
		campaigns = []int64{n}
	}
	s := stop{found: true, leadID: strconv.FormatInt(leadID, 10)}
	if unsubscribed {
		return s, nil // unsubscribed from every campaign: nothing is sent to it
	}
	var errs []error
	for _, cid := range campaigns {
		err := ev.Call(ctx, Smartlead, func(ctx context.Context) error { return c.PauseLead(ctx, cid, leadID) })
		if err != nil {
			errs = append(errs, fmt.Errorf("pause lead %d in campaign %d: %w", leadID, cid, err))
			continue
		}
		s.wrote = true
		if env.Provider == Smartlead {
			// Only Smartlead's own event dates the lead's last activity there.
			h.confirmPause(ctx, ev, c, cid, leadID)
		}
	}
	return s, combine(errs...)
}

// smartleadLead names the event's lead at Smartlead: by the id and campaign the event
// carries (a Smartlead event; an unsigned one is confirmed at the source before the
// stopper sees it), else by e-mail (its campaigns and global unsubscribe with it).
func (h *handler) smartleadLead(ctx context.Context, ev consumer.Event, c *smartlead.Client) (id int64, campaigns []int64, unsubscribed, found bool, err error) {
	env := ev.Envelope
	if smartleadByID(env) {
		n, err := strconv.ParseInt(env.Data.Contact.ExternalID, 10, 64)
		if err != nil {
			return 0, nil, false, false, retry.Permanently(Smartlead, fmt.Errorf("lead id %q is not a number", env.Data.Contact.ExternalID))
		}
		return n, nil, false, true, nil
	}
	addr := email(env)
	if addr == "" {
		return 0, nil, false, false, nil
	}
	var lead smartlead.Lead
	err = ev.Call(ctx, Smartlead, func(ctx context.Context) (err error) {
		lead, found, err = c.LeadByEmail(ctx, addr)
		return err
	})
	return lead.ID, lead.CampaignIDs, lead.Unsubscribed, found, err
}

// confirmPause looks for the paused lead among the campaign's paused leads active
// since just before the event; not seen is logged and counted (see the comment above).
func (h *handler) confirmPause(ctx context.Context, ev consumer.Event, c *smartlead.Client, cid, leadID int64) {
	var found bool
	err := ev.Call(ctx, Smartlead, func(ctx context.Context) (err error) {
		_, found, err = c.FindInCampaign(ctx, cid, leadID, smartlead.Filter{Status: "PAUSED", ActiveAfter: ev.Envelope.Time.Add(-confirmWindow)}, confirmPages)
		return err
	})
	outcome := "confirmed"
	switch {
	case err != nil:
		outcome = "error"
	case !found:
		outcome = "not_seen"
	}
	pausesConfirmed.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", ev.Envelope.Tenant), attribute.String("outcome", outcome)))
	if outcome != "confirmed" {
		h.log.WarnContext(ctx, "smartlead pause accepted but not seen in the campaign's paused leads", "id", ev.Envelope.ID,
			"lead", leadID, "campaign", cid, "err", err)
	}
}
