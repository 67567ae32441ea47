package reconcile

import (
	"context"
)

// stillActive: an impossible state across systems. The projection shows the contact
// replied in the lead's campaign, or its sequence there stopped or completed, while
// the platform still has the lead active: the stopper's stop did not hold, or someone
// resumed the lead by hand. Reported for review with the stop as the proposed repair
// (Exacto stops nothing on a guess: the reply may be an old one the person answered
// since). Called by activeButSuppressed for each active lead of a contact that is not
// suppressed (a suppressed one is stopped at once); ok is false when the projection
// agrees. The contact is looked up in the pass's projection contacts, indexed by
// e-mail once (contactByEmail), not read again for each lead.
func stillActive(ctx context.Context, p *Pass, l lead) (f Finding, ok bool, err error) {
	c, known, err := p.contactByEmail(ctx, l.Email)
	if err != nil || !known {
		return f, false, err
	}
	v := c.InCampaign(l.Campaign)
	why := ""
	switch {
	case v.Replied:
		why = "replied"
	case v.Completed:
		why = "stopped (its sequence stopped or completed)"
	default:
		return f, false, nil
	}
	f = newFinding(p, ImpossibleState, l.Provider, "active/"+l.ID+"@"+l.Campaign)
	f.Contact, f.Campaign, f.Where = l.Email, l.Campaign, l.where()
	f.Found = "the projection shows the contact " + why + " in this campaign (status " + string(v.Status) +
		"); " + l.Provider + " still has the lead active"
	f.Repair = "review: stop the lead at " + l.Provider + " (the stop did not hold, or the lead was resumed by hand)"
	return f, true, nil
}

// contactByEmail is the projection contact of the normalised email, from the pass's
// projection contacts indexed by e-mail (contactsByEmail). An e-mail no contact holds
// is unknown; one two contacts hold (a duplicate_contact) is left to
// Reader.ContactByEmail, which picks the one the directory names.
func (p *Pass) contactByEmail(ctx context.Context, email string) (passContact, bool, error) {
	cs, byEmail, err := p.contactsByEmail(ctx)
	if err != nil || email == "" {
		return passContact{}, false, err
	}
	switch is := byEmail[email]; len(is) {
	case 0:
		return passContact{}, false, nil
	case 1:
		return cs[is[0]], true, nil
	default:
		c, ok, err := p.Reader.ContactByEmail(ctx, p.Tenant, email)
		if err != nil || !ok {
			return passContact{}, ok, err
		}
		return sumUp(c), true, nil
	}
}
