package reconcile

import (
	"context"

	"exacto.dev/pkg/lifecycle"
)

// impossibleState: a contact whose lifecycle (its own, or in a campaign) holds a
// discrepancy, a transition the lifecycle table forbids (docs/lifecycle.md). The
// projection kept the allowed state; the finding says which event was refused and why.
func impossibleState(ctx context.Context, p *Pass) ([]Finding, error) {
	cs, err := p.projectionContacts(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, c := range cs {
		add := func(campaign string, ds []lifecycle.Discrepancy) {
			for _, d := range ds {
				f := newFinding(p, ImpossibleState, "exacto", c.ContactID+"/"+campaign+"/"+d.Event)
				f.Contact, f.Campaign = emailOf(c), campaign
				f.Where = "contact " + c.ContactID
				if campaign != "" {
					f.Where += " in campaign " + campaign
				}
				f.Found = d.Why + " (event " + d.Event + " " + d.Type + " against " + d.Against + ")"
				f.Repair = "review: the projection kept the state the lifecycle allows; correct the source if the refused event was right"
				out = append(out, f)
			}
		}
		add("", c.View().Discrepancies)
		for _, in := range c.in { // in campaign order
			add(in.id, in.own)
		}
	}
	return out, nil
}
