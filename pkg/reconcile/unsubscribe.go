package reconcile

import (
	"context"

	"exacto.dev/pkg/envelope"
)

// missedUnsubscribe: the platform shows the lead unsubscribed, blocked or bounced and
// the suppression list lacks the contact: a lost webhook. The safe policy applies at
// once: a lead.unsubscribed (email.bounced for a bounce) event for the contact, which
// the suppressor, the stopper and the projector act on. One finding per contact and
// platform, whatever the number of campaigns it was seen in.
func missedUnsubscribe(ctx context.Context, p *Pass) ([]Finding, error) {
	leads, err := p.platformLeads(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	done := map[string]bool{}
	for _, l := range leads {
		if (!l.Unsubscribed && !l.Bounced) || l.Email == "" || done[l.Provider+" "+l.Email] {
			continue
		}
		_, suppressed, err := p.Suppression.Lookup(ctx, p.Tenant, "email:"+l.Email)
		if err != nil {
			return out, err
		}
		if suppressed {
			continue
		}
		done[l.Provider+" "+l.Email] = true
		f := newFinding(p, MissedUnsubscribe, l.Provider, l.Email)
		f.Contact, f.Campaign, f.Where = l.Email, l.Campaign, l.where()
		data := envelope.Data{Contact: &envelope.Contact{Email: l.Email, ExternalID: l.ID}, Campaign: &envelope.Campaign{ID: l.Campaign}}
		typ := envelope.TypeLeadUnsubscribed
		f.Found = l.Provider + " shows the lead unsubscribed; the suppression list lacks the contact (no webhook was received)"
		if l.Bounced && !l.Unsubscribed {
			typ = envelope.TypeEmailBounced
			data.Bounce = &envelope.Bounce{Kind: "unknown", Reason: l.Provider + " shows the lead bounced"}
			f.Found = l.Provider + " shows the lead bounced; the suppression list lacks the contact (no webhook was received)"
		}
		ev := event(p, MissedUnsubscribe, l.Provider, typ, l.Email, data, l.Raw, timeZero)
		f.apply = &ev
		f.Repair = "publish " + typ + " " + ev.ID + ": the suppressor suppresses the contact, the stopper stops its sequences"
		out = append(out, f)
	}
	return out, nil
}
