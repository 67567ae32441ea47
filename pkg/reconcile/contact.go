package reconcile

import (
	"context"
	"slices"
	"strings"

	"exacto.dev/pkg/contacts"
)

// duplicateContact: two contacts for one person. In the projection, two contact
// records naming one e-mail; in HubSpot, more than one contact with the e-mail of a
// contact Exacto wrote there (searched case-insensitively). Reported, never merged.
func duplicateContact(ctx context.Context, p *Pass) ([]Finding, error) {
	cs, byEmail, err := p.contactsByEmail(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	var crmEmails []string
	for _, c := range cs {
		if e := emailOf(c); e != "" && hasHubSpot(c.External[contacts.CRMContactID]) && !slices.Contains(crmEmails, e) {
			crmEmails = append(crmEmails, e)
		}
	}
	emails := make([]string, 0, len(byEmail))
	for e, is := range byEmail {
		if len(is) > 1 {
			emails = append(emails, e)
		}
	}
	slices.Sort(emails)
	for _, e := range emails {
		var ids []string
		for _, i := range byEmail[e] {
			ids = append(ids, cs[i].ContactID)
		}
		slices.Sort(ids)
		f := newFinding(p, DuplicateContact, "exacto", e)
		f.Contact, f.Where = e, "projection contacts "+strings.Join(ids, ", ")
		f.Found = "two contact records for one e-mail " + e
		f.Repair = "review: the contact directory never merges on a guess; correct the identity keys at the source"
		out = append(out, f)
	}
	if p.Clients.HubSpot == nil {
		return out, nil
	}
	slices.Sort(crmEmails)
	for _, e := range crmEmails {
		found, err := p.Clients.HubSpot.ContactsByEmail(ctx, e)
		if err != nil {
			return out, err
		}
		if len(found) < 2 {
			continue
		}
		var ids []string
		for _, c := range found {
			ids = append(ids, c.ID)
		}
		slices.Sort(ids)
		f := newFinding(p, DuplicateContact, "hubspot", e)
		f.Contact, f.Where = e, "hubspot contacts "+strings.Join(ids, ", ")
		f.Found = strings.Join(ids, " and ") + " are HubSpot contacts with one e-mail " + e
		f.Repair = "review and merge them in HubSpot; Exacto merges and deletes nothing"
		out = append(out, f)
	}
	return out, nil
}

func hasHubSpot(ids []string) bool {
	for _, id := range ids {
		if strings.HasPrefix(id, "hubspot:") {
			return true
		}
	}
	return false
}
