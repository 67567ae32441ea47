package reconcile

import (
	"context"
	"strconv"
)

// missedCampaigns: a campaign active at a platform that the campaigns projection does
// not know: every webhook of it was lost, or none is configured for it. Reported for
// review with its count of leads (nothing is done to the campaign); its leads are
// compared like every campaign's by the other checks (platformLeads lists them), so a
// lost unsubscribe in it is still repaired at once. A platform whose listing fails is
// reported as the check's error and gives no finding.
func missedCampaigns(ctx context.Context, p *Pass) ([]Finding, error) {
	leads, err := p.platformLeads(ctx)
	if err != nil {
		return nil, err
	}
	_, listErr := p.sourceCampaigns(ctx)
	var out []Finding
	for _, sc := range p.unknown {
		n := 0
		for _, l := range leads {
			if l.Provider == sc.Provider && l.Campaign == sc.ID {
				n++
			}
		}
		f := newFinding(p, MissedCampaign, sc.Provider, sc.ID)
		f.Campaign = sc.ID
		f.Where = sc.Provider + " campaign " + sc.ID + " (" + sc.Name + ")"
		f.Found = sc.Provider + " shows the campaign active with " + strconv.Itoa(n) +
			" lead(s); the projection knows no event of it (every webhook of it was lost, or none is configured)"
		f.Repair = "review: check the campaign's webhook at " + sc.Provider +
			"; its leads are compared like every campaign's (unsubscribes repaired at once, replies proposed)"
		out = append(out, f)
	}
	return out, listErr
}
