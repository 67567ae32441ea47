package reconcile

import (
	"context"
	"time"

	"exacto.dev/pkg/envelope"
)

// timeZero: the platform gives no time for the fact; the event takes the pass's.
var timeZero time.Time

// activeButSuppressed: the contact is on the suppression list and one of its leads is
// still active at the platform. The safe policy applies at once: an event of the
// suppression's kind for that lead and campaign, which the stopper stops. An active
// lead of a contact not suppressed is stillActive's to judge.
func activeButSuppressed(ctx context.Context, p *Pass) ([]Finding, error) {
	leads, err := p.platformLeads(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, l := range leads {
		if !l.Active || l.Email == "" {
			continue
		}
		entry, suppressed, err := p.Suppression.Lookup(ctx, p.Tenant, "email:"+l.Email)
		if err != nil {
			return out, err
		}
		if !suppressed {
			f, ok, err := stillActive(ctx, p, l)
			if err != nil {
				return out, err
			}
			if ok {
				out = append(out, f)
			}
			continue
		}
		object := l.ID + "@" + l.Campaign
		f := newFinding(p, ActiveButSuppressed, l.Provider, object)
		f.Contact, f.Campaign, f.Where = l.Email, l.Campaign, l.where()
		f.Found = "the contact is suppressed (" + entry.Reason + ", event " + entry.EventID + ") and the lead is still active"
		data := envelope.Data{Contact: &envelope.Contact{Email: l.Email, ExternalID: l.ID}, Campaign: &envelope.Campaign{ID: l.Campaign}}
		typ := envelope.TypeLeadUnsubscribed
		if entry.Reason == "bounced" {
			typ = envelope.TypeEmailBounced
			data.Bounce = &envelope.Bounce{Kind: "unknown", Reason: "suppressed as bounced by event " + entry.EventID}
		}
		ev := event(p, ActiveButSuppressed, l.Provider, typ, object, data, l.Raw, timeZero)
		f.apply = &ev
		f.Repair = "publish " + typ + " " + ev.ID + " for this lead: the stopper stops it"
		out = append(out, f)
	}
	return out, nil
}
